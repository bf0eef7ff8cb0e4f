//! Fixtures shared by the harness's CLI tests: a probe experiment home and readers of a run folder.
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
