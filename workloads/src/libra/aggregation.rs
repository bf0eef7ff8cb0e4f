//! `libra.aggregation`: aggregation throughput of one iteration of sparse gradients on the `sim`
//! fabric at 100 Gbps. Serves libra-fig12, libra-fig13, libra-fig14 and libra-fig18.
//!
//! - `libra_float`: `libra` with the hot values as f32 summed by the table lookups in the
//!   switch's data path (its passes hold the pipeline; see `float_sum` below);
//! - `libra`: hot parameters (the top `hot_params_k` thousand, default the paper's choice for the
//!   model, identified from an 8% sample) through the switch program, cold ones through one
//!   parameter server; `ps_lite`: every pair through the server;
//! - `switchml`: the dense baseline, every parameter of the model streamed through SwitchML
//!   ([`inabench_ina::switchml`]) with its pool sized by the switch-memory cap (two shadow copies
//!   of 192 B a slot). Its element rate is measured on `sim` with 48 x 4096 elements per worker
//!   and the model's time is params / rate (streaming is linear in size; simulating 150M
//!   elements per worker would not fit a quick profile).
//!
//! Options (spec parameters): `memory_mb` (the switch memory cap: it bounds the hot set, 4 B a
//! parameter, and sizes SwitchML's pool), `scale_hot_with_memory` with `base_memory_mb` (Fig. 13:
//! the hot set is the model's default times memory_mb / base_memory_mb; `throughput_gain` is
//! against the same system at base_memory_mb), `float_sum` (the switch adds Libra's f32 values
//! with the table lookups in its data path instead of int32; the recirculations the lookups
//! need are counted in `recirculations_per_packet`).
//!
//! The switch's pass occupancy and the hosts' per-frame costs (calibrated on this machine, then
//! charged on the fabric) are the driver's, [`inabench_libra::aggregation`]. Throughput is the
//! non-zero pairs all workers pushed divided by the iteration's time (first push to the last
//! worker holding all its results, in virtual time). Every worker's result is checked against
//! the exact sums; a mismatch fails the point.

use super::common::{identify_hot, invalid, opt, task_of};
use inabench_core::{Fidelity, LogLevel, PointCtx, Workload, WorkloadError};
use inabench_fabric::fault::Faults;
use inabench_libra::aggregation::{Outcome, calibrate, inputs, run_sim};
use inabench_libra::proto::{Config, Inputs};
use inabench_libra::sparse::SparseGen;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// [`calibrate`] once per process for a configuration (system, task, workers, data) and
/// repetition: the lossy runs of a sweep, the hot-set and memory sweeps and the baselines of a
/// point then share the same costs, and repetition r runs on calibration r (an independent
/// measurement by the suite's one calibration rule, `inabench_fabric::wrap`), so that the
/// engine's bootstrap over repetitions judges within the calibrations' spread (this took the
/// median of three calibrations before, which hid the spread from the engine).
fn calibrated(key: &PointKey, cfg: &Config, inputs: &Inputs, hot_params: usize) -> (u64, u64) {
    static COSTS: OnceLock<Mutex<HashMap<PointKey, (u64, u64)>>> = OnceLock::new();
    let mut k = key.clone();
    // loss, the hot set's size and the memory cap do not change the code's cost per frame;
    // sharing one calibration keeps the noise of a busy host out of comparisons along them
    // (Fig. 13, 14, 18); k.6 (the repetition) is kept
    k.3 = 0;
    k.4 = 0;
    k.5 = 0;
    let cache = COSTS.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(c) = cache.lock().ok().and_then(|m| m.get(&k).copied()) {
        return c;
    }
    let c = calibrate(cfg, inputs, hot_params);
    if let Ok(mut m) = cache.lock() {
        m.insert(k, c);
    }
    c
}

/// SwitchML's dense time for `params` elements per worker under `memory_mb` of switch memory.
pub(crate) fn switchml_time_ns(
    workers: usize,
    params: u64,
    memory_mb: f64,
    stack: Option<&str>,
    rep: u32,
) -> Result<f64, WorkloadError> {
    use inabench_ina::common::{AllReduceConfig, SetupNode, System};
    type Key = (usize, u64, String, u32);
    static CACHE: OnceLock<Mutex<HashMap<Key, f64>>> = OnceLock::new();
    let key = (
        workers,
        (memory_mb * 1000.0) as u64,
        stack.unwrap_or("measured").to_string(),
        rep,
    );
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(ns_per) = cache.lock().ok().and_then(|m| m.get(&key).copied()) {
        return Ok(ns_per * params as f64);
    }
    let sys = inabench_ina::switchml::SwitchMl;
    let pool = ((memory_mb * 1048576.0) / (2.0 * 192.0))
        .floor()
        .clamp(1.0, 32767.0);
    let elements = 48 * 4096;
    let cfg = AllReduceConfig {
        workers,
        elements,
        seed: 1,
        line_rate_bps: 100e9,
        mtu: 1024,
        timeout_ns: 100_000,
        knobs: vec![("pool".into(), pool)],
    };
    // the host stack (inabench_ina::hoststack): `measured` (default: this machine's cost per
    // frame of SwitchML's worker code, one thread) or `dpdk` (that cost over the released
    // client's 4 cores, and its 64-packet transmit buffer drained every 10 us); calibration
    // `rep` of that cost (repetition r -> calibration r)
    let stack = inabench_ina::drive::host_stack_rep(
        &sys,
        Some(stack.unwrap_or("measured")),
        None,
        None,
        None,
        rep,
    )
    .map_err(|e| WorkloadError::Invalid(e.to_string()))?;
    let (nodes, rep, _) = inabench_ina::drive::run_sim_stack(
        &sys,
        &cfg,
        Faults::default(),
        &stack,
        60_000_000_000,
        None,
    )
    .map_err(WorkloadError::Invalid)?;
    if !rep.finished {
        return Err(WorkloadError::Invalid(
            "SwitchML did not finish on sim".into(),
        ));
    }
    let mut end = 0u64;
    for n in &nodes {
        if let SetupNode::Worker(w) = n {
            if !w.check(&cfg) {
                return Err(WorkloadError::WrongResult(
                    "a SwitchML worker's sum differs from the reference".into(),
                ));
            }
            let s = w.stats();
            end = end.max(s.end_ns.saturating_sub(s.start_ns));
        }
    }
    let _ = sys.name();
    let ns_per = end as f64 / elements as f64;
    if let Ok(mut m) = cache.lock() {
        m.insert(key, ns_per);
    }
    Ok(ns_per * params as f64)
}

/// Everything a point of a system measures.
struct Measured {
    duration_ns: f64,
    pairs: u64,
    outcome: Option<Outcome>,
}

type PointKey = (String, String, usize, usize, u64, u64, u64);

fn measure(
    ctx: &mut PointCtx<'_>,
    system: &str,
    hot_k: usize,
    loss: f64,
    memory_mb: f64,
) -> Result<Measured, WorkloadError> {
    static CACHE: OnceLock<Mutex<HashMap<PointKey, (f64, u64)>>> = OnceLock::new();
    let task = task_of(ctx)?;
    let workers = ctx.count("workers")?;
    let key: PointKey = (
        if system == "libra" && opt(ctx, "float_sum", 0.0) > 0.0 {
            format!("{system}/float")
        } else if system == "switchml"
            && let Ok(s) = ctx.text("host_stack")
        {
            format!("{system}/{s}")
        } else {
            system.to_string()
        },
        task.name.to_string(),
        workers,
        hot_k,
        loss.to_bits(),
        memory_mb.to_bits(),
        1 + u64::from(ctx.repetition),
    );
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    // the same gradients for every system of a point (the seed of the data is the repetition's;
    // the faults draw from the point's seed)
    let data_seed = 1 + u64::from(ctx.repetition);
    let gen_ = SparseGen::new(task.clone(), data_seed)
        .map_err(|e| WorkloadError::Invalid(e.to_string()))?;
    // the memory cap bounds the hot set: 4 bytes a parameter
    let cap_k = (memory_mb * 1048576.0 / 4.0) as usize;
    if hot_k > cap_k {
        return Err(WorkloadError::Invalid(format!(
            "{hot_k} hot parameters do not fit {memory_mb} MB of switch memory"
        )));
    }
    let hot = identify_hot(
        &gen_,
        opt(ctx, "identify_pushes", 200.0) as u64,
        opt(ctx, "sampling_rate", 0.08),
        hot_k,
        data_seed,
    )?;
    let libra = system == "libra" || system == "libra_float";
    // `libra_float`, or `libra` with float_sum: the switch sums f32 by table lookups
    let float = system == "libra_float" || (libra && opt(ctx, "float_sum", 0.0) > 0.0);
    let inp = inputs(&gen_, &hot, workers, libra, float).map_err(invalid)?;
    let pairs: u64 = inp.iter().map(|(h, c)| (h.len() + c.len()) as u64).sum();
    if (!libra || loss == 0.0)
        && let Some((d, p)) = cache.lock().ok().and_then(|m| m.get(&key).copied())
    {
        return Ok(Measured {
            duration_ns: d,
            pairs: p,
            outcome: None,
        });
    }
    let measured = if system == "switchml" {
        Measured {
            duration_ns: switchml_time_ns(
                workers,
                task.params,
                memory_mb,
                ctx.text("host_stack").ok().as_deref(),
                ctx.repetition,
            )?,
            pairs,
            outcome: None,
        }
    } else {
        let cfg = Config {
            workers,
            libra,
            window: opt(ctx, "window", 64.0) as usize,
            rto_ns: (opt(ctx, "timeout_us", 200.0) * 1000.0) as u64,
            hot_cap: inabench_libra::layout::pairs_per_packet(
                &inabench_ina::tofino::TofinoModel::PAPER,
            ),
            cold_cap: opt(ctx, "ps_pairs_per_packet", 128.0) as usize,
            dedup_all: false,
            float,
        };
        let n_hot = hot.len().max(1);
        let m = opt(ctx, "registers", 48.0) as usize;
        let placement = if libra {
            Some(
                inabench_libra::layout::Placement::heat(n_hot, m)
                    .map_err(|e| WorkloadError::Invalid(e.to_string()))?,
            )
        } else {
            None
        };
        let costs = calibrated(&key, &cfg, &inp, n_hot);
        let faults = Faults {
            loss,
            seed: ctx.seed,
            ..Faults::default()
        };
        let o = run_sim(&cfg, &inp, n_hot, placement, costs, faults);
        if !o.finished {
            return Err(WorkloadError::Invalid(format!(
                "{system} did not finish its iteration within 120 s of virtual time"
            )));
        }
        if o.wrong > 0 {
            return Err(WorkloadError::WrongResult(format!(
                "{} of {workers} workers got aggregates that differ from the exact sums",
                o.wrong
            )));
        }
        Measured {
            duration_ns: o.duration_ns as f64,
            pairs,
            outcome: Some(o),
        }
    };
    if let Ok(mut m) = cache.lock() {
        m.insert(key, (measured.duration_ns, measured.pairs));
    }
    Ok(measured)
}

pub struct Aggregation;

impl Workload for Aggregation {
    fn id(&self) -> &'static str {
        "libra.aggregation"
    }
    fn fidelities(&self) -> &'static [Fidelity] {
        &[Fidelity::Simulated]
    }
    fn fabric(&self, _f: Fidelity) -> &'static str {
        "sim"
    }
    fn systems(&self) -> Option<&'static [&'static str]> {
        Some(&["libra", "libra_float", "ps_lite", "switchml"])
    }
    fn run(&self, ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
        let task = task_of(ctx)?;
        let default_k = task.paper_hot as usize;
        let memory_mb = opt(ctx, "memory_mb", 1.0);
        // the paper's default configuration: 1 MB of switch memory (Sec. 5.1)
        let base_memory = opt(ctx, "base_memory_mb", memory_mb);
        // Fig. 13: "we correspondingly double the number of hot parameters from 30K to 60K"
        // when the cap doubles, so with `scale_hot_with_memory` the hot set is the paper's
        // default times memory_mb / base_memory_mb
        let scale = opt(ctx, "scale_hot_with_memory", 0.0) > 0.0;
        let hot_at = |mem: f64| -> usize {
            if scale {
                (default_k as f64 * mem / base_memory).round() as usize
            } else {
                default_k
            }
        };
        let hot_k = ctx
            .param("hot_params_k")
            .map(|k| (k * 1000.0) as usize)
            .unwrap_or_else(|_| hot_at(memory_mb));
        let loss = opt(ctx, "loss", 0.0);
        let system = ctx.system().to_string();
        let me = measure(ctx, &system, hot_k, loss, memory_mb)?;
        let thr = me.pairs as f64 / me.duration_ns * 1e3; // million pairs per second
        ctx.record_if_declared("throughput", thr);
        ctx.record_if_declared("iteration_us", me.duration_ns / 1e3);
        if ctx.declares("throughput_norm") {
            // against Libra at the same point (Fig. 12), at the default hot set (Fig. 14) or
            // at the default configuration (Fig. 13)
            let base_k = if ctx.point.params.contains_key("hot_params_k") || scale {
                default_k
            } else {
                hot_k
            };
            let base = measure(ctx, "libra", base_k, loss, base_memory)?;
            let base_thr = base.pairs as f64 / base.duration_ns * 1e3;
            ctx.record("throughput_norm", thr / base_thr);
        }
        if ctx.declares("throughput_gain") {
            // against the same system at the base memory cap (Fig. 13)
            let base = measure(ctx, &system, hot_at(base_memory), loss, base_memory)?;
            let base_thr = base.pairs as f64 / base.duration_ns * 1e3;
            ctx.record("throughput_gain", (thr / base_thr - 1.0) * 100.0);
        }
        if ctx.declares("time_increase") {
            let base = measure(ctx, &system, hot_k, 0.0, memory_mb)?;
            ctx.record(
                "time_increase",
                (me.duration_ns / base.duration_ns - 1.0) * 100.0,
            );
        }
        if let Some(o) = &me.outcome {
            ctx.record_if_declared("retransmissions", o.retransmissions as f64);
            ctx.record_if_declared("recirculations_per_packet", o.recirculations_per_packet);
            ctx.counter("retransmissions", o.retransmissions);
            ctx.counter("duplicates_ignored", o.duplicates_ignored);
            ctx.log(
                LogLevel::Info,
                format!(
                    "{system} {} x{}: {} pairs in {:.1} us, {} retransmissions, {} repeat writes rejected, {:.3} recirculations/packet, per-frame cost worker {} ns, server {} ns",
                    task.name,
                    ctx.param("workers").unwrap_or(0.0),
                    me.pairs,
                    me.duration_ns / 1e3,
                    o.retransmissions,
                    o.duplicates_ignored,
                    o.recirculations_per_packet,
                    o.costs.0,
                    o.costs.1
                ),
            );
        } else if system == "switchml" {
            ctx.log(
                LogLevel::Info,
                format!(
                    "switchml {}: {} dense elements per worker in {:.1} us (rate measured on sim: {:.2} Gbps of values a worker; pool of {} slots at {memory_mb} MB)",
                    task.name,
                    task.params,
                    me.duration_ns / 1e3,
                    task.params as f64 * 32.0 / me.duration_ns,
                    ((memory_mb * 1048576.0) / (2.0 * 192.0)).floor().clamp(1.0, 32767.0)
                ),
            );
        }
        Ok(())
    }
}
