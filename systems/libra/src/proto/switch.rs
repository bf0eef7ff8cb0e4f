//! The switch program: Libra_p (registers) and Libra_s (records, result copies), plain
//! forwarding, and the controller that migrates a failing switch's state to a standby.

use super::reliable::{Reliable, ack, result_stream};
use super::{Config, Stats};
use crate::float::FloatTables;
use crate::layout::{Placement, RegisterPipeline};
use crate::wire;
use crate::wire::Kind;
use inabench_fabric::{Endpoint, Nanos, NodeId, Transmit};
use inabench_ina::tofino::TofinoModel;
use std::collections::{HashSet, VecDeque};

/// The switch: Libra_p (registers) and Libra_s (records, result copies), and plain forwarding.
pub struct Switch {
    pub(super) cfg: Config,
    pub registers: Vec<i32>,
    touched: Vec<bool>,
    /// Per worker, the slots it pushed (a bitmap per worker: 30K bits = 3.75 KB each), so that
    /// each worker gets back the aggregates of its own parameters, as a PS-lite pull returns.
    pushed: Vec<Vec<bool>>,
    placement: Option<Placement>,
    pub pipeline: RegisterPipeline,
    /// Libra_s: pushes aggregated, by (worker, seq).
    pub(super) records: HashSet<(u16, u32)>,
    done: Vec<bool>,
    results: Reliable,
    results_built: bool,
    out: VecDeque<Transmit>,
    pub stats: Stats,
    /// When set, the switch stops (fails): it drops every frame and sends nothing.
    pub failed: bool,
    /// The float tables the data path looks up (with `Config::float`).
    tables: Option<std::sync::Arc<FloatTables>>,
    /// With `Config::float`: the pushes in the order the switch aggregated them, (worker,
    /// seq), so a float reference can replay the same non-associative order.
    pub aggregation_log: Vec<(u16, u32)>,
    /// The pipeline's occupancy: when it finishes the passes of the frames it has taken (ns,
    /// fractional), and when each frame of `out` leaves it.
    busy_until: f64,
    ready: VecDeque<Nanos>,
}

/// Nanoseconds one pipeline pass of a frame of `len` bytes takes: the frame (with Ethernet's
/// 24 bytes of preamble, gap and FCS) at the bandwidth of one pipeline of the Tofino model (16
/// ports x 100 Gbps, NetReduce Sec. 6). The registers of the program live in one pipeline, so
/// every frame the program handles, and every recirculated pass, takes that bandwidth.
pub fn pass_ns(len: usize) -> f64 {
    let m = TofinoModel::PAPER;
    let bps = f64::from(m.ports_per_pipeline) * m.port_gbps * 1e9;
    (len + 24) as f64 * 8.0 / bps * 1e9
}

impl Switch {
    pub fn new(cfg: Config, hot_params: usize, placement: Option<Placement>) -> Switch {
        Switch {
            registers: vec![0; hot_params],
            touched: vec![false; hot_params],
            pushed: vec![vec![false; hot_params]; cfg.workers],
            placement,
            pipeline: RegisterPipeline::new(TofinoModel::PAPER),
            records: HashSet::new(),
            done: vec![false; cfg.workers],
            results: Reliable::default(),
            results_built: false,
            out: VecDeque::new(),
            stats: Stats::default(),
            failed: false,
            tables: cfg.float.then(crate::float::tables),
            aggregation_log: Vec::new(),
            busy_until: 0.0,
            ready: VecDeque::new(),
            cfg,
        }
    }

    /// The controller's view of the switch state (registers, touched slots, records, Done
    /// markers), pulled for a failover.
    pub fn export_state(&self) -> SwitchState {
        SwitchState {
            registers: self.registers.clone(),
            touched: self.touched.clone(),
            pushed: self.pushed.clone(),
            records: self.records.clone(),
            done: self.done.clone(),
            aggregation_log: self.aggregation_log.clone(),
        }
    }

    /// Load a state pulled from a failing switch (a standby switch resuming).
    pub fn import_state(&mut self, s: SwitchState) {
        self.registers = s.registers;
        self.touched = s.touched;
        self.pushed = s.pushed;
        self.records = s.records;
        self.done = s.done;
        self.aggregation_log = s.aggregation_log;
    }

    fn me(&self) -> NodeId {
        self.cfg.switch()
    }

    fn maybe_results(&mut self) {
        if self.results_built || !self.done.iter().all(|d| *d) {
            return;
        }
        self.results_built = true;
        for w in 0..self.cfg.workers {
            let pairs: Vec<(u32, i32)> = (0..self.registers.len())
                .filter(|&r| self.pushed[w][r])
                .map(|r| (r as u32, self.registers[r]))
                .collect();
            result_stream(w as NodeId, &pairs, self.cfg.hot_cap, &mut self.results);
        }
    }
}

/// A switch's aggregation state as the failover controller moves it.
#[derive(Debug, Clone, PartialEq)]
pub struct SwitchState {
    pub registers: Vec<i32>,
    pub touched: Vec<bool>,
    pub pushed: Vec<Vec<bool>>,
    pub records: HashSet<(u16, u32)>,
    pub done: Vec<bool>,
    /// With float sums: the order the pushes were aggregated in (see
    /// [`super::float_reference`]).
    pub aggregation_log: Vec<(u16, u32)>,
}

impl Endpoint for Switch {
    fn id(&self) -> NodeId {
        self.me()
    }

    fn handle_packet(&mut self, now: Nanos, _from: NodeId, frame: &[u8]) {
        if self.failed {
            return;
        }
        // the frame takes the pipeline for its passes; what it sends leaves after them
        let before = self.out.len();
        let passes = self.process(now, frame);
        let start = self.busy_until.max(now as f64);
        self.busy_until = start + f64::from(passes) * pass_ns(frame.len());
        let ready = self.busy_until.ceil() as Nanos;
        for _ in before..self.out.len() {
            self.ready.push_back(ready);
        }
    }

    fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        if self.failed {
            return None;
        }
        let t = match self.ready.front() {
            Some(&r) if r <= now => {
                self.ready.pop_front();
                self.out.pop_front()?
            }
            _ => {
                let me = self.me();
                // Libra_s sends the aggregation packets (one copy kept until acknowledged)
                self.results
                    .poll(me, None, now, usize::MAX, self.cfg.rto_ns)?
            }
        };
        self.stats.packets_tx += 1;
        self.stats.bytes_tx += t.bytes.len() as u64;
        Some(t)
    }

    fn poll_timeout(&self) -> Option<Nanos> {
        if self.failed {
            return None;
        }
        match (self.results.timeout(), self.ready.front()) {
            (Some(a), Some(&b)) => Some(a.min(b)),
            (a, b) => a.or(b.copied()),
        }
    }

    fn handle_timeout(&mut self, now: Nanos) {
        self.results.on_timeout(now, self.cfg.rto_ns);
    }

    fn is_done(&self) -> bool {
        true
    }
}

impl Switch {
    /// The program on one frame; returns the pipeline passes it took.
    fn process(&mut self, now: Nanos, frame: &[u8]) -> u32 {
        self.stats.packets_rx += 1;
        let Ok((src, dst, r)) = wire::parse(frame) else {
            self.stats.malformed += 1;
            return 1;
        };
        if dst != self.me() {
            // forwarding (cold pushes, the server's results, ACKs to the server)
            if (dst as usize) <= self.cfg.workers + 1 {
                self.out.push_back(Transmit {
                    to: dst,
                    bytes: frame.to_vec(),
                });
            }
            return 1;
        }
        let w = r.worker;
        if usize::from(w) >= self.cfg.workers || src != NodeId::from(w) && r.kind != Kind::Ack {
            self.stats.malformed += 1;
            return 1;
        }
        let mut passes = 1;
        match r.kind {
            Kind::PushHot => {
                let check = r.retransmit || self.cfg.dedup_all;
                if check && self.records.contains(&(w, r.seq)) {
                    self.stats.duplicates_ignored += 1;
                } else if r
                    .pairs
                    .iter()
                    .all(|(k, _)| (*k as usize) < self.registers.len())
                {
                    for (k, v) in &r.pairs {
                        let k = *k as usize;
                        self.registers[k] = match &self.tables {
                            // the register holds the f32 bits of the running sum
                            Some(t) => t.add_bits(self.registers[k] as u32, *v as u32) as i32,
                            None => self.registers[k].wrapping_add(*v),
                        };
                        self.touched[k] = true;
                        self.pushed[usize::from(w)][k] = true;
                    }
                    if self.tables.is_some() {
                        self.aggregation_log.push((w, r.seq));
                    }
                    let ranks: Vec<u32> = r.pairs.iter().map(|p| p.0).collect();
                    let flen = frame.len() as u32;
                    passes = match (&self.placement, self.cfg.float) {
                        (Some(pl), true) => self.pipeline.process_float(&ranks, pl, flen),
                        (Some(pl), false) => self.pipeline.process(&ranks, pl, flen),
                        (None, float) => {
                            let m = self.pipeline.pipeline.model;
                            let p = m.passes(ranks.len() as u32 * crate::layout::PAIR_BYTES);
                            if float {
                                p.max(crate::layout::float_passes(ranks.len()))
                            } else {
                                p
                            }
                        }
                    };
                    self.records.insert((w, r.seq));
                } else {
                    self.stats.malformed += 1;
                    return 1;
                }
                self.out.push_back(ack(self.me(), src, None, w, r.seq));
            }
            Kind::Done => {
                self.done[usize::from(w)] = true;
                self.out.push_back(ack(self.me(), src, None, w, r.seq));
                self.maybe_results();
            }
            Kind::Ack => self.results.on_ack(r.seq, src, now),
            _ => self.stats.malformed += 1,
        }
        passes
    }
}

/// The failover controller (Sec. 3.6): it sends a heartbeat every `interval_ns`; a switch that
/// misses `misses` replies in a row is declared failing, its state is pulled and pushed to a
/// standby switch that runs the same program and layout.
#[derive(Debug, Clone, PartialEq)]
pub struct Controller {
    pub interval_ns: u64,
    pub misses: u32,
    last_reply: Nanos,
}

impl Controller {
    pub fn new(interval_ns: u64, misses: u32) -> Controller {
        Controller {
            interval_ns,
            misses,
            last_reply: 0,
        }
    }

    /// A heartbeat reply arrived at `now`.
    pub fn on_reply(&mut self, now: Nanos) {
        self.last_reply = now;
    }

    /// Whether the switch is declared failing at `now`.
    pub fn failing(&self, now: Nanos) -> bool {
        now.saturating_sub(self.last_reply) > self.interval_ns * u64::from(self.misses)
    }

    /// Move the state of `failing` to `standby`.
    pub fn migrate(&self, failing: &Switch, standby: &mut Switch) {
        standby.import_state(failing.export_state());
    }
}
