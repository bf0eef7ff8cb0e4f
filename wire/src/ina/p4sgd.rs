//! P4SGD's header (He et al., "P4SGD: Programmable Switch Enhanced Model-Parallel Training on
//! Generalized Linear Models on Distributed FPGAs"; Fig. 4), directly after Ethernet
//! (EtherType [`ETHERTYPE`]).
//!
//! The paper names the fields Fig. 4 adds (rebuilt from the prose of Sec. 3.3): a node bitmap
//! with the sender's index set, the aggregation slot index (16 bits: 64K slots, Sec. 4.2), a flag
//! telling aggregation from acknowledgement, and a flag the switch sets to confirm that it has all
//! acknowledgements. It gives no byte layout, so this is ours. FPGA and switch talk raw Ethernet
//! (the paper's 64 B packets cannot hold IPv4 and UDP headers next to 8 x 32-bit values),
//! EtherType 0x88B5 (IEEE 802 local experimental):
//!
//! ```text
//! bytes 0-3   bitmap  node bitmap (bit w = worker w)
//! bytes 4-5   slot    aggregation slot index
//! bytes 6-7   round   how many times the worker used this slot before (our addition: it tells
//!                     a delayed duplicate from a new contribution)
//! byte 8      flags   bit 0 ack, bit 1 ack_done, bit 2 from_switch; others 0
//! byte 9      count   number of 32-bit values that follow
//! then        count x i32, big-endian; zero padding up to the Ethernet minimum may follow
//! ```

use crate::{Error, be16, be32, need, put16, put32};

/// IEEE 802 local experimental EtherType 1.
pub const ETHERTYPE: u16 = 0x88B5;
/// Most values a packet carries (a byte counts them).
pub const MAX_VALUES: usize = 255;

const FLAG_ACK: u8 = 1;
const FLAG_ACK_DONE: u8 = 2;
const FLAG_FROM_SWITCH: u8 = 4;

/// What a packet is (each kind is one combination of the flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Worker -> switch: a partial activation vector for aggregation.
    Aggregate,
    /// Switch -> worker: the full activation vector of a slot.
    Result,
    /// Worker -> switch: "I have the full activation".
    Ack,
    /// Switch -> worker: all workers acknowledged; the slot may be reused.
    AckDone,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::Aggregate, Kind::Result, Kind::Ack, Kind::AckDone];

    pub fn flags(self) -> u8 {
        match self {
            Kind::Aggregate => 0,
            Kind::Result => FLAG_FROM_SWITCH,
            Kind::Ack => FLAG_ACK,
            Kind::AckDone => FLAG_ACK | FLAG_ACK_DONE | FLAG_FROM_SWITCH,
        }
    }

    pub fn from_flags(f: u8) -> Result<Kind, Error> {
        if f & !(FLAG_ACK | FLAG_ACK_DONE | FLAG_FROM_SWITCH) != 0 {
            return Err(Error::Malformed("p4sgd flags (reserved bits set)"));
        }
        Kind::ALL
            .into_iter()
            .find(|k| k.flags() == f)
            .ok_or(Error::Malformed("p4sgd flags (no such combination)"))
    }
}

view!(
    /// A view of a P4SGD header and its values (the bytes after Ethernet). `new_checked`
    /// requires the values the count declares; bytes after them (padding) are allowed.
    Packet
);

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn check_len(&self) -> Result<(), Error> {
        let b = self.buffer.as_ref();
        need("p4sgd header", b.len(), Repr::LEN)?;
        need(
            "p4sgd values",
            b.len(),
            Repr::LEN + 4 * usize::from(self.count()),
        )
    }

    pub fn bitmap(&self) -> u32 {
        be32(self.buffer.as_ref(), 0)
    }

    pub fn slot(&self) -> u16 {
        be16(self.buffer.as_ref(), 4)
    }

    pub fn round(&self) -> u16 {
        be16(self.buffer.as_ref(), 6)
    }

    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[8]
    }

    pub fn count(&self) -> u8 {
        self.buffer.as_ref()[9]
    }

    /// The values (`count` of them; padding after them excluded).
    pub fn values(&self) -> impl Iterator<Item = i32> + '_ {
        let n = usize::from(self.count());
        self.buffer.as_ref()[Repr::LEN..Repr::LEN + 4 * n]
            .chunks_exact(4)
            .map(|c| be32(c, 0) as i32)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Write value `i`; the buffer must hold it.
    pub fn set_value(&mut self, i: usize, v: i32) {
        put32(self.buffer.as_mut(), Repr::LEN + 4 * i, v as u32);
    }
}

/// A P4SGD header (the values are the payload: [`Packet::values`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    pub bitmap: u32,
    pub slot: u16,
    pub round: u16,
    pub kind: Kind,
    /// Values that follow the header.
    pub count: u8,
}

impl Repr {
    pub const LEN: usize = 10;

    /// Parse; reserved flag bits, a flag combination that is no [`Kind`], or an empty bitmap in
    /// a worker's packet (aggregate, ack) is `Malformed`; fewer values than counted `Truncated`.
    pub fn parse<B: AsRef<[u8]> + ?Sized>(packet: &B) -> Result<Repr, Error> {
        let p = Packet::new_checked(packet.as_ref())?;
        let kind = Kind::from_flags(p.flags())?;
        if p.bitmap() == 0 && matches!(kind, Kind::Aggregate | Kind::Ack) {
            return Err(Error::Malformed("p4sgd bitmap (no sender bit)"));
        }
        Ok(Repr {
            bitmap: p.bitmap(),
            slot: p.slot(),
            round: p.round(),
            kind,
            count: p.count(),
        })
    }

    /// Header and values.
    pub fn buffer_len(&self) -> usize {
        Self::LEN + 4 * usize::from(self.count)
    }

    /// Write the header (the values are the caller's: [`Packet::set_value`]).
    pub fn emit<B: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut B) -> Result<(), Error> {
        let b = packet.as_mut();
        need("p4sgd header buffer", b.len(), Self::LEN)?;
        put32(b, 0, self.bitmap);
        put16(b, 4, self.slot);
        put16(b, 6, self.round);
        b[8] = self.kind.flags();
        b[9] = self.count;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: Repr = Repr {
        bitmap: 0x0102_0304,
        slot: 0x0506,
        round: 0x0708,
        kind: Kind::AckDone,
        count: 1,
    };

    #[test]
    fn layout() {
        let mut b = [0u8; 16];
        H.emit(&mut b[..]).expect("emit");
        Packet::new_unchecked(&mut b[..]).set_value(0, -1);
        assert_eq!(
            b,
            [1, 2, 3, 4, 5, 6, 7, 8, 7, 1, 0xff, 0xff, 0xff, 0xff, 0, 0]
        );
        assert_eq!(Repr::parse(&b[..]), Ok(H));
        let p = Packet::new_checked(&b[..]).expect("view");
        assert_eq!(p.values().collect::<Vec<_>>(), vec![-1]);
    }

    #[test]
    fn malformed_are_errors() {
        let mut b = [0u8; 14];
        H.emit(&mut b[..]).expect("emit");
        for n in 0..14 {
            assert!(matches!(Repr::parse(&b[..n]), Err(Error::Truncated { .. })));
        }
        for f in [2u8, 3, 5, 6, 8, 0x80] {
            let mut m = b;
            m[8] = f;
            assert!(
                matches!(Repr::parse(&m[..]), Err(Error::Malformed(_))),
                "{f}"
            );
        }
        let mut m = b;
        m[..4].copy_from_slice(&[0; 4]);
        m[8] = Kind::Aggregate.flags();
        assert!(matches!(Repr::parse(&m[..]), Err(Error::Malformed(_))));
        assert!(H.emit(&mut [0u8; 9][..]).is_err());
    }
}
