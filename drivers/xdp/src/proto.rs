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

/// Gradients per segment (and per packet): ALEPH Sec. 4.2.
pub const GRADS: usize = 128;
/// "ALPH"
pub const MAGIC: u32 = 0x414C_5048;
/// The ALEPH header before the gradients.
pub const HEADER_LEN: usize = 16;
/// UDP payload of one gradient packet.
pub const PACKET_LEN: usize = HEADER_LEN + 4 * GRADS;
/// Fractional bits of the fixed-point encoding.
pub const FRAC_BITS: u32 = 16;

/// What a packet carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A worker's gradient segment, to be aggregated.
    Gradient,
    /// An aggregate (the paper's "multicast signal").
    Result,
    /// A receiver's request for an aggregate it lost (Algorithm 2, lines 8-13).
    Fetch,
}

impl Kind {
    fn code(self) -> u8 {
        match self {
            Kind::Gradient => 0,
            Kind::Result => 1,
            Kind::Fetch => 2,
        }
    }
    fn from_code(c: u8) -> Option<Kind> {
        match c {
            0 => Some(Kind::Gradient),
            1 => Some(Kind::Result),
            2 => Some(Kind::Fetch),
            _ => None,
        }
    }
}

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
        b[0..4].copy_from_slice(&MAGIC.to_be_bytes());
        b[4..6].copy_from_slice(&self.job.to_be_bytes());
        b[6] = self.kind.code();
        b[7] = self.worker;
        b[8..12].copy_from_slice(&self.round.to_be_bytes());
        b[12..16].copy_from_slice(&self.segment.to_be_bytes());
        for (i, g) in self.grads.iter().enumerate() {
            let o = HEADER_LEN + 4 * i;
            b[o..o + 4].copy_from_slice(&g.to_be_bytes());
        }
        b
    }

    pub fn parse(b: &[u8]) -> Result<Packet, ParseError> {
        if b.len() != PACKET_LEN {
            return Err(ParseError::Length(b.len()));
        }
        let u32_at = |o: usize| u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let magic = u32_at(0);
        if magic != MAGIC {
            return Err(ParseError::Magic(magic));
        }
        let kind = Kind::from_code(b[6]).ok_or(ParseError::Kind(b[6]))?;
        let mut grads = [0i32; GRADS];
        for (i, g) in grads.iter_mut().enumerate() {
            *g = u32_at(HEADER_LEN + 4 * i) as i32;
        }
        Ok(Packet {
            job: u16::from_be_bytes([b[4], b[5]]),
            kind,
            worker: b[7],
            round: u32_at(8),
            segment: u32_at(12),
            grads,
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
}

impl Receiver {
    pub fn new(round: u32, segments: usize) -> Self {
        Receiver {
            round,
            got: vec![None; segments],
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

    pub fn complete(&self) -> bool {
        self.got.iter().all(Option::is_some)
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
    }
}
