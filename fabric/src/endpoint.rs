//! The sans-IO endpoint contract.

/// A node of the fabric: a host (worker, parameter server) or a switch.
pub type NodeId = u32;

/// Time in nanoseconds since the fabric started (virtual in `sim`, real elsewhere).
pub type Nanos = u64;

/// A packet an endpoint wants to send: full frame bytes (Ethernet onward) to a neighbour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// The next hop (hosts send to the switch they hang off; a switch names the egress host).
    pub to: NodeId,
    pub bytes: Vec<u8>,
}

/// A protocol state machine (host stack or switch program).
///
/// The fabric calls, in any interleaving: `handle_packet` when a frame arrives,
/// `handle_timeout` when the time returned by `poll_timeout` has come, and `poll_transmit` until
/// it returns `None` after each of those. Implementations must never block, sleep, read a clock
/// or do I/O, and must treat every received byte as untrusted (a malformed frame is counted and
/// dropped, never a panic).
pub trait Endpoint: Send {
    fn id(&self) -> NodeId;
    /// A frame arrived from neighbour `from` at time `now`.
    fn handle_packet(&mut self, now: Nanos, from: NodeId, frame: &[u8]);
    /// The next frame to send, if any.
    fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit>;
    /// When this endpoint next wants `handle_timeout` (absolute), if ever.
    fn poll_timeout(&self) -> Option<Nanos>;
    fn handle_timeout(&mut self, now: Nanos);
    /// True when the endpoint has finished its work (a worker: its all-reduce completed).
    fn is_done(&self) -> bool {
        false
    }
    /// Counters for the dashboard and the rows (packets, losses, retransmissions, ...).
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
}

/// A boxed endpoint is an endpoint: a mix of node types runs on one fabric as
/// `Vec<Box<dyn Endpoint>>`, with no enum that forwards each call.
impl Endpoint for Box<dyn Endpoint> {
    fn id(&self) -> NodeId {
        (**self).id()
    }
    fn handle_packet(&mut self, now: Nanos, from: NodeId, frame: &[u8]) {
        (**self).handle_packet(now, from, frame)
    }
    fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        (**self).poll_transmit(now)
    }
    fn poll_timeout(&self) -> Option<Nanos> {
        (**self).poll_timeout()
    }
    fn handle_timeout(&mut self, now: Nanos) {
        (**self).handle_timeout(now)
    }
    fn is_done(&self) -> bool {
        (**self).is_done()
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        (**self).counters()
    }
}
