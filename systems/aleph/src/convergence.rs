//! aleph-fig12, modelled: test accuracy against training time for BytePS, Horovod and ALEPH on
//! the 9-machine testbed of Sec. 6.3.
//!
//! The three systems are synchronous and sum the same gradients (Sec. 3.1), so they share one
//! accuracy-per-epoch curve; what differs is the time an iteration takes. The model composes:
//! - the curve: from a user's CSV (`epoch,accuracy`), or by default from the suite's functional
//!   trainer (`inabench-train`'s small CNN on seeded synthetic 10-class bar images; plain SGD),
//!   test accuracy after every epoch on a held-out seeded set. Epoch e of the paper's `epochs` is
//!   read at e / epochs of the curve's length (the trainer runs fewer epochs than 150);
//! - an iteration's time = compute + communication (no overlap: the paper does not say, and
//!   BytePS, Horovod and ALEPH all start aggregating after the backward pass in its Fig. 1);
//! - communication: one iteration on a flow-level model of the testbed ([`crate::flowsim`], max-min
//!   fair): 8 workers and a PS on one non-blocking switch, each host's access link at its rate in
//!   both directions. BytePS: every worker's push and pull is one coupled flow through the PS's
//!   links; ALEPH: each cluster is one coupled flow (members to their aggregator and back, the
//!   aggregator to the PS and back), a worker without aggregator a cluster of one; Horovod: ring
//!   all-reduce, 2(n-1) synchronous steps of G/n. The same traffic model as [`crate::scenario`]
//!   (Sec. 6.4), on the testbed's star;
//! - compute: FLOPs per image (He et al., CVPR 2016: ResNet-50 3.8 GFLOPs, VGG-19 19.6 GFLOPs at
//!   224 x 224), times 3 for forward and backward, times the batch, over the RTX 3080 Ti's FP32
//!   peak (NVIDIA's data sheet: 34.1 TFLOPS) times an assumed efficiency (`gpu_efficiency`). The
//!   same compute is added to every system, so orderings do not depend on it; the gaps do.

use crate::AlephError;
use crate::flowsim::FlowSim;
use inabench_rng::SplitMix64;
use inabench_train::data;
use inabench_train::model::{Arch, Model};

/// Test accuracy (fraction) after each epoch; `acc[0]` is after epoch 1.
#[derive(Debug, Clone, PartialEq)]
pub struct Curve {
    pub acc: Vec<f64>,
    /// Accuracy before training (chance for the default curve).
    pub start: f64,
}

impl Curve {
    /// Accuracy after `e` epochs of `len` (the paper's epochs), `e` fractional: the curve read at
    /// `e / len` of its length, linear between its points, `start` at 0, the last value after it.
    pub fn at(&self, e: f64, len: f64) -> f64 {
        let n = self.acc.len();
        if n == 0 || len <= 0.0 {
            return self.start;
        }
        let x = (e / len * n as f64).max(0.0);
        if x >= n as f64 {
            return self.acc[n - 1];
        }
        let i = x.floor() as usize;
        let lo = if i == 0 { self.start } else { self.acc[i - 1] };
        let hi = self.acc[i];
        lo + (hi - lo) * (x - i as f64)
    }

    /// A curve from CSV text: a header line, then `epoch,accuracy` lines with epochs 1, 2, ...
    /// and accuracies in percent (0-100).
    pub fn from_csv(text: &str, start: f64) -> Result<Curve, CurveError> {
        let mut acc = Vec::new();
        for (no, line) in text.lines().enumerate().skip(1) {
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            let f: Vec<&str> = line.split(',').map(str::trim).collect();
            let (Some(e), Some(a), 2) = (
                f.first().and_then(|v| v.parse::<usize>().ok()),
                f.get(1).and_then(|v| v.parse::<f64>().ok()),
                f.len(),
            ) else {
                return Err(CurveError::NotEpochAccuracy {
                    line: no + 1,
                    text: line.to_string(),
                });
            };
            if e != acc.len() + 1 {
                return Err(CurveError::EpochOutOfOrder {
                    line: no + 1,
                    epoch: e,
                    expected: acc.len() + 1,
                });
            }
            if !(0.0..=100.0).contains(&a) {
                return Err(CurveError::NotAPercentage {
                    line: no + 1,
                    accuracy: a,
                });
            }
            acc.push(a / 100.0);
        }
        if acc.is_empty() {
            return Err(CurveError::Empty);
        }
        Ok(Curve { acc, start })
    }
}

/// Why a CSV accuracy curve was refused (`Curve::from_csv`); `line` counts from 1, the header
/// being line 1.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CurveError {
    #[error("line {line}: `{text}` is not `epoch,accuracy`")]
    NotEpochAccuracy { line: usize, text: String },
    #[error("line {line}: epoch {epoch} where epoch {expected} was expected")]
    EpochOutOfOrder {
        line: usize,
        epoch: usize,
        expected: usize,
    },
    #[error("line {line}: accuracy {accuracy} is not a percentage")]
    NotAPercentage { line: usize, accuracy: f64 },
    #[error("no `epoch,accuracy` line")]
    Empty,
}

/// The functional trainer's curve: a small CNN (16 x 16 images, 8 filters) on seeded bar images
/// of 10 classes, SGD with batch 64, `epochs` epochs over `images` training images, accuracy on
/// 1,000 held-out images after each.
pub fn trained_curve(epochs: usize, images: usize, seed: u64) -> Curve {
    const SIDE: usize = 16;
    const CLASSES: usize = 10;
    const BATCH: usize = 64;
    const LR: f32 = 0.05;
    let train = data::bars(images, SIDE, CLASSES, seed);
    let test = data::bars(1000, SIDE, CLASSES, seed ^ 0x5eed_7e57);
    let mut model = Model::new(
        Arch::Cnn {
            side: SIDE,
            filters: 8,
            classes: CLASSES,
        },
        seed,
    );
    let start = model.accuracy(&test.xs, &test.ys);
    let mut order: Vec<usize> = (0..train.xs.len()).collect();
    let mut rng = SplitMix64::derive(seed, "aleph-fig12-shuffle");
    let mut acc = Vec::with_capacity(epochs);
    for _ in 0..epochs {
        for i in (1..order.len()).rev() {
            order.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
        }
        for chunk in order.chunks(BATCH) {
            let xs: Vec<Vec<f32>> = chunk.iter().map(|&i| train.xs[i].clone()).collect();
            let ys: Vec<usize> = chunk.iter().map(|&i| train.ys[i]).collect();
            let (_, g) = model.loss_and_grad(&xs, &ys);
            for (p, g) in model.params.iter_mut().zip(&g) {
                *p -= LR * g;
            }
        }
        acc.push(model.accuracy(&test.xs, &test.ys));
    }
    Curve { acc, start }
}

/// The three systems of the testbed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum System {
    BytePs,
    Horovod,
    Aleph,
}

/// One iteration's communication time (s) on the testbed's star: workers at `rates_gbps`, the PS
/// at `ps_gbps`, `bytes` of gradient per worker; ALEPH's clustering as a parent per worker
/// (`rates_gbps.len()` = the PS).
pub fn comm_time(
    system: System,
    rates_gbps: &[f64],
    ps_gbps: f64,
    bytes: f64,
    parent: &[usize],
) -> Result<f64, AlephError> {
    let n = rates_gbps.len();
    if n == 0 || parent.len() != n || bytes.is_nan() || bytes <= 0.0 {
        return Err(AlephError::Invalid(format!(
            "{n} workers, {} parents, {bytes} bytes",
            parent.len()
        )));
    }
    // resources: host h's uplink 2h and downlink 2h + 1, in bytes per second
    let caps: Vec<f64> = rates_gbps
        .iter()
        .chain(std::iter::once(&ps_gbps))
        .flat_map(|g| [g * 1e9 / 8.0; 2])
        .collect();
    let (up, down) = (|h: usize| (2 * h) as u32, |h: usize| (2 * h + 1) as u32);
    let mut sim = FlowSim::new(caps)?;
    // push a -> b and pull b -> a at one rate
    let both = |a: usize, b: usize| [(up(a), 1.0), (down(b), 1.0), (up(b), 1.0), (down(a), 1.0)];
    match system {
        System::BytePs => {
            for w in 0..n {
                sim.add_weighted_flow(both(w, n).to_vec(), bytes)?;
            }
        }
        System::Aleph => {
            for a in 0..n {
                if parent[a] != n {
                    continue;
                }
                let mut res: Vec<(u32, f64)> = both(a, n).to_vec();
                for m in (0..n).filter(|&m| parent[m] == a) {
                    res.extend(both(m, a));
                }
                sim.add_weighted_flow(res, bytes)?;
            }
        }
        System::Horovod => {
            for _ in 0..2 * (n - 1) {
                for i in 0..n {
                    sim.add_flow(vec![up(i), down((i + 1) % n)], bytes / n as f64)?;
                }
                sim.run()?;
            }
        }
    }
    sim.run()
}

/// Training FLOPs of one image (forward and backward), from He et al. 2016.
pub fn flops_per_image(model: &str) -> Option<f64> {
    match model {
        "resnet50" => Some(3.0 * 3.8e9),
        "vgg19" => Some(3.0 * 19.6e9),
        _ => None,
    }
}

/// FP32 peak of the paper's GPU (RTX 3080 Ti, NVIDIA's data sheet), FLOP/s.
pub const GPU_PEAK_FLOPS: f64 = 34.1e12;

/// How a system sums the workers' gradients, for aleph-fig12's functional class: the arithmetic
/// of each system's aggregation, everything else of the training the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Summation {
    /// BytePS: the PS adds the workers' float32 pushes in worker order and every worker pulls
    /// the same sum.
    PsFloat,
    /// Horovod: ring all-reduce in float32: the gradient in `n` chunks, chunk `c` accumulated
    /// along the ring from worker `c + 1` to worker `c` (reduce-scatter), then passed on as is
    /// (all-gather).
    RingFloat,
    /// ALEPH: every gradient as Q15.16 fixed point (`inabench_xdp::proto::to_fixed`, rounded,
    /// saturating), summed with wrapping `i32` addition as the XDP program sums them, decoded
    /// back to float32 (`from_fixed`).
    AlephFixed,
}

impl Summation {
    pub fn of(system: System) -> Summation {
        match system {
            System::BytePs => Summation::PsFloat,
            System::Horovod => Summation::RingFloat,
            System::Aleph => Summation::AlephFixed,
        }
    }

    /// The sum of `grads` (one vector per worker, all of one length) as this system computes it.
    pub fn sum(self, grads: &[Vec<f32>]) -> Vec<f32> {
        let n = grads.len();
        let len = grads.first().map_or(0, Vec::len);
        match self {
            Summation::PsFloat => {
                let mut s = vec![0f32; len];
                for g in grads {
                    for (a, x) in s.iter_mut().zip(g) {
                        *a += x;
                    }
                }
                s
            }
            Summation::RingFloat => {
                let mut s = vec![0f32; len];
                for (c, range) in chunks(len, n).into_iter().enumerate() {
                    for (i, out) in range.clone().zip(&mut s[range]) {
                        let mut a = grads[(c + 1) % n][i];
                        for k in 2..=n {
                            a += grads[(c + k) % n][i];
                        }
                        *out = a;
                    }
                }
                s
            }
            Summation::AlephFixed => {
                let mut s = vec![0i32; len];
                for g in grads {
                    for (a, x) in s.iter_mut().zip(g) {
                        *a = a.wrapping_add(inabench_xdp::proto::to_fixed(*x));
                    }
                }
                s.into_iter().map(inabench_xdp::proto::from_fixed).collect()
            }
        }
    }
}

/// The ring's `n` chunks of a `len`-element gradient (the first `len % n` one element longer).
fn chunks(len: usize, n: usize) -> Vec<std::ops::Range<usize>> {
    let n = n.max(1);
    let (q, r) = (len / n, len % n);
    let mut at = 0;
    (0..n)
        .map(|c| {
            let l = q + usize::from(c < r);
            let range = at..at + l;
            at += l;
            range
        })
        .collect()
}

/// What one functional training run gave.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionalRun {
    /// Test accuracy after the last step (fraction).
    pub final_accuracy: f64,
    /// Test accuracy before training (fraction).
    pub start_accuracy: f64,
    /// The workers' mean batch loss at the first and the last step.
    pub first_loss: f32,
    pub last_loss: f32,
    /// The trained parameters (every worker's: they are checked equal each step).
    pub params: Vec<f32>,
}

/// Q15.16 rounds each of the `n` terms by at most half a step (2^-17), so the decoded sum is
/// within `n` x 2^-17 of the float sum of the terms.
fn fixed_error(grads: &[Vec<f32>], _i: usize) -> f64 {
    grads.len() as f64 / f64::from(1u32 << 17)
}

/// Data-parallel training of the functional trainer's small CNN (as [`trained_curve`]: 16 x 16
/// bar images of 10 classes, 8 filters, plain SGD at 0.05) by `workers` workers with
/// `batch_per_worker` images each per step, `steps` steps over `images` training images, every
/// step's gradients summed as `summation` does (`inabench_train::dp::train`, which checks each
/// step that the sum is within the summation's error of the exact one and that all workers hold
/// the same parameters); test accuracy on the same 1,000 held-out images as the curve. The seed
/// fixes the data and the initial model, so two summations differ only in their arithmetic.
pub fn functional_run(
    summation: Summation,
    workers: usize,
    batch_per_worker: usize,
    steps: usize,
    images: usize,
    seed: u64,
) -> Result<FunctionalRun, AlephError> {
    use inabench_train::dp;
    const SIDE: usize = 16;
    const CLASSES: usize = 10;
    const LR: f32 = 0.05;
    if workers == 0 || batch_per_worker == 0 || steps == 0 || images == 0 {
        return Err(AlephError::Invalid(format!(
            "{workers} workers, {batch_per_worker} images a worker, {steps} steps, {images} images (all > 0)"
        )));
    }
    let train = data::bars(images, SIDE, CLASSES, seed);
    let test = data::bars(1000, SIDE, CLASSES, seed ^ 0x5eed_7e57);
    let model = Model::new(
        Arch::Cnn {
            side: SIDE,
            filters: 8,
            classes: CLASSES,
        },
        seed,
    );
    let start_accuracy = model.accuracy(&test.xs, &test.ys);
    let tolerance = match summation {
        // float sums in another order: a few ulps of the terms' magnitudes
        Summation::PsFloat | Summation::RingFloat => dp::Tolerance {
            rel: 1e-5,
            abs_per_block: dp::no_block_error,
        },
        Summation::AlephFixed => dp::Tolerance {
            rel: 1e-5,
            abs_per_block: fixed_error,
        },
    };
    let mut agg = |g: &[Vec<f32>]| -> Result<Vec<Vec<f32>>, std::convert::Infallible> {
        let s = summation.sum(g);
        Ok(vec![s; g.len()])
    };
    let (log, replicas) = dp::train(
        &model,
        &train,
        workers,
        workers * batch_per_worker,
        steps,
        LR,
        tolerance,
        &mut agg,
    )
    .map_err(|e| AlephError::Invalid(format!("functional training ({summation:?}): {e}")))?;
    let (first, last) = match (log.first(), log.last(), replicas.first()) {
        (Some(f), Some(l), Some(_)) => (f.loss, l.loss),
        _ => return Err(AlephError::Invalid("no step was trained".into())),
    };
    Ok(FunctionalRun {
        final_accuracy: replicas[0].accuracy(&test.xs, &test.ys),
        start_accuracy,
        first_loss: first,
        last_loss: last,
        params: replicas[0].params.clone(),
    })
}

#[cfg(test)]
mod functional_tests {
    use super::*;

    /// Each system's arithmetic: the ring adds in another order than the PS (1e8 + 1 - 1e8 in
    /// float32 depends on it), ALEPH's Q15.16 drops what is below half a step and wraps.
    #[test]
    fn each_system_sums_with_its_own_arithmetic() {
        // 2 workers, 2 elements: chunk 0 = element 0 starts at worker 1, chunk 1 at worker 0
        let g = vec![vec![1.0f32, 3.0], vec![2.0, 4.0]];
        assert_eq!(Summation::PsFloat.sum(&g), vec![3.0, 7.0]);
        assert_eq!(Summation::RingFloat.sum(&g), vec![3.0, 7.0]);
        // order: PS ((1e8 + 1) - 1e8) = 0 in float32; the ring for element 0 of 3 workers
        // starts at worker 1: ((1 - 1e8) + 1e8) = 0 too, element 1 (chunk 1, from worker 2):
        // ((-1e8 + 1e8) + 1) = 1
        let g = vec![vec![1e8f32, 1e8], vec![1.0, 1.0], vec![-1e8, -1e8]];
        assert_eq!(Summation::PsFloat.sum(&g), vec![0.0, 0.0]);
        assert_eq!(Summation::RingFloat.sum(&g), vec![0.0, 1.0]);
        // Q15.16: 1e-6 is below half a step (7.6e-6) and vanishes; 0.5 + 0.25 exactly;
        // 3 x 20000 wraps past 32768
        let g = vec![vec![1e-6f32, 0.5, 20000.0], vec![1e-6, 0.25, 20000.0]];
        let s = Summation::AlephFixed.sum(&g);
        assert_eq!(s[0], 0.0);
        assert_eq!(s[1], 0.75);
        assert_eq!(s[2], 40000.0 - 65536.0);
        assert_eq!(
            chunks(10, 4),
            vec![0..3, 3..6, 6..8, 8..10],
            "the first len % n chunks one longer"
        );
    }

    /// A short run learns under every summation, and the float sums in two orders end where
    /// ALEPH's fixed point ends within a few points (not identical: the arithmetic differs).
    #[test]
    fn functional_runs_learn_and_differ_only_by_arithmetic() {
        let runs: Vec<FunctionalRun> = [
            Summation::PsFloat,
            Summation::RingFloat,
            Summation::AlephFixed,
        ]
        .into_iter()
        .map(|s| functional_run(s, 8, 8, 40, 1000, 3).expect("trains"))
        .collect();
        for r in &runs {
            assert!(r.last_loss < r.first_loss, "{r:?}");
            assert!(r.final_accuracy > r.start_accuracy + 0.1, "{r:?}");
        }
        assert_eq!(runs[0].start_accuracy, runs[2].start_accuracy);
        // the arithmetic differs, so the trained parameters do, a little
        assert_ne!(runs[0].params, runs[2].params, "Q15.16 against float32");
        let most = runs[0]
            .params
            .iter()
            .zip(&runs[2].params)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(most > 0.0 && most < 0.05, "{most}");
        assert!(functional_run(Summation::PsFloat, 0, 8, 1, 10, 1).is_err());
    }
}
