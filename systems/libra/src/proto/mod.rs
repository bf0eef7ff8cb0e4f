//! Libra's data path as sans-IO endpoints: workers, the switch program (Libra_p: hot parameters
//! aggregated in registers indexed by rank; Libra_s: the switch CPU's copies of unacknowledged
//! aggregation packets and its records of aggregated packets) and the parameter server (cold
//! parameters; with no hot set it is the PS-lite baseline). One iteration of synchronous
//! aggregation:
//!
//! 1. each worker pushes its hot pairs to the switch (packets by Algorithm 1, 24 pairs of 8 B, the
//!    192-byte limit) and its cold pairs to the server (`cold_cap` pairs a packet), at most
//!    `window` unacknowledged packets; every push is acknowledged by its receiver (Sec. 3.6); a
//!    push unacknowledged after the timeout is resent with the same sequence number and the
//!    retransmit flag;
//! 2. the switch adds a push into its registers unless the push is a retransmission its records
//!    show as aggregated (the repeat-write error: the ACK was lost, not the push). As the paper
//!    describes it, only flagged packets are checked; `dedup_all` checks every packet, which a
//!    fabric that duplicates frames needs (see the tests);
//! 3. a worker whose pushes are all acknowledged sends `Done` to the switch and the server;
//! 4. with every worker's `Done`, the switch sends each worker the aggregated hot values of the
//!    slots it pushed (a per-worker bitmap of slots, 3.75 KB a worker for 30K parameters), and the
//!    server sends each worker the sums of the cold keys it pushed (a PS-lite pull); workers acknowledge each result packet, and the switch CPU (the server)
//!    resends unacknowledged ones.
//!
//! Values are int32 and sums wrap exactly, so every aggregate can be compared with an exact
//! reference. With `Config::float` the hot values are f32 bit patterns and the switch adds them
//! with the table-lookup float sum ([`crate::float`]) in its data path, counting the passes the
//! lookups need on the Tofino model ([`crate::layout::float_passes`]); the reference then replays
//! the switch's aggregation order with the same lookup sum ([`float_reference`]), bit for bit.
//! All traffic crosses the switch (a star): the switch forwards what is not addressed to it.
mod reliable;
mod server;
mod setup;
mod switch;
#[cfg(test)]
mod tests;
mod worker;

pub use server::Server;
pub use setup::{Inputs, Node, build, check, float_reference};
pub use switch::{Controller, Switch, SwitchState, pass_ns};
pub use worker::Worker;

use inabench_fabric::{Nanos, NodeId};

/// What every node of one run shares.
#[derive(Debug, Clone)]
pub struct Config {
    pub workers: usize,
    /// Hot parameters on the switch (Libra); false: PS-lite (the switch only forwards).
    pub libra: bool,
    pub window: usize,
    pub rto_ns: u64,
    pub hot_cap: usize,
    pub cold_cap: usize,
    /// Check every push against the switch's records, not only flagged retransmissions.
    pub dedup_all: bool,
    /// Hot values are f32 bit patterns and the switch adds them with the table-lookup float
    /// sum ([`crate::float`]) in its data path; false: int32 with wrapping sums. The cold path
    /// (the server, a CPU) keeps exact integer sums either way.
    pub float: bool,
}

impl Config {
    pub fn switch(&self) -> NodeId {
        self.workers as NodeId
    }
    pub fn server(&self) -> NodeId {
        self.workers as NodeId + 1
    }
}

/// Per-node statistics.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stats {
    pub packets_tx: u64,
    pub packets_rx: u64,
    pub bytes_tx: u64,
    pub retransmissions: u64,
    pub malformed: u64,
    pub duplicates_ignored: u64,
    pub start_ns: Nanos,
    pub end_ns: Nanos,
}
