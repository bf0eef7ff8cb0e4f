//! The parser rejects malformed packets with a typed error, and the endpoints count and drop
//! them.

use inabench_fabric::Endpoint;
use inabench_luwu::packet::{self, Kind, PacketError, Repr};
use inabench_luwu::run::{self, Job, Node};
use inabench_luwu::transport::Config;
use proptest::prelude::*;

fn grad(values: &[i32]) -> Vec<u8> {
    packet::frame(
        0,
        2,
        Repr {
            kind: Kind::Grad,
            src: 0,
            max: false,
            seq: 1,
            credit: 0,
            count: 0,
        },
        values,
    )
}

const H: usize = packet::FRAME_HEADER_LEN - packet::HEADER_LEN;

#[test]
fn each_malformation_has_its_error() {
    let good = grad(&[1, 2, 3, 4]);
    assert!(packet::parse(&good).is_ok());
    let mut f = good.clone();
    f[H] = 0x4d;
    assert_eq!(packet::parse(&f), Err(PacketError::Magic(0x4d)));
    let mut f = good.clone();
    f[H + 1] = 9;
    assert_eq!(packet::parse(&f), Err(PacketError::Kind(9)));
    let mut f = good.clone();
    f[H + 3] = 2;
    assert_eq!(packet::parse(&f), Err(PacketError::Flags(2)));
    let mut f = good.clone();
    f[H + 15] = 1;
    assert_eq!(packet::parse(&f), Err(PacketError::Reserved(1)));
    let mut f = good.clone();
    f[H + 13] = 5; // count 5, payload of 4 values
    assert_eq!(
        packet::parse(&f),
        Err(PacketError::Count {
            count: 5,
            bytes: 16
        })
    );
    let mut f = good.clone();
    f[H + 8] = 1; // a credit in a data packet
    assert_eq!(packet::parse(&f), Err(PacketError::Shape));
    let mut f = good.clone();
    f[H - 5] = 1; // UDP destination port
    assert!(matches!(packet::parse(&f), Err(PacketError::Port(_))));
    // a heartbeat that carries values
    let mut hb = packet::frame(
        0,
        2,
        Repr {
            kind: Kind::GradHeartbeat,
            src: 0xff,
            max: false,
            seq: 0,
            credit: 3,
            count: 0,
        },
        &[7],
    );
    assert_eq!(packet::parse(&hb), Err(PacketError::Shape));
    hb.truncate(20);
    assert!(matches!(packet::parse(&hb), Err(PacketError::Wire(_))));
    // truncated LuWu header inside a well-formed UDP datagram is caught by the lower layers'
    // lengths or by ours
    for cut in 0..good.len() {
        assert!(packet::parse(&good[..cut]).is_err(), "{cut}");
    }
}

#[test]
fn endpoints_count_and_drop_malformed_frames() {
    let cfg = Config {
        workers: 2,
        values_per_packet: 4,
        window: 8,
        line_rate_bps: 100e9,
        heartbeat_ns: 1000,
        resend_timeout_ns: 1_000_000,
        stagger_ns: 1000,
        consumer_rate: vec![1.0; 2],
        agg_consumer_rate: 1.0,
    };
    let job = Job {
        grads: vec![vec![1; 8], vec![2; 8]],
        max: false,
        params: vec![3; 8],
    };
    let mut nodes = run::build(&cfg, &job);
    let mut bad = grad(&[1, 2, 3, 4]);
    bad[H] = 0;
    for n in nodes.iter_mut() {
        n.handle_packet(0, 0, &bad);
        n.handle_packet(0, 0, &[1, 2, 3]);
    }
    for n in &nodes {
        match n {
            Node::Worker(nic) | Node::Other(nic) => assert_eq!(nic.stats.malformed_rx, 2),
            Node::Switch(s) => assert_eq!(s.stats.malformed, 2),
        }
    }
    // a gradient claiming to come from worker 1 on worker 0's port is dropped as misdirected
    let mut nodes = run::build(&cfg, &job);
    let spoof = packet::frame(
        0,
        2,
        Repr {
            kind: Kind::Grad,
            src: 1,
            max: false,
            seq: 0,
            credit: 0,
            count: 0,
        },
        &[5; 4],
    );
    nodes[2].handle_packet(0, 0, &spoof);
    if let Node::Switch(s) = &nodes[2] {
        assert_eq!(s.stats.misdirected, 1);
        assert_eq!(s.stats.aggregates_out, 0);
    }
}

proptest! {
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _ = packet::parse(&bytes);
    }

    #[test]
    fn flipped_bytes_parse_or_fail_cleanly(at in 0usize..60, v in any::<u8>()) {
        let mut f = grad(&[9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 1]);
        let at = at % f.len();
        f[at] = v;
        if let Ok((h, vals)) = packet::parse(&f) {
            prop_assert_eq!(usize::from(h.count), vals.len());
        }
    }
}
