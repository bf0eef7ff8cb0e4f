//! ALEPH's aggregation as a cell of the dense regime (bench-allreduce): its Aggregation Service
//! and members (`inabench_aleph::service`: the XDP program's slots, Algorithm 2's Integrity
//! Check) on the benchmark's sim star, the service on a server of its own (the PS) behind one
//! link to the switch, as on ALEPH's testbed (8 workers and 1 PS on one switch, Sec. 6.3), not
//! at the switch's position.
//!
//! The star's hosts send only to the switch, and ALEPH's messages name no host: its datagrams
//! carry their addresses in the Ethernet, IPv4 and UDP headers in front of ALEPH's own, which the
//! suite's wire format leaves out. So every frame here carries those 42 bytes ([`HEADER`]; the
//! peer's node in its first two), which makes an ALEPH gradient the 570-byte frame the paper's
//! workers send (512 B of gradients); the switch ([`Switch`]) forwards a frame to the host its
//! header names and writes the sender in its place, as an Ethernet switch forwards by address;
//! [`Host`] strips the header and hands the service or member the frame and its sender.
//!
//! Costs, the host profile's and cited inputs, as aleph-fig10's modelled class charges them
//! (`workloads::aleph::testbed_training::model_cpu_seconds`): a member sends every datagram from
//! user space (`systems.aleph.worker.udp_send` a datagram, spread over `aleph__sender_threads`
//! threads: the paper gives no number) and takes every aggregate through its
//! Gradient Receiver's XDP program (a driver's XDP receive, `aleph__xdp_drop_mpps`, plus the
//! programs' cost a packet, `systems.aleph_xdp_driver.worker.program`); the PS takes every
//! gradient the same way and sends each copy of an aggregate from XDP (a driver's XDP forward,
//! `aleph__xdp_forward_mpps`, less its receive), its packets spread over `aleph__ps_cores`
//! cores (the sim charges one busy server a host: the cost a packet divided by the cores, an
//! even spread over the NIC's receive queues). On a star of equal links M-WCHA has no slower
//! workers to group: one level, every worker the PS's member. With slower links (bench-hetero)
//! the workers are clustered by M-WCHA ([`crate::aleph::testbed_training::clustering`], as
//! aleph-fig9 clusters its testbed: capacities from bandwidth alone) and the hierarchy has two
//! levels: an aggregator ([`Aggregator`]) runs ALEPH's Aggregation Service for its cluster (its
//! members' gradients and its own), sends each segment's cluster sum up to the PS as its
//! gradient, and forwards each of the PS's aggregates to its members (ALEPH Sec. 3, Fig. 2:
//! steps 1-2 up, 3-5 down); the workers M-WCHA leaves alone send to the PS directly.

use inabench_aleph::service::{DEFAULT_RECEIVE_TIMEOUT_NS, Member, MemberConfig, Service};
use inabench_aleph::service::{ServiceConfig, Trainer};
use inabench_core::{PointCtx, WorkloadError};
use inabench_fabric::fault::Faults;
use inabench_fabric::{Endpoint, Fabric, Nanos, NodeId, Sim, Transmit, Until};
use inabench_ina::common::{AllReduceConfig, gradient, reference_sum};
use inabench_wire::ina::aleph::{ControlKind, ControlRepr, GRADS, Kind, PACKET_LEN};
use inabench_xdp::proto::{Packet, Receiver};
use std::collections::VecDeque;

/// Bytes of the Ethernet (14), IPv4 (20) and UDP (8) headers in front of every ALEPH datagram;
/// the peer's node rides in the first two.
pub const HEADER: usize = 42;

/// A member's training side for one all-reduce: its generated gradient (zero-padded to whole
/// segments), and the aggregate it took.
struct Dense {
    grads: Vec<i32>,
    got: Option<Vec<i32>>,
}

impl Trainer for Dense {
    fn gradients(&mut self, _round: u32, out: &mut [i32]) {
        out.fill(0);
        for (o, g) in out.iter_mut().zip(&self.grads) {
            *o = *g;
        }
    }
    fn aggregate(&mut self, _round: u32, sum: &[i32]) {
        self.got = Some(sum[..self.grads.len().min(sum.len())].to_vec());
    }
}

/// A host on the star: its endpoint's frames go to the switch behind a header naming the peer,
/// and frames from the switch reach the endpoint without it, from the peer the header names.
struct Host<E> {
    inner: E,
    switch: NodeId,
}

impl<E: Endpoint> Endpoint for Host<E> {
    fn id(&self) -> NodeId {
        self.inner.id()
    }
    fn handle_packet(&mut self, now: Nanos, _from: NodeId, frame: &[u8]) {
        if frame.len() < HEADER {
            return;
        }
        let peer = NodeId::from(u16::from_be_bytes([frame[0], frame[1]]));
        self.inner.handle_packet(now, peer, &frame[HEADER..]);
    }
    fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        let t = self.inner.poll_transmit(now)?;
        let mut bytes = vec![0u8; HEADER + t.bytes.len()];
        bytes[..2].copy_from_slice(&(t.to as u16).to_be_bytes());
        bytes[HEADER..].copy_from_slice(&t.bytes);
        Some(Transmit {
            to: self.switch,
            bytes,
        })
    }
    fn poll_timeout(&self) -> Option<Nanos> {
        self.inner.poll_timeout()
    }
    fn handle_timeout(&mut self, now: Nanos) {
        self.inner.handle_timeout(now)
    }
    fn is_done(&self) -> bool {
        self.inner.is_done()
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        self.inner.counters()
    }
}

/// The star's switch: forwards a frame to the host its header names, the sender written in its
/// place (a frame naming no host is dropped and counted).
struct Switch {
    id: NodeId,
    hosts: usize,
    out: VecDeque<Transmit>,
    unroutable: u64,
}

impl Endpoint for Switch {
    fn id(&self) -> NodeId {
        self.id
    }
    fn handle_packet(&mut self, _now: Nanos, from: NodeId, frame: &[u8]) {
        if frame.len() < HEADER {
            self.unroutable += 1;
            return;
        }
        let to = NodeId::from(u16::from_be_bytes([frame[0], frame[1]]));
        if to as usize >= self.hosts || to == from {
            self.unroutable += 1;
            return;
        }
        let mut bytes = frame.to_vec();
        bytes[..2].copy_from_slice(&(from as u16).to_be_bytes());
        self.out.push_back(Transmit { to, bytes });
    }
    fn poll_transmit(&mut self, _now: Nanos) -> Option<Transmit> {
        self.out.pop_front()
    }
    fn poll_timeout(&self) -> Option<Nanos> {
        None
    }
    fn handle_timeout(&mut self, _now: Nanos) {}
    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![("unroutable", self.unroutable)]
    }
}

/// An aggregator of the hierarchy's second level: a worker that runs ALEPH's Aggregation
/// Service ([`Service`], the PS's code: slots, bitmaps, Algorithm 2's lines 1-6 for its members)
/// for its cluster, its members at bits 0..k and its own gradient at bit k (handed to the
/// service on the host, no datagram); when a segment's slot completes, the cluster's sum goes up
/// to the PS as this aggregator's gradient of that segment (the service's result addressed to
/// the aggregator itself), and the service's results to the members are not sent (they take
/// the PS's aggregate instead). Each aggregate of the PS is forwarded to every member (the
/// Gradient Forwarder) and kept; a member's fetch is answered from the kept aggregates. Toward
/// the PS it is a member (Algorithm 2 as [`Member`] runs it): its "done" once every segment's
/// sum went up, the PS's resend requests answered from the sums it sent, and on its receive
/// timeout a fetch per missing aggregate and its "done" again.
pub struct Aggregator {
    id: NodeId,
    ps: NodeId,
    job: u16,
    /// its bit at the PS
    bit: u8,
    segments: u32,
    len: usize,
    local: Service,
    /// its own bit in its service (after its members')
    own_bit: u8,
    members: Vec<NodeId>,
    /// the cluster's sums sent up, by segment (for the PS's resend requests)
    partial: Vec<Option<[i32; GRADS]>>,
    sent_up: u32,
    up: Receiver,
    out: VecDeque<Transmit>,
    timeout_ns: Nanos,
    deadline: Option<Nanos>,
    got: Option<Vec<i32>>,
    resent: u64,
    fetches: u64,
    forwarded: u64,
}

impl Aggregator {
    /// Aggregator `id` (bit `bit` at the PS `ps`) of the cluster `members` with its own gradient
    /// `grads` (`len` values, zero-padded to whole segments here).
    fn new(
        id: NodeId,
        ps: NodeId,
        bit: u8,
        members: Vec<NodeId>,
        segments: u32,
        grads: &[i32],
    ) -> Result<Aggregator, inabench_aleph::AlephError> {
        let mut cluster = members.clone();
        cluster.push(id);
        let local = Service::new(ServiceConfig {
            id,
            job: 1,
            members: cluster,
            segments,
        })?;
        let mut a = Aggregator {
            id,
            ps,
            job: 1,
            bit,
            segments,
            len: grads.len(),
            local,
            own_bit: 0,
            members,
            partial: vec![None; segments as usize],
            sent_up: 0,
            up: Receiver::new(1, segments as usize),
            out: VecDeque::new(),
            timeout_ns: DEFAULT_RECEIVE_TIMEOUT_NS,
            deadline: None,
            got: None,
            resent: 0,
            fetches: 0,
            forwarded: 0,
        };
        a.own_bit = a.members.len() as u8;
        // its own gradient into its service, segment by segment, as its members' arrive
        for seg in 0..segments {
            let mut g = [0i32; GRADS];
            let at = seg as usize * GRADS;
            for (o, v) in g.iter_mut().zip(grads.iter().skip(at)) {
                *o = *v;
            }
            let p = Packet::gradient(a.job, a.own_bit, 1, seg, g).emit();
            a.local.handle_packet(0, id, &p);
        }
        a.drain_local(0);
        Ok(a)
    }

    /// Route what the cluster's service sent: its result to this aggregator is the cluster's
    /// sum of a segment, which goes up to the PS; its results to the members are not sent
    /// (they take the PS's aggregate); its resend requests go to the members.
    fn drain_local(&mut self, now: Nanos) {
        while let Some(t) = self.local.poll_transmit(now) {
            if t.bytes.len() != PACKET_LEN {
                self.out.push_back(t);
                continue;
            }
            let Ok(p) = Packet::parse(&t.bytes) else {
                continue;
            };
            if p.kind != Kind::Result || t.to != self.id {
                continue;
            }
            if self.partial[p.segment as usize].is_none() {
                self.partial[p.segment as usize] = Some(p.grads);
                self.sent_up += 1;
                self.send_up(p.segment, p.grads);
                if self.sent_up == self.segments {
                    self.done_msg();
                    self.deadline = Some(now.saturating_add(self.timeout_ns));
                }
            }
        }
    }

    fn send_up(&mut self, segment: u32, grads: [i32; GRADS]) {
        let g = Packet::gradient(self.job, self.bit, 1, segment, grads);
        self.out.push_back(Transmit {
            to: self.ps,
            bytes: g.emit().to_vec(),
        });
    }

    fn done_msg(&mut self) {
        let d = ControlRepr {
            job: self.job,
            kind: ControlKind::Done,
            worker: self.bit,
            round: 1,
            segment: self.segments,
        };
        self.out.push_back(Transmit {
            to: self.ps,
            bytes: d.to_bytes().to_vec(),
        });
    }

    /// The PS's aggregate of a segment: kept, and forwarded to every member.
    fn on_aggregate(&mut self, now: Nanos, p: &Packet, frame: &[u8]) {
        if !self.up.on_packet(p) {
            return;
        }
        for &m in &self.members {
            self.out.push_back(Transmit {
                to: m,
                bytes: frame.to_vec(),
            });
            self.forwarded += 1;
        }
        self.deadline = Some(now.saturating_add(self.timeout_ns));
        if self.up.complete() {
            let mut sum = Vec::with_capacity(self.segments as usize * GRADS);
            for seg in 0..self.segments {
                sum.extend_from_slice(self.up.aggregate(seg).map_or(&[0; GRADS], |a| a));
            }
            sum.truncate(self.len);
            self.got = Some(sum);
            self.deadline = None;
        }
    }

    /// Whether `from` is one of this cluster's members.
    fn member(&self, from: NodeId) -> bool {
        self.members.contains(&from)
    }
}

impl Endpoint for Aggregator {
    fn id(&self) -> NodeId {
        self.id
    }

    fn handle_packet(&mut self, now: Nanos, from: NodeId, frame: &[u8]) {
        if frame.len() == ControlRepr::LEN {
            match ControlRepr::parse(frame) {
                // the PS asks for a segment's sum again (Algorithm 2, lines 5-6)
                Ok(c)
                    if from == self.ps && c.kind == ControlKind::Resend && c.worker == self.bit =>
                {
                    if let Some(g) = self.partial.get(c.segment as usize).copied().flatten() {
                        self.send_up(c.segment, g);
                        self.resent += 1;
                    }
                }
                // a member's "done": the cluster's service checks its bitmaps (lines 1-6)
                Ok(_) if self.member(from) => {
                    self.local.handle_packet(now, from, frame);
                    self.drain_local(now);
                }
                _ => {}
            }
            return;
        }
        let Ok(p) = Packet::parse(frame) else {
            return;
        };
        if p.job != self.job {
            return;
        }
        match p.kind {
            Kind::Result if from == self.ps => self.on_aggregate(now, &p, frame),
            Kind::Gradient if self.member(from) => {
                self.local.handle_packet(now, from, frame);
                self.drain_local(now);
            }
            // a member's fetch (lines 8-13): the PS's aggregate, once this aggregator has it
            Kind::Fetch if self.member(from) => {
                if let Some(a) = self.up.aggregate(p.segment) {
                    let mut r = Packet::gradient(self.job, 0xff, 1, p.segment, *a);
                    r.kind = Kind::Result;
                    self.out.push_back(Transmit {
                        to: from,
                        bytes: r.emit().to_vec(),
                    });
                }
            }
            _ => {}
        }
    }

    fn poll_transmit(&mut self, _now: Nanos) -> Option<Transmit> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Nanos> {
        self.deadline
    }

    /// Algorithm 2, lines 8-13 toward the PS: fetch every aggregate still missing, and send the
    /// "done" again.
    fn handle_timeout(&mut self, now: Nanos) {
        match self.deadline {
            Some(d) if d <= now && self.got.is_none() => {}
            _ => return,
        }
        for seg in self.up.missing() {
            let f = Packet::fetch(self.job, self.bit, 1, seg);
            self.out.push_back(Transmit {
                to: self.ps,
                bytes: f.emit().to_vec(),
            });
            self.fetches += 1;
        }
        self.done_msg();
        self.deadline = Some(now.saturating_add(self.timeout_ns));
    }

    fn is_done(&self) -> bool {
        self.got.is_some()
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("sums_sent_up", u64::from(self.sent_up)),
            ("forwarded", self.forwarded),
            ("resent", self.resent),
            ("fetches_sent", self.fetches),
        ]
    }
}

/// A worker of the hierarchy: a member (of the PS or of its aggregator), or an aggregator.
enum Peer {
    Member(Member<Dense>),
    Aggregator(Aggregator),
}

impl Peer {
    fn got(&self) -> Option<&Vec<i32>> {
        match self {
            Peer::Member(m) => m.trainer().got.as_ref(),
            Peer::Aggregator(a) => a.got.as_ref(),
        }
    }

    /// Gradients resent on request and fetches sent.
    fn recovery(&self) -> (u64, u64) {
        match self {
            Peer::Member(m) => (m.stats().resent, m.stats().fetches_sent),
            Peer::Aggregator(a) => (a.resent, a.fetches),
        }
    }

    fn inner(&self) -> &dyn Endpoint {
        match self {
            Peer::Member(m) => m,
            Peer::Aggregator(a) => a,
        }
    }

    fn inner_mut(&mut self) -> &mut dyn Endpoint {
        match self {
            Peer::Member(m) => m,
            Peer::Aggregator(a) => a,
        }
    }
}

impl Endpoint for Peer {
    fn id(&self) -> NodeId {
        self.inner().id()
    }
    fn handle_packet(&mut self, now: Nanos, from: NodeId, frame: &[u8]) {
        self.inner_mut().handle_packet(now, from, frame)
    }
    fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        self.inner_mut().poll_transmit(now)
    }
    fn poll_timeout(&self) -> Option<Nanos> {
        self.inner().poll_timeout()
    }
    fn handle_timeout(&mut self, now: Nanos) {
        self.inner_mut().handle_timeout(now)
    }
    fn is_done(&self) -> bool {
        self.inner().is_done()
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        self.inner().counters()
    }
}

/// A worker (member or aggregator) is a worker, the switch the switch, ALEPH's service on the
/// PS the third role.
type Node = inabench_fabric::Node<Host<Peer>, Switch, Host<Service>>;

/// The costs a packet (ns) the run charges, from the host profile and the spec's cited rates.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Costs {
    /// A member's datagram sent from user space.
    pub udp_send_ns: f64,
    /// A driver's XDP receive of a packet.
    pub xdp_rx_ns: f64,
    /// A driver's XDP send of a packet on, beyond its receive.
    pub xdp_tx_ns: f64,
    /// ALEPH's programs, a packet.
    pub program_ns: f64,
    /// The PS's cores its packets spread over.
    pub ps_cores: f64,
    /// A member's threads sending its datagrams (each datagram's cost divided among them).
    pub sender_threads: f64,
}

/// What one ALEPH all-reduce gave.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Every member took the whole aggregate before the limit.
    pub finished: bool,
    /// From the start (every member begins sending at 0) to the last member's aggregate, ns.
    pub time_ns: u64,
    /// Members whose aggregate differs from the exact sum.
    pub wrong: usize,
    /// Members without an aggregate.
    pub unfinished: usize,
    /// Gradients resent on the Integrity Check's requests, and fetches sent.
    pub resent: u64,
    pub fetches: u64,
}

/// Why an ALEPH cell has no time: the service or a member refuses the group (a refusal, the
/// cell says why), or the fabric failed (the point's error).
#[derive(Debug, thiserror::Error)]
pub enum CellError {
    #[error("{0}")]
    Refused(inabench_aleph::AlephError),
    #[error("the sim fabric failed: {0}")]
    Fabric(inabench_fabric::FabricError),
}

/// One all-reduce of `cfg.elements` int32 values a worker among `cfg.workers` workers through
/// ALEPH's service on the PS, on the sim star of `cfg`'s link (`inabench_ina_run::drive::sim_link`,
/// the list's systems' link; the slower links of `cfg`'s `slow_workers` and `slow_link_gbps`,
/// `inabench_ina_run::drive::slow_links`, as the list's systems have them). `parents[w]` is the node
/// worker `w` sends its gradient to: `cfg.workers` (the PS) or an aggregator, a worker whose own
/// parent is the PS (two levels at most; [`one_level`]: every worker the PS's member). Workers
/// are nodes 0..workers, the PS `workers`, the switch `workers + 1`. A group ALEPH's service
/// cannot hold (its bitmap's 32 members) is an `Err` with the service's sentence.
pub fn run(
    cfg: &AllReduceConfig,
    costs: &Costs,
    parents: &[usize],
    limit_ns: Nanos,
) -> Result<Outcome, CellError> {
    run_with_faults(cfg, costs, parents, Faults::default(), limit_ns)
}

/// [`run`] with the sim fabric's `faults` on every link (loss, duplication, reordering): the
/// Integrity Check's recovery at both levels.
pub fn run_with_faults(
    cfg: &AllReduceConfig,
    costs: &Costs,
    parents: &[usize],
    faults: Faults,
    limit_ns: Nanos,
) -> Result<Outcome, CellError> {
    let n = cfg.workers;
    let (ps, switch) = (n as NodeId, n as NodeId + 1);
    let bad = |why: String| CellError::Refused(inabench_aleph::AlephError::Invalid(why));
    if parents.len() != n
        || parents
            .iter()
            .enumerate()
            .any(|(w, &p)| p != n && (p == w || p > n || parents[p] != n))
    {
        return Err(bad(format!(
            "a hierarchy of at most two levels over {n} workers, not parents {parents:?}"
        )));
    }
    let segments = cfg.elements.div_ceil(GRADS) as u32;
    // a node's members in node order; a member's bit is its place among them
    let members_of = |a: usize| -> Vec<NodeId> {
        (0..n)
            .filter(|&w| parents[w] == a)
            .map(|w| w as NodeId)
            .collect()
    };
    let bit_of = |w: usize| {
        members_of(parents[w])
            .iter()
            .position(|&m| m == w as NodeId)
    };
    let service = Service::new(ServiceConfig {
        id: ps,
        job: 1,
        members: members_of(n),
        segments,
    })
    .map_err(CellError::Refused)?;
    let mut nodes = Vec::with_capacity(n + 2);
    for (w, &parent) in parents.iter().enumerate() {
        let bit = bit_of(w).unwrap_or(0) as u8;
        let grads = gradient(cfg.seed, w, cfg.elements);
        let cluster = members_of(w);
        let peer = if cluster.is_empty() {
            Peer::Member(
                Member::new(
                    MemberConfig {
                        id: w as NodeId,
                        service: parent as NodeId,
                        job: 1,
                        bit,
                        segments,
                        rounds: 1,
                        receive_timeout_ns: DEFAULT_RECEIVE_TIMEOUT_NS,
                    },
                    Dense { grads, got: None },
                )
                .map_err(CellError::Refused)?,
            )
        } else {
            Peer::Aggregator(
                Aggregator::new(w as NodeId, ps, bit, cluster, segments, &grads)
                    .map_err(CellError::Refused)?,
            )
        };
        nodes.push(Node::Worker(Host {
            inner: peer,
            switch,
        }));
    }
    nodes.push(Node::Other(Host {
        inner: service,
        switch,
    }));
    nodes.push(Node::Switch(Switch {
        id: switch,
        hosts: n + 1,
        out: VecDeque::new(),
        unroutable: 0,
    }));
    let ns = |x: f64| x.round().max(0.0) as u64;
    let member = inabench_fabric::sim::NodeConfig {
        rx_cost_ns: ns(costs.xdp_rx_ns + costs.program_ns),
        tx_cost_ns: ns(costs.udp_send_ns / costs.sender_threads.max(1.0)),
    };
    let cores = costs.ps_cores.max(1.0);
    let server = inabench_fabric::sim::NodeConfig {
        rx_cost_ns: ns((costs.xdp_rx_ns + costs.program_ns) / cores),
        tx_cost_ns: ns(costs.xdp_tx_ns / cores),
    };
    // an aggregator runs the PS's service program and forwards from XDP as the PS does, on as
    // many cores (its own gradient reaches its service on the host: no datagram)
    let mut costs_by_node: Vec<_> = (0..n)
        .map(|w| if parents.contains(&w) { server } else { member })
        .collect();
    costs_by_node.push(server);
    let mut sim = Sim {
        costs: costs_by_node,
        rates: inabench_ina_run::drive::slow_links(cfg),
        faults,
        ..Sim::new(inabench_ina_run::drive::sim_link(cfg), switch)
    };
    let (nodes, rep) = sim
        .run(nodes, &Until::workers(n, n + 2, limit_ns))
        .map_err(CellError::Fabric)?;
    let want = reference_sum(cfg.seed, n, cfg.elements);
    let (mut wrong, mut unfinished, mut resent, mut fetches) = (0, 0, 0, 0);
    for node in &nodes {
        let Node::Worker(m) = node else { continue };
        let (r, f) = m.inner.recovery();
        resent += r;
        fetches += f;
        match m.inner.got() {
            Some(got) if *got == want => {}
            Some(_) => wrong += 1,
            None => unfinished += 1,
        }
    }
    Ok(Outcome {
        finished: rep.finished && unfinished == 0,
        time_ns: rep.time_ns,
        wrong,
        unfinished,
        resent,
        fetches,
    })
}

/// One level: every worker sends to the PS (node `workers`).
pub fn one_level(workers: usize) -> Vec<usize> {
    vec![workers; workers]
}

/// The point's costs: the host profile's two ALEPH entries, the spec's cited XDP rates and the
/// PS's cores (`aleph__*`).
pub fn costs(ctx: &PointCtx<'_>) -> Result<Costs, WorkloadError> {
    use crate::aleph::testbed_training::UDP_SEND_KEY;
    use crate::aleph::xdp_scale::PROGRAM_KEY;
    let rx = 1e3 / ctx.param("aleph__xdp_drop_mpps")?;
    let fwd = 1e3 / ctx.param("aleph__xdp_forward_mpps")?;
    let c = Costs {
        udp_send_ns: ctx.host_cost(UDP_SEND_KEY)?,
        xdp_rx_ns: rx,
        xdp_tx_ns: fwd - rx,
        program_ns: ctx.host_cost(PROGRAM_KEY)?,
        ps_cores: ctx.param("aleph__ps_cores")?,
        sender_threads: ctx.param("aleph__sender_threads")?,
    };
    if !(rx.is_finite() && c.xdp_tx_ns >= 0.0 && c.ps_cores >= 1.0 && c.sender_threads >= 1.0) {
        return Err(WorkloadError::BadParam(format!(
            "aleph__xdp_drop_mpps must be above 0 and at least aleph__xdp_forward_mpps (a forward receives too), aleph__ps_cores and aleph__sender_threads at least 1: {rx:.1} ns to receive, {fwd:.1} ns to forward, {} cores, {} sender threads",
            c.ps_cores, c.sender_threads
        )));
    }
    Ok(c)
}
