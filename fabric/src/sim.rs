//! `sim`: a discrete-event fabric in virtual time. A star: every host hangs off one switch node by
//! a full-duplex link with a rate, a propagation latency, an MTU and a drop-tail egress queue.
//! Each frame pays serialization (bytes x 8 / rate) on its egress link and queues behind earlier
//! frames; each host pays a per-frame CPU cost to receive and to send (its host stack's cost,
//! measured elsewhere and passed in), and is busy meanwhile. Faults come from [`FaultInjector`].
//! The same `Endpoint` state machines run here unchanged.

use crate::endpoint::{Endpoint, Nanos, NodeId};
use crate::fault::{Fate, FaultCounters, FaultInjector, Faults};
use std::collections::binary_heap::PeekMut;
use std::collections::{BinaryHeap, VecDeque};

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

/// One scheduled event, ordered by (time, sequence) only, earliest first: the sequence number is unique, so the
/// order is total and the same as a heap of whole events would give. A frame's bytes wait in the
/// fabric's slab (`frames[slot]`), so the queue moves small keys, not frames.
#[derive(Debug, Clone, Copy)]
struct Event {
    at: Nanos,
    seq: u64,
    /// The node that receives the frame, or whose timer fires.
    node: NodeId,
    /// The frame's slot in the slab; [`TIMER`] for a timer.
    slot: u32,
    /// The directed link whose queue this event heads ([`Queue`]); [`NO_LINK`] when none.
    link: u32,
}

/// `Event::slot` of a timer.
const TIMER: u32 = u32::MAX;
/// `Event::link` of an event that heads no link's queue.
const NO_LINK: u32 = u32::MAX;

/// The pending events, popped in (time, sequence) order: exactly the order one binary heap of
/// all events gives (the test `the_queue_pops_what_one_heap_pops` checks it against one), with a
/// much smaller heap. The frames of one directed link mostly arrive in the order they were sent
/// (the link is FIFO: each frame is scheduled at or after the one before it), so they wait in
/// that link's FIFO and only the link's earliest frame is in the heap. An event that would not
/// keep its link's FIFO sorted (a reordered frame's extra delay, a duplicate) and every timer go
/// into the heap on their own.
struct Queue {
    heap: BinaryHeap<Event>,
    /// Per directed link: the events behind the one that heads it in `heap`, in key order.
    fifo: Vec<VecDeque<Event>>,
    /// Per directed link: the key of the last event queued on it, while it heads in `heap`.
    last: Vec<Option<u128>>,
}

impl Queue {
    fn new(links: usize) -> Queue {
        Queue {
            heap: BinaryHeap::new(),
            fifo: (0..links).map(|_| VecDeque::new()).collect(),
            last: vec![None; links],
        }
    }

    /// Add `ev`, a frame on directed link `link` or (None) a timer.
    #[inline]
    fn push(&mut self, mut ev: Event, link: Option<usize>) {
        if let Some(k) = link
            && k < NO_LINK as usize
        {
            match self.last[k] {
                None => {
                    self.last[k] = Some(ev.key());
                    ev.link = k as u32;
                    self.heap.push(ev);
                    return;
                }
                Some(l) if ev.key() > l => {
                    self.last[k] = Some(ev.key());
                    ev.link = k as u32;
                    self.fifo[k].push_back(ev);
                    return;
                }
                Some(_) => {}
            }
        }
        ev.link = NO_LINK;
        self.heap.push(ev);
    }

    /// The earliest event.
    #[inline]
    fn pop(&mut self) -> Option<Event> {
        let mut top = self.heap.peek_mut()?;
        let ev = *top;
        if ev.link != NO_LINK {
            let k = ev.link as usize;
            if let Some(next) = self.fifo[k].pop_front() {
                // the link's next event takes its place (one sift down when `top` drops)
                *top = next;
                return Some(ev);
            }
            self.last[k] = None;
        }
        PeekMut::pop(top);
        Some(ev)
    }
}

impl Event {
    /// The order key: time, then sequence, in one integer compare.
    #[inline(always)]
    fn key(&self) -> u128 {
        (u128::from(self.at) << 64) | u128::from(self.seq)
    }
}

// Reversed, so that std's max-heap pops the earliest event first.
impl PartialEq for Event {
    #[inline(always)]
    fn eq(&self, o: &Self) -> bool {
        self.key() == o.key()
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    #[inline(always)]
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Event {
    #[inline(always)]
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        o.key().cmp(&self.key())
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
    /// Frames in flight: (sender, bytes) per slot; `free` lists the empty slots.
    frames: Vec<(NodeId, Vec<u8>)>,
    free: Vec<u32>,
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
            queue: Queue::new(n * n),
            seq: 0,
            frames: Vec::new(),
            free: Vec::new(),
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

    /// Schedule an event: a frame on directed link `link`, or (None) a timer.
    fn push(&mut self, at: Nanos, node: NodeId, slot: u32, link: Option<usize>) {
        self.seq += 1;
        self.queue.push(
            Event {
                at,
                seq: self.seq,
                node,
                slot,
                link: NO_LINK,
            },
            link,
        );
    }

    /// Schedule `frame` from `from` to arrive at `to` at `at`.
    fn push_frame(&mut self, at: Nanos, to: NodeId, from: NodeId, frame: Vec<u8>) {
        let slot = match self.free.pop() {
            Some(s) => {
                self.frames[s as usize] = (from, frame);
                s
            }
            None => {
                self.frames.push((from, frame));
                (self.frames.len() - 1) as u32
            }
        };
        let link = from as usize * self.nodes.len() + to as usize;
        self.push(at, to, slot, Some(link));
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
                self.push(at, id, TIMER, None);
            }
        }
    }

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
                    self.push_frame(at + ser, to, from, frame.clone());
                }
                self.push_frame(at, to, from, frame);
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
        while let Some(Event {
            at: now,
            node,
            slot,
            ..
        }) = self.queue.pop()
        {
            if now > max_ns {
                self.report.end_ns = max_ns;
                break;
            }
            self.report.events += 1;
            self.report.end_ns = now;
            let i = node as usize;
            if slot == TIMER {
                if self.timer_at[i] != Some(now) {
                    continue; // superseded
                }
                self.timer_at[i] = None;
                let t = now.max(self.cpu_free[i]);
                self.nodes[i].handle_timeout(t);
                self.drain(node, t);
            } else {
                let (from, frame) = std::mem::take(&mut self.frames[slot as usize]);
                self.free.push(slot);
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

    /// Random pushes (frames on a few links, mostly in time order per link, some earlier than
    /// their link's last one as a reordered frame or a duplicate would be, and timers),
    /// interleaved with pops: the queue pops exactly what one binary heap of the same events pops.
    #[test]
    fn the_queue_pops_what_one_heap_pops() {
        for seed in 0..20u64 {
            let mut g = SplitMix64::new(seed);
            let links = 6;
            let mut q = Queue::new(links);
            let mut reference: BinaryHeap<Event> = BinaryHeap::new();
            let mut last_at = vec![0u64; links];
            let (mut seq, mut now) = (0u64, 0u64);
            let (mut popped, mut off_order) = (0usize, 0usize);
            for _ in 0..20_000 {
                if g.next_u64() % 5 < 3 {
                    seq += 1;
                    let r = g.next_u64();
                    let (at, link) = match r % 10 {
                        0 => (now + r % 300, None), // a timer
                        1 => {
                            // a frame earlier than its link's last one
                            let k = (r >> 8) as usize % links;
                            off_order += 1;
                            (now.max(last_at[k].saturating_sub(r % 50)), Some(k))
                        }
                        _ => {
                            let k = (r >> 8) as usize % links;
                            last_at[k] = last_at[k].max(now) + r % 40;
                            (last_at[k], Some(k))
                        }
                    };
                    let ev = Event {
                        at,
                        seq,
                        node: (r % 7) as NodeId,
                        slot: (r >> 20) as u32 % 1000,
                        link: NO_LINK,
                    };
                    q.push(ev, link);
                    reference.push(ev);
                } else {
                    let (a, b) = (q.pop(), reference.pop());
                    assert_eq!(
                        a.map(|e| (e.at, e.seq, e.node, e.slot)),
                        b.map(|e| (e.at, e.seq, e.node, e.slot)),
                        "seed {seed}"
                    );
                    if let Some(e) = b {
                        now = e.at;
                        popped += 1;
                    }
                }
            }
            while let Some(b) = reference.pop() {
                let a = q.pop().map(|e| (e.at, e.seq));
                assert_eq!(a, Some((b.at, b.seq)), "seed {seed}");
                popped += 1;
            }
            assert!(q.pop().is_none());
            assert!(
                popped > 10_000 && off_order > 500,
                "the test exercised both paths"
            );
        }
    }
}
