//! `aleph.packet_latency` (aleph-fig7): mean communication time of a 128-gradient packet vs
//! packet rate, XDP against the TCP aggregation service. The measurement is
//! [`inabench_aleph::testbed::latency`].

use super::testbed_training::err;
use inabench_aleph::testbed::TestbedError;
use inabench_core::event::LogLevel;
use inabench_core::{Fidelity, PointCtx, Workload, WorkloadError};
use std::time::Duration;

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
        use inabench_aleph::testbed::latency;
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
        ctx.log(
            LogLevel::Info,
            format!(
                "placement: the process may use cores {:?}, unpinned; the sender thread, the thread receiving the aggregates and the {} share them (on veth the receive path runs in the NET_RX softirq of the sending CPU)",
                inabench_aleph::testbed::cpu::allowed_cores(),
                if ctx.system() == "aleph_tcp" {
                    "aggregator's thread, its TCP receive path"
                } else {
                    "XDP program"
                }
            ),
        );
        if let Some(why) = l.not_sustained(rate) {
            return Err(WorkloadError::Invalid(format!(
                "{rate} packets/s is not sustained on this host ({why}); the point is not a measurement of the communication time at that rate"
            )));
        }
        if l.returned == 0 {
            return Err(WorkloadError::WrongResult(format!(
                "none of {} packets came back aggregated",
                l.sent
            )));
        }
        ctx.record("comm_time", l.mean_us);
        ctx.record("achieved_pps", l.achieved_pps);
        ctx.record_if_declared("returned_pps", l.returned_pps);
        ctx.counter("lost", l.sent - l.returned);
        ctx.progress(1, 1);
        Ok(())
    }
}
