//! Driving the all-reduce systems on the `sim` fabric, and measuring a software host stack's
//! cost per frame on this machine ([`measure_frame_ns`]: what `inabench calibrate` writes into a
//! host profile; a run never measures, it charges the profile's declared costs). Shared by the
//! workloads of every paper that runs these systems (NetReduce's Table 6, Libra, LuWu); no
//! harness types here. Experiment machinery, so out of the protocol crate: `inabench_ina` keeps
//! the systems and the link model they run on ([`sim_link`], re-exported here).

use inabench_fabric::fault::Faults;
use inabench_fabric::sim::{LinkConfig, NodeConfig};
use inabench_fabric::wrap::{CpuMeter, Timed};
use inabench_fabric::{Endpoint, Fabric, FabricReport, Sim, Until};
use inabench_ina::RunError;
use inabench_ina::common::{AllReduceConfig, SetupNode, System};
use inabench_ina::hoststack::{CoreCosts, HostStack, StackError, StackStats, TxBuffered};

/// The links of an all-reduce on `sim` and their latency: the systems' link model.
pub use inabench_ina::common::{LINK_LATENCY_NS, sim_link};
/// A system by its spec name ([`inabench_ina::SYSTEMS`]).
pub use inabench_ina::system;

/// Run one all-reduce on the sim fabric.
pub fn run_sim(
    sys: &dyn System,
    cfg: &AllReduceConfig,
    faults: Faults,
    host_cost_ns: u64,
    max_ns: u64,
) -> Result<(Vec<SetupNode>, FabricReport), RunError> {
    run_sim_tapped(sys, cfg, faults, host_cost_ns, max_ns, None)
}

/// As [`run_sim`], writing every frame put on a link to `pcap` (virtual timestamps).
pub fn run_sim_tapped(
    sys: &dyn System,
    cfg: &AllReduceConfig,
    faults: Faults,
    host_cost_ns: u64,
    max_ns: u64,
    pcap: Option<&std::path::Path>,
) -> Result<(Vec<SetupNode>, FabricReport), RunError> {
    run_sim_stack(
        sys,
        cfg,
        faults,
        &HostStack::Measured(host_cost_ns),
        max_ns,
        pcap,
    )
    .map(|(n, r, _)| (n, r))
}

/// What [`run_sim_stack`] runs, built and not yet run: `sys` built for `cfg` with the released
/// client's own protocol settings added (`stack`'s client knobs: SwitchML's pool under its DPDK
/// client), an aggregator behind the switch on its own links where the system has one
/// ([`Attached`]); with the configuration it was built for. A caller that must tell the
/// system's refusal of a point from a failed run (the benchmark family) builds with this and
/// runs with [`run_setup_sim_stack`].
pub fn build_for_sim(
    sys: &dyn System,
    cfg: &AllReduceConfig,
    stack: &HostStack,
) -> Result<(inabench_ina::common::Setup, AllReduceConfig), inabench_ina::common::SetupError> {
    prepare_for_sim(sys, cfg, stack, |cfg| sys.build(cfg))
}

/// [`build_for_sim`] with the workers' inputs given ([`System::build_with`]) instead of the
/// system's generated gradients.
pub fn build_for_sim_with(
    sys: &dyn System,
    cfg: &AllReduceConfig,
    stack: &HostStack,
    inputs: Vec<Vec<i32>>,
) -> Result<(inabench_ina::common::Setup, AllReduceConfig), inabench_ina::common::SetupError> {
    prepare_for_sim(sys, cfg, stack, |cfg| sys.build_with(cfg, inputs))
}

fn prepare_for_sim(
    sys: &dyn System,
    cfg: &AllReduceConfig,
    stack: &HostStack,
    build: impl FnOnce(
        &AllReduceConfig,
    ) -> Result<inabench_ina::common::Setup, inabench_ina::common::SetupError>,
) -> Result<(inabench_ina::common::Setup, AllReduceConfig), inabench_ina::common::SetupError> {
    let mut cfg = cfg.clone();
    let extra = stack.client_knobs(&cfg);
    cfg.knobs.extend(extra);
    let mut setup = build(&cfg)?;
    let links = sys.extra_links();
    if links > 0 {
        setup.switch = Box::new(Attached::new(setup.switch, links, &sim_link(&cfg)));
    }
    Ok((setup, cfg))
}

/// Run one all-reduce on the sim fabric with the hosts' stack as `stack` says (its service
/// time per frame and its transmit buffer, [`inabench_ina::hoststack`]); every frame put on a link
/// goes to `pcap` if given.
pub fn run_sim_stack(
    sys: &dyn System,
    cfg: &AllReduceConfig,
    faults: Faults,
    stack: &HostStack,
    max_ns: u64,
    pcap: Option<&std::path::Path>,
) -> Result<(Vec<SetupNode>, FabricReport, StackStats), RunError> {
    let (setup, cfg) = build_for_sim(sys, cfg, stack)?;
    let cfg = &cfg;
    let mut fabric = sim_driver(
        cfg,
        faults,
        stack,
        setup.workers.len() + 1 + setup.others.len(),
    );
    if let Some(path) = pcap {
        let write = |cause| RunError::Write {
            path: path.to_path_buf(),
            cause,
        };
        let file = std::fs::File::create(path).map_err(write)?;
        let mut w =
            inabench_wire::pcap::PcapWriter::new(std::io::BufWriter::new(file)).map_err(write)?;
        // a write error stops the capture, not the run
        let mut ok = true;
        fabric.tap = Some(Box::new(move |t, _from, _to, frame| {
            if ok && w.write_packet(t, frame).is_err() {
                ok = false;
            }
        }));
    }
    run_wrapped(&mut fabric, setup, stack, max_ns)
}

/// Run one all-reduce on the sim fabric with every frame addressed from `plan` (a testbed's
/// hosts' addresses, [`System::build_at`]; None: the system's own synthetic plan, as
/// [`run_sim`]), every frame put on a link handed to `tap` if given (time, from, to, frame).
pub fn run_sim_at(
    sys: &dyn System,
    cfg: &AllReduceConfig,
    plan: Option<&inabench_ina::common::AddressPlan>,
    faults: Faults,
    max_ns: u64,
    tap: Option<inabench_fabric::sim::Tap>,
) -> Result<(Vec<SetupNode>, FabricReport), RunError> {
    let stack = HostStack::Measured(0);
    let (setup, cfg) = prepare_for_sim(sys, cfg, &stack, |cfg| sys.build_at(cfg, plan))?;
    let mut fabric = sim_driver(
        &cfg,
        faults,
        &stack,
        setup.workers.len() + 1 + setup.others.len(),
    );
    fabric.tap = tap;
    run_wrapped(&mut fabric, setup, &stack, max_ns).map(|(n, r, _)| (n, r))
}

/// An aggregator that hangs off the star's switch by links of its own (NetReduce's FPGA behind
/// the Ethernet switch, [`System::extra_links`]): every frame it sends leaves after `links` more
/// link crossings than the star alone charges, each the link's latency plus the frame's
/// serialization at the link's rate (a gradient packet's crossing to the accelerator and its
/// result's crossing back, charged together on the way out: the frames are the same size, and
/// the accelerator has a port per worker, so nothing queues there). Sans-IO: frames wait in a
/// queue ordered by the time they are due, reported through `poll_timeout`.
pub struct Attached {
    inner: Box<dyn inabench_ina::common::Switch>,
    links: u64,
    link: LinkConfig,
    /// (due, order, frame), in due order
    out: std::collections::VecDeque<(u64, u64, inabench_fabric::Transmit)>,
    seq: u64,
}

impl Attached {
    pub fn new(
        inner: Box<dyn inabench_ina::common::Switch>,
        links: u32,
        link: &LinkConfig,
    ) -> Attached {
        Attached {
            inner,
            links: u64::from(links),
            link: *link,
            out: std::collections::VecDeque::new(),
            seq: 0,
        }
    }

    /// The extra time a frame of `len` bytes takes: `links` x (latency + serialization).
    pub fn delay_ns(&self, len: usize) -> u64 {
        let ser = ((len + self.link.framing_bytes) as f64 * 8.0 / self.link.rate_bps * 1e9).ceil();
        self.links * (self.link.latency_ns + ser as u64)
    }

    /// Move what the aggregator sends at `now` into the queue.
    fn take(&mut self, now: u64) {
        while let Some(t) = self.inner.poll_transmit(now) {
            let due = now + self.delay_ns(t.bytes.len());
            self.seq += 1;
            let at = self
                .out
                .partition_point(|(d, s, _)| (*d, *s) <= (due, self.seq));
            self.out.insert(at, (due, self.seq, t));
        }
    }
}

impl Endpoint for Attached {
    fn id(&self) -> inabench_fabric::NodeId {
        self.inner.id()
    }
    fn handle_packet(&mut self, now: u64, from: inabench_fabric::NodeId, frame: &[u8]) {
        self.inner.handle_packet(now, from, frame);
        self.take(now);
    }
    fn poll_transmit(&mut self, now: u64) -> Option<inabench_fabric::Transmit> {
        self.take(now);
        match self.out.front() {
            Some((due, _, _)) if *due <= now => self.out.pop_front().map(|(_, _, t)| t),
            _ => None,
        }
    }
    fn poll_timeout(&self) -> Option<u64> {
        let mine = self.out.front().map(|(d, _, _)| *d);
        match (self.inner.poll_timeout(), mine) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
    fn handle_timeout(&mut self, now: u64) {
        if self.inner.poll_timeout().is_some_and(|t| t <= now) {
            self.inner.handle_timeout(now);
        }
        self.take(now);
    }
    fn is_done(&self) -> bool {
        self.inner.is_done()
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        self.inner.counters()
    }
    fn recycle(&mut self, buf: Vec<u8>) {
        self.inner.recycle(buf);
    }
}

impl inabench_ina::common::Switch for Attached {
    fn stats(&self) -> inabench_ina::common::SwitchStats {
        self.inner.stats()
    }
}

/// The nodes back from the fabric, and what their transmit buffers held.
fn unwrap_nodes(nodes: Vec<TxBuffered<SetupNode>>) -> (Vec<SetupNode>, StackStats) {
    let mut st = StackStats::default();
    let nodes = nodes
        .into_iter()
        .map(|n| {
            st.buffered += n.buffered;
            st.waited_ns += n.waited_ns;
            n.into_inner()
        })
        .collect();
    (nodes, st)
}

/// The sim fabric for a setup of `nodes` nodes: the switch at node `workers`; hosts charged the
/// stack's service time per frame; links at the config's rate with 0.5 us latency.
fn sim_driver(cfg: &AllReduceConfig, faults: Faults, stack: &HostStack, nodes: usize) -> Sim {
    let cost = stack.frame_ns();
    let mut costs = vec![
        NodeConfig {
            rx_cost_ns: cost,
            tx_cost_ns: cost
        };
        nodes
    ];
    if let Some(switch) = costs.get_mut(cfg.workers) {
        *switch = NodeConfig {
            rx_cost_ns: 0,
            tx_cost_ns: 0,
        };
    }
    let mut f = Sim::new(sim_link(cfg), cfg.workers as u32);
    f.costs = costs;
    f.faults = faults;
    f.rates = slow_links(cfg);
    f
}

/// The knobs `slow_workers` (k) and `slow_link_gbps` (g), read for every system: the last k
/// workers' links to the switch run at g Gbps both ways, the others at the config's rate (a star
/// of hosts with links of different speeds, the benchmark's heterogeneous regime; ALEPH's
/// testbed mixes such hosts). Neither knob: every link at the config's rate (empty).
pub fn slow_links(cfg: &AllReduceConfig) -> Vec<Option<f64>> {
    match (cfg.knob("slow_workers"), cfg.knob("slow_link_gbps")) {
        (Some(k), Some(g)) if k >= 1.0 && g > 0.0 => {
            let k = (k as usize).min(cfg.workers);
            (0..cfg.workers)
                .map(|i| (i >= cfg.workers - k).then_some(g * 1e9))
                .collect()
        }
        _ => Vec::new(),
    }
}

/// Run a built setup on `fabric` until every node is done or `max_ns` of virtual time: the
/// hosts send through the stack's transmit buffer with a DPDK stack
/// ([`inabench_ina::hoststack::TxBuffered`]).
fn run_wrapped(
    fabric: &mut Sim,
    setup: inabench_ina::common::Setup,
    stack: &HostStack,
    max_ns: u64,
) -> Result<(Vec<SetupNode>, FabricReport, StackStats), RunError> {
    let nodes: Vec<TxBuffered<SetupNode>> = setup
        .into_nodes()
        .into_iter()
        .map(|n| {
            let host = matches!(n, SetupNode::Worker(_));
            TxBuffered::with_lanes(
                n,
                if host { stack.tx_buffer() } else { None },
                stack.tx_lanes(),
            )
            .with_latency(if host { stack.tx_latency() } else { 0 })
            .with_eager(host && matches!(stack, HostStack::Dpdk(_)))
        })
        .collect();
    // every node counted: a node that is not a worker is always done
    let until = Until {
        counted: vec![true; nodes.len()],
        limit_ns: max_ns,
    };
    let (nodes, rep) = fabric.run(nodes, &until)?;
    let (nodes, st) = unwrap_nodes(nodes);
    Ok((nodes, rep, st))
}

/// Run an already built setup (e.g. one made with [`System::build_with`]) on the sim fabric.
pub fn run_setup_sim(
    setup: inabench_ina::common::Setup,
    cfg: &AllReduceConfig,
    faults: Faults,
    host_cost_ns: u64,
    max_ns: u64,
) -> Result<(Vec<SetupNode>, FabricReport), RunError> {
    let (nodes, rep, _) = run_setup_sim_stack(
        setup,
        cfg,
        faults,
        &HostStack::Measured(host_cost_ns),
        max_ns,
    )?;
    Ok((nodes, rep))
}

/// As [`run_setup_sim`] with the hosts' stack as `stack` says.
pub fn run_setup_sim_stack(
    setup: inabench_ina::common::Setup,
    cfg: &AllReduceConfig,
    faults: Faults,
    stack: &HostStack,
    max_ns: u64,
) -> Result<(Vec<SetupNode>, FabricReport, StackStats), RunError> {
    let n = setup.workers.len() + 1 + setup.others.len();
    let mut fabric = sim_driver(cfg, faults, stack, n);
    run_wrapped(&mut fabric, setup, stack, max_ns)
}

/// The host stack a spec names for a system (`host_stack`: `nic`, `measured` (or its older
/// name `software`), `dpdk`, or `paper`: what the system had in the paper's testbed, see
/// [`System::paper_host_stack`]), priced by `costs`, the host profile's cost per frame and core and
/// thread count for the system's software client (needed by every stack but `nic`):
/// `measured` runs it on one thread, `dpdk` on the released client's threads with its
/// transmit buffer ([`inabench_ina::hoststack::DpdkStack::from_costs`]: ATP's release for `atp`,
/// SwitchML's for every other system), `cores`, `tx_burst` and `drain_us` override those.
pub fn host_stack_for(
    sys: &dyn System,
    name: Option<&str>,
    costs: Option<CoreCosts>,
    cores: Option<f64>,
    tx_burst: Option<f64>,
    drain_us: Option<f64>,
) -> Result<HostStack, StackError> {
    let name = match name {
        None | Some("paper") => sys.paper_host_stack(),
        Some(n) => n,
    };
    let need = |stack: &str| {
        costs.ok_or_else(|| StackError::NoCosts {
            system: sys.name().to_string(),
            stack: stack.to_string(),
        })
    };
    match name {
        "nic" => Ok(HostStack::Nic),
        "measured" | "software" => Ok(HostStack::Measured(need(name)?.core_ns())),
        "dpdk" => Ok(HostStack::Dpdk(
            inabench_ina::hoststack::DpdkStack::with_costs(
                sys,
                need(name)?,
                cores,
                tx_burst,
                drain_us,
            )?,
        )),
        other => Err(StackError::Unknown(other.to_string())),
    }
}

/// Driver events per batch of the calibration rule's CPU meter (tens of microseconds of the
/// endpoints' code: a preemption's error is bounded by one batch's CPU time).
const METER_EVERY: u64 = 256;

/// One measurement of a system's host code on this machine: a lossless all-reduce (6 workers,
/// 800 KB each) on `sim` with zero charged cost, the CPU time the workers' `handle_packet` and
/// `poll_transmit` took by the suite's measuring rule ([`inabench_fabric::wrap`]: wall time
/// inside the calls times the on-CPU share of the batch of events they ran in, less the clock's
/// own cost per call) divided by the frames the workers received and sent (ns per frame on one
/// core). `inabench calibrate` calls it, interleaved over systems and repeated; no run does.
pub fn measure_frame_ns(sys: &dyn System) -> u64 {
    let cfg = AllReduceConfig {
        workers: 6,
        elements: 200_000,
        seed: 1,
        line_rate_bps: 100e9,
        mtu: 1024,
        timeout_ns: 1_000_000,
        knobs: vec![],
    };
    let Ok(setup) = sys.build(&cfg) else {
        return 0;
    };
    let nodes: Vec<Timed<SetupNode>> = setup
        .into_nodes()
        .into_iter()
        .map(|n| {
            let host = matches!(n, SetupNode::Worker(_));
            Timed::new(n, host)
        })
        .collect();
    let k = nodes.len();
    let link = LinkConfig {
        rate_bps: 100e9,
        latency_ns: LINK_LATENCY_NS,
        mtu: 2048,
        queue_bytes: 4 << 20,
        framing_bytes: 24,
    };
    let view = |t: &Timed<SetupNode>| t.enabled.then(|| t.stats());
    let mut meter = CpuMeter::new(METER_EVERY);
    let until = Until {
        counted: vec![true; k],
        limit_ns: 10_000_000_000,
    };
    let Ok((nodes, rep)) =
        Sim::new(link, 6).run_observed(nodes, &until, |_, n| meter.observe(n, view))
    else {
        return 0;
    };
    meter.finish(&nodes, view);
    let frames: u64 = rep.nodes[..6]
        .iter()
        .map(|s| s.frames_rx + s.frames_tx)
        .sum();
    let ns: u64 = (0..k).map(|i| meter.cpu_ns(i)).sum();
    ns.checked_div(frames).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use inabench_ina::common::AllReduceConfig;

    fn cfg(knobs: &[(&str, f64)]) -> AllReduceConfig {
        AllReduceConfig {
            workers: 4,
            elements: 65_536,
            seed: 3,
            line_rate_bps: 100e9,
            mtu: 1024,
            timeout_ns: 100_000,
            knobs: knobs.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        }
    }

    /// One worker's link at a tenth of the others' slows a bandwidth-bound all-reduce about
    /// tenfold for a system that waits for every worker, and every sum stays exact.
    #[test]
    fn a_slow_workers_link_slows_the_all_reduce_and_the_sums_stay_exact() {
        for name in ["switchml", "ring_allreduce"] {
            let sys = system(name).expect("listed");
            let time = |c: &AllReduceConfig| {
                let (nodes, rep, _) = run_sim_stack(
                    sys,
                    c,
                    Faults::default(),
                    &HostStack::Nic,
                    1_000_000_000,
                    None,
                )
                .expect("runs");
                assert!(rep.finished, "{name} did not finish");
                let mut end = 0;
                for n in &nodes {
                    if let SetupNode::Worker(w) = n {
                        assert!(w.check(c), "{name}: a wrong sum");
                        end = end.max(w.stats().end_ns);
                    }
                }
                end
            };
            let fast = time(&cfg(&[]));
            let slow = time(&cfg(&[("slow_workers", 1.0), ("slow_link_gbps", 10.0)]));
            let ratio = slow as f64 / fast as f64;
            assert!(
                (5.0..12.0).contains(&ratio),
                "{name}: {fast} ns on equal links, {slow} ns with one at 10 Gbps ({ratio:.2}x)"
            );
        }
        assert_eq!(
            slow_links(&cfg(&[("slow_workers", 2.0)])),
            Vec::<Option<f64>>::new()
        );
        assert_eq!(
            slow_links(&cfg(&[("slow_workers", 2.0), ("slow_link_gbps", 25.0)])),
            vec![None, None, Some(25e9), Some(25e9)]
        );
    }
}
