//! ALEPH's experiments.

use inabench_core::Workload;

pub fn workloads() -> Vec<Box<dyn Workload>> {
    inabench_aleph::workloads()
}
