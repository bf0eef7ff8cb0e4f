//! What the endpoint robustness tests share (cargo feature `testing`): junk frames (random bytes,
//! valid frames flipped, cut or replayed), a [`Hostile`] wrapper that puts a hostile source
//! beside any endpoint in a run, a bounded [`feed`], proptest strategies with a fixed seed, and a
//! per-thread counting allocator for bounded-memory checks; the virtual-time test driver
//! [`Group`] ([`group`]) and the robustness property suite ([`properties`]) that every systems
//! crate's `tests/arbitrary_frames.rs` instantiates.

use crate::endpoint::{BufPool, Endpoint, Nanos, NodeId, Transmit};

pub mod group;
pub mod properties;
pub use group::{Finished, Frame, Group, Rule, Seen, Unfinished};
use inabench_rng::SplitMix64;
use proptest::prelude::*;
use std::alloc::{GlobalAlloc, Layout, System as Sys};
use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::Arc;

// ---- heap accounting per thread (tests run on several threads at once) ----

/// A global allocator that counts each thread's live heap bytes (see [`live`]); a test binary
/// installs it with `#[global_allocator] static ALLOC: Counting = Counting;`.
pub struct Counting;

thread_local! {
    static LIVE: Cell<i64> = const { Cell::new(0) };
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

fn add(d: i64) {
    let _ = LIVE.try_with(|c| c.set(c.get() + d));
}

fn count() {
    let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
}

// SAFETY: forwards to the system allocator and only updates a thread-local counter.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        add(l.size() as i64);
        count();
        // SAFETY: same layout as given
        unsafe { Sys.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        add(-(l.size() as i64));
        // SAFETY: p came from alloc with l
        unsafe { Sys.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        add(new as i64 - l.size() as i64);
        count();
        // SAFETY: as GlobalAlloc::realloc
        unsafe { Sys.realloc(p, l, new) }
    }
}

/// This thread's live heap bytes since it started (with [`Counting`] installed).
pub fn live() -> i64 {
    LIVE.with(Cell::get)
}

/// How many allocations (and reallocations) this thread has made since it started (with
/// [`Counting`] installed).
pub fn allocations() -> u64 {
    ALLOCS.with(Cell::get)
}

// ---- junk ----

/// What a hostile source sends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mode {
    /// Random bytes, 0..2048 long.
    Raw,
    /// Valid frames of the same run with 1..4 bytes flipped.
    Flip,
    /// Valid frames of the same run cut short.
    Cut,
    /// Valid frames of the same run, unchanged, at any time.
    Replay,
}

/// One junk frame of `mode`, drawn from `g` (mutations of `corpus`'s valid frames).
pub fn junk(g: &mut SplitMix64, mode: Mode, corpus: &[Vec<u8>]) -> Vec<u8> {
    match mode {
        Mode::Raw => {
            let len = (g.next_u64() % 2048) as usize;
            (0..len).map(|_| g.next_u64() as u8).collect()
        }
        Mode::Flip | Mode::Cut | Mode::Replay => {
            let mut f = corpus[(g.next_u64() % corpus.len() as u64) as usize].clone();
            if mode == Mode::Replay {
                return f;
            }
            if mode == Mode::Cut || f.is_empty() {
                let cut = (g.next_u64() % f.len().max(1) as u64) as usize;
                f.truncate(cut);
            } else {
                for _ in 0..1 + g.next_u64() % 4 {
                    let i = (g.next_u64() % f.len() as u64) as usize;
                    f[i] ^= 1 + (g.next_u64() % 255) as u8;
                }
            }
            f
        }
    }
}

/// A neighbour id: mostly real ones, sometimes out of range.
pub fn from_id(g: &mut SplitMix64, nodes: usize) -> NodeId {
    match g.next_u64() % 8 {
        0 => u32::MAX,
        1 => nodes as NodeId + (g.next_u64() % 4) as NodeId,
        _ => (g.next_u64() % nodes as u64) as NodeId,
    }
}

/// Hand `frame` to `ep` and drain what it sends (bounded: one frame may not start a flood);
/// the fuzz bodies' [`crate::fuzz::feed`].
pub use crate::fuzz::feed;

/// An endpoint with a hostile source beside it: before a share of the real frames, 1..3 junk
/// frames arrive from arbitrary neighbour ids.
pub struct Hostile<N> {
    pub inner: N,
    pub g: SplitMix64,
    /// The share of real frames that junk precedes.
    pub p: f64,
    pub mode: Mode,
    /// Valid frames of the same run, to mutate or replay.
    pub corpus: Arc<Vec<Vec<u8>>>,
    /// How many nodes the run has (neighbour ids are drawn around it).
    pub nodes: usize,
    /// Junk frames handed to `inner` so far.
    pub injected: u64,
}

impl<N: Endpoint> Endpoint for Hostile<N> {
    fn id(&self) -> NodeId {
        self.inner.id()
    }
    fn handle_packet(&mut self, now: Nanos, from: NodeId, frame: &[u8]) {
        if self.g.chance(self.p) {
            for _ in 0..1 + self.g.next_u64() % 3 {
                let j = junk(&mut self.g, self.mode, &self.corpus);
                let f = from_id(&mut self.g, self.nodes);
                self.inner.handle_packet(now, f, &j);
                self.injected += 1;
            }
        }
        self.inner.handle_packet(now, from, frame)
    }
    fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        self.inner.poll_transmit(now)
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
    fn recycle(&mut self, buf: Vec<u8>) {
        self.inner.recycle(buf)
    }
}

// ---- proptest ----

/// A junk frame as proptest draws it (shrinkable), made concrete by [`Junk::bytes`].
#[derive(Debug, Clone)]
pub enum Junk {
    Raw(Vec<u8>),
    Flip(usize, Vec<(usize, u8)>),
    Cut(usize, usize),
}

impl Junk {
    pub fn bytes(&self, corpus: &[Vec<u8>]) -> Vec<u8> {
        match self {
            Junk::Raw(b) => b.clone(),
            Junk::Flip(i, flips) => {
                let mut f = corpus[i % corpus.len()].clone();
                for (at, x) in flips {
                    let k = at % f.len();
                    f[k] ^= x;
                }
                f
            }
            Junk::Cut(i, cut) => {
                let f = &corpus[i % corpus.len()];
                f[..cut % f.len().max(1)].to_vec()
            }
        }
    }
}

/// Raw bytes, flipped or cut corpus frames.
pub fn junk_strategy() -> impl Strategy<Value = Junk> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..2048).prop_map(Junk::Raw),
        (
            any::<usize>(),
            prop::collection::vec((any::<usize>(), 1..=255u8), 1..5)
        )
            .prop_map(|(i, f)| Junk::Flip(i, f)),
        (any::<usize>(), any::<usize>()).prop_map(|(i, c)| Junk::Cut(i, c)),
    ]
}

/// `n` cases from a fixed seed, no failure persistence.
pub fn cases(n: u32) -> ProptestConfig {
    ProptestConfig {
        cases: n,
        failure_persistence: None,
        // the same cases on every run: a failure here is a finding to reproduce, not luck
        rng_seed: proptest::test_runner::RngSeed::Fixed(23),
        ..ProptestConfig::default()
    }
}

/// A credit ring for measuring a fabric's own cost: `hosts` hosts each send `frames` 1 KB frames
/// to their successor through a forwarding switch (node `hosts`), `credit` in flight, a 4-byte
/// credit frame back per frame. Every node draws its frames from a [`BufPool`] fed by
/// [`Endpoint::recycle`], as the hot endpoints do, so neither the allocator nor the nodes' own work
/// hides the fabric's. Frames: byte 0 = destination host, byte 1 = kind (0 data, 1 credit),
/// byte 2 = source host. Used by `fabric/tests/no_alloc.rs` and `bench/benches/fabric.rs`.
pub enum CreditRing {
    Switch {
        hosts: u32,
        queue: VecDeque<Transmit>,
        pool: BufPool,
    },
    Host {
        id: NodeId,
        hosts: u32,
        frames: u64,
        sent: u64,
        received: u64,
        credit: u32,
        acks: VecDeque<Transmit>,
        pool: BufPool,
    },
}

impl CreditRing {
    /// The ring's nodes: `hosts` hosts (ids 0..hosts, fewer than 256) and the switch.
    pub fn nodes(hosts: u32, frames: u64, credit: u32) -> Vec<CreditRing> {
        let mut nodes: Vec<CreditRing> = (0..hosts)
            .map(|id| CreditRing::Host {
                id,
                hosts,
                frames,
                sent: 0,
                received: 0,
                credit,
                acks: VecDeque::with_capacity(64),
                pool: BufPool::default(),
            })
            .collect();
        nodes.push(CreditRing::Switch {
            hosts,
            queue: VecDeque::with_capacity(64),
            pool: BufPool::default(),
        });
        nodes
    }

    /// Data frames the hosts received, in all.
    pub fn received(nodes: &[CreditRing]) -> u64 {
        nodes
            .iter()
            .map(|n| match n {
                CreditRing::Host { received, .. } => *received,
                CreditRing::Switch { .. } => 0,
            })
            .sum()
    }
}

impl Endpoint for CreditRing {
    fn id(&self) -> NodeId {
        match self {
            CreditRing::Switch { hosts, .. } => *hosts,
            CreditRing::Host { id, .. } => *id,
        }
    }
    fn handle_packet(&mut self, _now: Nanos, _from: NodeId, frame: &[u8]) {
        match self {
            CreditRing::Switch { queue, pool, .. } => {
                if let Some(&d) = frame.first() {
                    queue.push_back(Transmit {
                        to: NodeId::from(d),
                        bytes: pool.take_copy(frame),
                    });
                }
            }
            CreditRing::Host {
                hosts,
                received,
                credit,
                acks,
                pool,
                ..
            } => match frame.get(1) {
                Some(1) => *credit += 1,
                _ => {
                    // give the sender its credit back (ACK clocking)
                    *received += 1;
                    let mut b = pool.take(4);
                    b[0] = frame.get(2).copied().unwrap_or(0);
                    b[1] = 1;
                    acks.push_back(Transmit {
                        to: *hosts,
                        bytes: b,
                    });
                }
            },
        }
    }
    fn poll_transmit(&mut self, _now: Nanos) -> Option<Transmit> {
        match self {
            CreditRing::Switch { queue, .. } => queue.pop_front(),
            CreditRing::Host {
                id,
                hosts,
                frames,
                sent,
                credit,
                acks,
                pool,
                ..
            } => {
                if let Some(a) = acks.pop_front() {
                    return Some(a);
                }
                if *sent < *frames && *credit > 0 {
                    *credit -= 1;
                    *sent += 1;
                    let mut f = pool.take(1024);
                    f[0] = ((*id + 1) % *hosts) as u8;
                    f[2] = *id as u8;
                    return Some(Transmit {
                        to: *hosts,
                        bytes: f,
                    });
                }
                None
            }
        }
    }
    fn poll_timeout(&self) -> Option<Nanos> {
        None
    }
    fn handle_timeout(&mut self, _now: Nanos) {}
    fn recycle(&mut self, buf: Vec<u8>) {
        match self {
            CreditRing::Switch { pool, .. } | CreditRing::Host { pool, .. } => pool.put(buf),
        }
    }
}
