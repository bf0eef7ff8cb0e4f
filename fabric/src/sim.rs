//! `sim`: a discrete-event fabric in virtual time. A star: every host hangs off one switch node by
//! a full-duplex link with a rate, a propagation latency, an MTU and a drop-tail egress queue.
//! Each frame pays serialization (bytes x 8 / rate) on its egress link and queues behind earlier
//! frames; each host pays a per-frame CPU cost to receive and to send (its host stack's cost,
//! measured elsewhere and passed in), and is busy meanwhile. Faults come from [`FaultInjector`].
//! The same `Endpoint` state machines run here unchanged.

use crate::endpoint::{Endpoint, Nanos, NodeId};
use crate::fault::{Fate, FaultCounters, FaultInjector, Faults};
use std::collections::VecDeque;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkConfig {
    pub rate_bps: f64,
    pub latency_ns: u64,
    /// Largest frame (bytes, Ethernet header onward) the link carries; larger ones are dropped.
    pub mtu: usize,
    /// Egress queue capacity in bytes (drop-tail).
    pub queue_bytes: usize,
    /// Bytes each frame costs on the wire beyond its own: Ethernet's preamble and start delimiter
    /// (8), inter-frame gap (12) and FCS (4) = 24.
    pub framing_bytes: usize,
}

impl LinkConfig {
    /// 100 Gbps, 1 us, 9216-byte frames, 1 MB of buffer, Ethernet framing.
    pub fn gbps100() -> Self {
        LinkConfig {
            rate_bps: 100e9,
            latency_ns: 1000,
            mtu: 9216,
            queue_bytes: 1 << 20,
            framing_bytes: 24,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NodeConfig {
    pub rx_cost_ns: u64,
    pub tx_cost_ns: u64,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeStats {
    pub frames_tx: u64,
    pub bytes_tx: u64,
    pub frames_rx: u64,
    pub bytes_rx: u64,
    /// CPU time spent by the node's stack (its rx/tx costs), ns.
    pub busy_ns: u64,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct SimReport {
    pub end_ns: Nanos,
    pub events: u64,
    pub nodes: Vec<NodeStats>,
    pub dropped_queue: u64,
    pub dropped_mtu: u64,
    pub faults: FaultCounters,
    /// True when the stop condition held; false when the time limit or an empty event queue
    /// ended the run first.
    pub finished: bool,
}

/// A frame tap: (time, from, to, frame) for every frame put on a link.
pub type Tap = Box<dyn FnMut(Nanos, NodeId, NodeId, &[u8]) + Send>;

/// The key of a scheduled event: (time, sequence) in one integer, earliest first. The sequence
/// number is unique (one per scheduled event, in scheduling order), so the order is total.
#[inline(always)]
fn key(at: Nanos, seq: u64) -> u128 {
    (u128::from(at) << 64) | u128::from(seq)
}

/// One entry of the queue's heap: an event, or the first event of a directed link's FIFO.
#[derive(Debug, Clone, Copy)]
struct Head {
    at: Nanos,
    seq: u64,
    /// The node that receives the frame, or whose timer fires.
    node: NodeId,
    /// What the entry stands for: a directed link `k < LOOSE` (its FIFO's first frame),
    /// `LOOSE + slot` (a frame in the queue's `loose` slab) or [`TIMER`].
    what: u32,
}

/// `Head::what` from this value up: a frame held in the `loose` slab, at slot `what - LOOSE`.
const LOOSE: u32 = 1 << 31;
/// `Head::what` of a timer.
const TIMER: u32 = u32::MAX;

impl Head {
    /// Earlier than `o` in (time, sequence) order.
    #[inline(always)]
    fn before(&self, o: &Head) -> bool {
        key(self.at, self.seq) < key(o.at, o.seq)
    }
}

/// A binary min-heap of [`Head`]s by (time, sequence). Each operation carries the entry it
/// places in registers down (or up) the tree and writes it once where it belongs, rather than
/// writing it at the top and then swapping it down as std's `PeekMut` does.
#[derive(Debug, Default)]
struct Heap {
    v: Vec<Head>,
}

impl Heap {
    #[inline(always)]
    fn peek(&self) -> Option<&Head> {
        self.v.first()
    }

    fn push(&mut self, h: Head) {
        let mut i = self.v.len();
        self.v.push(h);
        while i > 0 {
            let p = (i - 1) / 2;
            if !h.before(&self.v[p]) {
                break;
            }
            self.v[i] = self.v[p];
            i = p;
        }
        self.v[i] = h;
    }

    /// Replace the earliest entry with `h`.
    #[inline]
    fn replace_top(&mut self, h: Head) {
        let n = self.v.len();
        let mut i = 0;
        loop {
            let l = 2 * i + 1;
            if l >= n {
                break;
            }
            // the earlier child, chosen without a branch (which one it is does not predict well)
            let mut c = l;
            if l + 1 < n {
                c += usize::from(self.v[l + 1].before(&self.v[l]));
            }
            if !self.v[c].before(&h) {
                break;
            }
            self.v[i] = self.v[c];
            i = c;
        }
        self.v[i] = h;
    }

    /// Remove the earliest entry.
    #[inline]
    fn pop_top(&mut self) {
        if let Some(last) = self.v.pop()
            && !self.v.is_empty()
        {
            self.replace_top(last);
        }
    }
}

/// A frame waiting in its directed link's FIFO.
#[derive(Debug)]
struct Queued {
    at: Nanos,
    seq: u64,
    frame: Vec<u8>,
}

/// A directed link's frames in flight, in key order.
#[derive(Debug)]
struct Link {
    fifo: VecDeque<Queued>,
    /// The time of the FIFO's last frame (while it holds one).
    last_at: Nanos,
    from: NodeId,
    to: NodeId,
}

/// What [`Queue::pop`] gives.
enum Popped {
    Frame { from: NodeId, frame: Vec<u8> },
    Timer,
}

/// The pending events, popped in (time, sequence) order: exactly the order one binary heap of
/// all events gives (the test `the_queue_pops_what_one_heap_pops` checks it against one), with a
/// much smaller heap. The frames of one directed link mostly arrive in the order they were sent
/// (the link is FIFO: each frame is scheduled at or after the one before it), so they wait, bytes
/// and all, in that link's FIFO and only the link's first frame has an entry in the heap. A frame
/// that would not keep its link's FIFO sorted (a reordered frame's extra delay, a duplicate) waits
/// in the `loose` slab with an entry of its own, as does every timer.
struct Queue {
    heap: Heap,
    /// Per directed link (from * nodes + to).
    links: Vec<Link>,
    /// Frames outside their link's FIFO: (sender, bytes) per slot; `free` lists the empty slots.
    loose: Vec<(NodeId, Vec<u8>)>,
    free: Vec<u32>,
}

impl Queue {
    fn new(nodes: usize) -> Queue {
        Queue {
            heap: Heap::default(),
            links: (0..nodes * nodes)
                .map(|k| Link {
                    fifo: VecDeque::new(),
                    last_at: 0,
                    from: (k / nodes) as NodeId,
                    to: (k % nodes) as NodeId,
                })
                .collect(),
            loose: Vec::new(),
            free: Vec::new(),
        }
    }

    /// Add a frame on directed link `k`, to arrive at `at`; `seq` is larger than every earlier
    /// event's.
    #[inline(always)]
    fn push_frame(&mut self, at: Nanos, seq: u64, k: usize, frame: Vec<u8>) {
        let link = &mut self.links[k];
        if link.fifo.is_empty() {
            self.heap.push(Head {
                at,
                seq,
                node: link.to,
                what: k as u32,
            });
            link.last_at = at;
            link.fifo.push_back(Queued { at, seq, frame });
        } else if at >= link.last_at {
            // (at, seq) is after the last frame's key: `seq` is larger, so a time no earlier will do
            link.last_at = at;
            link.fifo.push_back(Queued { at, seq, frame });
        } else {
            let (from, to) = (link.from, link.to);
            let slot = match self.free.pop() {
                Some(s) => {
                    self.loose[s as usize] = (from, frame);
                    s
                }
                None => {
                    self.loose.push((from, frame));
                    (self.loose.len() - 1) as u32
                }
            };
            assert!(slot < TIMER - LOOSE, "too many reordered frames in flight");
            self.heap.push(Head {
                at,
                seq,
                node: to,
                what: LOOSE + slot,
            });
        }
    }

    /// Add a timer of `node` at `at`.
    #[inline]
    fn push_timer(&mut self, at: Nanos, seq: u64, node: NodeId) {
        self.heap.push(Head {
            at,
            seq,
            node,
            what: TIMER,
        });
    }

    /// The time of the earliest event.
    #[inline(always)]
    fn peek_at(&self) -> Option<Nanos> {
        self.heap.peek().map(|h| h.at)
    }

    /// The earliest event: its time, its node and what it is.
    #[inline(always)]
    fn pop(&mut self) -> Option<(Nanos, NodeId, Popped)> {
        let h = *self.heap.peek()?;
        let popped = if h.what < LOOSE {
            let link = &mut self.links[h.what as usize];
            let q = link
                .fifo
                .pop_front()
                .expect("a link has a heap entry only while its FIFO holds a frame");
            match link.fifo.front() {
                // the link's next frame takes its place
                Some(next) => self.heap.replace_top(Head {
                    at: next.at,
                    seq: next.seq,
                    ..h
                }),
                None => self.heap.pop_top(),
            }
            Popped::Frame {
                from: link.from,
                frame: q.frame,
            }
        } else if h.what == TIMER {
            self.heap.pop_top();
            Popped::Timer
        } else {
            self.heap.pop_top();
            let slot = h.what - LOOSE;
            let (from, frame) = std::mem::take(&mut self.loose[slot as usize]);
            self.free.push(slot);
            Popped::Frame { from, frame }
        };
        Some((h.at, h.node, popped))
    }
}

/// The fabric. `N` is the caller's node type (often an enum over its workers and switch).
pub struct SimFabric<N: Endpoint> {
    nodes: Vec<N>,
    cfg: Vec<NodeConfig>,
    switch: NodeId,
    link: LinkConfig,
    faults: FaultInjector,
    /// No fault is configured: every frame is delivered once, on time, and the injector (which
    /// then draws nothing) is not asked.
    no_faults: bool,
    queue: Queue,
    seq: u64,
    /// The serialization time of the last frame length seen (most frames share a length).
    ser_cache: (usize, u64),
    /// When each directed link (from * nodes + to) is free again.
    link_free: Vec<Nanos>,
    cpu_free: Vec<Nanos>,
    timer_at: Vec<Option<Nanos>>,
    report: SimReport,
    tap: Option<Tap>,
}

impl<N: Endpoint> SimFabric<N> {
    /// `nodes[i]` must have `id() == i`; `switch` is the id of the switch node.
    pub fn new(
        nodes: Vec<N>,
        cfg: Vec<NodeConfig>,
        switch: NodeId,
        link: LinkConfig,
        faults: Faults,
    ) -> Self {
        let n = nodes.len();
        SimFabric {
            nodes,
            cfg,
            switch,
            link,
            faults: FaultInjector::new(faults),
            no_faults: faults.loss == 0.0 && faults.duplicate == 0.0 && faults.reorder == 0.0,
            queue: Queue::new(n),
            seq: 0,
            ser_cache: (usize::MAX, 0),
            link_free: vec![0; n * n],
            cpu_free: vec![0; n],
            timer_at: vec![None; n],
            report: SimReport {
                nodes: vec![NodeStats::default(); n],
                ..Default::default()
            },
            tap: None,
        }
    }

    /// Call `tap(time, from, to, frame)` for every frame put on a link (e.g. a pcap writer).
    pub fn set_tap(&mut self, tap: Tap) {
        self.tap = Some(tap);
    }

    /// Drain a node's transmissions starting at `now` (its CPU pays tx_cost per frame).
    fn drain(&mut self, id: NodeId, now: Nanos) {
        let i = id as usize;
        let mut t = now.max(self.cpu_free[i]);
        while let Some(tx) = self.nodes[i].poll_transmit(t) {
            t += self.cfg[i].tx_cost_ns;
            self.report.nodes[i].busy_ns += self.cfg[i].tx_cost_ns;
            self.send(id, tx.to, tx.bytes, t);
        }
        self.cpu_free[i] = t;
        self.rearm(id);
    }

    fn rearm(&mut self, id: NodeId) {
        let i = id as usize;
        let want = self.nodes[i].poll_timeout();
        if want != self.timer_at[i] {
            self.timer_at[i] = want;
            if let Some(at) = want {
                self.seq += 1;
                self.queue.push_timer(at, self.seq, id);
            }
        }
    }

    #[inline]
    fn send(&mut self, from: NodeId, to: NodeId, frame: Vec<u8>, t: Nanos) {
        let len = frame.len();
        let st = &mut self.report.nodes[from as usize];
        st.frames_tx += 1;
        st.bytes_tx += len as u64;
        if len > self.link.mtu
            || (to as usize) >= self.nodes.len()
            || (from != self.switch && to != self.switch)
        {
            self.report.dropped_mtu += 1;
            return;
        }
        let link = from as usize * self.nodes.len() + to as usize;
        let free = self.link_free[link];
        let start = t.max(free);
        let ser = if self.ser_cache.0 == len {
            self.ser_cache.1
        } else {
            let ser = ((len + self.link.framing_bytes) as f64 * 8.0 / self.link.rate_bps * 1e9)
                .ceil() as u64;
            self.ser_cache = (len, ser);
            ser
        };
        // bytes waiting ahead of this frame
        let backlog = if start == t {
            0 // nothing ahead (the formula below gives 0 too)
        } else {
            ((start - t) as f64 * self.link.rate_bps / 8e9) as usize
        };
        if backlog + len > self.link.queue_bytes {
            self.report.dropped_queue += 1;
            return;
        }
        let done = start + ser;
        self.link_free[link] = done;
        if let Some(tap) = self.tap.as_mut() {
            tap(start, from, to, &frame);
        }
        let fate = if self.no_faults {
            Fate::Deliver {
                copies: 1,
                extra_delay_ns: 0,
            }
        } else {
            self.faults.fate(from, to)
        };
        match fate {
            Fate::Drop => {}
            Fate::Deliver {
                copies,
                extra_delay_ns,
            } => {
                let at = done + self.link.latency_ns + extra_delay_ns;
                if copies > 1 {
                    self.seq += 1;
                    self.queue
                        .push_frame(at + ser, self.seq, link, frame.clone());
                }
                self.seq += 1;
                self.queue.push_frame(at, self.seq, link, frame);
            }
        }
    }

    /// Run until `done(nodes)` holds after an event, the queue empties, or `max_ns` passes.
    pub fn run_until(&mut self, max_ns: Nanos, done: impl Fn(&[N]) -> bool) -> &SimReport {
        self.run_until_at(max_ns, |_, nodes| done(nodes))
    }

    /// As [`SimFabric::run_until`], the stop condition also seeing the virtual time of the event
    /// it follows.
    pub fn run_until_at(
        &mut self,
        max_ns: Nanos,
        mut done: impl FnMut(Nanos, &[N]) -> bool,
    ) -> &SimReport {
        for id in 0..self.nodes.len() as NodeId {
            self.drain(id, 0);
        }
        loop {
            match self.queue.peek_at() {
                None => break,
                Some(at) if at > max_ns => {
                    // (the event stays queued)
                    self.report.end_ns = max_ns;
                    break;
                }
                Some(_) => {}
            }
            let Some((now, node, popped)) = self.queue.pop() else {
                break;
            };
            self.report.events += 1;
            self.report.end_ns = now;
            let i = node as usize;
            match popped {
                Popped::Timer => {
                    if self.timer_at[i] != Some(now) {
                        continue; // superseded
                    }
                    self.timer_at[i] = None;
                    let t = now.max(self.cpu_free[i]);
                    self.nodes[i].handle_timeout(t);
                    self.drain(node, t);
                }
                Popped::Frame { from, frame } => {
                    let st = &mut self.report.nodes[i];
                    st.frames_rx += 1;
                    st.bytes_rx += frame.len() as u64;
                    st.busy_ns += self.cfg[i].rx_cost_ns;
                    let t = now.max(self.cpu_free[i]) + self.cfg[i].rx_cost_ns;
                    self.cpu_free[i] = t;
                    self.nodes[i].handle_packet(t, from, &frame);
                    // the buffer goes back to the receiver, which may reuse it for a frame it sends
                    self.nodes[i].recycle(frame);
                    self.drain(node, t);
                }
            }
            if done(now, &self.nodes) {
                self.report.finished = true;
                break;
            }
        }
        self.report.faults = self.faults.counters.clone();
        &self.report
    }

    pub fn nodes(&self) -> &[N] {
        &self.nodes
    }

    pub fn into_nodes(self) -> Vec<N> {
        self.nodes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use inabench_rng::SplitMix64;
    use std::collections::BinaryHeap;

    /// What the reference heap holds: an event's key and what it should pop as.
    #[derive(PartialEq, Eq, PartialOrd, Ord)]
    struct Ref(
        std::cmp::Reverse<(Nanos, u64)>,
        NodeId,
        Option<(NodeId, Vec<u8>)>,
    );

    /// Random pushes (frames on the links of 3 nodes, mostly in time order per link, some
    /// earlier than their link's last one as a reordered frame or a duplicate would be, and
    /// timers), interleaved with pops: the queue pops exactly what one binary heap of the same
    /// events pops, each frame with its own sender and bytes.
    #[test]
    fn the_queue_pops_what_one_heap_pops() {
        for seed in 0..20u64 {
            let mut g = SplitMix64::new(seed);
            let nodes = 3;
            let links = nodes * nodes;
            let mut q = Queue::new(nodes);
            let mut reference: BinaryHeap<Ref> = BinaryHeap::new();
            let mut last_at = vec![0u64; links];
            let (mut seq, mut now) = (0u64, 0u64);
            let (mut popped, mut off_order, mut timers) = (0usize, 0usize, 0usize);
            let popped_as = |p: Option<(Nanos, NodeId, Popped)>| {
                p.map(|(at, node, what)| {
                    let frame = match what {
                        Popped::Frame { from, frame } => Some((from, frame)),
                        Popped::Timer => None,
                    };
                    (at, node, frame)
                })
            };
            for _ in 0..20_000 {
                if g.next_u64() % 5 < 3 {
                    seq += 1;
                    let r = g.next_u64();
                    let k = (r >> 8) as usize % links;
                    let (from, to) = ((k / nodes) as NodeId, (k % nodes) as NodeId);
                    let frame = seq.to_le_bytes().to_vec();
                    match r % 10 {
                        0 => {
                            let (at, node) = (now + r % 300, (r >> 16) as NodeId % 7);
                            q.push_timer(at, seq, node);
                            reference.push(Ref(std::cmp::Reverse((at, seq)), node, None));
                            timers += 1;
                        }
                        1 => {
                            // a frame earlier than its link's last one
                            off_order += 1;
                            let at = now.max(last_at[k].saturating_sub(r % 50));
                            q.push_frame(at, seq, k, frame.clone());
                            let ev = Some((from, frame));
                            reference.push(Ref(std::cmp::Reverse((at, seq)), to, ev));
                        }
                        _ => {
                            last_at[k] = last_at[k].max(now) + r % 40;
                            let at = last_at[k];
                            q.push_frame(at, seq, k, frame.clone());
                            let ev = Some((from, frame));
                            reference.push(Ref(std::cmp::Reverse((at, seq)), to, ev));
                        }
                    }
                } else {
                    let want = reference
                        .pop()
                        .map(|Ref(std::cmp::Reverse((at, _)), n, f)| (at, n, f));
                    assert_eq!(q.peek_at(), want.as_ref().map(|w| w.0), "seed {seed}");
                    assert_eq!(popped_as(q.pop()), want, "seed {seed}");
                    if let Some(w) = want {
                        now = w.0;
                        popped += 1;
                    }
                }
            }
            while let Some(Ref(std::cmp::Reverse((at, _)), n, f)) = reference.pop() {
                assert_eq!(popped_as(q.pop()), Some((at, n, f)), "seed {seed}");
                popped += 1;
            }
            assert!(q.pop().is_none());
            assert!(
                popped > 10_000 && off_order > 500 && timers > 500,
                "the test exercised every path"
            );
        }
    }
}
