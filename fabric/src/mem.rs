//! `mem`: endpoints in one process on real time. The nodes run on a few OS threads (by default as
//! many as the host has cores; [`run_with_threads`] sets the count, recorded in
//! [`MemReport::threads`]); each node has a home thread (`placement`: the nodes that do not
//! count towards the end, the switches, get threads of their own, the workers share the others),
//! each thread stepping its home nodes in turn and, after a round in which its home nodes had no
//! frame, any other node that has frames waiting and that no thread is stepping (a node is
//! stepped by one thread at a time: a claim flag per node; so a thread with nothing of its own
//! to do helps, and a switch never waits behind a worker its thread borrowed). A home node with
//! no frames waiting and nothing due (no timer, delay line or backlog: `Slot::due`) is not stepped, since an endpoint sends only after a
//! frame or a timeout (the [`Endpoint`] contract). Frames travel over lock-free single-producer
//! single-consumer rings, one per (sender, receiver) node pair (no lock per frame: a sender writes
//! a slot and publishes it with one release store, the receiver reads it after one acquire load,
//! each side re-reading the other's index only when its copy says full or empty); a node takes
//! what its rings hold, one frame from each sender in turn (as a switch's ports interleave), before
//! it transmits (one wake-up, many frames), and a thread whose home nodes' rings are all empty
//! spins briefly ([`SPIN`]) and then parks, woken by the next sender to any of its nodes. A sender
//! whose ring is full keeps the frame in its own per-destination backlog (order kept, no blocking,
//! so two nodes sending to each other cannot deadlock). Timeouts are honoured with
//! `park_timeout`. Each node's CPU is the thread CPU time (CLOCK_THREAD_CPUTIME_ID) of its own
//! steps that did work (receive, timers, transmit; a thread's spinning, parking and steps that
//! found nothing to do are no node's), read at a step boundary once `READ_EVERY` of wall has
//! passed and around every spin or park, and split among the interval's working steps by their
//! wall time (`Meter`), so "CPU per worker" is that endpoint's
//! accounting; [`MemReport::thread_cpu_ns`] has the threads' own CPU, so the time in no node is
//! seen too. The clock is read once per batch (the frames a node takes in one step are handed
//! over at one reading, a node's burst of transmissions is polled at one reading), as the udp
//! fabric's event loop does. Link rates are not enforced (it is as fast as this host); the MTU
//! is. Faults are the same seeded fates as on `sim` and `udp` (one generator per link direction,
//! drawn by the sender): a reordered frame waits in its sender's delay line for the fault's extra
//! delay, then goes out. A delivered frame's buffer goes back to its receiver through
//! [`Endpoint::recycle`].

use crate::endpoint::{Endpoint, Nanos, NodeId};
use crate::fault::{Fate, FaultCounters, FaultInjector, Faults};
use std::cell::UnsafeCell;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering, fence};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// A bounded ring shared by exactly one [`Producer`] and one [`Consumer`].
struct Ring<T> {
    slots: Box<[UnsafeCell<MaybeUninit<T>>]>,
    mask: usize,
    /// The next slot to read; written by the consumer only.
    head: Padded<AtomicUsize>,
    /// The next slot to write; written by the producer only.
    tail: Padded<AtomicUsize>,
}

/// Keeps the consumer's and the producer's index on separate cache lines.
#[repr(align(128))]
struct Padded<T>(T);

// SAFETY: a slot is accessed by one side at a time: the producer writes slot `tail` only while
// `tail - head < capacity` for a `head` it read with an acquire load (then or earlier: `head`
// only grows, so an old reading is a lower bound; the consumer has released the slot) and
// publishes it with a release store of `tail`; the consumer reads slot `head` only after an
// acquire load (then or earlier: `tail` only grows) saw `tail > head`, and hands it back with a
// release store of `head`. Values of type T cross threads, hence T: Send.
unsafe impl<T: Send> Sync for Ring<T> {}

impl<T> Ring<T> {
    /// A producer and a consumer around a ring of `capacity` slots (rounded up to a power of 2).
    fn pair(capacity: usize) -> (Producer<T>, Consumer<T>) {
        let cap = capacity.max(2).next_power_of_two();
        let ring = Arc::new(Ring {
            slots: (0..cap)
                .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
                .collect(),
            mask: cap - 1,
            head: Padded(AtomicUsize::new(0)),
            tail: Padded(AtomicUsize::new(0)),
        });
        (
            Producer {
                ring: ring.clone(),
                head: 0,
            },
            Consumer { ring, tail: 0 },
        )
    }
}

impl<T> Drop for Ring<T> {
    fn drop(&mut self) {
        let (mut h, t) = (*self.head.0.get_mut(), *self.tail.0.get_mut());
        while h != t {
            // SAFETY: slots head..tail were written and not yet read; we own the ring now
            unsafe { self.slots[h & self.mask].get_mut().assume_init_drop() };
            h = h.wrapping_add(1);
        }
    }
}

/// The one writing side of a ring (not `Clone`: one producer by construction).
struct Producer<T> {
    ring: Arc<Ring<T>>,
    /// The consumer's `head` as last seen: the ring has room while `tail - head` is below its
    /// capacity, so the shared `head` (a cache line the consumer writes) is read only when this
    /// copy says the ring is full.
    head: usize,
}

impl<T> Producer<T> {
    /// Append `v`, or give it back when the ring is full.
    fn push(&mut self, v: T) -> Result<(), T> {
        let r = &*self.ring;
        let t = r.tail.0.load(Ordering::Relaxed);
        if t.wrapping_sub(self.head) > r.mask {
            self.head = r.head.0.load(Ordering::Acquire);
            if t.wrapping_sub(self.head) > r.mask {
                return Err(v);
            }
        }
        // SAFETY: slot t is free (see the Sync impl) and only this producer writes slots
        unsafe { (*r.slots[t & r.mask].get()).write(v) };
        r.tail.0.store(t.wrapping_add(1), Ordering::Release);
        Ok(())
    }
}

/// The one reading side of a ring (not `Clone`: one consumer by construction).
struct Consumer<T> {
    ring: Arc<Ring<T>>,
    /// The producer's `tail` as last seen: slots before it are published, so the shared `tail`
    /// (a cache line the producer writes) is read only when this copy is used up.
    tail: usize,
}

impl<T> Consumer<T> {
    fn pop(&mut self) -> Option<T> {
        let r = &*self.ring;
        let h = r.head.0.load(Ordering::Relaxed);
        if h == self.tail {
            self.tail = r.tail.0.load(Ordering::Acquire);
            if h == self.tail {
                return None;
            }
        }
        // SAFETY: slot h was published by the producer's release store and only this consumer
        // reads it; after the read the slot is handed back with the release store below
        let v = unsafe { (*r.slots[h & r.mask].get()).assume_init_read() };
        r.head.0.store(h.wrapping_add(1), Ordering::Release);
        Some(v)
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }
}

impl<T> Ring<T> {
    /// Nothing is waiting (exact for the consumer; for any other thread a glimpse that may lag).
    fn is_empty(&self) -> bool {
        self.head.0.load(Ordering::Relaxed) == self.tail.0.load(Ordering::Acquire)
    }
}

/// How a receiving thread is woken: the thread (once it runs) and whether it is about to park.
#[derive(Default)]
struct Waker {
    thread: OnceLock<Thread>,
    parked: AtomicBool,
}

impl Waker {
    /// Called by a sender after it pushed: wake the receiver if it parks or is about to.
    fn wake(&self) {
        fence(Ordering::SeqCst);
        if self.parked.load(Ordering::Relaxed)
            && self.parked.swap(false, Ordering::AcqRel)
            && let Some(t) = self.thread.get()
        {
            t.unpark();
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct MemNodeStats {
    pub frames_tx: u64,
    pub bytes_tx: u64,
    pub frames_rx: u64,
    pub bytes_rx: u64,
    pub cpu_ns: u64,
    /// Wall time of the node's steps that did work (a thread had it and it had something to
    /// do; [`MemNodeStats::cpu_ns`] is the thread CPU of those steps): against the run's wall
    /// time, how busy the node was.
    pub busy_ns: u64,
    /// Wall time from the start to when the node reported done (or the end).
    pub done_ns: u64,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct MemReport {
    pub wall_ns: u64,
    /// OS threads the nodes ran on (each node's home thread as `placement` deals them: the
    /// switches, the nodes that do not count, on threads of their own; a thread whose home nodes
    /// had no frame in a round also steps other nodes that have frames waiting).
    pub threads: usize,
    pub nodes: Vec<MemNodeStats>,
    /// Each serving thread's own CPU time over the run (CLOCK_THREAD_CPUTIME_ID from its start to
    /// its end): their sum less the nodes' `cpu_ns` is the time in no node (spinning, parking,
    /// waking, looking for work).
    pub thread_cpu_ns: Vec<u64>,
    /// Times each serving thread parked (a futex wait; each one the next sender's wake-up call).
    pub parks: Vec<u64>,
    pub dropped_mtu: u64,
    pub faults: FaultCounters,
    pub finished: bool,
}

/// This thread's CPU time (ns); 0 where the clock is refused.
fn thread_cpu_ns() -> u64 {
    crate::wrap::thread_cpu_ns().unwrap_or(0)
}

type Frame = Vec<u8>;

/// A sender's delay line of reordered frames: (due, sequence, to, frame), earliest first.
type DelayLine = BinaryHeap<Reverse<(Nanos, u64, NodeId, Vec<u8>)>>;

/// Slots per ring: up to 1024, fewer for many nodes (n x n rings, at most 2^20 slots in all).
fn ring_capacity(n: usize) -> usize {
    let budget = (1usize << 20) / (n * n).max(1);
    let pow = if budget.is_power_of_two() {
        budget
    } else {
        budget.next_power_of_two() / 2
    };
    pow.clamp(16, 1024)
}

/// A node's sending side: one producer per destination, frames a full ring refused (in order),
/// and the destinations' wakers.
struct Outbox {
    rings: Vec<Producer<Frame>>,
    backlog: Vec<VecDeque<Frame>>,
    backlogged: usize,
    /// one per thread: node `to` is woken through its home thread's, `wakers[homes[to]]`
    wakers: Arc<Vec<Waker>>,
    homes: Arc<[usize]>,
}

impl Outbox {
    /// Send `frame` to `to`, behind anything already waiting for that destination.
    fn send(&mut self, to: usize, frame: Frame) {
        if self.backlog[to].is_empty() {
            match self.rings[to].push(frame) {
                Ok(()) => self.wakers[self.homes[to]].wake(),
                Err(f) => {
                    self.backlog[to].push_back(f);
                    self.backlogged += 1;
                }
            }
        } else {
            self.backlog[to].push_back(frame);
            self.backlogged += 1;
        }
    }

    /// Move what the rings now have room for out of the backlogs.
    fn flush(&mut self) {
        if self.backlogged == 0 {
            return;
        }
        for to in 0..self.backlog.len() {
            let mut moved = false;
            while let Some(f) = self.backlog[to].pop_front() {
                match self.rings[to].push(f) {
                    Ok(()) => {
                        self.backlogged -= 1;
                        moved = true;
                    }
                    Err(f) => {
                        self.backlog[to].push_front(f);
                        break;
                    }
                }
            }
            if moved {
                self.wakers[self.homes[to]].wake();
            }
        }
    }
}

/// How long a thread whose nodes have nothing to do keeps polling their rings before it parks:
/// a frame that arrives meanwhile costs no wake-up (a futex call and a reschedule on each
/// side). A fabric setting, not an input of any result.
pub const SPIN: Duration = Duration::from_micros(20);

/// The most frames a node takes from one sender in one step (then it transmits).
const BATCH: usize = 256;

/// The threads [`run`] uses: the host's cores (`available_parallelism`), at least 1.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |c| c.get())
}

/// One node and its fabric state, stepped by the thread it was dealt to.
struct Slot<N> {
    i: usize,
    node: N,
    inbox: Vec<Consumer<Frame>>,
    out: Outbox,
    /// this sender's links' fates (the same per-link generators as one shared injector)
    injector: FaultInjector,
    /// the delay line of reordered frames: (due, sequence, to, frame)
    held: DelayLine,
    held_seq: u64,
    st: MemNodeStats,
    counted: bool,
    reported: bool,
    /// scratch of [`Slot::receive`]: the senders with frames still waiting this step
    live: Vec<usize>,
}

/// What every thread shares.
struct Shared {
    n: usize,
    mtu: usize,
    start: Instant,
    deadline: Duration,
    stop: AtomicBool,
    need: usize,
    done: AtomicUsize,
    dropped_mtu: AtomicUsize,
    wakers: Arc<Vec<Waker>>,
}

impl Shared {
    fn now(&self) -> Nanos {
        self.start.elapsed().as_nanos() as Nanos
    }

    fn stop_all(&self) {
        self.stop.store(true, Ordering::SeqCst);
        for w in self.wakers.iter() {
            if let Some(t) = w.thread.get() {
                t.unpark();
            }
        }
    }
}

impl<N: Endpoint> Slot<N> {
    /// Everything the node wants to send now, through the faults, onto the rings. `now` is
    /// read once for the whole burst (as the udp fabric's event loop does).
    fn send_all(&mut self, sh: &Shared, now: Nanos) -> usize {
        let mut sent = 0;
        while let Some(t) = self.node.poll_transmit(now) {
            sent += 1;
            self.st.frames_tx += 1;
            self.st.bytes_tx += t.bytes.len() as u64;
            if t.bytes.len() > sh.mtu || t.to as usize >= sh.n {
                sh.dropped_mtu.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            if let Fate::Deliver {
                copies,
                extra_delay_ns,
            } = self.injector.fate(self.i as NodeId, t.to)
            {
                for _ in 1..copies {
                    self.out.send(t.to as usize, t.bytes.clone());
                }
                if extra_delay_ns > 0 {
                    self.held_seq += 1;
                    self.held.push(Reverse((
                        now + extra_delay_ns,
                        self.held_seq,
                        t.to,
                        t.bytes,
                    )));
                } else {
                    self.out.send(t.to as usize, t.bytes);
                }
            }
        }
        sent
    }

    /// Send the reordered frames whose delay has passed.
    fn release(&mut self, now: Nanos) {
        while self.held.peek().is_some_and(|r| r.0.0 <= now) {
            if let Some(Reverse((_, _, to, b))) = self.held.pop() {
                self.out.send(to as usize, b);
            }
        }
    }

    /// Take what is waiting from every sender, one frame from each in turn (as a switch's ports
    /// interleave; at most [`BATCH`] per sender per step, so no sender starves the others);
    /// returns how many frames. The step's frames are handed over at one reading of the clock
    /// (a receive batch, as udp's `recvmmsg`).
    fn receive(&mut self, sh: &Shared) -> usize {
        let mut now = None;
        let mut live = std::mem::take(&mut self.live);
        live.clear();
        let mut got = 0usize;
        // the first pass finds the senders with frames waiting; later passes take one more
        // frame from each until it has none or has given BATCH
        for from in 0..self.inbox.len() {
            if let Some(f) = self.inbox[from].pop() {
                let now = *now.get_or_insert_with(|| sh.now());
                self.deliver(now, from, f);
                got += 1;
                live.push(from);
            }
        }
        if let Some(now) = now {
            for _ in 1..BATCH {
                if live.is_empty() {
                    break;
                }
                live.retain(|&from| match self.inbox[from].pop() {
                    Some(f) => {
                        self.deliver(now, from, f);
                        got += 1;
                        true
                    }
                    None => false,
                });
            }
        }
        self.live = live;
        got
    }

    /// Hand one frame to the node and its buffer back to it.
    fn deliver(&mut self, now: Nanos, from: usize, f: Frame) {
        self.st.frames_rx += 1;
        self.st.bytes_rx += f.len() as u64;
        self.node.handle_packet(now, from as NodeId, &f);
        self.node.recycle(f);
    }

    /// After receiving: timers, the backlog, transmit, the delay line, the done report.
    /// Returns whether the node did anything (a timeout, a frame polled).
    fn after(&mut self, sh: &Shared) -> bool {
        let mut now = sh.now();
        let mut worked = false;
        if self.node.poll_timeout().is_some_and(|t| t <= now) {
            self.node.handle_timeout(now);
            now = sh.now();
            worked = true;
        }
        self.out.flush();
        worked |= self.send_all(sh, now) > 0;
        self.release(now);
        if self.counted && !self.reported && self.node.is_done() {
            self.reported = true;
            self.st.done_ns = sh.now();
            if sh.done.fetch_add(1, Ordering::SeqCst) + 1 >= sh.need {
                sh.stop_all();
            }
        }
        worked
    }

    /// When the node next needs a step with nothing arriving (fabric time, ns): its timer, its
    /// delay line; 0 (every round) while it has a backlog (a receiver behind it: come back
    /// soon); `Nanos::MAX` when only a frame can give it work (an endpoint sends only after a
    /// frame or a timeout: the [`Endpoint`] contract).
    fn due(&self) -> Nanos {
        if self.out.backlogged > 0 {
            return 0;
        }
        let timer = self.node.poll_timeout().unwrap_or(Nanos::MAX);
        let held = self.held.peek().map_or(Nanos::MAX, |r| r.0.0);
        timer.min(held)
    }
}

/// Each node's home thread. With more than one thread and both kinds of node, the nodes that do
/// not count towards the end (`counted[i]` false: the switches and accelerators every worker's
/// traffic crosses, in every caller) get threads of their own, as many as there are of them but
/// at most `threads - 1` (dealt round-robin over those), and the counted nodes share the other
/// threads (round-robin): so a serial switch, the critical path of an all-reduce, is stepped
/// without waiting behind workers on its thread while the workers are stepped beside it.
/// Otherwise node i's home is thread i mod threads.
fn placement(counted: &[bool], threads: usize) -> Vec<usize> {
    let n = counted.len();
    let switches = counted.iter().filter(|c| !**c).count();
    if threads < 2 || switches == 0 || switches == n {
        return (0..n).map(|i| i % threads.max(1)).collect();
    }
    let st = switches.min(threads - 1);
    let (mut s, mut w) = (0usize, 0usize);
    counted
        .iter()
        .map(|&c| {
            if c {
                w += 1;
                st + (w - 1) % (threads - st)
            } else {
                s += 1;
                (s - 1) % st
            }
        })
        .collect()
}

/// How long a thread may park for a home node that is due at `due` (see [`Slot::due`]) at
/// fabric time `now`: at most 5 ms, 50 us while it has a backlog.
fn wait_for(due: Nanos, now: Nanos) -> Duration {
    let cap = Duration::from_millis(5);
    match due {
        0 => Duration::from_micros(50),
        Nanos::MAX => cap,
        d => Duration::from_nanos(d.saturating_sub(now)).min(cap),
    }
}

/// A node's slot, stepped by one thread at a time: its home thread (node i on thread i mod
/// threads), or another thread with nothing of its own to do that finds frames waiting for it
/// (so a node with much work, e.g. a switch, does not leave the other threads idle).
struct NodeCell<S> {
    /// Set while a thread steps the node (acquire on taking it, release on handing it back).
    claimed: Padded<AtomicBool>,
    /// The node's CPU so far (ns), charged by the threads that stepped it (see [`Meter`]), and
    /// the wall time of those steps.
    cpu_ns: AtomicU64,
    busy_ns: AtomicU64,
    /// When the node next needs a step with no frame arriving ([`Slot::due`]), written by the
    /// thread that stepped it last: its home thread skips it until then unless frames arrive.
    due: AtomicU64,
    /// The node's incoming rings, to look at without taking the node (only `is_empty`).
    probes: Vec<Arc<Ring<Frame>>>,
    slot: UnsafeCell<S>,
}

// SAFETY: `slot` is reached only through a `Claim`, and at most one `Claim` exists at a time (the
// compare-exchange of `claimed` from false to true); the acquire on taking and the release on
// handing back order one holder's writes before the next holder's reads. `probes` are rings,
// whose shared access is atomic. The slot moves between threads, hence S: Send.
unsafe impl<S: Send> Sync for NodeCell<S> {}

impl<S> NodeCell<S> {
    fn claim(&self) -> Option<Claim<'_, S>> {
        self.claimed
            .0
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
            .then(|| Claim(self))
    }

    /// Frames are waiting for the node.
    fn has_input(&self) -> bool {
        self.probes.iter().any(|r| !r.is_empty())
    }
}

/// The right to step one node, given back on drop.
struct Claim<'a, S>(&'a NodeCell<S>);

impl<S> std::ops::Deref for Claim<'_, S> {
    type Target = S;
    fn deref(&self) -> &S {
        // SAFETY: this is the one Claim of the cell (see the Sync impl)
        unsafe { &*self.0.slot.get() }
    }
}

impl<S> std::ops::DerefMut for Claim<'_, S> {
    fn deref_mut(&mut self) -> &mut S {
        // SAFETY: this is the one Claim of the cell (see the Sync impl)
        unsafe { &mut *self.0.slot.get() }
    }
}

impl<S> Drop for Claim<'_, S> {
    fn drop(&mut self) {
        self.0.claimed.0.store(false, Ordering::Release);
    }
}

/// A thread's CPU accounting. The thread CPU clock (CLOCK_THREAD_CPUTIME_ID, a system call) is
/// read at a step's start or end when [`READ_EVERY`] of wall time or more has passed since the
/// last reading, before the thread spins or parks, and after; the monotonic clock (read in user
/// space) at each step's start and end. The thread CPU between two readings is split among the
/// steps that did work (received a frame, fired a timer or sent one) in that interval in
/// proportion to their wall time; the rest of the interval (steps that found nothing to do,
/// looking at the nodes between steps) and the CPU of spinning and parking are no node's. So the
/// accounting stays whole: the nodes' CPU plus the time in no node is the threads' CPU
/// ([`MemReport::thread_cpu_ns`]). A step that takes [`READ_EVERY`] or more (the batched steps of
/// a busy node) is charged from readings at its own start and end, give or take the steps of
/// the interval before it (each interval holds under [`READ_EVERY`] of wall besides its last
/// step), so a thread descheduled between steps (a loaded host) does not move its nodes' CPU
/// into no node's, as a split of whole rounds by wall time did; a host of short steps pays one
/// reading per [`READ_EVERY`] at most.
struct Meter {
    /// thread CPU at the last reading, and the wall time then
    cpu: u64,
    at: Instant,
    /// when the current step started
    last: Instant,
    /// the steps that did work since the last reading: (node, wall ns)
    steps: Vec<(usize, u64)>,
    /// rounds with no step have passed since the last reading (spinning: no node's): take a
    /// fresh one before the next step
    stale: bool,
}

/// The wall time after which [`Meter`] takes a reading of the thread CPU clock at the next step
/// boundary (a fabric setting: it bounds the clock's cost and the split's blur, not a result).
const READ_EVERY: Duration = Duration::from_micros(50);

impl Meter {
    fn new() -> Meter {
        let at = Instant::now();
        Meter {
            cpu: thread_cpu_ns(),
            at,
            last: at,
            steps: Vec::new(),
            stale: false,
        }
    }

    /// A node is about to be stepped.
    fn before_step<S>(&mut self, cells: &[NodeCell<S>]) {
        if self.stale {
            self.skip();
            self.last = self.at;
            return;
        }
        let now = Instant::now();
        if now.saturating_duration_since(self.at) >= READ_EVERY {
            self.read(now, cells);
        }
        self.last = now;
    }

    /// Node `i` was stepped; `worked`: it had something to do.
    fn step<S>(&mut self, i: usize, worked: bool, cells: &[NodeCell<S>]) {
        let t = Instant::now();
        if worked {
            let w = t.saturating_duration_since(self.last).as_nanos() as u64;
            self.steps.push((i, w));
        }
        self.last = t;
        if t.saturating_duration_since(self.at) >= READ_EVERY {
            self.read(t, cells);
        }
    }

    /// Read the thread CPU at wall time `now` and charge the interval's working steps their
    /// shares.
    fn read<S>(&mut self, now: Instant, cells: &[NodeCell<S>]) {
        let c = thread_cpu_ns();
        let d = c.saturating_sub(self.cpu);
        let wall = now.saturating_duration_since(self.at).as_nanos() as u64;
        self.cpu = c;
        self.at = now;
        let worked: u64 = self.steps.iter().map(|s| s.1).sum();
        let whole = wall.max(worked).max(1);
        for &(i, w) in &self.steps {
            let share = (u128::from(d) * u128::from(w) / u128::from(whole)) as u64;
            cells[i].cpu_ns.fetch_add(share, Ordering::Relaxed);
            cells[i].busy_ns.fetch_add(w, Ordering::Relaxed);
        }
        self.steps.clear();
    }

    /// The thread is about to spin or park (or stop): charge the steps not yet charged, so
    /// that the wait is no part of their interval.
    fn flush<S>(&mut self, cells: &[NodeCell<S>]) {
        if !self.steps.is_empty() {
            self.read(Instant::now(), cells);
        }
    }

    /// Spinning or parking happened (after a [`Meter::flush`]): nobody's; take a fresh reading.
    fn skip(&mut self) {
        self.cpu = thread_cpu_ns();
        self.at = Instant::now();
        self.steps.clear();
        self.stale = false;
    }

    /// A round passed without a step: no reading now (see `stale`).
    fn idle(&mut self) {
        self.stale = true;
    }
}

/// One thread: step its home nodes in turn, and the other threads' nodes that have frames
/// waiting and are free, until the stop.
/// Returns the thread's CPU time over the run and how often it parked.
fn serve_thread<N: Endpoint>(
    t: usize,
    homes: &[usize],
    cells: &[NodeCell<Slot<N>>],
    sh: &Shared,
) -> (u64, u64) {
    let _ = sh.wakers[t].thread.set(std::thread::current());
    let cpu0 = thread_cpu_ns();
    let mut parks = 0u64;
    let home: Vec<usize> = (0..cells.len()).filter(|&i| homes[i] == t).collect();
    let others: Vec<usize> = (0..cells.len()).filter(|&i| homes[i] != t).collect();
    let mut meter = Meter::new();
    for &i in &home {
        if let Some(mut s) = cells[i].claim() {
            meter.before_step(cells);
            let now = sh.now();
            let sent = s.send_all(sh, now);
            drop(s);
            meter.step(i, sent > 0, cells);
        }
    }
    meter.flush(cells);
    let mut idle_since: Option<Instant> = None;
    // one step of node `i` (claimed as `s`): receive, timers, transmit; its next due time
    let step = |i: usize, s: &mut Slot<N>, meter: &mut Meter| -> usize {
        let k = s.receive(sh);
        let worked = s.after(sh) || k > 0;
        cells[i].due.store(s.due(), Ordering::Relaxed);
        meter.step(i, worked, cells);
        k
    };
    while !sh.stop.load(Ordering::Relaxed) {
        let mut got = 0usize;
        let mut stepped = false;
        let now = sh.now();
        for &i in &home {
            // a home node with no frames waiting and no timer, delay line or backlog due is
            // not stepped: it has nothing to do
            if cells[i].due.load(Ordering::Relaxed) > now && !cells[i].has_input() {
                continue;
            }
            if let Some(mut s) = cells[i].claim() {
                meter.before_step(cells);
                got += step(i, &mut s, &mut meter);
                stepped = true;
            }
        }
        // the other threads' nodes only when the home nodes had no frame: a home node (e.g. a
        // switch with a thread of its own) never waits behind a node this thread borrowed
        if got == 0 {
            for &i in &others {
                if cells[i].has_input()
                    && let Some(mut s) = cells[i].claim()
                {
                    meter.before_step(cells);
                    got += step(i, &mut s, &mut meter);
                    stepped = true;
                }
            }
        }
        if !stepped {
            meter.idle();
        }
        if got == 0 {
            meter.flush(cells);
            let now = sh.now();
            let wait = home
                .iter()
                .map(|&i| wait_for(cells[i].due.load(Ordering::Relaxed), now))
                .min()
                .unwrap_or(Duration::from_millis(5));
            if !wait.is_zero() {
                let since = *idle_since.get_or_insert_with(Instant::now);
                if since.elapsed() < SPIN.min(wait) {
                    std::hint::spin_loop();
                } else {
                    sh.wakers[t].parked.store(true, Ordering::Relaxed);
                    fence(Ordering::SeqCst);
                    if home.iter().all(|&i| !cells[i].has_input()) {
                        parks += 1;
                        std::thread::park_timeout(wait);
                    }
                    sh.wakers[t].parked.store(false, Ordering::Relaxed);
                    idle_since = None;
                    // parking is no node's work
                    meter.skip();
                }
            }
        } else {
            idle_since = None;
        }
        if Duration::from_nanos(now) > sh.deadline {
            sh.stop.store(true, Ordering::SeqCst);
        }
    }
    meter.flush(cells);
    (thread_cpu_ns().saturating_sub(cpu0), parks)
}

/// Run `nodes` (node i has id i) until every node that `counts(i)` is done, or `deadline` passes,
/// on [`default_threads`] threads. Returns the nodes and the report.
pub fn run<N: Endpoint + 'static>(
    nodes: Vec<N>,
    mtu: usize,
    faults: Faults,
    deadline: Duration,
    counts: impl Fn(usize) -> bool,
) -> (Vec<N>, MemReport) {
    run_with_threads(nodes, mtu, faults, deadline, counts, default_threads())
}

/// [`run`] on `threads` OS threads (at least 1, at most one per node). Each node's home thread
/// is dealt by `placement`: with 2 threads or more, the nodes for which `counts` is false (the
/// switches) get up to `threads - 1` threads of their own and the others share the rest
/// round-robin; otherwise node i's home is thread i mod threads.
pub fn run_with_threads<N: Endpoint + 'static>(
    nodes: Vec<N>,
    mtu: usize,
    faults: Faults,
    deadline: Duration,
    counts: impl Fn(usize) -> bool,
    threads: usize,
) -> (Vec<N>, MemReport) {
    let n = nodes.len();
    if n == 0 {
        return (
            Vec::new(),
            MemReport {
                finished: true,
                ..MemReport::default()
            },
        );
    }
    let threads = threads.clamp(1, n);
    let cap = ring_capacity(n);
    // producers[from][to] and consumers[to][from]
    let mut producers: Vec<Vec<Producer<Frame>>> = (0..n).map(|_| Vec::with_capacity(n)).collect();
    let mut consumers: Vec<Vec<Consumer<Frame>>> = (0..n).map(|_| Vec::with_capacity(n)).collect();
    for p in producers.iter_mut() {
        for c in consumers.iter_mut() {
            let (tx, rx) = Ring::pair(cap);
            p.push(tx);
            c.push(rx);
        }
    }
    let wakers: Arc<Vec<Waker>> = Arc::new((0..threads).map(|_| Waker::default()).collect());
    let counted: Vec<bool> = (0..n).map(&counts).collect();
    let homes: Arc<[usize]> = placement(&counted, threads).into();
    let sh = Shared {
        n,
        mtu,
        start: Instant::now(),
        deadline,
        stop: AtomicBool::new(false),
        need: counted.iter().filter(|c| **c).count(),
        done: AtomicUsize::new(0),
        dropped_mtu: AtomicUsize::new(0),
        wakers: wakers.clone(),
    };
    let cells: Vec<NodeCell<Slot<N>>> = nodes
        .into_iter()
        .zip(consumers)
        .zip(producers)
        .zip(0..)
        .map(|(((node, inbox), rings), i)| NodeCell {
            claimed: Padded(AtomicBool::new(false)),
            cpu_ns: AtomicU64::new(0),
            busy_ns: AtomicU64::new(0),
            due: AtomicU64::new(0),
            probes: inbox.iter().map(|c| c.ring.clone()).collect(),
            slot: UnsafeCell::new(Slot {
                i,
                node,
                inbox,
                out: Outbox {
                    rings,
                    backlog: (0..n).map(|_| VecDeque::new()).collect(),
                    backlogged: 0,
                    wakers: wakers.clone(),
                    homes: homes.clone(),
                },
                injector: FaultInjector::new(faults),
                held: BinaryHeap::new(),
                held_seq: 0,
                st: MemNodeStats::default(),
                counted: counted[i],
                reported: false,
                live: Vec::with_capacity(n),
            }),
        })
        .collect();
    let mut thread_cpu = Vec::with_capacity(threads);
    let mut parks = Vec::with_capacity(threads);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (sh, cells, homes) = (&sh, &cells, &homes);
                scope.spawn(move || serve_thread(t, homes, cells, sh))
            })
            .collect();
        for h in handles {
            match h.join() {
                Ok((cpu, p)) => {
                    thread_cpu.push(cpu);
                    parks.push(p);
                }
                Err(p) => std::panic::resume_unwind(p),
            }
        }
    });
    let end = sh.now();
    let mut out: Vec<(usize, N, MemNodeStats, FaultCounters)> = cells
        .into_iter()
        .map(|c| {
            let mut s = c.slot.into_inner();
            s.st.cpu_ns = c.cpu_ns.into_inner();
            s.st.busy_ns = c.busy_ns.into_inner();
            if s.st.done_ns == 0 {
                s.st.done_ns = end;
            }
            (s.i, s.node, s.st, s.injector.counters)
        })
        .collect();
    out.sort_by_key(|(i, ..)| *i);
    let mut nodes = Vec::with_capacity(n);
    let mut report = MemReport {
        threads,
        thread_cpu_ns: thread_cpu,
        parks,
        ..MemReport::default()
    };
    for (_, node, st, f) in out {
        nodes.push(node);
        report.nodes.push(st);
        report.faults.dropped += f.dropped;
        report.faults.duplicated += f.duplicated;
        report.faults.reordered += f.reordered;
    }
    report.wall_ns = sh.start.elapsed().as_nanos() as u64;
    report.dropped_mtu = sh.dropped_mtu.load(Ordering::Relaxed) as u64;
    report.finished = sh.done.load(Ordering::SeqCst) >= sh.need;
    (nodes, report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::Transmit;

    /// Every node sends `m` numbered frames to every other node; a receiver records, per
    /// sender, the next number it expects (frames must arrive each in order, once).
    struct AllToAll {
        id: usize,
        n: usize,
        m: u32,
        next_to: usize,
        sent: Vec<u32>,
        expect: Vec<u32>,
        out_of_order: u32,
    }

    /// `n` nodes each sending `m` frames to every other.
    fn all_to_all(n: usize, m: u32) -> Vec<AllToAll> {
        (0..n)
            .map(|id| AllToAll {
                id,
                n,
                m,
                next_to: 0,
                sent: vec![0; n],
                expect: vec![0; n],
                out_of_order: 0,
            })
            .collect()
    }

    impl Endpoint for AllToAll {
        fn id(&self) -> NodeId {
            self.id as NodeId
        }
        fn handle_packet(&mut self, _now: Nanos, from: NodeId, f: &[u8]) {
            let k = <[u8; 4]>::try_from(f).map_or(u32::MAX, u32::from_be_bytes);
            if k == self.expect[from as usize] {
                self.expect[from as usize] += 1;
            } else {
                self.out_of_order += 1;
            }
        }
        fn poll_transmit(&mut self, _now: Nanos) -> Option<Transmit> {
            for _ in 0..self.n {
                let to = self.next_to;
                self.next_to = (to + 1) % self.n;
                if to != self.id && self.sent[to] < self.m {
                    self.sent[to] += 1;
                    return Some(Transmit {
                        to: to as NodeId,
                        bytes: (self.sent[to] - 1).to_be_bytes().to_vec(),
                    });
                }
            }
            None
        }
        fn poll_timeout(&self) -> Option<Nanos> {
            None
        }
        fn handle_timeout(&mut self, _now: Nanos) {}
        fn is_done(&self) -> bool {
            (0..self.n).all(|p| p == self.id || self.expect[p] == self.m)
        }
    }

    #[test]
    fn several_nodes_per_thread_deliver_every_frame_in_order() {
        let (n, m) = (5usize, 3000u32);
        for threads in [1, 2, 3, 5, 64] {
            let nodes = all_to_all(n, m);
            let (nodes, rep) = run_with_threads(
                nodes,
                64,
                Faults::default(),
                Duration::from_secs(20),
                |_| true,
                threads,
            );
            assert!(rep.finished, "{threads} threads: {rep:?}");
            assert_eq!(
                rep.threads,
                threads.min(n),
                "recorded, at most one per node"
            );
            for (i, node) in nodes.iter().enumerate() {
                assert_eq!(node.id, i, "nodes come back in order");
                assert_eq!(node.out_of_order, 0, "{threads} threads, node {i}");
                let st = &rep.nodes[i];
                assert_eq!(st.frames_rx, u64::from(m) * (n as u64 - 1));
                assert_eq!(st.frames_tx, u64::from(m) * (n as u64 - 1));
            }
        }
    }

    /// Sends one numbered frame to its peer per timeout (every `gap` ns), `m` in all, and
    /// nothing else: only its timer gives it work, so its home thread must step it when due
    /// although no frame arrives for it.
    struct Ticker {
        id: usize,
        peer: usize,
        gap: Nanos,
        m: u32,
        next_at: Nanos,
        sent: u32,
        armed: bool,
        got: u32,
    }

    impl Endpoint for Ticker {
        fn id(&self) -> NodeId {
            self.id as NodeId
        }
        fn handle_packet(&mut self, _now: Nanos, _from: NodeId, f: &[u8]) {
            if <[u8; 4]>::try_from(f).map_or(u32::MAX, u32::from_be_bytes) == self.got {
                self.got += 1;
            }
        }
        fn poll_transmit(&mut self, _now: Nanos) -> Option<Transmit> {
            if !self.armed {
                return None;
            }
            self.armed = false;
            self.sent += 1;
            Some(Transmit {
                to: self.peer as NodeId,
                bytes: (self.sent - 1).to_be_bytes().to_vec(),
            })
        }
        fn poll_timeout(&self) -> Option<Nanos> {
            (self.sent < self.m).then_some(self.next_at)
        }
        fn handle_timeout(&mut self, now: Nanos) {
            self.armed = true;
            self.next_at = now + self.gap;
        }
        fn is_done(&self) -> bool {
            self.got == self.m
        }
    }

    #[test]
    fn a_node_with_only_a_timer_is_stepped_when_due_and_the_cpu_accounting_is_whole() {
        let m = 200u32;
        for threads in [1, 2] {
            let nodes: Vec<Ticker> = (0..4)
                .map(|id| Ticker {
                    id,
                    peer: id ^ 1,
                    gap: 20_000,
                    m,
                    next_at: 0,
                    sent: 0,
                    armed: false,
                    got: 0,
                })
                .collect();
            let (nodes, rep) = run_with_threads(
                nodes,
                64,
                Faults::default(),
                Duration::from_secs(20),
                |_| true,
                threads,
            );
            assert!(rep.finished, "{threads} threads: {rep:?}");
            for (i, n) in nodes.iter().enumerate() {
                assert_eq!((n.sent, n.got), (m, m), "{threads} threads, node {i}");
                // 200 frames 20 us apart: at least 4 ms from the first to the last
                assert!(rep.nodes[i].done_ns >= u64::from(m - 1) * 20_000);
                assert_eq!(rep.nodes[i].frames_tx, u64::from(m));
            }
            assert_eq!(rep.thread_cpu_ns.len(), threads);
            assert_eq!(rep.parks.len(), threads);
            let nodes_cpu: u64 = rep.nodes.iter().map(|n| n.cpu_ns).sum();
            let threads_cpu: u64 = rep.thread_cpu_ns.iter().sum();
            assert!(
                nodes_cpu <= threads_cpu,
                "the nodes' CPU {nodes_cpu} is a part of the threads' {threads_cpu}"
            );
            for (i, n) in rep.nodes.iter().enumerate() {
                assert!(n.busy_ns > 0, "node {i} worked: {n:?}");
            }
        }
    }

    #[test]
    fn a_ring_keeps_order_refuses_when_full_and_drops_what_it_holds() {
        let (mut tx, mut rx) = Ring::pair(4);
        for v in 0..4 {
            assert!(tx.push(vec![v]).is_ok());
        }
        assert_eq!(
            tx.push(vec![9]),
            Err(vec![9]),
            "a full ring gives the value back"
        );
        assert_eq!(rx.pop(), Some(vec![0]));
        assert!(tx.push(vec![4]).is_ok());
        assert_eq!(
            (0..5).map(|_| rx.pop()).collect::<Vec<_>>(),
            vec![
                Some(vec![1]),
                Some(vec![2]),
                Some(vec![3]),
                Some(vec![4]),
                None
            ]
        );
        assert!(rx.is_empty());
        // values still in the ring are dropped with it (each exactly once)
        tx.push(vec![7]).expect("room");
        drop((tx, rx));
    }

    #[test]
    fn a_ring_moves_every_value_in_order_across_threads() {
        const N: u64 = 200_000;
        let (mut tx, mut rx) = Ring::pair(64);
        let producer = std::thread::spawn(move || {
            for v in 0..N {
                let mut v = v;
                while let Err(back) = tx.push(v) {
                    v = back;
                    std::hint::spin_loop();
                }
            }
        });
        let mut next = 0u64;
        while next < N {
            if let Some(v) = rx.pop() {
                assert_eq!(v, next, "out of order");
                next += 1;
            } else {
                std::thread::yield_now();
            }
        }
        producer.join().expect("producer");
        assert_eq!(rx.pop(), None);
    }

    #[test]
    fn a_node_is_claimed_by_one_thread_at_a_time() {
        let (_tx, rx) = Ring::<Frame>::pair(4);
        let cell = NodeCell {
            claimed: Padded(AtomicBool::new(false)),
            cpu_ns: AtomicU64::new(0),
            busy_ns: AtomicU64::new(0),
            due: AtomicU64::new(0),
            probes: vec![rx.ring.clone()],
            slot: UnsafeCell::new(7u32),
        };
        let held = cell.claim().expect("free at first");
        assert!(cell.claim().is_none(), "taken while held");
        // a failed claim must leave the holder's claim in place
        assert!(cell.claim().is_none(), "still taken after a failed claim");
        drop(held);
        let mut again = cell.claim().expect("free once handed back");
        *again += 1;
        drop(again);
        assert_eq!(cell.slot.into_inner(), 8);
    }

    #[test]
    fn the_switches_get_threads_of_their_own_and_the_workers_share_the_rest() {
        // six workers and a switch (node 6) on 2 threads: the switch alone on thread 0
        let star = [true, true, true, true, true, true, false];
        assert_eq!(placement(&star, 2), vec![1, 1, 1, 1, 1, 1, 0]);
        // on 4 threads: the switch alone, the workers round-robin on threads 1..4
        assert_eq!(placement(&star, 4), vec![1, 2, 3, 1, 2, 3, 0]);
        // two switches on 2 threads share thread 0; on 3 threads one each
        let two = [false, true, true, false, true];
        assert_eq!(placement(&two, 2), vec![0, 1, 1, 0, 1]);
        assert_eq!(placement(&two, 3), vec![0, 2, 2, 1, 2]);
        // one thread, or only one kind of node: i mod threads
        assert_eq!(placement(&star, 1), vec![0; 7]);
        assert_eq!(placement(&[true; 5], 2), vec![0, 1, 0, 1, 0]);
        assert_eq!(placement(&[false; 3], 2), vec![0, 1, 0]);
        for threads in 1..9 {
            let h = placement(&star, threads);
            assert!(h.iter().all(|&t| t < threads), "{threads}: {h:?}");
            if threads > 1 {
                assert!(
                    (0..6).all(|w| h[w] != h[6]),
                    "{threads}: no worker shares the switch's thread: {h:?}"
                );
            }
        }
    }

    #[test]
    fn with_a_node_that_does_not_count_every_frame_still_arrives_in_order() {
        // the last node does not count (a switch's place): it gets a thread of its own, and the
        // senders wake its thread, not thread i mod threads
        let (n, m) = (5usize, 3000u32);
        for threads in [2, 3, 5] {
            let nodes = all_to_all(n, m);
            let (nodes, rep) = run_with_threads(
                nodes,
                64,
                Faults::default(),
                Duration::from_secs(20),
                |i| i + 1 < n,
                threads,
            );
            assert!(rep.finished, "{threads} threads: {rep:?}");
            for (i, node) in nodes.iter().enumerate().take(n - 1) {
                assert_eq!(node.out_of_order, 0, "{threads} threads, node {i}");
                assert!(
                    node.expect
                        .iter()
                        .enumerate()
                        .all(|(p, &e)| p == i || e == m),
                    "{threads} threads, node {i}: {:?}",
                    node.expect
                );
            }
            assert_eq!(
                nodes[n - 1].out_of_order,
                0,
                "{threads} threads, the last node"
            );
        }
    }

    #[test]
    fn ring_capacity_stays_bounded() {
        assert_eq!(ring_capacity(7), 1024);
        assert_eq!(ring_capacity(65), 128);
        assert!(ring_capacity(1000) == 16);
        for n in 1..300 {
            let c = ring_capacity(n);
            assert!(c.is_power_of_two() && (16..=1024).contains(&c));
        }
    }
}
