//! Libra's packet: Ethernet / IPv4 / UDP (port 48900) / a 16-byte Libra header / key-value pairs.
//! The paper does not print its header; ours carries what Sec. 3.6 needs (a sequence number, the
//! retransmit flag) and the pairs as 4-byte keys (rank indices for hot parameters, model keys
//! for cold ones) and 4-byte values, big-endian.
//!
//! ```text
//! 0      1      2             4                    8                    12        14       16
//! | kind | flags| worker (u16)| seq (u32)          | aux (u32)          | pairs   | 0      | pairs...
//! ```
//! `aux`: the total packets of a result stream in a result packet; unused otherwise.

use crate::LibraError;
use inabench_wire::{ethernet, ipv4, udp};

pub const UDP_PORT: u16 = 48900;
pub const HEADER_LEN: usize = 16;
const OUTER: usize = ethernet::HEADER_LEN + ipv4::HEADER_LEN + udp::HEADER_LEN;

/// Frame bytes of a packet with `pairs` pairs.
pub fn frame_len(pairs: usize) -> usize {
    OUTER + HEADER_LEN + 8 * pairs
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Hot gradients, worker -> switch.
    PushHot,
    /// Cold gradients, worker -> parameter server.
    PushCold,
    /// Aggregated values, switch or server -> worker.
    Result,
    Ack,
    /// A worker's pushes of the iteration are all acknowledged.
    Done,
}

impl Kind {
    fn code(self) -> u8 {
        match self {
            Kind::PushHot => 1,
            Kind::PushCold => 2,
            Kind::Result => 3,
            Kind::Ack => 4,
            Kind::Done => 5,
        }
    }
    fn from_code(c: u8) -> Option<Kind> {
        Some(match c {
            1 => Kind::PushHot,
            2 => Kind::PushCold,
            3 => Kind::Result,
            4 => Kind::Ack,
            5 => Kind::Done,
            _ => return None,
        })
    }
}

/// A parsed Libra packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repr {
    pub kind: Kind,
    pub retransmit: bool,
    pub worker: u16,
    pub seq: u32,
    pub aux: u32,
    pub pairs: Vec<(u32, i32)>,
}

/// Libra's private network (see [`inabench_wire::node`]).
const NET: u8 = 2;

/// Node of an address built by [`emit`].
pub fn node_of(ip: [u8; 4]) -> Option<u32> {
    (ip[0] == 10 && ip[1] == 0 && ip[2] == NET && ip[3] > 0).then(|| u32::from(ip[3]) - 1)
}

/// Build a frame from node `src` to node `dst`.
pub fn emit(src: u32, dst: u32, r: &Repr) -> Vec<u8> {
    let payload = HEADER_LEN + 8 * r.pairs.len();
    let mut f = vec![0u8; OUTER + payload];
    let _ = inabench_wire::node::emit(&mut f, NET, src, dst, UDP_PORT, payload);
    let h = &mut f[OUTER..];
    h[0] = r.kind.code();
    h[1] = u8::from(r.retransmit);
    h[2..4].copy_from_slice(&r.worker.to_be_bytes());
    h[4..8].copy_from_slice(&r.seq.to_be_bytes());
    h[8..12].copy_from_slice(&r.aux.to_be_bytes());
    h[12..14].copy_from_slice(&(r.pairs.len() as u16).to_be_bytes());
    for (i, (k, v)) in r.pairs.iter().enumerate() {
        let at = HEADER_LEN + 8 * i;
        h[at..at + 4].copy_from_slice(&k.to_be_bytes());
        h[at + 4..at + 8].copy_from_slice(&v.to_be_bytes());
    }
    f
}

/// Parse a frame: (source node, destination node, packet). Never panics on bad input.
pub fn parse(f: &[u8]) -> Result<(u32, u32, Repr), LibraError> {
    let eth = ethernet::Packet::new_checked(f).map_err(|_| LibraError::Wire("ethernet"))?;
    let ip = ipv4::Packet::new_checked(eth.payload()).map_err(|_| LibraError::Wire("ipv4"))?;
    ipv4::Repr::parse(&ip).map_err(|_| LibraError::Wire("ipv4"))?;
    let (src, dst) = (
        node_of(ip.src()).ok_or(LibraError::Wire("source address"))?,
        node_of(ip.dst()).ok_or(LibraError::Wire("destination address"))?,
    );
    let u = udp::Packet::new_checked(ip.payload()).map_err(|_| LibraError::Wire("udp"))?;
    if u.dst_port() != UDP_PORT {
        return Err(LibraError::Wire("not a Libra port"));
    }
    let p = u.payload();
    if p.len() < HEADER_LEN {
        return Err(LibraError::Wire("short Libra header"));
    }
    let kind = Kind::from_code(p[0]).ok_or(LibraError::Wire("unknown kind"))?;
    let n = usize::from(u16::from_be_bytes([p[12], p[13]]));
    if p.len() != HEADER_LEN + 8 * n {
        return Err(LibraError::Wire("pair count does not match the length"));
    }
    let be32 = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    let pairs = p[HEADER_LEN..]
        .chunks_exact(8)
        .map(|c| (be32(&c[..4]), be32(&c[4..]) as i32))
        .collect();
    Ok((
        src,
        dst,
        Repr {
            kind,
            retransmit: p[1] & 1 == 1,
            worker: u16::from_be_bytes([p[2], p[3]]),
            seq: be32(&p[4..8]),
            aux: be32(&p[8..12]),
            pairs,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_malformed_input() {
        let r = Repr {
            kind: Kind::PushHot,
            retransmit: true,
            worker: 7,
            seq: 99,
            aux: 3,
            pairs: vec![(1, -5), (40_000, 123_456)],
        };
        let f = emit(7, 32, &r);
        assert_eq!(f.len(), frame_len(2));
        assert_eq!(parse(&f).unwrap(), (7, 32, r));
        for cut in 0..f.len() {
            assert!(parse(&f[..cut]).is_err());
        }
        let mut bad = f.clone();
        bad[OUTER] = 77;
        assert!(parse(&bad).is_err());
    }
}
