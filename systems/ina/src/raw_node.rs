//! A Table 6 system on the `raw` fabric ([`inabench_fabric::raw`]): every node (workers, the
//! switch or accelerator, a parameter server) a process of its own (`inabench __raw-node`) in a
//! network namespace of its own, the nodes' whole Ethernet frames sent as they are through
//! `AF_PACKET` sockets on one veth link per pair of nodes. Control (ready, go, done, stop) is the
//! `udp` fabric's: job and outcome as JSON lines on the node's stdin/stdout, done and stop as
//! datagrams over the namespaces' management bridge.
//!
//! The switch runs as one process (no shards: the `switch_shards` knob is not read here).

use crate::common::AllReduceConfig;
use crate::common::SetupNode;
use crate::drive::system;
use crate::udp_node::{NodeJob, NodeOutcome};
use inabench_fabric::fault::Faults;
use inabench_fabric::netns::Netns;
use inabench_fabric::raw::{self, Capture, Captured, Link, PacketSocket};
use inabench_fabric::udp::{self, Coordinator, IoModel, NodeConfig};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The MTU of every link: jumbo, so no frame the systems build is refused by the interface
/// (their size is set by the job's `mtu`).
pub const LINK_MTU: usize = 9000;

/// What one raw node is asked to run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RawJob {
    pub job: NodeJob,
    /// How many nodes the run has (node `i` has a link to every other).
    pub nodes: usize,
}

/// The child side: run one node with the job from `input` on its links, report on `output`.
pub fn child_main(input: &mut impl BufRead, output: &mut impl Write) -> Result<(), String> {
    let mut line = String::new();
    input
        .read_line(&mut line)
        .map_err(|e| format!("cannot read the node job: {e}"))?;
    let rj: RawJob =
        serde_json::from_str(&line).map_err(|e| format!("the node job does not parse: {e}"))?;
    let job = rj.job;
    let sys = system(&job.system).ok_or_else(|| format!("no system `{}`", job.system))?;
    let io = IoModel::parse(&job.io).ok_or_else(|| format!("no I/O model `{}`", job.io))?;
    let cfg = job.config();
    let mut node = sys.build_node(&cfg, job.node).map_err(|e| e.to_string())?;
    let ctl = udp::bind(Ipv4Addr::UNSPECIFIED)
        .map_err(|e| format!("cannot bind the control socket: {e}"))?;
    let links = (0..rj.nodes)
        .filter(|p| *p != job.node)
        .map(|p| {
            PacketSocket::open(&raw::link_name(p))
                .inspect(|sock| {
                    // its own frames are not read back (where the kernel refuses, they are
                    // skipped as they come)
                    let _ = sock.ignore_outgoing();
                })
                .map(|sock| Link {
                    peer: p as inabench_fabric::NodeId,
                    sock,
                })
                .map_err(|e| format!("no AF_PACKET socket on {}: {e}", raw::link_name(p)))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let wiring = udp::child_handshake(&ctl, input, output).map_err(|e| e.to_string())?;
    let is_worker = matches!(node, SetupNode::Worker(_));
    let rep = raw::serve(
        &mut node,
        &links,
        &ctl,
        wiring.coordinator,
        &NodeConfig {
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
        },
    );
    let out = outcome(&job, &cfg, &node, &rep);
    let json = serde_json::to_string(&out).map_err(|e| e.to_string())?;
    writeln!(output, "{json}").map_err(|e| e.to_string())?;
    output.flush().map_err(|e| e.to_string())
}

fn outcome(
    job: &NodeJob,
    cfg: &AllReduceConfig,
    node: &SetupNode,
    rep: &udp::NodeReport,
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

/// The outcome of one all-reduce on `raw`.
#[derive(Debug, Clone)]
pub struct RawOutcome {
    pub nodes: Vec<NodeOutcome>,
    /// Every worker finished.
    pub finished: bool,
    /// Start signal to the last worker's result (the runner's wall clock).
    pub duration: Duration,
    /// The socket kind the nodes ran on (`af_packet`; several joined by `/` if they differed).
    pub socket: String,
    /// The frames a capture saw on the link asked for (empty when none was).
    pub captured: Vec<Captured>,
    /// The namespaces the run made (removed when it returns).
    pub namespaces: Vec<String>,
}

/// Run one all-reduce of `job.system` on the raw fabric: every node a process of `exe
/// __raw-node` in its own namespace, a veth link between every pair of nodes. With `capture:
/// Some((a, b))`, a capture in node `a`'s namespace records every frame on its link to node `b`.
/// Needs root. `job.node` is ignored; each node gets its index.
pub fn run_raw(
    job: &NodeJob,
    exe: &Path,
    capture: Option<(usize, usize)>,
) -> Result<RawOutcome, String> {
    let sys = system(&job.system).ok_or_else(|| format!("no system `{}`", job.system))?;
    let n = sys
        .build(&AllReduceConfig {
            elements: 1,
            ..job.config()
        })
        .map_err(|e| e.to_string())?
        .into_nodes()
        .len();
    let mut topo = Netns::create(n, None).map_err(|e| e.to_string())?;
    for a in 0..n {
        for b in a + 1..n {
            topo.link(a, b, LINK_MTU).map_err(|e| e.to_string())?;
        }
    }
    let coord =
        Coordinator::on(topo.gateway).map_err(|e| format!("cannot bind the coordinator: {e}"))?;
    let coord_addr = coord.addr().map_err(|e| e.to_string())?;
    let mut children: Vec<Child> = Vec::new();
    let mut result: Result<RawOutcome, String> = (|| {
        let mut ios = Vec::new();
        for i in 0..n {
            let prefix = topo.exec_prefix(i).ok_or("a node without a namespace")?;
            let mut child = Command::new(&prefix[0])
                .args(&prefix[1..])
                .arg(exe)
                .arg("__raw-node")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
            let (Some(mut input), Some(o)) = (child.stdin.take(), child.stdout.take()) else {
                return Err("a node process without pipes".into());
            };
            children.push(child);
            let rj = RawJob {
                job: NodeJob {
                    node: i,
                    bind_any: true,
                    ..job.clone()
                },
                nodes: n,
            };
            let json = serde_json::to_string(&rj).map_err(|e| e.to_string())?;
            writeln!(input, "{json}")
                .and_then(|()| input.flush())
                .map_err(|e| format!("cannot hand node {i} its job: {e}"))?;
            ios.push((input, BufReader::new(o)));
        }
        let mut addrs = Vec::new();
        for (i, (_, out)) in ios.iter_mut().enumerate() {
            let mut line = String::new();
            out.read_line(&mut line)
                .map_err(|e| format!("node {i} did not start: {e}"))?;
            let port = udp::parse_ready(&line)
                .ok_or_else(|| format!("node {i} did not start (said `{}`)", line.trim()))?;
            addrs.push(SocketAddrV4::new(topo.hosts[i].ip, port));
        }
        let cap = match capture {
            Some((a, b)) => Some(
                Capture::start(
                    Some(&topo.hosts[a].namespace),
                    &raw::link_name(b),
                    1_000_000,
                )
                .map_err(|e| format!("cannot capture on node {a}'s link to {b}: {e}"))?,
            ),
            None => None,
        };
        let go = format!(
            "go {} {}\n",
            coord_addr,
            addrs
                .iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        );
        let start = Instant::now();
        for (i, (input, _)) in ios.iter_mut().enumerate() {
            input
                .write_all(go.as_bytes())
                .and_then(|()| input.flush())
                .map_err(|e| format!("node {i} went away: {e}"))?;
        }
        let (done, last) = coord.wait_and_stop(
            job.workers,
            &addrs,
            start,
            Duration::from_millis(job.deadline_ms),
        );
        let mut nodes = Vec::new();
        for (i, (_, out)) in ios.iter_mut().enumerate() {
            let mut line = String::new();
            out.read_line(&mut line)
                .map_err(|e| format!("node {i} did not report: {e}"))?;
            nodes.push(
                serde_json::from_str::<NodeOutcome>(&line)
                    .map_err(|e| format!("node {i} reported `{}`: {e}", line.trim()))?,
            );
        }
        let captured = match cap {
            Some(c) => c.finish().map_err(|e| format!("the capture failed: {e}"))?,
            None => Vec::new(),
        };
        let mut kinds: Vec<String> = nodes.iter().map(|o| o.offload.clone()).collect();
        kinds.sort();
        kinds.dedup();
        Ok(RawOutcome {
            nodes,
            finished: done == job.workers,
            duration: last,
            socket: kinds.join("/"),
            captured,
            namespaces: topo.hosts.iter().map(|h| h.namespace.clone()).collect(),
        })
    })();
    for mut c in children {
        if result.is_err() {
            let _ = c.kill();
        }
        let _ = c.wait();
        let mut err = String::new();
        if let Some(mut e) = c.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut err);
        }
        if let (Err(msg), false) = (&mut result, err.trim().is_empty()) {
            msg.push_str(&format!(" (node said: {})", err.trim()));
        }
    }
    drop(topo);
    result
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
pub fn roce_headers(frame: &[u8]) -> Result<(u8, u32, u32), String> {
    use inabench_wire::roce::{FrameRepr, IcrcCheck};
    FrameRepr::parse_with(frame, IcrcCheck::Verify)
        .map(|(r, _)| (r.bth.opcode, r.bth.dest_qp, r.bth.psn))
        .map_err(|e| format!("{e:?}"))
}
