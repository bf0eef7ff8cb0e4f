//! Data-parallel synchronous SGD: every worker holds its own copy of the parameters, computes the
//! gradient of its shard of the global batch, hands it to the aggregation, and applies the mean of
//! what comes back. Every step checks that all workers still hold bit-identical parameters and
//! that the aggregate is the sum of the gradients (within the aggregation's documented error), so
//! a system that drops or double-counts a gradient stops the run.

use crate::data::Dataset;
use crate::model::Model;

#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error("step {step}: workers' parameters differ after the update")]
    Diverged { step: usize },
    #[error(
        "step {step}: worker {worker}'s aggregate of element {index} is {got}, the gradients sum to {want}"
    )]
    WrongAggregate {
        step: usize,
        worker: usize,
        index: usize,
        got: f32,
        want: f64,
    },
    /// The aggregation itself failed (its own error, typed by the system that aggregates).
    #[error("step {step}: {source}")]
    Aggregation {
        step: usize,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("step {step}: the aggregation returned the wrong number or length of results")]
    Shape { step: usize },
}

/// How far an aggregate may be from the exact sum: `rel` of the terms' magnitudes, plus `abs`.
#[derive(Debug, Clone, Copy)]
pub struct Tolerance {
    pub rel: f64,
    pub abs_per_block: fn(&[Vec<f32>], usize) -> f64,
}

/// An aggregation: one gradient vector per worker in, one sum per worker out, or the
/// aggregation's own error `E` (a fabric's, a system's; `Infallible` for a local sum).
pub type Aggregate<'a, E> = dyn FnMut(&[Vec<f32>]) -> Result<Vec<Vec<f32>>, E> + 'a;

/// One step's record.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepLog {
    pub step: usize,
    /// Mean over workers of each worker's batch loss before the update.
    pub loss: f32,
}

/// Train `steps` steps of `workers` workers on `data` (global batch `batch`, learning rate `lr`),
/// aggregating with `aggregate` (one gradient vector per worker in, one sum per worker out).
#[allow(clippy::too_many_arguments)]
pub fn train<E: std::error::Error + Send + Sync + 'static>(
    model: &Model,
    data: &Dataset,
    workers: usize,
    batch: usize,
    steps: usize,
    lr: f32,
    tolerance: Tolerance,
    aggregate: &mut Aggregate<'_, E>,
) -> Result<(Vec<StepLog>, Vec<Model>), TrainError> {
    let mut replicas: Vec<Model> = (0..workers).map(|_| model.clone()).collect();
    let per = (batch / workers).max(1);
    let n = data.xs.len();
    let mut log = Vec::with_capacity(steps);
    for step in 0..steps {
        let mut grads = Vec::with_capacity(workers);
        let mut loss = 0f64;
        for (w, m) in replicas.iter().enumerate() {
            let start = (step * batch + w * per) % n;
            let idx: Vec<usize> = (0..per).map(|k| (start + k) % n).collect();
            let xs: Vec<Vec<f32>> = idx.iter().map(|i| data.xs[*i].clone()).collect();
            let ys: Vec<usize> = idx.iter().map(|i| data.ys[*i]).collect();
            let (l, g) = m.loss_and_grad(&xs, &ys);
            loss += f64::from(l);
            grads.push(g);
        }
        let sums = aggregate(&grads).map_err(|e| TrainError::Aggregation {
            step,
            source: Box::new(e),
        })?;
        // the aggregate is the sum of the gradients
        if sums.len() != workers || sums.iter().any(|s| s.len() != grads[0].len()) {
            return Err(TrainError::Shape { step });
        }
        for (worker, sum) in sums.iter().enumerate() {
            for (i, got) in sum.iter().enumerate() {
                let want: f64 = grads.iter().map(|g| f64::from(g[i])).sum();
                let mag: f64 = grads.iter().map(|g| f64::from(g[i]).abs()).sum();
                let tol = tolerance.rel * mag + (tolerance.abs_per_block)(&grads, i) + 1e-30;
                // a NaN aggregate fails too
                let ok = (f64::from(*got) - want).abs() <= tol;
                if !ok {
                    return Err(TrainError::WrongAggregate {
                        step,
                        worker,
                        index: i,
                        got: *got,
                        want,
                    });
                }
            }
        }
        for (m, s) in replicas.iter_mut().zip(&sums) {
            for (p, g) in m.params.iter_mut().zip(s) {
                *p -= lr * g / workers as f32;
            }
        }
        if replicas.iter().any(|m| m.params != replicas[0].params) {
            return Err(TrainError::Diverged { step });
        }
        log.push(StepLog {
            step,
            loss: (loss / workers as f64) as f32,
        });
    }
    Ok((log, replicas))
}

/// No block-wise error (float sums).
pub fn no_block_error(_: &[Vec<f32>], _: usize) -> f64 {
    0.0
}

/// SwitchML's block floating point bound for element `i`.
pub fn bfp_block_error(grads: &[Vec<f32>], i: usize) -> f64 {
    let block = 48;
    let b = i / block * block;
    let e = grads
        .iter()
        .map(|g| inabench_ina::bfp::block_exponent(&g[b..(b + block).min(g.len())]))
        .max()
        .unwrap_or(-126);
    inabench_ina::bfp::error_bound(e, grads.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Arch;

    #[derive(Debug, thiserror::Error, PartialEq)]
    #[error("the fabric lost worker {0}")]
    struct Lost(usize);

    /// An aggregation's own error reaches the caller typed (the step and the source, which
    /// downcasts to the aggregation's type), and results of the wrong shape are their own error;
    /// an exact local sum trains.
    #[test]
    fn an_aggregation_error_stays_typed_and_a_wrong_shape_is_refused() {
        let model = Model::new(
            Arch::Mlp {
                dims: vec![4, 8, 3],
            },
            1,
        );
        let data = crate::data::clusters(64, 4, 3, 1);
        let tol = Tolerance {
            rel: 1e-5,
            abs_per_block: no_block_error,
        };
        let mut calls = 0;
        let mut lossy = |g: &[Vec<f32>]| {
            calls += 1;
            if calls == 2 {
                return Err(Lost(1));
            }
            let sum: Vec<f32> = (0..g[0].len())
                .map(|i| g.iter().map(|v| v[i]).sum())
                .collect();
            Ok(vec![sum; g.len()])
        };
        let e = train(&model, &data, 2, 16, 3, 0.05, tol, &mut lossy).expect_err("lost");
        assert_eq!(e.to_string(), "step 1: the fabric lost worker 1");
        let TrainError::Aggregation { step, source } = e else {
            panic!("{e}")
        };
        assert_eq!(step, 1);
        assert_eq!(source.downcast_ref::<Lost>(), Some(&Lost(1)));
        let mut short = |g: &[Vec<f32>]| -> Result<_, std::convert::Infallible> {
            Ok(vec![vec![0.0; g[0].len()]; g.len() - 1])
        };
        let e = train(&model, &data, 2, 16, 3, 0.05, tol, &mut short).expect_err("shape");
        assert!(matches!(e, TrainError::Shape { step: 0 }), "{e}");
        let mut exact = |g: &[Vec<f32>]| -> Result<_, std::convert::Infallible> {
            let sum: Vec<f32> = (0..g[0].len())
                .map(|i| g.iter().map(|v| v[i]).sum())
                .collect();
            Ok(vec![sum; g.len()])
        };
        let (log, _) = train(&model, &data, 2, 16, 3, 0.05, tol, &mut exact).expect("trains");
        assert_eq!(log.len(), 3);
    }
}
