//! `libra.resources` (libra-resources): switch memory of the program.

use super::common::{invalid, opt};
use inabench_core::{Fidelity, PointCtx, Workload, WorkloadError};
use inabench_libra::float::tables;
use inabench_libra::layout::Placement;

/// `libra.resources`: the switch memory of the program: hot-parameter registers (4 bytes a
/// parameter), the float tables as built, their sum and share of 20 MB.
pub struct Resources;

impl Workload for Resources {
    fn id(&self) -> &'static str {
        "libra.resources"
    }
    fn fidelities(&self) -> &'static [Fidelity] {
        &[Fidelity::Functional]
    }
    fn fabric(&self, _f: Fidelity) -> &'static str {
        "model"
    }
    fn run(&self, ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
        let hot = ctx.count("hot_params")?;
        let m = opt(ctx, "registers", 48.0) as usize;
        let pl = Placement::heat(hot, m).map_err(invalid)?;
        let reg_bytes = (pl.m * pl.slots_per_register() * 4) as f64;
        let tables = tables().bytes() as f64;
        let total = reg_bytes + tables;
        ctx.record("hot_param_kb", reg_bytes / 1024.0);
        ctx.record("float_tables_kb", tables / 1024.0);
        ctx.record("total_kb", total / 1024.0);
        ctx.record("memory_share", total / (20.0 * 1048576.0) * 100.0);
        Ok(())
    }
}
