//! Float32 all-reduce through the systems' own protocol code, for training: each worker's vector
//! goes over a fabric (`mem`: a thread per node, real time; `sim`: virtual time) through ring
//! all-reduce, NetReduce (float32 sums at the accelerator) or SwitchML (block floating point), and
//! each worker gets back what its host stack delivered. `Local` is the reference: the exact sum in
//! f64, rounded once.

use inabench_fabric::fault::Faults;
use inabench_ina::RunError;
use inabench_ina::bfp;
use inabench_ina::common::{AllReduceConfig, FloatSum, Setup, SetupNode, System};
use inabench_ina::netreduce::NetReduce;
use inabench_ina::ring::RingAllReduce;
use inabench_ina::switchml::SwitchMl;
use inabench_ina::tofino::TofinoModel;

/// How gradients are aggregated: the exact local reference, or through a system whose
/// [`System::float_sum`] says how it sums float32.
#[derive(Clone, Copy)]
pub enum Aggregation {
    Local,
    Through(&'static dyn System),
}

impl PartialEq for Aggregation {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Aggregation::Local, Aggregation::Local) => true,
            (Aggregation::Through(a), Aggregation::Through(b)) => a.name() == b.name(),
            _ => false,
        }
    }
}

impl Eq for Aggregation {}

impl std::fmt::Debug for Aggregation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Aggregation {
    pub const RING: Aggregation = Aggregation::Through(&RingAllReduce);
    pub const NETREDUCE: Aggregation = Aggregation::Through(&NetReduce);
    pub const SWITCHML: Aggregation = Aggregation::Through(&SwitchMl);

    /// `local` (or `reference`), `ring` (the ring all-reduce's short name), or any system of
    /// [`inabench_ina::SYSTEMS`] that sums float32 ([`System::float_sum`]).
    pub fn parse(s: &str) -> Option<Aggregation> {
        match s {
            "local" | "reference" => Some(Aggregation::Local),
            "ring" => Some(Aggregation::RING),
            _ => inabench_ina::system(s)
                .filter(|sys| sys.float_sum().is_some())
                .map(Aggregation::Through),
        }
    }

    /// `local`, or the system's name.
    pub fn name(&self) -> &'static str {
        match self {
            Aggregation::Local => "local",
            Aggregation::Through(sys) => sys.name(),
        }
    }

    /// Whether the values are quantised to block floating point on the way (SwitchML): the
    /// result is within [`inabench_ina::bfp::error_bound`] of the sum, not exact.
    pub fn block_float(&self) -> bool {
        matches!(self, Aggregation::Through(sys) if sys.float_sum() == Some(FloatSum::BlockFloat))
    }
}

/// Where the aggregation runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fabric {
    Mem,
    Sim,
    /// Every node on its own UDP socket on 127.0.0.1, served by `inabench_fabric::udp::serve`
    /// (batched, event-driven host I/O) on a thread of this process: the frames cross the host's
    /// network stack, but the nodes share this process (the gradients are already here; shipping
    /// them to node processes is not done: a training step's inputs are each worker's
    /// gradient, computed in this process).
    Udp,
}

impl Fabric {
    pub fn parse(s: &str) -> Option<Fabric> {
        Some(match s {
            "mem" => Fabric::Mem,
            "sim" => Fabric::Sim,
            "udp" => Fabric::Udp,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Fabric::Mem => "mem",
            Fabric::Sim => "sim",
            Fabric::Udp => "udp",
        }
    }
}

/// What one all-reduce did.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Each worker's result.
    pub results: Vec<Vec<f32>>,
    /// Frames the workers sent.
    pub frames: u64,
    /// Fabric time of the all-reduce (virtual on sim, wall on mem), ns.
    pub duration_ns: u64,
}

fn config(workers: usize, elements: usize, float: bool, extra: &[(&str, f64)]) -> AllReduceConfig {
    let mut knobs = vec![
        ("float".to_string(), if float { 1.0 } else { 0.0 }),
        ("window".to_string(), 2.0),
        ("msg_packets".to_string(), 32.0),
    ];
    // a knob given in `extra` replaces the default (a system reads the first of a name)
    for (k, v) in extra {
        match knobs.iter_mut().find(|(name, _)| name == k) {
            Some(slot) => slot.1 = *v,
            None => knobs.push((k.to_string(), *v)),
        }
    }
    AllReduceConfig {
        workers,
        elements,
        seed: 0,
        line_rate_bps: 100e9,
        mtu: 1024,
        timeout_ns: 50_000_000,
        knobs,
    }
}

/// Run a built setup to completion on one of the suite's fabrics (the [`inabench_fabric::Fabric`]
/// trait): the nodes and the fabric time until the last worker was done (ns).
fn run_nodes(
    sys: &'static str,
    setup: Setup,
    cfg: &AllReduceConfig,
    fabric: Fabric,
) -> Result<(Vec<SetupNode>, u64), RunError> {
    use inabench_fabric::{FabricChoice, Until, udp::IoModel};
    let nodes = setup.into_nodes();
    let mtu = cfg.mtu + 128;
    // virtual time on sim; wall time elsewhere
    let (choice, limit_ns) = match fabric {
        Fabric::Sim => (
            FabricChoice::Sim {
                link: crate::drive::sim_link(cfg),
                switch: cfg.workers as inabench_fabric::NodeId,
            },
            600_000_000_000,
        ),
        Fabric::Mem => (FabricChoice::Mem { mtu }, 120_000_000_000),
        Fabric::Udp => (
            FabricChoice::Udp {
                mtu,
                io: IoModel::Event,
            },
            120_000_000_000,
        ),
    };
    let mut f = choice.build::<SetupNode>(Faults::default(), Vec::new());
    let until = Until::workers(cfg.workers, nodes.len(), limit_ns);
    let (nodes, rep) = f.run(nodes, &until)?;
    if !rep.finished {
        return Err(RunError::Unfinished { system: sys });
    }
    Ok((nodes, rep.time_ns))
}

/// Run a built setup to completion; each worker's result as raw i32.
fn run(
    sys: &'static str,
    setup: Setup,
    cfg: &AllReduceConfig,
    fabric: Fabric,
) -> Result<(Vec<Vec<i32>>, u64, u64), RunError> {
    let w = cfg.workers;
    let (nodes, dur) = run_nodes(sys, setup, cfg, fabric)?;
    let mut results = Vec::with_capacity(w);
    let mut frames = 0;
    for n in &nodes {
        if let SetupNode::Worker(x) = n {
            frames += x.stats().packets_tx;
            results.push(x.result().ok_or(RunError::NoResult { system: sys })?);
        }
    }
    Ok((results, frames, dur))
}

/// One all-reduce of `sys` as `cfg` builds it (the system's own seeded inputs) on `fabric`:
/// the fabric time (virtual on sim, wall on mem and udp), ns.
pub fn run_system(
    sys: &dyn System,
    cfg: &AllReduceConfig,
    fabric: Fabric,
) -> Result<u64, RunError> {
    let setup = sys.build(cfg)?;
    let (nodes, d) = run_nodes(sys.name(), setup, cfg, fabric)?;
    if nodes
        .iter()
        .any(|n| matches!(n, SetupNode::Worker(w) if !w.check(cfg)))
    {
        return Err(RunError::WrongResult { system: sys.name() });
    }
    Ok(d)
}

/// [`run_system`] on the `mem` fabric, with that fabric's own report (each node's CPU, each
/// serving thread's CPU and parks): for diagnostics of the fabric's overhead (the probe prints
/// it). The time is the same as [`run_system`]'s: when the last worker was done.
pub fn run_system_mem(
    sys: &dyn System,
    cfg: &AllReduceConfig,
) -> Result<(u64, inabench_fabric::mem::MemReport), RunError> {
    let setup = sys.build(cfg)?;
    let workers = cfg.workers;
    let nodes = setup.into_nodes();
    let until = inabench_fabric::Until::workers(workers, nodes.len(), 120_000_000_000);
    let mut mem = inabench_fabric::Mem {
        mtu: cfg.mtu + 128,
        faults: Faults::default(),
    };
    let (nodes, _, rep) = mem.run_detailed(nodes, &until)?;
    if !rep.finished {
        return Err(RunError::Unfinished { system: sys.name() });
    }
    if nodes
        .iter()
        .any(|n| matches!(n, SetupNode::Worker(w) if !w.check(cfg)))
    {
        return Err(RunError::WrongResult { system: sys.name() });
    }
    let done = rep.nodes.iter().take(workers).map(|n| n.done_ns).max();
    Ok((done.unwrap_or(rep.wall_ns), rep))
}

fn through(
    sys: &dyn System,
    inputs: Vec<Vec<i32>>,
    float: bool,
    extra: &[(&str, f64)],
    fabric: Fabric,
) -> Result<(Vec<Vec<i32>>, u64, u64), RunError> {
    let workers = inputs.len();
    let elements = inputs.first().map_or(0, Vec::len);
    let cfg = config(workers, elements, float, extra);
    let setup = sys.build_with(&cfg, inputs)?;
    run(sys.name(), setup, &cfg, fabric)
}

fn bits(v: &[f32]) -> Vec<i32> {
    v.iter().map(|x| x.to_bits() as i32).collect()
}

fn floats(v: &[i32]) -> Vec<f32> {
    v.iter().map(|x| f32::from_bits(*x as u32)).collect()
}

/// All-reduce (sum) of `inputs` (one vector per worker, equal lengths), window 2 of 32-packet
/// messages.
pub fn allreduce_f32(
    agg: Aggregation,
    inputs: &[Vec<f32>],
    fabric: Fabric,
) -> Result<Outcome, RunError> {
    allreduce_f32_with(agg, inputs, fabric, &[])
}

/// [`allreduce_f32`] with the systems' knobs (`window`, `msg_packets`, ...) overridden by
/// `knobs`.
pub fn allreduce_f32_with(
    agg: Aggregation,
    inputs: &[Vec<f32>],
    fabric: Fabric,
    knobs: &[(&str, f64)],
) -> Result<Outcome, RunError> {
    let workers = inputs.len();
    let elements = inputs.first().map_or(0, Vec::len);
    if workers < 2 || inputs.iter().any(|v| v.len() != elements) || elements == 0 {
        return Err(RunError::BadInputs);
    }
    match agg {
        Aggregation::Local => {
            let sum: Vec<f32> = (0..elements)
                .map(|i| inputs.iter().map(|v| f64::from(v[i])).sum::<f64>() as f32)
                .collect();
            Ok(Outcome {
                results: vec![sum; workers],
                frames: 0,
                duration_ns: 0,
            })
        }
        Aggregation::Through(sys) if sys.float_sum() == Some(FloatSum::Native) => {
            let (r, frames, d) = through(
                sys,
                inputs.iter().map(|v| bits(v)).collect(),
                true,
                knobs,
                fabric,
            )?;
            Ok(Outcome {
                results: r.iter().map(|v| floats(v)).collect(),
                frames,
                duration_ns: d,
            })
        }
        Aggregation::Through(sys) if sys.float_sum() == Some(FloatSum::BlockFloat) => {
            let block = (TofinoModel::PAPER.bytes_per_pass() / 4) as usize;
            let blocks = elements.div_ceil(block);
            // 1. exponent negotiation: the switch keeps each block's maximum
            let exps: Vec<Vec<i32>> = inputs
                .iter()
                .map(|v| v.chunks(block).map(bfp::block_exponent).collect())
                .collect();
            let mut max_knobs = knobs.to_vec();
            max_knobs.push(("op_max", 1.0));
            let (agreed, f1, d1) = through(sys, exps, false, &max_knobs, fabric)?;
            // 2. integer aggregation of the scaled values
            let q: Vec<Vec<i32>> = inputs
                .iter()
                .zip(&agreed)
                .map(|(v, e)| {
                    v.iter()
                        .enumerate()
                        .map(|(i, x)| bfp::quantise(*x, e[i / block], workers))
                        .collect()
                })
                .collect();
            let (sums, f2, d2) = through(sys, q, false, knobs, fabric)?;
            let results = sums
                .iter()
                .zip(&agreed)
                .map(|(s, e)| {
                    s.iter()
                        .enumerate()
                        .map(|(i, x)| bfp::dequantise(*x, e[i / block], workers))
                        .collect()
                })
                .collect();
            debug_assert_eq!(agreed.first().map_or(0, Vec::len), blocks);
            Ok(Outcome {
                results,
                frames: f1 + f2,
                duration_ns: d1 + d2,
            })
        }
        Aggregation::Through(sys) => Err(RunError::NoFloatSum(sys.name())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(workers: usize, n: usize) -> Vec<Vec<f32>> {
        (0..workers)
            .map(|w| {
                (0..n)
                    .map(|i| ((i as f32 * 0.013 + w as f32).sin()) * 10f32.powi((i % 7) as i32 - 3))
                    .collect()
            })
            .collect()
    }

    #[test]
    fn every_aggregation_agrees_with_the_reference() {
        let x = inputs(4, 5_000);
        let exact: Vec<f64> = (0..5_000)
            .map(|i| x.iter().map(|v| f64::from(v[i])).sum())
            .collect();
        // f32 sums of 4 terms: a few ulps of the terms' magnitudes
        let mag: Vec<f64> = (0..5_000)
            .map(|i| x.iter().map(|v| f64::from(v[i]).abs()).sum())
            .collect();
        for agg in [
            Aggregation::Local,
            Aggregation::RING,
            Aggregation::NETREDUCE,
            Aggregation::SWITCHML,
        ] {
            for fabric in [Fabric::Sim, Fabric::Mem, Fabric::Udp] {
                let out = allreduce_f32(agg, &x, fabric).expect("all-reduce");
                assert_eq!(out.results.len(), 4);
                assert!(
                    out.results.iter().all(|r| r == &out.results[0]),
                    "{agg:?}: every worker gets the same bits"
                );
                for (i, got) in out.results[0].iter().enumerate() {
                    let want = exact[i];
                    // float sums: a few ulps; block floating point: its documented bound
                    let block = &x
                        .iter()
                        .map(|v| &v[i / 48 * 48..((i / 48 + 1) * 48).min(5_000)])
                        .collect::<Vec<_>>();
                    let e = block
                        .iter()
                        .map(|b| bfp::block_exponent(b))
                        .max()
                        .unwrap_or(-126);
                    let tol = if agg.block_float() {
                        bfp::error_bound(e, 4) + mag[i] * 1e-6
                    } else {
                        mag[i] * 4.0 * f64::from(f32::EPSILON)
                    };
                    assert!(
                        (f64::from(*got) - want).abs() <= tol,
                        "{agg:?} {fabric:?} {i}: {got} vs {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_wrong_vector_length_is_an_error() {
        let mut x = inputs(3, 100);
        x[1].pop();
        assert!(allreduce_f32(Aggregation::RING, &x, Fabric::Sim).is_err());
    }
}
