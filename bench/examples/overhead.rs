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
    let registry = Registry::builtin();
    let d = tempfile::tempdir().expect("tmp");
    let req = inabench_bench::probe_request(entry, d.path());
    let t = Instant::now();
    let prepared = runner::prepare(&req, &registry).expect("prepare");
    println!("prepare: {:?}", t.elapsed());
    let (tx, rx) = std::sync::mpsc::channel();
    let view = std::thread::spawn(move || inabench::headless::run(rx, true));
    let t = Instant::now();
    let out =
        runner::execute(prepared, &registry, tx, Arc::new(AtomicBool::new(false))).expect("run");
    println!(
        "execute: {:?} ({} points)",
        t.elapsed(),
        out.manifest.points_done
    );
    let t = Instant::now();
    view.join().expect("view");
    println!("view drain after execute: {:?}", t.elapsed());
}
