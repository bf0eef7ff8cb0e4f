//! Small models with hand-written forward and backward passes (deterministic, no BLAS, no
//! threads): an MLP (dense-ReLU-dense-ReLU-dense), a CNN (3x3 convolution with ReLU, 2x2
//! average pooling, dense) and a transformer encoder ([`crate::transformer`]), all ending in
//! softmax cross-entropy. Parameters live in one flat
//! `Vec<f32>`, gradients too, so a gradient is exactly what an all-reduce carries.

use inabench_rng::SplitMix64;

/// A layer's place in the flat parameter vector.
#[derive(Debug, Clone, Copy)]
struct Dense {
    w: usize,
    b: usize,
    inp: usize,
    out: usize,
}

/// The model's shape.
#[derive(Debug, Clone)]
pub enum Arch {
    Mlp {
        dims: Vec<usize>,
    },
    /// `side` x `side` single-channel input, `filters` 3x3 filters, `classes` outputs.
    Cnn {
        side: usize,
        filters: usize,
        classes: usize,
    },
    /// Token sequences (ids as floats) through self-attention blocks ([`crate::transformer`]).
    Transformer(crate::transformer::Shape),
}

#[derive(Debug, Clone)]
pub struct Model {
    pub arch: Arch,
    pub params: Vec<f32>,
    dense: Vec<Dense>,
    conv: Option<(usize, usize)>,
    tf: Option<crate::transformer::Layout>,
}

fn dense_layout(dims: &[usize], mut at: usize) -> (Vec<Dense>, usize) {
    let mut v = Vec::new();
    for w in dims.windows(2) {
        let d = Dense {
            w: at,
            b: at + w[0] * w[1],
            inp: w[0],
            out: w[1],
        };
        at = d.b + w[1];
        v.push(d);
    }
    (v, at)
}

impl Model {
    /// A model with seeded He-initialised weights and zero biases.
    pub fn new(arch: Arch, seed: u64) -> Model {
        if let Arch::Transformer(shape) = &arch {
            let tf = crate::transformer::Layout::new(*shape);
            return Model {
                params: tf.init(seed),
                arch,
                dense: Vec::new(),
                conv: None,
                tf: Some(tf),
            };
        }
        let (dense, conv, n) = match &arch {
            Arch::Mlp { dims } => {
                let (d, n) = dense_layout(dims, 0);
                (d, None, n)
            }
            Arch::Cnn {
                side,
                filters,
                classes,
            } => {
                let conv_w = 0;
                let conv_b = filters * 9;
                let pooled = filters * (side / 2) * (side / 2);
                let (d, n) = dense_layout(&[pooled, *classes], conv_b + filters);
                (d, Some((conv_w, conv_b)), n)
            }
            Arch::Transformer(_) => (Vec::new(), None, 0),
        };
        let mut params = vec![0f32; n];
        let mut g = SplitMix64::derive(seed, "init");
        let mut normal = || g.normal() as f32;
        if let (Some((cw, cb)), Arch::Cnn { filters, .. }) = (conv, &arch) {
            let s = (2.0f32 / 9.0).sqrt();
            for p in &mut params[cw..cb] {
                *p = normal() * s;
            }
            let _ = filters;
        }
        for d in &dense {
            let s = (2.0 / d.inp as f32).sqrt();
            for p in &mut params[d.w..d.b] {
                *p = normal() * s;
            }
        }
        Model {
            arch,
            params,
            dense,
            conv,
            tf: None,
        }
    }

    pub fn inputs(&self) -> usize {
        match &self.arch {
            Arch::Mlp { dims } => dims[0],
            Arch::Cnn { side, .. } => side * side,
            Arch::Transformer(s) => s.seq,
        }
    }

    pub fn classes(&self) -> usize {
        match &self.arch {
            Arch::Transformer(s) => s.classes,
            _ => self.dense.last().map_or(0, |d| d.out),
        }
    }

    /// Mean loss over the batch and the gradient of that mean loss.
    pub fn loss_and_grad(&self, xs: &[Vec<f32>], ys: &[usize]) -> (f32, Vec<f32>) {
        let mut grad = vec![0f32; self.params.len()];
        let mut loss = 0f64;
        for (x, y) in xs.iter().zip(ys) {
            loss += f64::from(self.sample(x, *y, &mut grad));
        }
        let n = xs.len().max(1) as f32;
        for g in &mut grad {
            *g /= n;
        }
        ((loss / f64::from(n)) as f32, grad)
    }

    /// The class the model predicts for `x` (the largest logit; for the transformer, the class
    /// of least loss, which is the same).
    pub fn predict(&self, x: &[f32]) -> usize {
        if let Some(tf) = &self.tf {
            let mut scratch = vec![0f32; self.params.len()];
            return (0..self.classes())
                .map(|y| (y, tf.sample(&self.params, x, y, &mut scratch)))
                .fold(
                    (0, f32::INFINITY),
                    |b, (y, l)| if l < b.1 { (y, l) } else { b },
                )
                .0;
        }
        let (acts, _) = self.forward(x);
        acts[self.dense.len()]
            .iter()
            .enumerate()
            .fold(
                (0, f32::NEG_INFINITY),
                |b, (y, &l)| if l > b.1 { (y, l) } else { b },
            )
            .0
    }

    /// Fraction of `xs` predicted as `ys`.
    pub fn accuracy(&self, xs: &[Vec<f32>], ys: &[usize]) -> f64 {
        let right = xs
            .iter()
            .zip(ys)
            .filter(|(x, y)| self.predict(x) == **y)
            .count();
        right as f64 / xs.len().max(1) as f64
    }

    /// Forward pass of the MLP or CNN: the activations of every dense layer (input first, logits
    /// last) and the convolution's pre-activations (CNN).
    fn forward(&self, x: &[f32]) -> (Vec<Vec<f32>>, Option<Vec<f32>>) {
        let p = &self.params;
        // front end: the CNN's convolution and pooling, or the input itself
        let (front, conv_cache) = match (&self.arch, self.conv) {
            (Arch::Cnn { side, filters, .. }, Some((cw, cb))) => {
                let s = *side;
                let mut pre = vec![0f32; filters * s * s];
                for f in 0..*filters {
                    for i in 0..s {
                        for j in 0..s {
                            let mut a = p[cb + f];
                            for di in 0..3 {
                                for dj in 0..3 {
                                    let (ii, jj) = (i + di, j + dj);
                                    if ii >= 1 && jj >= 1 && ii - 1 < s && jj - 1 < s {
                                        a += p[cw + f * 9 + di * 3 + dj] * x[(ii - 1) * s + jj - 1];
                                    }
                                }
                            }
                            pre[(f * s + i) * s + j] = a;
                        }
                    }
                }
                let h = s / 2;
                let mut pooled = vec![0f32; filters * h * h];
                for f in 0..*filters {
                    for i in 0..h {
                        for j in 0..h {
                            let mut a = 0.0;
                            for (di, dj) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
                                a += pre[(f * s + 2 * i + di) * s + 2 * j + dj].max(0.0);
                            }
                            pooled[(f * h + i) * h + j] = a * 0.25;
                        }
                    }
                }
                (pooled, Some(pre))
            }
            _ => (x.to_vec(), None),
        };
        // dense stack with ReLU between layers
        let mut acts = vec![front];
        for (k, d) in self.dense.iter().enumerate() {
            let inp = &acts[k];
            let mut out = vec![0f32; d.out];
            for (o, v) in out.iter_mut().enumerate() {
                let mut a = p[d.b + o];
                let row = &p[d.w + o * d.inp..d.w + (o + 1) * d.inp];
                for (wv, xv) in row.iter().zip(inp) {
                    a += wv * xv;
                }
                *v = if k + 1 < self.dense.len() {
                    a.max(0.0)
                } else {
                    a
                };
            }
            acts.push(out);
        }
        (acts, conv_cache)
    }

    /// Forward and backward of one sample; adds its gradient into `grad`, returns its loss.
    fn sample(&self, x: &[f32], y: usize, grad: &mut [f32]) -> f32 {
        if let Some(tf) = &self.tf {
            return tf.sample(&self.params, x, y, grad);
        }
        let p = &self.params;
        let (acts, conv_cache) = self.forward(x);
        // softmax cross-entropy
        let logits = &acts[self.dense.len()];
        let m = logits.iter().fold(f32::NEG_INFINITY, |a, b| a.max(*b));
        let exps: Vec<f32> = logits.iter().map(|l| (l - m).exp()).collect();
        let z: f32 = exps.iter().sum();
        let loss = -(exps[y] / z).max(1e-30).ln();
        let mut delta: Vec<f32> = exps.iter().map(|e| e / z).collect();
        delta[y] -= 1.0;
        // backward through the dense stack
        for k in (0..self.dense.len()).rev() {
            let d = self.dense[k];
            let inp = &acts[k];
            let mut back = vec![0f32; d.inp];
            for (o, dv) in delta.iter().enumerate() {
                grad[d.b + o] += dv;
                let row = d.w + o * d.inp;
                for (i, xv) in inp.iter().enumerate() {
                    grad[row + i] += dv * xv;
                    back[i] += dv * p[row + i];
                }
            }
            if k > 0 {
                for (b, a) in back.iter_mut().zip(&acts[k]) {
                    if *a <= 0.0 {
                        *b = 0.0;
                    }
                }
            }
            delta = back;
        }
        // backward through pooling and the convolution
        if let (Arch::Cnn { side, filters, .. }, Some((cw, cb)), Some(pre)) =
            (&self.arch, self.conv, conv_cache)
        {
            let s = *side;
            let h = s / 2;
            for f in 0..*filters {
                for i in 0..s {
                    for j in 0..s {
                        if i / 2 >= h || j / 2 >= h {
                            continue;
                        }
                        let v = pre[(f * s + i) * s + j];
                        if v <= 0.0 {
                            continue;
                        }
                        let g = delta[(f * h + i / 2) * h + j / 2] * 0.25;
                        grad[cb + f] += g;
                        for di in 0..3 {
                            for dj in 0..3 {
                                let (ii, jj) = (i + di, j + dj);
                                if ii >= 1 && jj >= 1 && ii - 1 < s && jj - 1 < s {
                                    grad[cw + f * 9 + di * 3 + dj] += g * x[(ii - 1) * s + jj - 1];
                                }
                            }
                        }
                    }
                }
            }
        }
        loss
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The analytic gradient against central differences, for both models.
    #[test]
    fn gradients_match_finite_differences() {
        for arch in [
            Arch::Mlp {
                dims: vec![5, 7, 6, 3],
            },
            Arch::Cnn {
                side: 6,
                filters: 2,
                classes: 3,
            },
        ] {
            let m = Model::new(arch, 3);
            let mut g = SplitMix64::derive(1, "x");
            let xs: Vec<Vec<f32>> = (0..4)
                .map(|_| {
                    (0..m.inputs())
                        .map(|_| (g.next_u64() % 1000) as f32 / 500.0 - 1.0)
                        .collect()
                })
                .collect();
            let ys = vec![0, 2, 1, 2];
            let (_, grad) = m.loss_and_grad(&xs, &ys);
            let mut worst = 0f64;
            for i in (0..m.params.len()).step_by(3) {
                let mut a = m.clone();
                let mut b = m.clone();
                let h = 1e-2f32;
                a.params[i] += h;
                b.params[i] -= h;
                let num = (f64::from(a.loss_and_grad(&xs, &ys).0)
                    - f64::from(b.loss_and_grad(&xs, &ys).0))
                    / (2.0 * f64::from(h));
                worst =
                    worst.max((num - f64::from(grad[i])).abs() / (1e-2 + f64::from(grad[i]).abs()));
            }
            assert!(worst < 0.05, "worst relative error {worst}");
        }
    }

    /// The transformer's analytic gradient against central differences (in f64 terms: the
    /// loss is f32, so the step is large and the tolerance loose, as above), every parameter.
    #[test]
    #[allow(clippy::needless_range_loop)]
    fn transformer_gradients_match_finite_differences() {
        let m = Model::new(
            Arch::Transformer(crate::transformer::Shape {
                vocab: 5,
                seq: 4,
                width: 6,
                hidden: 7,
                blocks: 2,
                classes: 3,
            }),
            5,
        );
        let xs: Vec<Vec<f32>> = vec![
            vec![0.0, 3.0, 1.0, 4.0],
            vec![2.0, 2.0, 0.0, 1.0],
            vec![4.0, 1.0, 3.0, 0.0],
        ];
        let ys = vec![2, 0, 1];
        let (_, grad) = m.loss_and_grad(&xs, &ys);
        assert_eq!(grad.len(), m.params.len());
        let mut worst = 0f64;
        let mut nonzero = 0;
        for i in 0..m.params.len() {
            let mut a = m.clone();
            let mut b = m.clone();
            let h = 1e-2f32;
            a.params[i] += h;
            b.params[i] -= h;
            let num = (f64::from(a.loss_and_grad(&xs, &ys).0)
                - f64::from(b.loss_and_grad(&xs, &ys).0))
                / (2.0 * f64::from(h));
            if grad[i] != 0.0 {
                nonzero += 1;
            }
            worst = worst.max((num - f64::from(grad[i])).abs() / (1e-2 + f64::from(grad[i]).abs()));
        }
        assert!(worst < 0.05, "worst relative error {worst}");
        // every tensor gets a gradient (token 0..4 all appear; every weight is used)
        assert!(
            nonzero > m.params.len() * 9 / 10,
            "{nonzero} of {}",
            m.params.len()
        );
    }
}
