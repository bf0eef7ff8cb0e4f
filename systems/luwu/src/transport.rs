//! The WorkerNIC and AggNIC transport modules (Sec. 3.2.3), sans-IO.
//!
//! Each module has a TX buffer (values to send, cut into packets with an incremental SeqNum) and
//! an RX buffer (a ring of `window` packet slots), and each buffer has an `Ack` and a `Credit`
//! register:
//!
//! - RX Ack: the next SeqNum expected (the first one not yet received); RX Credit: the largest
//!   SeqNum the RX buffer can hold = consumed + depth - 1. Packets that arrive out of order are
//!   kept in their slot (the buffer is indexed by SeqNum); Ack is cumulative.
//! - TX Ack and TX Credit: set from the heartbeats. A sender sends SeqNum `s` only while
//!   `s <= TX Credit` ("once [it] sends the packet with a sequence number equal to its TX Credit
//!   value, it stops"), so no RX buffer can overflow; overflows are still counted (a packet whose
//!   SeqNum has no slot is dropped), so a test can see that they never happen.
//! - Loss: if the TX Ack has not advanced for the resend timeout while packets are outstanding,
//!   the sender goes back to Ack and resends from there (go-back-N, as the paper says:
//!   "resends packets starting with the sequence number Ack"). WorkerNIC `w` waits
//!   `timeout + w * stagger` (our choice, per the issue: staggered so that one worker's resend,
//!   which makes the switch forward a completed aggregate again, moves the Ack before the others
//!   resend too).
//! - Heartbeats: every `heartbeat_ns` (T_send / 4, Appendix B), a receiver sends its RX Ack and
//!   RX Credit: WorkerNICs send parameter heartbeats to the switch (which aggregates them), the
//!   AggNIC sends gradient heartbeats (which the switch broadcasts).
//! - The consumer (the GPU access module on a worker, the optimizer on the AggNIC) drains the RX
//!   buffer in SeqNum order at `consumer_rate` times the payload line rate; each drained packet
//!   raises the RX Credit.

use crate::packet::{self, Kind, Repr, SRC_AGG};
use inabench_fabric::{Endpoint, Nanos, NodeId, Transmit};

/// Configuration shared by every node of one push/pull job.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub workers: usize,
    /// 32-bit values per data packet.
    pub values_per_packet: usize,
    /// Packets of every RX buffer and entries of the switch's gradient table.
    pub window: usize,
    pub line_rate_bps: f64,
    pub heartbeat_ns: u64,
    pub resend_timeout_ns: u64,
    /// Extra wait of WorkerNIC `w`: `w * stagger_ns`.
    pub stagger_ns: u64,
    /// Per worker: how fast its GPU drains the RX buffer, as a fraction of the line rate.
    pub consumer_rate: Vec<f64>,
    /// How fast the optimizer drains the AggNIC's RX buffer, as a fraction of the line rate.
    pub agg_consumer_rate: f64,
}

impl Config {
    /// T_send: the time to send a whole window of data packets at line rate (Appendix B).
    pub fn t_send_ns(window: usize, values_per_packet: usize, line_rate_bps: f64) -> f64 {
        window as f64 * packet::wire_bytes(values_per_packet) as f64 * 8.0 / line_rate_bps * 1e9
    }

    /// The id of the switch node.
    pub fn switch_id(&self) -> NodeId {
        self.workers as NodeId
    }

    /// The id of the AggNIC node.
    pub fn agg_id(&self) -> NodeId {
        self.workers as NodeId + 1
    }

    /// Time to drain one packet at `rate` times line rate.
    fn drain_ns(&self, rate: f64) -> f64 {
        packet::wire_bytes(self.values_per_packet) as f64 * 8.0
            / (self.line_rate_bps * rate.max(1e-6))
            * 1e9
    }

    /// Packets needed for `values` values.
    pub fn packets(&self, values: usize) -> u32 {
        values.div_ceil(self.values_per_packet) as u32
    }
}

/// A TX buffer's registers.
#[derive(Debug, Clone, PartialEq)]
pub struct Tx {
    pub packets: u32,
    /// Next SeqNum to send.
    pub next: u32,
    /// One past the highest SeqNum ever sent.
    pub high: u32,
    /// TX Ack: the receiver's next expected SeqNum.
    pub ack: u32,
    /// TX Credit: the largest SeqNum the receiver can accept.
    pub credit: u32,
    /// When the Ack last advanced (or the first packet after an idle period was sent).
    pub last_progress: Nanos,
    pub sent: u64,
    pub resends: u64,
    pub stalls: u64,
}

impl Tx {
    /// Credits start at the receiver's empty buffer (known at initialisation).
    pub fn new(packets: u32, window: usize) -> Tx {
        Tx {
            packets,
            next: 0,
            high: 0,
            ack: 0,
            credit: window as u32 - 1,
            last_progress: 0,
            sent: 0,
            resends: 0,
            stalls: 0,
        }
    }

    /// The SeqNum to send now, if any: data left and within the credit.
    pub fn ready(&self) -> Option<u32> {
        (self.next < self.packets && self.next <= self.credit).then_some(self.next)
    }

    /// Account the packet `ready()` named as sent.
    pub fn on_sent(&mut self, now: Nanos) {
        if self.next < self.high {
            self.resends += 1;
        }
        if self.ack >= self.high {
            // nothing was outstanding: the stall clock starts now
            self.last_progress = now;
        }
        self.next += 1;
        self.sent += 1;
        self.high = self.high.max(self.next);
    }

    /// A heartbeat with the receiver's Ack and Credit (both only ever grow; a reordered older
    /// heartbeat is ignored, and an Ack beyond what was sent is clamped).
    pub fn on_heartbeat(&mut self, now: Nanos, ack: u32, credit: u32) {
        let ack = ack.min(self.high);
        if ack > self.ack {
            self.ack = ack;
            self.last_progress = now;
        }
        self.next = self.next.max(self.ack);
        self.credit = self.credit.max(credit);
    }

    /// When the stall check fires, if packets are outstanding.
    pub fn deadline(&self, timeout: u64) -> Option<Nanos> {
        (self.ack < self.high).then(|| self.last_progress + timeout)
    }

    /// The stall check: resend from Ack when the Ack has not moved for `timeout`.
    pub fn on_timeout(&mut self, now: Nanos, timeout: u64) {
        if self.ack < self.high && now >= self.last_progress + timeout {
            self.next = self.ack;
            self.last_progress = now;
            self.stalls += 1;
        }
    }

    pub fn done(&self) -> bool {
        self.ack >= self.packets
    }
}

/// What happened to a data packet offered to an RX buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accept {
    Stored,
    Duplicate,
    /// No slot for its SeqNum: the RX buffer would overflow (dropped).
    Overflow,
    /// A SeqNum beyond the transfer or a wrong length (dropped).
    Invalid,
}

/// An RX buffer and its registers.
#[derive(Debug, Clone)]
pub struct Rx {
    pub packets: u32,
    depth: u32,
    values_per_packet: usize,
    slots: Vec<Option<Vec<i32>>>,
    /// RX Ack: the first SeqNum not yet received.
    pub ack: u32,
    /// Packets drained by the consumer (in SeqNum order).
    pub consumed: u32,
    /// Everything drained, in order.
    pub out: Vec<i32>,
    pub overflows: u64,
    pub duplicates: u64,
    pub invalid: u64,
    /// Consumer pacing: when the consumer is free again (ns, fractional) and its cost per packet.
    busy_until: f64,
    drain_ns: f64,
}

impl Rx {
    pub fn new(packets: u32, depth: usize, values_per_packet: usize, drain_ns: f64) -> Rx {
        Rx {
            packets,
            depth: depth as u32,
            values_per_packet,
            slots: vec![None; depth],
            ack: 0,
            consumed: 0,
            out: Vec::with_capacity(packets as usize * values_per_packet),
            overflows: 0,
            duplicates: 0,
            invalid: 0,
            busy_until: 0.0,
            drain_ns,
        }
    }

    /// RX Credit: the largest SeqNum the buffer can accept.
    pub fn credit(&self) -> u32 {
        self.consumed + self.depth - 1
    }

    pub fn accept(&mut self, seq: u32, values: Vec<i32>) -> Accept {
        if seq >= self.packets || values.len() != self.values_per_packet {
            self.invalid += 1;
            return Accept::Invalid;
        }
        if seq < self.ack {
            self.duplicates += 1;
            return Accept::Duplicate;
        }
        if seq >= self.consumed + self.depth {
            self.overflows += 1;
            return Accept::Overflow;
        }
        let slot = &mut self.slots[(seq % self.depth) as usize];
        if slot.is_some() {
            self.duplicates += 1;
            return Accept::Duplicate;
        }
        *slot = Some(values);
        while self.ack < self.packets
            && self.ack < self.consumed + self.depth
            && self.slots[(self.ack % self.depth) as usize].is_some()
        {
            self.ack += 1;
        }
        Accept::Stored
    }

    /// Let the consumer drain what it can by `now`.
    pub fn drain(&mut self, now: Nanos) {
        let now_f = now as f64;
        while self.consumed < self.ack && self.busy_until <= now_f {
            let i = (self.consumed % self.depth) as usize;
            if let Some(v) = self.slots[i].take() {
                self.out.extend_from_slice(&v);
            }
            self.consumed += 1;
            self.busy_until = self.busy_until.max(now_f) + self.drain_ns;
        }
    }

    /// When the consumer next wants to run.
    pub fn deadline(&self) -> Option<Nanos> {
        (self.consumed < self.ack).then(|| self.busy_until.ceil() as Nanos)
    }

    pub fn done(&self) -> bool {
        self.consumed >= self.packets
    }
}

/// Counters of one NIC.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NicStats {
    pub data_tx: u64,
    pub heartbeats_tx: u64,
    pub heartbeat_bytes_tx: u64,
    pub bytes_tx: u64,
    pub heartbeats_rx: u64,
    pub malformed_rx: u64,
    pub unexpected_rx: u64,
    /// First packet sent.
    pub start_ns: Option<Nanos>,
    /// The RX side consumed its last packet.
    pub rx_done_ns: Option<Nanos>,
    /// The TX side saw its last Ack.
    pub tx_done_ns: Option<Nanos>,
}

/// One NIC transport: a TX stream, an RX stream and heartbeats. The WorkerNIC and the AggNIC
/// differ only in which kinds they send and accept, and in the stall wait.
#[derive(Debug, Clone)]
pub struct Nic {
    id: NodeId,
    switch: NodeId,
    src: u8,
    values_per_packet: usize,
    /// What this NIC sends (the TX buffer's whole content) and with which kind.
    data: Vec<i32>,
    data_kind: Kind,
    max: bool,
    pub tx: Tx,
    pub rx: Rx,
    /// Kind of the data this NIC receives and of the heartbeat it sends about it.
    rx_kind: Kind,
    hb_kind: Kind,
    /// Heartbeat kind that updates the TX registers.
    tx_hb_kind: Kind,
    heartbeat_ns: u64,
    next_hb: Option<Nanos>,
    hb_due: bool,
    timeout_ns: u64,
    pub stats: NicStats,
}

impl Nic {
    fn new(cfg: &Config, id: NodeId, data: Vec<i32>, max: bool, rx_packets: u32) -> Nic {
        let is_agg = id == cfg.agg_id();
        let (data_kind, rx_kind, hb_kind, tx_hb_kind, src, rate, timeout) = if is_agg {
            (
                Kind::Param,
                Kind::AggGrad,
                Kind::GradHeartbeat,
                Kind::ParamHeartbeat,
                SRC_AGG,
                cfg.agg_consumer_rate,
                cfg.resend_timeout_ns,
            )
        } else {
            (
                Kind::Grad,
                Kind::Param,
                Kind::ParamHeartbeat,
                Kind::GradHeartbeat,
                id as u8,
                cfg.consumer_rate.get(id as usize).copied().unwrap_or(1.0),
                cfg.resend_timeout_ns + u64::from(id) * cfg.stagger_ns,
            )
        };
        let tx_packets = cfg.packets(data.len());
        let mut data = data;
        data.resize(tx_packets as usize * cfg.values_per_packet, 0);
        Nic {
            id,
            switch: cfg.switch_id(),
            src,
            values_per_packet: cfg.values_per_packet,
            data,
            data_kind,
            max,
            tx: Tx::new(tx_packets, cfg.window),
            rx: Rx::new(
                rx_packets,
                cfg.window,
                cfg.values_per_packet,
                cfg.drain_ns(rate),
            ),
            rx_kind,
            hb_kind,
            tx_hb_kind,
            heartbeat_ns: cfg.heartbeat_ns.max(1),
            next_hb: None,
            hb_due: false,
            timeout_ns: timeout,
            stats: NicStats::default(),
        }
    }

    /// A WorkerNIC pushing `grad` (padded to whole packets) and pulling `param_values` values.
    pub fn worker(cfg: &Config, w: usize, grad: Vec<i32>, max: bool, param_values: usize) -> Nic {
        Nic::new(cfg, w as NodeId, grad, max, cfg.packets(param_values))
    }

    /// The AggNIC pushing `params` and pulling `grad_values` aggregated values.
    pub fn agg(cfg: &Config, params: Vec<i32>, grad_values: usize) -> Nic {
        Nic::new(cfg, cfg.agg_id(), params, false, cfg.packets(grad_values))
    }

    fn note_done(&mut self, now: Nanos) {
        if self.rx.done() && self.stats.rx_done_ns.is_none() {
            self.stats.rx_done_ns = Some(now);
        }
        if self.tx.done() && self.stats.tx_done_ns.is_none() {
            self.stats.tx_done_ns = Some(now);
        }
    }

    fn heartbeat(&mut self) -> Transmit {
        let h = Repr {
            kind: self.hb_kind,
            src: self.src,
            max: false,
            seq: self.rx.ack,
            credit: self.rx.credit(),
            count: 0,
        };
        let bytes = packet::frame(self.id, self.switch, h, &[]);
        self.stats.heartbeats_tx += 1;
        self.stats.heartbeat_bytes_tx += bytes.len() as u64;
        self.stats.bytes_tx += bytes.len() as u64;
        Transmit {
            to: self.switch,
            bytes,
        }
    }
}

impl Endpoint for Nic {
    fn id(&self) -> NodeId {
        self.id
    }

    fn handle_packet(&mut self, now: Nanos, _from: NodeId, frame: &[u8]) {
        let (h, values) = match packet::parse(frame) {
            Ok(p) => p,
            Err(_) => {
                self.stats.malformed_rx += 1;
                return;
            }
        };
        if h.kind == self.rx_kind {
            self.rx.accept(h.seq, values);
            self.rx.drain(now);
        } else if h.kind == self.tx_hb_kind {
            self.stats.heartbeats_rx += 1;
            self.tx.on_heartbeat(now, h.seq, h.credit);
        } else {
            self.stats.unexpected_rx += 1;
        }
        self.note_done(now);
    }

    fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        if self.next_hb.is_none() {
            // start: the first heartbeat goes out at once, then every interval
            self.next_hb = Some(now + self.heartbeat_ns);
            self.hb_due = true;
            self.stats.start_ns = Some(now);
        }
        if self.hb_due {
            self.hb_due = false;
            return Some(self.heartbeat());
        }
        let seq = self.tx.ready()?;
        let a = seq as usize * self.values_per_packet;
        let h = Repr {
            kind: self.data_kind,
            src: self.src,
            max: self.max,
            seq,
            credit: 0,
            count: 0,
        };
        let bytes = packet::frame(
            self.id,
            self.switch,
            h,
            &self.data[a..a + self.values_per_packet],
        );
        self.tx.on_sent(now);
        self.stats.data_tx += 1;
        self.stats.bytes_tx += bytes.len() as u64;
        Some(Transmit {
            to: self.switch,
            bytes,
        })
    }

    fn poll_timeout(&self) -> Option<Nanos> {
        [
            self.next_hb,
            self.tx.deadline(self.timeout_ns),
            self.rx.deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn handle_timeout(&mut self, now: Nanos) {
        if let Some(t) = self.next_hb
            && t <= now
        {
            self.hb_due = true;
            self.next_hb = Some(now + self.heartbeat_ns);
        }
        self.tx.on_timeout(now, self.timeout_ns);
        self.rx.drain(now);
        self.note_done(now);
    }

    fn is_done(&self) -> bool {
        self.tx.done() && self.rx.done()
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("resends", self.tx.resends),
            ("stalls", self.tx.stalls),
            ("rx_overflows", self.rx.overflows),
            ("rx_duplicates", self.rx.duplicates),
            ("malformed", self.stats.malformed_rx),
            ("heartbeats_tx", self.stats.heartbeats_tx),
        ]
    }
}
