//! Every endpoint of the all-reduce systems (those of `ina::SYSTEMS` the fuzz body drives,
//! `ina::fuzz::systems()`: NetReduce host and accelerator, SwitchML, SwitchML-RDMA, ATP worker,
//! switch and parameter server, ring all-reduce and its IP forwarder) under arbitrary frames, as
//! the `Endpoint` contract demands (every received byte untrusted; a malformed frame counted and
//! dropped, never a panic): the properties of `fabric::testing::properties` (fresh endpoints, a
//! run beside a hostile source ending with every worker's aggregate exact against the reference
//! sum, junk after the run changing no finished result, bounded memory) on the [`Ina`] subject.
//! A system's documented findings are its `System::fuzz_findings`: NetReduce cannot tell
//! replayed frames from fresh ones (wrong sums and stalls), and a flip outside the ICRC (the
//! Ethernet header; IPv4 TTL, TOS and checksum; BTH reserved bits) is a replay to it (that
//! property passes with the suite's fixed seed and fails with others, e.g. `RngSeed::Fixed(99)`);
//! SwitchML and ATP sum corrupted payloads (no payload integrity check); SwitchML-RDMA workers
//! take results with corrupted payloads (the switch cannot recompute an ICRC for the results it
//! writes, so workers parse them with `IcrcCheck::Ignore`).

use inabench_fabric::NodeId;
use inabench_fabric::fuzz::Kind;
use inabench_fabric::sim::LinkConfig;
use inabench_fabric::testing::properties::{Judged, Subject, hostile_run};
use inabench_fabric::testing::*;
use inabench_ina::common::sim_link;
use inabench_ina::common::{AllReduceConfig, SetupNode, reference_sum};
use inabench_ina::system;

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

/// The systems the fuzz body drives, in `ina::SYSTEMS`' order.
struct Ina;

impl Subject for Ina {
    type N = SetupNode;
    /// Every worker's result.
    type Results = Vec<Option<Vec<i32>>>;

    fn variants() -> Vec<&'static str> {
        inabench_ina::fuzz::systems().to_vec()
    }
    fn nodes(v: usize, seed: u64) -> Vec<SetupNode> {
        let name = Self::variants()[v];
        system(name)
            .expect("system")
            .build(&cfg(seed))
            .expect("build")
            .into_nodes()
    }
    fn switch(_v: usize) -> NodeId {
        cfg(1).workers as NodeId
    }
    fn link(_v: usize) -> LinkConfig {
        sim_link(&cfg(1))
    }
    fn min_corpus(_v: usize) -> usize {
        100
    }
    fn judge(
        _v: usize,
        seed: u64,
        ns: &mut Vec<SetupNode>,
        _finished: bool,
    ) -> Judged<Self::Results> {
        let c = cfg(seed);
        let want = reference_sum(c.seed, c.workers, c.elements);
        let results: Vec<Option<Vec<i32>>> = ns
            .iter()
            .filter_map(|n| match n {
                SetupNode::Worker(w) => Some(w.result()),
                _ => None,
            })
            .collect();
        let (mut malformed, mut dropped) = (0, 0);
        for n in ns.iter() {
            match n {
                SetupNode::Worker(w) => malformed += w.stats().malformed_rx,
                SetupNode::Switch(s) => dropped += s.stats().dropped,
                SetupNode::Other(_) => {}
            }
        }
        Judged {
            unfinished: results.iter().filter(|r| r.is_none()).count(),
            wrong: results
                .iter()
                .filter(|r| r.as_ref().is_some_and(|r| *r != want))
                .count(),
            results,
            note: format!("malformed at workers {malformed}, dropped at switches {dropped}"),
        }
    }
    fn finding(v: usize, mode: Mode) -> Option<&'static str> {
        let kind = match mode {
            Mode::Raw => Kind::Raw,
            Mode::Flip => Kind::Flip,
            Mode::Cut => Kind::Cut,
            Mode::Replay => Kind::Replay,
        };
        system(Self::variants()[v])
            .is_some_and(|s| s.fuzz_findings().contains(&kind))
            .then_some("a documented finding of the system (System::fuzz_findings)")
    }
    fn bounded_modes(_v: usize) -> &'static [Mode] {
        &[Mode::Raw, Mode::Flip, Mode::Cut]
    }
}

inabench_fabric::robustness_suite!(Ina);

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
        let ring = Ina::variants()
            .iter()
            .position(|n| *n == "ring_allreduce")
            .expect("the ring is fuzzed");
        let o = hostile_run::<Ina>(ring, seed, p, mode);
        assert!(o.judged.exact(), "seed {seed}: {o:?}");
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
