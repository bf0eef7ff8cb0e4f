//! Adam (Kingma and Ba, ICLR 2015) with decoupled weight decay (AdamW, Loshchilov and Hutter,
//! ICLR 2019) when `weight_decay > 0`: fp32 master weights and fp32 first and second moments, as
//! DeepSpeed's CPU Adam keeps them and as LuWu's optimizer node does (Sec. 3.3).
//!
//! Every element's update depends only on that element's parameter, moments and gradient and on
//! the step's two bias corrections, so updating a tensor in chunks, in any order, on any node,
//! gives the same bits as updating it at once: this is what lets the out-of-core optimizer be
//! checked bit for bit against an in-memory one.

/// Adam's hyper-parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamParams {
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    /// Decoupled weight decay (AdamW); 0 gives plain Adam.
    pub weight_decay: f32,
}

impl Default for AdamParams {
    /// PyTorch's defaults.
    fn default() -> Self {
        AdamParams {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        }
    }
}

/// The per-step constants: the bias corrections of step `step` (1-based).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamStep {
    hp: AdamParams,
    /// lr / (1 - beta1^t)
    step_size: f32,
    /// sqrt(1 - beta2^t)
    bias2_sqrt: f32,
}

impl AdamStep {
    /// The constants of step `step` (1-based; step 0 is treated as step 1).
    pub fn new(hp: AdamParams, step: u64) -> AdamStep {
        let t = step.max(1) as f64;
        let bc1 = 1.0 - (hp.beta1 as f64).powf(t);
        let bc2 = 1.0 - (hp.beta2 as f64).powf(t);
        AdamStep {
            hp,
            step_size: (hp.lr as f64 / bc1) as f32,
            bias2_sqrt: bc2.sqrt() as f32,
        }
    }

    /// Update `params`, `m` and `v` in place with `grads`. All four slices must have the same
    /// length; the shortest one bounds the update.
    pub fn apply(&self, params: &mut [f32], m: &mut [f32], v: &mut [f32], grads: &[f32]) {
        let hp = &self.hp;
        let (b1, b2) = (hp.beta1, hp.beta2);
        for (((p, m), v), &g) in params
            .iter_mut()
            .zip(m.iter_mut())
            .zip(v.iter_mut())
            .zip(grads.iter())
        {
            *m = b1 * *m + (1.0 - b1) * g;
            *v = b2 * *v + (1.0 - b2) * g * g;
            let denom = v.sqrt() / self.bias2_sqrt + hp.eps;
            if hp.weight_decay > 0.0 {
                *p -= hp.lr * hp.weight_decay * *p;
            }
            *p -= self.step_size * *m / denom;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_step_moves_each_parameter_by_about_lr_against_its_gradient() {
        // After one step m_hat = g and v_hat = g^2, so the update is lr * g / (|g| + eps).
        let hp = AdamParams::default();
        let mut p = vec![1.0f32, -2.0, 0.5];
        let (mut m, mut v) = (vec![0.0; 3], vec![0.0; 3]);
        AdamStep::new(hp, 1).apply(&mut p, &mut m, &mut v, &[0.3, -4.0, 0.0]);
        assert!((p[0] - (1.0 - 1e-3)).abs() < 1e-6, "{}", p[0]);
        assert!((p[1] - (-2.0 + 1e-3)).abs() < 1e-6, "{}", p[1]);
        assert_eq!(p[2], 0.5);
    }

    #[test]
    fn chunked_updates_equal_a_whole_update_bit_for_bit() {
        let hp = AdamParams {
            weight_decay: 0.01,
            ..AdamParams::default()
        };
        let n = 1000;
        let mut rng = inabench_rng::SplitMix64::new(7);
        let init: Vec<f32> = (0..n).map(|_| rng.next_f64() as f32 - 0.5).collect();
        let (mut a, mut b) = (init.clone(), init.clone());
        let (mut ma, mut va, mut mb, mut vb) =
            (vec![0.0; n], vec![0.0; n], vec![0.0; n], vec![0.0; n]);
        for step in 1..=5 {
            let g: Vec<f32> = (0..n).map(|_| rng.next_f64() as f32 - 0.5).collect();
            let s = AdamStep::new(hp, step);
            s.apply(&mut a, &mut ma, &mut va, &g);
            for c in (0..n).step_by(37).rev() {
                let e = (c + 37).min(n);
                s.apply(&mut b[c..e], &mut mb[c..e], &mut vb[c..e], &g[c..e]);
            }
        }
        let bits = |x: &[f32]| x.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&a), bits(&b));
        assert_eq!(bits(&va), bits(&vb));
        assert!(
            a.iter().zip(&init).all(|(x, y)| x != y),
            "every parameter moved"
        );
    }
}
