//! The verdict engine end to end: a wrong result never hidden, host requirements, the paper's
//! table in its own shape, every runnable class by default.

use std::path::{Path, PathBuf};
use std::process::Command;

fn home(spec: &str) -> tempfile::TempDir {
    let d = tempfile::tempdir().expect("tmp");
    std::fs::write(d.path().join("Cargo.toml"), "[workspace]\n").expect("cargo");
    let exp = d.path().join("experiments/netreduce");
    std::fs::create_dir_all(&exp).expect("mkdir");
    std::fs::write(exp.join("double.yaml"), spec).expect("spec");
    d
}

fn run(home: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_inabench"))
        .current_dir(home)
        .env("INABENCH_HOME", home)
        .env("CI", "true")
        .arg("--results")
        .arg(home.join("results"))
        .args(args)
        .output()
        .expect("runs")
}

fn only_run(results: &Path) -> PathBuf {
    let runs: Vec<PathBuf> = std::fs::read_dir(results)
        .expect("results")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    runs[0].clone()
}

const SPEC: &str = r#"id: netreduce-double
paper_id: netreduce
title: A deliberately wrong double (test fixture)
citation: "none: a test fixture of the verdict engine"
artifact: "Table 9"
status: implemented
workload: harness.probe
description: Two systems; `double` returns a wrong aggregate at work = 200.
systems: [probe, double]
fidelity: [functional]
parameters: {wrong_for: double, wrong_at: 200}
profiles:
  quick:
    repetitions: 1
    estimated_seconds: 1
    grid:
      - work: [100, 200, 300]
  full:
    estimated_seconds: 1
    grid:
      - work: [100]
metrics:
  - {name: checksum, unit: "1", better: none}
  - {name: pid, unit: "1", better: none}
  - {name: wrong_aggregates, unit: "1", better: lower}
paper:
  source: "Table 9"
  values:
    - {system: probe, metric: wrong_aggregates, value: 0}
    - {system: double, metric: wrong_aggregates, value: 0}
claims:
  - id: exactly-once-probe
    text: the probe's aggregates are exact
    expr: "max(wrong_aggregates(probe)) == 0"
  - id: exactly-once-double
    text: the double's aggregates are exact
    expr: "max(wrong_aggregates(double)) == 0"
  - id: needs-many-cores
    text: something only a 4096-core host shows
    expr: "checksum(probe) > 0"
    needs: {cores: 4096, classes: [functional], why: "a scaling claim"}
  - id: restates-input
    text: a claim true by construction
    expr: "checksum(probe) >= 0"
    consistency: "checksums are non-negative by construction"
tables:
  - id: table9
    title: "Table 9: exactness"
    rows: system
    columns: [wrong_aggregates, checksum]
"#;

#[test]
fn a_wrong_result_is_kept_fails_its_claims_and_the_run_goes_on() {
    let h = home(SPEC);
    let o = run(h.path(), &["reproduce", "netreduce-double", "--headless"]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "wrong results exit 1: {stderr}");
    assert!(stderr.contains("WRONG RESULT"), "{stderr}");
    let run_dir = only_run(&h.path().join("results"));
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join("manifest.json")).expect("m"))
            .expect("json");
    assert_eq!(m["status"], "failed");
    assert_eq!(m["points_wrong"], 1);
    // every planned point ran: 3 works x 2 systems, the wrong one included
    assert_eq!(m["points_done"], 6, "{m}");
    let rows = std::fs::read_to_string(run_dir.join("rows.jsonl")).expect("rows");
    let wrong_row = rows.lines().any(|l| {
        l.contains("\"system\":\"double\"")
            && l.contains("\"wrong_aggregates\"")
            && l.contains("\"value\":1.0")
    });
    assert!(wrong_row, "the wrong aggregate is kept as data");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join("report.json")).expect("r"))
            .expect("json");
    let verdict = |id: &str| -> (String, String) {
        let c = report["claims"]
            .as_array()
            .expect("claims")
            .iter()
            .find(|c| c["id"] == id)
            .unwrap_or_else(|| panic!("{id}"));
        (
            c["verdict"].as_str().unwrap_or_default().to_string(),
            c["detail"].as_str().unwrap_or_default().to_string(),
        )
    };
    assert_eq!(verdict("exactly-once-probe").0, "holds");
    let (v, d) = verdict("exactly-once-double");
    assert_eq!(v, "fails", "{d}");
    assert!(d.contains("wrong result on 1 of 3 planned points"), "{d}");
    let (v, d) = verdict("needs-many-cores");
    assert_eq!(v, "not checkable here", "{d}");
    assert!(d.contains("needs 4096 cores, this host has"), "{d}");
    // the consistency check is shown apart
    assert!(
        stdout.contains("Consistency checks, not evidence"),
        "{stdout}"
    );
    // the paper's table in its own shape: systems as rows, metrics as columns
    assert!(stdout.contains("## Table 9: exactness"), "{stdout}");
    assert!(
        stdout.contains("| | wrong_aggregates [1] | checksum [1] |"),
        "{stdout}"
    );
    assert!(
        stdout.contains("| double | paper 0; functional: 0 / 1 / 0"),
        "{stdout}"
    );
    // the verdicts come first
    let v = stdout.find("## Verdicts").expect("verdicts");
    let t = stdout.find("## Table 9").expect("table");
    assert!(v < t, "verdicts before the paper's table");
    // the scoreboard lists them, with the consistency check apart
    let o = run(h.path(), &["scoreboard"]);
    let board = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(board.contains("exactly-once-double"), "{board}");
    assert!(
        board.contains("-- consistency checks, not evidence --"),
        "{board}"
    );
    assert!(h.path().join("results/scoreboard.html").exists());
}

#[test]
fn a_class_the_spec_lacks_is_refused_in_one_sentence() {
    let h = home(SPEC);
    let o = run(
        h.path(),
        &[
            "reproduce",
            "netreduce-double",
            "--fidelity",
            "functional,emulated",
        ],
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("`emulated` is not one of them"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
}
