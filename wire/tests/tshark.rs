//! A third-party dissector reads our frames: tshark (Wireshark) decodes a capture of RoCEv2
//! frames with the opcodes, QPs, PSNs, RETH, AETH and ImmDt we sent, and finds the IPv4 header
//! checksums good.
//!
//! tshark is required under CI (`.ci/setup` installs it from Debian); elsewhere the test is
//! skipped with the reason printed when tshark is missing (`inabench_testkit::need_tool`).

use inabench_wire::ib::{AethRepr, BthRepr, NakCode, RethRepr, Syndrome, layout, opcode};
use inabench_wire::pcap::{PcapWriter, Resolution};
use inabench_wire::roce::FrameRepr;
use std::process::Command;

/// One frame we send and what tshark must read back.
struct Sent {
    op: u8,
    qp: u32,
    psn: u32,
    payload: usize,
    reth: Option<RethRepr>,
    aeth: Option<AethRepr>,
    imm: Option<u32>,
}

fn sent() -> Vec<Sent> {
    let reth = |va: u64, len: u32| {
        Some(RethRepr {
            va,
            rkey: 0x1234,
            dma_len: len,
        })
    };
    vec![
        Sent {
            op: opcode::RC_RDMA_WRITE_FIRST,
            qp: 0x11,
            psn: 1000,
            payload: 1024,
            reth: reth(0x7f00_0000_1000, 2048),
            aeth: None,
            imm: None,
        },
        Sent {
            op: opcode::RC_RDMA_WRITE_LAST,
            qp: 0x11,
            psn: 1001,
            payload: 1021,
            reth: None,
            aeth: None,
            imm: None,
        },
        Sent {
            op: opcode::RC_RDMA_WRITE_ONLY,
            qp: 0xab_cdef,
            psn: 0xff_ffff,
            payload: 256,
            reth: reth(0x2000, 256),
            aeth: None,
            imm: None,
        },
        Sent {
            op: opcode::RC_ACKNOWLEDGE,
            qp: 0x22,
            psn: 1001,
            payload: 0,
            reth: None,
            aeth: Some(AethRepr {
                syndrome: Syndrome::Ack { credits: 31 },
                msn: 2,
            }),
            imm: None,
        },
        Sent {
            op: opcode::RC_ACKNOWLEDGE,
            qp: 0x22,
            psn: 1002,
            payload: 0,
            reth: None,
            aeth: Some(AethRepr {
                syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
                msn: 2,
            }),
            imm: None,
        },
        Sent {
            op: opcode::UC_RDMA_WRITE_ONLY_IMM,
            qp: 0x85_0102,
            psn: 5,
            payload: 256,
            reth: reth(0x3000, 256),
            aeth: None,
            imm: Some(0x857f_0000),
        },
    ]
}

fn frame(s: &Sent) -> Vec<u8> {
    let l = layout(s.op).expect("opcode");
    assert_eq!(
        (l.reth, l.aeth, l.immdt),
        (s.reth.is_some(), s.aeth.is_some(), s.imm.is_some())
    );
    FrameRepr {
        src_mac: [0x02, 0, 0, 0, 0, 0x01],
        dst_mac: [0x02, 0, 0, 0, 0, 0x02],
        src_ip: [10, 0, 0, 1],
        dst_ip: [10, 0, 0, 2],
        src_port: 0xc011,
        tos: 0x02,
        ttl: 64,
        bth: BthRepr {
            opcode: s.op,
            solicited: false,
            migreq: true,
            pad_count: 0,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: s.qp,
            ack_req: s.op != opcode::RC_ACKNOWLEDGE,
            psn: s.psn,
        },
        reth: s.reth,
        aeth: s.aeth,
        immdt: s.imm,
    }
    .build(&vec![0x5a; s.payload])
    .expect("build")
}

/// The tshark fields we read (checked with `tshark -G fields | grep infiniband`).
const FIELDS: [&str; 15] = [
    "infiniband.bth.opcode",
    "infiniband.bth.destqp",
    "infiniband.bth.psn",
    "infiniband.bth.padcnt",
    "infiniband.bth.m",
    "infiniband.bth.a",
    "infiniband.reth.va",
    "infiniband.reth.r_key",
    "infiniband.reth.dmalen",
    "infiniband.aeth.syndrome",
    "infiniband.aeth.msn",
    "infiniband.immdt",
    "infiniband.invariant.crc",
    "udp.dstport",
    "ip.checksum.status",
];

/// tshark prints numbers in decimal or 0x-hex, booleans as True/False or 1/0, bytes as hex.
fn num(x: &str) -> Option<u64> {
    let x = x.trim();
    if x.is_empty() {
        return None;
    }
    match x {
        "True" => return Some(1),
        "False" => return Some(0),
        _ => {}
    }
    match x.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => x
            .parse()
            .ok()
            .or_else(|| u64::from_str_radix(&x.replace(':', ""), 16).ok()),
    }
}

#[test]
fn tshark_dissects_our_rocev2() {
    // Wireshark's dissector is the third-party check of our RoCEv2 frames
    if !inabench_testkit::need_tool("tshark", "tshark") {
        return;
    }
    let sent = sent();
    let frames: Vec<Vec<u8>> = sent.iter().map(frame).collect();
    let dir = tempfile::tempdir().expect("tmp");
    for res in [Resolution::Micros, Resolution::Nanos] {
        let path = dir.path().join(format!("roce-{res:?}.pcap"));
        {
            let f = std::fs::File::create(&path).expect("pcap");
            let mut w = PcapWriter::with_options(f, res, 65_535).expect("header");
            for (i, f) in frames.iter().enumerate() {
                w.write_packet(1_700_000_000_000_000_000 + 1_500 * i as u64, f)
                    .expect("write");
            }
        }
        let mut cmd = Command::new("tshark");
        cmd.args(["-n", "-o", "ip.check_checksum:TRUE", "-r"])
            .arg(&path)
            .args(["-T", "fields", "-E", "separator=;", "-E", "occurrence=f"]);
        for f in FIELDS {
            cmd.args(["-e", f]);
        }
        let out = cmd.output().expect("tshark runs");
        let text = String::from_utf8_lossy(&out.stdout);
        let rows: Vec<Vec<Option<u64>>> = text
            .lines()
            .map(|l| l.split(';').map(num).collect())
            .collect();
        assert!(
            out.status.success() && rows.len() == sent.len(),
            "tshark read {} frames of {}:\n{text}\n{}",
            rows.len(),
            sent.len(),
            String::from_utf8_lossy(&out.stderr)
        );
        for ((row, s), f) in rows.iter().zip(&sent).zip(&frames) {
            // Wireshark 4.0 shows the ICRC (the last four bytes, read big-endian) but does not
            // check it for RoCEv2; `tests/icrc.rs` checks ours against a NIC's
            let icrc = f[f.len() - 4..]
                .iter()
                .fold(0u64, |a, b| (a << 8) | u64::from(*b));
            let want: Vec<Option<u64>> = vec![
                Some(u64::from(s.op)),
                Some(u64::from(s.qp)),
                Some(u64::from(s.psn)),
                Some(((4 - s.payload % 4) % 4) as u64),
                Some(1),
                Some(u64::from(s.op != opcode::RC_ACKNOWLEDGE)),
                s.reth.map(|r| r.va),
                s.reth.map(|r| u64::from(r.rkey)),
                s.reth.map(|r| u64::from(r.dma_len)),
                s.aeth
                    .map(|a| u64::from(a.syndrome.to_byte().expect("syndrome"))),
                s.aeth.map(|a| u64::from(a.msn)),
                s.imm.map(u64::from),
                Some(icrc),
                Some(4791),
                Some(1), // ip.checksum.status: Good
            ];
            assert_eq!(
                row,
                &want,
                "tshark read {} as {row:?}\n{text}",
                opcode::name(s.op)
            );
        }
    }
}
