//! Libra's experiments (Pan et al., "Libra: In-network Gradient Aggregation for Speeding up
//! Distributed Sparse Deep Training"), over the systems crate `inabench-libra` (the sparse
//! generator, hot-parameter identification, the table-lookup float sum, the layout model, the
//! switch program and its `sim` driver, SwitchML's negotiation):
//!
//! - [`fig5`]: `libra.fig5` (libra-fig5);
//! - [`fig15`]: `libra.fig15` (libra-fig15);
//! - [`table2`]: `libra.table2` (libra-table2);
//! - [`fig16`]: `libra.fig16` (libra-fig16);
//! - [`resources`]: `libra.resources` (libra-resources);
//! - [`aggregation`]: `libra.aggregation` (libra-fig12, -fig13, -fig14, -fig18);
//! - [`fig17`]: `libra.fig17` (libra-fig17);
//! - [`common`]: the spec parameters, task and hot set they share.

use inabench_core::Workload;

pub mod aggregation;
pub mod common;
pub mod fig15;
pub mod fig16;
pub mod fig17;
pub mod fig5;
pub mod resources;
pub mod table2;

/// Libra's workloads, for the registry.
pub fn workloads() -> Vec<Box<dyn Workload>> {
    vec![
        Box::new(fig5::Fig5),
        Box::new(fig15::Fig15),
        Box::new(table2::Table2),
        Box::new(fig16::Fig16),
        Box::new(resources::Resources),
        Box::new(aggregation::Aggregation),
        Box::new(fig17::Fig17),
    ]
}
