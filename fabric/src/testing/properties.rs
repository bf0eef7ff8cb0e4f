//! One robustness property suite for every protocol crate (turmoil's lesson: one harness, many
//! subjects). A crate describes its endpoints once as a [`Subject`] (its variants, how to build a
//! variant's nodes for a seed, how to judge a run's outcome, its documented findings) and
//! instantiates the suite with [`robustness_suite!`](crate::robustness_suite); every endpoint is
//! then held to the `Endpoint` contract (every received byte untrusted; a malformed frame counted
//! and dropped, never a panic):
//!
//! 1. [`fresh`]: no panic when a fresh endpoint receives arbitrary bytes (0..2048 long) or a
//!    valid frame with bytes flipped or cut short, from any neighbour id (in range or not),
//!    timers fired between them (2048 proptest cases over the variants);
//! 2. [`hostile`]: a run with a hostile source beside valid traffic (8 junk frames to every
//!    fresh endpoint, then junk before a share `p` of the real frames on the sim fabric, then 32
//!    junk frames to every finished endpoint) ends exact by the subject's own judge, and the junk
//!    after the run changes no result (128 cases of seed and `p` per variant and mode, the
//!    documented findings left out: [`findings`] runs those and fails as they are documented to);
//! 3. [`bounded`]: an endpoint's heap grows less than 256 KiB over 4096 junk frames (after 256),
//!    and it sends at most two frames per junk frame (the test binary installs [`Counting`]).
//!
//! The valid frames that get mutated are those of a clean run of the same variant and seed
//! ([`corpus`]), so a mutation keeps the right sequence numbers and slots and only the flipped
//! bytes differ. The cases are those the four `tests/arbitrary_frames.rs` files drew before the
//! suite (the same strategies, seeds and generator names).

#[cfg(doc)]
use super::Counting;
use super::group::Group;
use super::{Hostile, Junk, Mode, cases, feed, from_id, junk, junk_strategy, live};
use crate::endpoint::{Endpoint, Nanos, NodeId};
use crate::fuzz::{Corpora, Corpus, cached};
use crate::sim::LinkConfig;
use inabench_rng::SplitMix64;
use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestError, TestRunner};
use std::fmt::Debug;
use std::sync::{Arc, Mutex};

/// Every mode of junk.
pub const MODES: [Mode; 4] = [Mode::Raw, Mode::Flip, Mode::Cut, Mode::Replay];

/// What a subject's judge says of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct Judged<R> {
    /// Workers (or the run) that did not finish.
    pub unfinished: usize,
    /// Finished workers whose result is wrong.
    pub wrong: usize,
    /// Every result, compared before and after junk that follows the run.
    pub results: R,
    /// Anything else worth printing with a failure (malformed counts, ...).
    pub note: String,
}

impl<R> Judged<R> {
    pub fn exact(&self) -> bool {
        self.unfinished == 0 && self.wrong == 0
    }
}

/// A protocol crate's endpoints, as the suite drives them.
pub trait Subject: 'static {
    /// The run's node type.
    type N: Endpoint;
    /// What [`Subject::judge`] compares before and after junk that follows a run.
    type Results: PartialEq + Debug;

    /// The variants by name (systems, or configurations of one system); the names also seed
    /// the junk generators.
    fn variants() -> Vec<&'static str>;
    /// A fresh setup of variant `v` for `seed` (node `i` has id `i`).
    fn nodes(v: usize, seed: u64) -> Vec<Self::N>;
    /// The star's centre.
    fn switch(v: usize) -> NodeId;
    /// The links (the suite lifts the MTU: a junk frame may be any length).
    fn link(_v: usize) -> LinkConfig {
        LinkConfig::gbps100()
    }
    /// `counted[i]`: node `i` must be done for a run to finish (default: every node).
    fn counted(_v: usize, nodes: usize) -> Vec<bool> {
        vec![true; nodes]
    }
    /// Virtual time a run beside a hostile source may take.
    fn limit_ns(_v: usize) -> Nanos {
        5_000_000_000
    }
    /// How many frames a clean run must put on the links at least.
    fn min_corpus(_v: usize) -> usize {
        20
    }
    /// Judge a run of variant `v` with `seed` (`finished`: every counted node was done). The
    /// nodes are lent mutably only so a judge can move them through a function that takes its
    /// own node type; it must give them back as they were.
    #[allow(clippy::ptr_arg)] // a `Vec`: a judge may take the nodes out and put them back
    fn judge(
        v: usize,
        seed: u64,
        nodes: &mut Vec<Self::N>,
        finished: bool,
    ) -> Judged<Self::Results>;
    /// Why variant `v` is documented not to stay exact beside junk of `mode`, if it is.
    fn finding(_v: usize, _mode: Mode) -> Option<&'static str> {
        None
    }
    /// The modes the bounded-memory property feeds.
    fn bounded_modes(_v: usize) -> &'static [Mode] {
        &MODES
    }
}

fn name<S: Subject>(v: usize) -> &'static str {
    S::variants()[v]
}

fn group<S: Subject, N: Endpoint>(v: usize, nodes: Vec<N>, limit_ns: Nanos) -> Group<N> {
    let n = nodes.len();
    Group::builder()
        .link(LinkConfig {
            mtu: usize::MAX / 2,
            ..S::link(v)
        })
        .switch(S::switch(v))
        .counted(S::counted(v, n))
        .limit_ns(limit_ns)
        .build(nodes)
}

/// Every frame of a clean run of variant `v` with `seed`, in the order put on links; the clean
/// run must finish exact and put at least [`Subject::min_corpus`] frames on the links.
pub fn corpus<S: Subject>(v: usize, seed: u64) -> Corpus {
    static C: Corpora<(&'static str, usize, u64)> = Corpora::new();
    cached(&C, (std::any::type_name::<S>(), v, seed), || {
        let got = Arc::new(Mutex::new(Vec::new()));
        let tap = got.clone();
        let nodes = S::nodes(v, seed);
        let n = nodes.len();
        let mut g = Group::builder()
            .link(LinkConfig {
                mtu: usize::MAX / 2,
                ..S::link(v)
            })
            .switch(S::switch(v))
            .counted(S::counted(v, n))
            .limit_ns(10_000_000_000)
            .tap(Box::new(move |_, _, _, frame| {
                tap.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(frame.to_vec())
            }))
            .build(nodes);
        let finished = g.drive();
        let mut nodes = g.into_nodes();
        let j = S::judge(v, seed, &mut nodes, finished);
        assert!(
            finished && j.exact(),
            "{}: the clean run is not exact: {j:?}",
            name::<S>(v)
        );
        let frames = std::mem::take(&mut *got.lock().unwrap_or_else(|e| e.into_inner()));
        assert!(
            frames.len() >= S::min_corpus(v),
            "{}: {} frames",
            name::<S>(v),
            frames.len()
        );
        frames
    })
}

// ---- property 1: fresh endpoints and arbitrary frames ----

/// Feed each node of a fresh setup of variant `v` the given frames (raw bytes, or corpus
/// frames mutated), draining and firing timers between them.
pub fn fresh_case<S: Subject>(v: usize, frames: &[(u32, Junk)]) {
    let corpus = corpus::<S>(v, 1);
    let mut nodes = S::nodes(v, 1);
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

/// Property 1 over every variant: 2048 cases.
pub fn fresh<S: Subject>() {
    let variants = S::variants().len();
    let mut runner = TestRunner::new(cases(2048));
    let strategy = (
        0..variants,
        prop::collection::vec((any::<u32>(), junk_strategy()), 1..24),
    );
    if let Err(e) = runner.run(&strategy, |(v, frames)| {
        fresh_case::<S>(v, &frames);
        Ok(())
    }) {
        panic!("fresh endpoints: {e}");
    }
}

// ---- property 2: a run beside a hostile source ----

/// What a run beside a hostile source ended with.
#[derive(Debug)]
pub struct Outcome<R> {
    /// The run's counted nodes were all done.
    pub finished: bool,
    pub judged: Judged<R>,
    /// The results changed when junk followed the run.
    pub changed_after: bool,
    /// Junk frames handed to the endpoints.
    pub injected: u64,
}

/// Variant `v` with `seed`, junk of `mode` before a share `p` of the real frames.
pub fn hostile_run<S: Subject>(v: usize, seed: u64, p: f64, mode: Mode) -> Outcome<S::Results> {
    let name = name::<S>(v);
    let corpus = corpus::<S>(v, seed);
    let mut g = SplitMix64::derive(seed, name);
    let mut nodes = S::nodes(v, seed);
    let n = nodes.len();
    let mut injected = 0;
    // before: junk to every fresh endpoint
    for node in nodes.iter_mut() {
        for _ in 0..8 {
            injected += 1;
            let j = junk(&mut g, mode, &corpus);
            let f = from_id(&mut g, n);
            node.handle_packet(0, f, &j);
        }
    }
    let wrapped: Vec<Hostile<S::N>> = nodes
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
    let mut run = group::<S, _>(v, wrapped, S::limit_ns(v));
    let finished = run.drive();
    let mut nodes: Vec<S::N> = run
        .into_nodes()
        .into_iter()
        .map(|h| {
            injected += h.injected;
            h.inner
        })
        .collect();
    let judged = S::judge(v, seed, &mut nodes, finished);
    // after: junk to every finished endpoint; a finished result does not change
    for node in nodes.iter_mut() {
        for k in 0..32 {
            let j = junk(&mut g, mode, &corpus);
            let f = from_id(&mut g, n);
            feed(node, 6_000_000_000 + k, f, &j);
        }
    }
    let after = S::judge(v, seed, &mut nodes, finished);
    Outcome {
        finished,
        changed_after: after.results != judged.results,
        judged,
        injected,
    }
}

/// The property for one case: junk was injected, the run is exact, junk after it changed
/// nothing.
pub fn exact<S: Subject>(v: usize, seed: u64, p: f64, mode: Mode) -> Result<(), TestCaseError> {
    let o = hostile_run::<S>(v, seed, p, mode);
    let name = name::<S>(v);
    prop_assert!(o.injected > 0, "{name}: nothing injected");
    let j = &o.judged;
    prop_assert!(
        j.exact() && !o.changed_after,
        "{name} seed {seed} p {p} {mode:?}: finished {}, unfinished {}, wrong {}, results changed \
         after the run {}, junk frames {}; {}",
        o.finished,
        j.unfinished,
        j.wrong,
        o.changed_after,
        o.injected,
        j.note
    );
    Ok(())
}

/// The property for variant `v` and `mode`: 128 cases of seed and share; a failure is the
/// smallest (seed, share) proptest found.
pub fn hostile_variant<S: Subject>(v: usize, mode: Mode) -> Result<(), TestError<(u64, f64)>> {
    let mut runner = TestRunner::new(cases(128));
    runner.run(&(1..u64::MAX, 0.01..0.3f64), |(seed, p)| {
        exact::<S>(v, seed, p, mode)
    })
}

/// Property 2 for junk of `mode`, every variant but those with a documented finding for it.
pub fn hostile<S: Subject>(mode: Mode) {
    for v in 0..S::variants().len() {
        if S::finding(v, mode).is_none()
            && let Err(e) = hostile_variant::<S>(v, mode)
        {
            panic!("{} beside {mode:?} junk: {e}", name::<S>(v));
        }
    }
}

/// The documented findings: property 2 for each (variant, mode) a finding names. Fails, as
/// the findings say it does (run with `--ignored` to see each one's counterexample); a finding
/// that no longer fails is reported as such.
pub fn findings<S: Subject>() {
    let mut failed = Vec::new();
    let mut held = Vec::new();
    for v in 0..S::variants().len() {
        for mode in MODES {
            if let Some(why) = S::finding(v, mode) {
                match hostile_variant::<S>(v, mode) {
                    Err(e) => failed.push(format!("{why}: {} {mode:?}: {e}", name::<S>(v))),
                    Ok(()) => held.push(format!("{} {mode:?}", name::<S>(v))),
                }
            }
        }
    }
    eprintln!("findings that held with these cases: {held:?}");
    assert!(failed.is_empty(), "{} findings: {failed:#?}", failed.len());
}

// ---- property 3: bounded memory ----

/// Heap held by each endpoint of a fresh setup of variant `v` after 256 junk frames of `mode`,
/// and its growth over 4096 more: under 256 KiB, with at most two frames sent per junk frame.
pub fn bounded_variant<S: Subject>(v: usize, mode: Mode) {
    let name = name::<S>(v);
    let corpus = corpus::<S>(v, 1);
    let mut g = SplitMix64::derive(7, name);
    let mut nodes = S::nodes(v, 1);
    let n = nodes.len();
    for node in nodes.iter_mut() {
        let mut now = 0;
        let mut phase = |node: &mut S::N, k: usize, now: &mut u64| {
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

/// Property 3 over every variant and its modes.
pub fn bounded<S: Subject>() {
    for v in 0..S::variants().len() {
        for mode in S::bounded_modes(v) {
            bounded_variant::<S>(v, *mode);
        }
    }
}

/// The suite's tests for a [`Subject`] in a test binary: the counting allocator the memory
/// property reads, one test per property and mode of junk, and the findings (ignored: they fail
/// as documented).
///
/// ```ignore
/// inabench_fabric::robustness_suite!(LibraSubject);
/// ```
#[macro_export]
macro_rules! robustness_suite {
    ($subject:ty) => {
        #[global_allocator]
        static ALLOC: $crate::testing::Counting = $crate::testing::Counting;

        #[test]
        fn fresh_endpoints_take_arbitrary_frames() {
            $crate::testing::properties::fresh::<$subject>();
        }

        #[test]
        fn exact_beside_random_bytes() {
            $crate::testing::properties::hostile::<$subject>($crate::testing::Mode::Raw);
        }

        #[test]
        fn exact_beside_flipped_frames() {
            $crate::testing::properties::hostile::<$subject>($crate::testing::Mode::Flip);
        }

        #[test]
        fn exact_beside_cut_frames() {
            $crate::testing::properties::hostile::<$subject>($crate::testing::Mode::Cut);
        }

        #[test]
        fn exact_beside_replayed_frames() {
            $crate::testing::properties::hostile::<$subject>($crate::testing::Mode::Replay);
        }

        #[test]
        #[ignore = "the documented findings: each fails the exactness property, as documented"]
        fn exact_where_the_documented_findings_say_it_is_not() {
            $crate::testing::properties::findings::<$subject>();
        }

        #[test]
        fn memory_stays_bounded_under_junk() {
            $crate::testing::properties::bounded::<$subject>();
        }
    };
}
