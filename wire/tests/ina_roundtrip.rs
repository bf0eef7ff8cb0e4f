//! The headers of Libra, P4SGD, LuWu and ALEPH: `Repr -> emit -> parse == Repr`,
//! `emit(parse(x)) == x` for every valid `x`, and parsing arbitrary bytes never panics.

use inabench_wire::Error;
use inabench_wire::ina::{aleph, libra, luwu, p4sgd};
use proptest::prelude::*;

fn libra_packet() -> impl Strategy<Value = (libra::Repr, Vec<(u32, i32)>)> {
    (
        prop::sample::select(libra::Kind::ALL.to_vec()),
        any::<bool>(),
        any::<u16>(),
        any::<u32>(),
        any::<u32>(),
        prop::collection::vec(any::<(u32, i32)>(), 0..40),
    )
        .prop_map(|(kind, retransmit, worker, seq, aux, pairs)| {
            (
                libra::Repr {
                    kind,
                    retransmit,
                    worker,
                    seq,
                    aux,
                    pairs: pairs.len() as u16,
                },
                pairs,
            )
        })
}

fn p4sgd_packet() -> impl Strategy<Value = (p4sgd::Repr, Vec<i32>, usize)> {
    (
        prop::sample::select(p4sgd::Kind::ALL.to_vec()),
        1u32..,
        any::<u16>(),
        any::<u16>(),
        prop::collection::vec(any::<i32>(), 0..=p4sgd::MAX_VALUES),
        0usize..50,
    )
        .prop_map(|(kind, bitmap, slot, round, values, padding)| {
            (
                p4sgd::Repr {
                    bitmap,
                    slot,
                    round,
                    kind,
                    count: values.len() as u8,
                },
                values,
                padding,
            )
        })
}

fn luwu_packet() -> impl Strategy<Value = (luwu::Repr, Vec<i32>)> {
    (
        prop::sample::select(luwu::Kind::ALL.to_vec()),
        any::<u8>(),
        any::<bool>(),
        any::<u32>(),
        any::<u32>(),
        prop::collection::vec(any::<i32>(), 1..200),
    )
        .prop_map(|(kind, src, max, seq, credit, values)| {
            // heartbeats carry a credit and no values; data packets values and no credit
            let values = if kind.is_heartbeat() { vec![] } else { values };
            let credit = if kind.is_heartbeat() { credit } else { 0 };
            (
                luwu::Repr {
                    kind,
                    src,
                    max,
                    seq,
                    credit,
                    count: values.len() as u16,
                },
                values,
            )
        })
}

fn aleph_packet() -> impl Strategy<Value = (aleph::Repr, Vec<i32>)> {
    (
        any::<u16>(),
        prop::sample::select(aleph::Kind::ALL.to_vec()),
        any::<u8>(),
        any::<u32>(),
        any::<u32>(),
        prop::collection::vec(any::<i32>(), aleph::GRADS),
    )
        .prop_map(|(job, kind, worker, round, segment, grads)| {
            (
                aleph::Repr {
                    job,
                    kind,
                    worker,
                    round,
                    segment,
                },
                grads,
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn libra_round_trips((r, pairs) in libra_packet()) {
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(&mut b[..]).expect("emit");
        let mut p = libra::Packet::new_unchecked(&mut b[..]);
        for (i, (k, v)) in pairs.iter().enumerate() {
            p.set_pair(i, *k, *v);
        }
        prop_assert_eq!(libra::Repr::parse(&b[..]), Ok(r));
        let view = libra::Packet::new_checked(&b[..]).expect("view");
        prop_assert_eq!(view.pairs().collect::<Vec<_>>(), pairs);
        let mut again = b.clone();
        libra::Repr::parse(&b[..]).expect("parse").emit(&mut again[..]).expect("emit");
        prop_assert_eq!(again, b);
    }

    #[test]
    fn p4sgd_round_trips((r, values, padding) in p4sgd_packet()) {
        let mut b = vec![0u8; r.buffer_len() + padding];
        r.emit(&mut b[..]).expect("emit");
        let mut p = p4sgd::Packet::new_unchecked(&mut b[..]);
        for (i, v) in values.iter().enumerate() {
            p.set_value(i, *v);
        }
        prop_assert_eq!(p4sgd::Repr::parse(&b[..]), Ok(r));
        let view = p4sgd::Packet::new_checked(&b[..]).expect("view");
        prop_assert_eq!(view.values().collect::<Vec<_>>(), values);
        let mut again = b.clone();
        p4sgd::Repr::parse(&b[..]).expect("parse").emit(&mut again[..]).expect("emit");
        prop_assert_eq!(again, b);
    }

    #[test]
    fn luwu_round_trips((r, values) in luwu_packet()) {
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(&mut b[..]).expect("emit");
        let mut p = luwu::Packet::new_unchecked(&mut b[..]);
        for (i, v) in values.iter().enumerate() {
            p.set_value(i, *v);
        }
        prop_assert_eq!(luwu::Repr::parse(&b[..]), Ok(r));
        let view = luwu::Packet::new_checked(&b[..]).expect("view");
        prop_assert_eq!(view.values().collect::<Vec<_>>(), values);
        let mut again = b.clone();
        luwu::Repr::parse(&b[..]).expect("parse").emit(&mut again[..]).expect("emit");
        prop_assert_eq!(again, b);
    }

    #[test]
    fn aleph_round_trips((r, grads) in aleph_packet(), index: u32, count in 0u32..=aleph::chunk::MAX_GRADS as u32) {
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(&mut b[..]).expect("emit");
        let mut p = aleph::Packet::new_unchecked(&mut b[..]);
        for (i, g) in grads.iter().enumerate() {
            p.set_grad(i, *g);
        }
        prop_assert_eq!(aleph::Repr::parse(&b[..]), Ok(r));
        prop_assert_eq!(aleph::Packet::new_checked(&b[..]).expect("view").grads().to_vec(), grads);
        let mut again = b.clone();
        aleph::Repr::parse(&b[..]).expect("parse").emit(&mut again[..]).expect("emit");
        prop_assert_eq!(again, b);
        let c = aleph::chunk::Repr { index, count };
        let mut h = [0u8; aleph::chunk::Repr::LEN];
        c.emit(&mut h[..]).expect("emit");
        prop_assert_eq!(aleph::chunk::Repr::parse(&h[..]), Ok(c));
    }

    #[test]
    fn aleph_control_round_trips(
        job: u16,
        kind in prop::sample::select(aleph::ControlKind::ALL.to_vec()),
        worker: u8,
        round: u32,
        segment: u32,
    ) {
        let c = aleph::ControlRepr { job, kind, worker, round, segment };
        let b = c.to_bytes();
        prop_assert_eq!(b.len(), c.buffer_len());
        prop_assert_eq!(aleph::ControlRepr::parse(&b[..]), Ok(c));
        let v = aleph::Control::new_checked(&b[..]).expect("view");
        prop_assert_eq!((v.job(), v.kind_code(), v.worker(), v.round(), v.segment()), (job, kind.code(), worker, round, segment));
        // never taken for a data packet, at its own length or padded to a data packet's
        prop_assert!(aleph::Repr::parse(&b[..]).is_err());
        let mut full = vec![0u8; aleph::PACKET_LEN];
        full[..b.len()].copy_from_slice(&b);
        prop_assert!(aleph::Repr::parse(&full[..]).is_err());
    }

    #[test]
    fn arbitrary_bytes_never_panic(d in prop::collection::vec(any::<u8>(), 0..700)) {
        for (_, body) in inabench_wire::fuzz::TARGETS {
            body(&d);
        }
    }

    /// A valid packet with one byte changed or cut short parses to `Ok` or a typed error, and
    /// what parses still emits back to the same bytes (the fuzz bodies assert it).
    #[test]
    fn corrupted_packets_never_panic((r, pairs) in libra_packet(), (q, values) in luwu_packet(),
                                     at: prop::sample::Index, byte: u8, cut: prop::sample::Index) {
        let mut lb = vec![0u8; r.buffer_len()];
        r.emit(&mut lb[..]).expect("emit");
        for (i, (k, v)) in pairs.iter().enumerate() {
            libra::Packet::new_unchecked(&mut lb[..]).set_pair(i, *k, *v);
        }
        let mut wb = vec![0u8; q.buffer_len()];
        q.emit(&mut wb[..]).expect("emit");
        for (i, v) in values.iter().enumerate() {
            luwu::Packet::new_unchecked(&mut wb[..]).set_value(i, *v);
        }
        for mut b in [lb, wb] {
            let i = at.index(b.len());
            b[i] = byte;
            for (_, body) in inabench_wire::fuzz::TARGETS {
                body(&b);
                body(&b[..cut.index(b.len() + 1)]);
            }
        }
    }
}

#[test]
fn new_checked_views_never_index_past_the_buffer() {
    // the views' accessors read fixed offsets: new_checked must have refused every buffer they
    // would overrun
    for n in 0..aleph::PACKET_LEN + 2 {
        let b = vec![0u8; n];
        if let Ok(p) = libra::Packet::new_checked(&b[..]) {
            let _ = (p.reserved(), p.pairs().count());
        }
        if let Ok(p) = p4sgd::Packet::new_checked(&b[..]) {
            let _ = (p.count(), p.values().count());
        }
        if let Ok(p) = luwu::Packet::new_checked(&b[..]) {
            let _ = (p.reserved(), p.values().count());
        }
        if let Ok(p) = aleph::Packet::new_checked(&b[..]) {
            let _ = p.grads();
        }
        if let Ok(p) = aleph::Control::new_checked(&b[..]) {
            let _ = (p.job(), p.kind_code(), p.worker(), p.round(), p.segment());
        }
        let short = matches!(libra::Repr::parse(&b[..]), Err(Error::Truncated { .. }));
        assert_eq!(short, n < libra::Repr::LEN, "{n}");
    }
}
