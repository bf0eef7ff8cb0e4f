//! A software RoCEv2 RC transport, sans-IO: a sending QP (PSN sequencing, segmentation of RDMA
//! WRITEs at the path MTU into FIRST/MIDDLE/LAST packets, a message-level window, go-back-N from
//! a NAK'd PSN and on timeout, cumulative ACKs) and a responding QP (expected-PSN tracking, ACK
//! coalescing, one NAK per PSN gap, duplicates re-ACKed and never re-delivered). Frames are built
//! and checked with `inabench-wire` (ICRC generated and verified).
//!
//! The message-level window is NetReduce's flow-control module (Sec. 3.1): a message is MsgLen
//! packets, and at most N messages are unacknowledged.
//!
//! Receiver Not Ready (IBA Vol. 1 Sec. 9.7.5.2.8, the RNR NAK; Table 45, the RNR timer codes):
//! a responder whose consumer has no receive for a packet that needs one (a WRITE with
//! immediate's last or only packet) answers [`RcResponder::rnr_nak`] instead of
//! [`RcResponder::on_data`]: an AETH with the RNR syndrome and its `min_rnr_timer` code, for the
//! expected PSN, which does not advance. The sender ([`RcSender::on_aeth`]) takes it as an
//! acknowledgement of every packet before that PSN, waits the timer the code names and resends
//! from that PSN, at most `rnr_retry` times in a row (7: without limit, as verbs defines it);
//! one more RNR NAK after that and [`RcSender::rnr_failed`] names the packet whose work request
//! completes with `IBV_WC_RNR_RETRY_EXC_ERR`.
//!
//! Unreliable Connection ([`UcResponder`]; a UC requester is PSN sequencing alone, no ACKs, no
//! retransmission): a UC responder takes a message's packets in PSN order; a PSN gap, or a
//! middle or last packet with no message begun, drops the rest of that message silently, and
//! the next first or only packet (whatever its PSN) begins the next message (IBA Vol. 1
//! Sec. 9.8.3, UC's packet sequence checks, and Sec. 9.9.3's responder error classes: a UC
//! message in error is dropped with no response). rdma_rxe's responder does the same
//! (`check_psn` for `IB_QPT_UC` in drivers/infiniband/sw/rxe/rxe_resp.c: `drop_msg` until a
//! packet that starts a message).

use inabench_fabric::Nanos;
use inabench_wire::ib::{AethRepr, BthRepr, NakCode, RethRepr, Syndrome, opcode};
use inabench_wire::roce::{EmitCache, FrameRepr};

pub const PSN_MASK: u32 = 0x00ff_ffff;

/// Addressing of one side of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Addr {
    pub mac: [u8; 6],
    pub ip: [u8; 4],
    pub qpn: u32,
}

/// A frame from `local` to `remote` with a BTH of this opcode, PSN and AckReq.
fn frame_repr(local: &Addr, remote: &Addr, op: u8, psn: u32, ack_req: bool) -> FrameRepr {
    FrameRepr {
        src_mac: local.mac,
        dst_mac: remote.mac,
        src_ip: local.ip,
        dst_ip: remote.ip,
        // RoCEv2 uses the UDP source port for entropy: derive it from the local QP
        src_port: 0xc000 | (local.qpn as u16 & 0x3fff),
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
            dest_qp: remote.qpn,
            ack_req,
            psn,
        },
        reth: None,
        aeth: None,
        immdt: None,
    }
}

/// Distance from `a` to `b` in PSN space (b - a mod 2^24).
pub fn psn_diff(a: u32, b: u32) -> u32 {
    b.wrapping_sub(a) & PSN_MASK
}

/// The sending side of an RC connection carrying a stream of `packets` fixed-size packets grouped
/// in messages of `msg_len` packets.
#[derive(Debug)]
pub struct RcSender {
    pub local: Addr,
    pub remote: Addr,
    pub psn0: u32,
    pub msg_len: u32,
    pub window_msgs: u32,
    pub packets: u32,
    /// next packet index to send
    next: u32,
    /// oldest unacknowledged packet index
    una: u32,
    /// highest index ever sent + 1 (to count retransmissions)
    high: u32,
    pub rto_ns: u64,
    deadline: Option<Nanos>,
    pub retransmissions: u64,
    pub naks: u64,
    pub timeouts: u64,
    /// Where the current go-back-N pass started: a NAK for a packet already resent in this pass
    /// (between here and `next`) is stale and ignored, so one reordering does not cascade into a
    /// rewind per packet.
    rewind: Option<u32>,
    /// RNR NAKs in a row the sender answers with a resend (7: without limit).
    pub rnr_retry: u8,
    rnr_left: u8,
    /// An RNR NAK's wait: nothing is sent before this time.
    rnr_until: Option<Nanos>,
    /// RNR NAKs taken.
    pub rnr_naks: u64,
    /// The packet whose RNR NAK came with no retry left: the stream stopped there.
    rnr_failed: Option<u32>,
}

/// `rnr_retry` 7: resend after every RNR NAK, without limit (verbs' `ibv_qp_attr::rnr_retry`).
pub const RNR_RETRY_INFINITE: u8 = 7;

/// Nanoseconds of an RNR NAK's timer code (IBA Vol. 1 Table 45, "Encoding for RNR NAK Timer
/// Field": 0 is 655.36 ms, 1..31 run from 0.01 ms to 491.52 ms); the low five bits are read.
pub fn rnr_timer_ns(code: u8) -> u64 {
    const US: [u64; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560,
        3_840, 5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880,
        163_840, 245_760, 327_680, 491_520,
    ];
    US[usize::from(code & 0x1f)] * 1_000
}

impl RcSender {
    pub fn new(
        local: Addr,
        remote: Addr,
        psn0: u32,
        packets: u32,
        msg_len: u32,
        window_msgs: u32,
        rto_ns: u64,
    ) -> Self {
        RcSender {
            local,
            remote,
            psn0: psn0 & PSN_MASK,
            msg_len,
            window_msgs,
            packets,
            next: 0,
            una: 0,
            high: 0,
            rto_ns,
            deadline: None,
            retransmissions: 0,
            naks: 0,
            timeouts: 0,
            rewind: None,
            rnr_retry: RNR_RETRY_INFINITE,
            rnr_left: RNR_RETRY_INFINITE,
            rnr_until: None,
            rnr_naks: 0,
            rnr_failed: None,
        }
    }

    /// Resend after at most `n` RNR NAKs in a row (7 or more: without limit).
    pub fn set_rnr_retry(&mut self, n: u8) {
        self.rnr_retry = n.min(RNR_RETRY_INFINITE);
        self.rnr_left = self.rnr_retry;
    }

    /// The packet whose RNR NAK found no retry left: its work request failed
    /// (`IBV_WC_RNR_RETRY_EXC_ERR`) and the sender sends nothing more.
    pub fn rnr_failed(&self) -> Option<u32> {
        self.rnr_failed
    }

    /// Whether the sender waits out an RNR NAK's timer.
    pub fn in_rnr_wait(&self) -> bool {
        self.rnr_until.is_some()
    }

    pub fn psn_of(&self, index: u32) -> u32 {
        (self.psn0 + index) & PSN_MASK
    }

    /// The packet index a PSN refers to, if it is in this stream.
    pub fn index_of(&self, psn: u32) -> Option<u32> {
        let i = psn_diff(self.psn0, psn);
        (i < self.packets).then_some(i)
    }

    pub fn all_acked(&self) -> bool {
        self.una >= self.packets
    }

    pub fn acked(&self) -> u32 {
        self.una
    }

    /// The next packet to put on the wire (its index), honouring the message window.
    pub fn next_to_send(&mut self, now: Nanos) -> Option<u32> {
        self.next_to_send_until(now, self.packets)
    }

    /// As [`RcSender::next_to_send`], but only packets below `limit` (the application has not
    /// produced the rest yet: a ring all-reduce step waits for its predecessor's data).
    pub fn next_to_send_until(&mut self, now: Nanos, limit: u32) -> Option<u32> {
        if self.rnr_failed.is_some() || self.next >= self.packets.min(limit) {
            return None;
        }
        if let Some(t) = self.rnr_until {
            if now < t {
                return None;
            }
            self.rnr_until = None;
        }
        let msg = self.next / self.msg_len;
        let acked_msgs = self.una / self.msg_len;
        if msg >= acked_msgs + self.window_msgs {
            return None;
        }
        let i = self.next;
        self.next += 1;
        if i < self.high {
            self.retransmissions += 1;
        } else {
            self.high = i + 1;
        }
        if self.deadline.is_none() {
            self.deadline = Some(now + self.rto_ns);
        }
        Some(i)
    }

    /// Opcode of packet `i` of the stream: WRITE FIRST/MIDDLE/LAST (ONLY for one-packet messages).
    pub fn opcode_of(&self, i: u32) -> u8 {
        let k = i % self.msg_len;
        let op = match (k == 0, k == self.msg_len - 1) {
            (true, true) => opcode::WRITE_ONLY,
            (true, false) => opcode::WRITE_FIRST,
            (false, true) => opcode::WRITE_LAST,
            (false, false) => opcode::WRITE_MIDDLE,
        };
        opcode::RC | op
    }

    /// Build packet `i` carrying `payload` (RETH on the first packet of a message).
    pub fn frame(
        &self,
        i: u32,
        payload: &[u8],
        payload_bytes: u32,
    ) -> Result<Vec<u8>, inabench_wire::Error> {
        let mut f = Vec::new();
        self.frame_into(&mut f, i, payload, payload_bytes)?;
        Ok(f)
    }

    /// As [`RcSender::frame`], written into `buf` (a pooled buffer: no allocation when its
    /// capacity suffices; the same bytes).
    pub fn frame_into(
        &self,
        buf: &mut Vec<u8>,
        i: u32,
        payload: &[u8],
        payload_bytes: u32,
    ) -> Result<(), inabench_wire::Error> {
        self.repr_of(i, payload_bytes).build_into(buf, payload)
    }

    /// As [`RcSender::frame_into`], the headers through `cache` (this QP's: a middle packet's
    /// differ from the last one's only in the PSN, and are copied; the same bytes).
    pub fn frame_cached_into(
        &self,
        cache: &mut EmitCache,
        buf: &mut Vec<u8>,
        i: u32,
        payload: &[u8],
        payload_bytes: u32,
    ) -> Result<(), inabench_wire::Error> {
        self.repr_of(i, payload_bytes)
            .build_parts_cached(cache, buf, &[payload])
    }

    /// The headers of packet `i`.
    fn repr_of(&self, i: u32, payload_bytes: u32) -> FrameRepr {
        let op = self.opcode_of(i);
        let first = i.is_multiple_of(self.msg_len);
        let last = i % self.msg_len == self.msg_len - 1;
        let mut f = frame_repr(&self.local, &self.remote, op, self.psn_of(i), last);
        f.reth = first.then_some(RethRepr {
            va: u64::from(i / self.msg_len) * u64::from(self.msg_len * payload_bytes),
            rkey: 0x1234,
            dma_len: self.msg_len * payload_bytes,
        });
        f
    }

    /// An ACK or NAK arrived.
    pub fn on_aeth(&mut self, now: Nanos, psn: u32, aeth: &AethRepr) {
        match aeth.syndrome {
            Syndrome::Ack { .. } => {
                // an ACK for a packet never sent is a ghost (the IBA spec discards ghost acknowledgements): ignored, or a stale or
                // forged frame would acknowledge data the responder never had
                if let Some(i) = self.index_of(psn)
                    && i + 1 > self.una
                    && i < self.high
                {
                    self.una = i + 1;
                    self.next = self.next.max(self.una);
                    self.rnr_left = self.rnr_retry;
                    self.deadline = if self.una < self.high {
                        Some(now + self.rto_ns)
                    } else {
                        None
                    };
                }
            }
            Syndrome::Nak(NakCode::PsnSequenceError) => {
                // the responder expects `psn`: everything before it arrived
                if let Some(i) = self.index_of(psn)
                    && i >= self.una
                    && i <= self.high
                    && !self.rewind.is_some_and(|r| r <= i && i < self.next)
                {
                    self.naks += 1;
                    self.una = i;
                    self.next = i; // go back N
                    self.rewind = Some(i);
                    self.deadline = Some(now + self.rto_ns);
                }
            }
            Syndrome::RnrNak { timer } => {
                // the responder expects `psn` and had no receive for it: everything before it
                // arrived; one RNR NAK per resend (a second while waiting is the same refusal)
                if let Some(i) = self.index_of(psn)
                    && i >= self.una
                    && i < self.high
                    && self.rnr_until.is_none()
                    && self.rnr_failed.is_none()
                {
                    self.rnr_naks += 1;
                    if i > self.una {
                        self.rnr_left = self.rnr_retry;
                    }
                    self.una = i;
                    self.next = i;
                    self.rewind = Some(i);
                    self.deadline = None;
                    if self.rnr_left == 0 {
                        self.rnr_failed = Some(i);
                        return;
                    }
                    if self.rnr_retry != RNR_RETRY_INFINITE {
                        self.rnr_left -= 1;
                    }
                    self.rnr_until = Some(now + rnr_timer_ns(timer));
                }
            }
            _ => {}
        }
    }

    pub fn poll_timeout(&self) -> Option<Nanos> {
        if self.all_acked() || self.rnr_failed.is_some() {
            None
        } else {
            self.rnr_until.or(self.deadline)
        }
    }

    /// No progress for an RTO: go back to the oldest unacknowledged packet.
    pub fn on_timeout(&mut self, now: Nanos) {
        if let Some(t) = self.rnr_until {
            // the RNR wait is over: [`RcSender::next_to_send`] resends from the NAK'd PSN
            if now >= t {
                self.rnr_until = None;
            }
            return;
        }
        if self.deadline.is_some_and(|d| now >= d) && !self.all_acked() {
            self.timeouts += 1;
            self.next = self.una;
            self.rewind = Some(self.una);
            self.deadline = Some(now + self.rto_ns);
        }
    }
}

/// What the responder did with a data packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accept {
    /// In order: deliver this packet index.
    Deliver(u32),
    Duplicate,
    OutOfOrder,
    Foreign,
}

/// The responding side of an RC connection.
#[derive(Debug)]
pub struct RcResponder {
    pub local: Addr,
    pub remote: Addr,
    pub psn0: u32,
    pub packets: u32,
    expected: u32,
    nak_sent: bool,
    pub ack_every: u32,
    since_ack: u32,
    pending: Vec<AckOut>,
    /// The RNR timer code this responder's RNR NAKs carry (verbs' `min_rnr_timer`; IBA Table
    /// 45: 12 is 0.64 ms, what the verbs binding sets).
    pub min_rnr_timer: u8,
    /// RNR NAKs sent.
    pub rnr_naks: u64,
}

/// An acknowledgement to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckOut {
    pub psn: u32,
    pub aeth: AethRepr,
}

impl RcResponder {
    pub fn new(local: Addr, remote: Addr, psn0: u32, packets: u32, ack_every: u32) -> Self {
        RcResponder {
            local,
            remote,
            psn0: psn0 & PSN_MASK,
            packets,
            expected: 0,
            nak_sent: false,
            ack_every: ack_every.max(1),
            since_ack: 0,
            pending: Vec::new(),
            min_rnr_timer: 12,
            rnr_naks: 0,
        }
    }

    /// Whether `psn` is the next packet this responder takes (what [`RcResponder::on_data`]
    /// would deliver).
    pub fn expects(&self, psn: u32) -> bool {
        self.expected < self.packets && psn_diff(self.psn0, psn) == self.expected
    }

    /// The expected packet needs a receive and none is posted: an RNR NAK for its PSN (with
    /// this responder's `min_rnr_timer`), the expected PSN unchanged; the packets that follow
    /// it are dropped without a sequence NAK until it comes again (one NAK per gap).
    pub fn rnr_nak(&mut self) {
        let psn = (self.psn0 + self.expected) & PSN_MASK;
        self.pending.push(AckOut {
            psn,
            aeth: AethRepr {
                syndrome: Syndrome::RnrNak {
                    timer: self.min_rnr_timer & 0x1f,
                },
                msn: self.expected & PSN_MASK,
            },
        });
        self.nak_sent = true;
        self.rnr_naks += 1;
    }

    pub fn received(&self) -> u32 {
        self.expected
    }

    pub fn complete(&self) -> bool {
        self.expected >= self.packets
    }

    fn ack(&mut self) {
        if self.expected == 0 {
            return;
        }
        let psn = (self.psn0 + self.expected - 1) & PSN_MASK;
        self.pending.push(AckOut {
            psn,
            aeth: AethRepr {
                syndrome: Syndrome::Ack { credits: 31 },
                msn: self.expected & PSN_MASK,
            },
        });
        self.since_ack = 0;
    }

    /// A data packet with `psn` arrived (ICRC already verified).
    pub fn on_data(&mut self, psn: u32, ack_req: bool) -> Accept {
        let i = psn_diff(self.psn0, psn);
        if i >= self.packets {
            return Accept::Foreign;
        }
        if i < self.expected {
            self.ack(); // a duplicate: say again where we are
            return Accept::Duplicate;
        }
        if i > self.expected {
            if !self.nak_sent {
                self.nak_sent = true;
                let psn = (self.psn0 + self.expected) & PSN_MASK;
                self.pending.push(AckOut {
                    psn,
                    aeth: AethRepr {
                        syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
                        msn: self.expected & PSN_MASK,
                    },
                });
            }
            return Accept::OutOfOrder;
        }
        self.expected += 1;
        self.nak_sent = false;
        self.since_ack += 1;
        if ack_req || self.since_ack >= self.ack_every || self.complete() {
            self.ack();
        }
        Accept::Deliver(i)
    }

    pub fn take_acks(&mut self) -> Vec<AckOut> {
        std::mem::take(&mut self.pending)
    }

    /// The pending acknowledgements moved into `out` (cleared first), in order; both vectors
    /// keep their capacity, so a caller that reuses `out` allocates nothing per frame.
    pub fn take_acks_into(&mut self, out: &mut Vec<AckOut>) {
        out.clear();
        out.append(&mut self.pending);
    }

    /// Build an ACK/NAK frame.
    pub fn ack_frame(&self, a: &AckOut) -> Result<Vec<u8>, inabench_wire::Error> {
        let mut f = Vec::new();
        self.ack_frame_into(&mut f, a)?;
        Ok(f)
    }

    /// As [`RcResponder::ack_frame`], written into `buf`.
    pub fn ack_frame_into(
        &self,
        buf: &mut Vec<u8>,
        a: &AckOut,
    ) -> Result<(), inabench_wire::Error> {
        let mut f = frame_repr(
            &self.local,
            &self.remote,
            opcode::RC | opcode::ACKNOWLEDGE,
            a.psn,
            false,
        );
        f.aeth = Some(a.aeth);
        f.build_into(buf, &[])
    }
}

/// What a UC responder did with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UcAccept {
    /// Packet `index` of the message in progress (0: a first or only packet, which begins one).
    Deliver(u32),
    /// Dropped: out of PSN order, in a message already dropped, or a middle or last packet with
    /// no message begun.
    Dropped,
}

/// The responding side of a UC connection: PSN and opcode sequence only (no acknowledgements,
/// nothing to ask again). See the module's text for the rules.
#[derive(Debug, Clone)]
pub struct UcResponder {
    /// The PSN the next packet of the message in progress must carry.
    expected: u32,
    /// A message is in progress (a first packet taken, its last not yet).
    in_msg: bool,
    /// Packets of the message in progress so far.
    index: u32,
    /// Drop everything until the next first or only packet.
    drop_msg: bool,
    /// Packets dropped.
    pub dropped: u64,
    /// Messages begun and never finished (a gap, or a new message begun over them).
    pub abandoned: u64,
    /// Messages finished (their last or only packet taken).
    pub finished: u64,
}

impl UcResponder {
    /// A responder whose peer's first PSN is `psn0`.
    pub fn new(psn0: u32) -> UcResponder {
        UcResponder {
            expected: psn0 & PSN_MASK,
            in_msg: false,
            index: 0,
            drop_msg: false,
            dropped: 0,
            abandoned: 0,
            finished: 0,
        }
    }

    /// A packet with `psn` and BTH opcode `op` (a UC SEND or RDMA WRITE opcode) arrived, its
    /// ICRC verified.
    pub fn on_packet(&mut self, psn: u32, op: u8) -> UcAccept {
        let psn = psn & PSN_MASK;
        if opcode::starts_message(op) {
            // a first or only packet begins a message, in order or not: a message in progress
            // is abandoned (its last packet never came)
            if self.in_msg {
                self.abandoned += 1;
            }
            self.drop_msg = false;
            self.index = 0;
            self.expected = (psn + 1) & PSN_MASK;
            self.in_msg = !opcode::ends_message(op);
            if !self.in_msg {
                self.finished += 1;
            }
            return UcAccept::Deliver(0);
        }
        if self.drop_msg || !self.in_msg || psn != self.expected {
            // a gap (or a middle/last with no first): the rest of this message is dropped
            if self.in_msg {
                self.abandoned += 1;
                self.in_msg = false;
            }
            self.drop_msg = true;
            self.dropped += 1;
            return UcAccept::Dropped;
        }
        self.index += 1;
        self.expected = (psn + 1) & PSN_MASK;
        if opcode::ends_message(op) {
            self.in_msg = false;
            self.finished += 1;
        }
        UcAccept::Deliver(self.index)
    }

    /// The consumer refused the message in progress (a bad RETH, a length that does not add
    /// up, no receive for its immediate): its remaining packets are dropped.
    pub fn drop_message(&mut self) {
        if self.in_msg {
            self.abandoned += 1;
        }
        self.in_msg = false;
        self.drop_msg = true;
    }

    /// Whether a message is in progress.
    pub fn in_message(&self) -> bool {
        self.in_msg
    }
}

/// The RDMA WRITE opcode of a message's packet for `transport` ([`opcode::RC`] or
/// [`opcode::UC`]): FIRST/MIDDLE/LAST, ONLY for one packet, the last with immediate when
/// `imm`.
pub fn write_opcode(transport: u8, first: bool, last: bool, imm: bool) -> u8 {
    let op = match (first, last, imm) {
        (true, true, false) => opcode::WRITE_ONLY,
        (true, true, true) => opcode::WRITE_ONLY_IMM,
        (true, false, _) => opcode::WRITE_FIRST,
        (false, true, false) => opcode::WRITE_LAST,
        (false, true, true) => opcode::WRITE_LAST_IMM,
        (false, false, _) => opcode::WRITE_MIDDLE,
    };
    (transport & opcode::TRANSPORT_MASK) | op
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(i: u8) -> Addr {
        Addr {
            mac: [2, 0, 0, 0, 0, i],
            ip: [10, 0, 0, i],
            qpn: 0x100 + u32::from(i),
        }
    }

    #[test]
    fn window_and_go_back_n() {
        let mut s = RcSender::new(addr(1), addr(2), 0xff_fffe, 8, 2, 2, 1000);
        let sent: Vec<u32> = std::iter::from_fn(|| s.next_to_send(0)).collect();
        assert_eq!(
            sent,
            vec![0, 1, 2, 3],
            "two messages of two packets in the window"
        );
        assert_eq!(s.psn_of(2), 0, "PSNs wrap at 2^24");
        let ack = AethRepr {
            syndrome: Syndrome::Ack { credits: 0 },
            msn: 0,
        };
        s.on_aeth(10, s.psn_of(1), &ack);
        assert_eq!(
            std::iter::from_fn(|| s.next_to_send(10)).collect::<Vec<_>>(),
            vec![4, 5]
        );
        let nak = AethRepr {
            syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
            msn: 0,
        };
        s.on_aeth(20, s.psn_of(3), &nak);
        assert_eq!(s.next_to_send(20), Some(3), "go back to the NAK'd PSN");
        assert_eq!(s.retransmissions, 1);
        s.on_timeout(20 + 1000);
        assert_eq!(
            s.next_to_send(1020),
            Some(3),
            "timeout goes back to the oldest unacked"
        );
    }

    #[test]
    fn responder_delivers_in_order_once_and_naks_a_gap_once() {
        let mut r = RcResponder::new(addr(2), addr(1), 100, 5, 2);
        assert_eq!(r.on_data(100, false), Accept::Deliver(0));
        assert_eq!(r.on_data(102, false), Accept::OutOfOrder);
        assert_eq!(r.on_data(103, false), Accept::OutOfOrder);
        let naks: Vec<_> = r
            .take_acks()
            .into_iter()
            .filter(|a| matches!(a.aeth.syndrome, Syndrome::Nak(_)))
            .collect();
        assert_eq!(naks.len(), 1);
        assert_eq!(naks[0].psn, 101);
        assert_eq!(r.on_data(101, false), Accept::Deliver(1));
        assert_eq!(r.on_data(101, false), Accept::Duplicate);
        assert_eq!(r.on_data(200, false), Accept::Foreign);
        let acks = r.take_acks();
        let frame = r.ack_frame(&acks[0]).expect("ack frame");
        let (repr, _) = FrameRepr::parse(&frame).expect("parses");
        assert_eq!(repr.bth.opcode, opcode::RC | opcode::ACKNOWLEDGE);
    }

    #[test]
    fn an_rnr_nak_acknowledges_what_came_before_waits_its_timer_and_resends() {
        // two messages of two packets; the responder has no receive for packet 3 (the second
        // message's last, with immediate)
        let mut s = RcSender::new(addr(1), addr(2), 0xff_fffe, 4, 2, 2, 1_000_000);
        let mut r = RcResponder::new(addr(2), addr(1), 0xff_fffe, 4, 2);
        r.min_rnr_timer = 1; // 0.01 ms
        s.set_rnr_retry(2);
        let sent: Vec<u32> = std::iter::from_fn(|| s.next_to_send(0)).collect();
        assert_eq!(sent, vec![0, 1, 2, 3]);
        for i in 0..3 {
            assert_eq!(r.on_data(s.psn_of(i), i == 1), Accept::Deliver(i));
        }
        assert!(r.expects(s.psn_of(3)) && !r.expects(s.psn_of(2)));
        r.rnr_nak();
        let naks = r.take_acks();
        let rnr = naks.last().expect("an RNR NAK");
        assert_eq!(rnr.psn, s.psn_of(3));
        assert_eq!(rnr.aeth.syndrome, Syndrome::RnrNak { timer: 1 });
        // the frame reads back as an RNR NAK
        let f = r.ack_frame(rnr).expect("frame");
        let (repr, _) = FrameRepr::parse(&f).expect("parses");
        assert_eq!(
            repr.aeth.map(|a| a.syndrome),
            Some(Syndrome::RnrNak { timer: 1 })
        );
        assert_eq!(r.received(), 3, "the expected PSN did not move");
        for a in &naks {
            s.on_aeth(100, a.psn, &a.aeth);
        }
        assert_eq!(s.acked(), 3, "packets 0..3 acknowledged by the RNR NAK");
        assert_eq!(
            s.poll_timeout(),
            Some(100 + 10_000),
            "the RNR timer, not the RTO"
        );
        assert_eq!(s.next_to_send(5_000), None, "nothing before the timer");
        s.on_timeout(10_100);
        assert_eq!(s.next_to_send(10_100), Some(3), "resent from the NAK'd PSN");
        // rnr_retry 2: a second refusal is answered with the second (last) resend, a third
        // fails the stream
        s.on_aeth(20_000, s.psn_of(3), &rnr.aeth);
        assert_eq!(s.rnr_failed(), None);
        s.on_timeout(30_000);
        assert_eq!(s.next_to_send(30_000), Some(3));
        s.on_aeth(40_000, s.psn_of(3), &rnr.aeth);
        assert_eq!(s.rnr_failed(), Some(3));
        assert_eq!(
            s.next_to_send(u64::MAX / 2),
            None,
            "a failed stream sends nothing"
        );
        assert_eq!(s.poll_timeout(), None);
        assert_eq!(s.rnr_naks, 3);
        assert_eq!(rnr_timer_ns(0), 655_360_000);
        assert_eq!(rnr_timer_ns(12), 640_000);
        assert_eq!(rnr_timer_ns(31), 491_520_000);
    }

    #[test]
    fn rnr_retry_seven_never_gives_up_and_an_ack_restores_the_count() {
        let mut s = RcSender::new(addr(1), addr(2), 5, 2, 1, 2, 1_000_000);
        s.set_rnr_retry(9);
        assert_eq!(s.rnr_retry, RNR_RETRY_INFINITE);
        let nak = AethRepr {
            syndrome: Syndrome::RnrNak { timer: 1 },
            msn: 0,
        };
        assert_eq!(s.next_to_send(0), Some(0));
        for k in 0..100u64 {
            s.on_aeth(k * 20_000, 5, &nak);
            s.on_timeout(k * 20_000 + 10_000);
            assert_eq!(s.next_to_send(k * 20_000 + 10_000), Some(0));
        }
        assert_eq!(s.rnr_failed(), None);
        let mut s = RcSender::new(addr(1), addr(2), 5, 2, 1, 2, 1_000_000);
        s.set_rnr_retry(1);
        assert_eq!(s.next_to_send(0), Some(0));
        assert_eq!(s.next_to_send(0), Some(1));
        s.on_aeth(0, 5, &nak); // the one retry spent on packet 0
        s.on_timeout(10_000);
        assert_eq!(s.next_to_send(10_000), Some(0));
        assert_eq!(s.next_to_send(10_000), Some(1));
        // packet 0 acknowledged by the RNR NAK for packet 1: progress, the count restored
        s.on_aeth(20_000, 6, &nak);
        assert_eq!((s.acked(), s.rnr_failed()), (1, None));
        s.on_timeout(30_000);
        assert_eq!(s.next_to_send(30_000), Some(1));
        s.on_aeth(40_000, 6, &nak);
        assert_eq!(s.rnr_failed(), Some(1));
    }

    #[test]
    fn a_uc_responder_drops_a_gapped_message_and_resyncs_on_the_next_first() {
        use opcode::*;
        let mut r = UcResponder::new(0xff_fffe);
        // message A: FIRST MIDDLE LAST in order, PSNs across the wrap
        assert_eq!(
            r.on_packet(0xff_fffe, UC_RDMA_WRITE_FIRST),
            UcAccept::Deliver(0)
        );
        assert_eq!(
            r.on_packet(0xff_ffff, UC_RDMA_WRITE_MIDDLE),
            UcAccept::Deliver(1)
        );
        assert_eq!(r.on_packet(0, UC_RDMA_WRITE_LAST_IMM), UcAccept::Deliver(2));
        // message B: its MIDDLE (PSN 2) lost: the LAST is dropped
        assert_eq!(r.on_packet(1, UC_RDMA_WRITE_FIRST), UcAccept::Deliver(0));
        assert_eq!(r.on_packet(3, UC_RDMA_WRITE_LAST_IMM), UcAccept::Dropped);
        // message C's FIRST lost: its MIDDLE and LAST dropped, though in PSN order
        assert_eq!(r.on_packet(5, UC_RDMA_WRITE_MIDDLE), UcAccept::Dropped);
        assert_eq!(r.on_packet(6, UC_RDMA_WRITE_LAST), UcAccept::Dropped);
        // message D begins whatever its PSN
        assert_eq!(r.on_packet(7, UC_RDMA_WRITE_ONLY_IMM), UcAccept::Deliver(0));
        assert_eq!(r.on_packet(8, UC_RDMA_WRITE_FIRST), UcAccept::Deliver(0));
        assert_eq!(r.on_packet(9, UC_RDMA_WRITE_MIDDLE), UcAccept::Deliver(1));
        // a FIRST over a message in progress abandons it
        assert_eq!(r.on_packet(10, UC_RDMA_WRITE_FIRST), UcAccept::Deliver(0));
        r.drop_message();
        assert_eq!(r.on_packet(11, UC_RDMA_WRITE_LAST), UcAccept::Dropped);
        assert_eq!((r.finished, r.abandoned, r.dropped), (2, 3, 4));
        assert_eq!(
            write_opcode(opcode::UC, true, false, true),
            UC_RDMA_WRITE_FIRST
        );
        assert_eq!(
            write_opcode(opcode::UC, false, true, true),
            UC_RDMA_WRITE_LAST_IMM
        );
        assert_eq!(
            write_opcode(opcode::RC, true, true, false),
            RC_RDMA_WRITE_ONLY
        );
    }
}
