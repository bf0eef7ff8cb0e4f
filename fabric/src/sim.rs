//! `sim`: a discrete-event fabric in virtual time. A star: every host hangs off one switch node by
//! a full-duplex link with a rate, a propagation latency, an MTU and a drop-tail egress queue.
//! Each frame pays serialization (bytes x 8 / rate) on its egress link and queues behind earlier
//! frames; each host pays a per-frame CPU cost to receive and to send (its host stack's cost,
//! measured elsewhere and passed in), and is busy meanwhile. Faults come from [`FaultInjector`].
//! The same `Endpoint` state machines run here unchanged.
//!
//! Transmit can be pull-based at the hosts, as a NIC sends: a host's link takes the host's next frame
//! when it is free, so the host is asked for a frame (`poll_transmit`) only when the frame it
//! makes (its `tx_cost_ns`) would not wait behind the one on the wire; a frame the host decides
//! to send first (a RoCE NIC's scheduler puts ACK/NAK/CNP before data) leaves next, not behind
//! a whole window pushed ahead of it. The switch node still pushes: its frames wait in the
//! drop-tail egress queue of the port they leave by, as in an output-queued switch.
//! Pull is the default; [`SimFabric::set_push_transmit`]`(true)` brings back the older push
//! model (a host hands over every frame it has at once and they wait in its link's queue), which
//! tests compare with. What pull moved, explained: a frame now waits in its host until its link
//! is free, so a system's "sender queue" is timed from when its protocol made the packet ready
//! (NetReduce's message window admitting a message, a SwitchML or ATP slot or window freed), not
//! from a poll; SwitchML's one-bit shadow copies mix rounds under 0.5 us reordering at other
//! seeds than before (the documented finding, counted by its switch's `mixed_rounds`), and
//! P4SGD's header without rounds can also leave a worker waiting for good, not only give it a
//! wrong sum.

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
/// `Head::what` of a host's transmit wake-up: its link is (about to be) free for its next frame.
const TX_WAKE: u32 = u32::MAX - 1;

impl Head {
    /// Earlier than `o` in (time, sequence) order.
    #[inline(always)]
    fn before(&self, o: &Head) -> bool {
        key(self.at, self.seq) < key(o.at, o.seq)
    }
}

/// A 4-ary min-heap of [`Head`]s by (time, sequence): half the levels of a binary heap, the four
/// children of a node side by side in memory (the run's hottest fabric code is taking the earliest
/// entry out; at 64 workers the heap holds a few hundred entries). Keys are unique (one sequence
/// number per event), so it pops exactly what any correct priority queue pops. Each operation
/// carries the entry it places in registers down (or up) the tree and writes it once where it
/// belongs, rather than writing it at the top and then swapping it down as std's `PeekMut` does.
#[derive(Debug, Default)]
struct Heap {
    v: Vec<Head>,
}

/// Children per node of [`Heap`].
const ARITY: usize = 4;

impl Heap {
    #[inline(always)]
    fn peek(&self) -> Option<&Head> {
        self.v.first()
    }

    fn push(&mut self, h: Head) {
        let mut i = self.v.len();
        self.v.push(h);
        while i > 0 {
            let p = (i - 1) / ARITY;
            if !h.before(&self.v[p]) {
                break;
            }
            self.v[i] = self.v[p];
            i = p;
        }
        self.v[i] = h;
    }

    /// The earliest of the children of the node whose first child is `first` (`first < n`).
    #[inline(always)]
    fn earliest_child(&self, first: usize, n: usize) -> usize {
        let v = &self.v;
        if first + ARITY <= n {
            // all four: two pairs, then their winners (without branches: which child it is does
            // not predict well)
            let a = first + usize::from(v[first + 1].before(&v[first]));
            let b = first + 2 + usize::from(v[first + 3].before(&v[first + 2]));
            if v[b].before(&v[a]) { b } else { a }
        } else {
            let mut c = first;
            for j in first + 1..n {
                if v[j].before(&v[c]) {
                    c = j;
                }
            }
            c
        }
    }

    /// Replace the earliest entry with `h`.
    #[inline]
    fn replace_top(&mut self, h: Head) {
        let n = self.v.len();
        let mut i = 0;
        loop {
            let first = ARITY * i + 1;
            if first >= n {
                break;
            }
            let c = self.earliest_child(first, n);
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
    TxWake,
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
            assert!(
                slot < TX_WAKE - LOOSE,
                "too many reordered frames in flight"
            );
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

    /// Add a transmit wake-up of `node` at `at`.
    #[inline]
    fn push_tx_wake(&mut self, at: Nanos, seq: u64, node: NodeId) {
        self.heap.push(Head {
            at,
            seq,
            node,
            what: TX_WAKE,
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
        } else if h.what == TX_WAKE {
            self.heap.pop_top();
            Popped::TxWake
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
    /// The serialization time of the last frame length seen (most frames share a length), at
    /// the link's own rate.
    ser_cache: (usize, u64),
    /// A host's link rate where it differs from the link's (both directions of the host's link
    /// to the switch; empty or `None`: the link's rate): a star whose hosts have links of
    /// different speeds.
    node_rate_bps: Vec<Option<f64>>,
    /// When each directed link (from * nodes + to) is free again.
    link_free: Vec<Nanos>,
    cpu_free: Vec<Nanos>,
    timer_at: Vec<Option<Nanos>>,
    /// Each host's pending transmit wake-up (pull-based transmit).
    tx_wake_at: Vec<Option<Nanos>>,
    /// Hosts push every frame they have onto their link at once (the old model) instead of
    /// their link pulling the next frame when free.
    push_transmit: bool,
    report: SimReport,
    tap: Option<Tap>,
    /// A stepped run has drained every node once ([`SimFabric::start`]).
    started: bool,
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
            node_rate_bps: Vec::new(),
            link_free: vec![0; n * n],
            cpu_free: vec![0; n],
            timer_at: vec![None; n],
            tx_wake_at: vec![None; n],
            // pull-based transmit at the hosts (the module doc says what it moved)
            push_transmit: false,
            report: SimReport {
                nodes: vec![NodeStats::default(); n],
                ..Default::default()
            },
            tap: None,
            started: false,
        }
    }

    /// Call `tap(time, from, to, frame)` for every frame put on a link (e.g. a pcap writer).
    pub fn set_tap(&mut self, tap: Tap) {
        self.tap = Some(tap);
    }

    /// Host `i`'s link to the switch runs at `rates[i]` bits per second, both ways (`None`, or
    /// a host past the end: the link's rate). The switch's own entry is not read.
    pub fn set_node_rates(&mut self, rates: &[Option<f64>]) {
        self.node_rate_bps = rates.to_vec();
    }

    /// Hosts hand their link every frame they have at once, each queued behind the ones before
    /// it (the model before pull-based transmit: an ACK made while a window is queued leaves
    /// after the window). Off by default (pull-based transmit); `true` for comparisons.
    pub fn set_push_transmit(&mut self, on: bool) {
        self.push_transmit = on;
    }

    /// Take a node's transmissions starting at `now` (its CPU pays tx_cost per frame). The
    /// switch hands over every frame it has (each waits in its egress port's queue); a host is
    /// asked for its next frame only while its link will be free by the time the frame is made,
    /// and otherwise woken when it will be.
    fn drain(&mut self, id: NodeId, now: Nanos) {
        let i = id as usize;
        let mut t = now.max(self.cpu_free[i]);
        let cost = self.cfg[i].tx_cost_ns;
        if id == self.switch || self.push_transmit || (self.switch as usize) >= self.nodes.len() {
            while let Some(tx) = self.nodes[i].poll_transmit(t) {
                t += cost;
                self.report.nodes[i].busy_ns += cost;
                self.send(id, tx.to, tx.bytes, t);
            }
        } else {
            let uplink = i * self.nodes.len() + self.switch as usize;
            loop {
                let free = self.link_free[uplink];
                if free > t + cost {
                    // the link is busy: ask again when a frame made from then on meets it free
                    self.wake_tx(id, free - cost);
                    break;
                }
                let Some(tx) = self.nodes[i].poll_transmit(t) else {
                    break;
                };
                t += cost;
                self.report.nodes[i].busy_ns += cost;
                self.send(id, tx.to, tx.bytes, t);
            }
        }
        self.cpu_free[i] = t;
        self.rearm(id);
    }

    /// Wake host `id` at `at` to take its next frame (one pending wake-up per host: an earlier
    /// one stands, as the link is free by then too).
    fn wake_tx(&mut self, id: NodeId, at: Nanos) {
        let i = id as usize;
        if self.tx_wake_at[i].is_some_and(|w| w <= at) {
            return;
        }
        self.tx_wake_at[i] = Some(at);
        self.seq += 1;
        self.queue.push_tx_wake(at, self.seq, id);
    }

    /// A host whose timer is still due after `handle_timeout(t)` and its drain is waiting for
    /// its link (pull-based transmit: an endpoint such as P4SGD's host reports a frame ready to
    /// go as a due timer); handling that timer again at `t` would change nothing and repeat
    /// forever at the same virtual time, so it is handled when the link frees (the pending
    /// transmit wake-up), when the frame can leave.
    fn defer_due_timer(&mut self, id: NodeId, t: Nanos) {
        let i = id as usize;
        if let (Some(w), Some(x)) = (self.timer_at[i], self.tx_wake_at[i])
            && w <= t
            && x > w
        {
            self.timer_at[i] = Some(x);
            self.seq += 1;
            self.queue.push_timer(x, self.seq, id);
        }
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
        // the host end's rate (one end is the switch)
        let host = if from == self.switch { to } else { from };
        let rate = self
            .node_rate_bps
            .get(host as usize)
            .copied()
            .flatten()
            .filter(|r| *r > 0.0);
        let rate_bps = rate.unwrap_or(self.link.rate_bps);
        let serialize = |len: usize| {
            ((len + self.link.framing_bytes) as f64 * 8.0 / rate_bps * 1e9).ceil() as u64
        };
        let ser = if rate.is_some() {
            serialize(len)
        } else if self.ser_cache.0 == len {
            self.ser_cache.1
        } else {
            let ser = serialize(len);
            self.ser_cache = (len, ser);
            ser
        };
        // bytes waiting ahead of this frame
        let backlog = if start == t {
            0 // nothing ahead (the formula below gives 0 too)
        } else {
            ((start - t) as f64 * rate_bps / 8e9) as usize
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

    /// Handle one popped event (the body of the run loop, shared by [`SimFabric::run_until_at`]
    /// and [`SimFabric::step`]); false when it was a superseded timer or wake-up (nothing ran).
    #[inline(always)]
    fn handle_event(&mut self, now: Nanos, node: NodeId, popped: Popped) -> bool {
        self.report.events += 1;
        self.report.end_ns = now;
        let i = node as usize;
        match popped {
            Popped::Timer => {
                if self.timer_at[i] != Some(now) {
                    return false; // superseded
                }
                self.timer_at[i] = None;
                let t = now.max(self.cpu_free[i]);
                self.nodes[i].handle_timeout(t);
                self.drain(node, t);
                self.defer_due_timer(node, t);
            }
            Popped::TxWake => {
                if self.tx_wake_at[i] != Some(now) {
                    return false; // superseded by an earlier one
                }
                self.tx_wake_at[i] = None;
                self.drain(node, now);
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
        true
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
        self.run_until_event(max_ns, |now, _, nodes| done(now, nodes))
    }

    /// As [`SimFabric::run_until_at`], the stop condition also told which node handled the event
    /// (its packet, timer or transmit wake-up; the only node the fabric called), so that it can
    /// look at that node alone instead of every node after every event.
    pub fn run_until_event(
        &mut self,
        max_ns: Nanos,
        mut done: impl FnMut(Nanos, NodeId, &[N]) -> bool,
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
            if !self.handle_event(now, node, popped) {
                continue;
            }
            if done(now, node, &self.nodes) {
                self.report.finished = true;
                break;
            }
        }
        self.report.faults = self.faults.counters.clone();
        &self.report
    }

    /// Start a stepped run: every node is drained once at time 0, as [`SimFabric::run_until_at`]
    /// does first. [`SimFabric::step`] calls it on its first call; later calls do nothing.
    pub fn start(&mut self) {
        if self.started {
            return;
        }
        self.started = true;
        for id in 0..self.nodes.len() as NodeId {
            self.drain(id, 0);
        }
    }

    /// Handle the next event if it comes at or before `max_ns`, and give its virtual time;
    /// `None` when no event is left, or the next one is after `max_ns` (the run's time is then
    /// `max_ns`, and the event stays queued). A stepped run handles the same events in the same
    /// order as [`SimFabric::run_until_at`]: `step` until `done` holds is that run.
    pub fn step(&mut self, max_ns: Nanos) -> Option<Nanos> {
        self.start();
        match self.queue.peek_at() {
            None => return None,
            Some(at) if at > max_ns => {
                self.report.end_ns = self.report.end_ns.max(max_ns);
                return None;
            }
            Some(_) => {}
        }
        let (now, node, popped) = self.queue.pop()?;
        self.handle_event(now, node, popped);
        self.report.faults = self.faults.counters.clone();
        Some(now)
    }

    /// Drain node `id` now (the time of the last event): what it has to send leaves and its
    /// timer is re-armed. For a driver that changed a node between steps (a test harness that
    /// released frames it held) and must let the fabric see it.
    pub fn kick(&mut self, id: NodeId) {
        if (id as usize) < self.nodes.len() {
            let now = self.report.end_ns;
            self.drain(id, now);
        }
    }

    /// The virtual time of the last event handled (or the limit a step stopped at).
    pub fn now(&self) -> Nanos {
        self.report.end_ns
    }

    /// The report so far (of a stepped run; [`SimFabric::run_until_at`] returns its own).
    pub fn report(&self) -> &SimReport {
        &self.report
    }

    pub fn nodes_mut(&mut self) -> &mut [N] {
        &mut self.nodes
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
    use std::collections::{BinaryHeap, VecDeque};

    /// A toy node of a 3-node star (0, 1 hosts; 2 the switch, which forwards on byte 0): host 0
    /// has `data` frames of `size` bytes for host 1 from the start and answers each frame it
    /// receives with an ACK that it sends before its data (as a RoCE NIC's scheduler does);
    /// host 1 sends one 64-byte frame to host 0 at the start.
    struct Toy {
        id: NodeId,
        data: u32,
        size: usize,
        acks: VecDeque<Vec<u8>>,
        out: VecDeque<(NodeId, Vec<u8>)>,
        got: u32,
    }

    impl Endpoint for Toy {
        fn id(&self) -> NodeId {
            self.id
        }
        fn handle_packet(&mut self, _now: Nanos, _from: NodeId, frame: &[u8]) {
            match self.id {
                2 => self.out.push_back((NodeId::from(frame[0]), frame.to_vec())),
                0 => self.acks.push_back(vec![1, b'A']),
                _ => self.got += u32::from(frame.get(1) == Some(&b'D')),
            }
        }
        fn poll_transmit(&mut self, _now: Nanos) -> Option<crate::Transmit> {
            let (to, bytes) = match self.id {
                2 => self.out.pop_front()?,
                0 => match self.acks.pop_front() {
                    Some(a) => (2, a),
                    None if self.data > 0 => {
                        self.data -= 1;
                        let mut f = vec![0u8; self.size];
                        f[0] = 1;
                        f[1] = b'D';
                        (2, f)
                    }
                    None => return None,
                },
                _ if self.data > 0 => {
                    self.data = 0;
                    let mut f = vec![0u8; 64];
                    f[0] = 0;
                    (2, f)
                }
                _ => return None,
            };
            Some(crate::Transmit { to, bytes })
        }
        fn poll_timeout(&self) -> Option<Nanos> {
            None
        }
        fn handle_timeout(&mut self, _now: Nanos) {}
        fn is_done(&self) -> bool {
            true
        }
    }

    /// Host 0's departures (time, kind byte) as the tap saw them, and the frames host 1 got.
    fn toy_run(push: bool, tx_cost_ns: u64, data: u32) -> (Vec<(Nanos, u8)>, u32) {
        let size = 1000;
        let toy = |id, data| Toy {
            id,
            data,
            size,
            acks: VecDeque::new(),
            out: VecDeque::new(),
            got: 0,
        };
        let cost = NodeConfig {
            rx_cost_ns: 0,
            tx_cost_ns,
        };
        let zero = NodeConfig {
            rx_cost_ns: 0,
            tx_cost_ns: 0,
        };
        let mut f = SimFabric::new(
            vec![toy(0, data), toy(1, 1), toy(2, 0)],
            vec![cost, zero, zero],
            2,
            LinkConfig::gbps100(),
            Faults::default(),
        );
        f.set_push_transmit(push);
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let s2 = seen.clone();
        f.set_tap(Box::new(move |t, from, _to, frame| {
            if from == 0 {
                s2.lock().expect("tap lock").push((t, frame[1]));
            }
        }));
        f.run_until(1_000_000_000, |_| false);
        let got = f.nodes()[1].got;
        let v = seen.lock().expect("tap lock").clone();
        (v, got)
    }

    /// An ACK made while host 0's window is on its way leaves next (pull), not behind the whole
    /// window (push); the data still go back to back at line rate either way.
    #[test]
    fn an_ack_queued_behind_a_window_leaves_before_the_data() {
        let ser_of = |len: usize| ((len + 24) as f64 * 8.0 / 100e9 * 1e9).ceil() as u64;
        let ser = ser_of(1000); // 82 ns
        for push in [false, true] {
            let (dep, got) = toy_run(push, 0, 100);
            assert_eq!(got, 100, "push {push}: every data frame arrives");
            let ack = dep.iter().position(|d| d.1 == b'A').expect("an ACK left");
            let ack_t = dep[ack].0;
            let last_data = dep.iter().filter(|d| d.1 == b'D').map(|d| d.0).max();
            // host 1's frame reaches host 0 after two links: (64 + 24) B and 1 us each
            let arrives = 2 * (ser_of(64) + 1000);
            if push {
                assert_eq!(ack, 100, "push: the ACK waits behind all 100 data frames");
                assert!(ack_t >= last_data.unwrap_or(0) + ser);
            } else {
                assert!(
                    ack_t >= arrives && ack_t < arrives + ser,
                    "pull: the ACK leaves when the frame on the wire is done ({ack_t} ns, arrival {arrives})"
                );
                assert!(
                    ack < 30,
                    "pull: the ACK leaves among the first frames, not at {ack}"
                );
            }
            // back to back on the link: every frame starts when the one before it ends
            let mut prev = None;
            for (t, kind) in &dep {
                if let Some(p) = prev {
                    assert_eq!(*t, p, "push {push}: the link is never idle between frames");
                }
                prev = Some(t + if *kind == b'A' { ser_of(2) } else { ser });
            }
        }
    }

    /// With a host cost per frame, the host makes its next frame while the link sends the one
    /// before: frames leave every max(cost, serialization) ns, never cost + serialization.
    #[test]
    fn a_host_makes_its_next_frame_while_the_link_sends() {
        let ser = ((1000 + 24) as f64 * 8.0 / 100e9 * 1e9).ceil() as u64;
        for cost in [0, 50, 82, 200] {
            let (dep, got) = toy_run(false, cost, 40);
            assert_eq!(got, 40);
            let data: Vec<Nanos> = dep.iter().filter(|d| d.1 == b'D').map(|d| d.0).collect();
            // (the ACK goes in between once; leave it out of the spacing)
            let gaps: Vec<u64> = data.windows(2).map(|w| w[1] - w[0]).collect();
            let step = cost.max(ser);
            let regular = gaps.iter().filter(|g| **g == step).count();
            assert!(
                regular >= gaps.len() - 2,
                "cost {cost}: {regular} of {} gaps are {step} ns: {gaps:?}",
                gaps.len()
            );
            assert_eq!(
                data[0], cost,
                "cost {cost}: the first frame leaves once made"
            );
        }
    }

    /// Stepping a run event by event is the same run as `run_until`: the same events, end time
    /// and per-node counts (with faults, so the fault draws are in the same order too).
    #[test]
    fn a_stepped_run_is_the_run() {
        let toys = || {
            (0..3)
                .map(|id| Toy {
                    id,
                    data: [200, 1, 0][id as usize],
                    size: 700,
                    acks: VecDeque::new(),
                    out: VecDeque::new(),
                    got: 0,
                })
                .collect::<Vec<_>>()
        };
        let cost = NodeConfig {
            rx_cost_ns: 30,
            tx_cost_ns: 90,
        };
        let faults = Faults {
            loss: 0.1,
            duplicate: 0.05,
            reorder: 0.1,
            reorder_delay_ns: 300,
            seed: 4,
        };
        let link = LinkConfig::gbps100();
        let mut a = SimFabric::new(toys(), vec![cost; 3], 2, link, faults);
        let whole = a.run_until(1_000_000_000, |_| false).clone();
        let mut b = SimFabric::new(toys(), vec![cost; 3], 2, link, faults);
        let mut steps = 0;
        let mut last = 0;
        while let Some(t) = b.step(1_000_000_000) {
            assert!(t >= last, "steps go forward in time");
            last = t;
            steps += 1;
        }
        assert_eq!(steps, whole.events);
        assert_eq!(*b.report(), whole);
        assert!(
            whole.faults.dropped > 0 && whole.faults.duplicated > 0 && whole.events > 300,
            "{whole:?}"
        );
        assert_eq!(b.nodes()[1].got, a.nodes()[1].got);
        // a limit stops a stepped run with the next event still queued
        let mut c = SimFabric::new(toys(), vec![cost; 3], 2, link, faults);
        while c.step(5_000).is_some() {}
        assert_eq!(c.now(), 5_000);
        assert!(c.report().events < whole.events);
        assert!(
            c.step(1_000_000_000).is_some(),
            "the run goes on past the limit"
        );
    }

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
    /// The 4-ary heap pops in (time, sequence) order as std's binary heap does, at every size
    /// (partial last child groups, heaps of 1 to thousands of entries, many equal times).
    #[test]
    fn the_heap_pops_in_key_order() {
        for seed in 0..10u64 {
            let mut g = SplitMix64::new(seed);
            let mut h = Heap::default();
            let mut reference = BinaryHeap::new();
            let mut seq = 0u64;
            let mut popped = 0usize;
            let mut largest = 0usize;
            for round in 0..30_000u64 {
                // grow for a while, then shrink, so every size is crossed both ways
                let grow = (round / 3_000) % 2 == 0;
                let r = g.next_u64();
                if r % 8 < if grow { 5 } else { 2 } {
                    seq += 1;
                    let at = (r >> 8) % 64; // few distinct times: the sequence decides ties
                    h.push(Head {
                        at,
                        seq,
                        node: (r >> 20) as NodeId % 9,
                        what: (r >> 32) as u32,
                    });
                    reference.push(std::cmp::Reverse((at, seq)));
                    largest = largest.max(h.v.len());
                } else {
                    let want = reference.pop().map(|std::cmp::Reverse(k)| k);
                    assert_eq!(h.peek().map(|t| (t.at, t.seq)), want, "seed {seed}");
                    if want.is_some() {
                        h.pop_top();
                        popped += 1;
                    }
                }
            }
            while let Some(std::cmp::Reverse(k)) = reference.pop() {
                assert_eq!(h.peek().map(|t| (t.at, t.seq)), Some(k), "seed {seed}");
                h.pop_top();
                popped += 1;
            }
            assert!(h.peek().is_none());
            assert!(
                popped > 10_000 && largest > 500,
                "the test crossed many sizes"
            );
        }
    }

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
                        Popped::Timer | Popped::TxWake => None,
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
