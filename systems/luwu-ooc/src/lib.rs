//! LuWu's in-network out-of-core optimizer (Sun et al., arXiv:2409.00918, Sec. 3.3): the model
//! states of every layer (fp32 master parameters, Adam's fp32 first and second moments, and the
//! bf16 copy of the parameters the workers compute with) live in files split across N
//! directories standing in for the optimizer node's SSDs. Each SSD has three prioritised queues
//! (read parameters > read model states > write model states); layer tasks rotate between task
//! queues so that parameter pushes, gradient arrivals, SSD I/O and Adam updates pipeline.
//!
//! Choices where the paper is silent (each explained where it is made):
//! - what is stored: fp32 master parameters + m + v (12 B/parameter) and a bf16 copy for the
//!   workers (2 B/parameter), read in fwd and again in bwd (activation checkpointing), so an
//!   iteration reads 16 B and writes 14 B per parameter ([`store`]);
//! - placement: each layer striped over all SSDs, shard `s` of layer `l` on SSD `(l+s) mod N`,
//!   in one slot file per SSD ([`store`]);
//! - the SSD's read and write directions are served concurrently (one thread each, each with its
//!   own throttle), read parameters before read states; writes have their own lane
//!   ([`pipeline`]);
//! - a fixed pool of 4 buffer sets bounds the tasks in flight (the prefetch depth) ([`sched`]);
//! - iterations are committed one at a time (A/B slots + an atomically replaced manifest), which
//!   makes a kill mid-step harmless; fsync of the data is optional ([`pipeline::Durability`]).
//!
//! Layout:
//! - [`sched`]: the sans-IO core (per-SSD priority queues, layer-task rotation), unit-tested
//!   deterministically;
//! - [`throttle`]: a sans-IO token bucket emulating an SSD's bandwidth per direction;
//! - [`store`]: the state files (format, placement across SSDs, crash-safe commit, resume);
//! - [`pipeline`]: the optimizer node's runtime (threads, real file I/O) around the core.

pub mod pipeline;
pub mod sched;
pub mod store;
pub mod throttle;

use std::path::PathBuf;

pub use pipeline::{Durability, PipelineConfig, PipelineReport, resume, run};
pub use rate::{UpdateRate, measure_update_rate};

mod rate;

/// What can go wrong in the out-of-core optimizer. Each message is one sentence.
#[derive(Debug, thiserror::Error)]
pub enum OocError {
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("the state directory {path} does not exist or is not a directory")]
    MissingDir { path: PathBuf },
    #[error("I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the state file {path} is truncated ({got} bytes, expected {expected})")]
    Truncated {
        path: PathBuf,
        got: u64,
        expected: u64,
    },
    #[error("the state file {path} is corrupt: {what}")]
    Corrupt { path: PathBuf, what: String },
    #[error("the state under {path} was created with a different configuration: {what}")]
    Mismatch { path: PathBuf, what: String },
    #[error("the run was cancelled")]
    Cancelled,
    #[error("an optimizer thread stopped unexpectedly: {0}")]
    Runtime(String),
    /// The pipeline fed its scheduler an event the schedule cannot take (a bug, not an input).
    #[error("the optimizer's schedule refused an event: {0}")]
    Schedule(#[from] crate::sched::SchedError),
}

impl OocError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> OocError {
        OocError::Io {
            path: path.into(),
            source,
        }
    }
}
