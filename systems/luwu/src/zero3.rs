//! ZeRO-3's collectives as protocol code on the same fabric, for the traffic comparison of
//! Sec. 3.1 ("each worker needs to transfer 2(N-1) * S/N elements for either all_gather or
//! reduce_scatter", against S per worker for LuWu's push or pull): ring reduce-scatter and ring
//! all-gather in NCCL's order (the schedule of `inabench_ina::ring`), through a switch that only
//! forwards by IPv4 destination.
//!
//! Worker r sends to r + 1. Reduce-scatter step k (0..N-1): send chunk (r - k) mod N, receive
//! chunk (r - k - 1) mod N and add it in; afterwards worker r holds the sum of chunk (r + 1) mod N.
//! All-gather step k: send chunk (r + 1 - k) mod N, receive chunk (r - k) mod N and store it.
//! A step is sent once the previous step's chunk has arrived whole (the data it carries exists).
//! There is no loss recovery: this baseline runs on lossless links (the comparison is of bytes).

use crate::packet::{self, Kind, Repr};
use crate::run::{numbered, run_on};
use inabench_fabric::sim::LinkConfig;
use inabench_fabric::{Endpoint, Forwarder, Nanos, NodeId, Route, Sim, Transmit};
use std::collections::VecDeque;

/// Which collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    ReduceScatter,
    AllGather,
}

/// One ring member.
pub struct RingNode {
    rank: usize,
    n: usize,
    op: Op,
    pub data: Vec<i32>,
    chunk: usize,
    vpp: usize,
    pps: u32,
    /// Packets received per step.
    got: Vec<u32>,
    /// Which packets (by SeqNum) arrived: a second copy is dropped, not added in again.
    seen: Vec<bool>,
    /// Steps whose packets are queued.
    queued: u32,
    out: VecDeque<Transmit>,
    switch: NodeId,
    pub values_tx: u64,
    pub values_rx: u64,
    pub malformed: u64,
    /// Copies of packets already received, dropped.
    pub duplicates: u64,
}

impl RingNode {
    /// `data` is the worker's whole vector (`elements` a multiple of `n`).
    pub fn new(rank: usize, n: usize, op: Op, data: Vec<i32>, vpp: usize) -> RingNode {
        let chunk = data.len() / n;
        let mut w = RingNode {
            rank,
            n,
            op,
            data,
            chunk,
            vpp,
            pps: chunk.div_ceil(vpp).max(1) as u32,
            got: vec![0; n - 1],
            seen: vec![false; (n - 1) * chunk.div_ceil(vpp).max(1)],
            queued: 0,
            out: VecDeque::new(),
            switch: n as NodeId,
            values_tx: 0,
            values_rx: 0,
            malformed: 0,
            duplicates: 0,
        };
        w.queue_step();
        w
    }

    fn sends(&self, k: usize) -> usize {
        let n = self.n;
        match self.op {
            Op::ReduceScatter => (self.rank + 2 * n - k) % n,
            Op::AllGather => (self.rank + 1 + 2 * n - k) % n,
        }
    }

    fn receives(&self, k: usize) -> usize {
        let n = self.n;
        match self.op {
            Op::ReduceScatter => (self.rank + 2 * n - k - 1) % n,
            Op::AllGather => (self.rank + 2 * n - k) % n,
        }
    }

    /// Queue the next step's packets.
    fn queue_step(&mut self) {
        let k = self.queued as usize;
        if k >= self.n - 1 {
            return;
        }
        let c = self.sends(k);
        let to = ((self.rank + 1) % self.n) as u32;
        for j in 0..self.pps as usize {
            let a = c * self.chunk + j * self.vpp;
            let b = (a + self.vpp).min((c + 1) * self.chunk);
            let h = Repr {
                kind: Kind::Ring,
                src: self.rank as u8,
                max: false,
                seq: k as u32 * self.pps + j as u32,
                credit: 0,
                count: 0,
            };
            self.values_tx += (b - a) as u64;
            let bytes = packet::frame(self.rank as u32, to, h, &self.data[a..b]);
            self.out.push_back(Transmit {
                to: self.switch,
                bytes,
            });
        }
        self.queued += 1;
    }
}

impl Endpoint for RingNode {
    fn id(&self) -> NodeId {
        self.rank as NodeId
    }

    fn handle_packet(&mut self, _now: Nanos, _from: NodeId, frame: &[u8]) {
        let Ok((h, values)) = packet::parse(frame) else {
            self.malformed += 1;
            return;
        };
        let (k, j) = ((h.seq / self.pps) as usize, (h.seq % self.pps) as usize);
        // only the ring predecessor sends to this member
        if h.kind != Kind::Ring
            || k >= self.n - 1
            || usize::from(h.src) != (self.rank + self.n - 1) % self.n
        {
            self.malformed += 1;
            return;
        }
        let c = self.receives(k);
        let a = c * self.chunk + j * self.vpp;
        if a + values.len() > (c + 1) * self.chunk {
            self.malformed += 1;
            return;
        }
        if std::mem::replace(&mut self.seen[h.seq as usize], true) {
            self.duplicates += 1;
            return;
        }
        self.values_rx += values.len() as u64;
        for (d, v) in self.data[a..a + values.len()].iter_mut().zip(&values) {
            *d = match self.op {
                Op::ReduceScatter => d.wrapping_add(*v),
                Op::AllGather => *v,
            };
        }
        self.got[k] += 1;
        if self.got[k] == self.pps && self.queued as usize == k + 1 {
            self.queue_step();
        }
    }

    fn poll_transmit(&mut self, _now: Nanos) -> Option<Transmit> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Nanos> {
        None
    }

    fn handle_timeout(&mut self, _now: Nanos) {}

    fn is_done(&self) -> bool {
        self.got.iter().all(|g| *g == self.pps) && self.out.is_empty()
    }
}

/// A ring node or the switch, which only forwards: [`inabench_fabric::Forwarder`] by the IPv4
/// destination (10.0.8.(node + 1), [`Route::Ipv4Dst`]).
pub type RingFabricNode = inabench_fabric::Node<RingNode, Forwarder>;

/// What a collective did: each worker's vector afterwards, the values each sent and received,
/// and the virtual time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RingOutcome {
    pub finished: bool,
    pub data: Vec<Vec<i32>>,
    pub values_tx: Vec<u64>,
    pub values_rx: Vec<u64>,
    pub end_ns: u64,
}

/// Run `op` over `inputs` (one vector per worker, lengths a multiple of the worker count) on the
/// sim fabric with `link`.
pub fn run(op: Op, inputs: Vec<Vec<i32>>, vpp: usize, link: LinkConfig) -> Option<RingOutcome> {
    let n = inputs.len();
    if !(2..=250).contains(&n)
        || vpp == 0
        || inputs
            .iter()
            .any(|v| v.len() != inputs[0].len() || !v.len().is_multiple_of(n))
    {
        return None;
    }
    let mut nodes: Vec<RingFabricNode> = inputs
        .into_iter()
        .enumerate()
        .map(|(r, d)| RingFabricNode::Worker(RingNode::new(r, n, op, d, vpp)))
        .collect();
    nodes.push(RingFabricNode::Switch(Forwarder::new(
        n as NodeId,
        n as u32 + 1,
        Route::Ipv4Dst,
    )));
    let mut sim = Sim::new(link, n as NodeId);
    let (nodes, rep) = numbered(run_on(&mut sim, nodes, |_| true, 3_600_000_000_000));
    let mut o = RingOutcome {
        finished: rep.finished,
        end_ns: rep.end_ns,
        ..RingOutcome::default()
    };
    for node in nodes {
        if let RingFabricNode::Worker(w) = node {
            o.values_tx.push(w.values_tx);
            o.values_rx.push(w.values_rx);
            o.data.push(w.data);
        }
    }
    Some(o)
}
