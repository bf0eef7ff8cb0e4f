//! ATP's header (Lao et al., "ATP: In-network Aggregation for Multi-tenant Learning", NSDI'21).
//!
//! The paper's header names the job, the sequence number, the aggregator index the job's hash
//! picks, a worker bitmap and the fan-in degree (how many contributions complete an aggregator),
//! and flags: resend, collision (the aggregator was taken by another job, so the packet goes on
//! to the parameter server), ECN (the switch saw congestion; ATP's congestion control reacts to
//! it on the worker) and the ACK/result flag. The paper's figure draws it for a two-level
//! hierarchy (a bitmap and fan-in per level); the released code (in-ATP/ATP,
//! `common/packet.h` `struct agghdr` and `p4src/includes/headers.p4` `p4ml_t`) is the one-switch
//! form that Table 6's micro-benchmark runs, and we follow it byte for byte:
//!
//! ```text
//! bytes 0-3    worker bitmap (a worker sets 1 << its id)
//! byte 4       fan-in degree (agghdr.num_worker, p4ml_t.agtr_time)
//! byte 5       flags: 7 overflow (values are floats), 6-5 parameter-server index, 4 data index
//!              (which half of the values this pass aggregates), 3 ECN, 2 resend, 1 collision, 0 ACK
//! bytes 6-7    job id (appID)
//! bytes 8-9    sequence number
//! bytes 10-11  aggregator index for values 0-30
//! bytes 12-13  aggregator index for values 31-61 (the host sets it to the first + MAX_AGTR_COUNT)
//! then         62 big-endian int32 values (248 bytes), then the 12-byte [`Trailer`]
//! ```
//!
//! The release sends this after an IPv4 header in an Ethernet frame of type [`ETHERTYPE`]
//! (0x0700), without UDP; an emulated fabric may carry the same bytes in UDP.

use crate::{Error, be16, be32, need, put16, put32};

/// The Ethernet type of ATP frames in the released code (an IPv4 header follows).
pub const ETHERTYPE: u16 = 0x0700;
/// Values per packet (`MAX_ENTRIES_PER_PACKET`).
pub const VALUES_PER_PACKET: usize = 62;
/// Bytes of values per packet (`P4ML_DATA_SIZE`).
pub const VALUES_LEN: usize = 4 * VALUES_PER_PACKET;
/// Header, values and trailer (`P4ML_LAYER_SIZE`, 274).
pub const LAYER_LEN: usize = Repr::LEN + VALUES_LEN + Trailer::LEN;

view!(
    /// A view of an ATP header (and what follows it).
    Packet
);

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn check_len(&self) -> Result<(), Error> {
        need("ATP header", self.buffer.as_ref().len(), Repr::LEN)
    }

    pub fn bitmap(&self) -> u32 {
        be32(self.buffer.as_ref(), 0)
    }

    pub fn fan_in(&self) -> u8 {
        self.buffer.as_ref()[4]
    }

    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[5]
    }

    pub fn overflow(&self) -> bool {
        self.flags() & 0x80 != 0
    }

    /// 2 bits.
    pub fn ps_index(&self) -> u8 {
        (self.flags() >> 5) & 0x3
    }

    pub fn data_index(&self) -> bool {
        self.flags() & 0x10 != 0
    }

    pub fn ecn(&self) -> bool {
        self.flags() & 0x08 != 0
    }

    pub fn resend(&self) -> bool {
        self.flags() & 0x04 != 0
    }

    pub fn collision(&self) -> bool {
        self.flags() & 0x02 != 0
    }

    pub fn is_ack(&self) -> bool {
        self.flags() & 0x01 != 0
    }

    pub fn job(&self) -> u16 {
        be16(self.buffer.as_ref(), 6)
    }

    pub fn sequence(&self) -> u16 {
        be16(self.buffer.as_ref(), 8)
    }

    pub fn aggregator(&self) -> u16 {
        be16(self.buffer.as_ref(), 10)
    }

    pub fn aggregator2(&self) -> u16 {
        be16(self.buffer.as_ref(), 12)
    }

    /// The bytes after the header (values, then the trailer).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[Repr::LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_bitmap(&mut self, v: u32) {
        put32(self.buffer.as_mut(), 0, v);
    }

    pub fn set_fan_in(&mut self, v: u8) {
        self.buffer.as_mut()[4] = v;
    }

    pub fn set_flags(&mut self, v: u8) {
        self.buffer.as_mut()[5] = v;
    }

    pub fn set_job(&mut self, v: u16) {
        put16(self.buffer.as_mut(), 6, v);
    }

    pub fn set_sequence(&mut self, v: u16) {
        put16(self.buffer.as_mut(), 8, v);
    }

    pub fn set_aggregator(&mut self, v: u16) {
        put16(self.buffer.as_mut(), 10, v);
    }

    pub fn set_aggregator2(&mut self, v: u16) {
        put16(self.buffer.as_mut(), 12, v);
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[Repr::LEN..]
    }
}

/// An ATP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Which workers' contributions this packet carries.
    pub bitmap: u32,
    /// Contributions that complete the aggregator: 1 to 32 (the bitmap's width).
    pub fan_in: u8,
    /// The values are floats (the aggregator overflowed, so the PS sums them).
    pub overflow: bool,
    /// Which parameter server (2 bits).
    pub ps_index: u8,
    /// Which half of the values this pass aggregates.
    pub data_index: bool,
    /// Congestion seen on the way.
    pub ecn: bool,
    pub resend: bool,
    /// The aggregator was taken by another job: the packet goes on to the PS.
    pub collision: bool,
    /// An ACK (the aggregated result, from the PS or the switch).
    pub is_ack: bool,
    pub job: u16,
    pub sequence: u16,
    pub aggregator: u16,
    pub aggregator2: u16,
}

impl Repr {
    pub const LEN: usize = 14;
    /// The bitmap's width.
    pub const MAX_FAN_IN: u8 = 32;

    /// Parse; a fan-in of 0 or over 32 is `Malformed`.
    // always inlined: returned through memory, the fields were stored and reloaded at
    // mismatched widths (store-forwarding stalls in the switch models' profiles)
    #[inline(always)]
    pub fn parse<B: AsRef<[u8]> + ?Sized>(packet: &B) -> Result<Repr, Error> {
        let p = Packet::new_checked(packet.as_ref())?;
        if p.fan_in() == 0 || p.fan_in() > Self::MAX_FAN_IN {
            return Err(Error::Malformed("ATP fan-in degree"));
        }
        Ok(Repr {
            bitmap: p.bitmap(),
            fan_in: p.fan_in(),
            overflow: p.overflow(),
            ps_index: p.ps_index(),
            data_index: p.data_index(),
            ecn: p.ecn(),
            resend: p.resend(),
            collision: p.collision(),
            is_ack: p.is_ack(),
            job: p.job(),
            sequence: p.sequence(),
            aggregator: p.aggregator(),
            aggregator2: p.aggregator2(),
        })
    }

    pub fn buffer_len(&self) -> usize {
        Self::LEN
    }

    /// The flags byte.
    pub fn flags(&self) -> u8 {
        (u8::from(self.overflow) << 7)
            | ((self.ps_index & 0x3) << 5)
            | (u8::from(self.data_index) << 4)
            | (u8::from(self.ecn) << 3)
            | (u8::from(self.resend) << 2)
            | (u8::from(self.collision) << 1)
            | u8::from(self.is_ack)
    }

    /// Emit the header; a fan-in out of range or a PS index over 2 bits is `Malformed`.
    pub fn emit<B: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut B) -> Result<(), Error> {
        let b = packet.as_mut();
        need("ATP header buffer", b.len(), Self::LEN)?;
        if self.fan_in == 0 || self.fan_in > Self::MAX_FAN_IN {
            return Err(Error::Malformed("ATP fan-in degree"));
        }
        if self.ps_index > 3 {
            return Err(Error::Malformed("ATP PS index over 2 bits"));
        }
        let mut p = Packet::new_unchecked(b);
        p.set_bitmap(self.bitmap);
        p.set_fan_in(self.fan_in);
        p.set_flags(self.flags());
        p.set_job(self.job);
        p.set_sequence(self.sequence);
        p.set_aggregator(self.aggregator);
        p.set_aggregator2(self.aggregator2);
        Ok(())
    }
}

/// The 12 bytes after ATP's values: the tensor's key and length in values. ATP's C++ writes the
/// key without byte swapping, so on its x86 hosts it is little-endian; the length is big-endian.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Trailer {
    pub key: u64,
    pub tensor_len: u32,
}

impl Trailer {
    pub const LEN: usize = 12;

    pub fn parse<B: AsRef<[u8]> + ?Sized>(bytes: &B) -> Result<Trailer, Error> {
        let b = bytes.as_ref();
        need("ATP trailer", b.len(), Self::LEN)?;
        let mut k = [0u8; 8];
        k.copy_from_slice(&b[..8]);
        Ok(Trailer {
            key: u64::from_le_bytes(k),
            tensor_len: be32(b, 8),
        })
    }

    pub fn buffer_len(&self) -> usize {
        Self::LEN
    }

    pub fn emit<B: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, bytes: &mut B) -> Result<(), Error> {
        let b = bytes.as_mut();
        need("ATP trailer buffer", b.len(), Self::LEN)?;
        b[..8].copy_from_slice(&self.key.to_le_bytes());
        put32(b, 8, self.tensor_len);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: Repr = Repr {
        bitmap: 1 << 5,
        fan_in: 6,
        overflow: false,
        ps_index: 2,
        data_index: true,
        ecn: true,
        resend: true,
        collision: false,
        is_ack: false,
        job: 0x0102,
        sequence: 0x0304,
        aggregator: 0x0506,
        aggregator2: 0x0708,
    };

    #[test]
    fn layout_matches_agghdr() {
        let mut b = [0u8; 14];
        H.emit(&mut b[..]).expect("emit");
        // flags: PS index 2 (0x40), data index (0x10), ECN (0x08), resend (0x04) = 0x5c
        assert_eq!(b, [0, 0, 0, 0x20, 6, 0x5c, 1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(Repr::parse(&b), Ok(H));
        let p = Packet::new_checked(&b[..]).expect("view");
        assert!(p.ecn() && p.resend() && p.data_index() && !p.collision() && !p.is_ack());
        assert_eq!(LAYER_LEN, 274);
    }

    #[test]
    fn trailer() {
        let t = Trailer {
            key: 0x0807_0605_0403_0201,
            tensor_len: 0x0a0b_0c0d,
        };
        let mut b = [0u8; 12];
        t.emit(&mut b[..]).expect("emit");
        assert_eq!(b, [1, 2, 3, 4, 5, 6, 7, 8, 0x0a, 0x0b, 0x0c, 0x0d]);
        assert_eq!(Trailer::parse(&b), Ok(t));
        assert!(Trailer::parse(&b[..11]).is_err());
        assert!(t.emit(&mut [0u8; 11][..]).is_err());
    }

    #[test]
    fn malformed_are_errors() {
        let mut b = [0u8; 14];
        H.emit(&mut b[..]).expect("emit");
        for n in 0..14 {
            assert!(matches!(Repr::parse(&b[..n]), Err(Error::Truncated { .. })));
        }
        for fan in [0u8, 33, 255] {
            let mut f = b;
            f[4] = fan;
            assert_eq!(Repr::parse(&f), Err(Error::Malformed("ATP fan-in degree")));
            assert!(Repr { fan_in: fan, ..H }.emit(&mut [0u8; 14][..]).is_err());
        }
        assert!(Repr { ps_index: 4, ..H }.emit(&mut [0u8; 14][..]).is_err());
        assert!(H.emit(&mut [0u8; 13][..]).is_err());
    }
}
