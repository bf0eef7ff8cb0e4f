//! SwitchML's one-bit shadow copies under delayed frames (diagnostics for
//! `netreduce-switchml-shadow`): per reorder delay, over fault seeds, the workers with a wrong
//! sum, the unfinished ones and the contributions the switch counted into another chunk's round.
use inabench_fabric::fault::Faults;
use inabench_ina::common::{AllReduceConfig, SetupNode, counter_sum, reference_sum};
use inabench_ina::switchml::SwitchMl;
use inabench_ina_run::drive::run_sim;

fn main() {
    let c = AllReduceConfig {
        workers: 6,
        elements: 262_144,
        seed: 9,
        line_rate_bps: 100e9,
        mtu: 1024,
        timeout_ns: 100_000,
        knobs: vec![("payload_bytes".into(), 128.0)],
    };
    let want = reference_sum(c.seed, c.workers, c.elements);
    for delay_ns in [500u64, 1_000, 2_000, 3_000, 5_000, 20_000, 50_000, 150_000] {
        let (mut wrong, mut unfinished, mut mixed, mut dur) = (0, 0, 0, 0u64);
        for seed in 1..=8u64 {
            let f = Faults {
                loss: 0.01,
                duplicate: 0.001,
                reorder: 0.001,
                reorder_delay_ns: delay_ns,
                seed,
            };
            let Ok((nodes, rep)) = run_sim(&SwitchMl, &c, f, 0, 1_000_000_000) else {
                continue;
            };
            for n in &nodes {
                if let SetupNode::Worker(w) = n {
                    match w.result() {
                        None => unfinished += 1,
                        Some(r) if r != want => wrong += 1,
                        Some(_) => {}
                    }
                }
            }
            mixed += counter_sum(&nodes, "mixed_rounds");
            dur = dur.max(rep.end_ns);
        }
        println!(
            "delay {:>7} ns: {wrong} wrong, {unfinished} unfinished, {mixed} mixed contributions (8 seeds; longest run {} us)",
            delay_ns,
            dur / 1000
        );
    }
    // the slot cycle without faults: the all-reduce's duration over the rounds of a slot
    let (_, rep) = run_sim(&SwitchMl, &c, Faults::default(), 0, 1_000_000_000).expect("run");
    let rounds = c.elements.div_ceil(32).div_ceil(128);
    println!(
        "no faults: {} us for {rounds} rounds: slot cycle {:.2} us",
        rep.end_ns / 1000,
        rep.end_ns as f64 / 1e3 / rounds as f64
    );
}
