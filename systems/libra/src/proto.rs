//! Libra's data path as sans-IO endpoints: workers, the switch program (Libra_p: hot parameters
//! aggregated in registers indexed by rank; Libra_s: the switch CPU's copies of unacknowledged
//! aggregation packets and its records of aggregated packets) and the parameter server (cold
//! parameters; with no hot set it is the PS-lite baseline). One iteration of synchronous
//! aggregation:
//!
//! 1. each worker pushes its hot pairs to the switch (packets by Algorithm 1, 24 pairs of 8 B, the
//!    192-byte limit) and its cold pairs to the server (`cold_cap` pairs a packet), at most
//!    `window` unacknowledged packets; every push is acknowledged by its receiver (Sec. 3.6); a
//!    push unacknowledged after the timeout is resent with the same sequence number and the
//!    retransmit flag;
//! 2. the switch adds a push into its registers unless the push is a retransmission its records
//!    show as aggregated (the repeat-write error: the ACK was lost, not the push). As the paper
//!    describes it, only flagged packets are checked; `dedup_all` checks every packet, which a
//!    fabric that duplicates frames needs (see the tests);
//! 3. a worker whose pushes are all acknowledged sends `Done` to the switch and the server;
//! 4. with every worker's `Done`, the switch sends each worker the aggregated hot values of the
//!    slots it pushed (a per-worker bitmap of slots, 3.75 KB a worker for 30K parameters), and the
//!    server sends each worker the sums of the cold keys it pushed (a PS-lite pull); workers acknowledge each result packet, and the switch CPU (the server)
//!    resends unacknowledged ones.
//!
//! Values are int32 and sums wrap exactly, so every aggregate can be compared with an exact
//! reference. With `Config::float` the hot values are f32 bit patterns and the switch adds them
//! with the table-lookup float sum ([`crate::float`]) in its data path, counting the passes the
//! lookups need on the Tofino model ([`crate::layout::float_passes`]); the reference then replays
//! the switch's aggregation order with the same lookup sum ([`float_reference`]), bit for bit.
//! All traffic crosses the switch (a star): the switch forwards what is not addressed to it.

use crate::float::FloatTables;
use crate::layout::{Placement, RegisterPipeline, package_alg1, package_sequential};
use crate::wire::{self, Kind, Repr};
use inabench_fabric::{Endpoint, Nanos, NodeId, Transmit};
use inabench_ina::tofino::TofinoModel;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

/// What every node of one run shares.
#[derive(Debug, Clone)]
pub struct Config {
    pub workers: usize,
    /// Hot parameters on the switch (Libra); false: PS-lite (the switch only forwards).
    pub libra: bool,
    pub window: usize,
    pub rto_ns: u64,
    pub hot_cap: usize,
    pub cold_cap: usize,
    /// Check every push against the switch's records, not only flagged retransmissions.
    pub dedup_all: bool,
    /// Hot values are f32 bit patterns and the switch adds them with the table-lookup float
    /// sum ([`crate::float`]) in its data path; false: int32 with wrapping sums. The cold path
    /// (the server, a CPU) keeps exact integer sums either way.
    pub float: bool,
}

impl Config {
    pub fn switch(&self) -> NodeId {
        self.workers as NodeId
    }
    pub fn server(&self) -> NodeId {
        self.workers as NodeId + 1
    }
}

/// A reliable sender: numbered messages, a window, per-packet ACKs, retransmission on timeout.
/// The timeout adapts as TCP's does (RFC 6298: SRTT + 4 RTTVAR from the ACKs of packets sent
/// once, Karn's rule; doubled on a timeout), never below the configured one: a fixed timeout
/// shorter than the queueing at a busy server sets off retransmission storms. As TCP keeps one
/// estimator per connection, there is one per destination: a worker's pushes go to the switch
/// (acknowledged within microseconds) and to the server (behind its queue, milliseconds), and
/// one shared estimator, pulled down by the switch's ACKs, timed out most cold pushes spuriously.
///
/// Libra times every packet (Sec. 3.6: "the sender of a packet will mark the packet as loss if it
/// does not receive the ack before the timer expires"; it gives no timeout value), where TCP runs
/// one timer per connection (RFC 6298 5.1-5.6). Per destination, this sender keeps RFC 6298's
/// rules for that timer: an ACK of a message in flight restarts it (5.3), so a packet is declared
/// lost only when its own deadline has passed and its destination has acknowledged nothing for
/// one timeout (a deep queue at the server, which acknowledges steadily, times nothing out); an
/// expiry doubles the timeout once per timer period (5.5): each packet remembers the period its
/// deadline was set in (a period ends when the destination's backoff changes: doubled, or reset
/// by a fresh RTT sample), and only the first expiry of a deadline set in the current period
/// doubles it. Every expired packet is resent, on its own timer, as the paper describes.
/// (Until 2026-11-25 the timeout doubled on every packet's expiry and no ACK restarted it: a
/// window's packets, expiring one after the other behind the server's queue, backed it off 2^10
/// times, and a loss soon after waited the whole inflated timeout: ~450 ms on a 13-15 ms
/// iteration in libra-fig18 with `skew: zipf1`; tests/single_loss.rs.)
#[derive(Debug, Default)]
struct Reliable {
    sent_at: Vec<Nanos>,
    retried: Vec<bool>,
    /// The destination's timer period ([`RttEstimate::period`]) when the message's current
    /// deadline was set.
    period: Vec<u32>,
    est: HashMap<NodeId, RttEstimate>,
    msgs: Vec<(NodeId, Repr)>,
    /// 0 unsent, 1 in flight, 2 acknowledged
    state: Vec<u8>,
    deadline: BTreeMap<u32, Nanos>,
    resend: VecDeque<u32>,
    next: usize,
    acked: usize,
    retransmissions: u64,
}

/// RFC 6298's state for one destination.
#[derive(Debug, Default, Clone, Copy)]
struct RttEstimate {
    srtt: f64,
    rttvar: f64,
    backoff: u32,
    /// Counts the changes of `backoff`: the deadlines set between two changes are one timer
    /// period, and their expiries double the timeout once.
    period: u32,
    /// When this destination last acknowledged a message in flight (RFC 6298 5.3: an ACK of
    /// new data restarts the timer).
    last_ack: Option<Nanos>,
}

impl Reliable {
    fn add(&mut self, to: NodeId, mut r: Repr) {
        r.seq = self.msgs.len() as u32;
        self.msgs.push((to, r));
        self.state.push(0);
        self.sent_at.push(0);
        self.retried.push(false);
        self.period.push(0);
    }

    fn all_acked(&self) -> bool {
        self.acked == self.msgs.len()
    }

    /// An ACK for message `seq` from `from`. Only a message in flight to `from` is
    /// acknowledged: an ACK for one never sent, or from another node, is a stale or forged frame
    /// (it would mark as delivered what its receiver never had).
    fn on_ack(&mut self, seq: u32, from: NodeId, now: Nanos) {
        let i = seq as usize;
        if self.msgs.get(i).is_some_and(|(to, _)| *to == from)
            && let Some(s) = self.state.get_mut(i)
            && *s == 1
        {
            *s = 2;
            self.acked += 1;
            self.deadline.remove(&seq);
            self.est.entry(from).or_default().last_ack = Some(now);
            if !self.retried[i] {
                let rtt = now.saturating_sub(self.sent_at[i]) as f64;
                let e = self.est.entry(self.msgs[i].0).or_default();
                if e.srtt == 0.0 {
                    e.srtt = rtt;
                    e.rttvar = rtt / 2.0;
                } else {
                    e.rttvar = 0.75 * e.rttvar + 0.25 * (e.srtt - rtt).abs();
                    e.srtt = 0.875 * e.srtt + 0.125 * rtt;
                }
                if e.backoff > 0 {
                    e.backoff = 0;
                    e.period = e.period.wrapping_add(1);
                }
            }
        }
    }

    fn rto(&self, min: u64, to: NodeId) -> u64 {
        let e = self.est.get(&to).copied().unwrap_or_default();
        let base = (e.srtt + 4.0 * e.rttvar) as u64;
        (base.max(min) << e.backoff.min(10)).min(1_000_000_000)
    }

    /// The next frame; `via`: the next hop (hosts send everything through the switch).
    fn poll(
        &mut self,
        me: NodeId,
        via: Option<NodeId>,
        now: Nanos,
        window: usize,
        rto: u64,
    ) -> Option<Transmit> {
        let (seq, retx) = if let Some(s) = self.resend.pop_front() {
            (s, true)
        } else if self.next < self.msgs.len() && self.deadline.len() < window {
            self.next += 1;
            ((self.next - 1) as u32, false)
        } else {
            return None;
        };
        if retx {
            self.retransmissions += 1;
            self.retried[seq as usize] = true;
        } else {
            self.sent_at[seq as usize] = now;
        }
        let to = self.msgs[seq as usize].0;
        self.period[seq as usize] = self.est.get(&to).map_or(0, |e| e.period);
        let deadline = now + self.rto(rto, to);
        let (to, r) = &mut self.msgs[seq as usize];
        r.retransmit = retx;
        self.state[seq as usize] = 1;
        self.deadline.insert(seq, deadline);
        Some(Transmit {
            to: via.unwrap_or(*to),
            bytes: wire::emit(me, *to, r),
        })
    }

    fn timeout(&self) -> Option<Nanos> {
        self.deadline.values().min().copied()
    }

    fn on_timeout(&mut self, now: Nanos, min: u64) {
        let due: Vec<u32> = self
            .deadline
            .iter()
            .filter(|(_, d)| **d <= now)
            .map(|(s, _)| *s)
            .collect();
        for s in due {
            let to = self.msgs[s as usize].0;
            // RFC 6298 5.3: the destination acknowledged new data within the last timeout, so
            // its timer runs from that ACK; the packet waits one timeout after it
            let restart = self
                .est
                .get(&to)
                .and_then(|e| e.last_ack)
                .map(|t| t + self.rto(min, to));
            if let Some(r) = restart.filter(|r| *r > now) {
                self.deadline.insert(s, r);
                self.period[s as usize] = self.est.get(&to).map_or(0, |e| e.period);
                continue;
            }
            // one doubling per timer period (RFC 6298 5.5): the first expiry of a deadline set
            // in the current period doubles the timeout and starts the next period; the other
            // deadlines of that period, set before the doubling, add nothing
            let e = self.est.entry(to).or_default();
            if self.period[s as usize] == e.period {
                e.backoff = e.backoff.saturating_add(1);
                e.period = e.period.wrapping_add(1);
            }
            self.deadline.remove(&s);
            if self.state[s as usize] == 1 {
                self.resend.push_back(s);
            }
        }
    }
}

fn ack(me: NodeId, to: NodeId, via: Option<NodeId>, worker: u16, seq: u32) -> Transmit {
    let r = Repr {
        kind: Kind::Ack,
        retransmit: false,
        worker,
        seq,
        aux: 0,
        pairs: vec![],
    };
    Transmit {
        to: via.unwrap_or(to),
        bytes: wire::emit(me, to, &r),
    }
}

fn result_stream(to: NodeId, pairs: &[(u32, i32)], cap: usize, out: &mut Reliable) {
    let chunks: Vec<&[(u32, i32)]> = if pairs.is_empty() {
        vec![&[]]
    } else {
        pairs.chunks(cap.max(1)).collect()
    };
    let total = chunks.len() as u32;
    for c in chunks {
        out.add(
            to,
            Repr {
                kind: Kind::Result,
                retransmit: false,
                worker: to as u16,
                seq: 0,
                aux: total,
                pairs: c.to_vec(),
            },
        );
    }
}

/// Per-node statistics.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stats {
    pub packets_tx: u64,
    pub packets_rx: u64,
    pub bytes_tx: u64,
    pub retransmissions: u64,
    pub malformed: u64,
    pub duplicates_ignored: u64,
    pub start_ns: Nanos,
    pub end_ns: Nanos,
}

/// A worker.
pub struct Worker {
    pub rank: usize,
    cfg: Config,
    pushes: Reliable,
    pushes_len: usize,
    done_sent: bool,
    acks: VecDeque<Transmit>,
    /// Results by source: (seen (source, seq), expected total)
    seen: HashSet<(NodeId, u32)>,
    got: HashMap<NodeId, u32>,
    expect: HashMap<NodeId, u32>,
    pub hot_result: HashMap<u32, i32>,
    pub cold_result: HashMap<u32, i32>,
    pub stats: Stats,
    started: bool,
    finished: bool,
}

impl Worker {
    /// `hot`: (rank, value) pairs for the switch (packaged by Algorithm 1 on `placement`);
    /// `cold`: (key, value) pairs for the server.
    pub fn new(
        rank: usize,
        cfg: Config,
        hot: &[(u32, i32)],
        cold: &[(u32, i32)],
        placement: Option<&Placement>,
    ) -> Worker {
        let mut pushes = Reliable::default();
        let value: HashMap<u32, i32> = hot.iter().copied().collect();
        let ranks: Vec<u32> = hot.iter().map(|p| p.0).collect();
        let hot_pkts = match placement {
            Some(pl) => package_alg1(&ranks, cfg.hot_cap, pl).packets,
            None => package_sequential(&ranks, cfg.hot_cap),
        };
        let cold_pkts: Vec<&[(u32, i32)]> = cold.chunks(cfg.cold_cap.max(1)).collect();
        let mk = |kind, pairs: Vec<(u32, i32)>| Repr {
            kind,
            retransmit: false,
            worker: rank as u16,
            seq: 0,
            aux: 0,
            pairs,
        };
        // interleave the two paths so that both are busy from the start
        let mut h = hot_pkts.into_iter();
        let mut c = cold_pkts.into_iter();
        loop {
            let a = h.next();
            let b = c.next();
            if a.is_none() && b.is_none() {
                break;
            }
            if let Some(p) = a {
                let pairs = p.iter().map(|r| (*r, value[r])).collect();
                pushes.add(cfg.switch(), mk(Kind::PushHot, pairs));
            }
            if let Some(p) = b {
                pushes.add(cfg.server(), mk(Kind::PushCold, p.to_vec()));
            }
        }
        let pushes_len = pushes.msgs.len();
        Worker {
            rank,
            cfg,
            pushes,
            pushes_len,
            done_sent: false,
            acks: VecDeque::new(),
            seen: HashSet::new(),
            got: HashMap::new(),
            expect: HashMap::new(),
            hot_result: HashMap::new(),
            cold_result: HashMap::new(),
            stats: Stats::default(),
            started: false,
            finished: false,
        }
    }

    fn me(&self) -> NodeId {
        self.rank as NodeId
    }

    fn check_finished(&mut self, now: Nanos) {
        let sources: Vec<NodeId> = if self.cfg.libra {
            vec![self.cfg.switch(), self.cfg.server()]
        } else {
            vec![self.cfg.server()]
        };
        let complete = sources.iter().all(|s| {
            self.expect
                .get(s)
                .is_some_and(|&t| self.got.get(s).copied().unwrap_or(0) >= t)
        });
        if !self.finished && self.done_sent && self.pushes.all_acked() && complete {
            self.finished = true;
            self.stats.end_ns = now;
        }
    }

    /// Pushes this worker made (packets, before the Done markers).
    pub fn push_packets(&self) -> usize {
        self.pushes_len
    }
}

impl Endpoint for Worker {
    fn id(&self) -> NodeId {
        self.me()
    }

    fn handle_packet(&mut self, now: Nanos, _from: NodeId, frame: &[u8]) {
        self.stats.packets_rx += 1;
        let Ok((src, dst, r)) = wire::parse(frame) else {
            self.stats.malformed += 1;
            return;
        };
        // only what is addressed to this worker, from the switch or the server
        if dst != self.me()
            || !(src == self.cfg.switch() && self.cfg.libra || src == self.cfg.server())
        {
            self.stats.malformed += 1;
            return;
        }
        match r.kind {
            Kind::Ack => self.pushes.on_ack(r.seq, src, now),
            Kind::Result => {
                // acknowledge every copy (the first ACK may have been lost)
                self.acks.push_back(ack(
                    self.me(),
                    src,
                    Some(self.cfg.switch()),
                    self.rank as u16,
                    r.seq,
                ));
                if self.seen.insert((src, r.seq)) {
                    self.expect.insert(src, r.aux);
                    *self.got.entry(src).or_insert(0) += 1;
                    let into = if src == self.cfg.switch() {
                        &mut self.hot_result
                    } else {
                        &mut self.cold_result
                    };
                    for (k, v) in r.pairs {
                        into.insert(k, v);
                    }
                }
            }
            _ => self.stats.malformed += 1,
        }
        if !self.done_sent && self.pushes.all_acked() {
            self.done_sent = true;
            let mk = || Repr {
                kind: Kind::Done,
                retransmit: false,
                worker: self.rank as u16,
                seq: 0,
                aux: 0,
                pairs: vec![],
            };
            if self.cfg.libra {
                self.pushes.add(self.cfg.switch(), mk());
            }
            self.pushes.add(self.cfg.server(), mk());
        }
        self.check_finished(now);
    }

    fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        if !self.started {
            self.started = true;
            self.stats.start_ns = now;
        }
        let t = match self.acks.pop_front() {
            Some(t) => t,
            None => {
                let me = self.me();
                let via = Some(self.cfg.switch());
                self.pushes
                    .poll(me, via, now, self.cfg.window, self.cfg.rto_ns)?
            }
        };
        self.stats.packets_tx += 1;
        self.stats.bytes_tx += t.bytes.len() as u64;
        self.stats.retransmissions = self.pushes.retransmissions;
        Some(t)
    }

    fn poll_timeout(&self) -> Option<Nanos> {
        self.pushes.timeout()
    }

    fn handle_timeout(&mut self, now: Nanos) {
        self.pushes.on_timeout(now, self.cfg.rto_ns);
    }

    fn is_done(&self) -> bool {
        self.finished
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![("retransmissions", self.pushes.retransmissions)]
    }
}

/// The switch: Libra_p (registers) and Libra_s (records, result copies), and plain forwarding.
pub struct Switch {
    cfg: Config,
    pub registers: Vec<i32>,
    touched: Vec<bool>,
    /// Per worker, the slots it pushed (a bitmap per worker: 30K bits = 3.75 KB each), so that
    /// each worker gets back the aggregates of its own parameters, as a PS-lite pull returns.
    pushed: Vec<Vec<bool>>,
    placement: Option<Placement>,
    pub pipeline: RegisterPipeline,
    /// Libra_s: pushes aggregated, by (worker, seq).
    records: HashSet<(u16, u32)>,
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
    /// With float sums: the order the pushes were aggregated in (see [`float_reference`]).
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

/// The parameter server (PS-lite's role): cold keys, or every key without Libra.
pub struct Server {
    cfg: Config,
    sums: HashMap<u32, i32>,
    keys: Vec<Vec<u32>>,
    records: HashSet<(u16, u32)>,
    done: Vec<bool>,
    results: Reliable,
    results_built: bool,
    out: VecDeque<Transmit>,
    pub stats: Stats,
}

impl Server {
    pub fn new(cfg: Config) -> Server {
        Server {
            sums: HashMap::new(),
            keys: vec![Vec::new(); cfg.workers],
            records: HashSet::new(),
            done: vec![false; cfg.workers],
            results: Reliable::default(),
            results_built: false,
            out: VecDeque::new(),
            stats: Stats::default(),
            cfg,
        }
    }

    fn me(&self) -> NodeId {
        self.cfg.server()
    }
}

impl Endpoint for Server {
    fn id(&self) -> NodeId {
        self.me()
    }

    fn handle_packet(&mut self, now: Nanos, _from: NodeId, frame: &[u8]) {
        self.stats.packets_rx += 1;
        let Ok((src, dst, r)) = wire::parse(frame) else {
            self.stats.malformed += 1;
            return;
        };
        let w = r.worker;
        // only what is addressed to the server, from the worker the frame names
        if usize::from(w) >= self.cfg.workers || dst != self.me() || src != NodeId::from(w) {
            self.stats.malformed += 1;
            return;
        }
        match r.kind {
            Kind::PushCold => {
                // a server keeps a record of every push (it has the memory a switch lacks)
                if self.records.insert((w, r.seq)) {
                    for (k, v) in &r.pairs {
                        let s = self.sums.entry(*k).or_insert(0);
                        *s = s.wrapping_add(*v);
                        self.keys[usize::from(w)].push(*k);
                    }
                } else {
                    self.stats.duplicates_ignored += 1;
                }
                let via = Some(self.cfg.switch());
                self.out.push_back(ack(self.me(), src, via, w, r.seq));
            }
            Kind::Done => {
                self.done[usize::from(w)] = true;
                let via = Some(self.cfg.switch());
                self.out.push_back(ack(self.me(), src, via, w, r.seq));
                if !self.results_built && self.done.iter().all(|d| *d) {
                    self.results_built = true;
                    for (wk, keys) in self.keys.iter_mut().enumerate() {
                        keys.sort_unstable();
                        keys.dedup();
                        let pairs: Vec<(u32, i32)> =
                            keys.iter().map(|k| (*k, self.sums[k])).collect();
                        result_stream(wk as NodeId, &pairs, self.cfg.cold_cap, &mut self.results);
                    }
                }
            }
            Kind::Ack => self.results.on_ack(r.seq, src, now),
            _ => self.stats.malformed += 1,
        }
    }

    fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        let t = match self.out.pop_front() {
            Some(t) => t,
            None => {
                let me = self.me();
                let via = Some(self.cfg.switch());
                self.results
                    .poll(me, via, now, self.cfg.window, self.cfg.rto_ns)?
            }
        };
        self.stats.packets_tx += 1;
        self.stats.bytes_tx += t.bytes.len() as u64;
        Some(t)
    }

    fn poll_timeout(&self) -> Option<Nanos> {
        self.results.timeout()
    }

    fn handle_timeout(&mut self, now: Nanos) {
        self.results.on_timeout(now, self.cfg.rto_ns);
    }

    fn is_done(&self) -> bool {
        true
    }
}

/// A node of a Libra run.
pub enum Node {
    Worker(Box<Worker>),
    Switch(Box<Switch>),
    Server(Box<Server>),
}

impl Node {
    fn ep(&self) -> &dyn Endpoint {
        match self {
            Node::Worker(w) => w.as_ref(),
            Node::Switch(s) => s.as_ref(),
            Node::Server(s) => s.as_ref(),
        }
    }
    fn ep_mut(&mut self) -> &mut dyn Endpoint {
        match self {
            Node::Worker(w) => w.as_mut(),
            Node::Switch(s) => s.as_mut(),
            Node::Server(s) => s.as_mut(),
        }
    }
}

impl Endpoint for Node {
    fn id(&self) -> NodeId {
        self.ep().id()
    }
    fn handle_packet(&mut self, now: Nanos, from: NodeId, frame: &[u8]) {
        self.ep_mut().handle_packet(now, from, frame)
    }
    fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        self.ep_mut().poll_transmit(now)
    }
    fn poll_timeout(&self) -> Option<Nanos> {
        self.ep().poll_timeout()
    }
    fn handle_timeout(&mut self, now: Nanos) {
        self.ep_mut().handle_timeout(now)
    }
    fn is_done(&self) -> bool {
        self.ep().is_done()
    }
}

/// One iteration's inputs: each worker's (hot (rank, value), cold (key, value)) pairs.
pub type Inputs = Vec<(Vec<(u32, i32)>, Vec<(u32, i32)>)>;

/// Build the nodes of a run: workers 0..n, the switch n, the server n + 1.
pub fn build(
    cfg: &Config,
    inputs: &Inputs,
    hot_params: usize,
    placement: Option<Placement>,
) -> Vec<Node> {
    let mut v: Vec<Node> = inputs
        .iter()
        .enumerate()
        .map(|(w, (h, c))| {
            Node::Worker(Box::new(Worker::new(
                w,
                cfg.clone(),
                h,
                c,
                placement.as_ref(),
            )))
        })
        .collect();
    v.push(Node::Switch(Box::new(Switch::new(
        cfg.clone(),
        hot_params,
        placement,
    ))));
    v.push(Node::Server(Box::new(Server::new(cfg.clone()))));
    v
}

/// Check every worker's results against the exact sums of its own hot ranks and cold keys. Returns the number of wrong workers.
pub fn check(nodes: &[Node], inputs: &Inputs) -> usize {
    let mut hot: HashMap<u32, i32> = HashMap::new();
    let mut cold: HashMap<u32, i32> = HashMap::new();
    let float = nodes
        .iter()
        .any(|n| matches!(n, Node::Switch(s) if s.cfg.float));
    if float {
        match float_reference(nodes) {
            Some(r) => hot = r,
            // the switch did not aggregate every push exactly once: every worker is wrong
            None => return inputs.len(),
        }
    }
    for (h, c) in inputs {
        for (k, v) in h {
            if !float {
                let s = hot.entry(*k).or_insert(0);
                *s = s.wrapping_add(*v);
            }
        }
        for (k, v) in c {
            let s = cold.entry(*k).or_insert(0);
            *s = s.wrapping_add(*v);
        }
    }
    let mut wrong = 0;
    for n in nodes {
        if let Node::Worker(w) = n {
            let (h, c) = &inputs[w.rank];
            let cold_ok = w.cold_result.len() == c.len()
                && c.iter().all(|(k, _)| w.cold_result.get(k) == cold.get(k));
            // with Libra the switch returns every touched rank; with PS-lite the hot pairs
            // travel as cold ones
            let hot_ok = if w.cfg.libra {
                w.hot_result.len() == h.len()
                    && h.iter().all(|(k, _)| w.hot_result.get(k) == hot.get(k))
            } else {
                h.is_empty()
            };
            if !(w.finished && cold_ok && hot_ok) {
                wrong += 1;
            }
        }
    }
    wrong
}

/// The reference of the switch's float sums: every worker's hot pushes, checked to appear
/// exactly once in the switch's aggregation log, folded with the table-lookup sum
/// ([`FloatTables::add_bits`], starting from +0.0) in the log's order (the lookup sum is not
/// associative, so the reference replays the order the switch saw). `None` when a push is
/// missing from the log or appears twice.
pub fn float_reference(nodes: &[Node]) -> Option<HashMap<u32, i32>> {
    let t = crate::float::tables();
    let mut packets: HashMap<(u16, u32), &[(u32, i32)]> = HashMap::new();
    let mut log: &[(u16, u32)] = &[];
    for n in nodes {
        match n {
            Node::Worker(w) => {
                for (seq, (_, r)) in w.pushes.msgs.iter().enumerate() {
                    if r.kind == Kind::PushHot {
                        packets.insert((w.rank as u16, seq as u32), &r.pairs);
                    }
                }
            }
            Node::Switch(s) => log = &s.aggregation_log,
            Node::Server(_) => {}
        }
    }
    if log.len() != packets.len() {
        return None;
    }
    let mut seen = HashSet::new();
    let mut out: HashMap<u32, i32> = HashMap::new();
    for id in log {
        if !seen.insert(*id) {
            return None;
        }
        for (k, v) in *packets.get(id)? {
            let s = out.entry(*k).or_insert(0);
            *s = t.add_bits(*s as u32, *v as u32) as i32;
        }
    }
    Some(out)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregation;
    use inabench_fabric::fault::Faults;
    use inabench_fabric::sim::LinkConfig;
    use inabench_fabric::{Fabric, FabricReport, Sim, Until};

    fn run_sim(
        cfg: &Config,
        inputs: &Inputs,
        hot_params: usize,
        placement: Option<Placement>,
        costs: (u64, u64),
        faults: Faults,
    ) -> aggregation::Outcome {
        aggregation::run_sim(cfg, inputs, hot_params, placement, costs, faults).unwrap()
    }

    /// `nodes` on `sim` at 100 Gbps (no host costs, the switch node `workers`) until the
    /// workers are done or `limit_ns`.
    fn on_sim(
        nodes: Vec<Node>,
        workers: usize,
        faults: Faults,
        limit_ns: Nanos,
    ) -> (Vec<Node>, FabricReport) {
        let mut sim = Sim {
            faults,
            ..Sim::new(LinkConfig::gbps100(), workers as NodeId)
        };
        crate::run_on(&mut sim, nodes, workers, limit_ns).unwrap()
    }

    fn cfg(workers: usize) -> Config {
        Config {
            workers,
            libra: true,
            window: 16,
            rto_ns: 50_000,
            hot_cap: 24,
            cold_cap: 128,
            dedup_all: false,
            float: false,
        }
    }

    fn inputs(workers: usize, hot: u32, seed: u64) -> Inputs {
        let mut g = inabench_rng::SplitMix64::new(seed);
        (0..workers)
            .map(|_| {
                let mut h = Vec::new();
                for r in 0..hot {
                    if g.chance(0.6) {
                        h.push((r, (g.next_u64() % 2001) as i32 - 1000));
                    }
                }
                let mut c = Vec::new();
                for k in 0..300u32 {
                    if g.chance(0.3) {
                        c.push((100_000 + k * 7, (g.next_u64() % 2001) as i32 - 1000));
                    }
                }
                (h, c)
            })
            .collect()
    }

    #[test]
    fn exact_sums_without_and_with_loss() {
        for (loss, seed) in [(0.0, 1), (0.02, 2), (0.1, 3)] {
            let c = cfg(6);
            let inp = inputs(6, 500, seed);
            let pl = Placement::heat(500, 48).unwrap();
            let o = run_sim(
                &c,
                &inp,
                500,
                Some(pl),
                (0, 0),
                Faults {
                    loss,
                    seed,
                    ..Faults::default()
                },
            );
            assert!(o.finished, "loss {loss}");
            assert_eq!(o.wrong, 0, "loss {loss}");
            if loss > 0.05 {
                assert!(o.retransmissions > 0);
                assert!(o.duplicates_ignored > 0, "lost ACKs must meet the records");
            }
        }
        // PS-lite: everything through the server
        let mut c = cfg(4);
        c.libra = false;
        let inp: Inputs = inputs(4, 0, 9);
        let o = run_sim(
            &c,
            &inp,
            1,
            None,
            (0, 0),
            Faults {
                loss: 0.05,
                seed: 4,
                ..Faults::default()
            },
        );
        assert!(o.finished && o.wrong == 0);
    }

    #[test]
    fn the_check_catches_a_wrong_sum() {
        let c = cfg(3);
        let inp = inputs(3, 100, 5);
        let nodes = build(&c, &inp, 100, None);
        let (mut nodes, _) = on_sim(nodes, 3, Faults::default(), 1_000_000_000);
        assert_eq!(check(&nodes, &inp), 0);
        if let Node::Worker(w) = &mut nodes[1]
            && let Some(v) = w.hot_result.values_mut().next()
        {
            *v += 1;
        }
        assert_eq!(check(&nodes, &inp), 1);
    }

    /// Float inputs: hot values are f32 bits of both signs over six orders of magnitude.
    fn float_inputs(workers: usize, hot: u32, seed: u64) -> Inputs {
        let mut g = inabench_rng::SplitMix64::new(seed ^ 0xf10a7);
        inputs(workers, hot, seed)
            .into_iter()
            .map(|(h, c)| {
                let h = h
                    .into_iter()
                    .map(|(r, _)| {
                        let mag = 10f64.powf(g.next_f64() * 6.0 - 5.0);
                        let x = if g.chance(0.5) { -mag } else { mag } as f32;
                        (r, x.to_bits() as i32)
                    })
                    .collect();
                (h, c)
            })
            .collect()
    }

    #[test]
    fn float_switch_sums_equal_the_lookup_reference_bit_for_bit() {
        for (loss, seed) in [(0.0, 11), (0.05, 12)] {
            let mut c = cfg(5);
            c.float = true;
            let inp = float_inputs(5, 400, seed);
            let nodes = build(&c, &inp, 400, Some(Placement::heat(400, 48).unwrap()));
            let faults = Faults {
                loss,
                seed,
                ..Faults::default()
            };
            let (mut nodes, _) = on_sim(nodes, 5, faults, 10_000_000_000);
            assert_eq!(check(&nodes, &inp), 0, "loss {loss}");
            let Node::Switch(sw) = &nodes[5] else {
                panic!("node 5 is the switch")
            };
            if loss > 0.0 {
                assert!(
                    sw.stats.duplicates_ignored > 0,
                    "lost ACKs must meet the records"
                );
            }
            // the registers are table-lookup sums: each is a fold of its pushes, in the switch's
            // order, of FloatTables::add_bits; not the integer sum of the bit patterns, and
            // within the lookup sum's error bound of the exact sum
            let reference = float_reference(&nodes).unwrap();
            let mut differs_from_int = 0;
            for (r, bits) in &reference {
                assert_eq!(sw.registers[*r as usize], *bits, "slot {r}");
                let exact: f64 = inp
                    .iter()
                    .flat_map(|(h, _)| h.iter())
                    .filter(|(k, _)| k == r)
                    .map(|(_, v)| f64::from(f32::from_bits(*v as u32)))
                    .sum();
                let abs: f64 = inp
                    .iter()
                    .flat_map(|(h, _)| h.iter())
                    .filter(|(k, _)| k == r)
                    .map(|(_, v)| f64::from(f32::from_bits(*v as u32)).abs())
                    .sum();
                let got = f64::from(f32::from_bits(*bits as u32));
                assert!((got - exact).abs() <= 5.0 * 2f64.powi(-11) * abs + 1e-30);
                let int: i32 = inp
                    .iter()
                    .flat_map(|(h, _)| h.iter())
                    .filter(|(k, _)| k == r)
                    .fold(0i32, |a, (_, v)| a.wrapping_add(*v));
                differs_from_int += usize::from(int != *bits);
            }
            assert!(differs_from_int > 300);
            // a worker's result the lookup sum would not give fails the check
            if let Node::Worker(w) = &mut nodes[2]
                && let Some(v) = w.hot_result.values_mut().next()
            {
                *v = (f32::from_bits(*v as u32) + 1.0).to_bits() as i32;
            }
            assert_eq!(check(&nodes, &inp), 1);
            // a push aggregated twice fails the whole check
            if let Node::Switch(sw) = &mut nodes[5] {
                let first = sw.aggregation_log[0];
                sw.aggregation_log.push(first);
            }
            assert_eq!(check(&nodes, &inp), 5);
        }
    }

    #[test]
    fn two_worker_float_sums_match_an_order_free_reference() {
        // with two workers each slot's sum is one lookup add, which is commutative, so the
        // reference needs no log: add_bits(add_bits(+0, x0), x1) for every slot, bit for bit
        let t = crate::float::tables();
        let mut c = cfg(2);
        c.float = true;
        let inp = float_inputs(2, 600, 21);
        let pl = Placement::heat(600, 48).unwrap();
        let nodes = build(&c, &inp, 600, Some(pl));
        let faults = Faults {
            loss: 0.05,
            seed: 21,
            ..Faults::default()
        };
        let (nodes, _) = on_sim(nodes, 2, faults, 10_000_000_000);
        let mut want: HashMap<u32, u32> = HashMap::new();
        for (h, _) in &inp {
            for (k, v) in h {
                let s = want.entry(*k).or_insert(0);
                *s = t.add_bits(*s, *v as u32);
            }
        }
        let mut checked = 0;
        for n in &nodes {
            if let Node::Worker(w) = n {
                assert!(w.finished);
                for (k, v) in &w.hot_result {
                    assert_eq!(*v as u32, want[k], "slot {k}");
                    checked += 1;
                }
            }
        }
        assert!(checked > 500);
        assert_eq!(check(&nodes, &inp), 0);
    }

    #[test]
    fn float_packets_recirculate_twice_a_pair() {
        let mut c = cfg(2);
        c.float = true;
        let inp = float_inputs(2, 48, 3);
        let pl = Placement::heat(48, 48).unwrap();
        let o = run_sim(&c, &inp, 48, Some(pl.clone()), (0, 0), Faults::default());
        assert!(o.finished);
        assert_eq!(o.wrong, 0);
        // every hot packet of n pairs takes 2n passes: 2n - 1 recirculations
        let pairs: usize = inp.iter().map(|(h, _)| h.len()).sum();
        let packets: usize = inp.iter().map(|(h, _)| h.len().div_ceil(24)).sum();
        let want = (2 * pairs - packets) as f64 / packets as f64;
        assert!(
            (o.recirculations_per_packet - want).abs() < 1e-9,
            "{} vs {want}",
            o.recirculations_per_packet
        );
        let mut int = c.clone();
        int.float = false;
        let o = run_sim(
            &int,
            &inputs(2, 48, 3),
            48,
            Some(pl),
            (0, 0),
            Faults::default(),
        );
        assert!(o.recirculations_per_packet < 1.0);
    }

    #[test]
    fn float_pushes_hold_the_pipeline_for_their_passes() {
        // 24 float pairs take 48 passes of the frame at one pipeline's 1.6 Tbps; three pushes
        // back to back queue behind each other
        let mut c = cfg(2);
        c.float = true;
        let mut s = Switch::new(c, 64, None);
        let pairs: Vec<(u32, i32)> = (0..24).map(|k| (k, 1.5f32.to_bits() as i32)).collect();
        let frame = |seq| {
            wire::emit(
                0,
                2,
                &Repr {
                    kind: Kind::PushHot,
                    retransmit: false,
                    worker: 0,
                    seq,
                    aux: 0,
                    pairs: pairs.clone(),
                },
            )
        };
        let one = 48.0 * pass_ns(frame(0).len());
        for seq in 0..3 {
            s.handle_packet(0, 0, &frame(seq));
        }
        for k in 1..=3u32 {
            let t = s.poll_timeout().unwrap();
            assert_eq!(t, (f64::from(k) * one).ceil() as Nanos);
            assert!(s.poll_transmit(t - 1).is_none());
            assert!(s.poll_transmit(t).is_some());
        }
        // 1.5 three times by the lookup sum
        let t = crate::float::tables();
        let want = t.add(t.add(t.add(0.0, 1.5), 1.5), 1.5);
        assert_eq!(s.registers[7] as u32, want.to_bits());
    }

    #[test]
    fn each_destination_has_its_own_timeout() {
        // the switch acknowledges in 5 us, the server in 2 ms: the server's timeout must
        // follow the server's round trips, not the switch's
        let mut r = Reliable::default();
        let mk = || Repr {
            kind: Kind::PushHot,
            retransmit: false,
            worker: 0,
            seq: 0,
            aux: 0,
            pairs: vec![],
        };
        let (sw, ps) = (4, 5);
        for i in 0..20 {
            r.add(if i % 2 == 0 { sw } else { ps }, mk());
        }
        let min = 200_000;
        let mut now = 0;
        for seq in 0..20u32 {
            assert!(r.poll(0, None, now, 64, min).is_some());
            let rtt = if seq % 2 == 0 { 5_000 } else { 2_000_000 };
            r.on_ack(seq, if seq % 2 == 0 { sw } else { ps }, now + rtt);
            now += 10_000;
        }
        assert!(r.all_acked());
        assert_eq!(
            r.rto(min, sw),
            min,
            "the switch's round trips are below the floor"
        );
        assert!(r.rto(min, ps) >= 2_000_000, "{}", r.rto(min, ps));
        // a timeout backs off only the destination whose packet timed out
        r.add(ps, mk());
        assert!(r.poll(0, None, now, 64, min).is_some());
        let before = r.rto(min, ps);
        r.on_timeout(now + 100_000_000, min);
        assert_eq!(r.rto(min, ps), 2 * before);
        assert_eq!(r.rto(min, sw), min);
    }

    #[test]
    fn a_window_expiring_packet_by_packet_doubles_the_timeout_once() {
        // 64 pushes to the server leave 1 us apart and none is acknowledged (the server's queue
        // is longer than the timeout): their deadlines expire one by one, 64 expiries of one
        // timer period, which double the timeout once (RFC 6298 5.5), not 64 times
        let mut r = Reliable::default();
        let mk = || Repr {
            kind: Kind::PushCold,
            retransmit: false,
            worker: 0,
            seq: 0,
            aux: 0,
            pairs: vec![],
        };
        let ps = 5;
        for _ in 0..64 {
            r.add(ps, mk());
        }
        let min = 200_000;
        for i in 0..64u64 {
            assert!(r.poll(0, None, i * 1_000, 64, min).is_some());
        }
        // expire every deadline up to `until`, resending at once, as the endpoints do
        let run = |r: &mut Reliable, until: Nanos| {
            while let Some(t) = r.timeout().filter(|t| *t <= until) {
                r.on_timeout(t, min);
                while r.poll(0, None, t, 64, min).is_some() {}
            }
        };
        run(&mut r, 300_000);
        assert_eq!(r.retransmissions, 64);
        assert_eq!(r.rto(min, ps), 2 * min, "one doubling for one period");
        // the retransmissions, sent at the doubled timeout, expire: one more doubling
        assert_eq!(r.timeout(), Some(200_000 + 2 * min));
        run(&mut r, 700_000);
        assert_eq!(r.retransmissions, 128);
        assert_eq!(r.rto(min, ps), 4 * min);
        // a message sent once and acknowledged is a fresh sample (Karn's rule): the backoff
        // collapses
        r.add(ps, mk());
        assert!(r.poll(0, None, 1_000_000, 128, min).is_some());
        r.on_ack(64, ps, 1_050_000);
        assert_eq!(r.rto(min, ps), min);
        // the 64 deadlines set before that reset expire: no doubling of the fresh estimate;
        // their resends, timed in the new period, double it once when they expire
        run(&mut r, 1_500_000);
        assert_eq!(r.retransmissions, 192);
        assert_eq!(r.rto(min, ps), min);
        run(&mut r, 1_800_000);
        assert_eq!(r.retransmissions, 256);
        assert_eq!(r.rto(min, ps), 2 * min);
    }

    #[test]
    fn an_ack_from_the_destination_restarts_its_timer() {
        // RFC 6298 5.3: while the server acknowledges other pushes, a push waiting in its queue
        // is not timed out; once it acknowledges nothing for one timeout, the push is resent
        let mut r = Reliable::default();
        let mk = || Repr {
            kind: Kind::PushCold,
            retransmit: false,
            worker: 0,
            seq: 0,
            aux: 0,
            pairs: vec![],
        };
        let (ps, min) = (5, 200_000);
        for _ in 0..3 {
            r.add(ps, mk());
        }
        for _ in 0..3 {
            assert!(r.poll(0, None, 0, 64, min).is_some());
        }
        // first sample 150 us: SRTT 150, RTTVAR 75, RTO 450 us
        r.on_ack(0, ps, 150_000);
        assert_eq!(r.rto(min, ps), 450_000);
        r.on_timeout(200_000, min);
        assert_eq!(r.retransmissions, 0);
        assert!(
            r.poll(0, None, 200_000, 64, min).is_none(),
            "nothing resent"
        );
        assert_eq!(r.timeout(), Some(150_000 + 450_000), "restarted at the ACK");
        // second sample 500 us: RTTVAR 143.75, SRTT 193.75, RTO 768.75 us
        r.on_ack(1, ps, 500_000);
        r.on_timeout(600_000, min);
        assert_eq!(r.timeout(), Some(500_000 + 768_750));
        // no ACK since: the push is lost; one resend, one doubling
        r.on_timeout(1_268_750, min);
        assert!(r.poll(0, None, 1_268_750, 64, min).is_some());
        assert_eq!(r.retransmissions, 1);
        assert_eq!(r.rto(min, ps), 2 * 768_750);
    }

    fn push(seq: u32, retransmit: bool) -> Vec<u8> {
        wire::emit(
            0,
            2,
            &Repr {
                kind: Kind::PushHot,
                retransmit,
                worker: 0,
                seq,
                aux: 0,
                pairs: vec![(3, 10), (5, -4)],
            },
        )
    }

    #[test]
    fn repeat_write_error_is_rejected() {
        // Fig. 10: the switch aggregated the push, its ACK was lost, the worker resends it
        // with the retransmit flag: the records reject the second write, the ACK goes out again
        let mut s = Switch::new(cfg(2), 8, None);
        s.handle_packet(0, 0, &push(0, false));
        // the ACK leaves when the pipeline pass is over
        assert!(s.poll_transmit(0).is_none());
        let t = s.poll_timeout().expect("the ACK is held for the pass");
        assert_eq!(t, pass_ns(push(0, false).len()).ceil() as Nanos);
        assert!(s.poll_transmit(t).is_some(), "ACK");
        s.handle_packet(10, 0, &push(0, true));
        let again = s.poll_transmit(20).expect("the resend is acknowledged");
        let (_, _, r) = wire::parse(&again.bytes).unwrap();
        assert_eq!((r.kind, r.seq), (Kind::Ack, 0));
        assert_eq!((s.registers[3], s.registers[5]), (10, -4));
        assert_eq!(s.stats.duplicates_ignored, 1);
    }

    #[test]
    fn unflagged_duplicates_double_count_unless_every_push_is_checked() {
        // the paper checks only flagged packets: a copy the network duplicated is added twice
        let mut s = Switch::new(cfg(2), 8, None);
        s.handle_packet(0, 0, &push(0, false));
        s.handle_packet(1, 0, &push(0, false));
        assert_eq!(
            s.registers[3], 20,
            "the paper's rule double-counts a duplicate"
        );
        let mut c = cfg(2);
        c.dedup_all = true;
        let mut s = Switch::new(c, 8, None);
        s.handle_packet(0, 0, &push(0, false));
        s.handle_packet(1, 0, &push(0, false));
        assert_eq!(s.registers[3], 10);
        // and end to end under duplication
        let mut c = cfg(4);
        c.dedup_all = true;
        let inp = inputs(4, 300, 8);
        let o = run_sim(
            &c,
            &inp,
            300,
            None,
            (0, 0),
            Faults {
                duplicate: 0.05,
                seed: 8,
                ..Faults::default()
            },
        );
        assert!(o.finished && o.wrong == 0);
    }

    #[test]
    fn malformed_frames_are_counted_not_fatal() {
        let mut s = Switch::new(cfg(2), 8, None);
        s.handle_packet(0, 0, &[1, 2, 3]);
        let mut bad = push(0, false);
        let l = bad.len();
        bad.truncate(l - 3);
        s.handle_packet(0, 0, &bad);
        // a rank beyond the registers
        let big = wire::emit(
            0,
            2,
            &Repr {
                kind: Kind::PushHot,
                retransmit: false,
                worker: 0,
                seq: 1,
                aux: 0,
                pairs: vec![(99, 1)],
            },
        );
        s.handle_packet(0, 0, &big);
        assert_eq!(s.stats.malformed, 3);
        assert!(s.registers.iter().all(|v| *v == 0));
    }

    #[test]
    fn failover_mid_iteration_keeps_exact_sums() {
        let workers = 4;
        let c = cfg(workers);
        let inp = inputs(workers, 2000, 12);
        let nodes: Vec<StopAt40> = build(&c, &inp, 2000, None)
            .into_iter()
            .map(StopAt40)
            .collect();
        // run until the switch has aggregated some, not all, of the hot pushes: the switch is
        // the one node counted, done at 40 records
        let until = Until {
            counted: (0..nodes.len()).map(|i| i == workers).collect(),
            limit_ns: 1_000_000_000,
        };
        let mut sim = Sim::new(LinkConfig::gbps100(), workers as NodeId);
        let (nodes, _) = sim.run(nodes, &until).unwrap();
        let mut nodes: Vec<Node> = nodes.into_iter().map(|n| n.0).collect();
        let Node::Switch(old) = &mut nodes[workers] else {
            panic!("switch");
        };
        let mid = old.records.len();
        assert!(mid >= 40 && mid < inp.iter().map(|(h, _)| h.len().div_ceil(24)).sum::<usize>());
        // the switch fails: no more heartbeat replies; the controller notices and migrates
        old.failed = true;
        let mut ctl = Controller::new(10_000, 3);
        ctl.on_reply(0);
        assert!(!ctl.failing(20_000));
        assert!(ctl.failing(40_000));
        let mut standby = Switch::new(c.clone(), 2000, None);
        ctl.migrate(old, &mut standby);
        nodes[workers] = Node::Switch(Box::new(standby));
        // frames in flight at the failure are lost; workers time out and resend (flagged),
        // and the migrated records keep the standby from adding any push twice
        let (nodes, rep) = on_sim(nodes, workers, Faults::default(), 1_000_000_000);
        assert!(rep.finished);
        assert_eq!(check(&nodes, &inp), 0);
        let Node::Switch(s) = &nodes[workers] else {
            panic!("switch")
        };
        assert!(s.records.len() > mid);
    }

    /// A node of a run stopped when the switch holds 40 records: the switch's `is_done` says
    /// so (the one node an [`Until`] then counts); every other call is the node's own.
    struct StopAt40(Node);

    impl Endpoint for StopAt40 {
        fn id(&self) -> NodeId {
            self.0.id()
        }
        fn handle_packet(&mut self, now: Nanos, from: NodeId, frame: &[u8]) {
            self.0.handle_packet(now, from, frame)
        }
        fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
            self.0.poll_transmit(now)
        }
        fn poll_timeout(&self) -> Option<Nanos> {
            self.0.poll_timeout()
        }
        fn handle_timeout(&mut self, now: Nanos) {
            self.0.handle_timeout(now)
        }
        fn is_done(&self) -> bool {
            matches!(&self.0, Node::Switch(s) if s.records.len() >= 40)
        }
    }
}
