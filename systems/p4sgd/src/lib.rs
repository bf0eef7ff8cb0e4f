//! P4SGD (Lin et al., TPDS 2023): model-parallel generalized linear models on FPGA workers with
//! a latency-centric in-switch aggregation protocol.
//!
//! - [`wire`]: the P4SGD header (Fig. 4) in our byte layout;
//! - [`protocol`]: the switch program (Alg. 2) on the Tofino model and the worker transport
//!   (Alg. 3), sans-IO;
//! - [`cpusync`]: CPUSync's recursive-doubling all-reduce and a forwarding switch;
//! - [`host`]: node timing around a state machine in virtual time (latencies, CPU costs);
//! - [`driver`]: closed loops of checked all-reduces, calibration, latency statistics;
//! - [`glm`]: GLM training (single, model-parallel, data-parallel), LIBSVM reader, stand-ins;
//! - [`fig8`], [`fig14`]: the `p4sgd.fig8` and `p4sgd.fig14` workloads.

use inabench_core::Workload;

pub mod cpusync;
pub mod driver;
pub mod fig14;
pub mod fig8;
pub mod glm;
pub mod host;
pub mod protocol;
pub mod wire;

#[cfg(test)]
mod protocol_tests;

/// The workloads this crate registers with the harness.
pub fn workloads() -> Vec<Box<dyn Workload>> {
    vec![Box::new(fig8::Fig8), Box::new(fig14::Fig14)]
}
