//! ALEPH's testbed experiments (Sec. 6.2-6.3) on this machine: machines as network namespaces
//! with `tbf` rate limits, ALEPH's kernel data plane (drivers/xdp) and TCP baselines.
//!
//! - [`proto`]: sans-IO framing, the TCP aggregation service's summing state machine, the ring
//!   all-reduce schedule and the reference gradients.
//! - [`net`]: the namespaces and the TCP data planes (BytePS-style PS, ALEPH with TCP, Horovod).
//! - [`xdp`]: ALEPH's hierarchy with aggregation in XDP on the aggregators and the PS.

pub mod cpu;
pub mod latency;
pub mod multicast;
pub mod net;
pub mod proto;
pub mod udp;
pub mod xdp;

/// Errors of the testbed runs.
#[derive(Debug, thiserror::Error)]
pub enum TestbedError {
    #[error("the testbed experiments need root (network namespaces, tc and XDP)")]
    NotRoot,
    #[error("testbed setup: {0}")]
    Setup(String),
    #[error("testbed i/o: {0}")]
    Io(String),
    #[error("wrong aggregate: {0}")]
    Wrong(String),
    #[error(transparent)]
    Frame(#[from] proto::FrameError),
    #[error(transparent)]
    Xdp(#[from] inabench_xdp::XdpError),
}
