//! Immediate Data (IBA Vol. 1, Sec. 9.3; 4 bytes): 32 bits the requester hands to the
//! responder's completion, on SEND and RDMA WRITE last/only packets "with immediate". SwitchML-RDMA
//! carries its block-floating-point exponents here ([`crate::ina::switchml_rdma`]).

use crate::{Error, be32, need, put32};

pub const HEADER_LEN: usize = 4;

view!(
    /// A view of an ImmDt.
    Packet
);

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn check_len(&self) -> Result<(), Error> {
        need("ImmDt", self.buffer.as_ref().len(), HEADER_LEN)
    }

    /// The immediate value (the bytes as sent, read big-endian as Wireshark shows them).
    pub fn data(&self) -> u32 {
        be32(self.buffer.as_ref(), 0)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_data(&mut self, v: u32) {
        put32(self.buffer.as_mut(), 0, v);
    }
}

/// An ImmDt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    pub data: u32,
}

impl Repr {
    pub fn parse<B: AsRef<[u8]> + ?Sized>(packet: &B) -> Result<Repr, Error> {
        let p = Packet::new_checked(packet.as_ref())?;
        Ok(Repr { data: p.data() })
    }

    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    pub fn emit<B: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut B) -> Result<(), Error> {
        let b = packet.as_mut();
        need("ImmDt buffer", b.len(), HEADER_LEN)?;
        Packet::new_unchecked(b).set_data(self.data);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn big_endian_and_short() {
        let r = Repr { data: 0xdead_beef };
        let mut b = [0u8; 4];
        r.emit(&mut b[..]).expect("emit");
        assert_eq!(b, [0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(Repr::parse(&b), Ok(r));
        for n in 0..HEADER_LEN {
            assert!(matches!(Repr::parse(&b[..n]), Err(Error::Truncated { .. })));
        }
        assert!(r.emit(&mut [0u8; 3][..]).is_err());
    }
}
