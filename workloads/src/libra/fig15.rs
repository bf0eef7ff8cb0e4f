//! `libra.fig15` (libra-fig15): precision of sampled hot-parameter identification.

use super::common::{invalid, opt, task_of};
use inabench_core::{Fidelity, LogLevel, PointCtx, Workload, WorkloadError};
use inabench_libra::hot::{count_updates, hot_list};
use inabench_libra::sparse::SparseGen;

/// `libra.fig15`: H_g from the whole generated dataset, H_s from a sample at `sampling_rate`,
/// both by the 1,000-at-a-time, 1% procedure; precision |H_g ∩ H_s| / |H_g|.
pub struct Fig15;

impl Workload for Fig15 {
    fn id(&self) -> &'static str {
        "libra.fig15"
    }
    fn fidelities(&self) -> &'static [Fidelity] {
        &[Fidelity::Functional]
    }
    fn fabric(&self, _f: Fidelity) -> &'static str {
        "model"
    }
    fn run(&self, ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
        let task = task_of(ctx)?;
        let pushes = ctx.count("pushes")? as u64;
        let rate = ctx.param("sampling_rate")?;
        let step = opt(ctx, "step", 1000.0) as usize;
        let threshold = opt(ctx, "threshold", 0.01);
        let g = SparseGen::new(task.clone(), ctx.seed).map_err(invalid)?;
        let (full, samp) = count_updates(&g, pushes, rate, ctx.seed).map_err(invalid)?;
        let hg = hot_list(&full, step, threshold);
        let hs = hot_list(&samp, step, threshold);
        let p = inabench_libra::hot::precision(&hg, &hs);
        ctx.record("precision", p * 100.0);
        ctx.record_if_declared("hot_global", hg.len() as f64);
        ctx.log(
            LogLevel::Info,
            format!(
                "{} at {:.0}%: |H_g| = {}, |H_s| = {}, precision {:.1}%",
                task.name,
                rate * 100.0,
                hg.len(),
                hs.len(),
                p * 100.0
            ),
        );
        Ok(())
    }
}
