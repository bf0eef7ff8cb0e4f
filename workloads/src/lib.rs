//! inabench-workloads: every experiment of the suite as a [`Workload`], one module per paper.
//!
//! The harness runs points through the [`Workload`] trait and knows no paper or system by name;
//! this crate is its registry ([`all`]). Each paper's module holds the workloads its specs name in
//! `workload:` (`experiments/<paper>/<id>.yaml` beside `src/<paper>/<file>.rs`); the protocol
//! state machines and models they drive live in the systems crates, which do not depend on the
//! harness core.
//!
//! Each paper is a cargo feature (default: all), so one paper's workloads build alone.

use inabench_core::Workload;

#[cfg(feature = "aleph")]
pub mod aleph;
pub mod bench;
pub mod fabric;
pub mod hostcost;
#[cfg(feature = "libra")]
pub mod libra;
#[cfg(feature = "luwu")]
pub mod luwu;
#[cfg(feature = "netreduce")]
pub mod netreduce;
#[cfg(feature = "p4sgd")]
pub mod p4sgd;
pub mod probe;

/// The node side of the raw fabric's runs (the binary's hidden `__raw-node` command).
pub use inabench_ina_run::raw_node;
/// The node side of the udp fabric's process-per-node runs: the node processes an emulated
/// all-reduce spawns run `udp_node::child_main` (the binary's hidden `__fabric-node` command).
pub use inabench_ina_run::udp_node;

/// Every workload compiled into this build.
pub fn all() -> Vec<Box<dyn Workload>> {
    let mut w: Vec<Box<dyn Workload>> = Vec::new();
    #[cfg(feature = "netreduce")]
    w.extend(netreduce::workloads());
    #[cfg(feature = "p4sgd")]
    w.extend(p4sgd::workloads());
    #[cfg(feature = "libra")]
    w.extend(libra::workloads());
    #[cfg(feature = "aleph")]
    w.extend(aleph::workloads());
    #[cfg(feature = "luwu")]
    w.extend(luwu::workloads());
    w.extend(bench::workloads());
    // the probe measures the harness itself (doctor, launcher tests, the overhead benchmark)
    w.push(Box::new(probe::Probe));
    w
}
