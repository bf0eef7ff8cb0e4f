//! NetReduce's accelerator (Sec. 3.1-3.2, Sec. 4) on a software FPGA model.
//!
//! - Connection Lookup Table keyed by (SrcIP, DstIP, DstQP) -> (Rank, MsgID, PSN0), filled by the
//!   first packet of a message, recognised by the InetTag in its INA header;
//! - an aggregator array of 2N messages x MsgLen packets, addressed by
//!   `MsgID % 2N * MsgLen + (PSN - PSN0)`; each aggregator keeps a per-rank packet buffer and a
//!   bitmap; a retransmitted packet overwrites its rank's slot (idempotent);
//! - non-first packets whose PSN - PSN0 >= MsgLen are dropped (their first packet was lost, the
//!   CLT still holds the previous message), and the sender's go-back-N resends them;
//! - when all ranks' packets of an aggregator are in, the aggregate goes to every rank in a packet
//!   rebuilt from the predecessor's original headers (its BTH, PSN and RETH) with the ICRC
//!   recomputed, so the receiving RC endpoint accepts it unchanged; a retransmission of a completed
//!   aggregator gets the aggregate again (the responder drops what it already has);
//! - ACK/NAK packets pass through to their destination.
//!
//! With several QPs per worker pair ([`Layout::qps`], message `m` on QP `m mod qps`), each QP
//! has its own 2N messages of aggregators, addressed by the message's number within its QP:
//! `(q * 2N + (MsgID / qps) % 2N) * MsgLen + (PSN - PSN0)` (with one QP: the paper's address).
//!
//! Deallocation ([`Release`], the `aggregator_release` knob): the paper makes every gradient
//! packet of message MsgID free the aggregator "one window away", `(MsgID + N) % 2N x MsgLen +
//! (PSN - PSN0)`, the one message MsgID - N used (Sec. 3.1; `Release::OneWindowAway`). After a
//! lost aggregate packet, a rank may still retransmit a message whose aggregators were freed
//! that way (another rank, whose successor got the result, has moved N messages on), and that
//! message could never complete again. By default we therefore free an aggregator lazily, when
//! the next message that maps to it (MsgID + 2N) arrives (`Release::Lazy`): with a window of N no
//! rank can still need MsgID by then, so the memory is the same 2N messages and no result is
//! lost. The reliability spec runs both (`aggregator_release`).
//!
//! The FPGA model: six 100G ports (Sec. 4), attached to six ports of the Ethernet switch that the
//! workers use, so the deployment occupies 6 host ports + 6 accelerator ports; the "switch ports"
//! overhead of Table 6 is the accelerator's share of the switch ports it needs.

use crate::common::{Switch, SwitchStats, kernel};
use crate::netreduce::{Layout, Release, qp_index};
use crate::roce::psn_diff;
use crate::target::Target;
use inabench_fabric::addresses::AddressPlan;
use inabench_fabric::{BufPool, Endpoint, Nanos, NodeId, Transmit};
use inabench_wire::ib::opcode;
use inabench_wire::icrc::{SharedTail, Shift};
use inabench_wire::ina::NetReduceHeader;
use inabench_wire::roce::{EmitCache, FrameRepr, IcrcCheck, ParseCache};
use std::collections::VecDeque;

/// The FPGA board of Sec. 4.
#[derive(Debug, Clone, Copy)]
pub struct FpgaModel {
    pub ports: u32,
    pub port_rate_gbps: f64,
}

impl FpgaModel {
    pub const PAPER: FpgaModel = FpgaModel {
        ports: 6,
        port_rate_gbps: 100.0,
    };
}

/// The board as a [`Target`]: its own ports, and one pass a packet whatever its payload (the
/// aggregator array is memory addressed by message and PSN, not registers a pass can touch once).
impl Target for FpgaModel {
    fn name(&self) -> &'static str {
        "fpga"
    }
    fn ports(&self) -> u32 {
        self.ports
    }
    fn port_gbps(&self) -> f64 {
        self.port_rate_gbps
    }
    fn passes(&self, _payload: u32) -> u32 {
        1
    }
}

#[derive(Debug, Clone, Copy)]
struct Clt {
    rank: usize,
    msg_id: u32,
    psn0: u32,
}

/// What an aggregator keeps of a rank's packet: its headers (a result copy to its successor
/// wears them), its payload's length and first bytes (a first packet's INA header, which that
/// copy keeps), and, for float32 only, the whole payload (summed in rank order at completion).
#[derive(Debug, Clone)]
struct Held {
    repr: FrameRepr,
    len: usize,
    /// the payload starts with a NetReduce header (InetTag)
    first: bool,
    /// the payload's first `min(len, RESULT_HEAD)` bytes
    head: [u8; RESULT_HEAD],
    /// float32: the payload, summed at completion; int32: `None` (summed on arrival)
    payload: Option<Vec<u8>>,
}

#[derive(Debug, Default)]
struct Aggregator {
    msg_id: Option<u32>,
    bitmap: u64,
    bufs: Vec<Option<Held>>,
    /// int32: the running sums of every big-endian word of the payloads in so far (from the
    /// payload's first byte, a first packet's INA header words included and never sent), each
    /// payload added straight from its frame as it arrives
    acc: Vec<i32>,
    result: Option<Vec<u8>>,
    /// the CRC of the result's bytes after [`RESULT_HEAD`] (and the pad), which every copy of
    /// the result ends in: set with `result`
    tail: Option<SharedTail>,
    /// The message whose aggregate the paper's rule freed here one window away (kept until
    /// another message takes the aggregator), to count packets that come back for it.
    freed_early: Option<u32>,
}

/// The bytes of a result frame's payload whose source differs between copies: a first packet
/// keeps its own INA header there, the others the aggregate's first bytes. The rest of the
/// payload is the same in every copy, so its ICRC contribution is computed once per aggregate.
const RESULT_HEAD: usize = NetReduceHeader::LEN;

/// A CLT key: (SrcIP, DstIP, DstQP).
type CltKey = ([u8; 4], [u8; 4], u32);

pub struct Accelerator {
    id: NodeId,
    layout: Layout,
    model: FpgaModel,
    /// the Connection Lookup Table, by the sender's rank (every entry's SrcIP is a worker's):
    /// each rank's connections (one per QP), searched by the whole key
    clt: Vec<Vec<(CltKey, Clt)>>,
    aggs: Vec<Aggregator>,
    out: VecDeque<Transmit>,
    stats: SwitchStats,
    /// frame and payload buffers: delivered frames come back through `recycle`, an
    /// aggregator's held payloads and result go back here when it is reused
    pool: BufPool,
    /// the float32 adder's accumulators, reused for every aggregation
    acc_f32: Vec<f32>,
    /// appends a result's shared tail to each copy's ICRC (built for the first result's tail
    /// length, rebuilt if it changes)
    shift: Option<Shift>,
    /// per sending node (a worker): templates of its last fully parsed frames (a QP's first,
    /// middle and last packets), which parse its next frames by a compare of their headers
    /// with the same result as a full parse (malformed and foreign frames are parsed in full)
    parse: Vec<ParseCache>,
    /// per destination rank and QP (`rank * qps + q`): the headers of the last result copy
    /// built for it (the next copy's are those with another PSN when both are the QP's middle
    /// packets: copied)
    emit_cache: Vec<EmitCache>,
    /// aggregators freed by the paper's one-window-away rule ([`Release::OneWindowAway`])
    released_early: u64,
    /// packets that came for a message whose aggregate the one-window-away rule had freed
    refetch_after_release: u64,
    /// which worker an IPv4 address is (a frame's sender, an ACK's destination): the
    /// synthetic plan reads any 10.x.y.<i+1> as worker i, as the accelerator always has; a
    /// testbed's plan ([`Accelerator::with_addresses`]) its hosts' own addresses
    addresses: AddressPlan,
}

impl Accelerator {
    pub fn new(id: NodeId, layout: Layout) -> Accelerator {
        let slots = (layout.qps * 2 * layout.window * layout.msg_len) as usize;
        let aggs = (0..slots)
            .map(|_| Aggregator {
                bufs: vec![None; layout.workers],
                ..Aggregator::default()
            })
            .collect();
        let model = FpgaModel::PAPER;
        // ports: one switch port per worker, and the accelerator's ports on the same switch
        let host_ports = layout.workers as u32;
        let accel_ports = model.ports().min(host_ports.max(1));
        let stats = SwitchStats {
            ports_used: accel_ports,
            ports_total: host_ports + accel_ports,
            overhead_fraction: f64::from(accel_ports) / f64::from(host_ports + accel_ports),
            overhead_kind: "switch ports taken by the accelerator",
            ..SwitchStats::default()
        };
        Accelerator {
            id,
            layout,
            model,
            clt: vec![Vec::new(); layout.workers],
            aggs,
            out: VecDeque::new(),
            stats,
            // every buffer that can circulate through the accelerator: each aggregator holds one
            // payload per worker and a result, and a fabric hands over a burst of frames before
            // the accelerator transmits (a smaller cap freed buffers on receive and allocated
            // them again on transmit: ~150k mallocs per 64 MiB mem run); the pool only keeps
            // buffers that already exist, so memory stays what the run circulates
            pool: BufPool::new(BufPool::DEFAULT_CAP + slots * (layout.workers + 1)),
            acc_f32: Vec::new(),
            shift: None,
            // a first, a middle and a last packet per QP (and one spare)
            parse: vec![ParseCache::new(3 * layout.qps as usize + 1); layout.workers],
            emit_cache: vec![EmitCache::default(); layout.workers * layout.qps as usize],
            released_early: 0,
            refetch_after_release: 0,
            addresses: AddressPlan::synthetic(),
        }
    }

    /// The accelerator finding its workers by a testbed's addresses (worker i is the plan's
    /// worker i, whatever its IPv4 address) instead of the 10.x.y.<i+1> numbering.
    pub fn with_addresses(mut self, plan: AddressPlan) -> Accelerator {
        self.addresses = plan;
        self
    }

    pub fn model(&self) -> FpgaModel {
        self.model
    }

    /// Send slot `slot`'s aggregate to `to_rank`, in the headers of the frame its predecessor
    /// sent (built into a pooled buffer).
    fn emit(&mut self, to_rank: usize, slot: usize) {
        let n = self.layout.workers;
        let qps = self.layout.qps as usize;
        let from = (to_rank + n - 1) % n;
        let agg = &self.aggs[slot];
        let (Some(result), Some(orig)) = (&agg.result, &agg.bufs[from]) else {
            return;
        };
        let repr = &orig.repr;
        // the first packet keeps its own INA header in front of the aggregated values (every
        // held payload is at least the result long)
        let k = RESULT_HEAD.min(result.len());
        let head = if orig.first {
            &orig.head[..k]
        } else {
            &result[..k]
        };
        let mut bytes = self.pool.take(0);
        let built = match (&agg.tail, &self.shift) {
            (Some(tail), Some(shift)) if shift.len() == tail.len() => repr
                .build_shared_tail_cached(
                    &mut self.emit_cache[to_rank * qps + qp_index(repr.bth.dest_qp) as usize % qps],
                    &mut bytes,
                    &[head],
                    &result[k..],
                    tail,
                    shift,
                ),
            // a late retransmission of a result of another length than the latest: hashed whole
            _ => repr.build_parts_into(&mut bytes, &[head, &result[k..]]),
        };
        match built {
            Ok(()) => {
                self.stats.packets_out += 1;
                self.out.push_back(Transmit {
                    to: to_rank as NodeId,
                    bytes,
                });
            }
            Err(_) => self.pool.put(bytes),
        }
    }

    /// Free aggregator `slot`: no message, no packets, no result (its buffers back to the pool).
    fn free(&mut self, slot: usize) {
        let agg = &mut self.aggs[slot];
        agg.msg_id = None;
        agg.bitmap = 0;
        agg.tail = None;
        if let Some(r) = agg.result.take() {
            self.pool.put(r);
        }
        for b in agg.bufs.iter_mut() {
            if let Some(p) = b.take().and_then(|h| h.payload) {
                self.pool.put(p);
            }
        }
    }

    fn on_data(&mut self, repr: FrameRepr, payload: &[u8]) {
        let key = (repr.src_ip, repr.dst_ip, repr.bth.dest_qp);
        let op = repr.bth.opcode & 0x1f;
        let is_first = (op == opcode::WRITE_FIRST || op == opcode::WRITE_ONLY)
            && NetReduceHeader::is_first(payload);
        if is_first {
            let Ok(h) = NetReduceHeader::parse(payload) else {
                return;
            };
            let Some(rank) = self
                .addresses
                .node_of_ip(repr.src_ip)
                .map(|r| r as usize)
                .filter(|r| *r < self.layout.workers)
            else {
                self.stats.dropped += 1;
                return;
            };
            // a message rides QP `msg_id mod qps`: another QP's message is not this connection's
            if h.msg_len != self.layout.msg_len
                || h.msg_id % self.layout.qps != qp_index(repr.bth.dest_qp) % self.layout.qps
            {
                self.stats.dropped += 1;
                return;
            }
            let entry = Clt {
                rank,
                msg_id: h.msg_id,
                psn0: repr.bth.psn,
            };
            let conns = &mut self.clt[rank];
            match conns.iter_mut().find(|(k, _)| *k == key) {
                Some((_, c)) => *c = entry,
                None => conns.push((key, entry)),
            }
        }
        let found = self
            .addresses
            .node_of_ip(repr.src_ip)
            .and_then(|r| self.clt.get(r as usize))
            .and_then(|conns| conns.iter().find(|(k, _)| *k == key));
        let Some(&(_, c)) = found else {
            self.stats.dropped += 1;
            return;
        };
        // PSN distance from the CLT's first packet, signed in 24-bit PSN space
        let raw = psn_diff(c.psn0, repr.bth.psn);
        let d = if raw >= 1 << 23 {
            i64::from(raw) - (1 << 24)
        } else {
            i64::from(raw)
        };
        let ml = i64::from(self.layout.msg_len);
        if d >= ml {
            // the first packet of this message was lost: the CLT still holds the previous one
            self.stats.dropped += 1;
            return;
        }
        // d < 0: a go-back-N retransmission of an earlier message of the window (the paper is
        // silent here; with a fixed MsgLen the message and offset follow from the PSN)
        // (`back` messages of this QP, each `qps` message numbers apart)
        let back = if d < 0 { (-d + ml - 1) / ml } else { 0 };
        let qps = self.layout.qps;
        if back > i64::from(2 * self.layout.window) || i64::from(c.msg_id) < back * i64::from(qps) {
            self.stats.dropped += 1;
            return;
        }
        let msg_id = c.msg_id - back as u32 * qps;
        let offset = (d + back * ml) as u32;
        let c = Clt { msg_id, ..c };
        let window = 2 * self.layout.window;
        let slot = (((c.msg_id % qps) * window + (c.msg_id / qps) % window) * self.layout.msg_len
            + offset) as usize;
        if self.layout.release == Release::OneWindowAway {
            // the paper's rule: this packet frees the aggregator one window away, which holds
            // message MsgID - N of this QP (if it still holds an earlier message than this one)
            let away = (((c.msg_id % qps) * window
                + (c.msg_id / qps + self.layout.window) % window)
                * self.layout.msg_len
                + offset) as usize;
            if away != slot && self.aggs[away].msg_id.is_some_and(|m| m < c.msg_id) {
                let m = self.aggs[away].msg_id;
                self.free(away);
                self.aggs[away].freed_early = m;
                self.released_early += 1;
            }
        }
        let agg = &mut self.aggs[slot];
        match agg.msg_id {
            Some(m) if m == c.msg_id => {}
            Some(m) if m > c.msg_id => {
                // a very late packet of a message whose aggregator has been reused
                self.stats.dropped += 1;
                return;
            }
            _ => {
                // lazy deallocation (or a freed aggregator): it now serves this message
                if self.aggs[slot].freed_early == Some(c.msg_id) {
                    // a packet of a message whose aggregate the paper's rule freed: a rank
                    // still needed it (its result was lost or came out of order and its
                    // predecessor resent), and the aggregation starts again from this one rank
                    self.refetch_after_release += 1;
                }
                self.free(slot);
                self.aggs[slot].freed_early = None;
                self.aggs[slot].msg_id = Some(c.msg_id);
            }
        }
        let agg = &mut self.aggs[slot];
        let bit = 1u64 << c.rank;
        let seen = agg.bitmap & bit != 0;
        if seen {
            self.stats.duplicates_ignored += 1;
        }
        let mut head = [0u8; RESULT_HEAD];
        let h = RESULT_HEAD.min(payload.len());
        head[..h].copy_from_slice(&payload[..h]);
        let first = NetReduceHeader::is_first(payload);
        let held_payload = if self.layout.float {
            // float32 sums depend on the order: the payloads are kept and summed in rank order
            let mut held = match agg.bufs[c.rank].take().and_then(|h| h.payload) {
                Some(p) => p,
                None => self.pool.take(0),
            };
            held.clear();
            held.extend_from_slice(payload);
            Some(held)
        } else {
            // int32 sums do not depend on the order: added now, straight from the frame. A
            // retransmission of a packet already in (`seen`) carries the same bytes (the RC
            // sender resends from the same memory at the same PSN), so the paper's overwrite
            // of its slot leaves the sum as it is: it is not added again.
            if !seen {
                let words = payload.len() / 4;
                let be = &payload[..4 * words];
                if agg.bitmap == 0 {
                    agg.acc.clear();
                    agg.acc.resize(words, 0);
                    kernel::load_be_i32(&mut agg.acc, be);
                } else {
                    if agg.acc.len() < words {
                        agg.acc.resize(words, 0);
                    }
                    kernel::add_be_i32(&mut agg.acc, be);
                }
            }
            None
        };
        agg.bitmap |= bit;
        agg.bufs[c.rank] = Some(Held {
            repr,
            len: payload.len(),
            first,
            head,
            payload: held_payload,
        });
        let full = if self.layout.workers == 64 {
            u64::MAX
        } else {
            (1u64 << self.layout.workers) - 1
        };
        if agg.result.is_some() {
            // a retransmission after completion: its destination gets the aggregate again
            self.emit((c.rank + 1) % self.layout.workers, slot);
            return;
        }
        if agg.bitmap != full {
            return;
        }
        // aggregate: int32 sums; the INA header bytes of a first packet are not values
        let skip = if is_first || agg.bufs.iter().flatten().any(|h| h.first) {
            NetReduceHeader::LEN
        } else {
            0
        };
        let len = agg.bufs.iter().flatten().map(|h| h.len).min().unwrap_or(0);
        // whole values after the header; trailing bytes (len - skip not a multiple of 4) stay 0
        let start = skip.min(len);
        let values = (len - start) / 4;
        let body = start..start + 4 * values;
        let mut sum = self.pool.take_for_overwrite(len);
        sum[..start].fill(0);
        sum[body.end..].fill(0);
        if self.layout.float {
            // float32 in rank order, as the accelerator's adder tree would (one order, so every
            // rank gets the same bits): acc = ((0 + x0) + x1) + ...
            let acc = &mut self.acc_f32;
            acc.clear();
            acc.resize(values, 0.0);
            for p in agg.bufs.iter().flatten().filter_map(|h| h.payload.as_ref()) {
                kernel::add_be_f32(acc, &p[body.clone()]);
            }
            kernel::store_be_f32(&mut sum[body], acc);
        } else {
            // the words of the body (`start` is a multiple of 4 whenever `values` > 0)
            let w = start / 4;
            kernel::store_be_i32(&mut sum[body], &agg.acc[w..w + values]);
        }
        let k = RESULT_HEAD.min(len);
        let tail = SharedTail::new(&sum[k..], FrameRepr::pad_len(len));
        if self.shift.as_ref().map(Shift::len) != Some(tail.len()) {
            self.shift = Some(Shift::new(tail.len()));
        }
        agg.result = Some(sum);
        agg.tail = Some(tail);
        for r in 0..self.layout.workers {
            self.emit(r, slot);
        }
    }
}

impl Endpoint for Accelerator {
    fn id(&self) -> NodeId {
        self.id
    }

    fn handle_packet(&mut self, _now: Nanos, from: NodeId, frame: &[u8]) {
        self.stats.packets_in += 1;
        self.stats.bytes_in += frame.len() as u64;
        let parsed = match self.parse.get_mut(from as usize) {
            Some(cache) => cache.parse(frame, IcrcCheck::Verify),
            None => FrameRepr::parse(frame),
        };
        let Ok((repr, payload)) = parsed else {
            self.stats.dropped += 1;
            return;
        };
        if repr.bth.opcode & 0x1f == opcode::ACKNOWLEDGE {
            match self
                .addresses
                .node_of_ip(repr.dst_ip)
                .filter(|d| (*d as usize) < self.layout.workers)
            {
                Some(to) => {
                    self.stats.packets_out += 1;
                    self.out.push_back(Transmit {
                        to,
                        bytes: self.pool.take_copy(frame),
                    });
                }
                None => self.stats.dropped += 1,
            }
            return;
        }
        self.on_data(repr, payload);
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
        vec![
            ("switch_in", self.stats.packets_in),
            ("switch_out", self.stats.packets_out),
            ("switch_dropped", self.stats.dropped),
            ("released_early", self.released_early),
            ("refetch_after_release", self.refetch_after_release),
        ]
    }
}

impl Switch for Accelerator {
    fn stats(&self) -> SwitchStats {
        self.stats.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::{AllReduceConfig, SetupNode, System};
    use crate::netreduce::{NetReduce, psn0};
    use inabench_wire::roce::FrameRepr;

    /// Every worker's first window of frames, by worker, in sending order.
    fn windows(cfg: &AllReduceConfig) -> (Vec<Vec<Vec<u8>>>, Accelerator) {
        let layout = Layout::new(cfg).expect("layout");
        let mut frames = Vec::new();
        for n in NetReduce.build(cfg).expect("build").into_nodes() {
            if let SetupNode::Worker(mut w) = n {
                let mut mine = Vec::new();
                while let Some(t) = w.poll_transmit(0) {
                    mine.push(t.bytes);
                }
                frames.push(mine);
            }
        }
        (frames, Accelerator::new(cfg.workers as NodeId, layout))
    }

    /// A testbed's plan with addresses outside 10.x.y.<i+1> (and in no rank order): the
    /// accelerator given the plan finds each worker by its own address and sends every rank its
    /// results; without it, none of those frames is a worker's and all are dropped.
    #[test]
    fn a_testbed_plan_finds_workers_at_any_address() {
        use inabench_fabric::addresses::{HostAddress, ipv4_gid};
        let ips = [[192, 168, 7, 42], [172, 16, 0, 9], [192, 168, 7, 3]];
        let plan = AddressPlan::new(
            ips.iter()
                .enumerate()
                .map(|(i, ip)| HostAddress {
                    interface: None,
                    mac: [0x52, 0x54, 0, 0x11, 0, 0x30 + i as u8],
                    ipv4: *ip,
                    gid: ipv4_gid(*ip),
                })
                .collect(),
            None,
        )
        .expect("a plan");
        let cfg = AllReduceConfig {
            workers: 3,
            elements: 1500,
            seed: 7,
            line_rate_bps: 100e9,
            mtu: 1024,
            timeout_ns: 1_000_000,
            knobs: vec![],
        };
        let layout = Layout::new(&cfg).expect("layout");
        let frames: Vec<Vec<Vec<u8>>> = (0..3)
            .map(|w| {
                let grad = crate::common::gradient(cfg.seed, w, cfg.elements);
                let mut h = crate::netreduce::Host::with_addresses(
                    w,
                    layout,
                    &grad,
                    3,
                    cfg.timeout_ns,
                    0.0,
                    &plan,
                )
                .expect("worker");
                let mut mine = Vec::new();
                while let Some(t) = h.poll_transmit(0) {
                    mine.push(t.bytes);
                }
                mine
            })
            .collect();
        let packets = frames[0].len();
        assert!(packets > 0 && frames.iter().all(|f| f.len() == packets));
        let run = |mut acc: Accelerator| {
            let mut to = Vec::new();
            for i in 0..packets {
                for (w, f) in frames.iter().enumerate() {
                    acc.handle_packet(0, w as NodeId, &f[i]);
                    while let Some(t) = acc.poll_transmit(0) {
                        to.push(t.to);
                    }
                }
            }
            (to, acc.stats.dropped)
        };
        let (to, dropped) = run(Accelerator::new(3, layout).with_addresses(plan.clone()));
        assert_eq!(dropped, 0);
        assert_eq!(to.len(), packets * 3);
        for r in 0..3 {
            assert_eq!(to.iter().filter(|t| **t == r).count(), packets, "rank {r}");
        }
        let (to, dropped) = run(Accelerator::new(3, layout));
        assert!(to.is_empty());
        assert_eq!(dropped, (packets * 3) as u64);
    }

    /// Each result copy (its aggregate's tail hashed once for the ICRC of every copy) is the
    /// frame the plain builder makes of its headers and payload, its ICRC verifies, and its
    /// values are the exact int32 sums of the workers' packets at its PSN, the INA header of a
    /// first packet kept from the predecessor's packet.
    #[test]
    fn result_copies_are_the_frames_built_the_plain_way_and_sum_exactly() {
        for (workers, elements, mtu, msg) in [
            (4, 3000, 1024, 3.0),
            (3, 500, 36, 5.0),
            (6, 4000, 256, 170.0),
        ] {
            let cfg = AllReduceConfig {
                workers,
                elements,
                seed: 7,
                line_rate_bps: 100e9,
                mtu,
                timeout_ns: 1_000_000,
                knobs: vec![("msg_packets".into(), msg)],
            };
            let (frames, mut acc) = windows(&cfg);
            let packets = frames[0].len();
            assert!(frames.iter().all(|f| f.len() == packets) && packets > 0);
            let mut out = Vec::new();
            for i in 0..packets {
                for (w, f) in frames.iter().enumerate() {
                    acc.handle_packet(0, w as NodeId, &f[i]);
                    // a go-back-N retransmission before the aggregate completes: the same
                    // bytes again, not summed twice
                    if w == 1 && i % 3 == 0 {
                        acc.handle_packet(0, w as NodeId, &f[i]);
                    }
                    while let Some(t) = acc.poll_transmit(0) {
                        out.push(t);
                    }
                }
            }
            assert_eq!(acc.stats.duplicates_ignored, packets.div_ceil(3) as u64);
            // a retransmission after completion gets its destination the aggregate again
            acc.handle_packet(0, 0, &frames[0][0]);
            while let Some(t) = acc.poll_transmit(0) {
                out.push(t);
            }
            assert_eq!(
                out.len(),
                packets * workers + 1,
                "{workers} workers, mtu {mtu}"
            );
            for t in &out {
                let (repr, payload) = FrameRepr::parse(&t.bytes).expect("the ICRC verifies");
                assert_eq!(repr.build(payload).expect("build"), t.bytes);
                // the packet of the predecessor whose headers it wears
                let to = t.to as usize;
                let from = (to + workers - 1) % workers;
                let i = crate::roce::psn_diff(psn0(from, 0), repr.bth.psn) as usize;
                let mine = |w: usize| FrameRepr::parse(&frames[w][i]).expect("parse").1;
                let skip = if i.is_multiple_of(msg as usize) {
                    NetReduceHeader::LEN
                } else {
                    0
                };
                assert_eq!(&payload[..skip], &mine(from)[..skip]);
                for (v, at) in (skip..payload.len()).step_by(4).enumerate() {
                    let want = (0..workers).fold(0i32, |s, w| {
                        let b = &mine(w)[at..at + 4];
                        s.wrapping_add(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
                    });
                    let got = &payload[at..at + 4];
                    assert_eq!(
                        i32::from_be_bytes([got[0], got[1], got[2], got[3]]),
                        want,
                        "packet {i} value {v}"
                    );
                }
            }
        }
    }

    /// With the `float` knob the payloads are summed as float32 in rank order: each value of
    /// every copy is `((0 + x0) + x1) + ...` of the workers' values at its PSN, bit for bit
    /// (NaN where that is NaN).
    #[test]
    fn float_results_are_the_rank_order_sums() {
        let workers = 4;
        let cfg = AllReduceConfig {
            workers,
            elements: 2000,
            seed: 3,
            line_rate_bps: 100e9,
            mtu: 256,
            timeout_ns: 1_000_000,
            knobs: vec![("msg_packets".into(), 4.0), ("float".into(), 1.0)],
        };
        let (frames, mut acc) = windows(&cfg);
        let packets = frames[0].len();
        let mut out = Vec::new();
        // the workers' packets in reverse rank order: the sum's order is the ranks', not
        // the arrivals'
        for i in 0..packets {
            for (w, f) in frames.iter().enumerate().rev() {
                acc.handle_packet(0, w as NodeId, &f[i]);
                while let Some(t) = acc.poll_transmit(0) {
                    out.push(t);
                }
            }
        }
        assert_eq!(out.len(), packets * workers);
        for t in &out {
            let (repr, payload) = FrameRepr::parse(&t.bytes).expect("the ICRC verifies");
            let from = (t.to as usize + workers - 1) % workers;
            let i = crate::roce::psn_diff(psn0(from, 0), repr.bth.psn) as usize;
            let mine = |w: usize| FrameRepr::parse(&frames[w][i]).expect("parse").1;
            let skip = if i.is_multiple_of(4) {
                NetReduceHeader::LEN
            } else {
                0
            };
            for at in (skip..payload.len()).step_by(4) {
                let want = (0..workers).fold(0f32, |s, w| {
                    let b = &mine(w)[at..at + 4];
                    s + f32::from_be_bytes([b[0], b[1], b[2], b[3]])
                });
                let got = f32::from_be_bytes(payload[at..at + 4].try_into().expect("4 bytes"));
                // (a NaN's payload bits are not specified by Rust's float addition)
                if want.is_nan() {
                    assert!(got.is_nan(), "packet {i} at {at}");
                } else {
                    assert_eq!(got.to_bits(), want.to_bits(), "packet {i} at {at}");
                }
            }
        }
    }
}
