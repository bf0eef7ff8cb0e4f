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
//!   of 192 B a slot). Its element rate is simulated on `sim` with 48 x 4096 elements per worker
//!   and the model's time is params / rate (streaming is linear in size; simulating 150M
//!   elements per worker would not fit a quick profile). Its host stack is priced by the host
//!   profile's SwitchML entries ([`crate::hostcost::core_costs`] and
//!   [`inabench_ina_run::drive::host_stack_for`], as NetReduce's training models do).
//!
//! Options (spec parameters): `memory_mb` (the switch memory cap: it bounds the hot set, 4 B a
//! parameter, and sizes SwitchML's pool), `scale_hot_with_memory` with `base_memory_mb` (Fig. 13:
//! the hot set is the model's default times memory_mb / base_memory_mb; `throughput_gain` is
//! against the same system at base_memory_mb), `float_sum` (the switch adds Libra's f32 values
//! with the table lookups in its data path instead of int32; the recirculations the lookups
//! need are counted in `recirculations_per_packet`).
//!
//! The switch's pass occupancy and the hosts' costs are the driver's,
//! [`inabench_libra::aggregation`]: the workers and the server (the same code for Libra, Libra
//! float and PS-lite) are priced by one coefficient table read from the point's host profile
//! (`costs.libra_{worker,server}_{frame,pair,threads}`: ns a frame, ns a pair, threads) times
//! the frames and pairs each role handles in a lossless run of the point, so nothing is timed
//! while a run runs and a point is a function of its spec, the profile and its seed. Throughput
//! is the non-zero pairs all workers pushed divided by the iteration's time (first push to the
//! last worker holding all its results, in virtual time). Every worker's result is checked
//! against the exact sums; a mismatch fails the point.
//!
//! Simulated results are memoised per process, keyed by every input that changes them (the
//! point's parameters, the data seed, the fault seed under loss and the host costs charged), so
//! the base runs a point shares with others (Libra at the same point, the same system at 1 MB)
//! run once; nothing measured is kept.

use super::common::{identify_hot, invalid, opt, task_of};
use crate::hostcost::require_core_costs;
use inabench_core::{Fidelity, LogLevel, PointCtx, Workload, WorkloadError};
use inabench_fabric::fault::Faults;
use inabench_ina::hoststack::CoreCosts;
use inabench_libra::aggregation::{
    HostCosts, OpCosts, OpCounts, Outcome, count_ops, inputs, run_sim,
};
use inabench_libra::proto::Config;
use inabench_libra::sparse::SparseGen;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// The host profile keys of the Libra crate's coefficient table, per role (`worker`, `server`):
/// `costs.libra_<role>_frame` (ns a frame received or sent), `_pair` (ns a pair parsed or
/// serialized), `_threads`. Under `costs` because three systems of the specs (`libra`,
/// `libra_float`, `ps_lite`) run the same worker and server code: a break-even search moves
/// every system's rows.
pub fn cost_key(role: &str, quantity: &str) -> String {
    format!("costs.libra_{role}_{quantity}")
}

/// The point's coefficient table from its host profile; a missing entry fails the point with
/// one sentence naming the key.
pub fn host_costs(ctx: &PointCtx<'_>) -> Result<HostCosts, WorkloadError> {
    let role = |r: &str| -> Result<OpCosts, WorkloadError> {
        OpCosts::new(
            ctx.host_cost(&cost_key(r, "frame"))?,
            ctx.host_cost(&cost_key(r, "pair"))?,
            ctx.host_cost(&cost_key(r, "threads"))?,
        )
        .map_err(invalid)
    };
    Ok(HostCosts {
        worker: role("worker")?,
        server: role("server")?,
    })
}

// Pure: memos of deterministic functions (simulated results in virtual time, keyed by every
// input that changes them; nothing measured): SwitchML's ns per element, a configuration's operation counts, a system's result
// at a point, a hot set.
type RateKey = (usize, u64, String, String);
static SWITCHML_RATES: OnceLock<Mutex<HashMap<RateKey, f64>>> = OnceLock::new();
static COUNTS: OnceLock<Mutex<HashMap<String, OpCounts>>> = OnceLock::new();
static RESULTS: OnceLock<Mutex<HashMap<String, Measured>>> = OnceLock::new();
static HOT_SETS: OnceLock<Mutex<HashMap<String, HotSet>>> = OnceLock::new();
type HotSet = Arc<HashMap<u64, u32>>;

/// Forget every memoised result (tests that recompute from scratch).
#[cfg(test)]
fn clear_memos() {
    if let Some(m) = SWITCHML_RATES.get()
        && let Ok(mut m) = m.lock()
    {
        m.clear();
    }
    if let Some(m) = COUNTS.get()
        && let Ok(mut m) = m.lock()
    {
        m.clear();
    }
    if let Some(m) = RESULTS.get()
        && let Ok(mut m) = m.lock()
    {
        m.clear();
    }
    if let Some(m) = HOT_SETS.get()
        && let Ok(mut m) = m.lock()
    {
        m.clear();
    }
}

/// SwitchML's dense time for `params` elements per worker under `memory_mb` of switch memory,
/// its host stack `stack` (`measured`: one thread; `dpdk`: the released client; default
/// `measured`) priced by `costs` (the host profile's SwitchML entries).
pub(crate) fn switchml_time_ns(
    workers: usize,
    params: u64,
    memory_mb: f64,
    stack: Option<&str>,
    costs: CoreCosts,
) -> Result<f64, WorkloadError> {
    use inabench_ina::common::{AllReduceConfig, SetupNode, System};
    let name = stack.unwrap_or("measured");
    // every field of the client's costs (a field added to CoreCosts keys the memo too)
    let key = (
        workers,
        memory_mb.to_bits(),
        name.to_string(),
        format!("{costs:?}"),
    );
    let cache = SWITCHML_RATES.get_or_init(|| Mutex::new(HashMap::new()));
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
    // the host stack (inabench_ina::hoststack): `measured` (the profile's cost per frame and
    // core on one thread) or `dpdk` (that cost over the released client's threads, and its
    // 64-packet transmit buffer drained every 10 us)
    let stack =
        inabench_ina_run::drive::host_stack_for(&sys, Some(name), Some(costs), None, None, None)
            .map_err(|e| WorkloadError::Invalid(e.to_string()))?;
    let (nodes, rep, _) = inabench_ina_run::drive::run_sim_stack(
        &sys,
        &cfg,
        Faults::default(),
        &stack,
        60_000_000_000,
        None,
    )
    .map_err(crate::fabric::run_error)?;
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
#[derive(Clone)]
struct Measured {
    duration_ns: f64,
    pairs: u64,
    outcome: Option<Outcome>,
}

/// The operations of a configuration's lossless iteration ([`count_ops`]), memoised by every
/// input that changes them (not the host costs: the counts are what the costs multiply).
fn op_counts(
    key: String,
    cfg: &Config,
    inp: &inabench_libra::proto::Inputs,
    n_hot: usize,
    placement: Option<inabench_libra::layout::Placement>,
) -> Result<OpCounts, WorkloadError> {
    let memo = COUNTS.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(c) = memo.lock().ok().and_then(|m| m.get(&key).copied()) {
        return Ok(c);
    }
    let c = count_ops(cfg, inp, n_hot, placement)
        .map_err(|e| WorkloadError::Invalid(e.to_string()))?
        .ok_or_else(|| {
        WorkloadError::Invalid(
            "the lossless iteration that counts the hosts' operations did not finish within 120 s of virtual time".into(),
        )
    })?;
    if let Ok(mut m) = memo.lock() {
        m.insert(key, c);
    }
    Ok(c)
}

fn measure(
    ctx: &mut PointCtx<'_>,
    system: &str,
    hot_k: usize,
    loss: f64,
    memory_mb: f64,
) -> Result<Measured, WorkloadError> {
    let task = task_of(ctx)?;
    let workers = ctx.count("workers")?;
    // the same gradients for every system of a point (the seed of the data is the repetition's;
    // the faults draw from the point's seed)
    let data_seed = 1 + u64::from(ctx.repetition);
    let libra = system == "libra" || system == "libra_float";
    // `libra_float`, or `libra` with float_sum: the switch sums f32 by table lookups
    let float = system == "libra_float" || (libra && opt(ctx, "float_sum", 0.0) > 0.0);
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
    let registers = opt(ctx, "registers", 48.0) as usize;
    let identify_pushes = opt(ctx, "identify_pushes", 200.0) as u64;
    let sampling_rate = opt(ctx, "sampling_rate", 0.08);
    let stack = ctx.text("host_stack").ok();
    // the host costs this system is charged: SwitchML's client, or the Libra crate's table
    let (sml, host) = if system == "switchml" {
        (Some(require_core_costs(ctx, "switchml")?), None)
    } else {
        (None, Some(host_costs(ctx)?))
    };
    let ops_key = format!(
        "{task:?}|{workers}|{hot_k}|{memory_mb:?}|{data_seed}|{cfg:?}|{registers}|{identify_pushes}|{sampling_rate:?}"
    );
    let fault_seed = if loss > 0.0 { Some(ctx.seed) } else { None };
    let key = format!("{system}|{ops_key}|{loss:?}|{fault_seed:?}|{sml:?}|{host:?}|{stack:?}");
    let memo = RESULTS.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(m) = memo.lock().ok().and_then(|m| m.get(&key).cloned()) {
        return Ok(m);
    }
    let gen_ = SparseGen::new(task.clone(), data_seed)
        .map_err(|e| WorkloadError::Invalid(e.to_string()))?;
    // the memory cap bounds the hot set: 4 bytes a parameter
    let cap_k = (memory_mb * 1048576.0 / 4.0) as usize;
    if hot_k > cap_k {
        return Err(WorkloadError::Invalid(format!(
            "{hot_k} hot parameters do not fit {memory_mb} MB of switch memory"
        )));
    }
    // the hot set (its identification counts every parameter of the model: 1.2 GB of counters
    // for OA), memoised by every input of it
    let hot_key = format!("{task:?}|{identify_pushes}|{sampling_rate:?}|{hot_k}|{data_seed}");
    let hot_memo = HOT_SETS.get_or_init(|| Mutex::new(HashMap::new()));
    let hot = match hot_memo.lock().ok().and_then(|m| m.get(&hot_key).cloned()) {
        Some(h) => h,
        None => {
            let h = Arc::new(identify_hot(
                &gen_,
                identify_pushes,
                sampling_rate,
                hot_k,
                data_seed,
            )?);
            if let Ok(mut m) = hot_memo.lock() {
                m.insert(hot_key, h.clone());
            }
            h
        }
    };
    let inp = inputs(&gen_, &hot, workers, libra, float).map_err(invalid)?;
    let pairs: u64 = inp.iter().map(|(h, c)| (h.len() + c.len()) as u64).sum();
    let measured = if let Some(costs) = sml {
        Measured {
            duration_ns: switchml_time_ns(
                workers,
                task.params,
                memory_mb,
                stack.as_deref(),
                costs,
            )?,
            pairs,
            outcome: None,
        }
    } else {
        let host = host.ok_or_else(|| WorkloadError::Invalid("no host costs".into()))?;
        let n_hot = hot.len().max(1);
        let placement = if libra {
            Some(
                inabench_libra::layout::Placement::heat(n_hot, registers)
                    .map_err(|e| WorkloadError::Invalid(e.to_string()))?,
            )
        } else {
            None
        };
        let counts = op_counts(ops_key, &cfg, &inp, n_hot, placement.clone())?;
        let costs = counts.per_frame_ns(&host);
        let faults = Faults {
            loss,
            seed: ctx.seed,
            ..Faults::default()
        };
        let o = run_sim(&cfg, &inp, n_hot, placement, costs, faults)
            .map_err(|e| WorkloadError::Invalid(e.to_string()))?;
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
    if let Ok(mut m) = memo.lock() {
        m.insert(key, measured.clone());
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
        // the row's fabric label: the report's of the fabric that ran (SwitchML's rate comes
        // from inabench_ina_run::drive's sim run, labelled as the workload declares)
        if let Some(o) = &me.outcome {
            ctx.fabric = o.fabric;
        }
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
                    "{system} {} x{}: {} pairs in {:.1} us, {} retransmissions, {} repeat writes rejected, {:.3} recirculations/packet, cost per frame charged (host profile's table x this point's operations) worker {} ns, server {} ns",
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
                    "switchml {}: {} dense elements per worker in {:.1} us (rate simulated on sim: {:.2} Gbps of values a worker; pool of {} slots at {memory_mb} MB)",
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

#[cfg(test)]
mod tests {
    use super::*;
    use inabench_core::Event;
    use inabench_core::hostprofile::HostProfile;
    use inabench_core::plan::{Point, expand};
    use inabench_core::spec::Spec;
    use std::path::Path;
    use std::sync::atomic::{AtomicBool, Ordering};

    fn root(rel: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)
    }

    fn reference() -> HostProfile {
        HostProfile::load(&root("experiments/hosts/reference.yaml")).expect("the reference profile")
    }

    fn get(p: &Point, k: &str) -> String {
        p.params.get(k).map(|v| v.to_string()).unwrap_or_default()
    }

    /// Run libra-fig12's quick point of `system` whose parameters match `want` (repetition 0,
    /// seed 1) under `profile`; every row's metric and value.
    fn run(
        system: &str,
        want: &[(&str, &str)],
        profile: &HostProfile,
    ) -> Result<Vec<(String, f64)>, WorkloadError> {
        let s = Spec::load(&root("experiments/libra/fig12.yaml")).expect("spec");
        let points = expand(&s, "quick").expect("quick profile");
        let p = points
            .iter()
            .find(|p| p.system == system && want.iter().all(|(k, v)| get(p, k) == *v))
            .unwrap_or_else(|| panic!("no quick point {system} {want:?}"));
        let mut rows = Vec::new();
        let mut sink = |e: Event| {
            if let Event::Row(r) = e {
                rows.push((r.metric, r.value));
            }
        };
        let units = |m: &str| s.metric(m).map(|x| x.unit.clone()).unwrap_or_default();
        let cancel = AtomicBool::new(false);
        let mut ctx = PointCtx::new(
            p,
            0,
            Fidelity::Simulated,
            "sim",
            0,
            false,
            1,
            "test",
            &s.id,
            &cancel,
            &mut sink,
            &units,
        )
        .with_host_profile(Some(profile));
        Aggregation.run(&mut ctx)?;
        Ok(rows)
    }

    const SE8: [(&str, &str); 3] = [("model", "se"), ("workers", "8"), ("host_stack", "dpdk")];

    #[test]
    fn a_simulated_point_is_the_same_beside_busy_threads() {
        let p = reference();
        // PS-lite (its row normalised by Libra at the same point: both server paths) and
        // SwitchML's dense stream under its released client
        let every = || -> Vec<(String, u64)> {
            let mut v = Vec::new();
            for sys in ["ps_lite", "switchml"] {
                for (m, x) in run(sys, &SE8, &p).expect("the point runs") {
                    v.push((format!("{sys}/{m}"), x.to_bits()));
                }
            }
            v
        };
        let quiet = every();
        assert!(
            quiet.iter().any(|(m, _)| m == "ps_lite/throughput_norm"),
            "{quiet:?}"
        );
        // again from scratch (no memoised result) beside busy threads
        clear_memos();
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
            let r = every();
            stop.store(true, Ordering::Relaxed);
            r
        });
        assert_eq!(quiet, loaded);
    }

    #[test]
    fn a_profile_without_a_libra_entry_fails_the_point_naming_the_key() {
        let mut p = reference();
        assert!(p.costs.remove("libra_server_pair").is_some());
        let e = run("libra", &SE8, &p).unwrap_err().to_string();
        assert!(e.contains("`costs.libra_server_pair`"), "{e}");
        assert!(!e.contains('\n'), "{e}");
        // SwitchML's client without its profile entries
        let mut p = reference();
        assert!(p.systems.remove("switchml").is_some());
        let e = run("switchml", &SE8, &p).unwrap_err().to_string();
        assert!(e.contains("`systems.switchml.worker.frame`"), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }
}
