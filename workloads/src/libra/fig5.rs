//! `libra.fig5` (libra-fig5): the update share of the most frequently updated parameters.

use super::common::{invalid, opt, task_of};
use inabench_core::{Fidelity, LogLevel, PointCtx, Workload, WorkloadError};
use inabench_libra::hot::{Frequencies, Principle1, count_updates};
use inabench_libra::sparse::{SparseGen, read_trace_file, trace_frequencies, trace_pushes};

/// `libra.fig5`: the share of updates the 30K (`top_k`) most frequently updated parameters
/// carry, over `pushes` generated pushes (worker x iteration mini-batches).
pub struct Fig5;

impl Workload for Fig5 {
    fn id(&self) -> &'static str {
        "libra.fig5"
    }
    fn fidelities(&self) -> &'static [Fidelity] {
        &[Fidelity::Functional]
    }
    fn fabric(&self, _f: Fidelity) -> &'static str {
        "model"
    }
    fn run(&self, ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
        let k = opt(ctx, "top_k", 30_000.0) as usize;
        // `trace`: a user's own trace file (lines `iteration worker key value`, see
        // inabench_libra::sparse) instead of the generator; `model` then only names the rows
        let (full, pushes, name) = match ctx.text("trace") {
            Ok(path) if !path.is_empty() => {
                let records = read_trace_file(std::path::Path::new(&path)).map_err(invalid)?;
                let full =
                    Frequencies::from_counts(&trace_frequencies(&records)).map_err(invalid)?;
                (full, trace_pushes(&records), format!("trace {path}"))
            }
            _ => {
                let task = task_of(ctx)?;
                let pushes = ctx.count("pushes")? as u64;
                let g = SparseGen::new(task.clone(), ctx.seed).map_err(invalid)?;
                let (full, _) = count_updates(&g, pushes, 0.0, ctx.seed).map_err(invalid)?;
                (full, pushes, task.name.to_string())
            }
        };
        let share = full.top_share(k);
        ctx.record("top30k_update_share", share * 100.0);
        if ctx.declares("top100k_update_share") {
            ctx.record("top100k_update_share", full.top_share(100_000) * 100.0);
        }
        let touched = full.uf.iter().filter(|c| **c > 0).count();
        ctx.record_if_declared(
            "touched_share",
            touched as f64 / full.uf.len() as f64 * 100.0,
        );
        // Principle 1 at the paper's c = 5% and p = the share it reports for the task
        let p = opt(ctx, "principle1_p", 0.5);
        let choice = Principle1::paper(p, 0.05).choose(&full).map_err(invalid)?;
        ctx.record_if_declared("principle1_k", choice.k as f64);
        ctx.log(
            LogLevel::Info,
            format!(
                "{}: {} pushes, {} updates, {touched} parameters touched; top {k} carry {:.1}%; Principle 1 (p = {p}, c = 5%) picks k = {}{}",
                name,
                pushes,
                full.total(),
                share * 100.0,
                choice.k,
                if choice.memory_bound { " (memory bound)" } else { "" }
            ),
        );
        Ok(())
    }
}
