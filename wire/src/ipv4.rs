//! IPv4 (RFC 791). We emit 20-byte headers with DF set; options are accepted (and skipped) when
//! parsing. Fragments are `Unsupported`: RoCEv2 and the INA transports never fragment.

use crate::{Error, be16, need, put16, set_bit};

/// Without options.
pub const HEADER_LEN: usize = 20;
/// With the most options the IHL field allows.
pub const MAX_HEADER_LEN: usize = 60;
pub const PROTO_ICMP: u8 = 1;
pub const PROTO_UDP: u8 = 17;

/// The Internet checksum (RFC 1071) of `data`: the ones' complement of the ones' complement sum
/// of its 16-bit big-endian words (an odd last byte is padded with zero).
pub fn checksum(data: &[u8]) -> u16 {
    !fold(sum(data, 0))
}

/// The 32-bit ones' complement sum of `data`'s 16-bit words added to `acc` (not folded).
pub(crate) fn sum(data: &[u8], acc: u32) -> u32 {
    let mut acc = u64::from(acc);
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u64::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        acc += u64::from(*last) << 8;
    }
    while acc >> 32 != 0 {
        acc = (acc & 0xffff_ffff) + (acc >> 32);
    }
    acc as u32
}

/// Fold a 32-bit ones' complement sum to 16 bits.
pub(crate) fn fold(mut s: u32) -> u16 {
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

view!(
    /// A view of an IPv4 packet. `new_checked` validates the version, the header length and
    /// the total length against the buffer (which may be longer: Ethernet pads short frames).
    Packet
);

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn check_len(&self) -> Result<(), Error> {
        let b = self.buffer.as_ref();
        need("ipv4 header", b.len(), HEADER_LEN)?;
        if self.version() != 4 {
            return Err(Error::Malformed("ipv4 version"));
        }
        let ihl = self.header_len();
        if ihl < HEADER_LEN {
            return Err(Error::Malformed("ipv4 header length"));
        }
        need("ipv4 header with options", b.len(), ihl)?;
        let total = usize::from(self.total_len());
        if total < ihl {
            return Err(Error::Malformed("ipv4 total length"));
        }
        need("ipv4 packet", b.len(), total)
    }

    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }

    /// The header length in bytes (IHL x 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[0] & 0x0f) * 4
    }

    /// DSCP and ECN (the former TOS byte).
    pub fn tos(&self) -> u8 {
        self.buffer.as_ref()[1]
    }

    pub fn dscp(&self) -> u8 {
        self.tos() >> 2
    }

    /// ECN codepoint: 0 not ECT, 1 ECT(1), 2 ECT(0), 3 CE.
    pub fn ecn(&self) -> u8 {
        self.tos() & 0x03
    }

    pub fn total_len(&self) -> u16 {
        be16(self.buffer.as_ref(), 2)
    }

    pub fn ident(&self) -> u16 {
        be16(self.buffer.as_ref(), 4)
    }

    pub fn dont_fragment(&self) -> bool {
        self.buffer.as_ref()[6] & 0x40 != 0
    }

    pub fn more_fragments(&self) -> bool {
        self.buffer.as_ref()[6] & 0x20 != 0
    }

    /// Fragment offset in 8-byte units.
    pub fn frag_offset(&self) -> u16 {
        be16(self.buffer.as_ref(), 6) & 0x1fff
    }

    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[8]
    }

    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[9]
    }

    pub fn header_checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), 10)
    }

    pub fn src(&self) -> [u8; 4] {
        let b = self.buffer.as_ref();
        [b[12], b[13], b[14], b[15]]
    }

    pub fn dst(&self) -> [u8; 4] {
        let b = self.buffer.as_ref();
        [b[16], b[17], b[18], b[19]]
    }

    /// Whether the header checksum verifies.
    pub fn verify_checksum(&self) -> bool {
        checksum(&self.buffer.as_ref()[..self.header_len()]) == 0
    }

    /// The bytes after the header, up to the total length (Ethernet padding excluded).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..usize::from(self.total_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Version 4 and a header length in bytes (a multiple of 4, 20 to 60).
    pub fn set_version_and_header_len(&mut self, len: usize) {
        self.buffer.as_mut()[0] = 0x40 | ((len / 4) as u8 & 0x0f);
    }

    pub fn set_tos(&mut self, v: u8) {
        self.buffer.as_mut()[1] = v;
    }

    pub fn set_total_len(&mut self, v: u16) {
        put16(self.buffer.as_mut(), 2, v);
    }

    pub fn set_ident(&mut self, v: u16) {
        put16(self.buffer.as_mut(), 4, v);
    }

    pub fn set_dont_fragment(&mut self, on: bool) {
        set_bit(&mut self.buffer.as_mut()[6], 0x40, on);
    }

    pub fn set_more_fragments(&mut self, on: bool) {
        set_bit(&mut self.buffer.as_mut()[6], 0x20, on);
    }

    pub fn set_frag_offset(&mut self, v: u16) {
        let b = self.buffer.as_mut();
        let flags = be16(b, 6) & 0xe000;
        put16(b, 6, flags | (v & 0x1fff));
    }

    pub fn set_ttl(&mut self, v: u8) {
        self.buffer.as_mut()[8] = v;
    }

    pub fn set_protocol(&mut self, v: u8) {
        self.buffer.as_mut()[9] = v;
    }

    pub fn set_header_checksum(&mut self, v: u16) {
        put16(self.buffer.as_mut(), 10, v);
    }

    pub fn set_src(&mut self, a: [u8; 4]) {
        self.buffer.as_mut()[12..16].copy_from_slice(&a);
    }

    pub fn set_dst(&mut self, a: [u8; 4]) {
        self.buffer.as_mut()[16..20].copy_from_slice(&a);
    }

    /// Compute and write the header checksum.
    pub fn fill_checksum(&mut self) {
        self.set_header_checksum(0);
        let ihl = self.header_len();
        let c = checksum(&self.buffer.as_ref()[..ihl]);
        self.set_header_checksum(c);
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (h, t) = (self.header_len(), usize::from(self.total_len()));
        &mut self.buffer.as_mut()[h..t]
    }
}

/// An IPv4 header (no options, DF set when emitted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    pub src: [u8; 4],
    pub dst: [u8; 4],
    pub protocol: u8,
    /// DSCP and ECN.
    pub tos: u8,
    pub ttl: u8,
    pub ident: u16,
    /// Bytes after the IPv4 header.
    pub payload_len: usize,
}

impl Repr {
    /// Parse; the header checksum must verify and the packet must not be a fragment.
    pub fn parse<B: AsRef<[u8]> + ?Sized>(packet: &B) -> Result<Repr, Error> {
        let p = Packet::new_checked(packet.as_ref())?;
        if !p.verify_checksum() {
            return Err(Error::Checksum("ipv4 header"));
        }
        if p.more_fragments() || p.frag_offset() != 0 {
            return Err(Error::Unsupported("ipv4 fragment"));
        }
        Ok(Repr {
            src: p.src(),
            dst: p.dst(),
            protocol: p.protocol(),
            tos: p.tos(),
            ttl: p.ttl(),
            ident: p.ident(),
            payload_len: usize::from(p.total_len()) - p.header_len(),
        })
    }

    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Emit a 20-byte header with DF set and the checksum filled in. The payload is not written.
    pub fn emit<B: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut B) -> Result<(), Error> {
        let total = u16::try_from(HEADER_LEN + self.payload_len)
            .map_err(|_| Error::Malformed("ipv4 payload too long"))?;
        let b = packet.as_mut();
        need("ipv4 header buffer", b.len(), HEADER_LEN)?;
        // the header's 16-bit words (checksum 0), summed as values: the checksum is not read
        // back from the bytes just written (each 16-bit load over two byte stores stalls)
        let words = [
            0x4500 | u16::from(self.tos), // version 4, IHL 5 words
            total,
            self.ident,
            0x4000, // DF, fragment offset 0
            u16::from_be_bytes([self.ttl, self.protocol]),
            u16::from_be_bytes([self.src[0], self.src[1]]),
            u16::from_be_bytes([self.src[2], self.src[3]]),
            u16::from_be_bytes([self.dst[0], self.dst[1]]),
            u16::from_be_bytes([self.dst[2], self.dst[3]]),
        ];
        let csum = !fold(words.iter().map(|&w| u32::from(w)).sum());
        let mut h = [0u8; HEADER_LEN];
        for (i, w) in words[..5].iter().enumerate() {
            h[2 * i..2 * i + 2].copy_from_slice(&w.to_be_bytes());
        }
        h[10..12].copy_from_slice(&csum.to_be_bytes());
        h[12..16].copy_from_slice(&self.src);
        h[16..20].copy_from_slice(&self.dst);
        b[..HEADER_LEN].copy_from_slice(&h);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The header as the field setters write it, checksum filled from the bytes: what `emit`
    /// must equal.
    fn emit_by_setters(r: &Repr) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_version_and_header_len(HEADER_LEN);
        p.set_tos(r.tos);
        p.set_total_len((HEADER_LEN + r.payload_len) as u16);
        p.set_ident(r.ident);
        put16(p.buffer, 6, 0);
        p.set_dont_fragment(true);
        p.set_ttl(r.ttl);
        p.set_protocol(r.protocol);
        p.set_src(r.src);
        p.set_dst(r.dst);
        p.fill_checksum();
        b
    }

    #[test]
    fn emit_equals_the_setters_and_a_checksum_over_the_bytes() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = x.to_be_bytes();
            let r = Repr {
                src: [v[0], v[1], v[2], v[3]],
                dst: [v[4], v[5], v[6], v[7]],
                protocol: v[1] ^ v[6],
                tos: v[2] ^ v[5],
                ttl: v[3] ^ v[4],
                ident: (x >> 17) as u16,
                payload_len: (x >> 40) as usize % (65_536 - HEADER_LEN),
            };
            let mut b = [0xeeu8; HEADER_LEN + 2];
            r.emit(&mut b[..]).expect("emit");
            assert_eq!(b[..HEADER_LEN], emit_by_setters(&r), "{r:?}");
            assert_eq!(b[HEADER_LEN..], [0xee, 0xee], "only the header is written");
            assert_eq!(checksum(&b[..HEADER_LEN]), 0);
        }
    }

    fn sample() -> Vec<u8> {
        let r = Repr {
            src: [10, 0, 0, 1],
            dst: [10, 0, 0, 2],
            protocol: PROTO_UDP,
            tos: 0x02,
            ttl: 64,
            ident: 7,
            payload_len: 4,
        };
        let mut b = vec![0u8; 24];
        r.emit(&mut b[..]).expect("emit");
        b[20..].copy_from_slice(&[1, 2, 3, 4]);
        b
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 Sec. 3: the words 0001 f203 f4f5 f6f7 sum to ddf2 (checksum 220d)
        assert_eq!(
            checksum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            0x220d
        );
        assert_eq!(checksum(&[0xff]), !0xff00);
    }

    #[test]
    fn fields_and_payload() {
        let b = sample();
        let p = Packet::new_checked(&b[..]).expect("view");
        assert!(p.verify_checksum());
        assert!(p.dont_fragment() && !p.more_fragments());
        assert_eq!((p.dscp(), p.ecn()), (0, 2));
        assert_eq!(p.payload(), &[1, 2, 3, 4]);
        // Ethernet padding after the packet is not payload
        let mut padded = b.clone();
        padded.extend_from_slice(&[0; 10]);
        assert_eq!(
            Packet::new_checked(&padded[..])
                .expect("view")
                .payload()
                .len(),
            4
        );
        assert_eq!(Repr::parse(&padded).expect("parse").payload_len, 4);
    }

    #[test]
    fn malformed_are_errors() {
        let good = sample();
        for n in 0..good.len() {
            assert!(Repr::parse(&good[..n]).is_err(), "{n} bytes");
        }
        let bad = |f: &dyn Fn(&mut Vec<u8>), want: Error| {
            let mut b = good.clone();
            f(&mut b);
            assert_eq!(Repr::parse(&b), Err(want));
        };
        bad(&|b| b[0] = 0x65, Error::Malformed("ipv4 version"));
        bad(&|b| b[0] = 0x44, Error::Malformed("ipv4 header length"));
        // options that eat the payload: the header checksum no longer covers the right bytes
        bad(&|b| b[0] = 0x46, Error::Checksum("ipv4 header"));
        bad(&|b| put16(b, 2, 19), Error::Malformed("ipv4 total length"));
        bad(
            &|b| put16(b, 2, 100),
            Error::Truncated {
                what: "ipv4 packet",
                need: 100,
                have: 24,
            },
        );
        bad(&|b| b[8] = 1, Error::Checksum("ipv4 header"));
        bad(
            &|b| {
                b[6] |= 0x20;
                let mut p = Packet::new_unchecked(&mut b[..]);
                p.fill_checksum();
            },
            Error::Unsupported("ipv4 fragment"),
        );
        bad(
            &|b| {
                let mut p = Packet::new_unchecked(&mut b[..]);
                p.set_frag_offset(3);
                p.fill_checksum();
            },
            Error::Unsupported("ipv4 fragment"),
        );
        // the header-length check comes before the options are read
        let mut opt = good.clone();
        opt[0] = 0x4f;
        assert!(matches!(Repr::parse(&opt), Err(Error::Truncated { .. })));
    }

    #[test]
    fn emit_checks_lengths() {
        let r = Repr {
            src: [0; 4],
            dst: [0; 4],
            protocol: 0,
            tos: 0,
            ttl: 0,
            ident: 0,
            payload_len: 65_516,
        };
        assert!(r.emit(&mut [0u8; 20][..]).is_err());
        let r = Repr {
            payload_len: 0,
            ..r
        };
        assert!(matches!(
            r.emit(&mut [0u8; 19][..]),
            Err(Error::Truncated { .. })
        ));
        r.emit(&mut [0u8; 20][..]).expect("fits");
    }

    #[test]
    fn options_are_skipped() {
        let mut b = vec![0u8; 28];
        b[0] = 0x46;
        put16(&mut b, 2, 28);
        b[8] = 1;
        b[9] = PROTO_UDP;
        b[20..24].copy_from_slice(&[1, 1, 1, 1]); // NOP options
        Packet::new_unchecked(&mut b[..]).fill_checksum();
        let p = Packet::new_checked(&b[..]).expect("view");
        assert_eq!(p.header_len(), 24);
        assert_eq!(p.payload().len(), 4);
        assert_eq!(Repr::parse(&p).expect("parse").payload_len, 4);
    }
}
