//! inabench: the harness. Loads specs, plans runs, runs points through registered workloads
//! (in process or in agent processes started by a launcher), streams one event stream to the
//! live dashboard or the headless view and to the results store, and builds the reports.

pub mod breakeven;
pub mod dashboard;
pub mod doctor;
pub mod executor;
pub mod headless;
pub mod hostprofile;
pub mod launcher;
pub mod p4switch;
pub mod paths;
pub mod registry;
pub mod runner;
pub mod scoreboard;
pub mod testbed;

/// Specs embedded at build time and the compiler version.
pub mod embedded {
    include!(concat!(env!("OUT_DIR"), "/embedded_specs.rs"));
}
