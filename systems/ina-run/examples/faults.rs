//! Goodput of NetReduce on `sim` under one kind of fault at a time (diagnostics).
use inabench_fabric::Endpoint;
use inabench_fabric::fault::Faults;
use inabench_ina::common::{AllReduceConfig, total_retransmissions};
use inabench_ina::netreduce::NetReduce;
use inabench_ina_run::drive::run_sim;

fn main() {
    if std::env::args().any(|a| a == "switchml") {
        switchml_once();
        return;
    }
    if std::env::args().any(|a| a == "mem") {
        mem_once();
        return;
    }
    let cfg = AllReduceConfig {
        workers: 6,
        elements: 262_144,
        seed: 1,
        line_rate_bps: 100e9,
        mtu: 1024,
        timeout_ns: 100_000,
        knobs: vec![],
    };
    for (name, f) in [
        ("none", Faults::default()),
        (
            "dup 0.1%",
            Faults {
                duplicate: 0.001,
                seed: 1,
                ..Faults::default()
            },
        ),
        (
            "reorder 0.1%",
            Faults {
                reorder: 0.001,
                reorder_delay_ns: 5_000,
                seed: 1,
                ..Faults::default()
            },
        ),
        (
            "loss 0.1%",
            Faults {
                loss: 0.001,
                seed: 1,
                ..Faults::default()
            },
        ),
    ] {
        let Ok((nodes, rep)) = run_sim(&NetReduce, &cfg, f, 0, 60_000_000_000) else {
            continue;
        };
        let retx = total_retransmissions(&nodes);
        println!(
            "{name:>14}: {:.1} us, {} retransmissions, {} frames sent",
            rep.end_ns as f64 / 1e3,
            retx,
            rep.nodes.iter().map(|n| n.frames_tx).sum::<u64>()
        );
        for n in &nodes {
            use inabench_fabric::Endpoint;
            println!("   {:?}", n.counters());
        }
    }
}

/// The same all-reduce on the mem fabric (threads, real time), with the senders' counters.
#[allow(dead_code)]
pub fn mem_once() {
    use inabench_ina::common::System;
    let rto_ms: u64 = std::env::args()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let cfg = AllReduceConfig {
        workers: 6,
        elements: 262_144,
        seed: 1,
        line_rate_bps: 100e9,
        mtu: 1024,
        timeout_ns: rto_ms * 1_000_000,
        knobs: vec![],
    };
    let Ok(setup) = NetReduce.build(&cfg) else {
        return;
    };
    use inabench_fabric::{Fabric, Mem, Until};
    let nodes = setup.into_nodes();
    let until = Until::workers(6, nodes.len(), 30_000_000_000);
    let mut mem = Mem {
        mtu: 2048,
        faults: Faults::default(),
    };
    let Ok((nodes, rep)) = mem.run(nodes, &until) else {
        return;
    };
    println!(
        "mem: {:.1} ms, finished {}",
        rep.end_ns as f64 / 1e6,
        rep.finished
    );
    for n in &nodes {
        use inabench_fabric::Endpoint;
        println!("   {:?}", n.counters());
    }
}

/// SwitchML under faults (diagnostics): the reliability experiment's faults over a few seeds.
#[allow(dead_code)]
pub fn switchml_once() {
    use inabench_ina::common::{SetupNode, reference_sum};
    use inabench_ina::switchml::SwitchMl;
    let c = AllReduceConfig {
        workers: 6,
        elements: 262_144,
        seed: 9,
        line_rate_bps: 100e9,
        mtu: 1024,
        timeout_ns: 100_000,
        knobs: vec![],
    };
    let want = reference_sum(c.seed, c.workers, c.elements);
    for (name, delay, dup, reorder) in [
        ("loss only", 0, 0.0, 0.0),
        ("+dup", 0, 0.001, 0.0),
        ("+reorder 0.5us", 500, 0.001, 0.001),
        ("+reorder 5us", 5_000, 0.001, 0.001),
    ] {
        for seed in 1..=4u64 {
            let f = Faults {
                loss: 0.01,
                duplicate: dup,
                reorder,
                reorder_delay_ns: delay,
                seed,
            };
            let Ok((nodes, rep)) = run_sim(&SwitchMl, &c, f, 0, 1_000_000_000) else {
                continue;
            };
            let wrong = nodes.iter().filter(|n| matches!(n, SetupNode::Worker(w) if w.result().as_deref().is_some_and(|r| r != &want[..]))).count();
            println!(
                "{name} seed {seed}: finished {} at {} ns, {wrong} wrong",
                rep.finished, rep.end_ns
            );
            if !rep.finished {
                for n in &nodes {
                    println!("   {:?}", n.counters());
                }
            }
        }
    }
}
