//! [`Host`]: what a node adds around its protocol state machine in virtual time, itself a
//! sans-IO endpoint. A fixed latency on receive and on transmit that does not occupy the node (a
//! pipelined datapath: MAC/PHY, a switch pipeline, a NIC and PCIe), and optionally a per-frame
//! processing cost that does occupy it (a CPU: frames queue behind each other). The cost is fixed
//! or drawn, with a seeded generator, from given samples; every caller passes declared costs
//! (since issue #34 nothing charged in a simulation is measured on this machine).

use inabench_fabric::{Endpoint, Nanos, NodeId, Transmit};
use inabench_rng::SplitMix64;
use std::collections::VecDeque;

/// Per-frame processing cost of a node.
#[derive(Debug, Clone, PartialEq)]
pub enum Cost {
    None,
    Fixed(u64),
    /// Draw each frame's cost from these samples (ns).
    Samples(Vec<u64>),
}

/// A node's timing around its state machine.
#[derive(Debug, Clone, PartialEq)]
pub struct Timing {
    pub rx_delay_ns: u64,
    pub tx_delay_ns: u64,
    pub cost: Cost,
}

impl Timing {
    pub const ZERO: Timing = Timing {
        rx_delay_ns: 0,
        tx_delay_ns: 0,
        cost: Cost::None,
    };
}

pub struct Host<E: Endpoint> {
    pub inner: E,
    timing: Timing,
    rng: SplitMix64,
    busy_until: Nanos,
    last: Nanos,
    inbox: VecDeque<(Nanos, NodeId, Vec<u8>)>,
    outbox: VecDeque<(Nanos, Transmit)>,
}

impl<E: Endpoint> Host<E> {
    pub fn new(inner: E, timing: Timing, seed: u64) -> Self {
        let rng = SplitMix64::derive(seed, &format!("host cost {}", inner.id()));
        Host {
            inner,
            timing,
            rng,
            busy_until: 0,
            last: 0,
            inbox: VecDeque::new(),
            outbox: VecDeque::new(),
        }
    }

    fn cost(&mut self) -> u64 {
        match &self.timing.cost {
            Cost::None => 0,
            Cost::Fixed(c) => *c,
            Cost::Samples(s) if s.is_empty() => 0,
            Cost::Samples(s) => s[(self.rng.next_u64() % s.len() as u64) as usize],
        }
    }

    /// Occupy the node for one frame's cost from `t`; returns when the work is done.
    fn occupy(&mut self, t: Nanos) -> Nanos {
        let c = self.cost();
        if c == 0 {
            // a free frame still waits for the frames queued before it: one CPU is FIFO (a
            // zero-cost sample, which a preempted calibration batch can round down to, let a
            // frame overtake its node's queue: a resend behind its next chunk, SwitchML's
            // one-bit shadow copy then counted it into a later round, p4sgd-fig8)
            return t.max(self.busy_until);
        }
        let done = t.max(self.busy_until) + c;
        self.busy_until = done;
        done
    }

    /// Take what the inner machine wants to send at `t` into the outbox.
    fn collect(&mut self, t: Nanos) {
        let t = t.max(self.last);
        self.last = t;
        while let Some(tx) = self.inner.poll_transmit(t) {
            let ready = self.occupy(t) + self.timing.tx_delay_ns;
            // keep the outbox in time order (costs may differ per frame)
            let at = self.outbox.partition_point(|(r, _)| *r <= ready);
            self.outbox.insert(at, (ready, tx));
        }
    }

    fn run_due(&mut self, now: Nanos) {
        while self.inbox.front().is_some_and(|(r, _, _)| *r <= now) {
            let Some((r, from, frame)) = self.inbox.pop_front() else {
                break;
            };
            let t = r.max(self.last);
            self.last = t;
            self.inner.handle_packet(t, from, &frame);
            self.collect(t);
        }
        if self.inner.poll_timeout().is_some_and(|t| t <= now) {
            let t = now.max(self.last);
            self.last = t;
            self.inner.handle_timeout(t);
            self.collect(t);
        }
    }
}

impl<E: Endpoint> Endpoint for Host<E> {
    fn id(&self) -> NodeId {
        self.inner.id()
    }

    fn handle_packet(&mut self, now: Nanos, from: NodeId, frame: &[u8]) {
        let arrive = now + self.timing.rx_delay_ns;
        let ready = self.occupy(arrive);
        let at = self.inbox.partition_point(|(r, _, _)| *r <= ready);
        self.inbox.insert(at, (ready, from, frame.to_vec()));
        self.run_due(now);
    }

    fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        self.collect(now);
        if self.outbox.front().is_some_and(|(r, _)| *r <= now) {
            self.outbox.pop_front().map(|(_, t)| t)
        } else {
            None
        }
    }

    fn poll_timeout(&self) -> Option<Nanos> {
        [
            self.inbox.front().map(|(r, _, _)| *r),
            self.outbox.front().map(|(r, _)| *r),
            self.inner.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn handle_timeout(&mut self, now: Nanos) {
        self.run_due(now);
    }

    fn is_done(&self) -> bool {
        self.inner.is_done() && self.outbox.is_empty() && self.inbox.is_empty()
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        self.inner.counters()
    }
}
