//! Ethernet II (DIX) frames, without the FCS (as captures and the kernel's raw sockets show them).

use crate::{Error, be16, need, put16};

/// Destination MAC, source MAC, EtherType.
pub const HEADER_LEN: usize = 14;
/// The shortest frame a NIC sends without the FCS (shorter ones are padded with zeros).
pub const MIN_FRAME_LEN: usize = 60;
pub const ETHERTYPE_IPV4: u16 = 0x0800;
pub const ETHERTYPE_ARP: u16 = 0x0806;
pub const ETHERTYPE_VLAN: u16 = 0x8100;
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
/// RoCE v1 (the IB GRH right after Ethernet); this crate speaks RoCEv2 (over UDP/IPv4).
pub const ETHERTYPE_ROCEV1: u16 = 0x8915;
/// Values below this in the EtherType position are IEEE 802.3 lengths, not EtherTypes.
pub const ETHERTYPE_MIN: u16 = 0x0600;

pub type Mac = [u8; 6];

view!(
    /// A view of an Ethernet II frame.
    Packet
);

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn check_len(&self) -> Result<(), Error> {
        need("ethernet header", self.buffer.as_ref().len(), HEADER_LEN)
    }

    pub fn dst(&self) -> Mac {
        let mut m = [0; 6];
        m.copy_from_slice(&self.buffer.as_ref()[0..6]);
        m
    }

    pub fn src(&self) -> Mac {
        let mut m = [0; 6];
        m.copy_from_slice(&self.buffer.as_ref()[6..12]);
        m
    }

    pub fn ethertype(&self) -> u16 {
        be16(self.buffer.as_ref(), 12)
    }

    /// Everything after the header (for IPv4, the IP packet and any padding up to 60 bytes).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_dst(&mut self, m: Mac) {
        self.buffer.as_mut()[0..6].copy_from_slice(&m);
    }

    pub fn set_src(&mut self, m: Mac) {
        self.buffer.as_mut()[6..12].copy_from_slice(&m);
    }

    pub fn set_ethertype(&mut self, t: u16) {
        put16(self.buffer.as_mut(), 12, t);
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

/// An Ethernet II header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    pub dst: Mac,
    pub src: Mac,
    pub ethertype: u16,
}

impl Repr {
    /// Parse a header; an 802.3 length in the EtherType position is `Unsupported`.
    pub fn parse<B: AsRef<[u8]> + ?Sized>(packet: &B) -> Result<Repr, Error> {
        let p = Packet::new_checked(packet.as_ref())?;
        if p.ethertype() < ETHERTYPE_MIN {
            return Err(Error::Unsupported("802.3 length field (not Ethernet II)"));
        }
        Ok(Repr {
            dst: p.dst(),
            src: p.src(),
            ethertype: p.ethertype(),
        })
    }

    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write the header.
    ///
    /// # Panics
    /// If the buffer is shorter than [`HEADER_LEN`] (as smoltcp's emitters do; every other
    /// `emit` in this crate returns an error instead).
    pub fn emit<B: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut B) {
        let mut p = Packet::new_unchecked(packet.as_mut());
        p.set_dst(self.dst);
        p.set_src(self.src);
        p.set_ethertype(self.ethertype);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FRAME: [u8; 16] = [2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00, 0xaa, 0xbb];

    #[test]
    fn parse_and_emit() {
        let p = Packet::new_checked(&FRAME[..]).expect("view");
        assert_eq!(p.payload(), &[0xaa, 0xbb]);
        let r = Repr::parse(&p).expect("parse");
        assert_eq!(r.ethertype, ETHERTYPE_IPV4);
        assert_eq!(r.dst, [2, 0, 0, 0, 0, 2]);
        let mut b = [0u8; HEADER_LEN];
        r.emit(&mut b[..]);
        assert_eq!(b, FRAME[..HEADER_LEN]);
    }

    #[test]
    fn short_and_8023_are_errors() {
        for n in 0..HEADER_LEN {
            assert!(matches!(
                Repr::parse(&FRAME[..n]),
                Err(Error::Truncated { .. })
            ));
            assert!(Packet::new_checked(&FRAME[..n]).is_err());
        }
        // an unchecked view over a short buffer still parses to an error
        assert!(Repr::parse(&Packet::new_unchecked(&FRAME[..3])).is_err());
        let mut f = FRAME;
        f[12] = 0x05;
        f[13] = 0xdc; // 1500: an 802.3 length
        assert_eq!(
            Repr::parse(&f[..]),
            Err(Error::Unsupported("802.3 length field (not Ethernet II)"))
        );
    }
}
