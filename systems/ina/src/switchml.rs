//! SwitchML (Sapio et al., NSDI'21) as its design is publicly described and NetReduce, Libra and
//! P4SGD summarise it: workers stream fixed-size chunks over UDP into a pool of S aggregator slots
//! on the switch; chunk c uses slot c mod S and a version bit ((c / S) mod 2) that selects one of
//! two shadow copies of the slot; the switch adds a chunk into its slot copy, and when all workers'
//! chunks are in it multicasts the result; a worker whose result was lost times out and resends,
//! and the switch answers a resend of a finished slot with the result (unicast).
//!
//! The switch is the paper's Algorithm 2 as the authors' release implements it (p4app-switchML
//! `bitmap_checker.p4`, `workers_counter.p4`): per slot and copy a worker bitmap and a counter of
//! contributions modulo n; a worker's packet sets its bit in its copy and clears it in the other
//! copy (that worker has moved on to this copy, so it holds the other copy's result); the first
//! contribution of a round overwrites the copy's values, the n-th completes it and multicasts; a
//! packet whose bit is already set is a retransmission, answered with the result if the copy is
//! complete and dropped otherwise. Every packet carries its chunk index (the release's `pkt_id`),
//! which the switch echoes; a worker accepts a result only for the chunk its slot is working on
//! and drops results of chunks it already has (the release's `rte_bitmap_get(bitmap, pkt_id)`
//! check in `dpdk_worker_thread.cc`). What the one-bit version cannot tell apart remains: a
//! worker's (spurious) resend that the network delays past that worker's next packet for the slot
//! finds its bit cleared and is counted into a later round of that copy. The `mixed_rounds`
//! counter (diagnostics: the program itself does not read the chunk index) counts such
//! contributions; `netreduce-switchml-shadow` sweeps the delay.
//!
//! Our choices where the descriptions are vague: by default a chunk is what one pass of the Tofino
//! model can aggregate (192 B = 48 int32: SwitchML "does not handle the small payload issue",
//! NetReduce Sec. 6); the `payload_bytes` knob sets it (NetReduce's Table 6 comparison uses 128 B,
//! the payload its Sec. 6 names for SwitchML's 63% bound); integer values (the microbenchmark sums
//! int32 so results are bit-exact), S = 128 slots, UDP port 48864 for the INA traffic. Block
//! floating point for float gradients is [`crate::bfp`]: an exponent negotiation (this program
//! with the `op_max` knob: the switch keeps the maximum instead of the sum) and then the integer
//! aggregation of the scaled values.

use crate::common::{
    AddressPlan, AllReduceConfig, HostStats, NodeAddresses, Setup, SetupError, Switch, SwitchStats,
    System, TxClock, Worker, check_inputs, emit_udp, gradients, kernel,
};
use crate::tofino::{Pipeline, Recirculation, TofinoModel, goodput_share};
use inabench_fabric::addresses::MacIp;
use inabench_fabric::{BufPool, Endpoint, Nanos, NodeId, Transmit};
use inabench_wire::ina::SwitchMlHeader;
use inabench_wire::{ethernet, ipv4, udp};
use std::collections::VecDeque;

pub mod table;

pub const UDP_PORT: u16 = 48864;
/// Ethernet, IPv4 and UDP headers.
const OUTER: usize = inabench_wire::node::OUTER_LEN;
const HDR: usize = OUTER + SwitchMlHeader::LEN;

/// SwitchML's synthetic address of node `node` (workers 0..n, the switch n): network 1 of
/// `inabench_wire::node`, 02:00:00:01:00:<node+1> and 10.0.1.<node+1>.
pub fn synthetic_address(node: usize) -> MacIp {
    (
        inabench_wire::node::mac_of(1, node as u32),
        inabench_wire::node::ip_of(1, node as u32),
    )
}

/// The addresses of `cfg`'s nodes: `plan`'s (its workers' and its switch's, which the workers
/// send to) or, without one, [`synthetic_address`].
pub fn addresses(
    cfg: &AllReduceConfig,
    plan: Option<&AddressPlan>,
) -> Result<NodeAddresses, SetupError> {
    Ok(NodeAddresses::of(
        "SwitchML",
        plan,
        cfg.workers,
        0,
        true,
        synthetic_address,
    )?)
}

/// Build a SwitchML frame from `src` to `dst` (node indices, synthetic addresses) carrying `h`
/// and `values` into `f`, which must hold `HDR + 4 * values.len()` zero bytes (a buffer from a
/// [`BufPool`]). (The switch writes its results from per-worker headers; the tests compare
/// them with this.)
#[cfg(test)]
fn frame_in(f: Vec<u8>, src: usize, dst: usize, h: &SwitchMlHeader, values: &[i32]) -> Vec<u8> {
    frame_in_n(
        f,
        synthetic_address(src),
        synthetic_address(dst),
        h,
        values,
        values.len(),
    )
}

/// A frame from `src` to `dst` (MAC, IPv4) carrying `h` and `n` values: `values` (at most
/// `n`) then zeros; `f` must hold `HDR + 4 * n` zero bytes.
fn frame_in_n(
    mut f: Vec<u8>,
    src: MacIp,
    dst: MacIp,
    h: &SwitchMlHeader,
    values: &[i32],
    n: usize,
) -> Vec<u8> {
    let payload = SwitchMlHeader::LEN + 4 * n;
    let _ = emit_udp(&mut f, src, dst, UDP_PORT, payload);
    let u = ethernet::HEADER_LEN + ipv4::HEADER_LEN;
    let _ = h.emit(&mut f[u + udp::HEADER_LEN..]);
    kernel::store_be_i32(&mut f[HDR..], values);
    f
}

/// Parse a SwitchML frame: (source IP's last byte, header, values as big-endian bytes).
/// The checks of `ethernet::Packet::new_checked`, `ipv4::Repr::parse` (IPv4 structure, header
/// checksum, no fragment), `udp::Packet::new_checked` and [`SwitchMlHeader::parse`], in one
/// pass over fixed offsets (the same frames accepted and the same fields read; the
/// `parse_body_accepts_what_the_wire_parsers_accept` test compares them). Inlined: returned
/// through memory, the header's fields were stored and reloaded at mismatched widths per packet
/// (the profile's store-forwarding stalls).
#[inline(always)]
fn parse_body(f: &[u8]) -> Option<(u8, SwitchMlHeader, &[u8])> {
    let ip = f.get(ethernet::HEADER_LEN..)?;
    let (v_ihl, ihl) = match ip {
        [b, ..] => (*b, usize::from(*b & 0x0f) * 4),
        [] => return None,
    };
    let total = match ip {
        [_, _, a, b, ..] => usize::from(u16::from_be_bytes([*a, *b])),
        _ => return None,
    };
    if ip.len() < ipv4::HEADER_LEN || v_ihl >> 4 != 4 || ihl < ipv4::HEADER_LEN || total < ihl {
        return None;
    }
    let ip = ip.get(..total)?;
    // the header checksum; then no fragment (more-fragments flag and offset: bits 13-0 of
    // bytes 6-7)
    if !kernel::ipv4_header_ok(ip.get(..ihl)?) || u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff != 0 {
        return None;
    }
    let src = ip[15];
    let u = ip.get(ihl..)?;
    let [_, _, p0, p1, l0, l1, _, _, ..] = *u else {
        return None;
    };
    let ulen = usize::from(u16::from_be_bytes([l0, l1]));
    if ulen < udp::HEADER_LEN || u16::from_be_bytes([p0, p1]) != UDP_PORT {
        return None;
    }
    let p = u.get(udp::HEADER_LEN..ulen)?;
    let h = SwitchMlHeader::parse(p).ok()?;
    let body = p.get(SwitchMlHeader::LEN..)?;
    if body.len() != 4 * usize::from(h.elements) {
        return None;
    }
    Some((src, h, body))
}

/// [`parse_body`] as the wire crate's parsers do it, step by step (the reference the fast
/// one is tested against).
#[cfg(test)]
fn parse_body_reference(f: &[u8]) -> Option<(u8, SwitchMlHeader, &[u8])> {
    let eth = ethernet::Packet::new_checked(f).ok()?;
    let ip = ipv4::Packet::new_checked(eth.payload()).ok()?;
    ipv4::Repr::parse(&ip).ok()?;
    let u = udp::Packet::new_checked(ip.payload()).ok()?;
    if u.dst_port() != UDP_PORT {
        return None;
    }
    let p = u.payload();
    let h = SwitchMlHeader::parse(p).ok()?;
    let body = &p[SwitchMlHeader::LEN..];
    if body.len() != 4 * usize::from(h.elements) {
        return None;
    }
    let at = body.as_ptr() as usize - f.as_ptr() as usize;
    let len = body.len();
    Some((ip.src()[3], h, f.get(at..at + len)?))
}

#[derive(Debug, Clone, Copy)]
pub struct Layout {
    pub workers: usize,
    pub elements: usize,
    pub per_packet: usize,
    pub slots: usize,
    pub chunks: usize,
    /// Aggregate with max instead of a sum (the exponent negotiation of block floating point).
    pub max: bool,
}

impl Layout {
    pub fn new(cfg: &AllReduceConfig, model: &TofinoModel) -> Result<Layout, SetupError> {
        let payload = cfg
            .knob("payload_bytes")
            .unwrap_or(f64::from(model.bytes_per_pass()));
        let slots = cfg.knob("pool").unwrap_or(128.0) as usize;
        if !(4.0..=4096.0).contains(&payload) || payload % 4.0 != 0.0 {
            return Err(SetupError::Config(format!(
                "SwitchML's payload_bytes is a whole number of int32 between 4 and 4096 (got {payload})"
            )));
        }
        let per_packet = payload as usize / 4;
        if cfg.workers < 2 || cfg.workers > 64 || slots == 0 || slots > 0x7fff {
            return Err(SetupError::Config(format!(
                "SwitchML needs 2..64 workers and 1..32767 slots (got {} and {slots})",
                cfg.workers
            )));
        }
        Ok(Layout {
            workers: cfg.workers,
            elements: cfg.elements,
            per_packet,
            slots,
            chunks: cfg.elements.div_ceil(per_packet).max(1),
            max: cfg.knob("op_max").is_some_and(|v| v > 0.0),
        })
    }
}

/// A SwitchML worker.
pub struct SwitchMlWorker {
    rank: usize,
    switch: NodeId,
    /// its own address and the switch's, which its frames carry
    me: MacIp,
    to: MacIp,
    layout: Layout,
    grad: Vec<i32>,
    result: Vec<i32>,
    /// per slot: the chunk it is working on (in flight or queued for a resend)
    current: Vec<Option<usize>>,
    /// per slot: (chunk in flight, deadline)
    outstanding: Vec<Option<(usize, Nanos)>>,
    /// (deadline, slot, chunk) of every send in send order, hence in deadline order (a deadline
    /// is the send's time plus the one timeout, and time does not go back); an entry whose slot
    /// no longer holds that (chunk, deadline) is stale and is dropped when it reaches the front,
    /// so the front is the earliest live deadline and `poll_timeout` reads it without scanning
    /// every slot
    deadlines: VecDeque<(Nanos, usize, usize)>,
    /// per chunk: its result was accepted (the release's received-packet bitmap)
    got: Vec<bool>,
    received: usize,
    queue: VecDeque<usize>,
    rto_ns: u64,
    stats: HostStats,
    /// per chunk: (handed to the NIC, first bit on the wire) of its first transmission
    sent_at: Vec<Option<(Nanos, Nanos)>>,
    /// per chunk: when it became ready to send (its slot freed by the previous chunk's result,
    /// or the start): the sender's queue wait runs from here to its first bit on the wire
    ready_at: Vec<Nanos>,
    clock: TxClock,
    /// results dropped: already received (duplicates) or not the chunk the slot works on (stale)
    duplicate_results: u64,
    stale_results: u64,
    started: bool,
    /// frame buffers: delivered results come back through `recycle`, sends take from here
    pool: BufPool,
}

impl SwitchMlWorker {
    /// Chunk `c`'s values (the last chunk short: the frame pads it with zeros).
    fn chunk_values(&self, c: usize) -> &[i32] {
        let a = (c * self.layout.per_packet).min(self.grad.len());
        let b = (a + self.layout.per_packet).min(self.grad.len());
        &self.grad[a..b]
    }

    /// Drop the stale entries at the front of `deadlines`.
    fn prune_deadlines(&mut self) {
        while let Some(&(d, s, c)) = self.deadlines.front() {
            if self.outstanding[s] == Some((c, d)) {
                break;
            }
            self.deadlines.pop_front();
        }
    }

    fn header(&self, c: usize) -> SwitchMlHeader {
        let s = c % self.layout.slots;
        SwitchMlHeader {
            worker: self.rank as u16,
            pool_index: s as u16,
            version: (c / self.layout.slots) % 2 == 1,
            exponent: 0,
            is_result: false,
            elements: self.layout.per_packet as u16,
            chunk: c as u32,
        }
    }
}

impl Endpoint for SwitchMlWorker {
    fn id(&self) -> NodeId {
        self.rank as NodeId
    }

    fn handle_packet(&mut self, now: Nanos, _from: NodeId, f: &[u8]) {
        self.stats.packets_rx += 1;
        let Some((_, h, body)) = parse_body(f) else {
            self.stats.malformed_rx += 1;
            return;
        };
        let n_values = body.len() / 4;
        if !h.is_result {
            return;
        }
        let c = h.chunk as usize;
        if c >= self.layout.chunks {
            self.stats.malformed_rx += 1;
            return;
        }
        if self.got[c] {
            // a result already received (the switch answers every late resend)
            self.duplicate_results += 1;
            return;
        }
        let s = c % self.layout.slots;
        let want = self.header(c);
        // only the chunk this slot works on, with its slot and version
        if self.current[s] != Some(c)
            || usize::from(h.pool_index) != s
            || h.version != want.version
            || n_values != self.layout.per_packet
        {
            self.stale_results += 1;
            return;
        }
        // the values that fall inside the result (the last chunk's padding does not)
        let a = (c * self.layout.per_packet).min(self.result.len());
        let end = (a + n_values).min(self.result.len());
        kernel::load_be_i32(&mut self.result[a..end], body);
        if let Some((handed, t0)) = self.sent_at[c] {
            self.stats.rtt_ns.push(now.saturating_sub(t0));
            self.stats.rtt_queue_ns.push(t0 - handed);
        }
        self.got[c] = true;
        self.received += 1;
        self.outstanding[s] = None;
        self.prune_deadlines();
        self.current[s] = None;
        // a resend of c may be queued after a timeout: the result makes it moot
        self.queue.retain(|&q| q != c);
        let next = c + self.layout.slots;
        if next < self.layout.chunks {
            self.current[s] = Some(next);
            self.ready_at[next] = now;
            self.queue.push_back(next);
        }
        if self.received == self.layout.chunks {
            self.stats.end_ns = now;
        }
    }

    fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        if !self.started {
            self.started = true;
            self.stats.start_ns = now;
            for c in 0..self.layout.slots.min(self.layout.chunks) {
                self.current[c] = Some(c);
                self.ready_at[c] = now;
                self.queue.push_back(c);
            }
        }
        let c = loop {
            let c = self.queue.pop_front()?;
            if !self.got[c] {
                break c;
            }
        };
        let s = c % self.layout.slots;
        let deadline = now + self.rto_ns;
        self.outstanding[s] = Some((c, deadline));
        self.deadlines.push_back((deadline, s, c));
        self.prune_deadlines();
        let n = self.layout.per_packet;
        let bytes = frame_in_n(
            self.pool.take(HDR + 4 * n),
            self.me,
            self.to,
            &self.header(c),
            self.chunk_values(c),
            n,
        );
        let wire = self.clock.start(now, bytes.len());
        if self.sent_at[c].is_some() {
            self.stats.retransmissions += 1;
        } else {
            self.sent_at[c] = Some((self.ready_at[c].min(now), wire));
        }
        self.stats.packets_tx += 1;
        self.stats.wire_bytes_tx += bytes.len() as u64;
        Some(Transmit {
            to: self.switch,
            bytes,
        })
    }

    fn poll_timeout(&self) -> Option<Nanos> {
        // the front is live (pruned after every change): the earliest deadline
        self.deadlines.front().map(|&(d, _, _)| d)
    }

    fn handle_timeout(&mut self, now: Nanos) {
        // every expired slot, queued for a resend in slot order (as a scan of the slots would)
        let mut expired = Vec::new();
        while let Some(&(d, s, c)) = self.deadlines.front() {
            if d > now {
                break;
            }
            self.deadlines.pop_front();
            if self.outstanding[s] == Some((c, d)) {
                self.outstanding[s] = None;
                expired.push((s, c));
            }
        }
        expired.sort_unstable();
        for (_, c) in expired {
            self.queue.push_back(c);
        }
        self.prune_deadlines();
    }

    fn is_done(&self) -> bool {
        self.received == self.layout.chunks
    }

    fn recycle(&mut self, buf: Vec<u8>) {
        self.pool.put(buf);
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("received", self.received as u64),
            (
                "outstanding",
                self.outstanding.iter().flatten().count() as u64,
            ),
            ("queued", self.queue.len() as u64),
            ("retransmissions", self.stats.retransmissions),
            ("duplicate_results", self.duplicate_results),
            ("stale_results", self.stale_results),
        ]
    }
}

impl Worker for SwitchMlWorker {
    fn result(&self) -> Option<Vec<i32>> {
        self.is_done().then(|| self.result.clone())
    }

    fn stats(&self) -> HostStats {
        self.stats.clone()
    }
}

/// A slot's state but its values: both shadow copies' worker bitmaps, contribution counters
/// and round chunks (Algorithm 2's `seen[ver][idx][*]` and `count[ver][idx]`), 32 bytes, so a
/// packet finds its slot's state in one cache line (a packet reads its copy and clears its bit
/// in the other). The copies' values are [`SwitchMlSwitch::sums`].
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(32))]
struct SlotState {
    /// per copy: workers whose packet for the copy's current round arrived
    seen: [u64; 2],
    /// per copy: contributions so far, modulo n: 0 means complete (or never used)
    count: [u32; 2],
    /// per copy, diagnostics only (the switch program does not read it): the chunk index of the
    /// round's first contribution
    round_chunk: [u32; 2],
}

/// The SwitchML switch program on the Tofino model.
pub struct SwitchMlSwitch {
    id: NodeId,
    layout: Layout,
    slots: Vec<SlotState>,
    /// every slot's two copies' values (Algorithm 2's `pool[ver][idx]`), `per_packet` each:
    /// copy `v` of slot `s` at `(2 s + v) per_packet`, both copies of a slot side by side
    sums: Vec<i32>,
    pipeline: Pipeline,
    out: VecDeque<Transmit>,
    stats: SwitchStats,
    /// diagnostics: contributions added to a round of another chunk (a packet counted into the
    /// wrong round: what the one-bit version cannot prevent)
    mixed: u64,
    /// result frames are written into delivered frames' buffers (no allocation per frame)
    pool: BufPool,
    /// per worker: the Ethernet, IPv4 and UDP headers of a result frame to it (the switch's
    /// addresses and the fixed length: the same bytes for every result, written once, as a
    /// replication engine's per-port rewrite table holds them)
    outer: Vec<[u8; OUTER]>,
    /// the SwitchML header and big-endian values of the result being sent (to worker 0: each
    /// copy rewrites the worker field), written once per completed round
    row: Vec<u8>,
}

impl SwitchMlSwitch {
    /// The switch program as node `id`, for `layout` (its workers, slots and values a packet),
    /// on the Tofino `model`, its results from its own address to its workers' in `addrs`.
    fn new(
        id: NodeId,
        layout: Layout,
        model: TofinoModel,
        addrs: &NodeAddresses,
    ) -> Result<SwitchMlSwitch, SetupError> {
        Ok(SwitchMlSwitch {
            id,
            layout,
            slots: vec![SlotState::default(); layout.slots],
            sums: vec![0; 2 * layout.slots * layout.per_packet],
            pipeline: Pipeline::new(model, Recirculation::SamePipeline),
            out: VecDeque::new(),
            stats: SwitchStats::default(),
            mixed: 0,
            pool: BufPool::default(),
            outer: SwitchMlSwitch::outer_headers(&layout, addrs)?,
            row: vec![0; SwitchMlHeader::LEN + 4 * layout.per_packet],
        })
    }

    /// The outer headers of a result frame from the switch (node `workers`) to each worker.
    fn outer_headers(
        layout: &Layout,
        addrs: &NodeAddresses,
    ) -> Result<Vec<[u8; OUTER]>, SetupError> {
        let payload = SwitchMlHeader::LEN + 4 * layout.per_packet;
        let sw = layout.workers;
        (0..layout.workers)
            .map(|r| {
                let mut o = [0u8; OUTER];
                emit_udp(
                    &mut o,
                    (addrs.mac(sw), addrs.ip(sw)),
                    (addrs.mac(r), addrs.ip(r)),
                    UDP_PORT,
                    payload,
                )
                .map_err(|e| SetupError::Config(format!("SwitchML result headers: {e}")))?;
                Ok(o)
            })
            .collect()
    }

    /// Write the result row's SwitchML header (to worker 0; the values are the caller's).
    fn row_header(&mut self, s: usize, v: bool, chunk: u32) {
        let h = SwitchMlHeader {
            worker: 0,
            pool_index: s as u16,
            version: v,
            exponent: 0,
            is_result: true,
            elements: self.layout.per_packet as u16,
            chunk,
        };
        let _ = h.emit(&mut self.row[..]);
    }

    /// The result row to worker `to`: its outer headers, then the row with its worker field;
    /// the bytes of [`frame_in`] for that worker.
    fn send_row(&mut self, to: usize) {
        let Some(outer) = self.outer.get(to) else {
            return;
        };
        // every byte written below: outer headers, then the row
        let mut f = self.pool.take_for_overwrite(OUTER + self.row.len());
        let (o, r) = f.split_at_mut(OUTER);
        o.copy_from_slice(outer);
        r.copy_from_slice(&self.row);
        r[..2].copy_from_slice(&(to as u16).to_be_bytes());
        self.stats.packets_out += 1;
        self.out.push_back(Transmit {
            to: to as NodeId,
            bytes: f,
        });
    }

    /// A result frame to worker `to` (the answer to a resend): copy `v` of slot `s`'s values.
    fn result_to(&mut self, to: usize, s: usize, v: bool, chunk: u32) {
        let pp = self.layout.per_packet;
        let at = (2 * s + usize::from(v)) * pp;
        self.row_header(s, v, chunk);
        kernel::store_be_i32(
            &mut self.row[SwitchMlHeader::LEN..],
            &self.sums[at..at + pp],
        );
        self.send_row(to);
    }
}

impl Endpoint for SwitchMlSwitch {
    fn id(&self) -> NodeId {
        self.id
    }

    fn handle_packet(&mut self, _now: Nanos, _from: NodeId, f: &[u8]) {
        self.stats.packets_in += 1;
        self.stats.bytes_in += f.len() as u64;
        let Some((_, h, body)) = parse_body(f) else {
            self.stats.dropped += 1;
            return;
        };
        let (w, s, v) = (usize::from(h.worker), usize::from(h.pool_index), h.version);
        let pp = self.layout.per_packet;
        if h.is_result || w >= self.layout.workers || s >= self.layout.slots || body.len() != 4 * pp
        {
            self.stats.dropped += 1;
            return;
        }
        self.pipeline.process(f.len() as u32, body.len() as u32);
        let n = self.layout.workers as u32;
        let bit = 1u64 << w;
        let (c, o) = (usize::from(v), usize::from(!v));
        let Some(st) = self.slots.get_mut(s) else {
            return;
        };
        if st.seen[c] & bit != 0 {
            // a retransmission: answer it if the round is complete, drop it otherwise
            self.stats.duplicates_ignored += 1;
            if st.count[c] == 0 {
                self.result_to(w, s, v, h.chunk);
            }
            return;
        }
        st.seen[c] |= bit;
        // this worker has moved on to this copy: its bit in the other copy is cleared
        st.seen[o] &= !bit;
        // (count + 1) mod n, without a division: count < n
        let count = if st.count[c] + 1 >= n {
            0
        } else {
            st.count[c] + 1
        };
        st.count[c] = count;
        if count == 1 {
            st.round_chunk[c] = h.chunk;
        } else if st.round_chunk[c] != h.chunk {
            self.mixed += 1;
        }
        let at = (2 * s + c) * pp;
        let Some(sum) = self.sums.get_mut(at..at + pp) else {
            return;
        };
        if count == 1 {
            kernel::load_be_i32(sum, body);
        } else if count != 0 {
            if self.layout.max {
                kernel::max_be_i32(sum, body);
            } else {
                kernel::add_be_i32(sum, body);
            }
        } else {
            // the round completes: the last contribution added and the result row written in
            // one pass, then one frame per worker from the row (the multicast's copies)
            let row = &mut self.row[SwitchMlHeader::LEN..];
            if self.layout.max {
                kernel::max_be_i32_store(sum, body, row);
            } else {
                kernel::add_be_i32_store(sum, body, row);
            }
            self.row_header(s, v, h.chunk);
            for r in 0..self.layout.workers {
                self.send_row(r);
            }
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
        let partial = self
            .slots
            .iter()
            .flat_map(|st| st.count)
            .filter(|c| *c > 0)
            .count();
        vec![
            ("switch_in", self.stats.packets_in),
            ("partial_copies", partial as u64),
            ("duplicates", self.stats.duplicates_ignored),
            ("mixed_rounds", self.mixed),
        ]
    }
}

impl Switch for SwitchMlSwitch {
    fn stats(&self) -> SwitchStats {
        let mut s = self.stats.clone();
        s.recirculations = self.pipeline.stats.recirculations;
        s.recirculated_bytes = self.pipeline.stats.recirculated_bytes;
        s.overhead_fraction = self.pipeline.internal_bandwidth_overhead();
        s.overhead_kind = "pipeline bandwidth spent on recirculation";
        s
    }
}

/// The goodput share SwitchML's packet allows on the wire (its payload bound, from the model)
/// with the default payload (one pass of the model).
pub fn payload_bound(model: &TofinoModel) -> f64 {
    goodput_share(model.bytes_per_pass(), HDR as u32)
}

/// The goodput share a SwitchML packet of `payload_bytes` of values allows on the wire.
pub fn payload_bound_for(payload_bytes: u32) -> f64 {
    goodput_share(payload_bytes, HDR as u32)
}

pub struct SwitchMl;

impl System for SwitchMl {
    fn name(&self) -> &'static str {
        "switchml"
    }

    fn float_sum(&self) -> Option<crate::common::FloatSum> {
        Some(crate::common::FloatSum::BlockFloat)
    }

    fn in_network(&self) -> bool {
        true
    }

    /// The released DPDK client ([`crate::hoststack::DpdkStack::switchml_release`]).
    fn dpdk_client(&self, core_frame_ns: u64) -> crate::hoststack::DpdkStack {
        crate::hoststack::DpdkStack::switchml_release(core_frame_ns)
    }

    /// By aggregator slot (a switch shard owns its slots and sends their results in any order):
    /// by default one shard per core the workers leave (at least 1, at most 16); the spec's
    /// `switch_shards` up to 16.
    fn switch_shards(&self, cfg: &AllReduceConfig) -> usize {
        match cfg.knob("switch_shards") {
            Some(k) if k >= 1.0 => (k as usize).min(16),
            _ => {
                let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
                cores.saturating_sub(cfg.workers).clamp(1, 16)
            }
        }
    }

    /// A worker frame's aggregator slot.
    fn shard_key(&self) -> Option<fn(&[u8]) -> usize> {
        fn shard(frame: &[u8]) -> usize {
            use inabench_wire::{ethernet, ina::SwitchMlHeader, ipv4, udp};
            let slot = || {
                let eth = ethernet::Packet::new_checked(frame).ok()?;
                let ip = ipv4::Packet::new_checked(eth.payload()).ok()?;
                let u = udp::Packet::new_checked(ip.payload()).ok()?;
                SwitchMlHeader::parse(u.payload())
                    .ok()
                    .map(|h| usize::from(h.pool_index))
            };
            slot().unwrap_or(0)
        }
        Some(shard)
    }

    /// No payload integrity check.
    fn fuzz_findings(&self) -> &'static [inabench_fabric::fuzz::Kind] {
        &[inabench_fabric::fuzz::Kind::Flip]
    }

    /// `slot_cycle`: the mean time between two uses of a slot (the all-reduce over its rounds),
    /// in us.
    fn layout_metrics(&self, cfg: &AllReduceConfig, time_ns: f64) -> Vec<(&'static str, f64)> {
        Layout::new(cfg, &crate::tofino::TofinoModel::PAPER).map_or_else(
            |_| Vec::new(),
            |l| {
                let rounds = l.chunks.div_ceil(l.slots).max(1);
                vec![("slot_cycle", time_ns / 1e3 / rounds as f64)]
            },
        )
    }

    fn build_with(
        &self,
        cfg: &AllReduceConfig,
        inputs: Vec<Vec<i32>>,
    ) -> Result<Setup, SetupError> {
        build(cfg, inputs, None)
    }

    /// Workers and switch at `plan`'s addresses (the workers send to its switch's).
    fn build_at(
        &self,
        cfg: &AllReduceConfig,
        plan: Option<&AddressPlan>,
    ) -> Result<Setup, SetupError> {
        build(cfg, gradients(cfg), plan)
    }
}

/// The job of `cfg` with the workers' inputs given, at `plan`'s addresses (None: the
/// synthetic ones).
fn build(
    cfg: &AllReduceConfig,
    inputs: Vec<Vec<i32>>,
    plan: Option<&AddressPlan>,
) -> Result<Setup, SetupError> {
    let model = TofinoModel::PAPER;
    let layout = Layout::new(cfg, &model)?;
    check_inputs(cfg, &inputs)?;
    let addrs = addresses(cfg, plan)?;
    let switch = cfg.workers as NodeId;
    let workers = inputs
        .into_iter()
        .enumerate()
        .map(|(r, grad)| {
            Box::new(SwitchMlWorker {
                rank: r,
                switch,
                me: (addrs.mac(r), addrs.ip(r)),
                to: (addrs.mac(cfg.workers), addrs.ip(cfg.workers)),
                layout,
                grad,
                result: vec![0; cfg.elements],
                current: vec![None; layout.slots],
                outstanding: vec![None; layout.slots],
                deadlines: VecDeque::new(),
                got: vec![false; layout.chunks],
                received: 0,
                queue: VecDeque::new(),
                rto_ns: cfg.timeout_ns,
                stats: HostStats {
                    gradient_bytes: 4 * cfg.elements as u64,
                    ..HostStats::default()
                },
                sent_at: vec![None; layout.chunks],
                ready_at: vec![0; layout.chunks],
                clock: TxClock::new(cfg.line_rate_bps),
                duplicate_results: 0,
                stale_results: 0,
                started: false,
                pool: BufPool::default(),
            }) as Box<dyn Worker>
        })
        .collect();
    let sw = SwitchMlSwitch::new(switch, layout, model, &addrs)?;
    Ok(Setup {
        workers,
        switch: Box::new(sw),
        others: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::SetupNode;

    /// The one-pass parse accepts exactly the frames the wire crate's parsers accept, with the
    /// same fields: valid frames, each byte of the headers changed (with the IPv4 checksum
    /// left wrong and recomputed), every truncation, and random length fields.
    #[test]
    fn parse_body_accepts_what_the_wire_parsers_accept() {
        use inabench_rng::SplitMix64;
        let f0 = frame_in(
            vec![0; HDR + 4 * 48],
            2,
            6,
            &SwitchMlHeader {
                worker: 2,
                pool_index: 17,
                version: true,
                exponent: 0,
                is_result: false,
                elements: 48,
                chunk: 145,
            },
            &(0..48).map(|i| i * 1_000_003 - 7).collect::<Vec<i32>>(),
        );
        assert!(parse_body(&f0).is_some(), "a valid frame parses");
        let fix = |f: &mut Vec<u8>| {
            let e = ethernet::HEADER_LEN;
            if f.len() >= e + ipv4::HEADER_LEN {
                let ihl = (usize::from(f[e] & 0x0f) * 4).clamp(ipv4::HEADER_LEN, f.len() - e);
                f[e + 10..e + 12].fill(0);
                let c = ipv4::checksum(&f[e..e + ihl]);
                f[e + 10..e + 12].copy_from_slice(&c.to_be_bytes());
            }
        };
        let mut g = SplitMix64::new(22);
        let (mut accepted, mut tried) = (0, 0);
        let mut check = |f: &[u8]| {
            let (a, b) = (parse_body(f), parse_body_reference(f));
            assert_eq!(a, b, "frame {f:02x?}");
            tried += 1;
            accepted += usize::from(a.is_some());
        };
        for at in 0..HDR {
            for x in [0x01u8, 0x80, 0xff, 0x0f, 0x40] {
                let mut f = f0.clone();
                f[at] ^= x;
                check(&f);
                fix(&mut f);
                check(&f);
            }
        }
        for len in 0..f0.len() {
            check(&f0[..len]);
        }
        let e = ethernet::HEADER_LEN;
        for _ in 0..20_000 {
            let mut f = f0.clone();
            let r = g.next_u64();
            match r % 5 {
                // IPv4 total length, UDP length, SwitchML element count, IHL, flags/fragment
                0 => f[e + 2..e + 4].copy_from_slice(&((r >> 8) as u16 % 400).to_be_bytes()),
                1 => f[e + 24..e + 26].copy_from_slice(&((r >> 8) as u16 % 400).to_be_bytes()),
                2 => f[HDR - 6..HDR - 4].copy_from_slice(&((r >> 8) as u16 % 70).to_be_bytes()),
                3 => f[e] = (r >> 8) as u8,
                _ => f[e + 6] = (r >> 8) as u8,
            }
            if r >> 40 & 1 == 1 {
                f.truncate(((r >> 41) as usize) % (f0.len() + 1));
            }
            if r >> 50 & 3 != 0 {
                fix(&mut f);
            }
            check(&f);
        }
        assert!(accepted > 100 && accepted < tried, "{accepted} of {tried}");
    }

    /// The multicast copies of a result (built once, destination and worker field rewritten)
    /// are byte for byte the frames built for each worker on its own.
    #[test]
    fn multicast_copies_are_the_frames_built_per_worker() {
        let cfg = AllReduceConfig {
            workers: 6,
            elements: 48 * 62 * 8,
            seed: 1,
            line_rate_bps: 100e9,
            mtu: 1024,
            timeout_ns: 1_000_000,
            knobs: vec![],
        };
        let n = cfg.workers;
        let mut nodes = SwitchMl.build(&cfg).expect("build").into_nodes();
        let mut input = Vec::new();
        for node in &mut nodes {
            if let SetupNode::Worker(w) = node {
                let id = w.id();
                while let Some(t) = w.poll_transmit(0) {
                    input.push((id, t.bytes));
                }
            }
        }
        let SetupNode::Switch(sw) = &mut nodes[n] else {
            panic!("node {n} is the switch")
        };
        let mut results = 0;
        for (from, f) in &input {
            sw.handle_packet(0, *from, f);
            let mut copies = Vec::new();
            while let Some(t) = sw.poll_transmit(0) {
                copies.push(t);
            }
            if copies.is_empty() {
                continue;
            }
            assert_eq!(copies.len(), n, "one result per worker");
            let (_, h0, v0) = parse_body(&copies[0].bytes).expect("a result");
            for (r, t) in copies.iter().enumerate() {
                assert_eq!(t.to as usize, r);
                let (_, h, v) = parse_body(&t.bytes).expect("a result");
                assert_eq!(
                    h,
                    SwitchMlHeader {
                        worker: r as u16,
                        ..h0
                    }
                );
                assert_eq!(v, v0);
                let mut sum = vec![0i32; v.len() / 4];
                kernel::load_be_i32(&mut sum, v);
                let want = frame_in(vec![0; t.bytes.len()], n, r, &h, &sum);
                assert_eq!(t.bytes, want, "result {results} to worker {r}");
            }
            results += 1;
        }
        assert!(results > 0, "slots completed");
        // a resend for a completed slot is answered (unicast) with the frame built for its
        // worker
        let (from, f) = input
            .iter()
            .find(|(from, _)| *from == 3)
            .expect("worker 3 sent");
        sw.handle_packet(0, *from, f);
        let t = sw.poll_transmit(0).expect("the answer to a resend");
        assert!(sw.poll_transmit(0).is_none(), "one answer");
        assert_eq!(t.to, 3);
        let (_, h, v) = parse_body(&t.bytes).expect("a result");
        assert_eq!((h.worker, h.is_result), (3, true));
        let mut sum = vec![0i32; v.len() / 4];
        kernel::load_be_i32(&mut sum, v);
        assert_eq!(t.bytes, frame_in(vec![0; t.bytes.len()], n, 3, &h, &sum));
    }
}
