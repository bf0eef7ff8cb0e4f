//! inabench-report: the aggregation of a run, claim checking, plotters figures, and HTML, PDF,
//! Markdown, JSON and CSV reports; `measurements.parquet` written with the parquet crate.

pub mod analysis;
pub mod types;

pub use types::{AggRow, Analysis, ClaimResult, Comparison};
pub mod render;

pub use render::{Format, write_reports};
