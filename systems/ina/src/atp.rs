//! ATP (Lao et al., NSDI'21) as its paper and released code describe it, for NetReduce's Table 6.
//!
//! Workers send 62 int32 values per packet (248 bytes: the released `MAX_ENTRIES_PER_PACKET`),
//! each with a job id, a sequence number, the aggregator index a hash of (job, sequence) picks,
//! the worker's bit and the fan-in degree. The switch:
//! - takes a free aggregator for the packet's (job, sequence) and adds the values; a packet whose
//!   aggregator is held by another (job, sequence) is a *collision* and goes on to the parameter
//!   server (PS) unaggregated, with the collision flag;
//! - when the fan-in is reached, forwards the aggregate to the PS (ATP aggregates "best effort":
//!   the PS always holds the final result);
//! - when the PS's ACK (the aggregated parameters) passes back through it, deallocates the
//!   aggregator if it still belongs to that (job, sequence) and multicasts the ACK to the workers
//!   its bitmap names;
//! - a *resend* never takes an aggregator: if the aggregator holds a partial aggregate of that
//!   (job, sequence), the resending worker's values are added (when its bit is not set yet) and the
//!   partial is flushed to the PS and the aggregator freed; otherwise the resend goes to the PS as
//!   it is.
//!
//! The PS adds every contribution whose bitmap is disjoint from what it holds for the sequence
//! (so each worker is counted exactly once; an overlapping partial is dropped and its workers'
//! timers bring their values again, raw), ACKs a completed sequence to all workers, and answers a
//! contribution for a completed sequence with the result again (unicast through the switch).
//!
//! Each aggregator holds 62 values: with 192 bytes per pass (NetReduce Sec. 6) a packet needs two
//! passes of the [`Pipeline`] model, which recirculates it into the same pipeline; ACKs take the
//! same two passes, since deallocation clears both halves. The "50% internal bandwidth" of Table 6
//! is what the model counts, not a constant.
//!
//! Our choices where the sources leave room: int32 values (the microbenchmark; ATP's float
//! conversion is not modelled), 4096 aggregators for the job (`atp_pool`), an AIMD window of
//! packets starting at 128 (`atp_window`), +1/cwnd per ACK, halved at most once per timeout
//! period, capped at 1024 (ATP's ECN marks need a switch queue signal, which our switch model does
//! not see; without marks the window only grows), frames as the release sends them: Ethernet type
//! 0x0700, IPv4 (protocol 253, "experimentation"), the 274-byte ATP layer.

use crate::common::{
    AddressPlan, AllReduceConfig, HostStats, NodeAddresses, Setup, SetupError, Switch, SwitchStats,
    System, Worker, gradient, kernel,
};
use crate::target::Target;
use crate::tofino::{Pipeline, Recirculation, TofinoModel};
use inabench_fabric::addresses::MacIp;
use inabench_fabric::{BufPool, Endpoint, Nanos, NodeId, Transmit};
use inabench_wire::ina::atp::{self as hdr, LAYER_LEN, Trailer, VALUES_PER_PACKET};
use inabench_wire::{ethernet, ipv4};
use std::collections::{HashMap, VecDeque};

/// IPv4 protocol number of ATP frames here (RFC 3692 experimentation).
pub const IP_PROTO: u8 = 253;
/// Frame bytes: Ethernet, IPv4, ATP header, 62 values, trailer.
pub const FRAME_LEN: usize = ethernet::HEADER_LEN + ipv4::HEADER_LEN + LAYER_LEN;
/// The job id of a build that names none (`atp_job`): every run of the suite but two jobs sharing
/// a switch ([`build_shared`]).
pub const DEFAULT_JOB: u16 = 1;

/// ATP's synthetic address of node `node` (workers, the switch, then the parameter servers):
/// 02:00:00:02:00:<node+1> and 10.0.2.<node+1>.
pub fn synthetic_address(node: usize) -> MacIp {
    (
        [2, 0, 0, 2, 0, (node + 1) as u8],
        [10, 0, 2, (node + 1) as u8],
    )
}

fn frame(src: MacIp, dst: MacIp, h: &hdr::Repr, values: &[i32], t: &Trailer) -> Vec<u8> {
    frame_into(vec![0u8; FRAME_LEN], src, dst, h, t, |v| {
        let n = values.len().min(VALUES_PER_PACKET);
        kernel::store_be_i32(&mut v[..4 * n], &values[..n]);
    })
}

/// Ethernet and IPv4 headers.
const OUTER: usize = ethernet::HEADER_LEN + ipv4::HEADER_LEN;

/// [`frame`] into `f` (FRAME_LEN zero bytes, a pooled buffer), the values written by `values`
/// into the frame's value bytes (zero beyond what it writes).
fn frame_into(
    mut f: Vec<u8>,
    src: MacIp,
    dst: MacIp,
    h: &hdr::Repr,
    t: &Trailer,
    values: impl FnOnce(&mut [u8]),
) -> Vec<u8> {
    outer_into(&mut f, src, dst);
    layer_into(f, h, t, values)
}

/// The Ethernet and IPv4 headers of a frame from `src` to `dst` (MAC, IPv4) into `f[..OUTER]`.
fn outer_into(f: &mut [u8], src: MacIp, dst: MacIp) {
    ethernet::Repr {
        dst: dst.0,
        src: src.0,
        ethertype: hdr::ETHERTYPE,
    }
    .emit(&mut ethernet::Packet::new_unchecked(&mut f[..]));
    let ip = ipv4::Repr {
        src: src.1,
        dst: dst.1,
        protocol: IP_PROTO,
        tos: 0,
        ttl: 64,
        ident: 0,
        payload_len: LAYER_LEN,
    };
    let _ = ip.emit(&mut ipv4::Packet::new_unchecked(
        &mut f[ethernet::HEADER_LEN..],
    ));
}

/// The ATP layer (header, values, trailer) after `f`'s outer headers.
fn layer_into(
    mut f: Vec<u8>,
    h: &hdr::Repr,
    t: &Trailer,
    values: impl FnOnce(&mut [u8]),
) -> Vec<u8> {
    let at = OUTER;
    let _ = h.emit(&mut f[at..]);
    let v = at + hdr::Repr::LEN;
    values(&mut f[v..v + hdr::VALUES_LEN]);
    let _ = t.emit(&mut f[v + hdr::VALUES_LEN..]);
    f
}

/// Parse an ATP frame into its header and values.
fn parse(f: &[u8]) -> Option<(hdr::Repr, Vec<i32>)> {
    let (h, be) = parse_be(f)?;
    let values = be
        .chunks_exact(4)
        .map(|c| i32::from_be_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    Some((h, values))
}

/// [`parse`] with the values as the frame's big-endian bytes (no copy). Inlined: returned
/// through memory, the header's fields were stored and reloaded at mismatched widths per packet
/// (the profile's store-forwarding stalls).
#[inline(always)]
fn parse_be(f: &[u8]) -> Option<(hdr::Repr, &[u8])> {
    let eth = ethernet::Packet::new_checked(f).ok()?;
    if eth.ethertype() != hdr::ETHERTYPE {
        return None;
    }
    let ip = ipv4::Packet::new_checked(eth.payload()).ok()?;
    // what `ipv4::Repr::parse` checks beyond `new_checked` (done above), without building it;
    // the header checksum in one pass (`kernel::ipv4_header_ok`: `verify_checksum`'s answer)
    let ihl = ip.header_len();
    if !kernel::ipv4_header_ok(eth.payload().get(..ihl)?)
        || ip.more_fragments()
        || ip.frag_offset() != 0
    {
        return None;
    }
    if ip.protocol() != IP_PROTO {
        return None;
    }
    let p = ip.payload();
    if p.len() < LAYER_LEN {
        return None;
    }
    let h = hdr::Repr::parse(p).ok()?;
    // the same bytes, borrowed from `f` rather than from the packet views
    let at = p.as_ptr() as usize - f.as_ptr() as usize + hdr::Repr::LEN;
    Some((h, f.get(at..at + hdr::VALUES_LEN)?))
}

/// The aggregator a (job, sequence) hashes to (FNV-1a over the four bytes).
pub fn aggregator_of(job: u16, seq: u16, pool: usize) -> u16 {
    let mut h: u32 = 0x811c_9dc5;
    for b in job.to_be_bytes().into_iter().chain(seq.to_be_bytes()) {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    (h % pool as u32) as u16
}

/// The full sequence number a 16-bit one stands for, nearest to `reference`.
fn unwrap_seq(seq: u16, reference: usize) -> Option<usize> {
    let d = seq.wrapping_sub(reference as u16) as i16;
    usize::try_from(reference as i64 + i64::from(d)).ok()
}

#[derive(Debug, Clone, Copy)]
pub struct Layout {
    pub workers: usize,
    pub elements: usize,
    pub chunks: usize,
    pub pool: usize,
}

impl Layout {
    fn new(cfg: &AllReduceConfig) -> Result<Layout, SetupError> {
        let pool = cfg.knob("atp_pool").unwrap_or(4096.0) as usize;
        if cfg.workers < 2 || cfg.workers > usize::from(hdr::Repr::MAX_FAN_IN) {
            return Err(SetupError::Config(format!(
                "ATP's bitmap holds 2..32 workers (got {})",
                cfg.workers
            )));
        }
        if pool == 0 || pool > 0xffff {
            return Err(SetupError::Config(format!(
                "ATP needs 1..65535 aggregators (got {pool})"
            )));
        }
        Ok(Layout {
            workers: cfg.workers,
            elements: cfg.elements,
            chunks: cfg.elements.div_ceil(VALUES_PER_PACKET).max(1),
            pool,
        })
    }

    fn all(&self) -> u32 {
        if self.workers >= 32 {
            u32::MAX
        } else {
            (1u32 << self.workers) - 1
        }
    }
}

/// An ATP worker.
pub struct AtpWorker {
    /// the worker's bit in its job's bitmap
    rank: usize,
    /// its node id on the fabric (the rank for a job alone; after the earlier jobs' workers on a
    /// shared switch)
    node: usize,
    job: u16,
    switch: NodeId,
    /// its own address and the switch's, which its frames carry
    me: MacIp,
    to: MacIp,
    layout: Layout,
    grad: Vec<i32>,
    result: Vec<i32>,
    /// full sequence -> deadline of the outstanding packet
    outstanding: HashMap<usize, Nanos>,
    next: usize,
    /// lowest sequence without a result
    base: usize,
    acked: Vec<bool>,
    received: usize,
    resend: VecDeque<usize>,
    cwnd: f64,
    max_window: f64,
    last_cut: Nanos,
    rto_ns: u64,
    /// per sequence: (handed to the NIC, first bit on the wire) of its first transmission
    sent_at: Vec<Option<(Nanos, Nanos)>>,
    /// since when the window has had room for a new sequence (None while it is full or every
    /// sequence is out): a new sequence's queue wait runs from here to its first bit on the wire
    ready_since: Option<Nanos>,
    clock: crate::common::TxClock,
    stats: HostStats,
    started: bool,
}

impl AtpWorker {
    fn packet(&self, seq: usize, resend: bool) -> Vec<u8> {
        let a = seq * VALUES_PER_PACKET;
        let b = (a + VALUES_PER_PACKET).min(self.grad.len());
        let s16 = seq as u16;
        let agg = aggregator_of(self.job, s16, self.layout.pool);
        let h = hdr::Repr {
            bitmap: 1 << self.rank,
            fan_in: self.layout.workers as u8,
            overflow: false,
            ps_index: 0,
            data_index: false,
            ecn: false,
            resend,
            collision: false,
            is_ack: false,
            job: self.job,
            sequence: s16,
            aggregator: agg,
            aggregator2: agg,
        };
        let t = Trailer {
            key: seq as u64,
            tensor_len: self.layout.elements as u32,
        };
        frame(self.me, self.to, &h, &self.grad[a.min(b)..b], &t)
    }

    /// Whether a new sequence may go: the window counts packets without a result; a sequence
    /// never runs 32K ahead of the lowest unacknowledged one, so 16-bit sequence numbers stay
    /// unambiguous.
    fn window_open(&self) -> bool {
        self.next < self.layout.chunks
            && (self.outstanding.len() as f64) < self.cwnd.floor()
            && self.next - self.base < 32_000
    }

    fn transmit(&mut self, now: Nanos, seq: usize, resend: bool) -> Transmit {
        self.outstanding.insert(seq, now + self.rto_ns);
        let bytes = self.packet(seq, resend);
        let wire = self.clock.start(now, bytes.len());
        if self.sent_at[seq].is_some() {
            self.stats.retransmissions += 1;
        } else {
            let ready = self.ready_since.unwrap_or(now).min(now);
            self.sent_at[seq] = Some((ready, wire));
        }
        self.stats.packets_tx += 1;
        self.stats.wire_bytes_tx += bytes.len() as u64;
        Transmit {
            to: self.switch,
            bytes,
        }
    }
}

impl Endpoint for AtpWorker {
    fn id(&self) -> NodeId {
        self.node as NodeId
    }

    fn handle_packet(&mut self, now: Nanos, _from: NodeId, f: &[u8]) {
        self.stats.packets_rx += 1;
        let Some((h, values)) = parse(f) else {
            self.stats.malformed_rx += 1;
            return;
        };
        if !h.is_ack || h.job != self.job {
            return;
        }
        let Some(seq) = unwrap_seq(h.sequence, self.base) else {
            return;
        };
        if seq >= self.layout.chunks || self.acked[seq] {
            return;
        }
        let a = seq * VALUES_PER_PACKET;
        for (k, v) in values.iter().enumerate() {
            if let Some(r) = self.result.get_mut(a + k)
                && k < VALUES_PER_PACKET
            {
                *r = *v;
            }
        }
        self.acked[seq] = true;
        self.received += 1;
        self.outstanding.remove(&seq);
        self.resend.retain(|s| *s != seq);
        if let Some((handed, t0)) = self.sent_at[seq] {
            self.stats.rtt_ns.push(now.saturating_sub(t0));
            self.stats.rtt_queue_ns.push(t0 - handed);
        }
        while self.base < self.layout.chunks && self.acked[self.base] {
            self.base += 1;
        }
        self.cwnd = (self.cwnd + 1.0 / self.cwnd).min(self.max_window);
        if self.ready_since.is_none() && self.window_open() {
            self.ready_since = Some(now);
        }
        if self.received == self.layout.chunks {
            self.stats.end_ns = now;
        }
    }

    fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        if !self.started {
            self.started = true;
            self.stats.start_ns = now;
        }
        if let Some(seq) = self.resend.pop_front() {
            return Some(self.transmit(now, seq, true));
        }
        if self.window_open() {
            self.ready_since.get_or_insert(now);
            let seq = self.next;
            self.next += 1;
            let t = self.transmit(now, seq, false);
            if !self.window_open() {
                self.ready_since = None;
            }
            return Some(t);
        }
        self.ready_since = None;
        None
    }

    fn poll_timeout(&self) -> Option<Nanos> {
        self.outstanding
            .values()
            .copied()
            .filter(|d| *d != Nanos::MAX)
            .min()
    }

    fn handle_timeout(&mut self, now: Nanos) {
        let mut late: Vec<usize> = self
            .outstanding
            .iter()
            .filter(|(_, d)| **d <= now)
            .map(|(s, _)| *s)
            .collect();
        if late.is_empty() {
            return;
        }
        late.sort_unstable();
        for s in &late {
            // parked until resent: not outstanding, so the timer does not fire again meanwhile
            self.outstanding.insert(*s, Nanos::MAX);
        }
        self.resend.extend(late);
        if now.saturating_sub(self.last_cut) >= self.rto_ns {
            self.last_cut = now;
            self.cwnd = (self.cwnd / 2.0).max(1.0);
        }
    }

    fn is_done(&self) -> bool {
        self.received == self.layout.chunks
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("received", self.received as u64),
            ("outstanding", self.outstanding.len() as u64),
            ("cwnd", self.cwnd as u64),
            ("retransmissions", self.stats.retransmissions),
        ]
    }
}

impl Worker for AtpWorker {
    fn result(&self) -> Option<Vec<i32>> {
        self.is_done().then(|| self.result.clone())
    }

    fn stats(&self) -> HostStats {
        self.stats.clone()
    }
}

/// An aggregator: its state, then its values inline (one contiguous record, so a packet's
/// aggregator is the lines it adds into, with no pointer to follow to the values).
#[derive(Debug, Clone)]
#[repr(C)]
struct Aggregator {
    owner: Option<(u16, u16)>,
    bitmap: u32,
    count: u8,
    complete: bool,
    sum: [i32; VALUES_PER_PACKET],
}

impl Default for Aggregator {
    fn default() -> Self {
        Aggregator {
            owner: None,
            bitmap: 0,
            count: 0,
            complete: false,
            sum: [0; VALUES_PER_PACKET],
        }
    }
}

impl Aggregator {
    fn free(&mut self) {
        self.owner = None;
        self.sum.iter_mut().for_each(|x| *x = 0);
        self.bitmap = 0;
        self.count = 0;
        self.complete = false;
    }

    /// Add a packet's values (big-endian int32 bytes), wrapping.
    fn add(&mut self, bit: u32, values: &[u8]) {
        kernel::add_be_i32(&mut self.sum, values);
        self.bitmap |= bit;
        self.count += 1;
    }
}

/// One job on the switch: where its workers and parameter server are, and its own counts.
#[derive(Debug, Clone)]
struct JobPorts {
    job: u16,
    /// node id of its rank 0 (its ranks are consecutive nodes)
    first: usize,
    workers: usize,
    ps: NodeId,
    /// its tensor's values (the trailer of what goes to its PS)
    tensor_len: u32,
    /// the Ethernet and IPv4 headers of every frame from the switch to its PS (the same bytes
    /// each time: written once)
    ps_outer: [u8; OUTER],
    /// its workers' data packets in, and those of them that found their aggregator held by
    /// another (job, sequence) and went on to the PS (collisions)
    data_in: u64,
    collisions: u64,
}

/// Per-job counter names of a shared switch ([`AtpSwitch`]'s counters, jobs in build order).
const JOB_COLLISIONS: [&str; 4] = [
    "collisions_job0",
    "collisions_job1",
    "collisions_job2",
    "collisions_job3",
];
const JOB_DATA_IN: [&str; 4] = [
    "data_in_job0",
    "data_in_job1",
    "data_in_job2",
    "data_in_job3",
];

/// ATP's switch program on the Tofino model: one pool of aggregators, shared by every job whose
/// workers it serves (ATP's multi-tenant regime, [`build_shared`]; one job in every run but that).
pub struct AtpSwitch {
    id: NodeId,
    /// the jobs it serves, by job id (one for a job alone)
    jobs: Vec<JobPorts>,
    aggs: Vec<Aggregator>,
    pipeline: Pipeline,
    out: VecDeque<Transmit>,
    stats: SwitchStats,
    collisions: u64,
    flushes: u64,
    /// frame buffers: delivered frames come back through `recycle`, sends take from here
    pool: BufPool,
    /// per worker node: the ones' complement sum of its IPv4 address's two 16-bit words (the part
    /// of an ACK copy's header checksum that its destination gives)
    worker_ip_sum: Vec<u32>,
    /// per worker node: its MAC and IPv4 address (an ACK copy's destination)
    worker_addr: Vec<MacIp>,
}

/// The 16-bit big-endian words of `b` summed as integers: RFC 1071's sum before folding (what
/// [`ipv4::checksum`] folds and complements; `b` of even length, at most 2^16 words).
fn word_sum(b: &[u8]) -> u32 {
    b.chunks_exact(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum()
}

/// Fold a sum of 16-bit words to 16 bits (ones' complement), as [`ipv4::checksum`] does.
fn fold(mut s: u32) -> u16 {
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// What goes to the PS: a packet's own value bytes or an aggregator's sum.
enum ToPs<'a> {
    Bytes(&'a [u8]),
    Sum(usize),
}

impl AtpSwitch {
    /// A PS ACK `f` to every worker in `bitmap`: each copy rewrites the destination MAC and IP
    /// and the IPv4 checksum (`rest`: the header's word sum without checksum and destination).
    /// Its own function, so that the queue's `push_back` is inlined and each `Transmit` is
    /// written into the queue in place (built in `handle_packet`, each went through the stack to
    /// an out-of-line `push_back` that reloaded it at other widths: a store-forwarding stall on
    /// 83% of that function's samples).
    #[inline(never)]
    fn ack_to_workers(&mut self, j: usize, f: &[u8], bitmap: u32, rest: u32) {
        let (first, workers) = (self.jobs[j].first, self.jobs[j].workers);
        for r in 0..workers {
            if bitmap & (1 << r) == 0 {
                continue;
            }
            let w = first + r;
            self.stats.packets_out += 1;
            let mut b = self.pool.take_copy(f);
            // rewrite the destination MAC and IP for this worker
            let (mac, addr) = self.worker_addr.get(w).copied().unwrap_or_default();
            ethernet::Packet::new_unchecked(&mut b[..]).set_dst(mac);
            let mut ip = ipv4::Packet::new_unchecked(&mut b[ethernet::HEADER_LEN..]);
            ip.set_dst(addr);
            ip.set_header_checksum(!fold(
                rest + self.worker_ip_sum.get(w).copied().unwrap_or(0),
            ));
            self.out.push_back(Transmit {
                to: w as NodeId,
                bytes: b,
            });
        }
    }

    fn send_to_ps(&mut self, j: usize, h: &hdr::Repr, values: ToPs<'_>) {
        let t = Trailer {
            key: u64::from(h.sequence),
            tensor_len: self.jobs[j].tensor_len,
        };
        self.stats.packets_out += 1;
        let mut buf = self.pool.take(FRAME_LEN);
        buf[..OUTER].copy_from_slice(&self.jobs[j].ps_outer);
        let bytes = match values {
            ToPs::Bytes(be) => layer_into(buf, h, &t, |v| {
                let n = be.len().min(v.len());
                v[..n].copy_from_slice(&be[..n]);
            }),
            ToPs::Sum(idx) => {
                let sum = &self.aggs[idx].sum;
                layer_into(buf, h, &t, |v| {
                    let n = sum.len().min(VALUES_PER_PACKET);
                    kernel::store_be_i32(&mut v[..4 * n], &sum[..n]);
                })
            }
        };
        let to = self.jobs[j].ps;
        self.out.push_back(Transmit { to, bytes });
    }
}

impl Endpoint for AtpSwitch {
    fn id(&self) -> NodeId {
        self.id
    }

    fn handle_packet(&mut self, _now: Nanos, from: NodeId, f: &[u8]) {
        self.stats.packets_in += 1;
        self.stats.bytes_in += f.len() as u64;
        let Some((h, values)) = parse_be(f) else {
            self.stats.dropped += 1;
            return;
        };
        let idx = usize::from(h.aggregator);
        if idx >= self.aggs.len() {
            self.stats.dropped += 1;
            return;
        }
        self.pipeline.process(f.len() as u32, values.len() as u32);
        // the job's own ports (the released program forwards by application id): a job the
        // switch does not serve is dropped
        let Some(j) = self.jobs.iter().position(|p| p.job == h.job) else {
            self.stats.dropped += 1;
            return;
        };
        let key = (h.job, h.sequence);
        if h.is_ack {
            if from != self.jobs[j].ps {
                self.stats.dropped += 1;
                return;
            }
            if self.aggs[idx].owner == Some(key) {
                self.aggs[idx].free();
            }
            // the ACK's IPv4 header summed once without its checksum and destination; each
            // copy's checksum adds its worker's address (the bytes of `fill_checksum`)
            let ip = ipv4::Packet::new_unchecked(&f[ethernet::HEADER_LEN..]);
            let Some(ip) = f.get(ethernet::HEADER_LEN..ethernet::HEADER_LEN + ip.header_len())
            else {
                self.stats.dropped += 1;
                return;
            };
            let rest = word_sum(&ip[..10]) + word_sum(&ip[12..16]) + word_sum(&ip[20..]);
            self.ack_to_workers(j, f, h.bitmap, rest);
            return;
        }
        let w = (from as usize).wrapping_sub(self.jobs[j].first);
        if w >= self.jobs[j].workers || h.bitmap != 1 << w {
            self.stats.dropped += 1;
            return;
        }
        self.jobs[j].data_in += 1;
        let bit = 1u32 << w;
        let agg = &mut self.aggs[idx];
        if h.resend {
            if agg.owner == Some(key) && !agg.complete {
                if agg.bitmap & bit == 0 {
                    agg.add(bit, values);
                }
                let partial = hdr::Repr {
                    bitmap: agg.bitmap,
                    resend: true,
                    ..h
                };
                self.flushes += 1;
                self.send_to_ps(j, &partial, ToPs::Sum(idx));
                self.aggs[idx].free();
            } else {
                self.send_to_ps(j, &h, ToPs::Bytes(values));
            }
            return;
        }
        match agg.owner {
            None => {
                agg.owner = Some(key);
                agg.add(bit, values);
            }
            Some(k) if k == key => {
                if agg.bitmap & bit != 0 || agg.complete {
                    self.stats.duplicates_ignored += 1;
                    return;
                }
                agg.add(bit, values);
            }
            Some(_) => {
                self.collisions += 1;
                self.jobs[j].collisions += 1;
                let c = hdr::Repr {
                    collision: true,
                    ..h
                };
                self.send_to_ps(j, &c, ToPs::Bytes(values));
                return;
            }
        }
        if agg.count == h.fan_in {
            agg.complete = true;
            let full = hdr::Repr {
                bitmap: agg.bitmap,
                ..h
            };
            self.send_to_ps(j, &full, ToPs::Sum(idx));
        }
    }

    fn poll_transmit(&mut self, _now: Nanos) -> Option<Transmit> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Nanos> {
        None
    }

    fn handle_timeout(&mut self, _now: Nanos) {}

    fn recycle(&mut self, buf: Vec<u8>) {
        self.pool.put(buf);
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let mut c = vec![
            ("switch_in", self.stats.packets_in),
            ("collisions", self.collisions),
            ("flushes", self.flushes),
            (
                "aggregators_held",
                self.aggs.iter().filter(|a| a.owner.is_some()).count() as u64,
            ),
        ];
        // a shared switch's counts per job, in build order (a job alone: the totals above)
        if self.jobs.len() > 1 {
            for (k, p) in self.jobs.iter().enumerate().take(JOB_COLLISIONS.len()) {
                c.push((JOB_COLLISIONS[k], p.collisions));
                c.push((JOB_DATA_IN[k], p.data_in));
            }
        }
        c
    }
}

impl Switch for AtpSwitch {
    fn stats(&self) -> SwitchStats {
        let mut s = self.stats.clone();
        s.recirculations = self.pipeline.stats.recirculations;
        s.recirculated_bytes = self.pipeline.stats.recirculated_bytes;
        s.overhead_fraction = self.pipeline.internal_bandwidth_overhead();
        s.overhead_kind = "pipeline bandwidth spent on recirculation";
        s
    }
}

#[derive(Debug, Default)]
struct PsEntry {
    bitmap: u32,
    sum: Vec<i32>,
}

/// ATP's parameter server: completes what the switch could not and sends every result.
pub struct AtpPs {
    id: NodeId,
    job: u16,
    switch: NodeId,
    /// its own address and the switch's, which its ACKs carry
    me: MacIp,
    to: MacIp,
    layout: Layout,
    pending: HashMap<usize, PsEntry>,
    done: Vec<bool>,
    results: Vec<i32>,
    /// lowest sequence not completed
    base: usize,
    out: VecDeque<Transmit>,
    /// contributions that arrived whole from the switch / raw or partial
    pub full_from_switch: u64,
    pub partial_or_raw: u64,
    pub overlaps_dropped: u64,
}

impl AtpPs {
    fn ack(&mut self, seq: usize, to: u32) {
        let a = seq * VALUES_PER_PACKET;
        let b = (a + VALUES_PER_PACKET).min(self.results.len());
        let s16 = seq as u16;
        let agg = aggregator_of(self.job, s16, self.layout.pool);
        let h = hdr::Repr {
            bitmap: to,
            fan_in: self.layout.workers as u8,
            overflow: false,
            ps_index: 0,
            data_index: false,
            ecn: false,
            resend: false,
            collision: false,
            is_ack: true,
            job: self.job,
            sequence: s16,
            aggregator: agg,
            aggregator2: agg,
        };
        let t = Trailer {
            key: seq as u64,
            tensor_len: self.layout.elements as u32,
        };
        let bytes = frame(self.me, self.to, &h, &self.results[a.min(b)..b], &t);
        self.out.push_back(Transmit {
            to: self.switch,
            bytes,
        });
    }
}

impl Endpoint for AtpPs {
    fn id(&self) -> NodeId {
        self.id
    }

    fn handle_packet(&mut self, _now: Nanos, _from: NodeId, f: &[u8]) {
        let Some((h, values)) = parse(f) else {
            return;
        };
        if h.is_ack || h.job != self.job || h.bitmap & !self.layout.all() != 0 || h.bitmap == 0 {
            return;
        }
        let Some(seq) = unwrap_seq(h.sequence, self.base) else {
            return;
        };
        if seq >= self.layout.chunks {
            return;
        }
        if self.done[seq] {
            // a worker lost its result: send it again to the workers this packet speaks for
            self.ack(seq, h.bitmap);
            return;
        }
        if h.bitmap == self.layout.all() {
            self.full_from_switch += 1;
        } else {
            self.partial_or_raw += 1;
        }
        let e = self.pending.entry(seq).or_insert_with(|| PsEntry {
            bitmap: 0,
            sum: vec![0; VALUES_PER_PACKET],
        });
        if e.bitmap & h.bitmap != 0 {
            if h.bitmap & !e.bitmap != 0 {
                // overlapping partial: taking it would count a worker twice
                self.overlaps_dropped += 1;
            }
            return;
        }
        for (a, x) in e.sum.iter_mut().zip(&values) {
            *a = a.wrapping_add(*x);
        }
        e.bitmap |= h.bitmap;
        if e.bitmap == self.layout.all() {
            let Some(e) = self.pending.remove(&seq) else {
                return;
            };
            let a = seq * VALUES_PER_PACKET;
            for (k, v) in e.sum.iter().enumerate() {
                if let Some(r) = self.results.get_mut(a + k) {
                    *r = *v;
                }
            }
            self.done[seq] = true;
            while self.base < self.layout.chunks && self.done[self.base] {
                self.base += 1;
            }
            self.ack(seq, self.layout.all());
        }
    }

    fn poll_transmit(&mut self, _now: Nanos) -> Option<Transmit> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Nanos> {
        None
    }

    fn handle_timeout(&mut self, _now: Nanos) {}

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("ps_full", self.full_from_switch),
            ("ps_partial_or_raw", self.partial_or_raw),
            ("ps_overlaps_dropped", self.overlaps_dropped),
        ]
    }
}

pub struct Atp;

impl System for Atp {
    fn name(&self) -> &'static str {
        "atp"
    }

    fn in_network(&self) -> bool {
        true
    }

    /// ATP's released client ([`crate::hoststack::DpdkStack::atp_release`]).
    fn dpdk_client(&self, core_frame_ns: u64) -> crate::hoststack::DpdkStack {
        crate::hoststack::DpdkStack::atp_release(core_frame_ns)
    }

    /// No payload integrity check.
    fn fuzz_findings(&self) -> &'static [inabench_fabric::fuzz::Kind] {
        &[inabench_fabric::fuzz::Kind::Flip]
    }

    /// One job alone on the switch, with the job id `atp_job` (default [`DEFAULT_JOB`]).
    fn build(&self, cfg: &AllReduceConfig) -> Result<Setup, SetupError> {
        self.build_at(cfg, None)
    }

    /// One job alone, its workers, switch and parameter server at `plan`'s addresses (its
    /// workers', its switch's, which the workers and the PS send to, and its first server's,
    /// the PS: a testbed host with role `ps`).
    fn build_at(
        &self,
        cfg: &AllReduceConfig,
        plan: Option<&AddressPlan>,
    ) -> Result<Setup, SetupError> {
        let job = match cfg.knob("atp_job") {
            None => DEFAULT_JOB,
            Some(j) if j.fract() == 0.0 && (1.0..=65535.0).contains(&j) => j as u16,
            Some(j) => {
                return Err(SetupError::Config(format!(
                    "ATP's job id is 1..65535 (got {j})"
                )));
            }
        };
        build_shared_at(&[(job, cfg)], plan)
    }

    /// Jobs sharing one switch's aggregator pool ([`build_shared`]).
    fn build_shared(&self, jobs: &[(u16, &AllReduceConfig)]) -> Option<Result<Setup, SetupError>> {
        Some(build_shared(jobs))
    }
}

/// Jobs sharing one ATP switch (ATP's multi-tenant regime, NSDI'21 Sec. 3): each job its own
/// workers (`cfg.workers` of them, gradients from its own `cfg.seed`), window and parameter server;
/// one pool of `atp_pool` aggregators on the switch for all of them (every job's `atp_pool` must
/// agree). A packet's aggregator is [`aggregator_of`] its (job, sequence); one whose aggregator
/// holds another (job, sequence) is a collision and goes on to its own job's PS, which sums it in
/// software, the rule of the released switch program (in-ATP/ATP `p4src/includes/actions.p4`,
/// the stateful ALU `check_app_id_and_seq`: an aggregator register holding another application
/// id and sequence leaves the packet unaggregated, forwarded to the PS).
///
/// Where the index comes from differs: the released client (`client/p4ml_manager.cc`,
/// `P4mlManager::init`, and `common/HashTable.cc`, `HashTable::HashNew_crc`) fixes per job a
/// table of as many aggregators as its window, each a CRC32 of (application id, slot, salt)
/// modulo the pool, salted again until the job holds it once, and sends sequence s to slot
/// (s - 1) mod window; a job's own sequences so never collide and two jobs collide where their
/// tables overlap. Here every (job, sequence) is hashed afresh (FNV-1a, [`aggregator_of`]), the
/// paper's wording and this suite's one-job model since Table 6: a job can also collide with its
/// own older sequences still live, so at a given pool this model collides more than the release.
///
/// Nodes: the jobs' workers in job order (job 0's ranks first), the switch, then the jobs'
/// parameter servers in job order. A job alone (`Atp::build`) is exactly this with one job.
pub fn build_shared(jobs: &[(u16, &AllReduceConfig)]) -> Result<Setup, SetupError> {
    build_shared_at(jobs, None)
}

/// [`build_shared`] with every node at `plan`'s addresses (None: [`synthetic_address`]): the
/// jobs' workers are the plan's workers in order, the switch its switch (required: the workers
/// and parameter servers send to it), the parameter servers its servers in job order.
pub fn build_shared_at(
    jobs: &[(u16, &AllReduceConfig)],
    plan: Option<&AddressPlan>,
) -> Result<Setup, SetupError> {
    let Some((_, first_cfg)) = jobs.first() else {
        return Err(SetupError::Config("ATP needs at least one job".into()));
    };
    let pool_knob = first_cfg.knob("atp_pool");
    let total: usize = jobs.iter().map(|(_, c)| c.workers).sum();
    if total + 1 + jobs.len() > 254 {
        return Err(SetupError::Config(format!(
            "{total} workers and {} parameter servers do not fit this model's 10.0.2.0/24 addresses",
            jobs.len()
        )));
    }
    for (k, (job, cfg)) in jobs.iter().enumerate() {
        if cfg.knob("atp_pool") != pool_knob {
            return Err(SetupError::Config(
                "jobs sharing an ATP switch share one pool: every job's atp_pool must agree".into(),
            ));
        }
        if jobs[..k].iter().any(|(j, _)| j == job) {
            return Err(SetupError::Config(format!(
                "two jobs sharing an ATP switch with the same job id {job}"
            )));
        }
    }
    let addrs = NodeAddresses::of("ATP", plan, total, jobs.len(), true, synthetic_address)?;
    let at = |n: usize| (addrs.mac(n), addrs.ip(n));
    let switch = total as NodeId;
    let mut workers: Vec<Box<dyn Worker>> = Vec::with_capacity(total);
    let mut ports = Vec::with_capacity(jobs.len());
    let mut servers: Vec<Box<dyn Endpoint>> = Vec::with_capacity(jobs.len());
    let mut pool = 0;
    for (k, &(job, cfg)) in jobs.iter().enumerate() {
        let layout = Layout::new(cfg)?;
        pool = layout.pool;
        let first = workers.len();
        let ps = switch + 1 + k as NodeId;
        let cwnd = cfg.knob("atp_window").unwrap_or(128.0).max(1.0);
        for r in 0..cfg.workers {
            workers.push(Box::new(AtpWorker {
                rank: r,
                node: first + r,
                job,
                switch,
                me: at(first + r),
                to: at(total),
                layout,
                grad: gradient(cfg.seed, r, cfg.elements),
                result: vec![0; cfg.elements],
                outstanding: HashMap::new(),
                next: 0,
                base: 0,
                acked: vec![false; layout.chunks],
                received: 0,
                resend: VecDeque::new(),
                cwnd,
                max_window: cwnd.max(1024.0),
                last_cut: 0,
                rto_ns: cfg.timeout_ns,
                sent_at: vec![None; layout.chunks],
                ready_since: None,
                clock: crate::common::TxClock::new(cfg.line_rate_bps),
                stats: HostStats {
                    gradient_bytes: 4 * cfg.elements as u64,
                    ..HostStats::default()
                },
                started: false,
            }));
        }
        ports.push(JobPorts {
            job,
            first,
            workers: cfg.workers,
            ps,
            tensor_len: cfg.elements as u32,
            ps_outer: {
                let mut o = [0u8; OUTER];
                outer_into(&mut o, at(total), at(ps as usize));
                o
            },
            data_in: 0,
            collisions: 0,
        });
        servers.push(Box::new(AtpPs {
            id: ps,
            job,
            switch,
            me: at(ps as usize),
            to: at(total),
            layout,
            pending: HashMap::new(),
            done: vec![false; layout.chunks],
            results: vec![0; cfg.elements],
            base: 0,
            out: VecDeque::new(),
            full_from_switch: 0,
            partial_or_raw: 0,
            overlaps_dropped: 0,
        }));
    }
    let sw = AtpSwitch {
        id: switch,
        jobs: ports,
        aggs: vec![Aggregator::default(); pool],
        pipeline: Pipeline::new(TofinoModel::PAPER, Recirculation::SamePipeline),
        out: VecDeque::new(),
        stats: SwitchStats {
            ports_used: (total + jobs.len()) as u32,
            ports_total: TofinoModel::PAPER.ports(),
            ..SwitchStats::default()
        },
        collisions: 0,
        flushes: 0,
        pool: BufPool::default(),
        worker_ip_sum: (0..total).map(|w| word_sum(&addrs.ip(w))).collect(),
        worker_addr: (0..total).map(at).collect(),
    };
    Ok(Setup {
        workers,
        switch: Box::new(sw),
        others: servers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_fit_two_passes() {
        let h = hdr::Repr {
            bitmap: 4,
            fan_in: 6,
            overflow: false,
            ps_index: 0,
            data_index: false,
            ecn: false,
            resend: true,
            collision: false,
            is_ack: false,
            job: DEFAULT_JOB,
            sequence: 9,
            aggregator: 7,
            aggregator2: 7,
        };
        let v: Vec<i32> = (0..62).map(|i| i * -3).collect();
        let f = frame(
            synthetic_address(2),
            synthetic_address(6),
            &h,
            &v,
            &Trailer {
                key: 9,
                tensor_len: 1000,
            },
        );
        assert_eq!(f.len(), FRAME_LEN);
        assert_eq!(parse(&f), Some((h, v)));
        assert!(parse(&f[..FRAME_LEN - 1]).is_none());
        assert_eq!(TofinoModel::PAPER.passes(hdr::VALUES_LEN as u32), 2);
        // a short last chunk is zero-padded
        let f = frame(
            synthetic_address(2),
            synthetic_address(6),
            &h,
            &[5, 6],
            &Trailer {
                key: 9,
                tensor_len: 1000,
            },
        );
        let (_, got) = parse(&f).expect("parses");
        assert_eq!(&got[..3], &[5, 6, 0]);
    }

    /// The switch's frames (to the PS from its header template; ACK copies with the checksum
    /// from the ACK's partial sum) are byte for byte the frames built and rewritten the plain
    /// way.
    #[test]
    fn switch_frames_are_the_plainly_built_ones() {
        let cfg = AllReduceConfig {
            workers: 6,
            elements: 62 * 4,
            seed: 1,
            line_rate_bps: 100e9,
            mtu: 1024,
            timeout_ns: 1_000_000,
            knobs: vec![],
        };
        let n = cfg.workers;
        let mut nodes = Atp.build(&cfg).expect("build").into_nodes();
        let ps_id = n as NodeId + 1;
        let mut worker_frames = Vec::new();
        for node in nodes.iter_mut().take(n) {
            let id = node.id();
            while let Some(t) = node.poll_transmit(0) {
                worker_frames.push((id, t.bytes));
            }
        }
        let crate::common::SetupNode::Switch(sw) = &mut nodes[n] else {
            panic!("node {n} is the switch")
        };
        let mut to_ps = Vec::new();
        for (from, f) in &worker_frames {
            sw.handle_packet(0, *from, f);
            while let Some(t) = sw.poll_transmit(0) {
                assert_eq!(t.to, ps_id);
                to_ps.push(t.bytes);
            }
        }
        assert_eq!(to_ps.len(), 4, "one aggregate per sequence");
        for f in &to_ps {
            let (h, v) = parse(f).expect("parses");
            assert_eq!(h.bitmap, (1 << n) - 1);
            let t = Trailer {
                key: u64::from(h.sequence),
                tensor_len: cfg.elements as u32,
            };
            let a = synthetic_address;
            assert_eq!(*f, frame(a(n), a(n + 1), &h, &v, &t), "to the PS");
            // the PS's ACK for it (to workers 1, 3 and 4 only) passes back through the switch
            let ack = hdr::Repr {
                is_ack: true,
                bitmap: 0b11010,
                ..h
            };
            let ack = frame(a(n + 1), a(n), &ack, &v, &t);
            sw.handle_packet(0, ps_id, &ack);
            let mut copies = Vec::new();
            while let Some(t) = sw.poll_transmit(0) {
                copies.push(t);
            }
            assert_eq!(
                copies.iter().map(|t| t.to).collect::<Vec<_>>(),
                vec![1, 3, 4]
            );
            for c in copies {
                let w = c.to as usize;
                let mut want = ack.clone();
                ethernet::Packet::new_unchecked(&mut want[..]).set_dst([
                    2,
                    0,
                    0,
                    2,
                    0,
                    (w + 1) as u8,
                ]);
                let mut ip = ipv4::Packet::new_unchecked(&mut want[ethernet::HEADER_LEN..]);
                ip.set_dst(a(w).1);
                ip.fill_checksum();
                assert_eq!(c.bytes, want, "ACK copy to worker {w}");
            }
        }
    }

    #[test]
    fn sequence_unwrapping() {
        assert_eq!(unwrap_seq(5, 0), Some(5));
        assert_eq!(unwrap_seq(2, 65_530), Some(65_538));
        assert_eq!(unwrap_seq(65_530, 65_540), Some(65_530));
        assert_eq!(unwrap_seq(65_535, 0), None);
        let pool = 4096;
        assert!((0..100u16).all(|s| usize::from(aggregator_of(1, s, pool)) < pool));
        assert_ne!(aggregator_of(1, 1, pool), aggregator_of(1, 2, pool));
    }
}
