//! The endpoint fuzz body of LuWu's push/pull job (the WorkerNIC and AggNIC transports and the
//! SmartSwitch, sum and max): the cargo-fuzz target `luwu_endpoints` (fuzz/) and the stable
//! `tests/fuzz_smoke.rs` call [`endpoints`].
//!
//! The input's first byte picks sum or max; the rest is a schedule of hostile frames
//! ([`inabench_fabric::fuzz::schedule`]: the fuzzer's bytes, or a clean run's frames flipped, cut
//! or replayed, from any neighbour id, before any real frame of any node or after the run)
//! handed to the nodes of a job on the sim fabric. Checked: no panic; no flood (a finished node
//! answers a frame with at most one frame per node of the run); and, where the schedule holds
//! only the fuzzer's own bytes (flips, cuts and replays are documented findings, see
//! [`FINDINGS`]), the job finishes exact ([`run::outcome`]: every pulled parameter and the
//! AggNIC's aggregate bit for bit, each packet drained once) and frames after the run change no
//! result. Memory is bounded by libFuzzer's RSS limit here; the heap-growth property is
//! `tests/arbitrary_frames.rs`'s.

use crate::run::{self, Job};
use crate::transport::Config;
use inabench_fabric::Endpoint;
use inabench_fabric::fuzz::{
    Corpora, Corpus, Kind, addressed_run, cached, deliver, pick, schedule, scheduled, sim_fabric,
    tapped_run,
};
use inabench_fabric::sim::SimFabric;
use inabench_rng::SplitMix64;

const WORKERS: usize = 3;
const VALUES: usize = 48;

/// The jobs, by the first byte of the input.
pub const SYSTEMS: [&str; 2] = ["push_pull_sum", "push_pull_max"];

/// The kinds of hostile frame a push/pull job is documented to be fooled by (the ignored
/// properties of `tests/arbitrary_frames.rs`): no checksum over the values (a flip is taken);
/// a heartbeat's Ack and Credit carry no epoch, so a replayed heartbeat (or one cut inside its
/// Ethernet padding, which parses the same) stalls the job.
pub const FINDINGS: &[Kind] = &[Kind::Flip, Kind::Cut, Kind::Replay];

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

fn job(sys: usize) -> Job {
    let mut g = SplitMix64::new(1);
    let mut values = || -> Vec<i32> {
        (0..VALUES)
            .map(|_| (g.next_u64() >> 40) as i32 - (1 << 23))
            .collect()
    };
    Job {
        grads: (0..WORKERS).map(|_| values()).collect(),
        max: sys == 1,
        params: values(),
    }
}

fn fabric<N: Endpoint>(nodes: Vec<N>) -> SimFabric<N> {
    let c = cfg();
    sim_fabric(nodes, c.switch_id(), run::sim_link(&c))
}

fn all_done<N: Endpoint>(n: &[N]) -> bool {
    n.iter().all(Endpoint::is_done)
}

/// Every frame of a clean run of `sys`, in the order put on links (made once per process).
fn corpus(sys: usize) -> Corpus {
    static C: Corpora<usize> = Corpora::new();
    cached(&C, sys, || {
        let j = job(sys);
        let mut f = fabric(run::build(&cfg(), &j));
        let (finished, frames) = tapped_run(&mut f, 10_000_000_000, all_done);
        let o = run::outcome(&cfg(), &j, f.nodes(), finished, 0);
        assert!(o.exact, "{}: the clean run is exact", SYSTEMS[sys]);
        frames
    })
}

/// The seed inputs of the cargo-fuzz target `luwu_endpoints` (`fuzz/seeds/luwu_endpoints/`):
/// [`inabench_fabric::fuzz::seeds`] from each job's clean run, named `<job>-<kind>`.
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for (pick, name) in SYSTEMS.iter().enumerate() {
        let ns = run::build(&cfg(), &job(pick));
        let n = ns.len();
        let mut f = fabric(ns);
        let (finished, tapped) = addressed_run(&mut f, 10_000_000_000, all_done);
        assert!(finished, "{name}: the clean run finishes");
        for (kind, input) in inabench_fabric::fuzz::seeds(pick as u8, n, &tapped) {
            out.push((format!("{name}-{kind}"), input));
        }
    }
    out
}

/// What a job beside a schedule came to.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Outcome {
    pub finished: bool,
    /// [`run::outcome`]'s `exact`.
    pub exact: bool,
    /// Result vectors (each worker's pulled parameters, the aggregate) that frames after the
    /// run changed.
    pub changed_after: usize,
    /// Hostile frames handed over (during and after the run).
    pub injected: u64,
    /// Whether the schedule holds a kind of frame in [`FINDINGS`].
    pub exempt: bool,
}

fn vectors(o: run::Outcome) -> Vec<Vec<i32>> {
    let mut v = o.pulled;
    v.push(o.aggregate);
    v
}

/// Run job `sys` beside the schedule `data` spells and say what came of it (panics on a flood).
pub fn run(sys: usize, data: &[u8]) -> Outcome {
    let corpus = corpus(sys);
    let c = cfg();
    let j = job(sys);
    let ns = run::build(&c, &j);
    let n = ns.len();
    let plan = schedule(data, n, &corpus);
    let mut f = fabric(scheduled(ns, &plan));
    let finished = f.run_until(20_000_000, all_done).finished;
    let mut o = Outcome {
        finished,
        exempt: plan.iter().any(|s| FINDINGS.contains(&s.kind)),
        ..Outcome::default()
    };
    let mut nodes = Vec::with_capacity(n);
    let mut late = Vec::with_capacity(n);
    for s in f.into_nodes() {
        let (node, rest, injected) = s.into_parts();
        o.injected += injected + rest.len() as u64;
        nodes.push(node);
        late.push(rest);
    }
    let before = run::outcome(&c, &j, &nodes, finished, 0);
    o.exact = before.exact;
    let before = vectors(before);
    for (node, rest) in nodes.iter_mut().zip(&late) {
        let sent = deliver(node, 6_000_000_000, rest);
        assert!(
            sent <= rest.len() * n,
            "{} node {}: {sent} frames sent for {} frames after the run",
            SYSTEMS[sys],
            node.id(),
            rest.len()
        );
    }
    let after = vectors(run::outcome(&c, &j, &nodes, finished, 0));
    o.changed_after = before.iter().zip(&after).filter(|(b, a)| b != a).count();
    o
}

/// The body: the first byte picks the job, the rest is the schedule; an unfinished or inexact
/// job, or a result changed after the run, fails unless the schedule holds a kind of frame in
/// [`FINDINGS`].
pub fn endpoints(data: &[u8]) {
    let Some((sys, data)) = pick(data, SYSTEMS.len()) else {
        return;
    };
    let o = run(sys, data);
    if !o.exempt {
        assert!(
            o.finished && o.exact && o.changed_after == 0,
            "{}: {o:?} beside the schedule {data:?}",
            SYSTEMS[sys]
        );
    }
}
