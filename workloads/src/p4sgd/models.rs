//! Per-iteration time models of every system of Sec. 5.3-5.4 (the modelled class), Eq. 1-3
//! rebuilt from the paper's prose, with every input a declared figure of the spec (a datasheet,
//! a published measurement or a released configuration); nothing is timed on this host, so a
//! point's numbers are a function of the spec and the seed alone (the test
//! `modelled_numbers_do_not_depend_on_this_hosts_load` runs every system twice, once beside busy
//! threads, and compares every number):
//!
//! - communication: P4SGD's all-reduce runs its protocol code in the simulator exactly as
//!   p4sgd-fig8's simulated class does ([`inabench_p4sgd::allreduce`]), with the fixed FPGA and
//!   switch latencies; CPUSync's is a published MPI_Allreduce latency at the node count and
//!   message size (`mpi_allreduce_us`, OSU micro-benchmarks, see [`MpiTable`], at the level of
//!   the host profile's `costs.cpusync_mpi_allreduce`, [`mpi_table`]); SwitchML's runs
//!   its streaming aggregation in the simulator at the host profile's cost per frame and core
//!   (`systems.switchml.worker.frame`, the released DPDK client's, the suite's one SwitchML
//!   client cost; [`crate::hostcost::core_costs`]), on the released client's threads with its
//!   transmit path and outstanding packets when the spec says `switchml_client: dpdk` (each
//!   iteration's all-reduce one call of the client, whose first batch leaves at once), on one
//!   thread with no buffer when it says `own`;
//! - FPGA compute: [`inabench_p4sgd::fpga`];
//! - CPU compute: a dense float32 dot product (forward) and axpy (backward) at one 8-wide AVX2
//!   multiply-add per cycle and core at `cpu_clock_ghz` (see [`cpu_ns_per_element`]), spread
//!   over the paper's CPU's cores (Sec. 5.1: 12) and bounded by its memory bandwidth (Intel ARK,
//!   Xeon Silver 4214: six DDR4-2400 channels = 115.2 GB/s); no per-iteration OpenMP/MPI call
//!   overhead (no cited figure for the paper's CPUs was found), so CPUSync is a best case;
//! - GPU compute: cuBLAS SGEMM as a dense matrix-vector product bounded by the A100's HBM
//!   bandwidth (NVIDIA A100 40GB PCIe data sheet: 1,555 GB/s) or FP32 peak (19.5 TFLOPS),
//!   plus one kernel launch per kernel (the host profile's `costs.gpusync_kernel_launch`,
//!   [`GPU_LAUNCH_KEY`]) and NCCL's small
//!   all-reduce latency: with the spec's `nccl_algo`, `nccl_base_lat_us` and `nccl_hop_lat_us`,
//!   the mean of GPUSync's NCCL all-reduce run in the simulator for this many GPUs as
//!   p4sgd-fig8's simulated class does ([`inabench_p4sgd::allreduce::run_gpusync`]) but with
//!   every hop at NCCL's per-hop latency exactly (no shape measured here), so it grows with the
//!   node count; without them the cited 2-node figure `nccl_allreduce_us`;
//! - large all-reduces (data parallelism's gradients): the latency plus a ring all-reduce's
//!   2 (P - 1) / P of the vector at line rate (MPI, NCCL), or one P4SGD packet of 8 values per
//!   frame time through the switch (the FPGA data-parallel system).
//!
//! Simulated latencies are cached per process, keyed by every input that changes them.
//!
//! All systems compute densely: the paper's GPU baseline uses cublasSgemm (dense), its CPU
//! baseline AVX2 vectors and the FPGA engines stream every feature (MLWeaving's layout).

use inabench_core::{PointCtx, WorkloadError};
use inabench_fabric::NodeId;
use inabench_ina::common::{AllReduceConfig, SetupNode, System};
use inabench_ina::hoststack::{DpdkStack, HostStack, TxBuffered};
use inabench_ina::switchml::SwitchMl;
use inabench_p4sgd::allreduce::{self, NcclInputs, Outcome, SimInputs};
use inabench_p4sgd::emulate::ELEMENTS;
use inabench_p4sgd::fpga::{self, FpgaModel};
use inabench_p4sgd::glm::columns;
use inabench_p4sgd::wire;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

fn err(e: impl std::fmt::Display) -> WorkloadError {
    WorkloadError::Invalid(e.to_string())
}

/// Every model input of a point.
#[derive(Debug, Clone)]
pub struct Inputs {
    pub sim: SimInputs,
    pub fpga: FpgaModel,
    pub gpu_launch_ns: f64,
    pub nccl_allreduce_ns: f64,
    /// NCCL's algorithm and latency model for the simulated GPUSync all-reduce, when given.
    pub nccl: Option<NcclInputs>,
    /// Gradient values per frame of the FPGA data-parallel system (modelled class; P4SGD's own
    /// format carries 8, the spec parameter `dp_values_per_frame` sweeps it).
    pub dp_values_per_frame: usize,
    pub gpu_hbm_bps: f64,
    pub gpu_flops: f64,
    pub cpu_cores: f64,
    pub cpu_mem_bps: f64,
    /// One core's time per (sample x feature) of the forward dot product and of the backward
    /// axpy, ns ([`cpu_ns_per_element`] of `cpu_clock_ghz`).
    pub cpu_ns_per_element: f64,
    /// CPUSync's MPI_Allreduce latency by node count and message size (`mpi_allreduce_us` at
    /// the host profile's level, [`mpi_table`]).
    pub mpi: Option<MpiTable>,
    /// Why [`Inputs::mpi`] could not be read (a profile without its key), for CPUSync's rows.
    pub mpi_error: Option<String>,
    /// SwitchML's host cost per frame and core, ns: the host profile's
    /// `systems.switchml.worker.frame` (NaN where the point has no profile pricing SwitchML).
    pub switchml_frame_ns: f64,
    /// SwitchML's client: `Some` the released DPDK client at the profile's cost and threads
    /// (`switchml_client: dpdk`), `None` the suite's own one-thread client.
    pub switchml_stack: Option<DpdkStack>,
    pub seed: u64,
}

/// What is wrong with an `mpi_allreduce_us` table, or a lookup it cannot answer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MpiTableError {
    #[error("`{0}` is not NODES: BYTES=US ...")]
    Row(String),
    #[error("`{0}` is not a node count")]
    Nodes(String),
    #[error("`{0}` is not BYTES=US")]
    Point(String),
    #[error("`{0}` is not a size")]
    Size(String),
    #[error("`{0}` is not a latency")]
    Latency(String),
    #[error("`{0}`: sizes and latencies are positive")]
    NotPositive(String),
    #[error("node count {nodes}: sizes must increase at `{point}`")]
    NotIncreasing { nodes: usize, point: String },
    #[error("node count {0} has no sizes")]
    NoSizes(usize),
    #[error("no rows")]
    NoRows,
    #[error("mpi_allreduce_us has no row for {0} nodes")]
    NoRowFor(usize),
}

/// A published MPI_Allreduce latency table: for each node count, (message bytes, mean latency
/// in ns) in increasing size. From the spec's `mpi_allreduce_us`, written
/// `"NODES: BYTES=US BYTES=US ...; NODES: ..."`.
#[derive(Debug, Clone, PartialEq)]
pub struct MpiTable {
    rows: Vec<(usize, Vec<(f64, f64)>)>,
}

impl MpiTable {
    pub fn parse(text: &str) -> Result<MpiTable, MpiTableError> {
        let mut rows = Vec::new();
        for row in text.split(';').map(str::trim).filter(|r| !r.is_empty()) {
            let (n, pts) = row
                .split_once(':')
                .ok_or_else(|| MpiTableError::Row(row.to_string()))?;
            let n: usize = n
                .trim()
                .parse()
                .map_err(|_| MpiTableError::Nodes(n.to_string()))?;
            let mut v = Vec::new();
            for p in pts.split_whitespace() {
                let (b, us) = p
                    .split_once('=')
                    .ok_or_else(|| MpiTableError::Point(p.to_string()))?;
                let b: f64 = b.parse().map_err(|_| MpiTableError::Size(b.to_string()))?;
                let us: f64 = us
                    .parse()
                    .map_err(|_| MpiTableError::Latency(us.to_string()))?;
                if !(b > 0.0 && us > 0.0 && b.is_finite() && us.is_finite()) {
                    return Err(MpiTableError::NotPositive(p.to_string()));
                }
                if v.last().is_some_and(|(lb, _)| *lb >= b) {
                    return Err(MpiTableError::NotIncreasing {
                        nodes: n,
                        point: p.to_string(),
                    });
                }
                v.push((b, us * 1e3));
            }
            if v.is_empty() {
                return Err(MpiTableError::NoSizes(n));
            }
            rows.push((n, v));
        }
        if rows.is_empty() {
            return Err(MpiTableError::NoRows);
        }
        Ok(MpiTable { rows })
    }

    /// Every latency times `factor` (the sizes kept).
    pub fn scaled(&self, factor: f64) -> MpiTable {
        MpiTable {
            rows: self
                .rows
                .iter()
                .map(|(n, v)| (*n, v.iter().map(|(b, l)| (*b, l * factor)).collect()))
                .collect(),
        }
    }

    /// The latency (ns) of an all-reduce of `bytes` among `nodes`: the smallest size's below
    /// it (latency-bound), interpolated on log-log axes between sizes, and past the largest
    /// size extended along the last segment's ns per byte.
    pub fn latency_ns(&self, nodes: usize, bytes: f64) -> Result<f64, MpiTableError> {
        let Some((_, v)) = self.rows.iter().find(|(n, _)| *n == nodes) else {
            return Err(MpiTableError::NoRowFor(nodes));
        };
        let (b0, l0) = v[0];
        if bytes <= b0 {
            return Ok(l0);
        }
        for w in v.windows(2) {
            let ((ba, la), (bb, lb)) = (w[0], w[1]);
            if bytes <= bb {
                let t = (bytes.ln() - ba.ln()) / (bb.ln() - ba.ln());
                if la <= 0.0 || lb <= 0.0 {
                    // a table scaled to 0 (a break-even search's lowest value): no log axis
                    return Ok(la + t * (lb - la));
                }
                return Ok((la.ln() + t * (lb.ln() - la.ln())).exp());
            }
        }
        let (bl, ll) = v[v.len() - 1];
        let slope = match v.len() {
            1 => 0.0,
            k => ((ll - v[k - 2].1) / (bl - v[k - 2].0)).max(0.0),
        };
        Ok(ll + slope * (bytes - bl))
    }
}

/// The host profile key of CPUSync's MPI_Allreduce latency (us) at [`MPI_AT`]: OSU's
/// osu_allreduce at the paper's 8 nodes and 32 bytes (8 int32), cited in the reference profile.
pub const MPI_KEY: &str = "costs.cpusync_mpi_allreduce";
/// The node count and message size (bytes) of [`MPI_KEY`]'s latency.
pub const MPI_AT: (usize, f64) = (8, 32.0);
/// The host profile key of the CPU-side cost of one GPU kernel launch (us), the one launch
/// cost GPUSync pays per kernel.
pub const GPU_LAUNCH_KEY: &str = "costs.gpusync_kernel_launch";

/// CPUSync's MPI_Allreduce latencies: the spec's `mpi_allreduce_us` table (OSU's latencies at
/// each node count and size) scaled so that its 8-node 32-byte entry is the host profile's
/// [`MPI_KEY`]: the profile sets the level, the table the shape over node counts and sizes.
/// With the reference profile (the same OSU figure as the table's) the factor is exactly 1; a
/// break-even search that moves the key moves every entry alike. `None` where the spec has no
/// table; an error where it has one and the profile does not price it.
pub fn mpi_table(ctx: &PointCtx<'_>) -> Result<Option<MpiTable>, WorkloadError> {
    let Ok(text) = ctx.text("mpi_allreduce_us") else {
        return Ok(None);
    };
    let t = MpiTable::parse(&text)
        .map_err(|e| WorkloadError::Invalid(format!("mpi_allreduce_us: {e}")))?;
    let level_ns = ctx.host_cost(MPI_KEY)? * 1e3;
    let at_ns = t
        .latency_ns(MPI_AT.0, MPI_AT.1)
        .map_err(|e| WorkloadError::Invalid(format!("mpi_allreduce_us: {e}")))?;
    if !(level_ns.is_finite() && level_ns >= 0.0) {
        return Err(WorkloadError::Invalid(format!(
            "{MPI_KEY} must be at least 0, not {} us",
            level_ns / 1e3
        )));
    }
    Ok(Some(t.scaled(level_ns / at_ns)))
}

/// A numeric parameter, or `default` when the spec does not set it.
fn opt(ctx: &PointCtx<'_>, name: &str, default: f64) -> f64 {
    ctx.param(name).unwrap_or(default)
}

impl Inputs {
    /// The FPGA and network inputs are required; the CPU and GPU ones only where used.
    pub fn from_ctx(ctx: &PointCtx<'_>) -> Result<Inputs, WorkloadError> {
        let clock_hz = ctx.param("clock_mhz")? * 1e6;
        let fpga = FpgaModel::paper(
            ctx.count("engines")?,
            ctx.count("precision_bits")? as u32,
            clock_hz,
        );
        fpga.validate().map_err(err)?;
        if ctx.count("micro_batch")? != fpga.banks {
            return Err(WorkloadError::Invalid(
                "the engine has 8 banks: micro_batch must be 8 (Sec. 4.1.2)".into(),
            ));
        }
        // SwitchML's client cost from the point's host profile (None: the profile does not
        // price SwitchML, whose rows then fail naming the entry)
        let switchml_costs = crate::hostcost::core_costs(ctx, "switchml")?;
        let switchml_frame_ns = switchml_costs.map_or(f64::NAN, |c| c.frame_ns);
        let sim = SimInputs {
            rate_bps: ctx.param("line_rate_gbps")? * 1e9,
            link_latency_ns: ctx.count("link_latency_ns")? as u64,
            switch_latency_ns: ctx.count("switch_latency_ns")? as u64,
            fpga_nic_ns: ctx.count("fpga_nic_ns")? as u64,
            fpga_beat_ns: (1e9 / clock_hz).round() as u64,
            host_nic_ns: ctx.count("host_nic_ns")? as u64,
            timeout_ns: (ctx.param("timeout_us")? * 1e3) as u64,
            // the modelled class measures nothing: every host stack pays a declared cost
            host_frame_ns: switchml_costs.map_or(0, |c| c.core_ns()),
            // CPUSync's all-reduce here is the table's latency itself (cpusync_latency_ns)
            mpi_allreduce_ns: None,
        };
        if ctx.param("gpu_launch_us").is_ok() {
            return Err(WorkloadError::Invalid(format!(
                "gpu_launch_us is a host cost now: the host profile's {GPU_LAUNCH_KEY}"
            )));
        }
        let mut mpi_error = None;
        Ok(Inputs {
            sim,
            fpga,
            // the host profile's cited launch cost (NaN where no profile prices it: the GPU
            // rows then fail naming the key)
            gpu_launch_ns: ctx.host_cost(GPU_LAUNCH_KEY).unwrap_or(f64::NAN) * 1e3,
            nccl_allreduce_ns: opt(ctx, "nccl_allreduce_us", f64::NAN) * 1e3,
            dp_values_per_frame: match ctx.param("dp_values_per_frame") {
                Ok(v) if v >= 1.0 && v <= wire::MAX_VALUES as f64 => v as usize,
                Ok(v) => {
                    return Err(WorkloadError::Invalid(format!(
                        "dp_values_per_frame is 1..{}, not {v}",
                        wire::MAX_VALUES
                    )));
                }
                Err(_) => ELEMENTS,
            },
            nccl: if ctx.text("nccl_algo").is_ok() {
                Some(super::fig8::nccl_inputs(ctx)?)
            } else {
                None
            },
            gpu_hbm_bps: opt(ctx, "gpu_hbm_gbps", f64::NAN) * 1e9,
            gpu_flops: opt(ctx, "gpu_fp32_tflops", f64::NAN) * 1e12,
            cpu_cores: opt(ctx, "cpu_cores", f64::NAN),
            cpu_mem_bps: opt(ctx, "cpu_mem_gbps", f64::NAN) * 1e9,
            cpu_ns_per_element: cpu_ns_per_element(opt(ctx, "cpu_clock_ghz", f64::NAN)),
            // read when CPUSync's rows need it: a profile without the key fails those rows only
            mpi: mpi_table(ctx).unwrap_or_else(|e| {
                mpi_error = Some(e.to_string());
                None
            }),
            mpi_error,
            switchml_frame_ns,
            switchml_stack: match ctx.text("switchml_client").as_deref() {
                Ok("dpdk") => switchml_costs
                    .map(|c| DpdkStack::from_costs(&inabench_ina::switchml::SwitchMl, c)),
                Ok("own") | Err(_) => None,
                Ok(other) => {
                    return Err(WorkloadError::Invalid(format!(
                        "switchml_client is `own` or `dpdk`, not `{other}`"
                    )));
                }
            },
            seed: ctx.param("seed").map(|s| s as u64).unwrap_or(ctx.seed),
        })
    }

    /// Everything the cached simulated latencies depend on (the sim inputs whole, the
    /// SwitchML client, the seed).
    fn key(&self) -> String {
        format!(
            "{:?} {:?} {} {}",
            self.sim, self.switchml_stack, self.switchml_frame_ns, self.seed
        )
    }

    fn need(&self, what: &[(f64, &str)]) -> Result<(), WorkloadError> {
        for (v, name) in what {
            // a launch may cost nothing (a break-even search tries 0); rates and sizes may not
            let least_ok = *name == "gpu_launch_us" && *v == 0.0;
            if !(v.is_finite() && (*v > 0.0 || least_ok)) {
                return Err(if *name == "gpu_launch_us" {
                    WorkloadError::Invalid(format!(
                        "the GPU rows need the host profile's {GPU_LAUNCH_KEY}"
                    ))
                } else {
                    WorkloadError::Param((*name).to_string())
                });
            }
        }
        Ok(())
    }
}

/// Memo of simulated latencies. Pure: each is a seeded run of protocol code in virtual time,
/// keyed by every input that changes it ([`Inputs::key`] and the call's own arguments).
fn cache() -> &'static Mutex<HashMap<String, f64>> {
    static CACHE: OnceLock<Mutex<HashMap<String, f64>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

fn cached(
    key: String,
    f: impl FnOnce() -> Result<f64, WorkloadError>,
) -> Result<f64, WorkloadError> {
    let c = cache();
    if let Some(v) = c.lock().ok().and_then(|m| m.get(&key).copied()) {
        return Ok(v);
    }
    let v = f()?;
    if let Ok(mut m) = c.lock() {
        m.insert(key, v);
    }
    Ok(v)
}

fn mean(v: &[u64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().map(|x| *x as f64).sum::<f64>() / v.len() as f64)
}

/// Operations per latency measurement.
const OPS: u64 = 2000;

/// Mean latency (ns) of P4SGD's all-reduce of 8 values across `workers` FPGAs, run in the
/// simulator as p4sgd-fig8's simulated class.
pub fn p4sgd_latency_ns(inp: &Inputs, workers: usize) -> Result<f64, WorkloadError> {
    cached(format!("p4sgd {workers} {}", inp.key()), || {
        let o = allreduce::run_p4sgd(
            workers,
            ELEMENTS,
            OPS,
            inp.seed,
            Some(&inp.sim),
            inp.sim.timeout_ns,
        )
        .map_err(err)?;
        check(&o, "p4sgd")?;
        mean(&o.latencies).ok_or_else(|| err("p4sgd: no latency samples"))
    })
}

fn check(o: &Outcome, what: &str) -> Result<(), WorkloadError> {
    if o.wrong > 0 || o.unfinished > 0 {
        return Err(WorkloadError::WrongResult(format!(
            "{what}: {} wrong results, {} workers unfinished",
            o.wrong, o.unfinished
        )));
    }
    Ok(())
}

/// GPUSync's small all-reduce latency among `workers` GPUs (ns): the simulated NCCL all-reduce
/// of p4sgd-fig8 (its mean over 500 operations of 8 values, which includes the launch) when the
/// spec gives NCCL's inputs, else the launch plus the cited 2-node figure.
pub fn gpusync_latency_ns(inp: &Inputs, workers: usize) -> Result<f64, WorkloadError> {
    if workers < 2 {
        return Ok(0.0);
    }
    let Some(n) = &inp.nccl else {
        return Ok(inp.gpu_launch_ns + inp.nccl_allreduce_ns);
    };
    cached(
        format!("gpusync {workers} {:?} {}", n.pick(workers), inp.key()),
        || {
            let o = allreduce::run_gpusync(workers, ELEMENTS, OPS / 4, inp.seed, &inp.sim, n)
                .map_err(err)?;
            check(&o, "gpusync")?;
            mean(&o.latencies).ok_or_else(|| err("gpusync: no latency samples"))
        },
    )
}

/// CPUSync's all-reduce latency (ns) of `elements` 32-bit values among `workers` nodes: the
/// spec's published MPI_Allreduce latency at that node count and message size ([`MpiTable`];
/// 0 with one worker). The paper's CPUSync is OpenMPI's MPI_Allreduce (Sec. 5.1); the suite's
/// own recursive doubling with this host's per-frame cost stays p4sgd-fig8's simulated row.
pub fn cpusync_latency_ns(
    inp: &Inputs,
    workers: usize,
    elements: usize,
) -> Result<f64, WorkloadError> {
    if workers < 2 {
        return Ok(0.0);
    }
    let t = inp.mpi.as_ref().ok_or_else(|| match &inp.mpi_error {
        Some(e) => WorkloadError::Invalid(e.clone()),
        None => WorkloadError::Param("mpi_allreduce_us".into()),
    })?;
    t.latency_ns(workers, (elements * 4) as f64)
        .map_err(|e| WorkloadError::Invalid(e.to_string()))
}

/// Time (ns) of one SwitchML all-reduce of `elements` values (inabench-ina's SwitchML, CPU
/// hosts as in p4sgd-fig8, each frame costing the host profile's cost per frame and core,
/// `systems.switchml.worker.frame`): behind the released DPDK client when `switchml_client` is
/// `dpdk`, its threads serving the frames, its `max_outstanding_packets` as the pool
/// ([`inabench_ina::hoststack::HostStack::client_knobs`], as the ina experiments' `dpdk` stack)
/// and its transmit path, where each iteration's all-reduce is one call (a job) of the client,
/// whose first batch (all of it up to the outstanding packets) leaves at once and only the
/// packets sent in reply to results wait in the transmit buffer; else the suite's own client
/// (one thread, the protocol's default pool, no buffer). The last worker's completion, averaged
/// over a few all-reduces with different seeds. 0 with one worker.
pub fn switchml_allreduce_ns(
    inp: &Inputs,
    workers: usize,
    elements: usize,
) -> Result<f64, WorkloadError> {
    if workers < 2 {
        return Ok(0.0);
    }
    cached(
        format!("switchml {workers} {elements} {}", inp.key()),
        || {
            let si = &inp.sim;
            if !(inp.switchml_frame_ns.is_finite() && inp.switchml_frame_ns >= 0.0) {
                return Err(err(inabench_ina::hoststack::StackError::NoCosts {
                    system: "switchml".into(),
                    stack: if inp.switchml_stack.is_some() {
                        "dpdk".into()
                    } else {
                        "measured".into()
                    },
                }));
            }
            // the profile's cost per frame and core, served by the client's cores
            let stack = inp.switchml_stack.map(HostStack::Dpdk);
            let cost = match &stack {
                Some(s) => s.frame_ns(),
                None => inp.switchml_frame_ns.round() as u64,
            };
            let buffer = stack.as_ref().and_then(HostStack::tx_buffer);
            let lanes = stack.as_ref().map_or(1, HostStack::tx_lanes);
            let mut total = 0.0;
            let reps = 5u64;
            for r in 0..reps {
                let mut cfg = AllReduceConfig {
                    workers,
                    elements,
                    seed: inp.seed.wrapping_add(r),
                    line_rate_bps: si.rate_bps,
                    mtu: 1024,
                    timeout_ns: si.timeout_ns.max(100_000),
                    knobs: vec![],
                };
                if let Some(s) = &stack {
                    cfg.knobs = s.client_knobs(&cfg);
                }
                let setup = SwitchMl.build(&cfg).map_err(err)?;
                let nodes: Vec<_> = setup
                    .into_nodes()
                    .into_iter()
                    .map(|n| {
                        let host = matches!(n, SetupNode::Worker(_));
                        let t = if host {
                            si.cpu(vec![cost])
                        } else {
                            si.switch()
                        };
                        let n = TxBuffered::with_lanes(
                            n,
                            if host { buffer } else { None },
                            if host { lanes } else { 1 },
                        );
                        inabench_p4sgd::host::Host::new(n, t, inp.seed.wrapping_add(r))
                    })
                    .collect();
                let until = allreduce::every_node(nodes.len(), 60_000_000_000);
                let (nodes, rep) =
                    allreduce::run_nodes(&mut si.star(workers as NodeId), nodes, &until)
                        .map_err(err)?;
                if !rep.finished {
                    return Err(err("switchml: the all-reduce did not finish"));
                }
                let mut end = 0u64;
                for h in nodes {
                    if let SetupNode::Worker(w) = h.inner.inner() {
                        if !w.check(&cfg) {
                            return Err(WorkloadError::WrongResult(
                                "switchml: a result differs from the exact sum".into(),
                            ));
                        }
                        let s = w.stats();
                        end = end.max(s.end_ns.saturating_sub(s.start_ns));
                    }
                }
                total += end as f64;
            }
            Ok(total / reps as f64)
        },
    )
}

/// Bytes on the wire of one P4SGD packet of 8 values, with Ethernet framing (preamble, FCS,
/// inter-frame gap as the sim link counts them).
pub fn p4sgd_frame_bytes(inp: &Inputs) -> Result<f64, WorkloadError> {
    p4sgd_frame_bytes_of(inp, ELEMENTS)
}

/// Wire bytes of a P4SGD frame carrying `values` 32-bit values.
pub fn p4sgd_frame_bytes_of(inp: &Inputs, values: usize) -> Result<f64, WorkloadError> {
    let r = wire::Repr {
        bitmap: 1,
        slot: 0,
        round: 0,
        kind: wire::Kind::Aggregate,
        values: vec![0; values],
    };
    let f = wire::frame(0, 1, &r).map_err(err)?;
    Ok((f.len() + inp.sim.link().framing_bytes) as f64)
}

/// One core's time per (sample x feature) of the dense float32 forward (dot product) and
/// backward (axpy) at `clock_ghz`, ns: one 8-wide AVX2 multiply-add per cycle (the paper's CPU
/// baseline uses AVX2, Sec. 5.1). On the Xeon Silver 4214 (Skylake-SP) a core loads two 32-byte
/// vectors and stores one per cycle (Intel 64 and IA-32 Architectures Optimization Reference
/// Manual, Skylake-SP load/store ports), so the dot product (two loads per 8 multiply-adds) and
/// the axpy (two loads and a store per 8) both retire 8 elements a cycle from the L1 cache;
/// streamed from DRAM the memory bound (`cpu_mem_gbps` over the cores) is about 7x slower at
/// 12 cores, so this rate binds only in cache. NaN without a clock.
pub fn cpu_ns_per_element(clock_ghz: f64) -> f64 {
    1.0 / (clock_ghz * 8.0)
}

/// The systems of Sec. 5.3-5.4 and their iteration times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sys {
    P4sgd,
    P4sgdDp,
    GpuSync,
    GpuSyncDp,
    CpuSync,
    CpuSyncDp,
    SwitchMl,
}

impl Sys {
    pub fn parse(s: &str) -> Option<Sys> {
        Some(match s {
            "p4sgd" => Sys::P4sgd,
            "p4sgd_dp" => Sys::P4sgdDp,
            "gpusync" => Sys::GpuSync,
            "gpusync_dp" => Sys::GpuSyncDp,
            "cpusync" => Sys::CpuSync,
            "cpusync_dp" => Sys::CpuSyncDp,
            "switchml" => Sys::SwitchMl,
            _ => return None,
        })
    }
}

/// The largest feature partition of `workers` over `features`.
fn part(features: usize, workers: usize) -> usize {
    columns(0, workers, features).len()
}

/// GPU kernel time (ns) of a dense pass over `n` samples x `f` features (data plus the model
/// vector read, the result written), bandwidth- or FLOP-bound.
fn gpu_kernel_ns(inp: &Inputs, n: usize, f: usize) -> f64 {
    let bytes = ((n * f + 2 * f) * 4) as f64;
    let flops = (2 * n * f) as f64;
    (bytes * 1e9 / inp.gpu_hbm_bps).max(flops * 1e9 / inp.gpu_flops)
}

/// CPU time (ns) of forward plus backward over `n` samples x `f` features on the paper's cores.
fn cpu_compute_ns(inp: &Inputs, n: usize, f: usize) -> f64 {
    let per = inp.cpu_ns_per_element;
    let work = (n * f) as f64;
    let mem = ((n * f + 2 * f) * 4) as f64 * 1e9 / inp.cpu_mem_bps;
    (work * per / inp.cpu_cores).max(mem) + (work * per / inp.cpu_cores).max(mem)
}

/// A ring all-reduce's transfer time (ns) of `elements` 32-bit values at line rate.
fn ring_ns(inp: &Inputs, workers: usize, elements: usize) -> f64 {
    if workers < 2 {
        return 0.0;
    }
    2.0 * (workers - 1) as f64 / workers as f64 * (elements * 4 * 8) as f64 * 1e9 / inp.sim.rate_bps
}

/// One iteration (ns) of `sys` on `features` x `batch` with `workers` workers.
pub fn iteration_ns(
    inp: &Inputs,
    sys: Sys,
    features: usize,
    workers: usize,
    batch: usize,
) -> Result<f64, WorkloadError> {
    if workers == 0 || batch == 0 || features == 0 {
        return Err(err("workers, batch and features start at 1"));
    }
    let gpu = || {
        inp.need(&[
            (inp.gpu_launch_ns, "gpu_launch_us"),
            (
                if inp.nccl.is_some() {
                    1.0
                } else {
                    inp.nccl_allreduce_ns
                },
                "nccl_allreduce_us",
            ),
            (inp.gpu_hbm_bps, "gpu_hbm_gbps"),
            (inp.gpu_flops, "gpu_fp32_tflops"),
        ])
    };
    let cpu = || {
        inp.need(&[
            (inp.cpu_cores, "cpu_cores"),
            (inp.cpu_mem_bps, "cpu_mem_gbps"),
            (inp.cpu_ns_per_element, "cpu_clock_ghz"),
        ])
    };
    let share = batch.div_ceil(workers);
    match sys {
        Sys::P4sgd => {
            let l = p4sgd_latency_ns(inp, workers)?;
            fpga::p4sgd_iteration_ns(&inp.fpga, features, workers, batch, l).map_err(err)
        }
        Sys::P4sgdDp => {
            let l = p4sgd_latency_ns(inp, workers)?;
            let v = inp.dp_values_per_frame;
            let ops = features.div_ceil(v);
            let frame_ns = p4sgd_frame_bytes_of(inp, v)? * 8.0 * 1e9 / inp.sim.rate_bps;
            let comm = l + (ops - 1) as f64 * frame_ns;
            fpga::dp_iteration_ns(&inp.fpga, features, workers, batch, comm).map_err(err)
        }
        Sys::GpuSync => {
            gpu()?;
            let f = part(features, workers);
            let compute = 2.0 * (inp.gpu_launch_ns + gpu_kernel_ns(inp, batch, f));
            let comm = if workers > 1 {
                gpusync_latency_ns(inp, workers)? + (batch * 4 * 8) as f64 * 1e9 / inp.sim.rate_bps
            } else {
                0.0
            };
            Ok(compute + comm)
        }
        Sys::GpuSyncDp => {
            gpu()?;
            let compute = 2.0 * (inp.gpu_launch_ns + gpu_kernel_ns(inp, share, features));
            let comm = if workers > 1 {
                gpusync_latency_ns(inp, workers)? + ring_ns(inp, workers, features)
            } else {
                0.0
            };
            Ok(compute + comm)
        }
        Sys::CpuSync => {
            cpu()?;
            Ok(cpu_compute_ns(inp, batch, part(features, workers))
                + cpusync_latency_ns(inp, workers, batch)?)
        }
        Sys::CpuSyncDp => {
            cpu()?;
            let comm = if workers > 1 {
                cpusync_latency_ns(inp, workers, ELEMENTS)? + ring_ns(inp, workers, features)
            } else {
                0.0
            };
            Ok(cpu_compute_ns(inp, share, features) + comm)
        }
        Sys::SwitchMl => {
            cpu()?;
            let compute = cpu_compute_ns(inp, batch, part(features, workers));
            // behind the released client each iteration's all-reduce is a new call of the
            // client, whose first batch leaves at once: no wait for the buffer's drain
            Ok(compute + switchml_allreduce_ns(inp, workers, batch)?)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> Inputs {
        Inputs {
            sim: SimInputs {
                rate_bps: 100e9,
                link_latency_ns: 10,
                switch_latency_ns: 400,
                fpga_nic_ns: 200,
                fpga_beat_ns: 4,
                host_nic_ns: 600,
                timeout_ns: 10_000,
                host_frame_ns: 16,
                mpi_allreduce_ns: None,
            },
            fpga: FpgaModel::paper(8, 4, 250e6),
            gpu_launch_ns: 5_000.0,
            nccl_allreduce_ns: 19_160.0,
            nccl: None,
            dp_values_per_frame: 8,
            gpu_hbm_bps: 1555e9,
            gpu_flops: 19.5e12,
            cpu_cores: 12.0,
            cpu_mem_bps: 115.2e9,
            cpu_ns_per_element: cpu_ns_per_element(2.2),
            mpi: Some(MpiTable::parse(OSU).unwrap()),
            mpi_error: None,
            // the reference host profile's systems.switchml.worker.frame
            switchml_frame_ns: 16.1,
            switchml_stack: None,
            seed: 1,
        }
    }

    /// The specs' table (OSU 5.8 on Lassen; see p4sgd-fig9's `mpi_allreduce_us`).
    const OSU: &str = "2: 32=1.22 64=1.21 256=1.62 1024=1.96 4096=3.43; \
        4: 32=2.65 64=2.62 256=3.10 1024=3.83 4096=6.61; \
        8: 32=3.81 64=3.88 256=4.49 1024=5.98 4096=10.97";

    #[test]
    fn mpi_table_reads_interpolates_and_refuses() {
        let t = MpiTable::parse(OSU).unwrap();
        // a listed size is its value; below the smallest the smallest's
        assert!((t.latency_ns(8, 64.0).unwrap() - 3880.0).abs() < 1e-6);
        assert_eq!(t.latency_ns(8, 4.0).unwrap(), 3810.0);
        // between 256 and 1024 B on log-log axes: 512 B is the geometric mean
        let mid = t.latency_ns(4, 512.0).unwrap();
        assert!((mid - (3100.0f64 * 3830.0).sqrt()).abs() < 1e-6, "{mid}");
        // past 4096 B along the last segment: (10970 - 5980) / 3072 ns a byte
        let big = t.latency_ns(8, 8192.0).unwrap();
        assert!(
            (big - (10970.0 + 4096.0 * 4990.0 / 3072.0)).abs() < 1e-6,
            "{big}"
        );
        assert_eq!(t.latency_ns(3, 64.0), Err(MpiTableError::NoRowFor(3)));
        assert!(matches!(
            MpiTable::parse("8: 64=3.9 32=3.8"),
            Err(MpiTableError::NotIncreasing { nodes: 8, .. })
        ));
        assert!(matches!(
            MpiTable::parse("8: 64=-1"),
            Err(MpiTableError::NotPositive(_))
        ));
        assert!(matches!(
            MpiTable::parse("x: 64=1"),
            Err(MpiTableError::Nodes(_))
        ));
        assert_eq!(MpiTable::parse(""), Err(MpiTableError::NoRows));
    }

    /// Every number the modelled class computes, for every system over a small grid.
    fn every_number(inp: &Inputs) -> Vec<f64> {
        let mut v = Vec::new();
        for sys in [
            Sys::P4sgd,
            Sys::P4sgdDp,
            Sys::GpuSync,
            Sys::GpuSyncDp,
            Sys::CpuSync,
            Sys::CpuSyncDp,
            Sys::SwitchMl,
        ] {
            for workers in [1, 2, 4, 8] {
                for batch in [16, 1024] {
                    v.push(iteration_ns(inp, sys, 47_236, workers, batch).unwrap());
                }
            }
        }
        v
    }

    #[test]
    fn modelled_numbers_do_not_depend_on_this_hosts_load() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let mut inp = inputs();
        inp.nccl = Some(NcclInputs {
            algo: None,
            tree: (4400, 5000),
            ring: (3600, 2700),
        });
        let mut dpdk = inp.clone();
        dpdk.switchml_stack = Some(DpdkStack::from_costs(
            &inabench_ina::switchml::SwitchMl,
            inabench_ina::hoststack::CoreCosts::new(16.1, 4.0).unwrap(),
        ));
        let quiet = (every_number(&inp), every_number(&dpdk));
        // again from scratch (no cached latency) beside busy threads
        cache().lock().unwrap().clear();
        let stop = AtomicBool::new(false);
        let loaded = std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    let mut x = 1u64;
                    while !stop.load(Ordering::Relaxed) {
                        x = std::hint::black_box(
                            x.wrapping_mul(6364136223846793005).wrapping_add(1),
                        );
                    }
                });
            }
            let r = (every_number(&inp), every_number(&dpdk));
            stop.store(true, Ordering::Relaxed);
            r
        });
        assert_eq!(quiet, loaded);
        // each iteration's all-reduce is a new call of the released client, whose first batch
        // (all of a 16- or 1,024-value all-reduce: 1 or 22 packets, under its 256 outstanding)
        // leaves at once: no iteration waits for the buffer's 10 us drain, even where its
        // compute is under a microsecond (1,000 features), and the client's 4 threads make it
        // no slower than the suite's one-thread client
        for (features, batch) in [(1000, 16), (1000, 1024), (1_000_000, 1024)] {
            let own = iteration_ns(&inp, Sys::SwitchMl, features, 8, batch).unwrap();
            let released = iteration_ns(&dpdk, Sys::SwitchMl, features, 8, batch).unwrap();
            assert!(released <= own, "{features} {batch}: {own} {released}");
            assert!(
                released > own - 1_000.0,
                "{features} {batch}: {own} {released}"
            );
        }
    }

    #[test]
    fn eq3_with_the_measured_latency_predicts_the_simulated_pipeline() {
        let inp = inputs();
        for (features, workers, batch) in [(8192, 8, 64), (47_236, 4, 16), (1_000_000, 8, 256)] {
            let model = iteration_ns(&inp, Sys::P4sgd, features, workers, batch).unwrap();
            let (t, retrans) = inabench_p4sgd::emulate::simulate(
                &inp.fpga,
                inp.sim.clone(),
                features,
                workers,
                batch,
                20,
                3,
            )
            .unwrap();
            assert_eq!(retrans, 0);
            let sim = t.iter().sum::<f64>() / t.len() as f64;
            assert!(
                (sim - model).abs() < 0.15 * model,
                "{features} {workers} {batch}: simulated {sim} vs Eq. 3 {model}"
            );
        }
    }

    #[test]
    fn dp_frames_carry_the_swept_payload() {
        // with 64 values a frame instead of 8, the data-parallel gradient needs 8x fewer frames
        // of 14 + header + 256 bytes: the DP iteration gets shorter, MP's does not move
        let mut inp = inputs();
        let mp = iteration_ns(&inp, Sys::P4sgd, 1_000_000, 4, 1024).unwrap();
        let dp8 = iteration_ns(&inp, Sys::P4sgdDp, 1_000_000, 4, 1024).unwrap();
        inp.dp_values_per_frame = 64;
        let dp64 = iteration_ns(&inp, Sys::P4sgdDp, 1_000_000, 4, 1024).unwrap();
        assert_eq!(
            iteration_ns(&inp, Sys::P4sgd, 1_000_000, 4, 1024).unwrap(),
            mp
        );
        assert!(dp64 < dp8, "{dp64} {dp8}");
        let f8 = p4sgd_frame_bytes_of(&inp, 8).unwrap();
        let f64_ = p4sgd_frame_bytes_of(&inp, 64).unwrap();
        let min = inabench_wire::ethernet::MIN_FRAME_LEN;
        let want = |v: usize| ((14 + wire::HEADER_LEN + 4 * v).max(min) + 24) as f64;
        assert_eq!(f8, want(8));
        assert_eq!(f64_, want(64));
    }

    #[test]
    fn gpusync_latency_is_the_simulated_nccl_and_grows_with_gpus() {
        let mut inp = inputs();
        // without NCCL's inputs: the launch plus the cited 2-node figure at any count
        assert_eq!(gpusync_latency_ns(&inp, 8).unwrap(), 5_000.0 + 19_160.0);
        assert_eq!(gpusync_latency_ns(&inp, 1).unwrap(), 0.0);
        inp.nccl = Some(NcclInputs {
            algo: Some(inabench_p4sgd::gpusync::Algo::Tree),
            tree: (4400, 5000),
            ring: (3600, 2700),
        });
        let l2 = gpusync_latency_ns(&inp, 2).unwrap();
        let l8 = gpusync_latency_ns(&inp, 8).unwrap();
        // NCCL's model: 4.4 + 2 x 5.0 and 4.4 + 6 x 5.0 us, plus queueing at the tree's nodes
        assert!(l2 > 0.9 * 14_400.0 && l2 < 1.6 * 14_400.0, "{l2}");
        assert!(l8 > 0.9 * 34_400.0 && l8 < 1.6 * 34_400.0, "{l8}");
        // and the GPU iteration model adds it (plus B values at line rate) from 2 GPUs on
        let one = iteration_ns(&inp, Sys::GpuSync, 8000, 1, 64).unwrap();
        let eight = iteration_ns(&inp, Sys::GpuSync, 8000, 8, 64).unwrap();
        let wire = 64.0 * 32.0 / 100.0;
        assert!(eight > l8 + wire, "{eight}");
        assert!(one < eight, "{one} {eight}");
    }

    #[test]
    fn models_use_the_measured_latency_and_scale_as_built() {
        let inp = inputs();
        let l = p4sgd_latency_ns(&inp, 4).unwrap();
        // the protocol in the simulator: a few hundred ns of switch and MAC/PHY each way
        assert!(l > 800.0 && l < 5_000.0, "{l}");
        let p = iteration_ns(&inp, Sys::P4sgd, 47_236, 4, 64).unwrap();
        let direct = fpga::p4sgd_iteration_ns(&inp.fpga, 47_236, 4, 64, l).unwrap();
        assert_eq!(p, direct);
        // GPU hand check: 1 worker, batch 64, 1,000 features: 2 x (5 us + max(bytes/BW,
        // flops/peak)) with bytes = (64,000 + 2,000) x 4
        let g = iteration_ns(&inp, Sys::GpuSync, 1000, 1, 64).unwrap();
        let k = (66_000.0 * 4.0 / 1555e9 * 1e9f64).max(128_000.0 / 19.5e12 * 1e9);
        assert!((g - 2.0 * (5000.0 + k)).abs() < 1e-6, "{g}");
        // data parallelism all-reduces the whole gradient: with a million features it is
        // slower than model parallelism at a small batch on every platform
        for (mp, dp) in [
            (Sys::P4sgd, Sys::P4sgdDp),
            (Sys::GpuSync, Sys::GpuSyncDp),
            (Sys::CpuSync, Sys::CpuSyncDp),
        ] {
            let a = iteration_ns(&inp, mp, 1_000_000, 4, 16).unwrap();
            let b = iteration_ns(&inp, dp, 1_000_000, 4, 16).unwrap();
            assert!(a < b, "{mp:?} {a} vs {dp:?} {b}");
        }
        // CPUSync's all-reduce is the table's: 8 nodes, 16 values = 64 B
        assert!((cpusync_latency_ns(&inp, 8, 16).unwrap() - 3880.0).abs() < 1e-6);
        assert!(
            iteration_ns(&inp, Sys::SwitchMl, 10_000, 4, 64).unwrap()
                > iteration_ns(&inp, Sys::SwitchMl, 10_000, 1, 64).unwrap() / 4.0
        );
    }
}
