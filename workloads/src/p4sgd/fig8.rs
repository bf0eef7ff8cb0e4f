//! `p4sgd.fig8`: the latency of an all-reduce of `elements` 32-bit values across `workers`
//! workers, over `operations` all-reduces issued one after another, for P4SGD, CPUSync,
//! SwitchML and GPUSync. Every result is checked against the exact sum. The runs themselves
//! (and their timing) are [`inabench_p4sgd::allreduce`]'s.
//!
//! Simulated (`sim` fabric, virtual time, the spec's line rate): each node's timing around its
//! state machine comes from [`inabench_p4sgd::host::Host`] with declared inputs only (the
//! spec's and the host profile's; nothing is timed on this host, so the rows are a function of
//! spec, profile and seed): the FPGA worker's MAC/PHY and transport latency each way plus one
//! 512-bit beat per frame at the FPGA clock; the switch's pipeline latency (P4SGD's program,
//! and the forwarding switch of CPUSync and GPUSync); SwitchML's host NIC latency each way and
//! its client's cost per frame (the profile's `systems.switchml.worker.frame`, on one thread for
//! the suite's own client, `switchml`, on the released client's threads for `switchml_dpdk`);
//! CPUSync's recursive doubling costing the cited MPI_Allreduce latency at the node count and
//! message size (the spec's `mpi_allreduce_us` at the level of the profile's
//! `costs.cpusync_mpi_allreduce`, [`super::models::mpi_table`]; see
//! [`inabench_p4sgd::allreduce::cpusync_frame_ns`]). Emulated (`mem` fabric): the same state
//! machines, a thread per node, real time; no model inputs apply. Emulated on `udp`
//! (`emulated_fabric: udp`, the default): the same state machines, each node on its own
//! loopback UDP socket served by a thread of its own ([`inabench_fabric::UdpThreads`], through
//! [`inabench_p4sgd::udp`]); the rows carry the label of the fabric that ran (its
//! `FabricReport::fabric`). GPUSync (simulated class only): NCCL's ring or tree with the LL
//! protocol as real messages ([`inabench_p4sgd::gpusync`]), each operation starting NCCL's base
//! latency after it is issued, each hop costing NCCL's per-hop latency (its tuning model's,
//! [`inabench_p4sgd::allreduce::gpusync_costs`]), so it grows with the node count.
//! `cpusync_mpi_tcp` and `cpusync_mpi_shm` (emulated class only): OpenMPI's own
//! `MPI_Allreduce` with the same ranks, elements and operations, one process per rank on this
//! host, over TCP on loopback or shared memory ([`inabench_p4sgd::mpi`]); `not built` (the
//! point fails with the reason) where `mpicc` is absent.

use inabench_core::{Fidelity, LogLevel, PointCtx, Workload, WorkloadError};
use inabench_p4sgd::allreduce::{
    NcclInputs, SimInputs, cpusync_frame_ns, run_cpusync, run_gpusync, run_p4sgd, run_switchml,
    switchml_config,
};
use inabench_p4sgd::driver::LatencyStats;
use inabench_p4sgd::gpusync::Algo;
use inabench_p4sgd::{mpi, udp};

fn err(e: impl std::fmt::Display) -> WorkloadError {
    WorkloadError::Invalid(e.to_string())
}

/// GPUSync's NCCL inputs from the spec: `nccl_algo` (`auto`, `tree` or `ring`) and
/// `nccl_{tree,ring}_{base,hop}_lat_us`.
pub fn nccl_inputs(ctx: &PointCtx<'_>) -> Result<NcclInputs, WorkloadError> {
    let name = ctx.text("nccl_algo")?;
    let algo = match name.as_str() {
        "auto" => None,
        other => Some(Algo::parse(other).ok_or_else(|| {
            WorkloadError::Invalid(format!(
                "nccl_algo is `auto`, `ring` or `tree`, not `{other}`"
            ))
        })?),
    };
    let us = |k: &str| -> Result<u64, WorkloadError> {
        let v = ctx.param(k)?;
        if !(v.is_finite() && v >= 0.0) {
            return Err(WorkloadError::Invalid(format!("{k} must be >= 0")));
        }
        Ok((v * 1e3).round() as u64)
    };
    Ok(NcclInputs {
        algo,
        tree: (us("nccl_tree_base_lat_us")?, us("nccl_tree_hop_lat_us")?),
        ring: (us("nccl_ring_base_lat_us")?, us("nccl_ring_hop_lat_us")?),
    })
}

pub struct Fig8;

impl Workload for Fig8 {
    fn id(&self) -> &'static str {
        "p4sgd.fig8"
    }

    fn fidelities(&self) -> &'static [Fidelity] {
        &[Fidelity::Simulated, Fidelity::Emulated]
    }

    fn fabric(&self, f: Fidelity) -> &'static str {
        if f == Fidelity::Emulated {
            "udp"
        } else {
            "sim"
        }
    }

    fn point_fabric(&self, f: Fidelity, point: &inabench_core::plan::Point) -> &'static str {
        // the label its `emulated_fabric` parameter picks (the run's manifest and its udp
        // socket probe follow it), as `run` picks it
        if f == Fidelity::Emulated {
            crate::fabric::planned_label(point, crate::fabric::Emulated::Udp, false)
        } else {
            self.fabric(f)
        }
    }

    fn systems(&self) -> Option<&'static [&'static str]> {
        Some(&[
            "p4sgd",
            "cpusync",
            "gpusync",
            "switchml",
            "switchml_dpdk",
            "cpusync_mpi_tcp",
            "cpusync_mpi_shm",
        ])
    }

    fn run(&self, ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
        let workers = ctx.count("workers")?;
        let elements = ctx.count("elements")?;
        let ops = ctx.count("operations")? as u64;
        if ctx.param("element_bits")? != 32.0 {
            return Err(WorkloadError::Invalid(
                "the switch program sums 32-bit values: element_bits must be 32".into(),
            ));
        }
        let rate_bps = ctx.param("line_rate_gbps")? * 1e9;
        let seed = ctx.seed;
        let simulated = ctx.fidelity == Fidelity::Simulated;
        let system = ctx.system().to_string();
        let si = if simulated {
            // CPUSync's cited MPI_Allreduce latency at this node count and message size (read
            // for CPUSync's rows only)
            let mpi_ns = if system == "cpusync" {
                let mpi = super::models::mpi_table(ctx)?
                    .ok_or_else(|| WorkloadError::Param("mpi_allreduce_us".into()))?;
                let ns = mpi
                    .latency_ns(workers, (elements * 4) as f64)
                    .map_err(|e| WorkloadError::Invalid(e.to_string()))?;
                Some(ns.round() as u64)
            } else {
                None
            };
            // the suite's own SwitchML client: one thread at the profile's cost per frame
            let host_frame_ns = if system == "switchml" {
                crate::hostcost::core_costs(ctx, "switchml")?
                    .ok_or_else(|| {
                        err(inabench_ina::hoststack::StackError::NoCosts {
                            system: "switchml".into(),
                            stack: "own".into(),
                        })
                    })?
                    .core_ns()
            } else {
                0
            };
            Some(SimInputs {
                rate_bps,
                link_latency_ns: ctx.count("link_latency_ns")? as u64,
                switch_latency_ns: ctx.count("switch_latency_ns")? as u64,
                fpga_nic_ns: ctx.count("fpga_nic_ns")? as u64,
                fpga_beat_ns: (1e3 / ctx.param("fpga_clock_mhz")?).round() as u64,
                host_nic_ns: ctx.count("host_nic_ns")? as u64,
                timeout_ns: (ctx.param("timeout_us")? * 1e3) as u64,
                // declared, never measured here: the rows are the same at every repetition
                host_frame_ns,
                mpi_allreduce_ns: mpi_ns,
            })
        } else {
            None
        };
        let timeout_ns = match &si {
            Some(s) => s.timeout_ns,
            None => (ctx.param("emulated_timeout_us")? * 1e3) as u64,
        };
        // emulated: `udp` (a loopback socket and a thread per node, the kernel's UDP path) or
        // `mem` (in-process channels, a thread per node)
        let on_udp = if simulated {
            false
        } else {
            use crate::fabric::{Emulated, emulated_fabric};
            emulated_fabric(ctx, Emulated::Udp)? == Emulated::Udp
        };
        let uopt = udp::UdpOptions::default();
        let out = match system.as_str() {
            "p4sgd" if on_udp => {
                udp::run_p4sgd(workers, elements, ops, seed, timeout_ns, &uopt)
                    .map_err(err)?
                    .0
            }
            "cpusync" if on_udp => {
                udp::run_cpusync(workers, elements, ops, seed, &uopt).map_err(err)?
            }
            "switchml" if on_udp => udp::run_switchml(
                &switchml_config(workers, ops, seed, rate_bps, timeout_ns),
                &uopt,
            )
            .map_err(err)?,
            "p4sgd" => {
                run_p4sgd(workers, elements, ops, seed, si.as_ref(), timeout_ns).map_err(err)?
            }
            "cpusync" => run_cpusync(workers, elements, ops, seed, si.as_ref()).map_err(err)?,
            "switchml" => {
                run_switchml(workers, ops, seed, rate_bps, si.as_ref(), timeout_ns).map_err(err)?
            }
            "switchml_dpdk" => {
                let Some(si) = si.as_ref() else {
                    ctx.log(
                        LogLevel::Info,
                        "switchml_dpdk is SwitchML behind the modelled DPDK client: simulated class only",
                    );
                    return Ok(());
                };
                // the released client at the host profile's cost per frame and core (the one
                // SwitchML DPDK client cost of the suite, `systems.switchml.worker.frame`) and
                // threads; nothing measured here
                let costs = crate::hostcost::core_costs(ctx, "switchml")?.ok_or_else(|| {
                    err(inabench_ina::hoststack::StackError::NoCosts {
                        system: "switchml".into(),
                        stack: "dpdk".into(),
                    })
                })?;
                let stack = inabench_ina::hoststack::DpdkStack::from_costs(
                    &inabench_ina::switchml::SwitchMl,
                    costs,
                );
                let (o, st) = inabench_p4sgd::allreduce::run_switchml_dpdk(
                    workers, ops, seed, rate_bps, si, timeout_ns, &stack,
                )
                .map_err(err)?;
                ctx.log(
                    LogLevel::Info,
                    format!(
                        "switchml_dpdk: released client's {} cores at the host profile's {} ns a frame and core, {}-packet transmit buffer, {} us drain, each all-reduce a job whose one packet leaves at once; {} frames buffered, mean wait {:.2} us",
                        stack.cores,
                        costs.frame_ns,
                        stack.tx_burst,
                        stack.drain_ns as f64 / 1e3,
                        st.buffered,
                        st.mean_wait_us().unwrap_or(0.0)
                    ),
                );
                if let Some(w) = st.mean_wait_us() {
                    ctx.record_if_declared("stack_wait_us", w);
                }
                o
            }
            "cpusync_mpi_tcp" | "cpusync_mpi_shm" if simulated => {
                ctx.log(
                    LogLevel::Info,
                    format!("{system} is OpenMPI measured on this host: emulated class only"),
                );
                return Ok(());
            }
            "cpusync_mpi_tcp" | "cpusync_mpi_shm" => {
                let transport = if system == "cpusync_mpi_tcp" {
                    mpi::Transport::TcpLoopback
                } else {
                    mpi::Transport::SharedMemory
                };
                let run = mpi::MpiRun {
                    ranks: workers,
                    elements,
                    ops,
                    warmup: ctx.count("mpi_warmup_ops")? as u64,
                    transport,
                    limit: std::time::Duration::try_from_secs_f64(ctx.param("mpi_limit_s")?)
                        .map_err(|e| err(format!("mpi_limit_s: {e}")))?,
                    corrupt: false,
                };
                let o = mpi::run(&run).map_err(|e| match e {
                    mpi::MpiError::NotBuilt(why) => {
                        WorkloadError::Invalid(format!("{system} is not built here: {why}"))
                    }
                    other => err(format!("{system}: {other}")),
                })?;
                ctx.log(
                    LogLevel::Info,
                    format!(
                        "{system}: {} MPI_Allreduce over {transport:?}, {workers} ranks on this host's {} cores",
                        o.version,
                        std::thread::available_parallelism().map_or(0, |n| n.get()),
                    ),
                );
                // no fabric of the suite: OpenMPI's own transport between processes (the rows
                // keep the class's label)
                inabench_p4sgd::allreduce::Outcome {
                    fabric: "",
                    latencies: o.latencies,
                    wrong: o.wrong,
                    unfinished: 0,
                    retransmissions: 0,
                }
            }
            "gpusync" if !simulated => {
                // no GPU here: GPUSync runs in the simulated class only
                ctx.log(
                    LogLevel::Info,
                    "gpusync needs GPUs; it is simulated (NCCL's algorithm as messages) only",
                );
                return Ok(());
            }
            "gpusync" => {
                let nccl = nccl_inputs(ctx)?;
                let si = si
                    .as_ref()
                    .ok_or_else(|| err("gpusync runs in the simulated class only"))?;
                let (algo, base, hop) = nccl.pick(workers);
                ctx.log(
                    LogLevel::Info,
                    format!(
                        "gpusync: NCCL {algo:?}/LL, {} hops, base {base} ns, per hop {hop} ns (NCCL's tuning model), every hop at that latency",
                        algo.hops(workers),
                    ),
                );
                run_gpusync(workers, elements, ops, seed, si, &nccl).map_err(err)?
            }
            other => {
                return Err(WorkloadError::Invalid(format!(
                    "system `{other}` is not part of p4sgd.fig8"
                )));
            }
        };
        if let (Some(si), "cpusync") = (&si, system.as_str())
            && let Some(l) = si.mpi_allreduce_ns
        {
            ctx.log(
                    LogLevel::Info,
                    format!(
                        "cpusync: recursive doubling at the cited MPI_Allreduce latency {:.2} us ({} exchanges, {} ns a frame at each end, no NIC delay: OSU's latency contains it)",
                        l as f64 / 1e3,
                        inabench_p4sgd::allreduce::cpusync_exchanges(workers),
                        cpusync_frame_ns(si, workers, l)
                    ),
                );
        }
        if !out.fabric.is_empty() {
            // the rows' label is the fabric that ran (`sim`, `mem`, `udp`)
            ctx.fabric = out.fabric;
        }
        ctx.counter("retransmissions", out.retransmissions);
        if out.wrong > 0 {
            return Err(WorkloadError::WrongResult(format!(
                "{system}: {} results differ from the reference sum or were delivered twice",
                out.wrong
            )));
        }
        if out.unfinished > 0 {
            return Err(WorkloadError::Invalid(format!(
                "{system}: {} workers did not finish their {ops} all-reduces",
                out.unfinished
            )));
        }
        let s = LatencyStats::of(&out.latencies)
            .ok_or_else(|| WorkloadError::Invalid(format!("{system}: no latency samples")))?;
        ctx.record("latency_mean", s.mean_us);
        ctx.record("latency_p50", s.p50_us);
        ctx.record("latency_p99", s.p99_us);
        ctx.record("latency_std", s.std_us);
        Ok(())
    }
}
