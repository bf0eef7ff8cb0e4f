//! `bench.twojobs`: two jobs sharing one switch (ATP's multi-tenant regime; spec
//! `experiments/bench/twojobs.yaml`). Job 1 and job 2 each have `workers` workers on one `sim`
//! star around one switch; job 1 all-reduces `size_bytes` and job 2 `job2_size_bytes` (default the
//! same), each from its own gradients (seeds `seed` and `seed + 1`), both starting at time 0, and
//! every worker's result is checked bit for bit against its own job's exact sum.
//!
//! A system whose switch serves several jobs at once ([`System::build_shared`]: ATP, one
//! aggregator pool for every job, a collision going on to the job's parameter server) runs both
//! jobs in one run on one switch; the cell records each job's time and the share of its packets
//! that fell back to its parameter server. A system whose switch holds one job's state runs the
//! static split its spec declares with the knob `<system>__static_split: 1` (each job its own
//! share of the switch, as its paper describes; the spec cites where): each job alone, since on
//! this star the two jobs then share nothing but the switch's forwarding, which serves every port
//! at line rate. Any other system's cell is refused with the reason.

use super::allreduce::{config_with, elements, refuse};
use inabench_core::{Fidelity, PointCtx, Workload, WorkloadError};
use inabench_ina::common::{AllReduceConfig, Setup, SetupNode, System, reference_sum};

pub struct TwoJobs;

impl Workload for TwoJobs {
    fn id(&self) -> &'static str {
        "bench.twojobs"
    }

    fn fidelities(&self) -> &'static [Fidelity] {
        &[Fidelity::Simulated]
    }

    fn fabric(&self, _f: Fidelity) -> &'static str {
        "sim"
    }

    fn systems(&self) -> Option<&'static [&'static str]> {
        Some(super::allreduce::system_names())
    }

    fn run(&self, ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
        let name = ctx.system().to_string();
        let Some(sys) = inabench_ina::system(&name) else {
            return refuse(
                ctx,
                format!(
                    "{name} is not an all-reduce system of the suite's list: two jobs on one switch are run for those only"
                ),
            );
        };
        let e1 = elements(ctx)?;
        let e2 = match ctx.param("job2_size_bytes") {
            Ok(b) if b >= 4.0 && b % 4.0 == 0.0 && b <= 4e9 => b as usize / 4,
            Ok(b) => {
                return Err(WorkloadError::BadParam(format!(
                    "`job2_size_bytes` is a whole number of int32 (a multiple of 4 bytes), not {b}"
                )));
            }
            Err(_) => e1,
        };
        let stack = inabench_ina_run::drive::host_stack_for(
            sys,
            ctx.text("host_stack").ok().as_deref(),
            crate::hostcost::core_costs(ctx, sys.name())?,
            None,
            None,
            None,
        )
        .map_err(|e| WorkloadError::Invalid(e.to_string()))?;
        let mut jobs = [config_with(ctx, sys, e1)?, config_with(ctx, sys, e2)?];
        jobs[1].seed = ctx.seed.wrapping_add(1);
        for c in &mut jobs {
            // the released client's own protocol settings, as drive::build_for_sim adds them
            let extra = stack.client_knobs(c);
            c.knobs.extend(extra);
        }
        let limit_ns = (ctx.param("time_limit_ms").unwrap_or(10_000.0) * 1e6) as u64;
        let faults = crate::fabric::faults(ctx)?;
        let shared = sys.build_shared(&[(1, &jobs[0]), (2, &jobs[1])]);
        let outcome = match shared {
            Some(Ok(setup)) => {
                let all = AllReduceConfig {
                    workers: jobs[0].workers + jobs[1].workers,
                    ..jobs[0].clone()
                };
                let setup = attach(sys, setup, &all);
                let (nodes, rep, _) = inabench_ina_run::drive::run_setup_sim_stack(
                    setup, &all, faults, &stack, limit_ns,
                )
                .map_err(crate::fabric::run_error)?;
                let count = |n: &str| inabench_ina::common::counter_sum(&nodes, n);
                let fallback = [
                    (count("collisions_job0"), count("data_in_job0")),
                    (count("collisions_job1"), count("data_in_job1")),
                ];
                let sizes = [jobs[0].workers, jobs[1].workers];
                let mut o = judge(&nodes, &sizes, &jobs, rep.finished);
                o.fallback = Some(fallback);
                o
            }
            Some(Err(why)) => return refuse(ctx, format!("two jobs on one switch: {why}")),
            None if jobs[0].knob("static_split") == Some(1.0) => {
                let mut parts = Vec::new();
                for c in &jobs {
                    let (setup, cfg) = match inabench_ina_run::drive::build_for_sim(sys, c, &stack)
                    {
                        Ok(b) => b,
                        Err(why) => {
                            return refuse(ctx, format!("{} workers: {why}", c.workers));
                        }
                    };
                    let (nodes, rep, _) = inabench_ina_run::drive::run_setup_sim_stack(
                        setup, &cfg, faults, &stack, limit_ns,
                    )
                    .map_err(crate::fabric::run_error)?;
                    parts.push(judge(
                        &nodes,
                        &[c.workers],
                        std::slice::from_ref(c),
                        rep.finished,
                    ));
                }
                Outcome {
                    wrong: parts.iter().map(|p| p.wrong).sum(),
                    unfinished: parts.iter().map(|p| p.unfinished).sum(),
                    spans: parts.iter().flat_map(|p| p.spans.clone()).collect(),
                    fallback: None,
                    finished: parts.iter().all(|p| p.finished),
                }
            }
            None => {
                return refuse(
                    ctx,
                    format!(
                        "{name}'s switch here holds one job's state (no pool two jobs could share), and its spec declares no static split from a source read here"
                    ),
                );
            }
        };
        ctx.record("refused", 0.0);
        ctx.record("wrong_workers", outcome.wrong as f64);
        ctx.record_if_declared("shared", if outcome.fallback.is_some() { 1.0 } else { 0.0 });
        if outcome.wrong > 0 {
            return Err(WorkloadError::WrongResult(format!(
                "{} workers got a sum that differs from their job's reference",
                outcome.wrong
            )));
        }
        if outcome.unfinished > 0 || !outcome.finished {
            return Err(WorkloadError::Invalid(format!(
                "the two jobs did not finish within {} ms of virtual time: {} workers without a result",
                limit_ns / 1_000_000,
                outcome.unfinished
            )));
        }
        let start = outcome.spans.iter().map(|s| s.0).min().unwrap_or(0);
        let end = outcome.spans.iter().map(|s| s.1).max().unwrap_or(0);
        ctx.record_in("time", end.saturating_sub(start).max(1) as f64, "ns")?;
        for (k, (s, e)) in outcome.spans.iter().enumerate() {
            let t = e.saturating_sub(*s).max(1) as f64;
            ctx.record_in_if_declared(&format!("job{}_time", k + 1), t, "ns")?;
        }
        if let Some(f) = outcome.fallback {
            let (c, d) = (f[0].0 + f[1].0, f[0].1 + f[1].1);
            ctx.record_if_declared("collisions", c as f64);
            ctx.record_if_declared("fallback_share", 100.0 * c as f64 / d.max(1) as f64);
            for (k, (c, d)) in f.iter().enumerate() {
                ctx.record_if_declared(
                    &format!("job{}_fallback_share", k + 1),
                    100.0 * *c as f64 / (*d).max(1) as f64,
                );
            }
        }
        Ok(())
    }
}

/// An aggregator behind the switch on its own links where the system has one
/// ([`inabench_ina_run::drive::Attached`], as `drive::build_for_sim` adds it).
fn attach(sys: &dyn System, mut setup: Setup, cfg: &AllReduceConfig) -> Setup {
    let links = sys.extra_links();
    if links > 0 {
        setup.switch = Box::new(inabench_ina_run::drive::Attached::new(
            setup.switch,
            links,
            &inabench_ina_run::drive::sim_link(cfg),
        ));
    }
    setup
}

/// What a run of the jobs gave: workers with a wrong sum, workers without a result, each job's
/// (first packet, last result) in virtual ns, and on a shared switch each job's (collisions,
/// data packets in).
struct Outcome {
    wrong: usize,
    unfinished: usize,
    spans: Vec<(u64, u64)>,
    fallback: Option<[(u64, u64); 2]>,
    /// every node done within the time limit
    finished: bool,
}

/// Check every worker's result against its job's exact sum: the workers are the first nodes,
/// `sizes[k]` of job `k` after the earlier jobs', configured by `jobs[k]`.
fn judge(
    nodes: &[SetupNode],
    sizes: &[usize],
    jobs: &[AllReduceConfig],
    finished: bool,
) -> Outcome {
    let mut o = Outcome {
        wrong: 0,
        unfinished: 0,
        spans: Vec::new(),
        fallback: None,
        finished,
    };
    let mut at = 0;
    for (k, &n) in sizes.iter().enumerate() {
        let want = reference_sum(jobs[k].seed, jobs[k].workers, jobs[k].elements);
        let (mut start, mut end) = (u64::MAX, 0u64);
        for node in nodes.iter().skip(at).take(n) {
            let SetupNode::Worker(w) = node else {
                o.unfinished += 1;
                continue;
            };
            let st = w.stats();
            match w.result() {
                Some(r) if r == want => {
                    start = start.min(st.start_ns);
                    end = end.max(st.end_ns);
                }
                Some(_) => o.wrong += 1,
                None => o.unfinished += 1,
            }
        }
        o.spans.push((start.min(end), end));
        at += n;
    }
    o.finished = finished;
    o
}
