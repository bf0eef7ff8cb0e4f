//! Ethernet + IPv4 + UDP framing for node-to-node traffic of the suite's in-network aggregation
//! protocols: node `n` of private network `net` has address 10.0.`net`.`n+1` and MAC
//! 02:00:00:`net`:00:`n+1`, and every protocol has its own `net` (SwitchML 1, Libra 2, LuWu 8), so
//! a capture tells them apart.

use crate::{Error, ethernet, ipv4, udp};

/// Bytes of the Ethernet, IPv4 and UDP headers in front of a protocol header.
pub const OUTER_LEN: usize = ethernet::HEADER_LEN + ipv4::HEADER_LEN + udp::HEADER_LEN;

/// The IPv4 address of node `node` on network `net`.
pub fn ip_of(net: u8, node: u32) -> [u8; 4] {
    [10, 0, net, (node + 1) as u8]
}

/// The MAC address of node `node` on network `net`.
pub fn mac_of(net: u8, node: u32) -> [u8; 6] {
    [2, 0, 0, net, 0, (node + 1) as u8]
}

/// Write the Ethernet, IPv4 and UDP headers of a frame from `src` to `dst` (node indices on
/// network `net`, UDP port `port` both ways) carrying `payload_len` bytes of UDP payload, at the
/// start of `frame`; the payload starts at [`OUTER_LEN`].
pub fn emit(
    frame: &mut [u8],
    net: u8,
    src: u32,
    dst: u32,
    port: u16,
    payload_len: usize,
) -> Result<(), Error> {
    emit_at(
        frame,
        (mac_of(net, src), ip_of(net, src)),
        (mac_of(net, dst), ip_of(net, dst)),
        port,
        payload_len,
    )
}

/// [`emit`] at given addresses (each a MAC and an IPv4 address: a testbed's, not a network's
/// numbering).
pub fn emit_at(
    frame: &mut [u8],
    src: ([u8; 6], [u8; 4]),
    dst: ([u8; 6], [u8; 4]),
    port: u16,
    payload_len: usize,
) -> Result<(), Error> {
    crate::need("Ethernet/IPv4/UDP headers", frame.len(), OUTER_LEN)?;
    ethernet::Repr {
        dst: dst.0,
        src: src.0,
        ethertype: ethernet::ETHERTYPE_IPV4,
    }
    .emit(&mut ethernet::Packet::new_unchecked(&mut frame[..]));
    ipv4::Repr {
        src: src.1,
        dst: dst.1,
        protocol: ipv4::PROTO_UDP,
        tos: 0,
        ttl: 64,
        ident: 0,
        payload_len: udp::HEADER_LEN + payload_len,
    }
    .emit(&mut ipv4::Packet::new_unchecked(
        &mut frame[ethernet::HEADER_LEN..],
    ))?;
    udp::Repr {
        src_port: port,
        dst_port: port,
        payload_len,
    }
    .emit(&mut udp::Packet::new_unchecked(
        &mut frame[ethernet::HEADER_LEN + ipv4::HEADER_LEN..],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_frame_parses_back_with_its_addresses_and_lengths() {
        let mut f = vec![0u8; OUTER_LEN + 40];
        emit(&mut f, 8, 2, 9, 48870, 40).expect("emit");
        let ip = ipv4::Repr::parse(&f[ethernet::HEADER_LEN..]).expect("ipv4");
        assert_eq!((ip.src, ip.dst), ([10, 0, 8, 3], [10, 0, 8, 10]));
        assert_eq!(ip.payload_len, udp::HEADER_LEN + 40);
        assert_eq!(ethernet::Repr::parse(&f).expect("eth").src, mac_of(8, 2));
        let u = udp::Repr::parse(&f[ethernet::HEADER_LEN + ipv4::HEADER_LEN..]).expect("udp");
        assert_eq!((u.src_port, u.payload_len), (48870, 40));
        assert!(emit(&mut f[..OUTER_LEN - 1], 8, 2, 9, 1, 0).is_err());
    }
}
