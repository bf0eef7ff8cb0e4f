//! What every Table 6 system offers the experiments: build the workers and the switch for an
//! all-reduce, run them on any fabric, read back each worker's result and the statistics.

pub use inabench_fabric::addresses::{AddressError, AddressPlan, NodeAddresses};
use inabench_fabric::{Endpoint, NodeId};

/// One all-reduce job.
#[derive(Debug, Clone)]
pub struct AllReduceConfig {
    /// Number of workers (Table 6: 6).
    pub workers: usize,
    /// Elements (int32) of each worker's gradient.
    pub elements: usize,
    /// Seed of the generated gradients (worker w's gradient is a function of seed and w).
    pub seed: u64,
    /// Link rate in bits per second (used by systems that pace or size windows by it).
    pub line_rate_bps: f64,
    /// Path MTU in bytes of IB payload (RoCEv2: 1024 in NetReduce's setup).
    pub mtu: usize,
    /// Retransmission timeout, nanoseconds.
    pub timeout_ns: u64,
    /// System-specific knobs as (name, value); each system documents the ones it reads and uses
    /// its paper's values by default (e.g. NetReduce window N=2, 170 packets per message).
    pub knobs: Vec<(String, f64)>,
}

impl AllReduceConfig {
    pub fn knob(&self, name: &str) -> Option<f64> {
        self.knobs.iter().find(|(k, _)| k == name).map(|(_, v)| *v)
    }
}

/// Link propagation latency (one way, host to accelerator): the paper does not give it; 0.5 us
/// stands for a rack-local cable and a switch hop.
pub const LINK_LATENCY_NS: u64 = 500;

/// The links of an all-reduce on `sim`: the config's rate and MTU (plus headers), 0.5 us, 4 MB of
/// egress queue, Ethernet framing. Data, not a driver: the fuzz body here and the sim drivers of
/// `inabench_ina_run::drive` build their fabric from it.
pub fn sim_link(cfg: &AllReduceConfig) -> inabench_fabric::sim::LinkConfig {
    inabench_fabric::sim::LinkConfig {
        rate_bps: cfg.line_rate_bps,
        latency_ns: LINK_LATENCY_NS,
        mtu: cfg.mtu + 128,
        queue_bytes: 4 << 20,
        framing_bytes: 24,
    }
}

/// Node ids: workers are 0..workers, the switch is `workers`, extra nodes (a parameter server
/// fallback) follow.
pub fn switch_id(cfg: &AllReduceConfig) -> NodeId {
    cfg.workers as NodeId
}

/// The generated gradient of worker `w`: seeded int32 values in a range that cannot overflow
/// when summed over up to 1024 workers.
pub fn gradient(seed: u64, w: usize, elements: usize) -> Vec<i32> {
    let mut g = gradient_stream(seed, w);
    (0..elements).map(|_| gradient_value(&mut g)).collect()
}

/// Worker `w`'s gradient generator (its values come from [`gradient_value`]).
fn gradient_stream(seed: u64, w: usize) -> inabench_rng::SplitMix64 {
    inabench_rng::SplitMix64::derive(seed, &format!("gradient/{w}"))
}

#[inline]
fn gradient_value(g: &mut inabench_rng::SplitMix64) -> i32 {
    ((g.next_u64() >> 40) as i32) - (1 << 23)
}

/// The reference all-reduce result: the exact element-wise sum over workers, wrapped to int32
/// as the workers' int32 sums wrap. Each worker's values are drawn and added in place (no
/// gradient held: a check of a 64 MiB all-reduce does not map six more 64 MiB vectors).
pub fn reference_sum(seed: u64, workers: usize, elements: usize) -> Vec<i32> {
    let mut acc = vec![0i32; elements];
    for w in 0..workers {
        let mut g = gradient_stream(seed, w);
        for a in acc.iter_mut() {
            *a = a.wrapping_add(gradient_value(&mut g));
        }
    }
    acc
}

/// The generated gradients of `cfg`'s workers, in rank order (what [`System::build`] hands
/// to [`System::build_with`]).
pub fn gradients(cfg: &AllReduceConfig) -> Vec<Vec<i32>> {
    (0..cfg.workers)
        .map(|r| gradient(cfg.seed, r, cfg.elements))
        .collect()
}

/// Write the Ethernet, IPv4 and UDP headers of a frame from `src` to `dst` (each a MAC and an
/// IPv4 address), UDP port `port` both ways, carrying `payload_len` bytes of UDP payload, at the
/// start of `frame` (`inabench_wire::node::emit_at`).
pub fn emit_udp(
    frame: &mut [u8],
    src: inabench_fabric::addresses::MacIp,
    dst: inabench_fabric::addresses::MacIp,
    port: u16,
    payload_len: usize,
) -> Result<(), inabench_wire::Error> {
    inabench_wire::node::emit_at(frame, src, dst, port, payload_len)
}

/// What a worker measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostStats {
    /// Bytes put on the wire (Ethernet frame bytes incl. headers and ICRC/FCS as the system sends).
    pub wire_bytes_tx: u64,
    /// Gradient bytes this worker contributed (elements x 4).
    pub gradient_bytes: u64,
    pub packets_tx: u64,
    pub packets_rx: u64,
    pub retransmissions: u64,
    pub malformed_rx: u64,
    /// Round-trip samples in ns: the first bit of a message's/chunk's first packet on the host's
    /// link (see [`TxClock`]) -> its result received.
    pub rtt_ns: Vec<u64>,
    /// For each RTT sample, the time that packet waited in the host's transmit queue before its
    /// first bit went out (behind earlier frames of the same host): reported apart, not in the RTT.
    pub rtt_queue_ns: Vec<u64>,
    /// When the worker started and finished, in fabric time (ns).
    pub start_ns: u64,
    pub end_ns: u64,
}

/// The host NIC's transmit queue as the host's code can know it: frames handed over leave back to
/// back at the line rate (with Ethernet's 24 bytes of preamble, delimiter, gap and FCS), so a
/// frame's first bit goes out when the frames handed over before it are done. RTTs are measured
/// from that moment, as a NIC timestamps a packet: the wait behind earlier frames of the same host
/// (e.g. NetReduce's previous 170-packet message) is queueing at the sender, reported apart.
#[derive(Debug, Clone, Copy, Default)]
pub struct TxClock {
    rate_bps: f64,
    free_at: u64,
}

impl TxClock {
    pub fn new(rate_bps: f64) -> Self {
        TxClock {
            rate_bps,
            free_at: 0,
        }
    }

    /// A frame of `len` bytes is handed over at `now`: when its first bit goes out.
    pub fn start(&mut self, now: u64, len: usize) -> u64 {
        let start = now.max(self.free_at);
        if self.rate_bps > 0.0 {
            let ser = ((len + 24) as f64 * 8.0 / self.rate_bps * 1e9).ceil() as u64;
            self.free_at = start + ser;
        }
        start
    }
}

/// What a switch program measured; "switch overhead" in Table 6 comes from these.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SwitchStats {
    pub packets_in: u64,
    pub packets_out: u64,
    /// Pipeline passes beyond the first (Tofino model).
    pub recirculations: u64,
    /// Bytes carried by recirculation (internal bandwidth consumed).
    pub recirculated_bytes: u64,
    pub bytes_in: u64,
    /// Switch ports the deployment occupies and the total it has (e.g. loopback ports).
    pub ports_used: u32,
    pub ports_total: u32,
    /// Fraction of the switch's bandwidth or ports the system consumes, with what it is.
    pub overhead_fraction: f64,
    pub overhead_kind: &'static str,
    pub dropped: u64,
    pub duplicates_ignored: u64,
}

/// A worker's host stack.
pub trait Worker: Endpoint {
    /// The aggregated gradient, once the all-reduce finished.
    fn result(&self) -> Option<Vec<i32>>;
    fn stats(&self) -> HostStats;
    /// Whether this worker finished with the right outcome: by default its result equals the
    /// reference sum of `cfg` (a transfer that is not an all-reduce checks what it delivered).
    fn check(&self, cfg: &AllReduceConfig) -> bool {
        self.result().as_deref() == Some(&reference_sum(cfg.seed, cfg.workers, cfg.elements)[..])
    }
}

/// A switch program on its target model.
pub trait Switch: Endpoint {
    fn stats(&self) -> SwitchStats;
}

/// A switch that only forwards (the ring's by destination IP, the RC stream's between its two
/// hosts): its counts as a switch's statistics.
impl Switch for inabench_fabric::Forwarder {
    fn stats(&self) -> SwitchStats {
        let s = inabench_fabric::Forwarder::stats(self);
        SwitchStats {
            packets_in: s.packets_in,
            bytes_in: s.bytes_in,
            packets_out: s.packets_out,
            dropped: s.dropped,
            ..SwitchStats::default()
        }
    }
}

/// The forwarding switch of the ring and the hierarchical all-reduce at a testbed's addresses:
/// [`inabench_fabric::Forwarder`] with `Route::Ipv4Table` (by the destination IPv4 address to the
/// worker the plan puts there; without a plan they keep `Route::Ipv4Dst`, which reads the worker
/// from the address's last byte). IPv4 over Ethernet II only; a frame to an address no worker of
/// the plan has is dropped. Switch `id` for the plan's first `workers` workers (refused where it
/// names fewer).
pub fn plan_forwarder(
    id: NodeId,
    plan: &AddressPlan,
    workers: usize,
) -> Result<inabench_fabric::Forwarder, SetupError> {
    plan.covers(workers)?;
    let table = (0..workers)
        .map(|w| {
            plan.worker(w).map(|a| a.ipv4).ok_or(AddressError::TooFew {
                have: w,
                need: workers,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(inabench_fabric::Forwarder::new(
        id,
        workers as u32,
        inabench_fabric::Route::Ipv4Table(table.into()),
    ))
}

/// A connection end `a` at NetReduce's synthetic numbering (worker `i` at 10.0.0.<i+1>,
/// [`crate::netreduce::worker_qp_addr`]) moved to the plan's worker `i`: its MAC and IPv4
/// address, the same QPN.
pub fn readdress(
    a: crate::roce::Addr,
    plan: &AddressPlan,
) -> Result<crate::roce::Addr, SetupError> {
    let i = usize::from(a.ip[3].wrapping_sub(1));
    let h = plan.worker(i).ok_or(AddressError::TooFew {
        have: plan.len().unwrap_or(0),
        need: i + 1,
    })?;
    Ok(crate::roce::Addr {
        mac: h.mac,
        ip: h.ipv4,
        qpn: a.qpn,
    })
}

/// An RC connection's four ends (its sender's and its responder's local and remote addresses)
/// moved from NetReduce's synthetic numbering to `plan` ([`readdress`]): the ring's and the
/// hierarchical all-reduce's workers at a testbed's addresses.
pub fn readdress_rc(
    send: &mut crate::roce::RcSender,
    recv: &mut crate::roce::RcResponder,
    plan: &AddressPlan,
) -> Result<(), SetupError> {
    send.local = readdress(send.local, plan)?;
    send.remote = readdress(send.remote, plan)?;
    recv.local = readdress(recv.local, plan)?;
    recv.remote = readdress(recv.remote, plan)?;
    Ok(())
}

/// The one check before [`readdress_rc`]: the ends are moved by their synthetic address's last
/// byte, so a job of more than 256 workers cannot be (`what` names the job in the sentence).
pub fn check_readdressable(
    what: &str,
    workers: usize,
    plan: Option<&AddressPlan>,
) -> Result<(), SetupError> {
    if plan.is_some() && workers > 256 {
        return Err(SetupError::Config(format!(
            "{what} at a testbed's addresses takes at most 256 workers (got {workers})"
        )));
    }
    Ok(())
}

/// The switch of a job whose switch only forwards between `workers` hosts on RC (the ring, the
/// hierarchical all-reduce): by destination IPv4 address, at `plan`'s ([`plan_forwarder`]) or,
/// without one, at NetReduce's synthetic numbering (host `n` at 10.0.0.(n+1), `Route::Ipv4Dst`).
pub fn forwarding_switch(
    id: NodeId,
    workers: usize,
    plan: Option<&AddressPlan>,
) -> Result<Box<dyn Switch>, SetupError> {
    Ok(match plan {
        Some(p) => Box::new(plan_forwarder(id, p, workers)?),
        None => Box::new(inabench_fabric::Forwarder::new(
            id,
            workers as u32,
            inabench_fabric::Route::Ipv4Dst,
        )),
    })
}

/// The nodes of one all-reduce.
pub struct Setup {
    pub workers: Vec<Box<dyn Worker>>,
    pub switch: Box<dyn Switch>,
    /// Any other nodes (e.g. ATP's parameter server fallback).
    pub others: Vec<Box<dyn Endpoint>>,
}

#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("{0}")]
    Config(String),
    /// The address plan given cannot address the job (too few workers, no switch address
    /// where the workers send to the switch, too few parameter servers).
    #[error("{0}")]
    Addresses(#[from] AddressError),
    /// An address plan was given to a system whose frames take none.
    #[error("{0} takes no address plan: its frames carry only its own synthetic addresses")]
    Unaddressed(&'static str),
}

/// How a system sums float32 values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloatSum {
    /// float32 additions where the values meet (NetReduce's accelerator, the ring's hosts).
    Native,
    /// Block floating point: a shared exponent per block agreed first, then integer sums
    /// (SwitchML on a Tofino).
    BlockFloat,
}

/// A Table 6 system.
pub trait System: Sync {
    /// snake_case id as in the specs: netreduce, switchml, switchml_rdma, atp.
    fn name(&self) -> &'static str;
    /// Build with the generated gradients of `cfg` (systems that take external inputs get
    /// this for free from [`System::build_with`]).
    fn build(&self, cfg: &AllReduceConfig) -> Result<Setup, SetupError> {
        let inputs = (0..cfg.workers)
            .map(|r| gradient(cfg.seed, r, cfg.elements))
            .collect();
        self.build_with(cfg, inputs)
    }
    /// Build with the generated gradients of `cfg`, every frame addressed from `plan` (a
    /// testbed's hosts' MACs and IPv4 addresses, [`AddressPlan`]) instead of the system's own
    /// synthetic plan; `None` is exactly [`System::build`]. A plan with fewer workers than
    /// `cfg`, or without a switch address where the system's workers send to the switch, is
    /// [`SetupError::Addresses`]; a system whose frames take no plan refuses one
    /// ([`SetupError::Unaddressed`]).
    fn build_at(
        &self,
        cfg: &AllReduceConfig,
        plan: Option<&AddressPlan>,
    ) -> Result<Setup, SetupError> {
        match plan {
            None => self.build(cfg),
            Some(_) => Err(SetupError::Unaddressed(self.name())),
        }
    }
    /// Links a frame crosses on its way to the aggregation and back beyond the star's two
    /// (host to switch, switch to host): 0 where the switch itself aggregates; 2 for an
    /// aggregator that hangs off the switch by its own ports, as NetReduce's FPGA does (Sec. 4,
    /// Fig. 5: switch to FPGA and back, the "two extra hops" of Sec. 5.2). The sim fabric charges
    /// each such link's latency and serialization (`inabench_ina_run::drive::Attached`).
    fn extra_links(&self) -> u32 {
        0
    }
    /// Whether the system's transport needs its packets in order: the RoCE-style ones (one queue
    /// pair's packet sequence numbers: NetReduce, SwitchML-RDMA, the ring, the RC stream). Such a
    /// system keeps one transmit buffer in a DPDK client (striping its frames over the threads'
    /// buffers would reorder them) and ran on a RoCE NIC in the paper's testbed.
    fn ordered_transport(&self) -> bool {
        false
    }
    /// The software client of this system on DPDK, at `core_frame_ns` a frame and core: the
    /// released client where one was read (SwitchML's, ATP's override this); by default a client
    /// priced as SwitchML's released one (the only other release read), keeping the protocol's
    /// own window and, for an ordered transport, one transmit buffer.
    fn dpdk_client(&self, core_frame_ns: u64) -> crate::hoststack::DpdkStack {
        crate::hoststack::DpdkStack::priced_as_switchml(core_frame_ns, self.ordered_transport())
    }
    /// The host stack the system had in the paper's testbed: the RoCE-style transports
    /// ([`System::ordered_transport`]: NetReduce, SwitchML-RDMA, and the ring all-reduce
    /// baseline, NCCL 2.4.7 over the testbed's RoCE NICs, the NetReduce paper's "Baselines"
    /// paragraph) run in the NIC (`nic`); ATP's and SwitchML's are their released software
    /// clients ("software multi-thread mode", Sec. 5.2): `dpdk`, the release's threads and
    /// transmit path ([`crate::hoststack`]).
    fn paper_host_stack(&self) -> &'static str {
        if self.ordered_transport() {
            "nic"
        } else {
            "dpdk"
        }
    }
    /// How many shards the switch runs as on the udp fabric for `cfg` (the spec's
    /// `switch_shards` knob where the system allows it, else the system's default); 1 unless the
    /// system can split its switch ([`System::shard_key`]).
    fn switch_shards(&self, _cfg: &AllReduceConfig) -> usize {
        1
    }
    /// The shard of a frame from a worker (a system whose switch can run as several shards
    /// says which shard a worker's frame goes to); `None`: the switch is one shard.
    fn shard_key(&self) -> Option<fn(&[u8]) -> usize> {
        None
    }
    /// Whether the fuzz body and the hostile-frame properties drive this system (an all-reduce
    /// with workers and a switch; the RC stream is a pair of hosts).
    fn fuzzed(&self) -> bool {
        true
    }
    /// The kinds of hostile frame the system is documented to be fooled by (the findings of the
    /// hostile-frame properties): with one in a fuzz schedule a wrong or unfinished result is
    /// that finding, not a failure.
    fn fuzz_findings(&self) -> &'static [inabench_fabric::fuzz::Kind] {
        &[]
    }
    /// Whether the system aggregates in the network (NetReduce's Table 6 compares these four);
    /// the ring all-reduce and the RC stream are host-only baselines.
    fn in_network(&self) -> bool {
        false
    }
    /// How the system sums float32 gradients in training (`inabench_ina_run::collective`): `None` where
    /// it does not.
    fn float_sum(&self) -> Option<FloatSum> {
        None
    }
    /// Metrics that follow from the system's layout for `cfg` and a run of `time_ns` (e.g.
    /// NetReduce's padding share, SwitchML's slot cycle), recorded where a spec declares them.
    fn layout_metrics(&self, _cfg: &AllReduceConfig, _time_ns: f64) -> Vec<(&'static str, f64)> {
        Vec::new()
    }
    /// Several jobs on one switch at once, each `(job id, its configuration)`: every job's
    /// workers in job order, the one switch, then each job's other nodes in job order (ATP's
    /// multi-tenant regime: one aggregator pool for every job). `None` (the default) where the
    /// system's switch holds one job's state.
    fn build_shared(&self, _jobs: &[(u16, &AllReduceConfig)]) -> Option<Result<Setup, SetupError>> {
        None
    }
    /// Node `node` of the setup for `cfg` (the order of [`Setup::into_nodes`]), alone. By
    /// default the whole setup is built and the rest dropped; a system whose nodes can be built
    /// on their own overrides this, so that a process per node (the udp fabric) builds only its
    /// own (for NetReduce at 64 MiB and six workers the whole setup is six gradients, six 64 MiB
    /// send buffers and six registered result buffers: ~1.5 s of CPU and 1 GiB per process).
    fn build_node(&self, cfg: &AllReduceConfig, node: usize) -> Result<SetupNode, SetupError> {
        let mut nodes = self.build(cfg)?.into_nodes();
        if node >= nodes.len() {
            return Err(SetupError::Config(format!(
                "node {node} of a {}-node setup",
                nodes.len()
            )));
        }
        Ok(nodes.swap_remove(node))
    }
    /// Node `node` of the setup for `cfg` at `plan`'s addresses ([`System::build_at`]), alone:
    /// what a process per node on a testbed's NICs builds. `None` is [`System::build_node`]
    /// exactly.
    fn build_node_at(
        &self,
        cfg: &AllReduceConfig,
        node: usize,
        plan: Option<&AddressPlan>,
    ) -> Result<SetupNode, SetupError> {
        let Some(plan) = plan else {
            return self.build_node(cfg, node);
        };
        let mut nodes = self.build_at(cfg, Some(plan))?.into_nodes();
        if node >= nodes.len() {
            return Err(SetupError::Config(format!(
                "node {node} of a {}-node setup",
                nodes.len()
            )));
        }
        Ok(nodes.swap_remove(node))
    }
    /// Build with the workers' inputs given (one vector of `elements` values per worker; float32
    /// bit patterns when the system sums floats) instead of generated gradients.
    fn build_with(
        &self,
        _cfg: &AllReduceConfig,
        _inputs: Vec<Vec<i32>>,
    ) -> Result<Setup, SetupError> {
        Err(SetupError::Config(format!(
            "{} takes no external inputs",
            self.name()
        )))
    }
}

/// One input of `elements` values per worker, or an error.
pub fn check_inputs(cfg: &AllReduceConfig, inputs: &[Vec<i32>]) -> Result<(), SetupError> {
    if inputs.len() != cfg.workers || inputs.iter().any(|v| v.len() != cfg.elements) {
        return Err(SetupError::Config(
            "one input of `elements` values per worker".into(),
        ));
    }
    Ok(())
}

/// A node of a [`Setup`] on a fabric: a worker or the switch (or another endpoint), fabric's one
/// role node. Its switch and other nodes count as done (`WAIT_ON_WORKERS`): a run waits on its
/// workers, and the switches keep `Endpoint`'s default `is_done`.
pub type SetupNode =
    inabench_fabric::Node<Box<dyn Worker>, Box<dyn Switch>, Box<dyn Endpoint>, true>;

impl Setup {
    /// The nodes in id order: workers 0..n, the switch n, then the others.
    pub fn into_nodes(self) -> Vec<SetupNode> {
        let mut v: Vec<SetupNode> = self.workers.into_iter().map(SetupNode::Worker).collect();
        v.push(SetupNode::Switch(self.switch));
        v.extend(self.others.into_iter().map(SetupNode::Other));
        v
    }
}

/// Retransmissions of all workers of a finished run.
pub fn total_retransmissions(nodes: &[SetupNode]) -> u64 {
    nodes
        .iter()
        .filter_map(|n| {
            if let SetupNode::Worker(w) = n {
                Some(w.stats().retransmissions)
            } else {
                None
            }
        })
        .sum()
}

/// The switch's statistics of a finished run.
pub fn switch_stats(nodes: &[SetupNode]) -> Option<SwitchStats> {
    nodes.iter().find_map(|n| match n {
        SetupNode::Switch(s) => Some(s.stats()),
        _ => None,
    })
}

/// A counter summed over every node of a finished run.
pub fn counter_sum(nodes: &[SetupNode], name: &str) -> u64 {
    nodes
        .iter()
        .flat_map(|n| n.counters())
        .filter(|(k, _)| *k == name)
        .map(|(_, v)| v)
        .sum()
}

/// Aggregation kernels: one value per 4 big-endian bytes, slice at a time, written as plain
/// loops over `chunks_exact` that LLVM vectorises (byte swap and add/max on whole vector
/// registers; no intrinsics). The semantics are the scalar ones exactly: int32 sums wrap, f32
/// sums add in the order the calls are made (one rounding per add, as the scalar fold).
///
/// On x86-64 each loop is compiled twice: for the build's baseline target (SSE2, where the byte
/// swap takes unpacks and word shuffles: `objdump -d` showed `punpcklbw`/`pshuflw`/`packuswb`
/// per 4 values) and with AVX2 (`vpshufb` and `vpaddd` on 8 values), the second picked at run
/// time when the CPU has AVX2 (`is_x86_feature_detected!`, cached by std). The same source
/// loop, so the same results; the test runs both.
pub mod kernel {
    macro_rules! kernels {
        ($( $(#[$m:meta])* fn $name:ident($($a:ident: $at:ty),*) $body:block )*) => {
            /// The kernels for the build's baseline target.
            pub(crate) mod portable {
                $( $(#[$m])* #[inline] pub fn $name($($a: $at),*) $body )*
            }
            /// The same loops compiled with AVX2 (callers check the CPU first).
            #[cfg(target_arch = "x86_64")]
            mod avx2 {
                $( #[target_feature(enable = "avx2")] pub fn $name($($a: $at),*) $body )*
            }
            $(
                $(#[$m])*
                #[inline]
                pub fn $name($($a: $at),*) {
                    #[cfg(target_arch = "x86_64")]
                    if std::arch::is_x86_feature_detected!("avx2") {
                        // SAFETY: the CPU has AVX2, checked just above; the function is the
                        // portable one's source compiled for it (no other requirement).
                        return unsafe { avx2::$name($($a),*) };
                    }
                    portable::$name($($a),*)
                }
            )*
        };
    }

    kernels! {
        /// `acc[i] = acc[i].wrapping_add(x)` for the `i`-th big-endian int32 of `be`.
        fn add_be_i32(acc: &mut [i32], be: &[u8]) {
            for (a, c) in acc.iter_mut().zip(be.chunks_exact(4)) {
                *a = a.wrapping_add(i32::from_be_bytes([c[0], c[1], c[2], c[3]]));
            }
        }

        /// [`add_be_i32`] that also writes the new `acc` as big-endian int32s into `out` (a
        /// completed aggregate's result row, in the same pass over the values).
        fn add_be_i32_store(acc: &mut [i32], be: &[u8], out: &mut [u8]) {
            for ((a, c), o) in acc.iter_mut().zip(be.chunks_exact(4)).zip(out.chunks_exact_mut(4)) {
                *a = a.wrapping_add(i32::from_be_bytes([c[0], c[1], c[2], c[3]]));
                o.copy_from_slice(&a.to_be_bytes());
            }
        }

        /// [`max_be_i32`] that also writes the new `acc` as big-endian int32s into `out`.
        fn max_be_i32_store(acc: &mut [i32], be: &[u8], out: &mut [u8]) {
            for ((a, c), o) in acc.iter_mut().zip(be.chunks_exact(4)).zip(out.chunks_exact_mut(4)) {
                *a = (*a).max(i32::from_be_bytes([c[0], c[1], c[2], c[3]]));
                o.copy_from_slice(&a.to_be_bytes());
            }
        }

        /// `acc[i] = acc[i].max(x)` for the `i`-th big-endian int32 of `be`.
        fn max_be_i32(acc: &mut [i32], be: &[u8]) {
            for (a, c) in acc.iter_mut().zip(be.chunks_exact(4)) {
                *a = (*a).max(i32::from_be_bytes([c[0], c[1], c[2], c[3]]));
            }
        }

        /// `acc[i] = acc[i] + x` for the `i`-th big-endian float32 of `be`.
        fn add_be_f32(acc: &mut [f32], be: &[u8]) {
            for (a, c) in acc.iter_mut().zip(be.chunks_exact(4)) {
                *a += f32::from_be_bytes([c[0], c[1], c[2], c[3]]);
            }
        }

        /// `acc[i] = x` for the `i`-th big-endian int32 of `be`.
        fn load_be_i32(acc: &mut [i32], be: &[u8]) {
            for (a, c) in acc.iter_mut().zip(be.chunks_exact(4)) {
                *a = i32::from_be_bytes([c[0], c[1], c[2], c[3]]);
            }
        }

        /// Write `vals` as big-endian int32s into `out` (4 bytes each).
        fn store_be_i32(out: &mut [u8], vals: &[i32]) {
            for (c, v) in out.chunks_exact_mut(4).zip(vals) {
                c.copy_from_slice(&v.to_be_bytes());
            }
        }

        /// Write `vals` as big-endian float32s into `out` (4 bytes each).
        fn store_be_f32(out: &mut [u8], vals: &[f32]) {
            for (c, v) in out.chunks_exact_mut(4).zip(vals) {
                c.copy_from_slice(&v.to_bits().to_be_bytes());
            }
        }

        /// `acc[i] = acc[i].wrapping_add(x[i])`.
        fn add_i32(acc: &mut [i32], x: &[i32]) {
            for (a, v) in acc.iter_mut().zip(x) {
                *a = a.wrapping_add(*v);
            }
        }

        /// `acc[i] = acc[i].max(x[i])`.
        fn max_i32(acc: &mut [i32], x: &[i32]) {
            for (a, v) in acc.iter_mut().zip(x) {
                *a = (*a).max(*v);
            }
        }
    }

    /// Whether an IPv4 header (`h`: the header's bytes, as IHL makes them) verifies: its RFC 1071
    /// checksum over the header is zero, as `ipv4::Packet::verify_checksum` computes it. A
    /// header's length is a multiple of 4: one pass of 32-bit words summed in 64 bits (the ones'
    /// complement sum is the same over 32-bit words as over 16-bit ones, 2^16 = 1 mod 2^16 - 1,
    /// and the byte order of the loads does not change whether it folds to 0xffff: RFC 1071
    /// Sec. 2(B), a byte-swapped sum is the swapped sum, and 0xffff swaps to itself). Any other
    /// length takes 16-bit words, the odd byte padded with zero, as the wire crate does.
    #[inline]
    pub fn ipv4_header_ok(h: &[u8]) -> bool {
        let mut s: u64 = 0;
        if let Ok(h) = <&[u8; 20]>::try_from(h) {
            // the header without options (every frame of this suite): a fixed, unrolled loop
            for w in h.chunks_exact(4) {
                s += u64::from(u32::from_ne_bytes([w[0], w[1], w[2], w[3]]));
            }
        } else if h.len().is_multiple_of(4) {
            for w in h.chunks_exact(4) {
                s += u64::from(u32::from_ne_bytes([w[0], w[1], w[2], w[3]]));
            }
        } else {
            let mut c = h.chunks_exact(2);
            for w in &mut c {
                s += u64::from(u16::from_be_bytes([w[0], w[1]]));
            }
            if let [last] = c.remainder() {
                s += u64::from(*last) << 8;
            }
        }
        let s = (s & 0xffff_ffff) + (s >> 32);
        let s = (s & 0xffff_ffff) + (s >> 32);
        let s = (s & 0xffff) + (s >> 16);
        let s = (s & 0xffff) + (s >> 16);
        let s = (s & 0xffff) + (s >> 16);
        s == 0xffff
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernels against a per-element scalar reference on random inputs, overflow edges
    /// included (i32::MIN/MAX, -0.0, NaN, infinities, subnormals) and lengths that are not a
    /// multiple of a vector register.
    #[test]
    fn kernels_match_the_scalar_reference() {
        for (which, k) in [
            ("dispatched", Kernels::DISPATCHED),
            ("portable", Kernels::PORTABLE),
        ] {
            kernels_match(which, &k);
        }
    }

    /// The kernels of one implementation (the dispatched ones use AVX2 on a CPU that has it).
    struct Kernels {
        add_be_i32: fn(&mut [i32], &[u8]),
        max_be_i32: fn(&mut [i32], &[u8]),
        add_be_f32: fn(&mut [f32], &[u8]),
        load_be_i32: fn(&mut [i32], &[u8]),
        store_be_i32: fn(&mut [u8], &[i32]),
        store_be_f32: fn(&mut [u8], &[f32]),
        add_i32: fn(&mut [i32], &[i32]),
        max_i32: fn(&mut [i32], &[i32]),
        add_be_i32_store: fn(&mut [i32], &[u8], &mut [u8]),
        max_be_i32_store: fn(&mut [i32], &[u8], &mut [u8]),
    }

    impl Kernels {
        const DISPATCHED: Kernels = Kernels {
            add_be_i32: kernel::add_be_i32,
            max_be_i32: kernel::max_be_i32,
            add_be_f32: kernel::add_be_f32,
            load_be_i32: kernel::load_be_i32,
            store_be_i32: kernel::store_be_i32,
            store_be_f32: kernel::store_be_f32,
            add_i32: kernel::add_i32,
            max_i32: kernel::max_i32,
            add_be_i32_store: kernel::add_be_i32_store,
            max_be_i32_store: kernel::max_be_i32_store,
        };
        const PORTABLE: Kernels = Kernels {
            add_be_i32: kernel::portable::add_be_i32,
            max_be_i32: kernel::portable::max_be_i32,
            add_be_f32: kernel::portable::add_be_f32,
            load_be_i32: kernel::portable::load_be_i32,
            store_be_i32: kernel::portable::store_be_i32,
            store_be_f32: kernel::portable::store_be_f32,
            add_i32: kernel::portable::add_i32,
            max_i32: kernel::portable::max_i32,
            add_be_i32_store: kernel::portable::add_be_i32_store,
            max_be_i32_store: kernel::portable::max_be_i32_store,
        };
    }

    fn kernels_match(which: &str, k: &Kernels) {
        use inabench_rng::SplitMix64;
        let edges_i = [i32::MIN, i32::MAX, -1, 0, 1, i32::MIN + 1, i32::MAX - 1];
        let edges_f = [
            0.0f32,
            -0.0,
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MAX,
            f32::MIN,
            f32::MIN_POSITIVE / 4.0,
            1e-45,
        ];
        let mut g = SplitMix64::new(7);
        for len in [
            0usize, 1, 3, 4, 7, 8, 15, 16, 17, 31, 62, 63, 64, 65, 256, 257,
        ] {
            let draw_i = |g: &mut SplitMix64| -> i32 {
                if g.next_u64().is_multiple_of(4) {
                    edges_i[(g.next_u64() % edges_i.len() as u64) as usize]
                } else {
                    g.next_u64() as i32
                }
            };
            let draw_f = |g: &mut SplitMix64| -> f32 {
                if g.next_u64().is_multiple_of(4) {
                    edges_f[(g.next_u64() % edges_f.len() as u64) as usize]
                } else {
                    f32::from_bits(g.next_u64() as u32)
                }
            };
            let a: Vec<i32> = (0..len).map(|_| draw_i(&mut g)).collect();
            let x: Vec<i32> = (0..len).map(|_| draw_i(&mut g)).collect();
            let be: Vec<u8> = x.iter().flat_map(|v| v.to_be_bytes()).collect();
            let mut got = a.clone();
            (k.add_be_i32)(&mut got, &be);
            let want: Vec<i32> = a.iter().zip(&x).map(|(p, q)| p.wrapping_add(*q)).collect();
            assert_eq!(got, want, "add_be_i32 len {len} ({which})");
            let mut got = a.clone();
            (k.add_i32)(&mut got, &x);
            assert_eq!(got, want, "add_i32 len {len} ({which})");
            let mut got = a.clone();
            let mut row = vec![0xa5u8; 4 * len];
            (k.add_be_i32_store)(&mut got, &be, &mut row);
            assert_eq!(got, want, "add_be_i32_store len {len} ({which})");
            let want_be: Vec<u8> = want.iter().flat_map(|v| v.to_be_bytes()).collect();
            assert_eq!(row, want_be, "add_be_i32_store's row len {len} ({which})");
            let want: Vec<i32> = a.iter().zip(&x).map(|(p, q)| *p.max(q)).collect();
            let mut got = a.clone();
            let mut row = vec![0xa5u8; 4 * len];
            (k.max_be_i32_store)(&mut got, &be, &mut row);
            assert_eq!(got, want, "max_be_i32_store len {len} ({which})");
            let want_be: Vec<u8> = want.iter().flat_map(|v| v.to_be_bytes()).collect();
            assert_eq!(row, want_be, "max_be_i32_store's row len {len} ({which})");
            let mut got = a.clone();
            (k.max_be_i32)(&mut got, &be);
            assert_eq!(got, want, "max_be_i32 len {len} ({which})");
            let mut got = a.clone();
            (k.max_i32)(&mut got, &x);
            assert_eq!(got, want, "max_i32 len {len} ({which})");
            let mut got = a.clone();
            (k.load_be_i32)(&mut got, &be);
            assert_eq!(got, x, "load_be_i32 len {len} ({which})");
            let mut out = vec![0u8; 4 * len];
            (k.store_be_i32)(&mut out, &x);
            assert_eq!(out, be, "store_be_i32 len {len} ({which})");

            let af: Vec<f32> = (0..len).map(|_| draw_f(&mut g)).collect();
            let xf: Vec<f32> = (0..len).map(|_| draw_f(&mut g)).collect();
            let bef: Vec<u8> = xf.iter().flat_map(|v| v.to_bits().to_be_bytes()).collect();
            let mut got = af.clone();
            (k.add_be_f32)(&mut got, &bef);
            let want: Vec<u32> = af.iter().zip(&xf).map(|(p, q)| (p + q).to_bits()).collect();
            let got: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
            assert_eq!(got, want, "add_be_f32 len {len} ({which})");
            let mut out = vec![0u8; 4 * len];
            (k.store_be_f32)(&mut out, &xf);
            assert_eq!(out, bef, "store_be_f32 len {len} ({which})");
        }
    }

    /// The one-pass IPv4 header check against the wire crate's checksum (zero over the header
    /// means it verifies) on random headers of every length 0 to 60, each with its checksum
    /// field filled in (valid) and then one bit changed (invalid), and on the all-ones and
    /// all-zero edge cases.
    #[test]
    fn ipv4_header_ok_is_the_wire_checksum_check() {
        use inabench_rng::SplitMix64;
        let mut g = SplitMix64::new(1071);
        let (mut ok, mut bad) = (0, 0);
        for len in 0..=60usize {
            for _ in 0..200 {
                let mut h: Vec<u8> = (0..len).map(|_| g.next_u64() as u8).collect();
                if len >= 12 && !g.next_u64().is_multiple_of(4) {
                    h[10..12].fill(0);
                    let c = inabench_wire::ipv4::checksum(&h);
                    h[10..12].copy_from_slice(&c.to_be_bytes());
                }
                let want = inabench_wire::ipv4::checksum(&h) == 0;
                assert_eq!(kernel::ipv4_header_ok(&h), want, "{h:02x?}");
                ok += usize::from(want);
                bad += usize::from(!want);
                if len > 0 {
                    let i = (g.next_u64() % len as u64) as usize;
                    h[i] ^= 1 << (g.next_u64() % 8);
                    let want = inabench_wire::ipv4::checksum(&h) == 0;
                    assert_eq!(kernel::ipv4_header_ok(&h), want, "{h:02x?}");
                }
            }
            for b in [0x00u8, 0xff] {
                let h = vec![b; len];
                let want = inabench_wire::ipv4::checksum(&h) == 0;
                assert_eq!(kernel::ipv4_header_ok(&h), want, "{len} bytes of {b:#x}");
            }
        }
        assert!(ok > 1000 && bad > 1000, "{ok} valid, {bad} invalid");
    }

    #[test]
    fn reference_sum_is_the_sum() {
        let r = reference_sum(3, 4, 100);
        let manual: Vec<i32> = (0..100)
            .map(|i| (0..4).map(|w| gradient(3, w, 100)[i]).sum())
            .collect();
        assert_eq!(r, manual);
        // many workers: the same as a 64-bit sum cast to int32 (what the reference was before
        // it summed in place; int32 wrapping addition is that sum modulo 2^32)
        let (workers, n) = (300, 64);
        let wide: Vec<i32> = (0..n)
            .map(|i| {
                (0..workers)
                    .map(|w| i64::from(gradient(5, w, n)[i]))
                    .sum::<i64>() as i32
            })
            .collect();
        assert_eq!(reference_sum(5, workers, n), wide);
        assert_ne!(gradient(3, 0, 10), gradient(3, 1, 10));
        assert!(gradient(3, 0, 1000).iter().all(|x| x.abs() <= 1 << 23));
    }
}
