//! SwitchML on the sim fabric: exact sums, under loss, duplication and reordering too.

mod support;
use inabench_fabric::fault::Faults;
use inabench_ina::common::{AllReduceConfig, switch_stats, total_retransmissions};
use inabench_ina::switchml::{SwitchMl, payload_bound};
use inabench_ina::tofino::TofinoModel;
use inabench_ina::workload::run_sim;
use support::check;

fn cfg(elements: usize) -> AllReduceConfig {
    AllReduceConfig {
        workers: 6,
        elements,
        seed: 9,
        line_rate_bps: 100e9,
        mtu: 1024,
        timeout_ns: 50_000,
        knobs: vec![],
    }
}

#[test]
fn exact_sum_without_and_with_faults() {
    let c = cfg(50_000);
    let (nodes, rep) = run_sim(&SwitchMl, &c, Faults::default(), 0, 10_000_000_000).expect("run");
    assert!(rep.finished);
    check(&nodes, &c);
    assert_eq!(total_retransmissions(&nodes), 0);
    // SwitchML's one-bit shadow copies assume no packet is delayed past a round of its slot:
    // reordering here stays below one round trip (0.5 us). With 3 us the run livelocks (see the
    // `faults` example): a finding about the design, kept out of this exactly-once test.
    let f = Faults {
        loss: 0.01,
        duplicate: 0.01,
        reorder: 0.01,
        reorder_delay_ns: 500,
        seed: 4,
    };
    let (nodes, rep) = run_sim(&SwitchMl, &c, f, 0, 10_000_000_000).expect("run");
    assert!(rep.finished && rep.faults.dropped > 0);
    check(&nodes, &c);
    assert!(total_retransmissions(&nodes) > 0);
}

#[test]
fn one_pass_per_packet_and_the_payload_bound() {
    let c = cfg(4_800);
    let (nodes, _) = run_sim(&SwitchMl, &c, Faults::default(), 0, 10_000_000_000).expect("run");
    let s = switch_stats(&nodes).expect("switch");
    assert_eq!(s.recirculations, 0, "48 values fit one pass");
    assert_eq!(s.packets_in, 6 * 100);
    let bound = payload_bound(&TofinoModel::PAPER);
    assert!(bound > 0.71 && bound < 0.73, "{bound}");
}
