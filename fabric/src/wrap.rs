//! Wrappers that compose around any [`Endpoint`] (smoltcp's `phy` style: a device that wraps a
//! device), so a workload does not write its own forwarding type for each concern.
//!
//! - [`Timed`]: the host time spent inside the wrapped endpoint's `handle_packet` and
//!   `poll_transmit` calls (how a software host stack's cost per frame is measured here).
//!
//! Wrappers read a clock or write a file by design; the protocol state machine inside stays
//! sans-IO.

use crate::endpoint::{Endpoint, Nanos, NodeId, Transmit};
use std::time::Instant;

/// Times the calls into `inner` that do protocol work per frame (receive and transmit), in
/// nanoseconds of this host's monotonic clock, when `enabled` (e.g. hosts yes, the switch no).
pub struct Timed<E> {
    pub inner: E,
    pub enabled: bool,
    /// Time spent inside `handle_packet` and `poll_transmit` so far.
    pub ns: u64,
}

impl<E: Endpoint> Timed<E> {
    pub fn new(inner: E, enabled: bool) -> Timed<E> {
        Timed {
            inner,
            enabled,
            ns: 0,
        }
    }

    fn timed<R>(&mut self, f: impl FnOnce(&mut E) -> R) -> R {
        if !self.enabled {
            return f(&mut self.inner);
        }
        let t = Instant::now();
        let r = f(&mut self.inner);
        self.ns += t.elapsed().as_nanos() as u64;
        r
    }
}

impl<E: Endpoint> Endpoint for Timed<E> {
    fn id(&self) -> NodeId {
        self.inner.id()
    }
    fn handle_packet(&mut self, now: Nanos, from: NodeId, frame: &[u8]) {
        self.timed(|e| e.handle_packet(now, from, frame))
    }
    fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        self.timed(|e| e.poll_transmit(now))
    }
    fn poll_timeout(&self) -> Option<Nanos> {
        self.inner.poll_timeout()
    }
    fn handle_timeout(&mut self, now: Nanos) {
        self.inner.handle_timeout(now)
    }
    fn is_done(&self) -> bool {
        self.inner.is_done()
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        self.inner.counters()
    }
    fn recycle(&mut self, buf: Vec<u8>) {
        self.inner.recycle(buf)
    }
}
