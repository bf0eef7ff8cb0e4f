//! Goodput of NetReduce on `sim` under one kind of fault at a time (diagnostics).
use inabench_fabric::fault::Faults;
use inabench_ina::common::{AllReduceConfig, total_retransmissions};
use inabench_ina::netreduce::NetReduce;
use inabench_ina::workload::run_sim;

fn main() {
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
            "{name:>14}: {:.1} us, {} retransmissions, {} events",
            rep.end_ns as f64 / 1e3,
            retx,
            rep.events
        );
        for n in &nodes {
            use inabench_fabric::Endpoint;
            println!("   {:?}", n.counters());
        }
    }
}
