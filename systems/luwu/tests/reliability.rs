//! LuWu's push/pull job (WorkerNIC and AggNIC transports through the SmartSwitch) under the
//! reliability spec's faults on the sim fabric (as `systems/ina-run/tests/reliability.rs` runs
//! NetReduce's Table 6): duplication 0.1% and reordering 0.1% (delayed 5 us) on every link, loss
//! 0, 0.01%, 0.1% and 1%, fault seeds 1 to 8, with the switch summing and with it taking the
//! maximum (SwitchML's exponent negotiation, flags bit 0). Eight workers push 600 packets of 64
//! int32 gradients each (38,400 values) while the AggNIC pushes 600 packets of parameters; window
//! 64, heartbeat T_send / 4, resend timeout 200 us (staggered by 25 us a worker).
//!
//! Every run must finish with `run::outcome`'s `exact` (the AggNIC's aggregate equal to the
//! wrapping sum or the maximum bit for bit, every worker's pulled parameters equal to the pushed
//! ones, each packet drained exactly once), and here also with the aggregate equal to a sum or
//! maximum computed independently of `Job::reference`, no RX buffer overflow, no entry evicted
//! before it completed, and no resend without loss; the fault injector must really have dropped,
//! duplicated and reordered frames.

use inabench_fabric::fault::Faults;
use inabench_fabric::testing::Group;
use inabench_luwu::run::{self, Job, Outcome};
use inabench_luwu::transport::Config;

const WORKERS: usize = 8;
const VPP: usize = 64;
const PACKETS: usize = 600;

fn cfg() -> Config {
    let window = 64;
    let timeout = 200_000;
    let t_send = Config::t_send_ns(window, VPP, 100e9);
    Config {
        workers: WORKERS,
        values_per_packet: VPP,
        window,
        line_rate_bps: 100e9,
        heartbeat_ns: (t_send / 4.0).max(1.0) as u64,
        resend_timeout_ns: timeout,
        stagger_ns: timeout / WORKERS as u64,
        consumer_rate: vec![1.0; WORKERS],
        agg_consumer_rate: 1.0,
    }
}

fn job(seed: u64, max: bool) -> Job {
    let n = VPP * PACKETS;
    Job {
        grads: (0..WORKERS)
            .map(|w| inabench_ina::common::gradient(seed, w, n))
            .collect(),
        max,
        params: inabench_ina::common::gradient(seed, 99, n + 17),
    }
}

/// What is wrong with a run, if anything.
fn problems(o: &Outcome, j: &Job, loss: f64) -> Option<String> {
    // the reference computed independently of Job::reference
    let want: Vec<i32> = (0..j.grads[0].len())
        .map(|i| {
            let it = j.grads.iter().map(|g| i64::from(g[i]));
            if j.max {
                it.max().unwrap_or(0) as i32
            } else {
                it.sum::<i64>() as i32
            }
        })
        .collect();
    let mut p = Vec::new();
    if !o.finished {
        p.push("unfinished");
    }
    if !o.exact {
        p.push("not exact");
    }
    if o.finished && o.aggregate != want {
        p.push("aggregate differs from the reference");
    }
    if o.finished && o.pulled.iter().any(|x| x != &j.params) {
        p.push("pulled parameters differ");
    }
    if o.rx_overflows > 0 {
        p.push("RX overflow");
    }
    if o.evicted_incomplete > 0 {
        p.push("entry evicted incomplete");
    }
    if loss == 0.0 && o.resends > 0 {
        p.push("resend without loss");
    }
    (!p.is_empty()).then(|| {
        format!(
            "{p:?} (resends {}, stalls {}, duplicates {}, reforwarded {})",
            o.resends, o.stalls, o.rx_duplicates, o.reforwarded
        )
    })
}

fn sweep(max: bool) {
    let c = cfg();
    let mut failures = Vec::new();
    let (mut dropped, mut duplicated, mut reordered, mut rx_dups) = (0, 0, 0, 0);
    for loss in [0.0, 0.0001, 0.001, 0.01] {
        for seed in 1..=8u64 {
            let j = job(seed, max);
            let f = Faults {
                loss,
                duplicate: 0.001,
                reorder: 0.001,
                reorder_delay_ns: 5_000,
                seed,
            };
            let nodes = run::build(&c, &j);
            let n = nodes.len();
            let mut g = Group::builder()
                .link(run::sim_link(&c))
                .switch(c.switch_id())
                .faults(f)
                .limit_ns(60_000_000_000)
                .counted(vec![true; n])
                .build(nodes);
            let finished = g.drive();
            let rep = g.report().clone();
            let nodes = g.into_nodes();
            let o = run::outcome(&c, &j, &nodes, finished, rep.end_ns);
            let (d, dup, ro) = (
                rep.faults.dropped,
                rep.faults.duplicated,
                rep.faults.reordered,
            );
            if loss >= 0.001 {
                assert!(d > 0, "max {max} loss {loss} seed {seed}: nothing dropped");
            }
            if loss == 0.0 {
                assert_eq!(d, 0);
            }
            assert_eq!(rep.dropped_queue + rep.dropped_mtu, 0, "seed {seed}");
            dropped += d;
            duplicated += dup;
            reordered += ro;
            rx_dups += o.rx_duplicates;
            if let Some(p) = problems(&o, &j, loss) {
                failures.push(format!("loss {loss} seed {seed}: {p}"));
            }
        }
    }
    eprintln!(
        "max {max}: faults injected {dropped}/{duplicated}/{reordered} (dropped/duplicated/reordered), {rx_dups} duplicates at RX buffers"
    );
    assert!(
        failures.is_empty(),
        "max {max}: {} of 32 runs failed: {failures:?}",
        failures.len()
    );
    assert!(
        dropped > 100 && duplicated > 100 && reordered > 100,
        "max {max}: faults injected {dropped}/{duplicated}/{reordered}"
    );
    // duplicated data packets reached the RX buffers and were taken once
    assert!(rx_dups > 0, "max {max}: no duplicate reached an RX buffer");
}

#[test]
fn push_pull_sum_exact_under_loss_duplication_and_reordering() {
    sweep(false);
}

#[test]
fn push_pull_max_exact_under_loss_duplication_and_reordering() {
    sweep(true);
}
