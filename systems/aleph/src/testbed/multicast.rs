//! CPU cost of the Gradient Forwarder's multicast (ALEPH Sec. 5.4, Fig. 4; Sec. 6.2 (4), Fig. 8)
//! on this machine: a node copies every gradient packet it receives to `receivers` receivers,
//! either in XDP (ALEPH's program on the node's ingress link completes the segment and multicasts
//! it with a devmap broadcast; the devmap egress program rewrites each copy's addresses) or in
//! user space over TCP (a forwarder thread reads the packets from a UDP socket and writes what one
//! `recvmmsg` returned to each receiver's TCP connection).
//!
//! Topology: drivers/xdp's [`Star`], the node in the middle, member 0 the sender, members
//! `1..=receivers` the receivers; the same for both systems. On every veth end TSO is off and GRO
//! on (the legacy ethtool ioctls), which gives every end a NAPI instance, and NAPI runs threaded:
//! the node's NAPI threads (its ingress link and its links to the receivers, where the TCP ACKs
//! arrive) are pinned to the node's cores, the members' NAPI threads, the sender and the
//! receivers' threads to the other cores. Without this, veth delivers a packet in the softirq of
//! the CPU that sent it, so the receivers' work would land on the node's CPU (or the node's on
//! the sender's); TSO is off because veth hands only GRO-eligible skbs to NAPI. The NAPI threads
//! run at SCHED_FIFO priority 50 and the TCP forwarder at 40: as softirqs on machines of their
//! own, the receive paths run before ordinary threads (the sender, other processes of this shared
//! host), and the forwarder has the node's cores to itself but yields to the node's NAPI. With
//! every thread at normal priority the receivers' NAPI threads took turns with the sender on the
//! shared core, and XDP lost over 1% of the copies while the node used 40% of its core.
//!
//! What is measured: the node's CPU, as the CPU time (`/proc/<tid>/schedstat`) of the threads that
//! do the node's work, over the window from the first packet sent until the receivers stop
//! receiving, divided by the window and the node's cores: for XDP the node's NAPI threads (the XDP
//! programs, the broadcast's clones, the transmissions into the receivers' links); for TCP the
//! same NAPI threads (the UDP and TCP ACK receive paths) plus the forwarder thread (its system
//! calls, copies and TCP transmissions). This host lacks CONFIG_IRQ_TIME_ACCOUNTING, so softirq
//! work run in a thread's context is charged to that thread; with threaded NAPI that is where it
//! belongs. The busy time of the node's cores from /proc/stat (everything, other processes too)
//! is kept beside it as a cross-check; it is tick-sampled, and short bursts on an otherwise idle
//! core (a wakeup per packet at low rates) mostly escape the ticks, so it reads low there.
//! Throughput counts the 528-byte ALEPH packets (UDP payload for XDP, TCP payload for TCP) that
//! the receivers got, all copies (egress).
//!
//! Receivers: for XDP, ALEPH's Gradient Receiver (drivers/xdp's `aleph_receive`) on each
//! receiver's link, which stores each aggregate in its map and counts it; for TCP a thread per
//! receiver reading its connection. Every copy's content is checked: the TCP receivers compare
//! each packet byte for byte with the one sent and require increasing sequence numbers; for XDP
//! the receivers' maps are read after the run (the gradients and round of each segment's last
//! packet).
//!
//! Choices where the paper is silent: the sender paces 528-byte gradient packets (every packet
//! due, up to 64 per `sendmmsg`); the node's XDP program is ALEPH's own with a full mask of the
//! sender's bit alone, so each packet completes its segment at once (the 128-gradient store and
//! copy-back of the Aggregation Service stay in the XDP path) and the devmap holds the receivers
//! only (no copy back to the sender); the TCP forwarder marks each packet as an aggregate like the
//! XDP program does, writes with Nagle off (as the suite's TCP data planes), and its input is UDP
//! from the sender, so both systems receive the same packets the same way.

use super::TestbedError;
use super::cpu::{BATCH, hz, send_batch, stat};
use inabench_xdp::group::{NOTIFY_PORT, PORT, RESULT_PORT};
use inabench_xdp::netns::{Star, in_netns};
use inabench_xdp::proto::{GRADS, Kind, PACKET_LEN, Packet};
use inabench_xdp::{Aggregator, AttachMode, Config, Forward, ReceiverConfig};
use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Job id of the multicast traffic.
pub const JOB: u16 = 8;
/// TCP port of the receivers' connections.
pub const TCP_PORT: u16 = 41_490;
/// Bits of one copy: a 528-byte ALEPH packet.
pub const COPY_BITS: f64 = (PACKET_LEN * 8) as f64;
/// Slots of the node's and the receivers' maps (packets cycle through them, a round per cycle).
pub const SEGMENTS: u32 = 4096;
/// How long the receivers may stay silent before the run counts what is missing as lost.
const DRAIN: Duration = Duration::from_millis(300);

/// The two multicast implementations of Fig. 8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum System {
    /// XDP in native (driver) mode.
    Xdp,
    /// A user-space forwarder writing to one TCP connection per receiver.
    Tcp,
}

impl System {
    pub fn parse(system: &str) -> Option<System> {
        match system {
            "aleph_xdp_driver" => Some(System::Xdp),
            "aleph_tcp" => Some(System::Tcp),
            _ => None,
        }
    }
}

/// One measurement's setup.
#[derive(Debug, Clone)]
pub struct Options {
    pub system: System,
    pub receivers: usize,
    /// Offered multicast throughput (all copies), Gbit/s on this host.
    pub egress_gbps: f64,
    /// How long the sender sends.
    pub duration: Duration,
    /// The node's cores (its NAPI threads and the forwarder).
    pub node_cores: Vec<usize>,
    /// Where the sender, the receivers and their NAPI threads run.
    pub other_cores: Vec<usize>,
    /// Slots of the maps; packets cycle through them.
    pub segments: u32,
}

/// One measurement.
#[derive(Debug, Clone, Copy)]
pub struct Measure {
    /// Offered multicast throughput (Gbit/s on this host).
    pub offered_gbps: f64,
    /// Multicast throughput the receivers got (Gbit/s on this host).
    pub achieved_gbps: f64,
    /// Packets the sender handed to its socket.
    pub sent: u64,
    /// Copies the receivers got (each at most once: duplicates are counted apart).
    pub delivered: u64,
    /// Copies a receiver got more than once or out of order.
    pub duplicates: u64,
    /// XDP: receiver slots whose last packet is not the last one sent for that segment.
    pub stale_slots: u64,
    /// Copies never delivered (% of `receivers` x `sent`).
    pub loss_pct: f64,
    /// CPU time of the node's threads (s).
    pub node_cpu_s: f64,
    /// `node_cpu_s` per second of the window, per node core (%).
    pub cpu_usage_pct: f64,
    /// Busy time of the node's cores from /proc/stat over the window, per core (%): everything
    /// that ran there, other processes included.
    pub node_busy_pct: f64,
    /// From the first packet sent until the receivers stopped receiving (s).
    pub seconds: f64,
}

/// The allowed CPUs of the calling thread.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity fills it
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// The node's cores (the last `min(cores, allowed - 1)` allowed CPUs) and the others.
pub fn split_cores(cores: usize) -> Result<(Vec<usize>, Vec<usize>), TestbedError> {
    let all = allowed_cpus();
    if all.len() < 2 || cores == 0 {
        return Err(TestbedError::Setup(format!(
            "the multicast node needs at least one core of its own and one for the sender and \
             receivers ({} allowed, {cores} asked)",
            all.len()
        )));
    }
    let k = cores.min(all.len() - 1);
    let split = all.len() - k;
    Ok((all[split..].to_vec(), all[..split].to_vec()))
}

/// Restrict thread or process `pid` (0: the calling thread) to `cpus`.
pub(super) fn pin(pid: i32, cpus: &[usize]) -> Result<(), TestbedError> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        // SAFETY: c < CPU_SETSIZE (it came from an affinity mask)
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: a valid set of the stated size
    let rc = unsafe { libc::sched_setaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(TestbedError::Setup(format!(
            "sched_setaffinity({pid}, {cpus:?}): {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(())
}

/// Real-time priority (SCHED_FIFO) for thread `pid` (0: the calling thread). The NAPI threads get
/// [`NAPI_PRIORITY`]: like softirq work on a machine of its own, a link's receive path runs
/// before ordinary threads (the sender, other processes on this shared host) instead of taking
/// turns with them. The TCP forwarder gets [`FORWARDER_PRIORITY`], below them: the node's cores
/// are its own as on a dedicated machine, and its NAPI threads preempt it as softirqs would.
pub(super) fn realtime(pid: i32, priority: libc::c_int) -> Result<(), TestbedError> {
    let p = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: a valid sched_param
    if unsafe { libc::sched_setscheduler(pid, libc::SCHED_FIFO, &p) } != 0 {
        return Err(TestbedError::Setup(format!(
            "SCHED_FIFO for thread {pid}: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(())
}

/// SCHED_FIFO priority of the NAPI threads (the kernel's own threaded-NAPI default is 0, normal).
pub(super) const NAPI_PRIORITY: libc::c_int = 50;
/// SCHED_FIFO priority of the TCP forwarder.
pub(super) const FORWARDER_PRIORITY: libc::c_int = 40;

fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions
    unsafe { libc::gettid() }
}

/// CPU time (ns) of a task, from its schedstat (the scheduler's sum of run time).
pub(super) fn task_cpu_ns(path: &str) -> Result<u64, TestbedError> {
    let text =
        std::fs::read_to_string(path).map_err(|e| TestbedError::Io(format!("{path}: {e}")))?;
    text.split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| TestbedError::Io(format!("{path}: unreadable `{}`", text.trim())))
}

/// The node's CPU time so far (ns): its NAPI threads and this process's threads `tids`.
fn node_cpu_ns(napi: &[i32], tids: &[i32]) -> Result<u64, TestbedError> {
    let mut ns = 0;
    for p in napi {
        ns += task_cpu_ns(&format!("/proc/{p}/schedstat"))?;
    }
    for t in tids {
        ns += task_cpu_ns(&format!("/proc/self/task/{t}/schedstat"))?;
    }
    Ok(ns)
}

/// The gradients of segment `seg` (the same in every round, so that receivers can compare a
/// packet with a template; the round is in the header).
pub fn grads(seg: u32) -> [i32; GRADS] {
    let mut g = [0i32; GRADS];
    for (i, v) in g.iter_mut().enumerate() {
        *v = (seg as i32)
            .wrapping_mul(-1_640_531_535)
            .wrapping_add((i as i32).wrapping_mul(0x0101_0101));
    }
    g
}

fn position(seq: u64, segments: u32) -> (u32, u32) {
    (
        (seq / u64::from(segments)) as u32 + 1,
        (seq % u64::from(segments)) as u32,
    )
}

/// Packet `seq` as the sender sends it.
pub fn gradient_packet(seq: u64, segments: u32) -> [u8; PACKET_LEN] {
    let (round, seg) = position(seq, segments);
    Packet::gradient(JOB, 0, round, seg, grads(seg)).emit()
}

/// Packet `seq` as a receiver gets it: an aggregate (the XDP program marks it so; the TCP
/// forwarder does the same).
pub fn result_packet(seq: u64, segments: u32) -> [u8; PACKET_LEN] {
    let (round, seg) = position(seq, segments);
    Packet {
        job: JOB,
        kind: Kind::Result,
        worker: 0xff,
        round,
        segment: seg,
        grads: grads(seg),
    }
    .emit()
}

/// Legacy ethtool ioctl `cmd` (a `struct ethtool_value` setter) on `dev` in namespace `ns`
/// (`None`: this process's). The outer error is the namespace's, the inner the ioctl's.
pub(super) fn ethtool(
    ns: Option<&str>,
    dev: &str,
    cmd: u32,
    on: bool,
) -> Result<std::io::Result<()>, TestbedError> {
    const SIOCETHTOOL: u64 = 0x8946;
    #[repr(C)]
    struct Value {
        cmd: u32,
        data: u32,
    }
    #[repr(C)]
    struct IfReq {
        name: [u8; libc::IFNAMSIZ],
        data: *mut libc::c_void,
        pad: [u8; 16],
    }
    let name = dev.as_bytes().to_vec();
    if name.len() >= libc::IFNAMSIZ {
        return Err(TestbedError::Setup(format!("interface name {dev}")));
    }
    in_netns(ns, move || -> std::io::Result<()> {
        let mut v = Value {
            cmd,
            data: u32::from(on),
        };
        let mut ifr = IfReq {
            name: [0; libc::IFNAMSIZ],
            data: (&mut v as *mut Value).cast(),
            pad: [0; 16],
        };
        ifr.name[..name.len()].copy_from_slice(&name);
        // SAFETY: socket has no preconditions
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a descriptor just opened and owned by nobody else
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: an ifreq whose data points at an ethtool_value living across the call
        let rc = unsafe { libc::ioctl(fd.as_raw_fd(), SIOCETHTOOL as _, &mut ifr) };
        if rc < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(())
        }
    })
    .map_err(TestbedError::from)
}

/// The pids of the kernel's threaded-NAPI threads (`napi/<dev>-<id>`).
fn napi_threads() -> HashSet<(i32, String)> {
    let mut v = HashSet::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return v;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if let Ok(c) = std::fs::read_to_string(format!("/proc/{pid}/comm"))
            && c.starts_with("napi/")
        {
            v.insert((pid, c.trim().to_string()));
        }
    }
    v
}

/// Give `dev` in `ns` a NAPI instance run by a kernel thread (TSO off, GRO on, threaded), pin
/// the thread(s) to `cpus` and return their pids.
fn threaded_napi(ns: &str, dev: &str, cpus: &[usize]) -> Result<Vec<i32>, TestbedError> {
    threaded_napi_at(ns, dev, cpus, true)
}

/// [`threaded_napi`], the thread at real-time priority (`realtime`) or at normal priority, where
/// other threads on its cores compete with it (aleph-fig6's background load).
pub(super) fn threaded_napi_at(
    ns: &str,
    dev: &str,
    cpus: &[usize],
    realtime_priority: bool,
) -> Result<Vec<i32>, TestbedError> {
    threaded_napi_in(Some(ns), dev, cpus, realtime_priority, true)
}

/// [`threaded_napi_at`] in namespace `ns` (`None`: this process's, e.g. a testbed's bridge
/// ports), with TSO left as it is unless `tso_off` (the TCP paths keep the veth's segmentation
/// offloads; GRO on is what gives a veth its NAPI instance).
pub(super) fn threaded_napi_in(
    ns: Option<&str>,
    dev: &str,
    cpus: &[usize],
    realtime_priority: bool,
    tso_off: bool,
) -> Result<Vec<i32>, TestbedError> {
    const ETHTOOL_STSO: u32 = 0x1f;
    const ETHTOOL_SGRO: u32 = 0x2c;
    let where_ = ns.unwrap_or("the host namespace");
    // with an XDP program on the peer, veth has already turned TSO off and refuses the change
    let fail = |what: &str, e: std::io::Error| {
        TestbedError::Setup(format!("{what} on {dev} in {where_}: {e}"))
    };
    if tso_off {
        match ethtool(ns, dev, ETHTOOL_STSO, false)? {
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {}
            r => r.map_err(|e| fail("TSO off", e))?,
        }
    }
    ethtool(ns, dev, ETHTOOL_SGRO, true)?.map_err(|e| fail("GRO on", e))?;
    let before = napi_threads();
    let out = match ns {
        Some(ns) => Command::new("ip")
            .args(["netns", "exec", ns, "sh", "-c"])
            .arg(format!("echo 1 > /sys/class/net/{dev}/threaded"))
            .output(),
        None => Command::new("sh")
            .arg("-c")
            .arg(format!("echo 1 > /sys/class/net/{dev}/threaded"))
            .output(),
    }
    .map_err(|e| TestbedError::Setup(format!("threaded NAPI on {dev}: {e}")))?;
    if !out.status.success() {
        return Err(TestbedError::Setup(format!(
            "threaded NAPI on {dev} in {where_}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let prefix = format!("napi/{dev}-");
    let pids: Vec<i32> = napi_threads()
        .difference(&before)
        .filter(|(_, c)| c.starts_with(&prefix))
        .map(|(p, _)| *p)
        .collect();
    // the star's veths have one queue each: one thread, or another process enabled threaded
    // NAPI on a link of the same name at the same moment and the threads cannot be told apart
    if pids.len() != 1 {
        return Err(TestbedError::Setup(format!(
            "{} NAPI threads appeared for {dev} in {where_} (one expected)",
            pids.len()
        )));
    }
    for &p in &pids {
        pin(p, cpus)?;
        if realtime_priority {
            realtime(p, NAPI_PRIORITY)?;
        }
    }
    Ok(pids)
}

/// Threaded NAPI on every link end of `star`: the node's ends on the node's cores (their pids
/// returned), the members' on the others.
fn prepare(star: &Star, o: &Options) -> Result<Vec<i32>, TestbedError> {
    let mut node = Vec::new();
    for m in &star.members {
        node.extend(threaded_napi(&star.aggregator, &m.port, &o.node_cores)?);
        threaded_napi(&m.namespace, "eth0", &o.other_cores)?;
    }
    Ok(node)
}

fn udp_socket(ns: &str, port: u16) -> Result<UdpSocket, TestbedError> {
    let s = in_netns(Some(ns), move || UdpSocket::bind(("0.0.0.0", port)))?
        .map_err(|e| TestbedError::Io(format!("udp socket in {ns}: {e}")))?;
    inabench_xdp::netns::force_buffers(&s, Some(16 << 20), None);
    Ok(s)
}

fn io(what: &'static str) -> impl Fn(std::io::Error) -> TestbedError {
    move |e| TestbedError::Io(format!("{what}: {e}"))
}

/// Send packets paced at `rate_pps` for `duration` (every packet due, up to [`BATCH`] per
/// `sendmmsg`); returns how many the socket took.
fn send_paced(
    sock: &UdpSocket,
    segments: u32,
    rate_pps: f64,
    duration: Duration,
    cpus: &[usize],
) -> Result<u64, TestbedError> {
    pin(0, cpus)?;
    // SAFETY: PR_SET_TIMERSLACK on this thread, 1 us: sleeps end close to their deadline
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong) };
    let start = Instant::now();
    let (mut seq, mut sent) = (0u64, 0u64);
    let mut pkts: Vec<[u8; PACKET_LEN]> = Vec::with_capacity(BATCH);
    loop {
        let el = start.elapsed();
        if el >= duration {
            break;
        }
        let due = (el.as_secs_f64() * rate_pps) as u64 + 1;
        if due <= seq {
            let next = Duration::from_secs_f64(seq as f64 / rate_pps);
            if let Some(d) = next.checked_sub(start.elapsed()) {
                std::thread::sleep(d);
            }
            continue;
        }
        let k = (due - seq).min(BATCH as u64);
        pkts.clear();
        pkts.extend((0..k).map(|j| gradient_packet(seq + j, segments)));
        sent += send_batch(sock, &pkts)?;
        seq += k;
    }
    Ok(sent)
}

/// Wait until `delivered()` reaches `want` or stops moving for [`DRAIN`]; returns the instant of
/// its last change.
fn drain(
    want: u64,
    after: Instant,
    mut delivered: impl FnMut() -> Result<u64, TestbedError>,
) -> Result<(u64, Instant), TestbedError> {
    let mut last = delivered()?;
    let mut changed = after;
    loop {
        if last >= want {
            return Ok((last, Instant::now()));
        }
        std::thread::sleep(Duration::from_millis(5));
        let now = delivered()?;
        if now != last {
            last = now;
            changed = Instant::now();
        } else if changed.elapsed() > DRAIN {
            return Ok((last, changed));
        }
    }
}

/// Measure one system at one offered rate.
pub fn measure(o: &Options) -> Result<Measure, TestbedError> {
    if !inabench_fabric::netns::is_root() {
        return Err(TestbedError::NotRoot);
    }
    if o.receivers == 0 || o.receivers > 32 {
        return Err(TestbedError::Setup(format!(
            "{} receivers (1..=32)",
            o.receivers
        )));
    }
    if !(o.egress_gbps.is_finite() && o.egress_gbps > 0.0) || o.duration.is_zero() {
        return Err(TestbedError::Setup(format!(
            "offered {} Gbit/s for {:?}",
            o.egress_gbps, o.duration
        )));
    }
    if o.node_cores.is_empty() || o.other_cores.is_empty() || o.segments == 0 {
        return Err(TestbedError::Setup(
            "the node and the others need a core each, and the maps a slot".into(),
        ));
    }
    match o.system {
        System::Xdp => xdp(o),
        System::Tcp => tcp(o),
    }
}

struct Window {
    start: Instant,
    cpu0: u64,
    stat0: (u64, u64),
}

impl Window {
    fn open(o: &Options, napi: &[i32], tids: &[i32]) -> Result<Window, TestbedError> {
        Ok(Window {
            cpu0: node_cpu_ns(napi, tids)?,
            stat0: stat(&o.node_cores)?,
            start: Instant::now(),
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn close(
        self,
        o: &Options,
        napi: &[i32],
        tids: &[i32],
        end: Instant,
        sent: u64,
        delivered: u64,
        duplicates: u64,
        stale_slots: u64,
    ) -> Result<Measure, TestbedError> {
        let cpu1 = node_cpu_ns(napi, tids)?;
        let stat1 = stat(&o.node_cores)?;
        let seconds = (end - self.start).as_secs_f64().max(1e-6);
        let cores = o.node_cores.len() as f64;
        let node_cpu_s = cpu1.saturating_sub(self.cpu0) as f64 * 1e-9;
        let want = sent * o.receivers as u64;
        Ok(Measure {
            offered_gbps: o.egress_gbps,
            achieved_gbps: delivered as f64 * COPY_BITS / seconds / 1e9,
            sent,
            delivered,
            duplicates,
            stale_slots,
            loss_pct: if want > 0 {
                want.saturating_sub(delivered) as f64 / want as f64 * 100.0
            } else {
                0.0
            },
            node_cpu_s,
            // the CPU is read when the drain ends: the node's work after the last delivery (little
            // or nothing) is counted, the time is not
            cpu_usage_pct: node_cpu_s / seconds / cores * 100.0,
            node_busy_pct: stat1.0.saturating_sub(self.stat0.0) as f64 / hz() / seconds / cores
                * 100.0,
            seconds,
        })
    }
}

fn rate_pps(o: &Options) -> f64 {
    o.egress_gbps * 1e9 / (o.receivers as f64 * COPY_BITS)
}

fn xdp(o: &Options) -> Result<Measure, TestbedError> {
    if let Some(why) = inabench_xdp::unavailable() {
        return Err(TestbedError::Setup(why));
    }
    // declared first, dropped last: the programs are detached before the namespaces go
    let star = Star::create(1 + o.receivers)?;
    let a = star.aggregator.clone();
    let mut node = Aggregator::load(o.segments)?;
    node.configure(&Config {
        job: JOB,
        full_mask: 1,
        forward: Forward::Multicast,
        port: PORT,
    })?;
    node.attach(Some(&a), &star.members[0].port, AttachMode::Native)?;
    let mut receivers = Vec::new();
    let mut notify = Vec::new();
    for (i, m) in star.members.iter().enumerate().skip(1) {
        node.add_star_member(&a, (i - 1) as u32, m)?;
        let mut r = Aggregator::load(o.segments)?;
        r.configure_receiver(&ReceiverConfig {
            job: JOB,
            port: RESULT_PORT,
            notify_port: NOTIFY_PORT,
            segments: o.segments,
        })?;
        r.attach_receiver(Some(&m.namespace), "eth0", AttachMode::Native)?;
        receivers.push(r);
        // the last aggregate of each round is passed up here (no ICMP errors back to the node)
        notify.push(udp_socket(&m.namespace, NOTIFY_PORT)?);
    }
    let napi = prepare(&star, o)?;
    let sock = udp_socket(&star.members[0].namespace, 0)?;
    sock.connect((star.members[0].gateway, PORT))
        .map_err(io("connect"))?;
    let delivered = || -> Result<u64, TestbedError> {
        let mut n = 0;
        for r in &receivers {
            n += r.stats()?.rx_stored;
        }
        Ok(n)
    };
    let base = delivered()?;
    let w = Window::open(o, &napi, &[])?;
    let sent = std::thread::scope(|s| {
        s.spawn(|| send_paced(&sock, o.segments, rate_pps(o), o.duration, &o.other_cores))
            .join()
            .map_err(|_| TestbedError::Io("the sender panicked".into()))?
    })?;
    let want = base + sent * o.receivers as u64;
    let (got, end) = drain(want, Instant::now(), delivered)?;
    let got = got - base;
    // the CPU first, while the node is idle; then the checks
    let mut m = w.close(o, &napi, &[], end, sent, got, 0, 0)?;
    // every copy's content: the last packet of each segment, in every receiver's map
    let mut duplicates = 0;
    let mut stale = 0;
    for (i, r) in receivers.iter().enumerate() {
        let st = r.stats()?;
        if st.bad > 0 {
            return Err(TestbedError::Wrong(format!(
                "receiver {i} refused {} packets as malformed",
                st.bad
            )));
        }
        duplicates += st.duplicate;
        for seg in 0..o.segments.min(sent.min(u64::from(u32::MAX)) as u32) {
            let slot = r.slot(seg)?;
            // the last packet sent for this segment
            let s = u64::from(o.segments);
            let last = u64::from(seg) + (sent - 1 - u64::from(seg)) / s * s;
            let (round, _) = position(last, o.segments);
            if slot.round != 0 && slot.grads != grads(seg) {
                return Err(TestbedError::Wrong(format!(
                    "receiver {i}, segment {seg}: the gradients differ from those sent"
                )));
            }
            if slot.round != round || !slot.done {
                stale += 1;
            }
        }
    }
    let ns = node.stats()?;
    if ns.bad + ns.stale + ns.duplicate > 0 {
        return Err(TestbedError::Wrong(format!(
            "the node dropped packets it should have forwarded: {ns:?}"
        )));
    }
    m.duplicates = duplicates;
    m.stale_slots = stale;
    Ok(m)
}

/// Receive up to `bufs.len()` datagrams (waiting for the first); their lengths go to `lens`.
pub(super) fn recv_batch(
    sock: &UdpSocket,
    bufs: &mut [[u8; 2048]],
    lens: &mut [usize],
) -> std::io::Result<usize> {
    // the fabric's batched layer, single datagrams (no GRO on this socket)
    inabench_fabric::batch::recvmmsg_into(sock, bufs, lens)
}

fn timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// The TCP forwarder: every batch `recvmmsg` returns, marked as aggregates, written to each
/// receiver's connection. Runs until `stop` and a quiet input.
fn forward(
    input: &UdpSocket,
    outs: &[TcpStream],
    stop: &AtomicBool,
    cpus: &[usize],
    tid: &AtomicU64,
) -> Result<(), TestbedError> {
    pin(0, cpus)?;
    realtime(0, FORWARDER_PRIORITY)?;
    tid.store(gettid() as u64, Ordering::SeqCst);
    let mut bufs = vec![[0u8; 2048]; BATCH];
    let mut lens = vec![0usize; BATCH];
    let mut out = Vec::with_capacity(BATCH * PACKET_LEN);
    loop {
        match recv_batch(input, &mut bufs, &mut lens) {
            Ok(n) => {
                out.clear();
                for (b, &l) in bufs.iter_mut().zip(&lens).take(n) {
                    if l != PACKET_LEN {
                        return Err(TestbedError::Wrong(format!(
                            "the forwarder got a {l}-byte datagram"
                        )));
                    }
                    b[6] = 1; // kind: result
                    b[7] = 0xff; // worker: the multicast's
                    out.extend_from_slice(&b[..PACKET_LEN]);
                }
                for mut s in outs {
                    s.write_all(&out).map_err(io("forward"))?;
                }
            }
            Err(e) if timeout(&e) => {
                if stop.load(Ordering::SeqCst) {
                    return Ok(());
                }
            }
            Err(e) => return Err(io("recvmmsg")(e)),
        }
    }
}

/// A TCP receiver: reads its connection until EOF (or `quit` while it is quiet), checks every
/// packet byte for byte and that sequence numbers increase; counts them into `count`.
fn receive(
    mut s: &TcpStream,
    segments: u32,
    count: &AtomicU64,
    duplicates: &AtomicU64,
    quit: &AtomicBool,
    cpus: &[usize],
) -> Result<(), TestbedError> {
    pin(0, cpus)?;
    let templates: Vec<[u8; PACKET_LEN]> = (0..u64::from(segments))
        .map(|seq| result_packet(seq, segments))
        .collect();
    let mut buf = vec![0u8; 1 << 17];
    let mut have = 0usize;
    let mut next = 0u64;
    loop {
        let n = match s.read(&mut buf[have..]) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if timeout(&e) => {
                if quit.load(Ordering::SeqCst) {
                    break;
                }
                continue;
            }
            Err(e) => return Err(io("receive")(e)),
        };
        have += n;
        let whole = have / PACKET_LEN * PACKET_LEN;
        for p in buf[..whole].chunks_exact(PACKET_LEN) {
            let round = u32::from_be_bytes([p[8], p[9], p[10], p[11]]);
            let seg = u32::from_be_bytes([p[12], p[13], p[14], p[15]]);
            let ok = round >= 1
                && seg < segments
                && p[..8] == templates[seg as usize][..8]
                && p[12..] == templates[seg as usize][12..];
            if !ok {
                return Err(TestbedError::Wrong(format!(
                    "a receiver got a packet that was not sent (round {round}, segment {seg})"
                )));
            }
            let seq = u64::from(round - 1) * u64::from(segments) + u64::from(seg);
            if seq < next {
                duplicates.fetch_add(1, Ordering::Relaxed);
            } else {
                next = seq + 1;
                count.fetch_add(1, Ordering::Relaxed);
            }
        }
        buf.copy_within(whole..have, 0);
        have -= whole;
    }
    if have != 0 {
        return Err(TestbedError::Wrong(format!(
            "a receiver's stream ended inside a packet ({have} bytes)"
        )));
    }
    Ok(())
}

fn tcp(o: &Options) -> Result<Measure, TestbedError> {
    // declared first, dropped last
    let star = Star::create(1 + o.receivers)?;
    let a = star.aggregator.clone();
    let napi = prepare(&star, o)?;
    let mut outs = Vec::new();
    let mut ins = Vec::new();
    for m in star.members.iter().skip(1) {
        let l = in_netns(Some(&m.namespace), || {
            TcpListener::bind(("0.0.0.0", TCP_PORT))
        })?
        .map_err(io("listen"))?;
        let to = (m.ip, TCP_PORT);
        let out = in_netns(Some(&a), move || TcpStream::connect(to))?.map_err(io("connect"))?;
        out.set_nodelay(true).map_err(io("nodelay"))?;
        // a receiver that stopped reading must not hang the forwarder (and the run) forever
        out.set_write_timeout(Some(Duration::from_secs(5)))
            .map_err(io("timeout"))?;
        let (i, _) = l.accept().map_err(io("accept"))?;
        i.set_read_timeout(Some(Duration::from_millis(50)))
            .map_err(io("timeout"))?;
        outs.push(out);
        ins.push(i);
    }
    let input = udp_socket(&a, PORT)?;
    input
        .set_read_timeout(Some(Duration::from_millis(20)))
        .map_err(io("timeout"))?;
    let sock = udp_socket(&star.members[0].namespace, 0)?;
    sock.connect((star.members[0].gateway, PORT))
        .map_err(io("connect"))?;
    let counts: Vec<AtomicU64> = ins.iter().map(|_| AtomicU64::new(0)).collect();
    let duplicates = AtomicU64::new(0);
    let (stop, quit, tid) = (
        AtomicBool::new(false),
        AtomicBool::new(false),
        AtomicU64::new(0),
    );
    std::thread::scope(|s| -> Result<Measure, TestbedError> {
        let fwd = s.spawn(|| {
            let r = forward(&input, &outs, &stop, &o.node_cores, &tid);
            // the receivers see the end of their streams
            for c in &outs {
                let _ = c.shutdown(std::net::Shutdown::Write);
            }
            r
        });
        let rx: Vec<_> = ins
            .iter()
            .zip(&counts)
            .map(|(i, c)| {
                let (duplicates, quit) = (&duplicates, &quit);
                s.spawn(move || receive(i, o.segments, c, duplicates, quit, &o.other_cores))
            })
            .collect();
        let result = (|| {
            let t0 = Instant::now();
            while tid.load(Ordering::SeqCst) == 0 {
                if fwd.is_finished() || t0.elapsed() > Duration::from_secs(5) {
                    return Err(TestbedError::Setup("the forwarder did not start".into()));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            let tids = [tid.load(Ordering::SeqCst) as i32];
            let w = Window::open(o, &napi, &tids)?;
            let sent = s
                .spawn(|| send_paced(&sock, o.segments, rate_pps(o), o.duration, &o.other_cores))
                .join()
                .map_err(|_| TestbedError::Io("the sender panicked".into()))??;
            let want = sent * o.receivers as u64;
            let (got, end) = drain(want, Instant::now(), || {
                Ok(counts.iter().map(|c| c.load(Ordering::Relaxed)).sum())
            })?;
            let m = w.close(
                o,
                &napi,
                &tids,
                end,
                sent,
                got,
                duplicates.load(Ordering::Relaxed),
                0,
            )?;
            Ok(m)
        })();
        stop.store(true, Ordering::SeqCst);
        let f = fwd
            .join()
            .map_err(|_| TestbedError::Io("the forwarder panicked".into()))?;
        quit.store(true, Ordering::SeqCst);
        let mut rxr = Ok(());
        for h in rx {
            let r = h
                .join()
                .map_err(|_| TestbedError::Io("a receiver panicked".into()))?;
            if rxr.is_ok() {
                rxr = r;
            }
        }
        // a wrong packet is the most telling error, then the forwarder's, then the run's
        rxr?;
        f?;
        result
    })
}
