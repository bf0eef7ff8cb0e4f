//! One lost push costs about one retransmission timeout, not hundreds of milliseconds.
//!
//! Eight workers push hot pairs to the switch and cold pairs to the parameter server on the
//! `sim` fabric (100 Gbps, 0.5 us links), with per-frame host costs of 1.5 us a worker frame and
//! 3.5 us a server frame (fixed test inputs of the order the old run-time calibration measured for
//! our code on this host): the server's queue of 8 x 64 pushes makes its round trips
//! milliseconds, far above the 200 us floor of the timeout. One first copy of a cold push, after
//! the first windows, is dropped on its way to the server (where it leaves the switch:
//! `Group::drop_nth`). The sender times each packet (Libra,
//! Sec. 3.6) with RFC 6298's timeout per destination. Before 2026-11-25 the timeout doubled on
//! every packet's expiry: the first windows, expiring one packet after the other behind the
//! server's queue, backed it off 2^10 times, and the dropped push waited ~450 ms for its resend
//! (iteration 17.5 ms -> 462 ms).
//!
//! The checks: every worker's sums are exact with and without the loss; the dropped push's
//! resend reaches the server within one timeout of the drop, bounded by RFC 6298's own formula on
//! the round trips of the lossless run (first copy to ACK; SRTT + 4 RTTVAR <= 5 x the largest
//! round trip, doubled once for the expiry: 10 x the largest round trip); and the iteration with
//! the loss is longer than without by no more than that bound.

use inabench_fabric::sim::{LinkConfig, NodeConfig};
use inabench_fabric::testing::Group;
use inabench_fabric::{Nanos, NodeId};
use inabench_libra::layout::Placement;
use inabench_libra::proto::{self, Config, Inputs, Node};
use inabench_libra::wire::{self, Kind};
use inabench_rng::SplitMix64;
use std::collections::HashMap;

const WORKERS: usize = 8;
const HOT: usize = 2_000;
const SWITCH: NodeId = WORKERS as NodeId;
const SERVER: NodeId = WORKERS as NodeId + 1;

fn cfg() -> Config {
    Config {
        workers: WORKERS,
        libra: true,
        window: 64,
        rto_ns: 200_000,
        hot_cap: 24,
        cold_cap: 128,
        dedup_all: false,
        float: false,
    }
}

fn inputs() -> Inputs {
    let mut g = SplitMix64::derive(7, "libra single loss inputs");
    (0..WORKERS)
        .map(|_| {
            let mut h = Vec::new();
            for r in 0..HOT as u32 {
                if g.chance(0.5) {
                    h.push((r, (g.next_u64() % 2001) as i32 - 1000));
                }
            }
            let mut c = Vec::new();
            for k in 0..40_000u32 {
                if g.chance(0.4) {
                    c.push((100_000 + k, (g.next_u64() % 2001) as i32 - 1000));
                }
            }
            (h, c)
        })
        .collect()
}

struct Run {
    duration: Nanos,
    wrong: usize,
    max_rtt: Nanos,
    dropped: Option<(u16, u32, Nanos)>,
    resent_at: Option<Nanos>,
    retransmissions: u64,
}

/// A cold push to the server.
fn cold_push(bytes: &[u8]) -> Option<(u16, u32, bool)> {
    let (_, dst, r) = wire::parse(bytes).ok()?;
    (dst == SERVER && r.kind == Kind::PushCold).then_some((r.worker, r.seq, r.retransmit))
}

/// The run, with the `drop`-th first copy of a cold push dropped on its way from the switch to
/// the server. Its workers' cold pushes' round trips (first copy sent to its ACK back) and the
/// resend of the dropped push are read from what the group saw.
fn run(drop: Option<u64>) -> Run {
    let c = cfg();
    let inp = inputs();
    let pl = Placement::heat(HOT, 48).expect("placement");
    let nodes = proto::build(&c, &inp, HOT, Some(pl));
    let cost = |ns| NodeConfig {
        rx_cost_ns: ns,
        tx_cost_ns: ns,
    };
    let mut nc = vec![cost(1_500); WORKERS];
    nc.push(cost(0));
    nc.push(cost(3_500));
    let mut g = Group::builder()
        .link(LinkConfig::gbps100())
        .switch(SWITCH)
        .costs(nc)
        .workers(WORKERS)
        .limit_ns(120_000_000_000)
        .build(nodes);
    let lost = drop.map(|n| {
        g.drop_nth(
            |f| f.to == SERVER && cold_push(f.bytes).is_some_and(|(_, _, retx)| !retx),
            n,
        )
    });
    // the workers' cold pushes as they leave, and the server's ACKs as they reach the workers
    let trips = g.watch(|f| {
        let w = |n: NodeId| (n as usize) < WORKERS;
        (w(f.from) && f.to == SWITCH && cold_push(f.bytes).is_some())
            || (f.from == SWITCH
                && w(f.to)
                && wire::parse(f.bytes)
                    .is_ok_and(|(src, _, r)| src == SERVER && r.kind == Kind::Ack))
    });
    let at_server = g.watch(|f| f.to == SERVER && cold_push(f.bytes).is_some());
    g.drive_bounded().expect("the iteration did not finish");
    // from the first copy: without loss, the first ACK is the first copy's
    let mut sent: Vec<HashMap<u32, Nanos>> = vec![HashMap::new(); WORKERS];
    let mut max_rtt = 0;
    for s in g.seen(trips) {
        let Ok((_, _, r)) = wire::parse(&s.bytes) else {
            continue;
        };
        if s.leaving && r.kind == Kind::PushCold {
            sent[s.from as usize].entry(r.seq).or_insert(s.at);
        } else if !s.leaving
            && r.kind == Kind::Ack
            && let Some(t) = sent[s.to as usize].remove(&r.seq)
        {
            max_rtt = max_rtt.max(s.at - t);
        }
    }
    let dropped = lost.and_then(|l| {
        let d = g.seen(l).into_iter().next()?;
        let (w, seq, _) = cold_push(&d.bytes)?;
        Some((w, seq, d.at))
    });
    let resent_at = dropped.and_then(|(w, seq, at)| {
        g.seen(at_server)
            .into_iter()
            .filter(|s| !s.leaving && s.at > at)
            .find(|s| cold_push(&s.bytes).is_some_and(|(pw, ps, _)| (pw, ps) == (w, seq)))
            .map(|s| s.at)
    });
    let nodes: Vec<Node> = g.into_nodes();
    let (mut start, mut end, mut retx) = (Nanos::MAX, 0, 0);
    for n in &nodes {
        if let Node::Worker(w) = n {
            start = start.min(w.stats.start_ns);
            end = end.max(w.stats.end_ns);
            retx += w.stats.retransmissions;
        }
    }
    Run {
        duration: end - start,
        wrong: proto::check(&nodes, &inp),
        max_rtt,
        dropped,
        resent_at,
        retransmissions: retx,
    }
}

#[test]
fn one_lost_push_costs_about_one_timeout() {
    let base = run(None);
    assert_eq!(base.wrong, 0);
    // after the first windows (8 x 64 first copies), up to near the last of the ~1,000
    for nth in [600, 800, 950] {
        let lossy = run(Some(nth));
        assert_eq!(lossy.wrong, 0);
        let (w, seq, at) = lossy.dropped.expect("a push was dropped");
        let resent = lossy.resent_at.expect("the dropped push was resent");
        let bound = 10 * base.max_rtt.max(cfg().rto_ns);
        eprintln!(
            "drop #{nth} (worker {w} seq {seq}) at {at} ns: resend after {} ns; iteration {} -> {} ns; bound {bound} ns (largest round trip {} ns); retransmissions {} -> {}",
            resent - at,
            base.duration,
            lossy.duration,
            base.max_rtt,
            base.retransmissions,
            lossy.retransmissions
        );
        assert!(resent - at <= bound, "the resend waited {} ns", resent - at);
        assert!(
            lossy.duration <= base.duration + bound,
            "one loss made the iteration {} ns longer",
            lossy.duration - base.duration
        );
    }
}
