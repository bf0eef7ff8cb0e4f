//! `netreduce.table1`: NetReduce's Table 1 compares host I/O stacks (RoCE, ATP's parallel DMA,
//! SwitchML's DPDK) by the CPU they take, the throughput they reach and their RTT. Here the same
//! RoCEv2 RC transfer ([`inabench_ina::stream`]) runs on the `udp` fabric, a process per host,
//! under three host I/O models of [`inabench_fabric::udp::IoModel`] (spec:
//! `experiments/netreduce/table1.yaml`):
//!
//! - `event_driven`: batched and event-driven (sleep in `poll`, batch with `recvmmsg` and
//!   `sendmmsg`): the suite's software stand-in for the completion-driven way a RoCE NIC is
//!   used; it is not RoCE, whose transport runs in the NIC (the `roce` row needs an RDMA NIC and
//!   the hardware class);
//! - `parallel_dma`: ATP-style multi-threaded I/O (receive and send threads around the protocol
//!   thread);
//! - `dpdk`: busy polling, never sleeping.
//!
//! The `roce` row is RoCE itself: one RoCEv2 RC transfer between two hosts' verbs QPs, measured
//! the same way. It spans two agents (one a host: `ranks`), which exchange their QPs through the
//! runner; its body is [`super::table1_roce`]. Its rows are `hardware` on a NIC's RDMA engine and
//! `emulated` (fabric `rdma-rxe`) on Soft-RoCE, as the device's provider says; the hardware class
//! runs only this row, and it never runs in the runner's own process (`not_here`).
//!
//! Each point runs twice: a bulk transfer of `total_mb` in messages of `message_kb` with a window
//! of `window` messages (throughput, CPU), then 200 one-packet messages one at a time (RTT,
//! median). CPU is the mean over the two hosts of each host process's node threads' CPU time
//! over its wall time, in percent of one core.

use inabench_core::workload::{Rank, RankExchange};
use inabench_core::{Fidelity, PointCtx, Workload, WorkloadError};
use inabench_ina_run::udp_node::{NodeJob, Spawn, UdpOutcome, run_udp};

pub struct Table1;

/// The row that is RoCE itself (two hosts' verbs QPs).
pub const ROCE: &str = "roce";

fn io_of(system: &str) -> Option<&'static str> {
    match system {
        "event_driven" => Some("event"),
        "parallel_dma" => Some("threads"),
        "dpdk" => Some("busy_poll"),
        _ => None,
    }
}

impl Table1 {
    fn transfer(
        ctx: &PointCtx<'_>,
        io: &str,
        bytes: usize,
        msg_packets: f64,
        window: f64,
        mtu: usize,
    ) -> Result<UdpOutcome, WorkloadError> {
        let job = NodeJob {
            system: "rc_stream".into(),
            node: 0,
            workers: 2,
            elements: bytes.div_ceil(4),
            seed: ctx.seed,
            line_rate_bps: 100e9,
            mtu,
            timeout_ns: 20_000_000,
            knobs: vec![
                ("msg_packets".into(), msg_packets),
                ("window".into(), window),
            ],
            io: io.into(),
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_delay_ns: 0,
            fault_seed: ctx.seed,
            deadline_ms: 60_000,
            bind_any: false,
            addresses: None,
        };
        let out = run_udp(&job, &Spawn::detect()).map_err(crate::fabric::run_error)?;
        let hosts: Vec<_> = out.nodes.iter().filter(|n| n.is_worker).collect();
        if !out.finished {
            return Err(WorkloadError::Invalid(format!(
                "the transfer did not finish within 60 s ({io} I/O)"
            )));
        }
        if hosts.iter().any(|h| !h.correct) {
            return Err(WorkloadError::WrongResult(
                "the receiver got bytes the sender did not write".into(),
            ));
        }
        Ok(out)
    }
}

impl Workload for Table1 {
    fn id(&self) -> &'static str {
        "netreduce.table1"
    }

    fn fidelities(&self) -> &'static [Fidelity] {
        &[Fidelity::Hardware, Fidelity::Emulated]
    }

    fn fabric(&self, f: Fidelity) -> &'static str {
        match f {
            Fidelity::Hardware => "roce",
            _ => "udp",
        }
    }

    fn systems(&self) -> Option<&'static [&'static str]> {
        Some(&["event_driven", "parallel_dma", "dpdk", ROCE])
    }

    fn ranks(&self, system: &str) -> usize {
        if system == ROCE { 2 } else { 1 }
    }

    fn not_here(&self, class: Fidelity, system: &str, agents: bool) -> Option<String> {
        if class == Fidelity::Hardware && system != ROCE {
            return Some(format!(
                "`{system}` is a software host I/O model on the udp fabric: its rows are emulated only"
            ));
        }
        // in one process the roce row runs in neither class: its rank bodies need two agents,
        // on Soft-RoCE (emulated) as on a RoCE NIC (hardware)
        if system == ROCE && !agents {
            return Some("needs two hosts' RDMA devices, reached through agents (a testbed's `launcher:` or --launcher local|ssh|slurm); on Soft-RoCE its rows are emulated, fabric rdma-rxe".to_string());
        }
        None
    }

    fn run_rank(
        &self,
        ctx: &mut PointCtx<'_>,
        rank: &Rank<'_>,
        exchange: &mut dyn RankExchange,
    ) -> Result<(), WorkloadError> {
        if ctx.system() != ROCE {
            return Err(WorkloadError::Invalid(format!(
                "`{}` runs in one process: it does not span agents",
                ctx.system()
            )));
        }
        super::table1_roce::run_rank(ctx, rank, exchange)
    }

    fn run(&self, ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
        if ctx.system() == ROCE {
            return Err(WorkloadError::Invalid(
                "the roce row is one transfer between two hosts' RDMA devices: it runs in two agents (a testbed's `launcher:` or --launcher local|ssh|slurm), never in one process".into(),
            ));
        }
        if ctx.fidelity == Fidelity::Hardware {
            return Err(WorkloadError::Invalid(format!(
                "`{}` is a software host I/O model on the udp fabric: its rows are emulated only",
                ctx.system()
            )));
        }
        let io = io_of(ctx.system()).ok_or_else(|| {
            WorkloadError::Invalid(format!("no host I/O model for `{}`", ctx.system()))
        })?;
        let mtu = ctx.param("mtu").unwrap_or(1024.0) as usize;
        let message = (ctx.param("message_kb")? * 1024.0) as usize;
        let total = (ctx.param("total_mb").unwrap_or(16.0) * 1048576.0) as usize;
        let window = ctx.param("window").unwrap_or(4.0);
        if mtu == 0 || message < mtu || total < message {
            return Err(WorkloadError::Invalid(format!(
                "need mtu <= message_kb x 1024 <= total_mb x 2^20 (got {mtu}, {message}, {total})"
            )));
        }
        if io == "busy_poll" {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            if cores < 3 {
                ctx.log(
                    inabench_core::LogLevel::Warn,
                    format!(
                        "busy polling: two spinning hosts and a switch process share {cores} cores, so the pollers take CPU from the switch (DPDK gets dedicated cores)"
                    ),
                );
            }
        }
        let msg_packets = (message / mtu) as f64;
        let bulk = Self::transfer(ctx, io, total, msg_packets, window, mtu)?;
        let hosts: Vec<_> = bulk.nodes.iter().filter(|n| n.is_worker).collect();
        let dur = (bulk.duration.as_nanos() as f64).max(1.0);
        let payload = hosts.first().map_or(0, |h| h.gradient_bytes) as f64;
        let cpu = hosts
            .iter()
            .map(|h| h.cpu_ns as f64 / (h.wall_ns as f64).max(1.0) * 100.0)
            .sum::<f64>()
            / hosts.len().max(1) as f64;
        ctx.record("throughput", payload * 8.0 / dur);
        ctx.record("cpu", cpu);
        ctx.counter(
            "retransmissions",
            hosts.iter().map(|h| h.retransmissions).sum(),
        );
        if ctx.cancelled() {
            return Err(WorkloadError::Interrupted);
        }
        let ping = Self::transfer(ctx, io, 200 * mtu, 1.0, 1.0, mtu)?;
        let mut rtt: Vec<u64> = ping
            .nodes
            .iter()
            .filter(|n| n.is_worker)
            .flat_map(|n| n.rtt_ns.iter().copied())
            .collect();
        rtt.sort_unstable();
        if let Some(m) = rtt.get(rtt.len() / 2) {
            ctx.record("rtt", *m as f64 / 1e3);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use inabench_core::Workload;

    /// The roce row spans two agents in every class it runs in: in one process (a host with an
    /// RDMA device plans hardware) it is left out of the plan with the same sentence as the
    /// emulated class, never planned to fail "runs in two agents"; through agents it is planned.
    #[test]
    fn the_roce_row_is_left_out_of_every_class_in_one_process() {
        let t = Table1;
        let emulated = t.not_here(Fidelity::Emulated, ROCE, false);
        assert!(
            emulated
                .as_deref()
                .is_some_and(|s| s.starts_with("needs two hosts' RDMA devices")),
            "{emulated:?}"
        );
        assert_eq!(t.not_here(Fidelity::Hardware, ROCE, false), emulated);
        assert_eq!(t.not_here(Fidelity::Hardware, ROCE, true), None);
        assert_eq!(t.not_here(Fidelity::Emulated, ROCE, true), None);
    }
}
