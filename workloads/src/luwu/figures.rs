//! The workloads of LuWu's 100B-scale figures, one [`Figure`] each: `luwu_model.fig2`, `.fig3`,
//! `.fig10` (functional), `.fig11`, `.fig12`, `.fig13`, `.fig14`, `.fig15` (modelled and
//! emulated, the emulated class in [`super::fig15_emulated`]) and `.fig17` (modelled). They serve
//! the specs luwu-fig2, luwu-fig3, luwu-fig10 to luwu-fig15 and luwu-fig17.
//!
//! Every modelled point first checks the memory accounting: a system that cannot hold the model
//! at the point's micro-batch records nothing there (and says so in the log). Optional spec
//! parameters override the model inputs: `gpu_efficiency_model` (`end_to_end`, the default, or
//! `gemm`), `end_to_end_efficiency`, `gemm_efficiency` (the achievable fraction of the GPU peak
//! in the GEMM model, to sweep the sensitivity), `gpu_peak_tflops`, `nccl_serialised_fraction`,
//! `grad_wire_bytes`, `ina_payload_bytes`, `node_page_cache` (1 or 0),
//! `stage3_prefetch_bucket_size`, `stage3_max_live_parameters`, `zi_grads_on_nvme` (1 or 0), `gpu_reserved_gb`, `adam_per_core`
//! (params/s; default the declared [`hw::XEON_ADAM_PER_CORE`]: nothing is timed on this host).
//! TFLOPS are recorded in two conventions: `tflops` (model FLOPs, no recomputation) and
//! `tflops_hw` (with the recomputed forward, DeepSpeed-Chat's and Megatron-LM's convention).

use inabench_core::event::LogLevel;
use inabench_core::{Fidelity, PointCtx, Scalar, Workload, WorkloadError};
use inabench_luwu_model::iter::{self, Breakdown, Config};
use inabench_luwu_model::memory::{self, Testbed};
use inabench_luwu_model::shapes::{self, Shape};
use inabench_luwu_model::{ModelError, System, hw};

/// The micro-batch sweep of the peaks (the specs' full grids: 1 to 32).
pub const SWEEP: [usize; 6] = [1, 2, 4, 8, 16, 32];

fn invalid(e: ModelError) -> WorkloadError {
    WorkloadError::Invalid(e.to_string())
}

fn str_param(ctx: &PointCtx<'_>, name: &str) -> Result<String, WorkloadError> {
    match ctx.point.params.get(name) {
        Some(Scalar::Str(s)) => Ok(s.clone()),
        _ => Err(WorkloadError::Param(name.to_string())),
    }
}

fn opt_param(ctx: &PointCtx<'_>, name: &str) -> Option<f64> {
    ctx.param(name).ok()
}

/// The model: `model` (a Table 2 id) or `layers`/`heads`/`hidden`.
fn shape(ctx: &PointCtx<'_>) -> Result<(String, Shape), WorkloadError> {
    if let Ok(id) = str_param(ctx, "model") {
        let (_, m) = shapes::by_id(&id).map_err(invalid)?;
        return Ok((id, m));
    }
    let m = Shape {
        layers: ctx.positive_count("layers")?,
        heads: ctx.positive_count("heads")?,
        hidden: ctx.positive_count("hidden")?,
    };
    Ok((format!("{}x{}x{}", m.layers, m.heads, m.hidden), m))
}

fn system(ctx: &PointCtx<'_>) -> Result<System, WorkloadError> {
    System::parse(ctx.system()).map_err(invalid)
}

/// The iteration model's inputs at `workers` and micro-batch `b`, from the spec's parameters.
fn config(ctx: &mut PointCtx<'_>, workers: usize, b: f64) -> Result<Config, WorkloadError> {
    let mut c = Config::paper(
        workers,
        b,
        opt_param(ctx, "adam_per_core").unwrap_or(hw::XEON_ADAM_PER_CORE),
    );
    if let Some(v) = opt_param(ctx, "seq_len") {
        c.seq_len = v;
    }
    if let Some(v) = opt_param(ctx, "net_gbps") {
        c.net_gbps = v;
    }
    if let Some(v) = opt_param(ctx, "ssd_bw_GBps") {
        // the aggregate of LuWu's node, and of the baseline's workers together (Sec. 4.1, 4.4)
        c.node_ssd_gbps = v;
        c.worker_ssd_gbps = v / 8.0;
    }
    if let Some(v) = opt_param(ctx, "gpu_peak_tflops") {
        c.peak_tflops = v;
    }
    if let Some(v) = opt_param(ctx, "gemm_efficiency") {
        c.gemm_efficiency = v;
    }
    if let Some(v) = opt_param(ctx, "nccl_serialised_fraction") {
        c.nccl_serialised_fraction = v;
    }
    if let Some(v) = opt_param(ctx, "grad_wire_bytes") {
        c.grad_wire_bytes = v;
    }
    if let Some(v) = opt_param(ctx, "ina_payload_bytes") {
        c.ina_payload = v;
    }
    match ctx.text("gpu_efficiency_model").ok().as_deref() {
        None | Some("end_to_end") => {
            if let Some(v) = opt_param(ctx, "end_to_end_efficiency") {
                c.end_to_end_efficiency = Some(v);
            }
        }
        Some("gemm") => c.end_to_end_efficiency = None,
        Some(other) => {
            return Err(WorkloadError::Invalid(format!(
                "gpu_efficiency_model is `end_to_end` or `gemm`, not `{other}`"
            )));
        }
    }
    if let Some(v) = opt_param(ctx, "optimizer_node_cpu_mem_gb") {
        c.node_dram_bytes = v * 1e9;
    }
    if let Some(v) = opt_param(ctx, "node_page_cache") {
        c.node_page_cache = v != 0.0;
    }
    if let Some(v) = opt_param(ctx, "stage3_prefetch_bucket_size") {
        c.prefetch_bucket_params = v;
    }
    if let Some(v) = opt_param(ctx, "stage3_max_live_parameters") {
        c.max_live_params = v;
    }
    if let Some(v) = opt_param(ctx, "zi_grads_on_nvme") {
        c.zi_grads_on_nvme = v != 0.0;
    }
    Ok(c)
}

pub(crate) fn testbed(ctx: &PointCtx<'_>, workers: usize) -> Testbed {
    let mut tb = Testbed::paper(workers);
    if let Some(v) = opt_param(ctx, "gpu_mem_gb") {
        tb.gpu_mem = v * 1e9;
    }
    if let Some(v) = opt_param(ctx, "cpu_mem_gb") {
        tb.cpu_mem = v * 1e9;
    }
    if let Some(v) = opt_param(ctx, "seq_len") {
        tb.seq_len = v;
    }
    let ssd_tb = opt_param(ctx, "ssd_tb").unwrap_or(3.84) * 1e12;
    if let Some(v) = opt_param(ctx, "ssds_per_worker") {
        tb.worker_ssd = v * ssd_tb;
    }
    if let Some(v) = opt_param(ctx, "ssds_optimizer_node") {
        tb.node_ssd = v * ssd_tb;
    }
    if let Some(v) = opt_param(ctx, "optimizer_node_cpu_mem_gb") {
        tb.node_cpu_mem = v * 1e9;
    }
    if let Some(v) = opt_param(ctx, "gpu_reserved_gb") {
        tb.gpu_reserved = v * 1e9;
    }
    tb
}

/// The breakdown of `sys` if it can hold the model at micro-batch `b`; `None` (logged) if not.
fn run_if_fits(
    ctx: &mut PointCtx<'_>,
    sys: System,
    m: &Shape,
    tb: &Testbed,
    c: &Config,
    name: &str,
) -> Result<Option<Breakdown>, WorkloadError> {
    // the paper's stated configuration of its baseline: ZeRO-Infinity's largest trainable
    // micro-batch at 175B is 16 (luwu Sec. 2.1). This memory accounting reaches it by itself
    // since the backward's gradient tensors are counted (memory.rs: 40.15 GB of 40 at 32), but
    // by 0.15 GB, so the stated 16 stays the configuration here (fig12's largest micro-batch,
    // at_max_batch, reads the accounting alone and also gets 16)
    if sys == System::ZeroInfinity
        && let Some(cap) = opt_param(ctx, "zero_infinity_max_micro_batch_175b")
        && *m == shapes::by_id("opt_175b").map_err(invalid)?.1
        && c.micro_batch > cap
    {
        ctx.log(
            LogLevel::Info,
            format!(
                "ZeroInfinity does not train {name} at micro-batch {}: the paper's largest is {cap} \
                 (zero_infinity_max_micro_batch_175b)",
                c.micro_batch
            ),
        );
        return Ok(None);
    }
    let pl = memory::place(sys, m, c.micro_batch, tb).map_err(invalid)?;
    if let Some(why) = pl.overflow() {
        ctx.log(
            LogLevel::Info,
            format!(
                "{sys:?} cannot train {name} at micro-batch {}: {why}",
                c.micro_batch
            ),
        );
        return Ok(None);
    }
    Ok(Some(iter::iteration(sys, m, c).map_err(invalid)?))
}

/// The highest TFLOPS over [`SWEEP`] among the micro-batches that fit, or `None`: (model
/// FLOPs, hardware FLOPs), each its own maximum.
fn peak(
    ctx: &mut PointCtx<'_>,
    sys: System,
    m: &Shape,
    tb: &Testbed,
    workers: usize,
    name: &str,
) -> Result<Option<(f64, f64)>, WorkloadError> {
    let mut best: Option<(f64, f64)> = None;
    for b in SWEEP {
        let c = config(ctx, workers, b as f64)?;
        if let Some(bd) = run_if_fits(ctx, sys, m, tb, &c, name)? {
            let (t, h) = (bd.tflops(), bd.tflops_hw());
            best = Some(best.map_or((t, h), |(x, y)| (x.max(t), y.max(h))));
        }
    }
    Ok(best)
}

fn wrong_system(fig: &str, sys: System) -> WorkloadError {
    WorkloadError::Invalid(format!("{fig} has no model for {sys:?}"))
}

/// Which figure a [`Figure`] workload runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Fig2,
    Fig3,
    Fig10,
    Fig11,
    Fig12,
    Fig13,
    Fig14,
    Fig15,
    Fig17,
}

/// One figure's workload.
pub struct Figure {
    pub id: &'static str,
    pub kind: Kind,
    pub systems: &'static [&'static str],
}

/// All of them.
pub fn all() -> Vec<Figure> {
    use Kind::*;
    vec![
        Figure {
            id: "luwu_model.fig2",
            kind: Fig2,
            systems: &["zero_infinity"],
        },
        Figure {
            id: "luwu_model.fig3",
            kind: Fig3,
            systems: &["zero_infinity", "luwu"],
        },
        Figure {
            id: "luwu_model.fig10",
            kind: Fig10,
            systems: &["luwu", "zero_infinity", "zero3", "switchml"],
        },
        Figure {
            id: "luwu_model.fig11",
            kind: Fig11,
            systems: &["luwu", "zero_infinity", "zero3", "switchml"],
        },
        Figure {
            id: "luwu_model.fig12",
            kind: Fig12,
            systems: &["luwu", "zero_infinity", "zero3"],
        },
        Figure {
            id: "luwu_model.fig13",
            kind: Fig13,
            systems: &["luwu", "zero_infinity_sharp"],
        },
        Figure {
            id: "luwu_model.fig14",
            kind: Fig14,
            systems: &["luwu", "zero_infinity"],
        },
        Figure {
            id: "luwu_model.fig15",
            kind: Fig15,
            systems: &["luwu"],
        },
        Figure {
            id: "luwu_model.fig17",
            kind: Fig17,
            systems: &["luwu", "zero_offload"],
        },
    ]
}

impl Workload for Figure {
    fn id(&self) -> &'static str {
        self.id
    }

    fn fidelities(&self) -> &'static [Fidelity] {
        match self.kind {
            Kind::Fig10 => &[Fidelity::Functional],
            Kind::Fig15 => &[Fidelity::Modelled, Fidelity::Emulated],
            _ => &[Fidelity::Modelled],
        }
    }

    fn fabric(&self, f: Fidelity) -> &'static str {
        match f {
            Fidelity::Emulated => "files",
            _ => "model",
        }
    }

    fn systems(&self) -> Option<&'static [&'static str]> {
        Some(self.systems)
    }

    fn run(&self, ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
        if self.kind != Kind::Fig10 && ctx.repetition == 0 && !ctx.warmup {
            let r = opt_param(ctx, "adam_per_core").unwrap_or(hw::XEON_ADAM_PER_CORE);
            ctx.log(
                LogLevel::Info,
                format!(
                    "CPU Adam, one core: {r:.3e} params/s (declared, not timed here; every CPU's \
                     DRAM bound is lower, see inabench_luwu_model::hw::XEON_ADAM_PER_CORE)"
                ),
            );
        }
        match self.kind {
            Kind::Fig2 => fig2(ctx)?,
            Kind::Fig3 => fig3(ctx)?,
            Kind::Fig10 => fig10(ctx)?,
            Kind::Fig11 => fig11(ctx)?,
            Kind::Fig12 => fig12(ctx)?,
            Kind::Fig13 => fig13(ctx)?,
            Kind::Fig14 => fig14(ctx)?,
            Kind::Fig15 => {
                if ctx.fidelity == Fidelity::Emulated {
                    super::fig15_emulated::fig15(ctx)?
                } else {
                    fig15(ctx)?
                }
            }
            Kind::Fig17 => fig17(ctx)?,
        }
        ctx.progress(1, 1);
        Ok(())
    }
}

fn pct(x: f64, of: f64) -> f64 {
    100.0 * x / of
}

/// luwu-fig2: ZeRO-Infinity's iteration breakdown.
fn fig2(ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
    let sys = system(ctx)?;
    if sys != System::ZeroInfinity {
        return Err(wrong_system("luwu-fig2", sys));
    }
    let (name, m) = shape(ctx)?;
    let n = ctx.positive_count("workers")?;
    let b = ctx.param("micro_batch")?;
    let c = config(ctx, n, b)?;
    let tb = testbed(ctx, n);
    let Some(bd) = run_if_fits(ctx, sys, &m, &tb, &c, &name)? else {
        return Ok(());
    };
    ctx.record("gpu_utilisation", pct(bd.gpu_compute, bd.iteration));
    ctx.record("fwd_share", pct(bd.fwd, bd.iteration));
    ctx.record("bwd_share", pct(bd.bwd, bd.iteration));
    ctx.record("opt_share", pct(bd.opt, bd.iteration));
    ctx.record("bwd_compute_only_share", pct(bd.bwd_compute_only, bd.bwd));
    ctx.record("iteration_time", bd.iteration);
    Ok(())
}

/// luwu-fig3: one block's bwd step beside its collectives.
fn fig3(ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
    let sys = system(ctx)?;
    let (_, m) = shape(ctx)?;
    let n = ctx.positive_count("workers")? as f64;
    let b = ctx.param("micro_batch")?;
    let c = config(ctx, n as usize, b)?;
    // one layer's recomputation and backward
    let one = Shape { layers: 1, ..m };
    let fwd = iter::layer_fwd_time(&one, &c);
    let compute = 3.0 * fwd;
    let p = m.layer_params();
    let nccl = |c: &Config| -> f64 {
        let link = c.net_gbps / 8.0 * hw::roce_efficiency() * 1e9;
        // all_gather and reduce_scatter: (N-1)/N x 2 bytes x p each, per direction
        2.0 * (n - 1.0) / n * 2.0 * p / link
    };
    let pushpull = |c: &Config| -> f64 {
        let link =
            (c.net_gbps / 8.0 * hw::ina_efficiency_of(c.ina_payload)).min(hw::U50_PCIE_GBPS) * 1e9;
        (2.0 * p).max(c.grad_wire_bytes * p) / link
    };
    let (comm, serial) = match sys {
        System::ZeroInfinity => (nccl(&c), c.nccl_serialised_fraction),
        System::Luwu => (pushpull(&c), 0.0),
        other => return Err(wrong_system("luwu-fig3", other)),
    };
    let block = compute.max(comm) + serial * comm;
    ctx.record("comm_time", comm * 1e3);
    ctx.record("compute_time", compute * 1e3);
    ctx.record("block_time", block * 1e3);
    ctx.record("serialised_comm_share", pct(block - compute, comm).max(0.0));
    if sys == System::Luwu {
        let zi = nccl(&c);
        ctx.record("comm_time_reduction", pct(zi - comm, zi));
    }
    Ok(())
}

/// luwu-fig10: the largest trainable model (functional memory accounting).
fn fig10(ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
    let sys = system(ctx)?;
    let n = ctx.positive_count("workers")?;
    let b = ctx.param("micro_batch")?;
    let tb = testbed(ctx, n);
    match memory::largest_ladder(sys, &tb, b).map_err(invalid)? {
        Some((id, nominal)) => {
            // where every byte goes (DeepSpeed's buffer sizes included) for the manifest's log
            let (_, m) = shapes::by_id(id).map_err(invalid)?;
            let pl = memory::place(sys, &m, b, &tb).map_err(invalid)?;
            let items: Vec<String> = pl
                .devices
                .iter()
                .map(|d| {
                    let parts: Vec<String> = d
                        .items
                        .iter()
                        .map(|(what, bytes)| format!("{what} {:.2} GB", bytes / 1e9))
                        .collect();
                    format!(
                        "{} {:.1}/{:.1} GB ({})",
                        d.name,
                        d.used() / 1e9,
                        d.capacity / 1e9,
                        parts.join(", ")
                    )
                })
                .collect();
            ctx.log(
                LogLevel::Info,
                format!("{sys:?} at {n} workers: {id}: {}", items.join("; ")),
            );
            ctx.record("max_ladder_model", nominal);
        }
        None => ctx.record("max_ladder_model", 0.0),
    }
    if sys == System::Luwu {
        ctx.record_if_declared("ssd_bound_params", tb.node_ssd / memory::STATE_BYTES / 1e9);
    }
    match memory::capacity_bound(sys, &tb, b).map_err(invalid)? {
        Some((lo, hi)) => {
            let why = memory::place(sys, &hi, b, &tb)
                .map_err(invalid)?
                .overflow()
                .unwrap_or_default();
            ctx.log(
                LogLevel::Info,
                format!(
                    "{sys:?} at {n} workers: bound {:.1} B params ({}x{}x{}); beyond it {why}",
                    lo.params() / 1e9,
                    lo.layers,
                    lo.heads,
                    lo.hidden
                ),
            );
            ctx.record("max_params", lo.params() / 1e9);
        }
        None => ctx.record("max_params", 0.0),
    }
    Ok(())
}

/// luwu-fig11: TFLOPS vs micro-batch (panel curve) and peaks (panel peak).
fn fig11(ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
    let sys = system(ctx)?;
    let (name, m) = shape(ctx)?;
    let n = ctx.positive_count("workers")?;
    let tb = testbed(ctx, n);
    match str_param(ctx, "panel")?.as_str() {
        "curve" => {
            let c = config(ctx, n, ctx.param("micro_batch")?)?;
            if let Some(bd) = run_if_fits(ctx, sys, &m, &tb, &c, &name)? {
                ctx.record("tflops", bd.tflops());
                ctx.record_if_declared("tflops_hw", bd.tflops_hw());
            }
        }
        "sensitivity" => {
            let c = config(ctx, n, ctx.param("micro_batch")?)?;
            if let Some(bd) = run_if_fits(ctx, sys, &m, &tb, &c, &name)? {
                ctx.record("tflops_sensitivity", bd.tflops());
            }
        }
        "peak" => {
            let Some((mine, mine_hw)) = peak(ctx, sys, &m, &tb, n, &name)? else {
                return Ok(());
            };
            ctx.record("peak_tflops", mine);
            ctx.record_if_declared("peak_tflops_hw", mine_hw);
            if sys != System::Luwu
                && let Some((l, _)) = peak(ctx, System::Luwu, &m, &tb, n, &name)?
            {
                ctx.record("luwu_gain", l / mine);
            }
        }
        other => {
            return Err(WorkloadError::Invalid(format!(
                "luwu-fig11 has panels curve, peak and sensitivity, not `{other}`"
            )));
        }
    }
    Ok(())
}

/// The largest trainable power-of-two micro-batch up to 32 and its breakdown.
fn at_max_batch(
    ctx: &mut PointCtx<'_>,
    sys: System,
    m: &Shape,
    tb: &Testbed,
    n: usize,
) -> Result<Option<(usize, Breakdown)>, WorkloadError> {
    let Some(b) = memory::max_micro_batch(sys, m, tb, 32).map_err(invalid)? else {
        return Ok(None);
    };
    let c = config(ctx, n, b as f64)?;
    Ok(Some((b, iter::iteration(sys, m, &c).map_err(invalid)?)))
}

/// luwu-fig12: TFLOPS at each system's largest micro-batch.
fn fig12(ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
    let sys = system(ctx)?;
    let (name, m) = shape(ctx)?;
    let n = ctx.positive_count("workers")?;
    let tb = testbed(ctx, n);
    let Some((b, bd)) = at_max_batch(ctx, sys, &m, &tb, n)? else {
        ctx.log(
            LogLevel::Info,
            format!("{sys:?} cannot train {name} at micro-batch 1"),
        );
        return Ok(());
    };
    let peak = opt_param(ctx, "gpu_peak_tflops").unwrap_or(hw::A100_BF16_PEAK_TFLOPS);
    ctx.record("tflops", bd.tflops());
    ctx.record_if_declared("tflops_hw", bd.tflops_hw());
    ctx.record("micro_batch_used", b as f64);
    ctx.record("mfu", pct(bd.tflops(), peak));
    ctx.record_if_declared("mfu_hw", pct(bd.tflops_hw(), peak));
    if sys == System::Luwu {
        for (other, metric) in [
            (System::Zero3, "gain_vs_zero3"),
            (System::ZeroInfinity, "gain_vs_zero_infinity"),
        ] {
            if let Some((_, o)) = at_max_batch(ctx, other, &m, &tb, n)? {
                ctx.record(metric, bd.tflops() / o.tflops());
            }
        }
    }
    Ok(())
}

/// luwu-fig13: LuWu vs ZeRO-Infinity+SHARP on 4 workers.
fn fig13(ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
    let sys = system(ctx)?;
    let (name, m) = shape(ctx)?;
    let n = ctx.positive_count("workers")?;
    let tb = testbed(ctx, n);
    // both have the same aggregate SSD bandwidth: the baseline's spread over its n workers
    let cfg = |ctx: &mut PointCtx<'_>, b: f64| -> Result<Config, WorkloadError> {
        let mut c = config(ctx, n, b)?;
        c.worker_ssd_gbps = c.node_ssd_gbps / n as f64;
        Ok(c)
    };
    let tflops = |ctx: &mut PointCtx<'_>, s: System, b: f64| {
        let c = cfg(ctx, b)?;
        Ok::<_, WorkloadError>(run_if_fits(ctx, s, &m, &tb, &c, &name)?.map(|bd| bd.tflops()))
    };
    match str_param(ctx, "panel")?.as_str() {
        "curve" => {
            let b = ctx.param("micro_batch")?;
            let Some(mine) = tflops(ctx, sys, b)? else {
                return Ok(());
            };
            ctx.record("tflops", mine);
            if sys == System::Luwu
                && let Some(base) = tflops(ctx, System::ZeroInfinitySharp, b)?
            {
                ctx.record("gain", mine / base);
            }
        }
        "summary" => {
            if sys != System::Luwu {
                return Ok(());
            }
            let mut gains = Vec::new();
            for b in SWEEP {
                if let (Some(l), Some(z)) = (
                    tflops(ctx, System::Luwu, b as f64)?,
                    tflops(ctx, System::ZeroInfinitySharp, b as f64)?,
                ) {
                    gains.push(l / z);
                }
            }
            if let (Some(lo), Some(hi)) = (
                gains.iter().copied().reduce(f64::min),
                gains.iter().copied().reduce(f64::max),
            ) {
                ctx.record("min_gain", lo);
                ctx.record("max_gain", hi);
            }
        }
        other => {
            return Err(WorkloadError::Invalid(format!(
                "luwu-fig13 has panels curve and summary, not `{other}`"
            )));
        }
    }
    Ok(())
}

/// luwu-fig14: scale-out.
fn fig14(ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
    let sys = system(ctx)?;
    let (name, m) = shape(ctx)?;
    let n = ctx.positive_count("workers")?;
    let b = ctx.param("micro_batch")?;
    let tb = testbed(ctx, n);
    let c = config(ctx, n, b)?;
    let Some(bd) = run_if_fits(ctx, sys, &m, &tb, &c, &name)? else {
        return Ok(());
    };
    ctx.record("global_tflops", bd.tflops() * n as f64);
    ctx.record("tflops_per_gpu", bd.tflops());
    // ZeRO-Infinity without its waits for SSD IO and the optimizer (Sec. 4.6): the SSDs made
    // infinitely fast and the opt step removed
    let bound = |c: &Config| -> Result<f64, WorkloadError> {
        let mut u = *c;
        u.worker_ssd_gbps = f64::MAX / 1e12;
        let z = iter::iteration(System::ZeroInfinity, &m, &u).map_err(invalid)?;
        Ok(z.model_flops / (z.iteration - z.opt) / 1e12 * n as f64)
    };
    match sys {
        System::ZeroInfinity => ctx.record("upper_bound_tflops", bound(&c)?),
        System::Luwu => {
            if memory::fits(System::ZeroInfinity, &m, b, &tb).map_err(invalid)? {
                ctx.record("gain_vs_bound", bd.tflops() * n as f64 / bound(&c)?);
            }
        }
        other => return Err(wrong_system("luwu-fig14", other)),
    }
    Ok(())
}

/// The per-SSD bandwidth and count of luwu-fig15, as the node's aggregate.
pub(crate) fn fig15_config(
    ctx: &mut PointCtx<'_>,
) -> Result<(Shape, Config, String), WorkloadError> {
    let (name, m) = shape(ctx)?;
    let n = ctx.positive_count("workers")?;
    let b = ctx.param("micro_batch")?;
    let ssds = ctx.positive_count("ssds")?;
    let mut c = config(ctx, n, b)?;
    c.node_ssd_gbps = ssds as f64 * ctx.param("ssd_bw_GBps_per_ssd")?;
    Ok((m, c, name))
}

/// luwu-fig15 (modelled): iteration time vs the node's SSD count.
fn fig15(ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
    let sys = system(ctx)?;
    if sys != System::Luwu {
        return Err(wrong_system("luwu-fig15", sys));
    }
    let (m, c, name) = fig15_config(ctx)?;
    let tb = testbed(ctx, c.workers);
    let Some(bd) = run_if_fits(ctx, sys, &m, &tb, &c, &name)? else {
        return Ok(());
    };
    ctx.record("iter_time", bd.iteration);
    ctx.record("gpu_compute_time", bd.gpu_compute);
    ctx.record("ssd_time", bd.ssd_time);
    Ok(())
}

/// luwu-fig17: LuWu's cluster vs ZeRO-Offload on a DGX A100.
fn fig17(ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
    let sys = system(ctx)?;
    let (name, m) = shape(ctx)?;
    let n = ctx.positive_count("gpus")?;
    let mut tb = testbed(ctx, n);
    let dgx_mem = ctx.param("dgx_cpu_mem_gb")? * 1e9;
    let lanes = ctx.param("dgx_cpu_pcie_lanes")?;
    if lanes != 64.0 {
        return Err(WorkloadError::Invalid(
            "the ZeRO-Offload model has the DGX's 64 host PCIe lanes built in".into(),
        ));
    }
    let mut tflops = |ctx: &mut PointCtx<'_>, s: System, b: f64| {
        let mut c = config(ctx, n, b)?;
        if s == System::ZeroOffload {
            // the DGX's SXM GPUs, unless the spec overrides the efficiency
            if opt_param(ctx, "gemm_efficiency").is_none() {
                c.gemm_efficiency = hw::A100_SXM_GEMM_EFFICIENCY;
            }
            if c.end_to_end_efficiency.is_some()
                && opt_param(ctx, "end_to_end_efficiency").is_none()
            {
                c.end_to_end_efficiency = Some(hw::A100_SXM_E2E_EFFICIENCY);
            }
            // the server's memory holds all shards: each GPU's share
            tb.cpu_mem = dgx_mem / n as f64;
        } else {
            tb.cpu_mem = Testbed::paper(n).cpu_mem;
        }
        Ok::<_, WorkloadError>(run_if_fits(ctx, s, &m, &tb, &c, &name)?.map(|bd| bd.tflops()))
    };
    match str_param(ctx, "panel")?.as_str() {
        "curve" => {
            let b = ctx.param("micro_batch")?;
            if let Some(t) = tflops(ctx, sys, b)? {
                ctx.record("tflops", t);
            }
        }
        "summary" => {
            if sys != System::Luwu {
                return Ok(());
            }
            let mut best = [None::<f64>; 2];
            for (i, s) in [System::Luwu, System::ZeroOffload].into_iter().enumerate() {
                for b in SWEEP {
                    if let Some(t) = tflops(ctx, s, b as f64)? {
                        best[i] = Some(best[i].map_or(t, |x| x.max(t)));
                    }
                }
            }
            if let [Some(l), Some(z)] = best {
                ctx.record("luwu_gain", l / z);
            }
        }
        other => {
            return Err(WorkloadError::Invalid(format!(
                "luwu-fig17 has panels curve and summary, not `{other}`"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use inabench_core::{Event, Params, Point};
    use std::sync::atomic::AtomicBool;

    fn run(id: &str, system: &str, params: &[(&str, Scalar)]) -> Vec<(String, f64)> {
        let fig = all().into_iter().find(|f| f.id == id).unwrap();
        let params: Params = params
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        let point = Point {
            id: "p".into(),
            system: system.into(),
            params,
            repetitions: 1,
            warmup: 0,
        };
        let cancel = AtomicBool::new(false);
        let mut rows = Vec::new();
        let mut sink = |e: Event| {
            if let Event::Row(r) = e {
                rows.push((r.metric, r.value));
            }
        };
        let units = |_: &str| "x".to_string();
        let fid = fig.fidelities()[0];
        let mut ctx = PointCtx::new(
            &point, 0, fid, "model", 0, false, 1, "run", id, &cancel, &mut sink, &units,
        );
        fig.run(&mut ctx).unwrap();
        rows
    }

    #[test]
    fn fig10_records_the_ladder_and_the_bound() {
        let p = [("workers", Scalar::Int(8)), ("micro_batch", Scalar::Int(1))];
        let rows = run("luwu_model.fig10", "switchml", &p);
        assert_eq!(rows[0], ("max_ladder_model".to_string(), 1.3));
        assert_eq!(rows[1].0, "max_params");
        assert!(rows[1].1 > 1.3 && rows[1].1 < 2.7, "{}", rows[1].1);
    }

    #[test]
    fn fig11_skips_what_does_not_fit() {
        let p = [
            ("workers", Scalar::Int(8)),
            ("panel", Scalar::Str("curve".into())),
            ("model", Scalar::Str("opt_175b".into())),
            ("micro_batch", Scalar::Int(4)),
        ];
        assert!(run("luwu_model.fig11", "switchml", &p).is_empty());
        let rows = run("luwu_model.fig11", "luwu", &p);
        // both FLOPs conventions: model FLOPs, then with the recomputed forward
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].0, "tflops");
        assert_eq!(rows[1].0, "tflops_hw");
        assert!(rows[0].1 > 0.0 && rows[0].1 < 312.0);
        let r = rows[1].1 / rows[0].1;
        assert!(r > 1.3 && r < 4.0 / 3.0, "{r}");
    }
}
