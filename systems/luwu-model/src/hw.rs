//! Hardware model inputs, each from a cited independent source (never from the paper's results).
//! The testbed (Sec. 4.1 of the paper) names the parts; the numbers come from their datasheets or
//! from published measurements.

/// NVIDIA A100 datasheet: dense BF16 tensor-core peak, TFLOPS.
pub const A100_BF16_PEAK_TFLOPS: f64 = 312.0;
/// NVIDIA A100 datasheet: dense TF32 tensor-core peak, TFLOPS (SwitchML trains in fp32; PyTorch
/// 1.7-1.11 ran fp32 matmuls on TF32 tensor cores by default, `allow_tf32 = True`).
pub const A100_TF32_PEAK_TFLOPS: f64 = 156.0;
/// NVIDIA A100 40GB datasheet: HBM2 bandwidth, GB/s.
pub const A100_40GB_HBM_GBPS: f64 = 1555.0;

/// Achievable fraction of the BF16 peak for large GEMMs on an A100 PCIe (the workers' cards sit in
/// PCIe servers): 256.4 of 312 TFLOPS, S. Bekman, "Maximum Achievable Matmul FLOPS comparison
/// table", github.com/stas00/ml-engineering, compute/accelerator/README.md (CUDA 12.1).
pub const A100_PCIE_GEMM_EFFICIENCY: f64 = 256.4 / 312.0;
/// The same table's A100 SXM (the DGX A100's GPUs): 267.9 of 312 TFLOPS.
pub const A100_SXM_GEMM_EFFICIENCY: f64 = 267.9 / 312.0;

/// End-to-end efficiency of large-transformer training on A100 SXM: Megatron-LM trained a 1T
/// GPT model on 3072 A100 SXM GPUs (Selene) at 502 PFLOP/s, "52% of theoretical peak" per GPU
/// (D. Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
/// Megatron-LM", SC'21, abstract), counting FLOPs with activation recomputation (their Sec. 5.1
/// formula, 96 B s l h^2 (1 + s/6h + V/16lh), DeepSpeed-Chat's factor 4). It covers a whole
/// iteration's kernels (GEMMs, element-wise work, softmax, launch gaps), so the iteration models
/// apply it to all hardware FLOPs and add no separate element-wise term. It also contains
/// Megatron's own communication and pipeline bubbles, so it is a conservative (low) figure for a
/// GPU's compute alone.
pub const A100_SXM_E2E_EFFICIENCY: f64 = 0.52;
/// The same for the workers' A100 PCIe (250 W), scaled by the PCIe/SXM ratio of Bekman's measured
/// matmul maxima (256.4 / 267.9): the PCIe card's lower power limit costs it that much in GEMMs.
pub const A100_PCIE_E2E_EFFICIENCY: f64 =
    A100_SXM_E2E_EFFICIENCY * A100_PCIE_GEMM_EFFICIENCY / A100_SXM_GEMM_EFFICIENCY;

/// PCIe 3.0 x16 (the workers' Xeon Silver 4214 is a PCIe 3.0 part, Intel ARK): 8 GT/s x 16 lanes
/// x 128/130 coding = 15.75 GB/s per direction, times the TLP efficiency of 256-byte payloads
/// behind 24 bytes of TLP header, framing and DLLP overhead (256/280).
pub const PCIE3_X16_GBPS: f64 = 8.0 * 16.0 * (128.0 / 130.0) / 8.0 * (256.0 / 280.0);
/// PCIe 4.0: twice PCIe 3.0's signalling rate per lane, same coding and TLP overhead.
pub const PCIE4_LANE_GBPS: f64 = 16.0 * (128.0 / 130.0) / 8.0 * (256.0 / 280.0);
/// Xilinx Alveo U50 data sheet (DS965) as the paper states it: 12 GB/s over PCIe per direction.
pub const U50_PCIE_GBPS: f64 = 12.0;
/// NVIDIA A100 SXM datasheet: third-generation NVLink, 600 GB/s per GPU in total, 300 each way.
pub const A100_NVLINK_GBPS: f64 = 300.0;

/// Ethernet framing per packet on the wire: preamble and start delimiter 8, inter-frame gap 12,
/// header 14, FCS 4 (IEEE 802.3).
pub const ETH_WIRE_OVERHEAD: f64 = 8.0 + 12.0 + 14.0 + 4.0;
/// IPv4 20 + UDP 8.
pub const IP_UDP: f64 = 28.0;
/// RoCEv2 BTH 12 + ICRC 4 (InfiniBand Architecture Specification, Annex A17).
pub const ROCE_OVERHEAD: f64 = 16.0;
/// The payload of one INA packet on a Tofino-1 switch: 64 32-bit integers, as SwitchML (Sapio
/// et al., NSDI'21, Sec. 5) and LuWu (which follows SwitchML's format conversion, Sec. 3.2.2).
pub const INA_PAYLOAD: f64 = 256.0;
/// The INA header: the 16 bytes of the suite's LuWu packet layout (systems/luwu/src/packet.rs:
/// kind, source, flags, SeqNum, Credit, count), also used for SwitchML's.
pub const INA_HEADER: f64 = 16.0;

/// Goodput fraction of NCCL/RoCE traffic with 4096-byte MTU payloads.
pub fn roce_efficiency() -> f64 {
    4096.0 / (4096.0 + ETH_WIRE_OVERHEAD + IP_UDP + ROCE_OVERHEAD)
}

/// Goodput fraction of INA packets with SwitchML's 256-byte payloads.
pub fn ina_efficiency() -> f64 {
    ina_efficiency_of(INA_PAYLOAD)
}

/// Goodput fraction of INA packets with `payload`-byte payloads.
pub fn ina_efficiency_of(payload: f64) -> f64 {
    payload / (payload + ETH_WIRE_OVERHEAD + IP_UDP + INA_HEADER)
}

/// Bytes of a gradient element on SwitchML's wire: 32-bit integers (Sapio et al., NSDI'21,
/// Sec. 4: floats are converted to fixed point for the switch's integer adders).
pub const SWITCHML_GRAD_WIRE_BYTES: f64 = 4.0;

/// A CPU: cores and memory bandwidth (for the optimizer's update rate).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cpu {
    pub name: &'static str,
    pub cores: f64,
    /// Peak DRAM bandwidth of all sockets, GB/s.
    pub mem_gbps: f64,
}

/// Workers: dual Xeon Silver 4214 (Intel ARK: 12 cores, 6 channels DDR4-2400 each).
pub const WORKER_CPU: Cpu = Cpu {
    name: "2x Xeon Silver 4214",
    cores: 24.0,
    mem_gbps: 2.0 * 6.0 * 2400.0 * 8.0 / 1000.0,
};
/// LuWu's optimizer node: dual Xeon Gold 5320 (Intel ARK: 26 cores, 8 channels DDR4-2933 each).
pub const NODE_CPU: Cpu = Cpu {
    name: "2x Xeon Gold 5320",
    cores: 52.0,
    mem_gbps: 2.0 * 8.0 * 2933.0 * 8.0 / 1000.0,
};
/// DGX A100 (NVIDIA DGX A100 datasheet): dual AMD EPYC 7742, 64 cores and 8 channels of DDR4-3200
/// each.
pub const DGX_CPU: Cpu = Cpu {
    name: "2x EPYC 7742",
    cores: 128.0,
    mem_gbps: 2.0 * 8.0 * 3200.0 * 8.0 / 1000.0,
};

/// One core's CPU-Adam rate, params/s, a declared input (no timing of this host): DeepSpeed's
/// `cpu_adam` updates 16 fp32 parameters per AVX-512 vector with about six multiply-adds, one
/// square root and one division (csrc/adam/cpu_adam_impl.cpp, `Step_AVX`); on a Skylake/Ice Lake
/// Xeon core `vsqrtps zmm` and `vdivps zmm` issue once every 12 and 10 cycles (A. Fog,
/// "Instruction tables", Skylake-X), so about 28 cycles per 16 parameters, 1.75 cycles a
/// parameter: 2.2 GHz (the Xeon Silver 4214's and Gold 5320's base clocks, Intel ARK) / 1.75 =
/// 1.26e9 params/s. It does not decide any model here: every CPU's DRAM bound
/// (`mem_gbps / ADAM_DRAM_BYTES` over its cores: 343e6 params/s a core for the workers, 258e6 for
/// LuWu's node, 114e6 for the DGX) is at least 3.6x lower, so [`crate::rate::scaled`] returns the
/// DRAM bound (the spec parameter `adam_per_core` sweeps it).
pub const XEON_ADAM_PER_CORE: f64 = 2.2e9 / 1.75;

/// Bytes Adam moves through DRAM per parameter: reads fp32 parameter, gradient, m and v (16),
/// writes parameter, m and v (12).
pub const ADAM_DRAM_BYTES: f64 = 28.0;
