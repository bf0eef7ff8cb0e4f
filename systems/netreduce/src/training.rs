//! A training-iteration model for data-parallel DNN training, with inputs that do not come from
//! the paper under test.
//!
//! - Models are built layer by layer from their published definitions (torchvision's AlexNet,
//!   VGG16 and ResNet50 at 224x224; BERT-base and GPT-2 small as their papers define them), so
//!   each layer's parameter count and multiply-accumulates (MACs) per sample are computed, not
//!   looked up. Checks: AlexNet 61.1 M parameters / 0.71 GMACs, VGG16 138.4 M / 15.5 GMACs,
//!   ResNet50 25.5 M / 4.1 GMACs (torchvision's model table lists the same).
//! - A GPU's speed is its vendor peak (NVIDIA's data sheets: V100 SXM2 15.7 TFLOPS FP32 and
//!   125 TFLOPS FP16 tensor; GeForce RTX 2080 10.1 TFLOPS FP32 and 20.1 TFLOPS FP16 tensor with
//!   FP32 accumulate) times a utilisation that is *our assumption*, with a band: the report shows
//!   the prediction at the band's ends as well as at its centre.
//! - Training costs 3x the forward FLOPs (forward, and a backward of twice the forward), 2 FLOPs
//!   per MAC.
//! - Wait-free back-propagation as Horovod and PyTorch DDP do it: gradients become ready layer by
//!   layer in reverse order during the backward pass, are grouped into buckets of `bucket_bytes`,
//!   and each bucket is all-reduced as soon as it is full and the previous bucket's all-reduce has
//!   finished. The forward pass of the next iteration waits for the last bucket.
//!
//! The communication time of a bucket is a function the caller supplies (ring, NetReduce,
//! hierarchical, ...), so one timeline serves every scheme.

/// One layer: parameters and MACs per sample of its forward pass.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Layer {
    pub params: f64,
    pub macs: f64,
}

/// A model: its layers in forward order.
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    pub name: &'static str,
    pub layers: Vec<Layer>,
}

impl Model {
    pub fn params(&self) -> f64 {
        self.layers.iter().map(|l| l.params).sum()
    }

    pub fn macs(&self) -> f64 {
        self.layers.iter().map(|l| l.macs).sum()
    }

    /// Gradient bytes at `bytes_per_value` (4 for FP32, 2 for FP16).
    pub fn gradient_bytes(&self, bytes_per_value: f64) -> f64 {
        self.params() * bytes_per_value
    }
}

fn conv(cin: f64, cout: f64, k: f64, hw_out: f64) -> Layer {
    Layer {
        params: k * k * cin * cout + cout,
        macs: k * k * cin * cout * hw_out * hw_out,
    }
}

fn conv_nobias(cin: f64, cout: f64, k: f64, hw_out: f64) -> Layer {
    // ResNet convolutions have no bias; their batch norm adds 2 parameters per channel
    Layer {
        params: k * k * cin * cout + 2.0 * cout,
        macs: k * k * cin * cout * hw_out * hw_out,
    }
}

fn fc(i: f64, o: f64) -> Layer {
    Layer {
        params: i * o + o,
        macs: i * o,
    }
}

/// torchvision's AlexNet.
pub fn alexnet() -> Model {
    Model {
        name: "alexnet",
        layers: vec![
            conv(3.0, 64.0, 11.0, 55.0),
            conv(64.0, 192.0, 5.0, 27.0),
            conv(192.0, 384.0, 3.0, 13.0),
            conv(384.0, 256.0, 3.0, 13.0),
            conv(256.0, 256.0, 3.0, 13.0),
            fc(256.0 * 6.0 * 6.0, 4096.0),
            fc(4096.0, 4096.0),
            fc(4096.0, 1000.0),
        ],
    }
}

/// VGG16 (configuration D).
pub fn vgg16() -> Model {
    let cfg: [(f64, f64, f64); 13] = [
        (3.0, 64.0, 224.0),
        (64.0, 64.0, 224.0),
        (64.0, 128.0, 112.0),
        (128.0, 128.0, 112.0),
        (128.0, 256.0, 56.0),
        (256.0, 256.0, 56.0),
        (256.0, 256.0, 56.0),
        (256.0, 512.0, 28.0),
        (512.0, 512.0, 28.0),
        (512.0, 512.0, 28.0),
        (512.0, 512.0, 14.0),
        (512.0, 512.0, 14.0),
        (512.0, 512.0, 14.0),
    ];
    let mut layers: Vec<Layer> = cfg
        .iter()
        .map(|(i, o, hw)| conv(*i, *o, 3.0, *hw))
        .collect();
    layers.extend([
        fc(512.0 * 7.0 * 7.0, 4096.0),
        fc(4096.0, 4096.0),
        fc(4096.0, 1000.0),
    ]);
    Model {
        name: "vgg16",
        layers,
    }
}

/// ResNet50 (v1.5: the stride on the 3x3 convolution, as torchvision).
pub fn resnet50() -> Model {
    let mut layers = vec![conv_nobias(3.0, 64.0, 7.0, 112.0)];
    let mut cin = 64.0;
    let mut hw = 56.0;
    for (stage, (blocks, width)) in [(3, 64.0), (4, 128.0), (6, 256.0), (3, 512.0)]
        .into_iter()
        .enumerate()
    {
        for b in 0..blocks {
            let stride = if stage > 0 && b == 0 { 2.0 } else { 1.0 };
            let out_hw = hw / stride;
            layers.push(conv_nobias(cin, width, 1.0, hw));
            layers.push(conv_nobias(width, width, 3.0, out_hw));
            layers.push(conv_nobias(width, width * 4.0, 1.0, out_hw));
            if b == 0 {
                layers.push(conv_nobias(cin, width * 4.0, 1.0, out_hw));
            }
            cin = width * 4.0;
            hw = out_hw;
        }
    }
    layers.push(fc(2048.0, 1000.0));
    Model {
        name: "resnet50",
        layers,
    }
}

/// A transformer encoder/decoder stack: embeddings (vocabulary and positions), `layers` blocks of
/// hidden size `h` with a 4h feed-forward, at sequence length `seq` (MACs per sequence).
fn transformer(
    name: &'static str,
    vocab: f64,
    positions: f64,
    layers: usize,
    h: f64,
    seq: f64,
) -> Model {
    let mut v = vec![Layer {
        params: (vocab + positions) * h,
        // the embedding lookup costs nothing worth counting; a tied output projection does
        macs: vocab * h * seq,
    }];
    for _ in 0..layers {
        let linear = 4.0 * h * h + 2.0 * h * 4.0 * h;
        v.push(Layer {
            params: linear + 9.0 * h + 4.0 * h, // biases and two layer norms
            macs: linear * seq + 2.0 * seq * seq * h,
        });
    }
    Model { name, layers: v }
}

/// BERT-base (Devlin et al.): 12 layers, hidden 768, vocabulary 30,522, at `seq` tokens.
pub fn bert_base(seq: f64) -> Model {
    transformer("bert_base", 30522.0 + 2.0, 512.0, 12, 768.0, seq)
}

/// GPT-2 small (Radford et al.): 12 layers, hidden 768, vocabulary 50,257, 1,024 tokens.
pub fn gpt2_small(seq: f64) -> Model {
    transformer("gpt2_small", 50257.0, 1024.0, 12, 768.0, seq)
}

/// A model by the name the specs use, with its sequence length for the NLP ones (our choices:
/// GLUE tasks at 128 tokens, SQuAD at 384, GPT-2 at 1,024, the lengths their papers fine-tune and
/// pre-train with).
pub fn by_name(name: &str) -> Option<Model> {
    Some(match name {
        "alexnet" => alexnet(),
        "vgg16" => vgg16(),
        "resnet50" => resnet50(),
        "bert_mnli" | "bert_qnli" | "bert_qqp" | "bert_pretrain" => bert_base(128.0),
        "bert_squad" => bert_base(384.0),
        "gpt2" => gpt2_small(1024.0),
        _ => return None,
    })
}

/// A GPU's vendor peak, FLOP/s.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gpu {
    pub name: &'static str,
    pub fp32: f64,
    pub fp16: f64,
}

/// NVIDIA Tesla V100 SXM2 data sheet: 15.7 TFLOPS FP32, 125 TFLOPS tensor (FP16).
pub const V100_SXM2: Gpu = Gpu {
    name: "V100 SXM2",
    fp32: 15.7e12,
    fp16: 125e12,
};

/// NVIDIA GeForce RTX 2080 (Turing whitepaper): 10.1 TFLOPS FP32, 20.1 TFLOPS FP16 tensor with
/// FP32 accumulate (what mixed-precision training uses on GeForce parts).
pub const RTX_2080: Gpu = Gpu {
    name: "RTX 2080",
    fp32: 10.1e12,
    fp16: 20.1e12,
};

pub fn gpu_by_name(name: &str) -> Option<Gpu> {
    match name {
        "v100" => Some(V100_SXM2),
        "rtx2080" => Some(RTX_2080),
        _ => None,
    }
}

/// How fast a GPU trains, as we assume it (not from the paper): a share of the vendor peak.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Compute {
    pub gpu: Gpu,
    pub fp16: bool,
    /// Achieved share of the peak.
    pub utilisation: f64,
}

impl Compute {
    pub fn flops(&self) -> f64 {
        (if self.fp16 {
            self.gpu.fp16
        } else {
            self.gpu.fp32
        }) * self.utilisation
    }

    /// Forward and backward time of one layer for `batch` samples, seconds.
    pub fn layer_times(&self, l: &Layer, batch: f64) -> (f64, f64) {
        let fwd = 2.0 * l.macs * batch / self.flops();
        (fwd, 2.0 * fwd)
    }
}

/// One iteration's timeline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Iteration {
    pub forward_s: f64,
    pub backward_s: f64,
    /// Sum of the buckets' all-reduce times.
    pub comm_s: f64,
    /// Communication not hidden behind the backward pass.
    pub exposed_comm_s: f64,
    pub iteration_s: f64,
    pub buckets: usize,
}

/// The iteration with wait-free back-propagation: `comm(bytes)` is the all-reduce time of a
/// bucket of that many bytes. `overlap = false` starts communication after the whole backward.
pub fn iteration(
    model: &Model,
    compute: &Compute,
    batch: f64,
    bytes_per_value: f64,
    bucket_bytes: f64,
    overlap: bool,
    comm: &dyn Fn(f64) -> f64,
) -> Iteration {
    let times: Vec<(f64, f64)> = model
        .layers
        .iter()
        .map(|l| compute.layer_times(l, batch))
        .collect();
    let forward: f64 = times.iter().map(|t| t.0).sum();
    let backward: f64 = times.iter().map(|t| t.1).sum();
    // buckets in reverse layer order: (ready time after the start of backward, bytes)
    let mut buckets: Vec<(f64, f64)> = Vec::new();
    let (mut t, mut acc) = (0.0, 0.0);
    for (l, (_, b)) in model.layers.iter().zip(&times).rev() {
        t += b;
        acc += l.params * bytes_per_value;
        if acc >= bucket_bytes {
            buckets.push((t, acc));
            acc = 0.0;
        }
    }
    if acc > 0.0 {
        buckets.push((t, acc));
    }
    let mut end = 0.0f64;
    let mut total = 0.0;
    for (ready, bytes) in &buckets {
        let start = if overlap {
            ready.max(end)
        } else {
            backward.max(end)
        };
        let c = comm(*bytes);
        total += c;
        end = start + c;
    }
    let after_backward = end.max(backward);
    Iteration {
        forward_s: forward,
        backward_s: backward,
        comm_s: total,
        exposed_comm_s: after_backward - backward,
        iteration_s: forward + after_backward,
        buckets: buckets.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * b.abs()
    }

    #[test]
    fn models_match_their_definitions() {
        // torchvision's table: AlexNet 61,100,840 params 0.71 GMACs; VGG16 138,357,544 / 15.47;
        // ResNet50 25,557,032 / 4.09
        let a = alexnet();
        assert_eq!(a.params(), 61_100_840.0);
        assert!(close(a.macs(), 0.714e9, 0.01), "{}", a.macs());
        let v = vgg16();
        assert_eq!(v.params(), 138_357_544.0);
        assert!(close(v.macs(), 15.47e9, 0.01), "{}", v.macs());
        let r = resnet50();
        assert!(close(r.params(), 25_557_032.0, 0.003), "{}", r.params());
        assert!(close(r.macs(), 4.09e9, 0.02), "{}", r.macs());
        // BERT-base ~110 M, GPT-2 small ~124 M
        assert!(
            close(bert_base(128.0).params(), 109.5e6, 0.02),
            "{}",
            bert_base(128.0).params()
        );
        assert!(
            close(gpt2_small(1024.0).params(), 124.4e6, 0.02),
            "{}",
            gpt2_small(1024.0).params()
        );
    }

    #[test]
    fn the_timeline_has_the_right_limits() {
        let m = alexnet();
        let c = Compute {
            gpu: V100_SXM2,
            fp16: false,
            utilisation: 0.5,
        };
        let free = iteration(&m, &c, 32.0, 4.0, 25e6, true, &|_| 0.0);
        assert!(close(
            free.iteration_s,
            free.forward_s + free.backward_s,
            1e-12
        ));
        assert!(close(free.backward_s, 2.0 * free.forward_s, 1e-12));
        let per_byte = |b: f64| b / 10e9;
        let serial = iteration(&m, &c, 32.0, 4.0, 25e6, false, &per_byte);
        assert!(close(
            serial.iteration_s,
            serial.forward_s + serial.backward_s + m.gradient_bytes(4.0) / 10e9,
            1e-9
        ));
        let over = iteration(&m, &c, 32.0, 4.0, 25e6, true, &per_byte);
        assert!(
            over.iteration_s < serial.iteration_s,
            "overlap hides some communication"
        );
        assert!(over.iteration_s >= over.forward_s + over.backward_s);
        assert!(
            over.iteration_s >= over.forward_s + over.comm_s,
            "comm is serial"
        );
        assert!(close(over.comm_s, serial.comm_s, 1e-12));
        // AlexNet's 4096x9216 layer alone is ~151 MB: it makes its own bucket
        assert!(over.buckets >= 3);
    }
}
