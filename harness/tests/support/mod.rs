//! Fixtures shared by the harness's tests: a probe experiment home and readers of a run folder;
//! the probe as a catalogue entry, a run request in this process and a probe row.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// A test home with the fig7 spec and a probe experiment whose points take time.
pub fn probe_home(sleep_ms: u32, points: usize, crash: bool) -> tempfile::TempDir {
    let d = tempfile::tempdir().expect("tmp");
    std::fs::write(d.path().join("Cargo.toml"), "[workspace]\n").expect("cargo");
    let exp = d.path().join("experiments/netreduce");
    std::fs::create_dir_all(&exp).expect("mkdir");
    let works: Vec<String> = (1..=points).map(|i| (i * 100).to_string()).collect();
    let spec = format!(
        r#"id: netreduce-probe
paper_id: netreduce
title: Harness probe (test fixture)
citation: "none: a test fixture of the harness"
artifact: "none"
status: implemented
workload: harness.probe
description: A probe that sleeps and checksums, to test interruption and resume.
systems: [probe]
fidelity: [functional]
parameters: {{sleep_ms: {sleep_ms}, crash: {crash}}}
profiles:
  quick:
    repetitions: 2
    estimated_seconds: 1
    grid:
      - work: [{works}]
  full:
    repetitions: 2
    estimated_seconds: 1
    grid:
      - work: [{works}]
metrics:
  - {{name: checksum, unit: "1", better: none}}
  - {{name: pid, unit: "1", better: none}}
paper:
  source: none
  values: []
claims:
  - id: positive
    text: checksums are positive
    expr: "checksum(probe) > 0"
"#,
        crash = if crash { 1 } else { 0 },
        works = works.join(", ")
    );
    std::fs::write(exp.join("probe.yaml"), spec).expect("spec");
    d
}

pub fn manifest_of(run: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(run.join("manifest.json")).expect("manifest");
    serde_json::from_str(&text).expect("manifest json")
}

pub fn rows_of(run: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(run.join("rows.jsonl"))
        .expect("rows")
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["kind"] == "row")
        .collect()
}

/// The one run folder in `results` (ignoring other folders such as pcap captures).
pub fn only_run_dir(results: &Path) -> PathBuf {
    let runs: Vec<_> = std::fs::read_dir(results)
        .expect("results")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("manifest.json").exists())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    runs[0].clone()
}

/// The probe experiment (`harness.probe`, system `probe`, functional) as a catalogue entry
/// whose quick profile's grid is `work` over `works`: the fixture of the tests that drive the
/// runner's point loop in this process.
pub fn probe_entry(works: &[u32]) -> inabench_core::catalog::Entry {
    let works: Vec<String> = works.iter().map(u32::to_string).collect();
    let text = format!(
        "id: netreduce-probe\npaper_id: netreduce\ntitle: probe\ncitation: none\nartifact: none\nstatus: implemented\nworkload: harness.probe\ndescription: test fixture\nsystems: [probe]\nfidelity: [functional]\nprofiles:\n  quick:\n    estimated_seconds: 1\n    grid:\n      - work: [{}]\n  full:\n    estimated_seconds: 1\n    grid:\n      - work: [1]\nmetrics:\n  - {{name: checksum, unit: \"1\", better: none}}\n  - {{name: pid, unit: \"1\", better: none}}\npaper:\n  source: none\n  values: []\n",
        works.join(", ")
    );
    let file = PathBuf::from("experiments/netreduce/probe.yaml");
    let spec = inabench_core::spec::Spec::from_yaml(&file, &text).expect("fixture spec");
    inabench_core::catalog::Entry { spec, file, text }
}

/// A run of `entry`'s quick profile in this process on the embedded local testbed, seed 1,
/// into `results` (resuming `resume` when given); set a field after to change it.
pub fn in_process_request(
    entry: inabench_core::catalog::Entry,
    results: &Path,
    resume: Option<PathBuf>,
) -> inabench::runner::RunRequest {
    inabench::runner::RunRequest {
        entry,
        profile: "quick".into(),
        fidelities: Vec::new(),
        seed: 1,
        resume,
        results: results.to_path_buf(),
        placement: inabench::runner::Placement::InProcess,
        command: vec![],
        testbed_name: "local".into(),
        testbed_text: inabench::testbed::local_text(),
        capture_dir: None,
        overrides: vec![],
        host_profile: None,
    }
}

/// A functional `checksum` row of the probe at `point_id` (repetition 0), as a scripted
/// executor streams it.
pub fn probe_row(point_id: &str, value: f64) -> inabench_core::event::Event {
    inabench_core::event::Event::Row(inabench_core::store::Row {
        point_id: point_id.into(),
        system: "probe".into(),
        fidelity: inabench_core::spec::Fidelity::Functional,
        fabric: "model".into(),
        params: Default::default(),
        repetition: 0,
        metric: "checksum".into(),
        value,
        unit: "1".into(),
        timestamp: 0.0,
    })
}

/// The runner's point loop over `prepared` with `executor`, not cancelled, its events to `tx`.
pub fn execute(
    prepared: inabench::runner::Prepared,
    reg: &inabench::registry::Registry,
    tx: std::sync::mpsc::Sender<inabench_core::event::Event>,
    executor: &mut dyn inabench::executor::Executor,
) -> Result<inabench::runner::RunOutcome, inabench::runner::RunError> {
    inabench::runner::execute_with(
        prepared,
        reg,
        tx,
        std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)),
        std::sync::Arc::new(std::sync::Mutex::new(Vec::new())),
        executor,
    )
}
