//! One push/pull job (WorkerNICs pushing gradients while the AggNIC pushes parameters) on the
//! suite's fabrics: `sim` (virtual time, link rates, seeded loss) and `mem` (threads, real time),
//! with the outcome checked against a reference. On `mem` every link direction has a finite
//! drop-tail buffer ([`Bounded`]), as the `sim` fabric's egress queues and real ports do.
//! Every run of the crate reaches its fabric through [`run_on`] (any [`Fabric`]); none
//! constructs a fabric itself.

use crate::switch::SmartSwitch;
use crate::transport::{Config, Nic};
use inabench_fabric::fault::{Fate, FaultInjector, Faults};
use inabench_fabric::sim::LinkConfig;
use inabench_fabric::{
    Endpoint, Fabric, FabricError, FabricReport, Mem, Nanos, NodeId, Sim, Transmit, Until,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The buffer of one link direction: the `sim` fabric's drop-tail egress queue (`sim_link`)
/// and, on `mem`, the most bytes a sender may have on its way to one receiver ([`Bounded`]).
/// The suite's choice (the paper gives no switch or NIC buffer size); no claim's verdict rests
/// on it: it only has to be finite and at least a window of data packets, so that a lossless
/// run never fills it.
pub const LINK_QUEUE_BYTES: usize = 4 << 20;

/// One-way link latency: 0.5 us, a rack-local cable and a switch hop; the paper gives none. The
/// suite's choice, the same value as the Table 6 systems' links
/// (`inabench_ina::common::LINK_LATENCY_NS`), declared here so that LuWu's links are its own.
pub const LINK_LATENCY_NS: u64 = 500;

/// A node of a job: a worker's NIC (`Worker`), the switch, or the AggNIC (`Other`), one
/// forwarding `Endpoint` impl ([`inabench_fabric::Node`]).
pub type Node = inabench_fabric::Node<Box<Nic>, Box<SmartSwitch>, Box<Nic>>;

/// The NIC of a node (a worker's or the AggNIC), if it is one.
pub fn nic(n: &Node) -> Option<&Nic> {
    match n {
        Node::Worker(x) | Node::Other(x) => Some(x),
        Node::Switch(_) => None,
    }
}

/// What the job moves: one gradient vector per worker (pushed, summed or max-ed in the switch)
/// and one parameter vector (pushed by the AggNIC, pulled by every worker). Either may be empty.
#[derive(Debug, Clone, Default)]
pub struct Job {
    pub grads: Vec<Vec<i32>>,
    pub max: bool,
    pub params: Vec<i32>,
}

impl Job {
    /// The reference aggregate: element-wise wrapping sum (or max) over workers.
    pub fn reference(&self) -> Vec<i32> {
        let n = self.grads.first().map_or(0, Vec::len);
        (0..n)
            .map(|i| {
                let mut it = self.grads.iter().map(|g| g[i]);
                let first = it.next().unwrap_or(0);
                if self.max {
                    it.fold(first, i32::max)
                } else {
                    it.fold(first, i32::wrapping_add)
                }
            })
            .collect()
    }
}

/// The nodes in id order: workers 0..n, the switch n, the AggNIC n + 1.
pub fn build(cfg: &Config, job: &Job) -> Vec<Node> {
    let gvals = job.grads.first().map_or(0, Vec::len);
    let mut nodes: Vec<Node> = job
        .grads
        .iter()
        .enumerate()
        .map(|(w, g)| {
            Node::Worker(Box::new(Nic::worker(
                cfg,
                w,
                g.clone(),
                job.max,
                job.params.len(),
            )))
        })
        .collect();
    nodes.push(Node::Switch(Box::new(SmartSwitch::new(cfg))));
    nodes.push(Node::Other(Box::new(Nic::agg(
        cfg,
        job.params.clone(),
        gvals,
    ))));
    nodes
}

/// The outcome of a job.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    pub finished: bool,
    /// Every worker's pulled parameters equal the pushed ones and the AggNIC's pulled aggregate
    /// equals the reference, bit for bit, each packet drained exactly once.
    pub exact: bool,
    /// Every value drained so far (each RX buffer drains in SeqNum order, so a prefix) equals the
    /// reference's: a wrong sum shows even in a run that did not finish.
    pub drained_exact: bool,
    /// The aggregate the AggNIC pulled (truncated to the gradient length).
    pub aggregate: Vec<i32>,
    /// What each worker pulled.
    pub pulled: Vec<Vec<i32>>,
    /// Time from start to the AggNIC's last aggregated gradient drained (ns).
    pub push_ns: u64,
    /// Per worker: time to its last parameter drained (ns).
    pub pull_ns: Vec<u64>,
    /// The whole job (ns).
    pub end_ns: u64,
    pub resends: u64,
    pub stalls: u64,
    pub rx_overflows: u64,
    pub rx_duplicates: u64,
    pub malformed: u64,
    /// Heartbeat bytes sent per NIC and by the switch, and frames lost on links.
    pub heartbeat_bytes: u64,
    /// Heartbeat frames the NICs sent, and how many NICs there are.
    pub heartbeat_frames: u64,
    pub nics: usize,
    pub switch_heartbeat_bytes: u64,
    pub dropped: u64,
    pub reforwarded: u64,
    pub evicted_incomplete: u64,
    pub recirculations: u64,
    /// `mem` only: frames dropped at a full link buffer, and the most bytes one link direction
    /// held at once.
    pub tail_drops: u64,
    pub link_peak_bytes: u64,
    /// The fabric that ran (its report's label; empty for an outcome gathered by hand).
    pub fabric: &'static str,
}

/// Gather the outcome from finished nodes.
pub fn outcome(cfg: &Config, job: &Job, nodes: &[Node], finished: bool, end_ns: u64) -> Outcome {
    let mut o = Outcome {
        finished,
        end_ns,
        ..Outcome::default()
    };
    let want = job.reference();
    let mut exact = finished;
    let mut drained_exact = true;
    // the values drained so far against the same prefix of the reference
    let prefix = |got: &[i32], want: &[i32]| got.len() <= want.len() && got == &want[..got.len()];
    for (i, n) in nodes.iter().enumerate() {
        if let Some(nic) = nic(n) {
            o.resends += nic.tx.resends;
            o.stalls += nic.tx.stalls;
            o.rx_overflows += nic.rx.overflows;
            o.rx_duplicates += nic.rx.duplicates;
            o.malformed += nic.stats.malformed_rx;
            o.heartbeat_bytes += nic.stats.heartbeat_bytes_tx;
            o.heartbeat_frames += nic.stats.heartbeats_tx;
            o.nics += 1;
            let start = nic.stats.start_ns.unwrap_or(0);
            let done = nic.stats.rx_done_ns.unwrap_or(end_ns).saturating_sub(start);
            let got: Vec<i32> = nic.rx.out.clone();
            if i == cfg.agg_id() as usize {
                let got = got.get(..want.len()).unwrap_or(&got).to_vec();
                drained_exact &= prefix(&got, &want);
                exact &= got == want && nic.rx.consumed == nic.rx.packets;
                o.aggregate = got;
                o.push_ns = done;
            } else {
                let got = got.get(..job.params.len()).unwrap_or(&got).to_vec();
                drained_exact &= prefix(&got, &job.params);
                exact &= got == job.params && nic.rx.consumed == nic.rx.packets;
                o.pulled.push(got);
                o.pull_ns.push(done);
            }
        }
        if let Some(s) = n.switch() {
            o.switch_heartbeat_bytes = s.stats.heartbeat_bytes_out;
            o.reforwarded = s.stats.reforwarded;
            o.evicted_incomplete = s.stats.evicted_incomplete;
            o.recirculations = s.pipeline.stats.recirculations;
            o.malformed += s.stats.malformed;
        }
    }
    o.exact = exact;
    o.drained_exact = drained_exact;
    o
}

/// The sim fabric's link for `cfg`: its line rate, 0.5 us, jumbo MTU, 4 MB drop-tail egress.
pub fn sim_link(cfg: &Config) -> LinkConfig {
    LinkConfig {
        rate_bps: cfg.line_rate_bps,
        latency_ns: LINK_LATENCY_NS,
        mtu: 9216,
        queue_bytes: LINK_QUEUE_BYTES,
        framing_bytes: 24,
    }
}

/// Run `nodes` (node `i` has id `i`) on `fabric` until every node `counted` names is done or
/// `limit_ns` of the fabric's time has passed: the crate's one way onto a fabric. The nodes
/// come back with the fabric's report, whose `fabric` is the label a row carries.
pub fn run_on<N, F>(
    fabric: &mut F,
    nodes: Vec<N>,
    counted: impl Fn(usize) -> bool,
    limit_ns: Nanos,
) -> Result<(Vec<N>, FabricReport), FabricError>
where
    N: Endpoint,
    F: Fabric<N> + ?Sized,
{
    let until = Until {
        counted: (0..nodes.len()).map(counted).collect(),
        limit_ns,
    };
    fabric.run(nodes, &until)
}

/// The result of [`run_on`] for nodes numbered by their position ([`build`]'s, the ring's): the
/// sim and mem fabrics refuse nothing else.
pub(crate) fn numbered<T>(ran: Result<T, FabricError>) -> T {
    ran.unwrap_or_else(|e| panic!("the nodes are numbered by their position: {e}"))
}

/// Run a job on the discrete-event fabric. The NIC transports are hardware (FPGA) in LuWu, so
/// no host CPU cost is charged per frame. Every node (the switch too) is counted.
pub fn run_sim(cfg: &Config, job: &Job, faults: Faults, max_ns: u64) -> (Vec<Node>, Outcome) {
    let nodes = build(cfg, job);
    let mut sim = Sim {
        faults,
        ..Sim::new(sim_link(cfg), cfg.switch_id())
    };
    let (nodes, rep) = numbered(run_on(&mut sim, nodes, |_| true, max_ns));
    let mut o = outcome(cfg, job, &nodes, rep.finished, rep.end_ns);
    o.dropped = rep.faults.dropped + rep.dropped_queue + rep.dropped_mtu;
    o.fabric = rep.fabric;
    (nodes, o)
}

/// The bytes on their way over each link direction of a `mem` run (sent by the sender's
/// [`Bounded`], not yet handed to the receiver's), with their bound, peaks and drops.
#[derive(Debug)]
pub struct LinkBuffers {
    nodes: usize,
    cap: u64,
    bytes: Vec<AtomicU64>,
    peak: Vec<AtomicU64>,
    /// Frames dropped because their link's buffer was full.
    pub tail_drops: AtomicU64,
    /// Frames the senders' seeded faults dropped.
    pub lost: AtomicU64,
}

impl LinkBuffers {
    pub fn new(nodes: usize, cap: usize) -> LinkBuffers {
        let zeros = || (0..nodes * nodes).map(|_| AtomicU64::new(0)).collect();
        LinkBuffers {
            nodes,
            cap: cap as u64,
            bytes: zeros(),
            peak: zeros(),
            tail_drops: AtomicU64::new(0),
            lost: AtomicU64::new(0),
        }
    }

    fn link(&self, from: NodeId, to: NodeId) -> Option<usize> {
        let (f, t) = (from as usize, to as usize);
        (f < self.nodes && t < self.nodes).then_some(f * self.nodes + t)
    }

    /// Room for `len` more bytes on `from -> to`: take it (true) or refuse (false, a tail drop).
    /// Only the sender's thread adds to a link, so the check and the add do not race with
    /// another add.
    fn admit(&self, from: NodeId, to: NodeId, len: usize) -> bool {
        let Some(k) = self.link(from, to) else {
            return true;
        };
        let now = self.bytes[k].load(Ordering::Acquire);
        if now + len as u64 > self.cap {
            self.tail_drops.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let after = self.bytes[k].fetch_add(len as u64, Ordering::AcqRel) + len as u64;
        self.peak[k].fetch_max(after, Ordering::Relaxed);
        true
    }

    /// `len` bytes of `from -> to` left the link (delivered, or lost on it).
    fn release(&self, from: NodeId, to: NodeId, len: usize) {
        if let Some(k) = self.link(from, to) {
            let _ = self.bytes[k].fetch_update(Ordering::AcqRel, Ordering::Acquire, |b| {
                Some(b.saturating_sub(len as u64))
            });
        }
    }

    /// The most bytes any link direction held at once.
    pub fn peak_bytes(&self) -> u64 {
        self.peak
            .iter()
            .map(|p| p.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0)
    }

    /// The bound.
    pub fn cap(&self) -> u64 {
        self.cap
    }
}

/// A node on `mem` with a finite buffer on each of its outgoing link directions: a frame that
/// would take its link past [`LinkBuffers`]' bound is dropped at the tail, as a switch port or
/// the `sim` fabric's egress queue drops it, instead of waiting in an unbounded channel. Seeded
/// loss and duplication are applied here, per link direction with the fabric's own
/// [`FaultInjector`] (so a lost frame is known to have left its link); reordering stays with
/// the fabric. Without it a go-back-N resend storm on a host slower than the modelled line rate
/// (every stall resends a whole window while the earlier copies still wait in the channels)
/// grew the channels without bound (24 GB at a 4970-packet window and 0.1% loss).
pub struct Bounded {
    pub node: Node,
    links: Arc<LinkBuffers>,
    faults: FaultInjector,
    /// The second copy of a duplicated frame, sent on the next poll.
    dup: Option<Transmit>,
    mtu: usize,
}

impl Bounded {
    pub fn new(node: Node, links: Arc<LinkBuffers>, faults: Faults, mtu: usize) -> Bounded {
        Bounded {
            node,
            links,
            faults: FaultInjector::new(faults),
            dup: None,
            mtu,
        }
    }
}

impl Endpoint for Bounded {
    fn id(&self) -> NodeId {
        self.node.id()
    }
    fn handle_packet(&mut self, now: Nanos, from: NodeId, frame: &[u8]) {
        self.links.release(from, self.node.id(), frame.len());
        self.node.handle_packet(now, from, frame)
    }
    fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        if let Some(t) = self.dup.take() {
            return Some(t);
        }
        let me = self.node.id();
        loop {
            let t = self.node.poll_transmit(now)?;
            let len = t.bytes.len();
            if len > self.mtu || self.links.link(me, t.to).is_none() {
                // the fabric drops it (and counts it); it never occupies a link
                return Some(t);
            }
            if !self.links.admit(me, t.to, len) {
                continue;
            }
            match self.faults.fate(me, t.to) {
                Fate::Drop => {
                    self.links.release(me, t.to, len);
                    self.links.lost.fetch_add(1, Ordering::Relaxed);
                }
                Fate::Deliver { copies, .. } => {
                    if copies > 1 && self.links.admit(me, t.to, len) {
                        self.dup = Some(t.clone());
                    }
                    return Some(t);
                }
            }
        }
    }
    fn poll_timeout(&self) -> Option<Nanos> {
        self.node.poll_timeout()
    }
    fn handle_timeout(&mut self, now: Nanos) {
        self.node.handle_timeout(now)
    }
    fn is_done(&self) -> bool {
        self.node.is_done()
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        self.node.counters()
    }
}

/// Run a job on the in-process fabric (a thread per node, real time), every link direction
/// bounded at [`LINK_QUEUE_BYTES`] ([`Bounded`]).
pub fn run_mem(
    cfg: &Config,
    job: &Job,
    faults: Faults,
    deadline: std::time::Duration,
) -> (Vec<Node>, Outcome) {
    run_mem_bounded(cfg, job, faults, deadline, LINK_QUEUE_BYTES)
}

/// [`run_mem`] with a chosen bound per link direction (bytes).
pub fn run_mem_bounded(
    cfg: &Config,
    job: &Job,
    faults: Faults,
    deadline: std::time::Duration,
    link_bytes: usize,
) -> (Vec<Node>, Outcome) {
    const MTU: usize = 9216;
    let nodes = build(cfg, job);
    let links = Arc::new(LinkBuffers::new(nodes.len(), link_bytes));
    // loss and duplication per link in the senders' wrappers; reordering in the fabric
    let here = Faults {
        reorder: 0.0,
        ..faults
    };
    let fabric = Faults {
        loss: 0.0,
        duplicate: 0.0,
        ..faults
    };
    let nodes: Vec<Bounded> = nodes
        .into_iter()
        .map(|n| Bounded::new(n, links.clone(), here, MTU))
        .collect();
    let sw = cfg.switch_id() as usize;
    let mut mem = Mem {
        mtu: MTU,
        faults: fabric,
    };
    let limit_ns = u64::try_from(deadline.as_nanos()).unwrap_or(u64::MAX);
    let (nodes, rep) = numbered(run_on(&mut mem, nodes, |i| i != sw, limit_ns));
    let nodes: Vec<Node> = nodes.into_iter().map(|b| b.node).collect();
    let mut o = outcome(cfg, job, &nodes, rep.finished, rep.end_ns);
    o.tail_drops = links.tail_drops.load(Ordering::Relaxed);
    o.link_peak_bytes = links.peak_bytes();
    o.dropped = links.lost.load(Ordering::Relaxed) + o.tail_drops + rep.dropped_mtu;
    o.fabric = rep.fabric;
    (nodes, o)
}
