//! Where the harness spends its time on 100,000 tiny points (prepare vs execute).
use inabench::registry::Registry;
use inabench::runner;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

fn main() {
    let points: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let work: u64 = std::env::args()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    let t = Instant::now();
    let entry = inabench_bench::probe_entry(points, work);
    println!("spec parse: {:?}", t.elapsed());
    let mode = std::env::args().nth(3).unwrap_or_default();
    let base = if mode == "runner" {
        std::time::Duration::ZERO
    } else {
        direct(&entry)
    };
    println!("direct (the work alone): {base:?}");
    if mode == "direct" {
        return;
    }
    let registry = Registry::builtin();
    let d = tempfile::tempdir().expect("tmp");
    let req = inabench_bench::probe_request(entry, d.path());
    let t_all = Instant::now();
    let t = Instant::now();
    let prepared = runner::prepare(&req, &registry).expect("prepare");
    println!("prepare: {:?}", t.elapsed());
    let (tx, rx) = std::sync::mpsc::channel();
    // INABENCH_NO_VIEW=1: no consumer thread (events are dropped), to see what the view costs
    let view = if std::env::var_os("INABENCH_NO_VIEW").is_some() {
        drop(rx);
        std::thread::spawn(inabench::headless::Seen::default)
    } else {
        std::thread::spawn(move || inabench::headless::run(rx, true))
    };
    let t = Instant::now();
    let out =
        runner::execute(prepared, &registry, tx, Arc::new(AtomicBool::new(false))).expect("run");
    println!(
        "execute: {:?} ({} points)",
        t.elapsed(),
        out.manifest.points_done
    );
    view.join().expect("view");
    let total = t_all.elapsed();
    let over = total.as_secs_f64() - base.as_secs_f64();
    println!(
        "harness overhead: {:.2} us per point, {:.1}% of the work",
        over / points as f64 * 1e6,
        over / base.as_secs_f64() * 100.0
    );
}

/// The direct baseline: the same points through the probe, with no runner and no store.
fn direct(entry: &inabench_core::catalog::Entry) -> std::time::Duration {
    let points = inabench_core::plan::expand(&entry.spec, "quick").expect("plan");
    let t = Instant::now();
    std::hint::black_box(inabench_bench::run_direct(&points));
    t.elapsed()
}
