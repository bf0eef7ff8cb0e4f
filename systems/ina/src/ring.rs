//! Ring all-reduce (reduce-scatter then all-gather, as NCCL and Horovod run it) over RoCEv2 RC
//! connections: each worker sends to its ring successor and receives from its predecessor,
//! through a switch that only forwards. The gradient is cut into N chunks; in reduce-scatter step
//! s worker r sends chunk (r - s) mod N and adds what it receives into chunk (r - s - 1) mod N;
//! after N - 1 steps it holds the sum of chunk (r + 1) mod N, and N - 1 all-gather steps pass the
//! sums around. Each step is one RDMA WRITE message; a step is sent only once the data it carries
//! exists (the predecessor's previous step arrived), and its bytes are kept so a go-back-N
//! retransmission resends exactly what was first sent.
//!
//! Values are int32 (wrapping sums, bit-exact against the reference) or, with the `float` knob,
//! float32 bit patterns summed as f32 in ring order (what a training job's all-reduce does).

use crate::common::{
    AllReduceConfig, HostStats, Setup, SetupError, System, Worker, check_inputs, kernel,
};
use crate::netreduce::worker_addr;
use crate::roce::{Accept, RcResponder, RcSender};
use inabench_fabric::{Endpoint, Nanos, NodeId, Transmit};
use inabench_wire::ib::opcode;
use inabench_wire::roce::FrameRepr;
use std::collections::VecDeque;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingLayout {
    pub workers: usize,
    pub elements: usize,
    /// values per chunk (the last chunk may be shorter)
    pub chunk: usize,
    /// packets per step
    pub packets_per_step: u32,
    pub payload: u32,
    pub float: bool,
}

impl RingLayout {
    pub fn new(cfg: &AllReduceConfig) -> Result<RingLayout, SetupError> {
        if cfg.workers < 2 || cfg.workers > 64 || cfg.mtu < 4 || !cfg.mtu.is_multiple_of(4) {
            return Err(SetupError::Config(format!(
                "a ring needs 2..64 workers and an MTU in whole int32 (got {} and {})",
                cfg.workers, cfg.mtu
            )));
        }
        let chunk = cfg.elements.div_ceil(cfg.workers).max(1);
        Ok(RingLayout {
            workers: cfg.workers,
            elements: cfg.elements,
            chunk,
            packets_per_step: ((chunk * 4).div_ceil(cfg.mtu)).max(1) as u32,
            payload: cfg.mtu as u32,
            float: cfg.knob("float").is_some_and(|v| v > 0.0),
        })
    }

    pub fn steps(&self) -> u32 {
        2 * (self.workers as u32 - 1)
    }

    fn range(&self, c: usize) -> std::ops::Range<usize> {
        let a = (c * self.chunk).min(self.elements);
        a..(a + self.chunk).min(self.elements)
    }

    /// The chunk worker `r` sends in step `k`.
    fn sends(&self, r: usize, k: u32) -> usize {
        let n = self.workers;
        let k = k as usize;
        if k < n - 1 {
            (r + n * 2 - k) % n
        } else {
            (r + 1 + n * 2 - (k - (n - 1))) % n
        }
    }

    /// The chunk worker `r` receives in step `k`.
    fn receives(&self, r: usize, k: u32) -> usize {
        let n = self.workers;
        let k = k as usize;
        if k < n - 1 {
            (r + n * 2 - k - 1) % n
        } else {
            (r + n * 2 - (k - (n - 1))) % n
        }
    }
}

/// One ring member.
pub struct RingWorker {
    rank: usize,
    switch: NodeId,
    layout: RingLayout,
    data: Vec<i32>,
    send: RcSender,
    recv: RcResponder,
    sendbuf: Vec<u8>,
    /// steps whose bytes are in `sendbuf`
    ready: u32,
    rxbuf: Vec<u8>,
    acks: VecDeque<Transmit>,
    first_sent: Vec<Option<Nanos>>,
    stats: HostStats,
    started: bool,
}

impl RingWorker {
    pub fn new(
        rank: usize,
        layout: RingLayout,
        data: Vec<i32>,
        switch: NodeId,
        rto_ns: u64,
    ) -> RingWorker {
        let n = layout.workers;
        let p = layout.packets_per_step;
        let total = layout.steps() * p;
        let psn0 = |r: usize| (r as u32).wrapping_mul(0x0003_0007) & crate::roce::PSN_MASK;
        let step_bytes = (p * layout.payload) as usize;
        let mut w = RingWorker {
            rank,
            switch,
            layout,
            data,
            send: RcSender::new(
                worker_addr(rank, false),
                worker_addr((rank + 1) % n, true),
                psn0(rank),
                total,
                p,
                2,
                rto_ns,
            ),
            recv: RcResponder::new(
                worker_addr(rank, true),
                worker_addr((rank + n - 1) % n, false),
                psn0((rank + n - 1) % n),
                total,
                p,
            ),
            sendbuf: vec![0u8; step_bytes * layout.steps() as usize],
            ready: 0,
            rxbuf: vec![0u8; step_bytes],
            acks: VecDeque::new(),
            first_sent: vec![None; layout.steps() as usize],
            stats: HostStats {
                gradient_bytes: 4 * layout.elements as u64,
                ..HostStats::default()
            },
            started: false,
        };
        w.prepare(0);
        w
    }

    /// Put step `k`'s chunk into the send buffer.
    fn prepare(&mut self, k: u32) {
        let l = self.layout;
        let step_bytes = (l.packets_per_step * l.payload) as usize;
        let c = l.sends(self.rank, k);
        let at = k as usize * step_bytes;
        kernel::store_be_i32(&mut self.sendbuf[at..], &self.data[l.range(c)]);
        self.ready = k + 1;
    }

    /// Step `k` arrived whole in `rxbuf`: reduce or overwrite, and make the next step sendable.
    fn complete_step(&mut self, k: u32) {
        let l = self.layout;
        let c = l.receives(self.rank, k);
        let reduce = (k as usize) < l.workers - 1;
        let r = l.range(c);
        let be = &self.rxbuf[..4 * r.len()];
        let d = &mut self.data[r];
        // whole-slice kernels (vectorised), the same per-element results as the scalar match
        match (reduce, l.float) {
            (false, _) => kernel::load_be_i32(d, be),
            (true, false) => kernel::add_be_i32(d, be),
            (true, true) => {
                for (d, b) in d.iter_mut().zip(be.chunks_exact(4)) {
                    let v = f32::from_be_bytes([b[0], b[1], b[2], b[3]]);
                    *d = (f32::from_bits(*d as u32) + v).to_bits() as i32;
                }
            }
        }
        if k + 1 < l.steps() {
            self.prepare(k + 1);
        }
    }
}

impl Endpoint for RingWorker {
    fn id(&self) -> NodeId {
        self.rank as NodeId
    }

    fn handle_packet(&mut self, now: Nanos, _from: NodeId, frame: &[u8]) {
        self.stats.packets_rx += 1;
        let Ok((repr, payload)) = FrameRepr::parse(frame) else {
            self.stats.malformed_rx += 1;
            return;
        };
        if repr.bth.opcode == opcode::RC | opcode::ACKNOWLEDGE {
            if repr.bth.dest_qp == self.send.local.qpn
                && let Some(a) = repr.aeth
            {
                self.send.on_aeth(now, repr.bth.psn, &a);
            }
            return;
        }
        if repr.bth.dest_qp != self.recv.local.qpn {
            self.stats.malformed_rx += 1;
            return;
        }
        if let Accept::Deliver(i) = self.recv.on_data(repr.bth.psn, repr.bth.ack_req) {
            let p = self.layout.packets_per_step;
            let (k, j) = (i / p, i % p);
            let at = (j * self.layout.payload) as usize;
            let n = payload.len().min(self.layout.payload as usize);
            self.rxbuf[at..at + n].copy_from_slice(&payload[..n]);
            if j + 1 == p {
                if let Some(Some(t0)) = self.first_sent.get(k as usize) {
                    self.stats.rtt_ns.push(now.saturating_sub(*t0));
                }
                self.complete_step(k);
                if self.recv.complete() {
                    self.stats.end_ns = now;
                }
            }
        }
        for a in self.recv.take_acks() {
            if let Ok(bytes) = self.recv.ack_frame(&a) {
                self.acks.push_back(Transmit {
                    to: self.switch,
                    bytes,
                });
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
            let p = self.layout.packets_per_step;
            let i = self.send.next_to_send_until(now, self.ready * p)?;
            let pl = self.layout.payload as usize;
            let at = i as usize * pl;
            let bytes = self
                .send
                .frame(i, &self.sendbuf[at..at + pl], self.layout.payload)
                .ok()?;
            let k = (i / p) as usize;
            if i % p == 0 && self.first_sent[k].is_none() {
                self.first_sent[k] = Some(now);
            }
            Transmit {
                to: self.switch,
                bytes,
            }
        };
        self.stats.packets_tx += 1;
        self.stats.wire_bytes_tx += t.bytes.len() as u64;
        Some(t)
    }

    fn poll_timeout(&self) -> Option<Nanos> {
        self.send.poll_timeout()
    }

    fn handle_timeout(&mut self, now: Nanos) {
        self.send.on_timeout(now);
    }

    fn is_done(&self) -> bool {
        // done when our sums are complete and our successor has everything we sent
        self.recv.complete() && self.send.all_acked()
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("steps_ready", u64::from(self.ready)),
            ("retransmissions", self.send.retransmissions),
        ]
    }
}

impl Worker for RingWorker {
    fn result(&self) -> Option<Vec<i32>> {
        self.recv.complete().then(|| self.data.clone())
    }

    fn stats(&self) -> HostStats {
        HostStats {
            retransmissions: self.send.retransmissions,
            ..self.stats.clone()
        }
    }
}

pub struct RingAllReduce;

impl System for RingAllReduce {
    fn name(&self) -> &'static str {
        "ring_allreduce"
    }

    fn float_sum(&self) -> Option<crate::common::FloatSum> {
        Some(crate::common::FloatSum::Native)
    }

    /// RC over RoCE (NCCL's ring in the paper's testbed): in PSN order.
    fn ordered_transport(&self) -> bool {
        true
    }

    fn build_with(
        &self,
        cfg: &AllReduceConfig,
        inputs: Vec<Vec<i32>>,
    ) -> Result<Setup, SetupError> {
        build(cfg, inputs, None)
    }

    /// The workers' connections at `plan`'s MACs and IPv4 addresses (the QPNs and PSNs as
    /// without it), the switch forwarding by the plan's addresses
    /// ([`crate::common::plan_forwarder`]); no switch address is needed.
    fn build_at(
        &self,
        cfg: &AllReduceConfig,
        plan: Option<&crate::common::AddressPlan>,
    ) -> Result<Setup, SetupError> {
        build(cfg, crate::common::gradients(cfg), plan)
    }
}

/// The ring of `cfg` on the inputs given, at `plan`'s addresses (None: NetReduce's synthetic
/// 10.0.0.<i+1>, routed by the address's last byte).
fn build(
    cfg: &AllReduceConfig,
    inputs: Vec<Vec<i32>>,
    plan: Option<&crate::common::AddressPlan>,
) -> Result<Setup, SetupError> {
    let l = RingLayout::new(cfg)?;
    check_inputs(cfg, &inputs)?;
    crate::common::check_readdressable("a ring", cfg.workers, plan)?;
    let switch = cfg.workers as NodeId;
    let workers = inputs
        .into_iter()
        .enumerate()
        .map(|(r, data)| {
            let mut w = RingWorker::new(r, l, data, switch, cfg.timeout_ns);
            if let Some(p) = plan {
                crate::common::readdress_rc(&mut w.send, &mut w.recv, p)?;
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

    fn cfg(workers: usize, elements: usize) -> AllReduceConfig {
        AllReduceConfig {
            workers,
            elements,
            seed: 4,
            line_rate_bps: 100e9,
            mtu: 1024,
            timeout_ns: 100_000,
            knobs: vec![],
        }
    }

    #[test]
    fn chunks_go_round_the_ring() {
        let l = RingLayout::new(&cfg(4, 100)).expect("layout");
        // worker 0: sends 0,3,2 then 1,0,3; receives 3,2,1 then 0,3,2
        let s: Vec<usize> = (0..6).map(|k| l.sends(0, k)).collect();
        let r: Vec<usize> = (0..6).map(|k| l.receives(0, k)).collect();
        assert_eq!(s, vec![0, 3, 2, 1, 0, 3]);
        assert_eq!(r, vec![3, 2, 1, 0, 3, 2]);
        // what 0 receives in step k is what 3 (its predecessor) sends in step k
        assert!((0..6).all(|k| l.receives(0, k) == l.sends(3, k)));
    }
}
