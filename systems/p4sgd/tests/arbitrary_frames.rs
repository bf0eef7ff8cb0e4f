//! P4SGD's endpoints under arbitrary frames, as the `Endpoint` contract demands (every received
//! byte untrusted; a malformed frame counted and dropped, never a panic): the P4SGD worker
//! transport and switch program (Alg. 2 and 3, with the round check), and the baselines' hosts
//! (the MPI recursive-doubling rank, the NCCL ring and tree ranks) with their forwarding switch,
//! each worker driven by `driver::LoopWorker` (which checks every aggregate against the
//! reference sum):
//!
//! 1. no panic when an endpoint receives arbitrary bytes (0..2048 long) or a valid frame with
//!    bytes flipped or cut short, from any neighbour id, before a run (fresh endpoints), during
//!    one (a hostile source beside valid traffic on the sim fabric) and after one;
//! 2. a run with a hostile source still ends with every all-reduce of every worker exact, none
//!    delivered twice, and junk after the run delivers nothing more;
//! 3. memory stays bounded: an endpoint's heap does not grow with the number of junk frames.
//!
//! The valid frames that get mutated are captured from a clean run of the same configuration.

use inabench_fabric::fuzz::{Corpora, Corpus, cached, sim_fabric, tapped_run};
use inabench_fabric::sim::{LinkConfig, SimFabric};
use inabench_fabric::testing::*;
use inabench_fabric::{Endpoint, Nanos, NodeId, Transmit};
use inabench_p4sgd::cpusync::{CpuSyncWorker, Forwarder};
use inabench_p4sgd::driver::{Collective, LoopWorker};
use inabench_p4sgd::gpusync::{Algo, GpuSyncConfig, GpuSyncWorker};
use inabench_p4sgd::protocol::{P4sgdSwitch, P4sgdWorker, SwitchConfig, WorkerConfig};
use inabench_rng::SplitMix64;
use proptest::prelude::*;

#[global_allocator]
static ALLOC: Counting = Counting;

// ---- configurations and the corpus of valid frames ----

const WORKERS: usize = 4;
const ELEMENTS: usize = 8;
const OPS: u64 = 40;

const SYSTEMS: [&str; 4] = ["p4sgd", "cpusync", "gpusync_ring", "gpusync_tree"];

/// A node of any of the systems, with what the test reads back.
trait Probe: Endpoint {
    /// A worker's (aggregates finished, wrong, delivered twice or never issued).
    fn outcome(&self) -> Option<(u64, u64, u64)> {
        None
    }
    fn malformed(&self) -> u64;
}

impl<C: Collective> Probe for LoopWorker<C>
where
    C: Malformed,
{
    fn outcome(&self) -> Option<(u64, u64, u64)> {
        Some((self.finished(), self.wrong, self.duplicates))
    }
    fn malformed(&self) -> u64 {
        self.inner.malformed_count()
    }
}

trait Malformed {
    fn malformed_count(&self) -> u64;
}

impl Malformed for P4sgdWorker {
    fn malformed_count(&self) -> u64 {
        self.counters.malformed
    }
}

impl Malformed for CpuSyncWorker {
    fn malformed_count(&self) -> u64 {
        self.malformed
    }
}

impl Malformed for GpuSyncWorker {
    fn malformed_count(&self) -> u64 {
        self.malformed
    }
}

impl Probe for P4sgdSwitch {
    fn malformed(&self) -> u64 {
        self.counters.malformed
    }
}

impl Probe for Forwarder {
    fn malformed(&self) -> u64 {
        self.dropped
    }
}

/// A boxed node on the fabric.
struct Node(Box<dyn Probe>);

impl Endpoint for Node {
    fn id(&self) -> NodeId {
        self.0.id()
    }
    fn handle_packet(&mut self, now: Nanos, from: NodeId, frame: &[u8]) {
        self.0.handle_packet(now, from, frame)
    }
    fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        self.0.poll_transmit(now)
    }
    fn poll_timeout(&self) -> Option<Nanos> {
        self.0.poll_timeout()
    }
    fn handle_timeout(&mut self, now: Nanos) {
        self.0.handle_timeout(now)
    }
    fn is_done(&self) -> bool {
        self.0.is_done()
    }
}

fn nodes(sys: usize, seed: u64) -> Vec<Node> {
    let sw = WORKERS as NodeId;
    let mut v: Vec<Node> = (0..WORKERS)
        .map(|r| {
            let p: Box<dyn Probe> = match sys {
                0 => {
                    let w = P4sgdWorker::new(WorkerConfig {
                        rank: r,
                        workers: WORKERS,
                        switch: sw,
                        slots: 3,
                        elements: ELEMENTS,
                        rto_ns: 20_000,
                    })
                    .expect("worker");
                    let mut l = LoopWorker::new(w, r, WORKERS, ELEMENTS, seed, OPS);
                    // more operations in flight than slots: slots are reused
                    l.window = 4;
                    Box::new(l)
                }
                1 => {
                    let w = CpuSyncWorker::new(r, WORKERS, sw, ELEMENTS).expect("worker");
                    Box::new(LoopWorker::new(w, r, WORKERS, ELEMENTS, seed, OPS))
                }
                _ => {
                    let w = GpuSyncWorker::new(GpuSyncConfig {
                        rank: r,
                        workers: WORKERS,
                        switch: sw,
                        elements: ELEMENTS,
                        algo: if sys == 2 { Algo::Ring } else { Algo::Tree },
                        launch_ns: 1_000,
                    })
                    .expect("worker");
                    Box::new(LoopWorker::new(w, r, WORKERS, ELEMENTS, seed, OPS))
                }
            };
            Node(p)
        })
        .collect();
    v.push(Node(if sys == 0 {
        Box::new(
            P4sgdSwitch::new(
                sw,
                SwitchConfig {
                    slots: 3,
                    ..SwitchConfig::paper(WORKERS)
                },
            )
            .expect("switch"),
        )
    } else {
        Box::new(Forwarder::new(sw, WORKERS as u32 + 1))
    }));
    v
}

fn fabric<N: Endpoint>(nodes: Vec<N>) -> SimFabric<N> {
    let link = LinkConfig {
        latency_ns: 500,
        mtu: usize::MAX / 2,
        ..LinkConfig::gbps100()
    };
    sim_fabric(nodes, WORKERS as NodeId, link)
}

fn all_done<N: Endpoint>(n: &[N]) -> bool {
    n.iter().all(Endpoint::is_done)
}

/// Every frame of a clean run of `sys` with `seed`, in the order put on links.
fn corpus(sys: usize, seed: u64) -> Corpus {
    static C: Corpora<(usize, u64)> = Corpora::new();
    cached(&C, (sys, seed), || {
        let mut f = fabric(nodes(sys, seed));
        let (finished, frames) = tapped_run(&mut f, 10_000_000_000, all_done);
        assert!(finished);
        for n in f.nodes() {
            if let Some((done, wrong, dup)) = n.0.outcome() {
                assert_eq!((done, wrong, dup), (OPS, 0, 0), "the clean run is exact");
            }
        }
        assert!(
            frames.len() > 100,
            "{}: {} frames",
            SYSTEMS[sys],
            frames.len()
        );
        frames
    })
}

// ---- property 1: fresh endpoints and arbitrary frames ----

/// Feed each node of a fresh `sys` setup the given frames, draining and firing timers.
fn fresh(sys: usize, frames: &[(u32, Junk)]) {
    let corpus = corpus(sys, 1);
    let mut ns = nodes(sys, 1);
    let n = ns.len();
    for node in ns.iter_mut() {
        let mut now = 0;
        for (from, j) in frames {
            let frame = j.bytes(&corpus);
            let from = if from.is_multiple_of(4) {
                *from
            } else {
                from % (n as u32 + 2)
            };
            feed(node, now, from, &frame);
            now += 1_000;
            if let Some(t) = node.poll_timeout()
                && t <= now
            {
                node.handle_timeout(now);
                while node.poll_transmit(now).is_some() {}
            }
        }
    }
}

proptest! {
    #![proptest_config(cases(2048))]

    #[test]
    fn fresh_endpoints_take_arbitrary_frames(
        sys in 0..SYSTEMS.len(),
        frames in prop::collection::vec((any::<u32>(), junk_strategy()), 1..24),
    ) {
        fresh(sys, &frames);
    }
}

// ---- property 2: a run beside a hostile source ----

#[derive(Debug, Default)]
struct Outcome {
    /// workers that did not finish their operations
    unfinished: usize,
    /// aggregates that differ from the reference sum
    wrong: u64,
    /// aggregates delivered twice, or for an operation never issued
    duplicates: u64,
    /// aggregates wrong or delivered again because of junk after the run
    changed_after: u64,
    injected: u64,
    malformed: u64,
}

fn totals(ns: &[Node]) -> (usize, u64, u64) {
    let mut t = (0, 0, 0);
    for n in ns {
        if let Some((done, wrong, dup)) = n.0.outcome() {
            t.0 += usize::from(done < OPS);
            t.1 += wrong;
            t.2 += dup;
        }
    }
    t
}

fn hostile_run(sys: usize, seed: u64, p: f64, mode: Mode) -> Outcome {
    let corpus = corpus(sys, seed);
    let mut g = SplitMix64::derive(seed, SYSTEMS[sys]);
    let mut ns = nodes(sys, seed);
    let n = ns.len();
    let mut o = Outcome::default();
    for node in ns.iter_mut() {
        for _ in 0..8 {
            o.injected += 1;
            let j = junk(&mut g, mode, &corpus);
            let f = from_id(&mut g, n);
            node.handle_packet(0, f, &j);
        }
    }
    let wrapped: Vec<Hostile<Node>> = ns
        .into_iter()
        .enumerate()
        .map(|(i, inner)| Hostile {
            inner,
            g: SplitMix64::derive(seed, &format!("{}/{i}", SYSTEMS[sys])),
            p,
            mode,
            corpus: corpus.clone(),
            nodes: n,
            injected: 0,
        })
        .collect();
    let mut f = fabric(wrapped);
    f.run_until(5_000_000_000, all_done);
    let mut ns: Vec<Node> = f
        .into_nodes()
        .into_iter()
        .map(|h| {
            o.injected += h.injected;
            h.inner
        })
        .collect();
    (o.unfinished, o.wrong, o.duplicates) = totals(&ns);
    for node in ns.iter_mut() {
        for k in 0..32 {
            let j = junk(&mut g, mode, &corpus);
            let f = from_id(&mut g, n);
            feed(node, 6_000_000_000 + k, f, &j);
        }
    }
    let after = totals(&ns);
    o.changed_after = after.1 + after.2 - o.wrong - o.duplicates;
    o.malformed = ns.iter().map(|n| n.0.malformed()).sum();
    o
}

fn exact(sys: usize, seed: u64, p: f64, mode: Mode) -> Result<(), TestCaseError> {
    let o = hostile_run(sys, seed, p, mode);
    prop_assert!(o.injected > 0);
    prop_assert!(
        o.unfinished == 0 && o.wrong == 0 && o.duplicates == 0 && o.changed_after == 0,
        "{} seed {seed} p {p} {mode:?}: {o:?}",
        SYSTEMS[sys]
    );
    Ok(())
}

macro_rules! under_hostile_source {
    ($($(#[$attr:meta])* $test:ident: $sys:literal, $mode:ident;)*) => {
        proptest! {
            #![proptest_config(cases(128))]
            $(
                $(#[$attr])*
                #[test]
                fn $test(seed in 1..u64::MAX, p in 0.01..0.3f64) {
                    exact($sys, seed, p, Mode::$mode)?;
                }
            )*
        }
    };
}

under_hostile_source! {
    p4sgd_exact_beside_random_bytes: 0, Raw;
    /// Finding: the P4SGD header and values carry no checksum anyone verifies (the switch
    /// sums what arrives), so a flipped value is summed into the aggregate every worker takes.
    #[ignore = "finding: P4SGD sums corrupted payloads (no payload integrity check)"]
    p4sgd_exact_beside_flipped_frames: 0, Flip;
    p4sgd_exact_beside_cut_frames: 0, Cut;
    p4sgd_exact_beside_replayed_frames: 0, Replay;
    cpusync_exact_beside_random_bytes: 1, Raw;
    /// Finding: the baselines' messages (Ethernet and a small header, no checksum) are taken
    /// as they arrive: a flipped value is summed. A real MPI or NCCL transport rides on TCP or
    /// InfiniBand, whose checksums this model leaves out.
    #[ignore = "finding: MPI baseline sums corrupted payloads (no checksum in the model)"]
    cpusync_exact_beside_flipped_frames: 1, Flip;
    cpusync_exact_beside_cut_frames: 1, Cut;
    cpusync_exact_beside_replayed_frames: 1, Replay;
    gpusync_ring_exact_beside_random_bytes: 2, Raw;
    #[ignore = "finding: NCCL ring baseline sums corrupted payloads (no checksum in the model)"]
    gpusync_ring_exact_beside_flipped_frames: 2, Flip;
    gpusync_ring_exact_beside_cut_frames: 2, Cut;
    gpusync_ring_exact_beside_replayed_frames: 2, Replay;
    gpusync_tree_exact_beside_random_bytes: 3, Raw;
    #[ignore = "finding: NCCL tree baseline sums corrupted payloads (no checksum in the model)"]
    gpusync_tree_exact_beside_flipped_frames: 3, Flip;
    gpusync_tree_exact_beside_cut_frames: 3, Cut;
    gpusync_tree_exact_beside_replayed_frames: 3, Replay;
}

// ---- property 3: bounded memory ----

/// Heap held by each endpoint of a fresh setup after 256 junk frames, and its growth over 4096
/// more: under 256 KiB, with at most two frames sent per junk frame.
fn bounded(sys: usize, mode: Mode) {
    let corpus = corpus(sys, 1);
    let mut g = SplitMix64::derive(7, SYSTEMS[sys]);
    let mut ns = nodes(sys, 1);
    let n = ns.len();
    for node in ns.iter_mut() {
        let mut now = 0;
        let mut phase = |node: &mut Node, k: usize, now: &mut u64| {
            let mut sent = 0;
            for _ in 0..k {
                let j = junk(&mut g, mode, &corpus);
                let f = from_id(&mut g, n);
                sent += feed(node, *now, f, &j);
                *now += 1_000;
            }
            sent
        };
        phase(node, 256, &mut now);
        let l1 = live();
        let sent = phase(node, 4096, &mut now);
        let grown = live() - l1;
        let s = SYSTEMS[sys];
        assert!(
            grown < 256 << 10,
            "{s} node {} ({mode:?}): heap grew {grown} bytes over 4096 junk frames",
            node.id()
        );
        assert!(
            sent <= 4096 * 2,
            "{s} node {} ({mode:?}): {sent} frames sent for 4096 junk frames",
            node.id()
        );
    }
}

#[test]
fn memory_stays_bounded_under_junk() {
    for s in 0..SYSTEMS.len() {
        for mode in [Mode::Raw, Mode::Flip, Mode::Cut, Mode::Replay] {
            bounded(s, mode);
        }
    }
}
