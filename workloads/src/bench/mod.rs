//! The cross-paper benchmark family (issue #39): every all-reduce system of
//! [`inabench_ina::SYSTEMS`] on the same workloads and the same network, which no paper ran. No
//! paper, so no `paper:` block: the specs (`experiments/bench/`) compare the systems with each
//! other, and the report ranks them per point (the leaderboard).
//!
//! - [`allreduce`]: `bench.allreduce` (bench-allreduce: dense all-reduce over sizes and worker
//!   counts; bench-loss: the same under loss, duplication and reordering; bench-small: the
//!   latency-bound vectors of P4SGD's regime).

use inabench_core::Workload;

pub mod allreduce;

/// The benchmark family's workloads.
pub fn workloads() -> Vec<Box<dyn Workload>> {
    vec![Box::new(allreduce::AllReduce)]
}
