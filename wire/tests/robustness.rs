//! Parsing never panics: arbitrary bytes, corrupted frames and every truncation give `Ok` or a
//! typed error. The fuzz targets in `fuzz/` run the same calls under libFuzzer.

use inabench_wire::ib::{self, AethRepr, BthRepr, ImmDtRepr, RethRepr, opcode};
use inabench_wire::ina::{
    self, AtpHeader, InaKind, NetReduceHeader, SwitchMlHeader, atp, switchml_rdma,
};
use inabench_wire::pcap::PcapReader;
use inabench_wire::roce::{FrameRepr, IcrcCheck, RoceV2Packet};
use inabench_wire::{Error, ethernet, icrc, ipv4, udp};
use proptest::prelude::*;

/// Every parser and every accessor of every view that `new_checked` accepts.
fn parse_everything(d: &[u8]) {
    let _ = ethernet::Repr::parse(d);
    if let Ok(p) = ethernet::Packet::new_checked(d) {
        let _ = (p.dst(), p.src(), p.ethertype(), p.payload());
    }
    let _ = ipv4::Repr::parse(d);
    if let Ok(p) = ipv4::Packet::new_checked(d) {
        let _ = (p.tos(), p.ident(), p.frag_offset(), p.ttl(), p.protocol());
        let _ = (
            p.src(),
            p.dst(),
            p.verify_checksum(),
            p.payload(),
            p.header_checksum(),
        );
    }
    let _ = udp::Repr::parse(d);
    if let Ok(p) = udp::Packet::new_checked(d) {
        let _ = (p.src_port(), p.dst_port(), p.payload());
        let _ = p.verify_checksum([1, 2, 3, 4], [5, 6, 7, 8]);
    }
    let _ = BthRepr::parse(d);
    if let Ok(p) = ib::Bth::new_checked(d) {
        let _ = (
            p.opcode(),
            p.pad_count(),
            p.tver(),
            p.pkey(),
            p.resv6a(),
            p.resv7(),
        );
        let _ = (p.dest_qp(), p.psn(), p.payload());
    }
    let _ = RethRepr::parse(d);
    let _ = AethRepr::parse(d);
    let _ = ImmDtRepr::parse(d);
    if let Some(b) = d.first() {
        let _ = ib::Syndrome::from_byte(*b);
        let _ = ib::layout(*b);
        let _ = opcode::name(*b);
    }
    let _ = NetReduceHeader::parse(d);
    let _ = NetReduceHeader::is_first(d);
    if let Ok(p) = ina::NetReducePacket::new_checked(d) {
        let _ = (p.inet_tag(), p.msg_id(), p.msg_len(), p.payload());
    }
    let _ = SwitchMlHeader::parse(d);
    if let Ok(p) = ina::SwitchMlPacket::new_checked(d) {
        let _ = (
            p.values(),
            p.value(0),
            p.value(usize::MAX / 4),
            p.exponent(),
        );
    }
    let _ = AtpHeader::parse(d);
    let _ = atp::Trailer::parse(d);
    let _ = icrc::verify(d);
    let _ = icrc::compute(d);
    let _ = icrc::read(d);
    let _ = ina::switchml_rdma::ResultImm::from_imm(u32::from_le_bytes(
        [0, 1, 2, 3].map(|i| d.get(i).copied().unwrap_or(0)),
    ));
    for check in [IcrcCheck::Verify, IcrcCheck::Ignore] {
        if let Ok((f, _)) = FrameRepr::parse_with(d, check) {
            let _ = switchml_rdma::Repr::extract(&f);
        }
        for kind in [
            InaKind::None,
            InaKind::NetReduce,
            InaKind::SwitchMl,
            InaKind::Atp,
        ] {
            let _ = RoceV2Packet::parse_with(d, kind, check);
        }
    }
    if let Ok(r) = PcapReader::new(d) {
        for rec in r {
            let _ = rec.map(|r| FrameRepr::parse(r.data));
        }
    }
}

/// A valid frame of each supported opcode.
fn valid_frames() -> Vec<Vec<u8>> {
    opcode::ALL
        .iter()
        .map(|&op| {
            let l = ib::layout(op).expect("supported");
            let f = FrameRepr {
                src_mac: [2, 0, 0, 0, 0, 1],
                dst_mac: [2, 0, 0, 0, 0, 2],
                src_ip: [10, 0, 0, 1],
                dst_ip: [10, 0, 0, 2],
                src_port: 0xc000,
                tos: 0,
                ttl: 64,
                bth: BthRepr {
                    opcode: op,
                    solicited: false,
                    migreq: true,
                    pad_count: 0,
                    pkey: 0xffff,
                    fecn: false,
                    becn: false,
                    dest_qp: 0x80_0011,
                    ack_req: true,
                    psn: 5,
                },
                reth: l.reth.then_some(RethRepr {
                    va: 0,
                    rkey: 3,
                    dma_len: 64,
                }),
                aeth: l.aeth.then_some(AethRepr {
                    syndrome: ib::Syndrome::Ack { credits: 1 },
                    msn: 1,
                }),
                immdt: l.immdt.then_some(7),
            };
            let payload: &[u8] = if l.payload { &[0x42; 24] } else { &[] };
            f.build(payload).expect("build")
        })
        .collect()
}

#[test]
fn every_truncation_of_every_opcode_is_an_error() {
    for f in valid_frames() {
        FrameRepr::parse(&f).expect("whole frame");
        for n in 0..f.len() {
            let cut = &f[..n];
            assert!(
                FrameRepr::parse(cut).is_err(),
                "{n} of {} bytes parsed",
                f.len()
            );
            assert!(
                FrameRepr::parse_with(cut, IcrcCheck::Ignore).is_err(),
                "{n} bytes parsed without the ICRC"
            );
        }
    }
}

#[test]
fn unchecked_views_over_short_buffers_parse_to_errors() {
    let empty: &[u8] = &[];
    assert!(ethernet::Repr::parse(&ethernet::Packet::new_unchecked(empty)).is_err());
    assert!(ipv4::Repr::parse(&ipv4::Packet::new_unchecked(empty)).is_err());
    assert!(udp::Repr::parse(&udp::Packet::new_unchecked(empty)).is_err());
    assert!(BthRepr::parse(&ib::Bth::new_unchecked(empty)).is_err());
    assert!(RethRepr::parse(&ib::Reth::new_unchecked(empty)).is_err());
    assert!(AethRepr::parse(&ib::Aeth::new_unchecked(empty)).is_err());
    assert!(ImmDtRepr::parse(&ib::ImmDt::new_unchecked(empty)).is_err());
    assert!(NetReduceHeader::parse(&ina::NetReducePacket::new_unchecked(empty)).is_err());
    assert!(SwitchMlHeader::parse(&ina::SwitchMlPacket::new_unchecked(empty)).is_err());
    assert!(AtpHeader::parse(&ina::AtpPacket::new_unchecked(empty)).is_err());
}

#[test]
fn typed_errors_say_what_is_wrong() {
    let mut short = [0u8; 20];
    short[12] = 0x08; // IPv4, but 6 bytes of it
    let e = FrameRepr::parse(&short).expect_err("short");
    assert_eq!(
        e,
        Error::Truncated {
            what: "ipv4 header",
            need: 20,
            have: 6
        }
    );
    assert_eq!(
        e.to_string(),
        "truncated: ipv4 header needs 20 bytes, 6 given"
    );
    assert_eq!(Error::Checksum("ICRC").to_string(), "bad ICRC checksum");
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(d in prop::collection::vec(any::<u8>(), 0..400)) {
        parse_everything(&d);
    }

    #[test]
    fn corrupted_frames_never_panic(which in 0usize..opcode::ALL.len(),
                                    edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
                                    cut in any::<prop::sample::Index>()) {
        let mut f = valid_frames().swap_remove(which);
        for (at, v) in edits {
            let i = at.index(f.len());
            f[i] = v;
        }
        parse_everything(&f);
        let n = cut.index(f.len() + 1);
        parse_everything(&f[..n]);
        // and with the checksums made right again, so the parsers past them run too
        if let Ok(mut ip) = ipv4::Packet::new_checked(&mut f[14..]) {
            ip.fill_checksum();
            let total = usize::from(ip.total_len());
            if total >= 40 {
                let _ = icrc::fill(&mut f[14..14 + total]);
            }
        }
        parse_everything(&f);
    }

    #[test]
    fn captures_of_garbage_never_panic(d in prop::collection::vec(any::<u8>(), 0..200), micros: bool) {
        let mut c = if micros { vec![0xd4, 0xc3, 0xb2, 0xa1] } else { vec![0x4d, 0x3c, 0xb2, 0xa1] };
        c.extend_from_slice(&[2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 1, 0, 0, 0]);
        c.extend_from_slice(&d);
        parse_everything(&c);
    }
}
