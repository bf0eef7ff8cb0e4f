//! LuWu's header (Sec. 3.2.3 of the LuWu paper), carried after UDP (port [`UDP_PORT`]).
//!
//! Parameter and gradient packets carry an incremental `SeqNum` and a vector of values;
//! parameter and gradient heartbeats carry the receiver's `Ack` (the next expected SeqNum) and
//! `Credit` (the largest SeqNum its RX buffer can accept). The paper names the fields but gives
//! no layout, so the layout is ours: a 16-byte header, then `count` 32-bit big-endian integers:
//!
//! ```text
//! byte 0       magic 0x4c ('L')
//! byte 1       kind  (1 param, 2 gradient, 3 aggregated gradient, 4 param heartbeat,
//!                     5 gradient heartbeat, 6 ring collective data)
//! byte 2       src   (WorkerNIC index, 0xff AggNIC, 0xfe SmartSwitch)
//! byte 3       flags (bit 0: aggregate with max instead of sum; other bits 0)
//! bytes 4-7    SeqNum (data) or Ack (heartbeat)
//! bytes 8-11   Credit (heartbeat; 0 in data packets)
//! bytes 12-13  count of 32-bit values (0 in heartbeats)
//! bytes 14-15  reserved, 0
//! ```
//!
//! The UDP payload holds exactly the values counted (at most [`MAX_VALUES`]). Each refusal of
//! [`Repr::parse`] is an [`Error::Malformed`] with one of the `E_*` texts below, so a caller can
//! tell them apart.

use crate::{Error, be16, be32, need, put16, put32};

/// UDP port of LuWu's traffic (ours; the paper names none).
pub const UDP_PORT: u16 = 48870;
/// 'L'.
pub const MAGIC: u8 = 0x4c;
/// `src` of the AggNIC.
pub const SRC_AGG: u8 = 0xff;
/// `src` of the SmartSwitch.
pub const SRC_SWITCH: u8 = 0xfe;
/// Largest number of values a packet may carry (a 9 KB jumbo frame).
pub const MAX_VALUES: usize = 2048;

pub const E_MAGIC: &str = "LuWu magic";
pub const E_KIND: &str = "LuWu kind";
pub const E_FLAGS: &str = "LuWu flags";
pub const E_RESERVED: &str = "LuWu reserved field";
pub const E_COUNT: &str = "LuWu count (values present differ, or over the maximum)";
pub const E_SHAPE: &str = "LuWu shape (a heartbeat with values or a data packet with a credit)";

const FLAG_MAX: u8 = 1;

/// What a packet is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// AggNIC -> switch -> every WorkerNIC.
    Param,
    /// WorkerNIC -> switch.
    Grad,
    /// Switch -> AggNIC: a complete aggregate.
    AggGrad,
    /// WorkerNIC -> switch (its RX Ack/Credit), and switch -> AggNIC (their minimum).
    ParamHeartbeat,
    /// AggNIC -> switch -> every WorkerNIC.
    GradHeartbeat,
    /// A ring collective's data (the ZeRO-3 baseline), forwarded by address.
    Ring,
}

impl Kind {
    pub const ALL: [Kind; 6] = [
        Kind::Param,
        Kind::Grad,
        Kind::AggGrad,
        Kind::ParamHeartbeat,
        Kind::GradHeartbeat,
        Kind::Ring,
    ];

    pub fn code(self) -> u8 {
        match self {
            Kind::Param => 1,
            Kind::Grad => 2,
            Kind::AggGrad => 3,
            Kind::ParamHeartbeat => 4,
            Kind::GradHeartbeat => 5,
            Kind::Ring => 6,
        }
    }

    pub fn from_code(c: u8) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.code() == c)
    }

    pub fn is_heartbeat(self) -> bool {
        matches!(self, Kind::ParamHeartbeat | Kind::GradHeartbeat)
    }
}

view!(
    /// A view of a LuWu packet (the UDP payload). `new_checked` requires the header only; the
    /// value count is checked by [`Repr::parse`].
    Packet
);

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn check_len(&self) -> Result<(), Error> {
        need("LuWu header", self.buffer.as_ref().len(), Repr::LEN)
    }

    pub fn magic(&self) -> u8 {
        self.buffer.as_ref()[0]
    }

    pub fn kind_code(&self) -> u8 {
        self.buffer.as_ref()[1]
    }

    pub fn src(&self) -> u8 {
        self.buffer.as_ref()[2]
    }

    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[3]
    }

    pub fn seq(&self) -> u32 {
        be32(self.buffer.as_ref(), 4)
    }

    pub fn credit(&self) -> u32 {
        be32(self.buffer.as_ref(), 8)
    }

    pub fn count(&self) -> u16 {
        be16(self.buffer.as_ref(), 12)
    }

    pub fn reserved(&self) -> u16 {
        be16(self.buffer.as_ref(), 14)
    }

    /// Bytes after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[Repr::LEN..]
    }

    /// The values after the header (whole 4-byte words of the payload).
    pub fn values(&self) -> impl Iterator<Item = i32> + '_ {
        self.payload().chunks_exact(4).map(|c| be32(c, 0) as i32)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Write value `i`; the buffer must hold it.
    pub fn set_value(&mut self, i: usize, v: i32) {
        put32(self.buffer.as_mut(), Repr::LEN + 4 * i, v as u32);
    }
}

/// A LuWu header (the values are the payload: [`Packet::values`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    pub kind: Kind,
    pub src: u8,
    /// Aggregate with max (SwitchML's exponent negotiation) instead of a sum.
    pub max: bool,
    /// SeqNum (data) or Ack (heartbeat).
    pub seq: u32,
    /// Credit (heartbeats only).
    pub credit: u32,
    pub count: u16,
}

impl Repr {
    pub const LEN: usize = 16;

    /// Parse a UDP payload: the header, and that exactly `count` values follow it.
    pub fn parse<B: AsRef<[u8]> + ?Sized>(packet: &B) -> Result<Repr, Error> {
        let p = Packet::new_checked(packet.as_ref())?;
        if p.magic() != MAGIC {
            return Err(Error::Malformed(E_MAGIC));
        }
        let kind = Kind::from_code(p.kind_code()).ok_or(Error::Malformed(E_KIND))?;
        if p.flags() & !FLAG_MAX != 0 {
            return Err(Error::Malformed(E_FLAGS));
        }
        if p.reserved() != 0 {
            return Err(Error::Malformed(E_RESERVED));
        }
        let count = usize::from(p.count());
        if count > MAX_VALUES || p.payload().len() != 4 * count {
            return Err(Error::Malformed(E_COUNT));
        }
        if kind.is_heartbeat() != (count == 0) || (!kind.is_heartbeat() && p.credit() != 0) {
            return Err(Error::Malformed(E_SHAPE));
        }
        Ok(Repr {
            kind,
            src: p.src(),
            max: p.flags() & FLAG_MAX != 0,
            seq: p.seq(),
            credit: p.credit(),
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
        need("LuWu header buffer", b.len(), Self::LEN)?;
        b[0] = MAGIC;
        b[1] = self.kind.code();
        b[2] = self.src;
        b[3] = if self.max { FLAG_MAX } else { 0 };
        put32(b, 4, self.seq);
        put32(b, 8, self.credit);
        put16(b, 12, self.count);
        put16(b, 14, 0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: Repr = Repr {
        kind: Kind::Grad,
        src: 3,
        max: true,
        seq: 0x0102_0304,
        credit: 0,
        count: 1,
    };

    #[test]
    fn layout() {
        let mut b = [0u8; 20];
        H.emit(&mut b[..]).expect("emit");
        Packet::new_unchecked(&mut b[..]).set_value(0, -2);
        assert_eq!(
            b,
            [
                0x4c, 2, 3, 1, 1, 2, 3, 4, 0, 0, 0, 0, 0, 1, 0, 0, 0xff, 0xff, 0xff, 0xfe
            ]
        );
        assert_eq!(Repr::parse(&b[..]), Ok(H));
        assert_eq!(
            Packet::new_checked(&b[..])
                .expect("view")
                .values()
                .collect::<Vec<_>>(),
            vec![-2]
        );
    }

    #[test]
    fn malformed_are_errors() {
        let mut b = [0u8; 20];
        H.emit(&mut b[..]).expect("emit");
        for n in 0..16 {
            assert!(matches!(Repr::parse(&b[..n]), Err(Error::Truncated { .. })));
        }
        for n in 16..20 {
            assert_eq!(Repr::parse(&b[..n]), Err(Error::Malformed(E_COUNT)));
        }
        for (at, v, e) in [
            (0, 0x4d, E_MAGIC),
            (1, 9, E_KIND),
            (3, 2, E_FLAGS),
            (15, 1, E_RESERVED),
            (1, 5, E_SHAPE),
            (11, 1, E_SHAPE),
        ] {
            let mut m = b;
            m[at] = v;
            assert_eq!(Repr::parse(&m[..]), Err(Error::Malformed(e)), "{at}={v}");
        }
        assert!(H.emit(&mut [0u8; 15][..]).is_err());
    }
}
