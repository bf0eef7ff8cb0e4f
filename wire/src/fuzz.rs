//! The bodies of the cargo-fuzz targets in `fuzz/fuzz_targets/` (one function per target, each
//! target a one-line call), here so that the stable test run can drive them too
//! (`tests/fuzz_smoke.rs`: seeded random and mutated inputs). Each must never panic on any input;
//! the assertions inside check that what parses emits back. Not part of the crate's API.

use crate::ib;
use crate::ina::{
    self, AtpHeader, NetReduceHeader, NetReducePacket, SwitchMlHeader, SwitchMlPacket,
};
use crate::ina::{atp, switchml_rdma};
use crate::pcap::PcapReader;
use crate::roce::{FrameRepr, IcrcCheck};
use crate::{InaKind, RoceV2Packet, ethernet, icrc, ipv4, udp};

/// InfiniBand AETH and its syndromes.
pub fn aeth(data: &[u8]) {
    if let Ok(r) = ib::AethRepr::parse(data) {
        let mut b = [0u8; ib::AETH_LEN];
        r.emit(&mut b[..]).expect("a parsed AETH emits");
        assert_eq!(&b[..], &data[..ib::AETH_LEN]);
    }
}

/// ATP's header and trailer.
pub fn atp(data: &[u8]) {
    if let Ok(h) = AtpHeader::parse(data) {
        let mut b = [0u8; AtpHeader::LEN];
        h.emit(&mut b[..]).expect("a parsed header emits");
        assert_eq!(&b[..], &data[..AtpHeader::LEN]);
    }
    if let Ok(t) = atp::Trailer::parse(data) {
        let mut b = [0u8; atp::Trailer::LEN];
        t.emit(&mut b[..]).expect("a parsed trailer emits");
        assert_eq!(&b[..], &data[..atp::Trailer::LEN]);
    }
}

/// InfiniBand BTH and the opcode table.
pub fn bth(data: &[u8]) {
    if let Ok(p) = ib::Bth::new_checked(data) {
        let _ = (
            p.opcode(),
            p.pad_count(),
            p.tver(),
            p.resv6a(),
            p.resv7(),
            p.payload(),
        );
        let _ = ib::layout(p.opcode());
        let _ = ib::opcode::name(p.opcode());
    }
    if let Ok(r) = ib::BthRepr::parse(data) {
        let mut b = [0u8; ib::BTH_LEN];
        r.emit(&mut b[..]).expect("a parsed BTH emits");
        assert_eq!(ib::BthRepr::parse(&b[..]), Ok(r));
    }
}

/// Ethernet II headers.
pub fn ethernet(data: &[u8]) {
    let _ = ethernet::Repr::parse(data);
    if let Ok(p) = ethernet::Packet::new_checked(data) {
        let _ = (p.dst(), p.src(), p.ethertype(), p.payload());
        if let Ok(r) = ethernet::Repr::parse(&p) {
            let mut b = [0u8; ethernet::HEADER_LEN];
            r.emit(&mut b[..]);
            assert_eq!(ethernet::Repr::parse(&b[..]), Ok(r));
        }
    }
}

/// The ICRC over arbitrary IP packets.
pub fn icrc(data: &[u8]) {
    let _ = icrc::read(data);
    if icrc::verify(data).is_ok() {
        let mut again = data.to_vec();
        icrc::fill(&mut again).expect("a verified packet fills");
        assert_eq!(again, data);
    }
}

/// InfiniBand ImmDt.
pub fn immdt(data: &[u8]) {
    if let Ok(r) = ib::ImmDtRepr::parse(data) {
        let mut b = [0u8; ib::IMMDT_LEN];
        r.emit(&mut b[..]).expect("a parsed ImmDt emits");
        assert_eq!(&b[..], &data[..ib::IMMDT_LEN]);
    }
}

/// IPv4 headers (checksum, lengths, options, fragments).
pub fn ipv4(data: &[u8]) {
    if let Ok(p) = ipv4::Packet::new_checked(data) {
        let _ = (
            p.tos(),
            p.ident(),
            p.frag_offset(),
            p.ttl(),
            p.protocol(),
            p.payload(),
        );
        let _ = (p.src(), p.dst(), p.verify_checksum());
    }
    if let Ok(r) = ipv4::Repr::parse(data) {
        let mut b = vec![0u8; r.buffer_len() + r.payload_len];
        r.emit(&mut b[..]).expect("a parsed header emits");
        assert_eq!(ipv4::Repr::parse(&b[..]), Ok(r));
    }
}

/// NetReduce's INA header.
pub fn netreduce(data: &[u8]) {
    let _ = NetReduceHeader::is_first(data);
    if let Ok(p) = NetReducePacket::new_checked(data) {
        let _ = (
            p.inet_tag(),
            p.ring_id(),
            p.rank(),
            p.msg_id(),
            p.msg_len(),
            p.payload(),
        );
    }
    if let Ok(h) = NetReduceHeader::parse(data) {
        let mut b = [0u8; NetReduceHeader::LEN];
        h.emit(&mut b[..]).expect("a parsed header emits");
        assert_eq!(&b[..], &data[..NetReduceHeader::LEN]);
    }
}

/// The pcap reader, and the frames in the capture.
pub fn pcap(data: &[u8]) {
    if let Ok(r) = PcapReader::new(data) {
        for rec in r.flatten() {
            let _ = FrameRepr::parse(rec.data);
        }
    }
}

/// InfiniBand RETH.
pub fn reth(data: &[u8]) {
    if let Ok(r) = ib::RethRepr::parse(data) {
        let mut b = [0u8; ib::RETH_LEN];
        r.emit(&mut b[..]).expect("a parsed RETH emits");
        assert_eq!(&b[..], &data[..ib::RETH_LEN]);
    }
}

/// Whole RoCEv2 frames: Ethernet, IPv4, UDP, BTH and extensions, ICRC, INA headers,
/// SwitchML-RDMA's metadata. What parses must build back to a frame that parses the same.
pub fn roce_frame(data: &[u8]) {
    for check in [IcrcCheck::Verify, IcrcCheck::Ignore] {
        if let Ok((repr, payload)) = FrameRepr::parse_with(data, check) {
            let again = repr.build(payload).expect("a parsed frame builds");
            let (back, p) = FrameRepr::parse(&again).expect("a built frame parses");
            assert_eq!(back, repr);
            assert_eq!(p, payload);
            if let Ok(m) = switchml_rdma::Repr::extract(&repr) {
                let mut f = repr;
                m.apply(&mut f).expect("extracted metadata applies");
                assert_eq!(switchml_rdma::Repr::extract(&f), Ok(m));
            }
        }
        for kind in [
            InaKind::None,
            InaKind::NetReduce,
            InaKind::SwitchMl,
            InaKind::Atp,
        ] {
            if let Ok(p) = RoceV2Packet::parse_with(data, kind, check) {
                let again = p.build().expect("a parsed packet builds");
                assert_eq!(RoceV2Packet::parse(&again, kind), Ok(p));
            }
        }
    }
}

/// SwitchML's header and values.
pub fn switchml(data: &[u8]) {
    if let Ok(p) = SwitchMlPacket::new_checked(data) {
        let _ = (p.values(), p.value(0), p.exponent(), p.flags());
    }
    if let Ok(h) = SwitchMlHeader::parse(data) {
        let mut b = [0u8; SwitchMlHeader::LEN];
        h.emit(&mut b[..]).expect("a parsed header emits");
        assert_eq!(&b[..], &data[..SwitchMlHeader::LEN]);
    }
}

/// UDP headers and the checksum.
pub fn udp(data: &[u8]) {
    if let Ok(p) = udp::Packet::new_checked(data) {
        let _ = (p.src_port(), p.dst_port(), p.payload());
        let _ = p.verify_checksum([10, 0, 0, 1], [10, 0, 0, 2]);
    }
    if let Ok(r) = udp::Repr::parse(data) {
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(&mut b[..]).expect("a parsed header emits");
    }
}

/// Libra's header and pairs.
pub fn libra(data: &[u8]) {
    if let Ok(p) = ina::libra::Packet::new_checked(data) {
        let _ = (p.kind_code(), p.flags(), p.reserved(), p.pairs().count());
    }
    if let Ok(h) = ina::libra::Repr::parse(data) {
        assert_eq!(h.buffer_len(), data.len());
        let mut b = data.to_vec();
        h.emit(&mut b[..]).expect("a parsed header emits");
        assert_eq!(b, data);
    }
}

/// P4SGD's header and values.
pub fn p4sgd(data: &[u8]) {
    if let Ok(p) = ina::p4sgd::Packet::new_checked(data) {
        let _ = (p.bitmap(), p.flags(), p.values().count());
    }
    if let Ok(h) = ina::p4sgd::Repr::parse(data) {
        let mut b = [0u8; ina::p4sgd::Repr::LEN];
        h.emit(&mut b[..]).expect("a parsed header emits");
        assert_eq!(&b[..], &data[..ina::p4sgd::Repr::LEN]);
    }
}

/// LuWu's header and values.
pub fn luwu(data: &[u8]) {
    if let Ok(p) = ina::luwu::Packet::new_checked(data) {
        let _ = (p.magic(), p.kind_code(), p.values().count());
    }
    if let Ok(h) = ina::luwu::Repr::parse(data) {
        assert_eq!(h.buffer_len(), data.len());
        let mut b = [0u8; ina::luwu::Repr::LEN];
        h.emit(&mut b[..]).expect("a parsed header emits");
        assert_eq!(&b[..], &data[..ina::luwu::Repr::LEN]);
    }
}

/// ALEPH's UDP packet, its control messages and its TCP service's chunk header.
pub fn aleph(data: &[u8]) {
    if let Ok(p) = ina::aleph::Packet::new_checked(data) {
        let _ = (p.magic(), p.kind_code(), p.grads());
    }
    if let Ok(h) = ina::aleph::Repr::parse(data) {
        let mut b = data.to_vec();
        h.emit(&mut b[..]).expect("a parsed header emits");
        assert_eq!(b, data);
    }
    if let Ok(c) = ina::aleph::chunk::Repr::parse(data) {
        let mut b = [0u8; ina::aleph::chunk::Repr::LEN];
        c.emit(&mut b[..]).expect("a parsed chunk header emits");
        assert_eq!(&b[..], &data[..ina::aleph::chunk::Repr::LEN]);
        let _ = ina::aleph::chunk::grads(&data[ina::aleph::chunk::Repr::LEN..]).count();
    }
    if let Ok(v) = ina::aleph::Control::new_checked(data) {
        let _ = (v.magic(), v.kind_code(), v.worker(), v.round(), v.segment());
    }
    if let Ok(c) = ina::aleph::ControlRepr::parse(data) {
        assert_eq!(
            &c.to_bytes()[..],
            data,
            "a parsed control message emits the same bytes"
        );
        assert!(ina::aleph::Repr::parse(data).is_err());
    }
}

/// A fuzz target's body.
pub type Body = fn(&[u8]);

/// Every target: its name (the fuzz target's) and its body.
pub const TARGETS: &[(&str, Body)] = &[
    ("aeth", aeth),
    ("aleph", aleph),
    ("atp", atp),
    ("bth", bth),
    ("ethernet", ethernet),
    ("icrc", icrc),
    ("immdt", immdt),
    ("ipv4", ipv4),
    ("libra", libra),
    ("luwu", luwu),
    ("netreduce", netreduce),
    ("p4sgd", p4sgd),
    ("pcap", pcap),
    ("reth", reth),
    ("roce_frame", roce_frame),
    ("switchml", switchml),
    ("udp", udp),
];
