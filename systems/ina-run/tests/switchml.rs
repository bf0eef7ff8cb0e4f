//! SwitchML on the sim fabric: exact sums, under loss, duplication and reordering too.

#[path = "../../ina/tests/support/mod.rs"]
mod support;
use inabench_fabric::fault::Faults;
use inabench_ina::common::{AllReduceConfig, switch_stats, total_retransmissions};
use inabench_ina::switchml::{SwitchMl, payload_bound};
use inabench_ina::tofino::TofinoModel;
use inabench_ina_run::drive::run_sim;
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
    // loss and duplication, nothing delayed: exactly once (every resend is answered from the
    // slot's shadow copy)
    let f = Faults {
        loss: 0.01,
        duplicate: 0.01,
        seed: 4,
        ..Faults::default()
    };
    let (nodes, rep) = run_sim(&SwitchMl, &c, f, 0, 10_000_000_000).expect("run");
    assert!(rep.finished && rep.faults.dropped > 0);
    check(&nodes, &c);
    assert!(total_retransmissions(&nodes) > 0);
    assert_eq!(inabench_ina::common::counter_sum(&nodes, "mixed_rounds"), 0);
    // with 1% of frames also delayed 0.5 us, SwitchML's one-bit shadow copies can add a late
    // resend to the next round of its slot (the documented finding about its design, spec
    // netreduce-reliability): any wrong sum must come with contributions the switch counted
    // into another chunk's round, never from anything else
    let f = Faults {
        reorder: 0.01,
        reorder_delay_ns: 500,
        ..f
    };
    let (nodes, rep) = run_sim(&SwitchMl, &c, f, 0, 10_000_000_000).expect("run");
    assert!(rep.finished && rep.faults.dropped > 0);
    let want = inabench_ina::common::reference_sum(c.seed, c.workers, c.elements);
    let wrong = nodes
        .iter()
        .filter(|n| {
            matches!(n, inabench_ina::common::SetupNode::Worker(w) if w.result().as_deref() != Some(&want[..]))
        })
        .count();
    let mixed = inabench_ina::common::counter_sum(&nodes, "mixed_rounds");
    assert!(
        wrong == 0 || mixed > 0,
        "{wrong} wrong sums without a mixed round"
    );
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

/// The counter `name` of an endpoint.
fn counter(e: &dyn inabench_fabric::Endpoint, name: &str) -> u64 {
    e.counters()
        .into_iter()
        .find(|(k, _)| *k == name)
        .map_or(0, |(_, v)| v)
}

#[test]
fn a_late_result_of_an_earlier_chunk_in_the_same_slot_and_version_is_dropped() {
    use inabench_ina::common::System;
    // one slot: chunk c uses slot 0 with version c mod 2, so chunks 0 and 2 share slot and version
    let c = AllReduceConfig {
        workers: 2,
        elements: 3 * 48,
        seed: 1,
        line_rate_bps: 100e9,
        mtu: 1024,
        timeout_ns: 1_000_000,
        knobs: vec![("pool".into(), 1.0)],
    };
    let inputs = vec![vec![1i32; 3 * 48], vec![10i32; 3 * 48]];
    let mut s = SwitchMl.build_with(&c, inputs).expect("build");
    let mut sw = s.switch;
    let (mut w0, mut w1) = {
        let mut it = s.workers.drain(..);
        (it.next().expect("w0"), it.next().expect("w1"))
    };
    // one round: both workers send their chunk, the switch answers both; returns w0's result frame
    let mut round = |w0: &mut Box<dyn inabench_ina::common::Worker>,
                     w1: &mut Box<dyn inabench_ina::common::Worker>,
                     deliver_to_w0: bool|
     -> Vec<u8> {
        let a = w0.poll_transmit(0).expect("w0 sends");
        let b = w1.poll_transmit(0).expect("w1 sends");
        sw.handle_packet(0, 0, &a.bytes);
        sw.handle_packet(0, 1, &b.bytes);
        let mut to_w0 = Vec::new();
        while let Some(t) = sw.poll_transmit(0) {
            if t.to == 0 {
                to_w0 = t.bytes.clone();
                if deliver_to_w0 {
                    w0.handle_packet(0, 2, &t.bytes);
                }
            } else {
                w1.handle_packet(0, 2, &t.bytes);
            }
        }
        to_w0
    };
    let chunk0 = round(&mut w0, &mut w1, true);
    assert_eq!(counter(w0.as_ref(), "received"), 1);
    let _ = round(&mut w0, &mut w1, true);
    assert_eq!(counter(w0.as_ref(), "received"), 2);
    // w0 now has chunk 2 (slot 0, version 0, as chunk 0) in flight: chunk 0's result arrives again
    let a = w0.poll_transmit(0).expect("w0 sends chunk 2");
    w0.handle_packet(0, 2, &chunk0);
    assert_eq!(
        counter(w0.as_ref(), "received"),
        2,
        "chunk 0's result must not be taken for chunk 2's"
    );
    assert_eq!(counter(w0.as_ref(), "duplicate_results"), 1);
    // chunk 2 completes normally and every sum is exact
    let b = w1.poll_transmit(0).expect("w1 sends chunk 2");
    sw.handle_packet(0, 0, &a.bytes);
    sw.handle_packet(0, 1, &b.bytes);
    while let Some(t) = sw.poll_transmit(0) {
        if t.to == 0 {
            w0.handle_packet(0, 2, &t.bytes);
        } else {
            w1.handle_packet(0, 2, &t.bytes);
        }
    }
    assert_eq!(w0.result(), Some(vec![11; 3 * 48]));
    assert_eq!(w1.result(), Some(vec![11; 3 * 48]));
}

#[test]
fn payload_is_a_parameter() {
    let mut c = cfg(4_800);
    c.knobs = vec![("payload_bytes".into(), 128.0)];
    let (nodes, rep) = run_sim(&SwitchMl, &c, Faults::default(), 0, 10_000_000_000).expect("run");
    assert!(rep.finished);
    check(&nodes, &c);
    let s = switch_stats(&nodes).expect("switch");
    assert_eq!(s.packets_in, 6 * 150, "32 values per packet");
    let b = inabench_ina::switchml::payload_bound_for(128);
    // 128 B behind 54 B of headers and 24 B of framing
    assert!((b - 128.0 / 206.0).abs() < 1e-12, "{b}");
    c.knobs = vec![("payload_bytes".into(), 130.0)];
    assert!(run_sim(&SwitchMl, &c, Faults::default(), 0, 1_000_000).is_err());
}
