//! LuWu's endpoints in runs with arbitrary frames beside valid traffic (`malformed.rs` checks
//! the parser and one frame at a time; this drives whole jobs), as the `Endpoint` contract
//! demands (every received byte untrusted; a malformed frame counted and dropped, never a
//! panic): the WorkerNIC and AggNIC transports and the SmartSwitch of a push/pull job (sum and
//! max), and ZeRO-3's ring reduce-scatter and all-gather members, as the [`Luwu`] subject of
//! `fabric::testing::properties` (fresh endpoints; a run beside a hostile source ending exact,
//! `run::outcome`'s `exact` for a push/pull job, a ring member's vector equal to a clean run's,
//! and junk after the run changing no result; bounded memory).
//!
//! The ZeRO-3 ring runs through a `fabric::Forwarder` routing by the IPv4 destination's last
//! byte (`zero3`'s own has no public constructor), so its switch is not under test here.

use inabench_fabric::testing::properties::{Judged, Subject, hostile_run};
use inabench_fabric::testing::*;
use inabench_fabric::{Endpoint, Forwarder, Nanos, NodeId, Route};
use inabench_luwu::run::{self, Job};
use inabench_luwu::transport::Config;
use inabench_luwu::zero3::{Op, RingNode};
use inabench_rng::SplitMix64;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

const WORKERS: usize = 3;
const VALUES: usize = 96;

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

/// A push/pull job's node, a ring member or the ring's forwarder.
type Node = inabench_fabric::Node<run::Node, RingNode, Forwarder>;

fn nodes(sys: usize, seed: u64) -> Vec<Node> {
    let j = job(sys, seed);
    if sys < 2 {
        return run::build(&cfg(), &j)
            .into_iter()
            .map(Node::Worker)
            .collect();
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
        .map(|(r, d)| Node::Switch(RingNode::new(r, WORKERS, op, d, 4)))
        .collect();
    let id = WORKERS as NodeId;
    // Ethernet (14) then the IPv4 destination's last byte (node id + 1), no other check
    let route = Route::By(|_, f| {
        (f.len() >= 34 && f[12..14] == [8, 0]).then(|| u32::from(f[33]).wrapping_sub(1))
    });
    v.push(Node::Other(Forwarder::new(id, id, route)));
    v
}

/// The ring members' vectors.
fn ring_data(ns: &[Node]) -> Vec<Vec<i32>> {
    ns.iter()
        .filter_map(|n| n.switch().map(|r| r.data.clone()))
        .collect()
}

/// The ring members' vectors after a clean run.
fn clean(sys: usize, seed: u64) -> Vec<Vec<i32>> {
    type Cleans = HashMap<(usize, u64), Vec<Vec<i32>>>;
    static C: OnceLock<Mutex<Cleans>> = OnceLock::new();
    let m = C.get_or_init(Default::default);
    if let Some(v) = m.lock().expect("clean lock").get(&(sys, seed)) {
        return v.clone();
    }
    let c = cfg();
    let mut g = Group::builder()
        .link(run::sim_link(&c))
        .switch(c.switch_id())
        .count_all()
        .limit_ns(10_000_000_000)
        .build(nodes(sys, seed));
    assert!(g.drive());
    let v = ring_data(&g.into_nodes());
    m.lock().expect("clean lock").insert((sys, seed), v.clone());
    v
}

/// The systems: 0 and 1 a push/pull job summing and taking the maximum, 2 and 3 ZeRO-3's ring
/// reduce-scatter and all-gather.
struct Luwu;

impl Subject for Luwu {
    type N = Node;
    /// Every pulled parameter vector and the AggNIC's aggregate, or the ring members' vectors.
    type Results = Vec<Vec<i32>>;

    fn variants() -> Vec<&'static str> {
        vec![
            "push_pull_sum",
            "push_pull_max",
            "zero3_reduce_scatter",
            "zero3_all_gather",
        ]
    }
    fn nodes(v: usize, seed: u64) -> Vec<Node> {
        nodes(v, seed)
    }
    fn switch(_v: usize) -> NodeId {
        cfg().switch_id()
    }
    fn link(_v: usize) -> inabench_fabric::sim::LinkConfig {
        run::sim_link(&cfg())
    }
    fn limit_ns(_v: usize) -> Nanos {
        20_000_000
    }
    fn judge(v: usize, seed: u64, ns: &mut Vec<Node>, finished: bool) -> Judged<Vec<Vec<i32>>> {
        let malformed: u64 = ns
            .iter()
            .map(|n| match n {
                Node::Worker(run::Node::Worker(x) | run::Node::Other(x)) => x.stats.malformed_rx,
                Node::Worker(run::Node::Switch(s)) => s.stats.malformed,
                Node::Switch(r) => r.malformed,
                Node::Other(_) => 0,
            })
            .sum();
        let (exact, results) = if v < 2 {
            let job_nodes: Vec<run::Node> = std::mem::take(ns)
                .into_iter()
                .map(|n| n.into_worker().expect("a push/pull job has only job nodes"))
                .collect();
            let o = run::outcome(&cfg(), &job(v, seed), &job_nodes, finished, 0);
            *ns = job_nodes.into_iter().map(Node::Worker).collect();
            let mut r = o.pulled;
            r.push(o.aggregate);
            (o.exact, r)
        } else {
            let r = ring_data(ns);
            (finished && r == clean(v, seed), r)
        };
        Judged {
            unfinished: usize::from(!finished),
            wrong: usize::from(!exact),
            results,
            note: format!("malformed {malformed}"),
        }
    }
    fn finding(v: usize, mode: Mode) -> Option<&'static str> {
        match (v, mode) {
            // the LuWu header and values carry no checksum the switch or the NICs verify, so a
            // flipped value is aggregated (or drained) as it is
            (0 | 1, Mode::Flip) => {
                Some("finding: LuWu takes corrupted values (no payload integrity check)")
            }
            // a heartbeat's Ack and Credit carry no epoch and "only ever grow", so a stale or
            // early copy (a replay, or a heartbeat cut inside its Ethernet padding, which parses
            // the same) raises the sender's credit past the receiver's buffer and acknowledges
            // packets the receiver then drops as overflow: they are never resent and the job
            // stalls
            (0 | 1, Mode::Cut | Mode::Replay) => {
                Some("finding: replayed heartbeats (Ack/Credit without an epoch) stall the job")
            }
            (2 | 3, Mode::Flip) => Some(
                "finding: ZeRO-3 ring members take corrupted values (no checksum in the model)",
            ),
            _ => None,
        }
    }
}

inabench_fabric::robustness_suite!(Luwu);

// ---- regressions ----

/// Found here: a ZeRO-3 ring member added in every copy of a packet (and packets from any rank),
/// so a replayed packet was summed twice (and pushed the step's count past its packets: the
/// member never finished); after the run, replays still changed its vector. It now drops a
/// second copy (counted in `duplicates`) and packets not from its ring predecessor.
#[test]
fn zero3_ring_members_drop_replayed_packets() {
    for sys in [2, 3] {
        let o = hostile_run::<Luwu>(sys, 1, 0.01, Mode::Replay);
        assert!(
            o.finished && o.judged.exact() && !o.changed_after,
            "{}: {o:?}",
            Luwu::variants()[sys]
        );
    }
    let corpus = properties::corpus::<Luwu>(2, 1);
    let mut ns = nodes(2, 1);
    // rank 1 receives from rank 0: the first frame 0 sends, twice
    let first = corpus
        .iter()
        .find(|f| f.len() > 33 && f[33] == 2)
        .expect("a frame to rank 1");
    let Node::Switch(r) = &mut ns[1] else {
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
