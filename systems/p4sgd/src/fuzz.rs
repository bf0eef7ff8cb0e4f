//! The endpoint fuzz body of P4SGD (the worker transport and switch program, Alg. 2 and 3 with
//! the round check) and its baselines' hosts (the MPI recursive-doubling rank, the NCCL ring and
//! tree ranks, with their forwarding switch), each worker a [`LoopWorker`] that checks every
//! aggregate against the reference sum: the cargo-fuzz target `p4sgd_endpoints` (fuzz/) and the
//! stable `tests/fuzz_smoke.rs` call [`endpoints`].
//!
//! The input's first byte picks the system; the rest is a schedule of hostile frames
//! ([`inabench_fabric::fuzz::schedule`]: the fuzzer's bytes, or a clean run's frames flipped, cut
//! or replayed, from any neighbour id, before any real frame of any node or after the run)
//! handed to the nodes of a run on the sim fabric. Checked: no panic; no flood (a finished node
//! answers a frame with at most one frame per node of the run: a switch may multicast); and, where the schedule holds no flipped frame
//! (the documented finding of every system here: no payload checksum anyone verifies), every
//! worker finishes every all-reduce with the exact sum, none delivered twice, and frames after
//! the run deliver nothing more. Memory is bounded by libFuzzer's RSS limit here; the
//! heap-growth property is `tests/arbitrary_frames.rs`'s.

use crate::cpusync::{CpuSyncWorker, Forwarder, forwarder};
use crate::driver::{Collective, LoopWorker};
use crate::gpusync::{Algo, GpuSyncConfig, GpuSyncWorker};
use crate::protocol::{P4sgdSwitch, P4sgdWorker, SwitchConfig, WorkerConfig};
use inabench_fabric::fuzz::{
    Corpora, Corpus, Kind, addressed_run, cached, finish_all, pick, schedule, scheduled,
    sim_fabric, tapped_run,
};
use inabench_fabric::sim::{LinkConfig, SimFabric};
use inabench_fabric::{Endpoint, Nanos, NodeId, Transmit};

const WORKERS: usize = 4;
const ELEMENTS: usize = 8;
const OPS: u64 = 16;

/// The systems, by the first byte of the input.
pub const SYSTEMS: [&str; 4] = ["p4sgd", "cpusync", "gpusync_ring", "gpusync_tree"];

/// The kinds of hostile frame every system here is documented to be fooled by (the ignored
/// properties of `tests/arbitrary_frames.rs`): no checksum over the values, so a flipped value
/// is summed.
pub const FINDINGS: &[Kind] = &[Kind::Flip];

/// A worker's (aggregates finished, wrong, delivered twice or never issued), or none.
trait Probe: Endpoint {
    fn outcome(&self) -> Option<(u64, u64, u64)> {
        None
    }
}

impl<C: Collective> Probe for LoopWorker<C> {
    fn outcome(&self) -> Option<(u64, u64, u64)> {
        Some((self.finished(), self.wrong, self.duplicates))
    }
}

impl Probe for P4sgdSwitch {}
impl Probe for Forwarder {}

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

fn nodes(sys: usize) -> Vec<Node> {
    let sw = WORKERS as NodeId;
    let seed = 1;
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
                    .unwrap_or_else(|e| panic!("a P4SGD worker: {e}"));
                    let mut l = LoopWorker::new(w, r, WORKERS, ELEMENTS, seed, OPS);
                    // more operations in flight than slots: slots are reused
                    l.window = 4;
                    Box::new(l)
                }
                1 => {
                    let w = CpuSyncWorker::new(r, WORKERS, sw, ELEMENTS)
                        .unwrap_or_else(|e| panic!("an MPI rank: {e}"));
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
                    .unwrap_or_else(|e| panic!("an NCCL rank: {e}"));
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
            .unwrap_or_else(|e| panic!("the P4SGD switch: {e}")),
        )
    } else {
        Box::new(forwarder(sw, WORKERS as u32 + 1))
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

/// Every frame of a clean run of `sys`, in the order put on links (made once per process).
fn corpus(sys: usize) -> Corpus {
    static C: Corpora<usize> = Corpora::new();
    cached(&C, sys, || {
        let mut f = fabric(nodes(sys));
        let (finished, frames) = tapped_run(&mut f, 10_000_000_000, all_done);
        assert!(finished, "{}: the clean run finishes", SYSTEMS[sys]);
        for n in f.nodes() {
            if let Some(o) = n.0.outcome() {
                assert_eq!(o, (OPS, 0, 0), "{}: the clean run is exact", SYSTEMS[sys]);
            }
        }
        frames
    })
}

/// The seed inputs of the cargo-fuzz target `p4sgd_endpoints` (`fuzz/seeds/p4sgd_endpoints/`):
/// [`inabench_fabric::fuzz::seeds`] from each system's clean run, named `<system>-<kind>`.
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for (pick, name) in SYSTEMS.iter().enumerate() {
        let ns = nodes(pick);
        let n = ns.len();
        let mut f = fabric(ns);
        let (finished, run) = addressed_run(&mut f, 10_000_000_000, all_done);
        assert!(finished, "{name}: the clean run finishes");
        for (kind, input) in inabench_fabric::fuzz::seeds(pick as u8, n, &run) {
            out.push((format!("{name}-{kind}"), input));
        }
    }
    out
}

/// What a run beside a schedule came to.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Outcome {
    /// Workers that did not finish their operations.
    pub unfinished: usize,
    /// Aggregates that differ from the reference sum.
    pub wrong: u64,
    /// Aggregates delivered twice, or for an operation never issued.
    pub duplicates: u64,
    /// Aggregates wrong or delivered again because of frames after the run.
    pub changed_after: u64,
    /// Hostile frames handed over (during and after the run).
    pub injected: u64,
    /// Whether the schedule holds a flipped frame ([`FINDINGS`]).
    pub exempt: bool,
}

fn totals<'a>(ns: impl Iterator<Item = &'a Node>) -> (usize, u64, u64) {
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

/// Run `sys` beside the schedule `data` spells and say what came of it (panics on a flood).
pub fn run(sys: usize, data: &[u8]) -> Outcome {
    let corpus = corpus(sys);
    let ns = nodes(sys);
    let plan = schedule(data, ns.len(), &corpus);
    let mut f = fabric(scheduled(ns, &plan));
    f.run_until(5_000_000_000, all_done);
    let mut wrapped = f.into_nodes();
    let mut o = Outcome {
        exempt: plan.iter().any(|s| FINDINGS.contains(&s.kind)),
        ..Outcome::default()
    };
    (o.unfinished, o.wrong, o.duplicates) = totals(wrapped.iter().map(|s| &s.inner));
    o.injected = finish_all(&mut wrapped, 6_000_000_000, SYSTEMS[sys]);
    let after = totals(wrapped.iter().map(|s| &s.inner));
    o.changed_after = (after.1 + after.2).saturating_sub(o.wrong + o.duplicates);
    o
}

/// The body: the first byte picks the system, the rest is the schedule; a wrong, duplicate or
/// missing aggregate fails unless the schedule holds a flipped frame.
pub fn endpoints(data: &[u8]) {
    let Some((sys, data)) = pick(data, SYSTEMS.len()) else {
        return;
    };
    let o = run(sys, data);
    if !o.exempt {
        assert!(
            o.unfinished == 0 && o.wrong == 0 && o.duplicates == 0 && o.changed_after == 0,
            "{}: {o:?} beside the schedule {data:?}",
            SYSTEMS[sys]
        );
    }
}
