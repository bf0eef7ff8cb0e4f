//! Hierarchical all-reduce, the two-level scheme NCCL and Horovod build for multi-GPU machines
//! (Horovod's `HOROVOD_HIERARCHICAL_ALLREDUCE`; the NetReduce paper's "Parallel RAR", Sec. 3.4,
//! Fig. 6B with the ring in place of the INA): the workers form groups of `group_size`
//! consecutive ranks (a machine's GPUs), and
//!
//! 1. each group runs a ring reduce-scatter over the whole vector cut into `group_size` shards:
//!    local rank `l` ends with its group's sum of shard `(l + 1) mod group_size`;
//! 2. the workers of the same local rank, one in each group, hold the same shard and run a ring
//!    all-reduce of it across the groups (the shard cut into as many chunks as there are groups):
//!    each ends with the global sum of its shard;
//! 3. each group runs a ring all-gather of the shards, and every worker holds the whole sum.
//!
//! Each ring is the ring all-reduce's ([`crate::ring`]): RoCEv2 RC connections to the ring
//! successor and from the predecessor, one RDMA WRITE message a step, a step sent only once the
//! data it carries exists, its bytes kept so a go-back-N retransmission resends what was first
//! sent, through a switch that only forwards (by destination IP). A worker has two connection
//! pairs, QP index 0 in its group's ring and 1 in its shard's ring across the groups
//! ([`crate::netreduce::worker_qp_addr`]). One group (workers <= `group_size`) is the flat ring; a
//! group of one is the ring across the groups.
//!
//! On a star of equal links (the suite's fabrics) every phase crosses the same links: the
//! intra-machine bandwidth that motivates the hierarchy is absent, and a worker moves
//! 2 (P - 1) / P of the vector as in the flat ring; what the hierarchy changes is the number of
//! sequential steps, 2 (g - 1) + 2 (P / g - 1) instead of 2 (P - 1).
//!
//! Knob: `group_size` (default 8: the GPUs of a machine in NetReduce's multi-GPU testbed, Sec. 5
//! "Testbed 2", and its Sec. 3.4 model, n = 8). A job of fewer workers than a group is one group
//! (Horovod's local size is the ranks a host runs); a worker count that is not whole groups is
//! refused (the scheme needs every group the same size). Values are int32, wrapping sums,
//! bit-exact against the reference.

use crate::common::{
    AllReduceConfig, HostStats, Setup, SetupError, System, Worker, check_inputs, kernel,
};
use crate::netreduce::{psn0, worker_qp_addr};
use crate::roce::{Accept, RcResponder, RcSender};
use inabench_fabric::{Endpoint, Nanos, NodeId, Transmit};
use inabench_wire::ib::opcode;
use inabench_wire::roce::FrameRepr;
use std::collections::VecDeque;
use std::ops::Range;

/// The GPUs of a machine in NetReduce's multi-GPU testbed (Sec. 5, Testbed 2: eight V100s a
/// machine; Sec. 3.4's model, n = 8): the group size where the job gives none.
pub const DEFAULT_GROUP_SIZE: usize = 8;

/// The shape of one job: `groups` groups of `group` workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hierarchy {
    pub workers: usize,
    pub elements: usize,
    /// workers a group (g)
    pub group: usize,
    /// groups (P / g)
    pub groups: usize,
    /// values per shard of the group's ring (the last may be shorter)
    pub shard: usize,
    pub payload: u32,
}

impl Hierarchy {
    pub fn new(cfg: &AllReduceConfig) -> Result<Hierarchy, SetupError> {
        if cfg.workers < 2 || cfg.workers > 64 || cfg.mtu < 4 || !cfg.mtu.is_multiple_of(4) {
            return Err(SetupError::Config(format!(
                "a hierarchical all-reduce needs 2..64 workers and an MTU in whole int32 (got {} and {})",
                cfg.workers, cfg.mtu
            )));
        }
        let g = match cfg.knob("group_size") {
            None => DEFAULT_GROUP_SIZE,
            Some(v) if v >= 1.0 && v.fract() == 0.0 && v <= 64.0 => v as usize,
            Some(v) => {
                return Err(SetupError::Config(format!(
                    "group_size is a whole number of workers, 1..64, not {v}"
                )));
            }
        };
        // a job of fewer workers than a machine's GPUs is one group (Horovod's local size)
        let group = g.min(cfg.workers);
        if !cfg.workers.is_multiple_of(group) {
            return Err(SetupError::Config(format!(
                "{} workers are not whole groups of {group} (group_size): the two-level scheme needs every group the same size",
                cfg.workers
            )));
        }
        Ok(Hierarchy {
            workers: cfg.workers,
            elements: cfg.elements,
            group,
            groups: cfg.workers / group,
            shard: cfg.elements.div_ceil(group).max(1),
            payload: cfg.mtu as u32,
        })
    }

    /// Sequential steps of one worker: its group's reduce-scatter and all-gather, its shard's
    /// ring all-reduce across the groups.
    pub fn steps(&self) -> u32 {
        (2 * (self.group - 1) + 2 * (self.groups - 1)) as u32
    }

    /// The values of shard `s` of the group's ring.
    fn shard_range(&self, s: usize) -> Range<usize> {
        let a = (s * self.shard).min(self.elements);
        a..(a + self.shard).min(self.elements)
    }
}

/// Which of a worker's two rings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ring {
    /// its group's (QP index 0): reduce-scatter, then all-gather
    Group,
    /// its shard's across the groups (QP index 1): an all-reduce of the shard
    Across,
}

/// One ring a worker is a member of: the ring all-reduce's schedule over `base`, cut into `n`
/// chunks, with the connections to its successor and from its predecessor.
struct Leg {
    n: usize,
    pos: usize,
    base: Range<usize>,
    chunk: usize,
    packets_per_step: u32,
    payload: u32,
    send: RcSender,
    recv: RcResponder,
    sendbuf: Vec<u8>,
    /// steps whose bytes are in `sendbuf`
    ready: u32,
    /// steps received whole (in order: RC delivers in PSN order)
    received: u32,
    rxbuf: Vec<u8>,
    first_sent: Vec<Option<Nanos>>,
}

impl Leg {
    /// Member `pos` of the ring `members` (worker ranks in ring order) over `base`, on QP index
    /// `q`.
    fn new(
        members: &[usize],
        pos: usize,
        base: Range<usize>,
        q: u32,
        payload: u32,
        rto_ns: u64,
    ) -> Leg {
        let n = members.len();
        let chunk = base.len().div_ceil(n).max(1);
        let p = ((chunk * 4).div_ceil(payload as usize)).max(1) as u32;
        let steps = 2 * (n as u32 - 1);
        let (me, succ, pred) = (
            members[pos],
            members[(pos + 1) % n],
            members[(pos + n - 1) % n],
        );
        let step_bytes = (p * payload) as usize;
        Leg {
            n,
            pos,
            base,
            chunk,
            packets_per_step: p,
            payload,
            send: RcSender::new(
                worker_qp_addr(me, false, q),
                worker_qp_addr(succ, true, q),
                psn0(me, q),
                steps * p,
                p,
                2,
                rto_ns,
            ),
            recv: RcResponder::new(
                worker_qp_addr(me, true, q),
                worker_qp_addr(pred, false, q),
                psn0(pred, q),
                steps * p,
                p,
            ),
            sendbuf: vec![0u8; step_bytes * steps as usize],
            ready: 0,
            received: 0,
            rxbuf: vec![0u8; step_bytes],
            first_sent: vec![None; steps as usize],
        }
    }

    fn steps(&self) -> u32 {
        2 * (self.n as u32 - 1)
    }

    fn range(&self, c: usize) -> Range<usize> {
        let a = (self.base.start + c * self.chunk).min(self.base.end);
        a..(a + self.chunk).min(self.base.end)
    }

    /// The chunk this member sends in step `k` (the ring all-reduce's: reduce-scatter steps
    /// 0..n-1, then all-gather).
    fn sends(&self, k: u32) -> usize {
        let (n, r, k) = (self.n, self.pos, k as usize);
        if k < n - 1 {
            (r + n * 2 - k) % n
        } else {
            (r + 1 + n * 2 - (k - (n - 1))) % n
        }
    }

    /// The chunk this member receives in step `k`.
    fn receives(&self, k: u32) -> usize {
        let (n, r, k) = (self.n, self.pos, k as usize);
        if k < n - 1 {
            (r + n * 2 - k - 1) % n
        } else {
            (r + n * 2 - (k - (n - 1))) % n
        }
    }

    /// Put the next step's chunk of `data` into the send buffer.
    fn prepare_next(&mut self, data: &[i32]) {
        let k = self.ready;
        let step_bytes = (self.packets_per_step * self.payload) as usize;
        let r = self.range(self.sends(k));
        kernel::store_be_i32(&mut self.sendbuf[k as usize * step_bytes..], &data[r]);
        self.ready = k + 1;
    }

    /// Step `k` arrived whole in `rxbuf`: reduce it into `data` (reduce-scatter) or overwrite.
    fn complete_step(&mut self, k: u32, data: &mut [i32]) {
        let r = self.range(self.receives(k));
        let be = &self.rxbuf[..4 * r.len()];
        if (k as usize) < self.n - 1 {
            kernel::add_be_i32(&mut data[r], be);
        } else {
            kernel::load_be_i32(&mut data[r], be);
        }
        self.received = k + 1;
    }

    fn reduce_scattered(&self) -> bool {
        self.received as usize >= self.n - 1
    }

    fn done(&self) -> bool {
        self.received >= self.steps()
    }
}

/// One worker of the hierarchical all-reduce.
pub struct HierarchicalWorker {
    rank: usize,
    switch: NodeId,
    data: Vec<i32>,
    /// its group's ring (none in a group of one)
    group: Option<Leg>,
    /// its shard's ring across the groups (none with one group)
    across: Option<Leg>,
    acks: VecDeque<Transmit>,
    stats: HostStats,
    started: bool,
}

impl HierarchicalWorker {
    pub fn new(
        rank: usize,
        h: Hierarchy,
        data: Vec<i32>,
        switch: NodeId,
        rto_ns: u64,
    ) -> HierarchicalWorker {
        let (g, groups) = (h.group, h.groups);
        let (grp, local) = (rank / g, rank % g);
        let group = (g > 1).then(|| {
            let members: Vec<usize> = (0..g).map(|l| grp * g + l).collect();
            Leg::new(&members, local, 0..h.elements, 0, h.payload, rto_ns)
        });
        // after the group's reduce-scatter, local rank l holds its group's sum of shard l + 1
        let shard = if g > 1 { (local + 1) % g } else { 0 };
        let across = (groups > 1).then(|| {
            let members: Vec<usize> = (0..groups).map(|j| j * g + local).collect();
            Leg::new(&members, grp, h.shard_range(shard), 1, h.payload, rto_ns)
        });
        let mut w = HierarchicalWorker {
            rank,
            switch,
            data,
            group,
            across,
            acks: VecDeque::new(),
            stats: HostStats {
                gradient_bytes: 4 * h.elements as u64,
                ..HostStats::default()
            },
            started: false,
        };
        w.advance();
        w
    }

    /// Whether `ring`'s next step (its `ready`-th) has its data: a reduce-scatter or all-gather
    /// step once the step before it arrived; the shard's ring once the group's reduce-scatter is
    /// done; the group's all-gather once the shard's ring is done.
    fn can_prepare(&self, ring: Ring) -> bool {
        let (leg, other) = match ring {
            Ring::Group => (&self.group, &self.across),
            Ring::Across => (&self.across, &self.group),
        };
        let Some(leg) = leg else {
            return false;
        };
        let k = leg.ready;
        if k >= leg.steps() {
            return false;
        }
        match ring {
            Ring::Group if k as usize == leg.n - 1 => {
                leg.reduce_scattered() && other.as_ref().is_none_or(Leg::done)
            }
            Ring::Across if k == 0 => other.as_ref().is_none_or(Leg::reduce_scattered),
            _ => k == 0 || leg.received >= k,
        }
    }

    /// Prepare every step whose data exists.
    fn advance(&mut self) {
        for ring in [Ring::Group, Ring::Across] {
            while self.can_prepare(ring) {
                let leg = match ring {
                    Ring::Group => self.group.as_mut(),
                    Ring::Across => self.across.as_mut(),
                };
                if let Some(leg) = leg {
                    leg.prepare_next(&self.data);
                }
            }
        }
        // the group's all-gather may wait on the shard's ring, which the group's
        // reduce-scatter just released: once more for it
        while self.can_prepare(Ring::Group) {
            if let Some(leg) = self.group.as_mut() {
                leg.prepare_next(&self.data);
            }
        }
    }

    fn legs(&self) -> impl Iterator<Item = &Leg> {
        self.group.iter().chain(self.across.iter())
    }

    fn complete(&self) -> bool {
        self.legs().all(Leg::done)
    }
}

impl Endpoint for HierarchicalWorker {
    fn id(&self) -> NodeId {
        self.rank as NodeId
    }

    fn handle_packet(&mut self, now: Nanos, _from: NodeId, frame: &[u8]) {
        self.stats.packets_rx += 1;
        let Ok((repr, payload)) = FrameRepr::parse(frame) else {
            self.stats.malformed_rx += 1;
            return;
        };
        let qp = repr.bth.dest_qp;
        if repr.bth.opcode == opcode::RC | opcode::ACKNOWLEDGE {
            if let Some(leg) = [self.group.as_mut(), self.across.as_mut()]
                .into_iter()
                .flatten()
                .find(|l| l.send.local.qpn == qp)
                && let Some(a) = repr.aeth
            {
                leg.send.on_aeth(now, repr.bth.psn, &a);
            }
            return;
        }
        let data = &mut self.data;
        let Some(leg) = [self.group.as_mut(), self.across.as_mut()]
            .into_iter()
            .flatten()
            .find(|l| l.recv.local.qpn == qp)
        else {
            self.stats.malformed_rx += 1;
            return;
        };
        let mut stepped = false;
        if let Accept::Deliver(i) = leg.recv.on_data(repr.bth.psn, repr.bth.ack_req) {
            let p = leg.packets_per_step;
            let (k, j) = (i / p, i % p);
            let at = (j * leg.payload) as usize;
            let n = payload.len().min(leg.payload as usize);
            leg.rxbuf[at..at + n].copy_from_slice(&payload[..n]);
            if j + 1 == p {
                if let Some(Some(t0)) = leg.first_sent.get(k as usize) {
                    self.stats.rtt_ns.push(now.saturating_sub(*t0));
                }
                leg.complete_step(k, data);
                stepped = true;
            }
        }
        for a in leg.recv.take_acks() {
            if let Ok(bytes) = leg.recv.ack_frame(&a) {
                self.acks.push_back(Transmit {
                    to: self.switch,
                    bytes,
                });
            }
        }
        if stepped {
            self.advance();
            if self.complete() {
                self.stats.end_ns = now;
            }
        }
    }

    fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        if !self.started {
            self.started = true;
            self.stats.start_ns = now;
        }
        let t = if let Some(a) = self.acks.pop_front() {
            a
        } else {
            [self.group.as_mut(), self.across.as_mut()]
                .into_iter()
                .flatten()
                .find_map(|leg| {
                    let p = leg.packets_per_step;
                    let i = leg.send.next_to_send_until(now, leg.ready * p)?;
                    let pl = leg.payload as usize;
                    let at = i as usize * pl;
                    let bytes = leg
                        .send
                        .frame(i, &leg.sendbuf[at..at + pl], leg.payload)
                        .ok()?;
                    let k = (i / p) as usize;
                    if i % p == 0 && leg.first_sent[k].is_none() {
                        leg.first_sent[k] = Some(now);
                    }
                    Some(Transmit {
                        to: self.switch,
                        bytes,
                    })
                })?
        };
        self.stats.packets_tx += 1;
        self.stats.wire_bytes_tx += t.bytes.len() as u64;
        Some(t)
    }

    fn poll_timeout(&self) -> Option<Nanos> {
        self.legs().filter_map(|l| l.send.poll_timeout()).min()
    }

    fn handle_timeout(&mut self, now: Nanos) {
        for leg in [self.group.as_mut(), self.across.as_mut()]
            .into_iter()
            .flatten()
        {
            leg.send.on_timeout(now);
        }
    }

    fn is_done(&self) -> bool {
        // done when our sums are complete and each successor has everything we sent it
        self.complete() && self.legs().all(|l| l.send.all_acked())
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("steps_ready", self.legs().map(|l| u64::from(l.ready)).sum()),
            ("retransmissions", self.retransmissions()),
        ]
    }
}

impl HierarchicalWorker {
    fn retransmissions(&self) -> u64 {
        self.legs().map(|l| l.send.retransmissions).sum()
    }
}

impl Worker for HierarchicalWorker {
    fn result(&self) -> Option<Vec<i32>> {
        self.complete().then(|| self.data.clone())
    }

    fn stats(&self) -> HostStats {
        HostStats {
            retransmissions: self.retransmissions(),
            ..self.stats.clone()
        }
    }
}

/// The hierarchical all-reduce: rings within groups and across them, hosts only.
pub struct HierarchicalAllReduce;

impl System for HierarchicalAllReduce {
    fn name(&self) -> &'static str {
        "hierarchical_allreduce"
    }

    /// RC over RoCE (NCCL's rings, as the ring all-reduce's): in PSN order.
    fn ordered_transport(&self) -> bool {
        true
    }

    /// Left out of the fuzz body: the body picks a system by an input's first byte modulo the
    /// fuzzed systems' count, so one more would remap every stored seed of the corpora; its
    /// endpoints are the ring's RC transport ([`crate::roce`]), which the ring's entry drives.
    fn fuzzed(&self) -> bool {
        false
    }

    fn build_with(
        &self,
        cfg: &AllReduceConfig,
        inputs: Vec<Vec<i32>>,
    ) -> Result<Setup, SetupError> {
        build(cfg, inputs, None)
    }

    /// Every leg's connections at `plan`'s MACs and IPv4 addresses (QPNs and PSNs as without
    /// it), the switch forwarding by them ([`crate::common::plan_forwarder`]).
    fn build_at(
        &self,
        cfg: &AllReduceConfig,
        plan: Option<&crate::common::AddressPlan>,
    ) -> Result<Setup, SetupError> {
        build(cfg, crate::common::gradients(cfg), plan)
    }
}

/// The job of `cfg` on the inputs given, at `plan`'s addresses (None: NetReduce's synthetic
/// 10.0.0.<i+1>, routed by the address's last byte).
fn build(
    cfg: &AllReduceConfig,
    inputs: Vec<Vec<i32>>,
    plan: Option<&crate::common::AddressPlan>,
) -> Result<Setup, SetupError> {
    let h = Hierarchy::new(cfg)?;
    check_inputs(cfg, &inputs)?;
    crate::common::check_readdressable("a hierarchical all-reduce", cfg.workers, plan)?;
    let switch = cfg.workers as NodeId;
    let workers = inputs
        .into_iter()
        .enumerate()
        .map(|(r, data)| {
            let mut w = HierarchicalWorker::new(r, h, data, switch, cfg.timeout_ns);
            if let Some(p) = plan {
                for leg in [w.group.as_mut(), w.across.as_mut()].into_iter().flatten() {
                    crate::common::readdress_rc(&mut leg.send, &mut leg.recv, p)?;
                }
            }
            Ok(Box::new(w) as Box<dyn Worker>)
        })
        .collect::<Result<Vec<_>, SetupError>>()?;
    Ok(Setup {
        workers,
        // an ordinary Ethernet switch: by destination IP
        switch: crate::common::forwarding_switch(switch, cfg.workers, plan)?,
        others: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::{SetupNode, reference_sum};
    use crate::testing::run_sim;
    use inabench_fabric::fault::Faults;

    fn cfg(workers: usize, elements: usize, group: Option<f64>) -> AllReduceConfig {
        AllReduceConfig {
            workers,
            elements,
            seed: 4,
            line_rate_bps: 100e9,
            mtu: 1024,
            timeout_ns: 100_000,
            knobs: group
                .map(|g| ("group_size".into(), g))
                .into_iter()
                .collect(),
        }
    }

    fn run(c: &AllReduceConfig, loss: f64) -> (Vec<Option<Vec<i32>>>, u64) {
        let f = Faults {
            loss,
            seed: 9,
            ..Faults::default()
        };
        let (nodes, rep) = run_sim(&HierarchicalAllReduce, c, f, 0, 20_000_000_000).expect("run");
        assert!(rep.finished, "{c:?} loss {loss}");
        let end = nodes
            .iter()
            .filter_map(|n| match n {
                SetupNode::Worker(w) => Some(w.stats().end_ns),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        let results = nodes
            .iter()
            .filter_map(|n| match n {
                SetupNode::Worker(w) => Some(w.result()),
                _ => None,
            })
            .collect();
        (results, end)
    }

    /// Every worker's sum is the exact reference: two levels (groups of 2, 3 and 4; shards and
    /// chunks that do not divide the vector, vectors shorter than the chunks), a group of one
    /// (the ring across the groups), one group (the flat ring), and under 2% loss (go-back-N
    /// in both rings).
    #[test]
    fn every_worker_gets_the_exact_sum() {
        for (w, e, g, loss) in [
            (4, 1000, Some(2.0), 0.0),
            (6, 50_003, Some(3.0), 0.0),
            (6, 50_003, Some(2.0), 0.0),
            (8, 7, Some(4.0), 0.0),
            (16, 20_011, None, 0.0),
            (4, 3001, Some(1.0), 0.0),
            (4, 3001, None, 0.0),
            (6, 20_000, Some(3.0), 0.02),
        ] {
            let c = cfg(w, e, g);
            let h = Hierarchy::new(&c).expect("layout");
            let (results, _) = run(&c, loss);
            let want = reference_sum(c.seed, w, e);
            assert_eq!(results.len(), w);
            for (r, got) in results.iter().enumerate() {
                assert_eq!(got.as_deref(), Some(&want[..]), "{w} {e} {h:?} {loss}: {r}");
            }
        }
    }

    /// The levels: 16 workers in groups of 8 take 2 (8 - 1) + 2 (2 - 1) steps; a job smaller
    /// than a group is one group (the flat ring's 2 (P - 1)); workers that are not whole groups
    /// and a group size that is not a whole number are refused with the reason.
    #[test]
    fn groups_and_refusals() {
        let h = Hierarchy::new(&cfg(16, 100, None)).expect("16");
        assert_eq!((h.group, h.groups, h.steps()), (8, 2, 16));
        let h = Hierarchy::new(&cfg(4, 100, None)).expect("4");
        assert_eq!((h.group, h.groups, h.steps()), (4, 1, 6));
        let h = Hierarchy::new(&cfg(8, 100, Some(1.0))).expect("1");
        assert_eq!((h.group, h.groups, h.steps()), (1, 8, 14));
        let Err(SetupError::Config(why)) = HierarchicalAllReduce.build(&cfg(12, 100, None)) else {
            panic!("12 workers in groups of 8 must be refused");
        };
        assert!(why.contains("not whole groups of 8"), "{why}");
        assert!(Hierarchy::new(&cfg(8, 100, Some(2.5))).is_err());
        assert!(Hierarchy::new(&cfg(8, 100, Some(0.0))).is_err());
    }

    /// One group is the flat ring: the same steps over the same chunks, so the same virtual
    /// time as the ring all-reduce's; two levels of 4 x 4 take fewer sequential steps than the
    /// flat ring of 16 (12 against 30) and finish a small vector sooner.
    #[test]
    fn one_group_times_as_the_ring_and_two_levels_take_fewer_steps() {
        let ring_end = |c: &AllReduceConfig| {
            let (nodes, rep) = run_sim(
                &crate::ring::RingAllReduce,
                c,
                Faults::default(),
                0,
                20_000_000_000,
            )
            .expect("ring");
            assert!(rep.finished);
            nodes
                .iter()
                .filter_map(|n| match n {
                    SetupNode::Worker(w) => Some(w.stats().end_ns),
                    _ => None,
                })
                .max()
                .unwrap_or(0)
        };
        let c = cfg(8, 65_536, None);
        let (_, flat) = run(&c, 0.0);
        assert_eq!(flat, ring_end(&c), "one group of 8 is the flat ring");
        let c = cfg(16, 1024, Some(4.0));
        let (_, two) = run(&c, 0.0);
        let ring = ring_end(&c);
        assert!(two < ring, "4 x 4: {two} ns, flat ring of 16: {ring} ns");
    }
}
