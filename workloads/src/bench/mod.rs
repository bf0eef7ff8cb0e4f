//! The cross-paper benchmark family (issue #39): every all-reduce system of
//! [`inabench_ina::SYSTEMS`] on the same workloads and the same network, which no paper ran. No
//! paper, so no `paper:` block: the specs (`experiments/bench/`) compare the systems with each
//! other, and the report ranks them per point (the leaderboard).
//!
//! - [`allreduce`]: `bench.allreduce` (bench-allreduce: dense all-reduce over sizes and worker
//!   counts; bench-loss: the same under loss, duplication and reordering; bench-small: the
//!   latency-bound vectors of P4SGD's regime).
//! - `sparse` (with the Libra crate): `bench.sparse` (bench-sparse: sparse gradients with their
//!   density, skew and Libra's hot-key table swept; Libra and PS-lite beside the dense systems'
//!   all-reduce of the whole model).
//! - `aleph` (with the ALEPH crate): bench-allreduce's ALEPH cell, its service on a PS behind
//!   one link of the star, members sending from user space, XDP costs from the host profile.
//! - [`twojobs`]: `bench.twojobs` (bench-twojobs: two jobs sharing one switch, ATP's multi-tenant
//!   regime, over the pool size and the second job's size).
//!
//! A cell a system cannot run records `refused` = 1 and its reason as the row
//! `refused: <why>` = 1 ([`allreduce::REFUSAL_PREFIX`]), which the leaderboard prints.

use inabench_core::Workload;

#[cfg(feature = "aleph")]
pub mod aleph;
pub mod allreduce;
pub mod gloo;
#[cfg(feature = "libra")]
pub mod sparse;
pub mod twojobs;

/// The benchmark family's workloads.
pub fn workloads() -> Vec<Box<dyn Workload>> {
    vec![
        Box::new(allreduce::AllReduce),
        Box::new(twojobs::TwoJobs),
        #[cfg(feature = "libra")]
        Box::new(sparse::Sparse),
    ]
}
