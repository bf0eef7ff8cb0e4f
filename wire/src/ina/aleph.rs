//! ALEPH's packets: the UDP packet its XDP data plane aggregates (drivers/xdp, whose
//! `bpf/aleph.bpf.c` reads the same offsets) and the chunk header of the TCP aggregation
//! service the testbed compares it with (systems/aleph `testbed::proto`).
//!
//! The paper says only "128 gradients, coincident with the gradient size of one packet"
//! (Sec. 4.2); the header fields and their widths are ours (a 16-bit job, an 8-bit worker bit
//! index, a 32-bit round and segment id; the round lets a slot be reused by the next iteration):
//!
//! ```text
//! bytes 0-3    magic   0x414C5048 ("ALPH")
//! bytes 4-5    job
//! byte 6       kind    0 gradient, 1 result, 2 fetch
//! byte 7       worker  the sender's bit in the segment bitmap (0xff in results)
//! bytes 8-11   round
//! bytes 12-15  segment
//! then         128 x i32 (Q15.16 fixed point), big-endian
//! ```
//!
//! Every packet is exactly [`PACKET_LEN`] bytes (a fetch carries zeros).
//!
//! The Integrity Check's two other messages (Algorithm 2: a worker's "complete gradients have
//! been transmitted" to the PS, lines 1-6, and the PS's request to a worker for a lost gradient)
//! are [`Control`] messages: the same 16-byte header with no gradients after it, kind 3 (done)
//! or 4 (resend). The paper names these messages but gives no encoding; this one is the suite's
//! choice, the smallest consistent with the packet above (no new field, no new length but the
//! header's own). Being shorter than a gradient packet, the XDP program passes them to the
//! network stack unread (its length check, `aleph.bpf.c`), and [`Repr::parse`] still refuses
//! kinds 3 and 4 as unknown kinds: the bytes and the parse of the three kinds above are unchanged.
//!
//! ```text
//! bytes 0-15   the header above, kind 3 done   (worker -> PS: worker = the sender's bit,
//!                                               segment = how many segments it sent this round)
//!                                   kind 4 resend (PS -> worker: worker = that worker's bit,
//!                                               segment = the segment whose gradient is lost)
//! ```
//!
//! The TCP service's chunk ([`chunk`]) is `[index u32][count u32][count x i32]`, big-endian.

use crate::{Error, be16, be32, need, put16, put32};

/// Gradients per segment and per packet (ALEPH Sec. 4.2).
pub const GRADS: usize = 128;
/// "ALPH".
pub const MAGIC: u32 = 0x414C_5048;
/// UDP payload of every ALEPH packet.
pub const PACKET_LEN: usize = Repr::LEN + 4 * GRADS;
/// The [`Error::Malformed`] text of an unknown kind.
pub const E_KIND: &str = "ALEPH kind";

/// What a packet carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A worker's gradient segment, to be aggregated.
    Gradient,
    /// An aggregate (the paper's "multicast signal").
    Result,
    /// A receiver's request for an aggregate it lost (Algorithm 2, lines 8-13).
    Fetch,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Gradient, Kind::Result, Kind::Fetch];

    pub fn code(self) -> u8 {
        match self {
            Kind::Gradient => 0,
            Kind::Result => 1,
            Kind::Fetch => 2,
        }
    }

    pub fn from_code(c: u8) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.code() == c)
    }
}

view!(
    /// A view of an ALEPH packet (the UDP payload). `new_checked` requires exactly
    /// [`PACKET_LEN`] bytes.
    Packet
);

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn check_len(&self) -> Result<(), Error> {
        let n = self.buffer.as_ref().len();
        need("ALEPH packet", n, PACKET_LEN)?;
        if n != PACKET_LEN {
            return Err(Error::Malformed(
                "ALEPH packet length (bytes after the gradients)",
            ));
        }
        Ok(())
    }

    pub fn magic(&self) -> u32 {
        be32(self.buffer.as_ref(), 0)
    }

    pub fn job(&self) -> u16 {
        be16(self.buffer.as_ref(), 4)
    }

    pub fn kind_code(&self) -> u8 {
        self.buffer.as_ref()[6]
    }

    pub fn worker(&self) -> u8 {
        self.buffer.as_ref()[7]
    }

    pub fn round(&self) -> u32 {
        be32(self.buffer.as_ref(), 8)
    }

    pub fn segment(&self) -> u32 {
        be32(self.buffer.as_ref(), 12)
    }

    /// Gradient `i` (below [`GRADS`]).
    pub fn grad(&self, i: usize) -> i32 {
        be32(self.buffer.as_ref(), Repr::LEN + 4 * i) as i32
    }

    /// All [`GRADS`] gradients.
    pub fn grads(&self) -> [i32; GRADS] {
        std::array::from_fn(|i| self.grad(i))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Write gradient `i` (below [`GRADS`]).
    pub fn set_grad(&mut self, i: usize, v: i32) {
        put32(self.buffer.as_mut(), Repr::LEN + 4 * i, v as u32);
    }
}

/// An ALEPH header (the gradients are the payload: [`Packet::grads`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    pub job: u16,
    pub kind: Kind,
    pub worker: u8,
    pub round: u32,
    pub segment: u32,
}

impl Repr {
    pub const LEN: usize = 16;

    /// Parse a UDP payload; a length other than [`PACKET_LEN`], another magic or an unknown
    /// kind is an error (`Truncated` when short, `Malformed` otherwise; the magic is
    /// `Unsupported`: another protocol's packet).
    pub fn parse<B: AsRef<[u8]> + ?Sized>(packet: &B) -> Result<Repr, Error> {
        let p = Packet::new_checked(packet.as_ref())?;
        if p.magic() != MAGIC {
            return Err(Error::Unsupported("ALEPH magic"));
        }
        let kind = Kind::from_code(p.kind_code()).ok_or(Error::Malformed(E_KIND))?;
        Ok(Repr {
            job: p.job(),
            kind,
            worker: p.worker(),
            round: p.round(),
            segment: p.segment(),
        })
    }

    /// The whole packet: every ALEPH packet carries [`GRADS`] gradients.
    pub fn buffer_len(&self) -> usize {
        PACKET_LEN
    }

    /// Write the header (the gradients are the caller's: [`Packet::set_grad`]).
    pub fn emit<B: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut B) -> Result<(), Error> {
        let b = packet.as_mut();
        need("ALEPH header buffer", b.len(), Self::LEN)?;
        put32(b, 0, MAGIC);
        put16(b, 4, self.job);
        b[6] = self.kind.code();
        b[7] = self.worker;
        put32(b, 8, self.round);
        put32(b, 12, self.segment);
        Ok(())
    }
}

/// The [`Control::check_len`] text of a control message of another length.
pub const E_CONTROL_LEN: &str = "ALEPH control message length (the header alone)";
/// The [`Error::Malformed`] text of a control message whose kind is not a control kind.
pub const E_CONTROL_KIND: &str = "ALEPH control kind";

/// What a control message says (the Integrity Check, Algorithm 2 lines 1-6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ControlKind {
    /// Worker to PS: this round's gradients have all been sent (`segment`: how many).
    Done,
    /// PS to worker: send the gradient of `segment` again.
    Resend,
}

impl ControlKind {
    pub const ALL: [ControlKind; 2] = [ControlKind::Done, ControlKind::Resend];

    pub fn code(self) -> u8 {
        match self {
            ControlKind::Done => 3,
            ControlKind::Resend => 4,
        }
    }

    pub fn from_code(c: u8) -> Option<ControlKind> {
        ControlKind::ALL.into_iter().find(|k| k.code() == c)
    }
}

view!(
    /// A view of an ALEPH control message (the UDP payload). `new_checked` requires exactly
    /// [`Repr::LEN`] bytes.
    Control
);

impl<T: AsRef<[u8]>> Control<T> {
    pub fn check_len(&self) -> Result<(), Error> {
        let n = self.buffer.as_ref().len();
        need("ALEPH control message", n, Repr::LEN)?;
        if n != Repr::LEN {
            return Err(Error::Malformed(E_CONTROL_LEN));
        }
        Ok(())
    }

    pub fn magic(&self) -> u32 {
        be32(self.buffer.as_ref(), 0)
    }

    pub fn job(&self) -> u16 {
        be16(self.buffer.as_ref(), 4)
    }

    pub fn kind_code(&self) -> u8 {
        self.buffer.as_ref()[6]
    }

    pub fn worker(&self) -> u8 {
        self.buffer.as_ref()[7]
    }

    pub fn round(&self) -> u32 {
        be32(self.buffer.as_ref(), 8)
    }

    pub fn segment(&self) -> u32 {
        be32(self.buffer.as_ref(), 12)
    }
}

/// An ALEPH control message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ControlRepr {
    pub job: u16,
    pub kind: ControlKind,
    pub worker: u8,
    pub round: u32,
    pub segment: u32,
}

impl ControlRepr {
    pub const LEN: usize = Repr::LEN;

    /// Parse a UDP payload; a length other than [`Repr::LEN`] or a kind that is not a control
    /// kind is `Malformed` (`Truncated` when short), another magic `Unsupported`.
    pub fn parse<B: AsRef<[u8]> + ?Sized>(packet: &B) -> Result<ControlRepr, Error> {
        let p = Control::new_checked(packet.as_ref())?;
        if p.magic() != MAGIC {
            return Err(Error::Unsupported("ALEPH magic"));
        }
        let kind = ControlKind::from_code(p.kind_code()).ok_or(Error::Malformed(E_CONTROL_KIND))?;
        Ok(ControlRepr {
            job: p.job(),
            kind,
            worker: p.worker(),
            round: p.round(),
            segment: p.segment(),
        })
    }

    pub fn buffer_len(&self) -> usize {
        Self::LEN
    }

    /// Write the message.
    pub fn emit<B: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut B) -> Result<(), Error> {
        let b = packet.as_mut();
        need("ALEPH control buffer", b.len(), Self::LEN)?;
        put32(b, 0, MAGIC);
        put16(b, 4, self.job);
        b[6] = self.kind.code();
        b[7] = self.worker;
        put32(b, 8, self.round);
        put32(b, 12, self.segment);
        Ok(())
    }

    /// The message's bytes.
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        // cannot fail: the buffer is the message's length
        let _ = self.emit(&mut b[..]);
        b
    }
}

/// The TCP aggregation service's chunk framing: an 8-byte header (chunk index, gradient count),
/// then the gradients.
pub mod chunk {
    use crate::{Error, be32, need, put32};

    /// Most gradients a chunk carries (64 KiB of payload; see systems/aleph `testbed::proto`).
    pub const MAX_GRADS: usize = 16 * 1024;

    /// A chunk header.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct Repr {
        pub index: u32,
        /// Gradients that follow (at most [`MAX_GRADS`]).
        pub count: u32,
    }

    impl Repr {
        pub const LEN: usize = 8;

        /// Parse the first 8 bytes; a count over [`MAX_GRADS`] is `Malformed` (checked before
        /// the caller reads, let alone allocates, the body).
        pub fn parse<B: AsRef<[u8]> + ?Sized>(header: &B) -> Result<Repr, Error> {
            let b = header.as_ref();
            need("ALEPH chunk header", b.len(), Self::LEN)?;
            let r = Repr {
                index: be32(b, 0),
                count: be32(b, 4),
            };
            if r.count as usize > MAX_GRADS {
                return Err(Error::Malformed("ALEPH chunk count (over the maximum)"));
            }
            Ok(r)
        }

        /// Header and body.
        pub fn buffer_len(&self) -> usize {
            Self::LEN + 4 * self.count as usize
        }

        /// Write the header; a count over [`MAX_GRADS`] is `Malformed`.
        pub fn emit<B: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(
            &self,
            header: &mut B,
        ) -> Result<(), Error> {
            let b = header.as_mut();
            need("ALEPH chunk header buffer", b.len(), Self::LEN)?;
            if self.count as usize > MAX_GRADS {
                return Err(Error::Malformed("ALEPH chunk count (over the maximum)"));
            }
            put32(b, 0, self.index);
            put32(b, 4, self.count);
            Ok(())
        }
    }

    /// The gradients of a chunk body (whole 4-byte words).
    pub fn grads(body: &[u8]) -> impl Iterator<Item = i32> + '_ {
        body.chunks_exact(4).map(|c| be32(c, 0) as i32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: Repr = Repr {
        job: 0x0102,
        kind: Kind::Fetch,
        worker: 3,
        round: 0x0405_0607,
        segment: 0x0809_0a0b,
    };

    #[test]
    fn layout() {
        let mut b = [0u8; PACKET_LEN];
        H.emit(&mut b[..]).expect("emit");
        Packet::new_unchecked(&mut b[..]).set_grad(GRADS - 1, -2);
        assert_eq!(
            b[..16],
            [b'A', b'L', b'P', b'H', 1, 2, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]
        );
        assert_eq!(b[PACKET_LEN - 4..], [0xff, 0xff, 0xff, 0xfe]);
        assert_eq!(Repr::parse(&b[..]), Ok(H));
        assert_eq!(
            Packet::new_checked(&b[..]).expect("view").grad(GRADS - 1),
            -2
        );
    }

    #[test]
    fn malformed_are_errors() {
        let mut b = vec![0u8; PACKET_LEN + 1];
        H.emit(&mut b[..]).expect("emit");
        for n in [0, 15, 16, PACKET_LEN - 1] {
            assert!(matches!(Repr::parse(&b[..n]), Err(Error::Truncated { .. })));
        }
        assert!(matches!(Repr::parse(&b[..]), Err(Error::Malformed(_))));
        let mut m = b[..PACKET_LEN].to_vec();
        m[6] = 3;
        assert_eq!(Repr::parse(&m[..]), Err(Error::Malformed("ALEPH kind")));
        m[0] = 0;
        assert_eq!(Repr::parse(&m[..]), Err(Error::Unsupported("ALEPH magic")));
    }

    #[test]
    fn control_layout_and_refusals() {
        let c = ControlRepr {
            job: 0x0102,
            kind: ControlKind::Resend,
            worker: 3,
            round: 0x0405_0607,
            segment: 0x0809_0a0b,
        };
        let b = c.to_bytes();
        assert_eq!(
            b,
            [b'A', b'L', b'P', b'H', 1, 2, 4, 3, 4, 5, 6, 7, 8, 9, 10, 11]
        );
        assert_eq!(ControlRepr::parse(&b[..]), Ok(c));
        let done = ControlRepr {
            kind: ControlKind::Done,
            ..c
        };
        assert_eq!(done.to_bytes()[6], 3);
        assert_eq!(ControlRepr::parse(&done.to_bytes()[..]), Ok(done));
        for n in [0, 1, 15] {
            assert!(matches!(
                ControlRepr::parse(&b[..n]),
                Err(Error::Truncated { .. })
            ));
        }
        let mut long = b.to_vec();
        long.push(0);
        assert_eq!(
            ControlRepr::parse(&long[..]),
            Err(Error::Malformed(E_CONTROL_LEN))
        );
        // a data kind in a control message, and a control kind in a gradient-sized packet
        for k in Kind::ALL {
            let mut m = b;
            m[6] = k.code();
            assert_eq!(
                ControlRepr::parse(&m[..]),
                Err(Error::Malformed(E_CONTROL_KIND))
            );
        }
        let mut full = [0u8; PACKET_LEN];
        full[..16].copy_from_slice(&b);
        assert_eq!(Repr::parse(&full[..]), Err(Error::Malformed(E_KIND)));
        // a gradient packet's header is not a control message
        assert!(ControlRepr::parse(&full[..]).is_err());
        let mut m = b;
        m[0] = 0;
        assert_eq!(
            ControlRepr::parse(&m[..]),
            Err(Error::Unsupported("ALEPH magic"))
        );
    }

    #[test]
    fn chunk_header() {
        let h = chunk::Repr { index: 7, count: 3 };
        let mut b = [0u8; 8];
        h.emit(&mut b[..]).expect("emit");
        assert_eq!(b, [0, 0, 0, 7, 0, 0, 0, 3]);
        assert_eq!(chunk::Repr::parse(&b[..]), Ok(h));
        let big = (chunk::MAX_GRADS as u32 + 1).to_be_bytes();
        b[4..].copy_from_slice(&big);
        assert!(matches!(
            chunk::Repr::parse(&b[..]),
            Err(Error::Malformed(_))
        ));
        assert!(matches!(
            chunk::Repr::parse(&b[..7]),
            Err(Error::Truncated { .. })
        ));
    }
}
