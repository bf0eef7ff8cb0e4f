//! The suite's software RoCEv2 RC stack as a [`HostTransport`]: [`SoftQp`] is one queue pair,
//! sans-IO (frames in, frames out, a retransmission timer), built on `inabench_ina::roce`'s
//! sending and responding QPs (PSN sequencing, the message window, go-back-N, coalesced ACKs);
//! [`SoftHost`] is a host endpoint carrying the frames of its QPs to the switch it hangs off,
//! on any fabric, and driving a [`crate::ring::RingAllReduce`] over them.
//!
//! What it models, as the verbs QPs it stands beside do: a message is one RDMA WRITE of the
//! shape's `msg_len` packets of `mtu` bytes (WRITE FIRST/MIDDLE/LAST, ONLY for one packet; the
//! last with immediate when given), its RETH carrying the peer's buffer address plus the offset
//! and the peer's rkey, checked at the responder (a wrong rkey or an address outside the buffer
//! writes nothing and is counted); every frame's ICRC is generated and verified by
//! `inabench-wire`. RC only (the software stack has no UC responder); the peer's MAC is derived
//! from its GID's IPv4 address ([`soft_mac`]: the fabric has no ARP).

use crate::ring::{RingAllReduce, RingError};
use crate::{
    Completion, CompletionKind, ConnInfo, ConnInfoError, HostTransport, RemoteAddr,
    STATUS_NO_RECEIVE, STATUS_REMOTE_ACCESS, ipv4_gid,
};
use inabench_fabric::{Endpoint, Nanos, NodeId, Transmit};
use inabench_ina::roce::{Accept, Addr, RcResponder, RcSender};
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
}

/// One software RC queue pair.
#[derive(Debug)]
pub struct SoftQp {
    local: Addr,
    psn0: u32,
    shape: Shape,
    base: u64,
    rkey: u32,
    buf: Vec<u8>,
    remote: Option<ConnInfo>,
    tx: Option<RcSender>,
    rx: Option<RcResponder>,
    /// Posted WRITEs in order: (wr_id, offset, where at the peer, immediate).
    posted: Vec<(u64, u64, RemoteAddr, Option<u32>)>,
    /// WRITEs acknowledged (completed).
    acked: usize,
    recvs: VecDeque<u64>,
    completions: VecDeque<Completion>,
    /// The message being received: where its RETH said to write (None: refused).
    landing: Option<u64>,
    out: VecDeque<Vec<u8>>,
    /// Frames refused: unparsable (ICRC included), for another QP, a bad RETH, a wrong opcode.
    pub malformed: u64,
    pub foreign: u64,
    pub access_errors: u64,
}

impl SoftQp {
    /// A QP with number `qpn` at `ip` whose first PSN is `psn0`, its buffer (`shape.messages`
    /// messages) registered at address `base` with `rkey`.
    pub fn new(
        ip: [u8; 4],
        qpn: u32,
        psn0: u32,
        shape: Shape,
        base: u64,
        rkey: u32,
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
            remote: None,
            tx: None,
            rx: None,
            posted: Vec::new(),
            acked: 0,
            recvs: VecDeque::new(),
            completions: VecDeque::new(),
            landing: None,
            out: VecDeque::new(),
            malformed: 0,
            foreign: 0,
            access_errors: 0,
        })
    }

    /// The stack's retransmissions so far (go-back-N resends).
    pub fn retransmissions(&self) -> u64 {
        self.tx.as_ref().map_or(0, |t| t.retransmissions)
    }

    /// A frame for this QP arrived (already parsed, its ICRC verified).
    pub fn handle_frame(&mut self, now: Nanos, fr: &FrameRepr, payload: &[u8]) {
        if fr.bth.dest_qp != self.local.qpn {
            self.foreign += 1;
            return;
        }
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
                let (wr_id, _, _, _) = self.posted[self.acked];
                self.completions.push_back(Completion {
                    wr_id,
                    kind: CompletionKind::Write,
                    error: None,
                    byte_len: self.shape.message_bytes(),
                    imm: None,
                });
                self.acked += 1;
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
        if let Accept::Deliver(i) = rx.on_data(fr.bth.psn, fr.bth.ack_req) {
            let k = i % self.shape.msg_len;
            let last = k == self.shape.msg_len - 1;
            let want = expected_opcode(k == 0, last, fr.immdt.is_some()) & opcode::OPERATION_MASK;
            if op & opcode::OPERATION_MASK != want || payload.len() != self.shape.mtu as usize {
                self.malformed += 1;
                self.landing = None;
            } else if k == 0 {
                self.landing = fr
                    .reth
                    .and_then(|r| target(self.base, self.rkey, &self.shape, self.buf.len(), &r));
                if self.landing.is_none() {
                    self.access_errors += 1;
                }
            }
            if let Some(at) = self.landing {
                let from = (at + u64::from(k) * u64::from(self.shape.mtu)) as usize;
                self.buf[from..from + payload.len()].copy_from_slice(payload);
            }
            if last {
                if let Some(imm) = fr.immdt {
                    let (wr_id, error) = match self.recvs.pop_front() {
                        Some(w) => (w, self.landing.is_none().then_some(STATUS_REMOTE_ACCESS)),
                        None => (0, Some(STATUS_NO_RECEIVE)),
                    };
                    self.completions.push_back(Completion {
                        wr_id,
                        kind: CompletionKind::RecvWriteImm,
                        error,
                        byte_len: self.shape.message_bytes(),
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

    /// The next frame to send: an acknowledgement, else the next packet the window allows.
    pub fn poll_transmit(&mut self, now: Nanos) -> Option<Vec<u8>> {
        if let Some(f) = self.out.pop_front() {
            return Some(f);
        }
        let remote = self.remote?;
        let tx = self.tx.as_mut()?;
        let msg_len = self.shape.msg_len;
        let i = tx.next_to_send_until(now, self.posted.len() as u32 * msg_len)?;
        let (_, offset, to, imm) = self.posted[(i / msg_len) as usize];
        let k = i % msg_len;
        let (first, last) = (k == 0, k == msg_len - 1);
        let mtu = u64::from(self.shape.mtu);
        let from = (offset + u64::from(k) * mtu) as usize;
        let fr = FrameRepr {
            src_mac: self.local.mac,
            dst_mac: tx.remote.mac,
            src_ip: self.local.ip,
            dst_ip: tx.remote.ip,
            src_port: 0xc000 | (self.local.qpn as u16 & 0x3fff),
            tos: 0,
            ttl: 64,
            bth: BthRepr {
                opcode: opcode::RC | expected_opcode(first, last, imm.is_some()),
                solicited: false,
                migreq: true,
                pad_count: 0,
                pkey: 0xffff,
                fecn: false,
                becn: false,
                dest_qp: remote.qpn,
                ack_req: last,
                psn: tx.psn_of(i),
            },
            reth: first.then_some(RethRepr {
                va: to.addr,
                rkey: to.rkey,
                dma_len: self.shape.message_bytes(),
            }),
            aeth: None,
            immdt: if last { imm } else { None },
        };
        fr.build(&self.buf[from..from + mtu as usize]).ok()
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

/// The operation bits of packet `k` of a WRITE: FIRST/MIDDLE/LAST, ONLY for one packet.
fn expected_opcode(first: bool, last: bool, imm: bool) -> u8 {
    match (first, last, imm) {
        (true, true, false) => opcode::WRITE_ONLY,
        (true, true, true) => opcode::WRITE_ONLY_IMM,
        (true, false, _) => opcode::WRITE_FIRST,
        (false, true, false) => opcode::WRITE_LAST,
        (false, true, true) => opcode::WRITE_LAST_IMM,
        (false, false, _) => opcode::WRITE_MIDDLE,
    }
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
        let packets = self.shape.msg_len * self.shape.messages;
        self.tx = Some(RcSender::new(
            self.local,
            peer,
            self.psn0,
            packets,
            self.shape.msg_len,
            self.shape.window,
            self.shape.rto_ns,
        ));
        self.rx = Some(RcResponder::new(
            self.local,
            peer,
            remote.psn,
            packets,
            self.shape.msg_len,
        ));
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
        if self.tx.is_none() {
            return Err(SoftError::NotConnected);
        }
        let expected = self.shape.message_bytes();
        if len != expected || !offset.is_multiple_of(u64::from(expected)) {
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
        if self.posted.len() as u32 >= self.shape.messages {
            return Err(SoftError::Exhausted(self.shape.messages));
        }
        self.posted.push((wr_id, offset, to, imm));
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
