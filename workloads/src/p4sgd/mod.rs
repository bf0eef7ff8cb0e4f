//! P4SGD's experiments (`experiments/p4sgd/`), on the protocol, models and training code of
//! `inabench-p4sgd`:
//!
//! - [`fig8`]: `p4sgd.fig8` (all-reduce latency of P4SGD, CPUSync, SwitchML, GPUSync);
//! - [`perf`]: `p4sgd.fig9` .. `p4sgd.fig13` (epoch time, speedups, the four systems);
//! - [`fig14`]: `p4sgd.fig14` (training loss per epoch);
//! - [`converge`]: `p4sgd.fig15` (time to converge) and `p4sgd.table4` (energy);
//! - [`models`]: the modelled class's iteration times (Eq. 1-3) that `perf` and `converge` use.

use inabench_core::Workload;

pub mod converge;
pub mod fig14;
pub mod fig8;
pub mod models;
pub mod perf;

/// P4SGD's workloads.
pub fn workloads() -> Vec<Box<dyn Workload>> {
    vec![
        Box::new(fig8::Fig8),
        Box::new(fig14::Fig14),
        Box::new(perf::Fig9),
        Box::new(perf::Fig10),
        Box::new(perf::Fig11),
        Box::new(perf::Fig12),
        Box::new(perf::Fig13),
        Box::new(converge::Fig15),
        Box::new(converge::Table4),
    ]
}
