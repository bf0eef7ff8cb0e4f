//! OPT shapes (Table 2 of the paper) and the per-layer counts the other models build on:
//! parameters, FLOPs with activation checkpointing, and activation bytes.
//!
//! FLOPs count a multiply-add as two operations. Per decoder layer and micro-batch `b`,
//! sequence `s`, hidden `h` (Megatron-LM's accounting, Narayanan et al., SC'21, Sec. 5.1):
//! QKV projection 6bsh^2, attention scores 2bs^2h, attention over values 2bs^2h, output
//! projection 2bsh^2, MLP (h -> 4h -> h) 16bsh^2: forward = 24bsh^2 + 4bs^2h. The backward pass
//! costs twice the forward (gradients of inputs and of weights), and activation checkpointing
//! recomputes the forward once more before the backward. The language-model head (tied to the
//! embedding, as in OPT) costs 2bshV forward and is not recomputed.
//!
//! Model FLOPs (what TFLOPS and model FLOPS utilisation count, as the paper relates its 184
//! TFLOPS to 59% of the A100's 312) = forward + backward, without the recomputation; hardware
//! FLOPs (what the GPU executes) add the recomputation.

use crate::ModelError;

/// OPT's vocabulary (the GPT-2 BPE plus OPT's specials), Zhang et al. 2022, the released configs.
pub const OPT_VOCAB: usize = 50272;
/// OPT's learned positions (2048 positions; the config's 2050 includes an offset of 2).
pub const OPT_POSITIONS: usize = 2048;

/// A decoder-only transformer's shape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    pub layers: usize,
    pub heads: usize,
    pub hidden: usize,
}

/// The paper's Table 2, with the ids the specs use.
pub const LADDER: [(&str, f64, Shape); 10] = [
    ("opt_1_3b", 1.3, s(24, 32, 2048)),
    ("opt_2_7b", 2.7, s(32, 32, 2560)),
    ("opt_6_7b", 6.7, s(32, 32, 4096)),
    ("opt_13b", 13.0, s(40, 40, 5120)),
    ("opt_30b", 30.0, s(48, 56, 7168)),
    ("opt_66b", 66.0, s(64, 72, 9216)),
    ("opt_175b", 175.0, s(96, 96, 12288)),
    ("opt_276b", 276.0, s(112, 112, 14336)),
    ("opt_505b", 505.0, s(124, 144, 18432)),
    ("opt_1t", 1000.0, s(172, 172, 22016)),
];

const fn s(layers: usize, heads: usize, hidden: usize) -> Shape {
    Shape {
        layers,
        heads,
        hidden,
    }
}

/// The ladder entry of a spec id (`opt_175b`): its nominal size in B parameters and its shape.
pub fn by_id(id: &str) -> Result<(f64, Shape), ModelError> {
    LADDER
        .iter()
        .find(|(name, _, _)| *name == id)
        .map(|(_, b, shape)| (*b, *shape))
        .ok_or_else(|| {
            ModelError::Invalid(format!(
                "unknown model `{id}` (Table 2 has {})",
                LADDER.iter().map(|l| l.0).collect::<Vec<_>>().join(", ")
            ))
        })
}

impl Shape {
    /// Parameters of one decoder layer: QKV 3h^2+3h, output h^2+h, MLP 8h^2+5h, two layer
    /// norms 4h.
    pub fn layer_params(&self) -> f64 {
        let h = self.hidden as f64;
        12.0 * h * h + 13.0 * h
    }

    /// Parameters of a layer's largest submodule, the MLP's up projection fc1 (h x 4h weights and
    /// 4h biases; fc2 has 4h^2 + h). OPT (HF `OPTDecoderLayer`) has separate q, k, v and out
    /// projections of h^2 + h each, so fc1 is the largest unit DeepSpeed's ZeRO-3 gathers.
    pub fn largest_submodule_params(&self) -> f64 {
        let h = self.hidden as f64;
        4.0 * h * h + 4.0 * h
    }

    /// The submodules of one layer, in parameters (q, k, v, out, fc1, fc2; the layer norms'
    /// 4h parameters are below DeepSpeed's persistence threshold and stay resident).
    pub fn submodule_params(&self) -> [f64; 6] {
        let h = self.hidden as f64;
        let proj = h * h + h;
        [
            proj,
            proj,
            proj,
            proj,
            4.0 * h * h + 4.0 * h,
            4.0 * h * h + h,
        ]
    }

    /// Parameters of the embedding (tied with the head) and the learned positions, plus the
    /// final layer norm.
    pub fn embedding_params(&self) -> f64 {
        let h = self.hidden as f64;
        (OPT_VOCAB + OPT_POSITIONS) as f64 * h + 2.0 * h
    }

    /// All parameters.
    pub fn params(&self) -> f64 {
        self.layers as f64 * self.layer_params() + self.embedding_params()
    }

    /// Forward FLOPs of one decoder layer for `b` sequences of `s` tokens.
    pub fn layer_fwd_flops(&self, b: f64, s: f64) -> f64 {
        let h = self.hidden as f64;
        24.0 * b * s * h * h + 4.0 * b * s * s * h
    }

    /// Forward FLOPs of the head (logits over the vocabulary).
    pub fn head_fwd_flops(&self, b: f64, s: f64) -> f64 {
        2.0 * b * s * self.hidden as f64 * OPT_VOCAB as f64
    }

    /// Model FLOPs of one iteration for one GPU: forward and backward, no recomputation.
    pub fn model_flops(&self, b: f64, s: f64) -> f64 {
        3.0 * (self.layers as f64 * self.layer_fwd_flops(b, s) + self.head_fwd_flops(b, s))
    }

    /// Hardware FLOPs: model FLOPs plus the recomputed forward of every layer.
    pub fn hardware_flops(&self, b: f64, s: f64) -> f64 {
        self.model_flops(b, s) + self.layers as f64 * self.layer_fwd_flops(b, s)
    }

    /// Bytes of activations one layer keeps for its backward pass (16-bit values), from
    /// Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models"
    /// (MLSys 2023), Eq. 1: sbh(34 + 5as/h). With checkpointing this is the working set of the
    /// one layer being recomputed and back-propagated.
    pub fn layer_activation_bytes(&self, b: f64, s: f64) -> f64 {
        let h = self.hidden as f64;
        let a = self.heads as f64;
        s * b * h * (34.0 + 5.0 * a * s / h)
    }

    /// Peak bytes one layer holds on the GPU during its backward pass (16-bit values): its stored
    /// activations ([`Self::layer_activation_bytes`]) plus the gradient tensors live at the worst
    /// step of the backward. Korthikanti et al. count stored activations only ("the memory
    /// required to store the activations", Sec. 4), and DeepSpeed's own estimators count model
    /// states only, so neither gives the backward's gradients. Walked here, in units of sbh bytes
    /// with r = as/h, for the pre-LN layer of Korthikanti's Fig. 3, each node of the backward
    /// allocating its input gradients before it frees its saved tensors (PyTorch autograd):
    /// - at the start: the stored 34 + 5r and the gradient arriving from the next layer, 2;
    /// - MLP: the output dropout's gradient (2, its mask of 1 freed after), then fc2's input
    ///   gradient (the 4h-wide 8) while fc2's saved input (8) is still held: 34 + 5r + 11, the
    ///   MLP's peak (GeLU's backward next allocates 8 after fc2 freed 8 + 2: + 9);
    /// - attention (the MLP's 21 and LN2's saved tensors freed, the attention's 13 + 5r left and
    ///   the residual's gradient 2): through the output projection and dropout (+ 5), then the
    ///   score-sized gradient of the softmax output (grad_P, 2r) and V's (2) while P and V are
    ///   held: 13 + 5r + 3 + 2r = 16 + 7r, the attention's peak (the dropout's and softmax's
    ///   score gradients that follow replace tensors of the same size that are freed).
    ///
    /// So the peak is max(45 + 5r, 16 + 7r) sbh: the attention's score gradients set it only
    /// when r > 14.5, i.e. below a head dimension of about 70 at 1,024 tokens; every shape of
    /// the ladder has head dimension 128 (r = 8 at s = 1,024), where fc2's input gradient sets it
    /// at 85 sbh against the 74 stored.
    pub fn layer_backward_peak_bytes(&self, b: f64, s: f64) -> f64 {
        let h = self.hidden as f64;
        let r = self.heads as f64 * s / h;
        s * b * h * (45.0 + 5.0 * r).max(16.0 + 7.0 * r)
    }

    /// Bytes of one layer's checkpoint (its 16-bit input, sbh values).
    pub fn checkpoint_bytes(&self, b: f64, s: f64) -> f64 {
        2.0 * s * b * self.hidden as f64
    }

    /// Bytes of the head's logits at the loss: 16-bit logits and their fp32 softmax (6 bytes a
    /// logit).
    pub fn logits_bytes(&self, b: f64, s: f64) -> f64 {
        6.0 * b * s * OPT_VOCAB as f64
    }
}

/// A continuum of OPT-like shapes for the largest-model search: `x` in [0, 9] walks Table 2
/// (x = i is the i-th entry), layers, heads and hidden interpolated geometrically between
/// neighbours; beyond the last entry the last step's growth continues. Parameters grow strictly
/// with `x`.
pub fn scaled(x: f64) -> Shape {
    let n = LADDER.len();
    let x = x.max(0.0);
    let i = (x.floor() as usize).min(n - 2);
    let t = x - i as f64;
    let (a, b) = (LADDER[i].2, LADDER[i + 1].2);
    let geo = |u: usize, v: usize| -> usize {
        let (u, v) = (u as f64, v as f64);
        (u * (v / u).powf(t)).round().max(1.0) as usize
    };
    Shape {
        layers: geo(a.layers, b.layers),
        heads: geo(a.heads, b.heads),
        hidden: geo(a.hidden, b.hidden),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opt_175b_flops_by_hand() {
        let (_, m) = by_id("opt_175b").unwrap();
        // one layer, b=1, s=1024, h=12288:
        // 24*1024*12288^2 = 3_710_851_743_744; 4*1024^2*12288 = 51_539_607_552
        assert_eq!(m.layer_fwd_flops(1.0, 1024.0), 3_762_391_351_296.0);
        // head: 2*1024*12288*50272 = 1_265_136_304_128
        assert_eq!(m.head_fwd_flops(1.0, 1024.0), 1_265_136_304_128.0);
        let model = 3.0 * (96.0 * 3_762_391_351_296.0 + 1_265_136_304_128.0);
        assert_eq!(m.model_flops(1.0, 1024.0), model);
        assert_eq!(
            m.hardware_flops(1.0, 1024.0),
            model + 96.0 * 3_762_391_351_296.0
        );
        // 12*12288^2 + 13*12288 = 1_811_939_328 + 159_744
        assert_eq!(m.layer_params(), 1_812_099_072.0);
        // about 175B in all
        let p = m.params() / 1e9;
        assert!((174.0..176.0).contains(&p), "{p}");
    }

    #[test]
    fn ladder_sizes_match_names() {
        for (id, nominal, m) in LADDER {
            let p = m.params() / 1e9;
            assert!(
                (p / nominal - 1.0).abs() < 0.1,
                "{id}: {p} B against {nominal} B"
            );
        }
    }

    #[test]
    fn scaled_walks_the_ladder_and_grows() {
        for (i, (_, _, m)) in LADDER.iter().enumerate() {
            assert_eq!(scaled(i as f64), *m);
        }
        let mut last = 0.0;
        for k in 0..=120 {
            let p = scaled(k as f64 / 10.0).params();
            assert!(p > last, "not increasing at x={}", k as f64 / 10.0);
            last = p;
        }
    }
}
