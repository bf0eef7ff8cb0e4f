//! Whole RoCEv2 frames: Ethernet + IPv4 + UDP(4791) + BTH [+ RETH] [+ AETH] [+ ImmDt] + payload
//! (+ pad to 4 bytes) + ICRC.

use crate::ib::{self, AethRepr, Bth, BthRepr, RethRepr};
use crate::{Error, ethernet, icrc, ipv4, need, udp};

/// Everything about a frame but its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameRepr {
    pub src_mac: ethernet::Mac,
    pub dst_mac: ethernet::Mac,
    pub src_ip: [u8; 4],
    pub dst_ip: [u8; 4],
    /// RoCEv2 uses the UDP source port for flow entropy.
    pub src_port: u16,
    /// DSCP and ECN.
    pub tos: u8,
    pub ttl: u8,
    pub bth: BthRepr,
    pub reth: Option<RethRepr>,
    pub aeth: Option<AethRepr>,
    pub immdt: Option<u32>,
}

/// The offset of the IPv4 header in a frame.
pub const IP_OFFSET: usize = ethernet::HEADER_LEN;

impl FrameRepr {
    fn transport_len(&self) -> usize {
        ib::BTH_LEN
            + self.reth.map_or(0, |_| ib::RETH_LEN)
            + self.aeth.map_or(0, |_| ib::AETH_LEN)
            + self.immdt.map_or(0, |_| ib::IMMDT_LEN)
    }

    /// Build the frame carrying `payload` (padded to a multiple of 4 bytes, the pad count set in
    /// the BTH) with the ICRC appended. The extension headers must match the opcode.
    pub fn build(&self, payload: &[u8]) -> Result<Vec<u8>, Error> {
        let l = ib::layout(self.bth.opcode)?;
        if l.reth != self.reth.is_some()
            || l.aeth != self.aeth.is_some()
            || l.immdt != self.immdt.is_some()
        {
            return Err(Error::Malformed(
                "extension headers do not match the opcode",
            ));
        }
        let pad = (4 - payload.len() % 4) % 4;
        let tlen = self.transport_len();
        let udp_payload = tlen + payload.len() + pad + icrc::ICRC_LEN;
        let total = ethernet::HEADER_LEN + ipv4::HEADER_LEN + udp::HEADER_LEN + udp_payload;
        let mut f = vec![0u8; total - icrc::ICRC_LEN];
        ethernet::Repr {
            dst: self.dst_mac,
            src: self.src_mac,
            ethertype: ethernet::ETHERTYPE_IPV4,
        }
        .emit(&mut ethernet::Packet::new_unchecked(&mut f[..]));
        let ip = ipv4::Repr {
            src: self.src_ip,
            dst: self.dst_ip,
            protocol: ipv4::PROTO_UDP,
            tos: self.tos,
            ttl: self.ttl,
            ident: 0,
            payload_len: udp::HEADER_LEN + udp_payload,
        };
        ip.emit(&mut ipv4::Packet::new_unchecked(&mut f[IP_OFFSET..]))?;
        let u = IP_OFFSET + ipv4::HEADER_LEN;
        udp::Repr {
            src_port: self.src_port,
            dst_port: udp::ROCEV2_PORT,
            payload_len: udp_payload,
        }
        .emit(&mut udp::Packet::new_unchecked(&mut f[u..]))?;
        let mut at = u + udp::HEADER_LEN;
        let mut bth = self.bth;
        bth.pad_count = pad as u8;
        bth.emit(&mut f[at..])?;
        at += ib::BTH_LEN;
        if let Some(r) = self.reth {
            r.emit(&mut f[at..])?;
            at += ib::RETH_LEN;
        }
        if let Some(a) = self.aeth {
            a.emit(&mut f[at..])?;
            at += ib::AETH_LEN;
        }
        if let Some(i) = self.immdt {
            f[at..at + 4].copy_from_slice(&i.to_be_bytes());
            at += ib::IMMDT_LEN;
        }
        f[at..at + payload.len()].copy_from_slice(payload);
        icrc::append(&mut f, IP_OFFSET)?;
        Ok(f)
    }

    /// Parse a frame: checks the IPv4 checksum, the RoCEv2 port, the opcode's layout and the
    /// ICRC; returns the headers and the payload (without pad and ICRC).
    pub fn parse(frame: &[u8]) -> Result<(FrameRepr, &[u8]), Error> {
        let eth = ethernet::Packet::new_checked(frame)?;
        let e = ethernet::Repr::parse(&eth)?;
        if e.ethertype != ethernet::ETHERTYPE_IPV4 {
            return Err(Error::Unsupported("ethertype (only IPv4)"));
        }
        let ipp = ipv4::Packet::new_checked(eth.payload())?;
        let ip = ipv4::Repr::parse(&ipp)?;
        if ip.protocol != ipv4::PROTO_UDP {
            return Err(Error::Unsupported("IP protocol (only UDP)"));
        }
        let ihl = ipp.header_len();
        let ip_bytes = &frame[IP_OFFSET..IP_OFFSET + usize::from(ipp.total_len())];
        let up = udp::Packet::new_checked(ipp.payload())?;
        if up.dst_port() != udp::ROCEV2_PORT {
            return Err(Error::Unsupported("UDP port (not RoCEv2)"));
        }
        let udp_len = usize::from(up.len());
        need(
            "RoCEv2 transport",
            udp_len,
            udp::HEADER_LEN + ib::BTH_LEN + icrc::ICRC_LEN,
        )?;
        icrc::verify(ip_bytes)?;
        let t_start = IP_OFFSET + ihl + udp::HEADER_LEN;
        let t = &frame[t_start..IP_OFFSET + ihl + udp_len - icrc::ICRC_LEN];
        let bth = BthRepr::parse(&Bth::new_checked(t)?)?;
        let l = ib::layout(bth.opcode)?;
        let mut at = ib::BTH_LEN;
        let reth = if l.reth {
            let r = RethRepr::parse(&t[at..])?;
            at += ib::RETH_LEN;
            Some(r)
        } else {
            None
        };
        let aeth = if l.aeth {
            let a = AethRepr::parse(&t[at..])?;
            at += ib::AETH_LEN;
            Some(a)
        } else {
            None
        };
        let immdt = if l.immdt {
            need("ImmDt", t.len(), at + ib::IMMDT_LEN)?;
            let v = u32::from_be_bytes([t[at], t[at + 1], t[at + 2], t[at + 3]]);
            at += ib::IMMDT_LEN;
            Some(v)
        } else {
            None
        };
        let pad = usize::from(bth.pad_count);
        need("payload pad", t.len(), at + pad)?;
        let payload = &t[at..t.len() - pad];
        let repr = FrameRepr {
            src_mac: e.src,
            dst_mac: e.dst,
            src_ip: ip.src,
            dst_ip: ip.dst,
            src_port: up.src_port(),
            tos: ip.tos,
            ttl: ip.ttl,
            bth: BthRepr {
                pad_count: 0,
                ..bth
            },
            reth,
            aeth,
            immdt,
        };
        Ok((repr, payload))
    }
}
