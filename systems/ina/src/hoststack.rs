//! A host stack model shared by every system that runs on the `sim` fabric: what a host pays per
//! frame (a service time charged by the fabric to the host's CPU) and how long a frame waits in
//! the stack before it reaches the wire. Sans-IO: [`TxBuffered`] is an endpoint wrapper with no
//! clock of its own (it acts on the `now` the fabric passes and asks for a timer through
//! `poll_timeout`).
//!
//! Three settings ([`HostStack`]):
//! - `nic`: the transport runs in the NIC (RoCE): no host CPU per frame, no stack wait.
//! - `measured`: the system's own host code, its cost per frame measured on this machine
//!   ([`crate::drive::host_cost_ns`]), one thread, no stack wait. This is what the suite used
//!   before this model; it measures this VM, not the paper's servers.
//! - `dpdk`: a DPDK client as the released SwitchML client runs it (p4lang/p4app-switchML,
//!   `dev_root/client_lib/src/configs/general.cfg` and `dpdk.cfg`, read at commit b5c74a0):
//!   `num_worker_threads = 4` worker threads, each on its own core; the per-frame work of one
//!   core is the system's host code as measured here (this suite has no citable per-core rate
//!   for this code: DPDK's published l3fwd/testpmd rates are for forwarding, not for a client
//!   that quantises and copies 128-256 B of gradient per packet), split over the cores; and the
//!   release's transmit path (`dpdk_worker_thread.cc`): after a first batch sent with
//!   `rte_eth_tx_burst`, every packet goes through an `rte_eth_tx_buffer` of `burst_tx = 64`
//!   packets that is sent when full, or flushed when the poll loop finds no packet to receive
//!   and more than `bulk_drain_tx_us = 10` us have passed since the last flush.
//!
//! What the model leaves out, on purpose: the release splits the pool and the outstanding
//! packets among its threads, each with its own buffer; here one worker node is one protocol
//! state machine with one buffer, served by `cores` times the per-core rate.

use inabench_fabric::{Endpoint, Nanos, NodeId, Transmit};
use std::collections::VecDeque;

/// Worker threads (cores) of the released SwitchML DPDK client (`num_worker_threads = 4` in
/// p4app-switchML's general.cfg; `cores = 10-13` in its dpdk.cfg).
pub const SWITCHML_RELEASE_CORES: u32 = 4;
/// Packets in the release's transmit buffer before it is sent (`burst_tx = 64`, dpdk.cfg).
pub const SWITCHML_RELEASE_TX_BURST: usize = 64;
/// The release's transmit buffer drain period (`bulk_drain_tx_us = 10`, dpdk.cfg), ns.
pub const SWITCHML_RELEASE_DRAIN_NS: u64 = 10_000;

/// A bad host stack setting.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StackError {
    #[error("host_stack is `nic`, `measured` (also `software`), `dpdk` or `paper`, not `{0}`")]
    Unknown(String),
    #[error("a DPDK host stack needs at least one core, not {0}")]
    NoCores(f64),
    #[error("a DPDK transmit buffer holds at least one packet, not {0}")]
    NoBurst(f64),
}

/// A DPDK client: `cores` cores, each taking `core_frame_ns` per frame; a transmit buffer of
/// `tx_burst` frames drained every `drain_ns`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DpdkStack {
    pub cores: u32,
    pub core_frame_ns: u64,
    pub tx_burst: usize,
    pub drain_ns: u64,
}

impl DpdkStack {
    /// The released SwitchML client's threads and transmit buffer, with `core_frame_ns` per
    /// frame and core.
    pub fn switchml_release(core_frame_ns: u64) -> Self {
        DpdkStack {
            cores: SWITCHML_RELEASE_CORES,
            core_frame_ns,
            tx_burst: SWITCHML_RELEASE_TX_BURST,
            drain_ns: SWITCHML_RELEASE_DRAIN_NS,
        }
    }

    /// As [`DpdkStack::switchml_release`] with the spec's overrides (`cores`, `tx_burst`,
    /// `drain_us`), checked.
    pub fn with(
        core_frame_ns: u64,
        cores: Option<f64>,
        tx_burst: Option<f64>,
        drain_us: Option<f64>,
    ) -> Result<Self, StackError> {
        let mut s = Self::switchml_release(core_frame_ns);
        if let Some(c) = cores {
            if !(c >= 1.0 && c.is_finite()) {
                return Err(StackError::NoCores(c));
            }
            s.cores = c as u32;
        }
        if let Some(b) = tx_burst {
            if !(b >= 1.0 && b.is_finite()) {
                return Err(StackError::NoBurst(b));
            }
            s.tx_burst = b as usize;
        }
        if let Some(d) = drain_us {
            s.drain_ns = (d.max(0.0) * 1000.0) as u64;
        }
        Ok(s)
    }

    /// The host's service time per frame: one core's time over the cores serving the host.
    pub fn frame_ns(&self) -> u64 {
        self.core_frame_ns.div_ceil(u64::from(self.cores.max(1)))
    }
}

/// What the hosts' transmit buffers held in a run: frames and their total wait (ns).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StackStats {
    pub buffered: u64,
    pub waited_ns: u64,
}

impl StackStats {
    /// The mean wait of a buffered frame (us), if any frame was buffered.
    pub fn mean_wait_us(&self) -> Option<f64> {
        (self.buffered > 0).then(|| self.waited_ns as f64 / self.buffered as f64 / 1e3)
    }
}

/// What a host's stack costs on `sim`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum HostStack {
    /// The transport runs in the NIC.
    Nic,
    /// The system's own code, this many ns per frame on one thread of this machine.
    Measured(u64),
    /// A DPDK client.
    Dpdk(DpdkStack),
}

impl HostStack {
    /// Service time per host frame (ns), charged to the host's CPU on receive and on send.
    pub fn frame_ns(&self) -> u64 {
        match self {
            HostStack::Nic => 0,
            HostStack::Measured(c) => *c,
            HostStack::Dpdk(d) => d.frame_ns(),
        }
    }

    /// The transmit buffer (frames, drain period in ns), if the stack has one.
    pub fn tx_buffer(&self) -> Option<(usize, u64)> {
        match self {
            HostStack::Dpdk(d) => Some((d.tx_burst, d.drain_ns)),
            _ => None,
        }
    }

    /// The setting's name, as the specs and the rows spell it.
    pub fn name(&self) -> &'static str {
        match self {
            HostStack::Nic => "nic",
            HostStack::Measured(_) => "measured",
            HostStack::Dpdk(_) => "dpdk",
        }
    }
}

/// An endpoint whose transmissions go through a DPDK-style transmit buffer: the frames it sends
/// before it first receives anything leave at once (the release's first `rte_eth_tx_burst`);
/// later ones wait in a buffer of `burst` frames that is sent when full, or flushed at
/// `max(now, last flush + drain)`. Without a buffer (`None`) it passes every call through.
pub struct TxBuffered<N> {
    inner: N,
    cfg: Option<(usize, u64)>,
    buf: VecDeque<(Nanos, Transmit)>,
    out: VecDeque<Transmit>,
    started: bool,
    last_flush: Nanos,
    flush_at: Option<Nanos>,
    /// Frames that went through the buffer, and their total wait in it (ns).
    pub buffered: u64,
    pub waited_ns: u64,
}

impl<N: Endpoint> TxBuffered<N> {
    pub fn new(inner: N, cfg: Option<(usize, u64)>) -> Self {
        TxBuffered {
            inner,
            cfg: cfg.map(|(b, d)| (b.max(1), d)),
            buf: VecDeque::new(),
            out: VecDeque::new(),
            started: false,
            last_flush: 0,
            flush_at: None,
            buffered: 0,
            waited_ns: 0,
        }
    }

    pub fn inner(&self) -> &N {
        &self.inner
    }

    pub fn into_inner(self) -> N {
        self.inner
    }

    fn flush(&mut self, now: Nanos, n: usize) {
        for _ in 0..n.min(self.buf.len()) {
            if let Some((t, tx)) = self.buf.pop_front() {
                self.waited_ns += now.saturating_sub(t);
                self.out.push_back(tx);
            }
        }
        self.last_flush = now;
        self.flush_at = None;
    }

    /// Take what the inner endpoint wants to send now into the buffer (or straight out).
    fn pull(&mut self, now: Nanos) {
        let Some((burst, drain)) = self.cfg else {
            return;
        };
        while let Some(tx) = self.inner.poll_transmit(now) {
            if !self.started {
                self.out.push_back(tx);
                continue;
            }
            self.buffered += 1;
            self.buf.push_back((now, tx));
            if self.buf.len() >= burst {
                self.flush(now, burst);
            }
        }
        if !self.buf.is_empty() && self.flush_at.is_none() {
            self.flush_at = Some(now.max(self.last_flush + drain));
        }
        if self.flush_at.is_some_and(|at| at <= now) {
            self.flush(now, usize::MAX);
        }
    }
}

impl<N: Endpoint> Endpoint for TxBuffered<N> {
    fn id(&self) -> NodeId {
        self.inner.id()
    }

    fn handle_packet(&mut self, now: Nanos, from: NodeId, frame: &[u8]) {
        self.started = true;
        self.inner.handle_packet(now, from, frame);
    }

    fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        if self.cfg.is_none() {
            return self.inner.poll_transmit(now);
        }
        if self.out.is_empty() {
            self.pull(now);
        }
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Nanos> {
        match (self.inner.poll_timeout(), self.flush_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn handle_timeout(&mut self, now: Nanos) {
        if self.flush_at.is_some_and(|at| at <= now) {
            self.flush(now, usize::MAX);
        }
        if self.inner.poll_timeout().is_some_and(|at| at <= now) {
            self.inner.handle_timeout(now);
        }
    }

    fn is_done(&self) -> bool {
        self.inner.is_done()
    }

    fn recycle(&mut self, buf: Vec<u8>) {
        self.inner.recycle(buf)
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let mut c = self.inner.counters();
        if self.cfg.is_some() {
            c.push(("stack_buffered_frames", self.buffered));
            c.push(("stack_wait_ns", self.waited_ns));
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends `n` frames at start; after each frame it receives, sends one more (until `total`).
    struct Echo {
        left: u32,
        pending: u32,
    }

    impl Endpoint for Echo {
        fn id(&self) -> NodeId {
            0
        }
        fn handle_packet(&mut self, _now: Nanos, _from: NodeId, _frame: &[u8]) {
            if self.left > 0 {
                self.left -= 1;
                self.pending += 1;
            }
        }
        fn poll_transmit(&mut self, _now: Nanos) -> Option<Transmit> {
            if self.pending == 0 {
                return None;
            }
            self.pending -= 1;
            Some(Transmit {
                to: 1,
                bytes: vec![0; 8],
            })
        }
        fn poll_timeout(&self) -> Option<Nanos> {
            None
        }
        fn handle_timeout(&mut self, _now: Nanos) {}
    }

    fn drain(e: &mut TxBuffered<Echo>, now: Nanos) -> usize {
        let mut n = 0;
        while e.poll_transmit(now).is_some() {
            n += 1;
        }
        n
    }

    #[test]
    fn first_batch_leaves_at_once_then_frames_wait_for_a_full_burst_or_the_drain() {
        let mut e = TxBuffered::new(
            Echo {
                left: 100,
                pending: 3,
            },
            Some((4, 10_000)),
        );
        assert_eq!(drain(&mut e, 0), 3, "the first batch is not buffered");
        // three answers: three frames buffered, none sent (burst 4, drain not due: last flush 0)
        for t in [1_000, 2_000, 3_000] {
            e.handle_packet(t, 1, &[]);
            assert_eq!(drain(&mut e, t), 0);
        }
        assert_eq!(
            e.poll_timeout(),
            Some(10_000),
            "flush at last flush + drain"
        );
        // the fourth fills the buffer: four frames leave together
        e.handle_packet(4_000, 1, &[]);
        assert_eq!(drain(&mut e, 4_000), 4);
        assert_eq!(e.waited_ns, 3_000 + 2_000 + 1_000);
        // one more waits until 4 us + 10 us (the flush just happened at 4 us)
        e.handle_packet(5_000, 1, &[]);
        assert_eq!(drain(&mut e, 5_000), 0);
        assert_eq!(e.poll_timeout(), Some(14_000));
        e.handle_timeout(14_000);
        assert_eq!(drain(&mut e, 14_000), 1);
        assert_eq!(e.waited_ns, 6_000 + 9_000);
        assert_eq!(e.buffered, 5);
    }

    #[test]
    fn a_frame_after_a_long_idle_spell_leaves_at_once() {
        let mut e = TxBuffered::new(
            Echo {
                left: 10,
                pending: 1,
            },
            Some((64, 10_000)),
        );
        assert_eq!(drain(&mut e, 0), 1);
        e.handle_packet(50_000, 1, &[]);
        assert_eq!(drain(&mut e, 50_000), 1, "last flush long ago: flushed now");
        assert_eq!(e.waited_ns, 0);
    }

    #[test]
    fn without_a_buffer_every_frame_passes_through() {
        let mut e = TxBuffered::new(
            Echo {
                left: 10,
                pending: 2,
            },
            None,
        );
        assert_eq!(drain(&mut e, 0), 2);
        e.handle_packet(10, 1, &[]);
        assert_eq!(drain(&mut e, 10), 1);
        assert_eq!(e.poll_timeout(), None);
        assert_eq!(e.buffered, 0);
    }

    #[test]
    fn dpdk_service_time_splits_one_core_s_cost_over_the_cores() {
        let d = DpdkStack::switchml_release(1_000);
        assert_eq!(d.cores, 4);
        assert_eq!(d.frame_ns(), 250);
        assert_eq!(HostStack::Dpdk(d).tx_buffer(), Some((64, 10_000)));
        assert_eq!(HostStack::Measured(1_000).frame_ns(), 1_000);
        assert_eq!(HostStack::Nic.frame_ns(), 0);
        let d = DpdkStack::with(1_001, Some(2.0), Some(8.0), Some(2.5)).unwrap();
        assert_eq!((d.frame_ns(), d.tx_burst, d.drain_ns), (501, 8, 2_500));
        assert_eq!(
            DpdkStack::with(1, Some(0.0), None, None),
            Err(StackError::NoCores(0.0))
        );
        assert_eq!(
            DpdkStack::with(1, None, Some(0.5), None),
            Err(StackError::NoBurst(0.5))
        );
    }

    /// A whole SwitchML all-reduce on `sim` through the DPDK stack: every worker's sum exact,
    /// frames buffered, and the run slower than with no host cost (the buffer and the service
    /// time both cost time).
    #[test]
    fn switchml_on_the_dpdk_stack_is_exact_and_pays_the_buffer() {
        use crate::common::{AllReduceConfig, SetupNode, reference_sum};
        use crate::drive::run_sim_stack;
        use inabench_fabric::fault::Faults;
        let cfg = AllReduceConfig {
            workers: 4,
            elements: 32 * 1000,
            seed: 5,
            line_rate_bps: 100e9,
            mtu: 1024,
            timeout_ns: 1_000_000,
            knobs: vec![],
        };
        let want = reference_sum(cfg.seed, cfg.workers, cfg.elements);
        let end = |nodes: &[SetupNode]| {
            nodes
                .iter()
                .filter_map(|n| match n {
                    SetupNode::Worker(w) => {
                        assert_eq!(w.result().as_deref(), Some(&want[..]));
                        Some(w.stats().end_ns)
                    }
                    _ => None,
                })
                .max()
                .unwrap_or(0)
        };
        let sys = crate::switchml::SwitchMl;
        let (n0, r0, s0) = run_sim_stack(
            &sys,
            &cfg,
            Faults::default(),
            &HostStack::Nic,
            1_000_000_000,
            None,
        )
        .unwrap();
        assert!(r0.finished);
        assert_eq!(s0, StackStats::default());
        let stack = HostStack::Dpdk(DpdkStack::switchml_release(400));
        let (n1, r1, s1) =
            run_sim_stack(&sys, &cfg, Faults::default(), &stack, 1_000_000_000, None).unwrap();
        assert!(r1.finished);
        assert!(s1.buffered > 0 && s1.waited_ns > 0, "{s1:?}");
        assert!(end(&n1) > end(&n0), "{} vs {}", end(&n1), end(&n0));
        // the service time charged is one core's cost over the release's 4 cores
        let busy: u64 = r1.nodes[..cfg.workers].iter().map(|s| s.busy_ns).sum();
        let frames: u64 = r1.nodes[..cfg.workers]
            .iter()
            .map(|s| s.frames_rx + s.frames_tx)
            .sum();
        assert_eq!(busy, frames * 100);
    }
}
