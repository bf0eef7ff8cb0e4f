//! LuWu's packets (Sec. 3.2.3): parameter and gradient packets carry an incremental `SeqNum` and a
//! vector of values; parameter and gradient heartbeats carry the receiver's `Ack` (the next
//! expected SeqNum) and `Credit` (the largest SeqNum its RX buffer can accept).
//!
//! The paper names the fields but gives no layout, so the layout is ours: a 16-byte header after
//! Ethernet/IPv4/UDP (UDP port [`UDP_PORT`]), then `count` 32-bit big-endian integers:
//!
//! ```text
//!  0      magic 0x4c ('L')
//!  1      kind  (1 param, 2 gradient, 3 aggregated gradient, 4 param heartbeat, 5 gradient
//!         heartbeat, 6 ring collective data)
//!  2      src   (WorkerNIC index, 0xff AggNIC, 0xfe SmartSwitch)
//!  3      flags (bit 0: aggregate with max instead of sum; other bits must be 0)
//!  4..8   SeqNum (data) or Ack (heartbeat)
//!  8..12  Credit (heartbeat; 0 in data packets)
//! 12..14  count of 32-bit values (0 in heartbeats)
//! 14..16  reserved, 0
//! ```
//!
//! The parser follows the suite's wire style (`drivers/wire`): a checked view of the bytes and a
//! plain [`Repr`], every malformation a typed [`PacketError`], never a panic.

use inabench_wire::{ethernet, ipv4, udp};

/// UDP port of LuWu's traffic (ours; the paper names none).
pub const UDP_PORT: u16 = 48870;
/// Bytes of LuWu's header.
pub const HEADER_LEN: usize = 16;
/// Bytes of Ethernet + IPv4 + UDP + LuWu headers before the values.
pub const FRAME_HEADER_LEN: usize =
    ethernet::HEADER_LEN + ipv4::HEADER_LEN + udp::HEADER_LEN + HEADER_LEN;
const MAGIC: u8 = 0x4c;
/// `src` of the AggNIC.
pub const SRC_AGG: u8 = 0xff;
/// `src` of the SmartSwitch.
pub const SRC_SWITCH: u8 = 0xfe;
/// Largest number of values a packet may carry (a 9 KB jumbo frame).
pub const MAX_VALUES: usize = 2048;

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
    /// A ring collective's data (the ZeRO-3 baseline in [`crate::zero3`]), forwarded by address.
    Ring,
}

impl Kind {
    fn code(self) -> u8 {
        match self {
            Kind::Param => 1,
            Kind::Grad => 2,
            Kind::AggGrad => 3,
            Kind::ParamHeartbeat => 4,
            Kind::GradHeartbeat => 5,
            Kind::Ring => 6,
        }
    }

    fn from_code(c: u8) -> Option<Kind> {
        Some(match c {
            1 => Kind::Param,
            2 => Kind::Grad,
            3 => Kind::AggGrad,
            4 => Kind::ParamHeartbeat,
            5 => Kind::GradHeartbeat,
            6 => Kind::Ring,
            _ => return None,
        })
    }

    pub fn is_heartbeat(self) -> bool {
        matches!(self, Kind::ParamHeartbeat | Kind::GradHeartbeat)
    }
}

/// Why bytes are not a LuWu packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    #[error("lower layer: {0}")]
    Wire(#[from] inabench_wire::Error),
    #[error("not UDP")]
    NotUdp,
    #[error("UDP port {0} is not LuWu's")]
    Port(u16),
    #[error("truncated LuWu header: {0} bytes")]
    Truncated(usize),
    #[error("bad magic {0:#04x}")]
    Magic(u8),
    #[error("unknown kind {0}")]
    Kind(u8),
    #[error("unknown flags {0:#04x}")]
    Flags(u8),
    #[error("reserved field is {0}, not 0")]
    Reserved(u16),
    #[error("header says {count} values, the payload holds {bytes} bytes")]
    Count { count: usize, bytes: usize },
    #[error("a heartbeat carries values or a data packet carries a credit")]
    Shape,
}

/// A decoded LuWu header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    /// Parse a header and check the values that follow it (`payload` is the UDP payload).
    pub fn parse(payload: &[u8]) -> Result<Repr, PacketError> {
        if payload.len() < HEADER_LEN {
            return Err(PacketError::Truncated(payload.len()));
        }
        let b = payload;
        if b[0] != MAGIC {
            return Err(PacketError::Magic(b[0]));
        }
        let kind = Kind::from_code(b[1]).ok_or(PacketError::Kind(b[1]))?;
        if b[3] & !1 != 0 {
            return Err(PacketError::Flags(b[3]));
        }
        let be32 = |at: usize| u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let reserved = u16::from_be_bytes([b[14], b[15]]);
        if reserved != 0 {
            return Err(PacketError::Reserved(reserved));
        }
        let r = Repr {
            kind,
            src: b[2],
            max: b[3] & 1 == 1,
            seq: be32(4),
            credit: be32(8),
            count: u16::from_be_bytes([b[12], b[13]]),
        };
        let bytes = payload.len() - HEADER_LEN;
        if usize::from(r.count) > MAX_VALUES || bytes != 4 * usize::from(r.count) {
            return Err(PacketError::Count {
                count: usize::from(r.count),
                bytes,
            });
        }
        if kind.is_heartbeat() != (r.count == 0) || (!kind.is_heartbeat() && r.credit != 0) {
            return Err(PacketError::Shape);
        }
        Ok(r)
    }

    /// Write the header into the first [`HEADER_LEN`] bytes of `b` (which must be that long).
    pub fn emit(&self, b: &mut [u8]) {
        b[0] = MAGIC;
        b[1] = self.kind.code();
        b[2] = self.src;
        b[3] = u8::from(self.max);
        b[4..8].copy_from_slice(&self.seq.to_be_bytes());
        b[8..12].copy_from_slice(&self.credit.to_be_bytes());
        b[12..14].copy_from_slice(&self.count.to_be_bytes());
        b[14..16].copy_from_slice(&[0, 0]);
    }
}

/// A whole frame from node `src` to node `dst` carrying `h` and `values` (`h.count` is set from
/// `values`). Frames shorter than Ethernet's minimum are padded.
pub fn frame(src: u32, dst: u32, h: Repr, values: &[i32]) -> Vec<u8> {
    let payload = HEADER_LEN + 4 * values.len();
    let len = (FRAME_HEADER_LEN + 4 * values.len()).max(ethernet::MIN_FRAME_LEN);
    let mut f = vec![0u8; len];
    let _ = inabench_wire::node::emit(&mut f, 8, src, dst, UDP_PORT, payload);
    let u = ethernet::HEADER_LEN + ipv4::HEADER_LEN;
    let h = Repr {
        count: values.len() as u16,
        ..h
    };
    h.emit(&mut f[u + udp::HEADER_LEN..]);
    for (k, v) in values.iter().enumerate() {
        let at = FRAME_HEADER_LEN + 4 * k;
        f[at..at + 4].copy_from_slice(&v.to_be_bytes());
    }
    f
}

/// Parse a frame into its header and values.
pub fn parse(f: &[u8]) -> Result<(Repr, Vec<i32>), PacketError> {
    let eth = ethernet::Packet::new_checked(f)?;
    let ip = ipv4::Packet::new_checked(eth.payload())?;
    ipv4::Repr::parse(&ip)?;
    if ip.protocol() != ipv4::PROTO_UDP {
        return Err(PacketError::NotUdp);
    }
    let u = udp::Packet::new_checked(ip.payload())?;
    if u.dst_port() != UDP_PORT {
        return Err(PacketError::Port(u.dst_port()));
    }
    let p = u.payload();
    let h = Repr::parse(p)?;
    let values = p[HEADER_LEN..]
        .chunks_exact(4)
        .map(|c| i32::from_be_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    Ok((h, values))
}

/// Bytes a frame with `values` values occupies on the wire (frame, FCS, preamble, gap).
pub fn wire_bytes(values: usize) -> usize {
    (FRAME_HEADER_LEN + 4 * values).max(ethernet::MIN_FRAME_LEN) + 24
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let h = Repr {
            kind: Kind::Grad,
            src: 3,
            max: true,
            seq: 77,
            credit: 0,
            count: 0,
        };
        let f = frame(3, 8, h, &[1, -2, i32::MAX]);
        let (r, v) = parse(&f).unwrap();
        assert_eq!(r, Repr { count: 3, ..h });
        assert_eq!(v, vec![1, -2, i32::MAX]);
        let hb = Repr {
            kind: Kind::GradHeartbeat,
            src: SRC_AGG,
            max: false,
            seq: 5,
            credit: 260,
            count: 0,
        };
        let f = frame(9, 8, hb, &[]);
        assert_eq!(f.len(), ethernet::MIN_FRAME_LEN);
        assert_eq!(parse(&f).unwrap(), (hb, vec![]));
    }
}
