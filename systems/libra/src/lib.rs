//! Libra (Pan et al., "Libra: In-network Gradient Aggregation for Speeding up Distributed Sparse
//! Deep Training"): hot parameters of sparse models aggregated in the switch, cold ones at
//! parameter servers.
//!
//! - [`sparse`]: the seeded sparse workload generator (Zipf update frequencies) and a trace reader;
//! - [`hot`]: hot-parameter identification by sampling (Principle 1, the 1,000-at-a-time procedure,
//!   the precision metric);
//! - [`float`]: the table-lookup float summation of Sec. 3.5;
//! - [`layout`]: heat-based placement, Algorithm 1's packaging and the recirculations they cost on
//!   the Tofino pipeline model;
//! - [`wire`], [`proto`]: Libra's header, the switch program (Libra_p and Libra_s), the parameter
//!   server and the workers as sans-IO endpoints;
//! - [`aggregation`]: one iteration of aggregation on the `sim` fabric, the hosts priced by a
//!   declared coefficient table (ns a frame, ns a pair) times the operations they do;
//! - [`negotiation`]: SwitchML's scaling-factor negotiation (Fig. 17) as an op_max all-reduce;
//! - [`run_on`]: the crate's one way onto a fabric (any [`inabench_fabric::Fabric`]: `Sim`,
//!   `Mem`, `UdpThreads`); no module here constructs a fabric itself.
//!
//! The experiments that drive these are in `inabench-workloads` (module `libra`).

pub mod aggregation;
pub mod float;
pub mod fuzz;
pub mod hot;
pub mod layout;
pub mod negotiation;
pub mod proto;
pub mod sparse;
pub mod wire;

/// Errors of the Libra crate.
#[derive(Debug, thiserror::Error)]
pub enum LibraError {
    #[error("{0}")]
    Config(String),
    #[error("trace line {line}: {message}")]
    Trace { line: usize, message: String },
    #[error("trace {path}: {message}")]
    TraceFile { path: String, message: String },
    #[error("wire: {0}")]
    Wire(&'static str),
    #[error(transparent)]
    Fabric(#[from] inabench_fabric::FabricError),
    /// An all-reduce run through `inabench_ina` (the negotiation's op_max on SwitchML).
    #[error(transparent)]
    Run(#[from] inabench_ina::RunError),
}

impl From<inabench_ina::common::SetupError> for LibraError {
    fn from(e: inabench_ina::common::SetupError) -> LibraError {
        LibraError::Run(e.into())
    }
}

/// Run `nodes` (node `i` has id `i`; the workers are `0..workers`) on `fabric` until every
/// worker is done or `limit_ns` of the fabric's time has passed; the nodes come back with the
/// fabric's report, whose `fabric` is the label a row carries.
pub fn run_on<N, F>(
    fabric: &mut F,
    nodes: Vec<N>,
    workers: usize,
    limit_ns: inabench_fabric::Nanos,
) -> Result<(Vec<N>, inabench_fabric::FabricReport), LibraError>
where
    N: inabench_fabric::Endpoint,
    F: inabench_fabric::Fabric<N> + ?Sized,
{
    let until = inabench_fabric::Until::workers(workers, nodes.len(), limit_ns);
    Ok(fabric.run(nodes, &until)?)
}
