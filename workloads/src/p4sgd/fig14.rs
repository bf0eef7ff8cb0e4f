//! `p4sgd.fig14`: training loss after each epoch of synchronous mini-batch SGD, per system, on
//! the same data and seed. Functional: real training on this host ([`inabench_p4sgd::curves`]:
//! P4SGD through the protocol code, CPUSync's and GPUSync's float32 summation orders).
//!
//! The loss is the mean loss of the model over the full-precision training set.

use inabench_core::{Fidelity, LogLevel, PointCtx, Workload, WorkloadError};
use inabench_p4sgd::curves::curve;
use inabench_p4sgd::glm::{Glm, Sgd};

pub struct Fig14;

impl Workload for Fig14 {
    fn id(&self) -> &'static str {
        "p4sgd.fig14"
    }

    fn fidelities(&self) -> &'static [Fidelity] {
        &[Fidelity::Functional]
    }

    fn fabric(&self, _f: Fidelity) -> &'static str {
        "sim"
    }

    fn systems(&self) -> Option<&'static [&'static str]> {
        Some(&["p4sgd", "cpusync", "gpusync"])
    }

    fn run(&self, ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
        let s = |ctx: &PointCtx<'_>, k: &str| ctx.text(k);
        let dataset = s(ctx, "dataset")?;
        let glm_name = s(ctx, "glm")?;
        let glm_kind = Glm::parse(&glm_name).ok_or_else(|| {
            WorkloadError::Invalid(format!("glm is linear, logistic or svm, not `{glm_name}`"))
        })?;
        let epoch = ctx.count("epoch")?;
        let epochs = (ctx.count("epochs")?).max(epoch);
        let sgd = Sgd {
            glm: glm_kind,
            lr: ctx.param("lr")? as f32,
            batch: ctx.count("batch")?,
            micro_batch: ctx.count("micro_batch")?,
            block: 0,
        };
        if sgd.batch == 0 || epoch == 0 {
            return Err(WorkloadError::Invalid("batch and epoch start at 1".into()));
        }
        let workers = ctx.count("workers")?;
        let bits = ctx.count("precision_bits")? as u32;
        let max_rows = ctx.count("max_rows")?;
        let seed = ctx.count("seed")? as u64;
        let system = ctx.system().to_string();
        let (losses, about) = curve(
            &system, &dataset, max_rows, seed, glm_kind, sgd, workers, bits, epochs,
        )
        .map_err(|e| WorkloadError::Invalid(e.to_string()))?;
        if epoch == 1 {
            ctx.log(LogLevel::Info, format!("{system}: data {about}"));
        }
        let loss = losses
            .get(epoch - 1)
            .copied()
            .ok_or_else(|| WorkloadError::Invalid("no loss for this epoch".into()))?;
        ctx.record("loss", loss);
        Ok(())
    }
}
