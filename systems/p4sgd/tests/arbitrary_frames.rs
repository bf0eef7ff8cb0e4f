//! P4SGD's endpoints under arbitrary frames, as the `Endpoint` contract demands (every received
//! byte untrusted; a malformed frame counted and dropped, never a panic): the P4SGD worker
//! transport and switch program (Alg. 2 and 3, with the round check), and the baselines' hosts
//! (the MPI recursive-doubling rank, the NCCL ring and tree ranks) with their forwarding switch,
//! each worker driven by `driver::LoopWorker` (which checks every aggregate against the
//! reference sum): the properties of `fabric::testing::properties` (fresh endpoints, a run
//! beside a hostile source ending with every all-reduce of every worker exact and none delivered
//! twice, bounded memory) on this crate's [`P4sgd`] subject.

use inabench_fabric::testing::properties::{Judged, Subject};
use inabench_fabric::testing::*;
use inabench_fabric::{Endpoint, NodeId};
use inabench_p4sgd::cpusync::{CpuSyncWorker, Forwarder, forwarder};
use inabench_p4sgd::driver::{Collective, LoopWorker};
use inabench_p4sgd::gpusync::{Algo, GpuSyncConfig, GpuSyncWorker};
use inabench_p4sgd::protocol::{P4sgdSwitch, P4sgdWorker, SwitchConfig, WorkerConfig};

const WORKERS: usize = 4;
const ELEMENTS: usize = 8;
const OPS: u64 = 40;

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
        self.dropped()
    }
}

/// A node on the fabric (a boxed endpoint is an endpoint).
type Node = Box<dyn Probe>;

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
            p
        })
        .collect();
    v.push(if sys == 0 {
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
        Box::new(forwarder(sw, WORKERS as u32 + 1))
    });
    v
}

/// The systems: 0 P4SGD, 1 the MPI baseline, 2 and 3 the NCCL ring and tree baselines.
struct P4sgd;

impl Subject for P4sgd {
    type N = Node;
    /// Aggregates wrong and delivered twice, over all workers (counters that only grow).
    type Results = (u64, u64);

    fn variants() -> Vec<&'static str> {
        vec!["p4sgd", "cpusync", "gpusync_ring", "gpusync_tree"]
    }
    fn nodes(v: usize, seed: u64) -> Vec<Node> {
        nodes(v, seed)
    }
    fn switch(_v: usize) -> NodeId {
        WORKERS as NodeId
    }
    fn link(_v: usize) -> inabench_fabric::sim::LinkConfig {
        inabench_fabric::sim::LinkConfig {
            latency_ns: 500,
            ..inabench_fabric::sim::LinkConfig::gbps100()
        }
    }
    fn min_corpus(_v: usize) -> usize {
        100
    }
    fn judge(_v: usize, _seed: u64, ns: &mut Vec<Node>, _finished: bool) -> Judged<(u64, u64)> {
        let (mut unfinished, mut wrong, mut dup) = (0, 0, 0);
        for n in ns.iter() {
            if let Some((done, w, d)) = n.outcome() {
                unfinished += usize::from(done < OPS);
                wrong += w;
                dup += d;
            }
        }
        let malformed: u64 = ns.iter().map(|n| n.malformed()).sum();
        Judged {
            unfinished,
            wrong: (wrong + dup) as usize,
            results: (wrong, dup),
            note: format!("wrong {wrong}, delivered twice {dup}, malformed {malformed}"),
        }
    }
    fn finding(v: usize, mode: Mode) -> Option<&'static str> {
        match (v, mode) {
            // the P4SGD header and values carry no checksum anyone verifies (the switch sums
            // what arrives), so a flipped value is summed into the aggregate every worker takes
            (0, Mode::Flip) => {
                Some("finding: P4SGD sums corrupted payloads (no payload integrity check)")
            }
            // the baselines' messages (Ethernet and a small header, no checksum) are taken as
            // they arrive: a flipped value is summed. A real MPI or NCCL transport rides on TCP
            // or InfiniBand, whose checksums this model leaves out.
            (1, Mode::Flip) => {
                Some("finding: MPI baseline sums corrupted payloads (no checksum in the model)")
            }
            (2, Mode::Flip) => Some(
                "finding: NCCL ring baseline sums corrupted payloads (no checksum in the model)",
            ),
            (3, Mode::Flip) => Some(
                "finding: NCCL tree baseline sums corrupted payloads (no checksum in the model)",
            ),
            _ => None,
        }
    }
}

inabench_fabric::robustness_suite!(P4sgd);
