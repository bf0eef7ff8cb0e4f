//! Every endpoint of the all-reduce systems (NetReduce host and accelerator, SwitchML,
//! SwitchML-RDMA, ATP worker, switch and parameter server, ring all-reduce and its IP forwarder)
//! under arbitrary frames, as the `Endpoint` contract demands (every received byte untrusted; a
//! malformed frame counted and dropped, never a panic):
//!
//! 1. no panic when an endpoint receives arbitrary bytes (0..2048 long) or a valid frame with
//!    bytes flipped or cut short, from any neighbour id (in range or not), before a run (fresh
//!    endpoints), during one (a hostile source beside valid traffic on the sim fabric) and after
//!    one (finished endpoints);
//! 2. a run with a hostile source still ends with every worker's aggregate exact against the
//!    reference sum, and junk after the run does not change a finished result;
//! 3. memory stays bounded: an endpoint's heap does not grow with the number of junk frames.
//!
//! The valid frames that get mutated are captured from a clean run of the same configuration,
//! so a mutation keeps the right sequence numbers and slots and only the flipped bytes differ.

use inabench_fabric::fuzz::{Corpora, Corpus, cached, sim_fabric, tapped_run};
use inabench_fabric::sim::{LinkConfig, SimFabric};
use inabench_fabric::testing::*;
use inabench_fabric::{Endpoint, NodeId};
use inabench_ina::common::{AllReduceConfig, SetupNode, reference_sum};
use inabench_ina::drive::{sim_link, system};
use inabench_rng::SplitMix64;
use proptest::prelude::*;

#[global_allocator]
static ALLOC: Counting = Counting;

// ---- configurations and the corpus of valid frames ----

const SYSTEMS: [&str; 5] = [
    "netreduce",
    "switchml",
    "switchml_rdma",
    "atp",
    "ring_allreduce",
];

fn cfg(seed: u64) -> AllReduceConfig {
    AllReduceConfig {
        workers: 4,
        elements: 62 * 48 + 5,
        seed,
        line_rate_bps: 100e9,
        mtu: 1024,
        timeout_ns: 50_000,
        // small ATP pool so collisions reach the parameter server too
        knobs: vec![
            ("window".into(), 2.0),
            ("msg_packets".into(), 8.0),
            ("atp_pool".into(), 8.0),
        ],
    }
}

/// Every frame of a clean run of `name` with `seed`, in the order put on links.
fn corpus(name: &'static str, seed: u64) -> Corpus {
    static C: Corpora<(&'static str, u64)> = Corpora::new();
    cached(&C, (name, seed), || {
        let c = cfg(seed);
        let nodes = system(name)
            .expect("system")
            .build(&c)
            .expect("build")
            .into_nodes();
        let mut f = fabric(nodes, &c);
        let (finished, frames) =
            tapped_run(&mut f, 10_000_000_000, |n| n.iter().all(Endpoint::is_done));
        assert!(finished);
        assert!(frames.len() > 100, "{name}: {} frames", frames.len());
        frames
    })
}

fn fabric<N: Endpoint>(nodes: Vec<N>, c: &AllReduceConfig) -> SimFabric<N> {
    let link = LinkConfig {
        mtu: usize::MAX / 2,
        ..sim_link(c)
    };
    sim_fabric(nodes, c.workers as NodeId, link)
}

// ---- property 1: fresh endpoints and arbitrary frames ----

/// Feed each node of a fresh `name` setup the given frames (raw bytes, or corpus frames
/// mutated), draining and firing timers between them; then run the setup to completion.
fn fresh(name: &'static str, frames: &[(u32, Junk)]) {
    let corpus = corpus(name, 1);
    let c = cfg(1);
    let mut nodes = system(name)
        .expect("system")
        .build(&c)
        .expect("build")
        .into_nodes();
    let n = nodes.len();
    for node in nodes.iter_mut() {
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
        fresh(SYSTEMS[sys], &frames);
    }
}

// ---- property 2: a run beside a hostile source ----

#[derive(Debug, Default)]
struct Outcome {
    unfinished: usize,
    wrong: usize,
    /// finished results that junk after the run changed
    changed_after: usize,
    injected: u64,
    /// malformed frames the workers counted
    malformed: u64,
    /// frames the switches counted as dropped
    dropped: u64,
}

fn hostile_run(name: &'static str, seed: u64, p: f64, mode: Mode) -> Outcome {
    let corpus = corpus(name, seed);
    let c = cfg(seed);
    let mut g = SplitMix64::derive(seed, name);
    let mut nodes = system(name)
        .expect("system")
        .build(&c)
        .expect("build")
        .into_nodes();
    let n = nodes.len();
    let mut o = Outcome::default();
    // before: junk to every fresh endpoint
    for node in nodes.iter_mut() {
        for _ in 0..8 {
            o.injected += 1;
            let j = junk(&mut g, mode, &corpus);
            let f = from_id(&mut g, n);
            node.handle_packet(0, f, &j);
        }
    }
    let wrapped: Vec<Hostile<SetupNode>> = nodes
        .into_iter()
        .enumerate()
        .map(|(i, inner)| Hostile {
            inner,
            g: SplitMix64::derive(seed, &format!("{name}/{i}")),
            p,
            mode,
            corpus: corpus.clone(),
            nodes: n,
            injected: 0,
        })
        .collect();
    let mut f = fabric(wrapped, &c);
    f.run_until(5_000_000_000, |n| n.iter().all(Endpoint::is_done));
    let mut nodes: Vec<SetupNode> = f
        .into_nodes()
        .into_iter()
        .map(|h| {
            o.injected += h.injected;
            h.inner
        })
        .collect();
    let want = reference_sum(c.seed, c.workers, c.elements);
    let results: Vec<Option<Vec<i32>>> = nodes
        .iter()
        .filter_map(|n| match n {
            SetupNode::Worker(w) => Some(w.result()),
            _ => None,
        })
        .collect();
    for r in &results {
        match r {
            None => o.unfinished += 1,
            Some(r) if *r != want => o.wrong += 1,
            Some(_) => {}
        }
    }
    // after: junk to every finished endpoint; a finished result does not change
    for node in nodes.iter_mut() {
        for k in 0..32 {
            let j = junk(&mut g, mode, &corpus);
            let f = from_id(&mut g, n);
            feed(node, 6_000_000_000 + k, f, &j);
        }
    }
    let after: Vec<Option<Vec<i32>>> = nodes
        .iter()
        .filter_map(|n| match n {
            SetupNode::Worker(w) => Some(w.result()),
            _ => None,
        })
        .collect();
    for (b, a) in results.iter().zip(&after) {
        if b.is_some() && a != b {
            o.changed_after += 1;
        }
    }
    for n in &nodes {
        match n {
            SetupNode::Worker(w) => o.malformed += w.stats().malformed_rx,
            SetupNode::Switch(s) => o.dropped += s.stats().dropped,
            SetupNode::Other(_) => {}
        }
    }
    o
}

fn exact(name: &'static str, seed: u64, p: f64, mode: Mode) -> Result<(), TestCaseError> {
    let o = hostile_run(name, seed, p, mode);
    prop_assert!(o.injected > 0, "{name}: nothing injected");
    prop_assert!(
        o.unfinished == 0 && o.wrong == 0 && o.changed_after == 0,
        "{name} seed {seed} p {p} {mode:?}: {o:?}"
    );
    Ok(())
}

macro_rules! under_hostile_source {
    ($($(#[$attr:meta])* $test:ident: $name:literal, $mode:ident;)*) => {
        proptest! {
            #![proptest_config(cases(128))]
            $(
                $(#[$attr])*
                #[test]
                fn $test(seed in 1..u64::MAX, p in 0.01..0.3f64) {
                    exact($name, seed, p, Mode::$mode)?;
                }
            )*
        }
    };
}

under_hostile_source! {
    netreduce_exact_beside_random_bytes: "netreduce", Raw;
    /// The same finding as the replayed frames below: a flip the ICRC does not cover (the
    /// Ethernet header; IPv4 TTL, TOS and checksum; BTH reserved bits) leaves a replay. Passes
    /// with this file's fixed seed, fails with others (e.g. `RngSeed::Fixed(99)`).
    #[ignore = "finding: flips outside the ICRC are replays, which NetReduce cannot tell apart"]
    netreduce_exact_beside_flipped_frames: "netreduce", Flip;
    netreduce_exact_beside_cut_frames: "netreduce", Cut;
    /// Finding: a fresh host takes its predecessor's raw data frame (same QPs and PSNs as the
    /// aggregate the accelerator would make of it, the ICRC valid) as its result, and replays
    /// of later messages into the accelerator take over aggregators (lazy reallocation by
    /// message id), so the current message is dropped as "very late" for ever.
    #[ignore = "finding: NetReduce cannot tell replayed frames from fresh ones (wrong sums and stalls)"]
    netreduce_exact_beside_replayed_frames: "netreduce", Replay;
    switchml_exact_beside_random_bytes: "switchml", Raw;
    /// Finding: SwitchML's UDP payload has no integrity check the switch verifies, so a flipped
    /// value in a contribution is summed into the aggregate every worker takes.
    #[ignore = "finding: SwitchML sums corrupted payloads (no payload integrity check)"]
    switchml_exact_beside_flipped_frames: "switchml", Flip;
    switchml_exact_beside_cut_frames: "switchml", Cut;
    switchml_exact_beside_replayed_frames: "switchml", Replay;
    switchml_rdma_exact_beside_random_bytes: "switchml_rdma", Raw;
    /// Finding: the switch verifies the ICRC of contributions, but it cannot recompute one for
    /// the results it writes, so workers parse results with `IcrcCheck::Ignore` and take a
    /// corrupted result.
    #[ignore = "finding: SwitchML-RDMA workers take results with corrupted payloads (ICRC ignored)"]
    switchml_rdma_exact_beside_flipped_frames: "switchml_rdma", Flip;
    switchml_rdma_exact_beside_cut_frames: "switchml_rdma", Cut;
    switchml_rdma_exact_beside_replayed_frames: "switchml_rdma", Replay;
    atp_exact_beside_random_bytes: "atp", Raw;
    /// Finding: as SwitchML, ATP's payload carries no checksum the switch or the parameter
    /// server verifies.
    #[ignore = "finding: ATP sums corrupted payloads (no payload integrity check)"]
    atp_exact_beside_flipped_frames: "atp", Flip;
    atp_exact_beside_cut_frames: "atp", Cut;
    atp_exact_beside_replayed_frames: "atp", Replay;
    ring_exact_beside_random_bytes: "ring_allreduce", Raw;
    ring_exact_beside_flipped_frames: "ring_allreduce", Flip;
    ring_exact_beside_cut_frames: "ring_allreduce", Cut;
    ring_exact_beside_replayed_frames: "ring_allreduce", Replay;
}

// ---- regressions ----

/// Found here: a replayed ACK for a PSN the RC sender had not sent yet moved its oldest
/// unacknowledged packet past data the responder never had; the ring stalled for ever (the
/// responder's NAK then named a PSN below `una` and was ignored). Ghost ACKs are now ignored.
#[test]
fn ring_survives_replayed_acks_from_later_in_the_run() {
    for (seed, p, mode) in [
        (493_496_847_754, 0.128_014_790_328_866, Mode::Replay),
        (
            3_085_898_742_090_699_938,
            0.231_233_394_812_078_13,
            Mode::Flip,
        ),
        (
            4_138_010_104_688_611_111,
            0.011_111_190_943_489_859,
            Mode::Flip,
        ),
    ] {
        let o = hostile_run("ring_allreduce", seed, p, mode);
        assert!(o.unfinished == 0 && o.wrong == 0, "seed {seed}: {o:?}");
    }
}

#[test]
fn rc_sender_ignores_an_ack_for_a_packet_never_sent() {
    use inabench_ina::netreduce::worker_addr;
    use inabench_ina::roce::RcSender;
    use inabench_wire::ib::{AethRepr, NakCode, Syndrome};
    let mut s = RcSender::new(
        worker_addr(0, false),
        worker_addr(1, true),
        7,
        8,
        2,
        1,
        1000,
    );
    let ack = AethRepr {
        syndrome: Syndrome::Ack { credits: 31 },
        msn: 0,
    };
    s.on_aeth(0, s.psn_of(5), &ack);
    assert_eq!(s.acked(), 0, "a ghost ACK acknowledges nothing");
    assert_eq!(s.next_to_send(0), Some(0));
    assert_eq!(s.next_to_send(0), Some(1));
    s.on_aeth(1, s.psn_of(3), &ack);
    assert_eq!(s.acked(), 0, "nor does one beyond what was sent");
    s.on_aeth(2, s.psn_of(1), &ack);
    assert_eq!(s.acked(), 2);
    let nak = AethRepr {
        syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
        msn: 0,
    };
    s.on_aeth(3, s.psn_of(6), &nak);
    assert_eq!(s.naks, 0, "a NAK beyond what was sent is a ghost too");
}

// ---- property 3: bounded memory ----

/// Heap held by each endpoint of a fresh setup after `a` junk frames, and after `b` more: the
/// growth over the `b` frames stays under `limit` bytes.
fn bounded(name: &'static str, mode: Mode) {
    let corpus = corpus(name, 1);
    let c = cfg(1);
    let mut g = SplitMix64::derive(7, name);
    let mut nodes = system(name)
        .expect("system")
        .build(&c)
        .expect("build")
        .into_nodes();
    let n = nodes.len();
    for node in nodes.iter_mut() {
        let mut now = 0;
        let mut phase = |node: &mut SetupNode, k: usize, now: &mut u64| {
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
        assert!(
            grown < 256 << 10,
            "{name} node {} ({mode:?}): heap grew {grown} bytes over 4096 junk frames",
            node.id()
        );
        assert!(
            sent <= 4096 * 2,
            "{name} node {} ({mode:?}): {sent} frames sent for 4096 junk frames",
            node.id()
        );
    }
}

#[test]
fn memory_stays_bounded_under_junk() {
    for name in SYSTEMS {
        bounded(name, Mode::Raw);
        bounded(name, Mode::Flip);
        bounded(name, Mode::Cut);
    }
}
