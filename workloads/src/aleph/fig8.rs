//! `aleph.multicast_cpu` (aleph-fig8): CPU usage of the Gradient Forwarder's multicast vs
//! throughput (`panel: sweep`) and its maximum throughput (`panel: max`), XDP against a TCP
//! forwarder in user space. The measurement (topology, threads, what is counted) is
//! [`inabench_aleph::testbed::multicast`]; this workload reads the spec, searches the maximum
//! and records.

use super::testbed_training::err;
use inabench_aleph::testbed::TestbedError;
use inabench_aleph::testbed::multicast::{
    Measure, Options, SEGMENTS, System, measure, split_cores,
};
use inabench_core::event::LogLevel;
use inabench_core::{Fidelity, PointCtx, Workload, WorkloadError};
use std::time::Duration;

/// Loss above which a step of the `max` panel no longer counts as sustained (%).
pub const LOSS_LIMIT_PCT: f64 = 1.0;
/// Offered rate of the `max` panel's first step (Gbit/s at the paper's scale).
pub const MAX_FIRST_GBPS: f64 = 10.0;
/// Factor between the `max` panel's steps.
pub const MAX_STEP: f64 = 1.5;
/// Node CPU usage (%) below which the `max` panel's limit was not the node's CPU: its threads run
/// at real-time priority, which the kernel throttles to 95% of each core by default
/// (`sched_rt_runtime_us`), and the run's window includes the drain.
pub const SATURATED_PCT: f64 = 85.0;
/// A `max` step whose achieved throughput is at most this factor above the previous step's has
/// saturated (past capacity, the sender or the node holds back what is not carried: TCP without
/// loss, and the sender of both systems when its core is busy).
pub const MIN_GROWTH: f64 = 1.05;
/// Bisection steps between the last sustained and the first failed rate.
pub const MAX_REFINE: usize = 2;

/// aleph-fig8: CPU usage of the multicast vs throughput, and its maximum throughput.
pub struct MulticastCpu;

impl Workload for MulticastCpu {
    fn id(&self) -> &'static str {
        "aleph.multicast_cpu"
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
        if !inabench_fabric::netns::is_root() {
            return Err(WorkloadError::Invalid(TestbedError::NotRoot.to_string()));
        }
        let name = ctx.system().to_string();
        let system = System::parse(&name)
            .ok_or_else(|| WorkloadError::Invalid(format!("no multicast system `{name}`")))?;
        let receivers = ctx.positive_count("receivers")?;
        let cores = ctx.positive_count("cores")?;
        let scale = ctx.param("rate_scale")?;
        if !(scale > 0.0 && scale <= 1.0) {
            return Err(WorkloadError::Invalid(
                "rate_scale must be in (0, 1]".into(),
            ));
        }
        let secs = ctx.param("duration_s")?;
        if !(secs.is_finite() && secs > 0.0) {
            return Err(WorkloadError::Invalid("duration_s must be positive".into()));
        }
        let (node_cores, other_cores) = split_cores(cores).map_err(err)?;
        ctx.log(
            LogLevel::Info,
            format!(
                "{name}: the node on cores {node_cores:?}, sender and receivers on {other_cores:?}"
            ),
        );
        let opts = |paper_gbps: f64| Options {
            system,
            receivers,
            egress_gbps: paper_gbps * scale,
            duration: Duration::from_secs_f64(secs),
            node_cores: node_cores.clone(),
            other_cores: other_cores.clone(),
            segments: SEGMENTS,
        };
        let panel = ctx.text("panel")?;
        match panel.as_str() {
            "sweep" => {
                let g = ctx.param("multicast_gbps")?;
                let m = measure(&opts(g)).map_err(err)?;
                ctx.log(LogLevel::Info, format!("{name} at {g} Gbit/s: {m:?}"));
                ctx.record("cpu_usage", m.cpu_usage_pct);
                ctx.record("achieved_gbps", m.achieved_gbps / scale);
                ctx.counter(
                    "copies_lost",
                    (m.sent * receivers as u64).saturating_sub(m.delivered),
                );
            }
            "max" => {
                let mut best: Option<(f64, Measure)> = None;
                // the last offer sustained with growth, and the first lost beyond the limit
                let (mut lo, mut lost): (Option<f64>, Option<f64>) = (None, None);
                let mut prev: Option<f64> = None;
                let mut g = MAX_FIRST_GBPS;
                // up by a factor until a step loses more than the limit or saturates
                while !ctx.cancelled() && g <= 1e5 {
                    let m = measure(&opts(g)).map_err(err)?;
                    ctx.log(
                        LogLevel::Info,
                        format!("{name}, max, offered {g:.1} Gbit/s: {m:?}"),
                    );
                    let sustained = m.loss_pct <= LOSS_LIMIT_PCT;
                    if sustained && best.is_none_or(|(_, b)| m.achieved_gbps > b.achieved_gbps) {
                        best = Some((g, m));
                    }
                    if !sustained {
                        lost = Some(g);
                        break;
                    }
                    // saturated: a larger offer gains (almost) nothing
                    if prev.is_some_and(|p| m.achieved_gbps <= p * MIN_GROWTH) {
                        break;
                    }
                    (lo, prev) = (Some(g), Some(m.achieved_gbps));
                    g *= MAX_STEP;
                }
                // a bisection between the last sustained and the first lost offer
                if let (Some(mut lo), Some(mut hi)) = (lo, lost) {
                    for _ in 0..MAX_REFINE {
                        if ctx.cancelled() {
                            break;
                        }
                        let mid = (lo + hi) / 2.0;
                        let m = measure(&opts(mid)).map_err(err)?;
                        ctx.log(
                            LogLevel::Info,
                            format!("{name}, max, offered {mid:.1} Gbit/s: {m:?}"),
                        );
                        if m.loss_pct <= LOSS_LIMIT_PCT {
                            lo = mid;
                            if best.is_none_or(|(_, b)| m.achieved_gbps > b.achieved_gbps) {
                                best = Some((mid, m));
                            }
                        } else {
                            hi = mid;
                        }
                    }
                }
                let Some((at, m)) = best else {
                    return Err(WorkloadError::Invalid(format!(
                        "{name} lost more than {LOSS_LIMIT_PCT}% already at {MAX_FIRST_GBPS} Gbit/s"
                    )));
                };
                // the highest sustained throughput is a lower bound of the node's maximum
                // whatever limited it; it is the node's maximum only when the node's cores were
                // what ran out
                ctx.record_if_declared("max_multicast_bound_gbps", m.achieved_gbps / scale);
                if m.cpu_usage_pct < SATURATED_PCT {
                    ctx.log(
                        LogLevel::Info,
                        format!(
                            "{name}: max_multicast_gbps not measured: at its highest sustained throughput ({:.1} Gbit/s, offered {at:.1}) the node used {:.0}% of its cores (< {SATURATED_PCT}%), so the limit was elsewhere (the sender's and receivers' cores, or other processes); recorded as max_multicast_bound_gbps, a lower bound of the node's maximum",
                            m.achieved_gbps / scale,
                            m.cpu_usage_pct
                        ),
                    );
                } else {
                    ctx.record("max_multicast_gbps", m.achieved_gbps / scale);
                }
            }
            other => {
                return Err(WorkloadError::Invalid(format!(
                    "panel must be sweep or max (got `{other}`)"
                )));
            }
        }
        ctx.progress(1, 1);
        Ok(())
    }
}
