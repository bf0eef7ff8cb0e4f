//! Packets and gradients per second through the XDP aggregator on veth pairs, native vs generic,
//! each next to its baseline (the same traffic parsed and dropped; root, clang and libbpf needed):
//! `cargo run --release -p inabench-xdp --example throughput [members] [segments] [rounds]`.

use inabench_xdp::AttachMode;
use inabench_xdp::bench::{baseline, measure};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if let Some(why) = inabench_xdp::unavailable() {
        return Err(why.into());
    }
    let arg = |i: usize, d: u32| {
        std::env::args()
            .nth(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or(d)
    };
    let (members, segments, rounds) = (arg(1, 2) as usize, arg(2, 4096), arg(3, 50));
    println!(
        "run       mode     members   sent  aggregated  refused  dropped  results  seconds    Mpps  Mgrad/s  Gbit/s"
    );
    for mode in [AttachMode::Native, AttachMode::Generic] {
        for run in ["aggregate", "baseline"] {
            let t = if run == "aggregate" {
                measure(mode, members, segments, rounds)?
            } else {
                baseline(mode, members, segments, rounds)?
            };
            println!(
                "{:<9} {:<8} {:>7} {:>6} {:>11} {:>8} {:>8} {:>8} {:>8.3} {:>7.3} {:>8.1} {:>7.2}",
                run,
                mode.name(),
                t.members,
                t.sent,
                t.aggregated,
                t.refused,
                t.dropped,
                t.results,
                t.seconds,
                t.pps() / 1e6,
                t.gradients_per_sec() / 1e6,
                t.gbps()
            );
        }
    }
    Ok(())
}
