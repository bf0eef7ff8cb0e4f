//! P4SGD (Lin et al., TPDS 2023): model-parallel generalized linear models on FPGA workers with
//! a latency-centric in-switch aggregation protocol.
//!
//! - [`wire`]: the P4SGD header (Fig. 4) in our byte layout;
//! - [`protocol`]: the switch program (Alg. 2) on the Tofino model and the worker transport
//!   (Alg. 3), sans-IO;
//! - [`cpusync`]: CPUSync's recursive-doubling all-reduce and a forwarding switch;
//! - [`gpusync`]: GPUSync's NCCL all-reduce (ring or tree, LL protocol) as real messages;
//! - [`host`]: node timing around a state machine in virtual time (latencies, CPU costs);
//! - [`driver`]: closed loops of checked all-reduces, calibration, latency statistics;
//! - [`glm`]: GLM training (single, model-parallel, data-parallel), LIBSVM reader, stand-ins;
//! - [`fpga`]: the FPGA worker's timing model (engines, banks, HBM, Eq. 3's pipeline);
//! - [`emulate`]: P4SGD iterations with modelled FPGA compute and the protocol run in the
//!   simulator (real training through it, or seeded values);
//! - [`models`]: iteration times of P4SGD and the baselines (Eq. 1-3, cited inputs);
//! - [`fig8`], [`fig14`]: the `p4sgd.fig8` and `p4sgd.fig14` workloads;
//! - [`udp`]: the endpoints on the `udp` fabric (a loopback socket and a thread per node);
//! - [`perf`]: `p4sgd.fig9` .. `p4sgd.fig13`;
//! - [`converge`]: `p4sgd.fig15` and `p4sgd.table4`.

use inabench_core::Workload;

pub mod converge;
pub mod cpusync;
pub mod driver;
pub mod emulate;
pub mod fig14;
pub mod fig8;
pub mod fpga;
pub mod glm;
pub mod gpusync;
pub mod host;
pub mod models;
pub mod perf;
pub mod protocol;
pub mod udp;
pub mod wire;

#[cfg(test)]
mod protocol_tests;
#[cfg(test)]
mod workload_tests;

/// The workloads this crate registers with the harness.
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
