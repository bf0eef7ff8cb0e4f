//! The RDMA Extended Transport Header (IBA Vol. 1, Sec. 9.3; 16 bytes): the remote Virtual
//! Address (64 bits), the R_Key (32) and the DMA Length of the whole message (32). It rides the
//! first (or only) packet of an RDMA WRITE. SwitchML-RDMA reuses its R_Key for the pool index
//! ([`crate::ina::switchml_rdma`]).

use crate::{Error, be32, be64, need, put32, put64};

pub const HEADER_LEN: usize = 16;

view!(
    /// A view of a RETH.
    Packet
);

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn check_len(&self) -> Result<(), Error> {
        need("RETH", self.buffer.as_ref().len(), HEADER_LEN)
    }

    pub fn va(&self) -> u64 {
        be64(self.buffer.as_ref(), 0)
    }

    pub fn rkey(&self) -> u32 {
        be32(self.buffer.as_ref(), 8)
    }

    pub fn dma_len(&self) -> u32 {
        be32(self.buffer.as_ref(), 12)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_va(&mut self, v: u64) {
        put64(self.buffer.as_mut(), 0, v);
    }

    pub fn set_rkey(&mut self, v: u32) {
        put32(self.buffer.as_mut(), 8, v);
    }

    pub fn set_dma_len(&mut self, v: u32) {
        put32(self.buffer.as_mut(), 12, v);
    }
}

/// A RETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    pub va: u64,
    pub rkey: u32,
    /// Bytes in the whole message.
    pub dma_len: u32,
}

impl Repr {
    pub fn parse<B: AsRef<[u8]> + ?Sized>(packet: &B) -> Result<Repr, Error> {
        let p = Packet::new_checked(packet.as_ref())?;
        Ok(Repr {
            va: p.va(),
            rkey: p.rkey(),
            dma_len: p.dma_len(),
        })
    }

    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    pub fn emit<B: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut B) -> Result<(), Error> {
        let b = packet.as_mut();
        need("RETH buffer", b.len(), HEADER_LEN)?;
        let mut p = Packet::new_unchecked(b);
        p.set_va(self.va);
        p.set_rkey(self.rkey);
        p.set_dma_len(self.dma_len);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_and_short() {
        let r = Repr {
            va: 0x0102_0304_0506_0708,
            rkey: 0x1122_3344,
            dma_len: 0x0000_1000,
        };
        let mut b = [0u8; 16];
        r.emit(&mut b[..]).expect("emit");
        assert_eq!(
            b,
            [
                1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x22, 0x33, 0x44, 0, 0, 0x10, 0
            ]
        );
        assert_eq!(Repr::parse(&b), Ok(r));
        for n in 0..HEADER_LEN {
            assert!(matches!(Repr::parse(&b[..n]), Err(Error::Truncated { .. })));
        }
        assert!(r.emit(&mut [0u8; 15][..]).is_err());
    }
}
