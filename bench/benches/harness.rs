//! Harness overhead and report building.
//!
//! - `harness/direct` runs the probe workload's points in a plain loop (no store, no events
//!   consumed): the cost of the work itself. `harness/runner` runs the same points through the
//!   runner (plan, events to a headless consumer thread, rows appended to the store, manifest).
//!   The overhead is runner / direct - 1, for 100,000 points.
//! - `report/1m_rows` compacts, analyses and writes the HTML, Markdown, JSON and PDF reports of a
//!   run with 1,000,000 rows.

use criterion::{Criterion, criterion_group, criterion_main};
use inabench::registry::Registry;
use inabench::runner;
use inabench_core::Row;
use inabench_core::plan;
use inabench_core::spec::Fidelity;
use inabench_core::store::{Record, RunWriter};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

const POINTS: usize = 100_000;
/// Seeded draws per point: about 30 us of work on this machine (a "tiny" point; see the note).
const WORK: u64 = 20_000;

fn harness(c: &mut Criterion) {
    let entry = inabench_bench::probe_entry(POINTS, WORK);
    let registry = Registry::builtin();
    let points = plan::expand(&entry.spec, "quick").expect("plan");
    let mut g = c.benchmark_group("harness");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(60))
        .warm_up_time(Duration::from_secs(1));
    g.bench_function("direct_100k_points", |b| {
        b.iter(|| inabench_bench::run_direct(&points))
    });
    g.bench_function("runner_100k_points", |b| {
        b.iter(|| {
            let d = tempfile::tempdir().expect("tmp");
            let req = inabench_bench::probe_request(entry.clone(), d.path());
            let prepared = runner::prepare(&req, &registry).expect("prepare");
            let (tx, rx) = std::sync::mpsc::channel();
            let view = std::thread::spawn(move || inabench::headless::run(rx, true));
            let out = runner::execute(prepared, &registry, tx, Arc::new(AtomicBool::new(false)))
                .expect("run");
            let seen = view.join().expect("view");
            assert_eq!(seen.rows, POINTS * 2);
            out.manifest.points_done
        })
    });
    g.finish();
}

fn report(c: &mut Criterion) {
    // 1,000,000 rows: 2,000 points x 5 metrics x 100 repetitions
    let d = tempfile::tempdir().expect("tmp");
    let dir = d.path().join("run");
    let entry = {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../experiments/netreduce/fig7.yaml"
        ))
        .expect("fig7");
        inabench_core::spec::Spec::from_yaml(std::path::Path::new("fig7.yaml"), &text)
            .expect("spec")
    };
    let mut w = RunWriter::open(&dir).expect("open");
    let systems = ["flat_ring", "tencent_allreduce", "parallel_netreduce"];
    let metrics = [
        "comm_time",
        "comm_time_closed",
        "delta_eq4",
        "delta_eq5",
        "comm_time",
    ];
    let mut rows = 0;
    for p in 0..2000 {
        let system = systems[p % 3];
        let mut params = inabench_core::Params::new();
        params.insert("P".into(), inabench_core::Scalar::Int(32 + (p / 3) as i64));
        params.insert("panel".into(), inabench_core::Scalar::Str("B".into()));
        params.insert("B_intra_GBps".into(), inabench_core::Scalar::Float(50.0));
        let pid = plan::point_id(system, &params);
        for (mi, metric) in metrics.iter().enumerate() {
            for rep in 0..100u32 {
                let row = Row {
                    point_id: pid.clone(),
                    system: system.into(),
                    fidelity: Fidelity::Modelled,
                    fabric: "model".into(),
                    params: params.clone(),
                    repetition: rep + 100 * u32::from(mi == 4),
                    metric: (*metric).into(),
                    value: 1.0 + (p as f64) * 0.01 + f64::from(rep) * 1e-4,
                    unit: "ms".into(),
                    timestamp: 0.0,
                };
                w.append(&Record::Row(row)).expect("row");
                rows += 1;
            }
        }
        w.append(&Record::PointDone {
            point_id: pid,
            ok: true,
            error: None,
            wrong: false,
            failure: None,
        })
        .expect("done");
    }
    w.flush().expect("flush");
    assert_eq!(rows, 1_000_000);
    let manifest = {
        let mut m: inabench_core::Manifest = serde_json_manifest();
        m.experiment = "netreduce-fig7".into();
        m
    };
    let formats = inabench_report::Format::parse_list("html,pdf,md,json").expect("formats");
    let mut g = c.benchmark_group("report");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(60))
        .warm_up_time(Duration::from_secs(1));
    g.bench_function("1m_rows", |b| {
        b.iter(|| {
            let stored = inabench_core::store::read_rows(&dir).expect("rows");
            let n = inabench_report::analysis::compact(&dir, &stored, &manifest).expect("compact");
            let a =
                inabench_report::analysis::analyse_stored(&dir, &stored, &entry, manifest.clone())
                    .expect("analyse");
            inabench_report::write_reports(&dir, &a, &formats).expect("write");
            n
        })
    });
    g.finish();
}

fn serde_json_manifest() -> inabench_core::Manifest {
    inabench_core::Manifest {
        run_id: "bench".into(),
        experiment: String::new(),
        title: "bench".into(),
        spec_file: String::new(),
        spec_sha256: String::new(),
        profile: "quick".into(),
        fidelity: Fidelity::Modelled,
        fidelities: vec![],
        fabric: "model".into(),
        seed: 1,
        git_revision: String::new(),
        inabench_version: String::new(),
        command: vec![],
        host: Default::default(),
        testbed: String::new(),
        testbed_sha256: String::new(),
        drivers: vec![],
        fidelity_reason: String::new(),
        started: String::new(),
        finished: None,
        elapsed_s: 0.0,
        status: inabench_core::RunStatus::Complete,
        points_total: 0,
        points_done: 0,
        points_failed: 0,
        points_wrong: 0,
        points_invalid: 0,
        resumed_from: vec![],
        systems_not_built: vec![],
        rows_not_here: vec![],
        launcher: None,
        overrides: vec![],
        host_profile: None,
    }
}

criterion_group!(benches, harness, report);
criterion_main!(benches);
