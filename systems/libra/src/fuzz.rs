//! The endpoint fuzz body of Libra (worker, switch program, parameter server; Libra as
//! published, Libra with every push checked, and the PS-lite baseline): the cargo-fuzz target
//! `libra_endpoints` (fuzz/) and the stable `tests/fuzz_smoke.rs` call [`endpoints`].
//!
//! The input's first byte picks the variant; the rest is a schedule of hostile frames
//! ([`inabench_fabric::fuzz::schedule`]: the fuzzer's bytes, or a clean run's frames flipped, cut
//! or replayed, from any neighbour id, before any real frame of any node or after the run)
//! handed to the nodes of a run on the sim fabric. Checked: no panic; no flood (a finished node
//! answers a frame with at most one frame per node of the run: a switch may multicast); and, where the schedule holds no kind of frame
//! the variant has a documented finding about ([`findings`]), every worker finishes with exact
//! hot and cold sums ([`crate::proto::check`]) that frames after the run do not change. Memory
//! is bounded by libFuzzer's RSS limit here; the heap-growth property is
//! `tests/arbitrary_frames.rs`'s.

use crate::layout::Placement;
use crate::proto::{self, Config, Inputs, Node};
use inabench_fabric::fuzz::{
    Corpora, Corpus, Kind, addressed_run, cached, finish_all, pick, schedule, scheduled,
    sim_fabric, tapped_run,
};
use inabench_fabric::sim::{LinkConfig, SimFabric};
use inabench_fabric::{Endpoint, NodeId};
use inabench_rng::SplitMix64;
use std::collections::HashMap;

const WORKERS: usize = 3;
const HOT: usize = 96;

/// The variants, by the first byte of the input: Libra as published (only flagged
/// retransmissions checked against the switch's records), Libra with every push checked, PS-lite.
pub const VARIANTS: [&str; 3] = ["libra", "libra_dedup_all", "ps_lite"];

/// The kinds of hostile frame a variant is documented to be fooled by (the ignored properties of
/// `tests/arbitrary_frames.rs`): no checksum over the pairs (every variant sums a flipped value);
/// Libra as published adds an unflagged replayed push twice; PS-lite's server releases its sums
/// on a replayed `Done`.
pub fn findings(variant: usize) -> &'static [Kind] {
    match variant {
        1 => &[Kind::Flip],
        _ => &[Kind::Flip, Kind::Replay],
    }
}

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

fn inputs(variant: usize) -> Inputs {
    let mut g = SplitMix64::new(1);
    (0..WORKERS)
        .map(|_| {
            let mut h = Vec::new();
            if variant < 2 {
                for r in 0..HOT as u32 {
                    if g.chance(0.6) {
                        h.push((r, (g.next_u64() % 2001) as i32 - 1000));
                    }
                }
            }
            let mut c = Vec::new();
            for k in 0..120u32 {
                if g.chance(0.3) {
                    c.push((100_000 + k * 7, (g.next_u64() % 2001) as i32 - 1000));
                }
            }
            (h, c)
        })
        .collect()
}

fn nodes(variant: usize) -> (Vec<Node>, Inputs) {
    let inp = inputs(variant);
    let pl = (variant < 2).then(|| {
        Placement::heat(HOT, 48).unwrap_or_else(|e| panic!("a placement of {HOT} rows: {e}"))
    });
    (proto::build(&cfg(variant), &inp, HOT, pl), inp)
}

fn fabric<N: Endpoint>(nodes: Vec<N>) -> SimFabric<N> {
    let link = LinkConfig {
        mtu: usize::MAX / 2,
        ..LinkConfig::gbps100()
    };
    sim_fabric(nodes, WORKERS as NodeId, link)
}

/// Every frame of a clean run of `variant`, in the order put on links (made once per process).
fn corpus(variant: usize) -> Corpus {
    static C: Corpora<usize> = Corpora::new();
    cached(&C, variant, || {
        let (ns, inp) = nodes(variant);
        let mut f = fabric(ns);
        let (finished, frames) = tapped_run(&mut f, 10_000_000_000, |n| {
            n[..WORKERS].iter().all(Endpoint::is_done)
        });
        assert!(finished, "{}: the clean run finishes", VARIANTS[variant]);
        assert_eq!(proto::check(f.nodes(), &inp), 0, "the clean run is exact");
        frames
    })
}

/// The seed inputs of the cargo-fuzz target `libra_endpoints` (`fuzz/seeds/libra_endpoints/`):
/// [`inabench_fabric::fuzz::seeds`] from each variant's clean run, named `<variant>-<kind>`.
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for (pick, name) in VARIANTS.iter().enumerate() {
        let (ns, _) = nodes(pick);
        let n = ns.len();
        let mut f = fabric(ns);
        let (finished, run) = addressed_run(&mut f, 10_000_000_000, |n| {
            n[..WORKERS].iter().all(Endpoint::is_done)
        });
        assert!(finished, "{name}: the clean run finishes");
        for (kind, input) in inabench_fabric::fuzz::seeds(pick as u8, n, &run) {
            out.push((format!("{name}-{kind}"), input));
        }
    }
    out
}

type Results = Vec<(HashMap<u32, i32>, HashMap<u32, i32>)>;

fn results<'a>(ns: impl Iterator<Item = &'a Node>) -> Results {
    ns.filter_map(|n| match n {
        Node::Worker(w) => Some((w.hot_result.clone(), w.cold_result.clone())),
        _ => None,
    })
    .collect()
}

/// What a run beside a schedule came to.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Outcome {
    /// Workers not done when the run stopped.
    pub unfinished: usize,
    /// Finished workers with a wrong hot or cold sum.
    pub wrong: usize,
    /// Finished results that frames after the run changed.
    pub changed_after: usize,
    /// Hostile frames handed over (during and after the run).
    pub injected: u64,
    /// Whether the schedule holds a kind of frame the variant has a documented finding about.
    pub exempt: bool,
}

/// Run `variant` beside the schedule `data` spells and say what came of it (panics on a flood).
pub fn run(variant: usize, data: &[u8]) -> Outcome {
    let corpus = corpus(variant);
    let (ns, inp) = nodes(variant);
    let plan = schedule(data, ns.len(), &corpus);
    let mut f = fabric(scheduled(ns, &plan));
    f.run_until(5_000_000_000, |n| {
        n[..WORKERS].iter().all(Endpoint::is_done)
    });
    let mut wrapped = f.into_nodes();
    let before = results(wrapped.iter().map(|s| &s.inner));
    let done: Vec<bool> = wrapped[..WORKERS].iter().map(Endpoint::is_done).collect();
    let mut o = Outcome {
        exempt: plan.iter().any(|s| findings(variant).contains(&s.kind)),
        injected: finish_all(&mut wrapped, 6_000_000_000, VARIANTS[variant]),
        ..Outcome::default()
    };
    let ns: Vec<Node> = wrapped.into_iter().map(|s| s.inner).collect();
    o.changed_after = (before.iter().zip(&results(ns.iter())).zip(&done))
        .filter(|((b, a), done)| **done && b != a)
        .count();
    o.unfinished = ns[..WORKERS].iter().filter(|w| !w.is_done()).count();
    // check counts an unfinished worker as wrong too
    o.wrong = proto::check(&ns, &inp).saturating_sub(o.unfinished);
    o
}

/// The body: the first byte picks the variant, the rest is the schedule; a wrong or unfinished
/// result fails unless the schedule holds a kind of frame in [`findings`].
pub fn endpoints(data: &[u8]) {
    let Some((variant, data)) = pick(data, VARIANTS.len()) else {
        return;
    };
    let o = run(variant, data);
    if !o.exempt {
        assert!(
            o.unfinished == 0 && o.wrong == 0 && o.changed_after == 0,
            "{}: {o:?} beside the schedule {data:?}",
            VARIANTS[variant]
        );
    }
}
