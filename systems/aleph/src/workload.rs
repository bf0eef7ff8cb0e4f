//! The registered workloads: `aleph.motivating_example` (aleph-table1), `aleph.sim_bandwidth`
//! (aleph-fig13), `aleph.sim_overhead` (aleph-fig14) and `aleph.sim_hops` (aleph-fig15-16).
//!
//! Every clustering M-WCHA returns is checked by [`mwcha::validate`] before it is used; a
//! violation fails the point with [`WorkloadError::WrongResult`]. Bandwidth draws and M-WCHA's
//! coin flips are seeded with the spec's `seed` plus the repetition, so the three systems of a
//! point see the same workers.

use crate::AlephError;
use crate::motivating::{Example, Row};
use crate::mwcha::{self, Clustering, Instance};
use crate::scenario::{self, Routing, Scenario, Setup, System, WorkerGraph};
use crate::topo::Kind;
use inabench_core::event::LogLevel;
use inabench_core::{Fidelity, PointCtx, Scalar, Workload, WorkloadError};

fn invalid(e: AlephError) -> WorkloadError {
    WorkloadError::Invalid(e.to_string())
}

fn str_param(ctx: &PointCtx<'_>, name: &str) -> Result<String, WorkloadError> {
    match ctx.point.params.get(name) {
        Some(Scalar::Str(s)) => Ok(s.clone()),
        _ => Err(WorkloadError::Param(name.to_string())),
    }
}

fn seed(ctx: &PointCtx<'_>) -> Result<u64, WorkloadError> {
    Ok(ctx.count("seed")? as u64 + u64::from(ctx.repetition))
}

/// Validate a clustering, record the violation counts the spec declares, and fail on any.
fn check_clustering(
    ctx: &mut PointCtx<'_>,
    inst: &Instance,
    c: &Clustering,
) -> Result<(), WorkloadError> {
    let v = mwcha::validate(inst, c);
    ctx.record_if_declared("capacity_violations", v.capacity as f64);
    ctx.record_if_declared("membership_violations", v.membership as f64);
    ctx.record_if_declared("adjacency_violations", v.adjacency as f64);
    if v.total() > 0 {
        return Err(WorkloadError::WrongResult(format!(
            "M-WCHA's clustering breaks Eq. 1: {v}"
        )));
    }
    Ok(())
}

/// Record |D|, the aggregators and the ratio to the exact optimum (when the spec asks).
fn record_clustering(
    ctx: &mut PointCtx<'_>,
    inst: &Instance,
    c: &Clustering,
) -> Result<(), WorkloadError> {
    ctx.record_if_declared("aggregators", c.aggregators() as f64);
    ctx.record_if_declared("ps_senders", c.senders() as f64);
    if ctx.declares("approx_ratio") {
        match mwcha::exact_min_senders(inst) {
            Ok(opt) => {
                if c.senders() < opt {
                    return Err(WorkloadError::WrongResult(format!(
                        "M-WCHA's {} clusters beat the exact optimum {opt}",
                        c.senders()
                    )));
                }
                ctx.record("approx_ratio", c.senders() as f64 / opt as f64);
            }
            Err(e) => ctx.log(
                LogLevel::Warn,
                format!("approximation ratio not computed: {e}"),
            ),
        }
    }
    Ok(())
}

/// Sec. 3.2's clustering of the example (Fig. 1(c), aleph.txt:95): w3 aggregates w1 and w2, w0
/// sends to the PS directly.
pub fn paper_example_clustering(e: &Example) -> Result<Clustering, AlephError> {
    if e.worker_bw != [10.0, 10.0, 10.0, 30.0] {
        return Err(AlephError::Invalid(
            "the paper's clustering is defined for workers at 10, 10, 10 and 30 Gbps".into(),
        ));
    }
    Ok(Clustering {
        clusters: vec![
            mwcha::Cluster {
                aggregator: 3,
                members: vec![1, 2],
                direct: false,
            },
            mwcha::Cluster {
                aggregator: 0,
                members: vec![],
                direct: true,
            },
        ],
        ..Default::default()
    })
}

/// ALEPH's clustering of the example: `clustering: paper` (Sec. 3.2's) or `mwcha` (a draw
/// seeded by `seed` plus the repetition).
fn example_clustering(
    ctx: &PointCtx<'_>,
    e: &Example,
) -> Result<(Instance, Clustering), WorkloadError> {
    match ctx.text("clustering").ok().as_deref() {
        Some("paper") => Ok((
            e.instance().map_err(invalid)?,
            paper_example_clustering(e).map_err(invalid)?,
        )),
        None | Some("mwcha") => e.cluster(seed(ctx)?).map_err(invalid),
        Some(other) => Err(WorkloadError::Invalid(format!(
            "clustering must be paper or mwcha (got {other})"
        ))),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// aleph-table1's emulated class: the example's four workers and PS as rate-limited namespaces
/// (the testbed of aleph-fig9 with these rates), PS = the TCP aggregation service, AR = the TCP
/// ring, ALEPH = XDP aggregation on the clustering; times at the paper's scale (gradient and
/// rates scaled alike by `rate_scale`), traffic and rate of the median worker as in the model.
fn emulated_row(ctx: &mut PointCtx<'_>, e: &Example) -> Result<Row, WorkloadError> {
    use crate::testbed::workloads::run_testbed;
    if !inabench_fabric::netns::is_root() {
        return Err(WorkloadError::Invalid(
            crate::testbed::TestbedError::NotRoot.to_string(),
        ));
    }
    let n = e.worker_bw.len();
    let scale = ctx.param("rate_scale")?;
    if !(scale > 0.0 && scale <= 1.0) {
        return Err(WorkloadError::Invalid(
            "rate_scale must be in (0, 1]".into(),
        ));
    }
    let iterations = ctx.positive_count("iterations")? as u32;
    // 32-bit gradients: gradient_gbit x 1e9 / 32 of them, scaled like the rates
    let len = ((e.gradient * 1e9 / 32.0) * scale).round().max(1.0) as usize;
    let mut rates = e.worker_bw.clone();
    rates.push(e.ps_bw);
    let (system, parent) = match ctx.system() {
        "ps" => ("byteps", vec![n; n]),
        "ring_allreduce" => ("horovod", vec![n; n]),
        "aleph" => {
            let (inst, c) = example_clustering(ctx, e)?;
            check_clustering(ctx, &inst, &c)?;
            record_clustering(ctx, &inst, &c)?;
            let mut parent = vec![n; n];
            for cl in &c.clusters {
                for &m in &cl.members {
                    parent[m] = cl.aggregator;
                }
            }
            ("aleph", parent)
        }
        other => {
            return Err(WorkloadError::Invalid(format!(
                "the motivating example has ps, ring_allreduce and aleph, not `{other}`"
            )));
        }
    };
    let o = run_testbed(system, &rates, scale, iterations, len, &parent)?;
    ctx.log(
        LogLevel::Info,
        format!(
            "{} (emulated, {len} gradients per worker, rate_scale {scale}): {:.4} s per iteration, sending Gbps per machine {:.2?}, clustering {parent:?}",
            ctx.system(),
            o.comm_time,
            o.rates_gbps
        ),
    );
    ctx.log(
        LogLevel::Info,
        format!(
            "placement: all 5 machines' threads share this host's cores {:?} unpinned (senders, receivers, the TCP services and the XDP programs, which run in the NET_RX softirq of the CPU sending into their link), with other processes of the host",
            crate::testbed::cpu::allowed_cores()
        ),
    );
    let workers = &o.rates_gbps[..n];
    Ok(Row {
        comm_time: o.comm_time,
        // Gb at the paper's scale: rate (already divided by rate_scale) x time
        traffic: median(workers.iter().map(|r| r * o.comm_time).collect()),
        rate: median(workers.to_vec()),
    })
}

/// aleph-table1: the motivating example (modelled; emulated on rate-limited namespaces).
pub struct MotivatingExample;

impl Workload for MotivatingExample {
    fn id(&self) -> &'static str {
        "aleph.motivating_example"
    }

    fn fidelities(&self) -> &'static [Fidelity] {
        &[Fidelity::Modelled, Fidelity::Emulated]
    }

    fn fabric(&self, f: Fidelity) -> &'static str {
        if f == Fidelity::Emulated {
            "netns"
        } else {
            "model"
        }
    }

    fn systems(&self) -> Option<&'static [&'static str]> {
        Some(&["ps", "ring_allreduce", "aleph"])
    }

    fn run(&self, ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
        let n = ctx.count("workers")?;
        let worker_bw = (0..n)
            .map(|i| ctx.param(&format!("bw_w{i}_gbps")))
            .collect::<Result<Vec<f64>, _>>()?;
        let e = Example {
            worker_bw,
            ps_bw: ctx.param("bw_ps_gbps")?,
            gradient: ctx.param("gradient_gbit")?,
            cpu_per_worker: ctx.param("cpu_per_worker_pct")?,
            cpu_capacity: ctx.param("cpu_capacity_pct")?,
        };
        let row = match ctx.system() {
            _ if ctx.fidelity == Fidelity::Emulated => emulated_row(ctx, &e)?,
            "ps" => e.ps().map_err(invalid)?,
            "ring_allreduce" => e.ring_allreduce().map_err(invalid)?,
            "aleph" => {
                let (inst, c) = example_clustering(ctx, &e)?;
                check_clustering(ctx, &inst, &c)?;
                record_clustering(ctx, &inst, &c)?;
                e.aleph(&c).map_err(invalid)?
            }
            other => {
                return Err(WorkloadError::Invalid(format!(
                    "the motivating example has ps, ring_allreduce and aleph, not `{other}`"
                )));
            }
        };
        ctx.record("comm_time", row.comm_time);
        ctx.record("traffic", row.traffic);
        ctx.record("rate", row.rate);
        ctx.progress(1, 1);
        Ok(())
    }
}

fn setup(ctx: &PointCtx<'_>) -> Result<Setup, WorkloadError> {
    Ok(Setup {
        workers: ctx.count("workers")?,
        ps_count: ctx.count("ps_count")?,
        ps_gbps: ctx.param("ps_gbps").or_else(|_| ctx.param("nic_gbps"))?,
        nic_gbps: ctx.param("nic_gbps")?,
        ratio_mean: ctx.param("ratio_mean")?,
        sigma: ctx.param("sigma")?,
        ratio_min: ctx.param("ratio_min")?,
        ratio_max: ctx.param("ratio_max")?,
        gradient_mb: ctx.param("gradient_mb")?,
        topology: Kind::parse(&str_param(ctx, "topology")?).map_err(invalid)?,
        cpu_per_worker_pct: ctx.param("cpu_per_worker_pct")?,
        cpu_capacity_pct: ctx.param("cpu_capacity_pct")?,
        routing: Routing::parse(&str_param(ctx, "routing")?).map_err(invalid)?,
        graph: match ctx.text("graph") {
            Ok(g) => WorkerGraph::parse(&g).map_err(invalid)?,
            Err(_) => WorkerGraph::Edge,
        },
        seed: seed(ctx)?,
    })
}

/// Build the scenario, cluster and validate for ALEPH, and simulate when simulated.
fn run_sim(ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
    let s = setup(ctx)?;
    let system = System::parse(ctx.system()).map_err(invalid)?;
    let sc = Scenario::build(&s).map_err(invalid)?;
    let clustering = if system == System::Aleph {
        let c = sc.cluster();
        check_clustering(ctx, &sc.instance, &c)?;
        record_clustering(ctx, &sc.instance, &c)?;
        Some(c)
    } else {
        None
    };
    if ctx.cancelled() {
        return Err(WorkloadError::Interrupted);
    }
    let hops = scenario::gradient_hops(&sc, system, clustering.as_ref()).map_err(invalid)?;
    ctx.record_if_declared("gradient_hops", hops);
    if ctx.fidelity == Fidelity::Simulated {
        let o = scenario::simulate(&sc, system, clustering.as_ref()).map_err(invalid)?;
        ctx.record_if_declared("worker_bw_usage", o.worker_usage_gbps());
        if system == System::Horovod {
            ctx.record_if_declared("ps_bw_usage", 0.0);
        } else {
            ctx.record_if_declared("ps_bw_usage", o.ps_usage_gbps());
        }
        ctx.record_if_declared("comm_overhead", o.overhead_bytes_links / 1e9);
        ctx.record_if_declared("comm_overhead_push", o.overhead_push_bytes_links / 1e9);
        ctx.record_if_declared("iteration_time", o.iteration_time);
        ctx.counter("flows", o.flows as u64);
        ctx.counter("flow_updates", o.stats.flow_updates);
        ctx.counter("recomputes", o.stats.recomputes);
    }
    ctx.progress(1, 1);
    Ok(())
}

/// aleph-fig13: bandwidth usage of workers and PSs vs sigma.
pub struct SimBandwidth;

impl Workload for SimBandwidth {
    fn id(&self) -> &'static str {
        "aleph.sim_bandwidth"
    }
    fn fidelities(&self) -> &'static [Fidelity] {
        &[Fidelity::Simulated, Fidelity::Functional]
    }
    fn fabric(&self, f: Fidelity) -> &'static str {
        if f == Fidelity::Simulated {
            "flow"
        } else {
            "model"
        }
    }
    fn systems(&self) -> Option<&'static [&'static str]> {
        Some(&["byteps", "horovod", "aleph"])
    }
    fn run(&self, ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
        run_sim(ctx)
    }
}

/// aleph-fig14: communication overhead vs workers in two topologies.
pub struct SimOverhead;

impl Workload for SimOverhead {
    fn id(&self) -> &'static str {
        "aleph.sim_overhead"
    }
    fn fidelities(&self) -> &'static [Fidelity] {
        &[Fidelity::Simulated]
    }
    fn fabric(&self, _f: Fidelity) -> &'static str {
        "flow"
    }
    fn systems(&self) -> Option<&'static [&'static str]> {
        Some(&["byteps", "horovod", "aleph"])
    }
    fn run(&self, ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
        run_sim(ctx)
    }
}

/// aleph-fig15-16: gradient hops vs workers and vs sigma.
pub struct SimHops;

impl Workload for SimHops {
    fn id(&self) -> &'static str {
        "aleph.sim_hops"
    }
    fn fidelities(&self) -> &'static [Fidelity] {
        &[Fidelity::Simulated, Fidelity::Functional]
    }
    fn fabric(&self, f: Fidelity) -> &'static str {
        if f == Fidelity::Simulated {
            "flow"
        } else {
            "model"
        }
    }
    fn systems(&self) -> Option<&'static [&'static str]> {
        Some(&["byteps", "horovod", "aleph"])
    }
    fn run(&self, ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
        run_sim(ctx)
    }
}
