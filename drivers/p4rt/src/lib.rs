//! P4Runtime for inabench: the protocol (package `p4.v1`, compiled from our own subset of the
//! specification's definitions with the specification's field numbers, so it is wire compatible
//! with any P4Runtime peer), a client driver for Tofino switches, and a software switch serving
//! the same service, so the driver is tested end to end on any machine.
//!
//! - [`program`]: a switch program describes its tables and registers once ([`program::Program`]);
//!   the same description becomes the P4Info that programs the software switch and a Tofino.
//! - [`server`]: the software switch's P4Runtime server: arbitration on the stream channel,
//!   pipeline config, table/register/multicast writes and reads, packet-out into its data plane.
//! - [`client`]: the driver: connect, become primary, push a pipeline, write, read, packet-out.
//! - [`dataplane`]: where the software switch forwards a frame, as its tables and multicast
//!   groups say (the raw fabric's `forward_until` moves the frames), and `DataPlane`, the switch
//!   whose SwitchML aggregation the job tables a controller wrote configure (systems/ina's
//!   switch, `switchml::table`; the raw fabric's `serve_until` runs it on AF_PACKET ports).

pub mod client;
pub mod codec;
pub mod dataplane;
pub mod entries;
#[doc(hidden)]
pub mod fuzz;
pub mod p4info;
pub mod program;
pub mod server;

/// The generated protocol types and gRPC stubs.
pub mod pb {
    pub mod google {
        pub mod rpc {
            tonic::include_proto!("google.rpc");
        }
    }
    pub mod p4 {
        pub mod config {
            pub mod v1 {
                tonic::include_proto!("p4.config.v1");
            }
        }
        pub mod v1 {
            tonic::include_proto!("p4.v1");
        }
    }
}

/// The P4Runtime API version this implementation speaks.
pub const API_VERSION: &str = "1.3.0";

#[derive(Debug, thiserror::Error)]
pub enum P4rtError {
    #[error("cannot reach the P4Runtime server at {addr}: {source}")]
    Connect {
        addr: String,
        source: tonic::transport::Error,
    },
    #[error("P4Runtime {rpc} failed: {status}")]
    Rpc {
        rpc: &'static str,
        status: Box<tonic::Status>,
    },
    #[error("the switch did not make this client primary: {0}")]
    NotPrimary(String),
    #[error("the stream channel closed")]
    StreamClosed,
    #[error("the P4Runtime server at {addr} closed the stream channel")]
    Closed { addr: String },
    #[error("the P4Runtime server at {addr} did not {what} within {} s", after.as_secs_f64())]
    Timeout {
        addr: String,
        what: &'static str,
        after: std::time::Duration,
    },
    #[error("{0}")]
    Program(String),
}
