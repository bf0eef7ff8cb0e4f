//! The large-scale simulation's workloads: `aleph.sim_bandwidth` (aleph-fig13),
//! `aleph.sim_overhead` (aleph-fig14) and `aleph.sim_hops` (aleph-fig15-16), on the scenarios of
//! [`inabench_aleph::scenario`]; and the clustering checks they share with aleph-table1.
//!
//! Every clustering M-WCHA returns is checked by [`mwcha::validate`] before it is used; a
//! violation fails the point with [`WorkloadError::WrongResult`]. Bandwidth draws and M-WCHA's
//! coin flips are seeded with the spec's `seed` plus the repetition, so the three systems of a
//! point see the same workers.

use inabench_aleph::AlephError;
use inabench_aleph::mwcha::{self, Clustering, Instance};
use inabench_aleph::scenario::{self, Routing, Scenario, Setup, System, WorkerGraph};
use inabench_aleph::topo::Kind;
use inabench_core::event::LogLevel;
use inabench_core::{Fidelity, PointCtx, Scalar, Workload, WorkloadError};

pub(super) fn invalid(e: AlephError) -> WorkloadError {
    WorkloadError::Invalid(e.to_string())
}

fn str_param(ctx: &PointCtx<'_>, name: &str) -> Result<String, WorkloadError> {
    match ctx.point.params.get(name) {
        Some(Scalar::Str(s)) => Ok(s.clone()),
        _ => Err(WorkloadError::Param(name.to_string())),
    }
}

pub(super) fn seed(ctx: &PointCtx<'_>) -> Result<u64, WorkloadError> {
    Ok(ctx.count("seed")? as u64 + u64::from(ctx.repetition))
}

/// Validate a clustering, record the violation counts the spec declares, and fail on any.
pub(super) fn check_clustering(
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
pub(super) fn record_clustering(
    ctx: &mut PointCtx<'_>,
    inst: &Instance,
    c: &Clustering,
) -> Result<(), WorkloadError> {
    ctx.record_if_declared("aggregators", c.aggregators() as f64);
    ctx.record_if_declared("ps_senders", c.senders() as f64);
    if ctx.declares("literal_line23_violations") {
        // Theorem 2 under Alg. 1's line 23 read as written (no stop at g_w): the share of
        // `literal_draws` M-WCHA draws on this instance that overfill some aggregator
        let draws = ctx.positive_count("literal_draws")?;
        let (bad, n) =
            mwcha::literal_line23_violations(inst, &mwcha::Options::default(), seed(ctx)?, draws)
                .map_err(|e| WorkloadError::WrongResult(e.to_string()))?;
        ctx.record("literal_line23_violations", 100.0 * bad as f64 / n as f64);
        ctx.counter("literal_draws", n as u64);
    }
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
