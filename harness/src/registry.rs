//! The workloads compiled into this binary. The harness knows no system by name: each systems
//! crate exports its workloads and they are collected here.

use inabench_core::Workload;

pub struct Registry {
    workloads: Vec<Box<dyn Workload>>,
}

impl Registry {
    pub fn builtin() -> Registry {
        let mut workloads: Vec<Box<dyn Workload>> = Vec::new();
        workloads.extend(inabench_netreduce::workloads());
        workloads.extend(inabench_ina::workloads());
        workloads.extend(inabench_p4sgd::workloads());
        workloads.extend(inabench_train::workloads());
        workloads.extend(inabench_libra::workloads());
        workloads.extend(inabench_aleph::workloads());
        workloads.extend(inabench_luwu::workloads());
        workloads.extend(inabench_luwu_ooc::workloads());
        workloads.extend(inabench_luwu_model::workloads());
        workloads.push(Box::new(crate::probe::Probe));
        Registry { workloads }
    }

    /// A registry of the given workloads (tests and benchmarks).
    pub fn new(workloads: Vec<Box<dyn Workload>>) -> Registry {
        Registry { workloads }
    }

    pub fn get(&self, id: &str) -> Option<&dyn Workload> {
        self.workloads
            .iter()
            .find(|w| w.id() == id)
            .map(|b| b.as_ref())
    }

    pub fn ids(&self) -> Vec<&'static str> {
        self.workloads.iter().map(|w| w.id()).collect()
    }
}
