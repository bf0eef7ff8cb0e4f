//! The RoCEv2 invariant CRC (IBA Annex A17, "RoCEv2"; the same computation as Linux's
//! `drivers/infiniband/sw/rxe/rxe_icrc.c` and scapy's `contrib/roce.py`).
//!
//! CRC-32 with the Ethernet polynomial (what [`crc32fast`] computes: reflected, initial value and
//! final XOR all ones) over
//!
//! 1. 8 bytes of 0xFF standing in for the InfiniBand LRH that RoCEv2 does not have;
//! 2. the IPv4 header with the fields routers may change set to all ones: TOS (DSCP and ECN),
//!    TTL and the header checksum;
//! 3. the UDP header with its checksum set to all ones;
//! 4. the BTH with its byte 4 (FECN, BECN and the six reserved bits, "resv8a") set to all ones;
//! 5. the extension headers, the payload and its pad, as sent.
//!
//! The result is appended after the pad, least significant byte first. Only the 8 + 20 + 8 + 12
//! byte masked prefix is copied; the rest is hashed in place. The tests check it against a
//! CNP captured on a ConnectX-4 Lx.

use crate::{Error, ib, ipv4, need, udp};

pub const ICRC_LEN: usize = 4;

/// `crc32(8 x 0xFF)`: the state after the masked LRH, from which every ICRC continues.
const LRH_CRC: u32 = 0x2144_df1c;

/// The ICRC of a RoCEv2 packet: `ip` runs from the IPv4 header to the end of the pad, without the
/// ICRC. Only IPv4 is spoken (`Unsupported` otherwise).
pub fn compute(ip: &[u8]) -> Result<u32, Error> {
    need("RoCEv2 packet", ip.len(), ipv4::HEADER_LEN)?;
    if ip[0] >> 4 != 4 {
        return Err(Error::Unsupported("IP version for the ICRC (only IPv4)"));
    }
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    if ihl < ipv4::HEADER_LEN {
        return Err(Error::Malformed("ipv4 header length"));
    }
    let masked = ihl + udp::HEADER_LEN + ib::BTH_LEN;
    need("RoCEv2 packet", ip.len(), masked)?;
    let mut head = [0u8; ipv4::MAX_HEADER_LEN + udp::HEADER_LEN + ib::BTH_LEN];
    let h = &mut head[..masked];
    h.copy_from_slice(&ip[..masked]);
    h[1] = 0xff; // TOS: DSCP and ECN
    h[8] = 0xff; // TTL
    h[10] = 0xff; // header checksum
    h[11] = 0xff;
    h[ihl + 6] = 0xff; // UDP checksum
    h[ihl + 7] = 0xff;
    h[ihl + udp::HEADER_LEN + 4] = 0xff; // BTH: FECN, BECN, resv6a
    let mut hasher = crc32fast::Hasher::new_with_initial(LRH_CRC);
    hasher.update(h);
    hasher.update(&ip[masked..]);
    Ok(hasher.finalize())
}

/// The ICRC at the end of `ip` (the IPv4 packet including its trailing ICRC), as sent.
pub fn read(ip: &[u8]) -> Result<u32, Error> {
    need("RoCEv2 packet with ICRC", ip.len(), ICRC_LEN)?;
    let t = &ip[ip.len() - ICRC_LEN..];
    Ok(u32::from_le_bytes([t[0], t[1], t[2], t[3]]))
}

/// Verify the ICRC at the end of `ip` (the IPv4 packet including its trailing ICRC).
pub fn verify(ip: &[u8]) -> Result<(), Error> {
    let want = read(ip)?;
    if compute(&ip[..ip.len() - ICRC_LEN])? == want {
        Ok(())
    } else {
        Err(Error::Checksum("ICRC"))
    }
}

/// Compute the ICRC of `ip` (the IPv4 packet with 4 bytes of room at its end) and write it into
/// those last 4 bytes.
pub fn fill(ip: &mut [u8]) -> Result<(), Error> {
    need("RoCEv2 packet with ICRC", ip.len(), ICRC_LEN)?;
    let n = ip.len() - ICRC_LEN;
    let crc = compute(&ip[..n])?;
    ip[n..].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// Append the ICRC to a frame whose IPv4 packet starts at `ip_offset` and runs to its end.
pub fn append(frame: &mut Vec<u8>, ip_offset: usize) -> Result<(), Error> {
    let ip = frame
        .get(ip_offset..)
        .ok_or(Error::Malformed("ip offset past the frame"))?;
    let crc = compute(ip)?;
    frame.extend_from_slice(&crc.to_le_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A RoCEv2 CNP captured on a ConnectX-4 Lx, as published in scapy's
    /// `test/contrib/roce.uts` ("RoCE CNP captured on ConnectX-4 Lx"): Ethernet, IPv4 (TOS 0xc2),
    /// UDP to 4791 (checksum 0), BTH (opcode 0x81, BECN), 16 reserved bytes, ICRC 82 fd 00 2a.
    pub(crate) const CAPTURED_CNP: [u8; 74] = [
        0xe4, 0x1d, 0x2d, 0xab, 0x2b, 0xc2, 0x7c, 0xfe, 0x90, 0x64, 0x3b, 0x32, 0x08, 0x00, 0x45,
        0xc2, 0x00, 0x3c, 0x71, 0x8c, 0x40, 0x00, 0x40, 0x11, 0x91, 0x61, 0x0a, 0x00, 0x11, 0x01,
        0x0a, 0x00, 0x12, 0x01, 0x00, 0x00, 0x12, 0xb7, 0x00, 0x28, 0x00, 0x00, 0x81, 0x00, 0xff,
        0xff, 0x40, 0x00, 0x01, 0x18, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x82, 0xfd, 0x00, 0x2a,
    ];

    #[test]
    fn lrh_seed() {
        assert_eq!(crc32fast::hash(&[0xff; 8]), LRH_CRC);
    }

    #[test]
    fn captured_connectx4_cnp() {
        let ip = &CAPTURED_CNP[14..];
        assert_eq!(compute(&ip[..ip.len() - 4]), Ok(0x2a00_fd82));
        assert_eq!(read(ip), Ok(0x2a00_fd82));
        verify(ip).expect("the NIC's ICRC verifies");
        let mut again = CAPTURED_CNP[..CAPTURED_CNP.len() - 4].to_vec();
        append(&mut again, 14).expect("append");
        assert_eq!(again, CAPTURED_CNP);
    }

    #[test]
    fn short_and_non_ipv4_are_errors() {
        let ip = &CAPTURED_CNP[14..];
        for n in 0..ip.len() {
            // too short for the masked prefix, or the last 4 bytes are not the ICRC
            assert!(verify(&ip[..n]).is_err(), "{n} bytes");
        }
        let mut v6 = ip.to_vec();
        v6[0] = 0x60;
        assert!(matches!(compute(&v6), Err(Error::Unsupported(_))));
        v6[0] = 0x44;
        assert!(matches!(compute(&v6), Err(Error::Malformed(_))));
        v6[0] = 0x4f; // 60-byte header: longer than this packet's prefix allows
        assert!(matches!(compute(&v6[..60]), Err(Error::Truncated { .. })));
        assert!(append(&mut vec![0u8; 10], 11).is_err());
        assert!(fill(&mut [0u8; 3]).is_err());
    }
}
