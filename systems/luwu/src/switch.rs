//! The SmartSwitch program (Sec. 3.2.3), sans-IO, with its four units:
//!
//! - parameter broadcast: a parameter packet from the AggNIC goes to every WorkerNIC;
//! - gradient aggregation: a table of `window` entries indexed by SeqNum mod `window`; each entry
//!   holds the SeqNum it serves, a sum of `values_per_packet` 32-bit integers and a bitmap with a
//!   bit per WorkerNIC. When the bitmap is full the aggregate goes to the AggNIC;
//! - heartbeat broadcast: a gradient heartbeat from the AggNIC goes to every WorkerNIC;
//! - heartbeat aggregation: a table indexed by worker with the latest Ack and Credit of each
//!   WorkerNIC; their minimums go to the AggNIC as a parameter heartbeat.
//!
//! Choices where the paper is silent (or its text is ambiguous), with our reasons:
//!
//! - A completed entry keeps its aggregate until the slot is reused by SeqNum + window (the
//!   paper clears data and bitmap on completion; a footnote we do not have qualifies it). A
//!   resent gradient whose aggregate is complete is answered by forwarding the stored aggregate
//!   again, so a lost aggregate is recovered by the first worker that resends (SwitchML answers a
//!   resent chunk of a finished slot the same way). Clearing at completion would need every
//!   worker to resend and the switch to re-aggregate from scratch.
//! - Reusing a slot is safe: a worker sends SeqNum s only if s <= its TX Credit, which lags the
//!   AggNIC's RX Credit = consumed + depth - 1, and the AggNIC's RX depth equals the table size
//!   (the paper: "we limit the RX buffer depth of the AggNIC ... not greater than the switch
//!   window size"), so s - window was already consumed by the AggNIC. A packet for a SeqNum older
//!   than its slot's entry is therefore stale and dropped.
//! - The aggregated parameter heartbeat: the paper says it is sent "when a parameter heartbeat
//!   packet from a non-leader WorkerNIC arrives". We follow the words: every WorkerNIC's heartbeat
//!   updates its table entry; a non-leader's (any worker but 0) also sends the minimums to the
//!   AggNIC, so the AggNIC hears workers - 1 aggregates per interval, each as fresh as the worker
//!   that triggered it. (Sending one aggregate per interval, on the leader's heartbeat, was our
//!   first reading: minimums taken up to an interval after the other workers reported leave the
//!   AggNIC's credit up to two intervals stale, and pull goodput fell to 0.76 of line rate in the
//!   simulator at a window of four intervals.) Minimums over older values are conservative.
//! - Flags bit 0 asks for max instead of sum (SwitchML's exponent negotiation, used by the
//!   training's float conversion); an entry keeps the operation of its first packet.
//!
//! Target budget (the suite's Tofino model, NetReduce Sec. 6: 12 stages x 4 32-bit register
//! arrays, 192 bytes of values per pass): a 256-byte payload (64 values) takes two passes, so each
//! gradient packet recirculates once, which [`crate::switch::SmartSwitch::pipeline`] counts. The table is
//! `window` x (64 x 4 B sum + 4 B SeqNum + 4 B bitmap) = 66 KiB for 256 entries, plus 8 x 8 B of
//! heartbeat table; the paper's Table 4 reports 48 MiB of SRAM used, so the size is no constraint.

use crate::packet::{self, Kind, Repr, SRC_SWITCH};
use crate::transport::Config;
use inabench_fabric::{Endpoint, Nanos, NodeId, Transmit};
use inabench_ina::tofino::{Pipeline, Recirculation, TofinoModel};
use std::collections::VecDeque;

#[derive(Debug, Clone)]
struct Entry {
    used: bool,
    seq: u32,
    bitmap: u64,
    complete: bool,
    max: bool,
    sum: Vec<i32>,
}

/// What the switch counted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SwitchStats {
    pub packets_in: u64,
    pub malformed: u64,
    /// Packets whose kind or source does not belong on the port they came from.
    pub misdirected: u64,
    pub aggregates_out: u64,
    /// Stored aggregates forwarded again on a resend.
    pub reforwarded: u64,
    pub duplicates: u64,
    pub stale: u64,
    /// Entries reused before they completed (must stay 0: the credit argument above).
    pub evicted_incomplete: u64,
    pub op_conflicts: u64,
    pub param_broadcasts: u64,
    pub heartbeats_in: u64,
    pub heartbeats_out: u64,
    pub heartbeat_bytes_out: u64,
    /// Bytes the switch sent on each egress port (by node id).
    pub bytes_out: Vec<u64>,
}

/// The SmartSwitch.
pub struct SmartSwitch {
    id: NodeId,
    workers: usize,
    agg: NodeId,
    values_per_packet: usize,
    table: Vec<Entry>,
    /// Per worker: latest (Ack, Credit) of its parameter RX buffer.
    heartbeats: Vec<(u32, u32)>,
    out: VecDeque<Transmit>,
    pub pipeline: Pipeline,
    pub stats: SwitchStats,
}

impl SmartSwitch {
    pub fn new(cfg: &Config) -> SmartSwitch {
        SmartSwitch {
            id: cfg.switch_id(),
            workers: cfg.workers,
            agg: cfg.agg_id(),
            values_per_packet: cfg.values_per_packet,
            table: vec![
                Entry {
                    used: false,
                    seq: 0,
                    bitmap: 0,
                    complete: false,
                    max: false,
                    sum: vec![0; cfg.values_per_packet],
                };
                cfg.window
            ],
            heartbeats: vec![(0, cfg.window as u32 - 1); cfg.workers],
            out: VecDeque::new(),
            pipeline: Pipeline::new(TofinoModel::PAPER, Recirculation::SamePipeline),
            stats: SwitchStats {
                bytes_out: vec![0; cfg.workers + 2],
                ..SwitchStats::default()
            },
        }
    }

    fn send(&mut self, to: NodeId, bytes: Vec<u8>, heartbeat: bool) {
        if let Some(b) = self.stats.bytes_out.get_mut(to as usize) {
            *b += bytes.len() as u64;
        }
        if heartbeat {
            self.stats.heartbeats_out += 1;
            self.stats.heartbeat_bytes_out += bytes.len() as u64;
        }
        self.out.push_back(Transmit { to, bytes });
    }

    fn broadcast(&mut self, frame: &[u8], heartbeat: bool) {
        for w in 0..self.workers {
            self.send(w as NodeId, frame.to_vec(), heartbeat);
        }
    }

    fn forward_aggregate(&mut self, slot: usize) {
        let e = &self.table[slot];
        let h = Repr {
            kind: Kind::AggGrad,
            src: SRC_SWITCH,
            max: e.max,
            seq: e.seq,
            credit: 0,
            count: 0,
        };
        let bytes = packet::frame(self.id, self.agg, h, &e.sum);
        self.stats.aggregates_out += 1;
        self.send(self.agg, bytes, false);
    }

    fn gradient(&mut self, w: usize, h: &Repr, values: &[i32]) {
        self.pipeline.process(0, (4 * values.len()) as u32);
        let n = self.table.len();
        let slot = h.seq as usize % n;
        let full = if self.workers == 64 {
            u64::MAX
        } else {
            (1u64 << self.workers) - 1
        };
        let e = &mut self.table[slot];
        if !e.used || e.seq < h.seq {
            if e.used && !e.complete {
                self.stats.evicted_incomplete += 1;
            }
            e.used = true;
            e.seq = h.seq;
            e.bitmap = 0;
            e.complete = false;
            e.max = h.max;
            e.sum.copy_from_slice(values);
        } else if e.seq > h.seq {
            self.stats.stale += 1;
            return;
        } else if e.max != h.max {
            self.stats.op_conflicts += 1;
            return;
        } else if e.bitmap & (1 << w) != 0 {
            self.stats.duplicates += 1;
            if e.complete {
                self.stats.reforwarded += 1;
                self.forward_aggregate(slot);
            }
            return;
        } else if e.max {
            for (a, x) in e.sum.iter_mut().zip(values) {
                *a = (*a).max(*x);
            }
        } else {
            for (a, x) in e.sum.iter_mut().zip(values) {
                *a = a.wrapping_add(*x);
            }
        }
        e.bitmap |= 1 << w;
        if e.bitmap == full {
            e.complete = true;
            self.forward_aggregate(slot);
        }
    }
}

impl Endpoint for SmartSwitch {
    fn id(&self) -> NodeId {
        self.id
    }

    fn handle_packet(&mut self, _now: Nanos, from: NodeId, frame: &[u8]) {
        self.stats.packets_in += 1;
        let (h, values) = match packet::parse(frame) {
            Ok(p) => p,
            Err(_) => {
                self.stats.malformed += 1;
                return;
            }
        };
        let from_agg = from == self.agg && h.src == packet::SRC_AGG;
        let from_worker = (from as usize) < self.workers && u32::from(h.src) == from;
        match h.kind {
            Kind::Param if from_agg && values.len() == self.values_per_packet => {
                self.stats.param_broadcasts += 1;
                self.broadcast(frame, false);
            }
            Kind::GradHeartbeat if from_agg => {
                self.stats.heartbeats_in += 1;
                self.broadcast(frame, true);
            }
            Kind::Grad if from_worker && values.len() == self.values_per_packet => {
                self.gradient(from as usize, &h, &values);
            }
            Kind::ParamHeartbeat if from_worker => {
                self.stats.heartbeats_in += 1;
                let e = &mut self.heartbeats[from as usize];
                e.0 = e.0.max(h.seq);
                e.1 = e.1.max(h.credit);
                if from != 0 || self.workers == 1 {
                    let ack = self.heartbeats.iter().map(|x| x.0).min().unwrap_or(0);
                    let credit = self.heartbeats.iter().map(|x| x.1).min().unwrap_or(0);
                    let hb = Repr {
                        kind: Kind::ParamHeartbeat,
                        src: SRC_SWITCH,
                        max: false,
                        seq: ack,
                        credit,
                        count: 0,
                    };
                    let bytes = packet::frame(self.id, self.agg, hb, &[]);
                    self.send(self.agg, bytes, true);
                }
            }
            _ => self.stats.misdirected += 1,
        }
    }

    fn poll_transmit(&mut self, _now: Nanos) -> Option<Transmit> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Nanos> {
        None
    }

    fn handle_timeout(&mut self, _now: Nanos) {}

    fn is_done(&self) -> bool {
        true
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("switch_in", self.stats.packets_in),
            ("aggregates_out", self.stats.aggregates_out),
            ("reforwarded", self.stats.reforwarded),
            ("evicted_incomplete", self.stats.evicted_incomplete),
        ]
    }
}
