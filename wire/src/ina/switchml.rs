//! SwitchML's header (Sapio et al., "Scaling Distributed Machine Learning with In-Network
//! Aggregation", NSDI'21), carried after UDP.
//!
//! The paper's switch algorithm with packet-loss recovery reads from each packet the worker id
//! `wid`, the slot `idx` of the aggregator pool, the shadow-copy version `ver` that selects one of
//! the slot's two copies, and the vector of values; block floating point adds an exponent per block that the
//! switch combines by `max`. The authors' release (p4lang/p4app-switchML, `dev_root/p4/headers.p4`
//! and `udp_receiver.p4`) puts the pool index in a 16-bit field with the shadow-copy "set" bit in
//! its most significant bit, runs over UDP ports 0xbee0-0xbeef, and carries 64 32-bit values
//! (two 128-byte data headers, 256 bytes) per packet.
//!
//! ```text
//! bytes 0-1   worker id (wid)
//! bytes 2-3   version (bit 15, the shadow-copy set bit, where p4app-switchML has it) | pool index (bits 14-0)
//! byte 4      exponent (signed 8 bits: the block's largest binary32 exponent, unbiased)
//! byte 5      flags: bit 0 = result (switch to worker); bits 7-1 reserved, 0
//! bytes 6-7   element count
//! bytes 8-11  chunk index (the release's `pkt_id`/`tsi`: which chunk of the stream this is)
//! then        element count x 4 bytes of big-endian int32 values
//! ```
//!
//! Our choices where paper and code differ: the worker id is in the header as in the paper's
//! algorithm (the P4 code derives it from the source address with a table, which a software
//! switch would need configured out of band), one 8-bit exponent per packet (a binary32 exponent
//! fits in 8 bits; the release reserves 16), and an explicit element count so the switch model
//! can use the payload one Tofino pass holds. The chunk index is carried as the release carries
//! its packet id (p4app-switchML `dpdk_worker_thread.cc`: a worker reads `pkt_id` from every
//! result, discards one it has already received, and derives the next packet from it; the paper's
//! Algorithm 3 likewise carries the offset `off`): the switch echoes it in the result, so a worker
//! can tell a late result of an earlier chunk that used the same slot and version from the result
//! it waits for. The release's job number and message type are not carried.

use crate::{Error, be16, need, put16};

/// SwitchML's UDP ports are 0xbee0 to 0xbeef (p4app-switchML `types.p4`).
pub const UDP_PORT_BASE: u16 = 0xbee0;
/// Values per packet in SwitchML: 64 int32 (256 bytes).
pub const ELEMENTS_PER_PACKET: usize = 64;

view!(
    /// A view of a SwitchML header and the values after it. `new_checked` requires the values
    /// the element count declares.
    Packet
);

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn check_len(&self) -> Result<(), Error> {
        let b = self.buffer.as_ref();
        need("SwitchML header", b.len(), Repr::LEN)?;
        need(
            "SwitchML values",
            b.len(),
            Repr::LEN + 4 * usize::from(self.elements()),
        )
    }

    pub fn worker(&self) -> u16 {
        be16(self.buffer.as_ref(), 0)
    }

    /// 15 bits.
    pub fn pool_index(&self) -> u16 {
        be16(self.buffer.as_ref(), 2) & 0x7fff
    }

    /// The shadow-copy bit.
    pub fn version(&self) -> bool {
        self.buffer.as_ref()[2] & 0x80 != 0
    }

    pub fn exponent(&self) -> i8 {
        self.buffer.as_ref()[4] as i8
    }

    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[5]
    }

    pub fn is_result(&self) -> bool {
        self.flags() & 1 != 0
    }

    pub fn elements(&self) -> u16 {
        be16(self.buffer.as_ref(), 6)
    }

    /// The chunk index (the release's `pkt_id`).
    pub fn chunk(&self) -> u32 {
        let b = self.buffer.as_ref();
        u32::from_be_bytes([b[8], b[9], b[10], b[11]])
    }

    /// The values' bytes (element count x 4).
    pub fn values(&self) -> &[u8] {
        let n = 4 * usize::from(self.elements());
        &self.buffer.as_ref()[Repr::LEN..Repr::LEN + n]
    }

    /// Value `i`, or `None` past the element count.
    pub fn value(&self, i: usize) -> Option<i32> {
        let c = self.values().get(4 * i..4 * i + 4)?;
        Some(i32::from_be_bytes([c[0], c[1], c[2], c[3]]))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_worker(&mut self, v: u16) {
        put16(self.buffer.as_mut(), 0, v);
    }

    /// The low 15 bits of `v` (the version bit is kept).
    pub fn set_pool_index(&mut self, v: u16) {
        let b = self.buffer.as_mut();
        let ver = be16(b, 2) & 0x8000;
        put16(b, 2, ver | (v & 0x7fff));
    }

    pub fn set_version(&mut self, on: bool) {
        crate::set_bit(&mut self.buffer.as_mut()[2], 0x80, on);
    }

    pub fn set_exponent(&mut self, v: i8) {
        self.buffer.as_mut()[4] = v as u8;
    }

    pub fn set_flags(&mut self, v: u8) {
        self.buffer.as_mut()[5] = v;
    }

    pub fn set_elements(&mut self, v: u16) {
        put16(self.buffer.as_mut(), 6, v);
    }

    pub fn set_chunk(&mut self, v: u32) {
        self.buffer.as_mut()[8..12].copy_from_slice(&v.to_be_bytes());
    }

    /// Write value `i` (within the element count); `false` if it is past the buffer.
    pub fn set_value(&mut self, i: usize, v: i32) -> bool {
        let at = Repr::LEN + 4 * i;
        match self.buffer.as_mut().get_mut(at..at + 4) {
            Some(c) => {
                c.copy_from_slice(&v.to_be_bytes());
                true
            }
            None => false,
        }
    }
}

/// A SwitchML header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    pub worker: u16,
    /// 15 bits.
    pub pool_index: u16,
    /// The shadow copy of the slot this packet uses.
    pub version: bool,
    pub exponent: i8,
    /// Switch to worker (the aggregated values).
    pub is_result: bool,
    /// Values after the header.
    pub elements: u16,
    /// The chunk of the stream (the release's `pkt_id`); a result echoes its packet's.
    pub chunk: u32,
}

impl Repr {
    pub const LEN: usize = 12;

    /// Parse; the values must follow, and reserved flags must be zero.
    // always inlined: with `#[inline]` alone it stayed a call in the SwitchML switch model, the
    // header returned through memory and reloaded at other widths (a store-forwarding stall on
    // 28% of the switch's `handle_packet` samples)
    #[inline(always)]
    pub fn parse<B: AsRef<[u8]> + ?Sized>(packet: &B) -> Result<Repr, Error> {
        let p = Packet::new_checked(packet.as_ref())?;
        if p.flags() & !1 != 0 {
            return Err(Error::Malformed("SwitchML flags"));
        }
        Ok(Repr {
            worker: p.worker(),
            pool_index: p.pool_index(),
            version: p.version(),
            exponent: p.exponent(),
            is_result: p.is_result(),
            elements: p.elements(),
            chunk: p.chunk(),
        })
    }

    /// The header's bytes (the values are the caller's).
    pub fn buffer_len(&self) -> usize {
        Self::LEN
    }

    /// Emit the header (not the values); a pool index over 15 bits is `Malformed`.
    pub fn emit<B: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut B) -> Result<(), Error> {
        let b = packet.as_mut();
        need("SwitchML header buffer", b.len(), Self::LEN)?;
        if self.pool_index > 0x7fff {
            return Err(Error::Malformed("SwitchML pool index over 15 bits"));
        }
        let mut p = Packet::new_unchecked(b);
        p.set_worker(self.worker);
        put16(
            p.buffer,
            2,
            self.pool_index | (u16::from(self.version) << 15),
        );
        p.set_exponent(self.exponent);
        p.set_flags(u8::from(self.is_result));
        p.set_elements(self.elements);
        p.set_chunk(self.chunk);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: Repr = Repr {
        worker: 3,
        pool_index: 0x1234,
        version: true,
        exponent: -7,
        is_result: false,
        elements: 2,
        chunk: 0x0a0b_0c0d,
    };

    #[test]
    fn layout_and_values() {
        let mut b = [0u8; 20];
        H.emit(&mut b[..]).expect("emit");
        let mut p = Packet::new_unchecked(&mut b[..]);
        assert!(p.set_value(0, -1));
        assert!(p.set_value(1, 0x0102_0304));
        assert!(!p.set_value(2, 0));
        assert_eq!(
            b,
            [
                0, 3, 0x92, 0x34, 0xf9, 0, 0, 2, 0x0a, 0x0b, 0x0c, 0x0d, 0xff, 0xff, 0xff, 0xff, 1,
                2, 3, 4
            ]
        );
        let p = Packet::new_checked(&b[..]).expect("view");
        assert_eq!(
            (p.value(0), p.value(1), p.value(2)),
            (Some(-1), Some(0x0102_0304), None)
        );
        assert_eq!(Repr::parse(&p), Ok(H));
        let mut q = Packet::new_unchecked(&mut b[..]);
        q.set_pool_index(0xffff);
        q.set_version(false);
        assert_eq!((q.pool_index(), q.version()), (0x7fff, false));
    }

    #[test]
    fn malformed_are_errors() {
        let mut b = [0u8; 20];
        H.emit(&mut b[..]).expect("emit");
        for n in 0..20 {
            assert!(matches!(Repr::parse(&b[..n]), Err(Error::Truncated { .. })));
        }
        let mut f = b;
        f[5] = 0x80;
        assert_eq!(Repr::parse(&f), Err(Error::Malformed("SwitchML flags")));
        let mut many = b;
        put16(&mut many, 6, 3); // 3 values declared, 2 present
        assert!(matches!(
            Repr::parse(&many),
            Err(Error::Truncated {
                what: "SwitchML values",
                ..
            })
        ));
        assert!(
            Repr {
                pool_index: 0x8000,
                ..H
            }
            .emit(&mut [0u8; 12][..])
            .is_err()
        );
        assert!(H.emit(&mut [0u8; 11][..]).is_err());
    }
}
