//! The workloads compiled into this binary. The harness knows no system by name: the workloads
//! crate lists every experiment's workload and the probe (the workload that measures the harness).

use inabench_core::Workload;

pub struct Registry {
    workloads: Vec<Box<dyn Workload>>,
}

impl Registry {
    pub fn builtin() -> Registry {
        Registry {
            workloads: inabench_workloads::all(),
        }
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
