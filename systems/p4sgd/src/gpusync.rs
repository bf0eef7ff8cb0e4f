//! GPUSync's all-reduce as NCCL runs a small one between one GPU per node: the ring or the tree
//! algorithm with the low-latency (LL) protocol, every step a real message through a forwarding
//! switch, sans-IO.
//!
//! - Ring (NCCL's ring all-reduce): the vector is cut into N chunks; in step k (0 .. 2(N-1))
//!   rank r sends chunk (r - k) mod N to rank r + 1 and receives chunk (r - 1 - k) mod N from
//!   rank r - 1, adding it in the first N - 1 steps (reduce-scatter) and keeping it in the
//!   last N - 1 (all-gather); a step is sent when the previous one has been received, as the LL
//!   protocol's flag-per-line polling does.
//! - Tree: a binary tree over the ranks (parent (r - 1) / 2); a rank adds its children's partial
//!   sums to its own and sends the sum up, the root sends the total down, each rank forwards it
//!   to its children: 2 x depth hops. NCCL's double binary tree halves the data over two such
//!   trees of the same depth; with 32 bytes the latency is one tree's.
//!
//! Each operation starts `launch_ns` after it is submitted (the one kernel launch of a CUDA
//! graph and NCCL's fixed set-up, which NCCL's tuning model calls the base latency); the
//! per-hop costs (the GPU writing LL lines, the proxy thread posting the RDMA write, the
//! receiving GPU polling its flags) are the node timing's ([`crate::host::Host`]) around this
//! machine, see [`crate::allreduce`]. Values are int32 with wrapping sums, so the result is exact
//! whatever the order. The fabric must be loss-free (NCCL's is reliable through the NIC's
//! transport); a lost frame stalls the operation, which the experiment reports as unfinished.

use crate::cpusync::{cpusync_frame, cpusync_parse};
use crate::protocol::{Completed, ProtocolError};
use inabench_fabric::{Endpoint, Nanos, NodeId, Transmit};
use std::collections::{HashMap, VecDeque};

/// NCCL's all-reduce algorithms for one GPU per node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algo {
    Ring,
    Tree,
}

impl Algo {
    pub fn parse(s: &str) -> Option<Algo> {
        match s {
            "ring" => Some(Algo::Ring),
            "tree" => Some(Algo::Tree),
            _ => None,
        }
    }

    /// Hops on the critical path of one all-reduce among `n` ranks: 2 (n - 1) for the ring,
    /// twice the binary tree's depth for the tree.
    pub fn hops(self, n: usize) -> usize {
        match self {
            Algo::Ring => 2 * n.saturating_sub(1),
            Algo::Tree => {
                // depth of the heap-ordered binary tree of n nodes
                let mut depth = 0;
                while (1usize << (depth + 1)) - 1 < n {
                    depth += 1;
                }
                2 * depth
            }
        }
    }
}

/// What one rank needs.
#[derive(Debug, Clone)]
pub struct GpuSyncConfig {
    pub rank: usize,
    pub workers: usize,
    pub switch: NodeId,
    pub elements: usize,
    pub algo: Algo,
    /// From submission to the first message (kernel launch and set-up).
    pub launch_ns: Nanos,
}

struct Current {
    op: u64,
    acc: Vec<i32>,
    submitted_ns: Nanos,
    start_ns: Nanos,
    started: bool,
    /// Ring: the next step to send; tree: bit j set once child j's sum is added, and
    /// [`SENT_UP`] once the sum went up.
    step: usize,
    /// Ring: steps received.
    received: usize,
}

const SENT_UP: usize = 1 << 8;

/// One GPU's NCCL all-reduce.
pub struct GpuSyncWorker {
    cfg: GpuSyncConfig,
    pending: VecDeque<(u64, Vec<i32>, Nanos)>,
    current: Option<Current>,
    /// Messages that arrived before they were needed: (op, step or tag, sender) -> values.
    early: HashMap<(u32, u8, u32), Vec<i32>>,
    submitted: u64,
    completed: VecDeque<Completed>,
    out: VecDeque<Transmit>,
    pub malformed: u64,
}

/// Tree message tags.
const UP: u8 = 0;
const DOWN: u8 = 1;

impl GpuSyncWorker {
    pub fn new(cfg: GpuSyncConfig) -> Result<Self, ProtocolError> {
        if cfg.workers < 2 || cfg.rank >= cfg.workers || cfg.workers > 128 {
            return Err(ProtocolError::Config(format!(
                "2..128 ranks and a rank below them, not rank {} of {}",
                cfg.rank, cfg.workers
            )));
        }
        if cfg.elements == 0 || cfg.elements > 255 {
            return Err(ProtocolError::Config(format!(
                "1..255 values per operation, not {}",
                cfg.elements
            )));
        }
        Ok(GpuSyncWorker {
            cfg,
            pending: VecDeque::new(),
            current: None,
            early: HashMap::new(),
            submitted: 0,
            completed: VecDeque::new(),
            out: VecDeque::new(),
            malformed: 0,
        })
    }

    pub fn submit(&mut self, now: Nanos, values: Vec<i32>) -> Result<u64, ProtocolError> {
        if values.len() != self.cfg.elements {
            return Err(ProtocolError::Length {
                want: self.cfg.elements,
                got: values.len(),
            });
        }
        let op = self.submitted;
        self.submitted += 1;
        self.pending.push_back((op, values, now));
        self.advance(now);
        Ok(op)
    }

    pub fn take_completed(&mut self) -> Option<Completed> {
        self.completed.pop_front()
    }

    fn n(&self) -> usize {
        self.cfg.workers
    }

    /// The element range of ring chunk `c`.
    fn chunk(&self, c: usize) -> std::ops::Range<usize> {
        let (e, n) = (self.cfg.elements, self.n());
        (c * e / n)..((c + 1) * e / n)
    }

    /// The ring chunk rank r sends in step k: (r - k) mod N.
    fn sent_chunk(&self, k: usize) -> usize {
        let n = self.n();
        (self.cfg.rank + n - k % n) % n
    }

    fn send(&mut self, to: usize, op: u64, step: u8, values: &[i32]) {
        let f = cpusync_frame(self.cfg.rank as u32, to as u32, op as u32, step, values);
        self.out.push_back(Transmit {
            to: self.cfg.switch,
            bytes: f,
        });
    }

    fn children(&self) -> Vec<usize> {
        let (r, n) = (self.cfg.rank, self.n());
        [2 * r + 1, 2 * r + 2]
            .into_iter()
            .filter(|c| *c < n)
            .collect()
    }

    fn parent(&self) -> Option<usize> {
        (self.cfg.rank > 0).then(|| (self.cfg.rank - 1) / 2)
    }

    /// Who may send `step` to this rank.
    fn expected_sender(&self, step: u8) -> Vec<usize> {
        match self.cfg.algo {
            Algo::Ring => vec![(self.cfg.rank + self.n() - 1) % self.n()],
            Algo::Tree if step == UP => self.children(),
            Algo::Tree => self.parent().into_iter().collect(),
        }
    }

    fn finish(&mut self, now: Nanos) {
        if let Some(c) = self.current.take() {
            self.completed.push_back(Completed {
                op: c.op,
                values: c.acc,
                submitted_ns: c.submitted_ns,
                done_ns: now,
            });
        }
    }

    /// Ring: send step `k` of the current operation.
    fn ring_send(&mut self, k: usize) {
        let Some(c) = &self.current else { return };
        let vals = c.acc[self.chunk(self.sent_chunk(k))].to_vec();
        let op = c.op;
        let next = (self.cfg.rank + 1) % self.n();
        self.send(next, op, k as u8, &vals);
    }

    /// Start operations when their launch is over and consume what has arrived.
    fn advance(&mut self, now: Nanos) {
        loop {
            if self.current.is_none() {
                let Some((op, acc, submitted_ns)) = self.pending.pop_front() else {
                    return;
                };
                self.current = Some(Current {
                    op,
                    acc,
                    submitted_ns,
                    start_ns: now.max(submitted_ns) + self.cfg.launch_ns,
                    started: false,
                    step: 0,
                    received: 0,
                });
            }
            let Some(c) = self.current.as_mut() else {
                return;
            };
            if !c.started {
                if now < c.start_ns {
                    return;
                }
                c.started = true;
                if self.cfg.algo == Algo::Ring {
                    c.step = 1;
                    self.ring_send(0);
                }
            }
            let finished = match self.cfg.algo {
                Algo::Ring => self.ring_progress(now),
                Algo::Tree => self.tree_progress(now),
            };
            if !finished {
                return;
            }
        }
    }

    /// Ring: take the steps that arrived in order. Returns whether the operation finished.
    fn ring_progress(&mut self, now: Nanos) -> bool {
        let n = self.n();
        let from = ((self.cfg.rank + n - 1) % n) as u32;
        loop {
            let Some(c) = self.current.as_ref() else {
                return true;
            };
            let (op, k) = (c.op, c.received);
            let Some(v) = self.early.remove(&(op as u32, k as u8, from)) else {
                return false;
            };
            // rank r - 1 sent its chunk (r - 1 - k) mod N
            let idx = (self.cfg.rank + 2 * n - 1 - k % n) % n;
            let range = self.chunk(idx);
            let Some(c) = self.current.as_mut() else {
                return true;
            };
            if v.len() != range.len() {
                self.malformed += 1;
                return false;
            }
            for (a, x) in c.acc[range].iter_mut().zip(&v) {
                *a = if k < n - 1 { a.wrapping_add(*x) } else { *x };
            }
            c.received += 1;
            if c.received == 2 * (n - 1) {
                self.finish(now);
                return true;
            }
            let next = c.step;
            c.step += 1;
            self.ring_send(next);
        }
    }

    /// Tree: add the children's sums and send up; the root turns the total around; a rank that
    /// receives the total forwards it down. Returns whether the operation finished.
    fn tree_progress(&mut self, now: Nanos) -> bool {
        let children = self.children();
        let parent = self.parent();
        let Some(c) = self.current.as_mut() else {
            return true;
        };
        let op = c.op;
        if c.step & SENT_UP == 0 {
            for (j, ch) in children.iter().enumerate() {
                if c.step & (1 << j) != 0 {
                    continue;
                }
                if let Some(v) = self.early.remove(&(op as u32, UP, *ch as u32)) {
                    if v.len() != c.acc.len() {
                        self.malformed += 1;
                        continue;
                    }
                    for (a, x) in c.acc.iter_mut().zip(&v) {
                        *a = a.wrapping_add(*x);
                    }
                    c.step |= 1 << j;
                }
            }
            let all = (1usize << children.len()) - 1;
            if c.step & all != all {
                return false;
            }
            c.step |= SENT_UP;
            let acc = c.acc.clone();
            match parent {
                Some(p) => self.send(p, op, UP, &acc),
                None => {
                    for ch in &children {
                        self.send(*ch, op, DOWN, &acc);
                    }
                    self.finish(now);
                    return true;
                }
            }
        }
        let Some(p) = parent else {
            return false;
        };
        let Some(v) = self.early.remove(&(op as u32, DOWN, p as u32)) else {
            return false;
        };
        if let Some(c) = self.current.as_mut() {
            if v.len() != c.acc.len() {
                self.malformed += 1;
                return false;
            }
            c.acc.clone_from(&v);
        }
        for ch in &children {
            self.send(*ch, op, DOWN, &v);
        }
        self.finish(now);
        true
    }
}

impl Endpoint for GpuSyncWorker {
    fn id(&self) -> NodeId {
        self.cfg.rank as NodeId
    }

    fn handle_packet(&mut self, now: Nanos, _from: NodeId, f: &[u8]) {
        match cpusync_parse(f) {
            Ok((src, op, step, values))
                if values.len() <= self.cfg.elements
                    && self.expected_sender(step).contains(&(src as usize))
                    && (self.cfg.algo == Algo::Tree && step <= DOWN
                        || self.cfg.algo == Algo::Ring
                            && usize::from(step) < 2 * (self.n() - 1)) =>
            {
                if self.early.insert((op, step, src), values).is_some() {
                    // a second message for the same step from the same sender
                    self.malformed += 1;
                }
                self.advance(now);
            }
            _ => self.malformed += 1,
        }
    }

    fn poll_transmit(&mut self, _now: Nanos) -> Option<Transmit> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Nanos> {
        self.current
            .as_ref()
            .filter(|c| !c.started)
            .map(|c| c.start_ns)
    }

    fn handle_timeout(&mut self, now: Nanos) {
        self.advance(now);
    }

    fn is_done(&self) -> bool {
        self.current.is_none() && self.pending.is_empty()
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![("malformed", self.malformed)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::allreduce::{every_node, run_nodes};
    use crate::cpusync::{Forwarder, forwarder};
    use crate::driver::LoopWorker;
    use inabench_fabric::Node;
    use inabench_fabric::Sim;
    use inabench_fabric::sim::LinkConfig;

    fn run(
        algo: Algo,
        n: usize,
        elements: usize,
        ops: u64,
        launch: Nanos,
    ) -> Vec<LoopWorker<GpuSyncWorker>> {
        let mut nodes: Vec<Node<LoopWorker<GpuSyncWorker>, Forwarder>> = (0..n)
            .map(|r| {
                let w = GpuSyncWorker::new(GpuSyncConfig {
                    rank: r,
                    workers: n,
                    switch: n as NodeId,
                    elements,
                    algo,
                    launch_ns: launch,
                })
                .expect("config");
                Node::Worker(LoopWorker::new(w, r, n, elements, 11, ops))
            })
            .collect();
        nodes.push(Node::Switch(forwarder(n as NodeId, n as u32 + 1)));
        let until = every_node(n + 1, 10_000_000_000);
        let mut fabric = Sim::new(LinkConfig::gbps100(), n as NodeId);
        let (nodes, _) = run_nodes(&mut fabric, nodes, &until).expect("the sim fabric runs");
        nodes.into_iter().filter_map(Node::into_worker).collect()
    }

    #[test]
    fn every_result_is_the_exact_sum() {
        for algo in [Algo::Ring, Algo::Tree] {
            for (n, e) in [(2, 8), (3, 5), (4, 8), (7, 3), (8, 8), (8, 64)] {
                let ws = run(algo, n, e, 50, 1000);
                for w in &ws {
                    assert_eq!(w.finished(), 50, "{algo:?} n={n} e={e}");
                    assert_eq!(w.wrong + w.duplicates + w.errors, 0, "{algo:?} n={n} e={e}");
                    assert_eq!(w.inner.malformed, 0);
                }
            }
        }
    }

    #[test]
    fn latency_grows_with_the_hops_and_starts_after_the_launch() {
        // on an idle fabric one operation takes the launch plus one network hop per step
        for algo in [Algo::Ring, Algo::Tree] {
            let mut last = 0.0;
            for n in [2, 4, 8] {
                let ws = run(algo, n, 8, 20, 5000);
                let mean: f64 = ws
                    .iter()
                    .flat_map(|w| w.latencies.iter())
                    .map(|l| *l as f64)
                    .sum::<f64>()
                    / ws.iter().map(|w| w.latencies.len()).sum::<usize>() as f64;
                let min = ws
                    .iter()
                    .flat_map(|w| w.latencies.iter())
                    .min()
                    .copied()
                    .unwrap_or(0);
                assert!(min >= 5000, "{algo:?} n={n}: {min}");
                assert!(mean > last, "{algo:?} n={n}: {mean} <= {last}");
                // each hop crosses two 100G links (a minimum frame each way) at least
                assert!(
                    mean >= 5000.0 + algo.hops(n) as f64 * 2.0 * 5.0,
                    "{algo:?} n={n}: {mean}"
                );
                last = mean;
            }
        }
        assert_eq!(Algo::Ring.hops(8), 14);
        assert_eq!(Algo::Tree.hops(8), 6);
        assert_eq!(Algo::Tree.hops(2), 2);
        assert_eq!(Algo::Tree.hops(7), 4);
    }

    #[test]
    fn rejects_strangers_and_wrong_steps() {
        let mut w = GpuSyncWorker::new(GpuSyncConfig {
            rank: 1,
            workers: 4,
            switch: 4,
            elements: 4,
            algo: Algo::Ring,
            launch_ns: 0,
        })
        .expect("config");
        // rank 3 is not rank 1's ring predecessor (0 is)
        w.handle_packet(0, 4, &cpusync_frame(3, 1, 0, 0, &[1]));
        // step 6 does not exist with 4 ranks (0..5)
        w.handle_packet(0, 4, &cpusync_frame(0, 1, 0, 6, &[1]));
        // truncated
        w.handle_packet(0, 4, &[0u8; 10]);
        assert_eq!(w.malformed, 3);
        assert!(
            GpuSyncWorker::new(GpuSyncConfig {
                rank: 4,
                workers: 4,
                switch: 4,
                elements: 4,
                algo: Algo::Tree,
                launch_ns: 0,
            })
            .is_err()
        );
    }
}
