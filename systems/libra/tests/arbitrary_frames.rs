//! Libra's endpoints (worker, switch program, parameter server) under arbitrary frames, as the
//! `Endpoint` contract demands (every received byte untrusted; a malformed frame counted and
//! dropped, never a panic), for Libra (hot parameters on the switch; only flagged
//! retransmissions checked against the records as the paper describes it, and every push
//! checked) and the PS-lite baseline (the switch only forwards):
//!
//! 1. no panic when an endpoint receives arbitrary bytes (0..2048 long) or a valid frame with
//!    bytes flipped or cut short, from any neighbour id, before a run (fresh endpoints), during
//!    one (a hostile source beside valid traffic on the sim fabric) and after one;
//! 2. a run with a hostile source still ends with every worker's hot and cold sums exact
//!    (`proto::check`), and junk after the run does not change a finished result;
//! 3. memory stays bounded: an endpoint's heap does not grow with the number of junk frames.
//!
//! The valid frames that get mutated are captured from a clean run with the same inputs.

use inabench_fabric::fuzz::{Corpora, Corpus, cached, sim_fabric, tapped_run};
use inabench_fabric::sim::{LinkConfig, SimFabric};
use inabench_fabric::testing::*;
use inabench_fabric::{Endpoint, NodeId};
use inabench_libra::layout::Placement;
use inabench_libra::proto::{self, Config, Inputs, Node};
use inabench_rng::SplitMix64;
use proptest::prelude::*;
use std::collections::HashMap;

#[global_allocator]
static ALLOC: Counting = Counting;

// ---- configurations and the corpus of valid frames ----

const WORKERS: usize = 4;
const HOT: usize = 200;

/// The variants: 0 Libra as published (only flagged retransmissions checked against the
/// records), 1 Libra with every push checked, 2 PS-lite.
const VARIANTS: [&str; 3] = ["libra", "libra_dedup_all", "ps_lite"];

fn cfg(variant: usize) -> Config {
    Config {
        workers: WORKERS,
        libra: variant < 2,
        window: 16,
        rto_ns: 50_000,
        hot_cap: 24,
        cold_cap: 128,
        dedup_all: variant == 1,
        float: false,
    }
}

fn inputs(variant: usize, seed: u64) -> Inputs {
    let mut g = SplitMix64::new(seed);
    let libra = variant < 2;
    (0..WORKERS)
        .map(|_| {
            let mut h = Vec::new();
            if libra {
                for r in 0..HOT as u32 {
                    if g.chance(0.6) {
                        h.push((r, (g.next_u64() % 2001) as i32 - 1000));
                    }
                }
            }
            let mut c = Vec::new();
            for k in 0..300u32 {
                if g.chance(0.3) {
                    c.push((100_000 + k * 7, (g.next_u64() % 2001) as i32 - 1000));
                }
            }
            (h, c)
        })
        .collect()
}

fn nodes(variant: usize, seed: u64) -> (Vec<Node>, Inputs) {
    let c = cfg(variant);
    let inp = inputs(variant, seed);
    let pl = (variant < 2).then(|| Placement::heat(HOT, 48).expect("placement"));
    (proto::build(&c, &inp, HOT, pl), inp)
}

fn fabric<N: Endpoint>(nodes: Vec<N>) -> SimFabric<N> {
    let link = LinkConfig {
        mtu: usize::MAX / 2,
        ..LinkConfig::gbps100()
    };
    sim_fabric(nodes, WORKERS as NodeId, link)
}

/// Every frame of a clean run of `variant` with `seed`, in the order put on links.
fn corpus(variant: usize, seed: u64) -> Corpus {
    static C: Corpora<(usize, u64)> = Corpora::new();
    cached(&C, (variant, seed), || {
        let (ns, inp) = nodes(variant, seed);
        let mut f = fabric(ns);
        let (finished, frames) = tapped_run(&mut f, 10_000_000_000, |n| {
            n[..WORKERS].iter().all(Endpoint::is_done)
        });
        assert!(finished);
        assert_eq!(proto::check(f.nodes(), &inp), 0, "the clean run is exact");
        assert!(
            frames.len() > 20,
            "{}: {} frames",
            VARIANTS[variant],
            frames.len()
        );
        frames
    })
}

// ---- property 1: fresh endpoints and arbitrary frames ----

/// Feed each node of a fresh `variant` setup the given frames, draining and firing timers.
fn fresh(variant: usize, frames: &[(u32, Junk)]) {
    let corpus = corpus(variant, 1);
    let (mut ns, _) = nodes(variant, 1);
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
        variant in 0..VARIANTS.len(),
        frames in prop::collection::vec((any::<u32>(), junk_strategy()), 1..24),
    ) {
        fresh(variant, &frames);
    }
}

// ---- property 2: a run beside a hostile source ----

#[derive(Debug, Default)]
struct Outcome {
    unfinished: usize,
    /// finished workers whose hot or cold sums are wrong (`proto::check`)
    wrong: usize,
    /// finished results that junk after the run changed
    changed_after: usize,
    injected: u64,
    malformed: u64,
}

type Results = Vec<(HashMap<u32, i32>, HashMap<u32, i32>)>;

fn results(ns: &[Node]) -> Results {
    ns.iter()
        .filter_map(|n| match n {
            Node::Worker(w) => Some((w.hot_result.clone(), w.cold_result.clone())),
            _ => None,
        })
        .collect()
}

fn hostile_run(variant: usize, seed: u64, p: f64, mode: Mode) -> Outcome {
    let corpus = corpus(variant, seed);
    let mut g = SplitMix64::derive(seed, VARIANTS[variant]);
    let (mut ns, inp) = nodes(variant, seed);
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
            g: SplitMix64::derive(seed, &format!("{}/{i}", VARIANTS[variant])),
            p,
            mode,
            corpus: corpus.clone(),
            nodes: n,
            injected: 0,
        })
        .collect();
    let mut f = fabric(wrapped);
    f.run_until(5_000_000_000, |n| {
        n[..WORKERS].iter().all(Endpoint::is_done)
    });
    let mut ns: Vec<Node> = f
        .into_nodes()
        .into_iter()
        .map(|h| {
            o.injected += h.injected;
            h.inner
        })
        .collect();
    o.unfinished = ns[..WORKERS].iter().filter(|w| !w.is_done()).count();
    // check counts an unfinished worker as wrong too
    o.wrong = proto::check(&ns, &inp) - o.unfinished;
    let before = results(&ns);
    for node in ns.iter_mut() {
        for k in 0..32 {
            let j = junk(&mut g, mode, &corpus);
            let f = from_id(&mut g, n);
            feed(node, 6_000_000_000 + k, f, &j);
        }
    }
    o.changed_after = before
        .iter()
        .zip(&results(&ns))
        .filter(|(b, a)| b != a)
        .count();
    for node in &ns {
        o.malformed += match node {
            Node::Worker(w) => w.stats.malformed,
            Node::Switch(s) => s.stats.malformed,
            Node::Server(s) => s.stats.malformed,
        };
    }
    o
}

fn exact(variant: usize, seed: u64, p: f64, mode: Mode) -> Result<(), TestCaseError> {
    let o = hostile_run(variant, seed, p, mode);
    prop_assert!(o.injected > 0);
    prop_assert!(
        o.unfinished == 0 && o.wrong == 0 && o.changed_after == 0,
        "{} seed {seed} p {p} {mode:?}: {o:?}",
        VARIANTS[variant]
    );
    Ok(())
}

macro_rules! under_hostile_source {
    ($($(#[$attr:meta])* $test:ident: $variant:literal, $mode:ident;)*) => {
        proptest! {
            #![proptest_config(cases(128))]
            $(
                $(#[$attr])*
                #[test]
                fn $test(seed in 1..u64::MAX, p in 0.01..0.3f64) {
                    exact($variant, seed, p, Mode::$mode)?;
                }
            )*
        }
    };
}

under_hostile_source! {
    libra_exact_beside_random_bytes: 0, Raw;
    /// Finding: no checksum over the pairs is verified (the switch cannot, a Tofino does not
    /// checksum payloads), so a flipped value is summed and a flipped rank lands elsewhere.
    #[ignore = "finding: Libra sums corrupted pairs (no payload integrity check)"]
    libra_exact_beside_flipped_frames: 0, Flip;
    libra_exact_beside_cut_frames: 0, Cut;
    /// Finding (the paper's design, `dedup_all` is the fix the crate offers): the switch checks
    /// only pushes flagged as retransmissions against its records, so a replayed push is added
    /// again.
    #[ignore = "finding: Libra as published adds an unflagged replayed push twice"]
    libra_exact_beside_replayed_frames: 0, Replay;
    libra_dedup_all_exact_beside_random_bytes: 1, Raw;
    #[ignore = "finding: Libra sums corrupted pairs (no payload integrity check)"]
    libra_dedup_all_exact_beside_flipped_frames: 1, Flip;
    libra_dedup_all_exact_beside_cut_frames: 1, Cut;
    libra_dedup_all_exact_beside_replayed_frames: 1, Replay;
    ps_lite_exact_beside_random_bytes: 2, Raw;
    #[ignore = "finding: the server sums corrupted pairs (no payload integrity check)"]
    ps_lite_exact_beside_flipped_frames: 2, Flip;
    ps_lite_exact_beside_cut_frames: 2, Cut;
    /// Finding: `Done` names no pushes, so a replayed `Done` that arrives before a worker's
    /// last pushes makes the server (or the switch) send its sums before they are complete.
    /// Without `Done` replays this and the `dedup_all` variant pass.
    #[ignore = "finding: a replayed Done releases sums before every push arrived"]
    ps_lite_exact_beside_replayed_frames: 2, Replay;
}

// ---- regressions ----

/// Found here: a worker took a result addressed to another worker (its ranks joined this
/// worker's sums), and an ACK for a push never sent, or from a node the push did not go to,
/// marked the push delivered (the run stalled). Both are now counted as malformed or ignored.
#[test]
fn replayed_results_and_acks_for_other_nodes_change_nothing() {
    for (variant, mode) in [(1, Mode::Replay), (1, Mode::Flip), (0, Mode::Flip)] {
        let o = hostile_run(variant, 1, 0.01, mode);
        assert!(
            o.unfinished == 0 && o.changed_after == 0,
            "{} {mode:?}: {o:?}",
            VARIANTS[variant]
        );
    }
    let (mut ns, _) = nodes(0, 1);
    let Node::Worker(w) = &mut ns[0] else {
        panic!("node 0 is a worker")
    };
    let result = |dst: u32, kind| {
        inabench_libra::wire::emit(
            WORKERS as u32,
            dst,
            &inabench_libra::wire::Repr {
                kind,
                retransmit: false,
                worker: dst as u16,
                seq: 0,
                aux: 1,
                pairs: vec![(5, 99)],
            },
        )
    };
    w.handle_packet(
        0,
        WORKERS as NodeId,
        &result(2, inabench_libra::wire::Kind::Result),
    );
    assert!(
        w.hot_result.is_empty(),
        "a result for worker 2 is not worker 0's"
    );
    assert_eq!(w.stats.malformed, 1);
    w.handle_packet(
        0,
        WORKERS as NodeId,
        &result(0, inabench_libra::wire::Kind::Result),
    );
    assert_eq!(w.hot_result.get(&5), Some(&99));
}

// ---- property 3: bounded memory ----

/// Heap held by each endpoint of a fresh setup after 256 junk frames, and its growth over 4096
/// more: under 256 KiB, with at most two frames sent per junk frame.
fn bounded(variant: usize, mode: Mode) {
    let corpus = corpus(variant, 1);
    let mut g = SplitMix64::derive(7, VARIANTS[variant]);
    let (mut ns, _) = nodes(variant, 1);
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
        let v = VARIANTS[variant];
        assert!(
            grown < 256 << 10,
            "{v} node {} ({mode:?}): heap grew {grown} bytes over 4096 junk frames",
            node.id()
        );
        assert!(
            sent <= 4096 * 2,
            "{v} node {} ({mode:?}): {sent} frames sent for 4096 junk frames",
            node.id()
        );
    }
}

#[test]
fn memory_stays_bounded_under_junk() {
    for v in 0..VARIANTS.len() {
        for mode in [Mode::Raw, Mode::Flip, Mode::Cut, Mode::Replay] {
            bounded(v, mode);
        }
    }
}
