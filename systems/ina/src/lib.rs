//! The systems of NetReduce's Table 6 as sans-IO state machines, with the switch target models
//! they run on:
//!
//! - [`roce`]: a software RoCEv2 transport (RC with PSN sequencing, segmentation, ACK coalescing,
//!   NAK on a gap, go-back-N; SwitchML-RDMA's UC WRITEs are built in [`switchml_rdma`]);
//! - [`netreduce`]: the host flow-control module and the FPGA accelerator ([`fpga`] model);
//! - [`switchml`], [`atp`], [`switchml_rdma`]: the baselines' hosts and switch programs, on
//! - [`tofino`]: the pipeline model (stages, 192 bytes per pass, recirculation, chained pipelines);
//! - [`target`]: what a switch target gives its program, the one trait the Tofino model and the
//!   FPGA board implement (ports, line rate, passes a packet takes);
//! - [`ring`], [`stream`], [`hierarchical`]: the software baselines (ring all-reduce and an RC
//!   stream over [`roce`] through a forwarding switch; the two-level hierarchical all-reduce, a
//!   ring within each group and one across the groups);
//! - [`common`]: the interface the experiments drive (config, workers, switch, stats);
//! - [`SYSTEMS`]: the one list of systems. A system's facts (its host stack in the paper, its
//!   DPDK client, whether its transport needs order, how its switch shards, its fuzz findings,
//!   its layout metrics) are methods of [`common::System`]; nothing outside this list matches on
//!   a system's name (`workloads/tests/seam.rs` checks it).

pub mod atp;
pub mod bfp;
pub mod common;
pub mod error;
pub mod fpga;
pub mod fuzz;
pub mod hierarchical;
pub mod hoststack;
pub mod netreduce;
pub mod ring;
pub mod roce;
pub mod stream;
pub mod switchml;
pub mod switchml_rdma;
pub mod target;
#[cfg(test)]
mod testing;
pub mod tofino;

use common::System;
pub use error::RunError;

/// Every system of this crate, by the name the specs use. The fuzz body picks a system by an
/// input's first byte in this order among those [`System::fuzzed`], so new systems go at the
/// end.
pub const SYSTEMS: &[&dyn System] = &[
    &netreduce::NetReduce,
    &switchml::SwitchMl,
    &switchml_rdma::SwitchMlRdma,
    &atp::Atp,
    &ring::RingAllReduce,
    &stream::RcStream,
    &hierarchical::HierarchicalAllReduce,
];

/// A system by its spec name.
pub fn system(name: &str) -> Option<&'static dyn System> {
    SYSTEMS.iter().copied().find(|s| s.name() == name)
}

/// The names of the systems that aggregate in the network ([`System::in_network`]), in list
/// order: what NetReduce's Table 6 compares.
pub fn in_network_names() -> &'static [&'static str] {
    static NAMES: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| {
        SYSTEMS
            .iter()
            .filter(|s| s.in_network())
            .map(|s| s.name())
            .collect()
    })
}
