//! P4SGD and its baselines under the reliability spec's faults on the sim fabric (as
//! `systems/ina-run/tests/reliability.rs` runs NetReduce's Table 6): duplication 0.1% and reordering
//! 0.1% (delayed 5 us) on every link, loss 0, 0.01%, 0.1% and 1%, fault seeds 1 to 8. Every
//! worker is a `driver::LoopWorker`, which checks each all-reduce against the exact int32 sum
//! (`driver::reference`) and counts a result delivered twice or for an operation never issued.
//!
//! - P4SGD (Alg. 2 and 3 with the round check, `SwitchConfig::paper`): 8 workers, 8 values an
//!   operation (the paper's micro-batch), 4 slots, 8 operations in flight per worker (slots are
//!   reused while late copies of their previous rounds may still be in flight), 1,500 operations
//!   per worker. Every operation of every worker must finish exactly once with the exact sum,
//!   and the fault injector must really have dropped, duplicated and reordered frames.
//! - The paper's header fields alone (`check_rounds = false`, Fig. 4's four fields without our
//!   per-slot round) are a finding about the published design, as `protocol.rs` explains: they
//!   cannot tell a late copy of a worker's contribution to a slot's round r from its round r + 1
//!   contribution. The path we expect (the counters confirm only that a stale packet arrived): a
//!   worker whose timer fires as its result arrives sends a resend and then its
//!   acknowledgement; if the network delays the resend (5 us) past the acknowledgement, the slot
//!   completes, is freed, and the resend is added into the slot's next round. Resends need
//!   loss, so on this grid it shows at 1% loss (3 of the 8 seeds when written, each run one
//!   operation wrong on all 8 workers) and never at lower loss; with no extra delay (every link
//!   first in, first out) the whole grid is exact. The test asserts that without rounds some run
//!   at 5 us is wrong, and that in each such run the same seed with the round check dropped a
//!   stale packet at the switch and was exact.
//! - The baselines, MPI's recursive doubling (CPUSync) and NCCL's ring and tree (GPUSync), 8
//!   ranks, 8 values, 500 operations each, through a forwarding switch: their modules document
//!   that the fabric must be loss-free (reliability is the RDMA transport's, RC, which these
//!   sans-IO hosts do not model), so they are swept at loss 0 (duplication and 5 us reordering,
//!   exact), and at loss 0.1% and 1% the documented limitation is asserted as a finding: a lost
//!   frame stalls the operation (the run does not finish), and no wrong or repeated result is
//!   ever delivered.

use inabench_fabric::fault::Faults;
use inabench_fabric::sim::LinkConfig;
use inabench_fabric::testing::Group;
use inabench_fabric::{Endpoint, NodeId};
use inabench_p4sgd::cpusync::{CpuSyncWorker, Forwarder, forwarder};
use inabench_p4sgd::driver::{Collective, LoopWorker};
use inabench_p4sgd::gpusync::{Algo, GpuSyncConfig, GpuSyncWorker};
use inabench_p4sgd::protocol::{P4sgdSwitch, P4sgdWorker, SwitchConfig, WorkerConfig};

const WORKERS: usize = 8;
const ELEMENTS: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Sys {
    P4sgd,
    /// P4SGD's switch without the round check (the paper's header fields alone).
    P4sgdNoRounds,
    CpuSync,
    GpuRing,
    GpuTree,
}

/// A worker's (finished, wrong, delivered twice or never issued).
trait Probe: Endpoint {
    fn outcome(&self) -> Option<(u64, u64, u64)> {
        None
    }
    /// Packets of an older round the switch dropped (the round check).
    fn stale(&self) -> u64 {
        0
    }
}

impl<C: Collective> Probe for LoopWorker<C> {
    fn outcome(&self) -> Option<(u64, u64, u64)> {
        Some((self.finished(), self.wrong, self.duplicates))
    }
}

impl Probe for P4sgdSwitch {
    fn stale(&self) -> u64 {
        self.counters.stale
    }
}
impl Probe for Forwarder {}

/// A node on the fabric (a boxed endpoint is an endpoint).
type Node = Box<dyn Probe>;

fn ops(sys: Sys) -> u64 {
    match sys {
        Sys::P4sgd | Sys::P4sgdNoRounds => 1_500,
        _ => 500,
    }
}

fn nodes(sys: Sys, seed: u64) -> Vec<Node> {
    let sw = WORKERS as NodeId;
    let n_ops = ops(sys);
    let mut v: Vec<Node> = (0..WORKERS)
        .map(|r| {
            let p: Box<dyn Probe> = match sys {
                Sys::P4sgd | Sys::P4sgdNoRounds => {
                    let w = P4sgdWorker::new(WorkerConfig {
                        rank: r,
                        workers: WORKERS,
                        switch: sw,
                        slots: 4,
                        elements: ELEMENTS,
                        rto_ns: 20_000,
                    })
                    .expect("worker");
                    let mut l = LoopWorker::new(w, r, WORKERS, ELEMENTS, seed, n_ops);
                    // more operations in flight than slots: slots are reused
                    l.window = 8;
                    Box::new(l)
                }
                Sys::CpuSync => {
                    let w = CpuSyncWorker::new(r, WORKERS, sw, ELEMENTS).expect("worker");
                    Box::new(LoopWorker::new(w, r, WORKERS, ELEMENTS, seed, n_ops))
                }
                Sys::GpuRing | Sys::GpuTree => {
                    let w = GpuSyncWorker::new(GpuSyncConfig {
                        rank: r,
                        workers: WORKERS,
                        switch: sw,
                        elements: ELEMENTS,
                        algo: if sys == Sys::GpuRing {
                            Algo::Ring
                        } else {
                            Algo::Tree
                        },
                        launch_ns: 1_000,
                    })
                    .expect("worker");
                    Box::new(LoopWorker::new(w, r, WORKERS, ELEMENTS, seed, n_ops))
                }
            };
            p
        })
        .collect();
    v.push(match sys {
        Sys::P4sgd | Sys::P4sgdNoRounds => Box::new(
            P4sgdSwitch::new(
                sw,
                SwitchConfig {
                    slots: 4,
                    check_rounds: sys == Sys::P4sgd,
                    ..SwitchConfig::paper(WORKERS)
                },
            )
            .expect("switch"),
        ),
        _ => Box::new(forwarder(sw, WORKERS as u32 + 1)),
    });
    v
}

#[derive(Debug, Default)]
struct Outcome {
    /// workers that did not finish every operation
    unfinished: usize,
    /// wrong aggregates over all workers
    wrong: u64,
    /// aggregates delivered twice or for an operation never issued
    duplicates: u64,
    dropped: u64,
    duplicated: u64,
    reordered: u64,
    /// packets of an older round the P4SGD switch dropped
    stale: u64,
}

fn run(sys: Sys, loss: f64, seed: u64) -> Outcome {
    run_delayed(sys, loss, seed, 5_000)
}

fn run_delayed(sys: Sys, loss: f64, seed: u64, delay_ns: u64) -> Outcome {
    let ns = nodes(sys, seed);
    let n = ns.len();
    let link = LinkConfig {
        latency_ns: 500,
        ..LinkConfig::gbps100()
    };
    let faults = Faults {
        loss,
        duplicate: 0.001,
        reorder: 0.001,
        reorder_delay_ns: delay_ns,
        seed,
    };
    let mut g = Group::builder()
        .link(link)
        .switch(WORKERS as NodeId)
        .faults(faults)
        .counted(vec![true; n])
        .limit_ns(10_000_000_000)
        .build(ns);
    // a stalled baseline leaves the event queue empty; P4SGD's timers keep it going
    g.drive();
    let rep = g.report().clone();
    let mut o = Outcome {
        dropped: rep.faults.dropped,
        duplicated: rep.faults.duplicated,
        reordered: rep.faults.reordered,
        ..Outcome::default()
    };
    for node in g.nodes() {
        o.stale += node.stale();
        if let Some((done, wrong, dup)) = node.outcome() {
            if done != ops(sys) || !node.is_done() {
                o.unfinished += 1;
            }
            o.wrong += wrong;
            o.duplicates += dup;
        }
    }
    o
}

/// The runs of `sys` at `losses`, 8 seeds each: every one finished and exact, faults injected.
fn sweep(sys: Sys, losses: &[f64]) {
    sweep_delayed(sys, losses, 5_000);
}

fn sweep_delayed(sys: Sys, losses: &[f64], delay_ns: u64) {
    let mut failures = Vec::new();
    let (mut dropped, mut duplicated, mut reordered) = (0, 0, 0);
    for &loss in losses {
        for seed in 1..=8u64 {
            let o = run_delayed(sys, loss, seed, delay_ns);
            if loss >= 0.001 {
                assert!(
                    o.dropped > 0,
                    "{sys:?} loss {loss} seed {seed}: nothing dropped"
                );
            }
            if loss == 0.0 {
                assert_eq!(o.dropped, 0);
            }
            dropped += o.dropped;
            duplicated += o.duplicated;
            reordered += o.reordered;
            if o.unfinished > 0 || o.wrong > 0 || o.duplicates > 0 {
                failures.push(format!("loss {loss} seed {seed}: {o:?}"));
            }
        }
    }
    eprintln!(
        "{sys:?}: faults injected {dropped}/{duplicated}/{reordered} (dropped/duplicated/reordered)"
    );
    assert!(
        failures.is_empty(),
        "{sys:?}: {} of {} runs failed: {failures:?}",
        failures.len(),
        8 * losses.len()
    );
    let lossy = losses.iter().any(|l| *l > 0.0);
    assert!(
        (!lossy || dropped > 100) && duplicated > 100 && reordered > 100,
        "{sys:?}: faults injected {dropped}/{duplicated}/{reordered}"
    );
}

#[test]
fn p4sgd_exact_under_loss_duplication_and_reordering() {
    sweep(Sys::P4sgd, &LOSSES);
}

#[test]
fn mpi_recursive_doubling_exact_under_duplication_and_reordering() {
    sweep(Sys::CpuSync, &[0.0]);
}

#[test]
fn nccl_ring_exact_under_duplication_and_reordering() {
    sweep(Sys::GpuRing, &[0.0]);
}

#[test]
fn nccl_tree_exact_under_duplication_and_reordering() {
    sweep(Sys::GpuTree, &[0.0]);
}

/// The documented limitation of the baselines' hosts: no retransmission (the RDMA transport's
/// job in the paper). A lost frame stalls its operation; nothing wrong is ever delivered.
#[test]
fn baselines_stall_under_loss_and_never_deliver_a_wrong_sum() {
    for sys in [Sys::CpuSync, Sys::GpuRing, Sys::GpuTree] {
        for loss in [0.001, 0.01] {
            let mut stalled = 0;
            for seed in 1..=8u64 {
                let o = run(sys, loss, seed);
                assert!(o.dropped > 0, "{sys:?} loss {loss} seed {seed}");
                assert_eq!(
                    (o.wrong, o.duplicates),
                    (0, 0),
                    "{sys:?} loss {loss} seed {seed}: {o:?}"
                );
                stalled += usize::from(o.unfinished > 0);
            }
            // 500 operations of 8 ranks put thousands of frames on the links: at 0.1% some
            // frame of every run is lost, and with it an operation
            assert_eq!(
                stalled, 8,
                "{sys:?} loss {loss}: {stalled} of 8 runs stalled"
            );
        }
    }
}

const LOSSES: [f64; 4] = [0.0, 0.0001, 0.001, 0.01];

#[test]
fn p4sgd_without_rounds_exact_when_nothing_is_delayed() {
    // reordered frames get no extra delay: every link stays first in, first out
    sweep_delayed(Sys::P4sgdNoRounds, &LOSSES, 0);
}

/// The finding (the paper's header fields, see the module doc): without the round check, wrong
/// aggregates at 5 us reordering, and in every such run the same seed with the round check
/// dropped a stale packet at the switch (and was exact). A stale contribution can also leave a
/// worker waiting for good (at 1% loss, seed 4, with the hosts' pull-based transmit: 8
/// unfinished beside 22 wrong): such a run is held to the same rule.
#[test]
fn p4sgd_without_rounds_wrong_sums_at_5us_come_with_stale_contributions() {
    let mut wrong_runs = Vec::new();
    for loss in LOSSES {
        for seed in 1..=8u64 {
            let o = run(Sys::P4sgdNoRounds, loss, seed);
            assert_eq!(o.duplicates, 0, "loss {loss} seed {seed}: {o:?}");
            if o.wrong > 0 || o.unfinished > 0 {
                wrong_runs.push((loss, seed, o.wrong, o.unfinished));
                let r = run(Sys::P4sgd, loss, seed);
                assert!(
                    r.stale > 0 && r.wrong == 0 && r.unfinished == 0,
                    "loss {loss} seed {seed}: with rounds {r:?}"
                );
            }
        }
    }
    eprintln!(
        "without rounds, wrong or unfinished runs (loss, seed, wrong aggregates, unfinished): {wrong_runs:?}"
    );
    assert!(
        !wrong_runs.is_empty(),
        "expected the paper's fields to mix rounds at 5 us"
    );
}
