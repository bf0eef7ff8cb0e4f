//! The workload `luwu.fig16` (spec luwu-fig16): data-parallel training through LuWu's transport
//! with Adam on the optimizer node, against ZeRO-Infinity's curve.

use inabench_core::{Fidelity, PointCtx, Workload, WorkloadError};
use inabench_luwu::fig16::{self, Curves, Data, TrainConfig};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

pub struct Fig16;

type CurveCache = Mutex<HashMap<String, Arc<Curves>>>;

/// Both systems' curves of one training configuration, trained once per process. Pure: training
/// is seeded and runs on the sim fabric, a deterministic function of the whole configuration
/// (the key); nothing is timed.
fn curves(cfg: &TrainConfig) -> Result<Arc<Curves>, WorkloadError> {
    static CACHE: OnceLock<CurveCache> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    let key = format!("{cfg:?}");
    if let Some(c) = cache.lock().ok().and_then(|m| m.get(&key).cloned()) {
        return Ok(c);
    }
    let c = Arc::new(fig16::train(cfg).map_err(|e| match e {
        fig16::TrainError::Config(_) => WorkloadError::BadParam(e.to_string()),
        fig16::TrainError::NotExact { .. } => WorkloadError::WrongResult(e.to_string()),
    })?);
    if let Ok(mut m) = cache.lock() {
        m.insert(key, c.clone());
    }
    Ok(c)
}

impl Workload for Fig16 {
    fn id(&self) -> &'static str {
        "luwu.fig16"
    }

    fn fidelities(&self) -> &'static [Fidelity] {
        &[Fidelity::Functional]
    }

    fn fabric(&self, _f: Fidelity) -> &'static str {
        "sim"
    }

    fn systems(&self) -> Option<&'static [&'static str]> {
        Some(&["luwu", "zero_infinity"])
    }

    fn run(&self, ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
        let hidden = ctx.count("fn_hidden")?;
        let layers = ctx.count("fn_layers")?;
        // fn_model: `lm` (next token of a generated bigram language from `fn_context` tokens of a
        // `fn_vocab`-token vocabulary) or `classifier` (Gaussian clusters, fn_inputs/fn_classes)
        let model = ctx.text("fn_model").unwrap_or_else(|_| "lm".into());
        let (data, inputs, outputs) = match model.trim_matches('"') {
            "lm" => {
                let (vocab, context) = (ctx.count("fn_vocab")?, ctx.count("fn_context")?);
                (Data::Bigram { vocab, context }, vocab * context, vocab)
            }
            "classifier" => (
                Data::Clusters,
                ctx.count("fn_inputs")?,
                ctx.count("fn_classes")?,
            ),
            other => {
                return Err(WorkloadError::Invalid(format!(
                    "fn_model is `lm` or `classifier`, not `{other}`"
                )));
            }
        };
        let mut dims = vec![inputs];
        dims.extend(std::iter::repeat_n(hidden, layers));
        dims.push(outputs);
        let cfg = TrainConfig {
            workers: ctx.count("workers")?,
            micro_batch: ctx.count("micro_batch")?,
            dims,
            samples: ctx.count("fn_samples")?,
            steps: ctx.count("fn_steps")?,
            lr: ctx.param("lr")? as f32,
            seed: ctx.count("seed")? as u64 + u64::from(ctx.repetition),
            loss: ctx.param("loss").unwrap_or(0.0),
            data,
        };
        let step = ctx.count("step")?;
        if step > cfg.steps {
            return Err(WorkloadError::Invalid(format!(
                "step {step} is beyond fn_steps {}",
                cfg.steps
            )));
        }
        let c = curves(&cfg)?;
        let curve = if ctx.system() == "luwu" {
            &c.luwu
        } else {
            &c.zero_infinity
        };
        ctx.record("loss", f64::from(curve[step]));
        if ctx.system() == "luwu" {
            let z = f64::from(c.zero_infinity[step]);
            ctx.record_if_declared("loss_gap", (f64::from(c.luwu[step]) - z).abs() / z.abs());
            ctx.record_if_declared("max_gap", c.max_gap);
            ctx.counter("transfers", c.transfers);
            ctx.counter("resends", c.resends);
        }
        Ok(())
    }
}
