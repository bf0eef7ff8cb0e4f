//! luwu-fig15's emulated class: the out-of-core optimizer ([`inabench_luwu_ooc::pipeline`]) runs
//! for real on this host over files, one directory per emulated SSD, each throttled to
//! `emu_ssd_MBps` per direction, with the model scaled to `model_scale` of OPT-175B's parameters
//! (every layer alike, the embedding as the first layer).
//!
//! Time scaling: an emulated SSD moves `model_scale` of the bytes at `emu_ssd_MBps` instead of
//! the real SSD's `ssd_bw_GBps_per_ssd`, so SSD time shrinks by
//! `k = model_scale x ssd_bw_GBps_per_ssd x 1000 / emu_ssd_MBps`. The workers' per-layer times
//! (the longer of GPU compute and pull/push at the WorkerNIC, from [`iter::luwu_worker_times`])
//! are scaled by the same `k`, so SSD-bound and compute-bound regimes keep their ratio; the
//! measured times are divided by `k` and recorded in the paper's seconds. Adam runs on one
//! thread of this host at its real speed, which the scaling does not preserve (it is a small
//! part of the node's time: see the report).

use super::figures::fig15_config as fig15_inputs;
use inabench_core::event::LogLevel;
use inabench_core::{PointCtx, WorkloadError};
use inabench_luwu_model::iter;
use inabench_luwu_ooc::pipeline::{self, PipelineConfig};
use inabench_train::adam::AdamParams;
use std::time::Duration;

/// Removes the run's directory when dropped.
struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(crate) fn fig15(ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
    let (m, c, _) = fig15_inputs(ctx)?;
    let scale = ctx.param("model_scale")?;
    let emu_mbps = ctx.param("emu_ssd_MBps")?;
    let per_ssd_gbps = ctx.param("ssd_bw_GBps_per_ssd")?;
    let iterations = ctx.param("iterations")?;
    if !(scale > 0.0 && scale <= 1.0 && emu_mbps > 0.0 && per_ssd_gbps > 0.0) {
        return Err(WorkloadError::Invalid(
            "model_scale must be in (0, 1], emu_ssd_MBps and ssd_bw_GBps_per_ssd positive".into(),
        ));
    }
    if !(1.0..=1000.0).contains(&iterations) || iterations.fract() != 0.0 {
        return Err(WorkloadError::Invalid(
            "iterations must be a whole number from 1 to 1000".into(),
        ));
    }
    let ssds = ctx.count("ssds")?;
    // as in the modelled class: nothing where LuWu's workers cannot hold the micro-batch
    let tb = super::figures::testbed(ctx, c.workers);
    let pl = inabench_luwu_model::memory::place(
        inabench_luwu_model::System::Luwu,
        &m,
        c.micro_batch,
        &tb,
    )
    .map_err(|e| WorkloadError::Invalid(e.to_string()))?;
    if let Some(why) = pl.overflow() {
        ctx.log(
            LogLevel::Info,
            format!("LuWu cannot train at micro-batch {}: {why}", c.micro_batch),
        );
        return Ok(());
    }
    let k = scale * per_ssd_gbps * 1000.0 / emu_mbps;
    let units =
        iter::luwu_worker_times(&m, &c).map_err(|e| WorkloadError::Invalid(e.to_string()))?;
    let layer_params: Vec<usize> = units
        .iter()
        .map(|&(p, _, _)| ((p * scale).round() as usize).max(1))
        .collect();
    let dur = |s: f64| Duration::from_secs_f64((s * k).max(0.0));
    let dir = std::env::temp_dir().join(format!(
        "inabench-{}-{}-{}",
        ctx.run_id, ctx.point.id, ctx.repetition
    ));
    let _guard = TempDir(dir.clone());
    let cfg = PipelineConfig {
        root: dir,
        ssds,
        layer_params,
        ssd_mbps: Some(emu_mbps),
        iterations: iterations as usize,
        fwd_compute: units.iter().map(|&(_, f, _)| dur(f)).collect(),
        bwd_compute: units.iter().map(|&(_, _, b)| dur(b)).collect(),
        adam: AdamParams::default(),
        seed: ctx.seed.wrapping_add(u64::from(ctx.repetition)),
    };
    let report = pipeline::run(&cfg, ctx.cancel).map_err(|e| match e {
        inabench_luwu_ooc::OocError::Cancelled => WorkloadError::Interrupted,
        other => WorkloadError::Invalid(other.to_string()),
    })?;
    // the first iteration fills the pipeline from cold buffers: leave it out when there are more
    let skip = usize::from(report.iter_times.len() > 1);
    let mean = |v: &[Duration]| -> f64 {
        let v = &v[skip.min(v.len())..];
        v.iter().map(Duration::as_secs_f64).sum::<f64>() / v.len().max(1) as f64
    };
    let iter_time = mean(&report.iter_times) / k;
    let ssd_time = mean(&report.ssd_time) / k;
    let bd = iter::iteration(inabench_luwu_model::System::Luwu, &m, &c)
        .map_err(|e| WorkloadError::Invalid(e.to_string()))?;
    ctx.log(
        LogLevel::Info,
        format!(
            "emulated {} iterations over {} layers ({:.1} M params, k = {k:.3e}): {:.3} s each \
             on this host; read {} MB, wrote {} MB, {} updates",
            report.iter_times.len(),
            cfg.layer_params.len(),
            cfg.layer_params.iter().sum::<usize>() as f64 / 1e6,
            iter_time * k,
            report.bytes_read / 1_000_000,
            report.bytes_written / 1_000_000,
            report.updates
        ),
    );
    ctx.record("iter_time", iter_time);
    ctx.record("gpu_compute_time", bd.gpu_compute);
    ctx.record("ssd_time", ssd_time);
    Ok(())
}
