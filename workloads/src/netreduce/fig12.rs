//! `netreduce.training_quality` (NetReduce Fig. 12): train the same model from the same seed on
//! the same data twice, once with ring all-reduce and once through the system under test, every
//! gradient of every step going through the protocol code on the fabric, and report the loss
//! difference ratio |L_sys - L_ring| / L_ring at the point's iteration (and its maximum up to it).
//! Spec: `experiments/netreduce/fig12.yaml`. The models, data and data-parallel trainer are
//! [`inabench_train`]'s.

use inabench_core::{Fidelity, PointCtx, Workload, WorkloadError};
use inabench_ina_run::collective::{Aggregation, Fabric, allreduce_f32};
use inabench_train::data;
use inabench_train::dp::{self, StepLog, Tolerance};
use inabench_train::model::{Arch, Model};

pub struct Quality;

/// The model and data of a point (our choices, stated in the spec).
pub fn setup(model: &str, seed: u64) -> Option<(Model, data::Dataset)> {
    Some(match model {
        "mlp" => (
            Model::new(
                Arch::Mlp {
                    dims: vec![32, 64, 64, 10],
                },
                seed,
            ),
            data::clusters(4096, 32, 10, seed),
        ),
        "cnn" => (
            Model::new(
                Arch::Cnn {
                    side: 12,
                    filters: 8,
                    classes: 8,
                },
                seed,
            ),
            data::bars(4096, 12, 8, seed),
        ),
        "transformer" => (
            Model::new(
                Arch::Transformer(inabench_train::transformer::Shape {
                    vocab: 9,
                    seq: 8,
                    width: 16,
                    hidden: 32,
                    blocks: 2,
                    classes: 8,
                }),
                seed,
            ),
            data::marked(4096, 8, 8, seed),
        ),
        _ => return None,
    })
}

/// Why [`run`] trained no model.
#[derive(Debug, thiserror::Error)]
pub enum Fig12Error {
    /// The point names a model [`setup`] does not build.
    #[error("no model `{0}` (mlp, cnn, transformer)")]
    NoModel(String),
    /// Training stopped: a wrong or uneven aggregate, diverged workers, or the aggregation's
    /// own error (a `RunError`, kept typed as the source).
    #[error(transparent)]
    Train(#[from] dp::TrainError),
}

/// Train with `agg` and return the losses.
#[allow(clippy::too_many_arguments)]
pub fn run(
    agg: Aggregation,
    model: &str,
    workers: usize,
    steps: usize,
    batch: usize,
    lr: f32,
    fabric: Fabric,
    seed: u64,
) -> Result<Vec<StepLog>, Fig12Error> {
    let (m, d) = setup(model, seed).ok_or_else(|| Fig12Error::NoModel(model.to_string()))?;
    let tolerance = Tolerance {
        rel: 8.0 * f64::from(f32::EPSILON),
        abs_per_block: if agg.block_float() {
            dp::bfp_block_error
        } else {
            dp::no_block_error
        },
    };
    let mut aggregate = |g: &[Vec<f32>]| allreduce_f32(agg, g, fabric).map(|o| o.results);
    let (log, _) = dp::train(&m, &d, workers, batch, steps, lr, tolerance, &mut aggregate)?;
    Ok(log)
}

impl Workload for Quality {
    fn id(&self) -> &'static str {
        "netreduce.training_quality"
    }

    fn fidelities(&self) -> &'static [Fidelity] {
        &[Fidelity::Functional]
    }

    fn fabric(&self, _f: Fidelity) -> &'static str {
        "sim"
    }

    fn systems(&self) -> Option<&'static [&'static str]> {
        Some(&["netreduce", "switchml"])
    }

    fn run(&self, ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
        let text = |k: &str, d: &str| ctx.text(k).unwrap_or_else(|_| d.to_string());
        let model = text("model", "mlp");
        let fabric_name = text("fabric", "sim");
        let fabric = Fabric::parse(&fabric_name).ok_or_else(|| {
            WorkloadError::Invalid(format!("fabric is sim, mem or udp, not `{fabric_name}`"))
        })?;
        ctx.fabric = fabric.name();
        let workers = ctx.count("workers")?;
        let steps = ctx.count("iteration")?;
        let batch = ctx.param("batch").unwrap_or(64.0) as usize;
        let lr = ctx.param("lr").unwrap_or(0.05) as f32;
        let agg = Aggregation::parse(ctx.system())
            .ok_or_else(|| WorkloadError::Invalid(format!("no aggregation `{}`", ctx.system())))?;
        let t0 = std::time::Instant::now();
        let ring = run(
            Aggregation::RING,
            &model,
            workers,
            steps,
            batch,
            lr,
            fabric,
            ctx.seed,
        )
        .map_err(|e| WorkloadError::WrongResult(format!("ring all-reduce: {e}")))?;
        let sys = run(agg, &model, workers, steps, batch, lr, fabric, ctx.seed)
            .map_err(|e| WorkloadError::WrongResult(format!("{}: {e}", ctx.system())))?;
        let elapsed = t0.elapsed().as_secs_f64();
        let ratio = |a: &StepLog, b: &StepLog| {
            f64::from((a.loss - b.loss).abs()) / f64::from(b.loss).max(1e-30) * 100.0
        };
        let (Some(last_s), Some(last_r)) = (sys.last(), ring.last()) else {
            return Err(WorkloadError::Invalid("no steps".into()));
        };
        let max = sys
            .iter()
            .zip(&ring)
            .map(|(a, b)| ratio(a, b))
            .fold(0f64, f64::max);
        ctx.record("loss_diff_ratio", ratio(last_s, last_r));
        ctx.record_if_declared("loss_diff_ratio_max", max);
        ctx.record_if_declared("loss", f64::from(last_s.loss));
        ctx.record_if_declared("first_loss", f64::from(sys[0].loss));
        ctx.record_if_declared("steps_per_s", 2.0 * steps as f64 / elapsed.max(1e-9));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use inabench_ina::RunError;

    #[test]
    fn ring_and_netreduce_learn_and_stay_close() {
        let ring = run(Aggregation::RING, "mlp", 4, 40, 64, 0.05, Fabric::Sim, 1).expect("ring");
        let inet = run(
            Aggregation::NETREDUCE,
            "mlp",
            4,
            40,
            64,
            0.05,
            Fabric::Sim,
            1,
        )
        .expect("netreduce");
        assert!(
            ring[39].loss < ring[0].loss * 0.8,
            "it learns: {} -> {}",
            ring[0].loss,
            ring[39].loss
        );
        let r = (inet[39].loss - ring[39].loss).abs() / ring[39].loss;
        assert!(r < 1e-3, "{r}");
    }

    /// A model the point names but `setup` does not build is refused before any training,
    /// with the sentence the row's error carries.
    #[test]
    fn an_unknown_model_is_refused_by_name() {
        let e = run(Aggregation::RING, "resnet", 4, 1, 64, 0.05, Fabric::Sim, 1)
            .expect_err("no such model");
        assert!(
            matches!(&e, Fig12Error::NoModel(m) if m == "resnet"),
            "{e:?}"
        );
        assert_eq!(e.to_string(), "no model `resnet` (mlp, cnn, transformer)");
    }

    #[test]
    fn a_system_that_double_counts_is_stopped() {
        let (m, d) = setup("mlp", 1).expect("setup");
        let tol = Tolerance {
            rel: 1e-6,
            abs_per_block: dp::no_block_error,
        };
        // count worker 0's largest gradient element twice
        let mut twice = |g: &[Vec<f32>]| -> Result<_, RunError> {
            let mut s = allreduce_f32(Aggregation::Local, g, Fabric::Sim)?.results;
            let (i, _) = g[0].iter().enumerate().fold((0, 0f32), |a, (i, v)| {
                if v.abs() > a.1 { (i, v.abs()) } else { a }
            });
            for r in &mut s {
                r[i] += g[0][i];
            }
            Ok(s)
        };
        let Err(e) = dp::train(&m, &d, 4, 64, 3, 0.05, tol, &mut twice) else {
            panic!("a double-counted gradient went unnoticed");
        };
        assert!(
            matches!(e, dp::TrainError::WrongAggregate { step: 0, .. }),
            "{e}"
        );
        // and one that gives workers different sums
        let mut uneven = |g: &[Vec<f32>]| -> Result<_, RunError> {
            let mut s = allreduce_f32(Aggregation::Local, g, Fabric::Sim)?.results;
            let (i, _) = g[0].iter().enumerate().fold((0, 0f32), |a, (i, v)| {
                if v.abs() > a.1 { (i, v.abs()) } else { a }
            });
            s[2][i] *= 1.5;
            Ok(s)
        };
        let Err(e) = dp::train(&m, &d, 4, 64, 3, 0.05, tol, &mut uneven) else {
            panic!("workers with different sums went unnoticed");
        };
        assert!(
            matches!(
                e,
                dp::TrainError::WrongAggregate {
                    step: 0,
                    worker: 2,
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn the_transformer_learns_through_netreduce_and_stays_close_to_ring() {
        let steps = 60;
        let ring = run(
            Aggregation::RING,
            "transformer",
            4,
            steps,
            64,
            0.05,
            Fabric::Mem,
            1,
        )
        .expect("ring");
        let inet = run(
            Aggregation::NETREDUCE,
            "transformer",
            4,
            steps,
            64,
            0.05,
            Fabric::Mem,
            1,
        )
        .expect("netreduce");
        let (first, last) = (ring[0].loss, ring[steps - 1].loss);
        eprintln!(
            "transformer: ring {first} -> {last}, netreduce {}",
            inet[steps - 1].loss
        );
        assert!(last < first * 0.95, "it learns: {first} -> {last}");
        let r = (inet[steps - 1].loss - last).abs() / last;
        assert!(r < 1e-2, "{r}");
    }

    /// Training on `udp` (every node on its own socket on loopback, a thread per node): every
    /// system keeps the workers' parameters bit-identical, and a system that double-counts a
    /// gradient on top of a real udp all-reduce is stopped.
    #[test]
    fn training_over_udp_keeps_workers_identical_and_catches_double_counting() {
        let (m, d) = setup("mlp", 3).expect("setup");
        for agg in [
            Aggregation::RING,
            Aggregation::NETREDUCE,
            Aggregation::SWITCHML,
        ] {
            let tol = Tolerance {
                rel: 8.0 * f64::from(f32::EPSILON),
                abs_per_block: if agg.block_float() {
                    dp::bfp_block_error
                } else {
                    dp::no_block_error
                },
            };
            let mut frames = 0;
            let mut via_udp = |g: &[Vec<f32>]| -> Result<_, RunError> {
                let o = allreduce_f32(agg, g, Fabric::Udp)?;
                frames += o.frames;
                Ok(o.results)
            };
            let (log, replicas) =
                dp::train(&m, &d, 3, 48, 5, 0.05, tol, &mut via_udp).expect("udp training");
            assert!(frames > 0, "{agg:?}: frames went over the sockets");
            assert_eq!(log.len(), 5);
            assert_eq!(replicas.len(), 3);
            let bits = |m: &Model| m.params.iter().map(|p| p.to_bits()).collect::<Vec<_>>();
            assert!(
                replicas.iter().all(|r| bits(r) == bits(&replicas[0])),
                "{agg:?}: bit-identical replicas"
            );
            assert_ne!(
                bits(&replicas[0]),
                bits(&m),
                "{agg:?}: the parameters moved"
            );
        }
        let tol = Tolerance {
            rel: 8.0 * f64::from(f32::EPSILON),
            abs_per_block: dp::no_block_error,
        };
        let mut twice = |g: &[Vec<f32>]| -> Result<_, RunError> {
            let mut s = allreduce_f32(Aggregation::NETREDUCE, g, Fabric::Udp)?.results;
            for r in &mut s {
                r[5] += g[1][5];
            }
            Ok(s)
        };
        // element 5 is a first-layer weight; with this seed its gradient is not zero at step 0
        let e = dp::train(&m, &d, 3, 48, 3, 0.05, tol, &mut twice)
            .expect_err("a double-counted gradient went unnoticed");
        assert!(
            matches!(e, dp::TrainError::WrongAggregate { index: 5, .. }),
            "{e}"
        );
    }

    #[test]
    fn the_cnn_trains_through_switchml() {
        let log = run(
            Aggregation::SWITCHML,
            "cnn",
            2,
            10,
            32,
            0.05,
            Fabric::Sim,
            2,
        )
        .expect("switchml");
        assert!(log.iter().all(|l| l.loss.is_finite()));
    }
}
