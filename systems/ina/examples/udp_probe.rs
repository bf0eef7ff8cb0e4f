//! One all-reduce on the udp fabric, printing each node's outcome (diagnostics), then a JSON
//! line like the MPI peer's (`bench/peers/run.sh` compares the two).
//! `cargo run --release -p inabench-ina --example udp_probe -- netreduce 262144 event 6 [reps]
//! [switch shards]`
//! Set INABENCH_NODE_EXE to the inabench binary for a process per node (threads otherwise);
//! INABENCH_UDP_OFFLOAD=mmsg turns UDP GSO/GRO off. With `mem` for the I/O model the nodes run
//! on the in-process `mem` fabric instead (every sum checked against the reference).
use inabench_ina::udp_node::{NodeJob, Spawn, run_udp};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let sys = a.get(1).cloned().unwrap_or_else(|| "netreduce".into());
    let elements = a.get(2).and_then(|s| s.parse().ok()).unwrap_or(262_144);
    let io = a.get(3).cloned().unwrap_or_else(|| "event".into());
    let workers = a.get(4).and_then(|s| s.parse().ok()).unwrap_or(6);
    let reps: usize = a.get(5).and_then(|s| s.parse().ok()).unwrap_or(1);
    let mut knobs = vec![("window".into(), 2.0), ("msg_packets".into(), 170.0)];
    if let Some(k) = a.get(6).and_then(|s| s.parse::<f64>().ok()) {
        knobs.push(("switch_shards".into(), k));
    }
    let job = NodeJob {
        system: sys.clone(),
        node: 0,
        workers,
        elements,
        seed: 1,
        line_rate_bps: 100e9,
        mtu: 1024,
        timeout_ns: 50_000_000,
        knobs,
        io,
        loss: 0.0,
        duplicate: 0.0,
        reorder: 0.0,
        reorder_delay_ns: 0,
        fault_seed: 1,
        deadline_ms: 60_000,
        bind_any: false,
    };
    let mut secs = Vec::new();
    if job.io == "mem" {
        use inabench_ina::collective::{Fabric, run_system};
        let Some(system) = inabench_ina::drive::system(&sys) else {
            eprintln!("error: no system `{sys}`");
            std::process::exit(1);
        };
        for _ in 0..reps {
            match run_system(system, &job.config(), Fabric::Mem) {
                Ok(ns) => secs.push(ns as f64 / 1e9),
                Err(e) => {
                    eprintln!("error: {e}");
                    std::process::exit(1);
                }
            }
        }
        secs.sort_by(f64::total_cmp);
        let med = secs[secs.len() / 2];
        println!(
            "{{\"peer\":\"inabench-{sys}-mem\",\"ranks\":{workers},\"elements\":{elements},\"iterations\":{reps},\"median_s\":{med:.6},\"algbw_gbps\":{:.4},\"correct\":true}}",
            4.0 * elements as f64 * 8.0 / med / 1e9
        );
        return;
    }
    let (mut offload, mut shards) = (String::new(), 0);
    for _ in 0..reps {
        match run_udp(&job, &Spawn::detect()) {
            Ok(o) => {
                eprintln!(
                    "finished {} in {:?} (offload {}, switch shards {})",
                    o.finished, o.duration, o.offload, o.switch_shards
                );
                offload = o.offload.clone();
                shards = o.switch_shards;
                for n in &o.nodes {
                    let mut r = n.rtt_ns.clone();
                    r.sort_unstable();
                    eprintln!(
                        "  node {} worker {} correct {} tx {} rx {} retx {} cpu {:.1} ms wall {:.1} ms done {:.1} ms rtt_med {:?} send_err {}",
                        n.node,
                        n.is_worker,
                        n.correct,
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
                let ok = o.finished && o.nodes.iter().filter(|n| n.is_worker).all(|n| n.correct);
                if !ok {
                    eprintln!("error: the all-reduce did not finish with the right sum");
                    std::process::exit(1);
                }
                secs.push(o.duration.as_secs_f64());
            }
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(1);
            }
        }
    }
    secs.sort_by(f64::total_cmp);
    let med = secs[secs.len() / 2];
    println!(
        "{{\"peer\":\"inabench-{sys}-udp\",\"offload\":\"{offload}\",\"switch_shards\":{shards},\"ranks\":{workers},\"elements\":{elements},\"iterations\":{reps},\"median_s\":{med:.6},\"algbw_gbps\":{:.4},\"correct\":true}}",
        4.0 * elements as f64 * 8.0 / med / 1e9
    );
}
