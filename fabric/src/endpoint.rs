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
    /// A fabric hands back the buffer of a frame it delivered to this endpoint (after
    /// `handle_packet`), so an endpoint with a [`BufPool`] can send its next frame in it instead
    /// of allocating one. The default drops it. Its contents are stale: an endpoint must
    /// overwrite what it sends.
    fn recycle(&mut self, buf: Vec<u8>) {
        drop(buf);
    }
}

/// A small pool of frame buffers: the transmit path of an endpoint takes one with
/// [`BufPool::take`] (a recycled one when there is one, else a new allocation) and
/// [`Endpoint::recycle`] puts delivered ones back, so a steady stream of frames allocates
/// nothing. It keeps at most `cap` buffers (the rest are dropped), so memory stays bounded.
///
/// The cap has to hold what a node gets back between two of its transmit bursts, or a steady
/// stream frees buffers on receive and allocates them again on transmit: the `mem` fabric hands a
/// node up to 256 frames per sender per step before the node transmits, and a protocol's window
/// keeps as many frames in flight. [`BufPool::default`] keeps [`BufPool::DEFAULT_CAP`].
#[derive(Debug, Clone)]
pub struct BufPool {
    bufs: Vec<Vec<u8>>,
    cap: usize,
}

impl Default for BufPool {
    fn default() -> Self {
        BufPool::new(BufPool::DEFAULT_CAP)
    }
}

impl BufPool {
    /// The default cap: 1024 buffers (about 1 MiB of 1 KB frames), a receive batch of several
    /// senders (a fabric setting, not an input of any result).
    pub const DEFAULT_CAP: usize = 1024;

    pub fn new(cap: usize) -> BufPool {
        BufPool {
            bufs: Vec::new(),
            cap,
        }
    }

    /// A buffer of exactly `len` bytes, all zero.
    #[inline]
    pub fn take(&mut self, len: usize) -> Vec<u8> {
        match self.bufs.pop() {
            Some(mut b) => {
                b.clear();
                b.resize(len, 0);
                b
            }
            None => vec![0; len],
        }
    }

    /// A buffer of exactly `len` bytes for a caller that overwrites every one of them: a
    /// recycled buffer keeps its old bytes (a stale frame's, never uninitialised memory) up to
    /// `len` and is zero-filled beyond its old length; a new one is all zero. Saves the zeroing
    /// of [`BufPool::take`] where it would be overwritten anyway; a caller that leaves any byte
    /// unwritten must use [`BufPool::take`].
    #[inline]
    pub fn take_for_overwrite(&mut self, len: usize) -> Vec<u8> {
        match self.bufs.pop() {
            Some(mut b) => {
                b.resize(len, 0);
                b
            }
            None => vec![0; len],
        }
    }

    /// A buffer holding a copy of `bytes`.
    #[inline]
    pub fn take_copy(&mut self, bytes: &[u8]) -> Vec<u8> {
        match self.bufs.pop() {
            Some(mut b) => {
                b.clear();
                b.extend_from_slice(bytes);
                b
            }
            None => bytes.to_vec(),
        }
    }

    /// Keep `buf` for a later [`BufPool::take`] (dropped when the pool is full).
    #[inline]
    pub fn put(&mut self, buf: Vec<u8>) {
        if self.bufs.len() < self.cap && buf.capacity() > 0 {
            self.bufs.push(buf);
        }
    }

    /// Buffers waiting.
    pub fn len(&self) -> usize {
        self.bufs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bufs.is_empty()
    }
}

/// A boxed endpoint is an endpoint: a mix of node types runs on one fabric as
/// `Vec<Box<dyn Endpoint>>`, with no enum that forwards each call; a box of a trait object
/// whose trait extends `Endpoint` (`Box<dyn Worker>`) or of a sized endpoint (`Box<Member>`, as
/// a [`crate::Node`] variant) is one too.
impl<T: Endpoint + ?Sized> Endpoint for Box<T> {
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
    fn recycle(&mut self, buf: Vec<u8>) {
        (**self).recycle(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_for_overwrite_keeps_old_bytes_zero_fills_beyond_and_take_zeroes() {
        let mut p = BufPool::new(4);
        p.put(vec![7u8; 8]);
        let b = p.take_for_overwrite(5);
        assert_eq!(
            b,
            vec![7u8; 5],
            "a recycled buffer keeps its bytes up to len"
        );
        p.put(b);
        let b = p.take_for_overwrite(9);
        assert_eq!(b, [7, 7, 7, 7, 7, 0, 0, 0, 0], "zero beyond its old length");
        p.put(b);
        assert_eq!(p.take(6), vec![0u8; 6], "take zeroes");
        assert_eq!(
            p.take_for_overwrite(3),
            vec![0u8; 3],
            "a new buffer is zero"
        );
    }

    #[test]
    fn a_pool_keeps_at_most_its_cap() {
        let mut p = BufPool::new(2);
        for _ in 0..3 {
            p.put(vec![1u8; 4]);
        }
        assert_eq!(p.len(), 2);
        let mut q = BufPool::new(2);
        q.put(Vec::new());
        assert!(q.is_empty(), "a buffer with no capacity is not kept");
        assert_eq!(BufPool::default().cap, BufPool::DEFAULT_CAP);
    }
}
