//! inabench-report: polars analysis, claim checking, plotters figures, and HTML, PDF, Markdown
//! and JSON reports of a run.

pub mod analysis;
pub mod types;

pub use types::{AggRow, Analysis, ClaimResult, Comparison};
pub mod render;

pub use render::{Format, write_reports};
