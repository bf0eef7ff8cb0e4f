//! LuWu's endpoints in runs with arbitrary frames beside valid traffic (`malformed.rs` checks
//! the parser and one frame at a time; this drives whole jobs), as the `Endpoint` contract
//! demands (every received byte untrusted; a malformed frame counted and dropped, never a
//! panic): the WorkerNIC and AggNIC transports and the SmartSwitch of a push/pull job (sum and
//! max), and ZeRO-3's ring reduce-scatter and all-gather members:
//!
//! 1. no panic when an endpoint receives arbitrary bytes (0..2048 long) or a valid frame with
//!    bytes flipped or cut short, from any neighbour id, before a run (fresh endpoints), during
//!    one (a hostile source beside valid traffic on the sim fabric) and after one;
//! 2. a run with a hostile source still ends exact (`run::outcome`'s `exact`: every pulled
//!    parameter and the AggNIC's aggregate bit for bit, each packet drained once; a ring
//!    member's vector equal to a clean run's), and junk after the run changes no result;
//! 3. memory stays bounded: an endpoint's heap does not grow with the number of junk frames.
//!
//! The valid frames that get mutated are captured from a clean run of the same job. The ZeRO-3
//! ring runs through a stand-in IPv4 forwarder (`zero3`'s own has no public constructor), so
//! its switch is not under test here.

use inabench_fabric::fuzz::{Corpora, Corpus, cached, sim_fabric, tapped_run};
use inabench_fabric::sim::SimFabric;
use inabench_fabric::testing::*;
use inabench_fabric::{Endpoint, Nanos, NodeId, Transmit};
use inabench_luwu::run::{self, Job};
use inabench_luwu::transport::Config;
use inabench_luwu::zero3::{Op, RingNode};
use inabench_rng::SplitMix64;
use proptest::prelude::*;
use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, OnceLock};

#[global_allocator]
static ALLOC: Counting = Counting;

// ---- configurations and the corpus of valid frames ----

const WORKERS: usize = 3;
const VALUES: usize = 96;

const SYSTEMS: [&str; 4] = [
    "push_pull_sum",
    "push_pull_max",
    "zero3_reduce_scatter",
    "zero3_all_gather",
];

fn cfg() -> Config {
    Config {
        workers: WORKERS,
        values_per_packet: 4,
        window: 8,
        line_rate_bps: 100e9,
        heartbeat_ns: 1000,
        resend_timeout_ns: 50_000,
        stagger_ns: 1000,
        consumer_rate: vec![1.0; WORKERS],
        agg_consumer_rate: 1.0,
    }
}

fn values(g: &mut SplitMix64) -> Vec<i32> {
    (0..VALUES)
        .map(|_| (g.next_u64() >> 40) as i32 - (1 << 23))
        .collect()
}

fn job(sys: usize, seed: u64) -> Job {
    let mut g = SplitMix64::new(seed);
    Job {
        grads: (0..WORKERS).map(|_| values(&mut g)).collect(),
        max: sys == 1,
        params: values(&mut g),
    }
}

/// A plain IPv4 forwarder standing in for ZeRO-3's switch.
struct Fwd {
    id: NodeId,
    out: VecDeque<Transmit>,
}

impl Endpoint for Fwd {
    fn id(&self) -> NodeId {
        self.id
    }
    fn handle_packet(&mut self, _now: Nanos, _from: NodeId, f: &[u8]) {
        // Ethernet (14) then the IPv4 destination's last byte (node id + 1)
        if f.len() >= 34 && f[12..14] == [8, 0] {
            let to = u32::from(f[33]).wrapping_sub(1);
            if (to as usize) < WORKERS {
                self.out.push_back(Transmit {
                    to,
                    bytes: f.to_vec(),
                });
            }
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
        true
    }
}

enum Node {
    Job(run::Node),
    Ring(RingNode),
    Fwd(Fwd),
}

impl Node {
    fn ep(&self) -> &dyn Endpoint {
        match self {
            Node::Job(n) => n,
            Node::Ring(n) => n,
            Node::Fwd(n) => n,
        }
    }
    fn ep_mut(&mut self) -> &mut dyn Endpoint {
        match self {
            Node::Job(n) => n,
            Node::Ring(n) => n,
            Node::Fwd(n) => n,
        }
    }
}

impl Endpoint for Node {
    fn id(&self) -> NodeId {
        self.ep().id()
    }
    fn handle_packet(&mut self, now: Nanos, from: NodeId, frame: &[u8]) {
        self.ep_mut().handle_packet(now, from, frame)
    }
    fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        self.ep_mut().poll_transmit(now)
    }
    fn poll_timeout(&self) -> Option<Nanos> {
        self.ep().poll_timeout()
    }
    fn handle_timeout(&mut self, now: Nanos) {
        self.ep_mut().handle_timeout(now)
    }
    fn is_done(&self) -> bool {
        self.ep().is_done()
    }
}

fn nodes(sys: usize, seed: u64) -> Vec<Node> {
    let j = job(sys, seed);
    if sys < 2 {
        return run::build(&cfg(), &j).into_iter().map(Node::Job).collect();
    }
    let op = if sys == 2 {
        Op::ReduceScatter
    } else {
        Op::AllGather
    };
    let mut v: Vec<Node> = j
        .grads
        .into_iter()
        .enumerate()
        .map(|(r, d)| Node::Ring(RingNode::new(r, WORKERS, op, d, 4)))
        .collect();
    v.push(Node::Fwd(Fwd {
        id: WORKERS as NodeId,
        out: VecDeque::new(),
    }));
    v
}

fn fabric<N: Endpoint>(nodes: Vec<N>) -> SimFabric<N> {
    let c = cfg();
    let link = run::sim_link(&c);
    sim_fabric(nodes, c.switch_id(), link)
}

/// What a run ended with: whether it is exact, and every result vector. A push/pull job is
/// judged by `run::outcome`.
fn results(sys: usize, seed: u64, ns: &mut Vec<Node>, finished: bool) -> (bool, Vec<Vec<i32>>) {
    if sys < 2 {
        let job_nodes: Vec<run::Node> = std::mem::take(ns)
            .into_iter()
            .map(|n| match n {
                Node::Job(j) => j,
                _ => unreachable!("a push/pull job has only job nodes"),
            })
            .collect();
        let o = run::outcome(&cfg(), &job(sys, seed), &job_nodes, finished, 0);
        *ns = job_nodes.into_iter().map(Node::Job).collect();
        let mut v = o.pulled;
        v.push(o.aggregate);
        return (o.exact, v);
    }
    let v: Vec<Vec<i32>> = ns
        .iter()
        .filter_map(|n| match n {
            Node::Ring(r) => Some(r.data.clone()),
            _ => None,
        })
        .collect();
    (finished && v == clean(sys, seed), v)
}

fn malformed(ns: &[Node]) -> u64 {
    ns.iter()
        .map(|n| match n {
            Node::Job(run::Node::Nic(x)) => x.stats.malformed_rx,
            Node::Job(run::Node::Switch(s)) => s.stats.malformed,
            Node::Ring(r) => r.malformed,
            Node::Fwd(_) => 0,
        })
        .sum()
}

/// The ring members' vectors after a clean run.
fn clean(sys: usize, seed: u64) -> Vec<Vec<i32>> {
    type Cleans = HashMap<(usize, u64), Vec<Vec<i32>>>;
    static C: OnceLock<Mutex<Cleans>> = OnceLock::new();
    let m = C.get_or_init(Default::default);
    if let Some(v) = m.lock().expect("clean lock").get(&(sys, seed)) {
        return v.clone();
    }
    let mut f = fabric(nodes(sys, seed));
    assert!(f.run_until(10_000_000_000, all_done).finished);
    let v: Vec<Vec<i32>> = f
        .nodes()
        .iter()
        .filter_map(|n| match n {
            Node::Ring(r) => Some(r.data.clone()),
            _ => None,
        })
        .collect();
    m.lock().expect("clean lock").insert((sys, seed), v.clone());
    v
}

fn all_done<N: Endpoint>(n: &[N]) -> bool {
    n.iter().all(Endpoint::is_done)
}

/// Every frame of a clean run of `sys` with `seed`, in the order put on links.
fn corpus(sys: usize, seed: u64) -> Corpus {
    static C: Corpora<(usize, u64)> = Corpora::new();
    cached(&C, (sys, seed), || {
        let mut f = fabric(nodes(sys, seed));
        let (finished, frames) = tapped_run(&mut f, 10_000_000_000, all_done);
        assert!(finished);
        let mut ns = f.into_nodes();
        assert!(
            results(sys, seed, &mut ns, true).0,
            "the clean run is exact"
        );
        assert!(
            frames.len() > 20,
            "{}: {} frames",
            SYSTEMS[sys],
            frames.len()
        );
        frames
    })
}

// ---- property 1: fresh endpoints and arbitrary frames ----

/// Feed each node of a fresh `sys` setup the given frames, draining and firing timers.
fn fresh(sys: usize, frames: &[(u32, Junk)]) {
    let corpus = corpus(sys, 1);
    let mut ns = nodes(sys, 1);
    let n = ns.len();
    for node in ns.iter_mut() {
        let mut now = 0;
        for (from, j) in frames {
            let frame = j.bytes(&corpus);
            let from = if from.is_multiple_of(4) {
                *from
            } else {
                from % (n as u32 + 2)
            };
            feed(node, now, from, &frame);
            now += 1_000;
            if let Some(t) = node.poll_timeout()
                && t <= now
            {
                node.handle_timeout(now);
                while node.poll_transmit(now).is_some() {}
            }
        }
    }
}

proptest! {
    #![proptest_config(cases(2048))]

    #[test]
    fn fresh_endpoints_take_arbitrary_frames(
        sys in 0..SYSTEMS.len(),
        frames in prop::collection::vec((any::<u32>(), junk_strategy()), 1..24),
    ) {
        fresh(sys, &frames);
    }
}

// ---- property 2: a run beside a hostile source ----

#[derive(Debug, Default)]
struct Outcome {
    finished: bool,
    exact: bool,
    /// result vectors that junk after the run changed
    changed_after: usize,
    injected: u64,
    malformed: u64,
}

fn hostile_run(sys: usize, seed: u64, p: f64, mode: Mode) -> Outcome {
    let corpus = corpus(sys, seed);
    let mut g = SplitMix64::derive(seed, SYSTEMS[sys]);
    let mut ns = nodes(sys, seed);
    let n = ns.len();
    let mut o = Outcome::default();
    for node in ns.iter_mut() {
        for _ in 0..8 {
            o.injected += 1;
            let j = junk(&mut g, mode, &corpus);
            let f = from_id(&mut g, n);
            node.handle_packet(0, f, &j);
        }
    }
    let wrapped: Vec<Hostile<Node>> = ns
        .into_iter()
        .enumerate()
        .map(|(i, inner)| Hostile {
            inner,
            g: SplitMix64::derive(seed, &format!("{}/{i}", SYSTEMS[sys])),
            p,
            mode,
            corpus: corpus.clone(),
            nodes: n,
            injected: 0,
        })
        .collect();
    let mut f = fabric(wrapped);
    o.finished = f.run_until(20_000_000, all_done).finished;
    let mut ns: Vec<Node> = f
        .into_nodes()
        .into_iter()
        .map(|h| {
            o.injected += h.injected;
            h.inner
        })
        .collect();
    let (exact, before) = results(sys, seed, &mut ns, o.finished);
    o.exact = exact;
    for node in ns.iter_mut() {
        for k in 0..32 {
            let j = junk(&mut g, mode, &corpus);
            let f = from_id(&mut g, n);
            feed(node, 6_000_000_000 + k, f, &j);
        }
    }
    let (_, after) = results(sys, seed, &mut ns, o.finished);
    o.changed_after = before.iter().zip(&after).filter(|(b, a)| b != a).count();
    o.malformed = malformed(&ns);
    o
}

fn exact(sys: usize, seed: u64, p: f64, mode: Mode) -> Result<(), TestCaseError> {
    let o = hostile_run(sys, seed, p, mode);
    prop_assert!(o.injected > 0);
    prop_assert!(
        o.finished && o.exact && o.changed_after == 0,
        "{} seed {seed} p {p} {mode:?}: {o:?}",
        SYSTEMS[sys]
    );
    Ok(())
}

macro_rules! under_hostile_source {
    ($($(#[$attr:meta])* $test:ident: $sys:literal, $mode:ident;)*) => {
        proptest! {
            #![proptest_config(cases(128))]
            $(
                $(#[$attr])*
                #[test]
                fn $test(seed in 1..u64::MAX, p in 0.01..0.3f64) {
                    exact($sys, seed, p, Mode::$mode)?;
                }
            )*
        }
    };
}

under_hostile_source! {
    push_pull_sum_exact_beside_random_bytes: 0, Raw;
    /// Finding: the LuWu header and values carry no checksum the switch or the NICs verify,
    /// so a flipped value is aggregated (or drained) as it is.
    #[ignore = "finding: LuWu takes corrupted values (no payload integrity check)"]
    push_pull_sum_exact_beside_flipped_frames: 0, Flip;
    /// Finding: a heartbeat's Ack and Credit carry no epoch and "only ever grow", so a stale or
    /// early copy (a replay, or a heartbeat cut inside its Ethernet padding, which parses the
    /// same) raises the sender's credit past the receiver's buffer and acknowledges packets the
    /// receiver then drops as overflow: they are never resent and the job stalls.
    #[ignore = "finding: replayed heartbeats (Ack/Credit without an epoch) stall the job"]
    push_pull_sum_exact_beside_cut_frames: 0, Cut;
    #[ignore = "finding: replayed heartbeats (Ack/Credit without an epoch) stall the job"]
    push_pull_sum_exact_beside_replayed_frames: 0, Replay;
    push_pull_max_exact_beside_random_bytes: 1, Raw;
    #[ignore = "finding: LuWu takes corrupted values (no payload integrity check)"]
    push_pull_max_exact_beside_flipped_frames: 1, Flip;
    #[ignore = "finding: replayed heartbeats (Ack/Credit without an epoch) stall the job"]
    push_pull_max_exact_beside_cut_frames: 1, Cut;
    #[ignore = "finding: replayed heartbeats (Ack/Credit without an epoch) stall the job"]
    push_pull_max_exact_beside_replayed_frames: 1, Replay;
    zero3_reduce_scatter_exact_beside_random_bytes: 2, Raw;
    #[ignore = "finding: ZeRO-3 ring members take corrupted values (no checksum in the model)"]
    zero3_reduce_scatter_exact_beside_flipped_frames: 2, Flip;
    zero3_reduce_scatter_exact_beside_cut_frames: 2, Cut;
    zero3_reduce_scatter_exact_beside_replayed_frames: 2, Replay;
    zero3_all_gather_exact_beside_random_bytes: 3, Raw;
    #[ignore = "finding: ZeRO-3 ring members take corrupted values (no checksum in the model)"]
    zero3_all_gather_exact_beside_flipped_frames: 3, Flip;
    zero3_all_gather_exact_beside_cut_frames: 3, Cut;
    zero3_all_gather_exact_beside_replayed_frames: 3, Replay;
}

// ---- property 3: bounded memory ----

/// Heap held by each endpoint of a fresh setup after 256 junk frames, and its growth over 4096
/// more: under 256 KiB, with at most two frames sent per junk frame.
fn bounded(sys: usize, mode: Mode) {
    let corpus = corpus(sys, 1);
    let mut g = SplitMix64::derive(7, SYSTEMS[sys]);
    let mut ns = nodes(sys, 1);
    let n = ns.len();
    for node in ns.iter_mut() {
        let mut now = 0;
        let mut phase = |node: &mut Node, k: usize, now: &mut u64| {
            let mut sent = 0;
            for _ in 0..k {
                let j = junk(&mut g, mode, &corpus);
                let f = from_id(&mut g, n);
                sent += feed(node, *now, f, &j);
                *now += 1_000;
            }
            sent
        };
        phase(node, 256, &mut now);
        let l1 = live();
        let sent = phase(node, 4096, &mut now);
        let grown = live() - l1;
        let s = SYSTEMS[sys];
        assert!(
            grown < 256 << 10,
            "{s} node {} ({mode:?}): heap grew {grown} bytes over 4096 junk frames",
            node.id()
        );
        assert!(
            sent <= 4096 * 2,
            "{s} node {} ({mode:?}): {sent} frames sent for 4096 junk frames",
            node.id()
        );
    }
}

#[test]
fn memory_stays_bounded_under_junk() {
    for s in 0..SYSTEMS.len() {
        for mode in [Mode::Raw, Mode::Flip, Mode::Cut, Mode::Replay] {
            bounded(s, mode);
        }
    }
}

// ---- regressions ----

/// Found here: a ZeRO-3 ring member added in every copy of a packet (and packets from any rank),
/// so a replayed packet was summed twice (and pushed the step's count past its packets: the
/// member never finished); after the run, replays still changed its vector. It now drops a
/// second copy (counted in `duplicates`) and packets not from its ring predecessor.
#[test]
fn zero3_ring_members_drop_replayed_packets() {
    for sys in [2, 3] {
        let o = hostile_run(sys, 1, 0.01, Mode::Replay);
        assert!(
            o.finished && o.exact && o.changed_after == 0,
            "{}: {o:?}",
            SYSTEMS[sys]
        );
    }
    let corpus = corpus(2, 1);
    let mut ns = nodes(2, 1);
    // rank 1 receives from rank 0: the first frame 0 sends, twice
    let first = corpus
        .iter()
        .find(|f| f.len() > 33 && f[33] == 2)
        .expect("a frame to rank 1");
    let Node::Ring(r) = &mut ns[1] else {
        panic!("node 1 is a ring member")
    };
    let before = r.data.clone();
    r.handle_packet(0, WORKERS as NodeId, first);
    let once = r.data.clone();
    r.handle_packet(0, WORKERS as NodeId, first);
    assert_ne!(before, once);
    assert_eq!(r.data, once, "a second copy is not added in");
    assert_eq!(r.duplicates, 1);
}
