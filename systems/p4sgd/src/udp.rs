//! P4SGD's endpoints (and the baselines of Fig. 8) on the `udp` fabric
//! ([`inabench_fabric::UdpThreads`]): every node (each worker, the switch) serves its sans-IO
//! state machine on its own UDP socket on 127.0.0.1 (batched `sendmmsg`/`recvmmsg`, event-driven
//! I/O unless told otherwise), one thread per node in this process, under a coordinator that
//! collects the workers' `done` and stops every node. Frames cross the host's network stack as
//! datagrams, so the latencies include the kernel's UDP path and thread wake-ups of this host.
//!
//! Thread-per-node rather than process-per-node: a node process needs a hidden command of the
//! harness binary (as `inabench __fabric-node` runs Table 6's nodes); the threads run the same
//! `serve` loop on the same sockets, and each worker checks every result against the exact sum
//! itself ([`LoopWorker`]), so nothing has to be shipped back.

use crate::allreduce::{Outcome, RunError, run_nodes, switchml_outcome};
use crate::cpusync::{CpuSyncWorker, forwarder};
use crate::driver::LoopWorker;
use crate::protocol::{P4sgdSwitch, P4sgdWorker, PAPER_SLOTS, SwitchConfig, WorkerConfig};
use inabench_fabric::Node;
use inabench_fabric::fault::Faults;
use inabench_fabric::udp::IoModel;
use inabench_fabric::{Endpoint, FabricReport, NodeId, UdpThreads, Until};
use inabench_ina::common::{AllReduceConfig, System};
use inabench_ina::switchml::SwitchMl;
use std::time::Duration;

/// How a udp job runs.
#[derive(Debug, Clone, Copy)]
pub struct UdpOptions {
    /// Every node's host I/O model (the switch's too).
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

/// What a udp job gave back: the nodes (their state after the stop) and the fabric's report
/// (each node's frames and bytes, whether every worker said `done` before the deadline, when
/// the last did).
pub struct UdpRun<N> {
    pub nodes: Vec<N>,
    pub report: FabricReport,
}

/// Serve `nodes` (node i has id i) one thread and one loopback socket each
/// ([`inabench_fabric::UdpThreads`]); nodes `0..counted` are waited for (their `is_done`), the
/// others (switches) only answer.
pub fn run_threads<N: Endpoint>(
    nodes: Vec<N>,
    counted: usize,
    opt: &UdpOptions,
) -> Result<UdpRun<N>, RunError> {
    let mut fabric = UdpThreads {
        mtu: opt.mtu,
        faults: opt.faults,
        io: opt.io,
    };
    let until = Until::workers(counted, nodes.len(), opt.deadline.as_nanos() as u64);
    let (nodes, report) = run_nodes(&mut fabric, nodes, &until)?;
    Ok(UdpRun { nodes, report })
}

fn err(e: impl std::fmt::Display) -> RunError {
    RunError::Config(e.to_string())
}

/// A node of a P4SGD job: a checked closed-loop worker or the switch.
pub type P4sgdNode = Node<LoopWorker<P4sgdWorker>, P4sgdSwitch>;

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
    let mut nodes: Vec<Node<_, _>> = Vec::with_capacity(workers + 1);
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
        nodes.push(Node::Worker(LoopWorker::new(
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
    nodes.push(Node::Switch(sw));
    let run = run_threads(nodes, workers, opt)?;
    let loops: Vec<_> = run.nodes.iter().filter_map(|n| n.worker()).collect();
    let out = Outcome {
        fabric: run.report.fabric,
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
    let mut nodes: Vec<Node<_, _>> = Vec::with_capacity(workers + 1);
    for r in 0..workers {
        let w = CpuSyncWorker::new(r, workers, sw_id, elements).map_err(err)?;
        nodes.push(Node::Worker(LoopWorker::new(
            w, r, workers, elements, seed, ops,
        )));
    }
    nodes.push(Node::Switch(forwarder(sw_id, workers as u32 + 1)));
    let run = run_threads(nodes, workers, opt)?;
    let loops: Vec<_> = run.nodes.iter().filter_map(|n| n.worker()).collect();
    Ok(Outcome {
        fabric: run.report.fabric,
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
    Ok(switchml_outcome(run.report.fabric, cfg, run.nodes.iter()))
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
        assert!(run.report.finished, "every worker said done");
        assert_eq!(out.unfinished, 0);
        assert_eq!(out.wrong, 0, "wrong or duplicated results");
        assert_eq!(out.latencies.len() as u64, 8 * ops);
        let sw = run.nodes[8].switch().expect("the switch");
        assert_eq!(sw.counters.completed, ops, "one completion per operation");
        assert_eq!(sw.counters.malformed, 0);
        // the frames really went through the sockets: every worker sent at least an aggregate
        // and an acknowledgement per operation, and the switch received them
        assert_eq!(run.report.fabric, "udp");
        assert!(run.report.nodes[..8].iter().all(|r| r.frames_tx >= 2 * ops));
        assert!(run.report.nodes[8].frames_rx >= 16 * ops);
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
        assert!(run.report.faults.dropped > 0, "the faults dropped frames");
        assert!(run.report.finished);
        assert_eq!(out.unfinished, 0);
        assert_eq!(out.wrong, 0, "wrong or duplicated results");
        assert_eq!(out.latencies.len() as u64, 8 * ops);
        assert!(out.retransmissions > 0);
        let sw = run.nodes[8].switch().expect("the switch");
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
