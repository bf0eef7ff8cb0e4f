//! The endpoint fuzz body of the Table 6 systems (NetReduce host and accelerator, SwitchML worker
//! and switch, SwitchML-RDMA, ATP worker, switch and parameter server, ring all-reduce and its
//! forwarder): the cargo-fuzz target `ina_endpoints` (fuzz/) and the stable
//! `tests/fuzz_smoke.rs` call [`endpoints`].
//!
//! The fuzzer's first byte picks the system; the rest is a schedule of hostile frames
//! ([`inabench_fabric::fuzz::schedule`]: its own bytes, or a clean run's frames flipped, cut or
//! replayed, from any neighbour id, before any real frame of any node or after the run) handed to
//! the nodes of a run on the sim fabric. Checked: no panic; no flood (a finished node answers a
//! frame with at most one frame per node of the run: a switch may multicast); and, where the schedule holds no kind of frame the system
//! has a documented finding about ([`findings`]), every worker finishes with the exact reference
//! sum and frames after the run do not change it. Memory is bounded by libFuzzer's RSS limit here;
//! the heap-growth property is `tests/arbitrary_frames.rs`'s.

use crate::common::{AllReduceConfig, SetupNode, reference_sum, sim_link};
use crate::system;
use inabench_fabric::Endpoint;
use inabench_fabric::fuzz::{
    Corpora, Corpus, Kind, Scheduled, addressed_run, cached, finish_all, pick, schedule, scheduled,
    sim_fabric, tapped_run,
};
use inabench_fabric::sim::{LinkConfig, SimFabric};

/// The systems the body drives, by the first byte of the input: those of [`crate::SYSTEMS`]
/// that are [`crate::common::System::fuzzed`], in its order.
pub fn systems() -> &'static [&'static str] {
    static NAMES: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| {
        crate::SYSTEMS
            .iter()
            .filter(|s| s.fuzzed())
            .map(|s| s.name())
            .collect()
    })
}

/// The kinds of hostile frame a system is documented to be fooled by
/// ([`crate::common::System::fuzz_findings`]: the findings of `tests/arbitrary_frames.rs`, its
/// ignored properties): with one in the schedule a wrong or unfinished result is that finding,
/// not a failure of the body.
pub fn findings(name: &str) -> &'static [Kind] {
    system(name).map_or(&[], |s| s.fuzz_findings())
}

fn cfg() -> AllReduceConfig {
    AllReduceConfig {
        workers: 3,
        elements: 62 * 12 + 5,
        seed: 1,
        line_rate_bps: 100e9,
        mtu: 1024,
        timeout_ns: 50_000,
        // small ATP pool so collisions reach the parameter server too
        knobs: vec![
            ("window".into(), 2.0),
            ("msg_packets".into(), 4.0),
            ("atp_pool".into(), 4.0),
        ],
    }
}

fn nodes(name: &str, c: &AllReduceConfig) -> Vec<SetupNode> {
    system(name)
        .unwrap_or_else(|| panic!("{name} is a system of drive::system"))
        .build(c)
        .unwrap_or_else(|e| panic!("{name} builds: {e}"))
        .into_nodes()
}

fn fabric<N: Endpoint>(nodes: Vec<N>, c: &AllReduceConfig) -> SimFabric<N> {
    let link = LinkConfig {
        mtu: usize::MAX / 2,
        ..sim_link(c)
    };
    sim_fabric(nodes, c.workers as u32, link)
}

/// Every frame of a clean run of `name`, in the order put on links (made once per process).
fn corpus(name: &'static str) -> Corpus {
    static C: Corpora<&'static str> = Corpora::new();
    cached(&C, name, || {
        let c = cfg();
        let mut f = fabric(nodes(name, &c), &c);
        let (finished, frames) =
            tapped_run(&mut f, 10_000_000_000, |n| n.iter().all(Endpoint::is_done));
        assert!(finished, "{name}: the clean run finishes");
        frames
    })
}

fn results(nodes: &[Scheduled<SetupNode>]) -> Vec<Option<Vec<i32>>> {
    nodes
        .iter()
        .filter_map(|n| match &n.inner {
            SetupNode::Worker(w) => Some(w.result()),
            _ => None,
        })
        .collect()
}

/// What a run beside a schedule came to.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Outcome {
    /// Workers without a result when the run stopped.
    pub unfinished: usize,
    /// Workers whose final result is not the reference sum.
    pub wrong: usize,
    /// Finished results that frames after the run changed.
    pub changed_after: usize,
    /// Hostile frames handed over (during and after the run).
    pub injected: u64,
    /// Whether the schedule holds a kind of frame the system has a documented finding about.
    pub exempt: bool,
}

/// Run `name` beside the schedule `data` spells and say what came of it (panics on a flood).
pub fn run(name: &'static str, data: &[u8]) -> Outcome {
    let corpus = corpus(name);
    let c = cfg();
    let setup = nodes(name, &c);
    let plan = schedule(data, setup.len(), &corpus);
    let mut f = fabric(scheduled(setup, &plan), &c);
    f.run_until(5_000_000_000, |n| n.iter().all(Endpoint::is_done));
    let mut nodes = f.into_nodes();
    let before = results(&nodes);
    let mut o = Outcome {
        exempt: plan.iter().any(|s| findings(name).contains(&s.kind)),
        injected: finish_all(&mut nodes, 6_000_000_000, name),
        ..Outcome::default()
    };
    let after = results(&nodes);
    let want = reference_sum(c.seed, c.workers, c.elements);
    for (b, a) in before.iter().zip(&after) {
        match b {
            None => o.unfinished += 1,
            Some(r) if *r != want => o.wrong += 1,
            Some(_) => {}
        }
        if b.is_some() && a != b {
            o.changed_after += 1;
        }
    }
    o
}

/// The seed inputs of the cargo-fuzz target `ina_endpoints` (`fuzz/seeds/ina_endpoints/`):
/// [`inabench_fabric::fuzz::seeds`] from each system's clean run, named `<system>-<kind>`.
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    let c = cfg();
    let mut out = Vec::new();
    for (pick, name) in systems().iter().enumerate() {
        let setup = nodes(name, &c);
        let n = setup.len();
        let mut f = fabric(setup, &c);
        let (finished, run) =
            addressed_run(&mut f, 10_000_000_000, |n| n.iter().all(Endpoint::is_done));
        assert!(finished, "{name}: the clean run finishes");
        for (kind, input) in inabench_fabric::fuzz::seeds(pick as u8, n, &run) {
            out.push((format!("{name}-{kind}"), input));
        }
    }
    out
}

/// The body: the first byte picks the system, the rest is the schedule; a wrong, unfinished or
/// later changed result fails unless the schedule holds a kind of frame in [`findings`].
pub fn endpoints(data: &[u8]) {
    let names = systems();
    let Some((sys, data)) = pick(data, names.len()) else {
        return;
    };
    let name = names[sys];
    let o = run(name, data);
    if !o.exempt {
        assert!(
            o.unfinished == 0 && o.wrong == 0 && o.changed_after == 0,
            "{name}: {o:?} beside the schedule {data:?}"
        );
    }
}
