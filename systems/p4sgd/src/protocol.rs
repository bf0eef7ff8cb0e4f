//! P4SGD's latency-centric in-switch aggregation (Sec. 3.3, Algorithms 2 and 3) as two sans-IO
//! state machines: [`P4sgdSwitch`] (the P4 program, on the Tofino pipeline model) and
//! [`P4sgdWorker`] (the FPGA worker's transport).
//!
//! Algorithms 2 and 3 are figures whose text did not survive in the paper text we have; they are
//! rebuilt here from the prose of Sec. 3.3 and 4.2:
//!
//! Switch (Alg. 2), per slot: ONE copy of the aggregate (no shadow copy), an aggregation counter
//! and bitmap, an acknowledgement counter and bitmap.
//! - Aggregation packet from worker w: if w's bit is not in the aggregation bitmap, add the values
//!   (the first contribution overwrites the old aggregate), set the bit, count; when the count
//!   reaches N, reset the acknowledgement set and multicast the full activation to all workers.
//!   A duplicate (bit set) after completion means w lost the result: unicast it again; a
//!   duplicate before completion is dropped.
//! - Acknowledgement from w (the slot complete): set w's bit in the acknowledgement bitmap, count;
//!   when all N acknowledged, clear the aggregation counter and bitmap (the slot is free) and
//!   multicast the confirmation (`ack_done`). A retransmitted acknowledgement after that (w lost
//!   the confirmation) is answered with a unicast confirmation; the acknowledgement set stays
//!   complete until the slot's next aggregation completes, by which time every worker has the
//!   confirmation (none sends its next contribution without it).
//!
//! Worker (Alg. 3): operation k uses slot k mod S. Send the partial activation with the node
//! bitmap and start a timer; on the full activation, deliver it, cancel the timer, send an
//! acknowledgement and start a timer; re-enable the slot only on the switch's confirmation
//! (cancel the timer); on a timer, retransmit what is outstanding.
//!
//! Our addition: a per-slot `round` (how many times the slot was used) in the header and a round
//! register on the switch (our register layout packs it beside the bitmaps). Without it, the four
//! fields of Fig. 4 cannot tell a delayed duplicate of round r's contribution from round r+1's,
//! and a network that duplicates or reorders (our fabric's faults) corrupts an aggregate:
//! `SwitchConfig::check_rounds = false` runs the paper's fields alone, and a test shows the
//! corruption. With rounds, everything stale is dropped.

use crate::wire::{self, Kind, Repr};
use inabench_fabric::{Endpoint, Nanos, NodeId, Transmit};
use inabench_ina::tofino::{Pipeline, Recirculation, TofinoModel};
use std::collections::{BTreeSet, VecDeque};

/// The paper's register arrays: 64K entries (16-bit indices), Sec. 4.2.
pub const PAPER_SLOTS: usize = 65_536;
/// The paper's payload: 8 partial activations of 32 bits (one micro-batch, Sec. 4.1.2).
pub const PAPER_ELEMENTS: usize = 8;
/// Stages the paper's program occupies (Sec. 4.2).
pub const PAPER_STAGES: usize = 4;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("an operation needs {want} values, {got} given")]
    Length { want: usize, got: usize },
    #[error("wire: {0}")]
    Wire(#[from] inabench_wire::Error),
}

/// Where the switch program's register arrays sit in the pipeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageLayout {
    /// Register arrays per stage, by name.
    pub stages: Vec<Vec<String>>,
    /// SRAM the arrays of each stage take, bytes.
    pub bytes_per_stage: Vec<usize>,
}

impl StageLayout {
    /// The layout for `elements` values per slot and `slots` slots on `model`: stage 0 the
    /// bitmaps (each packed with the slot's round), stage 1 the two counters, then the value
    /// arrays, `registers_per_stage` per stage (one access per array per pass).
    pub fn new(
        model: &TofinoModel,
        slots: usize,
        elements: usize,
    ) -> Result<StageLayout, ProtocolError> {
        let per = model.registers_per_stage as usize;
        if per < 2 {
            return Err(ProtocolError::Config(
                "the program needs two register arrays per stage".into(),
            ));
        }
        let mut stages = vec![
            vec!["agg_bitmap+round".to_string(), "ack_bitmap".to_string()],
            vec!["agg_count".to_string(), "ack_count".to_string()],
        ];
        let names: Vec<String> = (0..elements).map(|i| format!("agg[{i}]")).collect();
        for c in names.chunks(per) {
            stages.push(c.to_vec());
        }
        if stages.len() > model.stages as usize {
            return Err(ProtocolError::Config(format!(
                "{elements} values per slot need {} stages; the pipeline has {}",
                stages.len(),
                model.stages
            )));
        }
        let cell = model.register_bytes as usize;
        let bytes_per_stage = stages.iter().map(|s| s.len() * slots * cell).collect();
        Ok(StageLayout {
            stages,
            bytes_per_stage,
        })
    }
}

/// Switch SRAM per slot: P4SGD keeps one copy of the aggregate plus two bitmaps and two counters;
/// SwitchML (as the paper describes it) keeps two shadow copies, each with its bitmap and counter.
/// Returns (P4SGD bytes per slot, SwitchML bytes per slot) for `elements` 32-bit values.
pub fn bytes_per_slot(elements: usize) -> (usize, usize) {
    (4 * elements + 4 * 4, 2 * (4 * elements + 2 * 4))
}

#[derive(Debug, Clone)]
pub struct SwitchConfig {
    pub workers: usize,
    pub slots: usize,
    pub elements: usize,
    /// Check the per-slot round (our addition); `false` runs the paper's header fields alone.
    pub check_rounds: bool,
    pub model: TofinoModel,
}

impl SwitchConfig {
    pub fn paper(workers: usize) -> SwitchConfig {
        SwitchConfig {
            workers,
            slots: PAPER_SLOTS,
            elements: PAPER_ELEMENTS,
            check_rounds: true,
            model: TofinoModel::PAPER,
        }
    }
}

/// What the switch counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SwitchCounters {
    pub packets_in: u64,
    pub packets_out: u64,
    pub aggregated: u64,
    pub completed: u64,
    pub results_resent: u64,
    pub confirmations: u64,
    pub confirmations_resent: u64,
    pub duplicates: u64,
    pub stale: u64,
    pub malformed: u64,
}

/// The P4SGD switch program (Alg. 2).
pub struct P4sgdSwitch {
    id: NodeId,
    cfg: SwitchConfig,
    agg: Vec<i32>,
    agg_bitmap: Vec<u32>,
    agg_count: Vec<u8>,
    ack_bitmap: Vec<u32>,
    ack_count: Vec<u8>,
    round: Vec<u16>,
    pub layout: StageLayout,
    pub pipeline: Pipeline,
    out: VecDeque<Transmit>,
    pub counters: SwitchCounters,
}

impl P4sgdSwitch {
    pub fn new(id: NodeId, cfg: SwitchConfig) -> Result<P4sgdSwitch, ProtocolError> {
        if cfg.workers == 0 || cfg.workers > 32 {
            return Err(ProtocolError::Config(format!(
                "1..32 workers (a 32-bit node bitmap), not {}",
                cfg.workers
            )));
        }
        if cfg.slots == 0 || cfg.slots > PAPER_SLOTS {
            return Err(ProtocolError::Config(format!(
                "1..65536 slots (16-bit indices), not {}",
                cfg.slots
            )));
        }
        if cfg.elements == 0 || cfg.elements > wire::MAX_VALUES {
            return Err(ProtocolError::Config(format!(
                "1..255 values per packet, not {}",
                cfg.elements
            )));
        }
        let layout = StageLayout::new(&cfg.model, cfg.slots, cfg.elements)?;
        Ok(P4sgdSwitch {
            id,
            agg: vec![0; cfg.slots * cfg.elements],
            agg_bitmap: vec![0; cfg.slots],
            agg_count: vec![0; cfg.slots],
            ack_bitmap: vec![0; cfg.slots],
            ack_count: vec![0; cfg.slots],
            round: vec![0; cfg.slots],
            layout,
            pipeline: Pipeline::new(cfg.model, Recirculation::SamePipeline),
            out: VecDeque::new(),
            counters: SwitchCounters::default(),
            cfg,
        })
    }

    fn send(&mut self, to: usize, r: &Repr) {
        // the frame always fits: counts and values were checked when the switch was built
        if let Ok(bytes) = wire::frame(self.id, to as u32, r) {
            self.counters.packets_out += 1;
            self.out.push_back(Transmit {
                to: to as NodeId,
                bytes,
            });
        }
    }

    fn result(&self, s: usize) -> Repr {
        let e = self.cfg.elements;
        Repr {
            bitmap: 0,
            slot: s as u16,
            round: self.round[s],
            kind: Kind::Result,
            values: self.agg[s * e..(s + 1) * e].to_vec(),
        }
    }

    fn confirmation(s: usize, round: u16) -> Repr {
        Repr {
            bitmap: 0,
            slot: s as u16,
            round,
            kind: Kind::AckDone,
            values: Vec::new(),
        }
    }

    fn on_aggregate(&mut self, w: usize, bit: u32, s: usize, r: &Repr) {
        let n = self.cfg.workers;
        if self.cfg.check_rounds && r.round != self.round[s] {
            self.counters.stale += 1;
            return;
        }
        if self.agg_bitmap[s] & bit != 0 {
            self.counters.duplicates += 1;
            if usize::from(self.agg_count[s]) == n {
                // w lost the full activation: send it again, to w only
                self.counters.results_resent += 1;
                let res = self.result(s);
                self.send(w, &res);
            }
            return;
        }
        let e = self.cfg.elements;
        let cell = &mut self.agg[s * e..(s + 1) * e];
        if self.agg_count[s] == 0 {
            cell.copy_from_slice(&r.values);
        } else {
            for (a, x) in cell.iter_mut().zip(&r.values) {
                *a = a.wrapping_add(*x);
            }
        }
        self.agg_bitmap[s] |= bit;
        self.agg_count[s] += 1;
        self.counters.aggregated += 1;
        if usize::from(self.agg_count[s]) == n {
            self.counters.completed += 1;
            // every worker sent this round, so every worker has the previous confirmation:
            // the acknowledgement set starts over for this round
            self.ack_bitmap[s] = 0;
            self.ack_count[s] = 0;
            let res = self.result(s);
            for to in 0..n {
                self.send(to, &res);
            }
        }
    }

    fn on_ack(&mut self, w: usize, bit: u32, s: usize, r: &Repr) {
        let n = self.cfg.workers;
        let complete = usize::from(self.agg_count[s]) == n;
        let current = !self.cfg.check_rounds || r.round == self.round[s];
        let previous = !self.cfg.check_rounds || r.round == self.round[s].wrapping_sub(1);
        if complete && current {
            if self.ack_bitmap[s] & bit != 0 {
                self.counters.duplicates += 1;
                return;
            }
            self.ack_bitmap[s] |= bit;
            self.ack_count[s] += 1;
            if usize::from(self.ack_count[s]) == n {
                // all acknowledged: the aggregate may be dropped and the slot reused
                let done = self.round[s];
                self.agg_bitmap[s] = 0;
                self.agg_count[s] = 0;
                self.round[s] = done.wrapping_add(1);
                self.counters.confirmations += 1;
                let c = Self::confirmation(s, done);
                for to in 0..n {
                    self.send(to, &c);
                }
            }
        } else if !complete && previous && usize::from(self.ack_count[s]) == n {
            // w lost the confirmation of the slot's previous round
            self.counters.confirmations_resent += 1;
            let c = Self::confirmation(s, r.round);
            self.send(w, &c);
        } else {
            self.counters.stale += 1;
        }
    }

    /// Slots whose aggregation is under way or complete but not yet acknowledged by all.
    pub fn busy_slots(&self) -> usize {
        self.agg_count.iter().filter(|c| **c > 0).count()
    }
}

impl Endpoint for P4sgdSwitch {
    fn id(&self) -> NodeId {
        self.id
    }

    fn handle_packet(&mut self, _now: Nanos, _from: NodeId, frame: &[u8]) {
        self.counters.packets_in += 1;
        let Ok((_, r)) = wire::parse_frame(frame) else {
            self.counters.malformed += 1;
            return;
        };
        let s = usize::from(r.slot);
        let w = r.bitmap.trailing_zeros() as usize;
        let valid = r.bitmap.count_ones() == 1 && w < self.cfg.workers && s < self.cfg.slots;
        match r.kind {
            Kind::Aggregate if valid && r.values.len() == self.cfg.elements => {
                self.pipeline
                    .process(frame.len() as u32, (4 * r.values.len()) as u32);
                self.on_aggregate(w, r.bitmap, s, &r);
            }
            Kind::Ack if valid => {
                self.pipeline.process(frame.len() as u32, 0);
                self.on_ack(w, r.bitmap, s, &r);
            }
            _ => self.counters.malformed += 1,
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
        let c = &self.counters;
        vec![
            ("switch_in", c.packets_in),
            ("completed", c.completed),
            ("results_resent", c.results_resent),
            ("confirmations_resent", c.confirmations_resent),
            ("duplicates", c.duplicates),
            ("stale", c.stale),
            ("malformed", c.malformed),
        ]
    }
}

#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub rank: usize,
    pub workers: usize,
    pub switch: NodeId,
    /// Slots this job uses (operation k takes slot k mod `slots`).
    pub slots: usize,
    pub elements: usize,
    /// Retransmission timeout.
    pub rto_ns: u64,
}

/// One finished all-reduce as a worker saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completed {
    pub op: u64,
    pub values: Vec<i32>,
    pub submitted_ns: Nanos,
    pub done_ns: Nanos,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerCounters {
    pub packets_tx: u64,
    pub packets_rx: u64,
    pub wire_bytes_tx: u64,
    pub retransmissions: u64,
    pub duplicates: u64,
    pub stale: u64,
    pub malformed: u64,
}

#[derive(Debug, Clone)]
enum Slot {
    Free,
    /// Partial activation sent, waiting for the full activation.
    Agg {
        op: u64,
        values: Vec<i32>,
        submitted_ns: Nanos,
        deadline: Nanos,
    },
    /// Acknowledgement sent, waiting for the switch's confirmation.
    Ack {
        op: u64,
        deadline: Nanos,
    },
}

/// The FPGA worker's transport (Alg. 3).
pub struct P4sgdWorker {
    cfg: WorkerConfig,
    slots: Vec<Slot>,
    /// The deadline of every slot that is not free, ordered (one entry per busy slot).
    timers: BTreeSet<(Nanos, usize)>,
    pending: VecDeque<(u64, Vec<i32>, Nanos)>,
    submitted: u64,
    delivered: u64,
    completed: VecDeque<Completed>,
    out: VecDeque<Transmit>,
    pub counters: WorkerCounters,
}

impl P4sgdWorker {
    pub fn new(cfg: WorkerConfig) -> Result<P4sgdWorker, ProtocolError> {
        if cfg.rank >= cfg.workers || cfg.workers > 32 {
            return Err(ProtocolError::Config(format!(
                "rank {} of {} workers (at most 32)",
                cfg.rank, cfg.workers
            )));
        }
        if cfg.slots == 0 || cfg.slots > PAPER_SLOTS || cfg.elements == 0 || cfg.rto_ns == 0 {
            return Err(ProtocolError::Config(
                "1..65536 slots, at least one value and a timeout above zero".into(),
            ));
        }
        Ok(P4sgdWorker {
            slots: vec![Slot::Free; cfg.slots],
            timers: BTreeSet::new(),
            pending: VecDeque::new(),
            submitted: 0,
            delivered: 0,
            completed: VecDeque::new(),
            out: VecDeque::new(),
            counters: WorkerCounters::default(),
            cfg,
        })
    }

    pub fn rank(&self) -> usize {
        self.cfg.rank
    }

    /// Queue an all-reduce of `values` (a partial activation vector); returns its operation
    /// number. It is sent as soon as its slot is free.
    pub fn submit(&mut self, now: Nanos, values: Vec<i32>) -> Result<u64, ProtocolError> {
        if values.len() != self.cfg.elements {
            return Err(ProtocolError::Length {
                want: self.cfg.elements,
                got: values.len(),
            });
        }
        let op = self.submitted;
        self.submitted += 1;
        self.pending.push_back((op, values, now));
        self.pump(now);
        Ok(op)
    }

    /// The next finished all-reduce, in completion order.
    pub fn take_completed(&mut self) -> Option<Completed> {
        self.completed.pop_front()
    }

    /// Operations submitted and not yet delivered.
    pub fn in_flight(&self) -> u64 {
        self.submitted - self.delivered
    }

    fn slot_of(&self, op: u64) -> (usize, u16) {
        let s = self.cfg.slots as u64;
        ((op % s) as usize, (op / s) as u16)
    }

    fn emit(&mut self, r: &Repr) {
        if let Ok(bytes) = wire::frame(self.cfg.rank as u32, self.cfg.switch, r) {
            self.counters.packets_tx += 1;
            self.counters.wire_bytes_tx += bytes.len() as u64;
            self.out.push_back(Transmit {
                to: self.cfg.switch,
                bytes,
            });
        }
    }

    fn aggregate(&self, op: u64, values: &[i32]) -> Repr {
        let (s, round) = self.slot_of(op);
        Repr {
            bitmap: 1 << self.cfg.rank,
            slot: s as u16,
            round,
            kind: Kind::Aggregate,
            values: values.to_vec(),
        }
    }

    fn ack(&self, op: u64) -> Repr {
        let (s, round) = self.slot_of(op);
        Repr {
            bitmap: 1 << self.cfg.rank,
            slot: s as u16,
            round,
            kind: Kind::Ack,
            values: Vec::new(),
        }
    }

    /// Send queued operations, in order, while their slots are free.
    fn pump(&mut self, now: Nanos) {
        while let Some((op, _, _)) = self.pending.front() {
            let (s, _) = self.slot_of(*op);
            if !matches!(self.slots[s], Slot::Free) {
                break;
            }
            let Some((op, values, submitted_ns)) = self.pending.pop_front() else {
                break;
            };
            let r = self.aggregate(op, &values);
            self.emit(&r);
            let deadline = now + self.cfg.rto_ns;
            self.slots[s] = Slot::Agg {
                op,
                values,
                submitted_ns,
                deadline,
            };
            self.timers.insert((deadline, s));
        }
    }

    fn free(&mut self, s: usize) {
        if let Slot::Agg { deadline, .. } | Slot::Ack { deadline, .. } = &self.slots[s] {
            self.timers.remove(&(*deadline, s));
        }
        self.slots[s] = Slot::Free;
    }
}

impl Endpoint for P4sgdWorker {
    fn id(&self) -> NodeId {
        self.cfg.rank as NodeId
    }

    fn handle_packet(&mut self, now: Nanos, _from: NodeId, frame: &[u8]) {
        self.counters.packets_rx += 1;
        let Ok((_, r)) = wire::parse_frame(frame) else {
            self.counters.malformed += 1;
            return;
        };
        let s = usize::from(r.slot);
        if s >= self.cfg.slots {
            self.counters.malformed += 1;
            return;
        }
        match (r.kind, &self.slots[s]) {
            (Kind::Result, Slot::Agg { op, .. })
                if self.slot_of(*op).1 == r.round && r.values.len() == self.cfg.elements =>
            {
                let (op, submitted_ns, old) = match &self.slots[s] {
                    Slot::Agg {
                        op,
                        submitted_ns,
                        deadline,
                        ..
                    } => (*op, *submitted_ns, *deadline),
                    _ => return,
                };
                self.completed.push_back(Completed {
                    op,
                    values: r.values,
                    submitted_ns,
                    done_ns: now,
                });
                self.delivered += 1;
                let a = self.ack(op);
                self.emit(&a);
                let deadline = now + self.cfg.rto_ns;
                self.slots[s] = Slot::Ack { op, deadline };
                self.timers.remove(&(old, s));
                self.timers.insert((deadline, s));
            }
            (Kind::Result, Slot::Ack { op, .. }) if self.slot_of(*op).1 == r.round => {
                self.counters.duplicates += 1;
            }
            (Kind::AckDone, Slot::Ack { op, .. }) if self.slot_of(*op).1 == r.round => {
                self.free(s);
                self.pump(now);
            }
            (Kind::Result | Kind::AckDone, _) => self.counters.stale += 1,
            (Kind::Aggregate | Kind::Ack, _) => self.counters.malformed += 1,
        }
    }

    fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        self.pump(now);
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Nanos> {
        self.timers.first().map(|(d, _)| *d)
    }

    fn handle_timeout(&mut self, now: Nanos) {
        let rto = self.cfg.rto_ns;
        let mut due = Vec::new();
        while let Some(&(d, s)) = self.timers.first()
            && d <= now
        {
            self.timers.pop_first();
            due.push(s);
        }
        for s in due {
            // every busy slot has exactly one timer entry; it goes back with its new deadline
            if !matches!(self.slots[s], Slot::Free) {
                self.timers.insert((now + rto, s));
            }
            let resend = match &mut self.slots[s] {
                Slot::Agg {
                    op,
                    values,
                    deadline,
                    ..
                } if *deadline <= now => {
                    *deadline = now + rto;
                    Some((*op, Some(values.clone())))
                }
                Slot::Ack { op, deadline } if *deadline <= now => {
                    *deadline = now + rto;
                    Some((*op, None))
                }
                _ => None,
            };
            if let Some((op, values)) = resend {
                self.counters.retransmissions += 1;
                let r = match values {
                    Some(v) => self.aggregate(op, &v),
                    None => self.ack(op),
                };
                self.emit(&r);
            }
        }
    }

    fn is_done(&self) -> bool {
        self.pending.is_empty() && self.timers.is_empty()
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("retransmissions", self.counters.retransmissions),
            ("active_slots", self.timers.len() as u64),
            ("pending", self.pending.len() as u64),
        ]
    }
}
