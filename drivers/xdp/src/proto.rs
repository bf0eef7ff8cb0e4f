//! The ALEPH packet as the XDP programs see it (`bpf/aleph.bpf.c` mirrors this), fixed-point
//! gradients, the slot layout of the `slots` map, and the Integrity Check of ALEPH's Algorithm 2
//! over those slots. Sans-IO: nothing here touches a socket, a map or a clock.
//!
//! Choices where the paper is silent: the header fields and their widths (a 16-bit job, an 8-bit
//! worker bit index, a 32-bit round and segment id), the round number (the paper's bitmaps need
//! one so a slot can be reused by the next iteration), and the gradient encoding: 32-bit fixed
//! point with 16 fractional bits (Q15.16, resolution 2^-16 ~ 1.5e-5, range +-32768), summed with
//! wrapping two's-complement addition as an integer ALU does. The paper only says "128 gradients,
//! coincident with the gradient size of one packet" (Sec. 4.2).

use inabench_wire::ina::aleph;

/// Gradients per segment (and per packet): ALEPH Sec. 4.2.
pub const GRADS: usize = aleph::GRADS;
/// "ALPH"
pub const MAGIC: u32 = aleph::MAGIC;
/// The ALEPH header before the gradients.
pub const HEADER_LEN: usize = aleph::Repr::LEN;
/// UDP payload of one gradient packet.
pub const PACKET_LEN: usize = aleph::PACKET_LEN;
/// Fractional bits of the fixed-point encoding.
pub const FRAC_BITS: u32 = 16;

/// What a packet carries (the wire crate's: [`inabench_wire::ina::aleph`] holds the layout).
pub use inabench_wire::ina::aleph::Kind;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParseError {
    #[error("ALEPH packet of {0} bytes, {PACKET_LEN} expected")]
    Length(usize),
    #[error("not an ALEPH packet (magic {0:#010x})")]
    Magic(u32),
    #[error("unknown ALEPH packet kind {0}")]
    Kind(u8),
}

/// One ALEPH packet (the UDP payload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    pub job: u16,
    pub kind: Kind,
    /// The sender's bit in the segment bitmap (0..32); 0xff in results.
    pub worker: u8,
    pub round: u32,
    pub segment: u32,
    pub grads: [i32; GRADS],
}

impl Packet {
    pub fn gradient(job: u16, worker: u8, round: u32, segment: u32, grads: [i32; GRADS]) -> Self {
        Packet {
            job,
            kind: Kind::Gradient,
            worker,
            round,
            segment,
            grads,
        }
    }

    pub fn fetch(job: u16, worker: u8, round: u32, segment: u32) -> Self {
        Packet {
            job,
            kind: Kind::Fetch,
            worker,
            round,
            segment,
            grads: [0; GRADS],
        }
    }

    pub fn emit(&self) -> [u8; PACKET_LEN] {
        let mut b = [0u8; PACKET_LEN];
        let _ = self.header().emit(&mut b[..]);
        let mut p = aleph::Packet::new_unchecked(&mut b[..]);
        for (i, g) in self.grads.iter().enumerate() {
            p.set_grad(i, *g);
        }
        b
    }

    fn header(&self) -> aleph::Repr {
        aleph::Repr {
            job: self.job,
            kind: self.kind,
            worker: self.worker,
            round: self.round,
            segment: self.segment,
        }
    }

    pub fn parse(b: &[u8]) -> Result<Packet, ParseError> {
        let h = aleph::Repr::parse(b).map_err(|e| match e {
            inabench_wire::Error::Unsupported(_) => {
                ParseError::Magic(aleph::Packet::new_unchecked(b).magic())
            }
            inabench_wire::Error::Malformed(aleph::E_KIND) => {
                ParseError::Kind(aleph::Packet::new_unchecked(b).kind_code())
            }
            _ => ParseError::Length(b.len()),
        })?;
        Ok(Packet {
            job: h.job,
            kind: h.kind,
            worker: h.worker,
            round: h.round,
            segment: h.segment,
            grads: aleph::Packet::new_unchecked(b).grads(),
        })
    }
}

/// Encode a gradient as Q15.16 fixed point (saturating at the range's ends).
pub fn to_fixed(g: f32) -> i32 {
    let v = (g as f64 * f64::from(1u32 << FRAC_BITS)).round();
    v.clamp(i32::MIN as f64, i32::MAX as f64) as i32
}

/// Decode a Q15.16 gradient.
pub fn from_fixed(v: i32) -> f32 {
    (v as f64 / f64::from(1u32 << FRAC_BITS)) as f32
}

/// The reference aggregate: element-wise wrapping sum, as the XDP program computes it.
pub fn reference_sum<'a>(segments: impl IntoIterator<Item = &'a [i32; GRADS]>) -> [i32; GRADS] {
    let mut acc = [0i32; GRADS];
    for s in segments {
        for (a, g) in acc.iter_mut().zip(s) {
            *a = a.wrapping_add(*g);
        }
    }
    acc
}

/// Size of one `slots` map value: `struct slot` in the C program (spin lock, round, bitmap, done,
/// gradients), as the kernel lays it out.
pub const SLOT_LEN: usize = 16 + 4 * GRADS;

/// One segment's slot read from the `slots` map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    pub round: u32,
    pub bitmap: u32,
    pub done: bool,
    pub grads: [i32; GRADS],
}

impl Slot {
    /// Decode a map value (host byte order; the spin lock word is skipped).
    pub fn from_value(v: &[u8; SLOT_LEN]) -> Slot {
        let u = |o: usize| u32::from_ne_bytes([v[o], v[o + 1], v[o + 2], v[o + 3]]);
        let mut grads = [0i32; GRADS];
        for (i, g) in grads.iter_mut().enumerate() {
            *g = u(16 + 4 * i) as i32;
        }
        Slot {
            round: u(4),
            bitmap: u(8),
            done: u(12) != 0,
            grads,
        }
    }
}

/// Algorithm 2, lines 1-6 (the aggregator's side): for one worker, the segments of `round` whose
/// bitmap lacks the worker's bit. A slot still holding an older round has not seen this round's
/// packet from anyone, so it is missing too (the paper's bitmaps have no round; ours do).
pub fn aggregation_missing(slots: &[Slot], round: u32, worker: u8) -> Vec<u32> {
    let mask = 1u32 << (worker & 31);
    slots
        .iter()
        .enumerate()
        .filter(|(_, s)| s.round != round || s.bitmap & mask != mask)
        .map(|(i, _)| i as u32)
        .collect()
}

/// Algorithm 2, lines 1-6 for every member: `(segment, missing worker bits)` of `round`.
pub fn aggregation_missing_all(slots: &[Slot], round: u32, full_mask: u32) -> Vec<(u32, u32)> {
    slots
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            let have = if s.round == round { s.bitmap } else { 0 };
            let missing = full_mask & !have;
            (missing != 0).then_some((i as u32, missing))
        })
        .collect()
}

/// Algorithm 2, lines 8-13 (a worker's side, on its receiver map): the segments of `round` whose
/// slot lacks the multicast signal (all bitmap bits set by the receiver program).
pub fn receiver_missing(slots: &[Slot], round: u32) -> Vec<u32> {
    slots
        .iter()
        .enumerate()
        .filter(|(_, s)| s.round != round || s.bitmap != u32::MAX)
        .map(|(i, _)| i as u32)
        .collect()
}

/// The Gradient Receiver's state for one round (Sec. 5.5): which segments' aggregates arrived.
/// Algorithm 2, lines 8-13: a segment without the multicast signal is lost and fetched again.
#[derive(Debug, Clone)]
pub struct Receiver {
    pub round: u32,
    got: Vec<Option<[i32; GRADS]>>,
    /// segments whose aggregate arrived (the `Some`s of `got`): [`Receiver::complete`] in O(1)
    /// at every aggregate, where a scan of `got` made a round quadratic in its segments
    have: usize,
}

impl Receiver {
    pub fn new(round: u32, segments: usize) -> Self {
        Receiver {
            round,
            got: vec![None; segments],
            have: 0,
        }
    }

    /// Take in a packet; returns whether it was a new aggregate of this round.
    pub fn on_packet(&mut self, p: &Packet) -> bool {
        if p.kind != Kind::Result || p.round != self.round {
            return false;
        }
        match self.got.get_mut(p.segment as usize) {
            Some(slot @ None) => {
                *slot = Some(p.grads);
                self.have += 1;
                true
            }
            _ => false,
        }
    }

    /// Segments with no aggregate yet.
    pub fn missing(&self) -> Vec<u32> {
        self.got
            .iter()
            .enumerate()
            .filter(|(_, g)| g.is_none())
            .map(|(i, _)| i as u32)
            .collect()
    }

    /// Whether every segment's aggregate arrived (a count, not a scan).
    pub fn complete(&self) -> bool {
        self.have == self.got.len()
    }

    pub fn aggregate(&self, segment: u32) -> Option<&[i32; GRADS]> {
        self.got.get(segment as usize).and_then(Option::as_ref)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_round_trip_and_reject_garbage() {
        let mut g = [0i32; GRADS];
        for (i, x) in g.iter_mut().enumerate() {
            *x = (i as i32 - 64) * 1_000_003;
        }
        let p = Packet::gradient(7, 3, 9, 41, g);
        let b = p.emit();
        assert_eq!(&b[0..4], b"ALPH");
        assert_eq!(Packet::parse(&b), Ok(p));
        assert_eq!(Packet::parse(&b[..100]), Err(ParseError::Length(100)));
        let mut bad = b;
        bad[6] = 9;
        assert_eq!(Packet::parse(&bad), Err(ParseError::Kind(9)));
        bad[0] = 0;
        assert!(matches!(Packet::parse(&bad), Err(ParseError::Magic(_))));
    }

    /// The bytes this module's own encoder produced before the layout moved to the wire crate
    /// (captured from that code; `bpf/aleph.bpf.c` reads these offsets).
    #[test]
    fn same_bytes_as_before_the_wire_crate() {
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        let g: [i32; GRADS] = std::array::from_fn(|i| (i as i32 - 64) * 123_457);
        assert_eq!(
            hex(&Packet::gradient(0x1234, 5, 6, 7, g).emit()),
            "414c5048123400050000000600000007ff876fc0ff895201ff8b3442ff8d1683ff8ef8c4ff90db05ff92bd46ff949f87ff9681c8ff986409ff9a464aff9c288bff9e0accff9fed0dffa1cf4effa3b18fffa593d0ffa77611ffa95852ffab3a93ffad1cd4ffaeff15ffb0e156ffb2c397ffb4a5d8ffb68819ffb86a5affba4c9bffbc2edcffbe111dffbff35effc1d59fffc3b7e0ffc59a21ffc77c62ffc95ea3ffcb40e4ffcd2325ffcf0566ffd0e7a7ffd2c9e8ffd4ac29ffd68e6affd870abffda52ecffdc352dffde176effdff9afffe1dbf0ffe3be31ffe5a072ffe782b3ffe964f4ffeb4735ffed2976ffef0bb7fff0edf8fff2d039fff4b27afff694bbfff876fcfffa593dfffc3b7efffe1dbf000000000001e2410003c4820005a6c30007890400096b45000b4d86000d2fc7000f12080010f4490012d68a0014b8cb00169b0c00187d4d001a5f8e001c41cf001e2410002006510021e8920023cad30025ad1400278f5500297196002b53d7002d3618002f18590030fa9a0032dcdb0034bf1c0036a15d0038839e003a65df003c4820003e2a6100400ca20041eee30043d1240045b365004795a6004977e7004b5a28004d3c69004f1eaa005100eb0052e32c0054c56d0056a7ae005889ef005a6c30005c4e71005e30b2006012f30061f5340063d7750065b9b600679bf700697e38006b6079006d42ba006f24fb0071073c0072e97d0074cbbe0076adff"
        );
        assert_eq!(
            hex(&Packet::fetch(1, 31, u32::MAX, 9).emit()),
            "414c50480001021fffffffff000000090000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
        );
    }

    #[test]
    fn fixed_point_resolution_and_wrapping_sum() {
        assert_eq!(to_fixed(1.0), 65536);
        assert_eq!(to_fixed(-0.5), -32768);
        assert!((from_fixed(to_fixed(0.123_456)) - 0.123_456).abs() < 1.0 / 65536.0);
        assert_eq!(to_fixed(1e9), i32::MAX);
        let a = [i32::MAX; GRADS];
        let b = [1; GRADS];
        assert_eq!(reference_sum([&a, &b])[0], i32::MIN);
    }

    #[test]
    fn integrity_check_finds_missing_workers_and_segments() {
        let slot = |round, bitmap| Slot {
            round,
            bitmap,
            done: bitmap == 0b111,
            grads: [0; GRADS],
        };
        let slots = vec![slot(5, 0b111), slot(5, 0b101), slot(4, 0b111)];
        assert_eq!(aggregation_missing(&slots, 5, 1), vec![1, 2]);
        assert_eq!(aggregation_missing(&slots, 5, 0), vec![2]);
        assert_eq!(
            aggregation_missing_all(&slots, 5, 0b111),
            vec![(1, 0b010), (2, 0b111)]
        );
        let signal = |round| Slot {
            round,
            bitmap: u32::MAX,
            done: true,
            grads: [0; GRADS],
        };
        assert_eq!(
            receiver_missing(&[signal(5), slot(5, 0), signal(4)], 5),
            vec![1, 2]
        );
        let mut r = Receiver::new(5, 3);
        let mut p = Packet::gradient(1, 0xff, 5, 1, [3; GRADS]);
        assert!(!r.on_packet(&p), "a gradient is not an aggregate");
        p.kind = Kind::Result;
        assert!(r.on_packet(&p));
        assert!(!r.on_packet(&p), "duplicate");
        assert_eq!(r.missing(), vec![0, 2]);
        assert!(!r.complete());
        assert_eq!(r.aggregate(1), Some(&[3; GRADS]));
        // complete once every segment arrived, whatever the order and duplicates; another
        // round's aggregate and a segment out of range count for nothing
        p.segment = 7;
        assert!(!r.on_packet(&p), "out of range");
        p.segment = 1;
        p.round = 6;
        assert!(!r.on_packet(&p), "another round");
        p.round = 5;
        for s in [2, 2, 0] {
            assert!(!r.complete());
            p.segment = s;
            r.on_packet(&p);
        }
        assert!(r.complete());
        assert!(r.missing().is_empty());
        assert!(
            Receiver::new(1, 0).complete(),
            "no segments: nothing to wait for"
        );
    }
}
