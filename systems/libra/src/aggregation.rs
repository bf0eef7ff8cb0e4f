//! One iteration of Libra's aggregation on the `sim` fabric at 100 Gbps: the driver behind the
//! `libra.aggregation` workload (inabench-workloads; Fig. 12, 13, 14, 18).
//!
//! The switch: no CPU cost per frame, but every frame and every recirculated pass takes its
//! pipeline for the frame's time at one pipeline's bandwidth (1.6 Tbps, [`crate::proto::pass_ns`]),
//! and what the frame sends leaves after its passes.
//!
//! Host costs: a worker's and the server's per-frame cost is the CPU time our endpoint code
//! takes per frame on this machine, measured by [`calibrate`] in a run of the same point with
//! zero charged cost (`inabench_fabric::wrap::Timed` and the suite's one calibration rule, as
//! `netreduce.table6` does), then charged on the fabric
//! by [`run_sim`]; the switch costs no CPU per frame (a pipeline: its time is the pass occupancy
//! above). [`run_sim`] checks every worker's result against the exact sums.

use crate::LibraError;
use crate::proto::{self, Config, Inputs, Node};
use crate::sparse::SparseGen;
use inabench_fabric::Endpoint;
use inabench_fabric::fault::Faults;
use inabench_fabric::sim::{LinkConfig, NodeConfig, SimFabric};
use inabench_fabric::wrap::{CpuMeter, Timed};
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
/// run with zero charged cost, the CPU time spent inside the endpoints over the frames they
/// handled, by the suite's one calibration rule ([`inabench_fabric::wrap`]: the wall time inside
/// the calls times the thread's on-CPU share of the batch of events they ran in, less the
/// monotonic clock's own cost per call; this crate read the thread's CPU clock around every call before, a syscall whose
/// own cost, about 540 ns a pair on this VM, was charged to every call). Returns (worker,
/// server) ns per frame.
pub fn calibrate(cfg: &Config, inputs: &Inputs, hot_params: usize) -> (u64, u64) {
    let nodes: Vec<Timed<Node>> = proto::build(cfg, inputs, hot_params, None)
        .into_iter()
        .map(|inner| Timed::new(inner, true))
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
    let view = |t: &Timed<Node>| Some(t.stats());
    let mut meter = CpuMeter::new(256);
    f.run_until_at(120_000_000_000, |_, ns| {
        meter.observe(ns, view);
        ns[..w].iter().all(Endpoint::is_done)
    });
    meter.finish(f.nodes(), view);
    let nodes = f.into_nodes();
    let (mut wns, mut wf) = (0u64, 0u64);
    for (i, t) in nodes[..w].iter().enumerate() {
        wns += meter.cpu_ns(i);
        wf += t.frames;
    }
    let s = &nodes[w + 1];
    let sns = meter.cpu_ns(w + 1);
    (
        wns.checked_div(wf).unwrap_or(0),
        sns.checked_div(s.frames).unwrap_or(0),
    )
}
