//! One all-reduce on the udp fabric, printing each node's outcome (diagnostics).
//! `cargo run --release -p inabench-ina --example udp_probe -- netreduce 262144 event`
use inabench_ina::udp_node::{NodeJob, Spawn, run_udp};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let sys = a.get(1).cloned().unwrap_or_else(|| "netreduce".into());
    let elements = a.get(2).and_then(|s| s.parse().ok()).unwrap_or(262_144);
    let io = a.get(3).cloned().unwrap_or_else(|| "event".into());
    let job = NodeJob {
        system: sys,
        node: 0,
        workers: 6,
        elements,
        seed: 1,
        line_rate_bps: 100e9,
        mtu: 1024,
        timeout_ns: 50_000_000,
        knobs: vec![("window".into(), 2.0), ("msg_packets".into(), 170.0)],
        io,
        loss: 0.0,
        duplicate: 0.0,
        reorder: 0.0,
        reorder_delay_ns: 0,
        fault_seed: 1,
        deadline_ms: 60_000,
    };
    let t = std::time::Instant::now();
    match run_udp(&job, &Spawn::detect()) {
        Ok(o) => {
            println!(
                "finished {} in {:?} (wall {:?})",
                o.finished,
                o.duration,
                t.elapsed()
            );
            for n in &o.nodes {
                let mut r = n.rtt_ns.clone();
                r.sort_unstable();
                println!(
                    "node {} worker {} tx {} rx {} retx {} cpu {:.1} ms wall {:.1} ms done {:.1} ms rtt_med {:?} send_err {}",
                    n.node,
                    n.is_worker,
                    n.frames_tx,
                    n.frames_rx,
                    n.retransmissions,
                    n.cpu_ns as f64 / 1e6,
                    n.wall_ns as f64 / 1e6,
                    n.done_ns as f64 / 1e6,
                    r.get(r.len() / 2),
                    n.send_errors
                );
            }
        }
        Err(e) => eprintln!("error: {e}"),
    }
}
