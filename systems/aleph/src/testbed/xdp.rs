//! ALEPH's hierarchy with the aggregation in the kernel (drivers/xdp) on the rate-limited
//! testbed of [`super::net`]: every aggregator and the PS run the Aggregation Service at the XDP
//! hook of their `eth0`; workers send UDP gradient packets (128 gradients each) to their
//! aggregator (or to the PS when unclustered); an aggregator's XDP program forwards each
//! completed segment to the PS as one gradient from the aggregator's global ID (Fig. 3); the PS's
//! program forwards each completed total to a collector socket on the PS, which sends one copy to
//! each of its members, and each aggregator copies it to its members (Fig. 4's multicast).
//!
//! Choices where the paper is silent, or where this testbed differs:
//! - An aggregator's own gradient enters its XDP program through a veth pair inside its
//!   namespace (`s0` -> `s1`, the program on `s1` shares the `slots` map with the one on
//!   `eth0`): a packet to one's own address would take `lo`, which bypasses the program.
//! - The PS's totals reach its user space through a veth pair (`c0` -> `c1`): the XDP program
//!   forwards to one upstream interface, and the PS has no next level.
//! - The downward copies are sent by user space (UDP) on the PS and the aggregators: the devmap
//!   multicast of drivers/xdp needs one interface per member (a star), which the bridge of the
//!   rate-limited testbed does not give. The bytes on the links are the same.
//! - Frames an XDP program sends (XDP_TX, redirects) bypass the sender's egress qdisc, so an
//!   aggregator's upward aggregates are limited by the PS's ingress `tbf` only (its members'
//!   own links pace them anyway).
//! - Loss recovery (Algorithm 2): lines 1-6 are run by the runner on the aggregators' maps after
//!   the senders finish (a worker whose bit is missing resends; an aggregator whose aggregate the
//!   PS lacks resends it from its map); lines 8-13 by each worker, which fetches segments it
//!   lacks from the PS's map (the program answers from there).
//! - How workers receive the totals ([`ReceiverPath`]): `User`, a UDP socket per worker reading
//!   one 570-B packet per `recv`; or `Xdp`, ALEPH's Gradient Receiver (Sec. 5.5) on each plain
//!   worker's `eth0`: the program stores every total in the worker's own map and passes only the
//!   round's last one up to a notification socket, after which the worker reads its map (one
//!   locked map lookup per segment, Sec. 5.5's "fetch gradients from eBPF maps") and checks the
//!   sums. An aggregator keeps the user-space socket either way: its `eth0` already runs the
//!   Aggregation Service (one XDP program per interface), and it copies each total to its
//!   members from user space. With `Xdp`, a worker that has had no notification finds what its
//!   map lacks (lines 9-10) once its receiver's stored count stops growing for 100 ms, and
//!   fetches it from the PS; the reply lands in the same map.

use super::TestbedError;
use super::net::{Iteration, Testbed, charge, thread_cpu};
use inabench_xdp::group::PORT;
use inabench_xdp::netns::{ifindex, in_netns, mac};
use inabench_xdp::proto::{self as xp, GRADS, Kind, PACKET_LEN, Packet, Receiver};
use inabench_xdp::{
    Aggregator, AttachMode, Config, Forward, ProgramTime, ReceiverConfig, Route, RunStats,
};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Job id of the testbed's traffic.
pub const JOB: u16 = 9;
/// Where workers receive totals (and fetch replies).
pub const DOWN_PORT: u16 = 41_470;
/// Where the PS's collector receives the totals from its program.
pub const COLLECT_PORT: u16 = 41_471;
/// Where a worker's Gradient Receiver passes up a round's last total (the fetch signal).
pub const NOTIFY_PORT: u16 = 41_472;

/// How the plain workers receive the totals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReceiverPath {
    /// A UDP socket, one `recv` per total.
    User,
    /// ALEPH's Gradient Receiver: totals stored in a map by XDP, one notification per round.
    Xdp,
}

impl ReceiverPath {
    pub fn parse(s: &str) -> Option<ReceiverPath> {
        match s {
            "user" => Some(ReceiverPath::User),
            "xdp" => Some(ReceiverPath::Xdp),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ReceiverPath::User => "user",
            ReceiverPath::Xdp => "xdp",
        }
    }
}

/// A plain worker's Gradient Receiver: its program (with the map of received totals) and the
/// socket the fetch signal arrives on.
struct Rx {
    prog: Aggregator,
    notify: UdpSocket,
}
const SELF_DST: Ipv4Addr = Ipv4Addr::new(10, 251, 0, 2);
/// Not an address of the PS: Linux drops packets from one of its own addresses (accept_local).
const COLLECT_SRC: Ipv4Addr = Ipv4Addr::new(10, 252, 0, 5);
const COLLECT_DST: Ipv4Addr = Ipv4Addr::new(10, 252, 0, 2);
/// How long an iteration may take before it fails.
const DEADLINE: Duration = Duration::from_secs(30);

/// Both ends of a veth pair in `ns` operationally up before anything is sent on them
/// ([`inabench_fabric::netns::wait_up`]).
fn wait_up(ns: &str, devs: &[&str]) -> Result<(), TestbedError> {
    for d in devs {
        inabench_fabric::netns::wait_up(Some(ns), d, Duration::from_secs(10))
            .map_err(|e| TestbedError::Setup(e.to_string()))?;
    }
    Ok(())
}

fn ip(ns: &str, args: &[&str]) -> Result<(), TestbedError> {
    let mut v = vec!["-n", ns];
    v.extend_from_slice(args);
    let out = Command::new("ip")
        .args(&v)
        .output()
        .map_err(|e| TestbedError::Setup(format!("ip: {e}")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(TestbedError::Setup(format!(
            "`ip {}` failed: {}",
            v.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

fn udp(ns: &str, port: u16) -> Result<UdpSocket, TestbedError> {
    let s = in_netns(Some(ns), move || UdpSocket::bind(("0.0.0.0", port)))?
        .map_err(|e| TestbedError::Io(format!("udp socket in {ns}: {e}")))?;
    s.set_read_timeout(Some(Duration::from_millis(20)))
        .map_err(|e| TestbedError::Io(e.to_string()))?;
    // a round's aggregates arrive in bursts: room for them
    inabench_xdp::netns::force_buffers(&s, Some(8 << 20), None);
    Ok(s)
}

/// Gradient packets per `sendmmsg` call.
const SEND_BATCH: usize = 64;

/// Send every packet of `pkts` to `to` with `sendmmsg` (blocking: the socket's buffer paces the
/// sender to its link's `tbf` rate).
pub(super) fn send_batch_to(
    sock: &UdpSocket,
    to: SocketAddrV4,
    pkts: &[[u8; PACKET_LEN]],
) -> std::io::Result<()> {
    match super::cpu::sendmmsg_to(sock, Some(to), pkts) {
        (_, Some(e)) => Err(e),
        (_, None) => Ok(()),
    }
}

/// A packet to lose once (an injected loss, for tests of the Integrity Check).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loss {
    /// Worker `worker`'s gradient packet of `segment` is not sent the first time.
    Up { worker: usize, segment: u32 },
    /// The copy of `segment`'s total for worker `worker` is not sent the first time.
    Down { worker: usize, segment: u32 },
}

/// A node that aggregates: an aggregator worker or the PS.
struct Node {
    machine: usize,
    /// Children (workers), in bit order; an aggregator's own bit follows them.
    kids: Vec<usize>,
    agg: Aggregator,
    mask: u32,
    /// The aggregator's own-gradient socket (bound to `s0`).
    own: Option<UdpSocket>,
}

/// ALEPH's two-level hierarchy in XDP on a [`Testbed`]. Field order is drop order: programs are
/// detached before the caller drops the testbed.
pub struct XdpTree {
    nodes: Vec<Node>,
    /// Per worker: its Gradient Receiver (plain workers, with [`ReceiverPath::Xdp`]).
    rx: Vec<Option<Rx>>,
    workers: usize,
    parent: Vec<usize>,
    /// Per worker: its bit in its parent's group.
    bit: Vec<u8>,
    /// Per machine: the socket it sends gradients (and copies) from.
    send: Vec<UdpSocket>,
    /// Per worker: the socket totals arrive on.
    down: Vec<UdpSocket>,
    collector: UdpSocket,
    /// Injected losses of the next iteration (tests): each is dropped once.
    losses: Mutex<Vec<Loss>>,
    ips: Vec<Ipv4Addr>,
    segments: u32,
    /// The kernel's run-time accounting of the programs, on while the tree lives (a clock read
    /// per program run), for the CPU each aggregating machine spends in XDP.
    _run_stats: RunStats,
}

impl XdpTree {
    /// Load and attach the programs for the tree `parent` (as in [`super::net::TcpTree`]); the
    /// workers receive in user space.
    pub fn create(
        tb: &Testbed,
        parent: &[usize],
        segments: u32,
        mode: AttachMode,
    ) -> Result<XdpTree, TestbedError> {
        Self::create_with(tb, parent, segments, mode, ReceiverPath::User)
    }

    /// [`Self::create`] with the plain workers receiving through `receiver`.
    pub fn create_with(
        tb: &Testbed,
        parent: &[usize],
        segments: u32,
        mode: AttachMode,
        receiver: ReceiverPath,
    ) -> Result<XdpTree, TestbedError> {
        if let Some(why) = inabench_xdp::unavailable() {
            return Err(TestbedError::Setup(why));
        }
        let n = parent.len();
        if tb.machines() != n + 1 {
            return Err(TestbedError::Setup(format!(
                "{n} workers need {} machines",
                n + 1
            )));
        }
        let ps = n;
        let mut bit = vec![0u8; n];
        for m in 0..=n {
            for (b, k) in (0..n).filter(|&w| parent[w] == m).enumerate() {
                bit[k] = b as u8;
            }
        }
        let mut nodes = Vec::new();
        for m in 0..=n {
            let kids: Vec<usize> = (0..n).filter(|&w| parent[w] == m).collect();
            if kids.is_empty() {
                continue;
            }
            if m != ps && parent[m] != ps {
                return Err(TestbedError::Setup(format!(
                    "aggregator {m} is not under the PS"
                )));
            }
            if kids.len() >= 31 {
                return Err(TestbedError::Setup(format!("{} members", kids.len())));
            }
            let ns = tb.ns(m).to_string();
            let members = kids.len() + usize::from(m != ps);
            let mask = (1u32 << members) - 1;
            let mut agg = Aggregator::load(segments)?;
            let eth0 = ifindex(Some(&ns), "eth0")?;
            let mut own = None;
            if m == ps {
                ip(
                    &ns,
                    &["link", "add", "c0", "type", "veth", "peer", "name", "c1"],
                )?;
                ip(&ns, &["addr", "add", "10.252.0.1/29", "dev", "c0"])?;
                ip(&ns, &["addr", "add", "10.252.0.2/29", "dev", "c1"])?;
                ip(&ns, &["link", "set", "c0", "up"])?;
                ip(&ns, &["link", "set", "c1", "up"])?;
                wait_up(&ns, &["c0", "c1"])?;
                let c0 = ifindex(Some(&ns), "c0")?;
                agg.configure(&Config {
                    job: JOB,
                    full_mask: mask,
                    forward: Forward::Upstream {
                        ifindex: c0,
                        global_id: 0,
                    },
                    port: PORT,
                })?;
                agg.set_route(
                    c0,
                    &Route {
                        dst_mac: mac(Some(&ns), "c1")?,
                        src_mac: mac(Some(&ns), "c0")?,
                        dst_ip: COLLECT_DST,
                        src_ip: COLLECT_SRC,
                        dst_port: COLLECT_PORT,
                    },
                )?;
                // native redirects into c0 need NAPI on its peer
                agg.attach_pass(Some(&ns), "c1", mode)?;
            } else {
                ip(
                    &ns,
                    &["link", "add", "s0", "type", "veth", "peer", "name", "s1"],
                )?;
                ip(&ns, &["addr", "add", "10.251.0.1/30", "dev", "s0"])?;
                ip(&ns, &["link", "set", "s0", "up"])?;
                ip(&ns, &["link", "set", "s1", "up"])?;
                wait_up(&ns, &["s0", "s1"])?;
                let lladdr = inabench_fabric::addresses::fmt_mac(mac(Some(&ns), "s1")?);
                ip(
                    &ns,
                    &[
                        "neigh",
                        "add",
                        &SELF_DST.to_string(),
                        "lladdr",
                        &lladdr,
                        "dev",
                        "s0",
                    ],
                )?;
                agg.configure(&Config {
                    job: JOB,
                    full_mask: mask,
                    forward: Forward::Upstream {
                        ifindex: eth0,
                        global_id: bit[m],
                    },
                    port: PORT,
                })?;
                agg.set_route(
                    eth0,
                    &Route {
                        dst_mac: mac(Some(tb.ns(ps)), "eth0")?,
                        src_mac: mac(Some(&ns), "eth0")?,
                        dst_ip: tb.ip(ps),
                        src_ip: tb.ip(m),
                        dst_port: PORT,
                    },
                )?;
                agg.attach(Some(&ns), "s1", mode)?;
                let s = udp(&ns, 0)?;
                let c =
                    std::ffi::CString::new("s0").map_err(|_| TestbedError::Setup("s0".into()))?;
                use std::os::fd::AsRawFd;
                // SAFETY: a valid socket and a NUL-terminated interface name of the stated length
                let rc = unsafe {
                    libc::setsockopt(
                        s.as_raw_fd(),
                        libc::SOL_SOCKET,
                        libc::SO_BINDTODEVICE,
                        c.as_ptr().cast(),
                        3,
                    )
                };
                if rc != 0 {
                    return Err(TestbedError::Io(format!(
                        "SO_BINDTODEVICE: {}",
                        std::io::Error::last_os_error()
                    )));
                }
                own = Some(s);
            }
            agg.attach(Some(&ns), "eth0", mode)?;
            if mode == AttachMode::Native {
                // XDP_TX and redirects into eth0 need NAPI on its peer, the bridge port
                agg.attach_pass(None, &tb.bridge_port(m)?, mode)?;
            }
            nodes.push(Node {
                machine: m,
                kids,
                agg,
                mask,
                own,
            });
        }
        let send = (0..=n)
            .map(|m| udp(tb.ns(m), 0))
            .collect::<Result<Vec<_>, _>>()?;
        let down = (0..n)
            .map(|w| udp(tb.ns(w), DOWN_PORT))
            .collect::<Result<Vec<_>, _>>()?;
        let collector = udp(tb.ns(ps), COLLECT_PORT)?;
        let mut rx = Vec::new();
        for w in 0..n {
            if receiver == ReceiverPath::User || nodes.iter().any(|nd| nd.machine == w) {
                rx.push(None);
                continue;
            }
            let mut prog = Aggregator::load(segments)?;
            prog.configure_receiver(&ReceiverConfig {
                job: JOB,
                port: DOWN_PORT,
                notify_port: NOTIFY_PORT,
                segments,
            })?;
            prog.attach_receiver(Some(tb.ns(w)), "eth0", mode)?;
            let notify = udp(tb.ns(w), NOTIFY_PORT)?;
            rx.push(Some(Rx { prog, notify }));
        }
        Ok(XdpTree {
            nodes,
            rx,
            workers: n,
            parent: parent.to_vec(),
            bit,
            send,
            down,
            collector,
            losses: Mutex::new(Vec::new()),
            ips: (0..=n).map(|m| tb.ip(m)).collect(),
            segments,
            _run_stats: RunStats::enable()?,
        })
    }

    /// Lose these packets once each in the following iterations.
    pub fn inject(&self, losses: &[Loss]) {
        if let Ok(mut l) = self.losses.lock() {
            l.extend_from_slice(losses);
        }
    }

    /// Whether `loss` is injected now (and consume it).
    fn lose(&self, loss: Loss) -> bool {
        match self.losses.lock() {
            Ok(mut l) => match l.iter().position(|x| *x == loss) {
                Some(i) => {
                    l.remove(i);
                    true
                }
                None => false,
            },
            Err(_) => false,
        }
    }

    fn node(&self, machine: usize) -> Option<&Node> {
        self.nodes.iter().find(|n| n.machine == machine)
    }

    /// One segment of worker `w`'s gradient in iteration `iter` (zero-padded).
    fn segment(grads: &[i32], s: u32) -> [i32; GRADS] {
        let mut g = [0i32; GRADS];
        let start = s as usize * GRADS;
        if start < grads.len() {
            let end = (start + GRADS).min(grads.len());
            g[..end - start].copy_from_slice(&grads[start..end]);
        }
        g
    }

    /// Worker `w`'s gradient packets of `segments`, in one `sendmmsg` call where it can (the
    /// senders batch like the TCP data planes' large writes, so that the comparison is not one
    /// of system calls per byte).
    fn send_gradients(
        &self,
        w: usize,
        round: u32,
        segments: &[u32],
        grads: &[i32],
        bytes: &[AtomicU64],
    ) -> Result<(), TestbedError> {
        // an aggregator's own gradient enters its program locally and is not counted as sent
        let (sock, to, bit, counted) = match self.node(w) {
            Some(node) => match &node.own {
                Some(sock) => (
                    sock,
                    SocketAddrV4::new(SELF_DST, PORT),
                    node.kids.len() as u8,
                    false,
                ),
                None => return Ok(()),
            },
            None => (
                &self.send[w],
                SocketAddrV4::new(self.ips[self.parent[w]], PORT),
                self.bit[w],
                true,
            ),
        };
        let pkts: Vec<[u8; PACKET_LEN]> = segments
            .iter()
            .map(|&s| Packet::gradient(JOB, bit, round, s, Self::segment(grads, s)).emit())
            .collect();
        send_batch_to(sock, to, &pkts)
            .map_err(|e| TestbedError::Io(format!("worker {w} send: {e}")))?;
        if counted {
            bytes[w].fetch_add((pkts.len() * PACKET_LEN) as u64, Ordering::Relaxed);
        }
        Ok(())
    }

    /// One iteration (round `iter + 1`) of `len` gradients per worker.
    pub fn iterate(&self, iter: u32, len: usize) -> Result<Iteration, TestbedError> {
        let n = self.workers;
        let segs = len.div_ceil(GRADS) as u32;
        if segs == 0 || segs > self.segments {
            return Err(TestbedError::Setup(format!(
                "{len} gradients in {} segments",
                self.segments
            )));
        }
        let round = iter + 1;
        // the receivers count this iteration's aggregates to the last one
        for r in self.rx.iter().flatten() {
            r.prog.configure_receiver(&ReceiverConfig {
                job: JOB,
                port: DOWN_PORT,
                notify_port: NOTIFY_PORT,
                segments: segs,
            })?;
        }
        let grads: Vec<Vec<i32>> = (0..n)
            .map(|w| super::proto::gradient(w, iter, len))
            .collect();
        let want = super::proto::reference(n, iter, len);
        let bytes: Vec<AtomicU64> = (0..=n).map(|_| AtomicU64::new(0)).collect();
        let cpu: Vec<AtomicU64> = (0..=n).map(|_| AtomicU64::new(0)).collect();
        let run0: Vec<ProgramTime> = self
            .nodes
            .iter()
            .map(|nd| nd.agg.run_time())
            .collect::<Result<_, _>>()?;
        let rx_run0: Vec<Option<ProgramTime>> = self
            .rx
            .iter()
            .map(|r| r.as_ref().map(|r| r.prog.run_time()).transpose())
            .collect::<Result<_, _>>()?;
        let before: Vec<(u64, u64)> = self
            .nodes
            .iter()
            .map(|nd| nd.agg.stats().map(|s| (s.results, s.fetch_served)))
            .collect::<Result<_, _>>()?;
        let sent = AtomicBool::new(false);
        // aggregates received by all workers so far: the Integrity Check runs once this stalls
        let progress = AtomicU64::new(0);
        let stop = AtomicBool::new(false);
        let done: Vec<Mutex<Option<f64>>> = (0..n).map(|_| Mutex::new(None)).collect();
        let start = Instant::now();
        let result = std::thread::scope(|sc| -> Result<Vec<Receiver>, TestbedError> {
            let (grads, bytes, sent, stop, done) = (&grads, &bytes, &sent, &stop, &done);
            let cpu = &cpu;
            let progress = &progress;
            // the PS's collector: one copy of each total to each of its members
            let ps_kids = self.node(n).map(|nd| nd.kids.clone()).unwrap_or_default();
            let collector = sc.spawn(move || -> Result<(), TestbedError> {
                let t0 = thread_cpu();
                let mut seen = vec![false; segs as usize];
                let mut left = segs;
                let mut buf = [0u8; 2048];
                while left > 0 && !stop.load(Ordering::Relaxed) {
                    let Ok(k) = self.collector.recv(&mut buf) else {
                        continue;
                    };
                    let Ok(mut p) = Packet::parse(&buf[..k]) else {
                        continue;
                    };
                    if p.round != round || p.segment >= segs {
                        continue;
                    }
                    if !std::mem::replace(&mut seen[p.segment as usize], true) {
                        left -= 1;
                    }
                    p.kind = Kind::Result;
                    p.worker = 0xff;
                    let b = p.emit();
                    for &k in &ps_kids {
                        if self.lose(Loss::Down {
                            worker: k,
                            segment: p.segment,
                        }) {
                            continue;
                        }
                        let to = SocketAddrV4::new(self.ips[k], DOWN_PORT);
                        if self.send[n].send_to(&b, to).is_ok() {
                            bytes[n].fetch_add(PACKET_LEN as u64, Ordering::Relaxed);
                        }
                    }
                }
                charge(&cpu[n], t0);
                Ok(())
            });
            // each worker's receiver (an aggregator copies to its members)
            let mut receivers = Vec::new();
            for w in 0..n {
                if let Some(rx) = &self.rx[w] {
                    receivers.push(sc.spawn(move || -> Result<Receiver, TestbedError> {
                        let t0 = thread_cpu();
                        let r = self.xdp_receive(w, rx, round, segs, start, (sent, stop), bytes);
                        if let Ok(r) = &r
                            && r.complete()
                            && let Ok(mut d) = done[w].lock()
                        {
                            *d = Some(start.elapsed().as_secs_f64());
                        }
                        charge(&cpu[w], t0);
                        r
                    }));
                    continue;
                }
                receivers.push(sc.spawn(move || -> Result<Receiver, TestbedError> {
                    let t0 = thread_cpu();
                    let mut r = Receiver::new(round, segs as usize);
                    let kids = self.node(w).map(|nd| nd.kids.clone()).unwrap_or_default();
                    let mut buf = [0u8; 2048];
                    let mut last = Instant::now();
                    while !r.complete() {
                        if start.elapsed() > DEADLINE || stop.load(Ordering::Relaxed) {
                            charge(&cpu[w], t0);
                            return Ok(r);
                        }
                        let Ok(k) = self.down[w].recv(&mut buf) else {
                            // Algorithm 2, lines 8-13: fetch what is missing from the PS's map
                            if sent.load(Ordering::Relaxed)
                                && last.elapsed() > Duration::from_millis(100)
                            {
                                for s in r.missing().into_iter().take(64) {
                                    let p = Packet::fetch(JOB, 0, round, s).emit();
                                    let to = SocketAddrV4::new(self.ips[n], PORT);
                                    if self.down[w].send_to(&p, to).is_ok() {
                                        bytes[w].fetch_add(PACKET_LEN as u64, Ordering::Relaxed);
                                    }
                                }
                                last = Instant::now();
                            }
                            continue;
                        };
                        let Ok(p) = Packet::parse(&buf[..k]) else {
                            continue;
                        };
                        if r.on_packet(&p) {
                            last = Instant::now();
                            progress.fetch_add(1, Ordering::Relaxed);
                            for &kid in &kids {
                                if self.lose(Loss::Down {
                                    worker: kid,
                                    segment: p.segment,
                                }) {
                                    continue;
                                }
                                let to = SocketAddrV4::new(self.ips[kid], DOWN_PORT);
                                if self.send[w].send_to(&buf[..k], to).is_ok() {
                                    bytes[w].fetch_add(PACKET_LEN as u64, Ordering::Relaxed);
                                }
                            }
                        }
                    }
                    if let Ok(mut d) = done[w].lock() {
                        *d = Some(start.elapsed().as_secs_f64());
                    }
                    charge(&cpu[w], t0);
                    Ok(r)
                }));
            }
            // the senders
            let mut senders = Vec::new();
            for (w, g) in grads.iter().enumerate() {
                senders.push(sc.spawn(move || -> Result<(), TestbedError> {
                    let t0 = thread_cpu();
                    let segments: Vec<u32> = (0..segs)
                        .filter(|&s| {
                            !self.lose(Loss::Up {
                                worker: w,
                                segment: s,
                            })
                        })
                        .collect();
                    for chunk in segments.chunks(SEND_BATCH) {
                        self.send_gradients(w, round, chunk, g, bytes)?;
                    }
                    charge(&cpu[w], t0);
                    Ok(())
                }));
            }
            let mut err = None;
            for h in senders {
                if let Err(e) = join(h) {
                    err.get_or_insert(e);
                }
            }
            sent.store(true, Ordering::Relaxed);
            // Algorithm 2, lines 1-6, on every aggregating node's map, once no aggregate has
            // arrived anywhere for 100 ms (reading the maps costs a system call per slot, so
            // not while packets are still flowing)
            let (mut seen, mut since) = (0, Instant::now());
            while err.is_none() && start.elapsed() < DEADLINE {
                std::thread::sleep(Duration::from_millis(20));
                if done
                    .iter()
                    .all(|d| d.lock().map(|d| d.is_some()).unwrap_or(false))
                {
                    break;
                }
                // the Gradient Receivers' stored counts are their workers' progress
                let mut now = progress.load(Ordering::Relaxed);
                for r in self.rx.iter().flatten() {
                    match r.prog.stats() {
                        Ok(st) => now += st.rx_stored,
                        Err(e) => {
                            err.get_or_insert(e.into());
                        }
                    }
                }
                if now != seen {
                    (seen, since) = (now, Instant::now());
                } else if since.elapsed() > Duration::from_millis(100) {
                    if let Err(e) = self.recover(round, segs, grads, bytes) {
                        err = Some(e);
                    }
                    since = Instant::now();
                }
            }
            stop.store(true, Ordering::Relaxed);
            let mut rs = Vec::new();
            for h in receivers {
                match join(h) {
                    Ok(r) => rs.push(r),
                    Err(e) => {
                        err.get_or_insert(e);
                    }
                }
            }
            if let Err(e) = join(collector) {
                err.get_or_insert(e);
            }
            match err {
                Some(e) => Err(e),
                None => Ok(rs),
            }
        })?;
        let mut times = Vec::new();
        for (w, r) in result.iter().enumerate() {
            if !r.complete() {
                return Err(TestbedError::Wrong(format!(
                    "worker {w} lacks {} of {segs} aggregates after {} s",
                    r.missing().len(),
                    DEADLINE.as_secs()
                )));
            }
            for s in 0..segs {
                let got = r.aggregate(s).copied().unwrap_or([0; GRADS]);
                if got != Self::segment(&want, s) {
                    let bad: Vec<u32> = (0..segs)
                        .filter(|&x| r.aggregate(x).copied() != Some(Self::segment(&want, x)))
                        .collect();
                    let diff: Vec<i32> = got
                        .iter()
                        .zip(Self::segment(&want, s))
                        .map(|(a, b)| a.wrapping_sub(b))
                        .take(3)
                        .collect();
                    let own: Vec<Vec<i32>> = (0..n)
                        .map(|x| Self::segment(&grads[x], s)[..3].to_vec())
                        .collect();
                    return Err(TestbedError::Wrong(format!(
                        "worker {w} segment {s} differs from the reference sum (segments {bad:?}; diff {diff:?}; grads {own:?})"
                    )));
                }
            }
            times.push(done[w].lock().ok().and_then(|d| *d).unwrap_or(f64::NAN));
        }
        // what the programs ran, charged to the machine whose program it is
        let mut xdp = vec![0.0; n + 1];
        for (nd, r0) in self.nodes.iter().zip(run0) {
            xdp[nd.machine] += nd.agg.run_time()?.since(r0).nanos as f64 * 1e-9;
        }
        // each Gradient Receiver's run time, charged to its worker
        for (w, (r, r0)) in self.rx.iter().zip(rx_run0).enumerate() {
            if let (Some(r), Some(r0)) = (r, r0) {
                xdp[w] += r.prog.run_time()?.since(r0).nanos as f64 * 1e-9;
            }
        }
        // what the programs sent: forwarded aggregates and fetch replies
        for (nd, (r0, f0)) in self.nodes.iter().zip(before) {
            let st = nd.agg.stats()?;
            // the PS's program hands its totals to the local collector, not to the network
            let up = if nd.machine < n { st.results - r0 } else { 0 };
            let k = up + st.fetch_served - f0;
            bytes[nd.machine].fetch_add(k * PACKET_LEN as u64, Ordering::Relaxed);
        }
        Ok(Iteration {
            time: times.iter().copied().fold(0.0, f64::max),
            worker_times: times,
            bytes: bytes.iter().map(|b| b.load(Ordering::Relaxed)).collect(),
            cpu: cpu
                .iter()
                .map(|c| c.load(Ordering::Relaxed) as f64 * 1e-9)
                .collect(),
            xdp,
        })
    }

    /// Worker `w`'s side of a round with the Gradient Receiver `rx`: wait for the fetch signal
    /// (fetching from the PS what its map lacks once the map stops filling after the senders
    /// finished), then read the round's aggregates from the map.
    #[allow(clippy::too_many_arguments)]
    fn xdp_receive(
        &self,
        w: usize,
        rx: &Rx,
        round: u32,
        segs: u32,
        start: Instant,
        (sent, stop): (&AtomicBool, &AtomicBool),
        bytes: &[AtomicU64],
    ) -> Result<Receiver, TestbedError> {
        let n = self.workers;
        let mut buf = [0u8; 2048];
        let mut signalled = false;
        let (mut stored, mut checked) = (u64::MAX, Instant::now());
        while start.elapsed() <= DEADLINE && !stop.load(Ordering::Relaxed) {
            match rx.notify.recv(&mut buf) {
                Ok(k) => {
                    if let Ok(p) = Packet::parse(&buf[..k])
                        && p.kind == Kind::Result
                        && p.round == round
                    {
                        signalled = true;
                        break;
                    }
                }
                Err(_) => {
                    // no signal yet: once the senders are done and the map has not filled for
                    // 100 ms, Algorithm 2 lines 9-13 (what lacks the multicast signal, fetched
                    // from the PS; the reply lands in this map)
                    if !sent.load(Ordering::Relaxed)
                        || checked.elapsed() < Duration::from_millis(100)
                    {
                        continue;
                    }
                    checked = Instant::now();
                    let now = rx.prog.stats()?.rx_stored;
                    if std::mem::replace(&mut stored, now) != now {
                        continue;
                    }
                    let missing = rx.prog.receiver_missing(round)?;
                    for s in missing.into_iter().filter(|&s| s < segs).take(64) {
                        let p = Packet::fetch(JOB, 0, round, s).emit();
                        let to = SocketAddrV4::new(self.ips[n], PORT);
                        if self.down[w].send_to(&p, to).is_ok() {
                            bytes[w].fetch_add(PACKET_LEN as u64, Ordering::Relaxed);
                        }
                    }
                }
            }
        }
        let mut r = Receiver::new(round, segs as usize);
        if !signalled {
            return Ok(r);
        }
        // the training program fetches the aggregates from the map
        for s in 0..segs {
            let slot = rx.prog.slot(s)?;
            if slot.round == round && slot.bitmap == u32::MAX {
                r.on_packet(&Packet {
                    kind: Kind::Result,
                    worker: 0xff,
                    ..Packet::gradient(JOB, 0, round, s, slot.grads)
                });
            }
        }
        Ok(r)
    }

    /// Resend what the aggregating nodes' maps lack for `round`.
    fn recover(
        &self,
        round: u32,
        segs: u32,
        grads: &[Vec<i32>],
        bytes: &[AtomicU64],
    ) -> Result<(), TestbedError> {
        for nd in &self.nodes {
            let slots = nd.agg.slots()?;
            let missing = xp::aggregation_missing_all(&slots[..segs as usize], round, nd.mask);
            for (s, bits) in missing {
                for b in 0..32u32 {
                    if bits & (1 << b) == 0 {
                        continue;
                    }
                    let b = b as usize;
                    if b == nd.kids.len() {
                        self.send_gradients(nd.machine, round, &[s], &grads[nd.machine], bytes)?;
                        continue;
                    }
                    let Some(&kid) = nd.kids.get(b) else {
                        continue;
                    };
                    match self.node(kid) {
                        // an aggregator's aggregate, resent from its map once complete
                        Some(sub) => {
                            let slot = sub.agg.slot(s)?;
                            if slot.round == round && slot.done {
                                let p = Packet::gradient(JOB, self.bit[kid], round, s, slot.grads)
                                    .emit();
                                let to = SocketAddrV4::new(self.ips[nd.machine], PORT);
                                if self.send[kid].send_to(&p, to).is_ok() {
                                    bytes[kid].fetch_add(PACKET_LEN as u64, Ordering::Relaxed);
                                }
                            }
                        }
                        None => self.send_gradients(kid, round, &[s], &grads[kid], bytes)?,
                    }
                }
            }
        }
        Ok(())
    }
}

fn join<T>(
    h: std::thread::ScopedJoinHandle<'_, Result<T, TestbedError>>,
) -> Result<T, TestbedError> {
    h.join()
        .map_err(|_| TestbedError::Io("a testbed thread panicked".into()))?
}
