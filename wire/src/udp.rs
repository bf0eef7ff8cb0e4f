//! UDP (RFC 768) over IPv4. The checksum is optional: zero means "none", which is what RoCEv2
//! senders put there (the ICRC protects the packet, and masks this field), and what
//! [`Repr::emit`] writes. [`Packet::fill_checksum`] and [`Packet::verify_checksum`] compute the
//! real one (with the IPv4 pseudo-header) for transports that want it.

use crate::{Error, be16, ipv4, need, put16};

pub const HEADER_LEN: usize = 8;
/// The RoCEv2 destination port (IANA; IBA Annex A17).
pub const ROCEV2_PORT: u16 = 4791;

view!(
    /// A view of a UDP datagram. `new_checked` validates the length field against the buffer.
    Packet
);

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn check_len(&self) -> Result<(), Error> {
        let b = self.buffer.as_ref();
        need("udp header", b.len(), HEADER_LEN)?;
        let len = usize::from(self.len());
        if len < HEADER_LEN {
            return Err(Error::Malformed("udp length"));
        }
        need("udp datagram", b.len(), len)
    }

    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), 0)
    }

    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), 2)
    }

    /// Header and payload, in bytes.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> u16 {
        be16(self.buffer.as_ref(), 4)
    }

    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), 6)
    }

    /// The bytes after the header, up to the length field.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..usize::from(self.len())]
    }

    /// Whether the checksum verifies for a datagram from `src` to `dst`; a zero checksum (none
    /// sent) verifies.
    pub fn verify_checksum(&self, src: [u8; 4], dst: [u8; 4]) -> bool {
        if self.checksum() == 0 {
            return true;
        }
        let d = &self.buffer.as_ref()[..usize::from(self.len())];
        ipv4::fold(ipv4::sum(d, pseudo_sum(src, dst, self.len()))) == 0xffff
    }
}

/// The ones' complement sum of the IPv4 pseudo-header (RFC 768).
fn pseudo_sum(src: [u8; 4], dst: [u8; 4], len: u16) -> u32 {
    let mut p = [0u8; 12];
    p[0..4].copy_from_slice(&src);
    p[4..8].copy_from_slice(&dst);
    p[9] = ipv4::PROTO_UDP;
    p[10..12].copy_from_slice(&len.to_be_bytes());
    ipv4::sum(&p, 0)
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_src_port(&mut self, v: u16) {
        put16(self.buffer.as_mut(), 0, v);
    }

    pub fn set_dst_port(&mut self, v: u16) {
        put16(self.buffer.as_mut(), 2, v);
    }

    pub fn set_len(&mut self, v: u16) {
        put16(self.buffer.as_mut(), 4, v);
    }

    pub fn set_checksum(&mut self, v: u16) {
        put16(self.buffer.as_mut(), 6, v);
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        let len = usize::from(self.len());
        &mut self.buffer.as_mut()[HEADER_LEN..len]
    }

    /// Compute and write the checksum over the header and payload (both in place) for a
    /// datagram from `src` to `dst`. A computed zero is sent as 0xffff (RFC 768).
    pub fn fill_checksum(&mut self, src: [u8; 4], dst: [u8; 4]) {
        self.set_checksum(0);
        let len = self.len();
        let d = &self.buffer.as_ref()[..usize::from(len)];
        let c = !ipv4::fold(ipv4::sum(d, pseudo_sum(src, dst, len)));
        self.set_checksum(if c == 0 { 0xffff } else { c });
    }
}

/// A UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    pub src_port: u16,
    pub dst_port: u16,
    /// Bytes after the UDP header.
    pub payload_len: usize,
}

impl Repr {
    /// Parse the header (the checksum is not checked here: it needs the IP addresses, see
    /// [`Packet::verify_checksum`]).
    pub fn parse<B: AsRef<[u8]> + ?Sized>(packet: &B) -> Result<Repr, Error> {
        let p = Packet::new_checked(packet.as_ref())?;
        Ok(Repr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            payload_len: usize::from(p.len()) - HEADER_LEN,
        })
    }

    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Emit the header with a zero checksum (none). The payload is not written.
    pub fn emit<B: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut B) -> Result<(), Error> {
        let len = u16::try_from(HEADER_LEN + self.payload_len)
            .map_err(|_| Error::Malformed("udp payload too long"))?;
        let b = packet.as_mut();
        need("udp header buffer", b.len(), HEADER_LEN)?;
        let mut p = Packet::new_unchecked(b);
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_len(len);
        p.set_checksum(0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: [u8; 4] = [192, 168, 0, 7];
    const DST: [u8; 4] = [192, 168, 0, 8];

    fn datagram(payload: &[u8]) -> Vec<u8> {
        let r = Repr {
            src_port: 49152,
            dst_port: ROCEV2_PORT,
            payload_len: payload.len(),
        };
        let mut b = vec![0u8; HEADER_LEN + payload.len()];
        r.emit(&mut b[..]).expect("emit");
        b[HEADER_LEN..].copy_from_slice(payload);
        b
    }

    #[test]
    fn checksum_fill_and_verify() {
        let mut b = datagram(&[1, 2, 3]);
        assert!(
            Packet::new_checked(&b[..])
                .expect("view")
                .verify_checksum(SRC, DST)
        );
        let mut p = Packet::new_checked(&mut b[..]).expect("view");
        p.fill_checksum(SRC, DST);
        assert_ne!(p.checksum(), 0);
        assert!(p.verify_checksum(SRC, DST));
        assert!(!p.verify_checksum(SRC, [192, 168, 0, 9]));
        p.payload_mut()[0] ^= 0x10;
        assert!(!p.verify_checksum(SRC, DST));
    }

    #[test]
    fn checksum_known_value() {
        // by hand: pseudo-header 0a00 0001 0a00 0002 0011 000a, header 0001 0002 000a 0000,
        // payload 6162: the words sum to 0x758d, the checksum is !0x758d = 0x8a72
        let mut b = vec![0, 1, 0, 2, 0, 10, 0, 0, 0x61, 0x62];
        let mut p = Packet::new_checked(&mut b[..]).expect("view");
        p.fill_checksum([10, 0, 0, 1], [10, 0, 0, 2]);
        assert_eq!(p.checksum(), 0x8a72);
    }

    #[test]
    fn malformed_are_errors() {
        let good = datagram(&[9; 5]);
        for n in 0..good.len() {
            assert!(Repr::parse(&good[..n]).is_err(), "{n} bytes");
        }
        let mut b = good.clone();
        put16(&mut b, 4, 7);
        assert_eq!(Repr::parse(&b), Err(Error::Malformed("udp length")));
        put16(&mut b, 4, 14);
        assert!(matches!(Repr::parse(&b), Err(Error::Truncated { .. })));
        // a buffer longer than the length field: the rest is not payload
        let mut long = good.clone();
        long.push(0xee);
        let p = Packet::new_checked(&long[..]).expect("view");
        assert_eq!(p.payload(), &[9; 5]);
        let too_long = Repr {
            src_port: 0,
            dst_port: 0,
            payload_len: 65_528,
        };
        assert!(too_long.emit(&mut [0u8; 8][..]).is_err());
        assert!(
            Repr {
                payload_len: 0,
                ..too_long
            }
            .emit(&mut [0u8; 7][..])
            .is_err()
        );
    }
}
