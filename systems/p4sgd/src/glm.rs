//! Generalized linear models trained with synchronous mini-batch SGD on the CPU: linear
//! regression, logistic regression and SVM (hinge loss), on CSR sparse features (dense data is
//! CSR with every entry), single-worker, model-parallel (features partitioned across workers, the
//! partial activations of each micro-batch all-reduced; Alg. 1) and data-parallel (samples
//! partitioned, the gradient all-reduced). Data: a LIBSVM-format reader and a seeded synthetic
//! generator with a Table II data set's shape.
//!
//! Alg. 1 applies the model update once per mini-batch (the gradients of its micro-batches are
//! accumulated), so every micro-batch's forward pass sees the same model: model-parallel training
//! computes the same model as single-worker training, whatever the micro-batch pipelining, up to
//! the rounding of the all-reduce.

use inabench_rng::SplitMix64;
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum GlmError {
    #[error("{path}:{line}: {msg}")]
    Parse {
        path: String,
        line: usize,
        msg: String,
    },
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("invalid: {0}")]
    Invalid(String),
    #[error("all-reduce: {0}")]
    Reduce(String),
}

/// Samples in CSR form with one label each.
#[derive(Debug, Clone, PartialEq)]
pub struct Dataset {
    pub cols: usize,
    pub indptr: Vec<usize>,
    pub indices: Vec<u32>,
    pub values: Vec<f32>,
    /// +1 / -1 for classification, any value for regression.
    pub labels: Vec<f32>,
}

impl Dataset {
    pub fn rows(&self) -> usize {
        self.labels.len()
    }

    pub fn nnz(&self) -> usize {
        self.values.len()
    }

    /// A dense matrix (row-major) as CSR.
    pub fn from_dense(cols: usize, x: &[f32], labels: Vec<f32>) -> Result<Dataset, GlmError> {
        if x.len() != cols * labels.len() {
            return Err(GlmError::Invalid(format!(
                "{} values are not {} rows of {cols}",
                x.len(),
                labels.len()
            )));
        }
        let mut d = Dataset {
            cols,
            indptr: vec![0],
            indices: Vec::new(),
            values: Vec::new(),
            labels,
        };
        for r in x.chunks(cols.max(1)) {
            for (j, v) in r.iter().enumerate() {
                d.indices.push(j as u32);
                d.values.push(*v);
            }
            d.indptr.push(d.values.len());
        }
        Ok(d)
    }

    pub fn row(&self, i: usize) -> (&[u32], &[f32]) {
        let (a, b) = (self.indptr[i], self.indptr[i + 1]);
        (&self.indices[a..b], &self.values[a..b])
    }

    /// MLWeaving-style quantisation: features scaled to [0, 1] by the largest value and rounded to
    /// `bits` bits (what P4SGD's bit-serial engines compute on).
    pub fn quantised(&self, bits: u32) -> Dataset {
        let max = self
            .values
            .iter()
            .fold(0f32, |m, v| m.max(v.abs()))
            .max(1e-30);
        let levels = ((1u32 << bits) - 1) as f32;
        let mut d = self.clone();
        for v in d.values.iter_mut() {
            *v = (*v / max * levels).round() / levels;
        }
        d
    }
}

/// Read a LIBSVM file: `label index:value ...` per line, indices from 1 and increasing. A
/// malformed line is an error naming the file and the line.
pub fn read_libsvm(path: &Path) -> Result<Dataset, GlmError> {
    let text = std::fs::read_to_string(path).map_err(|source| GlmError::Io {
        path: path.display().to_string(),
        source,
    })?;
    parse_libsvm(&path.display().to_string(), &text)
}

pub fn parse_libsvm(name: &str, text: &str) -> Result<Dataset, GlmError> {
    let mut d = Dataset {
        cols: 0,
        indptr: vec![0],
        indices: Vec::new(),
        values: Vec::new(),
        labels: Vec::new(),
    };
    for (n, line) in text.lines().enumerate() {
        let bad = |msg: String| GlmError::Parse {
            path: name.to_string(),
            line: n + 1,
            msg,
        };
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut it = line.split_whitespace();
        let label: f32 = it
            .next()
            .and_then(|l| l.parse().ok())
            .ok_or_else(|| bad("the label is not a number".into()))?;
        let mut last = 0u64;
        for tok in it {
            let (i, v) = tok
                .split_once(':')
                .ok_or_else(|| bad(format!("`{tok}` is not index:value")))?;
            let i: u64 = i
                .parse()
                .map_err(|_| bad(format!("index `{i}` is not a positive integer")))?;
            let v: f32 = v
                .parse()
                .map_err(|_| bad(format!("value `{v}` is not a number")))?;
            if i == 0 || i <= last || i > u64::from(u32::MAX) {
                return Err(bad(format!(
                    "index {i} is not above the previous one ({last}) or out of range (indices start at 1)"
                )));
            }
            if !v.is_finite() {
                return Err(bad(format!("value `{v}` is not finite")));
            }
            last = i;
            d.indices.push((i - 1) as u32);
            d.values.push(v);
            d.cols = d.cols.max(i as usize);
        }
        d.labels.push(label);
        d.indptr.push(d.values.len());
    }
    if d.labels.is_empty() {
        return Err(GlmError::Invalid(format!("{name} has no samples")));
    }
    Ok(d)
}

/// A data set's shape (Table II) and the non-zeros per row of our stand-in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    pub name: &'static str,
    pub rows: usize,
    pub cols: usize,
    /// Non-zeros per row of the synthetic stand-in (our choice: the LIBSVM site's averages,
    /// rounded; `small` is ours).
    pub nnz_per_row: usize,
}

/// Table II's shapes, and `small`, the quick profiles' stand-in.
pub const SHAPES: [Shape; 6] = [
    Shape {
        name: "gisette",
        rows: 6_000,
        cols: 5_000,
        nnz_per_row: 4_956,
    },
    Shape {
        name: "real_sim",
        rows: 72_309,
        cols: 20_958,
        nnz_per_row: 52,
    },
    Shape {
        name: "rcv1",
        rows: 20_242,
        cols: 47_236,
        nnz_per_row: 74,
    },
    Shape {
        name: "amazon_fashion",
        rows: 200_000,
        cols: 332_710,
        nnz_per_row: 100,
    },
    Shape {
        name: "avazu",
        rows: 40_428_967,
        cols: 1_000_000,
        nnz_per_row: 15,
    },
    Shape {
        name: "small",
        rows: 4_096,
        cols: 8_192,
        nnz_per_row: 64,
    },
];

pub fn shape(name: &str) -> Option<Shape> {
    SHAPES.iter().copied().find(|s| s.name == name)
}

/// A seeded synthetic stand-in of `rows` samples of `shape` (rows may be fewer than the data
/// set's, to subsample): non-negative features in [0, 1] at random columns, labels +1/-1 from a
/// hidden linear model with label noise, so the problem is learnable but not separable.
pub fn synthetic(shape: &Shape, rows: usize, seed: u64) -> Dataset {
    let mut g = SplitMix64::derive(seed, &format!("dataset {}", shape.name));
    let cols = shape.cols;
    let truth: Vec<f32> = (0..cols)
        .map(|_| (g.next_f64() * 2.0 - 1.0) as f32)
        .collect();
    let k = shape.nnz_per_row.clamp(1, cols);
    let mut d = Dataset {
        cols,
        indptr: Vec::with_capacity(rows + 1),
        indices: Vec::with_capacity(rows * k),
        values: Vec::with_capacity(rows * k),
        labels: Vec::with_capacity(rows),
    };
    d.indptr.push(0);
    let mut cols_of_row: Vec<u32> = Vec::with_capacity(k);
    for _ in 0..rows {
        cols_of_row.clear();
        if k * 2 >= cols {
            cols_of_row.extend((0..cols as u32).filter(|_| g.next_f64() < k as f64 / cols as f64));
        } else {
            while cols_of_row.len() < k {
                let c = (g.next_u64() % cols as u64) as u32;
                if !cols_of_row.contains(&c) {
                    cols_of_row.push(c);
                }
            }
            cols_of_row.sort_unstable();
        }
        let mut dot = 0f64;
        for c in &cols_of_row {
            let v = g.next_f64() as f32;
            d.indices.push(*c);
            d.values.push(v);
            dot += f64::from(v) * f64::from(truth[*c as usize]);
        }
        let scale = (cols_of_row.len().max(1) as f64).sqrt();
        let p = 1.0 / (1.0 + (-4.0 * dot / scale).exp());
        d.labels.push(if g.next_f64() < p { 1.0 } else { -1.0 });
        d.indptr.push(d.values.len());
    }
    d
}

/// The model family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Glm {
    Linear,
    Logistic,
    Svm,
}

impl Glm {
    pub fn parse(s: &str) -> Option<Glm> {
        match s {
            "linear" => Some(Glm::Linear),
            "logistic" => Some(Glm::Logistic),
            "svm" => Some(Glm::Svm),
            _ => None,
        }
    }

    /// d loss / d activation.
    pub fn dloss(self, a: f32, y: f32) -> f32 {
        match self {
            Glm::Linear => a - y,
            Glm::Logistic => -y / (1.0 + (y * a).exp()),
            Glm::Svm => {
                if y * a < 1.0 {
                    -y
                } else {
                    0.0
                }
            }
        }
    }

    pub fn loss(self, a: f64, y: f64) -> f64 {
        match self {
            Glm::Linear => 0.5 * (a - y) * (a - y),
            Glm::Logistic => {
                let z = -y * a;
                if z > 30.0 { z } else { z.exp().ln_1p() }
            }
            Glm::Svm => (1.0 - y * a).max(0.0),
        }
    }
}

/// Mean loss of `w` over the data set.
pub fn mean_loss(glm: Glm, d: &Dataset, w: &[f32]) -> f64 {
    let mut s = 0.0;
    for i in 0..d.rows() {
        let (idx, val) = d.row(i);
        let a: f64 = idx
            .iter()
            .zip(val)
            .map(|(j, v)| f64::from(*v) * f64::from(w[*j as usize]))
            .sum();
        s += glm.loss(a, f64::from(d.labels[i]));
    }
    s / d.rows().max(1) as f64
}

/// Sums the workers' vectors; every worker gets the result (an all-reduce).
pub trait Reducer {
    fn allreduce(&mut self, parts: &[Vec<f32>]) -> Result<Vec<f32>, GlmError>;
}

/// The exact sum (f64, rounded once): the reference.
pub struct LocalSum;

impl Reducer for LocalSum {
    fn allreduce(&mut self, parts: &[Vec<f32>]) -> Result<Vec<f32>, GlmError> {
        let n = parts.first().map_or(0, Vec::len);
        let mut acc = vec![0f64; n];
        for p in parts {
            if p.len() != n {
                return Err(GlmError::Reduce("vectors of different lengths".into()));
            }
            for (a, x) in acc.iter_mut().zip(p) {
                *a += f64::from(*x);
            }
        }
        Ok(acc.into_iter().map(|v| v as f32).collect())
    }
}

/// Pairwise (recursive-doubling) summation in f32: the order an MPI all-reduce of a short
/// vector adds in.
pub struct TreeSum;

impl Reducer for TreeSum {
    fn allreduce(&mut self, parts: &[Vec<f32>]) -> Result<Vec<f32>, GlmError> {
        let mut level: Vec<Vec<f32>> = parts.to_vec();
        while level.len() > 1 {
            let mut next = Vec::with_capacity(level.len().div_ceil(2));
            for pair in level.chunks(2) {
                match pair {
                    [a, b] => next.push(a.iter().zip(b).map(|(x, y)| x + y).collect()),
                    [a] => next.push(a.clone()),
                    _ => {}
                }
            }
            level = next;
        }
        level
            .pop()
            .ok_or_else(|| GlmError::Reduce("no workers".into()))
    }
}

/// Training settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sgd {
    pub glm: Glm,
    pub lr: f32,
    pub batch: usize,
    pub micro_batch: usize,
    /// Dot products summed in blocks of this many terms and the blocks then added (0: in one
    /// running sum). SGEMM's blocked order for GPUSync.
    pub block: usize,
}

fn dot(idx: &[u32], val: &[f32], w: &[f32], block: usize) -> f32 {
    if block == 0 {
        let mut s = 0f32;
        for (j, v) in idx.iter().zip(val) {
            s += v * w[*j as usize];
        }
        s
    } else {
        let mut total = 0f32;
        for (bi, bv) in idx.chunks(block).zip(val.chunks(block)) {
            let mut s = 0f32;
            for (j, v) in bi.iter().zip(bv) {
                s += v * w[*j as usize];
            }
            total += s;
        }
        total
    }
}

/// One epoch of single-worker mini-batch SGD over the samples in order.
pub fn epoch_single(sgd: &Sgd, d: &Dataset, w: &mut [f32]) {
    let mut grad = vec![0f32; w.len()];
    for start in (0..d.rows()).step_by(sgd.batch.max(1)) {
        let end = (start + sgd.batch).min(d.rows());
        let acts: Vec<f32> = (start..end)
            .map(|i| {
                let (idx, val) = d.row(i);
                dot(idx, val, w, sgd.block)
            })
            .collect();
        grad.iter_mut().for_each(|g| *g = 0.0);
        for (k, i) in (start..end).enumerate() {
            let g = sgd.glm.dloss(acts[k], d.labels[i]);
            let (idx, val) = d.row(i);
            for (j, v) in idx.iter().zip(val) {
                grad[*j as usize] += g * v;
            }
        }
        let scale = sgd.lr / (end - start) as f32;
        for (wj, gj) in w.iter_mut().zip(&grad) {
            *wj -= scale * gj;
        }
    }
}

/// The column range of worker `p` of `workers` over `cols` features (contiguous blocks).
pub fn columns(p: usize, workers: usize, cols: usize) -> std::ops::Range<usize> {
    let per = cols.div_ceil(workers.max(1));
    (p * per).min(cols)..((p + 1) * per).min(cols)
}

/// One epoch of model-parallel SGD: worker p owns the features of `columns(p)`; per micro-batch
/// the partial activations are all-reduced through `reducer` (all of a mini-batch's
/// micro-batches are independent, as the hardware pipeline exploits); each worker then updates
/// its own features. `w` is the concatenation of the workers' partitions.
pub fn epoch_model_parallel(
    sgd: &Sgd,
    d: &Dataset,
    w: &mut [f32],
    workers: usize,
    reducer: &mut dyn Reducer,
) -> Result<(), GlmError> {
    let ranges: Vec<_> = (0..workers).map(|p| columns(p, workers, d.cols)).collect();
    let mut grad = vec![0f32; w.len()];
    for start in (0..d.rows()).step_by(sgd.batch.max(1)) {
        let end = (start + sgd.batch).min(d.rows());
        // forward: each worker's partial activations over its features
        let parts: Vec<Vec<f32>> = ranges
            .iter()
            .map(|r| {
                (start..end)
                    .map(|i| {
                        let (idx, val) = d.row(i);
                        let a = idx.partition_point(|j| (*j as usize) < r.start);
                        let b = idx.partition_point(|j| (*j as usize) < r.end);
                        dot(&idx[a..b], &val[a..b], w, sgd.block)
                    })
                    .collect()
            })
            .collect();
        // communication: the whole mini-batch's micro-batches go to the reducer together
        let acts = reducer.allreduce(&parts)?;
        if acts.len() != end - start {
            return Err(GlmError::Reduce(format!(
                "{} activations for {} samples",
                acts.len(),
                end - start
            )));
        }
        // backward: every worker computes the gradient of its own features
        grad.iter_mut().for_each(|g| *g = 0.0);
        for (k, i) in (start..end).enumerate() {
            let g = sgd.glm.dloss(acts[k], d.labels[i]);
            let (idx, val) = d.row(i);
            for (j, v) in idx.iter().zip(val) {
                grad[*j as usize] += g * v;
            }
        }
        let scale = sgd.lr / (end - start) as f32;
        for (wj, gj) in w.iter_mut().zip(&grad) {
            *wj -= scale * gj;
        }
    }
    Ok(())
}

/// One epoch of data-parallel SGD: each mini-batch is split across the workers in contiguous
/// shares; each computes the gradient of its samples on its full model copy; the gradients are
/// all-reduced and every copy takes the same step.
pub fn epoch_data_parallel(
    sgd: &Sgd,
    d: &Dataset,
    w: &mut [f32],
    workers: usize,
    reducer: &mut dyn Reducer,
) -> Result<(), GlmError> {
    for start in (0..d.rows()).step_by(sgd.batch.max(1)) {
        let end = (start + sgd.batch).min(d.rows());
        let n = end - start;
        let share = n.div_ceil(workers.max(1));
        let grads: Vec<Vec<f32>> = (0..workers)
            .map(|p| {
                let mut g = vec![0f32; w.len()];
                let a = (start + p * share).min(end);
                let b = (a + share).min(end);
                for i in a..b {
                    let (idx, val) = d.row(i);
                    let gi = sgd.glm.dloss(dot(idx, val, w, sgd.block), d.labels[i]);
                    for (j, v) in idx.iter().zip(val) {
                        g[*j as usize] += gi * v;
                    }
                }
                g
            })
            .collect();
        let sum = reducer.allreduce(&grads)?;
        let scale = sgd.lr / n as f32;
        for (wj, gj) in w.iter_mut().zip(&sum) {
            *wj -= scale * gj;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn max_diff(a: &[f32], b: &[f32]) -> f32 {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max)
    }

    #[test]
    fn model_and_data_parallel_give_the_single_worker_model() {
        let s = Shape {
            name: "t",
            rows: 512,
            cols: 300,
            nnz_per_row: 20,
        };
        let d = synthetic(&s, 512, 3);
        let dense = {
            let mut x = vec![0f32; 64 * 40];
            let mut g = SplitMix64::new(5);
            x.iter_mut().for_each(|v| *v = g.next_f64() as f32);
            let y = (0..64)
                .map(|_| if g.chance(0.5) { 1.0 } else { -1.0 })
                .collect();
            Dataset::from_dense(40, &x, y).expect("dense")
        };
        for data in [&d, &dense] {
            for glm in [Glm::Linear, Glm::Logistic, Glm::Svm] {
                let sgd = Sgd {
                    glm,
                    lr: 0.05,
                    batch: 64,
                    micro_batch: 8,
                    block: 0,
                };
                let mut w1 = vec![0f32; data.cols];
                let mut wm = w1.clone();
                let mut wd = w1.clone();
                for _ in 0..3 {
                    epoch_single(&sgd, data, &mut w1);
                    epoch_model_parallel(&sgd, data, &mut wm, 4, &mut LocalSum).expect("mp");
                    epoch_data_parallel(&sgd, data, &mut wd, 4, &mut LocalSum).expect("dp");
                }
                assert!(w1.iter().any(|x| *x != 0.0));
                assert!(
                    max_diff(&w1, &wm) < 1e-4,
                    "{glm:?} mp {}",
                    max_diff(&w1, &wm)
                );
                assert!(
                    max_diff(&w1, &wd) < 1e-4,
                    "{glm:?} dp {}",
                    max_diff(&w1, &wd)
                );
            }
        }
    }

    #[test]
    fn sgd_reduces_the_loss() {
        let d = synthetic(&SHAPES[5], 2048, 1);
        let sgd = Sgd {
            glm: Glm::Logistic,
            lr: 0.5,
            batch: 64,
            micro_batch: 8,
            block: 0,
        };
        let mut w = vec![0f32; d.cols];
        let l0 = mean_loss(Glm::Logistic, &d, &w);
        for _ in 0..3 {
            epoch_single(&sgd, &d, &mut w);
        }
        assert!(mean_loss(Glm::Logistic, &d, &w) < l0 - 0.01);
    }

    #[test]
    fn libsvm_reader_names_the_bad_line() {
        let d = parse_libsvm("x", "+1 1:0.5 3:2\n-1 2:1 # note\n\n1 4:1e-3\n").expect("ok");
        assert_eq!((d.rows(), d.cols, d.nnz()), (3, 4, 4));
        assert_eq!(d.row(0), (&[0u32, 2][..], &[0.5f32, 2.0][..]));
        for (text, line) in [
            ("1 1:1\n1 2:x\n", 2),
            ("1 1:1\nfoo 1:1\n", 2),
            ("1 3:1 2:1\n", 1),
            ("1 0:1\n", 1),
            ("1 1:1\n1 1:1\n\n1 5\n", 4),
        ] {
            match parse_libsvm("f.svm", text) {
                Err(GlmError::Parse { line: l, path, .. }) => {
                    assert_eq!((l, path.as_str()), (line, "f.svm"), "{text:?}")
                }
                other => panic!("{text:?}: {other:?}"),
            }
        }
        assert!(parse_libsvm("e", "\n").is_err());
    }

    #[test]
    fn quantisation_keeps_values_on_the_grid() {
        let d = synthetic(&SHAPES[5], 16, 2).quantised(4);
        assert!(
            d.values
                .iter()
                .all(|v| ((v * 15.0).round() - v * 15.0).abs() < 1e-5 && *v <= 1.0)
        );
    }
}
