//! P4SGD iterations with the FPGA compute taken from the timing model ([`crate::fpga`]) and the
//! communication run for real: the worker transport (Alg. 3) and the switch program (Alg. 2)
//! on the sim fabric, each node wrapped in the timing of p4sgd-fig8's simulated class
//! ([`crate::host::Host`]: FPGA MAC/PHY and one 512-bit beat per frame, the switch's pipeline
//! latency). A worker hands micro-batch k's partial activations to its transport when the
//! engines' forward pass over it ends (`(k + 1) t` in virtual time, [`Paced`]); the all-reduce
//! results come back when the simulated network delivers them, and the backward pipeline of
//! Eq. 3 runs on those arrival times. An iteration is the time until the slowest worker's last
//! backward ends; the next iteration starts from a fresh virtual clock with the same endpoints
//! (their slots carry on), so the acknowledgement round of the last micro-batch, which is off
//! the critical path, does not overlap the next iteration's first packets (a small optimism).
//!
//! [`TimedReducer`] is a [`Reducer`]: real GLM training ([`crate::glm::epoch_model_parallel`] or
//! [`crate::glm::epoch_data_parallel`]) all-reduces its real activations (or gradients)
//! through it (the emulated class); [`simulate`] drives the same pipeline with seeded values
//! checked against the exact sum (the simulated class).

use crate::allreduce::{SimInputs, every_node, run_nodes};
use crate::fpga::{self, FpgaModel};
use crate::glm::{GlmError, Reducer};
use crate::host::Host;
use crate::protocol::{Completed, P4sgdSwitch, P4sgdWorker, SwitchConfig, WorkerConfig};
use inabench_fabric::Node;
use inabench_fabric::{Endpoint, Nanos, NodeId, Transmit};
use inabench_rng::SplitMix64;
use std::collections::VecDeque;

/// Values per all-reduce: the switch program's 8 (one micro-batch's partial activations).
pub const ELEMENTS: usize = 8;

/// A worker transport that submits each all-reduce at a scheduled virtual time (when the
/// engines finish computing it) and keeps every completion with its time.
pub struct Paced {
    pub inner: P4sgdWorker,
    due: VecDeque<(Nanos, Vec<i32>)>,
    pub done: Vec<Completed>,
    pub error: Option<String>,
}

impl Paced {
    pub fn new(inner: P4sgdWorker) -> Paced {
        Paced {
            inner,
            due: VecDeque::new(),
            done: Vec::new(),
            error: None,
        }
    }

    /// Submit `values` at `at` (calls in time order).
    pub fn schedule(&mut self, at: Nanos, values: Vec<i32>) {
        let i = self.due.partition_point(|(t, _)| *t <= at);
        self.due.insert(i, (at, values));
    }

    fn release(&mut self, now: Nanos) {
        while self.due.front().is_some_and(|(t, _)| *t <= now) {
            let Some((_, v)) = self.due.pop_front() else {
                break;
            };
            if let Err(e) = self.inner.submit(now, v) {
                self.error = Some(e.to_string());
            }
        }
    }

    fn drain(&mut self) {
        while let Some(c) = self.inner.take_completed() {
            self.done.push(c);
        }
    }
}

impl Endpoint for Paced {
    fn id(&self) -> NodeId {
        self.inner.id()
    }

    fn handle_packet(&mut self, now: Nanos, from: NodeId, frame: &[u8]) {
        self.release(now);
        self.inner.handle_packet(now, from, frame);
        self.drain();
    }

    fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        self.release(now);
        self.inner.poll_transmit(now)
    }

    fn poll_timeout(&self) -> Option<Nanos> {
        [self.due.front().map(|d| d.0), self.inner.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
    }

    fn handle_timeout(&mut self, now: Nanos) {
        self.release(now);
        if self.inner.poll_timeout().is_some_and(|t| t <= now) {
            self.inner.handle_timeout(now);
        }
        self.drain();
    }

    fn is_done(&self) -> bool {
        self.due.is_empty() && self.inner.is_done()
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        self.inner.counters()
    }
}

type PacedNode = Node<Paced, P4sgdSwitch>;

/// The workers and the switch, kept across iterations.
pub struct TimedFabric {
    workers: usize,
    sim: SimInputs,
    nodes: Option<Vec<PacedNode>>,
    seed: u64,
    runs: u64,
    pub retransmissions: u64,
}

const LIMIT_NS: u64 = 600_000_000_000;

impl TimedFabric {
    /// `rto_ns`: the transport's retransmission timeout (virtual).
    pub fn new(
        workers: usize,
        sim: SimInputs,
        rto_ns: u64,
        seed: u64,
    ) -> Result<TimedFabric, GlmError> {
        let e = |e: crate::protocol::ProtocolError| GlmError::Reduce(e.to_string());
        let sw = workers as NodeId;
        let mut nodes = Vec::new();
        for r in 0..workers {
            let w = P4sgdWorker::new(WorkerConfig {
                rank: r,
                workers,
                switch: sw,
                slots: crate::protocol::PAPER_SLOTS,
                elements: ELEMENTS,
                rto_ns,
            })
            .map_err(e)?;
            nodes.push(Node::Worker(Paced::new(w)));
        }
        nodes.push(Node::Switch(
            P4sgdSwitch::new(sw, SwitchConfig::paper(workers)).map_err(e)?,
        ));
        Ok(TimedFabric {
            workers,
            sim,
            nodes: Some(nodes),
            seed,
            runs: 0,
            retransmissions: 0,
        })
    }

    /// Run one iteration from virtual time 0: `schedule[p]` lists worker p's all-reduces as
    /// (submit time, values). Returns, per worker, the completions in submission order. Every
    /// worker must receive the same aggregates.
    pub fn run(
        &mut self,
        schedule: Vec<Vec<(Nanos, Vec<i32>)>>,
    ) -> Result<Vec<Vec<Completed>>, GlmError> {
        if schedule.len() != self.workers {
            return Err(GlmError::Reduce(format!(
                "{} schedules for {} workers",
                schedule.len(),
                self.workers
            )));
        }
        let nodes = self
            .nodes
            .take()
            .ok_or_else(|| GlmError::Reduce("an earlier iteration failed".into()))?;
        self.runs += 1;
        let seed = self.seed.wrapping_add(self.runs);
        let mut sched = schedule.into_iter();
        let hosts: Vec<Node<_, _>> = nodes
            .into_iter()
            .map(|n| match n {
                Node::Worker(mut p) => {
                    for (t, v) in sched.next().unwrap_or_default() {
                        p.schedule(t, v);
                    }
                    Node::Worker(Host::new(p, self.sim.fpga(), seed))
                }
                Node::Switch(s) => Node::Switch(Host::new(s, self.sim.switch(), seed)),
                Node::Other(o) => Node::Other(o),
            })
            .collect();
        let until = every_node(hosts.len(), LIMIT_NS);
        let (hosts, rep) = run_nodes(&mut self.sim.star(self.workers as NodeId), hosts, &until)
            .map_err(|e| GlmError::Reduce(e.to_string()))?;
        let finished = rep.finished;
        let mut nodes: Vec<PacedNode> = hosts
            .into_iter()
            .map(|n| match n {
                Node::Worker(h) => Node::Worker(h.inner),
                Node::Switch(h) => Node::Switch(h.inner),
                Node::Other(o) => Node::Other(o),
            })
            .collect();
        if !finished {
            return Err(GlmError::Reduce(
                "the iteration's all-reduces did not finish in 600 s of virtual time".into(),
            ));
        }
        let mut out = Vec::with_capacity(self.workers);
        let mut retrans = 0;
        for n in nodes.iter_mut() {
            if let Node::Worker(p) = n {
                if let Some(e) = p.error.take() {
                    return Err(GlmError::Reduce(e));
                }
                let mut done = std::mem::take(&mut p.done);
                done.sort_by_key(|c| c.op);
                retrans += p.inner.counters.retransmissions;
                out.push(done);
            }
        }
        self.retransmissions = retrans;
        let first = out
            .first()
            .map(|d| d.iter().map(|c| &c.values).collect::<Vec<_>>());
        for d in &out {
            if Some(d.iter().map(|c| &c.values).collect::<Vec<_>>()) != first {
                return Err(GlmError::Reduce(
                    "workers received different aggregates".into(),
                ));
            }
        }
        self.nodes = Some(nodes);
        Ok(out)
    }
}

/// How an iteration's all-reduces are timed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mode {
    /// P4SGD (Eq. 3): per micro-batch, pipelined with forward and backward.
    ModelParallel,
    /// The FPGA data-parallel system (Eq. 1): the gradient after the local compute.
    DataParallel,
}

/// Compute times of one iteration per worker (ns).
#[derive(Debug, Clone, PartialEq)]
pub struct Compute {
    /// Per worker: one micro-batch's forward (= backward) pass.
    pub micro_batch_ns: Vec<f64>,
}

impl Compute {
    pub fn new(
        m: &FpgaModel,
        mode: Mode,
        features: usize,
        workers: usize,
    ) -> Result<Compute, GlmError> {
        let e = |e: fpga::FpgaError| GlmError::Invalid(e.to_string());
        let micro_batch_ns = (0..workers)
            .map(|p| match mode {
                Mode::ModelParallel => {
                    m.micro_batch_ns(fpga::worker_features(p, workers, features))
                }
                Mode::DataParallel => m.micro_batch_ns(features),
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(e)?;
        Ok(Compute { micro_batch_ns })
    }
}

/// Lay one iteration's all-reduces out in time and turn the completions into the iteration's
/// time. `ops[p]` are worker p's all-reduces in order; `samples[p]` the samples it computes on.
fn iteration(
    fab: &mut TimedFabric,
    mode: Mode,
    c: &Compute,
    ops: Vec<Vec<Vec<i32>>>,
    samples: &[usize],
) -> Result<(f64, Vec<Vec<Completed>>), GlmError> {
    let mut schedule = Vec::with_capacity(ops.len());
    for (p, o) in ops.into_iter().enumerate() {
        let t = c.micro_batch_ns[p];
        let mbs = samples[p].div_ceil(ELEMENTS);
        let s = o
            .into_iter()
            .enumerate()
            .map(|(k, v)| {
                let at = match mode {
                    Mode::ModelParallel => (k + 1) as f64 * t,
                    Mode::DataParallel => (mbs + 1) as f64 * t,
                };
                (at.round() as Nanos, v)
            })
            .collect();
        schedule.push(s);
    }
    let done = fab.run(schedule)?;
    let mut worst = 0f64;
    for (p, d) in done.iter().enumerate() {
        let t = c.micro_batch_ns[p];
        let end = match mode {
            Mode::ModelParallel => fpga::pipeline_ns(d.len(), t, t, |k, _| d[k].done_ns as f64),
            Mode::DataParallel => d
                .iter()
                .map(|c| c.done_ns as f64)
                .fold((samples[p].div_ceil(ELEMENTS) + 1) as f64 * t, f64::max),
        };
        worst = worst.max(end);
    }
    Ok((worst, done))
}

/// A [`Reducer`] that all-reduces real training's vectors through [`TimedFabric`] in 32-bit
/// fixed point and records each iteration's time.
pub struct TimedReducer {
    pub fabric: TimedFabric,
    mode: Mode,
    compute: Compute,
    frac_bits: u32,
    batch: usize,
    /// Iteration times (ns).
    pub iterations: Vec<f64>,
}

impl TimedReducer {
    pub fn new(
        fabric: TimedFabric,
        mode: Mode,
        compute: Compute,
        frac_bits: u32,
        batch: usize,
    ) -> TimedReducer {
        TimedReducer {
            fabric,
            mode,
            compute,
            frac_bits,
            batch,
            iterations: Vec::new(),
        }
    }
}

impl Reducer for TimedReducer {
    fn allreduce(&mut self, parts: &[Vec<f32>]) -> Result<Vec<f32>, GlmError> {
        let workers = parts.len();
        if workers != self.compute.micro_batch_ns.len() {
            return Err(GlmError::Reduce(format!(
                "{workers} vectors for {} workers",
                self.compute.micro_batch_ns.len()
            )));
        }
        let n = parts[0].len();
        let scale = f64::from(1u32 << self.frac_bits);
        let limit = f64::from(i32::MAX) / workers as f64;
        let nops = n.div_ceil(ELEMENTS);
        let mut ops = Vec::with_capacity(workers);
        for v in parts {
            if v.len() != n {
                return Err(GlmError::Reduce("vectors of different lengths".into()));
            }
            let mut o = Vec::with_capacity(nops);
            for c in 0..nops {
                let mut fixed = vec![0i32; ELEMENTS];
                for (k, f) in fixed.iter_mut().enumerate() {
                    let x = v.get(c * ELEMENTS + k).copied().unwrap_or(0.0);
                    let q = (f64::from(x) * scale).round();
                    if !q.is_finite() || q.abs() > limit {
                        return Err(GlmError::Reduce(format!(
                            "value {x} does not fit 32-bit fixed point with {} fractional bits over {workers} workers",
                            self.frac_bits
                        )));
                    }
                    *f = q as i32;
                }
                o.push(fixed);
            }
            ops.push(o);
        }
        // samples each worker computes on this iteration
        let samples: Vec<usize> = match self.mode {
            Mode::ModelParallel => vec![n; workers],
            Mode::DataParallel => {
                let share = self.batch.div_ceil(workers);
                (0..workers)
                    .map(|p| share.min(self.batch.saturating_sub(p * share)))
                    .collect()
            }
        };
        let (t, done) = iteration(&mut self.fabric, self.mode, &self.compute, ops, &samples)?;
        self.iterations.push(t);
        let first = done
            .first()
            .ok_or_else(|| GlmError::Reduce("no workers".into()))?;
        if first.len() != nops {
            return Err(GlmError::Reduce(format!(
                "{} of {nops} all-reduces came back",
                first.len()
            )));
        }
        Ok(first
            .iter()
            .flat_map(|c| c.values.iter())
            .take(n)
            .map(|v| (f64::from(*v) / scale) as f32)
            .collect())
    }
}

/// The simulated class: `iterations` iterations of `batch` samples with seeded values, every
/// aggregate checked against the exact (wrapping) sum. Returns the iteration times (ns).
pub fn simulate(
    m: &FpgaModel,
    sim: SimInputs,
    features: usize,
    workers: usize,
    batch: usize,
    iterations: usize,
    seed: u64,
) -> Result<(Vec<f64>, u64), GlmError> {
    let c = Compute::new(m, Mode::ModelParallel, features, workers)?;
    let rto = sim.timeout_ns;
    let mut fab = TimedFabric::new(workers, sim, rto, seed)?;
    let mut g = SplitMix64::derive(seed, "p4sgd timed values");
    let nops = batch.div_ceil(ELEMENTS);
    let mut times = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let ops: Vec<Vec<Vec<i32>>> = (0..workers)
            .map(|_| {
                (0..nops)
                    .map(|_| {
                        (0..ELEMENTS)
                            .map(|_| (g.next_u64() % 2_000_001) as i32 - 1_000_000)
                            .collect()
                    })
                    .collect()
            })
            .collect();
        let expect: Vec<Vec<i32>> = (0..nops)
            .map(|k| {
                (0..ELEMENTS)
                    .map(|e| ops.iter().fold(0i32, |a, o| a.wrapping_add(o[k][e])))
                    .collect()
            })
            .collect();
        let (t, done) = iteration(
            &mut fab,
            Mode::ModelParallel,
            &c,
            ops,
            &vec![batch; workers],
        )?;
        for d in &done {
            if d.len() != nops || d.iter().zip(&expect).any(|(c, e)| c.values != *e) {
                return Err(GlmError::Reduce(
                    "an aggregate differs from the exact sum".into(),
                ));
            }
        }
        times.push(t);
    }
    Ok((times, fab.retransmissions))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::glm::{self, Glm, LocalSum, Sgd};

    pub(crate) fn inputs() -> SimInputs {
        SimInputs {
            rate_bps: 100e9,
            link_latency_ns: 10,
            switch_latency_ns: 400,
            fpga_nic_ns: 200,
            fpga_beat_ns: 4,
            host_nic_ns: 600,
            timeout_ns: 10_000,
            host_frame_ns: 0,
            mpi_allreduce_ns: None,
        }
    }

    #[test]
    fn simulated_pipeline_matches_eq3_with_the_measured_latency() {
        let m = FpgaModel::paper(8, 4, 250e6);
        // large partitions: compute per micro-batch (1 us) exceeds the all-reduce latency
        let (t, retrans) = simulate(&m, inputs(), 1 << 20, 2, 64, 5, 1).unwrap();
        assert_eq!(retrans, 0);
        let tmb = m.micro_batch_ns(1 << 19).unwrap();
        // Eq. 3 bounds: at least forward + backward of the mini-batch + one latency > 0
        for it in &t {
            assert!(*it > 9.0 * tmb, "{it} vs {tmb}");
            assert!(*it < 9.0 * tmb + 5_000.0, "{it}");
        }
        // a tiny partition: communication dominates, so the iteration grows with micro-batches
        let (a, _) = simulate(&m, inputs(), 512, 2, 16, 3, 1).unwrap();
        let (b, _) = simulate(&m, inputs(), 512, 2, 256, 3, 1).unwrap();
        assert!(b[0] > a[0]);
        // but amortises: per-sample time falls with the batch
        assert!(b[0] / 256.0 < a[0] / 16.0);
    }

    #[test]
    fn timed_training_gives_the_exact_model_and_dp_too() {
        let s = glm::Shape {
            name: "t",
            rows: 128,
            cols: 96,
            nnz_per_row: 12,
        };
        let d = glm::synthetic(&s, 128, 5);
        let sgd = Sgd {
            glm: Glm::Logistic,
            lr: 0.1,
            batch: 32,
            micro_batch: 8,
            block: 0,
        };
        let m = FpgaModel::paper(2, 4, 250e6);
        let mut w1 = vec![0f32; d.cols];
        let (mut wm, mut wd) = (w1.clone(), w1.clone());
        let mut mp = TimedReducer::new(
            TimedFabric::new(3, inputs(), 10_000, 2).unwrap(),
            Mode::ModelParallel,
            Compute::new(&m, Mode::ModelParallel, d.cols, 3).unwrap(),
            16,
            32,
        );
        let mut dp = TimedReducer::new(
            TimedFabric::new(3, inputs(), 100_000, 2).unwrap(),
            Mode::DataParallel,
            Compute::new(&m, Mode::DataParallel, d.cols, 3).unwrap(),
            16,
            32,
        );
        let mut wl = w1.clone();
        for _ in 0..2 {
            glm::epoch_single(&sgd, &d, &mut w1);
            glm::epoch_model_parallel(&sgd, &d, &mut wm, 3, &mut mp).unwrap();
            glm::epoch_data_parallel(&sgd, &d, &mut wd, 3, &mut dp).unwrap();
            glm::epoch_model_parallel(&sgd, &d, &mut wl, 3, &mut LocalSum).unwrap();
        }
        let diff = |a: &[f32], b: &[f32]| {
            a.iter()
                .zip(b)
                .map(|(x, y)| (x - y).abs())
                .fold(0f32, f32::max)
        };
        assert!(diff(&w1, &wm) < 1e-3, "{}", diff(&w1, &wm));
        assert!(diff(&w1, &wd) < 1e-3, "{}", diff(&w1, &wd));
        assert!(w1.iter().any(|x| *x != 0.0));
        assert_eq!(mp.iterations.len(), 8);
        assert_eq!(dp.iterations.len(), 8);
        // every iteration takes at least its compute: MP (4 micro-batches + 1) passes
        let t = m.micro_batch_ns(32).unwrap();
        assert!(mp.iterations.iter().all(|x| *x >= 5.0 * t));
        // DP all-reduces 96 gradients = 12 operations per iteration: slower than MP's 4
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        assert!(mean(&dp.iterations) > 0.0 && mean(&mp.iterations) > 0.0);
    }
}
