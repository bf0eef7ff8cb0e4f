//! Libra's header (Pan et al., "Libra: In-network Gradient Aggregation for Speeding up
//! Distributed Sparse Deep Training"), carried after UDP (port [`UDP_PORT`]).
//!
//! The paper does not print its header; this one carries what its Sec. 3.6 needs (a sequence
//! number, the retransmit flag) and the key-value pairs as 4-byte keys (rank indices for hot
//! parameters, model keys for cold ones) and 4-byte values, big-endian:
//!
//! ```text
//! byte 0       kind   1 push hot, 2 push cold, 3 result, 4 ack, 5 done
//! byte 1       flags  bit 0 retransmit; other bits 0
//! bytes 2-3    worker
//! bytes 4-7    seq
//! bytes 8-11   aux    a result stream's total packets (in a result); 0 otherwise by convention
//! bytes 12-13  pairs  number of (key, value) pairs that follow
//! bytes 14-15  reserved, 0
//! then         pairs x (key u32, value i32)
//! ```
//!
//! The UDP payload holds exactly the pairs the header counts: `new_checked` refuses a payload
//! of any other length, so a truncated or padded packet is an error.

use crate::{Error, be16, be32, need, put16, put32};

/// Libra's UDP port (ours; the paper names none).
pub const UDP_PORT: u16 = 48900;
/// Bytes of one (key, value) pair.
pub const PAIR_LEN: usize = 8;

/// What a Libra packet is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Hot gradients, worker -> switch.
    PushHot,
    /// Cold gradients, worker -> parameter server.
    PushCold,
    /// Aggregated values, switch or server -> worker.
    Result,
    Ack,
    /// A worker's pushes of the iteration are all acknowledged.
    Done,
}

impl Kind {
    pub const ALL: [Kind; 5] = [
        Kind::PushHot,
        Kind::PushCold,
        Kind::Result,
        Kind::Ack,
        Kind::Done,
    ];

    pub fn code(self) -> u8 {
        match self {
            Kind::PushHot => 1,
            Kind::PushCold => 2,
            Kind::Result => 3,
            Kind::Ack => 4,
            Kind::Done => 5,
        }
    }

    pub fn from_code(c: u8) -> Option<Kind> {
        Some(match c {
            1 => Kind::PushHot,
            2 => Kind::PushCold,
            3 => Kind::Result,
            4 => Kind::Ack,
            5 => Kind::Done,
            _ => return None,
        })
    }
}

const FLAG_RETRANSMIT: u8 = 1;

view!(
    /// A view of a Libra packet (the UDP payload): header and pairs. `new_checked` requires
    /// exactly the pairs the header counts.
    Packet
);

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn check_len(&self) -> Result<(), Error> {
        let b = self.buffer.as_ref();
        need("Libra header", b.len(), Repr::LEN)?;
        let want = Repr::LEN + PAIR_LEN * usize::from(self.pair_count());
        need("Libra pairs", b.len(), want)?;
        if b.len() != want {
            return Err(Error::Malformed("Libra pair count (bytes after the pairs)"));
        }
        Ok(())
    }

    pub fn kind_code(&self) -> u8 {
        self.buffer.as_ref()[0]
    }

    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[1]
    }

    pub fn worker(&self) -> u16 {
        be16(self.buffer.as_ref(), 2)
    }

    pub fn seq(&self) -> u32 {
        be32(self.buffer.as_ref(), 4)
    }

    pub fn aux(&self) -> u32 {
        be32(self.buffer.as_ref(), 8)
    }

    pub fn pair_count(&self) -> u16 {
        be16(self.buffer.as_ref(), 12)
    }

    pub fn reserved(&self) -> u16 {
        be16(self.buffer.as_ref(), 14)
    }

    /// Pair `i` (key, value); `i` must be below [`Packet::pair_count`].
    pub fn pair(&self, i: usize) -> (u32, i32) {
        let at = Repr::LEN + PAIR_LEN * i;
        let b = self.buffer.as_ref();
        (be32(b, at), be32(b, at + 4) as i32)
    }

    /// The pairs, in order.
    pub fn pairs(&self) -> impl Iterator<Item = (u32, i32)> + '_ {
        let n = usize::from(self.pair_count());
        self.buffer.as_ref()[Repr::LEN..Repr::LEN + PAIR_LEN * n]
            .chunks_exact(PAIR_LEN)
            .map(|c| (be32(c, 0), be32(c, 4) as i32))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Write pair `i`; the buffer must hold it.
    pub fn set_pair(&mut self, i: usize, key: u32, value: i32) {
        let at = Repr::LEN + PAIR_LEN * i;
        let b = self.buffer.as_mut();
        put32(b, at, key);
        put32(b, at + 4, value as u32);
    }
}

/// A Libra header (the pairs are the payload: [`Packet::pairs`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    pub kind: Kind,
    pub retransmit: bool,
    pub worker: u16,
    pub seq: u32,
    pub aux: u32,
    /// Pairs that follow the header.
    pub pairs: u16,
}

impl Repr {
    pub const LEN: usize = 16;

    /// Parse a UDP payload; an unknown kind, a flag other than retransmit, a reserved field that
    /// is not 0, or a length other than the pairs counted is an error.
    pub fn parse<B: AsRef<[u8]> + ?Sized>(packet: &B) -> Result<Repr, Error> {
        let p = Packet::new_checked(packet.as_ref())?;
        let kind = Kind::from_code(p.kind_code()).ok_or(Error::Malformed("Libra kind"))?;
        if p.flags() & !FLAG_RETRANSMIT != 0 {
            return Err(Error::Malformed("Libra flags (reserved bits set)"));
        }
        if p.reserved() != 0 {
            return Err(Error::Malformed("Libra reserved field"));
        }
        Ok(Repr {
            kind,
            retransmit: p.flags() & FLAG_RETRANSMIT != 0,
            worker: p.worker(),
            seq: p.seq(),
            aux: p.aux(),
            pairs: p.pair_count(),
        })
    }

    /// Header and pairs.
    pub fn buffer_len(&self) -> usize {
        Self::LEN + PAIR_LEN * usize::from(self.pairs)
    }

    /// Write the header (the pairs are the caller's: [`Packet::set_pair`]); a buffer shorter
    /// than the header is `Truncated`.
    pub fn emit<B: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut B) -> Result<(), Error> {
        let b = packet.as_mut();
        need("Libra header buffer", b.len(), Self::LEN)?;
        b[0] = self.kind.code();
        b[1] = if self.retransmit { FLAG_RETRANSMIT } else { 0 };
        put16(b, 2, self.worker);
        put32(b, 4, self.seq);
        put32(b, 8, self.aux);
        put16(b, 12, self.pairs);
        put16(b, 14, 0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: Repr = Repr {
        kind: Kind::PushCold,
        retransmit: true,
        worker: 0x0102,
        seq: 0x0304_0506,
        aux: 0x0708_090a,
        pairs: 1,
    };

    #[test]
    fn layout() {
        let mut b = [0u8; 24];
        H.emit(&mut b[..]).expect("emit");
        Packet::new_unchecked(&mut b[..]).set_pair(0, 0x0b0c_0d0e, -2);
        assert_eq!(
            b,
            [
                2, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0, 1, 0, 0, 11, 12, 13, 14, 0xff, 0xff, 0xff,
                0xfe
            ]
        );
        assert_eq!(Repr::parse(&b[..]), Ok(H));
        let p = Packet::new_checked(&b[..]).expect("view");
        assert_eq!(p.pairs().collect::<Vec<_>>(), vec![(0x0b0c_0d0e, -2)]);
    }

    #[test]
    fn malformed_are_errors() {
        let mut b = [0u8; 24];
        H.emit(&mut b[..]).expect("emit");
        for n in 0..24 {
            assert!(matches!(Repr::parse(&b[..n]), Err(Error::Truncated { .. })));
        }
        let mut long = [0u8; 25];
        long[..24].copy_from_slice(&b);
        assert!(matches!(Repr::parse(&long[..]), Err(Error::Malformed(_))));
        for (at, v) in [(0, 0), (0, 6), (1, 2), (15, 1)] {
            let mut m = b;
            m[at] = v;
            assert!(
                matches!(Repr::parse(&m[..]), Err(Error::Malformed(_))),
                "{at}={v}"
            );
        }
        assert!(H.emit(&mut [0u8; 15][..]).is_err());
    }
}
