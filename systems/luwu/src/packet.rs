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
//! The header (layout, view, parser) is [`inabench_wire::ina::luwu`]'s; this module builds and
//! parses whole frames, every malformation a typed [`PacketError`], never a panic.

use inabench_wire::ina::luwu;
use inabench_wire::{ethernet, ipv4, udp};

pub use inabench_wire::ina::luwu::{Kind, MAX_VALUES, Repr, SRC_AGG, SRC_SWITCH, UDP_PORT};

/// Bytes of LuWu's header.
pub const HEADER_LEN: usize = Repr::LEN;
/// Bytes of Ethernet + IPv4 + UDP + LuWu headers before the values.
pub const FRAME_HEADER_LEN: usize =
    ethernet::HEADER_LEN + ipv4::HEADER_LEN + udp::HEADER_LEN + HEADER_LEN;

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

/// Parse a header and check the values that follow it (`payload` is the UDP payload).
pub fn parse_header(payload: &[u8]) -> Result<Repr, PacketError> {
    Repr::parse(payload).map_err(|e| {
        let Ok(v) = luwu::Packet::new_checked(payload) else {
            return PacketError::Truncated(payload.len());
        };
        match e {
            inabench_wire::Error::Malformed(luwu::E_MAGIC) => PacketError::Magic(v.magic()),
            inabench_wire::Error::Malformed(luwu::E_KIND) => PacketError::Kind(v.kind_code()),
            inabench_wire::Error::Malformed(luwu::E_FLAGS) => PacketError::Flags(v.flags()),
            inabench_wire::Error::Malformed(luwu::E_RESERVED) => {
                PacketError::Reserved(v.reserved())
            }
            inabench_wire::Error::Malformed(luwu::E_COUNT) => PacketError::Count {
                count: usize::from(v.count()),
                bytes: v.payload().len(),
            },
            inabench_wire::Error::Malformed(luwu::E_SHAPE) => PacketError::Shape,
            other => PacketError::Wire(other),
        }
    })
}

/// A whole frame from node `src` to node `dst` carrying `h` and `values` (`h.count` is set from
/// `values`). Frames shorter than Ethernet's minimum are padded.
pub fn frame(src: u32, dst: u32, h: Repr, values: &[i32]) -> Vec<u8> {
    let payload = HEADER_LEN + 4 * values.len();
    let len = (FRAME_HEADER_LEN + 4 * values.len()).max(ethernet::MIN_FRAME_LEN);
    let mut f = vec![0u8; len];
    let _ = inabench_wire::node::emit(&mut f, 8, src, dst, UDP_PORT, payload);
    let at = FRAME_HEADER_LEN - HEADER_LEN;
    let h = Repr {
        count: values.len() as u16,
        ..h
    };
    let _ = h.emit(&mut f[at..]);
    let mut p = luwu::Packet::new_unchecked(&mut f[at..]);
    for (k, v) in values.iter().enumerate() {
        p.set_value(k, *v);
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
    let h = parse_header(p)?;
    Ok((h, luwu::Packet::new_unchecked(p).values().collect()))
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

    /// The bytes the crate's own encoder produced before the header moved to the wire crate
    /// (captured from that code): the wire crate's emit must produce the same frames.
    #[test]
    fn same_bytes_as_before_the_wire_crate() {
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        let r = Repr {
            kind: Kind::Grad,
            src: 3,
            max: true,
            seq: 77,
            credit: 0,
            count: 0,
        };
        assert_eq!(
            hex(&frame(3, 8, r, &[1, -2, i32::MAX])),
            "02000008000902000008000408004500003800004000401116a90a0008040a000809bee6bee6002400004c0203010000004d000000000003000000000001fffffffe7fffffff"
        );
        let r = Repr {
            kind: Kind::GradHeartbeat,
            src: SRC_AGG,
            max: false,
            seq: 5,
            credit: 260,
            count: 0,
        };
        assert_eq!(
            hex(&frame(9, 8, r, &[])),
            "02000008000902000008000a08004500002c00004000401116af0a00080a0a000809bee6bee6001800004c05ff000000000500000104000000000000"
        );
        let v: Vec<i32> = (0..30).map(|i| i * 1000 - 7).collect();
        let r = Repr {
            kind: Kind::Param,
            src: SRC_SWITCH,
            max: false,
            seq: 1 << 31,
            credit: 0,
            count: 0,
        };
        assert_eq!(
            hex(&frame(8, 0, r, &v)),
            "0200000800010200000800090800450000a400004000401116400a0008090a000801bee6bee6009000004c01fe008000000000000000001e0000fffffff9000003e1000007c900000bb100000f99000013810000176900001b5100001f39000023210000270900002af100002ed9000032c1000036a900003a9100003e79000042610000464900004a3100004e1900005201000055e9000059d100005db9000061a1000065890000697100006d5900007141"
        );
    }
}
