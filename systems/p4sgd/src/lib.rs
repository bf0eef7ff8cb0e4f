//! P4SGD (Lin et al., TPDS 2023): model-parallel generalized linear models on FPGA workers with
//! a latency-centric in-switch aggregation protocol.

use inabench_core::Workload;

/// The workloads this crate registers with the harness.
pub fn workloads() -> Vec<Box<dyn Workload>> {
    Vec::new()
}
