//! inabench-core: what every part of the suite shares and nothing heavy.
//!
//! - [`spec`]: experiment specs (YAML), validated with file/line/field errors;
//! - [`hostprofile`]: the host profile (declared host costs with provenance), same errors;
//! - [`testbed`]: the testbed file (hosts, NICs, switch, launcher), read strictly, file/line errors;
//! - [`catalog`]: all specs of a tree, lookup with nearest-id suggestions;
//! - [`claims`]: the claim expression language, parsed and evaluated over aggregated results;
//! - [`plan`]: a spec and a profile expanded into points;
//! - [`overrides`]: `--set`, `--repetitions` and `--warmup` applied to a spec and checked like one;
//! - [`event`]: the one event stream that feeds the views and the store;
//! - [`store`]: run folders (manifest, append-only rows, resume);
//! - [`workload`]: the trait systems implement so the harness can run them without knowing them;
//! - [`units`]: a measured quantity converted once from the workload's unit to the spec's;
//! - [`rng`]: a small seeded generator (SplitMix64) so every run is reproducible from its seed.

pub mod catalog;
pub mod claims;
pub mod event;
pub mod overrides;
pub mod plan;
pub use inabench_rng as rng;
pub mod hostprofile;
pub mod spec;
pub mod store;
pub mod testbed;
pub mod units;
pub mod value;
pub mod workload;

pub use event::{Event, LogLevel, PointFailure};
pub use plan::{Plan, Point};
pub use spec::{Fidelity, Spec};
pub use store::{Manifest, Row, RunStatus};
pub use value::{Params, Scalar};
pub use workload::{PointCtx, Workload, WorkloadError};
