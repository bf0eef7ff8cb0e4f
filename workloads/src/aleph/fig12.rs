//! `aleph.accuracy_vs_time` (aleph-fig12, modelled): test accuracy against training time for
//! BytePS, Horovod and ALEPH on the 9-machine testbed of Sec. 6.3. The model (the accuracy curve,
//! an iteration's compute and communication time) is [`inabench_aleph::convergence`]; this
//! workload reads the spec's parameters, picks the clustering and the curve, and records.
//! Functional: real data-parallel training of the small CNN, every step's gradients summed with
//! each system's arithmetic ([`inabench_aleph::convergence::functional_run`]): BytePS's and
//! Horovod's float32 sums against ALEPH's Q15.16 fixed point, final accuracy after the same
//! steps (panel `total`; the curve's points are time-based and modelled only).

use super::testbed_training::{clustering, model_mb, paper_clustering};
use inabench_aleph::convergence::{
    Curve, GPU_PEAK_FLOPS, Summation, System, comm_time, flops_per_image, functional_run,
    trained_curve,
};
use inabench_core::event::LogLevel;
use inabench_core::{Fidelity, PointCtx, Workload, WorkloadError};
use std::collections::HashMap;
use std::sync::Mutex;

static CURVES: Mutex<Option<HashMap<String, Curve>>> = Mutex::new(None);

/// Where the accuracy curve comes from.
enum Source {
    /// A user's `epoch,accuracy` file.
    Csv(String),
    /// The functional trainer.
    Trainer { epochs: usize, images: usize },
}

/// The curve of this run (trained once per setting and kept for the other points).
fn curve(ctx: &mut PointCtx<'_>) -> Result<Curve, WorkloadError> {
    let source = match ctx.text("curve_csv") {
        Ok(path) => Source::Csv(path),
        Err(_) => Source::Trainer {
            epochs: ctx.positive_count("curve_epochs")?,
            images: ctx.positive_count("curve_images")?,
        },
    };
    let key = match &source {
        Source::Csv(p) => format!("csv:{p}"),
        Source::Trainer { epochs, images } => {
            format!("trainer:{epochs}:{images}:{}", ctx.repetition)
        }
    };
    if let Some(c) = CURVES
        .lock()
        .ok()
        .and_then(|m| m.as_ref().and_then(|m| m.get(&key).cloned()))
    {
        return Ok(c);
    }
    let c = match source {
        Source::Csv(p) => {
            let text = std::fs::read_to_string(&p).map_err(|e| {
                WorkloadError::Invalid(format!("cannot read the accuracy curve {p}: {e}"))
            })?;
            Curve::from_csv(&text, 0.1)
                .map_err(|e| WorkloadError::Invalid(format!("accuracy curve {p}: {e}")))?
        }
        Source::Trainer { epochs, images } => {
            trained_curve(epochs, images, 1 + u64::from(ctx.repetition))
        }
    };
    ctx.log(
        LogLevel::Info,
        format!(
            "accuracy curve ({key}): start {:.3}, per epoch {:.3?}",
            c.start, c.acc
        ),
    );
    if let Ok(mut m) = CURVES.lock() {
        m.get_or_insert_with(HashMap::new).insert(key, c.clone());
    }
    Ok(c)
}

/// aleph-fig12 (modelled, functional).
pub struct AccuracyVsTime;

impl Workload for AccuracyVsTime {
    fn id(&self) -> &'static str {
        "aleph.accuracy_vs_time"
    }
    fn fidelities(&self) -> &'static [Fidelity] {
        &[Fidelity::Modelled, Fidelity::Functional]
    }
    fn fabric(&self, _f: Fidelity) -> &'static str {
        "model"
    }
    fn systems(&self) -> Option<&'static [&'static str]> {
        Some(&["byteps", "horovod", "aleph"])
    }
    fn run(&self, ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
        if ctx.fidelity == Fidelity::Functional {
            return functional_point(ctx);
        }
        let model = ctx.text("model")?;
        let (Some(mb), Some(flops)) = (model_mb(&model), flops_per_image(&model)) else {
            return Err(WorkloadError::Invalid(format!(
                "aleph-fig12 models resnet50 and vgg19, not `{model}`"
            )));
        };
        let mut rates = Vec::new();
        for (n, bw) in [
            ("n_w30", "bw_w30_gbps"),
            ("n_w20", "bw_w20_gbps"),
            ("n_w10", "bw_w10_gbps"),
        ] {
            let b = ctx.param(bw)?;
            let k = ctx.param(n)?;
            rates.extend(std::iter::repeat_n(b, k.max(0.0) as usize));
        }
        if rates.len() != ctx.positive_count("workers")? {
            return Err(WorkloadError::Invalid(
                "n_w30 + n_w20 + n_w10 must equal workers".into(),
            ));
        }
        let parent = match ctx.text("clustering").ok().as_deref() {
            None | Some("mwcha") => clustering(&rates, u64::from(ctx.repetition))?,
            Some("paper") => paper_clustering(&rates)?,
            Some(other) => {
                return Err(WorkloadError::Invalid(format!(
                    "clustering must be mwcha or paper (got {other})"
                )));
            }
        };
        let eff = ctx.param("gpu_efficiency")?;
        if !(eff > 0.0 && eff <= 1.0) {
            return Err(WorkloadError::Invalid(
                "gpu_efficiency must be in (0, 1]".into(),
            ));
        }
        let batch = ctx.positive_count("batch_per_gpu")? as f64;
        let compute = flops * batch / (GPU_PEAK_FLOPS * eff);
        let iterations =
            (ctx.positive_count("epochs")? * ctx.positive_count("iterations_per_epoch")?) as f64;
        let epochs = ctx.positive_count("epochs")? as f64;
        let ps = ctx.param("bw_ps_gbps")?;
        let time = |s: System| -> Result<f64, WorkloadError> {
            let c = comm_time(s, &rates, ps, mb * 1e6, &parent)
                .map_err(|e| WorkloadError::Invalid(e.to_string()))?;
            Ok(compute + c)
        };
        let system = match ctx.system() {
            "byteps" => System::BytePs,
            "horovod" => System::Horovod,
            "aleph" => System::Aleph,
            other => {
                return Err(WorkloadError::Invalid(format!(
                    "aleph-fig12 runs byteps, horovod and aleph, not `{other}`"
                )));
            }
        };
        let mine = time(system)?;
        let curve = curve(ctx)?;
        ctx.log(
            LogLevel::Info,
            format!(
                "{}: {model}, {:.4} s per iteration ({:.4} s compute), clustering {parent:?}",
                ctx.system(),
                mine,
                compute
            ),
        );
        match ctx.text("panel").ok().as_deref() {
            Some("total") => {
                ctx.record("training_time", mine * iterations);
                ctx.record("final_accuracy", curve.at(epochs, epochs) * 100.0);
            }
            _ => {
                let frac = ctx.param("time_frac")?;
                let aleph_total = time(System::Aleph)? * iterations;
                let e = frac * aleph_total / (mine * iterations) * epochs;
                ctx.record("accuracy", curve.at(e, epochs) * 100.0);
            }
        }
        ctx.progress(1, 1);
        Ok(())
    }
}

/// The functional class: the same small CNN trained by `workers` workers for `functional_steps`
/// steps of `functional_batch_per_worker` images each, on `curve_images` images, with the point's
/// system's summation; the final test accuracy is recorded at panel `total` (the curve's points,
/// read at fractions of a modelled training time, have no functional value and record nothing).
fn functional_point(ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
    if ctx.text("panel").ok().as_deref() != Some("total") {
        ctx.progress(1, 1);
        return Ok(());
    }
    let system = match ctx.system() {
        "byteps" => System::BytePs,
        "horovod" => System::Horovod,
        "aleph" => System::Aleph,
        other => {
            return Err(WorkloadError::Invalid(format!(
                "aleph-fig12 runs byteps, horovod and aleph, not `{other}`"
            )));
        }
    };
    let workers = ctx.positive_count("workers")?;
    let batch = ctx.positive_count("functional_batch_per_worker")?;
    let steps = ctx.positive_count("functional_steps")?;
    let images = ctx.positive_count("curve_images")?;
    let summation = Summation::of(system);
    let r = functional_run(
        summation,
        workers,
        batch,
        steps,
        images,
        1 + u64::from(ctx.repetition),
    )
    .map_err(|e| WorkloadError::Invalid(e.to_string()))?;
    ctx.log(
        LogLevel::Info,
        format!(
            "{}: {summation:?}, {workers} workers x {batch} images, {steps} steps over {images} images: test accuracy {:.2}% (before training {:.2}%), loss {:.4} -> {:.4}",
            ctx.system(),
            r.final_accuracy * 100.0,
            r.start_accuracy * 100.0,
            r.first_loss,
            r.last_loss
        ),
    );
    ctx.record("final_accuracy", r.final_accuracy * 100.0);
    ctx.progress(1, 1);
    Ok(())
}
