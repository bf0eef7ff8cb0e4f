//! The push/pull transport on the sim and mem fabrics: exactly-once, bit-exact delivery under
//! loss (including heartbeat loss), duplication and reordering; no RX buffer overflow under any
//! interleaving the simulator produces, slow consumers included; resends only after loss.

use inabench_fabric::NodeId;
use inabench_fabric::fault::Faults;
use inabench_fabric::testing::Group;
use inabench_luwu::packet::{self, Kind};
use inabench_luwu::run::{self, Job, Node, Outcome};
use inabench_luwu::transport::Config;
use proptest::prelude::*;

fn cfg(workers: usize, window: usize, timeout_ns: u64, slow: f64) -> Config {
    let vpp = 64;
    let t_send = Config::t_send_ns(window, vpp, 100e9);
    let mut consumer_rate = vec![1.0; workers];
    consumer_rate[workers - 1] = slow;
    Config {
        workers,
        values_per_packet: vpp,
        window,
        line_rate_bps: 100e9,
        heartbeat_ns: (t_send / 4.0).max(1.0) as u64,
        resend_timeout_ns: timeout_ns,
        stagger_ns: timeout_ns / workers as u64,
        consumer_rate,
        agg_consumer_rate: 1.0,
    }
}

fn job(workers: usize, elements: usize, seed: u64) -> Job {
    Job {
        grads: (0..workers)
            .map(|w| inabench_ina::common::gradient(seed, w, elements))
            .collect(),
        max: false,
        params: inabench_ina::common::gradient(seed, 99, elements + 17),
    }
}

fn check(o: &Outcome, j: &Job) {
    assert!(o.finished, "did not finish: {o:?}");
    assert!(o.exact);
    // the reference sum, computed independently of Job::reference
    let want: Vec<i32> = (0..j.grads[0].len())
        .map(|i| j.grads.iter().map(|g| i64::from(g[i])).sum::<i64>() as i32)
        .collect();
    assert_eq!(o.aggregate, want);
    for p in &o.pulled {
        assert_eq!(p, &j.params);
    }
    assert_eq!(o.rx_overflows, 0);
    assert_eq!(o.evicted_incomplete, 0);
}

#[test]
fn lossless_sim_is_exact_fast_and_never_resends() {
    let c = cfg(8, 256, 10_000_000, 1.0);
    let j = job(8, 64 * 4000, 1);
    let (_, o) = run::run_sim(&c, &j, Faults::default(), 10_000_000_000);
    check(&o, &j);
    assert_eq!(o.resends, 0);
    assert_eq!(o.stalls, 0);
    assert_eq!(o.rx_duplicates, 0);
    // 4000 packets of 338 wire bytes at 100 Gbps take 108 us; with credits the job stays near it
    // (the AggNIC's link also carries workers - 1 aggregated heartbeats per interval, ~3%)
    let ideal = 4000.0 * packet::wire_bytes(64) as f64 * 8.0 / 100e9 * 1e9;
    println!("push {} ns, ideal {ideal} ns", o.push_ns);
    assert!((o.push_ns as f64) < ideal * 1.2, "{}", o.push_ns);
}

#[test]
fn loss_is_recovered_exactly_with_resends() {
    let c = cfg(8, 64, 200_000, 1.0);
    let j = job(8, 64 * 3000, 2);
    let f = Faults {
        loss: 0.01,
        seed: 5,
        ..Faults::default()
    };
    let (_, o) = run::run_sim(&c, &j, f, 600_000_000_000);
    check(&o, &j);
    println!(
        "dropped {} resends {} stalls {} reforwarded {}",
        o.dropped, o.resends, o.stalls, o.reforwarded
    );
    assert!(o.dropped > 0);
    assert!(o.resends > 0 && o.stalls > 0);
}

#[test]
fn a_slow_consumer_never_overflows_and_gets_everything() {
    let c = cfg(4, 32, 1_000_000, 0.05);
    let j = job(4, 64 * 500, 3);
    let (_, o) = run::run_sim(&c, &j, Faults::default(), 60_000_000_000);
    check(&o, &j);
    assert_eq!(o.resends, 0);
    // the parameter credit is the minimum over workers, so the slow GPU paces every worker's
    // pull: all take about 20 times as long as at line rate
    let line = 500.0 * packet::wire_bytes(64) as f64 * 8.0 / 100e9 * 1e9;
    for t in &o.pull_ns {
        assert!(*t as f64 > 15.0 * line, "{t} vs {line}");
    }
}

#[test]
fn mem_fabric_is_exact_with_and_without_loss() {
    for (loss, seed) in [(0.0, 1), (0.002, 2)] {
        // real time on a shared 2-core host: a 20 ms Ack pause without loss happens under load
        // (the emulated runs of the spec see it too), so the lossless case uses a 2 s timeout, the
        // order of the paper's default ('several seconds')
        let timeout = if loss == 0.0 {
            2_000_000_000
        } else {
            20_000_000
        };
        let mut c = cfg(4, 64, timeout, 1.0);
        c.heartbeat_ns = 100_000;
        let j = job(4, 64 * 600, seed);
        let f = Faults {
            loss,
            seed,
            ..Faults::default()
        };
        let (_, o) = run::run_mem(&c, &j, f, std::time::Duration::from_secs(30));
        check(&o, &j);
        if loss == 0.0 {
            assert_eq!(o.resends, 0, "a resend without loss");
        }
    }
}

/// Runs the job on the sim fabric with some of every node's outgoing frames of the chosen kinds
/// dropped where they leave (deterministically: every `every`-th of the first `limit` matching
/// frames of each node; with `every == 0`, each matching frame with chance `p`, from each
/// node's own seeded generator). Gives the outcome and the frames dropped.
fn run_dropping(
    c: &Config,
    j: &Job,
    kinds: &[Kind],
    every: u64,
    limit: u64,
    p: f64,
) -> (Outcome, u64) {
    let nodes: Vec<Node> = run::build(c, j);
    let k = nodes.len();
    let mut g = Group::builder()
        .link(run::sim_link(c))
        .switch(c.switch_id())
        .limit_ns(600_000_000_000)
        .counted(vec![true; k])
        .build(nodes);
    let rules: Vec<_> = (0..k as NodeId)
        .map(|i| {
            let kinds = kinds.to_vec();
            let mut rng = inabench_rng::SplitMix64::derive(11, &format!("drop {i}"));
            let mut seen = 0u64;
            g.drop_all(move |f| {
                if f.from != i || seen >= limit {
                    return false;
                }
                let Ok((h, _)) = packet::parse(f.bytes) else {
                    return false;
                };
                if !kinds.contains(&h.kind) {
                    return false;
                }
                seen += 1;
                if every == 0 {
                    rng.chance(p)
                } else {
                    seen.is_multiple_of(every)
                }
            })
        })
        .collect();
    let finished = g.drive();
    let dropped = rules.iter().map(|r| g.dropped(*r)).sum();
    let end_ns = g.report().end_ns;
    let nodes = g.into_nodes();
    (run::outcome(c, j, &nodes, finished, end_ns), dropped)
}

#[test]
fn heartbeat_loss_alone_never_causes_a_resend() {
    // a third of all heartbeats (every node's, the switch's broadcasts and aggregates too) lost
    let c = cfg(8, 128, 2_000_000, 1.0);
    let j = job(8, 64 * 2000, 4);
    let (o, dropped) = run_dropping(
        &c,
        &j,
        &[Kind::ParamHeartbeat, Kind::GradHeartbeat],
        0,
        u64::MAX,
        1.0 / 3.0,
    );
    check(&o, &j);
    assert!(dropped > 100, "{dropped}");
    assert_eq!(o.resends, 0);
}

#[test]
fn a_lost_aggregate_is_reforwarded_from_the_switch_table() {
    // the switch loses the 50th aggregate it sends: a worker's resend makes it forward the
    // stored aggregate again
    let c = cfg(8, 64, 500_000, 1.0);
    let j = job(8, 64 * 400, 6);
    let (o, dropped) = run_dropping(&c, &j, &[Kind::AggGrad], 50, 50, 0.0);
    check(&o, &j);
    assert_eq!(dropped, 1);
    assert!(o.reforwarded >= 1, "{o:?}");
    assert!(o.resends > 0);
}

#[test]
fn lost_gradients_and_parameters_are_resent() {
    let c = cfg(4, 64, 500_000, 1.0);
    let j = job(4, 64 * 400, 7);
    let (o, dropped) = run_dropping(&c, &j, &[Kind::Grad, Kind::Param], 97, u64::MAX, 0.0);
    check(&o, &j);
    assert!(dropped >= 4);
    assert!(o.resends > 0);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

    /// Any seed, loss, duplication, reordering (random extra delays) and slow consumer: no RX
    /// buffer overflows, every element exactly once and bit-exact, and no resend without loss.
    #[test]
    fn never_overflows_and_always_exact(
        seed in 0u64..1_000_000,
        workers in 2usize..9,
        // windows of 32 or more: at T_send / 4, the AggNIC's link carries 4 (workers - 1)
        // aggregated heartbeats (84 B on the wire) per window of 338 B data packets, which would
        // exceed the link below about 7 packets and queue heartbeats for longer than the timeout
        // well before (a resend without loss at window 4, found by this test)
        window in 32usize..128,
        packets in 1usize..300,
        loss in prop_oneof![Just(0.0), 0.0..0.03],
        duplicate in 0.0..0.02f64,
        reorder in 0.0..0.05f64,
        slow in 0.05..1.0f64,
    ) {
        let c = cfg(workers, window, 300_000, slow);
        let j = job(workers, 64 * packets - (seed as usize % 64), seed);
        let f = Faults { loss, duplicate, reorder, reorder_delay_ns: 3_000, seed };
        let (_, o) = run::run_sim(&c, &j, f, 600_000_000_000);
        check(&o, &j);
        if loss == 0.0 {
            prop_assert_eq!(o.resends, 0);
        }
    }
}
