//! SwitchML-RDMA as NetReduce Sec. 6 describes it and the authors' P4 code (microsoft/SwitchML,
//! `RDMAReceiver.p4`, `RDMASender.p4`) builds it: SwitchML's slot pool with shadow copies, fed by
//! RoCEv2 UC RDMA WRITEs instead of a UDP protocol.
//!
//! - A worker sends its gradient as messages of `k` packets on one UC queue pair to the switch:
//!   WRITE First (RETH: the worker's result address, R_Key = the message's first pool index,
//!   the message length), Middle..., Last with Immediate (two block-floating-point exponents; 0 here,
//!   as the values are int32), or a single Only with Immediate. PSNs count up per packet.
//! - The switch links a non-first packet to its message's first by the PSN ("SwitchML RDMA links
//!   non-first packets to first packets by using a sequence number"): packet `d` of the message
//!   aggregates into slot `first slot + d` of the same shadow-copy set. A PSN gap (a lost packet)
//!   drops the rest of the message, as a UC responder would.
//! - A slot copy complete, the switch sends every worker a WRITE Only with Immediate carrying the
//!   sum, with the worker's own result address and R_Key (installed at job start, out of band) and
//!   an immediate naming the pool index; it clears the slot's other copy for its next use. The
//!   switch rewrote the packet but cannot compute the ICRC, so it leaves the old one: receivers
//!   run with the ICRC check off, as SwitchML-RDMA's NICs do.
//! - Loss is the application's: a message whose results have not all arrived within the timeout is
//!   sent again whole (new PSNs, same pool index); the copy's worker bitmap makes the second
//!   contribution idempotent and a resend to a finished copy is answered with the result.
//! - A worker takes a result only for the message its slot group is waiting for: it checks the
//!   address and the set a result names (our choice; the released client, RDMAExampleClient's
//!   `ClientThread::handle_recv_completion`, takes any receive completion on a slot's queue pair
//!   as that slot's result). A copy is cleared whole, so a resend delayed past its worker's next
//!   message for the slot is counted into the reused copy (`mixed_rounds`), and the round's
//!   result names the old message: these workers reject it and the all-reduce never finishes,
//!   where the released client would finish with a wrong sum (netreduce-reliability's finding).
//!
//! The payload: the switch "chains four pipelines ... to get a huge pipeline for a larger payload"
//! (Sec. 5.2). With Sec. 6's 192 bytes per pass, four chained pipelines aggregate 768 bytes; the
//! released code sends 1 KB, relying on ingress and egress passes the Sec. 6 model does not
//! grant. We send 768 bytes (192 int32) per packet by default (`smlr_payload` changes it; a
//! payload needing more passes than pipelines is counted as recirculation in the model). Our other
//! choices: 128 slots per set (`pool`), 4 packets per message (`smlr_msg_packets`).

use crate::common::{
    AddressPlan, AllReduceConfig, HostStats, NodeAddresses, Setup, SetupError, Switch, SwitchStats,
    System, Worker, gradient,
};
use crate::target::Target;
use crate::tofino::{Pipeline, Recirculation, TofinoModel};
use inabench_fabric::addresses::MacIp;
use inabench_fabric::{Endpoint, Nanos, NodeId, Transmit};
use inabench_wire::ib::{BthRepr, PSN_MASK, RethRepr, opcode};
use inabench_wire::ina::switchml_rdma::{PoolIndex, Repr as Meta, ResultImm};
use inabench_wire::roce::{FrameRepr, IcrcCheck};
use std::collections::VecDeque;

/// The base of worker `w`'s result buffer and its R_Key (what the job installs on the switch).
fn buffer_of(w: usize) -> (u64, u32) {
    (0x1000_0000_0000 * (w as u64 + 1), 0x5000 + w as u32)
}

/// The base address of worker `w`'s result buffer and its R_Key in the switch's address plan
/// (what [`SwitchMlRdma::build`]'s switch writes results to). A host-side program that drives
/// this switch between real RoCE hosts (drivers/devices' `switchml_rdma_switch` example on the
/// Soft-RoCE rig) maps these to each host's own buffer address, R_Key and QPN.
pub fn result_buffer(w: usize) -> (u64, u32) {
    buffer_of(w)
}

/// SwitchML-RDMA's synthetic address of node `node` (workers 0..n, the switch n):
/// 02:00:00:03:00:<node+1> and 10.0.3.<node+1>.
pub fn synthetic_address(node: usize) -> MacIp {
    (
        [2, 0, 0, 3, 0, (node + 1) as u8],
        [10, 0, 3, (node + 1) as u8],
    )
}

/// A frame from node `src` to node `dst` at their addresses in `addrs` (the UDP source port
/// is the node's, as before any plan).
fn base_frame(
    addrs: &NodeAddresses,
    src: usize,
    dst: usize,
    op: u8,
    dest_qp: u32,
    psn: u32,
) -> FrameRepr {
    FrameRepr {
        src_mac: addrs.mac(src),
        dst_mac: addrs.mac(dst),
        src_ip: addrs.ip(src),
        dst_ip: addrs.ip(dst),
        src_port: 0xc000 | src as u16,
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
            dest_qp,
            ack_req: false,
            psn: psn & PSN_MASK,
        },
        reth: None,
        aeth: None,
        immdt: None,
    }
}

fn values_of(payload: &[u8]) -> Vec<i32> {
    payload
        .chunks_exact(4)
        .map(|c| i32::from_be_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn bytes_of(values: &[i32], per_packet: usize) -> Vec<u8> {
    let mut b = vec![0u8; 4 * per_packet];
    for (k, v) in values.iter().take(per_packet).enumerate() {
        b[4 * k..4 * k + 4].copy_from_slice(&v.to_be_bytes());
    }
    b
}

#[derive(Debug, Clone, Copy)]
pub struct Layout {
    pub workers: usize,
    pub elements: usize,
    /// int32 values per packet
    pub per_packet: usize,
    /// packets per message
    pub k: usize,
    /// slots per shadow-copy set
    pub slots: usize,
    pub packets: usize,
    pub messages: usize,
}

impl Layout {
    pub fn new(cfg: &AllReduceConfig, model: &TofinoModel) -> Result<Layout, SetupError> {
        let payload = cfg
            .knob("smlr_payload")
            .unwrap_or(f64::from(model.pipelines * model.bytes_per_pass()))
            as usize;
        let k = cfg.knob("smlr_msg_packets").unwrap_or(4.0) as usize;
        let slots = cfg.knob("pool").unwrap_or(128.0) as usize;
        if payload == 0 || !payload.is_multiple_of(4) || payload > cfg.mtu {
            return Err(SetupError::Config(format!(
                "SwitchML-RDMA's payload must be a multiple of 4 bytes within the path MTU {} (got {payload})",
                cfg.mtu
            )));
        }
        if cfg.workers < 2 || cfg.workers > 64 {
            return Err(SetupError::Config(format!(
                "SwitchML-RDMA needs 2..64 workers (got {})",
                cfg.workers
            )));
        }
        if k == 0 || slots < k || !slots.is_multiple_of(k) || slots > 0x3fff {
            return Err(SetupError::Config(format!(
                "SwitchML-RDMA needs a pool of whole messages: {slots} slots, {k} packets per message"
            )));
        }
        let per_packet = payload / 4;
        let packets = cfg.elements.div_ceil(per_packet).max(1);
        Ok(Layout {
            workers: cfg.workers,
            elements: cfg.elements,
            per_packet,
            k,
            slots,
            packets,
            messages: packets.div_ceil(k),
        })
    }

    fn groups(&self) -> usize {
        self.slots / self.k
    }

    /// Packets in message `m` (the last may be short).
    fn len_of(&self, m: usize) -> usize {
        self.k.min(self.packets - m * self.k)
    }

    fn pool_of(&self, m: usize) -> PoolIndex {
        PoolIndex {
            slot: ((m % self.groups()) * self.k) as u16,
            set: (m / self.groups()) % 2 == 1,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Outstanding {
    msg: usize,
    deadline: Nanos,
    got: u64,
}

/// A SwitchML-RDMA worker: the application's sender and result handling over a UC QP.
pub struct SmlrWorker {
    rank: usize,
    switch: NodeId,
    /// every node's address (its own and the switch's go in its frames)
    addrs: NodeAddresses,
    layout: Layout,
    grad: Vec<i32>,
    result: Vec<i32>,
    groups: Vec<Option<Outstanding>>,
    queue: VecDeque<usize>,
    tx: VecDeque<(usize, usize)>,
    psn: u32,
    done_msgs: usize,
    rto_ns: u64,
    sent_at: Vec<Option<Nanos>>,
    /// per message: when it became ready to send (its slot group freed, or the start)
    ready_at: Vec<Nanos>,
    /// per message: when its first packet's first bit went out (see `TxClock`)
    wire_at: Vec<Option<Nanos>>,
    clock: crate::common::TxClock,
    stats: HostStats,
    started: bool,
    /// results for a slot group this worker is using whose address or set names another message
    foreign_results: u64,
}

impl SmlrWorker {
    fn frame(&self, m: usize, j: usize) -> Vec<u8> {
        let l = &self.layout;
        let n = l.len_of(m);
        let op = match (j, n) {
            (0, 1) => opcode::UC_RDMA_WRITE_ONLY_IMM,
            (0, _) => opcode::UC_RDMA_WRITE_FIRST,
            (j, n) if j + 1 == n => opcode::UC_RDMA_WRITE_LAST_IMM,
            _ => opcode::UC_RDMA_WRITE_MIDDLE,
        };
        let mut f = base_frame(&self.addrs, self.rank, self.layout.workers, op, 0, self.psn);
        let (base, _) = buffer_of(self.rank);
        if j == 0 {
            f.reth = Some(RethRepr {
                va: base + (m * l.k * l.per_packet * 4) as u64,
                rkey: 0,
                dma_len: (n * l.per_packet * 4) as u32,
            });
        }
        if j + 1 == n {
            f.immdt = Some(0);
        }
        let meta = Meta {
            worker: self.rank as u8,
            qp_index: 0,
            pool: (j == 0).then(|| l.pool_of(m)),
            exponents: (j + 1 == n).then_some([0, 0]),
        };
        let c = m * l.k + j;
        let a = (c * l.per_packet).min(self.grad.len());
        let b = (a + l.per_packet).min(self.grad.len());
        let payload = bytes_of(&self.grad[a..b], l.per_packet);
        // cannot fail with a validated layout; an empty frame would be counted malformed downstream
        meta.apply(&mut f)
            .and_then(|()| f.build(&payload))
            .unwrap_or_default()
    }
}

impl Endpoint for SmlrWorker {
    fn id(&self) -> NodeId {
        self.rank as NodeId
    }

    fn handle_packet(&mut self, now: Nanos, _from: NodeId, f: &[u8]) {
        self.stats.packets_rx += 1;
        let Ok((fr, payload)) = FrameRepr::parse_with(f, IcrcCheck::Ignore) else {
            self.stats.malformed_rx += 1;
            return;
        };
        let (Some(reth), Some(imm)) = (fr.reth, fr.immdt) else {
            self.stats.malformed_rx += 1;
            return;
        };
        let Ok(ri) = ResultImm::from_imm(imm) else {
            self.stats.malformed_rx += 1;
            return;
        };
        let l = self.layout;
        let (base, rkey) = buffer_of(self.rank);
        if reth.rkey != rkey || reth.va < base || payload.len() != 4 * l.per_packet {
            self.stats.malformed_rx += 1;
            return;
        }
        // the result lands where its address says; the immediate says which slot completed
        let c = ((reth.va - base) / (4 * l.per_packet) as u64) as usize;
        let (m, j) = (c / l.k, c % l.k);
        let g = usize::from(ri.pool.slot) / l.k;
        let Some(Some(o)) = self.groups.get(g).copied() else {
            return;
        };
        if o.got & (1 << j) != 0 {
            return;
        }
        if o.msg != m || l.pool_of(m).set != ri.pool.set {
            // a result for the slot group's other message or set: not this message's
            self.foreign_results += 1;
            return;
        }
        let a = (c * l.per_packet).min(self.result.len());
        let b = (a + l.per_packet).min(self.result.len());
        self.result[a..b].copy_from_slice(&values_of(payload)[..b - a]);
        // the RTT as every system here defines it: from the first bit of a message's first
        // packet on the wire to that packet's aggregated result (not the whole message's)
        if j == 0
            && let (Some(handed), Some(t0)) = (self.sent_at[m], self.wire_at[m])
        {
            self.stats.rtt_ns.push(now.saturating_sub(t0));
            self.stats.rtt_queue_ns.push(t0.saturating_sub(handed));
        }
        let got = o.got | (1 << j);
        if got.count_ones() as usize == l.len_of(m) {
            self.groups[g] = None;
            self.done_msgs += 1;
            let next = m + l.groups();
            if next < l.messages {
                self.ready_at[next] = now;
                self.queue.push_back(next);
            }
            if self.done_msgs == l.messages {
                self.stats.end_ns = now;
            }
        } else {
            self.groups[g] = Some(Outstanding { got, ..o });
        }
    }

    fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        if !self.started {
            self.started = true;
            self.stats.start_ns = now;
            let first = self.layout.groups().min(self.layout.messages);
            for m in 0..first {
                self.ready_at[m] = now;
            }
            self.queue.extend(0..first);
        }
        if self.tx.is_empty() {
            let m = self.queue.pop_front()?;
            let g = m % self.layout.groups();
            if self.sent_at[m].is_some() {
                self.stats.retransmissions += self.layout.len_of(m) as u64;
            } else {
                self.sent_at[m] = Some(self.ready_at[m].min(now));
            }
            self.groups[g] = Some(Outstanding {
                msg: m,
                deadline: now + self.rto_ns,
                got: 0,
            });
            self.tx.extend((0..self.layout.len_of(m)).map(|j| (m, j)));
        }
        let (m, j) = self.tx.pop_front()?;
        let bytes = self.frame(m, j);
        let wire = self.clock.start(now, bytes.len());
        if j == 0 && self.wire_at[m].is_none() {
            self.wire_at[m] = Some(wire);
        }
        self.psn = (self.psn + 1) & PSN_MASK;
        self.stats.packets_tx += 1;
        self.stats.wire_bytes_tx += bytes.len() as u64;
        Some(Transmit {
            to: self.switch,
            bytes,
        })
    }

    fn poll_timeout(&self) -> Option<Nanos> {
        self.groups.iter().flatten().map(|o| o.deadline).min()
    }

    fn handle_timeout(&mut self, now: Nanos) {
        for g in 0..self.groups.len() {
            if let Some(o) = self.groups[g]
                && o.deadline <= now
            {
                // the application resends the whole message (UC tells the sender nothing)
                self.groups[g] = None;
                if !self.queue.contains(&o.msg) {
                    self.queue.push_front(o.msg);
                }
            }
        }
    }

    fn is_done(&self) -> bool {
        self.done_msgs == self.layout.messages
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("messages_done", self.done_msgs as u64),
            ("outstanding", self.groups.iter().flatten().count() as u64),
            ("retransmissions", self.stats.retransmissions),
            ("foreign_results", self.foreign_results),
        ]
    }
}

impl Worker for SmlrWorker {
    fn result(&self) -> Option<Vec<i32>> {
        self.is_done().then(|| self.result.clone())
    }

    fn stats(&self) -> HostStats {
        self.stats.clone()
    }
}

#[derive(Debug, Clone, Default)]
struct SlotCopy {
    sum: Vec<i32>,
    bitmap: u64,
    count: usize,
    /// byte offset of this slot's values in the workers' buffers
    offset: u64,
}

/// What the switch remembers of a worker's current message (to link non-first packets).
#[derive(Debug, Clone, Copy, Default)]
struct Link {
    valid: bool,
    pool: Option<PoolIndex>,
    first_psn: u32,
    last_psn: u32,
    packets: usize,
    offset: u64,
}

/// SwitchML-RDMA's switch program on the Tofino model, pipelines chained.
pub struct SmlrSwitch {
    id: NodeId,
    /// every node's address (its own and its workers' go in its results)
    addrs: NodeAddresses,
    layout: Layout,
    copies: Vec<[SlotCopy; 2]>,
    links: Vec<Link>,
    psn_out: Vec<u32>,
    pipeline: Pipeline,
    payload: u32,
    out: VecDeque<Transmit>,
    stats: SwitchStats,
    unlinked: u64,
    /// contributions added to a copy that holds another message's values (counted by the
    /// simulator from the RETH address, which the switch program does not compare)
    mixed: u64,
}

impl SmlrSwitch {
    fn result_to(&mut self, to: usize, pool: PoolIndex, old_icrc: [u8; 4]) {
        let copy = &self.copies[usize::from(pool.slot)][usize::from(pool.set)];
        let (base, rkey) = buffer_of(to);
        let psn = self.psn_out[to];
        self.psn_out[to] = (psn + 1) & PSN_MASK;
        let mut f = base_frame(
            &self.addrs,
            self.layout.workers,
            to,
            opcode::UC_RDMA_WRITE_ONLY_IMM,
            0x10 + to as u32,
            psn,
        );
        f.reth = Some(RethRepr {
            va: base + copy.offset,
            rkey,
            dma_len: (4 * self.layout.per_packet) as u32,
        });
        let Ok(imm) = (ResultImm {
            pool,
            exponents: [0, 0],
        })
        .to_imm() else {
            return;
        };
        f.immdt = Some(imm);
        let Ok(mut bytes) = f.build(&bytes_of(&copy.sum, self.layout.per_packet)) else {
            return;
        };
        // the switch cannot compute the ICRC: the rewritten packet keeps the old one
        let n = bytes.len();
        bytes[n - 4..].copy_from_slice(&old_icrc);
        self.stats.packets_out += 1;
        self.out.push_back(Transmit {
            to: to as NodeId,
            bytes,
        });
    }
}

impl Endpoint for SmlrSwitch {
    fn id(&self) -> NodeId {
        self.id
    }

    fn handle_packet(&mut self, _now: Nanos, from: NodeId, f: &[u8]) {
        self.stats.packets_in += 1;
        self.stats.bytes_in += f.len() as u64;
        let w = from as usize;
        let parsed = FrameRepr::parse_with(f, IcrcCheck::Verify)
            .ok()
            .and_then(|(fr, p)| Meta::extract(&fr).ok().map(|m| (fr, p, m)));
        let Some((fr, payload, meta)) = parsed else {
            self.stats.dropped += 1;
            return;
        };
        let l = self.layout;
        if w >= l.workers || usize::from(meta.worker) != w || payload.len() != 4 * l.per_packet {
            self.stats.dropped += 1;
            return;
        }
        let mut old_icrc = [0u8; 4];
        old_icrc.copy_from_slice(&f[f.len() - 4..]);
        self.pipeline.process(f.len() as u32, self.payload);
        let psn = fr.bth.psn;
        let link = &mut self.links[w];
        let d = if let (Some(pool), Some(reth)) = (meta.pool, fr.reth) {
            let (base, _) = buffer_of(w);
            *link = Link {
                valid: reth.va >= base,
                pool: Some(pool),
                first_psn: psn,
                last_psn: psn,
                packets: (reth.dma_len as usize).div_ceil(4 * l.per_packet),
                offset: reth.va.wrapping_sub(base),
            };
            0
        } else if link.valid && psn == (link.last_psn + 1) & PSN_MASK {
            link.last_psn = psn;
            (psn.wrapping_sub(link.first_psn) & PSN_MASK) as usize
        } else {
            // the message's first packet (or one before this) was lost: drop the rest of it
            link.valid = false;
            self.unlinked += 1;
            self.stats.dropped += 1;
            return;
        };
        let (Some(first), true) = (link.pool, d < link.packets) else {
            self.stats.dropped += 1;
            return;
        };
        let offset = link.offset + (d * 4 * l.per_packet) as u64;
        let Ok(pool) = first.advance(d as u16) else {
            self.stats.dropped += 1;
            return;
        };
        let s = usize::from(pool.slot);
        if s >= l.slots {
            self.stats.dropped += 1;
            return;
        }
        let values = values_of(payload);
        let copy = &mut self.copies[s][usize::from(pool.set)];
        if copy.bitmap & (1 << w) != 0 {
            self.stats.duplicates_ignored += 1;
            if copy.count == l.workers {
                self.result_to(w, pool, old_icrc);
            }
            return;
        }
        if copy.count == 0 {
            copy.offset = offset;
        } else if copy.offset != offset {
            self.mixed += 1;
        }
        for (a, x) in copy.sum.iter_mut().zip(&values) {
            *a = a.wrapping_add(*x);
        }
        copy.bitmap |= 1 << w;
        copy.count += 1;
        if copy.count == l.workers {
            for r in 0..l.workers {
                self.result_to(r, pool, old_icrc);
            }
            let other = &mut self.copies[s][usize::from(!pool.set)];
            other.sum.iter_mut().for_each(|x| *x = 0);
            other.bitmap = 0;
            other.count = 0;
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
            ("switch_in", self.stats.packets_in),
            ("unlinked_dropped", self.unlinked),
            ("duplicates", self.stats.duplicates_ignored),
            ("mixed_rounds", self.mixed),
        ]
    }
}

impl Switch for SmlrSwitch {
    fn stats(&self) -> SwitchStats {
        let mut s = self.stats.clone();
        s.recirculations = self.pipeline.stats.recirculations;
        s.recirculated_bytes = self.pipeline.stats.recirculated_bytes;
        let share = self.pipeline.loopback_port_share(self.payload);
        s.ports_total = self.pipeline.model.ports();
        s.ports_used =
            (f64::from(s.ports_total) * share).round() as u32 + self.layout.workers as u32;
        s.overhead_fraction = share;
        s.overhead_kind = "switch ports in loopback";
        s
    }
}

pub struct SwitchMlRdma;

impl System for SwitchMlRdma {
    fn name(&self) -> &'static str {
        "switchml_rdma"
    }

    /// UC WRITEs over RoCE: a queue pair's packets in PSN order.
    fn ordered_transport(&self) -> bool {
        true
    }

    fn in_network(&self) -> bool {
        true
    }

    /// The workers ignore the ICRC of results.
    fn fuzz_findings(&self) -> &'static [inabench_fabric::fuzz::Kind] {
        &[inabench_fabric::fuzz::Kind::Flip]
    }

    fn build(&self, cfg: &AllReduceConfig) -> Result<Setup, SetupError> {
        self.build_at(cfg, None)
    }

    /// Workers and switch at `plan`'s addresses (the switch answers as a host: the plan must
    /// give its address).
    fn build_at(
        &self,
        cfg: &AllReduceConfig,
        plan: Option<&AddressPlan>,
    ) -> Result<Setup, SetupError> {
        let model = TofinoModel::PAPER;
        let l = Layout::new(cfg, &model)?;
        let addrs = NodeAddresses::of(
            "SwitchML-RDMA",
            plan,
            cfg.workers,
            0,
            true,
            synthetic_address,
        )?;
        let switch = cfg.workers as NodeId;
        let workers = (0..cfg.workers)
            .map(|r| {
                Box::new(SmlrWorker {
                    rank: r,
                    switch,
                    addrs: addrs.clone(),
                    layout: l,
                    grad: gradient(cfg.seed, r, cfg.elements),
                    result: vec![0; cfg.elements],
                    groups: vec![None; l.groups()],
                    queue: VecDeque::new(),
                    tx: VecDeque::new(),
                    psn: 0,
                    done_msgs: 0,
                    rto_ns: cfg.timeout_ns,
                    sent_at: vec![None; l.messages],
                    ready_at: vec![0; l.messages],
                    wire_at: vec![None; l.messages],
                    clock: crate::common::TxClock::new(cfg.line_rate_bps),
                    stats: HostStats {
                        gradient_bytes: 4 * cfg.elements as u64,
                        ..HostStats::default()
                    },
                    started: false,
                    foreign_results: 0,
                }) as Box<dyn Worker>
            })
            .collect();
        let copies = (0..l.slots)
            .map(|_| {
                let c = SlotCopy {
                    sum: vec![0; l.per_packet],
                    ..SlotCopy::default()
                };
                [c.clone(), c]
            })
            .collect();
        let sw = SmlrSwitch {
            id: switch,
            addrs,
            layout: l,
            copies,
            links: vec![Link::default(); cfg.workers],
            psn_out: vec![0; cfg.workers],
            pipeline: Pipeline::new(model, Recirculation::ChainPipelines),
            payload: (4 * l.per_packet) as u32,
            out: VecDeque::new(),
            stats: SwitchStats::default(),
            unlinked: 0,
            mixed: 0,
        };
        Ok(Setup {
            workers,
            switch: Box::new(sw),
            others: Vec::new(),
        })
    }
}
