//! `Repr -> emit -> parse == Repr` for every `Repr`, and whole frames and captures back again.

use inabench_wire::ib::{self, AethRepr, BthRepr, ImmDtRepr, NakCode, RethRepr, Syndrome, opcode};
use inabench_wire::ina::atp::Trailer;
use inabench_wire::ina::switchml_rdma::{self, PoolIndex, ResultImm};
use inabench_wire::ina::{AtpHeader, InaHeader, InaKind, NetReduceHeader, SwitchMlHeader};
use inabench_wire::pcap::{PcapReader, PcapWriter, Resolution};
use inabench_wire::roce::{FrameRepr, RoceV2Packet};
use inabench_wire::{ethernet, ipv4, udp};
use proptest::prelude::*;

/// Emit into a buffer of exactly `buffer_len()` bytes (plus `extra`), then parse it back.
macro_rules! round_trip {
    ($repr:expr, $ty:ty, $extra:expr) => {{
        let r = $repr;
        let mut b = vec![0u8; r.buffer_len() + $extra];
        r.emit(&mut b[..]).expect("emit");
        prop_assert_eq!(<$ty>::parse(&b[..]).expect("parse"), r);
        b
    }};
}

fn mac() -> impl Strategy<Value = [u8; 6]> {
    any::<[u8; 6]>()
}

fn ipv4_addr() -> impl Strategy<Value = [u8; 4]> {
    any::<[u8; 4]>()
}

fn bth() -> impl Strategy<Value = BthRepr> {
    (
        any::<u8>(),
        any::<[bool; 5]>(),
        0u8..4,
        any::<u16>(),
        0u32..=ib::QPN_MASK,
        0u32..=ib::PSN_MASK,
    )
        .prop_map(|(op, f, pad, pkey, qp, psn)| BthRepr {
            opcode: op,
            solicited: f[0],
            migreq: f[1],
            pad_count: pad,
            pkey,
            fecn: f[2],
            becn: f[3],
            dest_qp: qp,
            ack_req: f[4],
            psn,
        })
}

fn reth() -> impl Strategy<Value = RethRepr> {
    (any::<u64>(), any::<u32>(), any::<u32>()).prop_map(|(va, rkey, dma_len)| RethRepr {
        va,
        rkey,
        dma_len,
    })
}

fn syndrome() -> impl Strategy<Value = Syndrome> {
    prop_oneof![
        (0u8..32).prop_map(|credits| Syndrome::Ack { credits }),
        (0u8..32).prop_map(|timer| Syndrome::RnrNak { timer }),
        prop::sample::select(NakCode::ALL.to_vec()).prop_map(Syndrome::Nak),
    ]
}

fn aeth() -> impl Strategy<Value = AethRepr> {
    (syndrome(), 0u32..=ib::PSN_MASK).prop_map(|(syndrome, msn)| AethRepr { syndrome, msn })
}

fn netreduce() -> impl Strategy<Value = NetReduceHeader> {
    (
        any::<u16>(),
        any::<u16>(),
        any::<u32>(),
        1u32..=NetReduceHeader::MAX_MSG_LEN,
    )
        .prop_map(|(ring_id, rank, msg_id, msg_len)| NetReduceHeader {
            ring_id,
            rank,
            msg_id,
            msg_len,
        })
}

fn switchml(max_elements: u16) -> impl Strategy<Value = SwitchMlHeader> {
    (
        any::<u16>(),
        0u16..0x8000,
        any::<bool>(),
        any::<i8>(),
        any::<bool>(),
        0..=max_elements,
        any::<u32>(),
    )
        .prop_map(
            |(worker, pool_index, version, exponent, is_result, elements, chunk)| SwitchMlHeader {
                worker,
                pool_index,
                version,
                exponent,
                is_result,
                elements,
                chunk,
            },
        )
}

fn atp() -> impl Strategy<Value = AtpHeader> {
    (
        any::<u32>(),
        1u8..=AtpHeader::MAX_FAN_IN,
        any::<[bool; 6]>(),
        0u8..4,
        any::<[u16; 4]>(),
    )
        .prop_map(|(bitmap, fan_in, f, ps_index, n)| AtpHeader {
            bitmap,
            fan_in,
            overflow: f[0],
            ps_index,
            data_index: f[1],
            ecn: f[2],
            resend: f[3],
            collision: f[4],
            is_ack: f[5],
            job: n[0],
            sequence: n[1],
            aggregator: n[2],
            aggregator2: n[3],
        })
}

/// A frame's headers for a supported opcode, with the extension headers it calls for.
fn frame_repr() -> impl Strategy<Value = FrameRepr> {
    (
        prop::sample::select(opcode::ALL.to_vec()),
        (mac(), mac(), ipv4_addr(), ipv4_addr()),
        (any::<u16>(), any::<u8>(), any::<u8>()),
        bth(),
        (reth(), aeth(), any::<u32>()),
    )
        .prop_map(
            |(op, (src_mac, dst_mac, src_ip, dst_ip), (src_port, tos, ttl), b, (r, a, i))| {
                let l = ib::layout(op).expect("supported");
                FrameRepr {
                    src_mac,
                    dst_mac,
                    src_ip,
                    dst_ip,
                    src_port,
                    tos,
                    ttl,
                    bth: BthRepr {
                        opcode: op,
                        pad_count: 0,
                        ..b
                    },
                    reth: l.reth.then_some(r),
                    aeth: l.aeth.then_some(a),
                    immdt: l.immdt.then_some(i),
                }
            },
        )
}

/// A payload the opcode allows after an INA header of `ina_len` bytes: none for an ACK, and
/// (with the INA header) a multiple of 4 bytes before a message's end.
fn payload_for(op: u8, ina_len: usize, raw: Vec<u8>) -> Vec<u8> {
    let mut p = raw;
    if op == opcode::RC_ACKNOWLEDGE {
        p.clear();
    } else if !opcode::ends_message(op) {
        while !(ina_len + p.len()).is_multiple_of(4) {
            p.push(0);
        }
    }
    p
}

proptest! {
    #[test]
    fn ethernet_round_trips(dst in mac(), src in mac(), ethertype in 0x0600u16..) {
        let r = ethernet::Repr { dst, src, ethertype };
        let mut b = vec![0u8; r.buffer_len() + 3];
        r.emit(&mut b[..]);
        prop_assert_eq!(ethernet::Repr::parse(&b[..]).expect("parse"), r);
        prop_assert_eq!(ethernet::Packet::new_checked(&b[..]).expect("view").payload().len(), 3);
    }

    #[test]
    fn ipv4_round_trips(src in ipv4_addr(), dst in ipv4_addr(), protocol: u8, tos: u8, ttl: u8,
                        ident: u16, payload_len in 0usize..200) {
        // the header and its payload (the length field covers it)
        let r = ipv4::Repr { src, dst, protocol, tos, ttl, ident, payload_len };
        let mut b = vec![0u8; r.buffer_len() + payload_len];
        r.emit(&mut b[..]).expect("emit");
        prop_assert_eq!(ipv4::Repr::parse(&b[..]).expect("parse"), r);
        let p = ipv4::Packet::new_checked(&b[..]).expect("view");
        prop_assert!(p.verify_checksum());
        prop_assert_eq!(ipv4::Repr::parse(&p).expect("parse via the view"), r);
    }

    #[test]
    fn udp_round_trips(src_port: u16, dst_port: u16, payload in prop::collection::vec(any::<u8>(), 0..100),
                       src in ipv4_addr(), dst in ipv4_addr()) {
        let r = udp::Repr { src_port, dst_port, payload_len: payload.len() };
        let mut b = vec![0u8; r.buffer_len() + payload.len()];
        r.emit(&mut b[..]).expect("emit");
        b[udp::HEADER_LEN..].copy_from_slice(&payload);
        prop_assert_eq!(udp::Repr::parse(&b[..]).expect("parse"), r);
        let mut p = udp::Packet::new_checked(&mut b[..]).expect("view");
        prop_assert!(p.verify_checksum(src, dst), "a zero checksum is none");
        p.fill_checksum(src, dst);
        prop_assert!(p.verify_checksum(src, dst));
        prop_assert_eq!(udp::Repr::parse(&p).expect("parse"), r);
    }

    #[test]
    fn bth_round_trips(r in bth()) {
        round_trip!(r, BthRepr, 0);
    }

    #[test]
    fn reth_round_trips(r in reth()) {
        round_trip!(r, RethRepr, 0);
    }

    #[test]
    fn aeth_round_trips(r in aeth()) {
        round_trip!(r, AethRepr, 0);
    }

    #[test]
    fn immdt_round_trips(data: u32) {
        round_trip!(ImmDtRepr { data }, ImmDtRepr, 0);
    }

    #[test]
    fn netreduce_round_trips(h in netreduce()) {
        let b = round_trip!(h, NetReduceHeader, 8);
        prop_assert!(NetReduceHeader::is_first(&b));
    }

    #[test]
    fn switchml_round_trips(h in switchml(64)) {
        round_trip!(h, SwitchMlHeader, 4 * usize::from(h.elements));
    }

    #[test]
    fn atp_round_trips(h in atp(), key: u64, tensor_len: u32) {
        round_trip!(h, AtpHeader, 0);
        round_trip!(Trailer { key, tensor_len }, Trailer, 0);
    }

    #[test]
    fn switchml_rdma_round_trips(f in frame_repr(), worker in 0u8..=switchml_rdma::MAX_WORKER,
                                 qp_index: u16, slot in 0u16..=switchml_rdma::MAX_SLOT, set: bool,
                                 e: [u8; 2]) {
        // every UC RDMA WRITE opcode, with what its layout calls for
        let op = opcode::UC | (f.bth.opcode % 6 + opcode::WRITE_FIRST);
        let l = ib::layout(op).expect("UC WRITE");
        let m = switchml_rdma::Repr {
            worker,
            qp_index,
            pool: l.reth.then_some(PoolIndex { slot, set }),
            exponents: l.immdt.then_some(e),
        };
        let mut frame = FrameRepr {
            bth: BthRepr { opcode: op, ..f.bth },
            reth: None,
            aeth: None,
            immdt: None,
            ..f
        };
        m.apply(&mut frame).expect("apply");
        prop_assert_eq!(switchml_rdma::Repr::extract(&frame).expect("extract"), m);
        // and through the bytes
        let payload = payload_for(op, 0, vec![0x5a; 61]);
        let bytes = frame.build(&payload).expect("build");
        let (back, _) = FrameRepr::parse(&bytes).expect("parse");
        prop_assert_eq!(switchml_rdma::Repr::extract(&back).expect("extract"), m);
        let r = ResultImm { pool: PoolIndex { slot, set }, exponents: e };
        prop_assert_eq!(ResultImm::from_imm(r.to_imm().expect("imm")).expect("parse"), r);
    }

    #[test]
    fn frames_round_trip(f in frame_repr(), raw in prop::collection::vec(any::<u8>(), 0..300)) {
        let payload = payload_for(f.bth.opcode, 0, raw);
        let bytes = f.build(&payload).expect("build");
        prop_assert_eq!(bytes.len(), f.buffer_len(payload.len()));
        prop_assert_eq!(bytes.len() % 4, (f.header_len() + 4) % 4, "payload padded to 4");
        let (back, p) = FrameRepr::parse(&bytes).expect("parse");
        prop_assert_eq!(back, f);
        prop_assert_eq!(p, &payload[..]);
        // each layer's own parser agrees with the layers the frame reports
        let l = f.layers(payload.len());
        prop_assert_eq!(ethernet::Repr::parse(&bytes[..]).expect("eth"), l.ethernet);
        prop_assert_eq!(ipv4::Repr::parse(&bytes[14..]).expect("ip"), l.ipv4);
        prop_assert_eq!(udp::Repr::parse(&bytes[34..]).expect("udp"), l.udp);
        prop_assert_eq!(BthRepr::parse(&bytes[42..]).expect("bth"), l.bth);
    }

    #[test]
    fn roce_packets_with_ina_headers_round_trip(
        f in frame_repr(),
        which in 0u8..4,
        nr in netreduce(),
        sm in switchml(64),
        at in atp(),
        raw in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        let op = f.bth.opcode;
        let (ina, kind) = match which {
            1 if opcode::starts_message(op) => (Some(InaHeader::NetReduce(nr)), InaKind::NetReduce),
            2 if op != opcode::RC_ACKNOWLEDGE => (Some(InaHeader::SwitchMl(sm)), InaKind::SwitchMl),
            3 if op != opcode::RC_ACKNOWLEDGE => (Some(InaHeader::Atp(at)), InaKind::Atp),
            _ => (None, InaKind::None),
        };
        let payload = match ina {
            Some(InaHeader::SwitchMl(h)) => vec![0x11; 4 * usize::from(h.elements)],
            Some(h) => payload_for(op, h.buffer_len(), raw),
            None => payload_for(op, 0, raw),
        };
        let p = RoceV2Packet { headers: f, ina, payload: &payload };
        let bytes = p.build().expect("build");
        prop_assert_eq!(bytes.len(), p.buffer_len());
        prop_assert_eq!(RoceV2Packet::parse(&bytes, kind).expect("parse"), p);
    }

    #[test]
    fn captures_round_trip(frames in prop::collection::vec(
                               (0u64..4_000_000_000_000_000_000, prop::collection::vec(any::<u8>(), 0..100)), 0..8),
                           micros: bool) {
        let res = if micros { Resolution::Micros } else { Resolution::Nanos };
        let mut w = PcapWriter::with_options(Vec::new(), res, 65_535).expect("header");
        for (ts, f) in &frames {
            w.write_packet(*ts, f).expect("write");
        }
        let bytes = w.into_inner();
        let back: Vec<(u64, Vec<u8>)> = PcapReader::new(&bytes)
            .expect("header")
            .map(|r| r.map(|r| (r.ts_ns, r.data.to_vec())).expect("record"))
            .collect();
        let want: Vec<(u64, Vec<u8>)> = frames
            .iter()
            .map(|(ts, f)| (if micros { ts / 1000 * 1000 } else { *ts }, f.clone()))
            .collect();
        prop_assert_eq!(back, want);
    }
}
