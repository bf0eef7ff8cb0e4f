//! The testbed workloads: `aleph.testbed_training` (aleph-fig9 and aleph-fig11: eight
//! rate-limited worker namespaces and a PS; BytePS and Horovod over TCP, ALEPH with M-WCHA's
//! clustering and the aggregation in XDP) and `aleph.aggregation_cpu` (aleph-fig5 and
//! aleph-table2: aggregation throughput and CPU of XDP-driver, XDP-generic and TCP under CPU
//! affinity).
//!
//! A testbed run of one (model, system, repetition) serves every `machine` point of it: the
//! outcome is kept in a process-wide cache keyed by every parameter but `machine`.

use super::TestbedError;
use super::net::{Iteration, TcpRing, TcpTree, Testbed};
use super::xdp::XdpTree;
use crate::mwcha::{self, Instance, Options};
use inabench_core::event::LogLevel;
use inabench_core::rng::SplitMix64;
use inabench_core::{Fidelity, PointCtx, Scalar, Workload, WorkloadError};
use inabench_xdp::AttachMode;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

fn err(e: TestbedError) -> WorkloadError {
    match e {
        TestbedError::Wrong(w) => WorkloadError::WrongResult(w),
        other => WorkloadError::Invalid(other.to_string()),
    }
}

fn str_param(ctx: &PointCtx<'_>, name: &str) -> Result<String, WorkloadError> {
    match ctx.point.params.get(name) {
        Some(Scalar::Str(s)) => Ok(s.clone()),
        _ => Err(WorkloadError::Param(name.to_string())),
    }
}

/// Gradient size of a model in MB, as the paper gives them (Sec. 6.1: ResNet50 97 MB, VGG19
/// 548 MB, BERT 438 MB) - the paper's setup, a model input like the link rates.
pub fn model_mb(model: &str) -> Option<f64> {
    match model {
        "resnet50" => Some(97.0),
        "vgg19" => Some(548.0),
        "bert" => Some(438.0),
        _ => None,
    }
}

/// One testbed training run: per machine (workers then the PS) the mean sending rate at the
/// paper's scale, and the mean communication time of an iteration (slowest worker).
#[derive(Debug, Clone)]
pub struct Outcome {
    pub rates_gbps: Vec<f64>,
    /// Per machine: mean CPU use in cores (user-space threads plus XDP programs).
    pub cpu_cores: Vec<f64>,
    /// Per machine: the part of `cpu_cores` spent in its XDP programs.
    pub xdp_cores: Vec<f64>,
    pub comm_time: f64,
    /// Per worker: whether it aggregated others (ALEPH).
    pub aggregator: Vec<bool>,
}

/// Machine classes of aleph-fig9 and their link rates (Gbps), workers first, then the PS.
struct Setup {
    rates_gbps: Vec<f64>,
    scale: f64,
    iterations: u32,
    len: usize,
    /// `mwcha` (the default: M-WCHA decides) or `paper` (Sec. 6.3's clustering: the 30 Gbps
    /// worker aggregates two 10 Gbps workers, each 20 Gbps worker one, one sends directly).
    clustering: String,
}

fn setup(ctx: &PointCtx<'_>) -> Result<Setup, WorkloadError> {
    let mut rates = Vec::new();
    for (n, bw) in [
        ("n_w30", "bw_w30_gbps"),
        ("n_w20", "bw_w20_gbps"),
        ("n_w10", "bw_w10_gbps"),
    ] {
        let b = ctx.param(bw)?;
        rates.extend(std::iter::repeat_n(b, ctx.count(n)?));
    }
    if rates.len() != ctx.count("workers")? {
        return Err(WorkloadError::Invalid(
            "n_w30 + n_w20 + n_w10 must equal workers".into(),
        ));
    }
    rates.push(ctx.param("bw_ps_gbps")?);
    let scale = ctx.param("rate_scale")?;
    if !(scale > 0.0 && scale <= 1.0) {
        return Err(WorkloadError::Invalid(
            "rate_scale must be in (0, 1]".into(),
        ));
    }
    let model = str_param(ctx, "model")?;
    let mb = model_mb(&model)
        .ok_or_else(|| WorkloadError::Invalid(format!("unknown model `{model}`")))?;
    // the gradient is scaled like the rates, so times stay at the paper's scale
    let len = ((mb * 1e6 / 4.0) * scale).round().max(1.0) as usize;
    let clustering = match ctx.point.params.get("clustering") {
        None => "mwcha".to_string(),
        Some(Scalar::Str(s)) if s == "mwcha" || s == "paper" => s.clone(),
        Some(other) => {
            return Err(WorkloadError::Invalid(format!(
                "clustering must be mwcha or paper (got {other})"
            )));
        }
    };
    Ok(Setup {
        rates_gbps: rates,
        scale,
        iterations: ctx.count("iterations")?.max(1) as u32,
        len,
        clustering,
    })
}

/// M-WCHA's clustering of the workers (one switch: every pair adjacent), as a parent per
/// worker (`workers` = the PS). Compute capacity is not a constraint in aleph-fig9 (the paper
/// gives none), so capacities come from bandwidth alone (Eq. 2's B_w / b - 1).
pub fn clustering(rates_gbps: &[f64], seed: u64) -> Result<Vec<usize>, WorkloadError> {
    let n = rates_gbps.len();
    let adj = (0..n)
        .map(|a| (0..n).filter(|&b| b != a).collect())
        .collect();
    let inst = Instance::new(rates_gbps.to_vec(), vec![n as f64; n], 1.0, adj)
        .map_err(|e| WorkloadError::Invalid(e.to_string()))?;
    let mut rng = SplitMix64::derive(seed, "aleph-testbed-mwcha");
    let c = mwcha::mwcha(&inst, &Options::default(), &mut rng);
    let v = mwcha::validate(&inst, &c);
    if v.total() > 0 {
        return Err(WorkloadError::WrongResult(format!(
            "M-WCHA's clustering breaks Eq. 1: {v}"
        )));
    }
    let mut parent = vec![n; n];
    for cl in &c.clusters {
        for &m in &cl.members {
            parent[m] = cl.aggregator;
        }
    }
    Ok(parent)
}

/// Sec. 6.3's clustering on machines ordered 30, 20, 20, 10 x 5 Gbps: Agg2 (30) aggregates two
/// 10 Gbps workers, each Agg1 (20) one, the last 10 Gbps worker sends to the PS.
pub fn paper_clustering(rates_gbps: &[f64]) -> Result<Vec<usize>, WorkloadError> {
    let n = rates_gbps.len();
    let want = [30.0, 20.0, 20.0, 10.0, 10.0, 10.0, 10.0, 10.0];
    if rates_gbps != want {
        return Err(WorkloadError::Invalid(
            "the paper's clustering is defined for 1 x 30, 2 x 20 and 5 x 10 Gbps workers".into(),
        ));
    }
    Ok(vec![n, n, n, 0, 0, 1, 2, n])
}

static CACHE: Mutex<Option<HashMap<String, Outcome>>> = Mutex::new(None);

fn key(ctx: &PointCtx<'_>, system: &str) -> String {
    let mut k: Vec<String> = ctx
        .point
        .params
        .iter()
        .filter(|(n, _)| n.as_str() != "machine")
        .map(|(n, v)| format!("{n}={v}"))
        .collect();
    k.sort();
    format!(
        "{}|{}|{}|{}|{}",
        ctx.experiment,
        system,
        ctx.repetition,
        ctx.warmup,
        k.join(",")
    )
}

/// Per machine: CPU seconds of `what` over the iterations, per second of their wall time.
fn cores(its: &[Iteration], machines: usize, what: impl Fn(&Iteration, usize) -> f64) -> Vec<f64> {
    let time: f64 = its.iter().map(|i| i.time).sum();
    (0..machines)
        .map(|m| its.iter().map(|i| what(i, m)).sum::<f64>() / time)
        .collect()
}

fn summarize(its: &[Iteration], s: &Setup) -> (Vec<f64>, f64) {
    let time: f64 = its.iter().map(|i| i.time).sum();
    let machines = s.rates_gbps.len();
    let rates = (0..machines)
        .map(|m| {
            let b: u64 = its
                .iter()
                .map(|i| i.bytes.get(m).copied().unwrap_or(0))
                .sum();
            b as f64 * 8.0 / time / 1e9 / s.scale
        })
        .collect();
    (rates, time / its.len() as f64)
}

/// Run `system` on a fresh testbed (namespaces removed on return, also on error).
fn run_system(system: &str, s: &Setup, seed: u64) -> Result<Outcome, WorkloadError> {
    let n = s.rates_gbps.len() - 1;
    let mbit: Vec<f64> = s.rates_gbps.iter().map(|g| g * 1000.0 * s.scale).collect();
    let tb = Testbed::create(&mbit).map_err(err)?;
    let mut its = Vec::new();
    let mut aggregator = vec![false; n];
    // iteration 0 warms up (connections, slow start, caches) and is not counted
    match system {
        "byteps" => {
            let t = TcpTree::connect(&tb, &vec![n; n]).map_err(err)?;
            for i in 0..=s.iterations {
                its.push(t.iterate(i, s.len).map_err(err)?);
            }
        }
        "horovod" => {
            let t = TcpRing::connect(&tb, n).map_err(err)?;
            for i in 0..=s.iterations {
                its.push(t.iterate(i, s.len).map_err(err)?);
            }
        }
        "aleph" | "aleph_tcp" => {
            let parent = if s.clustering == "paper" {
                paper_clustering(&s.rates_gbps[..n])?
            } else {
                clustering(&s.rates_gbps[..n], seed)?
            };
            for &p in &parent {
                if p < n {
                    aggregator[p] = true;
                }
            }
            if system == "aleph" {
                let segs = s.len.div_ceil(inabench_xdp::proto::GRADS) as u32;
                let t = XdpTree::create(&tb, &parent, segs, AttachMode::Native).map_err(err)?;
                for i in 0..=s.iterations {
                    its.push(t.iterate(i, s.len).map_err(err)?);
                }
            } else {
                let t = TcpTree::connect(&tb, &parent).map_err(err)?;
                for i in 0..=s.iterations {
                    its.push(t.iterate(i, s.len).map_err(err)?);
                }
            }
        }
        other => {
            return Err(WorkloadError::Invalid(format!(
                "the testbed runs byteps, horovod, aleph and aleph_tcp, not `{other}`"
            )));
        }
    }
    let (rates_gbps, comm_time) = summarize(&its[1..], s);
    let machines = s.rates_gbps.len();
    let at = |v: &[f64], m: usize| v.get(m).copied().unwrap_or(0.0);
    Ok(Outcome {
        rates_gbps,
        cpu_cores: cores(&its[1..], machines, |i, m| at(&i.cpu, m) + at(&i.xdp, m)),
        xdp_cores: cores(&its[1..], machines, |i, m| at(&i.xdp, m)),
        comm_time,
        aggregator,
    })
}

fn outcome(ctx: &mut PointCtx<'_>, system: &str) -> Result<Outcome, WorkloadError> {
    let k = key(ctx, system);
    if let Some(o) = CACHE
        .lock()
        .ok()
        .and_then(|c| c.as_ref().and_then(|m| m.get(&k).cloned()))
    {
        return Ok(o);
    }
    let s = setup(ctx)?;
    // M-WCHA's coin flips: seeded by the repetition alone, so that every point and experiment
    // of a repetition (aleph-fig9's machines, aleph-fig11) sees the same clustering
    let o = run_system(system, &s, u64::from(ctx.repetition))?;
    ctx.log(
        LogLevel::Info,
        format!(
            "{system}: {} gradients per worker (rate_scale {}), {:.4} s per iteration, aggregators {:?}, CPU cores per machine {:.3?} (of which XDP programs {:.3?})",
            s.len, s.scale, o.comm_time, o.aggregator, o.cpu_cores, o.xdp_cores
        ),
    );
    if let Ok(mut c) = CACHE.lock() {
        c.get_or_insert_with(HashMap::new).insert(k, o.clone());
    }
    Ok(o)
}

/// The mean sending rate of a machine class (Gbps, paper scale).
fn class_rate(
    o: &Outcome,
    rates: &[f64],
    class: &str,
    ctx: &PointCtx<'_>,
) -> Result<f64, WorkloadError> {
    class_mean(o, &o.rates_gbps, rates, class, ctx)
}

/// The mean of a per-machine `value` over a machine class (`all_workers`: the sum over workers).
fn class_mean(
    o: &Outcome,
    value: &[f64],
    rates: &[f64],
    class: &str,
    ctx: &PointCtx<'_>,
) -> Result<f64, WorkloadError> {
    let n = rates.len() - 1;
    if class == "ps" {
        return Ok(value[n]);
    }
    if class == "all_workers" {
        return Ok(value[..n].iter().sum());
    }
    let bw = match class {
        "w10" => ctx.param("bw_w10_gbps")?,
        "w20" => ctx.param("bw_w20_gbps")?,
        "w30" => ctx.param("bw_w30_gbps")?,
        other => return Err(WorkloadError::Invalid(format!("unknown machine `{other}`"))),
    };
    // w10: the 10 Gbps workers that are not aggregators (all of them in BytePS and Horovod)
    let v: Vec<f64> = (0..n)
        .filter(|&w| rates[w] == bw && !(class == "w10" && o.aggregator[w]))
        .map(|w| value[w])
        .collect();
    if v.is_empty() {
        return Err(WorkloadError::Invalid(format!(
            "no machine of class {class}"
        )));
    }
    Ok(v.iter().sum::<f64>() / v.len() as f64)
}

/// aleph-fig9 and aleph-fig11: training iterations on the rate-limited testbed.
pub struct TestbedTraining;

impl Workload for TestbedTraining {
    fn id(&self) -> &'static str {
        "aleph.testbed_training"
    }
    fn fidelities(&self) -> &'static [Fidelity] {
        &[Fidelity::Emulated]
    }
    fn fabric(&self, _f: Fidelity) -> &'static str {
        "netns"
    }
    fn systems(&self) -> Option<&'static [&'static str]> {
        Some(&["byteps", "horovod", "aleph", "aleph_tcp"])
    }
    fn run(&self, ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
        if !inabench_fabric::netns::is_root() {
            return Err(WorkloadError::Invalid(TestbedError::NotRoot.to_string()));
        }
        let system = ctx.system().to_string();
        let o = outcome(ctx, &system)?;
        let rates = setup(ctx)?.rates_gbps;
        ctx.record_if_declared("comm_time", o.comm_time);
        if ctx.declares("cpu_cores") {
            let machine = str_param(ctx, "machine")?;
            ctx.record(
                "cpu_cores",
                class_mean(&o, &o.cpu_cores, &rates, &machine, ctx)?,
            );
            if system == "aleph" && machine == "w10" {
                for (base, metric) in [
                    ("byteps", "cpu_saving_vs_byteps"),
                    ("horovod", "cpu_saving_vs_horovod"),
                ] {
                    if ctx.declares(metric) {
                        let b = outcome(ctx, base)?;
                        let mine = class_mean(&o, &o.cpu_cores, &rates, "w10", ctx)?;
                        let theirs = class_mean(&b, &b.cpu_cores, &rates, "w10", ctx)?;
                        ctx.record(metric, (1.0 - mine / theirs) * 100.0);
                    }
                }
            }
        }
        if ctx.declares("bandwidth") {
            let machine = str_param(ctx, "machine")?;
            let v = class_rate(&o, &rates, &machine, ctx)?;
            ctx.record("bandwidth", v);
            if system == "aleph" && machine == "all_workers" {
                for (base, metric) in [
                    ("byteps", "bw_gain_vs_byteps"),
                    ("horovod", "bw_gain_vs_horovod"),
                ] {
                    if ctx.declares(metric) {
                        let b = outcome(ctx, base)?;
                        let bv = class_rate(&b, &rates, "all_workers", ctx)?;
                        ctx.record(metric, (v / bv - 1.0) * 100.0);
                    }
                }
            }
        }
        ctx.progress(1, 1);
        Ok(())
    }
}

static CPU_CACHE: Mutex<Option<HashMap<String, super::cpu::Measure>>> = Mutex::new(None);

/// aleph-fig5 and aleph-table2: aggregation throughput and CPU of the three data paths.
pub struct AggregationCpu;

impl Workload for AggregationCpu {
    fn id(&self) -> &'static str {
        "aleph.aggregation_cpu"
    }
    fn fidelities(&self) -> &'static [Fidelity] {
        &[Fidelity::Emulated]
    }
    fn fabric(&self, _f: Fidelity) -> &'static str {
        "netns"
    }
    fn systems(&self) -> Option<&'static [&'static str]> {
        Some(&[
            "aleph_xdp_driver",
            "aleph_xdp_generic",
            "aleph_tcp",
            "aleph_udp",
        ])
    }
    fn run(&self, ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
        use super::cpu::{Path, measure};
        if !inabench_fabric::netns::is_root() {
            return Err(WorkloadError::Invalid(TestbedError::NotRoot.to_string()));
        }
        let system = ctx.system().to_string();
        let path = Path::parse(&system)
            .ok_or_else(|| WorkloadError::Invalid(format!("no data path `{system}`")))?;
        let available = std::thread::available_parallelism().map_or(1, |n| n.get());
        if ctx.declares("packet_loss") && !ctx.declares("agg_throughput") {
            // aleph-fig6: loss at a fixed offered rate under a background load
            let cores = ctx.count("cores")?;
            if cores == 0 || cores > available {
                return Err(WorkloadError::Invalid(format!(
                    "{cores} cores are not runnable on this host ({available} cores)"
                )));
            }
            let offered = ctx.param("offered_gbps")? * ctx.param("rate_scale")?;
            let secs = Duration::from_secs_f64(ctx.param("duration_s")?);
            let load = ctx.param("cpu_target_pct")?;
            let m =
                super::cpu::measure_loaded(path, cores, secs, Some(offered), load).map_err(err)?;
            ctx.log(LogLevel::Info, format!("{system}, load {load}%: {m:?}"));
            ctx.record("packet_loss", m.loss_pct);
            ctx.record("cpu_usage", m.host_cores / cores as f64 * 100.0);
        } else if ctx.declares("agg_throughput") {
            // aleph-fig5: the maximum with `cores` cores
            let cores = ctx.count("cores")?;
            if cores == 0 || cores > available {
                return Err(WorkloadError::Invalid(format!(
                    "{cores} cores are not runnable on this host ({available} cores)"
                )));
            }
            let step = Duration::from_secs_f64(ctx.param("step_duration_s")?);
            let limit = ctx.param("loss_limit_pct")?;
            let steps = if ctx.point.params.contains_key("search_steps") {
                ctx.count("search_steps")?
            } else {
                0
            };
            // as much as the senders can offer first; if that loses more than the limit, a
            // bisection of the offered load between nothing and what they offered finds the
            // highest rate aggregated within the limit
            let first = measure(path, cores, step, None).map_err(err)?;
            ctx.log(
                LogLevel::Info,
                format!("{system}, {cores} cores, unpaced: {first:?}"),
            );
            let mut best = (first.loss_pct <= limit).then_some(first);
            if best.is_none() && steps > 0 {
                let (mut lo, mut hi) = (0.0, first.gbps / (1.0 - first.loss_pct / 100.0).max(1e-3));
                for _ in 0..steps {
                    if ctx.cancelled() {
                        break;
                    }
                    let offered = (lo + hi) / 2.0;
                    let m = measure(path, cores, step, Some(offered)).map_err(err)?;
                    ctx.log(
                        LogLevel::Info,
                        format!("{system}, {cores} cores, offered {offered:.3} Gbit/s: {m:?}"),
                    );
                    if m.loss_pct <= limit {
                        lo = offered;
                        if best.is_none_or(|b| m.gbps > b.gbps) {
                            best = Some(m);
                        }
                    } else {
                        hi = offered;
                    }
                }
            }
            // nothing within the limit (no search, or none of its steps): the unpaced rate,
            // with its loss recorded beside it
            let m = best.unwrap_or(first);
            ctx.record("agg_throughput", m.gbps);
            ctx.record_if_declared("packet_loss", m.loss_pct);
        } else {
            // aleph-table2: CPU while aggregating at the target rate times rate_scale, with
            // every core of this host
            let target = ctx.param("throughput_gbps")? * ctx.param("rate_scale")?;
            let secs = ctx.param("duration_s")?;
            let k = format!(
                "{}|{system}|{}|{}|{target}|{secs}",
                ctx.experiment, ctx.repetition, ctx.warmup
            );
            let cached = CPU_CACHE
                .lock()
                .ok()
                .and_then(|c| c.as_ref().and_then(|m| m.get(&k).copied()));
            let m = match cached {
                Some(m) => m,
                None => {
                    let m = measure(path, available, Duration::from_secs_f64(secs), Some(target))
                        .map_err(err)?;
                    if let Ok(mut c) = CPU_CACHE.lock() {
                        c.get_or_insert_with(HashMap::new).insert(k, m);
                    }
                    m
                }
            };
            ctx.log(
                LogLevel::Info,
                format!("{system} at {target} Gbit/s: {m:?}"),
            );
            ctx.record("cpu_cores", m.cpu_cores);
            ctx.record("achieved_gbps", m.gbps);
            ctx.record_if_declared("host_cores", m.host_cores);
        }
        ctx.progress(1, 1);
        Ok(())
    }
}

/// aleph-fig7: mean communication time of a 128-gradient packet vs packet rate.
pub struct PacketLatency;

impl Workload for PacketLatency {
    fn id(&self) -> &'static str {
        "aleph.packet_latency"
    }
    fn fidelities(&self) -> &'static [Fidelity] {
        &[Fidelity::Emulated]
    }
    fn fabric(&self, _f: Fidelity) -> &'static str {
        "netns"
    }
    fn systems(&self) -> Option<&'static [&'static str]> {
        Some(&["aleph_xdp_driver", "aleph_tcp"])
    }
    fn run(&self, ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
        use super::latency;
        if !inabench_fabric::netns::is_root() {
            return Err(WorkloadError::Invalid(TestbedError::NotRoot.to_string()));
        }
        let rate = ctx.param("rate_pps")?;
        let d = Duration::from_secs_f64(ctx.param("duration_s")?);
        let l = match ctx.system() {
            "aleph_xdp_driver" => latency::xdp(rate, d),
            "aleph_tcp" => latency::tcp(rate, d),
            other => {
                return Err(WorkloadError::Invalid(format!(
                    "fig7 measures aleph_xdp_driver and aleph_tcp, not `{other}`"
                )));
            }
        }
        .map_err(err)?;
        ctx.log(
            LogLevel::Info,
            format!("{} at {rate} packets/s: {l:?}", ctx.system()),
        );
        if l.returned == 0 {
            return Err(WorkloadError::WrongResult(format!(
                "none of {} packets came back aggregated",
                l.sent
            )));
        }
        ctx.record("comm_time", l.mean_us);
        ctx.record("achieved_pps", l.achieved_pps);
        ctx.counter("lost", l.sent - l.returned);
        ctx.progress(1, 1);
        Ok(())
    }
}
