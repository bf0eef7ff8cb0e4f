//! The P4SGD packet (Fig. 4 of the paper) in our byte layout.
//!
//! The paper names the fields Fig. 4 adds (its symbols were lost in the text we have; rebuilt from
//! the prose of Sec. 3.3): a node bitmap with the sender's index set, the aggregation slot index
//! (16 bits: 64K slots, Sec. 4.2), a flag telling aggregation from acknowledgement, and a flag the
//! switch sets to confirm that it has all acknowledgements. It gives no byte layout, so this is
//! ours. FPGA and switch talk raw Ethernet (the paper's 64 B packets cannot hold IPv4 and UDP
//! headers next to 8 x 32-bit values), EtherType 0x88B5 (IEEE 802 local experimental):
//!
//! ```text
//! offset  size  field
//!  0      14    Ethernet: dst MAC, src MAC, EtherType 0x88B5
//! 14       4    bitmap   node bitmap (bit w = worker w), big-endian
//! 18       2    slot     aggregation slot index
//! 20       2    round    how many times the worker used this slot before (our addition, see
//!                        `protocol`: it tells a delayed duplicate from a new contribution)
//! 22       1    flags    bit 0 ack (0: aggregation, 1: acknowledgement), bit 1 ack_done
//!                        (switch: all acknowledgements in), bit 2 from_switch; others zero
//! 23       1    count    number of 32-bit values that follow
//! 24    4 x count values, big-endian two's complement
//!        ...    zero padding up to the 60-byte Ethernet minimum (64 B on the wire with the FCS)
//! ```
//!
//! With 8 values a packet is 56 bytes, padded to 60: 64 bytes with the FCS, as the paper says.
//! The header (layout, view, parser) is [`inabench_wire::ina::p4sgd`]'s; this module adds the
//! values as a `Vec` and whole frames. Parsing never panics: short or malformed input is an
//! [`inabench_wire::Error`].

use inabench_wire::ina::p4sgd;
use inabench_wire::{Error, ethernet};

pub use inabench_wire::ina::p4sgd::{Kind, MAX_VALUES};

pub const ETHERTYPE_P4SGD: u16 = p4sgd::ETHERTYPE;
/// The P4SGD header after Ethernet.
pub const HEADER_LEN: usize = p4sgd::Repr::LEN;

/// The P4SGD header and its values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repr {
    pub bitmap: u32,
    pub slot: u16,
    pub round: u16,
    pub kind: Kind,
    pub values: Vec<i32>,
}

impl Repr {
    /// Bytes of the P4SGD header and values (no Ethernet, no padding).
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + 4 * self.values.len()
    }

    /// Parse the P4SGD header and values from the bytes after Ethernet (padding may follow).
    pub fn parse(b: &[u8]) -> Result<Repr, Error> {
        let h = p4sgd::Repr::parse(b)?;
        Ok(Repr {
            bitmap: h.bitmap,
            slot: h.slot,
            round: h.round,
            kind: h.kind,
            values: p4sgd::Packet::new_unchecked(b).values().collect(),
        })
    }

    /// Write the header and values into `b` (at least `buffer_len()` bytes).
    pub fn emit(&self, b: &mut [u8]) -> Result<(), Error> {
        let count = u8::try_from(self.values.len())
            .map_err(|_| Error::Malformed("p4sgd count (more than 255 values)"))?;
        if b.len() < self.buffer_len() {
            return Err(Error::Truncated {
                what: "p4sgd buffer",
                need: self.buffer_len(),
                have: b.len(),
            });
        }
        p4sgd::Repr {
            bitmap: self.bitmap,
            slot: self.slot,
            round: self.round,
            kind: self.kind,
            count,
        }
        .emit(b)?;
        let mut p = p4sgd::Packet::new_unchecked(b);
        for (k, v) in self.values.iter().enumerate() {
            p.set_value(k, *v);
        }
        Ok(())
    }
}

/// The MAC address of node `n` (workers 0.., the switch after them).
pub fn mac(n: u32) -> ethernet::Mac {
    let b = n.to_be_bytes();
    [2, 0, 0x4b, b[1], b[2], b[3]]
}

/// The node a MAC address of [`mac`] names.
pub fn node_of(m: ethernet::Mac) -> Option<u32> {
    (m[0] == 2 && m[1] == 0 && m[2] == 0x4b).then(|| u32::from_be_bytes([0, m[3], m[4], m[5]]))
}

/// A whole frame from node `src` to node `dst`, padded to the Ethernet minimum.
pub fn frame(src: u32, dst: u32, r: &Repr) -> Result<Vec<u8>, Error> {
    let len = (ethernet::HEADER_LEN + r.buffer_len()).max(ethernet::MIN_FRAME_LEN);
    let mut f = vec![0u8; len];
    ethernet::Repr {
        dst: mac(dst),
        src: mac(src),
        ethertype: ETHERTYPE_P4SGD,
    }
    .emit(&mut f[..]);
    r.emit(&mut f[ethernet::HEADER_LEN..])?;
    Ok(f)
}

/// Parse a whole frame: (source node, header and values).
pub fn parse_frame(f: &[u8]) -> Result<(u32, Repr), Error> {
    let eth = ethernet::Repr::parse(f)?;
    if eth.ethertype != ETHERTYPE_P4SGD {
        return Err(Error::Unsupported("ethertype (not P4SGD)"));
    }
    let src = node_of(eth.src).ok_or(Error::Malformed("source MAC (not a P4SGD node)"))?;
    let r = Repr::parse(&f[ethernet::HEADER_LEN..])?;
    Ok((src, r))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(kind: Kind) -> Repr {
        Repr {
            bitmap: 1 << 5,
            slot: 65535,
            round: 7,
            kind,
            values: vec![1, -2, i32::MAX, i32::MIN, 0, 5, 6, 7],
        }
    }

    #[test]
    fn round_trip_every_kind_and_64_bytes_on_the_wire() {
        for k in [Kind::Aggregate, Kind::Result, Kind::Ack, Kind::AckDone] {
            let r = sample(k);
            let f = frame(5, 8, &r).expect("emit");
            // 14 + 10 + 32 = 56, padded to 60; the FCS makes 64 on the wire
            assert_eq!(f.len(), 60);
            let (src, back) = parse_frame(&f).expect("parse");
            assert_eq!(src, 5);
            assert_eq!(back, r);
        }
    }

    #[test]
    fn short_and_malformed_input_is_an_error() {
        let f = frame(1, 8, &sample(Kind::Aggregate)).expect("emit");
        for n in 0..ethernet::HEADER_LEN + HEADER_LEN + 32 {
            assert!(parse_frame(&f[..n]).is_err(), "{n} bytes");
        }
        let mut bad = f.clone();
        bad[ethernet::HEADER_LEN + 8] = 0x80;
        assert!(matches!(parse_frame(&bad), Err(Error::Malformed(_))));
        let mut bad = f.clone();
        bad[ethernet::HEADER_LEN + 8] = 2; // ack_done alone
        assert!(matches!(parse_frame(&bad), Err(Error::Malformed(_))));
        let mut bad = f.clone();
        bad[ethernet::HEADER_LEN + 9] = 200; // claims 200 values
        assert!(matches!(parse_frame(&bad), Err(Error::Truncated { .. })));
        let mut bad = f.clone();
        bad[12] = 0x08;
        bad[13] = 0x00;
        assert!(matches!(parse_frame(&bad), Err(Error::Unsupported(_))));
        let mut bad = f;
        bad[ethernet::HEADER_LEN..ethernet::HEADER_LEN + 4].copy_from_slice(&[0; 4]);
        assert!(matches!(parse_frame(&bad), Err(Error::Malformed(_))));
        let too_many = Repr {
            values: vec![0; 256],
            ..sample(Kind::Result)
        };
        assert!(frame(0, 1, &too_many).is_err());
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let mut g = inabench_rng::SplitMix64::new(3);
        for _ in 0..20_000 {
            let n = (g.next_u64() % 80) as usize;
            let mut b: Vec<u8> = (0..n).map(|_| g.next_u64() as u8).collect();
            if n > 14 && g.chance(0.5) {
                b[12] = 0x88;
                b[13] = 0xB5;
                b[6] = 2;
                b[7] = 0;
                b[8] = 0x4b;
            }
            let _ = parse_frame(&b);
        }
    }

    /// The bytes the crate's own encoder produced before the header moved to the wire crate
    /// (captured from that code): the wire crate's emit must produce the same frames.
    #[test]
    fn same_bytes_as_before_the_wire_crate() {
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        for (k, want) in [
            (
                Kind::Aggregate,
                "02004b00000802004b00000588b500000020ffff0007000800000001fffffffe7fffffff800000000000000000000005000000060000000700000000",
            ),
            (
                Kind::Result,
                "02004b00000802004b00000588b500000020ffff0007040800000001fffffffe7fffffff800000000000000000000005000000060000000700000000",
            ),
            (
                Kind::Ack,
                "02004b00000802004b00000588b500000020ffff0007010800000001fffffffe7fffffff800000000000000000000005000000060000000700000000",
            ),
            (
                Kind::AckDone,
                "02004b00000802004b00000588b500000020ffff0007070800000001fffffffe7fffffff800000000000000000000005000000060000000700000000",
            ),
        ] {
            assert_eq!(hex(&frame(5, 8, &sample(k)).expect("emit")), want, "{k:?}");
        }
        let r = Repr {
            bitmap: 3,
            slot: 1,
            round: 0,
            kind: Kind::Aggregate,
            values: (0..20).collect(),
        };
        assert_eq!(
            hex(&frame(1, 2, &r).expect("emit")),
            "02004b00000202004b00000188b500000003000100000014000000000000000100000002000000030000000400000005000000060000000700000008000000090000000a0000000b0000000c0000000d0000000e0000000f00000010000000110000001200000013"
        );
    }
}
