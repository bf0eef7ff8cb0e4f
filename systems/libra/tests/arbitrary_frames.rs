//! Libra's endpoints (worker, switch program, parameter server) under arbitrary frames, as the
//! `Endpoint` contract demands (every received byte untrusted; a malformed frame counted and
//! dropped, never a panic), for Libra (hot parameters on the switch; only flagged
//! retransmissions checked against the records as the paper describes it, and every push
//! checked) and the PS-lite baseline (the switch only forwards): the properties of
//! `fabric::testing::properties` (fresh endpoints, a run beside a hostile source ending with
//! every worker's hot and cold sums exact by `proto::check`, bounded memory) on this crate's
//! [`Libra`] subject.

use inabench_fabric::testing::properties::{Judged, Subject, hostile_run};
use inabench_fabric::testing::*;
use inabench_fabric::{Endpoint, NodeId};
use inabench_libra::layout::Placement;
use inabench_libra::proto::{self, Config, Inputs, Node};
use inabench_rng::SplitMix64;
use std::collections::HashMap;

const WORKERS: usize = 4;
const HOT: usize = 200;

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

fn nodes(variant: usize, seed: u64) -> Vec<Node> {
    let pl = (variant < 2).then(|| Placement::heat(HOT, 48).expect("placement"));
    proto::build(&cfg(variant), &inputs(variant, seed), HOT, pl)
}

/// The variants: 0 Libra as published (only flagged retransmissions checked against the
/// records), 1 Libra with every push checked, 2 PS-lite.
struct Libra;

impl Subject for Libra {
    type N = Node;
    /// Every worker's hot and cold results.
    type Results = Vec<(HashMap<u32, i32>, HashMap<u32, i32>)>;

    fn variants() -> Vec<&'static str> {
        vec!["libra", "libra_dedup_all", "ps_lite"]
    }
    fn nodes(v: usize, seed: u64) -> Vec<Node> {
        nodes(v, seed)
    }
    fn switch(_v: usize) -> NodeId {
        WORKERS as NodeId
    }
    fn counted(_v: usize, nodes: usize) -> Vec<bool> {
        (0..nodes).map(|i| i < WORKERS).collect()
    }
    fn judge(v: usize, seed: u64, ns: &mut Vec<Node>, _finished: bool) -> Judged<Self::Results> {
        let unfinished = ns[..WORKERS].iter().filter(|w| !w.is_done()).count();
        let malformed: u64 = ns
            .iter()
            .map(|n| match n {
                Node::Worker(w) => w.stats.malformed,
                Node::Switch(s) => s.stats.malformed,
                Node::Other(s) => s.stats.malformed,
            })
            .sum();
        Judged {
            unfinished,
            // check counts an unfinished worker as wrong too
            wrong: proto::check(ns, &inputs(v, seed)) - unfinished,
            results: ns
                .iter()
                .filter_map(|n| match n {
                    Node::Worker(w) => Some((w.hot_result.clone(), w.cold_result.clone())),
                    _ => None,
                })
                .collect(),
            note: format!("malformed {malformed}"),
        }
    }
    fn finding(v: usize, mode: Mode) -> Option<&'static str> {
        match (v, mode) {
            // no checksum over the pairs is verified (the switch cannot, a Tofino does not
            // checksum payloads), so a flipped value is summed and a flipped rank lands elsewhere
            (0 | 1, Mode::Flip) => {
                Some("finding: Libra sums corrupted pairs (no payload integrity check)")
            }
            // the paper's design (`dedup_all` is the fix the crate offers): the switch checks
            // only pushes flagged as retransmissions against its records, so a replayed push is
            // added again
            (0, Mode::Replay) => {
                Some("finding: Libra as published adds an unflagged replayed push twice")
            }
            (2, Mode::Flip) => {
                Some("finding: the server sums corrupted pairs (no payload integrity check)")
            }
            // `Done` names no pushes, so a replayed `Done` that arrives before a worker's last
            // pushes makes the server (or the switch) send its sums before they are complete;
            // without `Done` replays this and the `dedup_all` variant pass
            (2, Mode::Replay) => {
                Some("finding: a replayed Done releases sums before every push arrived")
            }
            _ => None,
        }
    }
}

inabench_fabric::robustness_suite!(Libra);

// ---- regressions ----

/// Found here: a worker took a result addressed to another worker (its ranks joined this
/// worker's sums), and an ACK for a push never sent, or from a node the push did not go to,
/// marked the push delivered (the run stalled). Both are now counted as malformed or ignored.
#[test]
fn replayed_results_and_acks_for_other_nodes_change_nothing() {
    for (variant, mode) in [(1, Mode::Replay), (1, Mode::Flip), (0, Mode::Flip)] {
        let o = hostile_run::<Libra>(variant, 1, 0.01, mode);
        assert!(
            o.judged.unfinished == 0 && !o.changed_after,
            "{} {mode:?}: {o:?}",
            Libra::variants()[variant]
        );
    }
    let mut ns = nodes(0, 1);
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
