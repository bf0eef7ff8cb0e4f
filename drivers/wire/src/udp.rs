//! UDP. RoCEv2 sends a zero UDP checksum (the ICRC protects the packet), which is what we emit.

use crate::{Error, be16, need, put16};

pub const HEADER_LEN: usize = 8;
/// The RoCEv2 destination port (IANA).
pub const ROCEV2_PORT: u16 = 4791;

#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        need("udp header", buffer.as_ref().len(), HEADER_LEN)?;
        let p = Packet { buffer };
        let len = usize::from(p.len());
        if len < HEADER_LEN {
            return Err(Error::Malformed("udp length"));
        }
        need("udp datagram", p.buffer.as_ref().len(), len)?;
        Ok(p)
    }

    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), 0)
    }

    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), 2)
    }

    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> u16 {
        be16(self.buffer.as_ref(), 4)
    }

    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), 6)
    }

    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..usize::from(self.len())]
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub src_port: u16,
    pub dst_port: u16,
    pub payload_len: usize,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr, Error> {
        Ok(Repr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            payload_len: usize::from(p.len()) - HEADER_LEN,
        })
    }

    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) -> Result<(), Error> {
        let len = u16::try_from(HEADER_LEN + self.payload_len)
            .map_err(|_| Error::Malformed("udp payload too long"))?;
        let b = p.buffer.as_mut();
        need("udp header buffer", b.len(), HEADER_LEN)?;
        put16(b, 0, self.src_port);
        put16(b, 2, self.dst_port);
        put16(b, 4, len);
        put16(b, 6, 0);
        Ok(())
    }
}
