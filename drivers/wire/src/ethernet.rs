//! Ethernet II.

use crate::{Error, be16, need, put16};

pub const HEADER_LEN: usize = 14;
pub const ETHERTYPE_IPV4: u16 = 0x0800;

pub type Mac = [u8; 6];

/// A view of an Ethernet II frame.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        need("ethernet header", buffer.as_ref().len(), HEADER_LEN)?;
        Ok(Packet { buffer })
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
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub dst: Mac,
    pub src: Mac,
    pub ethertype: u16,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr, Error> {
        Ok(Repr {
            dst: p.dst(),
            src: p.src(),
            ethertype: p.ethertype(),
        })
    }

    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_dst(self.dst);
        p.set_src(self.src);
        p.set_ethertype(self.ethertype);
    }
}
