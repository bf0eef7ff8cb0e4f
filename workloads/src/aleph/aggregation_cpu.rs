//! `aleph.aggregation_cpu` (aleph-fig5, aleph-fig6 and aleph-table2): aggregation throughput,
//! loss and CPU of the data paths (XDP driver and generic mode, TCP, segmented TCP, user-space UDP)
//! under CPU affinity. The measurements are [`inabench_aleph::testbed::cpu`].

use super::testbed_training::err;
use inabench_aleph::testbed::TestbedError;
use inabench_aleph::testbed::cpu;
use inabench_core::event::LogLevel;
use inabench_core::{Fidelity, PointCtx, Workload, WorkloadError};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

static CPU_CACHE: Mutex<Option<HashMap<String, cpu::Measure>>> = Mutex::new(None);

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
            "aleph_tcp_segmented",
            "aleph_udp",
        ])
    }
    fn run(&self, ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
        use cpu::{Path, measure};
        if !inabench_fabric::netns::is_root() {
            return Err(WorkloadError::Invalid(TestbedError::NotRoot.to_string()));
        }
        let system = ctx.system().to_string();
        let path = Path::parse(&system)
            .ok_or_else(|| WorkloadError::Invalid(format!("no data path `{system}`")))?;
        let available = std::thread::available_parallelism().map_or(1, |n| n.get());
        let placement = |cores: usize, load: bool| {
            format!(
                "placement: the whole process is limited by affinity to the first {cores} of the cores it may use ({:?}); the 2 senders{}{} share them unpinned (on veth the receive path and the XDP program run in the NET_RX softirq of the sending CPU), and other processes of the host may run there too",
                cpu::allowed_cores(),
                if matches!(path, Path::Tcp | Path::TcpSegmented) {
                    ", the TCP aggregation service's threads and their TCP receive paths"
                } else {
                    ", the XDP program"
                },
                if load { " and the background load" } else { "" }
            )
        };
        // `placement: isolated` (aleph-fig5 and aleph-table2): the aggregator on the first
        // `cores` cores, the senders on the others (see cpu::measure_isolated)
        let isolated = ctx.text("placement").ok().as_deref() == Some("isolated");
        let isolated_line = |cores: usize| -> Result<String, WorkloadError> {
            let (node, other) = cpu::isolated_split(cores).map_err(err)?;
            Ok(format!(
                "placement: isolated; measured cores {node:?}: the aggregator's receive path (threaded NAPI, one kernel thread per link end at SCHED_FIFO 50, before ordinary threads as a softirq would be; {}) and nothing else of this run; cores {other:?}: the 2 senders, the members' receive paths{} and the harness; other processes of this shared host may run on any core (node_busy counts everything on the measured cores)",
                match path {
                    Path::Xdp(_) => "the XDP program runs there",
                    Path::Tcp | Path::TcpSegmented =>
                        "the kernel's TCP receive) and the TCP aggregation service's threads (readers, summer, writers; SCHED_FIFO 40",
                    Path::Udp =>
                        "the UDP receive) and the user-space service thread (recvmmsg, sum, sendmmsg; SCHED_FIFO 40",
                },
                if matches!(path, Path::Tcp | Path::TcpSegmented) {
                    ", the bridge ports' receive paths (the switch)"
                } else {
                    ""
                }
            ))
        };
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
            let m = match path {
                Path::Xdp(mode) if isolated => {
                    if cores != 1 {
                        return Err(WorkloadError::Invalid(
                            "placement isolated measures one core (cores: 1)".into(),
                        ));
                    }
                    ctx.log(
                        LogLevel::Info,
                        format!(
                            "placement: the aggregator's receive path (threaded NAPI, normal priority; the XDP program runs there) and the background load on core {:?}; the 2 senders and the members' receive paths on the others",
                            cpu::allowed_cores().first()
                        ),
                    );
                    cpu::measure_isolated_loss(mode, secs, offered, load).map_err(err)?
                }
                _ => {
                    ctx.log(LogLevel::Info, placement(cores, true));
                    cpu::measure_loaded(path, cores, secs, Some(offered), load).map_err(err)?
                }
            };
            ctx.log(LogLevel::Info, format!("{system}, load {load}%: {m:?}"));
            ctx.record("packet_loss", m.loss_pct);
            // the measured cores' busy share: in the isolated placement the aggregator's core
            // only (the senders' core is in host_cores), otherwise the `cores` shared cores
            ctx.record("cpu_usage", m.node_busy / cores as f64 * 100.0);
            // the aggregator's own share of it: its receive path's CPU (isolated: the NAPI
            // threads where the program runs; shared: the NET_RX softirq time), the load the
            // paper's loss comes from
            ctx.record_if_declared("agg_cpu_pct", m.cpu_cores / cores as f64 * 100.0);
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
            let measure = |offered: Option<f64>| {
                if isolated {
                    cpu::measure_isolated(path, cores, step, offered)
                } else {
                    measure(path, cores, step, offered)
                }
            };
            ctx.log(
                LogLevel::Info,
                if isolated {
                    isolated_line(cores)?
                } else {
                    placement(cores, false)
                },
            );
            // as much as the senders can offer first; if that loses more than the limit, a
            // bisection of the offered load between nothing and what they offered finds the
            // highest rate aggregated within the limit
            let first = measure(None).map_err(err)?;
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
                    let m = measure(Some(offered)).map_err(err)?;
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
            ctx.record_if_declared("node_busy", m.node_busy);
            // the aggregator's own CPU at that rate: below 1 core per measured core, the
            // senders (not the aggregator) bound the rate
            ctx.record_if_declared("cpu_cores", m.cpu_cores);
            if m.cpu_cores > 0.0 {
                ctx.record_if_declared("gbps_per_agg_core", m.gbps / m.cpu_cores);
            }
        } else {
            // aleph-table2: CPU while aggregating at the target rate times rate_scale, with
            // every core of this host (shared) or the aggregator on `measured_cores` of them
            // and the senders on the rest (isolated)
            let target = ctx.param("throughput_gbps")? * ctx.param("rate_scale")?;
            let secs = ctx.param("duration_s")?;
            let measured = if isolated {
                ctx.count("measured_cores")?
            } else {
                available
            };
            let k = format!(
                "{}|{system}|{}|{}|{target}|{secs}|{isolated}|{measured}",
                ctx.experiment, ctx.repetition, ctx.warmup
            );
            let cached = CPU_CACHE
                .lock()
                .ok()
                .and_then(|c| c.as_ref().and_then(|m| m.get(&k).copied()));
            let m = match cached {
                Some(m) => m,
                None => {
                    let d = Duration::from_secs_f64(secs);
                    let m = if isolated {
                        cpu::measure_isolated(path, measured, d, Some(target))
                    } else {
                        measure(path, available, d, Some(target))
                    }
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
            ctx.log(
                LogLevel::Info,
                if isolated {
                    isolated_line(measured)?
                } else {
                    placement(available, false)
                },
            );
            ctx.record("cpu_cores", m.cpu_cores);
            ctx.record("achieved_gbps", m.gbps);
            ctx.record_if_declared("host_cores", m.host_cores);
            ctx.record_if_declared("node_busy", m.node_busy);
        }
        ctx.progress(1, 1);
        Ok(())
    }
}
