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
//! - [`draws`]: the share of M-WCHA's draws in which each testbed claim holds.
//! - [`testbed`]: the testbed experiments on this machine (namespaces, tbf, ALEPH's XDP data plane
//!   from drivers/xdp, and TCP baselines: BytePS-style PS, ALEPH with TCP, Horovod ring).
//! - [`workloads`](crate::workloads): the workloads of aleph-table1, -fig13, -fig14, -fig15-16, and
//!   (testbed) aleph-fig5, -fig6, -fig7, -fig9, -fig11 and -table2.

pub mod convergence;
pub mod draws;
pub mod flowsim;
pub mod motivating;
pub mod mwcha;
pub mod scenario;
pub mod testbed;
pub mod topo;
mod workload;

use inabench_core::Workload;

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

/// The workloads this crate registers with the harness.
pub fn workloads() -> Vec<Box<dyn Workload>> {
    vec![
        Box::new(workload::MotivatingExample),
        Box::new(workload::SimBandwidth),
        Box::new(workload::SimOverhead),
        Box::new(workload::SimHops),
        Box::new(testbed::workloads::TestbedTraining),
        Box::new(testbed::workloads::AggregationCpu),
        Box::new(testbed::workloads::PacketLatency),
        Box::new(testbed::multicast::MulticastCpu),
        Box::new(convergence::AccuracyVsTime),
        Box::new(draws::MwchaDraws),
    ]
}
