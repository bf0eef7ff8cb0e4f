//! A software RoCEv2 RC transport, sans-IO: a sending QP (PSN sequencing, segmentation of RDMA
//! WRITEs at the path MTU into FIRST/MIDDLE/LAST packets, a message-level window, go-back-N from
//! a NAK'd PSN and on timeout, cumulative ACKs) and a responding QP (expected-PSN tracking, ACK
//! coalescing, one NAK per PSN gap, duplicates re-ACKed and never re-delivered). Frames are built
//! and checked with `inabench-wire` (ICRC generated and verified).
//!
//! The message-level window is NetReduce's flow-control module (Sec. 3.1): a message is MsgLen
//! packets, and at most N messages are unacknowledged.

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
        }
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
        if self.next >= self.packets.min(limit) {
            return None;
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
            _ => {}
        }
    }

    pub fn poll_timeout(&self) -> Option<Nanos> {
        if self.all_acked() {
            None
        } else {
            self.deadline
        }
    }

    /// No progress for an RTO: go back to the oldest unacknowledged packet.
    pub fn on_timeout(&mut self, now: Nanos) {
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
        }
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
}
