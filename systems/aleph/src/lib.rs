//! ALEPH (Yang et al., IEEE/ACM ToN 2024): the control plane's worker clustering and the paper's
//! large-scale simulation.
//!
//! - [`mwcha`]: M-WCHA (Algorithm 1 with Eq. 2-6), a validator of clusterings against the
//!   constraints of Eq. 1, and an exact minimum-aggregator solver for small components (so the
//!   suite reports M-WCHA's approximation ratio, which the paper only bounds).
//! - [`topo`]: the fat-tree (16 core, 32 aggregation, 32 edge switches, 320 servers) and
//!   leaf-spine (30 spine, 30 leaf, 300 servers) of Sec. 6.4, non-blocking, with ECMP routing.
//! - [`flowsim`]: a sans-IO flow-level simulator with max-min fair sharing (progressive filling).
//! - [`scenario`]: one training iteration of BytePS, Horovod and ALEPH on those topologies.
//! - [`motivating`]: the motivating example of Sec. 3.1 (Table 1).
//! - [`convergence`]: aleph-fig12's accuracy-vs-time model.
//! - [`testbed`]: the testbed's measuring code on this machine (namespaces, tbf, ALEPH's XDP data
//!   plane from drivers/xdp, and TCP baselines: BytePS-style PS, ALEPH with TCP, Horovod ring).
//!
//! The experiments' workloads (every ALEPH spec's `workload:`) are in `inabench-workloads`
//! (`workloads/src/aleph/`); this crate does not depend on the harness core.

pub mod convergence;
pub mod flowsim;
pub mod fuzz;
pub mod fuzz_service;
pub mod motivating;
pub mod mwcha;
pub mod scenario;
pub mod service;
pub mod testbed;
pub mod topo;

/// Errors of this crate's library code.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AlephError {
    #[error("invalid input: {0}")]
    Invalid(String),
    #[error("the exact solver handles components of at most {max} workers (got {got})")]
    TooLarge { max: usize, got: usize },
    #[error("the simulation did not converge: {0}")]
    Stuck(String),
}
