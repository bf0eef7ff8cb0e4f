//! IPv4 (no options are emitted; options are skipped when parsed).

use crate::{Error, be16, need, put16};

pub const HEADER_LEN: usize = 20;
pub const PROTO_UDP: u8 = 17;

/// A view of an IPv4 packet.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

/// The Internet checksum (RFC 1071) of `data`.
pub fn checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Checks the version, the header length and the total length against the buffer.
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let b = buffer.as_ref();
        need("ipv4 header", b.len(), HEADER_LEN)?;
        let p = Packet { buffer };
        if p.version() != 4 {
            return Err(Error::Malformed("ipv4 version"));
        }
        let ihl = p.header_len();
        if ihl < HEADER_LEN {
            return Err(Error::Malformed("ipv4 header length"));
        }
        need("ipv4 header with options", p.buffer.as_ref().len(), ihl)?;
        let total = usize::from(p.total_len());
        if total < ihl {
            return Err(Error::Malformed("ipv4 total length"));
        }
        need("ipv4 packet", p.buffer.as_ref().len(), total)?;
        Ok(p)
    }

    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }

    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[0] & 0x0f) * 4
    }

    /// DSCP and ECN (the former TOS byte).
    pub fn tos(&self) -> u8 {
        self.buffer.as_ref()[1]
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

    pub fn verify_checksum(&self) -> bool {
        checksum(&self.buffer.as_ref()[..self.header_len()]) == 0
    }

    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..usize::from(self.total_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn fill_checksum(&mut self) {
        let b = self.buffer.as_mut();
        put16(b, 10, 0);
        let ihl = usize::from(b[0] & 0x0f) * 4;
        let c = checksum(&b[..ihl]);
        put16(b, 10, c);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub src: [u8; 4],
    pub dst: [u8; 4],
    pub protocol: u8,
    pub tos: u8,
    pub ttl: u8,
    pub ident: u16,
    /// Bytes after the IPv4 header.
    pub payload_len: usize,
}

impl Repr {
    /// Parse; the header checksum must verify.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr, Error> {
        if !p.verify_checksum() {
            return Err(Error::Checksum("ipv4 header"));
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

    /// Emit a 20-byte header with DF set and the checksum filled in.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) -> Result<(), Error> {
        let total = u16::try_from(HEADER_LEN + self.payload_len)
            .map_err(|_| Error::Malformed("ipv4 payload too long"))?;
        let b = p.buffer.as_mut();
        need("ipv4 header buffer", b.len(), HEADER_LEN)?;
        b[0] = 0x45;
        b[1] = self.tos;
        put16(b, 2, total);
        put16(b, 4, self.ident);
        put16(b, 6, 0x4000);
        b[8] = self.ttl;
        b[9] = self.protocol;
        b[12..16].copy_from_slice(&self.src);
        b[16..20].copy_from_slice(&self.dst);
        p.fill_checksum();
        Ok(())
    }
}
