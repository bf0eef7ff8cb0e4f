//! The suite's software RoCEv2 stack as a [`HostTransport`]: [`SoftQp`] is one queue pair, RC
//! or UC ([`QpType`]), sans-IO (frames in, frames out, a retransmission timer), built on
//! `inabench_ina::roce`'s sending and responding state machines (PSN sequencing, the message
//! window, go-back-N, coalesced ACKs, RNR NAKs; UC's in-order message check); [`SoftHost`] is a
//! host endpoint carrying the frames of its QPs to the switch it hangs off, on any fabric, and
//! driving a [`crate::ring::RingAllReduce`] over them.
//!
//! What it models, as the verbs QPs it stands beside do:
//! - RC: a message is one RDMA WRITE of the shape's `msg_len` packets of `mtu` bytes (WRITE
//!   FIRST/MIDDLE/LAST, ONLY for one packet; the last with immediate when given), its RETH
//!   carrying the peer's buffer address plus the offset and the peer's rkey, checked at the
//!   responder (a wrong rkey or an address outside the buffer writes nothing and is counted).
//!   A WRITE with immediate whose last packet finds no receive posted is answered with an RNR
//!   NAK (timer code `min_rnr_timer`); the requester waits that long and resends from the
//!   NAK'd PSN, `rnr_retry` times in a row at most (7: without limit), after which the WRITE
//!   completes with [`crate::STATUS_RNR_RETRY_EXC`] and the WRITEs after it with
//!   [`crate::STATUS_WR_FLUSH`] ([`SoftQp::set_rnr`]).
//! - UC ([`SoftQp::with_type`]): a WRITE of any length, UC WRITE FIRST/MIDDLE/LAST/ONLY (with
//!   immediate), no ACK and no retransmission; it completes at the sender when its last packet
//!   is sent. The responder takes a message's packets in PSN order; a gap drops the rest of the
//!   message silently and the next FIRST/ONLY begins the next one; a WRITE with immediate that
//!   finds no receive is dropped whole, silently (counted: [`SoftQp::no_receive_drops`]).
//! - Both: a message is written to the buffer when whole (staged until then: a NIC writes each
//!   packet as it lands, and verbs promise nothing of a buffer before the completion, so both
//!   conform); every frame's ICRC is generated and verified by `inabench-wire`; the peer's MAC
//!   is derived from its GID's IPv4 address ([`soft_mac`]: the fabric has no ARP).

use crate::ring::{RingAllReduce, RingError};
use crate::{
    Completion, CompletionKind, ConnInfo, ConnInfoError, HostTransport, QpType, RemoteAddr,
    STATUS_REMOTE_ACCESS, STATUS_RNR_RETRY_EXC, STATUS_WR_FLUSH, ipv4_gid,
};
use inabench_fabric::{Endpoint, Nanos, NodeId, Transmit};
use inabench_ina::roce::{
    Accept, Addr, RNR_RETRY_INFINITE, RcResponder, RcSender, UcAccept, UcResponder, write_opcode,
};
use inabench_wire::ib::{BthRepr, RethRepr, opcode};
use inabench_wire::roce::FrameRepr;
use std::collections::VecDeque;

/// The MAC the software stack gives the host of an IPv4 address (02:00:a.b.c.d).
pub fn soft_mac(ip: [u8; 4]) -> [u8; 6] {
    [2, 0, ip[0], ip[1], ip[2], ip[3]]
}

/// The messages of a queue pair: as the verbs binding's `QpPlan` (every message the same size).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Payload bytes per packet (the path MTU).
    pub mtu: u32,
    /// Packets per message.
    pub msg_len: u32,
    /// Messages in flight.
    pub window: u32,
    /// Messages each way over the QP's life (the buffer holds this many).
    pub messages: u32,
    /// Retransmission timeout.
    pub rto_ns: u64,
}

impl Shape {
    pub fn message_bytes(&self) -> u32 {
        self.msg_len * self.mtu
    }
}

/// Why the software QP refused a call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SoftError {
    #[error("the QP is not connected")]
    NotConnected,
    #[error("the QP is already connected")]
    AlreadyConnected,
    #[error("the peer's GID is not IPv4-mapped: the software stack runs RoCEv2 over IPv4")]
    NotIpv4,
    #[error("the peer's connection info: {0}")]
    Info(#[from] ConnInfoError),
    #[error(
        "a message of this QP is {expected} bytes at a multiple of its size (got {len} at {offset})"
    )]
    Message {
        offset: u64,
        len: u32,
        expected: u32,
    },
    #[error("{len} bytes at {offset} exceed the {region}-byte buffer")]
    Region {
        offset: u64,
        len: u32,
        region: usize,
    },
    #[error("the QP carries {0} messages; all were posted")]
    Exhausted(u32),
    #[error("bad shape: {0}")]
    Shape(String),
    #[error("bad QP attribute: {0}")]
    Attr(String),
    #[error(
        "the QP is in the error state (a WRITE's RNR retries ran out); it takes no more WRITEs"
    )]
    Failed,
}

/// The RNR timer code a software QP's RNR NAKs carry unless [`SoftQp::set_rnr`] says
/// otherwise: 12, 0.64 ms (IBA Table 45), what the verbs binding sets.
pub const DEFAULT_MIN_RNR_TIMER: u8 = 12;

/// A posted WRITE.
#[derive(Debug, Clone, Copy)]
struct Wr {
    wr_id: u64,
    offset: u64,
    len: u32,
    to: RemoteAddr,
    imm: Option<u32>,
}

/// One software queue pair: RC ([`SoftQp::new`]) or UC ([`SoftQp::with_type`]).
#[derive(Debug)]
pub struct SoftQp {
    local: Addr,
    psn0: u32,
    shape: Shape,
    base: u64,
    rkey: u32,
    buf: Vec<u8>,
    qp_type: QpType,
    remote: Option<ConnInfo>,
    peer: Option<Addr>,
    tx: Option<RcSender>,
    rx: Option<RcResponder>,
    uc_rx: Option<UcResponder>,
    /// UC: the PSN of the next packet sent.
    uc_psn: u32,
    /// UC: the next packet of the front WRITE of `posted[acked..]`.
    uc_pkt: u32,
    min_rnr_timer: u8,
    rnr_retry: u8,
    /// Posted WRITEs in order.
    posted: Vec<Wr>,
    /// WRITEs completed (RC: acknowledged; UC: sent whole).
    acked: usize,
    recvs: VecDeque<u64>,
    completions: VecDeque<Completion>,
    /// The message being received: where its RETH said to write (None: refused).
    landing: Option<u64>,
    /// Its bytes so far: a message is written to the buffer when whole.
    stage: Vec<u8>,
    /// UC: its RETH's DMA length.
    stage_len: u32,
    out: VecDeque<Vec<u8>>,
    /// The requester stopped: its RNR retries ran out (verbs: the QP is in the error state).
    failed: bool,
    /// Frames refused: unparsable (ICRC included), for another QP, a bad RETH, a wrong opcode.
    pub malformed: u64,
    pub foreign: u64,
    pub access_errors: u64,
    /// UC: WRITEs with immediate dropped whole because no receive was posted (RC answers an
    /// RNR NAK instead).
    pub no_receive_drops: u64,
}

impl SoftQp {
    /// An RC QP with number `qpn` at `ip` whose first PSN is `psn0`, its buffer
    /// (`shape.messages` messages) registered at address `base` with `rkey`.
    pub fn new(
        ip: [u8; 4],
        qpn: u32,
        psn0: u32,
        shape: Shape,
        base: u64,
        rkey: u32,
    ) -> Result<SoftQp, SoftError> {
        SoftQp::with_type(ip, qpn, psn0, shape, base, rkey, QpType::Rc)
    }

    /// As [`SoftQp::new`], RC or UC. A UC QP's WRITEs are any length of whole bytes up to its
    /// buffer (`shape.mtu` bytes a packet, the last shorter), sent at once (no window, no
    /// ACK, no retransmission: `shape.msg_len`, `window` and `rto_ns` are RC's), each complete
    /// when its last packet is sent; `shape.messages` x `msg_len` x `mtu` sizes its buffer.
    pub fn with_type(
        ip: [u8; 4],
        qpn: u32,
        psn0: u32,
        shape: Shape,
        base: u64,
        rkey: u32,
        qp_type: QpType,
    ) -> Result<SoftQp, SoftError> {
        if shape.mtu == 0 || shape.msg_len == 0 || shape.window == 0 {
            return Err(SoftError::Shape(format!(
                "MTU, message length and window must be positive ({shape:?})"
            )));
        }
        let bytes = u64::from(shape.message_bytes()) * u64::from(shape.messages);
        let packets = u64::from(shape.msg_len) * u64::from(shape.messages);
        if bytes > 1 << 32 || packets > u64::from(crate::MASK_24) {
            return Err(SoftError::Shape(format!(
                "{bytes} bytes in {packets} packets: more than the stack's buffer or PSN space"
            )));
        }
        let local = Addr {
            mac: soft_mac(ip),
            ip,
            qpn,
        };
        let info = ConnInfo {
            qpn,
            psn: psn0,
            gid: ipv4_gid(ip),
            addr: base,
            rkey,
        };
        info.validate()?;
        Ok(SoftQp {
            local,
            psn0,
            shape,
            base,
            rkey,
            buf: vec![0; bytes as usize],
            qp_type,
            remote: None,
            peer: None,
            tx: None,
            rx: None,
            uc_rx: None,
            uc_psn: psn0,
            uc_pkt: 0,
            min_rnr_timer: DEFAULT_MIN_RNR_TIMER,
            rnr_retry: RNR_RETRY_INFINITE,
            posted: Vec::new(),
            acked: 0,
            recvs: VecDeque::new(),
            completions: VecDeque::new(),
            landing: None,
            stage: Vec::new(),
            stage_len: 0,
            out: VecDeque::new(),
            failed: false,
            malformed: 0,
            foreign: 0,
            access_errors: 0,
            no_receive_drops: 0,
        })
    }

    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }

    /// RC's Receiver Not Ready attributes, as `ibv_modify_qp` sets them: the timer code this
    /// QP's RNR NAKs carry (`min_rnr_timer`, 0..=31, IBA Table 45; default 12, 0.64 ms, the
    /// verbs binding's) and how many RNR NAKs in a row its WRITEs are resent after
    /// (`rnr_retry`, 0..=7, 7 without limit; default 7). Meaningless for UC (no responses).
    pub fn set_rnr(&mut self, min_rnr_timer: u8, rnr_retry: u8) -> Result<(), SoftError> {
        if min_rnr_timer > 31 || rnr_retry > RNR_RETRY_INFINITE {
            return Err(SoftError::Attr(format!(
                "min_rnr_timer {min_rnr_timer} (0..=31) or rnr_retry {rnr_retry} (0..=7) out of range"
            )));
        }
        self.min_rnr_timer = min_rnr_timer;
        self.rnr_retry = rnr_retry;
        if let Some(t) = self.tx.as_mut() {
            t.set_rnr_retry(rnr_retry);
        }
        if let Some(r) = self.rx.as_mut() {
            r.min_rnr_timer = min_rnr_timer;
        }
        Ok(())
    }

    /// The stack's retransmissions so far (go-back-N and RNR resends).
    pub fn retransmissions(&self) -> u64 {
        self.tx.as_ref().map_or(0, |t| t.retransmissions)
    }

    /// RNR NAKs this QP sent (as a responder with no receive posted).
    pub fn rnr_naks_sent(&self) -> u64 {
        self.rx.as_ref().map_or(0, |r| r.rnr_naks)
    }

    /// RNR NAKs this QP received (as a requester).
    pub fn rnr_naks_received(&self) -> u64 {
        self.tx.as_ref().map_or(0, |t| t.rnr_naks)
    }

    /// UC: packets dropped (out of PSN order, or in a message already dropped).
    pub fn uc_dropped(&self) -> u64 {
        self.uc_rx.as_ref().map_or(0, |r| r.dropped)
    }

    /// A frame for this QP arrived (already parsed, its ICRC verified).
    pub fn handle_frame(&mut self, now: Nanos, fr: &FrameRepr, payload: &[u8]) {
        if fr.bth.dest_qp != self.local.qpn || self.remote.is_none() {
            self.foreign += 1;
            return;
        }
        match self.qp_type {
            QpType::Rc => self.handle_rc(now, fr, payload),
            QpType::Uc => self.handle_uc(fr, payload),
        }
    }

    fn handle_rc(&mut self, now: Nanos, fr: &FrameRepr, payload: &[u8]) {
        let (Some(tx), Some(rx)) = (self.tx.as_mut(), self.rx.as_mut()) else {
            self.foreign += 1;
            return;
        };
        if let Some(aeth) = fr.aeth {
            tx.on_aeth(now, fr.bth.psn, &aeth);
            let msg_len = self.shape.msg_len as usize;
            while self.acked < self.posted.len()
                && tx.acked() as usize >= (self.acked + 1) * msg_len
            {
                let w = self.posted[self.acked];
                self.completions.push_back(Completion {
                    wr_id: w.wr_id,
                    kind: CompletionKind::Write,
                    error: None,
                    byte_len: w.len,
                    imm: None,
                });
                self.acked += 1;
            }
            if let Some(i) = tx.rnr_failed()
                && !self.failed
            {
                // the WRITE the RNR NAK refused fails; the QP is in error: the rest flush
                self.failed = true;
                let m = i as usize / msg_len;
                for (j, w) in self.posted.iter().enumerate().skip(self.acked) {
                    self.completions.push_back(Completion {
                        wr_id: w.wr_id,
                        kind: CompletionKind::Write,
                        error: Some(if j == m {
                            STATUS_RNR_RETRY_EXC
                        } else {
                            STATUS_WR_FLUSH
                        }),
                        byte_len: w.len,
                        imm: None,
                    });
                }
                self.acked = self.posted.len();
            }
            return;
        }
        let op = fr.bth.opcode;
        if op & opcode::TRANSPORT_MASK != opcode::RC
            || !(opcode::WRITE_FIRST..=opcode::WRITE_ONLY_IMM)
                .contains(&(op & opcode::OPERATION_MASK))
        {
            self.malformed += 1;
            return;
        }
        if fr.immdt.is_some() && self.recvs.is_empty() && rx.expects(fr.bth.psn) {
            // the packet that needs a receive finds none: Receiver Not Ready; nothing of the
            // message is written, its first packets wait staged for the resend of this one
            rx.rnr_nak();
        } else if let Accept::Deliver(i) = rx.on_data(fr.bth.psn, fr.bth.ack_req) {
            let mb = self.shape.message_bytes() as usize;
            let mtu = self.shape.mtu as usize;
            let k = i % self.shape.msg_len;
            let last = k == self.shape.msg_len - 1;
            let want = write_opcode(opcode::RC, k == 0, last, fr.immdt.is_some());
            if op != want || payload.len() != mtu {
                self.malformed += 1;
                self.landing = None;
            } else if k == 0 {
                self.landing = fr
                    .reth
                    .and_then(|r| target(self.base, self.rkey, &self.shape, self.buf.len(), &r));
                if self.landing.is_none() {
                    self.access_errors += 1;
                }
                self.stage.resize(mb, 0);
            }
            if self.landing.is_some() {
                let from = k as usize * mtu;
                self.stage[from..from + mtu].copy_from_slice(payload);
            }
            if last {
                if let Some(at) = self.landing {
                    self.buf[at as usize..at as usize + mb].copy_from_slice(&self.stage[..mb]);
                }
                if let Some(imm) = fr.immdt
                    && let Some(wr_id) = self.recvs.pop_front()
                {
                    self.completions.push_back(Completion {
                        wr_id,
                        kind: CompletionKind::RecvWriteImm,
                        error: self.landing.is_none().then_some(STATUS_REMOTE_ACCESS),
                        byte_len: mb as u32,
                        imm: Some(imm),
                    });
                }
                self.landing = None;
            }
        }
        for a in rx.take_acks() {
            if let Ok(b) = rx.ack_frame(&a) {
                self.out.push_back(b);
            }
        }
    }

    fn handle_uc(&mut self, fr: &FrameRepr, payload: &[u8]) {
        let Some(rx) = self.uc_rx.as_mut() else {
            self.foreign += 1;
            return;
        };
        let op = fr.bth.opcode;
        if fr.aeth.is_some()
            || op & opcode::TRANSPORT_MASK != opcode::UC
            || !(opcode::WRITE_FIRST..=opcode::WRITE_ONLY_IMM)
                .contains(&(op & opcode::OPERATION_MASK))
        {
            // UC has no acknowledgements, and this stack no UC SEND
            self.malformed += 1;
            return;
        }
        let UcAccept::Deliver(k) = rx.on_packet(fr.bth.psn, op) else {
            return;
        };
        if k == 0 {
            let t = fr
                .reth
                .and_then(|r| uc_target(self.base, self.rkey, self.buf.len(), &r));
            let Some((at, len)) = t else {
                // UC: a message that may not land is dropped, nothing answers
                self.access_errors += 1;
                self.landing = None;
                rx.drop_message();
                return;
            };
            self.landing = Some(at);
            self.stage_len = len;
            self.stage.clear();
        }
        let Some(at) = self.landing else {
            rx.drop_message();
            return;
        };
        let last = opcode::ends_message(op);
        let mtu = self.shape.mtu as usize;
        let total = self.stage.len() + payload.len();
        let len = self.stage_len as usize;
        if payload.len() > mtu
            || (!last && payload.len() != mtu)
            || total > len
            || (last && total != len)
        {
            self.malformed += 1;
            self.landing = None;
            rx.drop_message();
            return;
        }
        self.stage.extend_from_slice(payload);
        if !last {
            return;
        }
        self.landing = None;
        let wr_id = match fr.immdt {
            Some(_) => match self.recvs.pop_front() {
                Some(w) => Some(w),
                None => {
                    // UC: no receive for the immediate: the message is dropped whole, silently
                    self.no_receive_drops += 1;
                    return;
                }
            },
            None => None,
        };
        self.buf[at as usize..at as usize + len].copy_from_slice(&self.stage);
        if let Some(wr_id) = wr_id {
            self.completions.push_back(Completion {
                wr_id,
                kind: CompletionKind::RecvWriteImm,
                error: None,
                byte_len: len as u32,
                imm: fr.immdt,
            });
        }
    }

    /// The headers of a WRITE's packet to the peer.
    fn repr(&self, peer: &Addr, op: u8, psn: u32, ack_req: bool) -> FrameRepr {
        FrameRepr {
            src_mac: self.local.mac,
            dst_mac: peer.mac,
            src_ip: self.local.ip,
            dst_ip: peer.ip,
            src_port: 0xc000 | (self.local.qpn as u16 & 0x3fff),
            tos: 0,
            ttl: 64,
            bth: BthRepr {
                opcode: op,
                solicited: false,
                migreq: true,
                pad_count: 0,
                pkey: 0xffff,
                fecn: false,
                becn: false,
                dest_qp: peer.qpn,
                ack_req,
                psn,
            },
            reth: None,
            aeth: None,
            immdt: None,
        }
    }

    /// The next frame to send: an acknowledgement, else the next packet the window allows
    /// (RC), or the next packet of the oldest WRITE not yet sent whole (UC).
    pub fn poll_transmit(&mut self, now: Nanos) -> Option<Vec<u8>> {
        if let Some(f) = self.out.pop_front() {
            return Some(f);
        }
        let peer = self.peer?;
        if self.qp_type == QpType::Uc {
            return self.uc_transmit(&peer);
        }
        let tx = self.tx.as_mut()?;
        let msg_len = self.shape.msg_len;
        let i = tx.next_to_send_until(now, self.posted.len() as u32 * msg_len)?;
        let psn = tx.psn_of(i);
        let w = self.posted[(i / msg_len) as usize];
        let k = i % msg_len;
        let (first, last) = (k == 0, k == msg_len - 1);
        let mtu = u64::from(self.shape.mtu);
        let from = (w.offset + u64::from(k) * mtu) as usize;
        let op = write_opcode(opcode::RC, first, last, w.imm.is_some());
        let mut fr = self.repr(&peer, op, psn, last);
        fr.reth = first.then_some(RethRepr {
            va: w.to.addr,
            rkey: w.to.rkey,
            dma_len: self.shape.message_bytes(),
        });
        fr.immdt = if last { w.imm } else { None };
        fr.build(&self.buf[from..from + mtu as usize]).ok()
    }

    fn uc_transmit(&mut self, peer: &Addr) -> Option<Vec<u8>> {
        let w = *self.posted.get(self.acked)?;
        let mtu = self.shape.mtu;
        let packets = w.len.div_ceil(mtu);
        let k = self.uc_pkt;
        let (first, last) = (k == 0, k + 1 == packets);
        let from = w.offset as usize + (k * mtu) as usize;
        let n = (w.len - k * mtu).min(mtu) as usize;
        let op = write_opcode(opcode::UC, first, last, w.imm.is_some());
        let mut fr = self.repr(peer, op, self.uc_psn, false);
        fr.reth = first.then_some(RethRepr {
            va: w.to.addr,
            rkey: w.to.rkey,
            dma_len: w.len,
        });
        fr.immdt = if last { w.imm } else { None };
        let frame = fr.build(&self.buf[from..from + n]).ok();
        self.uc_psn = (self.uc_psn + 1) & crate::MASK_24;
        if last {
            // UC: a WRITE is complete once its last packet is on its way
            self.uc_pkt = 0;
            self.acked += 1;
            self.completions.push_back(Completion {
                wr_id: w.wr_id,
                kind: CompletionKind::Write,
                error: None,
                byte_len: w.len,
                imm: None,
            });
        } else {
            self.uc_pkt += 1;
        }
        frame
    }

    pub fn poll_timeout(&self) -> Option<Nanos> {
        self.tx.as_ref().and_then(|t| t.poll_timeout())
    }

    pub fn handle_timeout(&mut self, now: Nanos) {
        if let Some(t) = self.tx.as_mut() {
            t.on_timeout(now);
        }
    }
}

/// Where a WRITE with this RETH lands in a buffer of `len` bytes registered at `base` with
/// `rkey`, if its rkey, length and range are the buffer's.
fn target(base: u64, rkey: u32, shape: &Shape, len: usize, r: &RethRepr) -> Option<u64> {
    let off = r.va.checked_sub(base)?;
    (r.rkey == rkey
        && r.dma_len == shape.message_bytes()
        && off.checked_add(u64::from(r.dma_len))? <= len as u64)
        .then_some(off)
}

/// UC: where a WRITE of any length lands, and its length, if its rkey and range are the
/// buffer's.
fn uc_target(base: u64, rkey: u32, len: usize, r: &RethRepr) -> Option<(u64, u32)> {
    let off = r.va.checked_sub(base)?;
    (r.rkey == rkey && off.checked_add(u64::from(r.dma_len))? <= len as u64)
        .then_some((off, r.dma_len))
}

impl HostTransport for SoftQp {
    type Error = SoftError;

    fn info(&self) -> ConnInfo {
        ConnInfo {
            qpn: self.local.qpn,
            psn: self.psn0,
            gid: ipv4_gid(self.local.ip),
            addr: self.base,
            rkey: self.rkey,
        }
    }

    fn connect(&mut self, remote: &ConnInfo) -> Result<(), SoftError> {
        if self.remote.is_some() {
            return Err(SoftError::AlreadyConnected);
        }
        remote.validate()?;
        let ip = remote.ipv4().ok_or(SoftError::NotIpv4)?;
        let peer = Addr {
            mac: soft_mac(ip),
            ip,
            qpn: remote.qpn,
        };
        match self.qp_type {
            QpType::Rc => {
                let packets = self.shape.msg_len * self.shape.messages;
                let mut tx = RcSender::new(
                    self.local,
                    peer,
                    self.psn0,
                    packets,
                    self.shape.msg_len,
                    self.shape.window,
                    self.shape.rto_ns,
                );
                tx.set_rnr_retry(self.rnr_retry);
                let mut rx =
                    RcResponder::new(self.local, peer, remote.psn, packets, self.shape.msg_len);
                rx.min_rnr_timer = self.min_rnr_timer;
                self.tx = Some(tx);
                self.rx = Some(rx);
            }
            QpType::Uc => self.uc_rx = Some(UcResponder::new(remote.psn)),
        }
        self.peer = Some(peer);
        self.remote = Some(*remote);
        Ok(())
    }

    fn buf(&self) -> &[u8] {
        &self.buf
    }

    fn buf_mut(&mut self) -> &mut [u8] {
        &mut self.buf
    }

    fn post_write(
        &mut self,
        wr_id: u64,
        offset: u64,
        len: u32,
        imm: Option<u32>,
    ) -> Result<(), SoftError> {
        let remote = self.remote.ok_or(SoftError::NotConnected)?;
        let to = RemoteAddr {
            addr: remote.addr.wrapping_add(offset),
            rkey: remote.rkey,
        };
        self.post_write_to(wr_id, offset, len, to, imm)
    }

    fn post_write_to(
        &mut self,
        wr_id: u64,
        offset: u64,
        len: u32,
        to: RemoteAddr,
        imm: Option<u32>,
    ) -> Result<(), SoftError> {
        if self.remote.is_none() {
            return Err(SoftError::NotConnected);
        }
        if self.failed {
            return Err(SoftError::Failed);
        }
        let expected = self.shape.message_bytes();
        let rc = self.qp_type == QpType::Rc;
        if (rc && (len != expected || !offset.is_multiple_of(u64::from(expected)))) || len == 0 {
            return Err(SoftError::Message {
                offset,
                len,
                expected,
            });
        }
        if offset + u64::from(len) > self.buf.len() as u64 {
            return Err(SoftError::Region {
                offset,
                len,
                region: self.buf.len(),
            });
        }
        if rc && self.posted.len() as u32 >= self.shape.messages {
            return Err(SoftError::Exhausted(self.shape.messages));
        }
        self.posted.push(Wr {
            wr_id,
            offset,
            len,
            to,
            imm,
        });
        Ok(())
    }

    fn post_recv(&mut self, wr_id: u64) -> Result<(), SoftError> {
        self.recvs.push_back(wr_id);
        Ok(())
    }

    fn poll(&mut self, max: usize) -> Result<Vec<Completion>, SoftError> {
        let n = max.min(self.completions.len());
        Ok(self.completions.drain(..n).collect())
    }
}

/// A host of a software ring: its sending QP (to the successor) and receiving QP (from the
/// predecessor), the ring all-reduce over them, and the switch it hangs off.
pub struct SoftHost {
    id: NodeId,
    switch: NodeId,
    pub send: SoftQp,
    pub recv: SoftQp,
    pub ring: RingAllReduce,
    error: Option<String>,
}

impl SoftHost {
    /// Host `id` with its two QPs (not yet connected: exchange their [`HostTransport::info`]
    /// and connect them, then [`RingAllReduce::post_receives`] on `recv`, before the run).
    pub fn new(
        id: NodeId,
        switch: NodeId,
        send: SoftQp,
        recv: SoftQp,
        ring: RingAllReduce,
    ) -> SoftHost {
        SoftHost {
            id,
            switch,
            send,
            recv,
            ring,
            error: None,
        }
    }

    /// The first thing that went wrong (a transport call refused, a completion not the one the
    /// ring expected), if anything did.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    fn progress(&mut self) {
        if self.error.is_some() {
            return;
        }
        if let Err(e) = self.ring.progress(&mut self.send, &mut self.recv) {
            self.error = Some(match e {
                RingError::Transport(e) => e.to_string(),
                other => other.to_string(),
            });
        }
    }
}

impl Endpoint for SoftHost {
    fn id(&self) -> NodeId {
        self.id
    }

    fn handle_packet(&mut self, now: Nanos, _from: NodeId, frame: &[u8]) {
        let Ok((fr, payload)) = FrameRepr::parse(frame) else {
            self.send.malformed += 1;
            return;
        };
        if fr.bth.dest_qp == self.recv.local.qpn {
            self.recv.handle_frame(now, &fr, payload);
        } else {
            self.send.handle_frame(now, &fr, payload);
        }
        self.progress();
    }

    fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        self.progress();
        let bytes = self
            .recv
            .poll_transmit(now)
            .or_else(|| self.send.poll_transmit(now))?;
        Some(Transmit {
            to: self.switch,
            bytes,
        })
    }

    fn poll_timeout(&self) -> Option<Nanos> {
        match (self.send.poll_timeout(), self.recv.poll_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn handle_timeout(&mut self, now: Nanos) {
        self.send.handle_timeout(now);
        self.recv.handle_timeout(now);
    }

    fn is_done(&self) -> bool {
        self.ring.done()
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            (
                "retransmissions",
                self.send.retransmissions() + self.recv.retransmissions(),
            ),
            ("malformed", self.send.malformed + self.recv.malformed),
            (
                "access_errors",
                self.send.access_errors + self.recv.access_errors,
            ),
            (
                "rnr_naks_sent",
                self.send.rnr_naks_sent() + self.recv.rnr_naks_sent(),
            ),
        ]
    }
}

/// The nodes of a software ring of `values.len()` hosts and one forwarding switch (node `n`,
/// routing by IPv4 destination; host `i` at 10.0.9.(i+1)), every QP connected to its neighbour's
/// with the info each side's [`HostTransport::info`] gave (what the agents' control channel
/// carries between hosts), the receives posted first. Each worker's values are `n` chunks of
/// `msg_len x mtu / 4` int32 values.
pub fn ring_nodes(
    values: Vec<Vec<i32>>,
    mtu: u32,
    rto_ns: u64,
) -> Result<Vec<inabench_fabric::Node<SoftHost, inabench_fabric::Forwarder>>, RingSetupError> {
    let n = values.len();
    let switch = n as NodeId;
    let mut hosts = Vec::with_capacity(n);
    for (i, v) in values.into_iter().enumerate() {
        let ring = RingAllReduce::new(n, i, v).map_err(|e| RingSetupError::Ring(e.to_string()))?;
        let cb = ring.chunk_bytes();
        if mtu == 0 || !cb.is_multiple_of(mtu) {
            return Err(RingSetupError::Ring(format!(
                "a chunk of {cb} bytes is not whole packets of {mtu}"
            )));
        }
        let shape = Shape {
            mtu,
            msg_len: cb / mtu,
            window: ring.steps(),
            messages: ring.steps(),
            rto_ns,
        };
        let ip = [10, 0, 9, i as u8 + 1];
        let k = i as u32;
        // first PSNs near the wrap of the 24-bit space, as the rig's ring_worker starts them
        let psn = (crate::MASK_24 - 20 + k * 0x0010_0001) & crate::MASK_24;
        let send = SoftQp::new(
            ip,
            0x100 + 2 * k,
            psn,
            shape,
            0x10_0000 * u64::from(k + 1),
            0x1000 + 2 * k,
        )?;
        let recv = SoftQp::new(
            ip,
            0x101 + 2 * k,
            psn ^ 0x5555,
            shape,
            0x20_0000 * u64::from(k + 1),
            0x1001 + 2 * k,
        )?;
        hosts.push(SoftHost::new(i as NodeId, switch, send, recv, ring));
    }
    // the exchange: each sending QP learns its successor's receiving QP and back
    let infos: Vec<(ConnInfo, ConnInfo)> = hosts
        .iter()
        .map(|h| (h.send.info(), h.recv.info()))
        .collect();
    for (i, h) in hosts.iter_mut().enumerate() {
        let (succ, pred) = ((i + 1) % n, (i + n - 1) % n);
        h.ring.post_receives(&mut h.recv)?;
        h.recv.connect(&infos[pred].0)?;
        h.send.connect(&infos[succ].1)?;
    }
    let mut nodes: Vec<_> = hosts
        .into_iter()
        .map(inabench_fabric::Node::Worker)
        .collect();
    nodes.push(inabench_fabric::Node::Switch(
        inabench_fabric::Forwarder::new(switch, n as u32 + 1, inabench_fabric::Route::Ipv4Dst),
    ));
    Ok(nodes)
}

/// Why [`ring_nodes`] could not build the ring.
#[derive(Debug, thiserror::Error)]
pub enum RingSetupError {
    #[error("{0}")]
    Ring(String),
    #[error(transparent)]
    Qp(#[from] SoftError),
}
