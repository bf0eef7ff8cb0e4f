//! Libra: hot parameters of sparse models aggregated in the switch, cold ones at parameter
//! servers.

use inabench_core::Workload;

/// The workloads this crate registers with the harness.
pub fn workloads() -> Vec<Box<dyn Workload>> {
    Vec::new()
}
