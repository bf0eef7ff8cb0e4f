//! What can go wrong when an all-reduce of this crate's systems runs (`inabench_ina_run`'s
//! `drive`, `collective`, `training`, `udp_node` and `raw_node`): one typed error, so a caller
//! can tell a system that could not be built from a fabric that could not start, a run that did
//! not finish or a wrong sum. Each variant's text is one sentence without the caller's context (the workload
//! adds which point it was).

use crate::common::SetupError;
use crate::hoststack::StackError;
use inabench_fabric::FabricError;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The system cannot be built for this configuration.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// The host stack a spec names cannot be built.
    #[error(transparent)]
    Stack(#[from] StackError),
    /// The fabric could not start or a node panicked.
    #[error(transparent)]
    Fabric(#[from] FabricError),
    /// A capture file could not be written.
    #[error("cannot write {}: {cause}", path.display())]
    Write {
        path: PathBuf,
        cause: std::io::Error,
    },
    /// The fabric's time limit ended the all-reduce before every worker was done.
    #[error("{system}'s all-reduce did not finish")]
    Unfinished { system: &'static str },
    /// A worker's result differs from the exact sum.
    #[error("{system} produced a wrong result")]
    WrongResult { system: &'static str },
    /// A worker reported done without a result.
    #[error("a worker of {system} finished without a result")]
    NoResult { system: &'static str },
    /// The inputs of an all-reduce are not one vector of one length per worker (two or more).
    #[error("an all-reduce needs two or more workers with vectors of one length")]
    BadInputs,
    /// A system that cannot aggregate float32 was asked to.
    #[error("{0} does not sum float32")]
    NoFloatSum(&'static str),
    /// A fit from two sizes found no growth of the time with the size.
    #[error("{system}: no growth with size ({t1_s} s, {t2_s} s)")]
    NoGrowth {
        system: &'static str,
        t1_s: f64,
        t2_s: f64,
    },
    /// The workers of one all-reduce hold different aggregates.
    #[error("the workers' aggregates differ")]
    AggregatesDiffer,
    /// An element of the aggregate lies outside the aggregation's error bound of the exact sum.
    #[error("element {index}: {got}, the gradients sum to {want}")]
    WrongElement { index: usize, got: f32, want: f64 },
    /// An error in one step and bucket of a training exchange.
    #[error("step {step}, bucket {bucket}: {cause}")]
    InStep {
        step: usize,
        bucket: usize,
        cause: Box<RunError>,
    },
    /// The wall and virtual times of the dilation transfer give no ratio.
    #[error("no dilation from {wall_s} s over {sim_s} s")]
    NoDilation { wall_s: f64, sim_s: f64 },
    /// The modelled timeline asked for other buckets than those exchanged.
    #[error("the timeline's buckets are not the exchanged ones")]
    Timeline,
    /// A node job names a system the list does not have.
    #[error("no system `{0}`")]
    UnknownSystem(String),
    /// A node process's report line is not a node outcome.
    #[error("node {node} reported `{line}`: {cause}")]
    NodeReport {
        node: usize,
        line: String,
        cause: serde_json::Error,
    },
}
