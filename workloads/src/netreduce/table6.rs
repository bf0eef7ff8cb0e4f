//! `netreduce.table6`: one all-reduce per repetition through a Table 6 system on a fabric,
//! every result checked against the reference sum, and Table 6's metrics computed from what the
//! endpoints and the switch model measured. Also runs `netreduce-reliability` (loss, duplication
//! and reordering parameters). Specs: `experiments/netreduce/table6.yaml`, `reliability.yaml`
//! and `switchml-shadow.yaml`.
//!
//! Classes: `simulated` runs on the `sim` fabric at the spec's line rate with its MTU and window;
//! a software host stack's cost per frame and core and its client's threads are the run's host
//! profile's (`experiments/hosts/reference.yaml` unless `--host-profile` names another; see
//! [`crate::hostcost`]), charged to every host frame: a simulated point is a function of the
//! spec, the profile and the seed, nothing measured while it runs.
//! `emulated` runs the same endpoints on the `udp` fabric, a process per node (see
//! [`inabench_ina_run::udp_node`]; CPU is each worker's own threads' time), or with
//! `emulated_fabric: mem` on the `mem` fabric (a thread per node), or with `emulated_fabric: raw`
//! on the raw fabric (root: a process per node in its own namespace, veth links; the rows'
//! fabric `raw-veth/af_xdp`, `raw-veth/af_packet` or `raw-veth/mixed` says which sockets carried
//! the frames, and the manifest's `drivers` line why).

use crate::fabric::Emulated;
use inabench_core::{Fidelity, PointCtx, Workload, WorkloadError};
use inabench_fabric::fault::Faults;
use inabench_ina::common::{AllReduceConfig, SetupNode, Worker, reference_sum, switch_stats};
use inabench_ina_run::drive::{run_sim_stack, system};

pub struct Table6;

/// `netreduce.table6` on a testbed that states its hosts' data addresses (`hosts[].data`): the
/// same rows, with the emulated class's node processes (`udp` and `raw`, one process per node)
/// building their nodes at the testbed's address plan ([`inabench_ina_run::udp_node::NodeJob`]'s
/// `addresses`); the simulated class and the `mem` fabric keep the systems' synthetic plan. The
/// harness swaps it in for [`Table6`] when the run's testbed states addresses and has no rig.
pub struct Table6At {
    plan: inabench_fabric::addresses::AddressPlan,
}

impl Table6At {
    /// Table 6 at `plan`'s addresses; None for the synthetic plan (that is [`Table6`]).
    pub fn new(plan: inabench_fabric::addresses::AddressPlan) -> Option<Table6At> {
        (!plan.is_synthetic()).then_some(Table6At { plan })
    }
}

/// The workloads of this module at `plan`'s addresses ([`Table6At`]; none for the synthetic
/// plan): what the harness swaps in for a testbed that states its hosts' data addresses.
pub fn at_addresses(plan: inabench_fabric::addresses::AddressPlan) -> Vec<Box<dyn Workload>> {
    Table6At::new(plan)
        .map(|w| Box::new(w) as Box<dyn Workload>)
        .into_iter()
        .collect()
}

impl Workload for Table6At {
    fn id(&self) -> &'static str {
        Table6.id()
    }
    fn fidelities(&self) -> &'static [Fidelity] {
        Table6.fidelities()
    }
    fn fabric(&self, f: Fidelity) -> &'static str {
        Table6.fabric(f)
    }
    fn point_fabric(&self, f: Fidelity, point: &inabench_core::plan::Point) -> &'static str {
        Table6.point_fabric(f, point)
    }
    fn systems(&self) -> Option<&'static [&'static str]> {
        Table6.systems()
    }
    fn run(&self, ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
        run_point(ctx, Some(&self.plan))
    }
}

impl Workload for Table6 {
    fn id(&self) -> &'static str {
        "netreduce.table6"
    }

    fn fidelities(&self) -> &'static [Fidelity] {
        &[Fidelity::Emulated, Fidelity::Simulated]
    }

    fn fabric(&self, f: Fidelity) -> &'static str {
        if f == Fidelity::Emulated {
            "udp"
        } else {
            "sim"
        }
    }

    /// An emulated point runs on the fabric its `emulated_fabric` picks (udp unless it says).
    fn point_fabric(&self, f: Fidelity, point: &inabench_core::plan::Point) -> &'static str {
        if f == Fidelity::Emulated {
            crate::fabric::planned_label(point, Emulated::Udp, true)
        } else {
            self.fabric(f)
        }
    }

    fn systems(&self) -> Option<&'static [&'static str]> {
        Some(inabench_ina::in_network_names())
    }

    fn run(&self, ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
        run_point(ctx, None)
    }
}

/// A plan's hosts for the manifest: `worker 0 A.B.C.D@MAC; ...; switch ...; server 0 ...`.
fn plan_hosts(p: &inabench_fabric::addresses::AddressPlan) -> String {
    use inabench_fabric::addresses::fmt_ip_mac;
    let workers = (0..p.len().unwrap_or(0)).filter_map(|i| {
        p.worker(i)
            .map(|h| format!("worker {i} {}", fmt_ip_mac(&h)))
    });
    let switch = p.switch.iter().map(|h| format!("switch {}", fmt_ip_mac(h)));
    let servers = p
        .servers
        .iter()
        .enumerate()
        .map(|(i, h)| format!("server {i} {}", fmt_ip_mac(h)));
    workers
        .chain(switch)
        .chain(servers)
        .collect::<Vec<_>>()
        .join("; ")
}

/// One point, its node processes at `plan`'s addresses where given.
fn run_point(
    ctx: &mut PointCtx<'_>,
    plan: Option<&inabench_fabric::addresses::AddressPlan>,
) -> Result<(), WorkloadError> {
    let sys = system(ctx.system()).ok_or_else(|| {
        WorkloadError::Invalid(format!("system `{}` is not built yet", ctx.system()))
    })?;
    let opt = |ctx: &PointCtx<'_>, k: &str, d: f64| ctx.param(k).unwrap_or(d);
    let cfg = AllReduceConfig {
        workers: ctx.count("workers")?,
        elements: ctx.count("elements")?,
        seed: ctx.seed,
        line_rate_bps: opt(ctx, "line_rate_gbps", 100.0) * 1e9,
        mtu: opt(ctx, "mtu", 1024.0) as usize,
        // retransmission timeout: 100 us in virtual time. On real time (mem) the single accelerator
        // thread of a 2-core host queues frames for milliseconds; with a 5 ms RTO spurious
        // timeouts set off go-back-N storms (216 timeouts and 59k retransmissions for 1 MB),
        // so 50 ms unless the spec says otherwise
        timeout_ns: opt(
            ctx,
            "timeout_us",
            if ctx.fidelity == Fidelity::Emulated {
                50000.0
            } else {
                100.0
            },
        ) as u64
            * 1000,
        knobs: {
            let mut k = vec![
                ("window".into(), opt(ctx, "window", 2.0)),
                ("msg_packets".into(), opt(ctx, "msg_packets", 170.0)),
            ];
            // SwitchML's values per packet in bytes (default: one 192-byte Tofino pass)
            if let Ok(b) = ctx.param("switchml_payload_bytes") {
                k.push(("payload_bytes".into(), b));
            }
            // NetReduce's aggregator release rule: 0 the suite's lazy rule (MsgID + 2N),
            // 1 the paper's "one window away" (Sec. 3.1)
            if let Ok(r) = ctx.param("aggregator_release") {
                k.push(("aggregator_release".into(), r));
            }
            k
        },
    };
    // a reordered frame is delayed by `reorder_delay_us` (5 us unless the spec says
    // otherwise); `fault_seed` (a grid dimension) draws other faults for the same gradients
    let faults = crate::fabric::faults(ctx)?;
    // host_stack: `nic` (the transport runs in a NIC: no host CPU per frame on the data
    // path), `measured` (older name `software`: the system's host code on one thread at the
    // host profile's cost per frame and core), `dpdk` (the shared DPDK client model of
    // inabench_ina::hoststack: that cost split over the profile's client threads, the
    // released clients' (SwitchML 4 with its 64-packet buffer drained every 10 us, ATP 12
    // and no buffer); `stack_cores`, `stack_tx_burst`, `stack_drain_us` override them), or
    // `paper` (what each system had in the paper: the RoCE NIC for NetReduce and
    // SwitchML-RDMA, the released client (`dpdk`) for ATP and SwitchML; `paper_host_stack`)
    let text = ctx.text("host_stack").ok();
    let stack = inabench_ina_run::drive::host_stack_for(
        sys,
        text.as_deref(),
        crate::hostcost::core_costs(ctx, sys.name())?,
        ctx.param("stack_cores").ok(),
        ctx.param("stack_tx_burst").ok(),
        ctx.param("stack_drain_us").ok(),
    )
    .map_err(|e| WorkloadError::Invalid(e.to_string()))?;
    let cost = stack.frame_ns();
    if ctx.fidelity == Fidelity::Emulated {
        match crate::fabric::emulated_fabric_among(ctx, Emulated::Udp, true)? {
            Emulated::Udp => return run_on_udp(ctx, &cfg, faults, false, plan),
            Emulated::Raw => return run_on_udp(ctx, &cfg, faults, true, plan),
            Emulated::Mem => {}
        }
    }
    // the simulated class and the `mem` fabric build the systems' own plan: said once, so a
    // run at a testbed's addresses does not read as if every row ran at them
    if plan.is_some() {
        ctx.driver_line(
            "netreduce.table6's simulated class and mem fabric build their nodes at the systems' synthetic addresses, not the testbed file's data addresses (only its node processes, udp and raw, take them)",
        );
    }
    let mut stack_stats = inabench_ina::hoststack::StackStats::default();
    // (nodes, finished, duration ns, per-worker host CPU ns, frames dropped by faults)
    let (nodes, finished, dur_ns, cpu_ns, dropped) = if ctx.fidelity == Fidelity::Emulated {
        let setup = sys
            .build(&cfg)
            .map_err(|e| WorkloadError::Invalid(e.to_string()))?;
        let w = cfg.workers;
        let nodes = setup.into_nodes();
        let until = inabench_fabric::Until::workers(w, nodes.len(), 60_000_000_000);
        let mut mem = inabench_fabric::Mem {
            mtu: cfg.mtu + 128,
            faults,
        };
        let (nodes, rep) = inabench_fabric::Fabric::run(&mut mem, nodes, &until)
            .map_err(|e| WorkloadError::Invalid(e.to_string()))?;
        let dur = rep.nodes[..w].iter().map(|s| s.done_ns).max().unwrap_or(1);
        let cpu: Vec<u64> = rep.nodes[..w].iter().map(|s| s.cpu_ns).collect();
        (nodes, rep.finished, dur, cpu, 0)
    } else {
        // `reproduce --pcap DIR` (the point context's capture folder): a capture per point
        // and repetition
        let pcap = capture_path(ctx);
        // virtual time limit: 60 s unless the spec says (`time_limit_ms`; a run that cannot
        // finish, e.g. a result lost for good, retransmits until then)
        let limit_ns = (opt(ctx, "time_limit_ms", 60_000.0) * 1e6) as u64;
        let (nodes, rep, st) = run_sim_stack(sys, &cfg, faults, &stack, limit_ns, pcap.as_deref())
            .map_err(crate::fabric::run_error)?;
        stack_stats = st;
        let cpu: Vec<u64> = rep.nodes[..cfg.workers].iter().map(|s| s.cpu_ns).collect();
        (nodes, rep.finished, 0, cpu, rep.faults.dropped)
    };
    // SwitchML's switch counts contributions added to a round of another chunk (diagnostics)
    ctx.record_if_declared(
        "mixed_rounds",
        inabench_ina::common::counter_sum(&nodes, "mixed_rounds") as f64,
    );
    // NetReduce at the paper's release rule: aggregators freed one window away
    ctx.counter(
        "released_early",
        inabench_ina::common::counter_sum(&nodes, "released_early"),
    );
    if !finished {
        // reliability records a livelock as an outcome; elsewhere it fails the point
        let unfinished = nodes
            .iter()
            .filter(|n| matches!(n, SetupNode::Worker(w) if !w.is_done()))
            .count();
        if ctx.declares("unfinished_workers") {
            // the workers that did finish are still checked: a wrong sum fails loudly
            let want = reference_sum(cfg.seed, cfg.workers, cfg.elements);
            let wrong = nodes
                .iter()
                .filter(|n| matches!(n, SetupNode::Worker(w) if w.result().as_deref().is_some_and(|r| r != &want[..])))
                .count();
            ctx.record("unfinished_workers", unfinished as f64);
            ctx.record_if_declared("wrong_aggregates", wrong as f64);
            ctx.record_if_declared("goodput", 0.0);
            ctx.log(inabench_core::LogLevel::Warn, format!("{} did not finish within the time limit: {unfinished} workers without a result", ctx.system()));
            if wrong > 0 {
                return Err(WorkloadError::WrongResult(format!(
                    "{wrong} finished workers got a sum that differs from the reference"
                )));
            }
            return Ok(());
        }
        return Err(WorkloadError::Invalid(format!(
            "the all-reduce did not finish within its time limit (60 s): {unfinished} workers without a result"
        )));
    }
    let want = reference_sum(cfg.seed, cfg.workers, cfg.elements);
    let workers: Vec<&dyn Worker> = nodes
        .iter()
        .filter_map(|n| {
            if let SetupNode::Worker(w) = n {
                Some(w.as_ref())
            } else {
                None
            }
        })
        .collect();
    let wrong = workers
        .iter()
        .filter(|w| w.result().as_deref() != Some(&want[..]))
        .count();
    let stats: Vec<_> = workers.iter().map(|w| w.stats()).collect();
    // emulated: wall time to the last worker's result; simulated: virtual start to end
    let dur_ns = if dur_ns > 0 {
        dur_ns as f64
    } else {
        stats
            .iter()
            .map(|s| s.end_ns.saturating_sub(s.start_ns))
            .max()
            .unwrap_or(0)
            .max(1) as f64
    };
    let n = stats.len().max(1) as f64;
    let retx: u64 = stats.iter().map(|s| s.retransmissions).sum();
    record_allreduce(
        ctx,
        Measured {
            elements: cfg.elements,
            dur_ns,
            wire_bytes: stats.iter().map(|s| s.wire_bytes_tx as f64).sum::<f64>() / n,
            gradient_bytes: stats.iter().map(|s| s.gradient_bytes as f64).sum::<f64>() / n,
            cpu_percent: cpu_ns.iter().map(|c| *c as f64).sum::<f64>() / n / dur_ns * 100.0,
            rtt_ns: stats
                .iter()
                .flat_map(|s| s.rtt_ns.iter().copied())
                .collect(),
            rtt_queue_ns: stats
                .iter()
                .flat_map(|s| s.rtt_queue_ns.iter().copied())
                .collect(),
            switch_overhead: switch_stats(&nodes).map(|s| s.overhead_fraction),
            retransmissions: retx,
            wrong,
        },
    )?;
    ctx.counter("retransmissions", retx);
    ctx.counter("frames_dropped", dropped);
    ctx.counter("host_cost_ns", cost);
    // which host stack ran (0 nic, 1 measured, 2 dpdk) and the frames' wait in its buffer
    ctx.record_if_declared(
        "stack_setting",
        match stack.name() {
            "nic" => 0.0,
            "measured" => 1.0,
            _ => 2.0,
        },
    );
    if let Some(w) = stack_stats.mean_wait_us() {
        ctx.record_if_declared("stack_wait", w);
    }
    ctx.record_if_declared("host_cost", cost as f64);
    // the system's layout metrics (NetReduce's padding share, SwitchML's slot cycle)
    for (name, v) in sys.layout_metrics(&cfg, dur_ns) {
        ctx.record_if_declared(name, v);
    }
    if wrong > 0 {
        return Err(WorkloadError::WrongResult(format!(
            "{wrong} of {} workers got a sum that differs from the reference",
            workers.len()
        )));
    }
    Ok(())
}

/// `reproduce --pcap DIR` (the point context's capture folder): the point's and repetition's
/// capture file in it.
fn capture_path(ctx: &PointCtx<'_>) -> Option<std::path::PathBuf> {
    ctx.capture_dir.map(|d| {
        d.join(format!(
            "{}-{}-rep{}.pcap",
            ctx.experiment, ctx.point.id, ctx.repetition
        ))
    })
}

/// One all-reduce on the `udp` fabric: a process per node (see [`inabench_ina_run::udp_node`]), each
/// worker's CPU its own threads' accounting, every worker's sum checked by the worker itself.
/// With `raw`, on the raw fabric instead ([`inabench_ina_run::raw_node`]: the same node processes
/// and outcome, frames through AF_XDP or AF_PACKET on veth links between namespaces, the rows
/// labelled with the kind that ran; root and the binary are required, nothing falls back to
/// udp).
fn run_on_udp(
    ctx: &mut PointCtx<'_>,
    cfg: &AllReduceConfig,
    faults: Faults,
    raw: bool,
    plan: Option<&inabench_fabric::addresses::AddressPlan>,
) -> Result<(), WorkloadError> {
    use inabench_ina_run::udp_node::{JobAddresses, NodeJob, Placement, Spawn, run_udp_placed};
    let io = ctx.text("io").unwrap_or_else(|_| "event".into());
    if inabench_fabric::udp::IoModel::parse(&io).is_none() {
        return Err(WorkloadError::Invalid(format!(
            "io is `event`, `busy_poll` or `threads`, not `{io}`"
        )));
    }
    let mut job = NodeJob::for_config(ctx.system(), cfg, &faults, &io, 60_000);
    // a testbed's data addresses: every node process builds its node at them (the manifest
    // says so once)
    if let Some(p) = plan {
        job.addresses = JobAddresses::of(p);
        ctx.driver_line(format!(
            "netreduce.table6's node processes (udp, raw) build their nodes at the testbed file's data addresses: {}",
            plan_hosts(p)
        ));
    }
    let spawn = Spawn::detect();
    if raw {
        return run_on_raw(ctx, cfg, &job, &spawn);
    }
    // placement: `loopback` (default) or `netns` (a namespace per node on a bridge, each link
    // limited to `host_rate_mbit` when given; needs root, else loopback with a warning)
    let placement = match ctx.text("placement").ok().as_deref() {
        None | Some("loopback") => Placement::Loopback,
        Some("netns") if inabench_fabric::netns::is_root() => Placement::Netns {
            rate_mbit: ctx.param("host_rate_mbit").ok().filter(|r| *r > 0.0),
        },
        Some("netns") => {
            ctx.log(
                inabench_core::LogLevel::Warn,
                "placement netns needs root: running on loopback instead",
            );
            Placement::Loopback
        }
        Some(other) => {
            return Err(WorkloadError::Invalid(format!(
                "placement is `loopback` or `netns`, not `{other}`"
            )));
        }
    };
    if matches!(spawn, Spawn::Threads) {
        ctx.log(
            inabench_core::LogLevel::Info,
            "udp fabric: nodes run as threads (no inabench binary to start them as processes)",
        );
    }
    let out = run_udp_placed(&job, &spawn, placement).map_err(crate::fabric::run_error)?;
    // what carried the datagrams (the batched socket layer's GSO/GRO or plain mmsg) and how many
    // shards the switch ran as
    ctx.log(
        inabench_core::LogLevel::Info,
        format!(
            "udp fabric: socket offload {}, switch shards {}",
            out.offload, out.switch_shards
        ),
    );
    ctx.counter("switch_shards", out.switch_shards as u64);
    ctx.counter("udp_gso", u64::from(out.offload.contains("gso")));
    ctx.counter("udp_gro", u64::from(out.offload.contains("gro")));
    record_udp_outcome(ctx, cfg, out)
}

/// [`run_on_udp`] on the raw fabric.
fn run_on_raw(
    ctx: &mut PointCtx<'_>,
    cfg: &AllReduceConfig,
    job: &inabench_ina_run::udp_node::NodeJob,
    spawn: &inabench_ina_run::udp_node::Spawn,
) -> Result<(), WorkloadError> {
    use inabench_ina_run::udp_node::{Spawn, UdpOutcome};
    let Spawn::Processes(exe) = spawn else {
        return Err(WorkloadError::Invalid(
            "emulated_fabric raw starts node processes, and there is no inabench binary to start"
                .into(),
        ));
    };
    if !inabench_fabric::netns::is_root() {
        return Err(WorkloadError::Invalid(
            "emulated_fabric raw needs root (network namespaces and AF_PACKET sockets)".into(),
        ));
    }
    // every node is in its own namespace on unlimited veth links: `placement` and
    // `host_rate_mbit` are the udp fabric's and are not read here
    if ctx.param("host_rate_mbit").ok().is_some_and(|r| r > 0.0) {
        return Err(WorkloadError::Invalid(
            "host_rate_mbit limits the udp fabric's namespace links; the raw fabric's links are not limited"
                .into(),
        ));
    }
    // `--pcap DIR`: every frame on worker 0's link to the switch (node `workers`: the switch,
    // or NetReduce's accelerator), as its namespace's capture saw it
    let pcap = capture_path(ctx);
    let capture = pcap.as_ref().map(|_| (0, cfg.workers));
    let out =
        inabench_ina_run::raw_node::run_raw(job, exe, capture).map_err(crate::fabric::run_error)?;
    if let Some(path) = &pcap {
        inabench_ina_run::raw_node::write_pcap(path, &out.captured)?;
    }
    // which socket kind carried the frames (AF_XDP in copy mode or AF_PACKET, per link) and,
    // where AF_PACKET ran, why AF_XDP did not (the outcome's `offload` below is the same label)
    ctx.log(
        inabench_core::LogLevel::Info,
        format!(
            "raw fabric: {} sockets on veth links (asked: {})",
            out.socket,
            out.asked.name()
        ),
    );
    ctx.counter(
        "raw_af_xdp",
        u64::from(out.socket == inabench_fabric::xsk::KIND),
    );
    ctx.counter(
        "raw_af_packet",
        u64::from(out.socket.starts_with(inabench_fabric::raw::SOCKET_KIND)),
    );
    ctx.counter(
        "raw_sockets_mixed",
        u64::from(out.socket.starts_with("mixed")),
    );
    ctx.counter("switch_shards", 1);
    // the rows say which kind carried the frames (raw-veth/af_xdp, /af_packet, /mixed), and the
    // run's manifest says it with the reason
    ctx.fabric = crate::fabric::raw_label(out.ran);
    ctx.driver_line(crate::fabric::raw_driver_line(
        out.ran,
        &out.socket,
        out.asked.name(),
    ));
    record_udp_outcome(
        ctx,
        cfg,
        UdpOutcome {
            nodes: out.nodes,
            finished: out.finished,
            duration: out.duration,
            switch_shards: 1,
            offload: out.socket,
        },
    )
}

/// The rows of one finished process-per-node all-reduce (udp or raw).
fn record_udp_outcome(
    ctx: &mut PointCtx<'_>,
    cfg: &AllReduceConfig,
    out: inabench_ina_run::udp_node::UdpOutcome,
) -> Result<(), WorkloadError> {
    let workers: Vec<_> = out.nodes.iter().filter(|n| n.is_worker).collect();
    let unfinished = workers.iter().filter(|w| !w.finished).count();
    let wrong = workers.iter().filter(|w| w.finished && !w.correct).count();
    let retx: u64 = workers.iter().map(|w| w.retransmissions).sum();
    let dropped: u64 = out.nodes.iter().map(|n| n.frames_dropped_by_faults).sum();
    ctx.counter("retransmissions", retx);
    ctx.counter("frames_dropped", dropped);
    ctx.counter(
        "send_errors",
        out.nodes.iter().map(|n| n.send_errors).sum::<u64>(),
    );
    if wrong > 0 {
        ctx.record_if_declared("wrong_aggregates", wrong as f64);
        return Err(WorkloadError::WrongResult(format!(
            "{wrong} of {} workers got a sum that differs from the reference",
            workers.len()
        )));
    }
    if !out.finished {
        if ctx.declares("unfinished_workers") {
            ctx.record("unfinished_workers", unfinished as f64);
            ctx.record_if_declared("wrong_aggregates", 0.0);
            ctx.record_if_declared("goodput", 0.0);
            return Ok(());
        }
        return Err(WorkloadError::Invalid(format!(
            "the all-reduce did not finish within its time limit (60 s): {unfinished} workers without a result"
        )));
    }
    let n = workers.len().max(1) as f64;
    record_allreduce(
        ctx,
        Measured {
            elements: cfg.elements,
            dur_ns: (out.duration.as_nanos() as f64).max(1.0),
            wire_bytes: workers.iter().map(|w| w.wire_bytes_tx as f64).sum::<f64>() / n,
            gradient_bytes: workers.iter().map(|w| w.gradient_bytes as f64).sum::<f64>() / n,
            cpu_percent: workers
                .iter()
                .map(|w| w.cpu_ns as f64 / (w.wall_ns as f64).max(1.0) * 100.0)
                .sum::<f64>()
                / n,
            rtt_ns: workers
                .iter()
                .flat_map(|w| w.rtt_ns.iter().copied())
                .collect(),
            rtt_queue_ns: Vec::new(),
            switch_overhead: out.nodes.iter().find_map(|n| n.switch_overhead),
            retransmissions: retx,
            wrong: 0,
        },
    )?;
    Ok(())
}

/// What one finished all-reduce measured, per worker (means over workers).
struct Measured {
    elements: usize,
    dur_ns: f64,
    wire_bytes: f64,
    gradient_bytes: f64,
    cpu_percent: f64,
    rtt_ns: Vec<u64>,
    /// the sender-queue wait of each RTT sample's packet (sim only; empty elsewhere)
    rtt_queue_ns: Vec<u64>,
    switch_overhead: Option<f64>,
    retransmissions: u64,
    wrong: usize,
}

/// Table 6's metrics (and the reliability ones) of a finished all-reduce, whatever the fabric.
fn record_allreduce(ctx: &mut PointCtx<'_>, mut m: Measured) -> Result<(), WorkloadError> {
    // each quantity in the unit it was measured in; `record_in` converts it once to the unit
    // the spec declares (a spec that says Mbps gets Mbit/s, not the Gbit/s number)
    let secs = m.dur_ns / 1e9;
    ctx.record_in_if_declared("throughput", m.wire_bytes * 8.0 / secs, "bps")?;
    ctx.record_in_if_declared("goodput", m.gradient_bytes * 8.0 / secs, "bps")?;
    ctx.record_in_if_declared("algbw", m.gradient_bytes * 8.0 / secs, "bps")?;
    ctx.record_in_if_declared("elements_per_s", m.elements as f64 / secs, "1/s")?;
    ctx.record_in_if_declared("cpu", m.cpu_percent, "%")?;
    m.rtt_ns.sort_unstable();
    if let Some(r) = m.rtt_ns.get(m.rtt_ns.len() / 2) {
        ctx.record_in_if_declared("rtt", *r as f64, "ns")?;
    }
    m.rtt_queue_ns.sort_unstable();
    if let Some(q) = m.rtt_queue_ns.get(m.rtt_queue_ns.len() / 2) {
        ctx.record_in_if_declared("rtt_queueing", *q as f64, "ns")?;
    }
    if let Some(o) = m.switch_overhead {
        ctx.record_in_if_declared("switch_overhead", o, "fraction")?;
    }
    ctx.record_if_declared("retransmissions", m.retransmissions as f64);
    ctx.record_if_declared("wrong_aggregates", m.wrong as f64);
    ctx.record_if_declared("unfinished_workers", 0.0);
    Ok(())
}
