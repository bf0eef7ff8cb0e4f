//! `libra.table2` (libra-table2): precision of float summation, SwitchML's float-to-integer vs
//! Libra's table lookup, on pairs from a logistic regression the suite trains (R1) and on
//! uniform pairs (R2).

use super::common::{invalid, str_param};
use inabench_core::{Fidelity, LogLevel, PointCtx, Workload, WorkloadError};
use inabench_ina::bfp;
use inabench_ina::tofino::TofinoModel;
use inabench_libra::float::{precision, tables};
use inabench_libra::sparse::{SparseGen, Task};
use inabench_rng::SplitMix64;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// Pairs of gradients from a model the suite trains itself: a sparse logistic regression on
/// generated click data (100,000 features with Zipf(1) popularity, 20 features a sample, labels
/// drawn from a hidden weight vector through the logistic function), two workers with mini-
/// batches of 256, SGD at learning rate 0.5. Each pair is the two workers' gradients of one
/// parameter both touched in one iteration.
pub fn r1_pairs(seed: u64, pairs: usize) -> Result<Vec<(f32, f32)>, WorkloadError> {
    let task = Task {
        name: "lr",
        params: 100_000,
        zipf_s: 1.0,
        features: 20,
        batch: 256,
        paper_hot: 0,
    };
    let gen_ = SparseGen::new(task.clone(), seed).map_err(invalid)?;
    let n = task.params as usize;
    let mut g = SplitMix64::derive(seed, "r1/truth");
    let truth: Vec<f64> = (0..n)
        .map(|_| (0..4).map(|_| g.next_f64() * 2.0 - 1.0).sum::<f64>())
        .collect();
    let mut w = vec![0f64; n];
    let sig = |z: f64| 1.0 / (1.0 + (-z).exp());
    let mut out = Vec::with_capacity(pairs);
    let mut draw = SplitMix64::derive(seed, "r1/data");
    let mut keys = Vec::new();
    for _it in 0..100_000 {
        let mut grads: [HashMap<u64, f64>; 2] = [HashMap::new(), HashMap::new()];
        for gr in grads.iter_mut() {
            for _ in 0..task.batch {
                keys.clear();
                gen_.sample_keys(&mut draw, &mut keys);
                let z_true: f64 = keys.iter().map(|k| truth[*k as usize]).sum();
                let y = if draw.chance(sig(z_true)) { 1.0 } else { 0.0 };
                let z: f64 = keys.iter().map(|k| w[*k as usize]).sum();
                let err = sig(z) - y;
                for k in &keys {
                    *gr.entry(*k).or_insert(0.0) += err / f64::from(task.batch);
                }
            }
        }
        let mut both: Vec<u64> = grads[0]
            .keys()
            .filter(|k| grads[1].contains_key(k))
            .copied()
            .collect();
        both.sort_unstable();
        for k in both {
            if out.len() < pairs {
                out.push((grads[0][&k] as f32, grads[1][&k] as f32));
            }
        }
        for gr in &grads {
            for (k, v) in gr {
                w[*k as usize] -= 0.5 * v / 2.0;
            }
        }
        if out.len() >= pairs {
            return Ok(out);
        }
    }
    Err(invalid(
        "the logistic regression did not produce enough pairs",
    ))
}

/// Uniform (-1, 1) pairs.
pub fn r2_pairs(seed: u64, pairs: usize) -> Vec<(f32, f32)> {
    let mut g = SplitMix64::derive(seed, "r2");
    (0..pairs)
        .map(|_| {
            let mut u = || loop {
                let x = (g.next_f64() * 2.0 - 1.0) as f32;
                if x > -1.0 && x < 1.0 {
                    return x;
                }
            };
            (u(), u())
        })
        .collect()
}

/// Per-pair precision of a summation method over a dataset. `fixed_scale` > 0 replaces
/// float-to-int's negotiated per-block exponent by one fixed scaling factor for every value
/// (round(x * s) summed as integers, divided by s): not SwitchML's scheme, a sweep of what a
/// coarse scale does.
pub fn precisions(
    system: &str,
    data: &[(f32, f32)],
    fixed_scale: f64,
) -> Result<Vec<f64>, WorkloadError> {
    if system == "float_to_int" && fixed_scale > 0.0 {
        if !fixed_scale.is_finite() {
            return Err(invalid(format!(
                "fixed_scale is a positive factor, not {fixed_scale}"
            )));
        }
        let q = |x: f32| {
            (f64::from(x) * fixed_scale)
                .round()
                .clamp(f64::from(i32::MIN), f64::from(i32::MAX))
        };
        return Ok(data
            .iter()
            .map(|&(x, y)| {
                let got = ((q(x) + q(y)) / fixed_scale) as f32;
                precision(f64::from(got), f64::from(x) + f64::from(y))
            })
            .collect());
    }
    match system {
        "table_lookup" => {
            let t = tables();
            Ok(data
                .iter()
                .map(|&(x, y)| precision(f64::from(t.add(x, y)), f64::from(x) + f64::from(y)))
                .collect())
        }
        "float_to_int" => {
            // SwitchML's block floating point between two workers: per block of one packet's
            // values (48), each worker offers its block's exponent and the switch keeps the
            // maximum; then the integers are summed and scaled back
            let per = (TofinoModel::PAPER.bytes_per_pass() / 4) as usize;
            let mut out = Vec::with_capacity(data.len());
            for block in data.chunks(per) {
                let xs: Vec<f32> = block.iter().map(|p| p.0).collect();
                let ys: Vec<f32> = block.iter().map(|p| p.1).collect();
                let e = bfp::block_exponent(&xs).max(bfp::block_exponent(&ys));
                for &(x, y) in block {
                    let q = i64::from(bfp::quantise(x, e, 2)) + i64::from(bfp::quantise(y, e, 2));
                    let got = bfp::dequantise(q as i32, e, 2);
                    out.push(precision(f64::from(got), f64::from(x) + f64::from(y)));
                }
            }
            Ok(out)
        }
        other => Err(invalid(format!(
            "system `{other}` is not float_to_int or table_lookup"
        ))),
    }
}

type DataKey = (String, u64, usize);
type Pairs = Arc<Vec<(f32, f32)>>;

/// The seeded pairs of data set `name`. Pure: generated from (name, seed, pairs), the key.
fn dataset(name: &str, seed: u64, pairs: usize) -> Result<Arc<Vec<(f32, f32)>>, WorkloadError> {
    static CACHE: OnceLock<Mutex<HashMap<DataKey, Pairs>>> = OnceLock::new();
    let key = (name.to_string(), seed, pairs);
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(d) = cache.lock().ok().and_then(|m| m.get(&key).cloned()) {
        return Ok(d);
    }
    let d = Arc::new(match name {
        "r1" => r1_pairs(seed, pairs)?,
        "r2" => r2_pairs(seed, pairs),
        other => return Err(invalid(format!("data is `r1` or `r2`, not `{other}`"))),
    });
    if let Ok(mut m) = cache.lock() {
        m.insert(key, d.clone());
    }
    Ok(d)
}

/// `libra.table2`.
pub struct Table2;

impl Workload for Table2 {
    fn id(&self) -> &'static str {
        "libra.table2"
    }
    fn fidelities(&self) -> &'static [Fidelity] {
        &[Fidelity::Functional]
    }
    fn fabric(&self, _f: Fidelity) -> &'static str {
        "model"
    }
    fn systems(&self) -> Option<&'static [&'static str]> {
        Some(&["float_to_int", "table_lookup"])
    }
    fn run(&self, ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
        let data = str_param(ctx, "data")?;
        let stat = str_param(ctx, "stat")?;
        let pairs = ctx.count("pairs")?;
        // the datasets are the same for every repetition (the paper's fixed 100,000 pairs)
        let d = dataset(&data, 1, pairs)?;
        // fixed_scale (0: SwitchML's negotiated exponent per 48-value block) sweeps one global
        // scaling factor for float-to-int, to show which scale the paper's R2 collapse needs
        let fixed_scale = ctx.param("fixed_scale").unwrap_or(0.0);
        if fixed_scale < 0.0 {
            return Err(invalid(format!(
                "fixed_scale is 0 (negotiated per block) or a positive factor, not {fixed_scale}"
            )));
        }
        let mut p = precisions(ctx.system(), &d, fixed_scale)?;
        let value = match stat.as_str() {
            "average" => p.iter().sum::<f64>() / p.len().max(1) as f64,
            "median" => {
                p.sort_unstable_by(f64::total_cmp);
                p.get(p.len() / 2).copied().unwrap_or(0.0)
            }
            other => return Err(invalid(format!("stat is median or average, not `{other}`"))),
        };
        ctx.record("precision", value * 100.0);
        if stat == "average" {
            let worst = p.iter().copied().fold(1.0, f64::min);
            let below = p.iter().filter(|x| **x < 0.999).count();
            ctx.log(
                LogLevel::Info,
                format!(
                    "{} on {data}: worst pair {:.4}%, {below} of {} pairs below 99.9%",
                    ctx.system(),
                    worst * 100.0,
                    p.len()
                ),
            );
        }
        Ok(())
    }
}
