//! A small transformer encoder for sequence classification, forward and backward written by hand
//! like the other layers (deterministic: fixed loop order, no threads, no BLAS).
//!
//! Per sample: tokens `t_0 .. t_{T-1}` become `x_t = E[t] + P[t]` (learned token and position
//! embeddings, width `d`), then `blocks` blocks of single-head self-attention
//! (`softmax(q k^T / sqrt(d)) v`, projected by `Wo`) with a residual connection, followed by a
//! ReLU MLP (`d -> hidden -> d`) with a residual connection; the sequence is mean-pooled and a
//! dense layer gives the logits (softmax cross-entropy). No layer normalisation and no dropout
//! (our simplifications: they keep the backward pass short and the model is shallow).

use inabench_rng::SplitMix64;

/// The transformer's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub vocab: usize,
    pub seq: usize,
    pub width: usize,
    pub hidden: usize,
    pub blocks: usize,
    pub classes: usize,
}

/// Offsets of one block's tensors in the flat parameter vector.
#[derive(Debug, Clone, Copy)]
struct Block {
    wq: usize,
    wk: usize,
    wv: usize,
    wo: usize,
    w1: usize,
    b1: usize,
    w2: usize,
    b2: usize,
}

/// Where every tensor lives in the flat parameter vector.
#[derive(Debug, Clone)]
pub struct Layout {
    pub shape: Shape,
    emb: usize,
    pos: usize,
    blocks: Vec<Block>,
    wc: usize,
    bc: usize,
    pub len: usize,
}

impl Layout {
    pub fn new(shape: Shape) -> Layout {
        let (d, h) = (shape.width, shape.hidden);
        let mut at = 0;
        let mut take = |n: usize| {
            let a = at;
            at += n;
            a
        };
        let emb = take(shape.vocab * d);
        let pos = take(shape.seq * d);
        let blocks = (0..shape.blocks)
            .map(|_| Block {
                wq: take(d * d),
                wk: take(d * d),
                wv: take(d * d),
                wo: take(d * d),
                w1: take(d * h),
                b1: take(h),
                w2: take(h * d),
                b2: take(d),
            })
            .collect();
        let wc = take(d * shape.classes);
        let bc = take(shape.classes);
        Layout {
            shape,
            emb,
            pos,
            blocks,
            wc,
            bc,
            len: at,
        }
    }

    /// Seeded initial parameters: embeddings N(0, 0.5^2), attention projections N(0, 1/d),
    /// the MLP's first layer He, its second N(0, 0.25/hidden) (a small residual branch), the
    /// classifier N(0, 1/d), biases zero.
    pub fn init(&self, seed: u64) -> Vec<f32> {
        let s = self.shape;
        let (d, h) = (s.width, s.hidden);
        let mut p = vec![0f32; self.len];
        let mut g = SplitMix64::derive(seed, "init/transformer");
        let mut normal = || g.normal() as f32;
        let mut fill = |p: &mut [f32], sd: f32| {
            for v in p {
                *v = normal() * sd;
            }
        };
        fill(&mut p[self.emb..self.emb + s.vocab * d], 0.5);
        fill(&mut p[self.pos..self.pos + s.seq * d], 0.5);
        let inv_d = (1.0 / d as f32).sqrt();
        for b in &self.blocks {
            for w in [b.wq, b.wk, b.wv, b.wo] {
                fill(&mut p[w..w + d * d], inv_d);
            }
            fill(&mut p[b.w1..b.w1 + d * h], (2.0 / d as f32).sqrt());
            fill(&mut p[b.w2..b.w2 + h * d], 0.5 / (h as f32).sqrt());
        }
        fill(&mut p[self.wc..self.wc + d * s.classes], inv_d);
        p
    }

    /// Forward and backward of one sample (`x`: token ids as floats); adds its gradient into
    /// `grad`, returns its loss.
    // index loops: the tensors are indexed by position, head dimension and offset at once
    #[allow(clippy::needless_range_loop)]
    pub fn sample(&self, p: &[f32], x: &[f32], y: usize, grad: &mut [f32]) -> f32 {
        let s = self.shape;
        let (t_len, d, h) = (s.seq, s.width, s.hidden);
        let tokens: Vec<usize> = x
            .iter()
            .take(t_len)
            .map(|v| (v.max(0.0) as usize).min(s.vocab - 1))
            .collect();
        let scale = 1.0 / (d as f32).sqrt();
        // y = x W for a row vector x (len n) and W (n x m, row-major)
        let matvec = |x: &[f32], w: usize, n: usize, m: usize| -> Vec<f32> {
            let mut out = vec![0f32; m];
            for (i, xv) in x.iter().enumerate().take(n) {
                let row = &p[w + i * m..w + (i + 1) * m];
                for (o, wv) in out.iter_mut().zip(row) {
                    *o += xv * wv;
                }
            }
            out
        };
        // embeddings
        let mut xs: Vec<Vec<f32>> = tokens
            .iter()
            .enumerate()
            .map(|(t, tok)| {
                (0..d)
                    .map(|j| p[self.emb + tok * d + j] + p[self.pos + t * d + j])
                    .collect()
            })
            .collect();
        // per block: what the backward pass needs
        struct Cache {
            x: Vec<Vec<f32>>,
            q: Vec<Vec<f32>>,
            k: Vec<Vec<f32>>,
            v: Vec<Vec<f32>>,
            a: Vec<Vec<f32>>,
            c: Vec<Vec<f32>>,
            hh: Vec<Vec<f32>>,
            z: Vec<Vec<f32>>,
        }
        let mut caches = Vec::with_capacity(self.blocks.len());
        for b in &self.blocks {
            let q: Vec<Vec<f32>> = xs.iter().map(|x| matvec(x, b.wq, d, d)).collect();
            let k: Vec<Vec<f32>> = xs.iter().map(|x| matvec(x, b.wk, d, d)).collect();
            let v: Vec<Vec<f32>> = xs.iter().map(|x| matvec(x, b.wv, d, d)).collect();
            let mut a = vec![vec![0f32; t_len]; t_len];
            let mut c = vec![vec![0f32; d]; t_len];
            for t in 0..t_len {
                let sc: Vec<f32> = (0..t_len)
                    .map(|u| q[t].iter().zip(&k[u]).map(|(a, b)| a * b).sum::<f32>() * scale)
                    .collect();
                let m = sc.iter().fold(f32::NEG_INFINITY, |a, b| a.max(*b));
                let e: Vec<f32> = sc.iter().map(|v| (v - m).exp()).collect();
                let z: f32 = e.iter().sum();
                for u in 0..t_len {
                    a[t][u] = e[u] / z;
                    for j in 0..d {
                        c[t][j] += a[t][u] * v[u][j];
                    }
                }
            }
            let hh: Vec<Vec<f32>> = (0..t_len)
                .map(|t| {
                    let o = matvec(&c[t], b.wo, d, d);
                    xs[t].iter().zip(&o).map(|(x, o)| x + o).collect()
                })
                .collect();
            let z: Vec<Vec<f32>> = hh
                .iter()
                .map(|hv| {
                    let mut z = matvec(hv, b.w1, d, h);
                    for (j, zv) in z.iter_mut().enumerate() {
                        *zv += p[b.b1 + j];
                    }
                    z
                })
                .collect();
            let out: Vec<Vec<f32>> = (0..t_len)
                .map(|t| {
                    let m: Vec<f32> = z[t].iter().map(|v| v.max(0.0)).collect();
                    let o = matvec(&m, b.w2, h, d);
                    (0..d).map(|j| hh[t][j] + o[j] + p[b.b2 + j]).collect()
                })
                .collect();
            caches.push(Cache {
                x: std::mem::replace(&mut xs, out),
                q,
                k,
                v,
                a,
                c,
                hh,
                z,
            });
        }
        // mean pool and classifier
        let pooled: Vec<f32> = (0..d)
            .map(|j| xs.iter().map(|x| x[j]).sum::<f32>() / t_len as f32)
            .collect();
        let mut logits = matvec(&pooled, self.wc, d, s.classes);
        for (c, l) in logits.iter_mut().enumerate() {
            *l += p[self.bc + c];
        }
        let m = logits.iter().fold(f32::NEG_INFINITY, |a, b| a.max(*b));
        let exps: Vec<f32> = logits.iter().map(|l| (l - m).exp()).collect();
        let z: f32 = exps.iter().sum();
        let loss = -(exps[y] / z).max(1e-30).ln();
        let dl: Vec<f32> = exps
            .iter()
            .enumerate()
            .map(|(c, e)| e / z - if c == y { 1.0 } else { 0.0 })
            .collect();
        // backward: classifier and pooling
        let mut dpool = vec![0f32; d];
        for (i, pv) in pooled.iter().enumerate() {
            for (c, g) in dl.iter().enumerate() {
                grad[self.wc + i * s.classes + c] += pv * g;
                dpool[i] += p[self.wc + i * s.classes + c] * g;
            }
        }
        for (c, g) in dl.iter().enumerate() {
            grad[self.bc + c] += g;
        }
        let mut dx: Vec<Vec<f32>> = (0..t_len)
            .map(|_| dpool.iter().map(|g| g / t_len as f32).collect())
            .collect();
        // dW += x^T dy for row vector x (n) and dy (m); returns dy W^T (n)
        let back = |grad: &mut [f32], x: &[f32], dy: &[f32], w: usize, n: usize, m: usize| {
            let mut dx = vec![0f32; n];
            for i in 0..n {
                for j in 0..m {
                    grad[w + i * m + j] += x[i] * dy[j];
                    dx[i] += p[w + i * m + j] * dy[j];
                }
            }
            dx
        };
        for (b, cache) in self.blocks.iter().zip(&caches).rev() {
            // MLP with residual: out = hh + relu(z) W2 + b2
            let mut dhh = dx.clone();
            for t in 0..t_len {
                for j in 0..d {
                    grad[b.b2 + j] += dx[t][j];
                }
                let m: Vec<f32> = cache.z[t].iter().map(|v| v.max(0.0)).collect();
                let dm = back(grad, &m, &dx[t], b.w2, h, d);
                let dz: Vec<f32> = dm
                    .iter()
                    .zip(&cache.z[t])
                    .map(|(g, z)| if *z > 0.0 { *g } else { 0.0 })
                    .collect();
                for (j, g) in dz.iter().enumerate() {
                    grad[b.b1 + j] += g;
                }
                let dh = back(grad, &cache.hh[t], &dz, b.w1, d, h);
                for (a, g) in dhh[t].iter_mut().zip(&dh) {
                    *a += g;
                }
            }
            // attention with residual: hh = x + c Wo
            let mut dxb = dhh.clone();
            let dc: Vec<Vec<f32>> = (0..t_len)
                .map(|t| back(grad, &cache.c[t], &dhh[t], b.wo, d, d))
                .collect();
            let mut dq = vec![vec![0f32; d]; t_len];
            let mut dk = vec![vec![0f32; d]; t_len];
            let mut dv = vec![vec![0f32; d]; t_len];
            for t in 0..t_len {
                let da: Vec<f32> = (0..t_len)
                    .map(|u| dc[t].iter().zip(&cache.v[u]).map(|(a, b)| a * b).sum())
                    .collect();
                for u in 0..t_len {
                    for j in 0..d {
                        dv[u][j] += cache.a[t][u] * dc[t][j];
                    }
                }
                let dot: f32 = (0..t_len).map(|u| cache.a[t][u] * da[u]).sum();
                for u in 0..t_len {
                    let ds = cache.a[t][u] * (da[u] - dot) * scale;
                    for j in 0..d {
                        dq[t][j] += ds * cache.k[u][j];
                        dk[u][j] += ds * cache.q[t][j];
                    }
                }
            }
            for t in 0..t_len {
                for (w, g) in [(b.wq, &dq[t]), (b.wk, &dk[t]), (b.wv, &dv[t])] {
                    let d_in = back(grad, &cache.x[t], g, w, d, d);
                    for (a, g) in dxb[t].iter_mut().zip(&d_in) {
                        *a += g;
                    }
                }
            }
            dx = dxb;
        }
        for (t, tok) in tokens.iter().enumerate() {
            for j in 0..d {
                grad[self.emb + tok * d + j] += dx[t][j];
                grad[self.pos + t * d + j] += dx[t][j];
            }
        }
        loss
    }
}
