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
//! even spread over the NIC's receive queues). One level: every worker is the PS's member; on a
//! star of equal links M-WCHA has no slower workers to group under an aggregator.

use inabench_aleph::service::{DEFAULT_RECEIVE_TIMEOUT_NS, Member, MemberConfig, Service};
use inabench_aleph::service::{ServiceConfig, Trainer};
use inabench_core::{PointCtx, WorkloadError};
use inabench_fabric::{Endpoint, Fabric, Nanos, NodeId, Sim, Transmit, Until};
use inabench_ina::common::{AllReduceConfig, gradient, reference_sum};
use inabench_wire::ina::aleph::GRADS;
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

/// A member is a worker, the switch the switch, ALEPH's service on the PS the third role.
type Node = inabench_fabric::Node<Host<Member<Dense>>, Switch, Host<Service>>;

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

/// One all-reduce of `cfg.elements` int32 values a member among `cfg.workers` members through
/// ALEPH's service on the PS, on the sim star of `cfg`'s link (`inabench_ina_run::drive::sim_link`,
/// the list's systems' link). Members are nodes 0..workers, the PS `workers`, the switch
/// `workers + 1`. A group ALEPH's service cannot hold (its bitmap's 32 members) is an `Err` with
/// the service's sentence.
pub fn run(cfg: &AllReduceConfig, costs: &Costs, limit_ns: Nanos) -> Result<Outcome, CellError> {
    let n = cfg.workers;
    let (ps, switch) = (n as NodeId, n as NodeId + 1);
    let segments = cfg.elements.div_ceil(GRADS) as u32;
    let service = Service::new(ServiceConfig {
        id: ps,
        job: 1,
        members: (0..n as NodeId).collect(),
        segments,
    })
    .map_err(CellError::Refused)?;
    let mut nodes = Vec::with_capacity(n + 2);
    for w in 0..n {
        let member = Member::new(
            MemberConfig {
                id: w as NodeId,
                service: ps,
                job: 1,
                bit: w as u8,
                segments,
                rounds: 1,
                receive_timeout_ns: DEFAULT_RECEIVE_TIMEOUT_NS,
            },
            Dense {
                grads: gradient(cfg.seed, w, cfg.elements),
                got: None,
            },
        )
        .map_err(CellError::Refused)?;
        nodes.push(Node::Worker(Host {
            inner: member,
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
    let mut costs_by_node = vec![member; n];
    costs_by_node.push(server);
    let mut sim = Sim {
        costs: costs_by_node,
        ..Sim::new(inabench_ina_run::drive::sim_link(cfg), switch)
    };
    let (nodes, rep) = sim
        .run(nodes, &Until::workers(n, n + 2, limit_ns))
        .map_err(CellError::Fabric)?;
    let want = reference_sum(cfg.seed, n, cfg.elements);
    let (mut wrong, mut unfinished, mut resent, mut fetches) = (0, 0, 0, 0);
    for node in &nodes {
        let Node::Worker(m) = node else { continue };
        let st = m.inner.stats();
        resent += st.resent;
        fetches += st.fetches_sent;
        match &m.inner.trainer().got {
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
