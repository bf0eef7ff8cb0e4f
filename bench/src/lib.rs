//! Helpers shared by the benchmarks: generated specs and runs of a given size.

use inabench_core::catalog::Entry;
use inabench_core::spec::Spec;
use std::path::{Path, PathBuf};

/// A probe experiment with `points` points of `work` seeded draws each (one repetition).
pub fn probe_entry(points: usize, work: u64) -> Entry {
    let ids: Vec<String> = (0..points).map(|i| i.to_string()).collect();
    let text = format!(
        "id: netreduce-probe\npaper_id: netreduce\ntitle: probe\ncitation: none\nartifact: none\nstatus: implemented\nworkload: harness.probe\ndescription: benchmark fixture\nsystems: [probe]\nfidelity: [functional]\nparameters: {{work: {work}}}\nprofiles:\n  quick:\n    estimated_seconds: 1\n    grid:\n      - i: [{}]\n  full:\n    estimated_seconds: 1\n    grid:\n      - i: [0]\nmetrics:\n  - {{name: checksum, unit: \"1\", better: none}}\n  - {{name: pid, unit: \"1\", better: none}}\npaper:\n  source: none\n  values: []\n",
        ids.join(", ")
    );
    let file = PathBuf::from("experiments/netreduce/probe.yaml");
    let spec = match Spec::from_yaml(&file, &text) {
        Ok(s) => s,
        Err(e) => panic!("fixture spec: {e}"),
    };
    Entry { spec, file, text }
}

/// A run request for a probe entry, in-process, results under `results`.
pub fn probe_request(entry: Entry, results: &Path) -> inabench::runner::RunRequest {
    inabench::runner::RunRequest {
        entry,
        profile: "quick".into(),
        fidelity: None,
        seed: 1,
        resume: None,
        results: results.to_path_buf(),
        placement: inabench::runner::Placement::InProcess,
        command: vec![],
        testbed_name: "bench".into(),
        testbed_text: String::new(),
    }
}
