//! Driving all-reduce endpoints: a closed loop of operations per worker with every result checked
//! against the reference sum ([`LoopWorker`]) and latency statistics ([`LatencyStats`]). A run's
//! workers and switch go onto a fabric as one node type, `inabench_fabric::Node`; a host stack's
//! cost per frame on this machine is measured with `inabench_fabric::wrap` (see
//! [`crate::allreduce`]).

use crate::cpusync::CpuSyncWorker;
use crate::protocol::{Completed, P4sgdWorker, ProtocolError};
use inabench_fabric::{Endpoint, Nanos, NodeId, Transmit};
use inabench_rng::SplitMix64;

/// A worker-side all-reduce engine: submit vectors, collect results.
pub trait Collective: Endpoint {
    fn submit(&mut self, now: Nanos, values: Vec<i32>) -> Result<u64, ProtocolError>;
    fn take_completed(&mut self) -> Option<Completed>;
}

impl Collective for P4sgdWorker {
    fn submit(&mut self, now: Nanos, values: Vec<i32>) -> Result<u64, ProtocolError> {
        P4sgdWorker::submit(self, now, values)
    }
    fn take_completed(&mut self) -> Option<Completed> {
        P4sgdWorker::take_completed(self)
    }
}

impl Collective for crate::gpusync::GpuSyncWorker {
    fn submit(&mut self, now: Nanos, values: Vec<i32>) -> Result<u64, ProtocolError> {
        crate::gpusync::GpuSyncWorker::submit(self, now, values)
    }
    fn take_completed(&mut self) -> Option<Completed> {
        crate::gpusync::GpuSyncWorker::take_completed(self)
    }
}

impl Collective for CpuSyncWorker {
    fn submit(&mut self, now: Nanos, values: Vec<i32>) -> Result<u64, ProtocolError> {
        CpuSyncWorker::submit(self, now, values)
    }
    fn take_completed(&mut self) -> Option<Completed> {
        CpuSyncWorker::take_completed(self)
    }
}

/// Worker `w`'s input of operation `op`: seeded int32 values that cannot overflow summed over
/// up to 256 workers.
pub fn input(seed: u64, w: usize, op: u64, elements: usize) -> Vec<i32> {
    let mut g = SplitMix64::new(
        seed ^ (w as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ op.wrapping_mul(0xD1B5_4A32_D192_ED03),
    );
    (0..elements)
        .map(|_| ((g.next_u64() >> 41) as i32) - (1 << 22))
        .collect()
}

/// The exact sum of operation `op` over `workers`.
pub fn reference(seed: u64, workers: usize, op: u64, elements: usize) -> Vec<i32> {
    let mut acc = vec![0i32; elements];
    for w in 0..workers {
        for (a, x) in acc.iter_mut().zip(input(seed, w, op, elements)) {
            *a = a.wrapping_add(x);
        }
    }
    acc
}

/// Runs `ops` all-reduces one after another (the next is issued when the previous result
/// arrives, as a training loop does), checking each result.
pub struct LoopWorker<C: Collective> {
    pub inner: C,
    rank: usize,
    workers: usize,
    elements: usize,
    seed: u64,
    ops: u64,
    issued: u64,
    /// Operations kept outstanding (1: a closed loop).
    pub window: u64,
    /// Latency of each operation, ns (submission to result).
    pub latencies: Vec<u64>,
    /// Results that differ from the reference sum.
    pub wrong: u64,
    /// Results delivered more than once, or for an operation never issued.
    pub duplicates: u64,
    pub errors: u64,
    delivered: Vec<bool>,
}

impl<C: Collective> LoopWorker<C> {
    pub fn new(
        inner: C,
        rank: usize,
        workers: usize,
        elements: usize,
        seed: u64,
        ops: u64,
    ) -> Self {
        LoopWorker {
            inner,
            rank,
            workers,
            elements,
            seed,
            ops,
            issued: 0,
            window: 1,
            latencies: Vec::with_capacity(ops as usize),
            wrong: 0,
            duplicates: 0,
            errors: 0,
            delivered: vec![false; ops as usize],
        }
    }

    fn issue(&mut self, now: Nanos) {
        if self.issued < self.ops {
            let v = input(self.seed, self.rank, self.issued, self.elements);
            if self.inner.submit(now, v).is_err() {
                self.errors += 1;
            }
            self.issued += 1;
        }
    }

    fn check(&mut self, now: Nanos) {
        while let Some(c) = self.inner.take_completed() {
            match self.delivered.get_mut(c.op as usize) {
                Some(d) if !*d && c.op < self.issued => *d = true,
                _ => {
                    self.duplicates += 1;
                    continue;
                }
            }
            if c.values != reference(self.seed, self.workers, c.op, self.elements) {
                self.wrong += 1;
            }
            self.latencies
                .push(c.done_ns.saturating_sub(c.submitted_ns));
            self.issue(now);
        }
    }

    pub fn finished(&self) -> u64 {
        self.latencies.len() as u64
    }
}

impl<C: Collective> Endpoint for LoopWorker<C> {
    fn id(&self) -> NodeId {
        self.inner.id()
    }
    fn handle_packet(&mut self, now: Nanos, from: NodeId, frame: &[u8]) {
        self.inner.handle_packet(now, from, frame);
        self.check(now);
    }
    fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        if self.issued == 0 {
            for _ in 0..self.window.max(1) {
                self.issue(now);
            }
        }
        self.check(now);
        self.inner.poll_transmit(now)
    }
    fn poll_timeout(&self) -> Option<Nanos> {
        self.inner.poll_timeout()
    }
    fn handle_timeout(&mut self, now: Nanos) {
        self.inner.handle_timeout(now);
        self.check(now);
    }
    fn is_done(&self) -> bool {
        self.finished() == self.ops && self.inner.is_done()
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        let mut c = self.inner.counters();
        c.push(("finished", self.finished()));
        c
    }
}

/// Latency statistics over samples in ns, reported in us: mean, median, 99th percentile
/// (nearest rank on the sorted samples) and the population standard deviation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatencyStats {
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub std_us: f64,
    pub count: usize,
}

impl LatencyStats {
    pub fn of(samples: &[u64]) -> Option<LatencyStats> {
        if samples.is_empty() {
            return None;
        }
        let mut s = samples.to_vec();
        s.sort_unstable();
        let n = s.len() as f64;
        let mean = s.iter().map(|x| *x as f64).sum::<f64>() / n;
        let var = s.iter().map(|x| (*x as f64 - mean).powi(2)).sum::<f64>() / n;
        let rank = |q: f64| s[((q * n).ceil() as usize).clamp(1, s.len()) - 1] as f64;
        Some(LatencyStats {
            mean_us: mean / 1e3,
            p50_us: rank(0.5) / 1e3,
            p99_us: rank(0.99) / 1e3,
            std_us: var.sqrt() / 1e3,
            count: s.len(),
        })
    }
}
