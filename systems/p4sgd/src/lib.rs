//! P4SGD (Lin et al., TPDS 2023): model-parallel generalized linear models on FPGA workers with
//! a latency-centric in-switch aggregation protocol.
//!
//! - [`wire`]: the P4SGD header (Fig. 4) in our byte layout;
//! - [`protocol`]: the switch program (Alg. 2) on the Tofino model and the worker transport
//!   (Alg. 3), sans-IO;
//! - [`cpusync`]: CPUSync's recursive-doubling all-reduce and a forwarding switch;
//! - [`gpusync`]: GPUSync's NCCL all-reduce (ring or tree, LL protocol) as real messages;
//! - [`host`]: node timing around a state machine in virtual time (latencies, CPU costs);
//! - [`driver`]: closed loops of checked all-reduces, latency statistics;
//! - [`allreduce`]: each system's checked all-reduces on `sim` (with the model inputs) or `mem`,
//!   the host-stack costs measured here, NCCL's inputs (what p4sgd-fig8 runs); every run of the
//!   crate reaches its fabric through [`allreduce::run_nodes`] (`inabench_fabric::Fabric`);
//! - [`udp`]: the endpoints on the `udp` fabric (`inabench_fabric::UdpThreads`: a loopback
//!   socket and a thread per node);
//! - [`mpi`]: p4sgd-fig8's emulated CPUSync peer, OpenMPI's `MPI_Allreduce` measured on this
//!   host (a C program compiled with `mpicc` at run time, `mpirun` per run);
//! - [`glm`]: GLM training (single, model-parallel, data-parallel), LIBSVM reader, stand-ins;
//! - [`curves`]: training loss curves per system, P4SGD's through the protocol (p4sgd-fig14's);
//! - [`fpga`]: the FPGA worker's timing model (engines, banks, HBM, Eq. 3's pipeline);
//! - [`emulate`]: P4SGD iterations with modelled FPGA compute and the protocol run in the
//!   simulator (real training through it, or seeded values).
//!
//! The experiments' workloads are in `inabench-workloads` (`p4sgd`).

pub mod allreduce;
pub mod cpusync;
pub mod curves;
pub mod driver;
pub mod emulate;
pub mod fpga;
pub mod fuzz;
pub mod glm;
pub mod gpusync;
pub mod host;
pub mod mpi;
pub mod protocol;
pub mod udp;
pub mod wire;

#[cfg(test)]
mod protocol_tests;
