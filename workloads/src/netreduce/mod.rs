//! NetReduce's experiments (Table 1, Table 6, the training tables and figures, Appendix A, cost).
//!
//! - [`table1`]: `netreduce.table1` (table1);
//! - [`table6`]: `netreduce.table6` (table6, reliability, switchml-shadow);
//! - [`training`]: `netreduce.training` (fig11, table7, table8, table9);
//! - [`fig12`]: `netreduce.training_quality` (fig12);
//! - [`fig7`]: `netreduce.appendix_a` (fig7);
//! - [`table10`]: `netreduce.cost` (table10).

use inabench_core::Workload;

pub mod fig12;
pub mod fig7;
pub mod rig;
pub mod table1;
pub mod table10;
pub mod table1_roce;
pub mod table6;
pub mod training;

/// NetReduce's workloads.
pub fn workloads() -> Vec<Box<dyn Workload>> {
    vec![
        Box::new(fig7::AppendixA),
        Box::new(table10::Cost),
        Box::new(table6::Table6),
        Box::new(table1::Table1),
        Box::new(training::Training),
        Box::new(fig12::Quality),
    ]
}
