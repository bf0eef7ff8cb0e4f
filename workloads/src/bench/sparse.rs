//! `bench.sparse`: one iteration of sparse gradients (Libra's regime) for every aggregation the
//! suite has, at a fixed model size with the gradients' density, their skew and Libra's hot-key
//! table swept. Spec: `experiments/bench/sparse.yaml`.
//!
//! The gradients: the Libra crate's generator ([`inabench_libra::sparse::SparseGen`]): a worker's
//! gradient is the distinct rows its `batch` samples of `features` Zipf(`zipf_s`) draws touch
//! over a model of `model_params` rows, each with an integer value in [-2^20, 2^20). Every
//! system of a point gets the same gradients (the data seed is the repetition's, as libra-fig12's
//! are) and the same exact sums check every worker: the sparse sum of every touched key.
//!
//! - `libra` (the Libra crate, [`inabench_libra::aggregation`]): the hot keys (the top
//!   `libra__hot_keys` by sampled frequency, Libra's identification: an 8% sample of
//!   `libra__identify_pushes` pushes of 1,000 samples) aggregated in the switch's registers in
//!   Algorithm 1 packets of 24 pairs (the 192-byte limit of the Tofino model), the cold keys at
//!   one parameter server; `ps_lite`: every pair at the server. Each worker's result (its
//!   touched hot keys' sums and its own cold keys' sums) is checked against the exact sums. Host
//!   costs: the host profile's Libra table (`costs.libra_*`), as libra-fig12 prices them.
//! - every all-reduce system of [`inabench_ina::SYSTEMS`], which cannot take sparse input:
//!   the dense equivalent, an all-reduce of the whole model (`model_params` int32) with each
//!   worker's gradient written into it (zero elsewhere), checked against the sparse sum made
//!   dense. A system that takes no external inputs ([`inabench_ina::common::System::build_with`])
//!   sums its own generated values of the same size instead (`own_values` = 1), checked against
//!   their exact sum: no system here compresses, so its time does not depend on the values.
//!
//! The cell's time: first packet of any worker to the last worker holding its result (virtual
//! time). Nothing is timed while the run runs; a point is a function of the spec, the host
//! profile and the seed.

use super::allreduce::{Given, config_with, refuse, run_dense};
use crate::libra::aggregation::host_costs;
use crate::libra::common::identify_hot;
use inabench_core::{Fidelity, PointCtx, Workload, WorkloadError};
use inabench_libra::aggregation::{count_ops, inputs, run_sim};
use inabench_libra::layout::{Placement, pairs_per_packet};
use inabench_libra::proto::{Config, Inputs};
use inabench_libra::sparse::{SparseGen, Task};
use std::collections::HashMap;

pub struct Sparse;

/// The sparse aggregations of the Libra crate, by the name specs use, and whether the switch
/// keeps hot keys: Libra (hot keys in the switch, cold ones at the parameter server) and
/// PS-lite (a parameter server for every pair: the same worker and server code).
const SPARSE: [(&str, bool); 2] = [("libra", true), ("ps_lite", false)];

/// The sparse aggregations, then every system of [`inabench_ina::SYSTEMS`] in list order.
pub fn system_names() -> &'static [&'static str] {
    static NAMES: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| {
        SPARSE
            .iter()
            .map(|(n, _)| *n)
            .chain(inabench_ina::SYSTEMS.iter().map(|s| s.name()))
            .collect()
    })
}

fn invalid(e: impl std::fmt::Display) -> WorkloadError {
    WorkloadError::Invalid(e.to_string())
}

/// The point's model: `model_params` rows, Zipf exponent `zipf_s`, `features` rows a sample,
/// `batch` samples a worker's mini-batch.
fn task(ctx: &PointCtx<'_>) -> Result<Task, WorkloadError> {
    let count = |k: &str| -> Result<u32, WorkloadError> {
        u32::try_from(ctx.positive_count(k)?)
            .map_err(|_| WorkloadError::BadParam(format!("`{k}` does not fit 32 bits")))
    };
    let params = ctx.positive_count("model_params")? as u64;
    if params > u64::from(u32::MAX) {
        return Err(WorkloadError::BadParam(
            "`model_params`: a key must fit 32 bits (Libra's packet format)".into(),
        ));
    }
    Ok(Task {
        name: "bench",
        params,
        zipf_s: ctx.param("zipf_s")?,
        features: count("features")?,
        batch: count("batch")?,
        paper_hot: 0,
    })
}

impl Workload for Sparse {
    fn id(&self) -> &'static str {
        "bench.sparse"
    }

    fn fidelities(&self) -> &'static [Fidelity] {
        &[Fidelity::Simulated]
    }

    fn fabric(&self, _f: Fidelity) -> &'static str {
        "sim"
    }

    fn systems(&self) -> Option<&'static [&'static str]> {
        Some(system_names())
    }

    fn run(&self, ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
        let task = task(ctx)?;
        let workers = ctx.positive_count("workers")?;
        // the same gradients for every system of a point: the repetition's data seed
        let data_seed = 1 + u64::from(ctx.repetition);
        let gen_ = SparseGen::new(task.clone(), data_seed).map_err(invalid)?;
        // every worker's pairs by key (no hot set: all are keys, as PS-lite pushes them)
        let all = inputs(&gen_, &HashMap::new(), workers, false, false).map_err(invalid)?;
        let pairs: u64 = all.iter().map(|(h, c)| (h.len() + c.len()) as u64).sum();
        ctx.record_if_declared(
            "density",
            pairs as f64 / workers as f64 / task.params as f64 * 100.0,
        );
        let name = ctx.system().to_string();
        if let Some((_, libra)) = SPARSE.iter().find(|(n, _)| *n == name) {
            return sparse_cell(ctx, &task, &gen_, workers, *libra, pairs, data_seed);
        }
        let sys = inabench_ina::system(&name).ok_or_else(|| {
            WorkloadError::Invalid(format!(
                "`{name}` is neither a sparse aggregation of the Libra crate nor a system of inabench_ina::SYSTEMS"
            ))
        })?;
        let elements = task.params as usize;
        let cfg = config_with(ctx, sys, elements)?;
        let given = dense(&all, elements);
        run_dense(ctx, sys, &cfg, Some(given))
    }
}

/// Each worker's gradient written into the whole model (zero where it touched nothing), and
/// their exact sum.
fn dense(all: &Inputs, elements: usize) -> Given {
    let mut want = vec![0i32; elements];
    let inputs = all
        .iter()
        .map(|(hot, cold)| {
            let mut v = vec![0i32; elements];
            for &(k, x) in hot.iter().chain(cold) {
                v[k as usize] = x;
                want[k as usize] = want[k as usize].wrapping_add(x);
            }
            v
        })
        .collect();
    Given { inputs, want }
}

/// A knob of the point's system: the parameter `<system>__<knob>`.
fn knob(ctx: &PointCtx<'_>, name: &str) -> Result<f64, WorkloadError> {
    let system = ctx.system().to_string();
    ctx.param(&format!("{system}__{name}"))
}

/// Libra or PS-lite on the Libra crate's star (100 Gbps, 0.5 us links, as the spec's), priced
/// by the host profile's Libra table; every worker's results checked against the exact sums.
fn sparse_cell(
    ctx: &mut PointCtx<'_>,
    task: &Task,
    gen_: &SparseGen,
    workers: usize,
    libra: bool,
    pairs: u64,
    data_seed: u64,
) -> Result<(), WorkloadError> {
    let cfg = match libra_config(ctx, workers, libra) {
        Ok(cfg) => cfg,
        Err(e) => return e.into_cell(ctx),
    };
    let (hot, placement) = if libra {
        let k = knob(ctx, "hot_keys")? as usize;
        let registers = knob(ctx, "registers")? as usize;
        // Libra's identification (Sec. 3.3): a sample of a training dataset of pushes of 1,000
        // samples, the same model and keys; the top k by sampled frequency
        let id_task = Task {
            batch: 1000,
            ..task.clone()
        };
        let id_gen = SparseGen::new(id_task, data_seed).map_err(invalid)?;
        let hot = identify_hot(
            &id_gen,
            knob(ctx, "identify_pushes")? as u64,
            knob(ctx, "sampling_rate")?,
            k,
            data_seed,
        )?;
        let placement = Placement::heat(hot.len().max(1), registers).map_err(invalid)?;
        (hot, Some(placement))
    } else {
        (HashMap::new(), None)
    };
    let n_hot = hot.len().max(1);
    let inp = inputs(gen_, &hot, workers, libra, false).map_err(invalid)?;
    let hot_pairs: u64 = inp.iter().map(|(h, _)| h.len() as u64).sum();
    if libra {
        ctx.record_if_declared("hot_share", hot_pairs as f64 / pairs.max(1) as f64 * 100.0);
    }
    run_libra_crate(ctx, &cfg, &inp, n_hot, placement)?;
    Ok(())
}

/// Why the Libra crate cannot be configured for a point: a point it cannot run (the cell is
/// refused with the sentence) or a parameter the spec got wrong (the point fails).
#[derive(Debug, thiserror::Error)]
pub(crate) enum LibraConfigError {
    /// The star's rate is not the one the crate's driver runs: the cell is refused.
    #[error(
        "the Libra crate's driver runs its star at 100 Gbps only, not {0} Gbps (inabench_libra::aggregation)"
    )]
    Rate(f64),
    /// A knob missing or malformed.
    #[error(transparent)]
    Param(#[from] WorkloadError),
}

impl LibraConfigError {
    /// The cell of a point the crate cannot be configured for: refused with the sentence where
    /// the point is one it cannot run, the parameter's error otherwise.
    pub(crate) fn into_cell(self, ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
        match self {
            LibraConfigError::Param(e) => Err(e),
            refused => refuse(ctx, refused.to_string()),
        }
    }
}

/// The Libra crate's configuration of the point's system (`libra` or `ps_lite`) from its knobs
/// (`<system>__window`, `__timeout_us`, `__server_pairs_per_packet`), refused
/// ([`LibraConfigError::Rate`]) unless the star runs at the 100 Gbps the crate's driver runs.
pub(crate) fn libra_config(
    ctx: &PointCtx<'_>,
    workers: usize,
    libra: bool,
) -> Result<Config, LibraConfigError> {
    let rate = ctx.param("line_rate_gbps").unwrap_or(100.0);
    if rate != 100.0 {
        return Err(LibraConfigError::Rate(rate));
    }
    Ok(Config {
        workers,
        libra,
        window: knob(ctx, "window")? as usize,
        rto_ns: (knob(ctx, "timeout_us")? * 1e3) as u64,
        hot_cap: pairs_per_packet(&inabench_ina::tofino::TofinoModel::PAPER),
        cold_cap: knob(ctx, "server_pairs_per_packet")? as usize,
        dedup_all: false,
        float: false,
    })
}

/// One iteration of the Libra crate's aggregation of `inp` on its star, its hosts priced by the
/// host profile's Libra table over the frames and pairs each role handles in a lossless run of
/// the same inputs; every worker's results checked against the exact sums; the cell recorded
/// (`time`). Returns the iteration's time, ns.
pub(crate) fn run_libra_crate(
    ctx: &mut PointCtx<'_>,
    cfg: &Config,
    inp: &Inputs,
    n_hot: usize,
    placement: Option<Placement>,
) -> Result<f64, WorkloadError> {
    let workers = cfg.workers;
    let counts = count_ops(cfg, inp, n_hot, placement.clone())
        .map_err(invalid)?
        .ok_or_else(|| {
            invalid("the lossless iteration that counts the hosts' operations did not finish within 120 s of virtual time")
        })?;
    let costs = counts.per_frame_ns(&host_costs(ctx)?);
    let faults = crate::fabric::faults(ctx)?;
    let o = run_sim(cfg, inp, n_hot, placement, costs, faults).map_err(invalid)?;
    ctx.record("refused", 0.0);
    ctx.record("wrong_workers", o.wrong as f64);
    ctx.record_if_declared("retransmissions", o.retransmissions as f64);
    if o.wrong > 0 {
        return Err(WorkloadError::WrongResult(format!(
            "{} of {workers} workers got sums that differ from the exact sparse sums",
            o.wrong
        )));
    }
    if !o.finished {
        return Err(invalid(
            "the iteration did not finish within 120 s of virtual time",
        ));
    }
    let time_ns = o.duration_ns as f64;
    ctx.record_in("time", time_ns, "ns")?;
    Ok(time_ns)
}
