//! NetReduce's host side (Sec. 3.1): the flow-control module cuts the gradient into messages of
//! MsgLen packets, puts the INA header (InetTag, RingID, Rank, MsgID, MsgLen) in front of each
//! message's tensor values, and streams messages over an RC connection to the ring successor with
//! a message-level sliding window of N. The aggregate comes back on the RC connection from the
//! predecessor, rebuilt by the accelerator from the predecessor's packets, so the responder
//! accepts it unchanged.
//!
//! Several RC connections per worker pair (the `switch_shards` knob, default 1): message `m` goes
//! on QP `m mod S`, each QP an RC connection of its own (own QPN, own PSN space, the paper's window
//! of N messages per QP), so a switch split into S shards steered by QP keeps every QP's packets
//! in order on one shard (a RoCE NIC spreads work over QPs the same way). With S = 1 the frames are
//! the paper's (one QP per direction).
//!
//! Parameters (Sec. 5.1): N = 2 messages, MsgLen = 170 packets, 1 KB payload. Aggregation is int32
//! by default (bit-exact against the reference sum); with the `float` knob the accelerator sums
//! float32, as the paper's does, with the same addressing (training runs use this).

use crate::common::{
    AllReduceConfig, HostStats, Setup, SetupError, SetupNode, System, Worker, check_inputs,
    gradient, switch_id,
};
use crate::fpga::Accelerator;
use crate::roce::{Accept, Addr, RcResponder, RcSender};
use inabench_fabric::{BufPool, Endpoint, Nanos, NodeId, Transmit};
use inabench_wire::ib::{Syndrome, opcode};
use inabench_wire::ina::NetReduceHeader;
use inabench_wire::roce::{EmitCache, IcrcCheck, ParseCache};
use std::collections::VecDeque;

/// Addresses of worker `i`: MAC 02:00:00:00:00:i+1, IP 10.0.0.i+1, send QP 0x100+i, receive QP 0x200+i.
pub fn worker_addr(i: usize, recv: bool) -> Addr {
    worker_qp_addr(i, recv, 0)
}

/// The largest number of QPs per connection pair ([`Layout::qps`]).
pub const MAX_QPS: u32 = 16;

/// Worker `i`'s address on its QP `q` (q = 0: [`worker_addr`]): QPN + `q << 12`.
pub fn worker_qp_addr(i: usize, recv: bool, q: u32) -> Addr {
    let b = (i + 1) as u8;
    Addr {
        mac: [2, 0, 0, 0, 0, b],
        ip: [10, 0, 0, b],
        qpn: if recv { 0x200 } else { 0x100 } + i as u32 + (q << 12),
    }
}

/// The QP index `q` of a QPN written by [`worker_qp_addr`].
pub fn qp_index(qpn: u32) -> u32 {
    (qpn >> 12) & 0xfff
}

/// The first PSN of rank `r`'s sending QP `q` (distinct per connection, which exercises the
/// accelerator's CLT).
pub fn psn0(r: usize, q: u32) -> u32 {
    (r as u32).wrapping_mul(0x0010_0001).wrapping_add(q << 16) & crate::roce::PSN_MASK
}

/// Layout shared by hosts and the accelerator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Sum float32 (the values are f32 bit patterns) instead of int32.
    pub float: bool,
    pub workers: usize,
    pub msg_len: u32,
    pub window: u32,
    pub payload: u32,
    pub messages: u32,
    pub elements: usize,
    /// RC connections (QPs) per worker pair: message `m` rides QP `m mod qps` (1 by default;
    /// the `switch_shards` knob, at most [`MAX_QPS`] and at most the message count).
    pub qps: u32,
    /// When the accelerator frees an aggregator (the `aggregator_release` knob; see
    /// [`Release`]).
    pub release: Release,
}

/// When NetReduce's accelerator frees an aggregator for reuse (Sec. 3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Release {
    /// The suite's rule (knob `aggregator_release` 0, the default): an aggregator is freed
    /// when the next message that maps to it (MsgID + 2N) arrives, so a rank that lost a result
    /// packet can still fetch it by retransmitting.
    #[default]
    Lazy,
    /// The paper's rule (knob 1): every gradient packet of message MsgID frees the aggregator
    /// "one window away", `(MsgID + N) % 2N x MsgLen + (PSN - PSN0)` (Sec. 3.1), i.e. the one
    /// message MsgID - N used.
    OneWindowAway,
}

impl Layout {
    pub fn new(cfg: &AllReduceConfig) -> Result<Layout, SetupError> {
        let msg_len = cfg.knob("msg_packets").unwrap_or(170.0) as u32;
        let window = cfg.knob("window").unwrap_or(2.0) as u32;
        let payload = cfg.mtu as u32;
        if msg_len == 0
            || window == 0
            || payload < 32
            || !payload.is_multiple_of(4)
            || cfg.workers < 2
            || cfg.workers > 64
        {
            return Err(SetupError::Config(format!(
                "NetReduce needs 2..64 workers, MsgLen and N above 0 and a payload of at least 32 bytes in whole int32 (got {} workers, MsgLen {msg_len}, N {window}, payload {payload})",
                cfg.workers
            )));
        }
        let per_msg = Self::values_per_msg(msg_len, payload);
        let messages = cfg.elements.div_ceil(per_msg).max(1) as u32;
        let k = cfg.knob("aggregator_release").unwrap_or(0.0);
        let release = if k == 0.0 {
            Release::Lazy
        } else if k == 1.0 {
            Release::OneWindowAway
        } else {
            return Err(SetupError::Config(format!(
                "aggregator_release is 0 (free an aggregator when MsgID + 2N arrives) or 1 (the paper's one window away), not {k}"
            )));
        };
        let qps = match cfg.knob("switch_shards") {
            Some(k) if k >= 1.0 => (k as u32).min(MAX_QPS).min(messages),
            _ => 1,
        };
        Ok(Layout {
            float: cfg.knob("float").is_some_and(|v| v > 0.0),
            workers: cfg.workers,
            msg_len,
            window,
            payload,
            messages,
            elements: cfg.elements,
            qps,
            release,
        })
    }

    /// The messages QP `q` carries.
    pub fn qp_messages(&self, q: u32) -> u32 {
        (self.messages + self.qps - 1 - q) / self.qps
    }

    /// The gradient's packet number of packet `i` of QP `q`'s stream.
    pub fn global_packet(&self, q: u32, i: u32) -> u32 {
        ((i / self.msg_len) * self.qps + q) * self.msg_len + i % self.msg_len
    }

    fn values_per_msg(msg_len: u32, payload: u32) -> usize {
        ((msg_len * payload) as usize - NetReduceHeader::LEN) / 4
    }

    pub fn per_msg(&self) -> usize {
        Self::values_per_msg(self.msg_len, self.payload)
    }

    pub fn packets(&self) -> u32 {
        self.messages * self.msg_len
    }

    /// The share of the payload bytes sent that is padding: every message, the last one too, is
    /// sent as MsgLen full packets, so a gradient that is not a whole number of messages pads the
    /// last one (262,144 values = 6.02 messages of 43,516 go as 7 x 170 packets: 14%).
    pub fn padding_share(&self) -> f64 {
        let sent = f64::from(self.packets()) * f64::from(self.payload);
        let used =
            4.0 * self.elements as f64 + f64::from(self.messages) * NetReduceHeader::LEN as f64;
        (1.0 - used / sent).max(0.0)
    }

    /// The message bytes of a gradient: per message the INA header then the values (zero pad).
    pub fn encode(&self, rank: usize, grad: &[i32]) -> Vec<u8> {
        let mlen = (self.msg_len * self.payload) as usize;
        let mut out = vec![0u8; mlen * self.messages as usize];
        for m in 0..self.messages as usize {
            let msg = &mut out[m * mlen..(m + 1) * mlen];
            let h = NetReduceHeader {
                ring_id: 0,
                rank: rank as u16,
                msg_id: m as u32,
                msg_len: self.msg_len,
            };
            // the buffer is at least the header long (payload >= 32)
            let _ = h.emit(msg);
            for (k, v) in grad
                .iter()
                .skip(m * self.per_msg())
                .take(self.per_msg())
                .enumerate()
            {
                let at = NetReduceHeader::LEN + 4 * k;
                msg[at..at + 4].copy_from_slice(&v.to_be_bytes());
            }
        }
        out
    }

    /// The values of received message bytes.
    pub fn decode(&self, bytes: &[u8]) -> Vec<i32> {
        let mlen = (self.msg_len * self.payload) as usize;
        let mut out = Vec::with_capacity(self.elements);
        for m in 0..self.messages as usize {
            let msg = &bytes[m * mlen..(m + 1) * mlen];
            for k in 0..self.per_msg() {
                if out.len() == self.elements {
                    break;
                }
                let at = NetReduceHeader::LEN + 4 * k;
                out.push(i32::from_be_bytes([
                    msg[at],
                    msg[at + 1],
                    msg[at + 2],
                    msg[at + 3],
                ]));
            }
        }
        out
    }
}

/// One NetReduce worker: its flow-control module over an RC sender, and an RC responder for the
/// aggregate (one of each per QP, [`Layout::qps`]).
pub struct Host {
    id: NodeId,
    switch: NodeId,
    layout: Layout,
    /// per QP `q`: the RC sender to the successor's QP `q`
    send: Vec<RcSender>,
    /// per QP `q`: the RC responder for the predecessor's QP `q`
    recv: Vec<RcResponder>,
    /// the QP whose turn it is to send (round robin over the QPs with a packet to send)
    turn: usize,
    data: Vec<u8>,
    result: Vec<u8>,
    acks: VecDeque<Transmit>,
    /// per message: (handed to the NIC, first bit on the wire) of its first packet's first send
    first_sent: Vec<Option<(Nanos, Nanos)>>,
    /// per message: when the flow-control module handed it to the RDMA connection (the message
    /// window admitted it: at the start, or when the ACK that moved the window came back); the
    /// sender's queue wait runs from here to its first packet's first bit on the wire
    admitted_at: Vec<Nanos>,
    /// per QP: messages of that QP admitted so far
    admitted: Vec<u32>,
    clock: crate::common::TxClock,
    stats: HostStats,
    started: bool,
    /// frame buffers: delivered ones come back through `recycle`, sends take from here
    pool: BufPool,
    /// the responder's pending ACKs, moved out per delivery (reused: no allocation per frame)
    ack_scratch: Vec<crate::roce::AckOut>,
    /// templates of the last fully parsed result frames (a QP's first, middle and last
    /// packets): the next ones parse by a compare of their headers, with the same result as a
    /// full parse (any other frame is parsed in full)
    parse: ParseCache,
    /// per QP `q`: the headers its sender last built (the next middle packet's are those with
    /// another PSN: copied)
    emit: Vec<EmitCache>,
}

/// The result region, zeroed and every page touched now, as a RoCE NIC's memory region is
/// registered (`ibv_reg_mr` pins its pages) before the first transfer: a fabric that times the
/// all-reduce then does not charge the kernel's first-touch page faults to it (`vec![0; n]`
/// maps zero pages lazily; MPI's peer in bench/peers warms its buffers up the same way).
fn registered(len: usize) -> Vec<u8> {
    let mut r = vec![0u8; len];
    // one write per page of a value the optimiser cannot see (a plain zeroing may be folded
    // into the lazy zeroed allocation)
    for i in (0..len).step_by(4096) {
        r[i] = std::hint::black_box(0);
    }
    r
}

impl Host {
    pub fn new(rank: usize, layout: Layout, grad: &[i32], switch: NodeId, rto_ns: u64) -> Host {
        Host::with_line_rate(rank, layout, grad, switch, rto_ns, 0.0)
    }

    /// As [`Host::new`], with the NIC's line rate for RTT timestamps (0: frames leave when
    /// handed over).
    pub fn with_line_rate(
        rank: usize,
        layout: Layout,
        grad: &[i32],
        switch: NodeId,
        rto_ns: u64,
        line_rate_bps: f64,
    ) -> Host {
        let n = layout.workers;
        let pred_rank = (rank + n - 1) % n;
        let packets = layout.packets();
        let send = (0..layout.qps)
            .map(|q| {
                RcSender::new(
                    worker_qp_addr(rank, false, q),
                    worker_qp_addr((rank + 1) % n, true, q),
                    psn0(rank, q),
                    layout.qp_messages(q) * layout.msg_len,
                    layout.msg_len,
                    layout.window,
                    rto_ns,
                )
            })
            .collect();
        let recv = (0..layout.qps)
            .map(|q| {
                RcResponder::new(
                    worker_qp_addr(rank, true, q),
                    worker_qp_addr(pred_rank, false, q),
                    psn0(pred_rank, q),
                    layout.qp_messages(q) * layout.msg_len,
                    16,
                )
            })
            .collect();
        Host {
            id: rank as NodeId,
            switch,
            layout,
            send,
            recv,
            turn: 0,
            data: layout.encode(rank, grad),
            result: registered((packets * layout.payload) as usize),
            acks: VecDeque::new(),
            first_sent: vec![None; layout.messages as usize],
            admitted_at: vec![0; layout.messages as usize],
            admitted: vec![0; layout.qps as usize],
            clock: crate::common::TxClock::new(line_rate_bps),
            stats: HostStats {
                gradient_bytes: 4 * layout.elements as u64,
                ..HostStats::default()
            },
            started: false,
            pool: BufPool::default(),
            ack_scratch: Vec::new(),
            parse: ParseCache::new(3 * layout.qps as usize + 1),
            emit: vec![EmitCache::default(); layout.qps as usize],
        }
    }
}

/// Worker `i`'s address on its QP `q` in an address plan: the plan's MAC and IPv4 address for
/// the worker, the QPN numbered as [`worker_qp_addr`] numbers it (a QPN is the NIC's, not the
/// testbed's). With the synthetic plan this is [`worker_qp_addr`]; None where the plan names
/// fewer workers.
pub fn worker_qp_addr_in(
    plan: &inabench_fabric::addresses::AddressPlan,
    i: usize,
    recv: bool,
    q: u32,
) -> Option<Addr> {
    let a = plan.worker(i)?;
    Some(Addr {
        mac: a.mac,
        ip: a.ipv4,
        ..worker_qp_addr(i, recv, q)
    })
}

impl Host {
    /// As [`Host::with_line_rate`], every connection addressed from `plan` (a testbed's hosts'
    /// MACs and IPv4 addresses) instead of the synthetic plan; the QPNs and PSNs are the same.
    /// Refused where the plan names fewer workers than the layout.
    pub fn with_addresses(
        rank: usize,
        layout: Layout,
        grad: &[i32],
        switch: NodeId,
        rto_ns: u64,
        line_rate_bps: f64,
        plan: &inabench_fabric::addresses::AddressPlan,
    ) -> Result<Host, SetupError> {
        plan.covers(layout.workers)?;
        let n = layout.workers;
        let pred = (rank + n - 1) % n;
        let at = |i: usize, recv: bool, q: u32| {
            worker_qp_addr_in(plan, i, recv, q)
                .ok_or_else(|| SetupError::Config(format!("the address plan has no worker {i}")))
        };
        let mut h = Host::with_line_rate(rank, layout, grad, switch, rto_ns, line_rate_bps);
        for (q, s) in h.send.iter_mut().enumerate() {
            s.local = at(rank, false, q as u32)?;
            s.remote = at((rank + 1) % n, true, q as u32)?;
        }
        for (q, r) in h.recv.iter_mut().enumerate() {
            r.local = at(rank, true, q as u32)?;
            r.remote = at(pred, false, q as u32)?;
        }
        Ok(h)
    }
}

impl Host {
    /// Note when QP `q`'s message window admits new messages (`now`): the messages up to its
    /// acknowledged ones plus the window N.
    fn admit(&mut self, q: usize, now: Nanos) {
        let Some(s) = self.send.get(q) else {
            return;
        };
        let ml = self.layout.msg_len;
        let upto = (s.acked() / ml + s.window_msgs).min(self.layout.qp_messages(q as u32));
        for j in self.admitted[q]..upto {
            let m = (self.layout.global_packet(q as u32, j * ml) / ml) as usize;
            if let Some(t) = self.admitted_at.get_mut(m) {
                *t = now;
            }
        }
        self.admitted[q] = self.admitted[q].max(upto);
    }

    /// Packets sent again, over every QP.
    pub fn retransmissions(&self) -> u64 {
        self.send.iter().map(|s| s.retransmissions).sum()
    }
}

impl Endpoint for Host {
    fn id(&self) -> NodeId {
        self.id
    }

    fn handle_packet(&mut self, now: Nanos, _from: NodeId, frame: &[u8]) {
        self.stats.packets_rx += 1;
        let Ok((repr, payload)) = self.parse.parse(frame, IcrcCheck::Verify) else {
            self.stats.malformed_rx += 1;
            return;
        };
        let q = qp_index(repr.bth.dest_qp) as usize;
        if repr.bth.opcode == opcode::RC | opcode::ACKNOWLEDGE {
            if let Some(send) = self.send.get_mut(q)
                && repr.bth.dest_qp == send.local.qpn
                && let Some(a) = repr.aeth
            {
                send.on_aeth(now, repr.bth.psn, &a);
                self.admit(q, now);
            }
            return;
        }
        let Some(recv) = self
            .recv
            .get_mut(q)
            .filter(|r| r.local.qpn == repr.bth.dest_qp)
        else {
            self.stats.malformed_rx += 1;
            return;
        };
        if let Accept::Deliver(k) = recv.on_data(repr.bth.psn, repr.bth.ack_req) {
            let i = self.layout.global_packet(q as u32, k);
            let at = (i * self.layout.payload) as usize;
            let n = payload.len().min(self.layout.payload as usize);
            self.result[at..at + n].copy_from_slice(&payload[..n]);
            if i.is_multiple_of(self.layout.msg_len)
                && let Some(Some((handed, t0))) =
                    self.first_sent.get((i / self.layout.msg_len) as usize)
            {
                self.stats.rtt_ns.push(now.saturating_sub(*t0));
                self.stats.rtt_queue_ns.push(t0.saturating_sub(*handed));
            }
            if self.recv.iter().all(RcResponder::complete) {
                self.stats.end_ns = now;
            }
        }
        let recv = &mut self.recv[q];
        recv.take_acks_into(&mut self.ack_scratch);
        for a in &self.ack_scratch {
            let mut bytes = self.pool.take(0);
            match recv.ack_frame_into(&mut bytes, a) {
                Ok(()) => self.acks.push_back(Transmit {
                    to: self.switch,
                    bytes,
                }),
                Err(_) => self.pool.put(bytes),
            }
        }
    }

    fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        if !self.started {
            self.started = true;
            self.stats.start_ns = now;
            for q in 0..self.send.len() {
                self.admit(q, now);
            }
        }
        let mut first = None;
        let t = if let Some(a) = self.acks.pop_front() {
            a
        } else {
            // the QPs take turns: the first one from `turn` on with a packet to send
            let qps = self.send.len();
            let (q, k) = (0..qps).find_map(|j| {
                let q = (self.turn + j) % qps;
                self.send[q].next_to_send(now).map(|k| (q, k))
            })?;
            self.turn = (q + 1) % qps;
            let i = self.layout.global_packet(q as u32, k);
            let p = self.layout.payload as usize;
            let at = i as usize * p;
            let mut bytes = self.pool.take(0);
            if self.send[q]
                .frame_cached_into(
                    &mut self.emit[q],
                    &mut bytes,
                    k,
                    &self.data[at..at + p],
                    self.layout.payload,
                )
                .is_err()
            {
                self.pool.put(bytes);
                return None;
            }
            let m = (i / self.layout.msg_len) as usize;
            if i.is_multiple_of(self.layout.msg_len) && self.first_sent[m].is_none() {
                first = Some(m);
            }
            Transmit {
                to: self.switch,
                bytes,
            }
        };
        // every frame (data and ACKs) takes its turn on the host's link
        let wire = self.clock.start(now, t.bytes.len());
        if let Some(m) = first {
            self.first_sent[m] = Some((self.admitted_at[m].min(now), wire));
        }
        self.stats.packets_tx += 1;
        self.stats.wire_bytes_tx += t.bytes.len() as u64;
        Some(t)
    }

    fn poll_timeout(&self) -> Option<Nanos> {
        self.send.iter().filter_map(RcSender::poll_timeout).min()
    }

    fn handle_timeout(&mut self, now: Nanos) {
        for s in &mut self.send {
            s.on_timeout(now);
        }
    }

    fn is_done(&self) -> bool {
        self.recv.iter().all(RcResponder::complete)
    }

    fn recycle(&mut self, buf: Vec<u8>) {
        self.pool.put(buf);
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("packets_tx", self.stats.packets_tx),
            ("retransmissions", self.retransmissions()),
            ("naks", self.send.iter().map(|s| s.naks).sum()),
            ("timeouts", self.send.iter().map(|s| s.timeouts).sum()),
            ("malformed_rx", self.stats.malformed_rx),
        ]
    }
}

impl Worker for Host {
    fn result(&self) -> Option<Vec<i32>> {
        self.is_done().then(|| self.layout.decode(&self.result))
    }

    fn stats(&self) -> HostStats {
        HostStats {
            retransmissions: self.retransmissions(),
            ..self.stats.clone()
        }
    }
}

/// NetReduce as a Table 6 system.
pub struct NetReduce;

impl System for NetReduce {
    fn name(&self) -> &'static str {
        "netreduce"
    }

    fn float_sum(&self) -> Option<crate::common::FloatSum> {
        Some(crate::common::FloatSum::Native)
    }

    /// RC over RoCE: a queue pair's packets in PSN order.
    fn ordered_transport(&self) -> bool {
        true
    }

    fn in_network(&self) -> bool {
        true
    }

    /// The layout's QP count is the shard count (the same knob, `switch_shards`, the same
    /// bounds): with S shards each worker opens S RC connections to its successor, message `m` on
    /// QP `m mod S` ([`Layout::qps`]), and shard `q` serves QP `q` (its CLT entries and
    /// aggregators), so each QP's packets and ACKs stay in order on one shard (an earlier split
    /// by message over one QP interleaved the shards' result streams on each RC connection,
    /// whose responder took an out-of-order PSN for a loss: go-back-N, 5x slower).
    fn switch_shards(&self, cfg: &AllReduceConfig) -> usize {
        Layout::new(cfg).map_or(1, |l| l.qps as usize)
    }

    /// The QP index of a worker frame's destination QP ([`qp_index`]), data and ACKs alike, so
    /// every packet of one RC connection goes through one shard in order.
    fn shard_key(&self) -> Option<fn(&[u8]) -> usize> {
        fn shard(frame: &[u8]) -> usize {
            use inabench_wire::roce::{FrameRepr, IcrcCheck};
            FrameRepr::parse_with(frame, IcrcCheck::Ignore)
                .map_or(0, |(repr, _)| qp_index(repr.bth.dest_qp) as usize)
        }
        Some(shard)
    }

    /// NetReduce cannot tell a replay from a fresh frame, nor a flip outside the ICRC (Ethernet
    /// header, IPv4 TTL/TOS/checksum) from a replay.
    fn fuzz_findings(&self) -> &'static [inabench_fabric::fuzz::Kind] {
        use inabench_fabric::fuzz::Kind;
        &[Kind::Flip, Kind::Replay]
    }

    /// `padding`: the share of payload bytes sent as padding (NetReduce pads its last message
    /// to MsgLen packets), in %.
    fn layout_metrics(&self, cfg: &AllReduceConfig, _time_ns: f64) -> Vec<(&'static str, f64)> {
        Layout::new(cfg).map_or_else(
            |_| Vec::new(),
            |l| vec![("padding", 100.0 * l.padding_share())],
        )
    }

    /// The accelerator sits behind the switch on its own ports (Sec. 4, Fig. 5): every packet
    /// to it and from it crosses one more link each way.
    fn extra_links(&self) -> u32 {
        2
    }

    fn build_with(
        &self,
        cfg: &AllReduceConfig,
        inputs: Vec<Vec<i32>>,
    ) -> Result<Setup, SetupError> {
        let layout = Layout::new(cfg)?;
        check_inputs(cfg, &inputs)?;
        let workers = inputs
            .iter()
            .enumerate()
            .map(|(r, g)| Box::new(host(cfg, layout, r, g)) as Box<dyn Worker>)
            .collect();
        Ok(Setup {
            workers,
            switch: Box::new(Accelerator::new(switch_id(cfg), layout)),
            others: Vec::new(),
        })
    }

    /// The workers at `plan`'s addresses ([`Host::with_addresses`]) and the accelerator finding
    /// them by it ([`Accelerator::with_addresses`]); the accelerator is transparent (the
    /// workers address each other), so no switch address is needed.
    fn build_at(
        &self,
        cfg: &AllReduceConfig,
        plan: Option<&crate::common::AddressPlan>,
    ) -> Result<Setup, SetupError> {
        let Some(plan) = plan else {
            return self.build(cfg);
        };
        let layout = Layout::new(cfg)?;
        let workers = (0..cfg.workers)
            .map(|r| {
                let g = gradient(cfg.seed, r, cfg.elements);
                Host::with_addresses(
                    r,
                    layout,
                    &g,
                    switch_id(cfg),
                    cfg.timeout_ns,
                    cfg.line_rate_bps,
                    plan,
                )
                .map(|h| Box::new(h) as Box<dyn Worker>)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Setup {
            workers,
            switch: Box::new(Accelerator::new(switch_id(cfg), layout).with_addresses(plan.clone())),
            others: Vec::new(),
        })
    }

    /// A worker from its own generated gradient, the accelerator from the layout: the node
    /// [`System::build`]'s setup has at that index, without the others.
    fn build_node(&self, cfg: &AllReduceConfig, node: usize) -> Result<SetupNode, SetupError> {
        let layout = Layout::new(cfg)?;
        if node < cfg.workers {
            let grad = gradient(cfg.seed, node, cfg.elements);
            Ok(SetupNode::Worker(Box::new(host(cfg, layout, node, &grad))))
        } else if node == cfg.workers {
            Ok(SetupNode::Switch(Box::new(Accelerator::new(
                switch_id(cfg),
                layout,
            ))))
        } else {
            Err(SetupError::Config(format!(
                "node {node} of a {}-node setup",
                cfg.workers + 1
            )))
        }
    }
}

/// Worker `rank` of `cfg` with its gradient `grad`.
fn host(cfg: &AllReduceConfig, layout: Layout, rank: usize, grad: &[i32]) -> Host {
    Host::with_line_rate(
        rank,
        layout,
        grad,
        switch_id(cfg),
        cfg.timeout_ns,
        cfg.line_rate_bps,
    )
}

/// `Syndrome` is re-exported for tests that build ACKs by hand.
pub type AckSyndrome = Syndrome;
