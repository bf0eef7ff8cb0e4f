//! `netreduce-reliability`'s configuration on the sim fabric: the four Table 6 systems, 6 workers,
//! 262,144 int32 each, duplication 0.1% and reordering 0.1% (delayed 5 us) on every link, loss
//! 0 to 1%, 8 fault seeds. Every worker must finish with exactly the reference sum, and the fault
//! injector must really have dropped, duplicated and reordered frames.
//!
//! SwitchML is the exception, and a finding about its published design rather than about this
//! code: its switch tells two uses of a slot apart by one version bit (Algorithm 2), so a worker's
//! spurious resend that the network delays past that worker's next packet for the slot (the
//! resend can be overtaken as soon as the delay exceeds the gap between the resend and the result
//! that makes it moot) is added to a later round. At the spec's 5 us delay that happens. The
//! SwitchML tests check that it is exact when no frame is delayed (loss and duplication only), and
//! that every wrong sum at 5 us comes with contributions the switch counted into another chunk's
//! round (the workers themselves never take a result for the wrong chunk).
//!
//! SwitchML-RDMA's shadow copies are cleared a whole copy at a time, so the same delayed resend
//! can be counted into a reused copy. Its workers check the address a result names and reject
//! one for another message, so there a mixed round shows as an all-reduce that never finishes
//! (seeds 1-8 below are exact; `switchml_rdma_livelocks_only_through_rounds_mixed_by_a_delayed_packet`
//! covers 24 seeds).

use inabench_fabric::fault::Faults;
use inabench_ina::common::{AllReduceConfig, SetupNode, counter_sum, reference_sum};
use inabench_ina_run::drive::{run_sim, system};

fn cfg(seed: u64) -> AllReduceConfig {
    AllReduceConfig {
        workers: 6,
        elements: 262_144,
        seed,
        line_rate_bps: 100e9,
        mtu: 1024,
        // the reliability spec's simulated RTO
        timeout_ns: 100_000,
        knobs: vec![("window".into(), 2.0), ("msg_packets".into(), 170.0)],
    }
}

/// (unfinished workers, wrong sums among finished workers, frames dropped, duplicated, reordered,
/// contributions the switch counted into another chunk's round)
type Outcome = (usize, usize, u64, u64, u64, u64);

fn run(name: &str, loss: f64, seed: u64) -> Outcome {
    run_delayed(name, loss, seed, 5_000)
}

fn run_delayed(name: &str, loss: f64, seed: u64, delay_ns: u64) -> Outcome {
    run_limited(name, loss, seed, delay_ns, 60_000_000_000)
}

fn run_limited(name: &str, loss: f64, seed: u64, delay_ns: u64, limit_ns: u64) -> Outcome {
    let sys = system(name).expect("a Table 6 system");
    let c = cfg(seed);
    let f = Faults {
        loss,
        duplicate: 0.001,
        reorder: 0.001,
        reorder_delay_ns: delay_ns,
        seed,
    };
    let (nodes, rep) = run_sim(sys, &c, f, 0, limit_ns).expect("run");
    let want = reference_sum(c.seed, c.workers, c.elements);
    let mut unfinished = 0;
    let mut wrong = 0;
    for n in &nodes {
        if let SetupNode::Worker(w) = n {
            match w.result() {
                None => unfinished += 1,
                Some(r) if r != want => wrong += 1,
                Some(_) => {}
            }
        }
    }
    (
        unfinished,
        wrong,
        rep.faults.dropped,
        rep.faults.duplicated,
        rep.faults.reordered,
        counter_sum(&nodes, "mixed_rounds"),
    )
}

fn sweep(name: &str) {
    sweep_delayed(name, 5_000);
}

fn sweep_delayed(name: &str, delay_ns: u64) {
    let mut failures = Vec::new();
    let (mut dropped, mut duplicated, mut reordered) = (0, 0, 0);
    for loss in [0.0, 0.0001, 0.001, 0.01] {
        for seed in 1..=8u64 {
            let (u, w, d, dup, ro, _) = run_delayed(name, loss, seed, delay_ns);
            if loss >= 0.001 {
                assert!(d > 0, "{name} loss {loss} seed {seed}: nothing was dropped");
            }
            if loss == 0.0 {
                assert_eq!(d, 0);
            }
            dropped += d;
            duplicated += dup;
            reordered += ro;
            if u > 0 || w > 0 {
                failures.push(format!(
                    "loss {loss} seed {seed}: {u} unfinished, {w} wrong"
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{name}: {} of 32 runs failed: {failures:?}",
        failures.len()
    );
    assert!(
        dropped > 100 && duplicated > 100 && reordered > 100,
        "{name}: faults injected {dropped}/{duplicated}/{reordered}"
    );
}

#[test]
fn switchml_exact_under_loss_and_duplication_without_reordering() {
    // reordered frames get no extra delay: every link stays first in, first out
    sweep_delayed("switchml", 0);
}

#[test]
fn switchml_wrong_sums_at_5us_come_from_the_switch_one_bit_version() {
    let (mut wrong_runs, mut mixed_total) = (0, 0);
    for seed in 1..=8u64 {
        let (u, w, d, _, _, mixed) = run("switchml", 0.01, seed);
        assert!(d > 0);
        if u > 0 || w > 0 {
            wrong_runs += 1;
            assert!(
                mixed > 0,
                "seed {seed}: {u} unfinished, {w} wrong without a contribution counted into another round"
            );
        }
        mixed_total += mixed;
    }
    // the finding itself: at 1% loss and 5 us reordering SwitchML is not exactly-once
    assert!(
        wrong_runs > 0 && mixed_total > 0,
        "expected the one-bit version to mix rounds at 5 us ({wrong_runs} failed runs, {mixed_total} mixed)"
    );
}

#[test]
fn netreduce_exact_under_loss_duplication_and_reordering() {
    sweep("netreduce");
}

#[test]
fn atp_exact_under_loss_duplication_and_reordering() {
    sweep("atp");
}

#[test]
fn switchml_rdma_exact_under_loss_duplication_and_reordering() {
    sweep("switchml_rdma");
}

#[test]
fn switchml_rdma_livelocks_only_through_rounds_mixed_by_a_delayed_packet() {
    // The finding behind netreduce-reliability's simulated `every-all-reduce-completes`: at 1%
    // loss with 0.1% of frames delayed 5 us, 3 of these 24 fault seeds (16, 18 and 19 when this
    // was written) never finish, and in each the switch added contributions to a copy holding
    // another message's values (a delayed resend counted into the reused shadow copy; its
    // result then names the old message and every worker rejects it, resends, and is answered
    // the same way). With the same faults but no delay (every link first in, first out) all 24
    // finish exactly. A limit of 0.2 s virtual time: a run that finishes takes a few ms.
    let (mut stuck, mut wrong_fifo) = (Vec::new(), Vec::new());
    for seed in 1..=24u64 {
        let (u, w, d, _, _, mixed) = run_limited("switchml_rdma", 0.01, seed, 5_000, 200_000_000);
        assert!(d > 0, "seed {seed}: nothing was dropped");
        if u > 0 || w > 0 {
            assert!(
                mixed > 0,
                "seed {seed}: {u} unfinished, {w} wrong with no contribution counted into another message's copy"
            );
            stuck.push(seed);
        } else {
            assert_eq!(mixed, 0, "seed {seed}: mixed rounds but every sum exact");
        }
        let (u, w, _, _, _, mixed) = run_limited("switchml_rdma", 0.01, seed, 0, 200_000_000);
        if u > 0 || w > 0 || mixed > 0 {
            wrong_fifo.push((seed, u, w, mixed));
        }
    }
    assert!(
        !stuck.is_empty(),
        "expected delayed resends to mix rounds in some of 24 seeds at 1% loss"
    );
    assert!(wrong_fifo.is_empty(), "without the delay: {wrong_fifo:?}");
}
