//! Libra's packet: Ethernet / IPv4 / UDP (port 48900) / a 16-byte Libra header / key-value pairs.
//! The header (its layout, the view and the parser) is [`inabench_wire::ina::libra`]'s; this
//! module builds and parses whole frames between the nodes of Libra's network, the pairs as a
//! `Vec`.

use crate::LibraError;
use inabench_wire::ina::libra;
use inabench_wire::{ethernet, ipv4, udp};

pub use inabench_wire::ina::libra::{Kind, UDP_PORT};

pub const HEADER_LEN: usize = libra::Repr::LEN;
const OUTER: usize = ethernet::HEADER_LEN + ipv4::HEADER_LEN + udp::HEADER_LEN;

/// Frame bytes of a packet with `pairs` pairs.
pub fn frame_len(pairs: usize) -> usize {
    OUTER + HEADER_LEN + libra::PAIR_LEN * pairs
}

/// A parsed Libra packet: the header of [`inabench_wire::ina::libra`] and its pairs.
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

/// Build a frame from node `src` to node `dst`. The pair count is a 16-bit field: a packet of
/// more than 65535 pairs (the senders cut far smaller ones) is built whole with the count
/// wrapped, so the receiver refuses it rather than reading part of it.
pub fn emit(src: u32, dst: u32, r: &Repr) -> Vec<u8> {
    let h = libra::Repr {
        kind: r.kind,
        retransmit: r.retransmit,
        worker: r.worker,
        seq: r.seq,
        aux: r.aux,
        pairs: r.pairs.len() as u16,
    };
    let payload = HEADER_LEN + libra::PAIR_LEN * r.pairs.len();
    let mut f = vec![0u8; OUTER + payload];
    let _ = inabench_wire::node::emit(&mut f, NET, src, dst, UDP_PORT, payload);
    let _ = h.emit(&mut f[OUTER..]);
    let mut p = libra::Packet::new_unchecked(&mut f[OUTER..]);
    for (i, (k, v)) in r.pairs.iter().enumerate() {
        p.set_pair(i, *k, *v);
    }
    f
}

/// The text of a wire error (its field), for [`LibraError::Wire`].
fn why(e: inabench_wire::Error) -> &'static str {
    match e {
        inabench_wire::Error::Truncated { what, .. } => what,
        inabench_wire::Error::Malformed(w)
        | inabench_wire::Error::Checksum(w)
        | inabench_wire::Error::Unsupported(w) => w,
    }
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
    let h = libra::Repr::parse(u.payload()).map_err(|e| LibraError::Wire(why(e)))?;
    let p = libra::Packet::new_unchecked(u.payload());
    Ok((
        src,
        dst,
        Repr {
            kind: h.kind,
            retransmit: h.retransmit,
            worker: h.worker,
            seq: h.seq,
            aux: h.aux,
            pairs: p.pairs().collect(),
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

    /// The bytes the crate's own encoder produced before the header moved to the wire crate
    /// (captured from that code): the wire crate's emit must produce the same frames.
    #[test]
    fn same_bytes_as_before_the_wire_crate() {
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        let r = Repr {
            kind: Kind::PushHot,
            retransmit: true,
            worker: 7,
            seq: 99,
            aux: 3,
            pairs: vec![(1, -5), (40_000, 123_456)],
        };
        assert_eq!(
            hex(&emit(7, 32, &r)),
            "02000002002102000002000808004500003c00004000401122890a0002080a000221bf04bf04002800000101000700000063000000030002000000000001fffffffb00009c400001e240"
        );
        let r = Repr {
            kind: Kind::Done,
            retransmit: false,
            worker: 0xfffe,
            seq: u32::MAX,
            aux: 0,
            pairs: vec![],
        };
        assert_eq!(
            hex(&emit(0, 1, &r)),
            "02000002000202000002000108004500002c00004000401122bf0a0002010a000202bf04bf04001800000500fffeffffffff0000000000000000"
        );
    }
}
