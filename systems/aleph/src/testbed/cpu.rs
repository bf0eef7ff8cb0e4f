//! Aggregation throughput and CPU of the three data paths of ALEPH Sec. 3.2 and 6.2 (1) on this
//! machine: the XDP program in native (driver) and generic mode, and the TCP aggregation service,
//! each with two senders, the process's CPUs limited to `cores` by affinity (threads inherit it,
//! and veth delivers a packet in the softirq of the CPU that sent it, so the senders, the XDP
//! program and the TCP service all share those cores).
//!
//! What is measured: gradients aggregated per second of wall time, in Gbit/s of 32-bit gradients
//! (aggregation throughput, the paper's iftop reading), the fraction of gradient packets sent
//! that were never aggregated, and CPU in cores: the NET_RX softirq time of the allowed cores (where
//! the XDP program and the kernel's receive paths run, from /proc/stat) plus, for TCP, the CPU
//! time of the aggregator's user-space threads. The senders' own syscalls are left out, as the
//! paper's senders were other machines. Choices where the paper is silent: two senders sending
//! as fast as they can (the offered load is the maximum, so the throughput is the maximum this
//! host reaches), 1024 segments per round for XDP and rounds kept in step by a barrier as in
//! drivers/xdp's bench, 2 Mi gradients per iteration for TCP unpaced and 256 Ki paced (see `tcp`).

use super::TestbedError;
use super::net::{NodePin, TcpTree, Testbed};
use inabench_xdp::AttachMode;
use inabench_xdp::group::Group;
use inabench_xdp::proto::{GRADS, PACKET_LEN, Packet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A data path of the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    Xdp(AttachMode),
    Tcp,
    /// The TCP service with NIC-like segmentation: TSO and GSO off on every veth end (1448-byte
    /// segments, as a NIC without TSO sends them), GRO on at the receiving ends. Over plain veth
    /// TCP rides 64 KiB GSO super-packets, 4.7x cheaper per byte (the review's measurement),
    /// while ALEPH's packets are 570 bytes: both are reported.
    TcpSegmented,
    /// The same service in user space over UDP ([`super::udp`]).
    Udp,
}

impl Path {
    pub fn parse(system: &str) -> Option<Path> {
        match system {
            "aleph_xdp_driver" => Some(Path::Xdp(AttachMode::Native)),
            "aleph_xdp_generic" => Some(Path::Xdp(AttachMode::Generic)),
            "aleph_tcp" => Some(Path::Tcp),
            "aleph_tcp_segmented" => Some(Path::TcpSegmented),
            "aleph_udp" => Some(Path::Udp),
            _ => None,
        }
    }
}

/// One measurement.
#[derive(Debug, Clone, Copy)]
pub struct Measure {
    /// Aggregation throughput (Gbit/s of gradients received for aggregation).
    pub gbps: f64,
    /// Gradient packets sent but never aggregated (%); 0 for TCP.
    pub loss_pct: f64,
    /// Aggregation CPU (softirq + the TCP service's threads) in cores.
    pub cpu_cores: f64,
    /// Busy time of the allowed cores (everything, senders included) in cores.
    pub host_cores: f64,
    /// Busy time of the measured cores (everything that ran there, other processes of the host
    /// included) in cores: with [`measure_isolated`] the aggregator's cores only, otherwise all
    /// allowed cores (= `host_cores`).
    pub node_busy: f64,
    pub seconds: f64,
}

/// The calling thread's CPU affinity, restored on drop.
struct Affinity(libc::cpu_set_t);

impl Affinity {
    /// Run the calling thread on `cpus` until dropped.
    fn pin_to(cpus: &[usize]) -> Result<Affinity, TestbedError> {
        // SAFETY: zeroed cpu_set_t is a valid empty set; sched_getaffinity on this thread
        let old = unsafe {
            let mut old: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut old) != 0 {
                return Err(TestbedError::Setup("sched_getaffinity failed".into()));
            }
            old
        };
        super::multicast::pin(0, cpus)?;
        Ok(Affinity(old))
    }

    fn limit(cores: usize) -> Result<Affinity, TestbedError> {
        // SAFETY: zeroed cpu_set_t is a valid empty set; sched_{get,set}affinity on this thread
        unsafe {
            let mut old: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut old) != 0 {
                return Err(TestbedError::Setup("sched_getaffinity failed".into()));
            }
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            let mut n = 0;
            for c in 0..libc::CPU_SETSIZE as usize {
                if n < cores && libc::CPU_ISSET(c, &old) {
                    libc::CPU_SET(c, &mut set);
                    n += 1;
                }
            }
            if n < cores {
                return Err(TestbedError::Setup(format!(
                    "{cores} cores asked, this process may use {n}"
                )));
            }
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(TestbedError::Setup("sched_setaffinity failed".into()));
            }
            Ok(Affinity(old))
        }
    }

    /// The CPUs allowed now.
    fn allowed() -> Vec<usize> {
        // SAFETY: as above
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set);
            (0..libc::CPU_SETSIZE as usize)
                .filter(|&c| libc::CPU_ISSET(c, &set))
                .collect()
        }
    }
}

impl Drop for Affinity {
    fn drop(&mut self) {
        // SAFETY: restoring the set read in `limit`
        unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &self.0) };
    }
}

/// The cores this process may use now (for the reports' placement lines).
pub fn allowed_cores() -> Vec<usize> {
    Affinity::allowed()
}

/// (busy, softirq) jiffies of `cpus` from /proc/stat.
pub(super) fn stat(cpus: &[usize]) -> Result<(u64, u64), TestbedError> {
    let text = std::fs::read_to_string("/proc/stat")
        .map_err(|e| TestbedError::Io(format!("/proc/stat: {e}")))?;
    let (mut busy, mut soft) = (0, 0);
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let Some(name) = f.next() else { continue };
        let Some(c) = name
            .strip_prefix("cpu")
            .and_then(|c| c.parse::<usize>().ok())
        else {
            continue;
        };
        if !cpus.contains(&c) {
            continue;
        }
        let v: Vec<u64> = f.filter_map(|x| x.parse().ok()).collect();
        // user nice system idle iowait irq softirq steal
        if v.len() >= 7 {
            busy += v[0] + v[1] + v[2] + v[5] + v[6] + v.get(7).copied().unwrap_or(0);
            soft += v[6];
        }
    }
    Ok((busy, soft))
}

pub(super) fn hz() -> f64 {
    // SAFETY: sysconf has no preconditions
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

/// A target rate is a positive, finite number of Gbit/s (or none: as fast as the senders can).
fn check_target(target_gbps: Option<f64>) -> Result<(), TestbedError> {
    match target_gbps {
        Some(t) if !(t.is_finite() && t > 0.0) => {
            Err(TestbedError::Setup(format!("target rate {t} Gbit/s")))
        }
        _ => Ok(()),
    }
}

/// Measure `path` with `cores` cores for about `duration`, the senders offering `target_gbps`
/// of gradients in all (paced after each batch), or as much as they can (`None`).
pub fn measure(
    path: Path,
    cores: usize,
    duration: Duration,
    target_gbps: Option<f64>,
) -> Result<Measure, TestbedError> {
    check_target(target_gbps)?;
    measure_loaded(path, cores, duration, target_gbps, 0.0)
}

/// [`measure`] with a background load on the same cores: one thread per core, at normal
/// priority, busy for `load_pct`% of every 10 ms (aleph-fig6; the paper does not say how it
/// raised the CPU usage).
pub fn measure_loaded(
    path: Path,
    cores: usize,
    duration: Duration,
    target_gbps: Option<f64>,
    load_pct: f64,
) -> Result<Measure, TestbedError> {
    if !(0.0..=100.0).contains(&load_pct) {
        return Err(TestbedError::Setup(format!("load of {load_pct}%")));
    }
    let _aff = Affinity::limit(cores)?;
    let cpus = Affinity::allowed();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        if load_pct > 0.0 {
            for _ in 0..cores {
                let stop = &stop;
                s.spawn(move || {
                    let period = Duration::from_millis(10);
                    let busy = period.mul_f64(load_pct / 100.0);
                    let mut x = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let t = Instant::now();
                        while t.elapsed() < busy {
                            x = std::hint::black_box(
                                x.wrapping_mul(6364136223846793005).wrapping_add(1),
                            );
                        }
                        if let Some(rest) = period.checked_sub(t.elapsed()) {
                            std::thread::sleep(rest);
                        }
                    }
                });
            }
        }
        let r = match path {
            Path::Xdp(mode) => xdp(mode, &cpus, duration, target_gbps, None),
            Path::Tcp => tcp(&cpus, duration, target_gbps, false, None),
            Path::TcpSegmented => tcp(&cpus, duration, target_gbps, true, None),
            Path::Udp => super::udp::measure(&cpus, duration, target_gbps, None),
        };
        stop.store(true, Ordering::Relaxed);
        r
    })
}

/// The cores of [`measure_isolated`] with `cores` measured cores: (the aggregator's, the
/// senders'), the first `cores` allowed cores and the rest.
pub fn isolated_split(cores: usize) -> Result<(Vec<usize>, Vec<usize>), TestbedError> {
    let all = Affinity::allowed();
    if cores == 0 || all.len() <= cores {
        return Err(TestbedError::Setup(format!(
            "{cores} measured cores need {} cores (the senders need one of their own); this \
             process may use {}",
            cores + 1,
            all.len()
        )));
    }
    Ok((all[..cores].to_vec(), all[cores..].to_vec()))
}

/// [`measure`] with the aggregator isolated from the senders, as a separate sender machine would
/// leave it: the aggregator's receive path runs in threaded NAPI (a kernel thread per link end,
/// normal priority, GRO on; the XDP program runs there) pinned with the aggregator's user-space
/// threads (TCP, UDP) to the first `cores` allowed cores; the senders, the members' receive
/// paths and (TCP) the bridge ports' receive paths run on the other cores. CPU (`cpu_cores`) is
/// the CPU time of those NAPI threads plus the aggregator's threads (schedstat and
/// CLOCK_THREAD_CPUTIME_ID; softirq work that interrupts them is in their time, as this kernel
/// has no IRQ time accounting); `node_busy` is everything that ran on the measured cores.
pub fn measure_isolated(
    path: Path,
    cores: usize,
    duration: Duration,
    target_gbps: Option<f64>,
) -> Result<Measure, TestbedError> {
    check_target(target_gbps)?;
    let (node, other) = isolated_split(cores)?;
    // the harness's own thread (and what it spawns) on the senders' side
    let _aff = Affinity::pin_to(&other)?;
    let iso = Some(Isolate {
        senders: &other,
        realtime: true,
    });
    match path {
        Path::Xdp(mode) => xdp(mode, &node, duration, target_gbps, iso),
        Path::Tcp => tcp(&node, duration, target_gbps, false, iso),
        Path::TcpSegmented => tcp(&node, duration, target_gbps, true, iso),
        Path::Udp => super::udp::measure(&node, duration, target_gbps, iso),
    }
}

/// The senders' cores of an isolated measurement, and whether the aggregator's receive path (and
/// its service threads, below it) run at real-time priority: as a softirq on a machine of its
/// own runs before ordinary threads, instead of taking turns with other processes of this shared
/// host (aleph-fig5, aleph-table2; fig8 does the same). aleph-fig6 keeps normal priority: its
/// background load must compete with the receive path.
#[derive(Debug, Clone, Copy)]
pub struct Isolate<'a> {
    pub senders: &'a [usize],
    pub realtime: bool,
}

/// CPU time (s) of the kernel threads `pids` so far.
pub(super) fn threads_cpu(pids: &[i32]) -> Result<f64, TestbedError> {
    let mut ns = 0;
    for p in pids {
        ns += super::multicast::task_cpu_ns(&format!("/proc/{p}/schedstat"))?;
    }
    Ok(ns as f64 * 1e-9)
}

/// Sleep until `sent_bits` at `gbps` would have taken since `start`.
pub(super) fn pace(start: Instant, sent_bits: f64, gbps: Option<f64>) {
    if let Some(g) = gbps {
        let due = start + Duration::from_secs_f64(sent_bits / (g * 1e9));
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
    }
}

/// A background load on `cpus`: one thread per core pinned there, at normal priority, busy for
/// `load_pct`% of every 10 ms until `stop`.
fn load_thread(cpus: &[usize], load_pct: f64, stop: &AtomicBool) {
    let _ = super::multicast::pin(0, cpus);
    let period = Duration::from_millis(10);
    let busy = period.mul_f64(load_pct / 100.0);
    let mut x = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        while t.elapsed() < busy {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        if let Some(rest) = period.checked_sub(t.elapsed()) {
            std::thread::sleep(rest);
        }
    }
}

/// aleph-fig6 with a receive ring that can overflow: the aggregator's link ends get NAPI run by
/// a kernel thread (TSO off, GRO on, threaded NAPI: veth then queues every frame for the
/// aggregator in a 256-entry ring and drops when it is full) pinned at normal priority to the
/// measured core (the host's first), where the background load runs too; the senders and the
/// members' receive paths are pinned to the other cores. Loss is then what a busy core fails to
/// take from the ring, as at a NIC's RX ring. Needs 2 cores.
pub fn measure_isolated_loss(
    mode: AttachMode,
    duration: Duration,
    target_gbps: f64,
    load_pct: f64,
) -> Result<Measure, TestbedError> {
    if !(0.0..=100.0).contains(&load_pct) || !target_gbps.is_finite() || target_gbps <= 0.0 {
        return Err(TestbedError::Setup(format!(
            "load of {load_pct}% at {target_gbps} Gbit/s"
        )));
    }
    let all = Affinity::allowed();
    if all.len() < 2 {
        return Err(TestbedError::Setup(format!(
            "the isolated loss measurement needs 2 cores, this process may use {}",
            all.len()
        )));
    }
    let (node, other) = (vec![all[0]], all[1..].to_vec());
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        if load_pct > 0.0 {
            let (node, stop) = (&node, &stop);
            s.spawn(move || load_thread(node, load_pct, stop));
        }
        let iso = Isolate {
            senders: &other,
            realtime: false,
        };
        let r = xdp(mode, &node, duration, Some(target_gbps), Some(iso));
        stop.store(true, Ordering::Relaxed);
        r
    })
}

/// The XDP measurement; `isolate`: the senders' cores, the aggregator's receive path then runs
/// on `cpus` (see [`measure_isolated_loss`]), else everything shares `cpus`.
fn xdp(
    mode: AttachMode,
    cpus: &[usize],
    duration: Duration,
    target_gbps: Option<f64>,
    isolate: Option<Isolate<'_>>,
) -> Result<Measure, TestbedError> {
    const MEMBERS: usize = 2;
    const SEGMENTS: u32 = 1024;
    if let Some(why) = inabench_xdp::unavailable() {
        return Err(TestbedError::Setup(why));
    }
    let g = Group::create(MEMBERS, SEGMENTS, mode, 1, false)?;
    let mut napi = Vec::new();
    if let Some(iso) = isolate {
        for m in &g.star.members {
            napi.extend(super::multicast::threaded_napi_at(
                &g.star.aggregator,
                &m.port,
                cpus,
                iso.realtime,
            )?);
            super::multicast::threaded_napi_at(&m.namespace, "eth0", iso.senders, iso.realtime)?;
        }
    }
    let host: Vec<usize> = match isolate {
        Some(iso) => cpus.iter().chain(iso.senders).copied().collect(),
        None => cpus.to_vec(),
    };
    let targets = (0..MEMBERS)
        .map(|i| {
            g.target(i)
                .ok_or_else(|| TestbedError::Setup(format!("member {i}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let (s0, h0, n0, start) = (
        stat(cpus)?,
        stat(&host)?,
        threads_cpu(&napi)?,
        Instant::now(),
    );
    let rounds = Rounds::new(1, MEMBERS, SEGMENTS, start, duration, target_gbps);
    let sent = std::thread::scope(|s| -> Result<u64, TestbedError> {
        let hs: Vec<_> = g
            .socks
            .iter()
            .zip(&targets)
            .enumerate()
            .map(|(w, (sock, to))| {
                let rounds = &rounds;
                s.spawn(move || -> Result<u64, TestbedError> {
                    if let Some(iso) = isolate {
                        super::multicast::pin(0, iso.senders)?;
                    }
                    sock.connect(to)
                        .map_err(|e| TestbedError::Io(format!("connect: {e}")))?;
                    rounds.send(sock, w)
                })
            })
            .collect();
        let mut total = 0;
        for h in hs {
            total += h
                .join()
                .map_err(|_| TestbedError::Io("a sender panicked".into()))??;
        }
        Ok(total)
    })?;
    // the counters settle once the backlogs have drained
    let mut last = g.agg.stats()?;
    let mut end = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(20));
        let now = g.agg.stats()?;
        if now == last {
            break;
        }
        last = now;
        end = Instant::now();
    }
    let (s1, h1, n1) = (stat(cpus)?, stat(&host)?, threads_cpu(&napi)?);
    let seconds = (end - start).as_secs_f64();
    let gbps = last.aggregated as f64 * GRADS as f64 * 32.0 / seconds / 1e9;
    let loss_pct = if sent > 0 {
        (sent.saturating_sub(last.aggregated)) as f64 / sent as f64 * 100.0
    } else {
        0.0
    };
    Ok(Measure {
        gbps,
        loss_pct,
        // isolated: the aggregator's NAPI threads (the program runs there); shared: the NET_RX
        // softirq time of the shared cores
        cpu_cores: if isolate.is_some() {
            (n1 - n0) / seconds
        } else {
            (s1.1 - s0.1) as f64 / hz() / seconds
        },
        host_cores: (h1.0 - h0.0) as f64 / hz() / seconds,
        node_busy: (s1.0 - s0.0) as f64 / hz() / seconds,
        seconds,
    })
}

/// The run time of ALEPH's XDP programs per aggregated gradient packet, measured two ways in one
/// call: in place (the kernel's BPF statistics while a veth group aggregates) and by
/// `BPF_PROG_TEST_RUN` right after (no statistics, no veth).
#[derive(Debug, Clone, Copy)]
pub struct ProgramCost {
    /// In place: the aggregator's programs (the aggregation program and the egress rewrite of
    /// every broadcast copy; not the members' pass-through programs) per gradient packet
    /// aggregated, less the statistics' own share of each counted run (ns); the median over
    /// the measurement's windows.
    pub ns_per_packet: f64,
    /// 10th and 90th percentiles of the same over the windows (ns).
    pub p10_ns: f64,
    pub p90_ns: f64,
    /// The aggregation program alone, in place, net as above (ns per packet; median of windows):
    /// the same program the test runs time.
    pub aggregate_ns: f64,
    /// The egress rewrite's net run time per gradient packet, in place (ns).
    pub egress_ns: f64,
    /// What the statistics count per run of the empty program (`xdp_pass`, on the members'
    /// receive path in the same run): the clock reads the statistics add inside every counted
    /// run (ns per run; subtracted per run above).
    pub noop_ns_per_run: f64,
    /// The aggregator's programs' counted run time per gradient packet as the statistics read
    /// it, nothing subtracted (ns): what this measurement reported before the subtraction.
    pub raw_ns_per_packet: f64,
    /// Gradient packets aggregated while measuring in place.
    pub packets: u64,
    /// Program runs counted (aggregation and egress).
    pub runs: u64,
    /// Windows the in-place measurement was read in.
    pub windows: usize,
    /// The aggregation program timed by test runs on the aggregator's core.
    pub test_run: inabench_xdp::testrun::TestRunCost,
}

/// The counters one window of the in-place measurement reads.
#[derive(Debug, Clone, Copy)]
struct Reading {
    aggregate: inabench_xdp::ProgramTime,
    egress: inabench_xdp::ProgramTime,
    noop: inabench_xdp::ProgramTime,
    packets: u64,
}

impl Reading {
    fn take(a: &inabench_xdp::Aggregator) -> Result<Reading, TestbedError> {
        use inabench_xdp::Program;
        Ok(Reading {
            aggregate: a.program_run_time(Program::Aggregate)?,
            egress: a.egress_run_time()?,
            noop: a.program_run_time(Program::Pass)?,
            packets: a.stats()?.aggregated,
        })
    }

    /// Net ns per packet of (aggregation, egress) between `earlier` and `self`, with the empty
    /// program's counted ns per run `noop` (this window's own when it counted any runs, else
    /// `fallback`) taken off every counted run; `None` when no packet was aggregated.
    fn net_since(&self, earlier: &Reading, fallback: f64) -> Option<(f64, f64, f64)> {
        let packets = self.packets.saturating_sub(earlier.packets);
        if packets == 0 {
            return None;
        }
        let (a, e, n) = (
            self.aggregate.since(earlier.aggregate),
            self.egress.since(earlier.egress),
            self.noop.since(earlier.noop),
        );
        let noop = if n.runs > 0 {
            n.nanos as f64 / n.runs as f64
        } else {
            fallback
        };
        let p = packets as f64;
        Some((
            (a.nanos as f64 - a.runs as f64 * noop) / p,
            (e.nanos as f64 - e.runs as f64 * noop) / p,
            noop,
        ))
    }
}

/// Read windows of the in-place measurement this long.
const WINDOW: Duration = Duration::from_millis(200);

/// Test-run rounds per measurement (each round is `members` aggregation runs and as many runs of
/// the empty program, a few microseconds each with the syscall).
pub const TEST_RUN_ROUNDS: u32 = 20_000;

/// The per-packet cost of ALEPH's Aggregation Service program on this host, two ways.
///
/// In place: a drivers/xdp `Group` (2 members, native mode on veth, 128 gradients per packet)
/// aggregates traffic offered at `target_gbps` (`None`: as fast as the senders can, the regime
/// of a throughput maximum) for `duration` with the kernel's BPF run-time statistics on. The
/// statistics count, per run, the time between two clock reads around the program, so part of
/// a clock read is in every counted run; the empty program attached on the members' side counts
/// that share alone (its body is one instruction), and it is taken off every counted run of the
/// aggregator's programs. The counters are read every [`WINDOW`]; the cost is the median of the
/// windows' net ns per packet aggregated, the 10th and 90th percentiles its spread. Placement
/// as [`measure_isolated`] (the aggregator's receive path alone on the first allowed core at
/// real-time priority, the senders on the others).
///
/// By test run: with the statistics off, [`inabench_xdp::testrun::aggregation_cost_on`] on the
/// group's own aggregator (the object and slot map the window aggregates with), on the
/// aggregator's core at the receive path's priority (SCHED_FIFO
/// [`super::multicast::NAPI_PRIORITY`]), 2 members over the same 1024 slots. The in-place window
/// is cut into slices of two [`WINDOW`]s, with a burst of test runs before each slice and after
/// the last ([`TEST_RUN_ROUNDS`] rounds in all, as many each), and the test-run cost is the mean
/// of the bursts' ([`test_run_pooled`]), so the two ways sample the same moments of this shared
/// host. Why: the program's test-run time moves between about 160 and 230-260 ns within a
/// second on this host (runs of test runs on one map, one after the other, 2026-11-29), and a
/// burst before and one after a 2-s window (the former design) read the program in a quick
/// moment that the window's median did not reflect: every repetition outside the cross-check's
/// 25% had the in-place cost higher (issue #33; examples/xdp_cost_probe.rs measures both
/// designs). Any statistics still on (another process's) are reported in its
/// `stats_counted_runs`.
///
/// This is the program alone: the driver's or veth's receive and transmit are not in it
/// (aleph-xdp-scale composes it with cited NIC figures).
pub fn program_cost(
    duration: Duration,
    target_gbps: Option<f64>,
) -> Result<ProgramCost, TestbedError> {
    program_cost_with(duration, target_gbps, &CostSetup::default())
}

/// How [`program_cost_with`] sets the measurement up; the default is [`program_cost`]'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CostSetup {
    /// Slots the group aggregates over (both ways).
    pub segments: u32,
    /// The senders on the aggregator's core instead of the other core(s) (the gradient packets
    /// then written by the core that receives them).
    pub senders_on_node: bool,
    /// The test runs' block of consecutive slots per member
    /// ([`inabench_xdp::testrun::aggregation_cost_in_blocks`]).
    pub test_run_block: u32,
    /// The test runs on the group's own aggregator (the object and slot map the in-place
    /// window aggregates with) instead of a freshly loaded one.
    pub test_run_on_group: bool,
    /// In-place slices, with a burst of test runs before each and after the last (0: one per
    /// two [`WINDOW`]s of the duration; 1: one burst before the whole window and one after).
    pub slices: u32,
    /// How the test runs hand the program its frames (copied or live; on the group's own
    /// aggregator only: a fresh one has no members to broadcast to).
    pub test_run_mode: inabench_xdp::testrun::TestRunMode,
    /// The BPF statistics on during the test runs too (their count of the program's own run
    /// time in [`inabench_xdp::testrun::TestRunCost::counted_ns`]; their clock reads are then in
    /// every run timed, the floor's included).
    pub test_run_stats: bool,
    /// The members' copies run the empty devmap egress program instead of the rewrite (a
    /// probe's: egress_ns plus the noop share is then what the statistics count per run on the
    /// aggregator's own core in place; the copies keep the aggregator's addresses).
    pub empty_egress: bool,
}

impl Default for CostSetup {
    fn default() -> CostSetup {
        CostSetup {
            segments: 1024,
            senders_on_node: false,
            test_run_block: 1,
            test_run_on_group: true,
            slices: 0,
            test_run_mode: inabench_xdp::testrun::TestRunMode::Copied,
            test_run_stats: false,
            empty_egress: false,
        }
    }
}

/// [`program_cost`] set up as `setup` says.
pub fn program_cost_with(
    duration: Duration,
    target_gbps: Option<f64>,
    setup: &CostSetup,
) -> Result<ProgramCost, TestbedError> {
    const MEMBERS: usize = 2;
    let segments = setup.segments;
    check_target(target_gbps)?;
    if let Some(why) = inabench_xdp::unavailable() {
        return Err(TestbedError::Setup(why));
    }
    if segments == 0 {
        return Err(TestbedError::Setup("no slots to aggregate in".into()));
    }
    let (node, other) = isolated_split(1)?;
    let _aff = Affinity::pin_to(&other)?;
    let g = Group::create(MEMBERS, segments, AttachMode::Native, 1, false)?;
    if setup.empty_egress {
        for (i, m) in g.star.members.iter().enumerate() {
            let idx = inabench_xdp::netns::ifindex(Some(&g.star.aggregator), &m.port)?;
            g.agg
                .add_member_egress(Some(&g.star.aggregator), i as u32, idx, true)?;
        }
    }
    for m in &g.star.members {
        super::multicast::threaded_napi_at(&g.star.aggregator, &m.port, &node, true)?;
        super::multicast::threaded_napi_at(&m.namespace, "eth0", &other, true)?;
    }
    let targets = (0..MEMBERS)
        .map(|i| {
            g.target(i)
                .ok_or_else(|| TestbedError::Setup(format!("member {i}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    // one slice per two windows of the duration unless the setup says how many
    let slices = match setup.slices {
        0 => (duration.as_secs_f64() / (2.0 * WINDOW.as_secs_f64()))
            .ceil()
            .max(1.0) as u32,
        n => n,
    };
    let burst = (TEST_RUN_ROUNDS / (slices + 1)).max(1);
    let slice = duration / slices;
    // the next round no slot holds yet (the test runs and the senders share the group's slots)
    let mut round = 1u32;
    let mut bursts = Vec::with_capacity(slices as usize + 1);
    let mut slice_readings: Vec<Vec<Reading>> = Vec::with_capacity(slices as usize);
    for i in 0..=slices {
        // a burst of test runs with the statistics off
        let stats = match setup.test_run_stats {
            true => Some(inabench_xdp::RunStats::enable()?),
            false => None,
        };
        let c = if setup.test_run_on_group {
            let (agg, first_round) = (&g.agg, round);
            test_run_half(&node, move || {
                inabench_xdp::testrun::aggregation_cost_on_mode(
                    agg,
                    1,
                    MEMBERS,
                    burst,
                    setup.test_run_block,
                    first_round,
                    setup.test_run_mode,
                )
            })?
        } else if setup.test_run_mode != inabench_xdp::testrun::TestRunMode::Copied {
            return Err(TestbedError::Setup(
                "live test runs need the group's own aggregator (its members)".into(),
            ));
        } else {
            test_run_half(&node, || {
                inabench_xdp::testrun::aggregation_cost_in_blocks(
                    MEMBERS,
                    segments,
                    burst,
                    setup.test_run_block,
                )
            })?
        };
        drop(stats);
        round += burst / segments + 2;
        bursts.push(c);
        if i == slices {
            break;
        }
        // a slice in place with the statistics on
        let stats = inabench_xdp::RunStats::enable()?;
        let mut readings = vec![Reading::take(&g.agg)?];
        let rounds = Rounds::new(1, MEMBERS, segments, Instant::now(), slice, target_gbps)
            .starting_at(round);
        std::thread::scope(|s| -> Result<(), TestbedError> {
            let hs: Vec<_> = g
                .socks
                .iter()
                .zip(&targets)
                .enumerate()
                .map(|(w, (sock, to))| {
                    let rounds = &rounds;
                    let node = &node;
                    s.spawn(move || -> Result<u64, TestbedError> {
                        let _pin = match setup.senders_on_node {
                            true => Some(Affinity::pin_to(node)?),
                            false => None,
                        };
                        sock.connect(to)
                            .map_err(|e| TestbedError::Io(format!("connect: {e}")))?;
                        rounds.send(sock, w)
                    })
                })
                .collect();
            while !hs.iter().all(|h| h.is_finished()) {
                std::thread::sleep(WINDOW);
                readings.push(Reading::take(&g.agg)?);
            }
            for h in hs {
                h.join()
                    .map_err(|_| TestbedError::Io("a sender panicked".into()))??;
            }
            Ok(())
        })?;
        // the counters settle once the backlogs have drained
        let mut last = g.agg.stats()?;
        loop {
            std::thread::sleep(Duration::from_millis(20));
            let now = g.agg.stats()?;
            if now == last {
                break;
            }
            last = now;
        }
        readings.push(Reading::take(&g.agg)?);
        drop(stats);
        // segment 0 starts every round first: it holds the newest
        round = round.max(g.agg.slot(0)?.round) + 2;
        slice_readings.push(readings);
    }
    drop(g);
    let (mut a, mut e, mut noop, mut packets) = (
        inabench_xdp::ProgramTime::default(),
        inabench_xdp::ProgramTime::default(),
        inabench_xdp::ProgramTime::default(),
        0u64,
    );
    for r in &slice_readings {
        if let (Some(first), Some(end)) = (r.first(), r.last()) {
            let plus = |x: inabench_xdp::ProgramTime, y: inabench_xdp::ProgramTime| {
                inabench_xdp::ProgramTime {
                    nanos: x.nanos + y.nanos,
                    runs: x.runs + y.runs,
                }
            };
            a = plus(a, end.aggregate.since(first.aggregate));
            e = plus(e, end.egress.since(first.egress));
            noop = plus(noop, end.noop.since(first.noop));
            packets += end.packets.saturating_sub(first.packets);
        }
    }
    if packets == 0 || a.runs == 0 || noop.runs == 0 {
        return Err(TestbedError::Setup(format!(
            "no program run time counted ({packets} packets aggregated, {} runs, {} runs of \
             the empty program): this kernel may not report run_time_ns",
            a.runs, noop.runs
        )));
    }
    let noop_ns = noop.nanos as f64 / noop.runs as f64;
    // windows within each slice (the test runs between slices move the counters)
    let windows: Vec<(f64, f64, f64)> = slice_readings
        .iter()
        .flat_map(|r| r.windows(2).filter_map(|w| w[1].net_since(&w[0], noop_ns)))
        .collect();
    let q = |v: &[f64], p: f64| inabench_xdp::testrun::quantile(v, p).unwrap_or(f64::NAN);
    let total: Vec<f64> = windows.iter().map(|w| w.0 + w.1).collect();
    let agg: Vec<f64> = windows.iter().map(|w| w.0).collect();
    let egress: Vec<f64> = windows.iter().map(|w| w.1).collect();
    Ok(ProgramCost {
        ns_per_packet: q(&total, 0.5),
        p10_ns: q(&total, 0.1),
        p90_ns: q(&total, 0.9),
        aggregate_ns: q(&agg, 0.5),
        egress_ns: q(&egress, 0.5),
        noop_ns_per_run: noop_ns,
        raw_ns_per_packet: (a.nanos + e.nanos) as f64 / packets as f64,
        packets,
        runs: a.runs + e.runs,
        windows: windows.len(),
        test_run: test_run_pooled(&bursts)
            .ok_or_else(|| TestbedError::Setup("no test runs".into()))?,
    })
}

/// Half of [`program_cost`]'s test runs ([`TEST_RUN_ROUNDS`] / 2 rounds) on the aggregator's
/// core `node`, from a thread at the receive path's real-time priority: the two ways of timing
/// the program then compete for the core alike (a test-run thread at normal priority took turns
/// with every other process of this shared host while the receive path preempted them, and
/// read apart from it in loaded repetitions).
fn test_run_half(
    node: &[usize],
    time: impl FnOnce() -> Result<inabench_xdp::testrun::TestRunCost, inabench_xdp::XdpError> + Send,
) -> Result<inabench_xdp::testrun::TestRunCost, TestbedError> {
    std::thread::scope(|s| {
        s.spawn(|| -> Result<_, TestbedError> {
            let _pin = Affinity::pin_to(node)?;
            super::multicast::realtime(0, super::multicast::NAPI_PRIORITY)?;
            Ok(time()?)
        })
        .join()
        .map_err(|_| TestbedError::Io("the test-run thread panicked".into()))?
    })
}

/// The test-run cost of [`program_cost`] from its bursts, taken between the in-place slices:
/// each statistic the mean of the bursts' (they run as many rounds each; the mean of their
/// medians stands in for the median of the whole, so every moment of the measurement weighs on
/// both ways alike), the counts summed; `None` when there are no bursts.
pub fn test_run_pooled(
    bursts: &[inabench_xdp::testrun::TestRunCost],
) -> Option<inabench_xdp::testrun::TestRunCost> {
    let first = bursts.first()?;
    let n = bursts.len() as f64;
    let mean =
        |f: fn(&inabench_xdp::testrun::TestRunCost) -> f64| bursts.iter().map(f).sum::<f64>() / n;
    let mean_of = |f: fn(&inabench_xdp::testrun::TestRunCost) -> Option<f64>| {
        bursts.iter().map(f).sum::<Option<f64>>().map(|s| s / n)
    };
    Some(inabench_xdp::testrun::TestRunCost {
        net_ns: mean(|c| c.net_ns),
        net_p10_ns: mean(|c| c.net_p10_ns),
        net_p90_ns: mean(|c| c.net_p90_ns),
        store_ns: mean(|c| c.store_ns),
        complete_ns: mean(|c| c.complete_ns),
        floor_ns: mean(|c| c.floor_ns),
        rounds: bursts.iter().map(|c| c.rounds).sum(),
        members: first.members,
        stats_counted_runs: bursts.iter().map(|c| c.stats_counted_runs).sum(),
        counted_ns: mean_of(|c| c.counted_ns),
        counted_floor_ns: mean_of(|c| c.counted_floor_ns),
    })
}

/// The senders' schedule of the single-aggregator measurements: rounds of `segments` gradient
/// packets per member, kept in step by a barrier, until `duration` after `start`.
pub(super) struct Rounds {
    job: u16,
    members: usize,
    segments: u32,
    start: Instant,
    stop_at: Instant,
    /// Offered gradients in all (Gbit/s), paced after each batch; `None`: as fast as possible.
    target_gbps: Option<f64>,
    barrier: std::sync::Barrier,
    stop: AtomicBool,
    /// The round the members send first (1 unless the slots already hold rounds).
    first_round: u32,
}

impl Rounds {
    pub(super) fn new(
        job: u16,
        members: usize,
        segments: u32,
        start: Instant,
        duration: Duration,
        target_gbps: Option<f64>,
    ) -> Rounds {
        Rounds {
            job,
            members,
            segments,
            start,
            stop_at: start + duration,
            target_gbps,
            barrier: std::sync::Barrier::new(members),
            stop: AtomicBool::new(false),
            first_round: 1,
        }
    }

    /// The same schedule from round `round` on.
    pub(super) fn starting_at(self, round: u32) -> Rounds {
        Rounds {
            first_round: round,
            ..self
        }
    }

    /// Member `w`'s sender on its connected socket: batches of [`BATCH`] packets per round,
    /// paced to its share of the target; the members keep in step (one reads the clock for all,
    /// so none runs a round another skips). Returns the packets sent.
    pub(super) fn send(&self, sock: &std::net::UdpSocket, w: usize) -> Result<u64, TestbedError> {
        let mut grads = [0i32; GRADS];
        for (i, v) in grads.iter_mut().enumerate() {
            *v = (w * GRADS + i) as i32;
        }
        let (mut n, mut round) = (0u64, self.first_round);
        loop {
            let mut seg = 0;
            while seg < self.segments {
                let k = BATCH.min((self.segments - seg) as usize);
                let pkts: Vec<[u8; PACKET_LEN]> = (0..k)
                    .map(|i| {
                        Packet::gradient(self.job, w as u8, round, seg + i as u32, grads).emit()
                    })
                    .collect();
                n += send_batch(sock, &pkts)?;
                seg += k as u32;
                // each member offers its share of the target
                let bits = n as f64 * (GRADS * 32) as f64 * self.members as f64;
                pace(self.start, bits, self.target_gbps);
            }
            if self.barrier.wait().is_leader() {
                self.stop
                    .store(Instant::now() >= self.stop_at, Ordering::Relaxed);
            }
            self.barrier.wait();
            if self.stop.load(Ordering::Relaxed) {
                return Ok(n);
            }
            round += 1;
        }
    }
}

/// Packets per `sendmmsg` call: the senders batch like the TCP senders' 64 KiB writes, so that
/// the comparison is not one of system calls per byte.
pub(super) const BATCH: usize = 64;

/// Send `pkts` with `sendmmsg`, to `to` or on a connected socket (`None`), until all are sent
/// or a call fails; how many were sent, and the failure.
pub(super) fn sendmmsg_to(
    sock: &std::net::UdpSocket,
    to: Option<std::net::SocketAddrV4>,
    pkts: &[[u8; PACKET_LEN]],
) -> (usize, Option<std::io::Error>) {
    // the fabric's batched layer, single datagrams (no GSO): the per-datagram kernel path is
    // what this testbed measures
    inabench_fabric::batch::sendmmsg_all(sock, to, pkts)
}

/// Send `pkts` on a connected UDP socket; returns how many were sent (a full socket buffer or an
/// unreachable peer: the rest of the batch is lost).
pub(super) fn send_batch(
    sock: &std::net::UdpSocket,
    pkts: &[[u8; PACKET_LEN]],
) -> Result<u64, TestbedError> {
    Ok(sendmmsg_to(sock, None, pkts).0 as u64)
}

/// TSO and GSO off, GRO on, on both ends of every link of `tb` (NIC-like segmentation).
fn segment_like_a_nic(tb: &Testbed) -> Result<(), TestbedError> {
    const ETHTOOL_STSO: u32 = 0x1f;
    const ETHTOOL_SGSO: u32 = 0x24;
    const ETHTOOL_SGRO: u32 = 0x2c;
    for i in 0..tb.machines() {
        let port = tb.bridge_port(i)?;
        for (ns, dev) in [(Some(tb.ns(i)), "eth0"), (None, port.as_str())] {
            for (cmd, on, what) in [
                (ETHTOOL_STSO, false, "TSO off"),
                (ETHTOOL_SGSO, false, "GSO off"),
                (ETHTOOL_SGRO, true, "GRO on"),
            ] {
                super::multicast::ethtool(ns, dev, cmd, on)?.map_err(|e| {
                    TestbedError::Setup(format!("{what} on {dev} ({}): {e}", ns.unwrap_or("host")))
                })?;
            }
        }
    }
    Ok(())
}

/// The TCP measurement on `cpus`; `isolate`: the senders' cores (the aggregator's threads and
/// the receive path of its link end then run on `cpus`, see [`measure_isolated`]).
fn tcp(
    cpus: &[usize],
    duration: Duration,
    target_gbps: Option<f64>,
    segmented: bool,
    isolate: Option<Isolate<'_>>,
) -> Result<Measure, TestbedError> {
    // 2 Mi gradients (8 MiB) per worker and iteration: each iteration spawns the service's
    // threads and allocates its buffers anew, and with 256 Ki gradients these fixed costs (and
    // the occasional 100-900 ms stall of one iteration on this 2-vCPU VM) made 2 cores slower
    // than 1 (2.0 -> 0.8 Gbit/s, the host partly idle); from 1 Mi gradients on, 2 cores are not
    // slower than 1 (measured with examples/tcp_probe.rs)
    //
    // Paced (aleph-table2, a target rate below the maximum), the stalls do not bind and short
    // iterations keep the pacing fine-grained: 256 Ki gradients.
    let len: usize = if target_gbps.is_none() {
        1 << 21
    } else {
        1 << 18
    };
    let tb = Testbed::unlimited(3)?;
    if segmented {
        segment_like_a_nic(&tb)?;
    }
    let mut tree = TcpTree::connect(&tb, &[2, 2])?;
    // isolated: the aggregator (machine 2) and the receive path of its namespace's link end on
    // `cpus`; the workers, their receive paths and the bridge ports' (the switch's) on the others
    let mut napi = Vec::new();
    let host: Vec<usize> = match isolate {
        Some(iso) => {
            let rt = iso.realtime;
            for i in 0..tb.machines() {
                let (mine, port) = (i == 2, tb.bridge_port(i)?);
                let at = if mine { cpus } else { iso.senders };
                let t = super::multicast::threaded_napi_in(Some(tb.ns(i)), "eth0", at, rt, false)?;
                if mine {
                    napi.extend(t);
                }
                super::multicast::threaded_napi_in(None, &port, iso.senders, rt, false)?;
            }
            let worker = NodePin {
                cpus: iso.senders.to_vec(),
                fifo: None,
            };
            // the aggregator's threads below its NAPI thread, as fig8's TCP forwarder: the
            // kernel's receive path preempts them as a softirq would
            tree.pin_nodes(vec![
                Some(worker.clone()),
                Some(worker),
                Some(NodePin {
                    cpus: cpus.to_vec(),
                    fifo: rt.then_some(super::multicast::FORWARDER_PRIORITY),
                }),
            ]);
            cpus.iter().chain(iso.senders).copied().collect()
        }
        None => cpus.to_vec(),
    };
    let (s0, h0, n0, start) = (
        stat(cpus)?,
        stat(&host)?,
        threads_cpu(&napi)?,
        Instant::now(),
    );
    let mut agg_cpu = 0.0;
    let mut iters = 0u32;
    // seconds inside iterations: from the first chunk sent until the slowest worker holds the
    // total (the harness's generation of the test gradients and of the reference sum between
    // iterations is left out)
    let mut busy = 0.0;
    while iters == 0 || start.elapsed() < duration {
        let it = tree.iterate(iters, len)?;
        agg_cpu += it.cpu[2];
        busy += it.time;
        iters += 1;
        pace(
            start,
            2.0 * len as f64 * 32.0 * f64::from(iters),
            target_gbps,
        );
    }
    let wall = start.elapsed().as_secs_f64();
    let (s1, h1, n1) = (stat(cpus)?, stat(&host)?, threads_cpu(&napi)?);
    // unpaced (aleph-fig5: the maximum), rates and CPU per second of aggregating; paced
    // (aleph-table2: CPU at a target rate), per second of the whole run
    let seconds = if target_gbps.is_none() { busy } else { wall };
    Ok(Measure {
        gbps: 2.0 * len as f64 * 32.0 * f64::from(iters) / seconds / 1e9,
        loss_pct: 0.0,
        // isolated: the aggregator's NAPI thread and its threads; shared: the NET_RX softirq
        // time of the shared cores and the aggregator's threads
        cpu_cores: if isolate.is_some() {
            (n1 - n0 + agg_cpu) / seconds
        } else {
            ((s1.1 - s0.1) as f64 / hz() + agg_cpu) / seconds
        },
        // everything on the allowed cores, the harness's generation included
        host_cores: (h1.0 - h0.0) as f64 / hz() / wall,
        node_busy: (s1.0 - s0.0) as f64 / hz() / wall,
        seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use inabench_xdp::testrun::TestRunCost;

    #[test]
    fn the_test_run_cost_is_the_mean_of_its_bursts_between_the_slices() {
        let burst = |net: f64, floor: f64, counted: u64| TestRunCost {
            net_ns: net,
            net_p10_ns: net - 10.0,
            net_p90_ns: net + 10.0,
            store_ns: net + floor,
            complete_ns: 2.0 * net + floor,
            floor_ns: floor,
            rounds: 100,
            members: 2,
            stats_counted_runs: counted,
            counted_ns: None,
            counted_floor_ns: None,
        };
        // a quiet burst, a loaded one and one in between
        let c = test_run_pooled(&[
            burst(160.0, 40.0, 0),
            burst(240.0, 60.0, 7),
            burst(200.0, 50.0, 1),
        ])
        .unwrap();
        assert_eq!(c.net_ns, 200.0);
        assert_eq!((c.net_p10_ns, c.net_p90_ns), (190.0, 210.0));
        assert_eq!(
            (c.store_ns, c.complete_ns, c.floor_ns),
            (250.0, 450.0, 50.0)
        );
        assert_eq!((c.rounds, c.members, c.stats_counted_runs), (300, 2, 8));
        assert!(test_run_pooled(&[]).is_none());
    }
}
