//! One way to run endpoints on any fabric: the [`Fabric`] trait (quinn's thin drivers around one
//! sans-IO core, hyperfine's trait at the measuring boundary).
//!
//! A caller describes its nodes as a [`Deployment`] (how many, which count, build node `i`, the
//! job line a node process rebuilds node `i` from), picks a fabric (`sim`, `mem`, `udp` threads,
//! `udp` with a process per node: [`crate::procs::UdpProcesses`]) and calls
//! [`Fabric::run_deployment`] once; callers holding built nodes may call [`Fabric::run`] on the
//! in-process fabrics. Every fabric returns the same
//! [`FabricReport`], labelled with the fabric that ran (the row's fabric label comes from here,
//! never from a workload), and applies the same [`Faults`] the same way: a seeded fate per frame
//! per link direction from [`crate::fault::FaultInjector`] (loss, duplication, reordering by a
//! delay).
//!
//! Time: `sim` counts virtual nanoseconds, `mem` and `udp` wall-clock nanoseconds since the start;
//! [`Until::limit_ns`] is in the fabric's own time.

use crate::endpoint::{Endpoint, Nanos, NodeId};
use crate::fault::{FaultCounters, Faults};
use crate::{mem, sim, udp};
use std::time::Duration;

/// When a run ends: every counted node is done (its `is_done()`), or the limit passes.
#[derive(Debug, Clone)]
pub struct Until {
    /// `counted[i]`: node `i` must be done for the run to finish (workers yes, switches no).
    pub counted: Vec<bool>,
    /// Give up after this much fabric time (ns: virtual on `sim`, wall elsewhere).
    pub limit_ns: Nanos,
}

impl Until {
    /// The first `workers` of `nodes` nodes are counted.
    pub fn workers(workers: usize, nodes: usize, limit_ns: Nanos) -> Until {
        Until {
            counted: (0..nodes).map(|i| i < workers).collect(),
            limit_ns,
        }
    }

    fn counts(&self, i: usize) -> bool {
        self.counted.get(i).copied().unwrap_or(false)
    }
}

/// What one node did during a run, the same fields on every fabric.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeTotals {
    pub frames_tx: u64,
    pub bytes_tx: u64,
    pub frames_rx: u64,
    pub bytes_rx: u64,
    /// CPU the node's stack used (ns): charged per-frame costs on `sim`, the node's own thread
    /// CPU time on `mem` and `udp`.
    pub cpu_ns: u64,
    /// Fabric time at which the node was first seen done (0: never).
    pub done_ns: Nanos,
}

/// One report type for every fabric.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FabricReport {
    /// The fabric that ran (`sim`, `mem`, `udp`): the label rows carry.
    pub fabric: &'static str,
    /// True when every counted node was done before the limit.
    pub finished: bool,
    /// When the last counted node was done (fabric time); the end of the run when unfinished.
    pub time_ns: Nanos,
    /// When the run ended (fabric time).
    pub end_ns: Nanos,
    pub nodes: Vec<NodeTotals>,
    /// Frames larger than the MTU or addressed to no node.
    pub dropped_mtu: u64,
    /// Frames dropped by a full egress queue (`sim` only: the others have no modelled queue).
    pub dropped_queue: u64,
    pub faults: FaultCounters,
    /// Datagrams the kernel refused (`udp` only).
    pub send_errors: u64,
    /// Each node ran in a process of its own ([`crate::procs::UdpProcesses`] starting node
    /// processes); false when the nodes ran in this process (threads or virtual time).
    pub node_processes: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum FabricError {
    #[error("the {fabric} fabric could not start: {why}")]
    Setup { fabric: &'static str, why: String },
    #[error("a node of the {0} fabric panicked")]
    NodePanicked(&'static str),
    #[error("node {index} has id {id}: node i must have id i")]
    BadIds { index: usize, id: NodeId },
    /// A [`Deployment`] could not build node `node` (or write its job line).
    #[error("node {node} cannot be built: {source}")]
    Build {
        node: usize,
        #[source]
        source: BuildError,
    },
}

/// Why a [`Deployment`] cannot build a node or write its job line (the system's own error).
pub type BuildError = Box<dyn std::error::Error + Send + Sync>;

/// A run's nodes as a recipe, not yet built: how many, which count, how to build node `i` here,
/// and the job line a node process rebuilds node `i` from. Every fabric takes one through
/// [`Fabric::run_deployment`]: the in-process fabrics build the nodes and [`Fabric::run`] them;
/// [`crate::procs::UdpProcesses`] hands each node process its job line instead (hyperfine's one
/// measuring loop over its executors).
pub trait Deployment<N>: Sync {
    /// Nodes (node `i` has id `i`).
    fn nodes(&self) -> usize;
    /// The first `counted()` nodes must be done for the run to finish (the workers).
    fn counted(&self) -> usize;
    /// Node `node`, built in this process.
    fn build_node(&self, node: usize) -> Result<N, BuildError>;
    /// Processes serving node `node` in a process-per-node run (a switch split in shards: one
    /// process each); 1 unless the deployment splits it. The in-process fabrics run one node.
    fn processes(&self, _node: usize) -> usize {
        1
    }
    /// The one-line job node `node`'s process rebuilds node `node` from (`bind_any`: the node
    /// binds every address of its namespace's interfaces instead of 127.0.0.1). A deployment
    /// without one runs on the in-process fabrics only.
    fn job(&self, node: usize, _bind_any: bool) -> Result<String, BuildError> {
        Err(format!("node {node} has no job line: this deployment runs in one process only").into())
    }
}

/// Where a deployment's nodes ended up after [`Fabric::run_deployment`].
#[derive(Debug)]
pub enum Ran<N> {
    /// Built and run in this process (`sim`, `mem`, `udp` threads): the nodes, to read.
    Here(Vec<N>),
    /// Each built by a node process (or thread) of its own from its job line: each process's own
    /// report line as `(node, line)`, in process order (nodes `0..n`, then the extra processes
    /// of split nodes).
    Apart(Vec<(usize, String)>),
}

/// What [`Fabric::run_deployment`] returns: the one report, and the nodes or their lines.
#[derive(Debug)]
pub struct Deployed<N> {
    pub report: FabricReport,
    pub nodes: Ran<N>,
}

/// A fabric: moves the frames of a set of endpoints until they are done.
///
/// Generic over the node type so callers get their own nodes back (to read results); a mix of
/// node types runs as `Box<dyn Endpoint>` (which implements [`Endpoint`]).
pub trait Fabric<N: Endpoint> {
    /// The label of what ran.
    fn name(&self) -> &'static str;
    /// Run `nodes` (node `i` has id `i`) until `until`; the nodes come back with the report.
    fn run(&mut self, nodes: Vec<N>, until: &Until) -> Result<(Vec<N>, FabricReport), FabricError>;

    /// Run `d`'s nodes until its counted nodes are done or `limit_ns` (fabric time) passes: the
    /// one door every fabric shares. By default the nodes are built here ([`Deployment::build_node`])
    /// and [`Fabric::run`]; a fabric whose nodes live in processes of their own overrides it.
    fn run_deployment(
        &mut self,
        d: &dyn Deployment<N>,
        limit_ns: Nanos,
    ) -> Result<Deployed<N>, FabricError> {
        let nodes = (0..d.nodes())
            .map(|node| {
                d.build_node(node)
                    .map_err(|source| FabricError::Build { node, source })
            })
            .collect::<Result<Vec<N>, _>>()?;
        let until = Until::workers(d.counted(), nodes.len(), limit_ns);
        let (nodes, report) = self.run(nodes, &until)?;
        Ok(Deployed {
            report,
            nodes: Ran::Here(nodes),
        })
    }
}

fn check_ids<N: Endpoint>(nodes: &[N]) -> Result<(), FabricError> {
    match nodes
        .iter()
        .enumerate()
        .find(|(i, n)| n.id() as usize != *i)
    {
        Some((index, n)) => Err(FabricError::BadIds { index, id: n.id() }),
        None => Ok(()),
    }
}

/// Virtual time on a star (see [`sim`]): link rate, latency, queue and per-frame host costs.
pub struct Sim {
    pub link: sim::LinkConfig,
    /// Per-node receive and transmit costs; nodes past the end cost nothing.
    pub costs: Vec<sim::NodeConfig>,
    pub switch: NodeId,
    pub faults: Faults,
    pub tap: Option<sim::Tap>,
    /// Per-host link rates where they differ from `link`'s ([`sim::SimFabric::set_node_rates`];
    /// empty: every link at `link`'s rate).
    pub rates: Vec<Option<f64>>,
}

impl Sim {
    /// A star around `switch` on `link`, free host stacks, no faults.
    pub fn new(link: sim::LinkConfig, switch: NodeId) -> Sim {
        Sim {
            link,
            costs: Vec::new(),
            switch,
            faults: Faults::default(),
            tap: None,
            rates: Vec::new(),
        }
    }
}

impl<N: Endpoint> Fabric<N> for Sim {
    fn name(&self) -> &'static str {
        "sim"
    }

    fn run(&mut self, nodes: Vec<N>, until: &Until) -> Result<(Vec<N>, FabricReport), FabricError> {
        self.run_observed(nodes, until, |_, _| {})
    }
}

impl Sim {
    /// As [`Fabric::run`], with `observe` shown the virtual time and the nodes after every event,
    /// before the stop check (what a calibration's [`crate::wrap::CpuMeter`] counts its batches
    /// by; it changes nothing in the run).
    pub fn run_observed<N: Endpoint>(
        &mut self,
        nodes: Vec<N>,
        until: &Until,
        mut observe: impl FnMut(Nanos, &[N]),
    ) -> Result<(Vec<N>, FabricReport), FabricError> {
        check_ids(&nodes)?;
        let n = nodes.len();
        let free = sim::NodeConfig {
            rx_cost_ns: 0,
            tx_cost_ns: 0,
        };
        let cfg = (0..n)
            .map(|i| self.costs.get(i).copied().unwrap_or(free))
            .collect();
        let mut f = sim::SimFabric::new(nodes, cfg, self.switch, self.link, self.faults);
        if let Some(tap) = self.tap.take() {
            f.set_tap(tap);
        }
        if !self.rates.is_empty() {
            f.set_node_rates(&self.rates);
        }
        let mut stop = StopCheck::new(n);
        let rep = f
            .run_until_event(until.limit_ns, |now, node, nodes| {
                observe(now, nodes);
                stop.after_event(now, node as usize, nodes, until)
            })
            .clone();
        let done_at = stop.done_at;
        let nodes_out = f.into_nodes();
        let totals: Vec<NodeTotals> = rep
            .nodes
            .iter()
            .zip(&done_at)
            .map(|(s, d)| NodeTotals {
                frames_tx: s.frames_tx,
                bytes_tx: s.bytes_tx,
                frames_rx: s.frames_rx,
                bytes_rx: s.bytes_rx,
                cpu_ns: s.busy_ns,
                done_ns: *d,
            })
            .collect();
        Ok((
            nodes_out,
            FabricReport {
                fabric: "sim",
                finished: rep.finished,
                time_ns: last_done(&totals, until).unwrap_or(rep.end_ns),
                end_ns: rep.end_ns,
                nodes: totals,
                dropped_mtu: rep.dropped_mtu,
                dropped_queue: rep.dropped_queue,
                faults: rep.faults,
                send_errors: 0,
                node_processes: false,
            },
        ))
    }
}

/// The `sim` fabric's stop check after an event, without a look at every node every time: a
/// node's done state changes when the fabric calls it, and after an event the fabric has called
/// one node (the one whose packet, timer or transmit wake-up it was), so the check looks at that
/// node (the first time it is seen done: its `done_ns`) and at one counted node not yet done when
/// last looked at (the witness): while the witness is not done, the run is not over. When the
/// witness is done, every node is looked at (as before, after every event): that scan records
/// every node seen done and finds the next witness, or ends the run. The stop decision is the
/// full scan's always, also for nodes whose done state can go back or that share state (a node
/// done once a total over every node passes a cap: the witness is one of them, so its turn
/// brings the scan). The first event scans every node (nodes done from their start are seen
/// done then, as before). A scan of every node after every event took a fifth of a 64-worker
/// run's time (issue #39).
struct StopCheck {
    /// Fabric time each node was first seen done (0: not yet).
    done_at: Vec<Nanos>,
    /// A counted node not done at the last scan (`None`: none was).
    witness: Option<usize>,
    /// The first scan is behind.
    scanned: bool,
}

impl StopCheck {
    fn new(n: usize) -> StopCheck {
        StopCheck {
            done_at: vec![0; n],
            witness: None,
            scanned: false,
        }
    }

    /// After node `node` handled an event at `now`: true when every counted node is done.
    fn after_event<N: Endpoint>(
        &mut self,
        now: Nanos,
        node: usize,
        nodes: &[N],
        until: &Until,
    ) -> bool {
        if !self.scanned {
            return self.scan(now, nodes, until);
        }
        if self.done_at.get(node) == Some(&0) && nodes[node].is_done() {
            self.done_at[node] = now.max(1);
        }
        if let Some(w) = self.witness
            && !nodes[w].is_done()
        {
            return false;
        }
        self.scan(now, nodes, until)
    }

    /// Look at every node: record the ones newly done, pick the first counted node not done as
    /// the witness; true when there is none.
    fn scan<N: Endpoint>(&mut self, now: Nanos, nodes: &[N], until: &Until) -> bool {
        let mut witness = None;
        for (i, node) in nodes.iter().enumerate() {
            if node.is_done() {
                if self.done_at[i] == 0 {
                    self.done_at[i] = now.max(1);
                }
            } else if witness.is_none() && until.counts(i) {
                witness = Some(i);
            }
        }
        self.scanned = true;
        self.witness = witness;
        witness.is_none()
    }
}

fn last_done(nodes: &[NodeTotals], until: &Until) -> Option<Nanos> {
    let mut last = None;
    for (i, n) in nodes.iter().enumerate() {
        if until.counts(i) {
            if n.done_ns == 0 {
                return None;
            }
            last = Some(last.unwrap_or(0).max(n.done_ns));
        }
    }
    last
}

/// One thread per node in this process, frames over channels (see [`mem`]).
pub struct Mem {
    pub mtu: usize,
    pub faults: Faults,
}

impl<N: Endpoint + 'static> Fabric<N> for Mem {
    fn name(&self) -> &'static str {
        "mem"
    }

    fn run(&mut self, nodes: Vec<N>, until: &Until) -> Result<(Vec<N>, FabricReport), FabricError> {
        self.run_detailed(nodes, until).map(|(n, r, _)| (n, r))
    }
}

impl Mem {
    /// As [`Fabric::run`], with the `mem` fabric's own report beside the common one (each serving
    /// thread's CPU time and parks: what a diagnosis of the fabric's overhead reads).
    pub fn run_detailed<N: Endpoint + 'static>(
        &mut self,
        nodes: Vec<N>,
        until: &Until,
    ) -> Result<(Vec<N>, FabricReport, mem::MemReport), FabricError> {
        check_ids(&nodes)?;
        let (nodes, rep) = mem::run(
            nodes,
            self.mtu,
            self.faults,
            Duration::from_nanos(until.limit_ns),
            |i| until.counts(i),
        );
        let totals: Vec<NodeTotals> = rep
            .nodes
            .iter()
            .map(|s| NodeTotals {
                frames_tx: s.frames_tx,
                bytes_tx: s.bytes_tx,
                frames_rx: s.frames_rx,
                bytes_rx: s.bytes_rx,
                cpu_ns: s.cpu_ns,
                done_ns: s.done_ns,
            })
            .collect();
        Ok((
            nodes,
            FabricReport {
                fabric: "mem",
                finished: rep.finished,
                time_ns: last_done(&totals, until).unwrap_or(rep.wall_ns),
                end_ns: rep.wall_ns,
                nodes: totals,
                dropped_mtu: rep.dropped_mtu,
                dropped_queue: 0,
                faults: rep.faults.clone(),
                send_errors: 0,
                node_processes: false,
            },
            rep,
        ))
    }
}

/// One UDP socket on 127.0.0.1 and one thread (or the `io` model's threads) per node, in this
/// process (see [`udp`]). Node processes and namespaces are [`crate::procs::UdpProcesses`];
/// this is the in-process form.
pub struct UdpThreads {
    pub mtu: usize,
    pub faults: Faults,
    pub io: udp::IoModel,
}

impl<N: Endpoint> Fabric<N> for UdpThreads {
    fn name(&self) -> &'static str {
        "udp"
    }

    fn run(&mut self, nodes: Vec<N>, until: &Until) -> Result<(Vec<N>, FabricReport), FabricError> {
        use std::net::SocketAddr;
        check_ids(&nodes)?;
        let setup = |why: String| FabricError::Setup { fabric: "udp", why };
        let socks = (0..nodes.len())
            .map(|_| udp::bind_loopback())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| setup(format!("cannot bind a udp socket: {e}")))?;
        let peers = socks
            .iter()
            .map(|s| match s.local_addr() {
                Ok(SocketAddr::V4(a)) => Ok(a),
                Ok(SocketAddr::V6(_)) => Err(setup("a socket bound to IPv6".into())),
                Err(e) => Err(setup(e.to_string())),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let coord = udp::Coordinator::new()
            .map_err(|e| setup(format!("cannot bind the coordinator: {e}")))?;
        let wiring = udp::Wiring {
            peers,
            coordinator: coord.addr().map_err(|e| setup(e.to_string()))?,
        };
        let deadline = Duration::from_nanos(until.limit_ns);
        let counted = until.counted.iter().filter(|c| **c).count();
        let start = std::time::Instant::now();
        let (faults, mtu, io) = (self.faults, self.mtu, self.io);
        std::thread::scope(|sc| {
            let handles: Vec<_> = nodes
                .into_iter()
                .zip(&socks)
                .enumerate()
                .map(|(i, (mut node, sock))| {
                    let wiring = &wiring;
                    let cfg = udp::NodeConfig {
                        io,
                        faults,
                        mtu,
                        deadline,
                        counted: until.counts(i),
                    };
                    sc.spawn(move || {
                        let rep = udp::serve(&mut node, sock, wiring, &cfg);
                        (node, rep)
                    })
                })
                .collect();
            let (done, last) = coord.wait_and_stop(counted, &wiring.peers, start, deadline);
            let end_ns = start.elapsed().as_nanos() as Nanos;
            let mut out = Vec::with_capacity(handles.len());
            let mut rep = FabricReport {
                fabric: "udp",
                finished: done == counted,
                time_ns: last.as_nanos() as Nanos,
                end_ns,
                ..Default::default()
            };
            for h in handles {
                let (node, r) = h.join().map_err(|_| FabricError::NodePanicked("udp"))?;
                out.push(node);
                rep.faults.dropped += r.faults.dropped;
                rep.faults.duplicated += r.faults.duplicated;
                rep.faults.reordered += r.faults.reordered;
                rep.send_errors += r.send_errors;
                rep.nodes.push(NodeTotals {
                    frames_tx: r.frames_tx,
                    bytes_tx: r.bytes_tx,
                    frames_rx: r.frames_rx,
                    bytes_rx: r.bytes_rx,
                    cpu_ns: r.cpu_ns,
                    done_ns: r.done_ns,
                });
            }
            if !rep.finished {
                rep.time_ns = end_ns;
            }
            Ok((out, rep))
        })
    }
}

/// The fabric a spec names (`sim`, `mem`, `udp`), with its parameters: what workloads hand to
/// [`FabricChoice::build`] instead of re-parsing spec parameters each.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FabricChoice {
    Sim {
        link: sim::LinkConfig,
        switch: NodeId,
    },
    Mem {
        mtu: usize,
    },
    Udp {
        mtu: usize,
        io: udp::IoModel,
    },
}

impl FabricChoice {
    /// A boxed fabric for nodes of type `N`, with `faults` and (on `sim`) per-node `costs`.
    pub fn build<N: Endpoint + 'static>(
        self,
        faults: Faults,
        costs: Vec<sim::NodeConfig>,
    ) -> Box<dyn Fabric<N>> {
        match self {
            FabricChoice::Sim { link, switch } => Box::new(Sim {
                link,
                costs,
                switch,
                faults,
                tap: None,
                rates: Vec::new(),
            }),
            FabricChoice::Mem { mtu } => Box::new(Mem { mtu, faults }),
            FabricChoice::Udp { mtu, io } => Box::new(UdpThreads { mtu, faults, io }),
        }
    }
}
