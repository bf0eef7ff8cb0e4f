//! NetReduce's INA header (Liu, Wang et al., "In-Network Aggregation with Transport Transparency
//! for Distributed Training"; line numbers below are those of `shared/papers/netreduce.txt`).
//!
//! Where it is. The host's flow control module attaches the header "(MsgID, MsgLen, Rank, and
//! RingID) in front of the tensor values" of each message (Sec. 3.1, line 201 of the text) and
//! hands the whole message to the RoCE connection, which "chunks a message into a sequence of
//! packets, where the first packet contains the INA header but the remaining packets do not"
//! (Sec. 3.2, lines 227-234, Fig. 4). Messages are RC RDMA WRITEs ("NetReduce uses RDMA write",
//! line 219; RC mode, line 242), so the header is the first 16 bytes of the payload of the
//! message's RDMA WRITE First (or Only) packet, right after the RETH; later packets carry only
//! tensor values, and the switch recovers their header from its Connection Lookup Table. "The
//! first packet of a message is identified by the InetTag (a magic number) in the INA header"
//! (line 240).
//!
//! ```text
//! bytes 0-3    InetTag   0x494E4554 ("INET")
//! bytes 4-5    RingID
//! bytes 6-7    Rank
//! bytes 8-11   MsgID     the message's index in the ring's message sequence
//! bytes 12-15  MsgLen    packets per message
//! ```
//!
//! The paper names the fields but gives no widths or order; these are ours, chosen as an FPGA
//! parser would want them: 32-bit aligned, so the tensor values after the header stay 4-byte
//! aligned; MsgLen counts packets because the aggregator address is
//! `MsgID % 2N x MsgLen + (PSN - PSN0)` (line 205), where PSN differences count packets; MsgLen is
//! at most 2^23, half the 24-bit PSN space, so `PSN - PSN0 < MsgLen` stays unambiguous (line 244).

use crate::{Error, be16, be32, need, put16, put32};

view!(
    /// A view of a NetReduce header at the start of a message (and of the tensor values after
    /// it in the same packet).
    Packet
);

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn check_len(&self) -> Result<(), Error> {
        need("NetReduce header", self.buffer.as_ref().len(), Repr::LEN)
    }

    pub fn inet_tag(&self) -> u32 {
        be32(self.buffer.as_ref(), 0)
    }

    pub fn ring_id(&self) -> u16 {
        be16(self.buffer.as_ref(), 4)
    }

    pub fn rank(&self) -> u16 {
        be16(self.buffer.as_ref(), 6)
    }

    pub fn msg_id(&self) -> u32 {
        be32(self.buffer.as_ref(), 8)
    }

    pub fn msg_len(&self) -> u32 {
        be32(self.buffer.as_ref(), 12)
    }

    /// The tensor values after the header (in this packet).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[Repr::LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_inet_tag(&mut self, v: u32) {
        put32(self.buffer.as_mut(), 0, v);
    }

    pub fn set_ring_id(&mut self, v: u16) {
        put16(self.buffer.as_mut(), 4, v);
    }

    pub fn set_rank(&mut self, v: u16) {
        put16(self.buffer.as_mut(), 6, v);
    }

    pub fn set_msg_id(&mut self, v: u32) {
        put32(self.buffer.as_mut(), 8, v);
    }

    pub fn set_msg_len(&mut self, v: u32) {
        put32(self.buffer.as_mut(), 12, v);
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[Repr::LEN..]
    }
}

/// A NetReduce header (the InetTag is implied).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    pub ring_id: u16,
    pub rank: u16,
    pub msg_id: u32,
    /// Packets per message, 1 to [`Repr::MAX_MSG_LEN`].
    pub msg_len: u32,
}

impl Repr {
    pub const LEN: usize = 16;
    /// "INET" in ASCII.
    pub const INET_TAG: u32 = 0x494e_4554;
    /// Half the PSN space.
    pub const MAX_MSG_LEN: u32 = 1 << 23;

    /// Whether a payload starts with the InetTag (the first packet of a NetReduce message).
    pub fn is_first(payload: &[u8]) -> bool {
        payload.len() >= Self::LEN && be32(payload, 0) == Self::INET_TAG
    }

    /// Parse; no InetTag, or a MsgLen of 0 or over [`Repr::MAX_MSG_LEN`], is `Malformed`.
    pub fn parse<B: AsRef<[u8]> + ?Sized>(packet: &B) -> Result<Repr, Error> {
        let p = Packet::new_checked(packet.as_ref())?;
        if p.inet_tag() != Self::INET_TAG {
            return Err(Error::Malformed("NetReduce InetTag"));
        }
        if p.msg_len() == 0 || p.msg_len() > Self::MAX_MSG_LEN {
            return Err(Error::Malformed("NetReduce MsgLen"));
        }
        Ok(Repr {
            ring_id: p.ring_id(),
            rank: p.rank(),
            msg_id: p.msg_id(),
            msg_len: p.msg_len(),
        })
    }

    pub fn buffer_len(&self) -> usize {
        Self::LEN
    }

    /// Emit with the InetTag; a MsgLen out of range is `Malformed`.
    pub fn emit<B: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut B) -> Result<(), Error> {
        let b = packet.as_mut();
        need("NetReduce header buffer", b.len(), Self::LEN)?;
        if self.msg_len == 0 || self.msg_len > Self::MAX_MSG_LEN {
            return Err(Error::Malformed("NetReduce MsgLen"));
        }
        let mut p = Packet::new_unchecked(b);
        p.set_inet_tag(Self::INET_TAG);
        p.set_ring_id(self.ring_id);
        p.set_rank(self.rank);
        p.set_msg_id(self.msg_id);
        p.set_msg_len(self.msg_len);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: Repr = Repr {
        ring_id: 0x0102,
        rank: 0x0304,
        msg_id: 0x0506_0708,
        msg_len: 4,
    };

    #[test]
    fn layout() {
        let mut b = [0u8; 20];
        H.emit(&mut b[..]).expect("emit");
        assert_eq!(
            b[..16],
            [b'I', b'N', b'E', b'T', 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 4]
        );
        assert!(Repr::is_first(&b));
        let p = Packet::new_checked(&b[..]).expect("view");
        assert_eq!(p.payload().len(), 4);
        assert_eq!(Repr::parse(&p), Ok(H));
        assert_eq!(Repr::parse(&b[..]), Ok(H));
    }

    #[test]
    fn malformed_are_errors() {
        let mut b = [0u8; 16];
        H.emit(&mut b[..]).expect("emit");
        for n in 0..16 {
            assert!(matches!(Repr::parse(&b[..n]), Err(Error::Truncated { .. })));
            assert!(!Repr::is_first(&b[..n]));
        }
        let mut no_tag = b;
        no_tag[0] = 0;
        assert_eq!(
            Repr::parse(&no_tag),
            Err(Error::Malformed("NetReduce InetTag"))
        );
        assert!(!Repr::is_first(&no_tag));
        for len in [0u32, Repr::MAX_MSG_LEN + 1, u32::MAX] {
            let mut m = b;
            put32(&mut m, 12, len);
            assert_eq!(Repr::parse(&m), Err(Error::Malformed("NetReduce MsgLen")));
            assert!(Repr { msg_len: len, ..H }.emit(&mut [0u8; 16][..]).is_err());
        }
        assert!(H.emit(&mut [0u8; 15][..]).is_err());
    }
}
