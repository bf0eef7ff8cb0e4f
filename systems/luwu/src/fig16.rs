//! Fig. 16 functionally: data-parallel training of a small model where every step's gradients
//! go through LuWu's transport and switch, against ZeRO-Infinity's arithmetic on the same global
//! batch.
//!
//! LuWu, per step: each worker computes its shard's gradient (bf16-rounded, as in bf16
//! training); the block exponents are agreed through the switch's max ([`crate::convert`]); each
//! WorkerNIC pushes its integer-scaled gradient, the switch sums, the AggNIC pulls the sum and
//! scales it back; the optimizer node averages it and applies fp32 Adam to the fp32 master weights
//! ([`inabench_train::adam`]); the AggNIC pushes the bf16-rounded parameters and every WorkerNIC
//! pulls them. All four transfers run on the `sim` fabric with the full transport (heartbeats,
//! credits, resend) and are checked to be exact.
//!
//! ZeRO-Infinity's arithmetic (not its communication): the same bf16 gradients reduce-scattered
//! in ring order (chunk c summed starting at worker c + 1, each partial sum rounded to bf16 as
//! NCCL's bf16 ring does), averaged, the same fp32 Adam, bf16 parameters all-gathered.
//!
//! The model is the train crate's MLP, either as a small language model on generated text (the
//! previous `context` tokens one-hot in, the next token's distribution out, over a seeded random
//! bigram language whose entropy keeps the loss away from 0, like fine-tuning's) or as a
//! classifier of seeded Gaussian clusters.

use crate::convert;
use crate::run::{Job, run_sim};
use crate::transport::Config;
use inabench_fabric::fault::Faults;
use inabench_train::adam::{AdamParams, AdamStep};
use inabench_train::data::{Dataset, clusters};
use inabench_train::model::{Arch, Model};

/// A training run's shape.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainConfig {
    pub workers: usize,
    pub micro_batch: usize,
    /// MLP layer widths, input first, classes last.
    pub dims: Vec<usize>,
    pub samples: usize,
    pub steps: usize,
    pub lr: f32,
    pub seed: u64,
    /// Per-link loss on the fabric during training (0: none).
    pub loss: f64,
    pub data: Data,
}

/// What the model learns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Data {
    /// Gaussian clusters (`dims[0]` dimensions, `dims[last]` classes).
    Clusters,
    /// Next-token prediction on a seeded random bigram language of `vocab` tokens, from the
    /// previous `context` tokens (`dims[0]` must be `vocab * context`, `dims[last]` `vocab`).
    Bigram { vocab: usize, context: usize },
}

/// A seeded corpus of `samples` + `context` tokens from a random bigram language: each token's
/// successor distribution is a softmax of normal logits (standard deviation 2, so some
/// successors are likely and none impossible). Sample i is the one-hot of tokens i..i+context
/// and the label token i + context.
pub fn bigram_corpus(samples: usize, vocab: usize, context: usize, seed: u64) -> Dataset {
    let mut g = inabench_rng::SplitMix64::derive(seed, "bigram language");
    let mut normal = || g.normal();
    let table: Vec<Vec<f64>> = (0..vocab)
        .map(|_| {
            let l: Vec<f64> = (0..vocab).map(|_| (2.0 * normal()).exp()).collect();
            let z: f64 = l.iter().sum();
            l.into_iter().map(|x| x / z).collect()
        })
        .collect();
    let mut g = inabench_rng::SplitMix64::derive(seed, "bigram text");
    let mut tokens = vec![0usize];
    while tokens.len() < samples + context {
        let prev = tokens[tokens.len() - 1];
        let u = g.next_f64();
        let mut acc = 0.0;
        let mut next = vocab - 1;
        for (t, p) in table[prev].iter().enumerate() {
            acc += p;
            if u < acc {
                next = t;
                break;
            }
        }
        tokens.push(next);
    }
    let mut d = Dataset {
        xs: Vec::with_capacity(samples),
        ys: Vec::with_capacity(samples),
    };
    for i in 0..samples {
        let mut x = vec![0f32; vocab * context];
        for (k, t) in tokens[i..i + context].iter().enumerate() {
            x[k * vocab + t] = 1.0;
        }
        d.xs.push(x);
        d.ys.push(tokens[i + context]);
    }
    d
}

/// The two loss curves (one value per step 0..=steps) and what the transport did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Curves {
    pub luwu: Vec<f32>,
    pub zero_infinity: Vec<f32>,
    /// max over steps of |luwu - zero| / zero.
    pub max_gap: f64,
    pub resends: u64,
    pub transfers: u64,
}

/// A worker's batch at `step`: the same rule as `inabench_train::dp`.
fn shard(data: &Dataset, cfg: &TrainConfig, step: usize, w: usize) -> (Vec<Vec<f32>>, Vec<usize>) {
    let batch = cfg.micro_batch * cfg.workers;
    let n = data.xs.len();
    let start = (step * batch + w * cfg.micro_batch) % n;
    let idx: Vec<usize> = (0..cfg.micro_batch).map(|k| (start + k) % n).collect();
    (
        idx.iter().map(|i| data.xs[*i].clone()).collect(),
        idx.iter().map(|i| data.ys[*i]).collect(),
    )
}

/// bf16-rounded gradients and the mean loss of every worker at `step` with parameters `params`.
fn gradients(
    base: &Model,
    params: &[f32],
    data: &Dataset,
    cfg: &TrainConfig,
    step: usize,
) -> (f32, Vec<Vec<f32>>) {
    let mut m = base.clone();
    m.params.copy_from_slice(params);
    let mut loss = 0f64;
    let grads = (0..cfg.workers)
        .map(|w| {
            let (xs, ys) = shard(data, cfg, step, w);
            let (l, g) = m.loss_and_grad(&xs, &ys);
            loss += f64::from(l);
            g.into_iter().map(convert::bf16).collect()
        })
        .collect();
    ((loss / cfg.workers as f64) as f32, grads)
}

/// NCCL-style ring reduce-scatter order with bf16 partial sums, then the full sum vector.
fn ring_sum(grads: &[Vec<f32>]) -> Vec<f32> {
    let n = grads.len();
    let len = grads[0].len();
    let chunk = len.div_ceil(n);
    (0..len)
        .map(|i| {
            let c = i / chunk;
            let mut acc = grads[(c + 1) % n][i];
            for k in 2..=n {
                acc = convert::bf16(acc + grads[(c + k) % n][i]);
            }
            acc
        })
        .collect()
}

/// The transport configuration training uses: the pushpull spec's defaults at 100 Gbps.
pub fn transport_config(workers: usize) -> Config {
    let (vpp, window, rate) = (64, 256, 100e9);
    let t_send = Config::t_send_ns(window, vpp, rate);
    Config {
        workers,
        values_per_packet: vpp,
        window,
        line_rate_bps: rate,
        heartbeat_ns: (t_send / 4.0) as u64,
        resend_timeout_ns: 1_000_000,
        stagger_ns: 125_000,
        consumer_rate: vec![1.0; workers],
        agg_consumer_rate: 1.0,
    }
}

/// Why training through the transport could not run or went wrong.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// A configuration the training cannot run with (the point's parameters).
    #[error("{0}")]
    Config(&'static str),
    /// A transfer through the transport gave a result that is not the exact one.
    #[error("a transfer through the transport was not exact (finished: {finished})")]
    NotExact { finished: bool },
}

/// Run one job through the transport; its result must be exact.
fn transfer(
    tc: &Config,
    job: &Job,
    faults: Faults,
    curves: &mut Curves,
) -> Result<Vec<i32>, TrainError> {
    let (_, o) = run_sim(tc, job, faults, 600_000_000_000);
    curves.resends += o.resends;
    curves.transfers += 1;
    if !o.exact {
        return Err(TrainError::NotExact {
            finished: o.finished,
        });
    }
    if !job.params.is_empty() {
        Ok(o.pulled.first().cloned().unwrap_or_default())
    } else {
        Ok(o.aggregate)
    }
}

/// Train both systems and return their loss curves.
pub fn train(cfg: &TrainConfig) -> Result<Curves, TrainError> {
    if cfg.workers < 2 || cfg.workers > 64 || cfg.dims.len() < 2 || cfg.micro_batch == 0 {
        return Err(TrainError::Config(
            "need 2..64 workers, at least two layer widths and a micro-batch",
        ));
    }
    let classes = cfg.dims[cfg.dims.len() - 1];
    let data = match cfg.data {
        Data::Clusters => clusters(cfg.samples, cfg.dims[0], classes, cfg.seed),
        Data::Bigram { vocab, context } => {
            if cfg.dims[0] != vocab * context || classes != vocab || vocab < 2 || context == 0 {
                return Err(TrainError::Config(
                    "a language model needs vocab x context inputs and vocab outputs",
                ));
            }
            bigram_corpus(cfg.samples, vocab, context, cfg.seed)
        }
    };
    let base = Model::new(
        Arch::Mlp {
            dims: cfg.dims.clone(),
        },
        cfg.seed,
    );
    let hp = AdamParams {
        lr: cfg.lr,
        ..AdamParams::default()
    };
    let n = cfg.workers;
    let p = base.params.len();
    let tc = transport_config(n);
    let block = tc.values_per_packet;
    let mut curves = Curves::default();
    let mut step_faults = 0u64;
    let mut faults = || {
        step_faults += 1;
        Faults {
            loss: cfg.loss,
            seed: cfg.seed.wrapping_mul(1_000_003).wrapping_add(step_faults),
            ..Faults::default()
        }
    };
    // fp32 masters, moments, and the bf16 copies the workers compute with
    let init: Vec<f32> = base.params.iter().map(|x| convert::bf16(*x)).collect();
    let (mut lm, mut lmm, mut lmv) = (base.params.clone(), vec![0f32; p], vec![0f32; p]);
    let (mut zm, mut zmm, mut zmv) = (base.params.clone(), vec![0f32; p], vec![0f32; p]);
    let (mut lw, mut zw) = (init.clone(), init);
    for step in 0..=cfg.steps {
        // LuWu
        let (loss, grads) = gradients(&base, &lw, &data, cfg, step);
        curves.luwu.push(loss);
        // ZeRO-Infinity
        let (zloss, zgrads) = gradients(&base, &zw, &data, cfg, step);
        curves.zero_infinity.push(zloss);
        if step == cfg.steps {
            break;
        }
        let adam = AdamStep::new(hp, step as u64 + 1);
        // 1. exponent agreement: push (max) then pull
        let exps = transfer(
            &tc,
            &Job {
                grads: grads
                    .iter()
                    .map(|g| convert::block_exponents(g, block))
                    .collect(),
                max: true,
                params: vec![],
            },
            faults(),
            &mut curves,
        )?;
        let pulled_exps = transfer(
            &tc,
            &Job {
                grads: vec![vec![]; n],
                max: false,
                params: exps,
            },
            faults(),
            &mut curves,
        )?;
        // 2. integer gradients: push, aggregate in the switch, pull at the AggNIC
        let sums = transfer(
            &tc,
            &Job {
                grads: grads
                    .iter()
                    .map(|g| convert::quantise(g, &pulled_exps, block, n))
                    .collect(),
                max: false,
                params: vec![],
            },
            faults(),
            &mut curves,
        )?;
        let sum = convert::dequantise(&sums, &pulled_exps, block, n);
        let mean: Vec<f32> = sum.iter().map(|g| g / n as f32).collect();
        adam.apply(&mut lm, &mut lmm, &mut lmv, &mean);
        // 3. bf16 parameters: push from the AggNIC, pull at every WorkerNIC
        let bits: Vec<i32> = lm
            .iter()
            .map(|x| convert::bf16(*x).to_bits() as i32)
            .collect();
        let got = transfer(
            &tc,
            &Job {
                grads: vec![vec![]; n],
                max: false,
                params: bits,
            },
            faults(),
            &mut curves,
        )?;
        lw = got.into_iter().map(|b| f32::from_bits(b as u32)).collect();
        // ZeRO-Infinity's step
        let zsum = ring_sum(&zgrads);
        let zmean: Vec<f32> = zsum.iter().map(|g| g / n as f32).collect();
        adam.apply(&mut zm, &mut zmm, &mut zmv, &zmean);
        zw = zm.iter().map(|x| convert::bf16(*x)).collect();
    }
    curves.max_gap = curves
        .luwu
        .iter()
        .zip(&curves.zero_infinity)
        .map(|(a, b)| (f64::from(*a) - f64::from(*b)).abs() / f64::from(*b).abs().max(1e-12))
        .fold(0.0, f64::max);
    Ok(curves)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_sum_is_close_to_the_exact_sum() {
        let g: Vec<Vec<f32>> = (0..4)
            .map(|w| (0..10).map(|i| (i * 4 + w) as f32 * 0.1).collect())
            .collect();
        let s = ring_sum(&g);
        for (i, v) in s.iter().enumerate() {
            let want: f32 = g.iter().map(|x| x[i]).sum();
            assert!((v - want).abs() <= want.abs() * 0.02 + 1e-6, "{i}");
        }
    }
}
