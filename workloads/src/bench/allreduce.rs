//! `bench.allreduce`: one all-reduce of one system of [`inabench_ina::SYSTEMS`] per repetition
//! on the `sim` fabric, every worker's sum checked against the reference, the nccl-tests columns
//! recorded (the all-reduce's time and its algorithm bandwidth, size / time; no bus bandwidth:
//! an in-network aggregation moves no ring's 2(n-1)/n). Specs: `experiments/bench/allreduce.yaml`,
//! `loss.yaml` and `small.yaml`.
//!
//! Every system runs with its own paper's parameters, declared in the spec as
//! `<system>__<knob>` parameters (`netreduce__window: 2`, `switchml__payload_bytes: 192`, ...):
//! the point's system takes the parameters that carry its name as its knobs
//! ([`inabench_ina::common::AllReduceConfig::knobs`]), so no system is named here and a system
//! added to the list runs with its own defaults until the spec declares its parameters.
//!
//! A cell a system cannot run is not a zero: when the system's build refuses the point's
//! worker count or knobs (ATP's bitmap holds at most 32 workers; the RC stream is a transfer
//! between two hosts, not an all-reduce) the cell records `refused` = 1 and no time, and the
//! build's own sentence is logged and kept with the cell as the row `refused: <sentence>` = 1
//! ([`REFUSAL_PREFIX`]), which the report's leaderboard prints. A run that does not finish within the time limit fails the
//! point unless the spec declares `unfinished_workers` (bench-loss: a system without loss
//! recovery that stalls is an outcome, recorded with its finished workers' sums still checked).
//!
//! Host costs are the run's host profile, as in Table 6's simulated class: `host_stack: paper`
//! gives each system the stack it had in its paper (the RoCE NIC for the ordered transports,
//! the released DPDK-style clients for SwitchML and ATP at the profile's cost per frame and
//! core); nothing is timed while the run runs, so a point is a function of the spec, the profile
//! and the seed.

use inabench_core::{Fidelity, LogLevel, PointCtx, Workload, WorkloadError};
use inabench_ina::common::{AllReduceConfig, SetupNode, System, reference_sum};

pub struct AllReduce;

/// A run of an aggregation that is not an all-reduce system of [`inabench_ina::SYSTEMS`] but
/// whose crate runs it through the seam ([`inabench_fabric::Fabric`]): one cell, recorded as the
/// list's systems record theirs.
type Other = fn(&mut PointCtx<'_>) -> Result<(), WorkloadError>;

/// The aggregations the family runs beside the list's systems, by the name specs use: P4SGD's
/// closed loop of one-packet all-reduces (`inabench_p4sgd::allreduce::run_p4sgd`), where the
/// build has P4SGD; a parameter server (PS-lite, the Libra crate's), where it has Libra.
fn others() -> Vec<(&'static str, Other)> {
    vec![
        #[cfg(feature = "p4sgd")]
        ("p4sgd", p4sgd_cell as Other),
        #[cfg(feature = "libra")]
        ("ps_lite", ps_lite_cell as Other),
        #[cfg(feature = "luwu")]
        ("luwu", luwu_cell as Other),
        #[cfg(feature = "aleph")]
        ("aleph", aleph_cell as Other),
    ]
}

/// ALEPH's aggregation ([`super::aleph::run`]): its Aggregation Service on a PS of its own
/// behind one link of the star (as ALEPH's testbed, 8 workers and a PS on one switch), its
/// members sending their gradients from user space in 570-byte datagrams, the XDP programs'
/// and the senders' costs a packet from the host profile (`systems.aleph_xdp_driver.worker.program`,
/// `systems.aleph.worker.udp_send`) and the spec's cited XDP rates, as aleph-fig10's modelled
/// class charges them; every member's aggregate checked against the exact sum. One level (every
/// worker the PS's member) on a star of equal links, where M-WCHA has no slower workers to
/// group; with slower links (bench-hetero's `slow_workers` at `slow_link_gbps`) M-WCHA clusters
/// the workers by their links' rates ([`crate::aleph::testbed_training::clustering`], as
/// aleph-fig9 clusters its testbed; seeded by the point's seed) and the hierarchy has two
/// levels, its aggregators ([`super::aleph::Aggregator`]) summing their clusters before the PS.
/// More members than the service's 32-bit bitmap holds are refused with its sentence.
#[cfg(feature = "aleph")]
fn aleph_cell(ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
    let workers = ctx.positive_count("workers")?;
    let elements = elements(ctx)?;
    // a bound of this simulation, not of ALEPH: every member holds its vector three times and
    // each aggregate as it arrives (64 MiB, 131072 segments, 8 members: 3.0 GB resident and
    // 13.6 s of wall time on this 2-core host; 256 MiB would hold ~12 GB)
    let segments = elements.div_ceil(inabench_wire::ina::aleph::GRADS);
    if let Ok(max) = ctx.param("aleph__max_segments")
        && segments as f64 > max
    {
        return refuse(
            ctx,
            format!(
                "{elements} values: {segments} segments of 128, over the {max} an ALEPH cell simulates here (aleph__max_segments: the simulation holds every member's vector and aggregates, 3.0 GB at 131072 segments and 8 members)"
            ),
        );
    }
    let costs = super::aleph::costs(ctx)?;
    let cfg = AllReduceConfig {
        workers,
        elements,
        seed: ctx.seed,
        line_rate_bps: ctx.param("line_rate_gbps").unwrap_or(100.0) * 1e9,
        mtu: ctx.param("mtu").unwrap_or(1024.0) as usize,
        timeout_ns: 0,
        knobs: ["slow_workers", "slow_link_gbps"]
            .into_iter()
            .filter(|k| ctx.point.params.contains_key(*k))
            .map(|k| Ok((k.to_string(), ctx.param(k)?)))
            .collect::<Result<_, WorkloadError>>()?,
    };
    // the links' rates: M-WCHA's clustering where they differ (bench-hetero), one level where
    // the spec gives every link the same rate
    let slow = inabench_ina_run::drive::slow_links(&cfg);
    let parents = if slow.is_empty() {
        super::aleph::one_level(workers)
    } else {
        let rates: Vec<f64> = slow
            .iter()
            .map(|r| r.unwrap_or(cfg.line_rate_bps) / 1e9)
            .collect();
        let parents = crate::aleph::testbed_training::clustering(&rates, ctx.seed)?;
        ctx.log(
            LogLevel::Info,
            format!(
                "ALEPH's M-WCHA clustering of links {rates:?} Gbps: each worker's parent {parents:?} ({workers} = the PS)"
            ),
        );
        parents
    };
    let limit_ns = (ctx.param("time_limit_ms").unwrap_or(10_000.0) * 1e6) as u64;
    let o = match super::aleph::run(&cfg, &costs, &parents, limit_ns) {
        Ok(o) => o,
        Err(super::aleph::CellError::Refused(why)) => {
            return refuse(ctx, format!("{workers} workers: {why}"));
        }
        Err(e) => return Err(WorkloadError::Invalid(e.to_string())),
    };
    ctx.record("refused", 0.0);
    ctx.record("wrong_workers", o.wrong as f64);
    ctx.record_if_declared("retransmissions", (o.resent + o.fetches) as f64);
    if o.wrong > 0 {
        return Err(WorkloadError::WrongResult(format!(
            "{} of ALEPH's {workers} members got an aggregate that differs from the exact sum",
            o.wrong
        )));
    }
    if !o.finished {
        if ctx.declares("unfinished_workers") {
            ctx.log(
                LogLevel::Warn,
                format!(
                    "aleph did not finish within {} ms of virtual time: {} members without the aggregate",
                    limit_ns / 1_000_000,
                    o.unfinished
                ),
            );
            ctx.record("unfinished_workers", o.unfinished as f64);
            return Ok(());
        }
        return Err(WorkloadError::Invalid(format!(
            "ALEPH's all-reduce did not finish within {} ms of virtual time: {} members without the aggregate",
            limit_ns / 1_000_000,
            o.unfinished
        )));
    }
    ctx.record_if_declared("unfinished_workers", 0.0);
    record_time(ctx, o.time_ns.max(1) as f64, elements)
}

/// LuWu's push/pull (`inabench_luwu`: its WorkerNIC and AggNIC transports and SmartSwitch
/// program, with credits and heartbeats) as an all-reduce of the point's dense vector: every
/// WorkerNIC pushes its int32 gradient (the values the list's systems sum,
/// [`inabench_ina::common::gradient`]), the switch sums them into its gradient table and forwards
/// the sums to the AggNIC (one more host on the switch: LuWu's optimizer node); then the AggNIC
/// pushes the sums as its parameter vector, which the switch broadcasts and every WorkerNIC
/// pulls. Two jobs of LuWu's transport on the sim fabric ([`inabench_luwu::run::run_sim`], through
/// the seam), one after the other, as in LuWu's step (luwu-fig16: gradients pushed, then
/// parameters pulled); the cell's time is the push job's data time (its start to the AggNIC's last
/// sum drained) plus the pull job's (its start to the last worker's last value drained). The AggNIC's pulled sum and every worker's pulled vector are
/// checked against the exact sum. Knobs (`luwu__*`) are luwu-pushpull's: 64 values a packet, the
/// window of 4970 packets its heartbeat figure implies, heartbeats every T_send / 4 (Appendix B),
/// a 2 s resend timeout staggered by timeout / workers. LuWu's NICs are FPGAs: no host CPU cost
/// a frame (as luwu-pushpull), its links LuWu's (`inabench_luwu::run::sim_link`: the line rate,
/// 0.5 us).
#[cfg(feature = "luwu")]
fn luwu_cell(ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
    use inabench_fabric::fault::Faults;
    use inabench_luwu::run::{Job, run_sim};
    use inabench_luwu::transport::Config;
    let workers = ctx.positive_count("workers")?;
    let elements = elements(ctx)?;
    if workers < 2 {
        return refuse(
            ctx,
            format!("{workers} worker: LuWu's switch aggregates at least two WorkerNICs"),
        );
    }
    let vpp = ctx.positive_count("luwu__values_per_packet")?;
    let window = ctx.positive_count("luwu__window")?;
    let rate = ctx.param("line_rate_gbps").unwrap_or(100.0) * 1e9;
    let timeout_ns = (ctx.param("luwu__resend_timeout_ms")? * 1e6) as u64;
    let t_send = Config::t_send_ns(window, vpp, rate);
    let cfg = Config {
        workers,
        values_per_packet: vpp,
        window,
        line_rate_bps: rate,
        heartbeat_ns: (t_send / 4.0) as u64,
        resend_timeout_ns: timeout_ns,
        stagger_ns: timeout_ns / workers as u64,
        consumer_rate: vec![1.0; workers],
        agg_consumer_rate: 1.0,
    };
    let limit_ns = (ctx.param("time_limit_ms").unwrap_or(10_000.0) * 1e6) as u64;
    let want = reference_sum(ctx.seed, workers, elements);
    let push = Job {
        grads: (0..workers)
            .map(|w| inabench_ina::common::gradient(ctx.seed, w, elements))
            .collect(),
        max: false,
        params: Vec::new(),
    };
    let (_, p) = run_sim(&cfg, &push, Faults::default(), limit_ns);
    if !p.finished {
        return Err(WorkloadError::Invalid(format!(
            "LuWu's push did not finish within {} ms of virtual time",
            limit_ns / 1_000_000
        )));
    }
    let pull = Job {
        grads: vec![Vec::new(); workers],
        max: false,
        params: p.aggregate.clone(),
    };
    let (_, q) = run_sim(&cfg, &pull, Faults::default(), limit_ns);
    if !q.finished {
        return Err(WorkloadError::Invalid(format!(
            "LuWu's pull did not finish within {} ms of virtual time",
            limit_ns / 1_000_000
        )));
    }
    // the AggNIC's sum and every worker's pulled vector against the exact sum
    let agg_wrong = p.aggregate != want;
    let wrong = q.pulled.iter().filter(|v| **v != want).count()
        + (q.pulled.len() < workers) as usize * (workers - q.pulled.len());
    ctx.record("refused", 0.0);
    ctx.record("wrong_workers", wrong as f64);
    ctx.record_if_declared("retransmissions", (p.resends + q.resends) as f64);
    if agg_wrong || wrong > 0 || !p.exact || !q.exact {
        return Err(WorkloadError::WrongResult(format!(
            "LuWu's all-reduce is not exact: the AggNIC's sum {}, {wrong} of {workers} workers' pulled vectors wrong",
            if agg_wrong { "wrong" } else { "right" }
        )));
    }
    // the data's times, as the list's systems' (first packet to the last worker's result): the
    // AggNIC's last sum drained, then the last worker's last value drained; the senders' wait for
    // their final Ack heartbeat (up to T_send / 4 later) ends neither job's data
    let pull_ns = q.pull_ns.iter().copied().max().unwrap_or(0);
    record_time(ctx, (p.push_ns + pull_ns).max(1) as f64, elements)
}

/// A parameter server (PS-lite: the Libra crate's worker and server code with every pair at one
/// server, [`super::sparse::run_libra_crate`]) all-reducing the point's dense vector: each worker
/// pushes its whole gradient (the values the list's systems sum,
/// [`inabench_ina::common::gradient`]) as (key, value) pairs, `ps_lite__server_pairs_per_packet`
/// a packet, and gets its sums back; every worker's results are checked against the exact sums.
/// Priced by the host profile's Libra table, as bench-sparse's. A cell over
/// `ps_lite__max_pairs` pairs (workers x values; the spec's bound, absent: none) is refused:
/// the Libra crate's simulation keeps every pair, the workers' and the server's, in hash maps
/// (at 2^25 pairs, 16 MiB x 8 workers, about 140 s of wall time on this 2-core host), a limit of
/// this simulation, not of a parameter server.
#[cfg(feature = "libra")]
fn ps_lite_cell(ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
    use super::sparse::{libra_config, run_libra_crate};
    let workers = ctx.positive_count("workers")?;
    let elements = elements(ctx)?;
    let pairs = workers.saturating_mul(elements);
    if let Ok(max) = ctx.param("ps_lite__max_pairs")
        && pairs as f64 > max
    {
        return refuse(
            ctx,
            format!(
                "{workers} workers x {elements} values: {pairs} pairs, over the {max} a parameter-server cell simulates here (ps_lite__max_pairs: the Libra crate's simulation keeps every pair in hash maps and would take minutes of wall time)"
            ),
        );
    }
    let cfg = match libra_config(ctx, workers, false) {
        Ok(cfg) => cfg,
        Err(e) => return e.into_cell(ctx),
    };
    let inp: inabench_libra::proto::Inputs = (0..workers)
        .map(|w| {
            let cold = inabench_ina::common::gradient(ctx.seed, w, elements)
                .into_iter()
                .enumerate()
                .map(|(k, v)| (k as u32, v))
                .collect();
            (Vec::new(), cold)
        })
        .collect();
    let time_ns = run_libra_crate(ctx, &cfg, &inp, 1, None)?;
    record_rates(ctx, time_ns, elements)
}

/// Every system of [`inabench_ina::SYSTEMS`], in list order, then the other aggregations this
/// build can run: the family runs them all (a system that cannot run a cell says so in the cell).
pub fn system_names() -> &'static [&'static str] {
    static NAMES: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| {
        inabench_ina::SYSTEMS
            .iter()
            .map(|s| s.name())
            .chain(others().into_iter().map(|(n, _)| n))
            .chain(references().into_iter().map(|(n, _)| n))
            .collect()
    })
}

impl Workload for AllReduce {
    fn id(&self) -> &'static str {
        "bench.allreduce"
    }

    fn fidelities(&self) -> &'static [Fidelity] {
        &[Fidelity::Simulated, Fidelity::Emulated]
    }

    /// `sim`, or `loopback` for the emulated class (the software references' processes on
    /// this host).
    fn fabric(&self, f: Fidelity) -> &'static str {
        if f == Fidelity::Emulated {
            "loopback"
        } else {
            "sim"
        }
    }

    fn systems(&self) -> Option<&'static [&'static str]> {
        Some(system_names())
    }

    fn run(&self, ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
        // the classes hold different systems: the simulated class the protocol code of every
        // aggregation on the sim fabric, the emulated class the software references measured as
        // processes of this host; a system asked for in the other class says so in its cell
        let name = ctx.system().to_string();
        let reference = references().into_iter().find(|(n, _)| *n == name);
        match (ctx.fidelity, reference) {
            (Fidelity::Emulated, Some((_, run))) => return run(ctx),
            (Fidelity::Emulated, None) => {
                if let Some(sys) = inabench_ina::system(&name) {
                    return udp_cell(ctx, sys);
                }
                return refuse(
                    ctx,
                    format!(
                        "{name} has no emulated run in this benchmark: the emulated class holds the software references and the list's systems on this host's udp fabric"
                    ),
                );
            }
            (_, Some(_)) => {
                return refuse(
                    ctx,
                    format!("{name} runs as processes on this host: the emulated class only"),
                );
            }
            (_, None) => {}
        }
        let Some(sys) = inabench_ina::system(ctx.system()) else {
            let name = ctx.system().to_string();
            let (_, run) = others()
                .into_iter()
                .find(|(n, _)| *n == name)
                .ok_or_else(|| {
                    WorkloadError::Invalid(format!(
                        "`{name}` is neither a system of inabench_ina::SYSTEMS nor another aggregation this build runs"
                    ))
                })?;
            return run(ctx);
        };
        let cfg = config(ctx, sys)?;
        run_dense(ctx, sys, &cfg, None)
    }
}

/// The most workers the emulated class runs a listed system with: a process per node on this
/// host's cores (issue #39's 4-8 workers on `mem`/`udp`; more would time the scheduler).
const UDP_MAX_WORKERS: usize = 8;

/// One all-reduce of a system of [`inabench_ina::SYSTEMS`] on this host's `udp` fabric: a process
/// per node on loopback (inabench_ina_run::udp_node, as netreduce-table6's emulated class runs it;
/// threads where no node binary is at hand), the same protocol code and parameters as the
/// simulated cell, every worker's sum checked by the worker against the reference. The time
/// (`single_time`) is the runner's wall clock from the start signal to the last worker's result
/// of the run's one all-reduce: this host's loopback and cores, not a 100 Gbps network, and not
/// the references' median of warm operations (a metric of its own, so the two are never ranked
/// together). A point the system's build refuses, one with more workers than
/// [`UDP_MAX_WORKERS`], or one over the spec's `udp_max_bytes` a worker (where it declares one:
/// bench-allreduce's size bound, per profile) is a refused cell with the sentence. The run's
/// limit is `udp_time_limit_ms` (60 s where the spec gives none) of wall time; a cell over it
/// records its `unfinished_workers` and no time where the spec declares that metric (it says
/// so in the leaderboard, never a zero), and fails the point where it does not.
fn udp_cell(ctx: &mut PointCtx<'_>, sys: &dyn System) -> Result<(), WorkloadError> {
    use inabench_ina_run::udp_node::{NodeJob, Spawn, run_udp};
    let workers = ctx.positive_count("workers")?;
    if workers > UDP_MAX_WORKERS {
        return refuse(
            ctx,
            format!(
                "{workers} workers: the emulated class runs at most {UDP_MAX_WORKERS}, a process each on this host's cores"
            ),
        );
    }
    let cfg = config(ctx, sys)?;
    if let Ok(max) = ctx.param("udp_max_bytes") {
        let bytes = cfg.elements * 4;
        if bytes as f64 > max {
            return refuse(
                ctx,
                format!(
                    "{bytes} bytes a worker: over this profile's bound for the emulated class (udp_max_bytes = {max}: a process per node on this host's cores; the spec says why)"
                ),
            );
        }
    }
    if let Err(why) = sys.build(&cfg) {
        return refuse(ctx, format!("{workers} workers: {why}"));
    }
    let limit_ms = match ctx.param("udp_time_limit_ms") {
        Ok(ms) if ms >= 1.0 && ms.is_finite() => ms as u64,
        Ok(ms) => {
            return Err(WorkloadError::BadParam(format!(
                "`udp_time_limit_ms` is a whole number of milliseconds, at least 1, not {ms}"
            )));
        }
        Err(_) => 60_000,
    };
    let faults = crate::fabric::faults(ctx)?;
    let job = NodeJob::for_config(sys.name(), &cfg, &faults, "event", limit_ms);
    let out = run_udp(&job, &Spawn::detect()).map_err(crate::fabric::run_error)?;
    let ws: Vec<_> = out.nodes.iter().filter(|n| n.is_worker).collect();
    let wrong = ws.iter().filter(|w| w.finished && !w.correct).count();
    if wrong > 0 {
        ctx.record("wrong_workers", wrong as f64);
        return Err(WorkloadError::WrongResult(format!(
            "{wrong} of {} workers got a sum that differs from the reference",
            ws.len()
        )));
    }
    if !out.finished {
        let unfinished = ws.iter().filter(|w| !w.finished).count();
        let said = format!(
            "{} did not finish within its time limit ({} s of wall time, udp_time_limit_ms): {unfinished} of {} workers without a result; every finished worker's sum exact",
            sys.name(),
            limit_ms as f64 / 1e3,
            ws.len()
        );
        if ctx.declares("unfinished_workers") {
            // an outcome, not a zero: no time, the workers without a result (the leaderboard
            // says "did not finish")
            ctx.log(LogLevel::Warn, said);
            ctx.record("refused", 0.0);
            ctx.record("wrong_workers", 0.0);
            ctx.record("unfinished_workers", unfinished as f64);
            return Ok(());
        }
        return Err(WorkloadError::Invalid(said));
    }
    ctx.record_if_declared("unfinished_workers", 0.0);
    ctx.counter(
        "retransmissions",
        ws.iter().map(|w| w.retransmissions).sum::<u64>(),
    );
    ctx.record("refused", 0.0);
    ctx.record("wrong_workers", 0.0);
    // one cold all-reduce, not the references' median of warm operations: its own metric, so
    // the two never share a ranking
    ctx.record_in(
        "single_time",
        (out.duration.as_nanos() as f64).max(1.0),
        "ns",
    )
}

/// Inputs a workload gives an all-reduce instead of the system's generated gradients: one
/// vector of `elements` values per worker, and the exact sum every worker's result must equal.
pub(crate) struct Given {
    pub inputs: Vec<Vec<i32>>,
    pub want: Vec<i32>,
}

/// One all-reduce of `sys` for `cfg` on the sim fabric, recorded as a cell: the system's
/// generated gradients (`given` = None), or the inputs given where the system takes external
/// inputs ([`System::build_with`]). A system that takes none sums its generated gradients of the
/// same size instead (the dense equivalent: no system here compresses, so the time does not
/// depend on the values) and the cell records `own_values` = 1 (0 where it took them); a
/// point its build refuses is a refused cell.
pub(crate) fn run_dense(
    ctx: &mut PointCtx<'_>,
    sys: &dyn System,
    cfg: &AllReduceConfig,
    given: Option<Given>,
) -> Result<(), WorkloadError> {
    let faults = crate::fabric::faults(ctx)?;
    let stack = inabench_ina_run::drive::host_stack_for(
        sys,
        ctx.text("host_stack").ok().as_deref(),
        crate::hostcost::core_costs(ctx, sys.name())?,
        None,
        None,
        None,
    )
    .map_err(|e| WorkloadError::Invalid(e.to_string()))?;
    let limit_ns = (ctx.param("time_limit_ms").unwrap_or(10_000.0) * 1e6) as u64;
    // built apart from the run (as inabench_ina_run::drive::run_sim_stack builds it): a refusal
    // is the build's own answer to the point, and the event rate times the run alone
    let generated = |cfg: &AllReduceConfig| reference_sum(cfg.seed, cfg.workers, cfg.elements);
    let ((setup, cfg), want, own) = match given {
        None => match inabench_ina_run::drive::build_for_sim(sys, cfg, &stack) {
            Ok(built) => (built, generated(cfg), None),
            Err(why) => {
                let workers = cfg.workers;
                return refuse(ctx, format!("{workers} workers: {why}"));
            }
        },
        Some(g) => match inabench_ina_run::drive::build_for_sim_with(sys, cfg, &stack, g.inputs) {
            Ok(built) => (built, g.want, Some(false)),
            // no external inputs (or not these): the dense equivalent, or the build's refusal
            Err(why) => match inabench_ina_run::drive::build_for_sim(sys, cfg, &stack) {
                Ok(built) => {
                    ctx.log(
                            LogLevel::Info,
                            format!(
                                "{} does not take the point's inputs ({why}): it sums its own generated values of the same size, checked against their own exact sum",
                                sys.name()
                            ),
                        );
                    (built, generated(cfg), Some(true))
                }
                Err(why) => {
                    let workers = cfg.workers;
                    return refuse(ctx, format!("{workers} workers: {why}"));
                }
            },
        },
    };
    // the sim fabric's event rate, said in the log and never recorded: the simulated class
    // reads no clock of this host (frames delivered to a node per second of wall time)
    let wall = std::time::Instant::now();
    let (nodes, rep, _) =
        inabench_ina_run::drive::run_setup_sim_stack(setup, &cfg, faults, &stack, limit_ns)
            .map_err(crate::fabric::run_error)?;
    let secs = wall.elapsed().as_secs_f64();
    let frames: u64 = rep.nodes.iter().map(|n| n.frames_rx).sum();
    ctx.log(
            LogLevel::Info,
            format!(
                "sim event rate: {frames} frames delivered in {secs:.3} s of wall time, {:.2} M frames/s ({} workers, {} values)",
                frames as f64 / secs.max(1e-9) / 1e6,
                cfg.workers,
                cfg.elements
            ),
        );
    let (mut finished, mut wrong, mut start, mut end, mut retx) =
        (0usize, 0usize, u64::MAX, 0u64, 0u64);
    for n in &nodes {
        let SetupNode::Worker(w) = n else { continue };
        let st = w.stats();
        retx += st.retransmissions;
        match w.result() {
            Some(r) if r == want => {
                finished += 1;
                start = start.min(st.start_ns);
                end = end.max(st.end_ns);
            }
            Some(_) => wrong += 1,
            None => {}
        }
    }
    ctx.record("refused", 0.0);
    // only a workload that gives inputs asks (its spec declares the flag)
    if let Some(own) = own {
        ctx.record("own_values", if own { 1.0 } else { 0.0 });
    }
    ctx.record("wrong_workers", wrong as f64);
    ctx.record_if_declared("retransmissions", retx as f64);
    ctx.record_if_declared("frames_dropped", rep.faults.dropped as f64);
    ctx.counter("retransmissions", retx);
    if wrong > 0 {
        return Err(WorkloadError::WrongResult(format!(
            "{wrong} of {} workers got a sum that differs from the reference",
            cfg.workers
        )));
    }
    let unfinished = cfg.workers - finished;
    if unfinished > 0 || !rep.finished {
        if ctx.declares("unfinished_workers") {
            ctx.log(
                    LogLevel::Warn,
                    format!(
                        "{} did not finish within {} ms of virtual time: {unfinished} workers without a result",
                        sys.name(),
                        limit_ns / 1_000_000
                    ),
                );
            ctx.record("unfinished_workers", unfinished as f64);
            return Ok(());
        }
        return Err(WorkloadError::Invalid(format!(
            "the all-reduce did not finish within {} ms of virtual time: {unfinished} workers without a result",
            limit_ns / 1_000_000
        )));
    }
    ctx.record_if_declared("unfinished_workers", 0.0);
    let time_ns = end.saturating_sub(start).max(1) as f64;
    record_time(ctx, time_ns, cfg.elements)?;
    Ok(())
}

/// A cell's time (ns of an all-reduce of `elements` int32 a worker) and the rates that follow
/// from it ([`record_rates`]).
fn record_time(ctx: &mut PointCtx<'_>, time_ns: f64, elements: usize) -> Result<(), WorkloadError> {
    ctx.record_in("time", time_ns, "ns")?;
    record_rates(ctx, time_ns, elements)
}

/// The algorithm bandwidth (size / time, nccl-tests' algbw) and, where the spec declares it, the
/// goodput (the same bits over the same time) of a cell whose time is recorded.
fn record_rates(
    ctx: &mut PointCtx<'_>,
    time_ns: f64,
    elements: usize,
) -> Result<(), WorkloadError> {
    let bits_per_s = elements as f64 * 32.0 / (time_ns / 1e9);
    ctx.record_in_if_declared("algbw", bits_per_s, "bps")?;
    ctx.record_in_if_declared("goodput", bits_per_s, "bps")
}

/// The middle of a run's per-operation latencies (the upper one of an even count), at least
/// 1 ns.
fn middle_latency(mut lat: Vec<u64>) -> f64 {
    lat.sort_unstable();
    lat.get(lat.len() / 2).copied().unwrap_or(0).max(1) as f64
}

/// The prefix of the row that keeps a refused cell's reason with the cell: beside `refused` = 1
/// the cell records the metric `refused: <why>` = 1 (a row carries a number; the sentence rides
/// in the metric's name, so the store's format is unchanged and no other experiment's rows
/// move). The report's leaderboard (`report/src/render/leaderboard.rs`, the same prefix) names
/// it in the cell's "no value" column.
pub const REFUSAL_PREFIX: &str = "refused: ";

/// A cell the point's system cannot run: `refused` = 1, no time, and why, in the log and in the
/// row `refused: <why>` ([`REFUSAL_PREFIX`]).
pub(crate) fn refuse(ctx: &mut PointCtx<'_>, why: String) -> Result<(), WorkloadError> {
    let system = ctx.system().to_string();
    ctx.log(
        LogLevel::Warn,
        format!("{system} cannot run this cell ({why})"),
    );
    ctx.record("refused", 1.0);
    // one line: a sentence with a line break would still be one metric, but reads badly
    let why = why.split_whitespace().collect::<Vec<_>>().join(" ");
    ctx.record(&format!("{REFUSAL_PREFIX}{why}"), 1.0);
    Ok(())
}

/// The software references the emulated class measures on this host, by the name specs use:
/// OpenMPI's own `MPI_Allreduce` (`inabench_p4sgd::mpi`, the peer p4sgd-fig8's CPUSync rows run),
/// where the build has P4SGD's crate.
fn references() -> Vec<(&'static str, Other)> {
    vec![
        #[cfg(feature = "p4sgd")]
        ("mpi_allreduce", mpi_cell as Other),
        ("gloo_ring", gloo_cell as Other),
    ]
}

/// Gloo's ring all-reduce (`gloo::AllreduceRing`, int32 sum; [`super::gloo`]) of the point's
/// values across `workers` ranks, a process each on this host connected by Gloo's TCP transport
/// on loopback, `gloo_ops` timed all-reduces per rank after `gloo_warmup_ops` untimed ones, every
/// result checked against the exact sum by the driver; the cell's time is the median
/// all-reduce's latency over every rank's. A host without Gloo's headers or g++ says so in the
/// cell. Emulated: this host's processes over its loopback TCP, not a 100 Gbps network.
fn gloo_cell(ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
    use super::gloo;
    let workers = ctx.positive_count("workers")?;
    let elements = elements(ctx)?;
    let run = gloo::GlooRun {
        ranks: workers,
        elements,
        ops: ctx.positive_count("gloo_ops")? as u64,
        warmup: ctx.count("gloo_warmup_ops")? as u64,
        limit: std::time::Duration::from_secs(600),
        corrupt: false,
    };
    let o = match gloo::run(&run) {
        Ok(o) => o,
        Err(gloo::GlooError::NotBuilt(why)) => {
            return refuse(ctx, format!("Gloo is not on this host: {why}"));
        }
        Err(e) => return Err(WorkloadError::Invalid(e.to_string())),
    };
    let ran = Reference {
        name: "gloo_ring",
        maker: "Gloo",
        over: "loopback TCP",
        version: &o.version,
    };
    record_reference(ctx, ran, workers, o.wrong, o.latencies, elements)
}

/// A software reference's run, for [`record_reference`].
struct Reference<'a> {
    /// the cell's system
    name: &'static str,
    /// whose code it is, for the wrong-result sentence
    maker: &'static str,
    /// what carries its ranks' messages on this host
    over: &'static str,
    version: &'a str,
}

/// The cell of a software reference that ran: what ran (logged), its wrong results (a wrong
/// one fails the point) and the median latency of its timed operations over every rank's.
fn record_reference(
    ctx: &mut PointCtx<'_>,
    ran: Reference<'_>,
    workers: usize,
    wrong: u64,
    latencies: Vec<u64>,
    elements: usize,
) -> Result<(), WorkloadError> {
    ctx.log(
        LogLevel::Info,
        format!(
            "{}: {}, {workers} ranks over {} on this host's {} cores",
            ran.name,
            ran.version,
            ran.over,
            std::thread::available_parallelism().map_or(0, |n| n.get())
        ),
    );
    ctx.record("refused", 0.0);
    ctx.record("wrong_workers", wrong as f64);
    if wrong > 0 {
        return Err(WorkloadError::WrongResult(format!(
            "{wrong} of {}'s results differ from the exact sum",
            ran.maker
        )));
    }
    record_time(ctx, middle_latency(latencies), elements)
}

/// OpenMPI's `MPI_Allreduce` (MPI_INT32_T, MPI_SUM) of the point's values across `workers` ranks,
/// a process each on this host (`mpirun --oversubscribe`, shared memory between them), `mpi_ops`
/// timed all-reduces per rank after `mpi_warmup_ops` untimed ones, every result checked against
/// the exact sum by the peer; the cell's time is the median all-reduce's latency over every
/// rank's. A host without OpenMPI says so in the cell. Emulated: this host's processes, not a
/// 100 Gbps network.
#[cfg(feature = "p4sgd")]
fn mpi_cell(ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
    use inabench_p4sgd::mpi;
    let workers = ctx.positive_count("workers")?;
    let elements = elements(ctx)?;
    let run = mpi::MpiRun {
        ranks: workers,
        elements,
        ops: ctx.positive_count("mpi_ops")? as u64,
        warmup: ctx.count("mpi_warmup_ops")? as u64,
        transport: mpi::Transport::SharedMemory,
        limit: std::time::Duration::from_secs(600),
        corrupt: false,
    };
    let o = match mpi::run(&run) {
        Ok(o) => o,
        Err(mpi::MpiError::NotBuilt(why)) => {
            return refuse(ctx, format!("OpenMPI is not on this host: {why}"));
        }
        Err(e) => return Err(WorkloadError::Invalid(e.to_string())),
    };
    let ran = Reference {
        name: "mpi_allreduce",
        maker: "OpenMPI",
        over: "shared memory",
        version: &o.version,
    };
    record_reference(ctx, ran, workers, o.wrong, o.latencies, elements)
}

/// The elements of a point: `size_bytes` (a whole number of int32) or `elements`.
pub(crate) fn elements(ctx: &PointCtx<'_>) -> Result<usize, WorkloadError> {
    match ctx.param("size_bytes") {
        Ok(b) => {
            if !(b >= 4.0 && b % 4.0 == 0.0 && b <= 4e9) {
                return Err(WorkloadError::BadParam(format!(
                    "`size_bytes` is a whole number of int32 (a multiple of 4 bytes), not {b}"
                )));
            }
            Ok(b as usize / 4)
        }
        Err(_) => ctx.positive_count("elements"),
    }
}

/// P4SGD's aggregation (its FPGA workers and switch program, `inabench_p4sgd`) on the same star:
/// a closed loop of `p4sgd__ops` one-packet all-reduces per worker (P4SGD's regime: each
/// operation one packet of at most 255 values), every result checked against the exact sum; the
/// cell's time is the median operation's latency. The link is the one the list's systems get
/// ([`inabench_ina_run::drive::sim_link`]: rate and latency); like them no NIC, PCIe or switch
/// pipeline latency is charged (P4SGD's own figures for those are uncited, p4sgd-fig8), only one
/// 512-bit beat per frame at `p4sgd__fpga_clock_mhz` (the U280 design's clock, p4sgd-fig8).
#[cfg(feature = "p4sgd")]
fn p4sgd_cell(ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
    use inabench_p4sgd::allreduce::{RunError, SimInputs, run_p4sgd};
    let workers = ctx.positive_count("workers")?;
    let elements = elements(ctx)?;
    let timeout_ns = (ctx.param("timeout_us").unwrap_or(100.0) * 1e3) as u64;
    let link = inabench_ina_run::drive::sim_link(&AllReduceConfig {
        workers,
        elements,
        seed: ctx.seed,
        line_rate_bps: ctx.param("line_rate_gbps").unwrap_or(100.0) * 1e9,
        mtu: ctx.param("mtu").unwrap_or(1024.0) as usize,
        timeout_ns,
        knobs: Vec::new(),
    });
    let si = SimInputs {
        rate_bps: link.rate_bps,
        link_latency_ns: link.latency_ns,
        switch_latency_ns: 0,
        fpga_nic_ns: 0,
        fpga_beat_ns: (1e3 / ctx.param("p4sgd__fpga_clock_mhz")?).round() as u64,
        host_nic_ns: 0,
        timeout_ns,
        host_frame_ns: 0,
        mpi_allreduce_ns: None,
    };
    let ops = ctx.positive_count("p4sgd__ops")? as u64;
    let o = match run_p4sgd(workers, elements, ops, ctx.seed, Some(&si), timeout_ns) {
        Ok(o) => o,
        Err(RunError::Config(why)) => {
            return refuse(ctx, format!("{workers} workers, {elements} values: {why}"));
        }
        Err(e) => return Err(WorkloadError::Invalid(e.to_string())),
    };
    ctx.record("refused", 0.0);
    ctx.record("wrong_workers", o.wrong as f64);
    ctx.record_if_declared("retransmissions", o.retransmissions as f64);
    if o.wrong > 0 {
        return Err(WorkloadError::WrongResult(format!(
            "{} of P4SGD's results differ from the reference",
            o.wrong
        )));
    }
    if o.unfinished > 0 {
        return Err(WorkloadError::Invalid(format!(
            "{} of P4SGD's workers did not finish their {ops} operations",
            o.unfinished
        )));
    }
    record_time(ctx, middle_latency(o.latencies), elements)?;
    Ok(())
}

/// The all-reduce of a point: `size_bytes` (a whole number of int32) or `elements`, `workers`,
/// the link (`line_rate_gbps`, `mtu`), the retransmission timeout (`timeout_us`, 100 us of
/// virtual time as Table 6's simulated class) and the system's own knobs, the parameters named
/// `<system>__<knob>`.
pub fn config(ctx: &PointCtx<'_>, sys: &dyn System) -> Result<AllReduceConfig, WorkloadError> {
    config_with(ctx, sys, elements(ctx)?)
}

/// [`config`] with the elements given (a workload whose vector is not `size_bytes`).
pub(crate) fn config_with(
    ctx: &PointCtx<'_>,
    sys: &dyn System,
    elements: usize,
) -> Result<AllReduceConfig, WorkloadError> {
    let prefix = format!("{}__", sys.name());
    let mut knobs = Vec::new();
    for (k, v) in &ctx.point.params {
        let Some(knob) = k.strip_prefix(&prefix) else {
            continue;
        };
        let x = v.as_f64().ok_or_else(|| {
            WorkloadError::BadParam(format!(
                "`{k}` is a knob of {}: a number, not `{v}`",
                sys.name()
            ))
        })?;
        knobs.push((knob.to_string(), x));
    }
    // the heterogeneous star (bench-hetero): the last `slow_workers` workers' links at
    // `slow_link_gbps`, the same for every system (inabench_ina_run::drive::slow_links)
    for k in ["slow_workers", "slow_link_gbps"] {
        if ctx.point.params.contains_key(k) {
            knobs.push((k.to_string(), ctx.param(k)?));
        }
    }
    Ok(AllReduceConfig {
        workers: ctx.positive_count("workers")?,
        elements,
        seed: ctx.seed,
        line_rate_bps: ctx.param("line_rate_gbps").unwrap_or(100.0) * 1e9,
        mtu: ctx.param("mtu").unwrap_or(1024.0) as usize,
        timeout_ns: (ctx.param("timeout_us").unwrap_or(100.0) * 1e3) as u64,
        knobs,
    })
}
