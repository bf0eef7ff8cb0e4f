//! One iteration of Libra's aggregation on the `sim` fabric at 100 Gbps: the driver behind the
//! `libra.aggregation` workload (inabench-workloads; Fig. 12, 13, 14, 18).
//!
//! The switch: no CPU cost per frame, but every frame and every recirculated pass takes its
//! pipeline for the frame's time at one pipeline's bandwidth (1.6 Tbps, [`crate::proto::pass_ns`]),
//! and what the frame sends leaves after its passes.
//!
//! Host costs: a worker's and the server's per-frame cost is the CPU time our endpoint code
//! takes per frame on this machine, measured by [`calibrate`] in a run of the same point with
//! zero charged cost (a Timed wrapper, as `netreduce.table6` does), then charged on the fabric
//! by [`run_sim`]; the switch costs no CPU per frame (a pipeline: its time is the pass occupancy
//! above). [`run_sim`] checks every worker's result against the exact sums.

use crate::LibraError;
use crate::proto::{self, Config, Inputs, Node};
use crate::sparse::SparseGen;
use inabench_fabric::fault::Faults;
use inabench_fabric::sim::{LinkConfig, NodeConfig, SimFabric};
use inabench_fabric::{Endpoint, Nanos, NodeId, Transmit};
use std::collections::HashMap;

/// The inputs of one point: each worker's hot and cold pairs. With `float`, the hot values are
/// f32 bit patterns: the generator's integer value times 2^-20 (exact in f32; gradient-sized,
/// |x| < 1), for the switch's table-lookup float sum.
pub fn inputs(
    gen_: &SparseGen,
    hot: &HashMap<u64, u32>,
    workers: usize,
    libra: bool,
    float: bool,
) -> Result<Inputs, LibraError> {
    (0..workers)
        .map(|w| {
            let mut h = Vec::new();
            let mut c = Vec::new();
            for (k, v) in gen_.gradient(w, 2_000_000) {
                match hot.get(&k) {
                    Some(r) if libra => h.push((
                        *r,
                        if float {
                            (v as f32 * 2f32.powi(-20)).to_bits() as i32
                        } else {
                            v
                        },
                    )),
                    _ => c.push((
                        u32::try_from(k)
                            .map_err(|_| LibraError::Config("a key does not fit 32 bits".into()))?,
                        v,
                    )),
                }
            }
            Ok((h, c))
        })
        .collect()
}

/// This thread's CPU time (CLOCK_THREAD_CPUTIME_ID), ns: what the calibration charges, so
/// that time the thread spends preempted on a busy shared host does not count as the code's
/// cost (the wall clock did: calibrations of the same point varied 2x under load).
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

struct Timed {
    inner: Node,
    ns: u64,
    frames: u64,
}

impl Endpoint for Timed {
    fn id(&self) -> NodeId {
        self.inner.id()
    }
    fn handle_packet(&mut self, now: Nanos, from: NodeId, frame: &[u8]) {
        let t = thread_cpu_ns();
        self.inner.handle_packet(now, from, frame);
        self.ns += thread_cpu_ns().saturating_sub(t);
        self.frames += 1;
    }
    fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        let t = thread_cpu_ns();
        let r = self.inner.poll_transmit(now);
        self.ns += thread_cpu_ns().saturating_sub(t);
        if r.is_some() {
            self.frames += 1;
        }
        r
    }
    fn poll_timeout(&self) -> Option<Nanos> {
        self.inner.poll_timeout()
    }
    fn handle_timeout(&mut self, now: Nanos) {
        self.inner.handle_timeout(now)
    }
    fn is_done(&self) -> bool {
        self.inner.is_done()
    }
}

fn link() -> LinkConfig {
    LinkConfig {
        rate_bps: 100e9,
        latency_ns: 500,
        mtu: 9216,
        queue_bytes: 4 << 20,
        framing_bytes: 24,
    }
}

/// Outcome of one simulated iteration.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub duration_ns: u64,
    pub wrong: usize,
    pub finished: bool,
    pub retransmissions: u64,
    pub recirculations_per_packet: f64,
    pub duplicates_ignored: u64,
    /// Per-frame costs charged (worker, server), ns.
    pub costs: (u64, u64),
}

/// Run one iteration on `sim` with the given per-frame costs (worker, server).
pub fn run_sim(
    cfg: &Config,
    inputs: &Inputs,
    hot_params: usize,
    placement: Option<crate::layout::Placement>,
    costs: (u64, u64),
    faults: Faults,
) -> Outcome {
    let nodes = proto::build(cfg, inputs, hot_params, placement);
    let n = nodes.len();
    let mut nc = vec![
        NodeConfig {
            rx_cost_ns: costs.0,
            tx_cost_ns: costs.0
        };
        n
    ];
    nc[cfg.workers] = NodeConfig {
        rx_cost_ns: 0,
        tx_cost_ns: 0,
    };
    nc[cfg.workers + 1] = NodeConfig {
        rx_cost_ns: costs.1,
        tx_cost_ns: costs.1,
    };
    let w = cfg.workers;
    let mut f = SimFabric::new(nodes, nc, cfg.switch(), link(), faults);
    let rep = f
        .run_until(120_000_000_000, |ns| ns[..w].iter().all(Endpoint::is_done))
        .clone();
    let nodes = f.into_nodes();
    let wrong = proto::check(&nodes, inputs);
    let mut start = u64::MAX;
    let mut end = 0;
    let mut retx = 0;
    let mut rpp = 0.0;
    let mut dups = 0;
    for node in &nodes {
        match node {
            Node::Worker(wk) => {
                start = start.min(wk.stats.start_ns);
                end = end.max(wk.stats.end_ns);
                retx += wk.stats.retransmissions;
            }
            Node::Switch(s) => {
                rpp = s.pipeline.recirculations_per_packet();
                dups = s.stats.duplicates_ignored;
            }
            Node::Server(_) => {}
        }
    }
    Outcome {
        duration_ns: end.saturating_sub(start).max(1),
        wrong,
        finished: rep.finished,
        retransmissions: retx,
        recirculations_per_packet: rpp,
        duplicates_ignored: dups,
        costs,
    }
}

/// Measure the per-frame CPU cost of our worker and server code on this machine: one lossless
/// run with zero charged cost, the thread CPU time spent inside the endpoints over the frames
/// they handled.
pub fn calibrate(cfg: &Config, inputs: &Inputs, hot_params: usize) -> (u64, u64) {
    let nodes: Vec<Timed> = proto::build(cfg, inputs, hot_params, None)
        .into_iter()
        .map(|inner| Timed {
            inner,
            ns: 0,
            frames: 0,
        })
        .collect();
    let n = nodes.len();
    let w = cfg.workers;
    let zero = NodeConfig {
        rx_cost_ns: 0,
        tx_cost_ns: 0,
    };
    let mut f = SimFabric::new(
        nodes,
        vec![zero; n],
        cfg.switch(),
        link(),
        Faults::default(),
    );
    f.run_until(120_000_000_000, |ns| ns[..w].iter().all(Endpoint::is_done));
    let nodes = f.into_nodes();
    let (mut wns, mut wf) = (0u64, 0u64);
    for t in &nodes[..w] {
        wns += t.ns;
        wf += t.frames;
    }
    let s = &nodes[w + 1];
    (
        wns.checked_div(wf).unwrap_or(0),
        s.ns.checked_div(s.frames).unwrap_or(0),
    )
}
