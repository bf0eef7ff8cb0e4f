//! The `udp` fabric with one process per node ([`UdpProcesses`]): a [`crate::Fabric`] whose nodes
//! are built in other processes, so it runs a [`Deployment`] ([`crate::Fabric::run_deployment`],
//! the door every fabric shares) and refuses built nodes. The deployment says how many nodes there
//! are, which are counted, and the job line each node's process rebuilds its node from; the
//! parent starts every node, wires them and collects one [`FabricReport`] (the same type every
//! fabric returns, labelled `udp`, or `raw` on [`Placement::NetnsLinked`], whose errors say `the
//! raw fabric could not start`) and each node's own report line. The child side is
//! [`serve_child`]: it reads its job line, builds its node with the caller's builder, binds its
//! socket and serves it with [`crate::udp::serve_prepared`].
//!
//! The protocol on a node's stdin/stdout: the parent writes the job as one line; the node builds
//! its endpoint, binds its socket and prints `ready <port>`; the parent answers `go <coordinator>
//! <node 0> ...` (a sharded node: its processes' addresses joined by commas); the node serves
//! until the coordinator's stop and prints `totals <frames_tx> <bytes_tx> <frames_rx> <bytes_rx>
//! <cpu_ns> <done_ns> <dropped> <send_errors>` and then its own report as one line.
//!
//! Placement: every node on 127.0.0.1, or each in its own network namespace on a bridge
//! ([`crate::netns`]; root and node processes). Where no node binary is at hand the same child
//! code runs as threads of this process ([`Spawn::Threads`]).

use crate::driver::{
    Deployed, Deployment, Fabric, FabricError, FabricReport, NodeTotals, Ran, Until,
};
use crate::endpoint::{Endpoint, Nanos};
use crate::udp::{self, Coordinator, NodeConfig, NodeReport, SocketLayer, Steering};
use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::process::{Child as Process, Command, Stdio};
use std::time::{Duration, Instant};

/// What can go wrong between a process-per-node run's parent and its nodes. A node's own
/// refusal (its builder's or report's words) crosses the pipe as text and stays text here
/// ([`NodeError::Node`]); everything the parent or the child's plumbing sees is typed.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The node's own words: a job its builder refuses, a report it cannot make, a deployment
    /// that cannot write a node's job, or what a node said on stderr before it went away.
    #[error("{0}")]
    Node(String),
    /// An I/O step of the protocol failed (`what`: which, in words).
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// A node answered the protocol with something else (`said`: its line).
    #[error("node {node} {step} (said `{said}`)")]
    Protocol {
        node: usize,
        step: &'static str,
        said: String,
    },
    /// The placement needs what this run lacks.
    #[error("{0}")]
    Placement(&'static str),
    /// A caller's hook around the start signal failed.
    #[error("{0}")]
    Around(String),
}

impl NodeError {
    fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> NodeError {
        let what = what.into();
        move |source| NodeError::Io { what, source }
    }
}

impl From<String> for NodeError {
    fn from(words: String) -> NodeError {
        NodeError::Node(words)
    }
}

/// A child in this process: reads its job from the first, reports on the second.
pub type ChildMain = fn(&mut dyn BufRead, &mut dyn Write) -> Result<(), NodeError>;

/// How the nodes start.
#[derive(Debug, Clone)]
pub enum Spawn {
    /// One process per node: `exe command`, its stdin/stdout the protocol, its stderr captured.
    Processes { exe: PathBuf, command: &'static str },
    /// One thread per node in this process running `child` (tests, libraries without a binary).
    Threads(ChildMain),
}

/// Where the nodes' sockets live.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Placement {
    /// Every node on 127.0.0.1.
    Loopback,
    /// Every node in its own network namespace on a bridge, each link limited to `rate_mbit`
    /// (if given) with tbf. Needs root and node processes.
    Netns { rate_mbit: Option<f64> },
    /// As `Netns` (the bridge carries the control datagrams only), with a veth link of
    /// `link_mtu` between every pair of nodes (named [`crate::raw::link_name`] of the peer in
    /// each namespace): the raw fabric's frames go over those ([`serve_child_raw`]).
    NetnsLinked { link_mtu: usize },
}

/// What a caller does around a run's start signal with the namespaces in place: e.g. start a
/// capture on one node's link once every node is ready, and finish it once they stopped (before
/// the namespaces are removed).
pub trait Around {
    fn before_go(&mut self, _topo: Option<&crate::netns::Netns>) -> Result<(), NodeError> {
        Ok(())
    }
    fn after_stop(&mut self) -> Result<(), NodeError> {
        Ok(())
    }
}

impl Around for () {}

/// The `udp` fabric, a process (or thread) per node. The run's limit (wall time) is the one
/// [`crate::Fabric::run_deployment`] is given.
#[derive(Debug, Clone)]
pub struct UdpProcesses {
    pub spawn: Spawn,
    pub placement: Placement,
}

/// What a process-per-node run returns.
#[derive(Debug, Clone)]
pub struct ProcessRun {
    /// The common report: node `i`'s totals summed over its processes.
    pub report: FabricReport,
    /// When the last counted node said done (since the start signal; zero if none did).
    pub last_done: Duration,
    /// Each process's own report line, in process order ([`ProcessRun::node_of`]).
    pub lines: Vec<String>,
    /// The node each process served: nodes `0..n` first, then the extra processes of split nodes.
    pub node_of: Vec<usize>,
    /// The namespaces the run made (removed when it returned; empty on loopback).
    pub namespaces: Vec<String>,
}

enum Handle {
    Proc(Process),
    Thread(std::thread::JoinHandle<Result<(), NodeError>>),
}

struct NodeIo {
    input: Box<dyn Write + Send>,
    output: Box<dyn BufRead + Send>,
    handle: Handle,
}

fn start(spawn: &Spawn, job: &str, prefix: Option<Vec<String>>) -> Result<NodeIo, NodeError> {
    let mut n = match spawn {
        Spawn::Processes { exe, command } => {
            // in a namespace: `ip netns exec NAME exe command`
            let mut cmd = match &prefix {
                Some(p) if !p.is_empty() => {
                    let mut c = Command::new(&p[0]);
                    c.args(&p[1..]).arg(exe);
                    c
                }
                _ => Command::new(exe),
            };
            let mut child = cmd
                .arg(command)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                // captured, not inherited: a node must not write over the dashboard
                .stderr(Stdio::piped())
                .spawn()
                .map_err(NodeError::io(format!("cannot start {}", exe.display())))?;
            let (Some(i), Some(o)) = (child.stdin.take(), child.stdout.take()) else {
                let _ = child.kill();
                return Err(NodeError::Placement("a node process without pipes"));
            };
            NodeIo {
                input: Box::new(i),
                output: Box::new(BufReader::new(o)),
                handle: Handle::Proc(child),
            }
        }
        Spawn::Threads(child) => {
            let child = *child;
            let (in_r, in_w) = std::io::pipe().map_err(NodeError::io("cannot make a pipe"))?;
            let (out_r, out_w) = std::io::pipe().map_err(NodeError::io("cannot make a pipe"))?;
            let h = std::thread::spawn(move || {
                let mut r = BufReader::new(in_r);
                let mut w = out_w;
                child(&mut r, &mut w)
            });
            NodeIo {
                input: Box::new(in_w),
                output: Box::new(BufReader::new(out_r)),
                handle: Handle::Thread(h),
            }
        }
    };
    writeln!(n.input, "{job}")
        .and_then(|()| n.input.flush())
        .map_err(NodeError::io("cannot hand a node its job"))?;
    Ok(n)
}

fn read_line(n: &mut NodeIo) -> std::io::Result<String> {
    let mut line = String::new();
    n.output.read_line(&mut line)?;
    Ok(line)
}

/// `totals ...` as a node's totals, its dropped frames and send errors.
fn parse_totals(line: &str) -> Option<(NodeTotals, u64, u64)> {
    let mut it = line.trim().strip_prefix("totals ")?.split(' ');
    let mut next = || it.next()?.parse::<u64>().ok();
    let t = NodeTotals {
        frames_tx: next()?,
        bytes_tx: next()?,
        frames_rx: next()?,
        bytes_rx: next()?,
        cpu_ns: next()?,
        done_ns: next()?,
    };
    Some((t, next()?, next()?))
}

impl<N: Endpoint> Fabric<N> for UdpProcesses {
    fn name(&self) -> &'static str {
        self.fabric_name()
    }

    /// Built nodes cannot move into node processes: a process per node runs a [`Deployment`].
    fn run(
        &mut self,
        _nodes: Vec<N>,
        _until: &Until,
    ) -> Result<(Vec<N>, FabricReport), FabricError> {
        Err(self.setup(
            "nodes built in this process cannot move into node processes: run a deployment \
             (Fabric::run_deployment)"
                .into(),
        ))
    }

    /// Start every node of `d` from its job line, run until its counted nodes are done or
    /// `limit_ns` (wall) passes, stop them and collect their report lines.
    fn run_deployment(
        &mut self,
        d: &dyn Deployment<N>,
        limit_ns: Nanos,
    ) -> Result<Deployed<N>, FabricError> {
        let run = self.run_detailed(d, limit_ns, &mut ())?;
        Ok(Deployed {
            report: run.report,
            nodes: Ran::Apart(run.node_of.into_iter().zip(run.lines).collect()),
        })
    }
}

impl UdpProcesses {
    /// The fabric this is: `raw` on [`Placement::NetnsLinked`] (the nodes' frames go over the
    /// veth links), `udp` otherwise. Its report and its errors are labelled with it.
    pub fn fabric_name(&self) -> &'static str {
        match self.placement {
            Placement::NetnsLinked { .. } => "raw",
            Placement::Loopback | Placement::Netns { .. } => "udp",
        }
    }

    fn setup(&self, why: String) -> FabricError {
        FabricError::Setup {
            fabric: self.fabric_name(),
            why,
        }
    }

    /// As [`crate::Fabric::run_deployment`], with `around` called once every node is ready
    /// (before the start signal) and once every node stopped and reported (before the namespaces
    /// go), and the process fabric's own detail ([`ProcessRun`]: the namespaces, each process's
    /// node).
    pub fn run_detailed<N>(
        &self,
        d: &dyn Deployment<N>,
        limit_ns: Nanos,
        around: &mut dyn Around,
    ) -> Result<ProcessRun, FabricError> {
        let deadline = Duration::from_nanos(limit_ns);
        let n_nodes = d.nodes();
        let namespaced = |rate_mbit| -> Result<crate::netns::Netns, FabricError> {
            if matches!(self.spawn, Spawn::Threads(_)) {
                return Err(self.setup(
                    "netns placement starts node processes, and there is no node binary to start"
                        .into(),
                ));
            }
            crate::netns::Netns::create(n_nodes, rate_mbit).map_err(|e| self.setup(e.to_string()))
        };
        let topo = match self.placement {
            Placement::Loopback => None,
            Placement::Netns { rate_mbit } => Some(namespaced(rate_mbit)?),
            Placement::NetnsLinked { link_mtu } => {
                let mut t = namespaced(None)?;
                for a in 0..n_nodes {
                    for b in a + 1..n_nodes {
                        t.link(a, b, link_mtu)
                            .map_err(|e| self.setup(e.to_string()))?;
                    }
                }
                Some(t)
            }
        };
        let coord = match &topo {
            None => Coordinator::new(),
            Some(t) => Coordinator::on(t.gateway),
        }
        .map_err(|e| self.setup(format!("cannot bind the coordinator: {e}")))?;
        let coord_addr = coord.addr().map_err(|e| self.setup(e.to_string()))?;
        // processes: every node, then the split nodes' other processes
        let procs: Vec<usize> = (0..n_nodes)
            .chain((0..n_nodes).flat_map(|i| std::iter::repeat_n(i, d.processes(i).max(1) - 1)))
            .collect();
        let node_ip = |i: usize| {
            topo.as_ref()
                .and_then(|t| t.hosts.get(i))
                .map_or(Ipv4Addr::LOCALHOST, |h| h.ip)
        };
        let mut nodes: Vec<NodeIo> = Vec::new();
        let result: Result<ProcessRun, NodeError> = (|| {
            for &i in &procs {
                let job = d
                    .job(i, topo.is_some())
                    .map_err(|e| NodeError::Node(format!("node {i}'s job: {e}")))?;
                nodes.push(start(
                    &self.spawn,
                    &job,
                    topo.as_ref().and_then(|t| t.exec_prefix(i)),
                )?);
            }
            let mut ports = Vec::new();
            for (k, n) in nodes.iter_mut().enumerate() {
                let i = procs[k];
                let line =
                    read_line(n).map_err(NodeError::io(format!("node {i} did not start")))?;
                ports.push(udp::parse_ready(&line).ok_or_else(|| NodeError::Protocol {
                    node: i,
                    step: "did not start",
                    said: line.trim().to_string(),
                })?);
            }
            let addrs: Vec<SocketAddrV4> = ports
                .iter()
                .zip(&procs)
                .map(|(p, i)| SocketAddrV4::new(node_ip(*i), *p))
                .collect();
            // node i's addresses: its own, and for a split node its other processes' after it
            let entry = |i: usize| {
                procs
                    .iter()
                    .zip(&addrs)
                    .filter(|(n, _)| **n == i)
                    .map(|(_, a)| a.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            };
            let go = format!(
                "go {} {}\n",
                coord_addr,
                (0..n_nodes).map(entry).collect::<Vec<_>>().join(" ")
            );
            around.before_go(topo.as_ref())?;
            let start = Instant::now();
            for (k, n) in nodes.iter_mut().enumerate() {
                n.input
                    .write_all(go.as_bytes())
                    .and_then(|()| n.input.flush())
                    .map_err(NodeError::io(format!("node {} went away", procs[k])))?;
            }
            let counted = d.counted();
            let (done, last) = coord.wait_and_stop(counted, &addrs, start, deadline);
            let end_ns = start.elapsed().as_nanos() as u64;
            let mut report = FabricReport {
                fabric: self.fabric_name(),
                finished: done == counted,
                time_ns: last.as_nanos() as u64,
                end_ns,
                nodes: vec![NodeTotals::default(); n_nodes],
                node_processes: matches!(self.spawn, Spawn::Processes { .. }),
                ..FabricReport::default()
            };
            let mut lines = Vec::new();
            for (k, n) in nodes.iter_mut().enumerate() {
                let i = procs[k];
                let totals =
                    read_line(n).map_err(NodeError::io(format!("node {i} did not report")))?;
                let (t, dropped, send_errors) =
                    parse_totals(&totals).ok_or_else(|| NodeError::Protocol {
                        node: i,
                        step: "reported no totals",
                        said: totals.trim().to_string(),
                    })?;
                let line =
                    read_line(n).map_err(NodeError::io(format!("node {i} did not report")))?;
                let sum = &mut report.nodes[i];
                sum.frames_tx += t.frames_tx;
                sum.bytes_tx += t.bytes_tx;
                sum.frames_rx += t.frames_rx;
                sum.bytes_rx += t.bytes_rx;
                sum.cpu_ns += t.cpu_ns;
                sum.done_ns = sum.done_ns.max(t.done_ns);
                report.faults.dropped += dropped;
                report.send_errors += send_errors;
                lines.push(line.trim_end().to_string());
            }
            if !report.finished {
                report.time_ns = end_ns;
            }
            around.after_stop()?;
            Ok(ProcessRun {
                report,
                last_done: last,
                lines,
                node_of: procs.clone(),
                namespaces: topo
                    .as_ref()
                    .map(|t| t.hosts.iter().map(|h| h.namespace.clone()).collect())
                    .unwrap_or_default(),
            })
        })();
        let mut result = result;
        for n in nodes {
            drop(n.input);
            match n.handle {
                Handle::Proc(mut c) => {
                    if result.is_err() {
                        let _ = c.kill();
                    }
                    let _ = c.wait();
                    let mut err = String::new();
                    if let Some(mut e) = c.stderr.take() {
                        let _ = std::io::Read::read_to_string(&mut e, &mut err);
                    }
                    if let (Err(e), false) = (&result, err.trim().is_empty()) {
                        result = Err(NodeError::Node(format!("{e} (node said: {})", err.trim())));
                    }
                }
                Handle::Thread(h) => {
                    // the node's own error: the run's if it had none, else beside it (as a node
                    // process's stderr is)
                    if let Ok(Err(e)) = h.join() {
                        result = match result {
                            Ok(_) => Err(e),
                            Err(run) => Err(NodeError::Node(format!("{run} (node said: {e})"))),
                        };
                    }
                }
            }
        }
        result.map_err(|e| self.setup(e.to_string()))
    }
}

/// Given every peer's process addresses, how a node steers its frames among a split peer's
/// processes.
pub type SteerBy = Box<dyn FnOnce(Vec<Vec<SocketAddrV4>>) -> Option<Steering>>;

/// A node a child process serves, as its builder made it from the job line.
pub struct Child<N> {
    pub node: N,
    /// How it is served (I/O model, egress faults, datagram size, deadline, counted or not).
    pub config: NodeConfig,
    /// Bind every address of the namespace's interfaces instead of 127.0.0.1.
    pub bind_any: bool,
    /// Given every peer's process addresses (a split peer has several), how this node steers
    /// its frames among a split peer's processes; `None`: to each peer's first.
    pub steering: Option<SteerBy>,
}

/// The child side: read the job line from `input`, build the node with `build`, bind, print
/// `ready`, read `go`, serve until the stop, print the totals and `report`'s line on `output`.
pub fn serve_child<N: crate::Endpoint>(
    input: &mut dyn BufRead,
    output: &mut dyn Write,
    build: impl FnOnce(&str) -> Result<Child<N>, NodeError>,
    report: impl FnOnce(&N, &NodeReport) -> Result<String, NodeError>,
) -> Result<(), NodeError> {
    let mut line = String::new();
    input
        .read_line(&mut line)
        .map_err(NodeError::io("cannot read the node job"))?;
    let Child {
        mut node,
        config,
        bind_any,
        steering,
    } = build(line.trim_end())?;
    let sock = if bind_any {
        udp::bind(Ipv4Addr::UNSPECIFIED)
    } else {
        udp::bind_loopback()
    }
    .map_err(NodeError::io("cannot bind a UDP socket"))?;
    // the socket layer before `ready`, made for the datagram size the node serves with: nothing
    // of it in the timed run
    let layer = SocketLayer::new(&sock, config.mtu);
    let (wiring, shards) = udp::child_handshake_sharded(&sock, &mut &mut *input, &mut &mut *output)
        .map_err(NodeError::io("the node's handshake failed"))?;
    let steer = steering.and_then(|f| f(shards));
    let rep = udp::serve_prepared(&mut node, &sock, &wiring, &config, steer.as_ref(), layer);
    let own = report(&node, &rep)?;
    write_report(output, &rep, &own)
}

/// The raw fabric's child side ([`Placement::NetnsLinked`]): as [`serve_child`], but the node's
/// frames go as they are through a socket on its link to each peer the builder's second value
/// plans (AF_XDP or `AF_PACKET`, [`crate::raw::open_links`]), the control datagrams over a UDP
/// socket on every address. `report` also gets the node's socket label
/// ([`crate::raw::socket_label`]: which kind ran on each link and why the other did not).
pub fn serve_child_raw<N: crate::Endpoint>(
    input: &mut dyn BufRead,
    output: &mut dyn Write,
    build: impl FnOnce(&str) -> Result<(Child<N>, Vec<crate::raw::LinkPlan>), NodeError>,
    report: impl FnOnce(&N, &NodeReport, &str) -> Result<String, NodeError>,
) -> Result<(), NodeError> {
    use crate::raw;
    let mut line = String::new();
    input
        .read_line(&mut line)
        .map_err(NodeError::io("cannot read the node job"))?;
    let (
        Child {
            mut node, config, ..
        },
        plans,
    ) = build(line.trim_end())?;
    let ctl = udp::bind(Ipv4Addr::UNSPECIFIED)
        .map_err(NodeError::io("cannot bind the control socket"))?;
    let opened = raw::open_links(&plans, config.mtu)
        .map_err(NodeError::io("cannot open the node's links"))?;
    let wiring = udp::child_handshake(&ctl, &mut &mut *input, &mut &mut *output)
        .map_err(NodeError::io("the node's handshake failed"))?;
    let rep = raw::serve(&mut node, &opened.links, &ctl, wiring.coordinator, &config);
    let own = report(&node, &rep, &opened.label)?;
    write_report(output, &rep, &own)
}

fn write_report(output: &mut dyn Write, rep: &NodeReport, own: &str) -> Result<(), NodeError> {
    writeln!(
        output,
        "totals {} {} {} {} {} {} {} {}",
        rep.frames_tx,
        rep.bytes_tx,
        rep.frames_rx,
        rep.bytes_rx,
        rep.cpu_ns,
        rep.done_ns,
        rep.faults.dropped,
        rep.send_errors
    )
    .and_then(|()| writeln!(output, "{own}"))
    .and_then(|()| output.flush())
    .map_err(NodeError::io("cannot write the node's report"))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::driver::BuildError;

    type AnyNode = Box<dyn Endpoint>;

    /// Two nodes with job lines; never built here.
    struct Two;

    impl Deployment<AnyNode> for Two {
        fn nodes(&self) -> usize {
            2
        }
        fn counted(&self) -> usize {
            2
        }
        fn build_node(&self, node: usize) -> Result<AnyNode, BuildError> {
            Err(format!("node {node} is built by its process").into())
        }
        fn job(&self, node: usize, _bind_any: bool) -> Result<String, BuildError> {
            Ok(format!("job {node}"))
        }
    }

    /// Two nodes without job lines.
    struct HereOnly;

    impl Deployment<AnyNode> for HereOnly {
        fn nodes(&self) -> usize {
            2
        }
        fn counted(&self) -> usize {
            2
        }
        fn build_node(&self, node: usize) -> Result<AnyNode, BuildError> {
            Err(format!("node {node} is not built in this test").into())
        }
    }

    fn run(
        fabric: &mut UdpProcesses,
        d: &dyn Deployment<AnyNode>,
    ) -> Result<Deployed<AnyNode>, FabricError> {
        fabric.run_deployment(d, 5_000_000_000)
    }

    fn refusing(input: &mut dyn BufRead, _output: &mut dyn Write) -> Result<(), NodeError> {
        let mut line = String::new();
        input
            .read_line(&mut line)
            .map_err(NodeError::io("cannot read the node job"))?;
        Err(NodeError::Node(format!(
            "`{}` names no system",
            line.trim()
        )))
    }

    #[test]
    fn a_node_that_refuses_its_job_is_an_error_with_its_words() {
        let mut fabric = UdpProcesses {
            spawn: Spawn::Threads(refusing),
            placement: Placement::Loopback,
        };
        let Err(e) = run(&mut fabric, &Two) else {
            panic!("a run whose nodes refused their jobs finished");
        };
        let text = e.to_string();
        // the parent's view (no `ready` from node 0) and the node's own words
        assert!(text.contains("node 0 did not start"), "{text}");
        assert!(text.contains("`job 0` names no system"), "{text}");
    }

    #[test]
    fn a_thread_placement_cannot_make_namespaces() {
        // the error names the fabric that could not start: udp on a bridge, raw on veth links
        for (placement, fabric_name) in [
            (Placement::Netns { rate_mbit: None }, "udp"),
            (Placement::NetnsLinked { link_mtu: 1500 }, "raw"),
        ] {
            let mut fabric = UdpProcesses {
                spawn: Spawn::Threads(refusing),
                placement,
            };
            assert_eq!(fabric.fabric_name(), fabric_name);
            let Err(e) = run(&mut fabric, &Two) else {
                panic!("namespaces without node processes");
            };
            let text = e.to_string();
            assert!(
                text.starts_with(&format!("the {fabric_name} fabric could not start: "))
                    && text.contains("no node binary"),
                "{text}"
            );
        }
    }

    #[test]
    fn built_nodes_and_deployments_without_job_lines_are_refused() {
        let mut fabric = UdpProcesses {
            spawn: Spawn::Threads(refusing),
            placement: Placement::Loopback,
        };
        let until = Until::workers(0, 0, 1_000);
        let Err(FabricError::Setup { why, .. }) =
            Fabric::<AnyNode>::run(&mut fabric, Vec::new(), &until)
        else {
            panic!("built nodes moved into node processes");
        };
        assert!(why.contains("run a deployment"), "{why}");
        let Err(FabricError::Setup { why, .. }) = run(&mut fabric, &HereOnly) else {
            panic!("a deployment without job lines ran in node processes");
        };
        assert!(
            why.contains("node 0's job") && why.contains("one process only"),
            "{why}"
        );
    }

    #[test]
    fn totals_lines_parse_and_junk_does_not() {
        let (t, d, s) = parse_totals("totals 1 2 3 4 5 6 7 8\n").expect("parses");
        assert_eq!(
            (
                t.frames_tx,
                t.bytes_tx,
                t.frames_rx,
                t.bytes_rx,
                t.cpu_ns,
                t.done_ns
            ),
            (1, 2, 3, 4, 5, 6)
        );
        assert_eq!((d, s), (7, 8));
        assert!(parse_totals("totals 1 2 3").is_none());
        assert!(parse_totals("ready 5").is_none());
        assert!(parse_totals("totals 1 2 3 4 5 6 7 x").is_none());
    }
}
