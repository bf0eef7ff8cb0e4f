//! Whole RoCEv2 frames:
//!
//! ```text
//! Ethernet | IPv4 | UDP (dst 4791) | BTH | [RETH] [AETH] [ImmDt] | [INA header] payload | pad | ICRC
//! ```
//!
//! [`FrameRepr`] is everything but the payload (lengths, checksums, the pad count and the ICRC
//! are derived); [`RoceV2Packet`] adds an INA header and the payload, and [`Layers`] gives each
//! layer's own `Repr`. Building checks that the extension headers match the opcode (IBA's opcode
//! table), that only the last or only packet of a message is padded, and that an ACK carries no
//! payload; parsing checks all of that, the IPv4 header checksum, the UDP port and length and the
//! ICRC (unless told to ignore it, as SwitchML-RDMA's NICs do).

use crate::ib::{self, AethRepr, BthRepr, ImmDtRepr, RethRepr, opcode};
use crate::ina::{AtpHeader, InaHeader, InaKind, NetReduceHeader, SwitchMlHeader};
use crate::{Error, ethernet, icrc, ipv4, need, udp};

/// The offset of the IPv4 header in a frame.
pub const IP_OFFSET: usize = ethernet::HEADER_LEN;
/// The offset of the BTH in a frame (IPv4 without options).
pub const BTH_OFFSET: usize = IP_OFFSET + ipv4::HEADER_LEN + udp::HEADER_LEN;

/// Whether to verify the ICRC when parsing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum IcrcCheck {
    #[default]
    Verify,
    /// Accept any ICRC (SwitchML-RDMA turns the NICs' ICRC check off: its switch rewrites
    /// packets without recomputing it).
    Ignore,
}

/// Everything about a RoCEv2 frame but its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
    /// The pad count is derived from the payload when building, and reads 0 after parsing.
    pub bth: BthRepr,
    pub reth: Option<RethRepr>,
    pub aeth: Option<AethRepr>,
    pub immdt: Option<u32>,
}

/// Each layer of a frame as its own `Repr`, lengths and pad count filled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Layers {
    pub ethernet: ethernet::Repr,
    pub ipv4: ipv4::Repr,
    pub udp: udp::Repr,
    pub bth: BthRepr,
    pub reth: Option<RethRepr>,
    pub aeth: Option<AethRepr>,
    pub immdt: Option<ImmDtRepr>,
}

impl FrameRepr {
    /// The opcode's layout, checked against the extension headers present.
    pub fn layout(&self) -> Result<ib::Layout, Error> {
        let l = ib::layout(self.bth.opcode)?;
        if l.reth != self.reth.is_some()
            || l.aeth != self.aeth.is_some()
            || l.immdt != self.immdt.is_some()
        {
            return Err(Error::Malformed(
                "extension headers do not match the opcode",
            ));
        }
        Ok(l)
    }

    /// Bytes of BTH and extension headers.
    pub fn transport_len(&self) -> usize {
        ib::BTH_LEN
            + self.reth.map_or(0, |_| ib::RETH_LEN)
            + self.aeth.map_or(0, |_| ib::AETH_LEN)
            + self.immdt.map_or(0, |_| ib::IMMDT_LEN)
    }

    /// Bytes before the payload.
    pub fn header_len(&self) -> usize {
        BTH_OFFSET + self.transport_len()
    }

    /// Bytes of pad after a payload of `payload_len` bytes.
    pub fn pad_len(payload_len: usize) -> usize {
        (4 - payload_len % 4) % 4
    }

    /// The frame's length for a payload of `payload_len` bytes.
    pub fn buffer_len(&self, payload_len: usize) -> usize {
        self.header_len() + payload_len + Self::pad_len(payload_len) + icrc::ICRC_LEN
    }

    /// Each layer's `Repr` for a payload of `payload_len` bytes.
    pub fn layers(&self, payload_len: usize) -> Layers {
        let udp_payload =
            self.transport_len() + payload_len + Self::pad_len(payload_len) + icrc::ICRC_LEN;
        Layers {
            ethernet: ethernet::Repr {
                dst: self.dst_mac,
                src: self.src_mac,
                ethertype: ethernet::ETHERTYPE_IPV4,
            },
            ipv4: ipv4::Repr {
                src: self.src_ip,
                dst: self.dst_ip,
                protocol: ipv4::PROTO_UDP,
                tos: self.tos,
                ttl: self.ttl,
                ident: 0,
                payload_len: udp::HEADER_LEN + udp_payload,
            },
            udp: udp::Repr {
                src_port: self.src_port,
                dst_port: udp::ROCEV2_PORT,
                payload_len: udp_payload,
            },
            bth: BthRepr {
                pad_count: Self::pad_len(payload_len) as u8,
                ..self.bth
            },
            reth: self.reth,
            aeth: self.aeth,
            immdt: self.immdt.map(|data| ImmDtRepr { data }),
        }
    }

    /// Check that a payload of `payload_len` bytes may ride this frame (the opcode's layout,
    /// no payload in an ACK, a pad only on a message's last packet); returns the pad length.
    fn check_payload(&self, payload_len: usize) -> Result<usize, Error> {
        let l = self.layout()?;
        if !l.payload && payload_len > 0 {
            return Err(Error::Malformed("payload in an ACKNOWLEDGE"));
        }
        let pad = Self::pad_len(payload_len);
        if pad != 0 && !opcode::ends_message(self.bth.opcode) {
            return Err(Error::Malformed(
                "first and middle packets carry a multiple of 4 bytes",
            ));
        }
        Ok(pad)
    }

    /// Write the headers (Ethernet to the last extension header, [`FrameRepr::header_len`]
    /// bytes) of a frame carrying `payload_len` bytes into the start of `frame`.
    fn emit_headers(&self, frame: &mut [u8], payload_len: usize) -> Result<(), Error> {
        let layers = self.layers(payload_len);
        need("RoCEv2 headers", frame.len(), self.header_len())?;
        layers.ethernet.emit(&mut frame[..]);
        layers.ipv4.emit(&mut frame[IP_OFFSET..])?;
        layers
            .udp
            .emit(&mut frame[IP_OFFSET + ipv4::HEADER_LEN..])?;
        let mut at = BTH_OFFSET;
        layers.bth.emit(&mut frame[at..])?;
        at += ib::BTH_LEN;
        if let Some(r) = layers.reth {
            r.emit(&mut frame[at..])?;
            at += ib::RETH_LEN;
        }
        if let Some(a) = layers.aeth {
            a.emit(&mut frame[at..])?;
            at += ib::AETH_LEN;
        }
        if let Some(i) = layers.immdt {
            i.emit(&mut frame[at..])?;
        }
        Ok(())
    }

    /// Write the frame carrying `parts` (concatenated: an INA header, then the payload) into
    /// `frame`, which must be exactly `buffer_len` long.
    fn emit_parts(&self, frame: &mut [u8], parts: &[&[u8]]) -> Result<(), Error> {
        let payload_len: usize = parts.iter().map(|p| p.len()).sum();
        let pad = self.check_payload(payload_len)?;
        let total = self.buffer_len(payload_len);
        if frame.len() != total {
            return Err(Error::Malformed("frame buffer is not buffer_len() long"));
        }
        self.emit_headers(frame, payload_len)?;
        let mut at = self.header_len();
        for p in parts {
            frame[at..at + p.len()].copy_from_slice(p);
            at += p.len();
        }
        frame[at..at + pad].fill(0);
        icrc::fill(&mut frame[IP_OFFSET..])
    }

    /// Headers then `parts` then the pad, appended to `buf` (cleared first): every byte but the
    /// ICRC, each written once (no zeroing first).
    fn push_headers_and_parts(
        &self,
        buf: &mut Vec<u8>,
        parts: &[&[u8]],
        payload_len: usize,
    ) -> Result<usize, Error> {
        let pad = self.check_payload(payload_len)?;
        let hl = self.header_len();
        buf.clear();
        buf.reserve(self.buffer_len(payload_len));
        let mut head =
            [0u8; BTH_OFFSET + ib::BTH_LEN + ib::RETH_LEN + ib::AETH_LEN + ib::IMMDT_LEN];
        self.emit_headers(&mut head[..hl], payload_len)?;
        buf.extend_from_slice(&head[..hl]);
        for p in parts {
            buf.extend_from_slice(p);
        }
        Ok(pad)
    }

    /// Write the frame carrying `payload` into `frame` (exactly [`FrameRepr::buffer_len`] long):
    /// headers, payload, zero pad (the BTH's pad count set), ICRC.
    pub fn emit(&self, frame: &mut [u8], payload: &[u8]) -> Result<(), Error> {
        self.emit_parts(frame, &[payload])
    }

    /// Build the frame carrying `payload` (a new buffer; [`FrameRepr::build_into`] writes into
    /// the caller's).
    pub fn build(&self, payload: &[u8]) -> Result<Vec<u8>, Error> {
        let mut f = Vec::new();
        self.build_into(&mut f, payload)?;
        Ok(f)
    }

    /// Build the frame carrying `payload` into `buf`, whatever it held: it is resized to
    /// [`FrameRepr::buffer_len`] (no allocation when its capacity suffices, e.g. a recycled
    /// frame buffer) and every byte is written.
    pub fn build_into(&self, buf: &mut Vec<u8>, payload: &[u8]) -> Result<(), Error> {
        self.build_parts_into(buf, &[payload])
    }

    /// As [`FrameRepr::build_into`] with the payload given in pieces (concatenated on the
    /// wire: e.g. an INA header kept from one frame and values from another), so a caller need
    /// not copy them into one slice first.
    pub fn build_parts_into(&self, buf: &mut Vec<u8>, parts: &[&[u8]]) -> Result<(), Error> {
        self.build_parts_with(None, buf, parts)
    }

    /// [`FrameRepr::build_parts_into`] with the headers through `cache` when one is given.
    fn build_parts_with(
        &self,
        cache: Option<&mut EmitCache>,
        buf: &mut Vec<u8>,
        parts: &[&[u8]],
    ) -> Result<(), Error> {
        let payload_len: usize = parts.iter().map(|p| p.len()).sum();
        let pad = self.push_headers_maybe_cached(cache, buf, parts, payload_len)?;
        buf.extend_from_slice(&[0u8; 3][..pad]);
        let crc = icrc::compute(&buf[IP_OFFSET..])?;
        buf.extend_from_slice(&crc.to_le_bytes());
        Ok(())
    }

    /// As [`FrameRepr::build_parts_into`] with the payload `head` then `tail`, where `shared`
    /// was made from `tail` and this frame's pad ([`icrc::SharedTail::new`]`(tail,
    /// pad_len(head + tail))`) and `shift` is for its length: the same bytes, with only the
    /// headers and `head` hashed for the ICRC (the switch that sends one aggregate to several
    /// receivers hashes the aggregate once).
    pub fn build_shared_tail_into(
        &self,
        buf: &mut Vec<u8>,
        head: &[&[u8]],
        tail: &[u8],
        shared: &icrc::SharedTail,
        shift: &icrc::Shift,
    ) -> Result<(), Error> {
        self.build_shared_tail_with(None, buf, head, tail, shared, shift)
    }

    /// [`FrameRepr::build_shared_tail_into`] with the headers through `cache` when one is given.
    fn build_shared_tail_with(
        &self,
        cache: Option<&mut EmitCache>,
        buf: &mut Vec<u8>,
        head: &[&[u8]],
        tail: &[u8],
        shared: &icrc::SharedTail,
        shift: &icrc::Shift,
    ) -> Result<(), Error> {
        let head_len: usize = head.iter().map(|p| p.len()).sum();
        let payload_len = head_len + tail.len();
        if shared.len() != tail.len() + Self::pad_len(payload_len) {
            return Err(Error::Malformed("shared ICRC tail not this frame's tail"));
        }
        let pad = self.push_headers_maybe_cached(cache, buf, head, payload_len)?;
        let crc = icrc::compute_with_tail(&buf[IP_OFFSET..], shared, shift)?;
        buf.extend_from_slice(tail);
        buf.extend_from_slice(&[0u8; 3][..pad]);
        buf.extend_from_slice(&crc.to_le_bytes());
        Ok(())
    }

    /// The headers then `parts` into `buf`, through `cache` when one is given; the pad length.
    fn push_headers_maybe_cached(
        &self,
        cache: Option<&mut EmitCache>,
        buf: &mut Vec<u8>,
        parts: &[&[u8]],
        payload_len: usize,
    ) -> Result<usize, Error> {
        match cache {
            Some(c) => self.push_headers_and_parts_cached(c, buf, parts, payload_len),
            None => self.push_headers_and_parts(buf, parts, payload_len),
        }
    }

    /// [`FrameRepr::push_headers_and_parts`] through `cache`: when this frame's headers are
    /// those `cache` last wrote but for the PSN (the same `FrameRepr` otherwise, the same
    /// payload length), its header bytes are copied and the PSN written in (no field is
    /// checksummed over the PSN: IPv4's checksum covers its own header, RoCEv2 sends UDP's as
    /// 0); otherwise they are emitted as usual and kept in `cache`. The same bytes and errors.
    fn push_headers_and_parts_cached(
        &self,
        cache: &mut EmitCache,
        buf: &mut Vec<u8>,
        parts: &[&[u8]],
        payload_len: usize,
    ) -> Result<usize, Error> {
        let mut key = *self;
        key.bth.psn = 0;
        if self.bth.psn <= ib::PSN_MASK
            && cache.repr == Some(key)
            && cache.payload_len == payload_len
        {
            let hl = cache.len;
            buf.clear();
            buf.reserve(self.buffer_len(payload_len));
            buf.extend_from_slice(&cache.head[..hl]);
            let at = BTH_OFFSET + PSN_AT;
            buf[at..at + 3].copy_from_slice(&self.bth.psn.to_be_bytes()[1..]);
            for p in parts {
                buf.extend_from_slice(p);
            }
            return Ok(Self::pad_len(payload_len));
        }
        cache.repr = None;
        let pad = self.push_headers_and_parts(buf, parts, payload_len)?;
        let hl = self.header_len();
        cache.head[..hl].copy_from_slice(&buf[..hl]);
        cache.len = hl;
        cache.payload_len = payload_len;
        cache.repr = Some(key);
        Ok(pad)
    }

    /// [`FrameRepr::build_parts_into`] with the headers through `cache` (see [`EmitCache`]):
    /// the same bytes.
    pub fn build_parts_cached(
        &self,
        cache: &mut EmitCache,
        buf: &mut Vec<u8>,
        parts: &[&[u8]],
    ) -> Result<(), Error> {
        self.build_parts_with(Some(cache), buf, parts)
    }

    /// [`FrameRepr::build_shared_tail_into`] with the headers through `cache` (see
    /// [`EmitCache`]): the same bytes.
    pub fn build_shared_tail_cached(
        &self,
        cache: &mut EmitCache,
        buf: &mut Vec<u8>,
        head: &[&[u8]],
        tail: &[u8],
        shared: &icrc::SharedTail,
        shift: &icrc::Shift,
    ) -> Result<(), Error> {
        self.build_shared_tail_with(Some(cache), buf, head, tail, shared, shift)
    }

    /// Parse a frame, verifying the ICRC; returns the headers and the payload (without pad and
    /// ICRC).
    pub fn parse(frame: &[u8]) -> Result<(FrameRepr, &[u8]), Error> {
        Self::parse_with(frame, IcrcCheck::Verify)
    }

    /// Parse a frame, verifying the ICRC or not.
    pub fn parse_with(frame: &[u8], check: IcrcCheck) -> Result<(FrameRepr, &[u8]), Error> {
        let e = ethernet::Repr::parse(frame)?;
        if e.ethertype != ethernet::ETHERTYPE_IPV4 {
            return Err(Error::Unsupported("ethertype (only IPv4)"));
        }
        let ip_all = &frame[IP_OFFSET..];
        let ip = ipv4::Repr::parse(ip_all)?;
        if ip.protocol != ipv4::PROTO_UDP {
            return Err(Error::Unsupported("IP protocol (only UDP)"));
        }
        let ipp = ipv4::Packet::new_checked(ip_all)?;
        let ihl = ipp.header_len();
        let ip_bytes = &ip_all[..ihl + ip.payload_len];
        let up = udp::Packet::new_checked(ipp.payload())?;
        if up.dst_port() != udp::ROCEV2_PORT {
            return Err(Error::Unsupported("UDP port (not RoCEv2)"));
        }
        let udp_len = usize::from(up.len());
        if udp_len != ip.payload_len {
            return Err(Error::Malformed(
                "UDP length disagrees with the IPv4 length",
            ));
        }
        need(
            "RoCEv2 transport",
            udp_len,
            udp::HEADER_LEN + ib::BTH_LEN + icrc::ICRC_LEN,
        )?;
        if check == IcrcCheck::Verify {
            icrc::verify(ip_bytes)?;
        }
        // BTH to the end of the pad: headers, payload and pad are whole 4-byte words
        let t = &ip_bytes[ihl + udp::HEADER_LEN..ip_bytes.len() - icrc::ICRC_LEN];
        if !t.len().is_multiple_of(4) {
            return Err(Error::Malformed(
                "RoCEv2 transport length not a multiple of 4",
            ));
        }
        let bth = BthRepr::parse(t)?;
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
            let i = ImmDtRepr::parse(&t[at..])?;
            at += ib::IMMDT_LEN;
            Some(i.data)
        } else {
            None
        };
        let pad = usize::from(bth.pad_count);
        need("payload pad", t.len(), at + pad)?;
        if pad != 0 && !opcode::ends_message(bth.opcode) {
            return Err(Error::Malformed("pad in a first or middle packet"));
        }
        let payload = &t[at..t.len() - pad];
        if !l.payload && !payload.is_empty() {
            return Err(Error::Malformed("payload in an ACKNOWLEDGE"));
        }
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

/// The longest headers a [`ParseTemplate`] holds: Ethernet, IPv4 with options, UDP, BTH and
/// every extension header.
const TEMPLATE_MAX: usize = IP_OFFSET
    + ipv4::MAX_HEADER_LEN
    + udp::HEADER_LEN
    + ib::BTH_LEN
    + ib::RETH_LEN
    + ib::AETH_LEN
    + ib::IMMDT_LEN;

/// The offset of the PSN in the BTH (bytes 9-11).
const PSN_AT: usize = 9;

/// A frame's headers as [`FrameRepr::parse_with`] accepted them, to parse later frames of the
/// same flow by comparing bytes instead of parsing each layer again.
///
/// What `parse_with` checks and returns is a function of the frame's length, its header bytes
/// (Ethernet to the last extension header) and, for the ICRC, the IPv4 packet's bytes; of the
/// header bytes only the BTH's PSN and the RETH (virtual address, R_Key, DMA length) are read
/// without being checked. So a frame of the template's length whose header bytes equal the
/// template's everywhere but those gives `parse_with`'s result: the template's `FrameRepr` with
/// this frame's PSN and RETH, the payload at the same offset, and the ICRC verified over the same
/// span. Any other frame is not matched ([`ParseTemplate::parse`] returns `None`) and must be
/// parsed in full, so malformed and foreign frames are rejected exactly as by `parse_with`.
/// Frames with an AETH (ACKs, whose syndrome is checked) are not templated.
#[derive(Debug, Clone)]
pub struct ParseTemplate {
    frame_len: usize,
    /// the payload's offset: the headers' length
    header_len: usize,
    /// the BTH's offset
    bth: usize,
    /// the end of the IPv4 packet (its total length after [`IP_OFFSET`])
    ip_end: usize,
    payload_len: usize,
    /// the header bytes, PSN and RETH included (not compared)
    head: [u8; TEMPLATE_MAX],
    repr: FrameRepr,
    /// `icrc::compute ^ icrc::unmasked` over the IPv4 packet (without its ICRC): the same for
    /// every frame of this template (their masked fields are compared bytes, their length is
    /// the template's), so its ICRC is `unmasked(its bytes) ^ icrc_fix`
    icrc_fix: u32,
}

impl ParseTemplate {
    /// The template of `frame`, which [`FrameRepr::parse_with`] returned `repr` and `payload`
    /// for (`None` for a frame with an AETH, or one whose payload is not a part of it).
    pub fn new(frame: &[u8], repr: &FrameRepr, payload: &[u8]) -> Option<ParseTemplate> {
        if repr.aeth.is_some() {
            return None;
        }
        let header_len = (payload.as_ptr() as usize).checked_sub(frame.as_ptr() as usize)?;
        let ip = frame.get(IP_OFFSET..)?;
        let ihl = usize::from(ip.first()? & 0x0f) * 4;
        let total = usize::from(u16::from_be_bytes([*ip.get(2)?, *ip.get(3)?]));
        let bth = IP_OFFSET + ihl + udp::HEADER_LEN;
        if header_len != bth + repr.transport_len()
            || header_len > TEMPLATE_MAX
            || header_len + payload.len() > frame.len()
            || IP_OFFSET + total > frame.len()
        {
            return None;
        }
        let mut head = [0u8; TEMPLATE_MAX];
        head[..header_len].copy_from_slice(&frame[..header_len]);
        let ip_bytes = frame.get(IP_OFFSET..(IP_OFFSET + total).checked_sub(icrc::ICRC_LEN)?)?;
        let icrc_fix = icrc::compute(ip_bytes).ok()? ^ icrc::unmasked(ip_bytes);
        Some(ParseTemplate {
            frame_len: frame.len(),
            header_len,
            bth,
            ip_end: IP_OFFSET + total,
            payload_len: payload.len(),
            head,
            repr: *repr,
            icrc_fix,
        })
    }

    /// What [`FrameRepr::parse_with`] returns for `frame`, if it matches this template (`None`
    /// otherwise: parse it in full).
    #[inline]
    pub fn parse<'a>(
        &self,
        frame: &'a [u8],
        check: IcrcCheck,
    ) -> Option<Result<(FrameRepr, &'a [u8]), Error>> {
        if frame.len() != self.frame_len {
            return None;
        }
        let (hl, psn) = (self.header_len, self.bth + PSN_AT);
        // the compared spans: up to the PSN, then after the PSN and RETH
        let rest = psn + 3 + self.repr.reth.map_or(0, |_| ib::RETH_LEN);
        if frame[..psn] != self.head[..psn] || frame[rest..hl] != self.head[rest..hl] {
            return None;
        }
        if check == IcrcCheck::Verify {
            // `icrc::verify`'s result: the headers it checks are the template's
            let ip = &frame[IP_OFFSET..self.ip_end];
            let (bytes, sent) = ip.split_at(ip.len() - icrc::ICRC_LEN);
            let sent = u32::from_le_bytes([sent[0], sent[1], sent[2], sent[3]]);
            if icrc::unmasked(bytes) ^ self.icrc_fix != sent {
                return Some(Err(Error::Checksum("ICRC")));
            }
        }
        let mut repr = self.repr;
        repr.bth.psn = u32::from_be_bytes([0, frame[psn], frame[psn + 1], frame[psn + 2]]);
        if repr.reth.is_some() {
            repr.reth = RethRepr::parse(&frame[psn + 3..rest]).ok();
        }
        Some(Ok((repr, &frame[hl..hl + self.payload_len])))
    }
}

/// The header bytes a builder last emitted and the `FrameRepr` (PSN aside) and payload length
/// they were emitted for: a sender whose consecutive frames differ only in the PSN (a QP's
/// middle packets) copies them instead of emitting each layer again
/// ([`FrameRepr::build_parts_cached`], [`FrameRepr::build_shared_tail_cached`]).
#[derive(Debug, Clone)]
pub struct EmitCache {
    /// with PSN 0
    repr: Option<FrameRepr>,
    payload_len: usize,
    len: usize,
    head: [u8; TEMPLATE_MAX],
}

impl Default for EmitCache {
    fn default() -> Self {
        EmitCache {
            repr: None,
            payload_len: 0,
            len: 0,
            head: [0; TEMPLATE_MAX],
        }
    }
}

/// [`FrameRepr::parse_with`] through a few [`ParseTemplate`]s of the frames it last parsed in
/// full (one flow's first, middle and last packets): the same results, each frame that matches
/// a template parsed by a compare of its header bytes.
#[derive(Debug, Clone)]
pub struct ParseCache {
    templates: Vec<ParseTemplate>,
    cap: usize,
    /// the template replaced next when the cache is full
    next: usize,
}

impl ParseCache {
    /// A cache of up to `cap` templates.
    pub fn new(cap: usize) -> ParseCache {
        ParseCache {
            templates: Vec::with_capacity(cap),
            cap,
            next: 0,
        }
    }

    /// As [`FrameRepr::parse_with`].
    pub fn parse<'a>(
        &mut self,
        frame: &'a [u8],
        check: IcrcCheck,
    ) -> Result<(FrameRepr, &'a [u8]), Error> {
        for t in &self.templates {
            if let Some(r) = t.parse(frame, check) {
                return r;
            }
        }
        let (repr, payload) = FrameRepr::parse_with(frame, check)?;
        if self.cap > 0
            && let Some(t) = ParseTemplate::new(frame, &repr, payload)
        {
            if self.templates.len() < self.cap {
                self.templates.push(t);
            } else {
                self.templates[self.next] = t;
                self.next = (self.next + 1) % self.cap;
            }
        }
        Ok((repr, payload))
    }
}

/// A RoCEv2 packet: its headers, an optional INA header at the start of the payload, and the
/// rest of the payload. Builds to and parses from a whole Ethernet frame with its ICRC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RoceV2Packet<'a> {
    pub headers: FrameRepr,
    pub ina: Option<InaHeader>,
    /// The payload after the INA header (without pad).
    pub payload: &'a [u8],
}

impl<'a> RoceV2Packet<'a> {
    fn ina_len(&self) -> usize {
        self.ina.map_or(0, |h| h.buffer_len())
    }

    /// The frame's length.
    pub fn buffer_len(&self) -> usize {
        self.headers.buffer_len(self.ina_len() + self.payload.len())
    }

    /// Each layer's `Repr` (the INA header is [`RoceV2Packet::ina`]).
    pub fn layers(&self) -> Layers {
        self.headers.layers(self.ina_len() + self.payload.len())
    }

    /// Write the frame into `frame` (exactly [`RoceV2Packet::buffer_len`] long). A NetReduce
    /// header goes only at the start of a message (a first or only packet).
    pub fn emit(&self, frame: &mut [u8]) -> Result<(), Error> {
        let (ina, n) = self.ina_bytes()?;
        self.headers.emit_parts(frame, &[&ina[..n], self.payload])
    }

    /// The INA header's bytes (checked against the opcode and payload) and their count.
    fn ina_bytes(&self) -> Result<([u8; 16], usize), Error> {
        let mut ina = [0u8; 16];
        let n = match self.ina {
            Some(h) => {
                if matches!(h, InaHeader::NetReduce(_))
                    && !opcode::starts_message(self.headers.bth.opcode)
                {
                    return Err(Error::Malformed(
                        "NetReduce header outside a message's first packet",
                    ));
                }
                if let InaHeader::SwitchMl(s) = h
                    && self.payload.len() != 4 * usize::from(s.elements)
                {
                    return Err(Error::Malformed(
                        "SwitchML element count disagrees with the payload",
                    ));
                }
                let n = h.buffer_len();
                h.emit(&mut ina[..n])?;
                n
            }
            None => 0,
        };
        Ok((ina, n))
    }

    /// Build the frame (a new buffer; [`RoceV2Packet::build_into`] writes into the caller's).
    pub fn build(&self) -> Result<Vec<u8>, Error> {
        let mut f = Vec::new();
        self.build_into(&mut f)?;
        Ok(f)
    }

    /// Build the frame into `buf`, whatever it held: resized to [`RoceV2Packet::buffer_len`]
    /// (no allocation when its capacity suffices) and every byte written.
    pub fn build_into(&self, buf: &mut Vec<u8>) -> Result<(), Error> {
        let (ina, n) = self.ina_bytes()?;
        self.headers
            .build_parts_into(buf, &[&ina[..n], self.payload])
    }

    /// Parse a frame (verifying the ICRC) whose payload starts with an INA header of `ina`'s
    /// kind: NetReduce's only in a message's first (or only) packet and only when it carries the
    /// InetTag; SwitchML's and ATP's in every packet with a payload.
    pub fn parse(frame: &'a [u8], ina: InaKind) -> Result<RoceV2Packet<'a>, Error> {
        Self::parse_with(frame, ina, IcrcCheck::Verify)
    }

    pub fn parse_with(
        frame: &'a [u8],
        ina: InaKind,
        check: IcrcCheck,
    ) -> Result<RoceV2Packet<'a>, Error> {
        let (headers, payload) = FrameRepr::parse_with(frame, check)?;
        let op = headers.bth.opcode;
        let ina = match ina {
            InaKind::None => None,
            InaKind::NetReduce => (opcode::starts_message(op)
                && NetReduceHeader::is_first(payload))
            .then(|| NetReduceHeader::parse(payload).map(InaHeader::NetReduce))
            .transpose()?,
            InaKind::SwitchMl => (!payload.is_empty())
                .then(|| SwitchMlHeader::parse(payload).map(InaHeader::SwitchMl))
                .transpose()?,
            InaKind::Atp => (!payload.is_empty())
                .then(|| AtpHeader::parse(payload).map(InaHeader::Atp))
                .transpose()?,
        };
        let skip = ina.map_or(0, |h| h.buffer_len());
        if let Some(InaHeader::SwitchMl(h)) = ina
            && payload.len() - skip != 4 * usize::from(h.elements)
        {
            return Err(Error::Malformed(
                "SwitchML element count disagrees with the payload",
            ));
        }
        Ok(RoceV2Packet {
            headers,
            ina,
            payload: &payload[skip..],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ib::{NakCode, Syndrome};

    fn headers(op: u8) -> FrameRepr {
        let l = ib::layout(op).expect("opcode");
        FrameRepr {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_ip: [10, 0, 0, 1],
            dst_ip: [10, 0, 0, 2],
            src_port: 49152,
            tos: 0x02,
            ttl: 64,
            bth: BthRepr {
                opcode: op,
                solicited: false,
                migreq: true,
                pad_count: 0,
                pkey: 0xffff,
                fecn: false,
                becn: false,
                dest_qp: 0x12,
                ack_req: true,
                psn: 100,
            },
            reth: l.reth.then_some(RethRepr {
                va: 0x1000,
                rkey: 0xabcd,
                dma_len: 4096,
            }),
            aeth: l.aeth.then_some(AethRepr {
                syndrome: Syndrome::Ack { credits: 31 },
                msn: 7,
            }),
            immdt: l.immdt.then_some(0xdead_beef),
        }
    }

    #[test]
    fn build_into_a_used_buffer_gives_the_same_bytes_as_build() {
        let values: Vec<u8> = (0..70u8).collect();
        for op in [
            opcode::RC_RDMA_WRITE_FIRST,
            opcode::RC_RDMA_WRITE_LAST,
            opcode::RC_ACKNOWLEDGE,
        ] {
            let repr = headers(op);
            let payload: &[u8] = if op == opcode::RC_ACKNOWLEDGE {
                &[]
            } else if op == opcode::RC_RDMA_WRITE_FIRST {
                &values[..64]
            } else {
                &values
            };
            let fresh = repr.build(payload).expect("build");
            // a stale buffer, longer and shorter than the frame, full of 0xff
            for stale in [vec![0xffu8; 4096], vec![0xffu8; 3]] {
                let mut buf = stale;
                let cap = buf.capacity();
                repr.build_into(&mut buf, payload).expect("build_into");
                assert_eq!(buf, fresh);
                if cap >= fresh.len() {
                    assert_eq!(buf.capacity(), cap, "no reallocation when it fits");
                }
                // the payload in pieces: the same frame
                let mut parts = vec![0xffu8; 10];
                let (a, b) = payload.split_at(payload.len() / 2);
                repr.build_parts_into(&mut parts, &[a, b])
                    .expect("build_parts_into");
                assert_eq!(parts, fresh);
            }
        }
        let h = NetReduceHeader {
            ring_id: 1,
            rank: 2,
            msg_id: 3,
            msg_len: 4,
        };
        let p = RoceV2Packet {
            headers: headers(opcode::RC_RDMA_WRITE_FIRST),
            ina: Some(InaHeader::NetReduce(h)),
            payload: &values[..64],
        };
        let mut buf = vec![0xabu8; 9000];
        p.build_into(&mut buf).expect("build_into");
        assert_eq!(buf, p.build().expect("build"));
    }

    /// A template parses exactly as `parse_with` does: frames of its flow with another PSN and
    /// RETH are matched and give `parse_with`'s result; every frame with one byte changed,
    /// cut short or lengthened gives `parse_with`'s result too (matched or not), for both ICRC
    /// settings; an ACK is not templated.
    #[test]
    fn a_parse_template_gives_what_parse_with_gives() {
        let values: Vec<u8> = (0..1030u32).map(|i| (i * 13 + 5) as u8).collect();
        for (op, n) in [
            (opcode::RC_RDMA_WRITE_FIRST, 1024),
            (opcode::RC_RDMA_WRITE_MIDDLE, 1024),
            (opcode::RC_RDMA_WRITE_LAST, 1030),
            (opcode::RC_RDMA_WRITE_ONLY, 61),
            (opcode::RC_RDMA_WRITE_LAST_IMM, 8),
        ] {
            let repr = headers(op);
            let base = repr.build(&values[..n]).expect("build");
            let (r0, p0) = FrameRepr::parse(&base).expect("parse");
            let t = ParseTemplate::new(&base, &r0, p0).expect("a data frame is templated");
            // the same flow, another PSN and RETH: matched, and parse_with's result
            let mut other = repr;
            other.bth.psn = 0xab_cdef;
            other.reth = other.reth.map(|r| RethRepr {
                va: r.va ^ 0x1234_5678_9abc,
                rkey: r.rkey ^ 7,
                dma_len: r.dma_len + 4096,
            });
            let f = other.build(&values[..n]).expect("build");
            for check in [IcrcCheck::Verify, IcrcCheck::Ignore] {
                let got = t.parse(&f, check).expect("matched");
                assert_eq!(got, FrameRepr::parse_with(&f, check));
                assert_eq!(got.expect("parses").0, other);
            }
            // every single-byte change, cut and extension: what parse_with says
            let mut cache = ParseCache::new(2);
            cache.parse(&base, IcrcCheck::Verify).expect("learn");
            let mut matched = 0;
            for i in 0..base.len() {
                for x in [0x01u8, 0x80, 0xff] {
                    let mut m = base.clone();
                    m[i] ^= x;
                    for check in [IcrcCheck::Verify, IcrcCheck::Ignore] {
                        let want = FrameRepr::parse_with(&m, check);
                        if let Some(got) = t.parse(&m, check) {
                            matched += 1;
                            assert_eq!(got, want, "byte {i} ^ {x:#x}, {check:?}");
                        }
                        // a fresh cache each time: a mutated frame may be learned
                        let mut c = cache.clone();
                        assert_eq!(c.parse(&m, check), want, "byte {i} ^ {x:#x}");
                    }
                }
            }
            assert!(matched > 0, "the PSN's bytes and the payload's are matched");
            for len in [0, 14, 50, base.len() - 1, base.len() + 1, base.len() + 4] {
                let mut m = base.clone();
                m.resize(len, 0);
                assert!(t.parse(&m, IcrcCheck::Ignore).is_none());
                let mut c = cache.clone();
                assert_eq!(
                    c.parse(&m, IcrcCheck::Ignore),
                    FrameRepr::parse_with(&m, IcrcCheck::Ignore)
                );
            }
        }
        let ack = headers(opcode::RC_ACKNOWLEDGE).build(&[]).expect("ack");
        let (r, p) = FrameRepr::parse(&ack).expect("parse");
        assert!(ParseTemplate::new(&ack, &r, p).is_none());
    }

    /// Frames built through an [`EmitCache`] are those the plain builders make, and fail
    /// as they do, over a sequence whose neighbours differ in the PSN only (copied headers)
    /// or in anything else (emitted again).
    #[test]
    fn cached_headers_build_the_same_bytes() {
        let values: Vec<u8> = (0..1031u32).map(|i| (i * 11 + 1) as u8).collect();
        let mut cache = EmitCache::default();
        let mut copied = 0;
        let mut seq = Vec::new();
        for op in [
            opcode::RC_RDMA_WRITE_FIRST,
            opcode::RC_RDMA_WRITE_MIDDLE,
            opcode::RC_RDMA_WRITE_MIDDLE,
            opcode::RC_RDMA_WRITE_LAST,
            opcode::RC_RDMA_WRITE_MIDDLE,
            opcode::RC_ACKNOWLEDGE,
        ] {
            for (psn, n) in [
                (5u32, 1024),
                (6, 1024),
                (0xff_ffff, 1024),
                (1 << 24, 1024),
                (7, 1028),
            ] {
                let mut r = headers(op);
                r.bth.psn = psn;
                let n = if op == opcode::RC_ACKNOWLEDGE { 0 } else { n };
                seq.push((r, n));
            }
            let mut r = headers(op);
            r.dst_ip = [10, 0, 0, 9];
            seq.push((
                r,
                if op == opcode::RC_ACKNOWLEDGE {
                    0
                } else {
                    1024
                },
            ));
        }
        for (r, n) in seq {
            let hit = r.bth.psn <= ib::PSN_MASK
                && cache.repr
                    == Some(FrameRepr {
                        bth: BthRepr { psn: 0, ..r.bth },
                        ..r
                    })
                && cache.payload_len == n;
            copied += usize::from(hit);
            let (a, b) = values[..n].split_at(n.min(16));
            let plain = {
                let mut f = vec![0xee; 7];
                r.build_parts_into(&mut f, &[a, b]).map(|()| f)
            };
            let mut f = vec![0xdd; 3000];
            let got = r
                .build_parts_cached(&mut cache, &mut f, &[a, b])
                .map(|()| f);
            assert_eq!(got, plain, "{r:?} {n}");
            let pad = FrameRepr::pad_len(n);
            let shared = icrc::SharedTail::new(b, pad);
            let shift = icrc::Shift::new(shared.len());
            let mut f = vec![0xcc; 5];
            let got = r
                .build_shared_tail_cached(&mut cache, &mut f, &[a], b, &shared, &shift)
                .map(|()| f);
            assert_eq!(got, plain, "{r:?} {n}, shared tail");
        }
        assert!(copied >= 6, "PSN-only neighbours copied headers ({copied})");
    }

    #[test]
    fn a_shared_tail_builds_the_same_bytes() {
        let values: Vec<u8> = (0..1031u32).map(|i| (i * 7 + 3) as u8).collect();
        for op in [
            opcode::RC_RDMA_WRITE_FIRST,
            opcode::RC_RDMA_WRITE_MIDDLE,
            opcode::RC_RDMA_WRITE_LAST,
            opcode::RC_SEND_ONLY,
        ] {
            // whole words on first and middle packets, any length on the last
            let lens: &[usize] = if opcode::ends_message(op) {
                &[16, 17, 18, 19, 1024, 1031]
            } else {
                &[16, 1024]
            };
            for &n in lens {
                let payload = &values[..n];
                let (head, tail) = payload.split_at(16);
                let pad = FrameRepr::pad_len(n);
                let shared = icrc::SharedTail::new(tail, pad);
                let shift = icrc::Shift::new(shared.len());
                for qp in [0x12, 0x345] {
                    let mut repr = headers(op);
                    repr.bth.dest_qp = qp;
                    repr.bth.psn = qp * 3;
                    let plain = repr.build(payload).expect("build");
                    let mut buf = vec![0xeeu8; 5];
                    repr.build_shared_tail_into(
                        &mut buf,
                        &[&head[..4], &head[4..]],
                        tail,
                        &shared,
                        &shift,
                    )
                    .expect("shared tail");
                    assert_eq!(buf, plain, "opcode {op:#x}, {n} bytes");
                    FrameRepr::parse(&buf).expect("the ICRC verifies");
                }
                // a tail that is not the one the CRC was made from: refused when its length
                // differs (the same length is the caller's promise)
                let mut buf = Vec::new();
                assert!(
                    headers(op)
                        .build_shared_tail_into(&mut buf, &[head], &values[12..n], &shared, &shift)
                        .is_err()
                );
            }
        }
    }

    #[test]
    fn build_and_parse_with_an_ina_header() {
        let h = NetReduceHeader {
            ring_id: 1,
            rank: 2,
            msg_id: 3,
            msg_len: 4,
        };
        let values = [7u8; 64];
        let p = RoceV2Packet {
            headers: headers(opcode::RC_RDMA_WRITE_FIRST),
            ina: Some(InaHeader::NetReduce(h)),
            payload: &values,
        };
        let f = p.build().expect("build");
        assert_eq!(f.len(), 14 + 20 + 8 + 12 + 16 + 16 + 64 + 4);
        // NetReduce's header is right after the RETH
        let at = BTH_OFFSET + 12 + 16;
        assert_eq!(&f[at..at + 4], b"INET");
        assert_eq!(RoceV2Packet::parse(&f, InaKind::NetReduce), Ok(p));
        // without asking for it, the header is payload
        let plain = RoceV2Packet::parse(&f, InaKind::None).expect("parse");
        assert_eq!(plain.payload.len(), 80);
        // the layers agree with the bytes
        let l = p.layers();
        assert_eq!(l.ipv4.payload_len, f.len() - 14 - 20);
        assert_eq!(l.udp.payload_len, f.len() - 14 - 28);
        assert_eq!(ipv4::Repr::parse(&f[14..]), Ok(l.ipv4));
        assert_eq!(udp::Repr::parse(&f[34..]), Ok(l.udp));
        // a NetReduce header is only at the start of a message
        let mid = RoceV2Packet {
            headers: headers(opcode::RC_RDMA_WRITE_MIDDLE),
            ..p
        };
        assert!(mid.build().is_err());
    }

    #[test]
    fn build_refusals() {
        let ack = headers(opcode::RC_ACKNOWLEDGE);
        assert_eq!(
            ack.build(&[1]),
            Err(Error::Malformed("payload in an ACKNOWLEDGE"))
        );
        let first = headers(opcode::RC_SEND_FIRST);
        assert!(first.build(&[1, 2, 3]).is_err(), "pad on a first packet");
        first.build(&[1, 2, 3, 4]).expect("no pad");
        let mut wrong = headers(opcode::RC_RDMA_WRITE_MIDDLE);
        wrong.reth = headers(opcode::RC_RDMA_WRITE_FIRST).reth;
        assert!(wrong.build(&[]).is_err());
        let mut bad_qp = headers(opcode::RC_SEND_ONLY);
        bad_qp.bth.dest_qp = 1 << 24;
        assert!(bad_qp.build(&[]).is_err());
        assert!(headers(opcode::RC_SEND_ONLY).build(&[0; 65_500]).is_err());
        let only = headers(opcode::RC_SEND_ONLY);
        assert!(only.emit(&mut [0u8; 10], &[]).is_err());
        let mut nak = ack;
        nak.aeth = Some(AethRepr {
            syndrome: Syndrome::Nak(NakCode::InvalidRequest),
            msn: 1,
        });
        let f = nak.build(&[]).expect("build");
        assert_eq!(FrameRepr::parse(&f), Ok((nak, &[][..])));
    }

    #[test]
    fn parse_refusals() {
        let good = headers(opcode::UC_SEND_LAST)
            .build(&[1, 2, 3])
            .expect("build");
        let refix = |f: &mut Vec<u8>| {
            let n = f.len();
            let mut ip = ipv4::Packet::new_unchecked(&mut f[IP_OFFSET..]);
            ip.fill_checksum();
            icrc::fill(&mut f[IP_OFFSET..n]).expect("icrc");
        };
        type Mutation = fn(&mut Vec<u8>);
        let cases: Vec<(Mutation, Error)> = vec![
            (
                |f| f[12] = 0x86,
                Error::Unsupported("ethertype (only IPv4)"),
            ),
            (|f| f[23] = 6, Error::Unsupported("IP protocol (only UDP)")),
            (
                |f| f[37] = 0xb8,
                Error::Unsupported("UDP port (not RoCEv2)"),
            ),
            (
                |f| f[39] -= 4,
                Error::Malformed("UDP length disagrees with the IPv4 length"),
            ),
            (|f| f[43] = 1, Error::Malformed("BTH transport version")),
            (
                |f| f[42] = 0x64,
                Error::Unsupported("transport (only RC and UC)"),
            ),
            (
                |f| f[42] = opcode::UC_SEND_MIDDLE,
                Error::Malformed("pad in a first or middle packet"),
            ),
        ];
        for (mutate, want) in cases {
            let mut f = good.clone();
            mutate(&mut f);
            refix(&mut f);
            assert_eq!(FrameRepr::parse(&f).map(|_| ()), Err(want));
        }
        // a payload and pad that are not whole words: drop the pad byte, fix the lengths
        let mut odd = good.clone();
        odd.remove(57);
        odd[17] -= 1; // IPv4 total length
        odd[39] -= 1; // UDP length
        odd[43] &= !0x30; // pad count 0
        refix(&mut odd);
        assert_eq!(
            FrameRepr::parse(&odd),
            Err(Error::Malformed(
                "RoCEv2 transport length not a multiple of 4"
            ))
        );
        // a pad longer than what follows the headers
        let mut empty = headers(opcode::UC_SEND_LAST).build(&[]).expect("build");
        empty[43] |= 0x30;
        refix(&mut empty);
        assert_eq!(
            FrameRepr::parse(&empty),
            Err(Error::Truncated {
                what: "payload pad",
                need: 15,
                have: 12
            })
        );
        let mut f = good.clone();
        f[60] ^= 1;
        assert_eq!(FrameRepr::parse(&f), Err(Error::Checksum("ICRC")));
        assert!(FrameRepr::parse_with(&f, IcrcCheck::Ignore).is_ok());
        // Ethernet padding after the IP packet is ignored
        let mut padded = good.clone();
        padded.extend_from_slice(&[0; 8]);
        assert_eq!(FrameRepr::parse(&padded), FrameRepr::parse(&good));
    }
}
