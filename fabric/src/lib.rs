//! The sans-IO endpoint interface every host stack and switch program implements, and the
//! fabrics that move their packets.
//!
//! An [`Endpoint`] owns no socket, thread or clock (quinn-proto style): the fabric hands it
//! packets and the current time, polls it for packets to send and asks when it next wants to be
//! woken. The same endpoint code therefore runs in memory, over UDP, in network namespaces, on
//! hardware and in virtual time. [`Fabric`] is the one way to run a set of endpoints on any of
//! them, with one report type; [`wrap`] holds wrappers that compose around any endpoint.

pub mod addresses;
pub mod batch;
pub mod driver;
pub mod endpoint;
pub mod fault;
pub mod forward;
pub mod fuzz;
pub mod mem;
pub mod netns;
pub mod node;
pub mod procs;
pub mod raw;
pub mod sim;
#[cfg(feature = "testing")]
pub mod testing;
pub mod udp;
pub mod wrap;
pub mod xsk;

pub use driver::{
    BuildError, Deployed, Deployment, Fabric, FabricChoice, FabricError, FabricReport, Mem,
    NodeTotals, Ran, Sim, UdpThreads, Until,
};
pub use endpoint::{BufPool, Endpoint, Nanos, NodeId, Transmit};
pub use forward::{ForwardStats, Forwarder, Route};
pub use node::Node;
