//! The systems of NetReduce's Table 6 as sans-IO state machines, with the switch target models
//! they run on:
//!
//! - [`roce`]: a software RoCEv2 transport (RC with PSN sequencing, segmentation, ACK coalescing,
//!   NAK on a gap, go-back-N; SwitchML-RDMA's UC WRITEs are built in [`switchml_rdma`]);
//! - [`netreduce`]: the host flow-control module and the FPGA accelerator ([`fpga`] model);
//! - [`switchml`], [`atp`], [`switchml_rdma`]: the baselines' hosts and switch programs, on
//! - [`tofino`]: the pipeline model (stages, 192 bytes per pass, recirculation, chained pipelines);
//! - [`common`]: the interface the experiments drive (config, workers, switch, stats).

pub mod atp;
pub mod bfp;
pub mod collective;
pub mod common;
pub mod drive;
pub mod fpga;
pub mod fuzz;
pub mod hoststack;
pub mod netreduce;
pub mod raw_node;
pub mod ring;
pub mod roce;
pub mod stream;
pub mod switchml;
pub mod switchml_rdma;
pub mod tofino;
pub mod training;
pub mod udp_node;
