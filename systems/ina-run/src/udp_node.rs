//! A Table 6 system on the `udp` fabric: every node (workers, the switch, a parameter server)
//! in its own process, started by the runner as `inabench __fabric-node` (or, where no such
//! binary is at hand, as threads of this process running the same code), each serving its
//! endpoint on its own UDP socket with one of the host I/O models of [`inabench_fabric::udp`].
//!
//! The protocol on a node's stdin/stdout: the runner writes the [`NodeJob`] as one JSON line; the
//! node builds its endpoint, binds its socket and prints `ready <port>`; the runner answers
//! `go <coordinator port> <port of node 0> ...`; the node serves until the coordinator's stop
//! and prints its [`NodeOutcome`] as one JSON line. A worker checks its own result against the
//! reference sum before it reports, so a wrong aggregate is known without shipping it back.

use inabench_fabric::addresses::{self, AddressPlan, HostAddress};
use inabench_fabric::fault::Faults;
use inabench_fabric::procs::{self, NodeError};
use inabench_fabric::udp::{self, IoModel, NodeConfig, Steering};
use inabench_fabric::{BuildError, Deployment, Fabric, FabricReport, Ran};
use inabench_ina::RunError;
use inabench_ina::common::{AllReduceConfig, SetupError, SetupNode, System};
use inabench_ina::system;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, Write};
use std::net::SocketAddrV4;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// What one node is asked to run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeJob {
    pub system: String,
    pub node: usize,
    pub workers: usize,
    pub elements: usize,
    pub seed: u64,
    pub line_rate_bps: f64,
    pub mtu: usize,
    pub timeout_ns: u64,
    pub knobs: Vec<(String, f64)>,
    pub io: String,
    pub loss: f64,
    pub duplicate: f64,
    pub reorder: f64,
    pub reorder_delay_ns: u64,
    pub fault_seed: u64,
    pub deadline_ms: u64,
    /// Bind the node's socket on every address of its (namespace's) interfaces instead of
    /// 127.0.0.1.
    #[serde(default)]
    pub bind_any: bool,
    /// The addresses the nodes' frames carry (a testbed's `data:` addresses,
    /// [`System::build_node_at`]); None: the system's own synthetic plan. Left out of the job
    /// line when None, so a job without a plan is the line it always was, and a line without
    /// it still reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addresses: Option<JobAddresses>,
}

/// One host of a job's address plan as a job line carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobHost {
    /// `A.B.C.D@aa:bb:cc:dd:ee:ff` ([`addresses::fmt_ip_mac`]).
    pub at: String,
    /// Its RoCEv2 GID as an IPv6 address.
    pub gid: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
}

/// An [`AddressPlan`] as a job line carries it: its workers in order, its switch's address and
/// its further hosts (ATP's parameter servers).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobAddresses {
    pub workers: Vec<JobHost>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switch: Option<JobHost>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub servers: Vec<JobHost>,
}

impl JobAddresses {
    /// `plan` for a job line; None for the synthetic plan (which a job states by stating none).
    pub fn of(plan: &AddressPlan) -> Option<JobAddresses> {
        let n = plan.len()?;
        let host = |h: &HostAddress| JobHost {
            at: addresses::fmt_ip_mac(h),
            gid: std::net::Ipv6Addr::from(h.gid).to_string(),
            interface: h.interface.clone(),
        };
        Some(JobAddresses {
            workers: (0..n)
                .filter_map(|i| plan.worker(i))
                .map(|h| host(&h))
                .collect(),
            switch: plan.switch.as_ref().map(host),
            servers: plan.servers.iter().map(host).collect(),
        })
    }

    /// The plan back (every host's text parsed, the plan checked as [`AddressPlan::new`]
    /// checks a testbed's); a host that does not parse is named in one sentence.
    pub fn plan(&self) -> Result<AddressPlan, SetupError> {
        let host = |what: String, h: &JobHost| -> Result<HostAddress, SetupError> {
            let mut a = addresses::parse_ip_mac(&h.at).ok_or_else(|| {
                SetupError::Config(format!(
                    "the job's address plan: {what}'s address `{}` is not A.B.C.D@aa:bb:cc:dd:ee:ff",
                    h.at
                ))
            })?;
            a.gid = h
                .gid
                .parse::<std::net::Ipv6Addr>()
                .map_err(|_| {
                    SetupError::Config(format!(
                        "the job's address plan: {what}'s GID `{}` is not an IPv6 address",
                        h.gid
                    ))
                })?
                .octets();
            a.interface = h.interface.clone();
            Ok(a)
        };
        let workers = self
            .workers
            .iter()
            .enumerate()
            .map(|(i, h)| host(format!("worker {i}"), h))
            .collect::<Result<Vec<_>, _>>()?;
        let switch = self
            .switch
            .as_ref()
            .map(|h| host("the switch".into(), h))
            .transpose()?;
        let servers = self
            .servers
            .iter()
            .enumerate()
            .map(|(i, h)| host(format!("server {i}"), h))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(AddressPlan::new(workers, switch)?.with_servers(servers))
    }
}

/// The plan a job states, parsed (None: it states none, the synthetic plan).
pub fn job_plan(job: &NodeJob) -> Result<Option<AddressPlan>, SetupError> {
    job.addresses.as_ref().map(JobAddresses::plan).transpose()
}

impl NodeJob {
    /// The job that runs one all-reduce of `system` for `cfg` under `faults` (the inverse of
    /// [`NodeJob::config`]); `node` is set per node by the fabric.
    pub fn for_config(
        system: &str,
        cfg: &AllReduceConfig,
        faults: &Faults,
        io: &str,
        deadline_ms: u64,
    ) -> NodeJob {
        NodeJob {
            system: system.to_string(),
            node: 0,
            workers: cfg.workers,
            elements: cfg.elements,
            seed: cfg.seed,
            line_rate_bps: cfg.line_rate_bps,
            mtu: cfg.mtu,
            timeout_ns: cfg.timeout_ns,
            knobs: cfg.knobs.clone(),
            io: io.to_string(),
            loss: faults.loss,
            duplicate: faults.duplicate,
            reorder: faults.reorder,
            reorder_delay_ns: faults.reorder_delay_ns,
            fault_seed: faults.seed,
            deadline_ms,
            bind_any: false,
            addresses: None,
        }
    }

    pub fn config(&self) -> AllReduceConfig {
        AllReduceConfig {
            workers: self.workers,
            elements: self.elements,
            seed: self.seed,
            line_rate_bps: self.line_rate_bps,
            mtu: self.mtu,
            timeout_ns: self.timeout_ns,
            knobs: self.knobs.clone(),
        }
    }
}

/// What one node reports.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NodeOutcome {
    pub node: usize,
    pub is_worker: bool,
    /// A worker finished and its result equals the reference sum.
    pub finished: bool,
    pub correct: bool,
    pub frames_tx: u64,
    pub frames_rx: u64,
    /// Frame bytes this node received.
    #[serde(default)]
    pub bytes_rx: u64,
    pub wire_bytes_tx: u64,
    pub gradient_bytes: u64,
    pub retransmissions: u64,
    pub rtt_ns: Vec<u64>,
    /// Start signal to this worker's result, ns.
    pub done_ns: u64,
    pub cpu_ns: u64,
    pub wall_ns: u64,
    pub frames_dropped_by_faults: u64,
    pub send_errors: u64,
    pub switch_overhead: Option<f64>,
    pub stopped: bool,
    /// The batched socket layer's offload on this node (`gso+gro`, `gso`, `gro`, `mmsg`).
    #[serde(default)]
    pub offload: String,
    /// Time this node was ready to run but waited for a CPU (ns; see
    /// [`udp::NodeReport::run_delay_ns`]).
    #[serde(default)]
    pub run_delay_ns: u64,
    /// Datagrams the kernel dropped at this node's socket (a full receive buffer).
    #[serde(default)]
    pub socket_drops: u64,
    /// The nice value this node ran at when the `switch_nice` knob asked for one and the
    /// kernel granted it (switch nodes only).
    #[serde(default)]
    pub nice: Option<i32>,
}

/// The child side: run one node with the job from `input`, report on `output`
/// ([`inabench_fabric::procs::serve_child`] with this crate's builder and report).
pub fn child_main(input: &mut impl BufRead, output: &mut impl Write) -> Result<(), NodeError> {
    child_dyn(input, output)
}

fn child_dyn(input: &mut dyn BufRead, output: &mut dyn Write) -> Result<(), NodeError> {
    let ctx: std::cell::RefCell<Option<(NodeJob, AllReduceConfig, Option<i32>)>> =
        std::cell::RefCell::new(None);
    procs::serve_child(
        input,
        output,
        |line| {
            let job: NodeJob = serde_json::from_str(line)
                .map_err(|e| NodeError::Node(format!("the node job does not parse: {e}")))?;
            let sys = system(&job.system).ok_or_else(|| {
                NodeError::Node(RunError::UnknownSystem(job.system.clone()).to_string())
            })?;
            let io = IoModel::parse(&job.io)
                .ok_or_else(|| NodeError::Node(format!("no I/O model `{}`", job.io)))?;
            let cfg = job.config();
            // only this process's node ([`System::build_node_at`]), at the job's addresses
            // where it states them
            let plan = job_plan(&job).map_err(|e| NodeError::Node(e.to_string()))?;
            let node = sys
                .build_node_at(&cfg, job.node, plan.as_ref())
                .map_err(|e| NodeError::Node(e.to_string()))?;
            let is_worker = matches!(node, SetupNode::Worker(_));
            // the `switch_nice` knob: the switch's processes at this nice value (e.g. -10), so
            // that on a host with fewer cores than nodes the switch, which every frame crosses,
            // runs when it has input instead of waiting its turn behind the workers (a real
            // switch has its own silicon); refused without CAP_SYS_NICE, then recorded as not
            // applied
            let nice = match cfg.knob("switch_nice") {
                Some(n) if !is_worker => {
                    let n = n as i32;
                    udp::set_thread_nice(n).ok().map(|()| n)
                }
                _ => None,
            };
            let config = NodeConfig {
                // the I/O model is the hosts' stack; switches and servers stay event-driven
                io: if is_worker { io } else { IoModel::Event },
                faults: Faults {
                    loss: job.loss,
                    duplicate: job.duplicate,
                    reorder: job.reorder,
                    reorder_delay_ns: job.reorder_delay_ns,
                    seed: job.fault_seed,
                },
                // the datagram size the node serves with
                mtu: job.mtu + 256,
                deadline: Duration::from_millis(job.deadline_ms),
                counted: is_worker,
            };
            let steer_job = job.clone();
            let steering: procs::SteerBy = Box::new(move |shards| steering(&steer_job, shards));
            let bind_any = job.bind_any;
            *ctx.borrow_mut() = Some((job, cfg, nice));
            Ok(procs::Child {
                node,
                config,
                bind_any,
                steering: Some(steering),
            })
        },
        |node, rep| {
            let Some((job, cfg, nice)) = ctx.borrow_mut().take() else {
                return Err(NodeError::Node(
                    "a node reported before it was built".into(),
                ));
            };
            let out = node_outcome(&job, &cfg, node, rep, nice);
            serde_json::to_string(&out)
                .map_err(|e| NodeError::Node(format!("cannot write the node's outcome: {e}")))
        },
    )
}

/// What node `job.node` reports after serving: the fabric's totals and, for a worker, whether its
/// result is right (checked here, so a wrong aggregate is known without shipping it back), for a
/// switch its overhead. Shared by the udp and raw node processes.
pub(crate) fn node_outcome(
    job: &NodeJob,
    cfg: &AllReduceConfig,
    node: &SetupNode,
    rep: &udp::NodeReport,
    nice: Option<i32>,
) -> NodeOutcome {
    let mut out = NodeOutcome {
        node: job.node,
        is_worker: matches!(node, SetupNode::Worker(_)),
        frames_tx: rep.frames_tx,
        frames_rx: rep.frames_rx,
        bytes_rx: rep.bytes_rx,
        done_ns: rep.done_ns,
        cpu_ns: rep.cpu_ns,
        wall_ns: rep.wall_ns,
        frames_dropped_by_faults: rep.faults.dropped,
        send_errors: rep.send_errors,
        stopped: rep.stopped,
        offload: rep.offload.to_string(),
        run_delay_ns: rep.run_delay_ns,
        socket_drops: rep.socket_drops,
        nice,
        ..NodeOutcome::default()
    };
    match node {
        SetupNode::Worker(w) => {
            let s = w.stats();
            out.finished = w.is_done();
            out.correct = w.check(cfg);
            out.wire_bytes_tx = s.wire_bytes_tx;
            out.gradient_bytes = s.gradient_bytes;
            out.retransmissions = s.retransmissions;
            out.rtt_ns = s.rtt_ns;
        }
        SetupNode::Switch(s) => out.switch_overhead = Some(s.stats().overhead_fraction),
        SetupNode::Other(_) => {}
    }
    out
}

/// The nodes of `job`'s setup (built with one element: only the count is wanted), at the
/// job's addresses where it states them: a plan that cannot address the job is refused here,
/// before any node starts.
pub(crate) fn node_count(job: &NodeJob) -> Result<usize, RunError> {
    let sys = system(&job.system).ok_or_else(|| RunError::UnknownSystem(job.system.clone()))?;
    let plan = job_plan(job)?;
    Ok(sys
        .build_at(
            &AllReduceConfig {
                elements: 1,
                ..job.config()
            },
            plan.as_ref(),
        )?
        .into_nodes()
        .len())
}

/// Process-per-node report lines `(node, line)` as the nodes' outcomes.
pub(crate) fn parse_lines(lines: &[(usize, String)]) -> Result<Vec<NodeOutcome>, RunError> {
    lines
        .iter()
        .map(|(node, line)| {
            serde_json::from_str::<NodeOutcome>(line).map_err(|cause| RunError::NodeReport {
                node: *node,
                line: line.trim().to_string(),
                cause,
            })
        })
        .collect()
}

/// The kinds of socket layer the nodes ran on (several joined by `/` if they differed; empty
/// for nodes that ran in this process).
pub(crate) fn offload_kinds(outs: &[NodeOutcome]) -> String {
    let mut kinds: Vec<String> = outs.iter().map(|o| o.offload.clone()).collect();
    kinds.sort();
    kinds.dedup();
    kinds.join("/")
}

/// The switch's shards a run uses (the knob `switch_shards`; each shard an identical switch
/// program on its own socket and thread or process, as a Tofino splits its work across pipes).
/// A shard must hold every packet of an aggregation, so only systems whose packets name their
/// aggregator can be split: [`inabench_ina::common::System::switch_shards`] and
/// [`inabench_ina::common::System::shard_key`] (SwitchML by slot, NetReduce by QP; every other system 1).
pub fn switch_shards(job: &NodeJob) -> usize {
    system(&job.system).map_or(1, |sys| sys.switch_shards(&job.config()))
}

/// A worker's steering when the switch runs as several shards.
fn steering(job: &NodeJob, shards: Vec<Vec<SocketAddrV4>>) -> Option<Steering> {
    if shards.iter().all(|s| s.len() <= 1) {
        return None;
    }
    let key = system(&job.system)?.shard_key()?;
    let key: udp::ShardKey = Arc::new(key);
    Some(Steering { shards, key })
}

/// How the runner starts the nodes.
#[derive(Debug, Clone)]
pub enum Spawn {
    /// One process per node: this executable with the hidden `__fabric-node` command.
    Processes(PathBuf),
    /// One thread per node in this process (tests, and libraries without the binary).
    Threads,
}

impl Spawn {
    /// Processes when this process is the `inabench` binary (or `INABENCH_NODE_EXE` names
    /// one), threads otherwise.
    pub fn detect() -> Spawn {
        if let Some(p) = std::env::var_os("INABENCH_NODE_EXE") {
            return Spawn::Processes(PathBuf::from(p));
        }
        match std::env::current_exe() {
            Ok(p) if p.file_stem().is_some_and(|s| s == "inabench") => Spawn::Processes(p),
            _ => Spawn::Threads,
        }
    }
}

impl Spawn {
    fn procs(&self) -> procs::Spawn {
        match self {
            Spawn::Processes(exe) => procs::Spawn::Processes {
                exe: exe.clone(),
                command: "__fabric-node",
            },
            Spawn::Threads => procs::Spawn::Threads(child_dyn),
        }
    }
}

/// A job's all-reduce as every fabric deploys it ([`inabench_fabric::Deployment`]): every node
/// of the setup, the workers counted, node `i` built by [`System::build_node`] here or, in a
/// node process, from its job line (its [`NodeJob`] with its index); the switch in
/// [`switch_shards`] processes where nodes run apart.
pub struct JobDeploy<'a> {
    sys: &'static dyn System,
    job: &'a NodeJob,
    cfg: AllReduceConfig,
    /// The job's address plan, parsed once (None: synthetic).
    plan: Option<AddressPlan>,
    nodes: usize,
    shards: usize,
}

impl<'a> JobDeploy<'a> {
    /// `job`'s deployment; a job naming no system of [`inabench_ina::SYSTEMS`], or one that cannot
    /// be built, is an error.
    pub fn new(job: &'a NodeJob) -> Result<JobDeploy<'a>, RunError> {
        let sys = system(&job.system).ok_or_else(|| RunError::UnknownSystem(job.system.clone()))?;
        Ok(JobDeploy {
            sys,
            job,
            cfg: job.config(),
            plan: job_plan(job)?,
            nodes: node_count(job)?,
            shards: switch_shards(job),
        })
    }
}

impl Deployment<SetupNode> for JobDeploy<'_> {
    fn nodes(&self) -> usize {
        self.nodes
    }
    fn counted(&self) -> usize {
        self.job.workers
    }
    fn build_node(&self, node: usize) -> Result<SetupNode, BuildError> {
        Ok(self
            .sys
            .build_node_at(&self.cfg, node, self.plan.as_ref())?)
    }
    fn processes(&self, node: usize) -> usize {
        if node == self.job.workers {
            self.shards
        } else {
            1
        }
    }
    fn job(&self, node: usize, bind_any: bool) -> Result<String, BuildError> {
        Ok(serde_json::to_string(&NodeJob {
            node,
            bind_any,
            ..self.job.clone()
        })?)
    }
}

/// One all-reduce of `job` through any fabric ([`Fabric::run_deployment`], the one door): the
/// nodes' outcomes and the fabric's report, whose label names what ran. On the in-process
/// fabrics (`sim`, `mem`, `udp` threads) each node's outcome is read from the node itself and
/// the fabric's totals (no socket layer: `offload` empty; one switch); on
/// [`inabench_fabric::procs::UdpProcesses`] each node reports its own. The limit is the job's
/// `deadline_ms` in the fabric's time.
pub fn run_job_on(fabric: &mut dyn Fabric<SetupNode>, job: &NodeJob) -> Result<JobRun, RunError> {
    let deploy = JobDeploy::new(job)?;
    let run = fabric.run_deployment(&deploy, job.deadline_ms.saturating_mul(1_000_000))?;
    let (nodes, switch_shards) = match &run.nodes {
        Ran::Apart(lines) => (parse_lines(lines)?, deploy.shards),
        Ran::Here(nodes) => {
            let rep = &run.report;
            let outs = nodes
                .iter()
                .zip(&rep.nodes)
                .enumerate()
                .map(|(i, (node, t))| {
                    let one = udp::NodeReport {
                        frames_tx: t.frames_tx,
                        frames_rx: t.frames_rx,
                        bytes_tx: t.bytes_tx,
                        bytes_rx: t.bytes_rx,
                        done_ns: t.done_ns,
                        wall_ns: rep.end_ns,
                        cpu_ns: t.cpu_ns,
                        stopped: rep.finished,
                        ..udp::NodeReport::default()
                    };
                    let job = NodeJob {
                        node: i,
                        ..job.clone()
                    };
                    node_outcome(&job, &deploy.cfg, node, &one, None)
                })
                .collect();
            (outs, 1)
        }
    };
    let offload = offload_kinds(&nodes);
    Ok(JobRun {
        outcome: UdpOutcome {
            nodes,
            finished: run.report.finished,
            duration: Duration::from_nanos(run.report.time_ns),
            switch_shards,
            offload,
        },
        report: run.report,
    })
}

/// What [`run_job_on`] returns.
#[derive(Debug, Clone)]
pub struct JobRun {
    pub outcome: UdpOutcome,
    /// The fabric's report: its label (`sim`, `mem`, `udp`), whether the nodes ran as processes,
    /// the fault counters.
    pub report: FabricReport,
}

/// The outcome of one all-reduce on `udp`.
#[derive(Debug, Clone)]
pub struct UdpOutcome {
    pub nodes: Vec<NodeOutcome>,
    /// Every worker finished.
    pub finished: bool,
    /// Start signal to the last worker's result (wall clock, the runner's view).
    pub duration: Duration,
    /// The switch's shards ([`switch_shards`]); their outcomes follow the other nodes'.
    pub switch_shards: usize,
    /// The batched socket layer's offload the nodes used (`gso+gro`, ..., `mmsg`; several
    /// joined by `/` if the nodes differed).
    pub offload: String,
}

/// Where the nodes' sockets live.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Placement {
    /// Every node on 127.0.0.1.
    Loopback,
    /// Every node in its own network namespace on a bridge, each link limited to `rate_mbit`
    /// (if given) with tbf. Needs root and node processes.
    Netns { rate_mbit: Option<f64> },
}

/// Run one all-reduce of `job.system` with every node on its own socket (and process), on
/// loopback. `job.node` is ignored; each node gets its index.
pub fn run_udp(job: &NodeJob, spawn: &Spawn) -> Result<UdpOutcome, RunError> {
    run_udp_placed(job, spawn, Placement::Loopback)
}

/// [`run_udp`] with the nodes placed as `placement` says, through the process-per-node fabric
/// ([`inabench_fabric::procs::UdpProcesses`]) and [`run_job_on`].
pub fn run_udp_placed(
    job: &NodeJob,
    spawn: &Spawn,
    placement: Placement,
) -> Result<UdpOutcome, RunError> {
    let mut fabric = procs::UdpProcesses {
        spawn: spawn.procs(),
        placement: match placement {
            Placement::Loopback => procs::Placement::Loopback,
            Placement::Netns { rate_mbit } => procs::Placement::Netns { rate_mbit },
        },
    };
    Ok(run_job_on(&mut fabric, job)?.outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn job(system: &str, elements: usize, io: &str, loss: f64) -> NodeJob {
        NodeJob {
            system: system.into(),
            node: 0,
            workers: 3,
            elements,
            seed: 7,
            line_rate_bps: 100e9,
            mtu: 1024,
            timeout_ns: 20_000_000,
            knobs: vec![("window".into(), 2.0), ("msg_packets".into(), 16.0)],
            io: io.into(),
            loss,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_delay_ns: 0,
            fault_seed: 1,
            deadline_ms: 20_000,
            bind_any: false,
            addresses: None,
        }
    }

    /// Every frame of one all-reduce of `nodes` run in lockstep (each round: every node's
    /// frames, then their delivery), as (sender, destination, bytes).
    fn lockstep_trace(nodes: &mut [SetupNode]) -> Vec<(usize, inabench_fabric::NodeId, Vec<u8>)> {
        use inabench_fabric::{Endpoint, NodeId};
        let mut trace = Vec::new();
        for round in 0..100_000u64 {
            let t = round * 1_000;
            let mut out: Vec<(usize, NodeId, Vec<u8>)> = Vec::new();
            for (i, n) in nodes.iter_mut().enumerate() {
                while let Some(tx) = n.poll_transmit(t) {
                    out.push((i, tx.to, tx.bytes));
                }
            }
            if out.is_empty() {
                break;
            }
            for (i, to, b) in &out {
                nodes[*to as usize].handle_packet(t, *i as NodeId, b);
            }
            trace.extend(out);
        }
        trace
    }

    #[test]
    fn a_netreduce_node_built_alone_is_the_node_of_the_whole_setup() {
        for shards in [1.0, 2.0] {
            let mut j = job("netreduce", 50_000, "event", 0.0);
            j.timeout_ns = 1_000_000_000_000;
            j.knobs.push(("switch_shards".into(), shards));
            let cfg = j.config();
            let sys = system("netreduce").expect("netreduce");
            let mut whole = sys.build(&cfg).expect("build").into_nodes();
            let mut alone: Vec<SetupNode> = (0..whole.len())
                .map(|i| sys.build_node(&cfg, i).expect("node"))
                .collect();
            for (a, w) in alone.iter().zip(&whole) {
                assert_eq!(
                    std::mem::discriminant(a),
                    std::mem::discriminant(w),
                    "worker/switch"
                );
            }
            let (tw, ta) = (lockstep_trace(&mut whole), lockstep_trace(&mut alone));
            assert!(tw.len() > 100, "{}", tw.len());
            assert!(tw == ta, "{shards} QPs: the frames differ");
            for n in &alone {
                if let SetupNode::Worker(w) = n {
                    assert!(w.check(&cfg), "{shards} QPs: a wrong sum");
                }
            }
        }
        // a node the setup does not have
        let cfg = job("netreduce", 1_000, "event", 0.0).config();
        let sys = system("netreduce").expect("netreduce");
        assert!(sys.build_node(&cfg, 4).is_err());
        // other systems: the node of the whole setup
        let sys = system("atp").expect("atp");
        let cfg = job("atp", 1_000, "event", 0.0).config();
        assert!(matches!(sys.build_node(&cfg, 3), Ok(SetupNode::Switch(_))));
    }

    /// The one door: every system of [`inabench_ina::SYSTEMS`], 4 workers, on `sim`, `mem`, `udp`
    /// threads and `udp` with a process per node (as threads of this test: no node binary here),
    /// each through the same `run_job_on` (`Fabric::run_deployment`): every worker's sum is the
    /// exact reference, and the report's label names the fabric that ran.
    #[test]
    fn one_deployment_runs_on_every_fabric_through_one_door() {
        use inabench_fabric::{FabricChoice, NodeId};
        let names: Vec<&str> = inabench_ina::SYSTEMS.iter().map(|s| s.name()).collect();
        assert!(names.contains(&"netreduce") && names.contains(&"switchml"));
        for sys in names {
            // the RC stream is a transfer between two hosts
            let workers = if sys == "rc_stream" { 2 } else { 4 };
            let j = NodeJob {
                workers,
                ..job(sys, 20_000, "event", 0.0)
            };
            let cfg = j.config();
            let mtu = cfg.mtu + 256;
            let mut fabrics: Vec<(Box<dyn Fabric<SetupNode>>, &str, bool)> = vec![
                (
                    FabricChoice::Sim {
                        link: crate::drive::sim_link(&cfg),
                        switch: cfg.workers as NodeId,
                    }
                    .build(Faults::default(), Vec::new()),
                    "sim",
                    false,
                ),
                (
                    FabricChoice::Mem { mtu }.build(Faults::default(), Vec::new()),
                    "mem",
                    false,
                ),
                (
                    FabricChoice::Udp {
                        mtu,
                        io: IoModel::Event,
                    }
                    .build(Faults::default(), Vec::new()),
                    "udp",
                    false,
                ),
                (
                    Box::new(procs::UdpProcesses {
                        spawn: Spawn::Threads.procs(),
                        placement: procs::Placement::Loopback,
                    }),
                    "udp",
                    true,
                ),
            ];
            let reference =
                inabench_ina::common::reference_sum(cfg.seed, cfg.workers, cfg.elements);
            assert!(reference.iter().any(|v| *v != 0));
            for (f, label, apart) in &mut fabrics {
                let run = run_job_on(f.as_mut(), &j).expect(sys);
                let what = format!("{sys} on {label} (node processes as threads: {apart})");
                assert_eq!(run.report.fabric, *label, "{what}");
                assert!(!run.report.node_processes, "{what}: threads, not processes");
                assert!(run.outcome.finished, "{what}");
                let workers: Vec<_> = run.outcome.nodes.iter().filter(|n| n.is_worker).collect();
                assert_eq!(workers.len(), cfg.workers, "{what}");
                // `correct`: the worker's result equals `reference`, element by element
                assert!(workers.iter().all(|w| w.finished && w.correct), "{what}");
                // every worker sent; a sender timed its messages (a stream's receiver times
                // nothing)
                assert!(workers.iter().all(|w| w.frames_tx > 0), "{what}");
                assert!(workers.iter().any(|w| !w.rtt_ns.is_empty()), "{what}");
                // the apart run's outcomes come from the nodes' own report lines (their
                // socket layer named), the in-process ones from the nodes themselves
                assert_eq!(run.outcome.offload.is_empty(), !*apart, "{what}");
                assert_eq!(run.report.nodes.len(), run.outcome.nodes.len(), "{what}");
            }
        }
    }

    #[test]
    fn a_job_naming_no_system_or_not_parsing_is_a_typed_error() {
        let Err(RunError::UnknownSystem(name)) =
            run_udp(&job("omnireduce", 64, "event", 0.0), &Spawn::Threads)
        else {
            panic!("a job naming no system ran");
        };
        assert_eq!(name, "omnireduce");
        // a node process handed a line that is no job says so on its own
        let mut out = Vec::new();
        let Err(NodeError::Node(words)) = child_main(&mut &b"not a job\n"[..], &mut out) else {
            panic!("a node served a line that is no job");
        };
        assert!(words.contains("does not parse"), "{words}");
        assert!(out.is_empty(), "a refused node said `ready`");
    }

    #[test]
    fn every_system_sums_exactly_over_udp_sockets() {
        for sys in ["netreduce", "switchml", "atp", "switchml_rdma"] {
            let out = run_udp(&job(sys, 20_000, "event", 0.0), &Spawn::Threads).expect(sys);
            assert!(out.finished, "{sys}: {:?}", out.nodes);
            let workers: Vec<_> = out.nodes.iter().filter(|n| n.is_worker).collect();
            assert_eq!(workers.len(), 3);
            assert!(
                workers.iter().all(|w| w.correct && w.frames_tx > 0),
                "{sys}"
            );
            assert!(out.nodes.iter().all(|n| n.stopped), "{sys}");
        }
    }

    #[test]
    fn the_rc_stream_runs_under_every_host_io_model() {
        for io in ["event", "threads", "busy_poll"] {
            let j = NodeJob {
                workers: 2,
                knobs: vec![("msg_packets".into(), 8.0), ("window".into(), 2.0)],
                ..job("rc_stream", 50_000, io, 0.0)
            };
            let out = run_udp(&j, &Spawn::Threads).expect(io);
            assert!(out.finished, "{io}");
            let hosts: Vec<_> = out.nodes.iter().filter(|n| n.is_worker).collect();
            assert!(hosts.iter().all(|h| h.correct), "{io}");
            assert_eq!(
                hosts[0].rtt_ns.len(),
                200_000usize.div_ceil(1024).div_ceil(8),
                "{io}"
            );
        }
    }

    #[test]
    fn a_sharded_netreduce_switch_sums_exactly_with_and_without_loss() {
        for (shards, loss) in [(2usize, 0.0), (4, 0.0), (4, 0.01)] {
            let mut j = job("netreduce", 200_000, "event", loss);
            j.knobs.push(("switch_shards".into(), shards as f64));
            if loss == 0.0 {
                // lossless: an RTO of 1 s, so only a NAK (an out-of-order PSN on a QP) or a
                // second's scheduling pause could make a worker go back
                j.timeout_ns = 1_000_000_000;
            }
            let out = run_udp(&j, &Spawn::Threads).expect("run");
            assert!(out.finished, "{shards} shards");
            assert_eq!(out.switch_shards, shards);
            assert!(
                out.nodes.iter().filter(|n| n.is_worker).all(|w| w.correct),
                "{shards} shards: a worker's sum differs from the reference"
            );
            // every shard aggregated: the messages were spread over all of them
            let sw: Vec<_> = out.nodes.iter().filter(|n| !n.is_worker).collect();
            assert_eq!(sw.len(), shards);
            assert!(sw.iter().all(|n| n.frames_tx > 0), "{shards}: {sw:?}");
            let retx: u64 = out.nodes.iter().map(|n| n.retransmissions).sum();
            if loss > 0.0 {
                assert!(retx > 0);
            } else {
                // one RC connection per shard: no shard reorders another's PSNs, no go-back-N
                assert_eq!(retx, 0, "{shards} shards, lossless");
            }
        }
        // other systems keep one switch; NetReduce's default is one
        assert_eq!(switch_shards(&job("atp", 1000, "event", 0.0)), 1);
        assert_eq!(switch_shards(&job("netreduce", 1000, "event", 0.0)), 1);
        // as many shards as QPs: at most one per message
        let mut few = job("netreduce", 1000, "event", 0.0);
        few.knobs.push(("switch_shards".into(), 4.0));
        assert_eq!(switch_shards(&few), 1);
    }

    #[test]
    fn a_sharded_switchml_switch_sums_exactly_with_and_without_loss() {
        for (shards, loss) in [(3usize, 0.0), (4, 0.01)] {
            let mut j = job("switchml", 50_000, "event", loss);
            j.knobs = vec![("switch_shards".into(), shards as f64)];
            let out = run_udp(&j, &Spawn::Threads).expect("run");
            assert!(out.finished, "{shards} shards");
            assert_eq!(out.switch_shards, shards);
            assert!(
                out.nodes.iter().filter(|n| n.is_worker).all(|w| w.correct),
                "{shards} shards: a worker's sum differs from the reference"
            );
            let sw: Vec<_> = out.nodes.iter().filter(|n| !n.is_worker).collect();
            assert_eq!(sw.len(), shards);
            assert!(sw.iter().all(|n| n.frames_tx > 0), "{shards}: {sw:?}");
        }
    }

    #[test]
    fn loss_on_udp_is_recovered() {
        let out =
            run_udp(&job("netreduce", 20_000, "threads", 0.01), &Spawn::Threads).expect("run");
        assert!(out.finished);
        let dropped: u64 = out.nodes.iter().map(|n| n.frames_dropped_by_faults).sum();
        let retx: u64 = out.nodes.iter().map(|n| n.retransmissions).sum();
        assert!(dropped > 0 && retx > 0, "{dropped} {retx}");
        assert!(out.nodes.iter().filter(|n| n.is_worker).all(|w| w.correct));
    }
}
