//! NetReduce (Liu et al., ASPLOS 2023).
//!
//! This crate holds the paper's Appendix A communication model ([`appendix_a`], and its
//! flow-level schedule [`flow_sim`]), the training iteration model ([`training`]) and Table 10's
//! bill of materials ([`cost`]); their workloads are in `inabench-workloads` (module
//! `netreduce`). The sans-IO host stack and accelerator are in `inabench-ina`.

pub mod appendix_a;
pub mod cost;
pub mod flow_sim;
pub mod training;
