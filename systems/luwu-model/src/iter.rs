//! Iteration models: the time of one training iteration per system, from the model's FLOPs, the
//! bytes each resource moves, and each system's overlap rules.
//!
//! An iteration is a sequence of phases (fwd, bwd, opt). A phase walks the model unit by unit (the
//! embedding/head and each decoder layer); a unit occupies the GPU for its compute and each other
//! resource (network directions, PCIe directions, SSDs, the optimizer CPU) for its bytes over that
//! resource's bandwidth. Where a system overlaps transfers with compute (prefetching the next
//! unit), a unit takes the longest of its resources (a bottleneck pipeline), plus the pipeline's
//! fill (the first unit's transfers before any compute) and the non-overlapped share
//! `serialised` of its network time (NCCL's interference, 0 by default). Where a system
//! serialises (SwitchML's host stack, ZeRO's optimizer step), the times add.
//!
//! GPU compute: GEMM FLOPs at `gemm_efficiency` x the dense peak ([`crate::hw`]), plus the
//! memory-bound element-wise work (layer norms, GeLU, softmax, dropout, the loss): every
//! activation byte of [`Shape::layer_activation_bytes`] written once and read once at HBM
//! bandwidth. Backward = 2 x forward; recomputation = 1 x forward of each layer.
//!
//! Choices where the paper is silent:
//! - LuWu's wire format: SwitchML's (Sec. 3.2.2 says LuWu follows it), 256-byte payloads; the
//!   gradients as 32-bit integers (`grad_wire_bytes` = 4), the parameters as bf16 (2 bytes);
//! - LuWu's optimizer node: fwd reads the bf16 parameters (2 B/param) from its SSDs; bwd+opt reads
//!   parameters (2) and the fp32 master weights and moments (12) and writes them back with the
//!   updated bf16 parameters (14); the gradients stay in memory. Phases do not overlap (Sec. 3.3:
//!   the fwd step contains only reading and pushing parameters);
//! - ZeRO-Infinity: DeepSpeed 0.9.3's defaults: the gradients' partition stays in pinned CPU
//!   memory; the opt step swaps each sub-group's fp32 states in (12 B/param), updates them on the
//!   CPU and swaps them and the bf16 parameters out (14 B/param), with
//!   `pipeline_read`/`pipeline_write` off, so read, update and write add; the SSDs of a worker
//!   give `ssd_bw_GBps / 8` per direction (the paper's aggregate over its 8 workers);
//! - NCCL's traffic crosses the GPU's PCIe link (whether or not through GPUDirect RDMA), and so do
//!   ZeRO-Infinity's parameter shards and checkpoints.

use crate::hw::{self, Cpu};
use crate::rate;
use crate::shapes::Shape;
use crate::{ModelError, System};

/// The inputs of an iteration model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Config {
    pub workers: usize,
    pub seq_len: f64,
    pub micro_batch: f64,
    pub net_gbps: f64,
    pub peak_tflops: f64,
    pub gemm_efficiency: f64,
    pub hbm_gbps: f64,
    /// Per-direction bandwidth of one ZeRO-Infinity worker's SSDs, GB/s.
    pub worker_ssd_gbps: f64,
    /// Per-direction bandwidth of LuWu's optimizer node SSDs together, GB/s.
    pub node_ssd_gbps: f64,
    /// One core's Adam rate (params/s), measured on this host ([`rate::measured`]).
    pub adam_per_core: f64,
    /// Share of NCCL network time not overlapped with compute (ZeRO systems).
    pub nccl_serialised_fraction: f64,
    /// Bytes of one gradient element on LuWu's and SwitchML's wire.
    pub grad_wire_bytes: f64,
}

impl Config {
    /// The paper's cluster at `workers` workers and micro-batch `b`, with the measured Adam rate.
    pub fn paper(workers: usize, b: f64, adam_per_core: f64) -> Config {
        Config {
            workers,
            seq_len: 1024.0,
            micro_batch: b,
            net_gbps: 100.0,
            peak_tflops: hw::A100_BF16_PEAK_TFLOPS,
            gemm_efficiency: hw::A100_PCIE_GEMM_EFFICIENCY,
            hbm_gbps: hw::A100_40GB_HBM_GBPS,
            worker_ssd_gbps: 26.0 / 8.0,
            node_ssd_gbps: 26.0,
            adam_per_core,
            nccl_serialised_fraction: 0.0,
            grad_wire_bytes: 4.0,
        }
    }

    fn check(&self) -> Result<(), ModelError> {
        let pos = [
            self.seq_len,
            self.micro_batch,
            self.net_gbps,
            self.peak_tflops,
            self.gemm_efficiency,
            self.hbm_gbps,
            self.worker_ssd_gbps,
            self.node_ssd_gbps,
            self.adam_per_core,
            self.grad_wire_bytes,
        ];
        if self.workers == 0 || pos.iter().any(|v| !(v.is_finite() && *v > 0.0)) {
            return Err(ModelError::Invalid(format!(
                "every bandwidth, rate, size and the worker count must be positive: {self:?}"
            )));
        }
        if self.gemm_efficiency > 1.0 || !(0.0..=1.0).contains(&self.nccl_serialised_fraction) {
            return Err(ModelError::Invalid(
                "gemm_efficiency and nccl_serialised_fraction are fractions in [0, 1]".into(),
            ));
        }
        Ok(())
    }
}

/// One iteration's times (seconds) and what they are made of.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Breakdown {
    pub fwd: f64,
    pub bwd: f64,
    pub opt: f64,
    pub iteration: f64,
    /// GPU kernel time (forward, recomputation, backward, GPU optimizer).
    pub gpu_compute: f64,
    /// bwd time in which the GPU computes with no network transfer beside it.
    pub bwd_compute_only: f64,
    /// Busiest SSD direction's busy time in the iteration (the node's for LuWu, a worker's for
    /// ZeRO-Infinity).
    pub ssd_time: f64,
    /// Model FLOPs per GPU per iteration.
    pub model_flops: f64,
}

impl Breakdown {
    /// Model TFLOPS per GPU.
    pub fn tflops(&self) -> f64 {
        self.model_flops / self.iteration / 1e12
    }
}

/// One unit of a phase: GPU time and the busy time of every other resource.
#[derive(Debug, Clone, Copy, Default)]
struct Unit {
    compute: f64,
    /// Network per direction (max of the two directions).
    net: f64,
    /// Everything else the unit occupies while it overlaps (PCIe, SSDs, node CPU).
    other: f64,
    /// Busy time of the SSDs (for the breakdown).
    ssd: f64,
}

/// A pipelined phase: each unit takes its bottleneck, plus the fill, plus the non-overlapped
/// share of network time. Returns (time, compute-only time, ssd busy time).
fn pipelined(units: &[Unit], serialised: f64) -> (f64, f64, f64) {
    let mut t = 0.0;
    let mut only = 0.0;
    let mut ssd = 0.0;
    for u in units {
        t += u.compute.max(u.net).max(u.other) + serialised * u.net;
        only += (u.compute - u.net).max(0.0);
        ssd += u.ssd;
    }
    if let Some(first) = units.first() {
        t += first.net.max(first.other);
    }
    (t, only, ssd)
}

/// GPU times of the model: (one layer's forward, the head's forward), seconds.
fn gpu_times(m: &Shape, c: &Config, fp32: bool) -> (f64, f64) {
    let (peak, w) = if fp32 {
        (hw::A100_TF32_PEAK_TFLOPS, 2.0)
    } else {
        (c.peak_tflops, 1.0)
    };
    let rate = c.gemm_efficiency * peak * 1e12;
    let hbm = c.hbm_gbps * 1e9;
    let (b, s) = (c.micro_batch, c.seq_len);
    // written once and read once
    let layer = m.layer_fwd_flops(b, s) / rate + 2.0 * w * m.layer_activation_bytes(b, s) / hbm;
    let head = m.head_fwd_flops(b, s) / rate + 2.0 * w * m.logits_bytes(b, s) / hbm;
    (layer, head)
}

/// One decoder layer's forward time on the GPU (bf16), seconds.
pub fn layer_fwd_time(m: &Shape, c: &Config) -> f64 {
    gpu_times(m, c, false).0
}

/// The units of a model: the embedding/head first, then the layers, with their parameter
/// counts and forward times.
fn units(m: &Shape, c: &Config, fp32: bool) -> Vec<(f64, f64)> {
    let (layer, head) = gpu_times(m, c, fp32);
    let mut v = vec![(m.embedding_params(), head)];
    v.extend(std::iter::repeat_n((m.layer_params(), layer), m.layers));
    v
}

/// The iteration of `system` training `m` under `c`.
pub fn iteration(system: System, m: &Shape, c: &Config) -> Result<Breakdown, ModelError> {
    c.check()?;
    let b = match system {
        System::Luwu => luwu(m, c),
        System::ZeroInfinity => zero(m, c, Zero::Infinity { sharp: false }),
        System::ZeroInfinitySharp => zero(m, c, Zero::Infinity { sharp: true }),
        System::Zero3 => zero(m, c, Zero::Gpu),
        System::ZeroOffload => zero(m, c, Zero::Offload),
        System::SwitchMl => switchml(m, c),
    };
    Ok(b)
}

/// LuWu: pull and push overlapped with compute, the optimizer node pipelined (Sec. 3.3).
fn luwu(m: &Shape, c: &Config) -> Breakdown {
    let link = (c.net_gbps / 8.0 * hw::ina_efficiency()).min(hw::U50_PCIE_GBPS) * 1e9;
    let ssd = c.node_ssd_gbps * 1e9;
    let adam = rate::scaled(c.adam_per_core, &hw::NODE_CPU, hw::NODE_CPU.cores);
    let us = units(m, c, false);
    let fwd: Vec<Unit> = us
        .iter()
        .map(|&(p, t)| Unit {
            compute: t,
            net: 2.0 * p / link,
            other: 2.0 * p / ssd,
            ssd: 2.0 * p / ssd,
        })
        .collect();
    // backward walks the model in reverse: the head first
    let bwd: Vec<Unit> = us
        .iter()
        .enumerate()
        .map(|(i, &(p, t))| {
            let recompute = if i == 0 { 0.0 } else { t };
            let node_ssd = 14.0 * p / ssd; // read 14 and write 14, one per direction
            Unit {
                compute: recompute + 2.0 * t,
                net: (2.0 * p / link).max(c.grad_wire_bytes * p / link),
                other: node_ssd.max(p / adam),
                ssd: node_ssd,
            }
        })
        .collect();
    let (tf, _, sf) = pipelined(&fwd, 0.0);
    let (tb, only, sb) = pipelined(&bwd, 0.0);
    // the last unit's update and write-back drain after the workers' last push
    let (p_last, _) = us[0];
    let drain = p_last / adam + 14.0 * p_last / ssd;
    let tb = tb + drain;
    let compute: f64 = fwd.iter().chain(bwd.iter()).map(|u| u.compute).sum();
    Breakdown {
        fwd: tf,
        bwd: tb,
        opt: 0.0,
        iteration: tf + tb,
        gpu_compute: compute,
        bwd_compute_only: only,
        ssd_time: sf + sb,
        model_flops: m.model_flops(c.micro_batch, c.seq_len),
    }
}

/// LuWu's workers as the optimizer node sees them, per unit in model order (the embedding/head
/// first, then the layers): (parameters, forward time, backward time), each the longer of the
/// unit's GPU time and its pull (and push) at the WorkerNIC's rate. The emulated fig15 drives the
/// real out-of-core optimizer with these times.
pub fn luwu_worker_times(m: &Shape, c: &Config) -> Result<Vec<(f64, f64, f64)>, ModelError> {
    c.check()?;
    let link = (c.net_gbps / 8.0 * hw::ina_efficiency()).min(hw::U50_PCIE_GBPS) * 1e9;
    Ok(units(m, c, false)
        .iter()
        .enumerate()
        .map(|(i, &(p, t))| {
            let recompute = if i == 0 { 0.0 } else { t };
            let fwd = t.max(2.0 * p / link);
            let bwd = (recompute + 2.0 * t)
                .max(2.0 * p / link)
                .max(c.grad_wire_bytes * p / link);
            (p, fwd, bwd)
        })
        .collect())
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Zero {
    /// ZeRO-3: states sharded in GPU memory, GPU Adam.
    Gpu,
    /// ZeRO-Infinity: states sharded on the workers' SSDs, CPU Adam; with SHARP the collectives
    /// reduce in the switch.
    Infinity { sharp: bool },
    /// ZeRO-Offload on a DGX A100: states in CPU memory, NVLink collectives, the 8 GPUs'
    /// CPU traffic through the host's 64 PCIe lanes.
    Offload,
}

/// ZeRO-3 and its offloading variants: all_gather per unit in fwd and bwd, reduce_scatter in bwd,
/// overlapped with compute; the opt step serialised after bwd.
fn zero(m: &Shape, c: &Config, kind: Zero) -> Breakdown {
    let n = c.workers as f64;
    let (b, s) = (c.micro_batch, c.seq_len);
    let (link, pcie) = match kind {
        Zero::Offload => {
            let host_share = 64.0 * hw::PCIE4_LANE_GBPS / n;
            (
                hw::A100_NVLINK_GBPS * 1e9,
                (16.0 * hw::PCIE4_LANE_GBPS).min(host_share) * 1e9,
            )
        }
        _ => (
            c.net_gbps / 8.0 * hw::roce_efficiency() * 1e9,
            hw::PCIE3_X16_GBPS * 1e9,
        ),
    };
    let ssd = c.worker_ssd_gbps * 1e9;
    let sharp = matches!(kind, Zero::Infinity { sharp: true });
    let offloads = !matches!(kind, Zero::Gpu);
    let on_ssd = matches!(kind, Zero::Infinity { .. });
    let ckpt = if on_ssd {
        m.checkpoint_bytes(b, s)
    } else {
        0.0
    };
    // bytes each direction of one collective over a unit's 16-bit values
    let coll = |p: f64| -> (f64, f64) {
        let full = 2.0 * p;
        if sharp {
            // all_gather: send the shard, receive everything (and the mirror for reduce_scatter)
            (full / n, full)
        } else {
            ((n - 1.0) / n * full, (n - 1.0) / n * full)
        }
    };
    let us = units(m, c, false);
    let fwd: Vec<Unit> = us
        .iter()
        .map(|&(p, t)| {
            let (ag_send, ag_recv) = coll(p);
            let shard_in = if offloads { 2.0 * p / n } else { 0.0 };
            let ssd_t = if on_ssd { 2.0 * p / n / ssd } else { 0.0 };
            let h2d = (ag_recv + shard_in) / pcie;
            let d2h = (ag_send + ckpt) / pcie;
            Unit {
                compute: t,
                net: ag_send.max(ag_recv) / link,
                other: h2d.max(d2h).max(ssd_t),
                ssd: ssd_t,
            }
        })
        .collect();
    let bwd: Vec<Unit> = us
        .iter()
        .enumerate()
        .map(|(i, &(p, t))| {
            let recompute = if i == 0 { 0.0 } else { t };
            let (ag_send, ag_recv) = coll(p);
            // reduce_scatter mirrors all_gather
            let (rs_send, rs_recv) = (ag_recv, ag_send);
            let send = ag_send + rs_send;
            let recv = ag_recv + rs_recv;
            let shard = if offloads { 2.0 * p / n } else { 0.0 };
            let ssd_t = if on_ssd { 2.0 * p / n / ssd } else { 0.0 };
            let h2d = (recv + shard + ckpt) / pcie;
            let d2h = (send + shard) / pcie;
            Unit {
                compute: recompute + 2.0 * t,
                net: send.max(recv) / link,
                other: h2d.max(d2h).max(ssd_t),
                ssd: ssd_t,
            }
        })
        .collect();
    let f = c.nccl_serialised_fraction;
    let (tf, _, sf) = pipelined(&fwd, f);
    let (tb, only, sb) = pipelined(&bwd, f);
    let shard = m.params() / n;
    let (opt, opt_gpu, opt_ssd) = match kind {
        // Adam on the GPU: read parameter, gradient, m, v (fp32 16 B), write 12 B and the bf16
        // copy 2 B, at HBM bandwidth
        Zero::Gpu => {
            let t = 30.0 * shard / (c.hbm_gbps * 1e9);
            (t, t, 0.0)
        }
        Zero::Infinity { .. } => {
            let adam = cpu_share(c, &hw::WORKER_CPU, 1.0);
            let read = 12.0 * shard / ssd;
            let write = 14.0 * shard / ssd;
            (read + shard / adam + write, 0.0, read + write)
        }
        Zero::Offload => {
            // one process per GPU shares the server's cores and DRAM; the updated bf16 shard
            // goes back to the GPU over its PCIe share
            let adam = cpu_share(c, &hw::DGX_CPU, n);
            (shard / adam + 2.0 * shard / pcie, 0.0, 0.0)
        }
    };
    let compute: f64 = fwd.iter().chain(bwd.iter()).map(|u| u.compute).sum::<f64>() + opt_gpu;
    Breakdown {
        fwd: tf,
        bwd: tb,
        opt,
        iteration: tf + tb + opt,
        gpu_compute: compute,
        bwd_compute_only: only,
        ssd_time: sf + sb + opt_ssd,
        model_flops: m.model_flops(b, s),
    }
}

/// Adam's rate for one of `procs` processes sharing `cpu`.
fn cpu_share(c: &Config, cpu: &Cpu, procs: f64) -> f64 {
    rate::scaled(c.adam_per_core, cpu, cpu.cores) / procs
}

/// SwitchML: conventional data parallelism in fp32; the all_reduce through the switch runs after
/// the backward pass, serialised with compute (Sec. 2.2), its gradients bounced through host
/// memory (GPU -> CPU -> NIC and back) over the GPU's PCIe link; Adam on the GPU.
fn switchml(m: &Shape, c: &Config) -> Breakdown {
    let (b, s) = (c.micro_batch, c.seq_len);
    let link = c.net_gbps / 8.0 * hw::ina_efficiency() * 1e9;
    let pcie = hw::PCIE3_X16_GBPS * 1e9;
    let us = units(m, c, true);
    let fwd: f64 = us.iter().map(|&(_, t)| t).sum();
    let recompute: f64 = us.iter().skip(1).map(|&(_, t)| t).sum();
    let p = m.params();
    // the gradients leave and the aggregate returns: per direction `grad_wire_bytes` per
    // element on the wire, fp32 over PCIe, pipelined with each other
    let comm = (c.grad_wire_bytes * p / link).max(4.0 * p / pcie);
    let bwd = recompute + 2.0 * fwd + comm;
    let opt = 28.0 * p / (c.hbm_gbps * 1e9);
    Breakdown {
        fwd,
        bwd,
        opt,
        iteration: fwd + bwd + opt,
        gpu_compute: 3.0 * fwd + recompute + opt,
        bwd_compute_only: recompute + 2.0 * fwd,
        ssd_time: 0.0,
        model_flops: m.model_flops(b, s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shapes::by_id;

    const ALL: [System; 6] = [
        System::Luwu,
        System::ZeroInfinity,
        System::ZeroInfinitySharp,
        System::Zero3,
        System::ZeroOffload,
        System::SwitchMl,
    ];

    fn cfg(b: f64) -> Config {
        Config::paper(8, b, 2e8)
    }

    #[test]
    fn faster_network_never_slows_and_slower_compute_never_speeds() {
        for id in ["opt_1_3b", "opt_30b", "opt_175b"] {
            let (_, m) = by_id(id).unwrap();
            for sys in ALL {
                for b in [1.0, 8.0, 32.0] {
                    let base = iteration(sys, &m, &cfg(b)).unwrap().iteration;
                    let mut fast = cfg(b);
                    fast.net_gbps = 200.0;
                    let t_fast = iteration(sys, &m, &fast).unwrap().iteration;
                    assert!(t_fast <= base, "{sys:?} {id} b={b}: {t_fast} > {base}");
                    let mut slow = cfg(b);
                    slow.gemm_efficiency = 0.5;
                    let t_slow = iteration(sys, &m, &slow).unwrap().iteration;
                    assert!(t_slow >= base, "{sys:?} {id} b={b}: {t_slow} < {base}");
                    if b == 32.0 {
                        // at the largest micro-batch every system's GPU time shows
                        assert!(t_slow > base, "{sys:?} {id} b={b}: {t_slow} <= {base}");
                    }
                    let mut ssd = cfg(b);
                    ssd.node_ssd_gbps = 13.0;
                    ssd.worker_ssd_gbps = 1.6;
                    let t_ssd = iteration(sys, &m, &ssd).unwrap().iteration;
                    assert!(t_ssd >= base, "{sys:?} {id} b={b}");
                }
            }
        }
    }

    #[test]
    fn compute_bound_luwu_reaches_the_gemm_roof() {
        // at 1 Tbit/s (the U50's 12 GB/s PCIe still caps the NIC) and 1 TB/s of SSDs, LuWu at
        // micro-batch 32 is compute-bound: its iteration is its GPU time plus the pipeline's
        // fill and drain only
        let (_, m) = by_id("opt_175b").unwrap();
        let mut c = cfg(32.0);
        c.net_gbps = 1000.0;
        c.node_ssd_gbps = 1000.0;
        c.adam_per_core = 1e12;
        let bd = iteration(System::Luwu, &m, &c).unwrap();
        let rel = bd.iteration / bd.gpu_compute - 1.0;
        assert!((0.0..0.02).contains(&rel), "{rel}");
        // model FLOPs are 3/4 of hardware FLOPs for the layers, so TFLOPS < 0.75 x roof
        let roof = c.gemm_efficiency * c.peak_tflops;
        assert!(bd.tflops() < 0.75 * roof && bd.tflops() > 0.6 * roof);
    }

    #[test]
    fn zero3_collective_time_by_hand() {
        // the fwd phase of a network-bound ZeRO-3 is (N-1)/N x 2 bytes x params over the link,
        // plus the first unit's fill
        let (_, m) = by_id("opt_1_3b").unwrap();
        let mut c = cfg(1.0);
        c.net_gbps = 1.0;
        let bd = iteration(System::Zero3, &m, &c).unwrap();
        let link = 1.0 / 8.0 * hw::roce_efficiency() * 1e9;
        let expect = 7.0 / 8.0 * 2.0 * (m.params() + m.embedding_params()) / link;
        assert!(
            (bd.fwd / expect - 1.0).abs() < 1e-9,
            "{} {}",
            bd.fwd,
            expect
        );
    }

    #[test]
    fn rejects_bad_inputs() {
        let (_, m) = by_id("opt_1_3b").unwrap();
        let mut c = cfg(1.0);
        c.net_gbps = 0.0;
        assert!(iteration(System::Luwu, &m, &c).is_err());
        let mut c = cfg(1.0);
        c.gemm_efficiency = 1.5;
        assert!(iteration(System::Luwu, &m, &c).is_err());
    }
}
