//! The ICRC against third-party packets and a straightforward reference, and which bits it
//! covers: any bit flipped outside the masked fields fails it, the masked fields may change.

use inabench_wire::ib::{self, BthRepr, opcode};
use inabench_wire::roce::{FrameRepr, IP_OFFSET};
use inabench_wire::{Error, icrc, ipv4};
use proptest::prelude::*;

/// A RoCEv2 CNP captured on a ConnectX-4 Lx, published in scapy's test suite
/// (secdev/scapy `test/contrib/roce.uts`, "RoCE CNP captured on ConnectX-4 Lx"). TOS 0xc2 and
/// BECN set: both masked. The NIC's ICRC is the last four bytes.
const CAPTURED_CNP: &str = "e41d2dab2bc2 7cfe90643b32 0800 \
    45c2003c718c400040119161 0a001101 0a001201 \
    000012b700280000 \
    8100ffff4000011800000000 \
    00000000000000000000000000000000 \
    82fd002a";

/// scapy's "example UC packet" (same file): UC SEND Only, pad count 2, with the ICRC scapy
/// asserts (0x78f353f3 as the wire shows it) and scapy's own UDP checksum 0xaca2 (masked).
const SCAPY_UC_SEND_ONLY: &str = "248a07a8fa22 248a07a8fa22 0800 \
    450100400478400040 11 b4d5 c0a80007 c0a80007 \
    c00012b7002caca2 \
    2460ffff000000d300cf1710 \
    4630818be28935d90e9a95505401be885e50 0000 \
    78f353f3";

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// The ICRC the plain way: copy the whole packet, mask, hash 8 x 0xFF and it.
fn reference_icrc(ip: &[u8]) -> u32 {
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    let mut m = vec![0xffu8; 8];
    m.extend_from_slice(ip);
    let p = &mut m[8..];
    p[1] = 0xff;
    p[8] = 0xff;
    p[10] = 0xff;
    p[11] = 0xff;
    p[ihl + 6] = 0xff;
    p[ihl + 7] = 0xff;
    p[ihl + 8 + 4] = 0xff;
    crc32fast::hash(&m)
}

/// Byte offsets (in the IP packet, IHL 5) that the ICRC masks.
const MASKED: [usize; 7] = [1, 8, 10, 11, 26, 27, 32];

#[test]
fn captured_connectx4_cnp_verifies() {
    let f = hex(CAPTURED_CNP);
    assert_eq!(f.len(), 74);
    let ip = &f[IP_OFFSET..];
    icrc::verify(ip).expect("the NIC's ICRC");
    assert_eq!(icrc::compute(&ip[..ip.len() - 4]), Ok(0x2a00_fd82));
    assert_eq!(reference_icrc(&ip[..ip.len() - 4]), 0x2a00_fd82);
    let bth = BthRepr::parse(&f[42..]).expect("BTH");
    assert_eq!(
        (bth.opcode, bth.becn, bth.dest_qp),
        (opcode::CNP, true, 0x118)
    );
    // a CNP is not an opcode the frame parser speaks, but it gets that far
    assert_eq!(
        FrameRepr::parse(&f),
        Err(Error::Unsupported("transport (only RC and UC)"))
    );
}

#[test]
fn scapy_uc_send_only_parses_and_we_rebuild_it() {
    let f = hex(SCAPY_UC_SEND_ONLY);
    assert_eq!(f.len(), 78);
    icrc::verify(&f[IP_OFFSET..]).expect("scapy's ICRC");
    let (repr, payload) = FrameRepr::parse(&f).expect("parse");
    assert_eq!(repr.bth.opcode, opcode::UC_SEND_ONLY);
    assert_eq!((repr.bth.dest_qp, repr.bth.psn), (211, 13_571_856));
    assert!(repr.bth.migreq);
    assert_eq!((repr.tos, repr.ttl, repr.src_port), (1, 64, 49152));
    assert_eq!(payload.len(), 18, "20 bytes less the pad count of 2");
    // our builder gives the same bytes but for the IPv4 ident (we send 0) and the UDP
    // checksum (we send none; it is masked, so the ICRC is the same)
    let mut ours = repr.build(payload).expect("build");
    assert_eq!(ours.len(), f.len());
    {
        let mut ip = ipv4::Packet::new_checked(&mut ours[IP_OFFSET..]).expect("ip");
        ip.set_ident(1144);
        ip.fill_checksum();
    }
    icrc::fill(&mut ours[IP_OFFSET..]).expect("icrc");
    assert_eq!(ours[40..42], [0, 0]);
    ours[40..42].copy_from_slice(&[0xac, 0xa2]);
    assert_eq!(ours, f);
}

fn sample(payload_len: usize) -> Vec<u8> {
    let l = ib::layout(opcode::RC_RDMA_WRITE_ONLY_IMM).expect("opcode");
    FrameRepr {
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac: [2, 0, 0, 0, 0, 2],
        src_ip: [10, 0, 0, 1],
        dst_ip: [10, 0, 0, 2],
        src_port: 49152,
        tos: 0x02,
        ttl: 64,
        bth: BthRepr {
            opcode: opcode::RC_RDMA_WRITE_ONLY_IMM,
            solicited: true,
            migreq: true,
            pad_count: 0,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: 0x12,
            ack_req: true,
            psn: 0xabcdef,
        },
        reth: l.reth.then_some(ib::RethRepr {
            va: 0x1000_2000_3000,
            rkey: 0xabcd,
            dma_len: payload_len as u32,
        }),
        aeth: None,
        immdt: Some(0x0102_0304),
    }
    .build(&vec![0x5a; payload_len])
    .expect("build")
}

proptest! {
    #[test]
    fn matches_the_reference(body in prop::collection::vec(any::<u8>(), 40..600)) {
        // any bytes with an IPv4 version/IHL nibble: the ICRC does not parse beyond that
        let mut ip = body;
        ip[0] = 0x45;
        prop_assert_eq!(icrc::compute(&ip).expect("icrc"), reference_icrc(&ip));
    }

    #[test]
    fn any_unmasked_bit_flip_fails(payload_len in 0usize..200, at in any::<prop::sample::Index>(), bit in 0u8..8) {
        let f = sample(payload_len);
        let ip = &f[IP_OFFSET..];
        icrc::verify(ip).expect("built frames verify");
        let i = at.index(ip.len());
        prop_assume!(!MASKED.contains(&i));
        let mut bad = ip.to_vec();
        bad[i] ^= 1 << bit;
        if i == 0 {
            // version and IHL: not IPv4 any more, or the masks move
            prop_assert!(icrc::verify(&bad).is_err());
        } else {
            prop_assert_eq!(icrc::verify(&bad), Err(Error::Checksum("ICRC")));
        }
        // the frame parser reports it (or, for header bits, whatever broke first)
        let mut frame = f.clone();
        frame[IP_OFFSET + i] ^= 1 << bit;
        prop_assert!(FrameRepr::parse(&frame).is_err());
    }

    #[test]
    fn masked_fields_may_change(payload_len in 0usize..200, tos: u8, ttl: u8, udp_csum: u16,
                                fecn: bool, becn: bool, resv6a in 0u8..64) {
        let f = sample(payload_len);
        let mut hop = f.clone();
        {
            let ip = &mut hop[IP_OFFSET..];
            ip[1] = tos;
            ip[8] = ttl;
            ip[26..28].copy_from_slice(&udp_csum.to_be_bytes());
            ip[32] = (u8::from(fecn) << 7) | (u8::from(becn) << 6) | resv6a;
            // routers rewrite the header checksum after changing TTL or ECN
            ipv4::Packet::new_unchecked(&mut ip[..]).fill_checksum();
        }
        icrc::verify(&hop[IP_OFFSET..]).expect("masked fields are not covered");
        let (h, _) = FrameRepr::parse(&hop).expect("parses after the hop");
        prop_assert_eq!((h.tos, h.ttl, h.bth.fecn, h.bth.becn), (tos, ttl, fecn, becn));
    }
}
