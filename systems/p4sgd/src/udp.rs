//! P4SGD's endpoints (and the baselines of Fig. 8) on the `udp` fabric: every node (each worker,
//! the switch) serves its sans-IO state machine on its own UDP socket on 127.0.0.1 with
//! [`inabench_fabric::udp::serve`] (batched `sendmmsg`/`recvmmsg`, event-driven I/O unless told
//! otherwise), one thread per node in this process, under a [`Coordinator`] that collects the
//! workers' `done` and stops every node. Frames cross the host's network stack as datagrams, so
//! the latencies include the kernel's UDP path and thread wake-ups of this host.
//!
//! Thread-per-node rather than process-per-node: a node process needs a hidden command of the
//! harness binary (as `inabench __fabric-node` runs Table 6's nodes); the threads run the same
//! `serve` loop on the same sockets, and each worker checks every result against the exact sum
//! itself ([`LoopWorker`]), so nothing has to be shipped back.

use crate::allreduce::{Outcome, RunError};
use crate::cpusync::{CpuSyncWorker, Forwarder};
use crate::driver::{Either, LoopWorker};
use crate::protocol::{P4sgdSwitch, P4sgdWorker, PAPER_SLOTS, SwitchConfig, WorkerConfig};
use inabench_fabric::fault::Faults;
use inabench_fabric::udp::{self, Coordinator, IoModel, NodeConfig, NodeReport, Wiring};
use inabench_fabric::{Endpoint, NodeId};
use inabench_ina::common::{AllReduceConfig, SetupNode, System, Worker};
use inabench_ina::switchml::SwitchMl;
use std::net::{SocketAddr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

/// How a udp job runs.
#[derive(Debug, Clone, Copy)]
pub struct UdpOptions {
    /// The workers' host I/O model (the switch is always event-driven).
    pub io: IoModel,
    /// Faults on every node's egress.
    pub faults: Faults,
    /// Largest datagram accepted.
    pub mtu: usize,
    /// Give up (and stop every node) after this long.
    pub deadline: Duration,
}

impl Default for UdpOptions {
    fn default() -> Self {
        UdpOptions {
            io: IoModel::Event,
            faults: Faults::default(),
            mtu: 9216,
            deadline: Duration::from_secs(120),
        }
    }
}

/// What a udp job gave back: the nodes (their state after the stop) and each one's report.
pub struct UdpRun<N> {
    pub nodes: Vec<N>,
    pub reports: Vec<NodeReport>,
    /// How many of the counted nodes said `done` before the deadline.
    pub done: usize,
    /// Start to the last `done` (the coordinator's clock).
    pub duration: Duration,
}

fn io_err(e: std::io::Error) -> RunError {
    RunError::Udp(e.to_string())
}

fn v4(s: &UdpSocket) -> Result<SocketAddrV4, RunError> {
    match s.local_addr().map_err(io_err)? {
        SocketAddr::V4(a) => Ok(a),
        SocketAddr::V6(_) => Err(RunError::Udp("a socket bound to IPv6".into())),
    }
}

/// Serve `nodes` (node i has id i) one thread and one loopback socket each; nodes `0..counted`
/// are waited for (their `is_done`), the others (switches) only answer.
pub fn run_threads<N: Endpoint + Send>(
    mut nodes: Vec<N>,
    counted: usize,
    opt: &UdpOptions,
) -> Result<UdpRun<N>, RunError> {
    let coord = Coordinator::new().map_err(io_err)?;
    let socks: Vec<UdpSocket> = (0..nodes.len())
        .map(|_| udp::bind_loopback().map_err(io_err))
        .collect::<Result<_, _>>()?;
    let peers: Vec<SocketAddrV4> = socks.iter().map(v4).collect::<Result<_, _>>()?;
    let wiring = Wiring {
        peers: peers.clone(),
        coordinator: coord.addr().map_err(io_err)?,
    };
    let start = Instant::now();
    let (reports, done, duration) = std::thread::scope(|s| {
        let handles: Vec<_> = nodes
            .iter_mut()
            .zip(&socks)
            .enumerate()
            .map(|(i, (node, sock))| {
                let wiring = &wiring;
                let cfg = NodeConfig {
                    io: if i < counted { opt.io } else { IoModel::Event },
                    faults: opt.faults,
                    mtu: opt.mtu,
                    // a node outlives the coordinator's deadline a little, so the stop ends it
                    deadline: opt.deadline + Duration::from_secs(1),
                    counted: i < counted,
                };
                s.spawn(move || udp::serve(node, sock, wiring, &cfg))
            })
            .collect();
        let (done, last) = coord.wait_and_stop(counted, &peers, start, opt.deadline);
        let reports: Vec<NodeReport> = handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect();
        (reports, done, last)
    });
    Ok(UdpRun {
        nodes,
        reports,
        done,
        duration,
    })
}

fn err(e: impl std::fmt::Display) -> RunError {
    RunError::Config(e.to_string())
}

/// A node of a P4SGD job: a checked closed-loop worker or the switch.
pub type P4sgdNode = Either<LoopWorker<P4sgdWorker>, P4sgdSwitch>;

/// P4SGD (`workers` workers and its switch) on udp: `ops` checked all-reduces per worker, one
/// after another.
pub fn run_p4sgd(
    workers: usize,
    elements: usize,
    ops: u64,
    seed: u64,
    timeout_ns: u64,
    opt: &UdpOptions,
) -> Result<(Outcome, UdpRun<P4sgdNode>), RunError> {
    let sw_id = workers as NodeId;
    let mut nodes = Vec::with_capacity(workers + 1);
    for r in 0..workers {
        let w = P4sgdWorker::new(WorkerConfig {
            rank: r,
            workers,
            switch: sw_id,
            slots: PAPER_SLOTS,
            elements,
            rto_ns: timeout_ns,
        })
        .map_err(err)?;
        nodes.push(Either::A(LoopWorker::new(
            w, r, workers, elements, seed, ops,
        )));
    }
    let sw = P4sgdSwitch::new(
        sw_id,
        SwitchConfig {
            elements,
            ..SwitchConfig::paper(workers)
        },
    )
    .map_err(err)?;
    nodes.push(Either::B(sw));
    let run = run_threads(nodes, workers, opt)?;
    let loops: Vec<_> = run.nodes.iter().filter_map(|n| n.a()).collect();
    let out = Outcome {
        latencies: loops.iter().flat_map(|l| l.latencies.clone()).collect(),
        wrong: loops.iter().map(|l| l.wrong + l.duplicates).sum(),
        unfinished: loops.iter().filter(|l| l.finished() < ops).count(),
        retransmissions: loops.iter().map(|l| l.inner.counters.retransmissions).sum(),
    };
    Ok((out, run))
}

/// CPUSync (recursive doubling through a forwarding switch) on udp.
pub fn run_cpusync(
    workers: usize,
    elements: usize,
    ops: u64,
    seed: u64,
    opt: &UdpOptions,
) -> Result<Outcome, RunError> {
    let sw_id = workers as NodeId;
    let mut nodes = Vec::with_capacity(workers + 1);
    for r in 0..workers {
        let w = CpuSyncWorker::new(r, workers, sw_id, elements).map_err(err)?;
        nodes.push(Either::A(LoopWorker::new(
            w, r, workers, elements, seed, ops,
        )));
    }
    nodes.push(Either::B(Forwarder::new(sw_id, workers as u32 + 1)));
    let run = run_threads(nodes, workers, opt)?;
    let loops: Vec<_> = run.nodes.iter().filter_map(|n| n.a()).collect();
    Ok(Outcome {
        latencies: loops.iter().flat_map(|l| l.latencies.clone()).collect(),
        wrong: loops.iter().map(|l| l.wrong + l.duplicates).sum(),
        unfinished: loops.iter().filter(|l| l.finished() < ops).count(),
        retransmissions: 0,
    })
}

/// SwitchML (inabench-ina's, a closed loop in one slot as
/// [`crate::allreduce::switchml_config`] builds it) on udp.
pub fn run_switchml(cfg: &AllReduceConfig, opt: &UdpOptions) -> Result<Outcome, RunError> {
    let setup = SwitchMl.build(cfg).map_err(err)?;
    let run = run_threads(setup.into_nodes(), cfg.workers, opt)?;
    let ws: Vec<&dyn Worker> = run
        .nodes
        .iter()
        .filter_map(|n| match n {
            SetupNode::Worker(w) => Some(w.as_ref()),
            _ => None,
        })
        .collect();
    Ok(Outcome {
        latencies: ws.iter().flat_map(|w| w.stats().rtt_ns).collect(),
        wrong: ws.iter().filter(|w| w.is_done() && !w.check(cfg)).count() as u64,
        unfinished: ws.iter().filter(|w| !w.is_done()).count(),
        retransmissions: ws.iter().map(|w| w.stats().retransmissions).sum(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every one of 8 workers gets every one of 2,000 all-reduces exactly once, each equal to
    /// the exact sum, over real sockets.
    #[test]
    fn p4sgd_on_udp_sums_exactly_once() {
        let ops = 2000;
        let (out, run) =
            run_p4sgd(8, 8, ops, 11, 20_000_000, &UdpOptions::default()).expect("udp run");
        assert_eq!(run.done, 8, "every worker said done");
        assert_eq!(out.unfinished, 0);
        assert_eq!(out.wrong, 0, "wrong or duplicated results");
        assert_eq!(out.latencies.len() as u64, 8 * ops);
        let sw = run.nodes[8].b().expect("the switch");
        assert_eq!(sw.counters.completed, ops, "one completion per operation");
        assert_eq!(sw.counters.malformed, 0);
        // the frames really went through the sockets: every worker sent at least an aggregate
        // and an acknowledgement per operation, and the switch received them
        assert!(run.reports[..8].iter().all(|r| r.frames_tx >= 2 * ops));
        assert!(run.reports[8].frames_rx >= 16 * ops);
        assert!(run.reports.iter().all(|r| r.stopped));
    }

    /// Loss, duplication and reordering injected on every node's egress: every result is still
    /// the exact sum, delivered once, and the workers had to retransmit.
    #[test]
    fn p4sgd_on_udp_is_exactly_once_under_faults() {
        let ops = 300;
        let opt = UdpOptions {
            faults: Faults {
                loss: 0.02,
                duplicate: 0.02,
                reorder: 0.02,
                reorder_delay_ns: 200_000,
                seed: 5,
            },
            ..UdpOptions::default()
        };
        let (out, run) = run_p4sgd(8, 8, ops, 3, 2_000_000, &opt).expect("udp run");
        let dropped: u64 = run.reports.iter().map(|r| r.faults.dropped).sum();
        assert!(dropped > 0, "the faults dropped frames");
        assert_eq!(run.done, 8);
        assert_eq!(out.unfinished, 0);
        assert_eq!(out.wrong, 0, "wrong or duplicated results");
        assert_eq!(out.latencies.len() as u64, 8 * ops);
        assert!(out.retransmissions > 0);
        let sw = run.nodes[8].b().expect("the switch");
        assert_eq!(sw.counters.completed, ops);
    }

    #[test]
    fn cpusync_on_udp_sums_exactly() {
        let out = run_cpusync(8, 8, 500, 2, &UdpOptions::default()).expect("udp run");
        assert_eq!(out.unfinished, 0);
        assert_eq!(out.wrong, 0);
        assert_eq!(out.latencies.len(), 8 * 500);
    }
}
