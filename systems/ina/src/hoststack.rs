//! A host stack model shared by every system that runs on the `sim` fabric: what a host pays per
//! frame (a service time charged by the fabric to the host's CPU) and how long a frame waits in
//! the stack before it reaches the wire. Sans-IO: [`TxBuffered`] is an endpoint wrapper with no
//! clock of its own (it acts on the `now` the fabric passes and asks for a timer through
//! `poll_timeout`).
//!
//! Three settings ([`HostStack`]), all priced by declared inputs, never by a measurement taken
//! while a run runs: the caller passes a software stack's [`CoreCosts`] (a host profile's entries,
//! `experiments/hosts/*.yaml`, read by inabench-core; this crate knows nothing of the file), so a
//! simulated run is a function of its spec, the profile and its seed:
//! - `nic`: the transport runs in the NIC (RoCE): no host CPU per frame, no stack wait.
//! - `measured` (older name `software`): the system's host code on one thread at the profile's
//!   cost per frame and core, no stack wait (the suite's one-thread model of the past; the
//!   profile's cost may itself be a measurement of this code, `inabench calibrate`,
//!   `inabench_ina_run::drive::measure_frame_ns`).
//! - `dpdk`: a DPDK client as the released SwitchML client runs it (p4lang/p4app-switchML,
//!   `dev_root/client_lib/src/configs/general.cfg` and `dpdk.cfg`, read at commit b5c74a0):
//!   `num_worker_threads = 4` worker threads, each on its own core (the profile's `threads`,
//!   which cites it); the profile's cost per frame and core split over the cores; and the
//!   release's transmit path (`dpdk_worker_thread.cc`): each job slice (one all-reduce call)
//!   sends its first batch (up to the thread's share of the outstanding packets) with
//!   `rte_eth_tx_burst`, at once; every packet it sends in reply to a result goes through an
//!   `rte_eth_tx_buffer` of `burst_tx = 64` packets that is sent when full, or flushed when the
//!   poll loop finds no packet to receive and more than `bulk_drain_tx_us = 10` us have passed
//!   since the last flush. A run of the ina systems is one all-reduce, one job; a driver that
//!   runs many calls one after another marks where each begins ([`TxBuffered::with_jobs`]).
//!
//!   ATP runs the same model with its own release's values (in-ATP/ATP, read at commit
//!   ddca27f): its client is not DPDK but a kernel-bypass raw-Ethernet ibverbs client on a
//!   Mellanox NIC (`common/dma_common.cc`, the "parallel DMA" NetReduce's Table 1 names for
//!   ATP), with `thread_to_use = 12` worker threads (`client/main.cc`), each bound to its own
//!   core (`bindingCPU(thread_id + 1)`, `client/p4ml_manager.cc`), and no timed transmit
//!   buffer: each pass of a thread's poll loop posts the packets it made ready at once, as
//!   one TSO work request (`send_packet`, `IBV_EXP_WR_TSO`), so no frame waits for a batch
//!   (a one-frame buffer: [`HostStack::tx_buffer`] is `None`).
//!
//! Each of the client's threads has its own transmit buffer ([`HostStack::tx_lanes`] buffers per
//! host): the frames a worker sends are striped over them in send order, so each buffer fills
//! at `1/cores` of the host's rate and waits for its own drain. Systems whose transport needs
//! its packets in order ([`crate::common::System::ordered_transport`]: NetReduce, SwitchML-RDMA, the ring) keep one
//! buffer under `dpdk` (a real client keeps a queue pair on one thread; striping would reorder
//! its packets).
//!
//! SwitchML's release also fixes the packets a worker keeps outstanding
//! (`max_outstanding_packets = 256`, 64 a thread, the switch's pool sized to it): under its
//! `dpdk` client SwitchML's `pool` is 256 unless a spec sets it ([`HostStack::client_knobs`],
//! applied by `inabench_ina_run::drive::run_sim_stack`).
//!
//! What the model leaves out, on purpose: the release gives each thread a fixed share of the
//! pool's slots (a slot's packets stay on one thread); here one worker node is one protocol
//! state machine, its frames dealt to the threads' buffers in turn, and its per-frame work
//! served by `cores` times the per-core rate. The release's drain clock (`prev_tsc`) moves
//! only at a timed flush, which it tries on every idle poll whether or not its buffer holds
//! anything; here a lane's drain is timed from its last send of either kind, so a frame
//! buffered just after a full buffer left may wait up to one drain period longer than in the
//! release (at most 10 us, only where a buffer does not fill). The release resends a timed-out
//! packet with `rte_eth_tx_burst` (`ResendPacketCallback`, `dpdk_worker_thread_utils.inc`),
//! unbuffered; here a resend after a job's first receive goes through the buffer like a reply.

use inabench_fabric::{Endpoint, Nanos, NodeId, Transmit};
use std::collections::VecDeque;

/// Worker threads (cores) of the released SwitchML DPDK client (`num_worker_threads = 4` in
/// p4app-switchML's general.cfg; `cores = 10-13` in its dpdk.cfg).
pub const SWITCHML_RELEASE_CORES: u32 = 4;
/// Packets in the release's transmit buffer before it is sent (`burst_tx = 64`, dpdk.cfg).
pub const SWITCHML_RELEASE_TX_BURST: usize = 64;
/// The release's transmit buffer drain period (`bulk_drain_tx_us = 10`, dpdk.cfg), ns.
pub const SWITCHML_RELEASE_DRAIN_NS: u64 = 10_000;
/// Packets a worker of the released SwitchML client keeps outstanding
/// (`max_outstanding_packets = 256`, general.cfg), split evenly over its threads (64 each at 4
/// threads: as many as one transmit buffer holds); the release sizes the switch's pool to it
/// ("the pool size must be = max_outstanding_pkts", `dpdk_worker_thread.cc`), so under the
/// released client SwitchML's `pool` is 256 unless a spec sets it.
pub const SWITCHML_RELEASE_OUTSTANDING: u32 = 256;

/// Worker threads (cores) of ATP's released client (in-ATP/ATP at ddca27f: `client/main.cc`
/// `thread_to_use = 12`, each thread on its own core, `bindingCPU(thread_id + 1)` in
/// `client/p4ml_manager.cc`).
pub const ATP_RELEASE_CORES: u32 = 12;
/// ATP's release sends what a poll-loop pass made ready at once (one TSO work request per
/// pass, `send_packet` in `common/dma_common.cc`): no frame waits in a buffer.
pub const ATP_RELEASE_TX_BURST: usize = 1;

/// A bad host stack setting.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StackError {
    #[error("host_stack is `nic`, `measured` (also `software`), `dpdk` or `paper`, not `{0}`")]
    Unknown(String),
    #[error("a DPDK host stack needs at least one core, not {0}")]
    NoCores(f64),
    #[error("a DPDK transmit buffer holds at least one packet, not {0}")]
    NoBurst(f64),
    #[error(
        "host_stack `{stack}` of `{system}` runs its software client, whose cost per frame the host profile must give"
    )]
    NoCosts { system: String, stack: String },
    #[error("a client's latency is a finite number of at least 0 ns, not {0}")]
    BadLatency(f64),
    #[error(
        "a host cost per frame is a finite number of at least 0 ns and a client at least one thread, not {frame_ns} ns on {threads} threads"
    )]
    BadCosts { frame_ns: f64, threads: f64 },
}

/// A software client's costs as a host profile declares them (`systems.<system>.worker.frame`
/// and `.threads`): the time one core spends on one frame received or one frame sent, and the
/// worker threads (cores) the released client runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CoreCosts {
    pub frame_ns: f64,
    pub threads: u32,
    /// The client's latency from releasing a frame to its first bit on the wire (the profile's
    /// `stack_latency`; 0 unless given).
    pub latency_ns: u64,
}

impl CoreCosts {
    /// Checked: a finite cost of at least 0 and at least one whole thread.
    pub fn new(frame_ns: f64, threads: f64) -> Result<CoreCosts, StackError> {
        if !(frame_ns.is_finite() && frame_ns >= 0.0 && threads >= 1.0 && threads.fract() == 0.0) {
            return Err(StackError::BadCosts { frame_ns, threads });
        }
        Ok(CoreCosts {
            frame_ns,
            threads: threads as u32,
            latency_ns: 0,
        })
    }

    /// With the client's latency per frame (ns, finite and at least 0).
    pub fn with_latency(mut self, ns: f64) -> Result<CoreCosts, StackError> {
        if !(ns.is_finite() && ns >= 0.0) {
            return Err(StackError::BadLatency(ns));
        }
        self.latency_ns = ns.round() as u64;
        Ok(self)
    }

    /// The cost per frame and core in whole ns (the fabric charges whole ns), rounded.
    pub fn core_ns(&self) -> u64 {
        self.frame_ns.round() as u64
    }
}

/// A DPDK client: `cores` cores, each taking `core_frame_ns` per frame; a transmit buffer of
/// `tx_burst` frames drained every `drain_ns`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DpdkStack {
    pub cores: u32,
    /// Transmit buffers per host: one per thread (`cores`) where a system's packets are
    /// independent of each other, one where its transport needs them in order.
    pub lanes: u32,
    pub core_frame_ns: u64,
    pub tx_burst: usize,
    pub drain_ns: u64,
    /// Packets a worker keeps outstanding, where the release fixes it (SwitchML's
    /// `max_outstanding_packets`, its protocol's `pool`); `None` leaves the protocol's own
    /// window.
    pub outstanding: Option<u32>,
    /// The client's latency from release to the wire per frame (ns; the profile's
    /// `stack_latency`, 0 in the releases' own settings: no source gives it).
    pub latency_ns: u64,
}

impl DpdkStack {
    /// The released SwitchML client's threads and transmit buffer, with `core_frame_ns` per
    /// frame and core.
    pub fn switchml_release(core_frame_ns: u64) -> Self {
        DpdkStack {
            cores: SWITCHML_RELEASE_CORES,
            lanes: SWITCHML_RELEASE_CORES,
            core_frame_ns,
            tx_burst: SWITCHML_RELEASE_TX_BURST,
            drain_ns: SWITCHML_RELEASE_DRAIN_NS,
            outstanding: Some(SWITCHML_RELEASE_OUTSTANDING),
            latency_ns: 0,
        }
    }

    /// ATP's released client: 12 threads on their own cores, no transmit buffer.
    pub fn atp_release(core_frame_ns: u64) -> Self {
        DpdkStack {
            cores: ATP_RELEASE_CORES,
            lanes: ATP_RELEASE_CORES,
            core_frame_ns,
            tx_burst: ATP_RELEASE_TX_BURST,
            drain_ns: 0,
            outstanding: None,
            latency_ns: 0,
        }
    }

    /// A client priced as SwitchML's released one (the only other release read) for a system
    /// whose own client was not read: SwitchML's threads, transmit buffer and drain, but the
    /// protocol's own window (SwitchML's pool is SwitchML's), and one transmit buffer for a
    /// transport that needs its packets in order (`ordered`: striping its frames over the
    /// threads' buffers would reorder them, which a real client avoids by keeping a queue pair
    /// on one thread). [`crate::common::System::dpdk_client`]'s default.
    pub fn priced_as_switchml(core_frame_ns: u64, ordered: bool) -> Self {
        let mut s = Self::switchml_release(core_frame_ns);
        s.outstanding = None;
        if ordered {
            s.lanes = 1;
        }
        s
    }

    /// The client of `system` ([`crate::common::System::dpdk_client`]: ATP's and SwitchML's
    /// releases, every other system priced as SwitchML's).
    pub fn release(system: &dyn crate::common::System, core_frame_ns: u64) -> Self {
        system.dpdk_client(core_frame_ns)
    }

    /// The released client of `system` with a host profile's costs: its cost per frame and
    /// core, and its thread count (the profile's `threads`, which cites the release).
    pub fn from_costs(system: &dyn crate::common::System, costs: CoreCosts) -> Self {
        let mut s = Self::release(system, costs.core_ns());
        s.cores = costs.threads.max(1);
        s.latency_ns = costs.latency_ns;
        if s.lanes > 1 {
            s.lanes = s.cores;
        }
        s
    }

    /// As [`DpdkStack::release`] of `system` with the spec's overrides (`cores`, `tx_burst`,
    /// `drain_us`), checked.
    pub fn with(
        system: &dyn crate::common::System,
        core_frame_ns: u64,
        cores: Option<f64>,
        tx_burst: Option<f64>,
        drain_us: Option<f64>,
    ) -> Result<Self, StackError> {
        Self::release(system, core_frame_ns).overridden(cores, tx_burst, drain_us)
    }

    /// As [`DpdkStack::from_costs`] with the spec's overrides (`cores`, `tx_burst`,
    /// `drain_us`), checked.
    pub fn with_costs(
        system: &dyn crate::common::System,
        costs: CoreCosts,
        cores: Option<f64>,
        tx_burst: Option<f64>,
        drain_us: Option<f64>,
    ) -> Result<Self, StackError> {
        Self::from_costs(system, costs).overridden(cores, tx_burst, drain_us)
    }

    fn overridden(
        mut self,
        cores: Option<f64>,
        tx_burst: Option<f64>,
        drain_us: Option<f64>,
    ) -> Result<Self, StackError> {
        let s = &mut self;
        if let Some(c) = cores {
            if !(c >= 1.0 && c.is_finite()) {
                return Err(StackError::NoCores(c));
            }
            s.cores = c as u32;
            if s.lanes > 1 {
                s.lanes = s.cores;
            }
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
        Ok(self)
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
    /// The system's own code on one thread, this many ns per frame (the profile's cost per
    /// frame and core).
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

    /// The transmit buffer (frames, drain period in ns), if the stack has one (a one-frame
    /// buffer sends every frame at once: no buffer).
    pub fn tx_buffer(&self) -> Option<(usize, u64)> {
        match self {
            HostStack::Dpdk(d) if d.tx_burst > 1 => Some((d.tx_burst, d.drain_ns)),
            _ => None,
        }
    }

    /// The client's latency from release to the wire per frame (ns): a DPDK client's declared
    /// `stack_latency`, else 0.
    pub fn tx_latency(&self) -> u64 {
        match self {
            HostStack::Dpdk(d) => d.latency_ns,
            _ => 0,
        }
    }

    /// Transmit buffers per host: one per worker thread of a DPDK client, else one.
    pub fn tx_lanes(&self) -> usize {
        match self {
            HostStack::Dpdk(d) => d.lanes.max(1) as usize,
            _ => 1,
        }
    }

    /// The protocol knobs this stack's released client fixes, for `system` (SwitchML's `pool` =
    /// the release's `max_outstanding_packets` under its DPDK client), less those `cfg`
    /// already sets: a spec's own value wins.
    pub fn client_knobs(&self, cfg: &crate::common::AllReduceConfig) -> Vec<(String, f64)> {
        match self {
            HostStack::Dpdk(DpdkStack {
                outstanding: Some(n),
                ..
            }) if cfg.knob("pool").is_none() => vec![("pool".into(), f64::from(*n))],
            _ => Vec::new(),
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

/// An endpoint whose transmissions go through DPDK-style transmit buffers: the first batch of
/// each job (the release's job slice: one all-reduce call) leaves at once (the release's
/// `rte_eth_tx_burst` of a job's first batch), and what the endpoint sends in reply to results
/// waits in a buffer of `burst` frames that is sent when full, or flushed at
/// `max(now, last flush + drain)`. With `lanes` buffers (one per worker thread, as the release
/// gives each of its threads its own `rte_eth_tx_buffer` and its own share of the outstanding
/// packets), frames are striped over the buffers in the order they are sent, and each buffer
/// fills, flushes and drains on its own. Without a buffer (`None`) it passes every call through.
///
/// Jobs: by default a whole run is one job (what the ina systems run: one all-reduce), whose
/// first batch is what the endpoint sends before it first receives anything. A driver whose
/// endpoint runs many all-reduce calls one after another (P4SGD's closed loop of one-packet
/// all-reduces) says where each begins with [`TxBuffered::with_jobs`]: a counter of the jobs the
/// inner endpoint has started, read from it (sans-IO: nothing but the inner state); the frames
/// it sends once that counter has moved, up to its next receive, are the new job's first batch
/// and leave at once, as in the release, where every job slice's first batch is sent with
/// `rte_eth_tx_burst` (`dpdk_worker_thread.cc`, "Send first batch").
pub struct TxBuffered<N> {
    inner: N,
    cfg: Option<(usize, u64)>,
    lanes: Vec<Lane>,
    next_lane: usize,
    /// frames released by the buffers, each with the time it reaches the wire (released + the
    /// stack's latency)
    out: VecDeque<(Nanos, Transmit)>,
    /// The software client's latency from release to the wire ([`DpdkStack::latency_ns`]).
    latency: Nanos,
    /// A software client takes what its endpoint makes ready as soon as it is ready (after every
    /// receive and timer), into its buffers, whatever its link is doing; without it (a NIC) the
    /// endpoint is asked for a frame only when the link takes one.
    eager: bool,
    started: bool,
    /// The inner endpoint's job counter, if the driver gave one, and its value at the last pull.
    jobs: Option<fn(&N) -> u64>,
    jobs_seen: u64,
    /// Whether the frames pulled now are a job's first batch (sent at once): from the pull in
    /// which the job counter moved to the next receive.
    first_batch: bool,
    /// Frames that went through the buffers, and their total wait in them (ns).
    pub buffered: u64,
    pub waited_ns: u64,
}

/// One thread's transmit buffer.
#[derive(Default)]
struct Lane {
    buf: VecDeque<(Nanos, Transmit)>,
    last_flush: Nanos,
    flush_at: Option<Nanos>,
}

impl<N: Endpoint> TxBuffered<N> {
    /// One buffer (or none).
    pub fn new(inner: N, cfg: Option<(usize, u64)>) -> Self {
        Self::with_lanes(inner, cfg, 1)
    }

    /// `lanes` buffers (at least one), frames striped over them in send order.
    pub fn with_lanes(inner: N, cfg: Option<(usize, u64)>, lanes: usize) -> Self {
        TxBuffered {
            inner,
            cfg: cfg.map(|(b, d)| (b.max(1), d)),
            lanes: (0..lanes.max(1)).map(|_| Lane::default()).collect(),
            next_lane: 0,
            out: VecDeque::new(),
            latency: 0,
            eager: false,
            started: false,
            jobs: None,
            jobs_seen: 0,
            first_batch: false,
            buffered: 0,
            waited_ns: 0,
        }
    }

    /// Job starts read from the inner endpoint: `jobs(inner)` counts the jobs (all-reduce calls)
    /// it has started so far. Whenever the count has moved, what the endpoint sends from then to
    /// its next receive is the new job's first batch and leaves at once.
    pub fn with_jobs(mut self, jobs: fn(&N) -> u64) -> Self {
        self.jobs_seen = jobs(&self.inner);
        self.jobs = Some(jobs);
        self
    }

    /// Every frame reaches the wire `ns` after the client releases it (a software client's own
    /// latency, the host profile's `stack_latency`; 0 by default).
    pub fn with_latency(mut self, ns: Nanos) -> Self {
        self.latency = ns;
        self
    }

    /// A software client (see `eager`): frames are taken from the endpoint when they are ready,
    /// so the time they then wait for the buffer, the latency and the link is in the RTT the
    /// endpoint measures, as an application on a software client sees it.
    pub fn with_eager(mut self, eager: bool) -> Self {
        self.eager = eager;
        self
    }

    /// Whether calls pass straight through (no buffer, no latency, not eager).
    fn passthrough(&self) -> bool {
        self.cfg.is_none() && self.latency == 0 && !self.eager
    }

    pub fn inner(&self) -> &N {
        &self.inner
    }

    pub fn into_inner(self) -> N {
        self.inner
    }

    fn flush(&mut self, lane: usize, now: Nanos, n: usize) {
        let l = &mut self.lanes[lane];
        for _ in 0..n.min(l.buf.len()) {
            if let Some((t, tx)) = l.buf.pop_front() {
                self.waited_ns += now.saturating_sub(t);
                self.out.push_back((now + self.latency, tx));
            }
        }
        l.last_flush = now;
        l.flush_at = None;
    }

    /// Flush every buffer whose drain time has come.
    fn flush_due(&mut self, now: Nanos) {
        for i in 0..self.lanes.len() {
            if self.lanes[i].flush_at.is_some_and(|at| at <= now) {
                self.flush(i, now, usize::MAX);
            }
        }
    }

    /// Take what the inner endpoint wants to send now into the buffers (or straight out).
    fn pull(&mut self, now: Nanos) {
        let Some((burst, drain)) = self.cfg else {
            // no buffer: every frame released at once, on the wire after the latency
            while let Some(tx) = self.inner.poll_transmit(now) {
                self.out.push_back((now + self.latency, tx));
            }
            return;
        };
        if let Some(jobs) = self.jobs {
            let j = jobs(&self.inner);
            if j != self.jobs_seen {
                self.jobs_seen = j;
                self.first_batch = true;
            }
        }
        while let Some(tx) = self.inner.poll_transmit(now) {
            if !self.started || self.first_batch {
                self.out.push_back((now + self.latency, tx));
                continue;
            }
            let i = self.next_lane;
            self.next_lane = (i + 1) % self.lanes.len();
            self.buffered += 1;
            self.lanes[i].buf.push_back((now, tx));
            if self.lanes[i].buf.len() >= burst {
                self.flush(i, now, burst);
            }
        }
        for l in &mut self.lanes {
            if !l.buf.is_empty() && l.flush_at.is_none() {
                l.flush_at = Some(now.max(l.last_flush + drain));
            }
        }
        self.flush_due(now);
    }
}

impl<N: Endpoint> Endpoint for TxBuffered<N> {
    fn id(&self) -> NodeId {
        self.inner.id()
    }

    fn handle_packet(&mut self, now: Nanos, from: NodeId, frame: &[u8]) {
        // a job's first batch ends at the endpoint's next receive (the fabric and the hosts
        // poll for frames after every call, so it has been pulled)
        self.started = true;
        self.first_batch = false;
        self.inner.handle_packet(now, from, frame);
        if self.eager {
            self.pull(now);
        }
    }

    fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        if self.passthrough() {
            return self.inner.poll_transmit(now);
        }
        if self.out.is_empty() || self.latency > 0 || self.eager {
            self.pull(now);
        }
        match self.out.front() {
            Some((due, _)) if *due <= now => self.out.pop_front().map(|(_, t)| t),
            _ => None,
        }
    }

    fn poll_timeout(&self) -> Option<Nanos> {
        let flush_at = self.lanes.iter().filter_map(|l| l.flush_at).min();
        let due = self.out.front().map(|(d, _)| *d);
        [self.inner.poll_timeout(), flush_at, due]
            .into_iter()
            .flatten()
            .min()
    }

    fn handle_timeout(&mut self, now: Nanos) {
        self.flush_due(now);
        if self.inner.poll_timeout().is_some_and(|at| at <= now) {
            self.inner.handle_timeout(now);
        }
        if self.eager {
            self.pull(now);
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

    fn sys(name: &str) -> &'static dyn crate::common::System {
        crate::system(name).unwrap_or_else(|| panic!("{name} is in the list of systems"))
    }

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

    fn drain<N: Endpoint>(e: &mut TxBuffered<N>, now: Nanos) -> usize {
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

    /// A software client's own latency: a released frame reaches the wire `latency` later (with
    /// no buffer too, as ATP's release), and the endpoint is told when through `poll_timeout`.
    /// Eager: what the endpoint makes ready on a receive is taken at once, not when the link
    /// next asks (the RTT an application on a software client measures includes the wait).
    #[test]
    fn a_client_latency_holds_each_frame_and_an_eager_client_takes_frames_when_ready() {
        let mut e = TxBuffered::new(
            Echo {
                left: 100,
                pending: 2,
            },
            None,
        )
        .with_latency(1_000)
        .with_eager(true);
        assert_eq!(drain(&mut e, 0), 0, "released at 0, on the wire at 1 us");
        assert_eq!(e.poll_timeout(), Some(1_000));
        e.handle_timeout(1_000);
        assert_eq!(drain(&mut e, 1_000), 2);
        // an answer at 2 us: the reply is taken from the endpoint then (eager), due at 3 us
        e.handle_packet(2_000, 1, &[]);
        assert_eq!(
            e.inner().pending,
            0,
            "taken from the endpoint on the receive"
        );
        assert_eq!(drain(&mut e, 2_500), 0);
        assert_eq!(e.poll_timeout(), Some(3_000));
        assert_eq!(drain(&mut e, 3_000), 1);
        // a NIC (no latency, not eager) passes every call through
        let mut nic = TxBuffered::new(
            Echo {
                left: 100,
                pending: 1,
            },
            None,
        );
        nic.handle_packet(0, 1, &[]);
        assert_eq!(
            nic.inner().pending,
            2,
            "a NIC's endpoint keeps its frames until asked"
        );
        assert_eq!(drain(&mut nic, 0), 2);
    }

    /// A closed loop of jobs of `job_packets` packets each, one packet outstanding: each result
    /// is answered by the job's next packet, or, once the job is complete, by the next job's
    /// first packet.
    struct Jobs {
        job_packets: u32,
        got: u32,
        jobs: u64,
        last_job: u64,
        pending: u32,
    }

    impl Endpoint for Jobs {
        fn id(&self) -> NodeId {
            0
        }
        fn handle_packet(&mut self, _now: Nanos, _from: NodeId, _frame: &[u8]) {
            self.got += 1;
            if self.got < self.job_packets {
                self.pending += 1;
            } else if self.jobs < self.last_job {
                self.got = 0;
                self.jobs += 1;
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

    /// Runs 6 jobs of `job_packets` packets through a 64-frame buffer with a 10 us drain, each
    /// result arriving 1 us after the previous packet left; gives (frames sent at once after
    /// their result, frames that waited, total wait).
    fn run_jobs(job_packets: u32, hook: bool) -> (u32, u64, u64) {
        let inner = Jobs {
            job_packets,
            got: 0,
            jobs: 1,
            last_job: 6,
            pending: 1,
        };
        let mut e = TxBuffered::new(inner, Some((64, 10_000)));
        if hook {
            e = e.with_jobs(|j: &Jobs| j.jobs);
        }
        let mut t = 0;
        assert_eq!(drain(&mut e, t), 1, "the first job's first packet");
        let mut at_once = 0;
        for _ in 1..6 * job_packets {
            t += 1_000;
            e.handle_packet(t, 1, &[]);
            if drain(&mut e, t) == 1 {
                at_once += 1;
                continue;
            }
            let due = e
                .poll_timeout()
                .expect("a buffered frame asks for its flush");
            assert!(due > t);
            t = due;
            e.handle_timeout(t);
            assert_eq!(drain(&mut e, t), 1, "the flush sends it");
        }
        (at_once, e.buffered, e.waited_ns)
    }

    /// The released client sends each job's first batch with `rte_eth_tx_burst` and buffers
    /// only what it sends in reply to results: a loop of one-packet jobs (P4SGD's all-reduces
    /// of 8 values) never waits for the drain, while a three-packet job's second and third
    /// packets do. Without job starts (one job for the whole run, the ina systems' model) every
    /// packet after the first would wait.
    #[test]
    fn each_jobs_first_batch_leaves_at_once_and_only_its_replies_wait() {
        assert_eq!(run_jobs(1, true), (5, 0, 0), "one-packet jobs never wait");
        let (at_once, buffered, waited) = run_jobs(3, true);
        assert_eq!(at_once, 5, "jobs 2..6 start at once");
        assert_eq!(buffered, 12, "two replies a job wait");
        assert!(
            waited >= 12 * 8_000,
            "each waits most of the drain: {waited} ns"
        );
        // the whole run as one job: every packet after the first waits
        let (at_once, buffered, _) = run_jobs(1, false);
        assert_eq!((at_once, buffered), (0, 5));
    }

    #[test]
    fn frames_are_striped_over_the_threads_buffers_each_draining_on_its_own() {
        let mut e = TxBuffered::with_lanes(
            Echo {
                left: 100,
                pending: 1,
            },
            Some((2, 10_000)),
            2,
        );
        assert_eq!(drain(&mut e, 0), 1, "the first batch is not buffered");
        // frames 1 and 3 go to buffer 0, frame 2 to buffer 1 (burst 2: one buffer has one)
        for t in [1_000, 2_000] {
            e.handle_packet(t, 1, &[]);
            assert_eq!(drain(&mut e, t), 0, "each buffer holds one frame");
        }
        e.handle_packet(3_000, 1, &[]);
        assert_eq!(
            drain(&mut e, 3_000),
            2,
            "buffer 0 full: frames 1 and 3 leave"
        );
        assert_eq!(e.waited_ns, 2_000);
        // buffer 1 still holds frame 2 until its own drain (its last flush was at 0)
        assert_eq!(e.poll_timeout(), Some(10_000));
        e.handle_timeout(10_000);
        assert_eq!(drain(&mut e, 10_000), 1);
        assert_eq!(e.waited_ns, 2_000 + 8_000);
        // buffer 0 flushed at 3 us: its next frame (frame 4) waits until 13 us, buffer 1's
        // frame 5 until 20 us
        e.handle_packet(11_000, 1, &[]);
        e.handle_packet(11_000, 1, &[]);
        assert_eq!(drain(&mut e, 11_000), 0);
        assert_eq!(e.poll_timeout(), Some(13_000));
        e.handle_timeout(13_000);
        assert_eq!(drain(&mut e, 13_000), 1);
        assert_eq!(e.poll_timeout(), Some(20_000));
        e.handle_timeout(20_000);
        assert_eq!(drain(&mut e, 20_000), 1);
        assert_eq!(e.buffered, 5);
        assert_eq!(e.waited_ns, 10_000 + 2_000 + 9_000);
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
        assert_eq!(HostStack::Dpdk(d).tx_lanes(), 4, "a buffer per thread");
        assert_eq!(
            HostStack::Dpdk(DpdkStack::release(sys("netreduce"), 1_000)).tx_lanes(),
            1,
            "an ordered transport keeps one buffer"
        );
        assert_eq!(HostStack::Measured(1_000).tx_lanes(), 1);
        assert_eq!(HostStack::Measured(1_000).frame_ns(), 1_000);
        assert_eq!(HostStack::Nic.frame_ns(), 0);
        let d = DpdkStack::with(sys("switchml"), 1_001, Some(2.0), Some(8.0), Some(2.5)).unwrap();
        assert_eq!((d.frame_ns(), d.tx_burst, d.drain_ns), (501, 8, 2_500));
        assert_eq!(d.lanes, 2, "the lanes follow the cores asked for");
        assert_eq!(
            DpdkStack::with(sys("switchml"), 1, Some(0.0), None, None),
            Err(StackError::NoCores(0.0))
        );
        assert_eq!(
            DpdkStack::with(sys("switchml"), 1, None, Some(0.5), None),
            Err(StackError::NoBurst(0.5))
        );
    }

    #[test]
    fn atp_runs_its_own_release_twelve_cores_and_no_buffer() {
        let d = DpdkStack::release(sys("atp"), 1_200);
        assert_eq!(d.cores, ATP_RELEASE_CORES);
        assert_eq!(d.frame_ns(), 100);
        assert_eq!(HostStack::Dpdk(d).tx_buffer(), None);
        // every other system keeps SwitchML's release
        let s = DpdkStack::release(sys("switchml"), 1_200);
        assert_eq!((s.frame_ns(), s.tx_burst), (300, 64));
        // a spec's override still applies on top of ATP's release
        let o = DpdkStack::with(sys("atp"), 1_200, Some(6.0), Some(16.0), None).unwrap();
        assert_eq!(
            HostStack::Dpdk(o).tx_buffer().map(|b| b.0),
            Some(16),
            "a 16-frame buffer asked for"
        );
        assert_eq!(o.frame_ns(), 200);
    }
}
