//! The RoCEv2 invariant CRC (IBA Annex A17.8; Linux drivers/infiniband/sw/rxe/rxe_icrc.c).
//!
//! CRC-32 (the Ethernet polynomial, as crc32fast computes it) over: 8 bytes of 0xFF standing in
//! for the LRH, the IPv4 header with TOS, TTL and header checksum set to all 1s, the UDP header
//! with its checksum set to all 1s, the BTH with its byte holding FECN, BECN and resv6a set to
//! all 1s, the rest of the transport headers and the payload (with its pad). The ICRC is
//! appended after the payload, least significant byte first.

use crate::{Error, ipv4, need, udp};

pub const ICRC_LEN: usize = 4;

/// Compute the ICRC of a RoCEv2 frame's IPv4 packet (`ip` runs from the IPv4 header to the end
/// of the payload, without the ICRC).
pub fn compute(ip: &[u8]) -> Result<u32, Error> {
    need("RoCEv2 packet", ip.len(), ipv4::HEADER_LEN)?;
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    need(
        "RoCEv2 packet",
        ip.len(),
        ihl + udp::HEADER_LEN + crate::ib::BTH_LEN,
    )?;
    let masked_end = ihl + udp::HEADER_LEN + crate::ib::BTH_LEN;
    let mut head = [0u8; 8 + 60 + udp::HEADER_LEN + crate::ib::BTH_LEN];
    head[..8].fill(0xff);
    head[8..8 + masked_end].copy_from_slice(&ip[..masked_end]);
    let h = &mut head[8..8 + masked_end];
    h[1] = 0xff; // TOS: DSCP and ECN
    h[8] = 0xff; // TTL
    h[10] = 0xff; // header checksum
    h[11] = 0xff;
    h[ihl + 6] = 0xff; // UDP checksum
    h[ihl + 7] = 0xff;
    h[ihl + udp::HEADER_LEN + 4] = 0xff; // BTH: FECN, BECN, resv6a
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&head[..8 + masked_end]);
    hasher.update(&ip[masked_end..]);
    Ok(hasher.finalize())
}

/// Append the ICRC to a frame buffer whose IPv4 packet starts at `ip_offset`.
pub fn append(frame: &mut Vec<u8>, ip_offset: usize) -> Result<(), Error> {
    let crc = compute(
        frame
            .get(ip_offset..)
            .ok_or(Error::Malformed("ip offset"))?,
    )?;
    frame.extend_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// Verify the ICRC at the end of `ip` (IPv4 packet including the trailing ICRC).
pub fn verify(ip: &[u8]) -> Result<(), Error> {
    need("RoCEv2 packet with ICRC", ip.len(), ICRC_LEN)?;
    let (body, tail) = ip.split_at(ip.len() - ICRC_LEN);
    let want = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
    if compute(body)? == want {
        Ok(())
    } else {
        Err(Error::Checksum("ICRC"))
    }
}
