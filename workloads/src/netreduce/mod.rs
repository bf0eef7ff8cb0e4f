//! NetReduce's experiments (Table 1, Table 6, the training tables and figures, Appendix A, cost).

use inabench_core::Workload;

pub fn workloads() -> Vec<Box<dyn Workload>> {
    let mut w = inabench_netreduce::workloads();
    w.extend(inabench_ina::workloads());
    w.extend(inabench_train::workloads());
    w
}
