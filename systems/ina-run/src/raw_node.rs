//! A Table 6 system on the `raw` fabric ([`inabench_fabric::raw`]): every node (workers, the
//! switch or accelerator, a parameter server) a process of its own (`inabench __raw-node`) in a
//! network namespace of its own, the nodes' whole Ethernet frames sent as they are on one veth
//! link per pair of nodes, through an AF_XDP socket (copy mode) where the link's interface takes
//! one and `AF_PACKET` otherwise ([`inabench_fabric::raw::SocketChoice`]; `INABENCH_RAW_SOCKET`
//! = `auto`, `af_xdp` or `af_packet` forces either). Each node's outcome names the kind that ran
//! on each of its links and why the other did not ([`NodeOutcome::offload`]); the run's
//! [`RawOutcome::socket`] joins the nodes' labels. Control (ready, go, done, stop) is the `udp`
//! fabric's: job and outcome as JSON lines on the node's stdin/stdout, done and stop as
//! datagrams over the namespaces' management bridge.
//!
//! The switch runs as one process (no shards: the `switch_shards` knob is not read here).

use crate::udp_node::{NodeJob, NodeOutcome, job_plan, node_count, node_outcome, parse_lines};
use inabench_fabric::fault::Faults;
use inabench_fabric::netns::Netns;
use inabench_fabric::procs::{self, NodeError};
use inabench_fabric::raw::{self, Capture, Captured, LinkPlan, SocketChoice, SocketsRan};
use inabench_fabric::udp::{IoModel, NodeConfig};
use inabench_fabric::{BuildError, Deployment};
use inabench_ina::RunError;
use inabench_ina::common::AllReduceConfig;
use inabench_ina::common::SetupNode;
use inabench_ina::common::System;
use inabench_ina::system;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, Write};
use std::path::Path;
use std::time::Duration;

/// The MTU of every link: jumbo, so no frame the systems build is refused by the interface
/// (their size is set by the job's `mtu`).
pub const LINK_MTU: usize = 9000;

/// What one raw node is asked to run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RawJob {
    pub job: NodeJob,
    /// How many nodes the run has (node `i` has a link to every other).
    pub nodes: usize,
    /// The socket kind asked for every link ([`SocketChoice::parse`]; empty: `auto`).
    #[serde(default)]
    pub socket: String,
    /// Links (by peer) that must run `AF_PACKET` whatever `socket` says, and why.
    #[serde(default)]
    pub packet_links: Vec<(usize, String)>,
}

/// The child side: run one node with the job from `input` on its links, report on `output`
/// ([`inabench_fabric::procs::serve_child_raw`] with this crate's builder and report).
pub fn child_main(input: &mut impl BufRead, output: &mut impl Write) -> Result<(), NodeError> {
    let ctx: std::cell::RefCell<Option<(NodeJob, AllReduceConfig)>> = std::cell::RefCell::new(None);
    procs::serve_child_raw(
        input,
        output,
        |line| {
            let rj: RawJob = serde_json::from_str(line)
                .map_err(|e| NodeError::Node(format!("the node job does not parse: {e}")))?;
            let job = rj.job;
            let sys = system(&job.system).ok_or_else(|| {
                NodeError::Node(RunError::UnknownSystem(job.system.clone()).to_string())
            })?;
            let io = IoModel::parse(&job.io)
                .ok_or_else(|| NodeError::Node(format!("no I/O model `{}`", job.io)))?;
            let cfg = job.config();
            // at the job's addresses where it states them ([`System::build_node_at`])
            let plan = job_plan(&job).map_err(|e| NodeError::Node(e.to_string()))?;
            let node = sys
                .build_node_at(&cfg, job.node, plan.as_ref())
                .map_err(|e| NodeError::Node(e.to_string()))?;
            let is_worker = matches!(node, SetupNode::Worker(_));
            let config = NodeConfig {
                io: if is_worker { io } else { IoModel::Event },
                faults: Faults {
                    loss: job.loss,
                    duplicate: job.duplicate,
                    reorder: job.reorder,
                    reorder_delay_ns: job.reorder_delay_ns,
                    seed: job.fault_seed,
                },
                // the largest whole frame accepted: the payload MTU plus every header
                mtu: job.mtu + 256,
                deadline: Duration::from_millis(job.deadline_ms),
                counted: is_worker,
            };
            let choice =
                SocketChoice::parse(&rj.socket).map_err(|e| NodeError::Node(e.to_string()))?;
            let peers = (0..rj.nodes)
                .filter(|p| *p != job.node)
                .map(|p| match rj.packet_links.iter().find(|(q, _)| *q == p) {
                    Some((_, why)) => LinkPlan {
                        peer: p as inabench_fabric::NodeId,
                        choice: SocketChoice::AfPacket,
                        why_packet: why.clone(),
                    },
                    None => LinkPlan::new(p as inabench_fabric::NodeId, choice),
                })
                .collect();
            *ctx.borrow_mut() = Some((job, cfg));
            Ok((
                procs::Child {
                    node,
                    config,
                    bind_any: true,
                    steering: None,
                },
                peers,
            ))
        },
        |node, rep, sockets| {
            let Some((job, cfg)) = ctx.borrow_mut().take() else {
                return Err(NodeError::Node(
                    "a node reported before it was built".into(),
                ));
            };
            let mut out = node_outcome(&job, &cfg, node, rep, None);
            // the kind per link and why the other was not used, not only the kind
            out.offload = sockets.to_string();
            serde_json::to_string(&out)
                .map_err(|e| NodeError::Node(format!("cannot write the node's outcome: {e}")))
        },
    )
}

/// The outcome of one all-reduce on `raw`.
#[derive(Debug, Clone)]
pub struct RawOutcome {
    pub nodes: Vec<NodeOutcome>,
    /// Every worker finished.
    pub finished: bool,
    /// Start signal to the last worker's result (the runner's wall clock).
    pub duration: Duration,
    /// The sockets the nodes ran on: one node label ([`inabench_fabric::raw::socket_label`]:
    /// `af_xdp(copy)`, `af_packet (af_xdp: <reason>)`, `mixed: ...`) when every node's is the
    /// same, else `mixed: ` and the distinct labels joined by ` / `.
    pub socket: String,
    /// The kind that ran, in a word ([`SocketsRan::of_nodes`] of the nodes' labels: one kind
    /// when every node ran it on every link, else mixed); `None` only for a node label that
    /// names no kind.
    pub ran: Option<SocketsRan>,
    /// The socket kind that was asked.
    pub asked: SocketChoice,
    /// The frames a capture saw on the link asked for (empty when none was).
    pub captured: Vec<Captured>,
    /// The namespaces the run made (removed when it returns).
    pub namespaces: Vec<String>,
}

/// The raw run's deployment ([`inabench_fabric::Deployment`]): every node of the setup, the
/// workers counted, node `i` built by [`inabench_ina::common::System::build_node`] (here) or from its
/// job line, its [`RawJob`] (in its process).
struct RawDeploy<'a> {
    sys: &'static dyn System,
    job: &'a NodeJob,
    /// The job's address plan, parsed once (None: synthetic).
    plan: Option<inabench_fabric::addresses::AddressPlan>,
    nodes: usize,
    socket: SocketChoice,
    /// A capture on node `a`'s link to `b`: that link runs `AF_PACKET` (a packet tap does not
    /// see the frames an AF_XDP socket takes).
    capture: Option<(usize, usize)>,
}

impl Deployment<SetupNode> for RawDeploy<'_> {
    fn nodes(&self) -> usize {
        self.nodes
    }
    fn counted(&self) -> usize {
        self.job.workers
    }
    fn build_node(&self, node: usize) -> Result<SetupNode, BuildError> {
        Ok(self
            .sys
            .build_node_at(&self.job.config(), node, self.plan.as_ref())?)
    }
    fn job(&self, node: usize, bind_any: bool) -> Result<String, BuildError> {
        Ok(serde_json::to_string(&RawJob {
            job: NodeJob {
                node,
                bind_any,
                ..self.job.clone()
            },
            nodes: self.nodes,
            socket: self.socket.name().to_string(),
            packet_links: match self.capture {
                Some((a, b)) if a == node => vec![(
                    b,
                    "a capture runs on this link, and a packet tap does not see the frames an AF_XDP socket takes"
                        .into(),
                )],
                _ => Vec::new(),
            },
        })?)
    }
}

/// A capture in node `a`'s namespace on its link to node `b`, from every node ready to every
/// node stopped.
struct CaptureAround {
    on: Option<(usize, usize)>,
    running: Option<Capture>,
    captured: Vec<Captured>,
}

impl procs::Around for CaptureAround {
    fn before_go(&mut self, topo: Option<&Netns>) -> Result<(), NodeError> {
        let (Some((a, b)), Some(t)) = (self.on, topo) else {
            return Ok(());
        };
        let ns = t
            .hosts
            .get(a)
            .map(|h| h.namespace.clone())
            .ok_or_else(|| NodeError::Around(format!("no node {a} to capture on")))?;
        self.running = Some(
            Capture::start(Some(&ns), &raw::link_name(b), 1_000_000).map_err(|e| {
                NodeError::Around(format!("cannot capture on node {a}'s link to {b}: {e}"))
            })?,
        );
        Ok(())
    }
    fn after_stop(&mut self) -> Result<(), NodeError> {
        if let Some(c) = self.running.take() {
            self.captured = c
                .finish()
                .map_err(|e| NodeError::Around(format!("the capture failed: {e}")))?;
        }
        Ok(())
    }
}

/// Run one all-reduce of `job.system` on the raw fabric: every node a process of `exe
/// __raw-node` in its own namespace, a veth link between every pair of nodes, through the
/// process-per-node fabric ([`inabench_fabric::procs::Placement::NetnsLinked`]). With `capture:
/// Some((a, b))`, a capture in node `a`'s namespace records every frame on its link to node `b`.
/// Needs root. `job.node` is ignored; each node gets its index. The links' socket kind is the
/// one `INABENCH_RAW_SOCKET` asks for (unset: `auto`); [`run_raw_with`] takes it as an argument.
pub fn run_raw(
    job: &NodeJob,
    exe: &Path,
    capture: Option<(usize, usize)>,
) -> Result<RawOutcome, RunError> {
    let socket = SocketChoice::from_env().map_err(|e| {
        RunError::Fabric(inabench_fabric::FabricError::Setup {
            fabric: "raw",
            why: e.to_string(),
        })
    })?;
    run_raw_with(job, exe, capture, socket)
}

/// [`run_raw`] with the links' socket kind given: `auto` (AF_XDP where a link takes it, else
/// `AF_PACKET`, the reason recorded), `af_xdp` (a link that cannot take it fails its node with
/// the reason) or `af_packet`. A captured link runs `AF_PACKET` whatever is asked.
pub fn run_raw_with(
    job: &NodeJob,
    exe: &Path,
    capture: Option<(usize, usize)>,
    socket: SocketChoice,
) -> Result<RawOutcome, RunError> {
    let n = node_count(job)?;
    let sys = system(&job.system).ok_or_else(|| RunError::UnknownSystem(job.system.clone()))?;
    let fabric = procs::UdpProcesses {
        spawn: procs::Spawn::Processes {
            exe: exe.to_path_buf(),
            command: "__raw-node",
        },
        placement: procs::Placement::NetnsLinked { link_mtu: LINK_MTU },
    };
    let mut around = CaptureAround {
        on: capture,
        running: None,
        captured: Vec::new(),
    };
    let socket_choice = socket;
    let deploy = RawDeploy {
        sys,
        job,
        plan: job_plan(job)?,
        nodes: n,
        socket,
        capture,
    };
    // the capture hook and the namespaces need the process fabric's detailed run; the door is
    // the same deployment
    let run = fabric.run_detailed(
        &deploy,
        job.deadline_ms.saturating_mul(1_000_000),
        &mut around,
    )?;
    let lines: Vec<(usize, String)> = run.node_of.iter().copied().zip(run.lines).collect();
    let nodes = parse_lines(&lines)?;
    let socket = nodes_socket(&nodes);
    let ran = SocketsRan::of_nodes(nodes.iter().map(|n| n.offload.as_str()));
    Ok(RawOutcome {
        nodes,
        finished: run.report.finished,
        duration: run.last_done,
        socket,
        ran,
        asked: socket_choice,
        captured: around.captured,
        namespaces: run.namespaces,
    })
}

/// The run's socket label: the nodes' one label, or `mixed: ` and their distinct labels joined
/// by ` / ` (the nodes did not all run alike: never reported as one kind).
fn nodes_socket(nodes: &[NodeOutcome]) -> String {
    let mut labels: Vec<&str> = nodes.iter().map(|n| n.offload.as_str()).collect();
    labels.sort_unstable();
    labels.dedup();
    match labels.as_slice() {
        [one] => one.to_string(),
        many => format!("mixed: {}", many.join(" / ")),
    }
}

/// Write captured frames as a pcap file (Ethernet; the frames' order, 1 us apart), for tools
/// such as tshark.
pub fn write_pcap(path: &Path, frames: &[Captured]) -> std::io::Result<()> {
    let f = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut w = inabench_wire::pcap::PcapWriter::new(f)?;
    for (i, c) in frames.iter().enumerate() {
        w.write_packet(i as u64 * 1_000, &c.bytes)?;
    }
    w.flush()
}

/// A captured frame read as RoCEv2 by the suite's wire module, its ICRC verified: (BTH opcode,
/// destination QP, PSN).
pub fn roce_headers(frame: &[u8]) -> Result<(u8, u32, u32), inabench_wire::Error> {
    use inabench_wire::roce::{FrameRepr, IcrcCheck};
    FrameRepr::parse_with(frame, IcrcCheck::Verify)
        .map(|(r, _)| (r.bth.opcode, r.bth.dest_qp, r.bth.psn))
}
