//! Libra (Pan et al., "Libra: In-network Gradient Aggregation for Speeding up Distributed Sparse
//! Deep Training"): hot parameters of sparse models aggregated in the switch, cold ones at
//! parameter servers.
//!
//! - [`sparse`]: the seeded sparse workload generator (Zipf update frequencies) and a trace reader;
//! - [`hot`]: hot-parameter identification by sampling (Principle 1, the 1,000-at-a-time procedure,
//!   the precision metric);
//! - [`float`]: the table-lookup float summation of Sec. 3.5;
//! - [`layout`]: heat-based placement, Algorithm 1's packaging and the recirculations they cost on
//!   the Tofino pipeline model;
//! - [`wire`], [`proto`]: Libra's header, the switch program (Libra_p and Libra_s), the parameter
//!   server and the workers as sans-IO endpoints;
//! - [`negotiation`]: SwitchML's scaling-factor negotiation (Fig. 17) as an op_max all-reduce;
//! - [`workloads`]: the experiments.

pub mod aggregation;
pub mod float;
pub mod hot;
pub mod layout;
pub mod negotiation;
pub mod proto;
pub mod sparse;
pub mod wire;
pub mod workloads;

use inabench_core::Workload;

/// Errors of the Libra crate.
#[derive(Debug, thiserror::Error)]
pub enum LibraError {
    #[error("{0}")]
    Config(String),
    #[error("trace line {line}: {message}")]
    Trace { line: usize, message: String },
    #[error("wire: {0}")]
    Wire(&'static str),
}

/// The workloads this crate registers with the harness.
pub fn workloads() -> Vec<Box<dyn Workload>> {
    workloads::all()
}
