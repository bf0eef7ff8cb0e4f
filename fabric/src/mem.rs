//! `mem`: endpoints in one process on real time. Each node runs on its own OS thread; frames
//! travel over lock-free single-producer single-consumer rings, one per (sender, receiver) pair
//! (no lock per frame: a sender writes a slot and publishes it with one release store, the
//! receiver reads it after one acquire load); a receiver drains every ring before it transmits
//! (one wake-up, many frames) and parks when they are all empty, woken by the next sender. A
//! sender whose ring is full keeps the frame in its own per-destination backlog (order kept, no
//! blocking, so two nodes sending to each other cannot deadlock). Timeouts are honoured with
//! `park_timeout`; each node's CPU is its thread's own CPU time (CLOCK_THREAD_CPUTIME_ID), so
//! "CPU per worker" is that endpoint's accounting. Link rates are not enforced (it is as fast as
//! this host); the MTU is. Faults are the same seeded fates as on `sim` and `udp` (one generator
//! per link direction, drawn by the sender's thread): a reordered frame waits in its sender's
//! delay line for the fault's extra delay, then goes out. A delivered frame's buffer goes back to
//! its receiver through [`Endpoint::recycle`].

use crate::endpoint::{Endpoint, Nanos, NodeId};
use crate::fault::{Fate, FaultCounters, FaultInjector, Faults};
use std::cell::UnsafeCell;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering, fence};
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
// `tail - head < capacity` (the consumer has released it) and publishes it with a release store
// of `tail`; the consumer reads slot `head` only after an acquire load saw `tail > head`, and
// hands it back with a release store of `head`. Values of type T cross threads, hence T: Send.
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
        (Producer(ring.clone()), Consumer(ring))
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
struct Producer<T>(Arc<Ring<T>>);

impl<T> Producer<T> {
    /// Append `v`, or give it back when the ring is full.
    fn push(&mut self, v: T) -> Result<(), T> {
        let r = &*self.0;
        let t = r.tail.0.load(Ordering::Relaxed);
        if t.wrapping_sub(r.head.0.load(Ordering::Acquire)) > r.mask {
            return Err(v);
        }
        // SAFETY: slot t is free (see the Sync impl) and only this producer writes slots
        unsafe { (*r.slots[t & r.mask].get()).write(v) };
        r.tail.0.store(t.wrapping_add(1), Ordering::Release);
        Ok(())
    }
}

/// The one reading side of a ring (not `Clone`: one consumer by construction).
struct Consumer<T>(Arc<Ring<T>>);

impl<T> Consumer<T> {
    fn pop(&mut self) -> Option<T> {
        let r = &*self.0;
        let h = r.head.0.load(Ordering::Relaxed);
        if h == r.tail.0.load(Ordering::Acquire) {
            return None;
        }
        // SAFETY: slot h was published by the producer's release store and only this consumer
        // reads it; after the read the slot is handed back with the release store below
        let v = unsafe { (*r.slots[h & r.mask].get()).assume_init_read() };
        r.head.0.store(h.wrapping_add(1), Ordering::Release);
        Some(v)
    }

    fn is_empty(&self) -> bool {
        let r = &*self.0;
        r.head.0.load(Ordering::Relaxed) == r.tail.0.load(Ordering::Acquire)
    }
}

/// How a receiver is woken: its thread (once it runs) and whether it is about to park.
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
    /// Wall time from the start to when the node reported done (or the end).
    pub done_ns: u64,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct MemReport {
    pub wall_ns: u64,
    pub nodes: Vec<MemNodeStats>,
    pub dropped_mtu: u64,
    pub faults: FaultCounters,
    pub finished: bool,
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
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
    wakers: Arc<Vec<Waker>>,
}

impl Outbox {
    /// Send `frame` to `to`, behind anything already waiting for that destination.
    fn send(&mut self, to: usize, frame: Frame) {
        if self.backlog[to].is_empty() {
            match self.rings[to].push(frame) {
                Ok(()) => self.wakers[to].wake(),
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
                self.wakers[to].wake();
            }
        }
    }
}

/// Run `nodes` (node i has id i) until every node that `counts(i)` is done, or `deadline` passes.
/// Returns the nodes and the report.
pub fn run<N: Endpoint + 'static>(
    nodes: Vec<N>,
    mtu: usize,
    faults: Faults,
    deadline: Duration,
    counts: impl Fn(usize) -> bool,
) -> (Vec<N>, MemReport) {
    let n = nodes.len();
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
    let wakers: Arc<Vec<Waker>> = Arc::new((0..n).map(|_| Waker::default()).collect());
    let start = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let counted: Vec<bool> = (0..n).map(&counts).collect();
    let need = counted.iter().filter(|c| **c).count();
    let done = Arc::new(AtomicUsize::new(0));
    let dropped_mtu = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    for (((mut node, inbox), rings), i) in nodes.into_iter().zip(consumers).zip(producers).zip(0..)
    {
        let (stop, done, dropped_mtu, wakers) = (
            stop.clone(),
            done.clone(),
            dropped_mtu.clone(),
            wakers.clone(),
        );
        let counted = counted[i];
        let mut inbox = inbox;
        handles.push(std::thread::spawn(move || {
            let _ = wakers[i].thread.set(std::thread::current());
            let cpu0 = thread_cpu_ns();
            let mut st = MemNodeStats::default();
            let now = || start.elapsed().as_nanos() as Nanos;
            let mut reported = false;
            // this sender's links' fates (the same per-link generators as one shared injector)
            let mut injector = FaultInjector::new(faults);
            let mut out = Outbox {
                rings,
                backlog: (0..n).map(|_| VecDeque::new()).collect(),
                backlogged: 0,
                wakers: wakers.clone(),
            };
            // the delay line of reordered frames: (due, sequence, to, frame)
            let mut held: DelayLine = BinaryHeap::new();
            let mut held_seq = 0u64;
            let release = |held: &mut DelayLine, out: &mut Outbox| {
                let t = now();
                while held.peek().is_some_and(|r| r.0.0 <= t) {
                    if let Some(Reverse((_, _, to, b))) = held.pop() {
                        out.send(to as usize, b);
                    }
                }
            };
            let send_all = |node: &mut N,
                            st: &mut MemNodeStats,
                            held: &mut DelayLine,
                            held_seq: &mut u64,
                            injector: &mut FaultInjector,
                            out: &mut Outbox| {
                while let Some(t) = node.poll_transmit(now()) {
                    st.frames_tx += 1;
                    st.bytes_tx += t.bytes.len() as u64;
                    if t.bytes.len() > mtu || t.to as usize >= n {
                        dropped_mtu.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    if let Fate::Deliver {
                        copies,
                        extra_delay_ns,
                    } = injector.fate(i as NodeId, t.to)
                    {
                        for _ in 1..copies {
                            out.send(t.to as usize, t.bytes.clone());
                        }
                        if extra_delay_ns > 0 {
                            *held_seq += 1;
                            held.push(Reverse((now() + extra_delay_ns, *held_seq, t.to, t.bytes)));
                        } else {
                            out.send(t.to as usize, t.bytes);
                        }
                    }
                }
            };
            send_all(
                &mut node,
                &mut st,
                &mut held,
                &mut held_seq,
                &mut injector,
                &mut out,
            );
            while !stop.load(Ordering::Relaxed) {
                // take what is waiting from every sender before transmitting: one wake-up, many
                // frames (at most 256 per sender per round, so no sender starves the others)
                let mut got = 0usize;
                for (from, ring) in inbox.iter_mut().enumerate() {
                    for _ in 0..256 {
                        let Some(frame) = ring.pop() else { break };
                        got += 1;
                        st.frames_rx += 1;
                        st.bytes_rx += frame.len() as u64;
                        node.handle_packet(now(), from as NodeId, &frame);
                        node.recycle(frame);
                    }
                }
                if got == 0 {
                    let mut wait = node
                        .poll_timeout()
                        .map(|t| Duration::from_nanos(t.saturating_sub(now())))
                        .unwrap_or(Duration::from_millis(5))
                        .min(Duration::from_millis(5))
                        .min(
                            held.peek()
                                .map(|r| Duration::from_nanos(r.0.0.saturating_sub(now())))
                                .unwrap_or(Duration::MAX),
                        );
                    if out.backlogged > 0 {
                        // a receiver is behind: come back soon to move the backlog
                        wait = wait.min(Duration::from_micros(50));
                    }
                    if !wait.is_zero() {
                        wakers[i].parked.store(true, Ordering::Relaxed);
                        fence(Ordering::SeqCst);
                        if inbox.iter().all(|r| r.is_empty()) {
                            std::thread::park_timeout(wait);
                        }
                        wakers[i].parked.store(false, Ordering::Relaxed);
                    }
                }
                if node.poll_timeout().is_some_and(|t| t <= now()) {
                    node.handle_timeout(now());
                }
                out.flush();
                send_all(
                    &mut node,
                    &mut st,
                    &mut held,
                    &mut held_seq,
                    &mut injector,
                    &mut out,
                );
                release(&mut held, &mut out);
                if counted && !reported && node.is_done() {
                    reported = true;
                    st.done_ns = now();
                    if done.fetch_add(1, Ordering::SeqCst) + 1 >= need {
                        stop.store(true, Ordering::SeqCst);
                        for w in wakers.iter() {
                            if let Some(t) = w.thread.get() {
                                t.unpark();
                            }
                        }
                    }
                }
                if start.elapsed() > deadline {
                    stop.store(true, Ordering::SeqCst);
                }
            }
            if st.done_ns == 0 {
                st.done_ns = now();
            }
            st.cpu_ns = thread_cpu_ns().saturating_sub(cpu0);
            (node, st, injector.counters)
        }));
    }
    let mut nodes = Vec::with_capacity(n);
    let mut report = MemReport::default();
    for h in handles {
        match h.join() {
            Ok((node, st, f)) => {
                nodes.push(node);
                report.nodes.push(st);
                report.faults.dropped += f.dropped;
                report.faults.duplicated += f.duplicated;
                report.faults.reordered += f.reordered;
            }
            Err(p) => std::panic::resume_unwind(p),
        }
    }
    report.wall_ns = start.elapsed().as_nanos() as u64;
    report.dropped_mtu = dropped_mtu.load(Ordering::Relaxed) as u64;
    report.finished = done.load(Ordering::SeqCst) >= need;
    (nodes, report)
}

#[cfg(test)]
mod tests {
    use super::*;

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
