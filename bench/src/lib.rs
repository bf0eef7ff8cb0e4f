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
        fidelities: Vec::new(),
        seed: 1,
        resume: None,
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

/// Run `points` through the probe workload directly (no runner, no store): the work alone.
/// Returns a checksum of the recorded values so the compiler cannot drop the work.
pub fn run_direct(points: &[inabench_core::Point]) -> u64 {
    use inabench_core::event::Event;
    use inabench_core::{PointCtx, spec::Fidelity};
    let registry = inabench::registry::Registry::builtin();
    let Some(probe) = registry.get("harness.probe") else {
        return 0;
    };
    let cancel = std::sync::atomic::AtomicBool::new(false);
    let mut n = 0u64;
    let mut sink = |e: Event| {
        if let Event::Row(r) = e {
            n = n.wrapping_add(r.value as u64);
        }
    };
    let units = |_: &str| String::from("1");
    for (i, p) in points.iter().enumerate() {
        let mut ctx = PointCtx::new(
            p,
            i,
            Fidelity::Functional,
            "none",
            0,
            false,
            i as u64,
            "r",
            "e",
            &cancel,
            &mut sink,
            &units,
        );
        if probe.run(&mut ctx).is_err() {
            return 0;
        }
    }
    n
}

/// This thread's CPU time (ns): what the CPU-time benches measure, so that the other processes
/// on a shared host (their builds) do not count, only their cache traffic
/// ([`inabench_fabric::wrap::thread_cpu_ns`]; a bench cannot go on without it).
pub fn thread_cpu_ns() -> u64 {
    inabench_fabric::wrap::thread_cpu_ns().expect("clock_gettime(CLOCK_THREAD_CPUTIME_ID)")
}

/// `iters` calls of `f` timed in this thread's CPU time (for criterion's `iter_custom`).
pub fn cpu_time<O>(iters: u64, mut f: impl FnMut() -> O) -> std::time::Duration {
    let t0 = thread_cpu_ns();
    for _ in 0..iters {
        std::hint::black_box(f());
    }
    std::time::Duration::from_nanos(thread_cpu_ns() - t0)
}

/// The floor examples' arguments: `[workers] [elements] [reps]` (defaults 6, 16,777,216 and 5:
/// bench/peers/run.sh's 64 MiB), each at least 1 and workers at most `max_workers`. A value that
/// does not parse or is out of range ends the process with a one-sentence error (exit 2).
pub fn floor_args(max_workers: usize) -> (usize, usize, usize) {
    let a: Vec<String> = std::env::args().collect();
    let arg = |i: usize, name: &str, default: usize, max: usize| -> usize {
        let v = match a.get(i) {
            None => default,
            Some(s) => match s.parse::<usize>() {
                Ok(v) => v,
                Err(_) => {
                    eprintln!("error: {name} must be a whole number, not `{s}`");
                    std::process::exit(2);
                }
            },
        };
        if !(1..=max).contains(&v) {
            if max == usize::MAX {
                eprintln!("error: {name} must be at least 1, not {v}");
            } else {
                eprintln!("error: {name} must be from 1 to {max}, not {v}");
            }
            std::process::exit(2);
        }
        v
    };
    (
        arg(1, "workers", 6, max_workers),
        arg(2, "elements", 16_777_216, usize::MAX),
        arg(3, "reps", 5, usize::MAX),
    )
}

/// The median of `v` (`inabench_rng::stats::median`: the mean of the two middle values of an even
/// count); NaN for no values.
pub fn median(v: Vec<f64>) -> f64 {
    inabench_core::rng::stats::median(&v).unwrap_or(f64::NAN)
}
