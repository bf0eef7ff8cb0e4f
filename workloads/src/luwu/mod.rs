//! LuWu's experiments.

use inabench_core::Workload;

pub fn workloads() -> Vec<Box<dyn Workload>> {
    let mut w = inabench_luwu::workloads();
    w.extend(inabench_luwu_ooc::workloads());
    w.extend(inabench_luwu_model::workloads());
    w
}
