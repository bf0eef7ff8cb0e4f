//! NetReduce (Liu et al., ASPLOS 2023).
//!
//! This crate holds the paper's Appendix A communication model ([`appendix_a`]) and its
//! workload; the sans-IO host stack and accelerator come with the Table 6 issue.

pub mod appendix_a;
pub mod cost;
pub mod flow_sim;
pub mod training;

use inabench_core::Workload;

/// The workloads this crate registers with the harness.
pub fn workloads() -> Vec<Box<dyn Workload>> {
    vec![Box::new(appendix_a::AppendixA), Box::new(cost::Cost)]
}
