//! Tests of the Libra data path.

use super::reliable::Reliable;
use super::*;
use crate::aggregation;
use crate::layout::Placement;
use crate::wire::{self, Kind, Repr};
use inabench_fabric::fault::Faults;
use inabench_fabric::sim::LinkConfig;
use inabench_fabric::{Endpoint, Fabric, FabricReport, Sim, Transmit, Until};
use std::collections::HashMap;

fn run_sim(
    cfg: &Config,
    inputs: &Inputs,
    hot_params: usize,
    placement: Option<Placement>,
    costs: (u64, u64),
    faults: Faults,
) -> aggregation::Outcome {
    aggregation::run_sim(cfg, inputs, hot_params, placement, costs, faults).unwrap()
}

/// `nodes` on `sim` at 100 Gbps (no host costs, the switch node `workers`) until the
/// workers are done or `limit_ns`.
fn on_sim(
    nodes: Vec<Node>,
    workers: usize,
    faults: Faults,
    limit_ns: Nanos,
) -> (Vec<Node>, FabricReport) {
    let mut sim = Sim {
        faults,
        ..Sim::new(LinkConfig::gbps100(), workers as NodeId)
    };
    crate::run_on(&mut sim, nodes, workers, limit_ns).unwrap()
}

fn cfg(workers: usize) -> Config {
    Config {
        workers,
        libra: true,
        window: 16,
        rto_ns: 50_000,
        hot_cap: 24,
        cold_cap: 128,
        dedup_all: false,
        float: false,
    }
}

fn inputs(workers: usize, hot: u32, seed: u64) -> Inputs {
    let mut g = inabench_rng::SplitMix64::new(seed);
    (0..workers)
        .map(|_| {
            let mut h = Vec::new();
            for r in 0..hot {
                if g.chance(0.6) {
                    h.push((r, (g.next_u64() % 2001) as i32 - 1000));
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

#[test]
fn exact_sums_without_and_with_loss() {
    for (loss, seed) in [(0.0, 1), (0.02, 2), (0.1, 3)] {
        let c = cfg(6);
        let inp = inputs(6, 500, seed);
        let pl = Placement::heat(500, 48).unwrap();
        let o = run_sim(
            &c,
            &inp,
            500,
            Some(pl),
            (0, 0),
            Faults {
                loss,
                seed,
                ..Faults::default()
            },
        );
        assert!(o.finished, "loss {loss}");
        assert_eq!(o.wrong, 0, "loss {loss}");
        if loss > 0.05 {
            assert!(o.retransmissions > 0);
            assert!(o.duplicates_ignored > 0, "lost ACKs must meet the records");
        }
    }
    // PS-lite: everything through the server
    let mut c = cfg(4);
    c.libra = false;
    let inp: Inputs = inputs(4, 0, 9);
    let o = run_sim(
        &c,
        &inp,
        1,
        None,
        (0, 0),
        Faults {
            loss: 0.05,
            seed: 4,
            ..Faults::default()
        },
    );
    assert!(o.finished && o.wrong == 0);
}

#[test]
fn the_check_catches_a_wrong_sum() {
    let c = cfg(3);
    let inp = inputs(3, 100, 5);
    let nodes = build(&c, &inp, 100, None);
    let (mut nodes, _) = on_sim(nodes, 3, Faults::default(), 1_000_000_000);
    assert_eq!(check(&nodes, &inp), 0);
    if let Node::Worker(w) = &mut nodes[1]
        && let Some(v) = w.hot_result.values_mut().next()
    {
        *v += 1;
    }
    assert_eq!(check(&nodes, &inp), 1);
}

/// Float inputs: hot values are f32 bits of both signs over six orders of magnitude.
fn float_inputs(workers: usize, hot: u32, seed: u64) -> Inputs {
    let mut g = inabench_rng::SplitMix64::new(seed ^ 0xf10a7);
    inputs(workers, hot, seed)
        .into_iter()
        .map(|(h, c)| {
            let h = h
                .into_iter()
                .map(|(r, _)| {
                    let mag = 10f64.powf(g.next_f64() * 6.0 - 5.0);
                    let x = if g.chance(0.5) { -mag } else { mag } as f32;
                    (r, x.to_bits() as i32)
                })
                .collect();
            (h, c)
        })
        .collect()
}

#[test]
fn float_switch_sums_equal_the_lookup_reference_bit_for_bit() {
    for (loss, seed) in [(0.0, 11), (0.05, 12)] {
        let mut c = cfg(5);
        c.float = true;
        let inp = float_inputs(5, 400, seed);
        let nodes = build(&c, &inp, 400, Some(Placement::heat(400, 48).unwrap()));
        let faults = Faults {
            loss,
            seed,
            ..Faults::default()
        };
        let (mut nodes, _) = on_sim(nodes, 5, faults, 10_000_000_000);
        assert_eq!(check(&nodes, &inp), 0, "loss {loss}");
        let Node::Switch(sw) = &nodes[5] else {
            panic!("node 5 is the switch")
        };
        if loss > 0.0 {
            assert!(
                sw.stats.duplicates_ignored > 0,
                "lost ACKs must meet the records"
            );
        }
        // the registers are table-lookup sums: each is a fold of its pushes, in the switch's
        // order, of FloatTables::add_bits; not the integer sum of the bit patterns, and
        // within the lookup sum's error bound of the exact sum
        let reference = float_reference(&nodes).unwrap();
        let mut differs_from_int = 0;
        for (r, bits) in &reference {
            assert_eq!(sw.registers[*r as usize], *bits, "slot {r}");
            let exact: f64 = inp
                .iter()
                .flat_map(|(h, _)| h.iter())
                .filter(|(k, _)| k == r)
                .map(|(_, v)| f64::from(f32::from_bits(*v as u32)))
                .sum();
            let abs: f64 = inp
                .iter()
                .flat_map(|(h, _)| h.iter())
                .filter(|(k, _)| k == r)
                .map(|(_, v)| f64::from(f32::from_bits(*v as u32)).abs())
                .sum();
            let got = f64::from(f32::from_bits(*bits as u32));
            assert!((got - exact).abs() <= 5.0 * 2f64.powi(-11) * abs + 1e-30);
            let int: i32 = inp
                .iter()
                .flat_map(|(h, _)| h.iter())
                .filter(|(k, _)| k == r)
                .fold(0i32, |a, (_, v)| a.wrapping_add(*v));
            differs_from_int += usize::from(int != *bits);
        }
        assert!(differs_from_int > 300);
        // a worker's result the lookup sum would not give fails the check
        if let Node::Worker(w) = &mut nodes[2]
            && let Some(v) = w.hot_result.values_mut().next()
        {
            *v = (f32::from_bits(*v as u32) + 1.0).to_bits() as i32;
        }
        assert_eq!(check(&nodes, &inp), 1);
        // a push aggregated twice fails the whole check
        if let Node::Switch(sw) = &mut nodes[5] {
            let first = sw.aggregation_log[0];
            sw.aggregation_log.push(first);
        }
        assert_eq!(check(&nodes, &inp), 5);
    }
}

#[test]
fn two_worker_float_sums_match_an_order_free_reference() {
    // with two workers each slot's sum is one lookup add, which is commutative, so the
    // reference needs no log: add_bits(add_bits(+0, x0), x1) for every slot, bit for bit
    let t = crate::float::tables();
    let mut c = cfg(2);
    c.float = true;
    let inp = float_inputs(2, 600, 21);
    let pl = Placement::heat(600, 48).unwrap();
    let nodes = build(&c, &inp, 600, Some(pl));
    let faults = Faults {
        loss: 0.05,
        seed: 21,
        ..Faults::default()
    };
    let (nodes, _) = on_sim(nodes, 2, faults, 10_000_000_000);
    let mut want: HashMap<u32, u32> = HashMap::new();
    for (h, _) in &inp {
        for (k, v) in h {
            let s = want.entry(*k).or_insert(0);
            *s = t.add_bits(*s, *v as u32);
        }
    }
    let mut checked = 0;
    for n in &nodes {
        if let Node::Worker(w) = n {
            assert!(w.finished);
            for (k, v) in &w.hot_result {
                assert_eq!(*v as u32, want[k], "slot {k}");
                checked += 1;
            }
        }
    }
    assert!(checked > 500);
    assert_eq!(check(&nodes, &inp), 0);
}

#[test]
fn float_packets_recirculate_twice_a_pair() {
    let mut c = cfg(2);
    c.float = true;
    let inp = float_inputs(2, 48, 3);
    let pl = Placement::heat(48, 48).unwrap();
    let o = run_sim(&c, &inp, 48, Some(pl.clone()), (0, 0), Faults::default());
    assert!(o.finished);
    assert_eq!(o.wrong, 0);
    // every hot packet of n pairs takes 2n passes: 2n - 1 recirculations
    let pairs: usize = inp.iter().map(|(h, _)| h.len()).sum();
    let packets: usize = inp.iter().map(|(h, _)| h.len().div_ceil(24)).sum();
    let want = (2 * pairs - packets) as f64 / packets as f64;
    assert!(
        (o.recirculations_per_packet - want).abs() < 1e-9,
        "{} vs {want}",
        o.recirculations_per_packet
    );
    let mut int = c.clone();
    int.float = false;
    let o = run_sim(
        &int,
        &inputs(2, 48, 3),
        48,
        Some(pl),
        (0, 0),
        Faults::default(),
    );
    assert!(o.recirculations_per_packet < 1.0);
}

#[test]
fn float_pushes_hold_the_pipeline_for_their_passes() {
    // 24 float pairs take 48 passes of the frame at one pipeline's 1.6 Tbps; three pushes
    // back to back queue behind each other
    let mut c = cfg(2);
    c.float = true;
    let mut s = Switch::new(c, 64, None);
    let pairs: Vec<(u32, i32)> = (0..24).map(|k| (k, 1.5f32.to_bits() as i32)).collect();
    let frame = |seq| {
        wire::emit(
            0,
            2,
            &Repr {
                kind: Kind::PushHot,
                retransmit: false,
                worker: 0,
                seq,
                aux: 0,
                pairs: pairs.clone(),
            },
        )
    };
    let one = 48.0 * pass_ns(frame(0).len());
    for seq in 0..3 {
        s.handle_packet(0, 0, &frame(seq));
    }
    for k in 1..=3u32 {
        let t = s.poll_timeout().unwrap();
        assert_eq!(t, (f64::from(k) * one).ceil() as Nanos);
        assert!(s.poll_transmit(t - 1).is_none());
        assert!(s.poll_transmit(t).is_some());
    }
    // 1.5 three times by the lookup sum
    let t = crate::float::tables();
    let want = t.add(t.add(t.add(0.0, 1.5), 1.5), 1.5);
    assert_eq!(s.registers[7] as u32, want.to_bits());
}

#[test]
fn each_destination_has_its_own_timeout() {
    // the switch acknowledges in 5 us, the server in 2 ms: the server's timeout must
    // follow the server's round trips, not the switch's
    let mut r = Reliable::default();
    let mk = || Repr {
        kind: Kind::PushHot,
        retransmit: false,
        worker: 0,
        seq: 0,
        aux: 0,
        pairs: vec![],
    };
    let (sw, ps) = (4, 5);
    for i in 0..20 {
        r.add(if i % 2 == 0 { sw } else { ps }, mk());
    }
    let min = 200_000;
    let mut now = 0;
    for seq in 0..20u32 {
        assert!(r.poll(0, None, now, 64, min).is_some());
        let rtt = if seq % 2 == 0 { 5_000 } else { 2_000_000 };
        r.on_ack(seq, if seq % 2 == 0 { sw } else { ps }, now + rtt);
        now += 10_000;
    }
    assert!(r.all_acked());
    assert_eq!(
        r.rto(min, sw),
        min,
        "the switch's round trips are below the floor"
    );
    assert!(r.rto(min, ps) >= 2_000_000, "{}", r.rto(min, ps));
    // a timeout backs off only the destination whose packet timed out
    r.add(ps, mk());
    assert!(r.poll(0, None, now, 64, min).is_some());
    let before = r.rto(min, ps);
    r.on_timeout(now + 100_000_000, min);
    assert_eq!(r.rto(min, ps), 2 * before);
    assert_eq!(r.rto(min, sw), min);
}

#[test]
fn a_window_expiring_packet_by_packet_doubles_the_timeout_once() {
    // 64 pushes to the server leave 1 us apart and none is acknowledged (the server's queue
    // is longer than the timeout): their deadlines expire one by one, 64 expiries of one
    // timer period, which double the timeout once (RFC 6298 5.5), not 64 times
    let mut r = Reliable::default();
    let mk = || Repr {
        kind: Kind::PushCold,
        retransmit: false,
        worker: 0,
        seq: 0,
        aux: 0,
        pairs: vec![],
    };
    let ps = 5;
    for _ in 0..64 {
        r.add(ps, mk());
    }
    let min = 200_000;
    for i in 0..64u64 {
        assert!(r.poll(0, None, i * 1_000, 64, min).is_some());
    }
    // expire every deadline up to `until`, resending at once, as the endpoints do
    let run = |r: &mut Reliable, until: Nanos| {
        while let Some(t) = r.timeout().filter(|t| *t <= until) {
            r.on_timeout(t, min);
            while r.poll(0, None, t, 64, min).is_some() {}
        }
    };
    run(&mut r, 300_000);
    assert_eq!(r.retransmissions, 64);
    assert_eq!(r.rto(min, ps), 2 * min, "one doubling for one period");
    // the retransmissions, sent at the doubled timeout, expire: one more doubling
    assert_eq!(r.timeout(), Some(200_000 + 2 * min));
    run(&mut r, 700_000);
    assert_eq!(r.retransmissions, 128);
    assert_eq!(r.rto(min, ps), 4 * min);
    // a message sent once and acknowledged is a fresh sample (Karn's rule): the backoff
    // collapses
    r.add(ps, mk());
    assert!(r.poll(0, None, 1_000_000, 128, min).is_some());
    r.on_ack(64, ps, 1_050_000);
    assert_eq!(r.rto(min, ps), min);
    // the 64 deadlines set before that reset expire: no doubling of the fresh estimate;
    // their resends, timed in the new period, double it once when they expire
    run(&mut r, 1_500_000);
    assert_eq!(r.retransmissions, 192);
    assert_eq!(r.rto(min, ps), min);
    run(&mut r, 1_800_000);
    assert_eq!(r.retransmissions, 256);
    assert_eq!(r.rto(min, ps), 2 * min);
}

#[test]
fn an_ack_from_the_destination_restarts_its_timer() {
    // RFC 6298 5.3: while the server acknowledges other pushes, a push waiting in its queue
    // is not timed out; once it acknowledges nothing for one timeout, the push is resent
    let mut r = Reliable::default();
    let mk = || Repr {
        kind: Kind::PushCold,
        retransmit: false,
        worker: 0,
        seq: 0,
        aux: 0,
        pairs: vec![],
    };
    let (ps, min) = (5, 200_000);
    for _ in 0..3 {
        r.add(ps, mk());
    }
    for _ in 0..3 {
        assert!(r.poll(0, None, 0, 64, min).is_some());
    }
    // first sample 150 us: SRTT 150, RTTVAR 75, RTO 450 us
    r.on_ack(0, ps, 150_000);
    assert_eq!(r.rto(min, ps), 450_000);
    r.on_timeout(200_000, min);
    assert_eq!(r.retransmissions, 0);
    assert!(
        r.poll(0, None, 200_000, 64, min).is_none(),
        "nothing resent"
    );
    assert_eq!(r.timeout(), Some(150_000 + 450_000), "restarted at the ACK");
    // second sample 500 us: RTTVAR 143.75, SRTT 193.75, RTO 768.75 us
    r.on_ack(1, ps, 500_000);
    r.on_timeout(600_000, min);
    assert_eq!(r.timeout(), Some(500_000 + 768_750));
    // no ACK since: the push is lost; one resend, one doubling
    r.on_timeout(1_268_750, min);
    assert!(r.poll(0, None, 1_268_750, 64, min).is_some());
    assert_eq!(r.retransmissions, 1);
    assert_eq!(r.rto(min, ps), 2 * 768_750);
}

fn push(seq: u32, retransmit: bool) -> Vec<u8> {
    wire::emit(
        0,
        2,
        &Repr {
            kind: Kind::PushHot,
            retransmit,
            worker: 0,
            seq,
            aux: 0,
            pairs: vec![(3, 10), (5, -4)],
        },
    )
}

#[test]
fn repeat_write_error_is_rejected() {
    // Fig. 10: the switch aggregated the push, its ACK was lost, the worker resends it
    // with the retransmit flag: the records reject the second write, the ACK goes out again
    let mut s = Switch::new(cfg(2), 8, None);
    s.handle_packet(0, 0, &push(0, false));
    // the ACK leaves when the pipeline pass is over
    assert!(s.poll_transmit(0).is_none());
    let t = s.poll_timeout().expect("the ACK is held for the pass");
    assert_eq!(t, pass_ns(push(0, false).len()).ceil() as Nanos);
    assert!(s.poll_transmit(t).is_some(), "ACK");
    s.handle_packet(10, 0, &push(0, true));
    let again = s.poll_transmit(20).expect("the resend is acknowledged");
    let (_, _, r) = wire::parse(&again.bytes).unwrap();
    assert_eq!((r.kind, r.seq), (Kind::Ack, 0));
    assert_eq!((s.registers[3], s.registers[5]), (10, -4));
    assert_eq!(s.stats.duplicates_ignored, 1);
}

#[test]
fn unflagged_duplicates_double_count_unless_every_push_is_checked() {
    // the paper checks only flagged packets: a copy the network duplicated is added twice
    let mut s = Switch::new(cfg(2), 8, None);
    s.handle_packet(0, 0, &push(0, false));
    s.handle_packet(1, 0, &push(0, false));
    assert_eq!(
        s.registers[3], 20,
        "the paper's rule double-counts a duplicate"
    );
    let mut c = cfg(2);
    c.dedup_all = true;
    let mut s = Switch::new(c, 8, None);
    s.handle_packet(0, 0, &push(0, false));
    s.handle_packet(1, 0, &push(0, false));
    assert_eq!(s.registers[3], 10);
    // and end to end under duplication
    let mut c = cfg(4);
    c.dedup_all = true;
    let inp = inputs(4, 300, 8);
    let o = run_sim(
        &c,
        &inp,
        300,
        None,
        (0, 0),
        Faults {
            duplicate: 0.05,
            seed: 8,
            ..Faults::default()
        },
    );
    assert!(o.finished && o.wrong == 0);
}

#[test]
fn malformed_frames_are_counted_not_fatal() {
    let mut s = Switch::new(cfg(2), 8, None);
    s.handle_packet(0, 0, &[1, 2, 3]);
    let mut bad = push(0, false);
    let l = bad.len();
    bad.truncate(l - 3);
    s.handle_packet(0, 0, &bad);
    // a rank beyond the registers
    let big = wire::emit(
        0,
        2,
        &Repr {
            kind: Kind::PushHot,
            retransmit: false,
            worker: 0,
            seq: 1,
            aux: 0,
            pairs: vec![(99, 1)],
        },
    );
    s.handle_packet(0, 0, &big);
    assert_eq!(s.stats.malformed, 3);
    assert!(s.registers.iter().all(|v| *v == 0));
}

#[test]
fn failover_mid_iteration_keeps_exact_sums() {
    let workers = 4;
    let c = cfg(workers);
    let inp = inputs(workers, 2000, 12);
    let nodes: Vec<StopAt40> = build(&c, &inp, 2000, None)
        .into_iter()
        .map(StopAt40)
        .collect();
    // run until the switch has aggregated some, not all, of the hot pushes: the switch is
    // the one node counted, done at 40 records
    let until = Until {
        counted: (0..nodes.len()).map(|i| i == workers).collect(),
        limit_ns: 1_000_000_000,
    };
    let mut sim = Sim::new(LinkConfig::gbps100(), workers as NodeId);
    let (nodes, _) = sim.run(nodes, &until).unwrap();
    let mut nodes: Vec<Node> = nodes.into_iter().map(|n| n.0).collect();
    let Node::Switch(old) = &mut nodes[workers] else {
        panic!("switch");
    };
    let mid = old.records.len();
    assert!(mid >= 40 && mid < inp.iter().map(|(h, _)| h.len().div_ceil(24)).sum::<usize>());
    // the switch fails: no more heartbeat replies; the controller notices and migrates
    old.failed = true;
    let mut ctl = Controller::new(10_000, 3);
    ctl.on_reply(0);
    assert!(!ctl.failing(20_000));
    assert!(ctl.failing(40_000));
    let mut standby = Switch::new(c.clone(), 2000, None);
    ctl.migrate(old, &mut standby);
    nodes[workers] = Node::Switch(Box::new(standby));
    // frames in flight at the failure are lost; workers time out and resend (flagged),
    // and the migrated records keep the standby from adding any push twice
    let (nodes, rep) = on_sim(nodes, workers, Faults::default(), 1_000_000_000);
    assert!(rep.finished);
    assert_eq!(check(&nodes, &inp), 0);
    let Node::Switch(s) = &nodes[workers] else {
        panic!("switch")
    };
    assert!(s.records.len() > mid);
}

/// A node of a run stopped when the switch holds 40 records: the switch's `is_done` says
/// so (the one node an [`Until`] then counts); every other call is the node's own.
struct StopAt40(Node);

impl Endpoint for StopAt40 {
    fn id(&self) -> NodeId {
        self.0.id()
    }
    fn handle_packet(&mut self, now: Nanos, from: NodeId, frame: &[u8]) {
        self.0.handle_packet(now, from, frame)
    }
    fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        self.0.poll_transmit(now)
    }
    fn poll_timeout(&self) -> Option<Nanos> {
        self.0.poll_timeout()
    }
    fn handle_timeout(&mut self, now: Nanos) {
        self.0.handle_timeout(now)
    }
    fn is_done(&self) -> bool {
        matches!(&self.0, Node::Switch(s) if s.records.len() >= 40)
    }
}
