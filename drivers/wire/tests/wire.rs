//! Round trips, malformed input, the ICRC, and a third-party dissector (tshark).

use inabench_wire::ib::{AethRepr, BthRepr, NakCode, RethRepr, Syndrome, opcode};
use inabench_wire::roce::{FrameRepr, IP_OFFSET};
use inabench_wire::{Error, icrc, pcap::PcapWriter};
use proptest::prelude::*;

fn frame(op: u8, qp: u32, psn: u32) -> FrameRepr {
    let l = inabench_wire::ib::layout(op).expect("opcode");
    FrameRepr {
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac: [2, 0, 0, 0, 0, 2],
        src_ip: [10, 0, 0, 1],
        dst_ip: [10, 0, 0, 2],
        src_port: 49152,
        tos: 0x02,
        ttl: 64,
        bth: BthRepr {
            opcode: op,
            solicited: false,
            migreq: true,
            pad_count: 0,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: qp,
            ack_req: true,
            psn,
        },
        reth: l.reth.then_some(RethRepr {
            va: 0x1000_2000_3000,
            rkey: 0xabcd,
            dma_len: 1024,
        }),
        aeth: l.aeth.then_some(AethRepr {
            syndrome: Syndrome::Ack { credits: 31 },
            msn: 7,
        }),
        immdt: l.immdt.then_some(0xdead_beef),
    }
}

#[test]
fn rc_write_round_trip_and_icrc() {
    let f = frame(opcode::RC | opcode::WRITE_FIRST, 0x12, 100);
    let payload: Vec<u8> = (0..1021u32).map(|i| i as u8).collect();
    let bytes = f.build(&payload).expect("build");
    let (back, p) = FrameRepr::parse(&bytes).expect("parse");
    assert_eq!(back, f);
    assert_eq!(p, &payload[..]);
    // a flipped payload bit fails the ICRC
    let mut bad = bytes.clone();
    bad[80] ^= 1;
    assert_eq!(
        FrameRepr::parse(&bad).expect_err("icrc"),
        Error::Checksum("ICRC")
    );
    // the masked fields may change on the way (TTL, ECN, FECN/BECN) and the ICRC still holds
    let mut hop = bytes.clone();
    hop[IP_OFFSET + 8] -= 1; // TTL
    hop[IP_OFFSET + 1] |= 0x03; // ECN CE
    let bth = IP_OFFSET + 20 + 8;
    hop[bth + 4] |= 0x80; // FECN
    // a router rewrites the IPv4 header checksum
    hop[IP_OFFSET + 10] = 0;
    hop[IP_OFFSET + 11] = 0;
    let c = inabench_wire::ipv4::checksum(&hop[IP_OFFSET..IP_OFFSET + 20]);
    hop[IP_OFFSET + 10..IP_OFFSET + 12].copy_from_slice(&c.to_be_bytes());
    icrc::verify(&hop[IP_OFFSET..]).expect("masked fields do not enter the ICRC");
    let (h, _) = FrameRepr::parse(&hop).expect("parse after a hop");
    assert!(h.bth.fecn);
}

#[test]
fn nak_and_uc_immediate_round_trip() {
    let mut f = frame(opcode::RC | opcode::ACKNOWLEDGE, 5, 77);
    f.aeth = Some(AethRepr {
        syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
        msn: 3,
    });
    let bytes = f.build(&[]).expect("build");
    assert_eq!(FrameRepr::parse(&bytes).expect("parse").0, f);
    let f = frame(opcode::UC | opcode::WRITE_ONLY_IMM, 0xff_ffff, 0xff_ffff);
    let bytes = f.build(&[1, 2, 3]).expect("build");
    let (back, p) = FrameRepr::parse(&bytes).expect("parse");
    assert_eq!((back, p), (f, &[1u8, 2, 3][..]));
    // extension headers must match the opcode
    let mut wrong = frame(opcode::RC | opcode::WRITE_MIDDLE, 1, 1);
    wrong.reth = Some(RethRepr {
        va: 0,
        rkey: 0,
        dma_len: 0,
    });
    assert!(wrong.build(&[]).is_err());
}

#[test]
fn every_truncation_is_an_error() {
    let bytes = frame(opcode::RC | opcode::WRITE_ONLY_IMM, 9, 9)
        .build(&[7; 64])
        .expect("build");
    for n in 0..bytes.len() {
        assert!(FrameRepr::parse(&bytes[..n]).is_err(), "{n} bytes parsed");
    }
}

proptest! {
    #[test]
    fn parse_never_panics(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = FrameRepr::parse(&data);
        let _ = AethRepr::parse(&data);
        let _ = RethRepr::parse(&data);
        let _ = icrc::verify(&data);
    }

    #[test]
    fn frames_round_trip(op in prop::sample::select(vec![0x00u8, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x11, 0x26, 0x27, 0x28, 0x2a, 0x2b]),
                         qp in 0u32..0x100_0000, psn in 0u32..0x100_0000, se: bool, ack: bool, fecn: bool,
                         payload in proptest::collection::vec(any::<u8>(), 0..300)) {
        let mut f = frame(op, qp, psn);
        f.bth.solicited = se;
        f.bth.ack_req = ack;
        f.bth.fecn = fecn;
        let bytes = f.build(&payload).expect("build");
        let (back, p) = FrameRepr::parse(&bytes).expect("parse");
        prop_assert_eq!(back, f);
        prop_assert_eq!(p, &payload[..]);
    }

    #[test]
    fn aeth_round_trips(kind in 0u8..3, v in 0u8..32, code in 0u8..5, msn in 0u32..0x100_0000) {
        let syndrome = match kind {
            0 => Syndrome::Ack { credits: v },
            1 => Syndrome::RnrNak { timer: v },
            _ => Syndrome::Nak([NakCode::PsnSequenceError, NakCode::InvalidRequest, NakCode::RemoteAccessError, NakCode::RemoteOperationalError, NakCode::InvalidRdRequest][usize::from(code)]),
        };
        let a = AethRepr { syndrome, msn };
        let mut b = [0u8; 4];
        a.emit(&mut b).expect("emit");
        prop_assert_eq!(AethRepr::parse(&b).expect("parse"), a);
    }
}

/// tshark (Wireshark's dissector) reads our frames as RoCEv2 with the opcode, QP and PSN we sent.
/// `.ci/setup` installs tshark; without it this test fails unless INABENCH_SKIP_TSHARK=1.
#[test]
fn tshark_dissects_our_rocev2() {
    let have = std::process::Command::new("tshark")
        .arg("-v")
        .output()
        .is_ok();
    if !have {
        assert!(
            std::env::var_os("INABENCH_SKIP_TSHARK").is_some(),
            "tshark is needed to check our RoCEv2 frames against Wireshark (.ci/setup installs it)"
        );
        return;
    }
    let d = tempfile::tempdir().expect("tmp");
    let path = d.path().join("roce.pcap");
    let sent = [
        (opcode::RC | opcode::WRITE_FIRST, 0x11u32, 1000u32),
        (opcode::RC | opcode::WRITE_LAST, 0x11, 1001),
        (opcode::RC | opcode::ACKNOWLEDGE, 0x22, 1001),
        (opcode::UC | opcode::WRITE_ONLY_IMM, 0x33, 5),
    ];
    {
        let f = std::fs::File::create(&path).expect("pcap");
        let mut w = PcapWriter::new(f).expect("header");
        for (i, (op, qp, psn)) in sent.iter().enumerate() {
            let bytes = frame(*op, *qp, *psn).build(&[0x5a; 256]).expect("build");
            w.write_packet(1_000 * i as u64, &bytes).expect("write");
        }
    }
    let out = std::process::Command::new("tshark")
        .args(["-r"])
        .arg(&path)
        .args([
            "-T",
            "fields",
            "-E",
            "separator=,",
            "-e",
            "infiniband.bth.opcode",
            "-e",
            "infiniband.bth.destqp",
            "-e",
            "infiniband.bth.psn",
            "-e",
            "udp.dstport",
        ])
        .output()
        .expect("tshark");
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<Vec<u64>> = text
        .lines()
        .map(|l| {
            l.split(',')
                .map(|x| {
                    let x = x.trim();
                    if let Some(h) = x.strip_prefix("0x") {
                        u64::from_str_radix(h, 16).unwrap_or(u64::MAX)
                    } else {
                        x.parse().unwrap_or(u64::MAX)
                    }
                })
                .collect()
        })
        .collect();
    assert_eq!(
        rows.len(),
        sent.len(),
        "tshark output:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (row, (op, qp, psn)) in rows.iter().zip(sent) {
        assert_eq!(
            row,
            &vec![u64::from(op), u64::from(qp), u64::from(psn), 4791],
            "tshark read {row:?}"
        );
    }
}

mod ina {
    use inabench_wire::ina::{
        AtpHeader, NetReduceHeader, SwitchMlHeader, switchml_rdma_fields, switchml_rdma_reth,
    };
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn netreduce_round_trip(ring in any::<u16>(), rank in any::<u16>(), msg in any::<u32>(), len in any::<u32>()) {
            let h = NetReduceHeader { ring_id: ring, rank, msg_id: msg, msg_len: len };
            let mut b = [0u8; NetReduceHeader::LEN];
            h.emit(&mut b).expect("emit");
            prop_assert!(NetReduceHeader::is_first(&b));
            prop_assert_eq!(NetReduceHeader::parse(&b).expect("parse"), h);
        }

        #[test]
        fn switchml_round_trip(w in any::<u16>(), slot in 0u16..0x8000, v: bool, e in any::<i8>(), r: bool, n in any::<u16>()) {
            let h = SwitchMlHeader { worker: w, pool_index: slot, version: v, exponent: e, is_result: r, elements: n };
            let mut b = [0u8; SwitchMlHeader::LEN];
            h.emit(&mut b).expect("emit");
            prop_assert_eq!(SwitchMlHeader::parse(&b).expect("parse"), h);
        }

        #[test]
        fn atp_round_trip(job in any::<u16>(), fan in any::<u8>(), flags in 0u8..16, agg in any::<u32>(), bm in any::<u32>(), seq in any::<u32>()) {
            let h = AtpHeader { job, fan_in: fan, resend: flags & 1 != 0, collision: flags & 2 != 0, ecn: flags & 4 != 0, is_result: flags & 8 != 0, aggregator: agg, bitmap: bm, sequence: seq };
            let mut b = [0u8; AtpHeader::LEN];
            h.emit(&mut b).expect("emit");
            prop_assert_eq!(AtpHeader::parse(&b).expect("parse"), h);
        }

        #[test]
        fn switchml_rdma_reth_round_trip(pool in any::<u32>(), off in any::<u32>(), job in any::<u32>(), len in any::<u32>()) {
            prop_assert_eq!(switchml_rdma_fields(&switchml_rdma_reth(pool, off, job, len)), (pool, off, job));
        }

        #[test]
        fn ina_parsers_never_panic(data in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = NetReduceHeader::parse(&data);
            let _ = NetReduceHeader::is_first(&data);
            let _ = SwitchMlHeader::parse(&data);
            let _ = AtpHeader::parse(&data);
        }
    }

    #[test]
    fn malformed_ina_headers_are_errors() {
        assert!(NetReduceHeader::parse(&[0u8; 16]).is_err(), "no InetTag");
        assert!(
            NetReduceHeader::parse(&[0x49, 0x4e, 0x45, 0x54]).is_err(),
            "short"
        );
        let mut b = [0u8; 8];
        b[5] = 0x80;
        assert!(SwitchMlHeader::parse(&b).is_err(), "unknown flag");
        let h = SwitchMlHeader {
            worker: 0,
            pool_index: 0x8000,
            version: false,
            exponent: 0,
            is_result: false,
            elements: 0,
        };
        assert!(h.emit(&mut [0u8; 8]).is_err(), "pool index out of range");
        let mut b = [0u8; 16];
        b[3] = 0x10;
        assert!(AtpHeader::parse(&b).is_err(), "unknown flag");
    }
}
