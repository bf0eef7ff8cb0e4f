//! One all-reduce on the udp fabric, printing each node's outcome (diagnostics), then a JSON
//! line like the MPI peer's (`bench/peers/run.sh` compares the two).
//! `cargo run --release -p inabench-ina-run --example udp_probe -- netreduce 262144 event 6 [reps]
//! [switch shards]`
//! Set INABENCH_NODE_EXE to the inabench binary for a process per node (threads otherwise);
//! INABENCH_UDP_OFFLOAD=mmsg turns UDP GSO/GRO off. With `mem` for the I/O model the nodes run
//! on the in-process `mem` fabric instead (every sum checked against the reference), and each
//! run's per-node CPU, per-thread CPU and the threads' time in no node go to stderr. On `udp`
//! the JSON line also carries the medians over the reps of the switch's CPU time in the run
//! (all its shards), the workers' (all six, summed) and the switch's scheduler run delay, in ms.
use inabench_ina_run::udp_node::{NodeJob, NodeOutcome, Spawn, run_udp};

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
    // INABENCH_SWITCH_NICE=-10: the switch's processes at that nice value (the knob
    // `switch_nice`; needs CAP_SYS_NICE)
    if let Some(n) = std::env::var("INABENCH_SWITCH_NICE")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
    {
        knobs.push(("switch_nice".into(), n));
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
        addresses: None,
    };
    let mut secs = Vec::new();
    if job.io == "mem" {
        use inabench_ina_run::collective::run_system_mem;
        let Some(system) = inabench_ina_run::drive::system(&sys) else {
            eprintln!("error: no system `{sys}`");
            std::process::exit(1);
        };
        for _ in 0..reps {
            match run_system_mem(system, &job.config()) {
                Ok((ns, rep)) => {
                    // the fabric's own accounting: each node's CPU, each thread's CPU, and the
                    // threads' time in no node (spinning, parking, waking, looking for work)
                    let node_cpu: u64 = rep.nodes.iter().map(|n| n.cpu_ns).sum();
                    let thread_cpu: u64 = rep.thread_cpu_ns.iter().sum();
                    eprintln!(
                        "finished in {:.1} ms (wall {:.1} ms) on {} threads: thread cpu {:.1} ms {:?}, nodes {:.1} ms, in no node {:.1} ms, parks {:?}",
                        ns as f64 / 1e6,
                        rep.wall_ns as f64 / 1e6,
                        rep.threads,
                        thread_cpu as f64 / 1e6,
                        rep.thread_cpu_ns
                            .iter()
                            .map(|c| format!("{:.1}", *c as f64 / 1e6))
                            .collect::<Vec<_>>(),
                        node_cpu as f64 / 1e6,
                        thread_cpu.saturating_sub(node_cpu) as f64 / 1e6,
                        rep.parks
                    );
                    for (i, n) in rep.nodes.iter().enumerate() {
                        eprintln!(
                            "  node {i} tx {} rx {} cpu {:.1} ms busy {:.1} ms done {:.1} ms",
                            n.frames_tx,
                            n.frames_rx,
                            n.cpu_ns as f64 / 1e6,
                            n.busy_ns as f64 / 1e6,
                            n.done_ns as f64 / 1e6
                        );
                    }
                    secs.push(ns as f64 / 1e9);
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
            "{{\"peer\":\"inabench-{sys}-mem\",\"ranks\":{workers},\"elements\":{elements},\"iterations\":{reps},\"median_s\":{med:.6},\"algbw_gbps\":{:.4},\"correct\":true}}",
            4.0 * elements as f64 * 8.0 / med / 1e9
        );
        return;
    }
    let (mut offload, mut shards) = (String::new(), 0);
    // per rep, CPU time in the run (ms): the switch's nodes (all shards), the workers (all),
    // and the switch's wait for a CPU while runnable
    let (mut sw_cpu, mut wk_cpu, mut sw_delay) = (Vec::new(), Vec::new(), Vec::new());
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
                        "  node {} worker {} correct {} tx {} rx {} retx {} cpu {:.1} ms wall {:.1} ms done {:.1} ms rtt_med {:?} send_err {} run_delay {:.1} ms sock_drops {} nice {:?}",
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
                        n.send_errors,
                        n.run_delay_ns as f64 / 1e6,
                        n.socket_drops,
                        n.nice
                    );
                }
                let ok = o.finished && o.nodes.iter().filter(|n| n.is_worker).all(|n| n.correct);
                if !ok {
                    eprintln!("error: the all-reduce did not finish with the right sum");
                    std::process::exit(1);
                }
                secs.push(o.duration.as_secs_f64());
                let ms = |worker: bool, f: fn(&NodeOutcome) -> u64| {
                    o.nodes
                        .iter()
                        .filter(|n| n.is_worker == worker)
                        .map(f)
                        .sum::<u64>() as f64
                        / 1e6
                };
                sw_cpu.push(ms(false, |n| n.cpu_ns));
                wk_cpu.push(ms(true, |n| n.cpu_ns));
                sw_delay.push(ms(false, |n| n.run_delay_ns));
            }
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(1);
            }
        }
    }
    secs.sort_by(f64::total_cmp);
    let med = secs[secs.len() / 2];
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "{{\"peer\":\"inabench-{sys}-udp\",\"offload\":\"{offload}\",\"switch_shards\":{shards},\"ranks\":{workers},\"elements\":{elements},\"iterations\":{reps},\"median_s\":{med:.6},\"algbw_gbps\":{:.4},\"switch_cpu_ms\":{:.1},\"workers_cpu_ms\":{:.1},\"switch_run_delay_ms\":{:.1},\"correct\":true}}",
        4.0 * elements as f64 * 8.0 / med / 1e9,
        median(sw_cpu),
        median(wk_cpu),
        median(sw_delay)
    );
}
