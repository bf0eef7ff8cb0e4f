//! SwitchML's scaling-factor negotiation, whose extra time per iteration the `libra.fig17`
//! workload (inabench-workloads) measures.
//!
//! SwitchML sums integers, so a float gradient is sent as block floating point
//! ([`inabench_ina::bfp`]): before the data round of an iteration, every worker offers, for each
//! block of one packet's values (48 on the Tofino model), the exponent of the block's largest
//! magnitude, and the switch keeps the maximum, so all workers scale the block by the same power
//! of two. The negotiation is the SwitchML program itself with its `op_max` knob
//! ([`inabench_ina::switchml`]): an all-reduce whose elements are the blocks' exponents, run
//! before the data round, so the time it takes is the time it adds to the iteration.
//!
//! Choices where the paper is silent: the model (the dense adaptation of Sec. 5.1 streams every
//! parameter, so the exponents are one per 48 parameters of the whole model; the spec names the
//! model); 48 exponents a negotiation packet (the op_max program packs one exponent per lane,
//! the same packet and pool as the data round); the pool sized by the 1 MB cap (Sec. 5.1). The
//! gradient is the libra-fig5 generator's for the worker (untouched blocks offer the minimum
//! exponent, -126).

use crate::sparse::SparseGen;
use inabench_ina::common::{AllReduceConfig, Setup, SetupNode, System};
use inabench_ina::switchml::SwitchMl;
use inabench_ina::tofino::TofinoModel;

/// Values per block: what one pass of the Tofino model aggregates (48 int32).
pub fn block_len() -> usize {
    (TofinoModel::PAPER.bytes_per_pass() / 4) as usize
}

/// Worker `w`'s block exponents for iteration `it` of a model of `params` parameters: the
/// generator's sparse gradient placed in the dense vector (its integer values scaled by 2^-30,
/// gradient-sized floats), one exponent per block of [`block_len`] parameters.
pub fn exponents(gen_: &SparseGen, params: u64, w: usize, it: u64) -> Vec<i32> {
    let b = block_len() as u64;
    let blocks = params.div_ceil(b) as usize;
    let mut e = vec![-126i32; blocks];
    for (k, v) in gen_.gradient(w, it) {
        let x = (f64::from(v) * 2f64.powi(-30)) as f32;
        let i = (k % params / b) as usize;
        e[i] = e[i].max(inabench_ina::bfp::block_exponent(&[x]));
    }
    e
}

/// The reference negotiation: the element-wise maximum of the workers' exponents.
pub fn reference_max(inputs: &[Vec<i32>]) -> Vec<i32> {
    let mut out = inputs.first().cloned().unwrap_or_default();
    for v in inputs.iter().skip(1) {
        for (a, x) in out.iter_mut().zip(v) {
            *a = (*a).max(*x);
        }
    }
    out
}

/// The SwitchML configuration of the negotiation all-reduce: `blocks` elements, max instead of
/// sum, the pool the memory cap allows (two shadow copies of 192 B a slot).
pub fn config(workers: usize, blocks: usize, memory_mb: f64, timeout_ns: u64) -> AllReduceConfig {
    let pool = ((memory_mb * 1048576.0) / (2.0 * 192.0))
        .floor()
        .clamp(1.0, 32767.0);
    AllReduceConfig {
        workers,
        elements: blocks,
        seed: 1,
        line_rate_bps: 100e9,
        mtu: 1024,
        timeout_ns,
        knobs: vec![("pool".into(), pool), ("op_max".into(), 1.0)],
    }
}

/// How many workers hold a result that differs from the reference maximum (or none).
pub fn wrong_results(nodes: &[SetupNode], want: &[i32]) -> usize {
    nodes
        .iter()
        .filter(|n| matches!(n, SetupNode::Worker(w) if w.result().as_deref() != Some(want)))
        .count()
}

/// What one negotiation run gave.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Negotiated {
    /// First worker's start to the last worker's result (virtual on sim, wall on mem), ns.
    pub duration_ns: u64,
    /// Workers whose agreed exponents differ from the element-wise maximum.
    pub wrong: usize,
    pub finished: bool,
    pub retransmissions: u64,
    /// The fabric that ran (`sim`, or the `mem` report's label).
    pub fabric: &'static str,
}

fn outcome(
    nodes: &[SetupNode],
    want: &[i32],
    duration_ns: u64,
    finished: bool,
    fabric: &'static str,
) -> Negotiated {
    let retransmissions = nodes
        .iter()
        .map(|n| match n {
            SetupNode::Worker(w) => w.stats().retransmissions,
            _ => 0,
        })
        .sum();
    Negotiated {
        duration_ns,
        wrong: wrong_results(nodes, want),
        finished,
        retransmissions,
        fabric,
    }
}

/// The negotiation's setup for `inputs` (SwitchML with `cfg`'s op_max knob, [`config`]) and the
/// exponents every worker must end with: what a driver runs. On `sim` the driver is experiment
/// machinery (`inabench_ina_run::drive`, called by the `libra.fig17` workload), so it is not
/// here: the workload runs this setup and reads the nodes back with [`sim_outcome`].
pub fn sim_setup(
    cfg: &AllReduceConfig,
    inputs: Vec<Vec<i32>>,
) -> Result<(Setup, Vec<i32>), crate::LibraError> {
    let want = reference_max(&inputs);
    Ok((SwitchMl.build_with(cfg, inputs)?, want))
}

/// The negotiation's outcome from its nodes after a run on `sim` (virtual time: the first
/// worker's start to the last worker's end).
pub fn sim_outcome(nodes: &[SetupNode], want: &[i32], finished: bool) -> Negotiated {
    let (mut start, mut end) = (u64::MAX, 0u64);
    for n in nodes {
        if let SetupNode::Worker(w) = n {
            let s = w.stats();
            start = start.min(s.start_ns);
            end = end.max(s.end_ns);
        }
    }
    outcome(nodes, want, end.saturating_sub(start), finished, "sim")
}

/// The negotiation on the in-process `mem` fabric (a thread per node, real time; the duration
/// is the wall time to the last worker's result).
pub fn run_mem(
    cfg: &AllReduceConfig,
    inputs: Vec<Vec<i32>>,
    deadline: std::time::Duration,
) -> Result<Negotiated, crate::LibraError> {
    let want = reference_max(&inputs);
    let setup = SwitchMl.build_with(cfg, inputs)?;
    let w = cfg.workers;
    let mut mem = inabench_fabric::Mem {
        mtu: cfg.mtu + 128,
        faults: inabench_fabric::fault::Faults::default(),
    };
    let limit_ns = u64::try_from(deadline.as_nanos()).unwrap_or(u64::MAX);
    let (nodes, rep) = crate::run_on(&mut mem, setup.into_nodes(), w, limit_ns)?;
    let dur = rep.nodes[..w].iter().map(|s| s.done_ns).max().unwrap_or(0);
    Ok(outcome(&nodes, &want, dur, rep.finished, rep.fabric))
}

/// The time (ns) this host takes to compute the block exponents of a dense gradient of
/// `params` floats: measured on a slice of up to 4M values and scaled linearly (the scan is
/// one pass over the values).
pub fn scan_ns(params: u64) -> u64 {
    let n = params.min(4 << 20) as usize;
    let mut g = inabench_rng::SplitMix64::derive(1, "libra/negotiation/scan");
    let dense: Vec<f32> = (0..n)
        .map(|_| (g.next_f64() * 2.0 - 1.0) as f32 * 1e-3)
        .collect();
    let b = block_len();
    let t = std::time::Instant::now();
    let mut acc = 0i64;
    for blk in dense.chunks(b) {
        acc += i64::from(inabench_ina::bfp::block_exponent(std::hint::black_box(blk)));
    }
    std::hint::black_box(acc);
    let ns = t.elapsed().as_nanos() as f64;
    (ns * params as f64 / n.max(1) as f64) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sparse::Task;

    fn inputs(workers: usize, params: u64) -> Vec<Vec<i32>> {
        let mut t = Task::named("se").unwrap();
        t.params = params;
        let g = SparseGen::new(t, 7).unwrap();
        (0..workers).map(|w| exponents(&g, params, w, 0)).collect()
    }

    #[test]
    fn exponents_bound_each_block() {
        let mut t = Task::named("se").unwrap();
        t.params = 480_000;
        let g = SparseGen::new(t, 3).unwrap();
        let e = exponents(&g, 480_000, 0, 0);
        assert_eq!(e.len(), 10_000);
        let mut touched = 0;
        for (k, v) in g.gradient(0, 0) {
            let x = (f64::from(v) * 2f64.powi(-30)) as f32;
            let blk = e[(k % 480_000 / 48) as usize];
            assert!(x.abs() < 2f32.powi(blk), "{x} not below 2^{blk}");
            touched += 1;
        }
        assert!(touched > 0);
        assert!(e.contains(&-126), "untouched blocks offer -126");
    }

    #[test]
    fn mem_negotiation_agrees_on_the_maximum() {
        let inp = inputs(3, 500_000);
        let cfg = config(3, inp[0].len(), 1.0, 1_000_000_000);
        let o = run_mem(&cfg, inp, std::time::Duration::from_secs(60)).unwrap();
        assert!(o.finished);
        assert_eq!(o.wrong, 0);
        assert_eq!(o.retransmissions, 0, "mem loses nothing");
        assert!(o.duration_ns > 0);
    }
}
