//! The RoCEv2 invariant CRC (IBA Annex A17, "RoCEv2"; the same computation as Linux's
//! `drivers/infiniband/sw/rxe/rxe_icrc.c` and scapy's `contrib/roce.py`).
//!
//! CRC-32 with the Ethernet polynomial (what [`crc32fast`] computes: reflected, initial value and
//! final XOR all ones) over
//!
//! 1. 8 bytes of 0xFF standing in for the InfiniBand LRH that RoCEv2 does not have;
//! 2. the IPv4 header with the fields routers may change set to all ones: TOS (DSCP and ECN),
//!    TTL and the header checksum;
//! 3. the UDP header with its checksum set to all ones;
//! 4. the BTH with its byte 4 (FECN, BECN and the six reserved bits, "resv8a") set to all ones;
//! 5. the extension headers, the payload and its pad, as sent.
//!
//! The result is appended after the pad, least significant byte first. Only the 8 + 20 + 8 + 12
//! byte masked prefix is copied; the rest is hashed in place. The tests check it against a
//! CNP captured on a ConnectX-4 Lx.

use crate::{Error, ib, ipv4, need, udp};

pub const ICRC_LEN: usize = 4;

/// `crc32(8 x 0xFF)`: the state after the masked LRH, from which every ICRC continues.
const LRH_CRC: u32 = 0x2144_df1c;

/// The ICRC of a RoCEv2 packet: `ip` runs from the IPv4 header to the end of the pad, without the
/// ICRC. Only IPv4 is spoken (`Unsupported` otherwise).
pub fn compute(ip: &[u8]) -> Result<u32, Error> {
    head_crc(ip)
}

/// The CRC state after the masked LRH, the masked headers of `ip` and the rest of `ip`.
fn head_crc(ip: &[u8]) -> Result<u32, Error> {
    need("RoCEv2 packet", ip.len(), ipv4::HEADER_LEN)?;
    if ip[0] >> 4 != 4 {
        return Err(Error::Unsupported("IP version for the ICRC (only IPv4)"));
    }
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    if ihl < ipv4::HEADER_LEN {
        return Err(Error::Malformed("ipv4 header length"));
    }
    let masked = ihl + udp::HEADER_LEN + ib::BTH_LEN;
    need("RoCEv2 packet", ip.len(), masked)?;
    // the masked copy takes what follows too when the whole packet fits (an ACK, the head of a
    // result copy): one CRC call instead of two, each of which ends in a reduction
    let copied = if ip.len() <= SHORT { ip.len() } else { masked };
    let mut head = [0u8; SHORT];
    let h = &mut head[..copied];
    h.copy_from_slice(&ip[..copied]);
    h[1] = 0xff; // TOS: DSCP and ECN
    h[8] = 0xff; // TTL
    h[10] = 0xff; // header checksum
    h[11] = 0xff;
    h[ihl + 6] = 0xff; // UDP checksum
    h[ihl + 7] = 0xff;
    h[ihl + udp::HEADER_LEN + 4] = 0xff; // BTH: FECN, BECN, resv6a
    let mut hasher = crc32fast::Hasher::new_with_initial(LRH_CRC);
    hasher.update(h);
    hasher.update(&ip[copied..]);
    Ok(hasher.finalize())
}

/// The CRC that continues from the masked LRH over `ip` as it is, its variant fields not
/// masked. CRC-32 is affine in its input, so for packets of one length whose variant fields
/// (TOS, TTL, IPv4 and UDP checksums, BTH byte 4) hold the same values, `compute(ip) ^
/// unmasked(ip)` is the same constant: a receiver that knows it from one such packet gets
/// the ICRC of the next with this one pass and no masked copy ([`crate::roce::ParseTemplate`]).
pub fn unmasked(ip: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new_with_initial(LRH_CRC);
    hasher.update(ip);
    hasher.finalize()
}

/// Packets up to this long are hashed from one masked copy (it holds the longest masked
/// prefix, 60 + 8 + 12 bytes).
const SHORT: usize = 128;

/// The reflected Ethernet polynomial.
const POLY: u32 = 0xedb8_8320;

/// `a(x) * b(x) mod p(x)` in the reflected bit order of the CRC (zlib's `multmodp`).
fn multiply(a: u32, mut b: u32) -> u32 {
    let mut p = 0u32;
    for i in 0..32 {
        p ^= b & ((a >> (31 - i)) & 1).wrapping_neg();
        b = (b >> 1) ^ ((b & 1).wrapping_neg() & POLY);
    }
    p
}

/// `x^(8 len) mod p(x)`, reflected: multiplying a CRC by it appends `len` zero bytes.
fn x8n(len: usize) -> u32 {
    let mut p = 0x8000_0000; // x^0
    let mut sq = 0x0080_0000; // x^8
    let mut n = len;
    while n != 0 {
        if n & 1 != 0 {
            p = multiply(sq, p);
        }
        sq = multiply(sq, sq);
        n >>= 1;
    }
    p
}

/// The bytes at the end of several packets that differ only before them (an aggregate sent to
/// every worker under each one's headers): their CRC, computed once with [`SharedTail::new`].
/// CRC-32 is linear, so `crc(A ‖ B) = crc(A) · x^(8|B|) mod p ⊕ crc(B)` (zlib's `crc32_combine`),
/// and each packet's ICRC needs only its own head hashed ([`compute_with_tail`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedTail {
    /// CRC-32 of the tail bytes then `pad` zero bytes
    crc: u32,
    len: usize,
}

impl SharedTail {
    /// The tail `bytes` followed by `pad` zero bytes (the packet's pad, when the tail ends the
    /// payload).
    pub fn new(bytes: &[u8], pad: usize) -> SharedTail {
        let mut h = crc32fast::Hasher::new();
        h.update(bytes);
        for _ in 0..pad {
            h.update(&[0]);
        }
        SharedTail {
            crc: h.finalize(),
            len: bytes.len() + pad,
        }
    }

    /// Bytes covered (tail and pad).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Appending a fixed number of bytes to a CRC: `x^(8 len) mod p` as four byte-indexed tables
/// (the product is linear in the CRC, so it is the XOR of one entry per byte of it).
#[derive(Clone)]
pub struct Shift {
    len: usize,
    table: Box<[[u32; 256]; 4]>,
}

impl std::fmt::Debug for Shift {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shift").field("len", &self.len).finish()
    }
}

impl Shift {
    /// The shift past `len` bytes (32 multiplies to build: every other entry is an XOR of those).
    pub fn new(len: usize) -> Shift {
        let x = x8n(len);
        let mut table = Box::new([[0u32; 256]; 4]);
        for (k, t) in table.iter_mut().enumerate() {
            for bit in 0..8 {
                let v = 1usize << bit;
                t[v] = multiply(x, 1u32 << (8 * k + bit));
                for low in 1..v {
                    t[v | low] = t[v] ^ t[low];
                }
            }
        }
        Shift { len, table }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `crc · x^(8 len) mod p`.
    fn apply(&self, crc: u32) -> u32 {
        let t = &self.table;
        t[0][(crc & 0xff) as usize]
            ^ t[1][((crc >> 8) & 0xff) as usize]
            ^ t[2][((crc >> 16) & 0xff) as usize]
            ^ t[3][(crc >> 24) as usize]
    }
}

/// The ICRC of a packet whose bytes after `head` (which runs from the IPv4 header, and holds at
/// least the masked headers) are those `tail` was made from: the same value [`compute`] gives on
/// the whole packet, with only `head` hashed. `shift` must be for `tail.len()` bytes.
pub fn compute_with_tail(head: &[u8], tail: &SharedTail, shift: &Shift) -> Result<u32, Error> {
    if shift.len != tail.len {
        return Err(Error::Malformed("ICRC shift not for the tail's length"));
    }
    Ok(shift.apply(head_crc(head)?) ^ tail.crc)
}

/// The ICRC at the end of `ip` (the IPv4 packet including its trailing ICRC), as sent.
pub fn read(ip: &[u8]) -> Result<u32, Error> {
    need("RoCEv2 packet with ICRC", ip.len(), ICRC_LEN)?;
    let t = &ip[ip.len() - ICRC_LEN..];
    Ok(u32::from_le_bytes([t[0], t[1], t[2], t[3]]))
}

/// Verify the ICRC at the end of `ip` (the IPv4 packet including its trailing ICRC).
pub fn verify(ip: &[u8]) -> Result<(), Error> {
    let want = read(ip)?;
    if compute(&ip[..ip.len() - ICRC_LEN])? == want {
        Ok(())
    } else {
        Err(Error::Checksum("ICRC"))
    }
}

/// Compute the ICRC of `ip` (the IPv4 packet with 4 bytes of room at its end) and write it into
/// those last 4 bytes.
pub fn fill(ip: &mut [u8]) -> Result<(), Error> {
    need("RoCEv2 packet with ICRC", ip.len(), ICRC_LEN)?;
    let n = ip.len() - ICRC_LEN;
    let crc = compute(&ip[..n])?;
    ip[n..].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// Append the ICRC to a frame whose IPv4 packet starts at `ip_offset` and runs to its end.
pub fn append(frame: &mut Vec<u8>, ip_offset: usize) -> Result<(), Error> {
    let ip = frame
        .get(ip_offset..)
        .ok_or(Error::Malformed("ip offset past the frame"))?;
    let crc = compute(ip)?;
    frame.extend_from_slice(&crc.to_le_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A RoCEv2 CNP captured on a ConnectX-4 Lx, as published in scapy's
    /// `test/contrib/roce.uts` ("RoCE CNP captured on ConnectX-4 Lx"): Ethernet, IPv4 (TOS 0xc2),
    /// UDP to 4791 (checksum 0), BTH (opcode 0x81, BECN), 16 reserved bytes, ICRC 82 fd 00 2a.
    pub(crate) const CAPTURED_CNP: [u8; 74] = [
        0xe4, 0x1d, 0x2d, 0xab, 0x2b, 0xc2, 0x7c, 0xfe, 0x90, 0x64, 0x3b, 0x32, 0x08, 0x00, 0x45,
        0xc2, 0x00, 0x3c, 0x71, 0x8c, 0x40, 0x00, 0x40, 0x11, 0x91, 0x61, 0x0a, 0x00, 0x11, 0x01,
        0x0a, 0x00, 0x12, 0x01, 0x00, 0x00, 0x12, 0xb7, 0x00, 0x28, 0x00, 0x00, 0x81, 0x00, 0xff,
        0xff, 0x40, 0x00, 0x01, 0x18, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x82, 0xfd, 0x00, 0x2a,
    ];

    #[test]
    fn lrh_seed() {
        assert_eq!(crc32fast::hash(&[0xff; 8]), LRH_CRC);
    }

    #[test]
    fn captured_connectx4_cnp() {
        let ip = &CAPTURED_CNP[14..];
        assert_eq!(compute(&ip[..ip.len() - 4]), Ok(0x2a00_fd82));
        assert_eq!(read(ip), Ok(0x2a00_fd82));
        verify(ip).expect("the NIC's ICRC verifies");
        let mut again = CAPTURED_CNP[..CAPTURED_CNP.len() - 4].to_vec();
        append(&mut again, 14).expect("append");
        assert_eq!(again, CAPTURED_CNP);
    }

    /// Bytes from a xorshift generator (any bytes do: the CRC identities hold for all).
    fn noise(seed: u64, n: usize) -> Vec<u8> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect()
    }

    #[test]
    fn shift_appends_zero_bytes_and_combines_like_crc32fast() {
        for (seed, len) in [
            (1, 0),
            (2, 1),
            (3, 3),
            (4, 4),
            (5, 255),
            (6, 1008),
            (7, 1027),
            (8, 4100),
        ] {
            let a = noise(seed, 37);
            let b = noise(seed + 100, len);
            let shift = Shift::new(len);
            // crc(a ‖ zeros) = shift(crc(a)) ^ crc(zeros) ... and with any b:
            let mut whole = crc32fast::Hasher::new();
            whole.update(&a);
            whole.update(&b);
            let (ca, cb) = (crc32fast::hash(&a), crc32fast::hash(&b));
            assert_eq!(shift.apply(ca) ^ cb, whole.finalize(), "{len} bytes");
            // and as crc32fast's own combine
            let mut ha = crc32fast::Hasher::new();
            ha.update(&a);
            let mut hb = crc32fast::Hasher::new();
            hb.update(&b);
            ha.combine(&hb);
            assert_eq!(shift.apply(ca) ^ cb, ha.finalize());
        }
    }

    #[test]
    fn a_shared_tail_gives_the_icrc_of_the_whole_packet() {
        let ip = &CAPTURED_CNP[14..CAPTURED_CNP.len() - 4];
        // the masked prefix is the 40 bytes of IPv4, UDP and BTH: split anywhere after it
        for split in 40..=ip.len() {
            let (head, tail) = ip.split_at(split);
            let shared = SharedTail::new(tail, 0);
            let shift = Shift::new(shared.len());
            assert_eq!(
                compute_with_tail(head, &shared, &shift),
                Ok(0x2a00_fd82),
                "at {split}"
            );
        }
        // random packets behind the CNP's headers, with a pad of zeros after the tail
        for (seed, n, pad) in [
            (11, 1024, 0),
            (12, 1008, 0),
            (13, 61, 3),
            (14, 2, 2),
            (15, 0, 0),
        ] {
            let mut pkt = ip[..40].to_vec();
            let head = noise(seed, 16);
            let tail = noise(seed + 7, n);
            pkt.extend_from_slice(&head);
            pkt.extend_from_slice(&tail);
            pkt.extend(std::iter::repeat_n(0u8, pad));
            let shared = SharedTail::new(&tail, pad);
            assert_eq!(shared.len(), n + pad);
            let shift = Shift::new(n + pad);
            assert_eq!(
                compute_with_tail(&pkt[..56], &shared, &shift),
                compute(&pkt),
                "{n} bytes + {pad}"
            );
            // a shift for another length is refused, a head without its headers too
            assert!(compute_with_tail(&pkt[..56], &shared, &Shift::new(n + pad + 1)).is_err());
            assert!(compute_with_tail(&pkt[..39], &shared, &shift).is_err());
        }
    }

    /// `compute ^ unmasked` depends only on the masked fields' values and the length: the
    /// same for the CNP with another PSN and payload, another for another TTL.
    #[test]
    fn the_masking_correction_is_constant_per_masked_fields_and_length() {
        let ip = &CAPTURED_CNP[14..CAPTURED_CNP.len() - 4];
        let fix = compute(ip).expect("icrc") ^ unmasked(ip);
        let mut other = ip.to_vec();
        other[20 + 8 + 9] ^= 0x5a; // PSN
        other[50] ^= 0xff; // payload
        assert_ne!(compute(&other), compute(ip));
        assert_eq!(compute(&other).expect("icrc") ^ unmasked(&other), fix);
        other[8] ^= 1; // TTL: masked, so the correction changes
        assert_ne!(compute(&other).expect("icrc") ^ unmasked(&other), fix);
    }

    #[test]
    fn short_and_non_ipv4_are_errors() {
        let ip = &CAPTURED_CNP[14..];
        for n in 0..ip.len() {
            // too short for the masked prefix, or the last 4 bytes are not the ICRC
            assert!(verify(&ip[..n]).is_err(), "{n} bytes");
        }
        let mut v6 = ip.to_vec();
        v6[0] = 0x60;
        assert!(matches!(compute(&v6), Err(Error::Unsupported(_))));
        v6[0] = 0x44;
        assert!(matches!(compute(&v6), Err(Error::Malformed(_))));
        v6[0] = 0x4f; // 60-byte header: longer than this packet's prefix allows
        assert!(matches!(compute(&v6[..60]), Err(Error::Truncated { .. })));
        assert!(append(&mut vec![0u8; 10], 11).is_err());
        assert!(fill(&mut [0u8; 3]).is_err());
    }
}
