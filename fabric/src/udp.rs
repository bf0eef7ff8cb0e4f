//! `udp`: each node is its own socket (and, under the harness, its own process), frames travel as
//! UDP datagrams over the host's network stack (loopback, or a namespace's veth), sent and
//! received in batches by [`crate::batch`] (UDP GSO and GRO where the kernel has them,
//! `sendmmsg`/`recvmmsg` otherwise; each node reports which in [`NodeReport::offload`]).
//!
//! A node serves one [`Endpoint`] with one of three host I/O models (NetReduce's Table 1):
//! - [`IoModel::Event`]: batched and event-driven: sleep in `poll` until a datagram or the
//!   endpoint's next timer, then take every waiting datagram in one `recvmmsg`, run the state
//!   machine, and send what it produced in one `sendmmsg`;
//! - [`IoModel::BusyPoll`]: DPDK style: never sleep, spin on non-blocking `recvmmsg`;
//! - [`IoModel::Threads`]: ATP's multi-threaded I/O: a receive thread and a send thread around
//!   the protocol thread, frames handed over through queues.
//!
//! Control: the runner (a [`Coordinator`]) owns a UDP socket of its own. A node tells it `done`
//! when its endpoint finished (and again every 50 ms, since a datagram can be lost), and stops when the coordinator says `stop` (a node that finished
//! may still have to answer its peers, e.g. acknowledge or re-send a result). Datagrams from the
//! coordinator's address are control, everything else a frame from the peer that sent it.
//! Faults (loss, duplication, reordering delay) are applied on each node's egress from a seeded
//! generator per link, as on the other fabrics.

use crate::batch::{Offload, Receiver, Sender, bind_udp, enable_gro, socket_drops};
use crate::endpoint::{Endpoint, Nanos, NodeId};
use crate::fault::{Fate, FaultCounters, FaultInjector, Faults};
use std::collections::BinaryHeap;
use std::io::{self, BufRead, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub(crate) const STOP: &[u8] = b"inabench-stop";
pub(crate) const DONE: &[u8] = b"inabench-done";

/// How often a done node says so again until the run stops.
const DONE_AGAIN_NS: Nanos = 50_000_000;

/// A counted node's `done` datagram to the coordinator: sent when the node is first done (that
/// time is the report's `done_ns`) and again every [`DONE_AGAIN_NS`] until the run stops. The
/// coordinator waits for every counted node's, and one `send_to` can fail or be dropped (a full
/// socket buffer or queue on a rate-limited link), which left a run waiting out its deadline.
#[derive(Debug, Default)]
pub(crate) struct DoneReport {
    sent: Option<Nanos>,
}

impl DoneReport {
    /// At time `t`, a node that is `done` (and `counted`) sends its `done` with `send` when due.
    pub(crate) fn poll(
        &mut self,
        counted: bool,
        done: bool,
        t: Nanos,
        rep: &mut NodeReport,
        send: impl FnOnce(),
    ) {
        if !counted || !done {
            return;
        }
        match self.sent {
            None => rep.done_ns = t,
            Some(at) if t.saturating_sub(at) < DONE_AGAIN_NS => return,
            Some(_) => {}
        }
        self.sent = Some(t);
        send();
    }
}

/// How a node does its I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoModel {
    Event,
    BusyPoll,
    Threads,
}

impl IoModel {
    pub fn parse(s: &str) -> Option<IoModel> {
        match s {
            "event" => Some(IoModel::Event),
            "busy_poll" => Some(IoModel::BusyPoll),
            "threads" => Some(IoModel::Threads),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            IoModel::Event => "event",
            IoModel::BusyPoll => "busy_poll",
            IoModel::Threads => "threads",
        }
    }
}

/// How one node runs.
#[derive(Debug, Clone, Copy)]
pub struct NodeConfig {
    pub io: IoModel,
    pub faults: Faults,
    /// Largest datagram accepted.
    pub mtu: usize,
    /// Give up after this long.
    pub deadline: Duration,
    /// Tell the coordinator when the endpoint is done (workers do; switches do not).
    pub counted: bool,
}

/// What one node measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeReport {
    pub frames_tx: u64,
    pub frames_rx: u64,
    pub bytes_tx: u64,
    pub bytes_rx: u64,
    /// From the start signal to the endpoint's `is_done` (0 if it never was).
    pub done_ns: u64,
    /// From the start signal to the stop.
    pub wall_ns: u64,
    /// CPU time of this node's threads over the run (ns).
    pub cpu_ns: u64,
    pub faults: FaultCounters,
    /// True when the stop came from the coordinator (false: the deadline passed).
    pub stopped: bool,
    pub send_errors: u64,
    /// The batched socket layer's offload on this node: `gso+gro`, `gso`, `gro` or `mmsg`
    /// (see [`crate::batch::Offload`]).
    pub offload: &'static str,
    /// How long this node's serving thread was ready to run but waited for a CPU over the run
    /// (ns; the scheduler's `run_delay`, from `/proc/thread-self/schedstat`; 0 where the kernel
    /// does not keep it). With more nodes than cores, a switch that waits here while datagrams
    /// queue at its socket is the emulation's serial bottleneck.
    pub run_delay_ns: u64,
    /// Datagrams the kernel dropped at this node's socket over the run (a full receive buffer:
    /// `SK_MEMINFO_DROPS`), lost as on a wire.
    pub socket_drops: u64,
}

/// A UDP socket on 127.0.0.1 with large buffers.
pub fn bind_loopback() -> io::Result<UdpSocket> {
    bind(Ipv4Addr::LOCALHOST)
}

/// A UDP socket on `ip` (any port) with large buffers.
pub fn bind(ip: Ipv4Addr) -> io::Result<UdpSocket> {
    bind_udp(ip, 8 << 20)
}

/// This thread's CPU time (ns); 0 where the clock is refused.
fn thread_cpu_ns() -> u64 {
    crate::wrap::thread_cpu_ns().unwrap_or(0)
}

/// This thread's scheduler run delay (ns spent runnable, waiting for a CPU):
/// `/proc/thread-self/schedstat`'s second field; 0 where the file is missing or unreadable.
fn thread_run_delay_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

/// Set the calling thread's nice value (on Linux a per-thread setting: `setpriority(2)` with
/// `PRIO_PROCESS` and id 0). A negative value needs `CAP_SYS_NICE`; the error says when the
/// kernel refused.
pub fn set_thread_nice(nice: i32) -> io::Result<()> {
    // SAFETY: a plain system call on the calling thread
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The node's view of the fabric: its peers by node id, and the coordinator.
#[derive(Debug, Clone)]
pub struct Wiring {
    pub peers: Vec<SocketAddrV4>,
    pub coordinator: SocketAddrV4,
}

/// A node served as several shards (a switch split across threads or processes, as a Tofino
/// splits its work across pipes), each shard an identical endpoint on its own socket: a sender
/// picks the shard of each frame with `key` (frame to a shard number, taken modulo the node's
/// shard count), so every frame of one aggregation lands on the same shard.
#[derive(Clone)]
pub struct Steering {
    /// `shards[i]`: the addresses of node `i`'s shards (empty: node `i` is `peers[i]` alone).
    pub shards: Vec<Vec<SocketAddrV4>>,
    pub key: ShardKey,
}

/// A frame's shard number (before the modulo).
pub type ShardKey = Arc<dyn Fn(&[u8]) -> usize + Send + Sync>;

impl std::fmt::Debug for Steering {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Steering")
            .field("shards", &self.shards)
            .finish_non_exhaustive()
    }
}

/// Where a node's frames go: its peers, and the shard of a sharded peer.
#[derive(Clone)]
struct Route {
    peers: Vec<SocketAddrV4>,
    steer: Option<Steering>,
}

impl Route {
    fn new(wiring: &Wiring, steer: Option<&Steering>) -> Route {
        Route {
            peers: wiring.peers.clone(),
            steer: steer.cloned(),
        }
    }

    fn addr(&self, to: NodeId, bytes: &[u8]) -> Option<SocketAddrV4> {
        if let Some(s) = &self.steer
            && let Some(sh) = s.shards.get(to as usize)
            && !sh.is_empty()
        {
            return Some(sh[(s.key)(bytes) % sh.len()]);
        }
        self.peers.get(to as usize).copied()
    }

    /// Every address a frame may come from (a shard's too), to its node id.
    fn sender_ids(&self) -> SenderIds {
        let mut v: Vec<(u64, NodeId)> = self
            .peers
            .iter()
            .enumerate()
            .map(|(i, a)| (SenderIds::key(a), i as NodeId))
            .collect();
        if let Some(s) = &self.steer {
            for (i, sh) in s.shards.iter().enumerate() {
                v.extend(sh.iter().map(|a| (SenderIds::key(a), i as NodeId)));
            }
        }
        v.sort_unstable();
        v.dedup_by_key(|e| e.0);
        SenderIds(v)
    }
}

/// Source address to node id, looked up once per datagram: a sorted vector searched by binary
/// search (a hash map's SipHash per datagram showed in the switch's profile).
struct SenderIds(Vec<(u64, NodeId)>);

impl SenderIds {
    fn key(a: &SocketAddrV4) -> u64 {
        (u64::from(u32::from(*a.ip())) << 16) | u64::from(a.port())
    }

    fn get(&self, a: &SocketAddrV4) -> Option<&NodeId> {
        let k = Self::key(a);
        self.0
            .binary_search_by_key(&k, |e| e.0)
            .ok()
            .map(|i| &self.0[i].1)
    }
}

/// A held-back frame: (due, sequence, destination, bytes).
type Held = std::cmp::Reverse<(Nanos, u64, NodeId, Vec<u8>)>;

/// Frames held back by a reordering fault.
struct Delayed {
    heap: BinaryHeap<Held>,
    seq: u64,
}

/// Egress: faults, the delay line, and the batch for `sendmmsg`, each frame with its
/// destination address (its peer's, or the shard's its steering key names) resolved when it
/// joins the batch.
struct Egress {
    id: NodeId,
    injector: FaultInjector,
    delayed: Delayed,
    route: Route,
    out: Vec<(SocketAddrV4, Vec<u8>)>,
}

impl Egress {
    fn new(id: NodeId, faults: Faults, route: Route) -> Egress {
        Egress {
            id,
            injector: FaultInjector::new(faults),
            delayed: Delayed {
                heap: BinaryHeap::new(),
                seq: 0,
            },
            route,
            out: Vec::new(),
        }
    }

    /// Into the batch, if `to` is a node of the wiring (a frame to no node is dropped).
    fn queue(&mut self, to: NodeId, bytes: Vec<u8>) {
        if let Some(a) = self.route.addr(to, &bytes) {
            self.out.push((a, bytes));
        }
    }

    fn push(&mut self, now: Nanos, to: NodeId, bytes: Vec<u8>) {
        match self.injector.fate(self.id, to) {
            Fate::Drop => {}
            Fate::Deliver {
                copies,
                extra_delay_ns,
            } => {
                if copies > 1 {
                    self.queue(to, bytes.clone());
                }
                if extra_delay_ns > 0 {
                    self.delayed.seq += 1;
                    self.delayed.heap.push(std::cmp::Reverse((
                        now + extra_delay_ns,
                        self.delayed.seq,
                        to,
                        bytes,
                    )));
                } else {
                    self.queue(to, bytes);
                }
            }
        }
    }

    fn release(&mut self, now: Nanos) {
        while let Some(std::cmp::Reverse((due, _, _, _))) = self.delayed.heap.peek() {
            if *due > now {
                break;
            }
            if let Some(std::cmp::Reverse((_, _, to, b))) = self.delayed.heap.pop() {
                self.queue(to, b);
            }
        }
    }

    fn next_due(&self) -> Option<Nanos> {
        self.delayed.heap.peek().map(|r| r.0.0)
    }
}

/// Serve `node` on `sock` until the coordinator says stop or the deadline passes.
pub fn serve<N: Endpoint>(
    node: &mut N,
    sock: &UdpSocket,
    wiring: &Wiring,
    cfg: &NodeConfig,
) -> NodeReport {
    serve_steered(node, sock, wiring, cfg, None)
}

/// [`serve`], with frames to a sharded peer steered to its shards.
pub fn serve_steered<N: Endpoint>(
    node: &mut N,
    sock: &UdpSocket,
    wiring: &Wiring,
    cfg: &NodeConfig,
    steer: Option<&Steering>,
) -> NodeReport {
    let io = SocketLayer::new(sock, cfg.mtu);
    serve_prepared(node, sock, wiring, cfg, steer, io)
}

/// A node's batched socket layer, made before the run: the offload probed and GRO turned on
/// ([`prepare`]), the receive buffers allocated and their pages faulted in. A node process makes
/// it before it says `ready`, so none of this (a probe's two sockets and loopback round trip,
/// ~1,000 page faults of the 4 MiB of GRO buffers) runs inside the timed run while other nodes
/// are sending.
pub struct SocketLayer {
    off: Offload,
    mtu: usize,
    rx: Receiver,
    tx: Sender,
}

impl SocketLayer {
    /// For `sock`, datagrams of up to `mtu` bytes (the [`NodeConfig::mtu`] it will serve with).
    pub fn new(sock: &UdpSocket, mtu: usize) -> SocketLayer {
        let off = prepare(sock);
        let mut rx = Receiver::new(mtu, off);
        rx.prefault();
        SocketLayer {
            off,
            mtu,
            rx,
            tx: Sender::new(off),
        }
    }

    /// The offload this layer uses.
    pub fn offload(&self) -> Offload {
        self.off
    }
}

/// [`serve_steered`] on a socket layer made beforehand ([`SocketLayer::new`]; one made for
/// another MTU than `cfg.mtu` is made again).
pub fn serve_prepared<N: Endpoint>(
    node: &mut N,
    sock: &UdpSocket,
    wiring: &Wiring,
    cfg: &NodeConfig,
    steer: Option<&Steering>,
    io: SocketLayer,
) -> NodeReport {
    let io = if io.mtu == cfg.mtu {
        io
    } else {
        SocketLayer::new(sock, cfg.mtu)
    };
    let off = io.off;
    let route = Route::new(wiring, steer);
    let mut rep = match cfg.io {
        IoModel::Threads => serve_threads(node, sock, wiring, &route, cfg, off),
        _ => serve_loop(node, sock, wiring, &route, cfg, io),
    };
    rep.offload = off.label();
    rep
}

/// The offload this host has ([`Offload::probe`]), with GRO turned on for `sock` where it is.
pub fn prepare(sock: &UdpSocket) -> Offload {
    let mut off = Offload::probe();
    if off.gro && enable_gro(sock).is_err() {
        off.gro = false;
    }
    off
}

/// Send the egress batch; each sent frame's buffer then goes to `recycle` (the sending node's
/// [`Endpoint::recycle`]: the kernel has copied it, so the node may build its next frame in it
/// instead of allocating one; on this fabric the frames a node receives are slices of the
/// receive batch, so its own sent buffers are the ones to reuse).
fn flush(
    sock: &UdpSocket,
    tx: &mut Sender,
    eg: &mut Egress,
    rep: &mut NodeReport,
    mut recycle: impl FnMut(Vec<u8>),
) {
    if eg.out.is_empty() {
        return;
    }
    rep.send_errors += tx.send(sock.as_raw_fd(), &eg.out);
    for (_, b) in eg.out.drain(..) {
        recycle(b);
    }
}

/// Every frame the node has to send now, into the egress batch. The batch goes out after the
/// whole receive batch was handled: sends flushed every 64 frames while handling it (GSO runs
/// of ~11 datagrams at a switch of 6 workers) cost the switch ~60% more CPU and the workers
/// twice theirs in a paired test (2026-11-26).
fn drain<N: Endpoint>(node: &mut N, eg: &mut Egress, rep: &mut NodeReport, t: Nanos) {
    while let Some(tx) = node.poll_transmit(t) {
        rep.frames_tx += 1;
        rep.bytes_tx += tx.bytes.len() as u64;
        eg.push(t, tx.to, tx.bytes);
    }
}

fn serve_loop<N: Endpoint>(
    node: &mut N,
    sock: &UdpSocket,
    wiring: &Wiring,
    route: &Route,
    cfg: &NodeConfig,
    io: SocketLayer,
) -> NodeReport {
    let fd = sock.as_raw_fd();
    let from = route.sender_ids();
    let SocketLayer { mut rx, mut tx, .. } = io;
    let start = Instant::now();
    let cpu0 = thread_cpu_ns();
    let delay0 = thread_run_delay_ns();
    let drops0 = socket_drops(sock).unwrap_or(0);
    let now = || start.elapsed().as_nanos() as Nanos;
    let deadline = cfg.deadline.as_nanos() as Nanos;
    let mut rep = NodeReport::default();
    let mut eg = Egress::new(node.id(), cfg.faults, route.clone());
    let mut done = DoneReport::default();
    let busy = cfg.io == IoModel::BusyPoll;
    loop {
        let t = now();
        drain(node, &mut eg, &mut rep, t);
        eg.release(t);
        flush(sock, &mut tx, &mut eg, &mut rep, |b| node.recycle(b));
        done.poll(cfg.counted, node.is_done(), t, &mut rep, || {
            let _ = sock.send_to(DONE, wiring.coordinator);
        });
        if t > deadline {
            break;
        }
        // take what is waiting; sleep in `poll` only when nothing is (a loaded node skips the
        // `poll` call)
        if rx.recv(fd, false) == 0 && !busy {
            let wake = [node.poll_timeout(), eg.next_due()]
                .into_iter()
                .flatten()
                .min()
                .map(|w| w.saturating_sub(now()) / 1_000_000)
                .unwrap_or(5)
                .min(5) as i32;
            let mut pfd = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd
            unsafe { libc::poll(&mut pfd, 1, wake) };
            rx.recv(fd, false);
        }
        let t = now();
        let mut stop = false;
        // the sender of the last datagram: a GRO run's datagrams share theirs
        let mut last: Option<(SocketAddrV4, NodeId)> = None;
        rx.datagrams(|src, bytes| {
            if src == wiring.coordinator {
                stop |= bytes == STOP;
                return;
            }
            let id = match last {
                Some((a, id)) if a == src => id,
                _ => {
                    let Some(&id) = from.get(&src) else { return };
                    last = Some((src, id));
                    id
                }
            };
            rep.frames_rx += 1;
            rep.bytes_rx += bytes.len() as u64;
            node.handle_packet(t, id, bytes);
        });
        if stop {
            rep.stopped = true;
            break;
        }
        if let Some(d) = node.poll_timeout() {
            let t = now();
            if d <= t {
                node.handle_timeout(t);
            }
        }
    }
    rep.wall_ns = now();
    rep.cpu_ns = thread_cpu_ns().saturating_sub(cpu0);
    rep.run_delay_ns = thread_run_delay_ns().saturating_sub(delay0);
    rep.socket_drops = socket_drops(sock).unwrap_or(0).saturating_sub(drops0);
    rep.faults = eg.injector.counters.clone();
    rep
}

fn serve_threads<N: Endpoint>(
    node: &mut N,
    sock: &UdpSocket,
    wiring: &Wiring,
    route: &Route,
    cfg: &NodeConfig,
    off: Offload,
) -> NodeReport {
    let start = Instant::now();
    let now = move || start.elapsed().as_nanos() as Nanos;
    let from = route.sender_ids();
    let stop = Arc::new(AtomicBool::new(false));
    let (rx_tx, rx_rx) = mpsc::channel::<Vec<(NodeId, Vec<u8>)>>();
    let (tx_tx, tx_rx) = mpsc::channel::<Vec<(SocketAddrV4, Vec<u8>)>>();
    let mut rep = NodeReport::default();
    let (Ok(rsock), Ok(ssock)) = (sock.try_clone(), sock.try_clone()) else {
        return rep;
    };
    let _ = rsock.set_read_timeout(Some(Duration::from_millis(5)));
    let coord = wiring.coordinator;
    let mtu = cfg.mtu;
    let stop_rx = stop.clone();
    let mut cpu_other = 0u64;
    let cpu0 = thread_cpu_ns();
    // the protocol thread's run delay (the I/O threads' is not counted)
    let delay0 = thread_run_delay_ns();
    let drops0 = socket_drops(sock).unwrap_or(0);
    std::thread::scope(|s| {
        // receive thread: blocking recvmmsg, batches to the protocol thread
        let receiver = s.spawn(move || {
            let c0 = thread_cpu_ns();
            let mut rx = Receiver::new(mtu, off);
            let fd = rsock.as_raw_fd();
            while !stop_rx.load(Ordering::Relaxed) {
                let mut pfd = libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd
                unsafe { libc::poll(&mut pfd, 1, 5) };
                let n = rx.recv(fd, false);
                let mut batch = Vec::with_capacity(n);
                rx.datagrams(|src, bytes| {
                    if src == coord {
                        if bytes == STOP {
                            stop_rx.store(true, Ordering::SeqCst);
                        }
                        return;
                    }
                    if let Some(id) = from.get(&src) {
                        batch.push((*id, bytes.to_vec()));
                    }
                });
                if !batch.is_empty() && rx_tx.send(batch).is_err() {
                    break;
                }
            }
            thread_cpu_ns().saturating_sub(c0)
        });
        // send thread: batches from the protocol thread (destinations resolved) to sendmmsg
        let sender = s.spawn(move || {
            let c0 = thread_cpu_ns();
            let mut errors = 0;
            let fd = ssock.as_raw_fd();
            let mut tx = Sender::new(off);
            for batch in tx_rx {
                errors += tx.send(fd, &batch);
            }
            (thread_cpu_ns().saturating_sub(c0), errors)
        });
        // the protocol thread (this one)
        let mut eg = Egress::new(node.id(), cfg.faults, route.clone());
        let mut done = DoneReport::default();
        loop {
            let t = now();
            while let Some(tx) = node.poll_transmit(t) {
                rep.frames_tx += 1;
                rep.bytes_tx += tx.bytes.len() as u64;
                eg.push(t, tx.to, tx.bytes);
            }
            eg.release(t);
            if !eg.out.is_empty() && tx_tx.send(std::mem::take(&mut eg.out)).is_err() {
                break;
            }
            done.poll(cfg.counted, node.is_done(), t, &mut rep, || {
                let _ = sock.send_to(DONE, coord);
            });
            if stop.load(Ordering::Relaxed) {
                break;
            }
            if start.elapsed() > cfg.deadline {
                break;
            }
            let wait = [node.poll_timeout(), eg.next_due()]
                .into_iter()
                .flatten()
                .min()
                .map(|w| w.saturating_sub(now()))
                .unwrap_or(5_000_000)
                .min(5_000_000);
            match rx_rx.recv_timeout(Duration::from_nanos(wait)) {
                Ok(batch) => {
                    let t = now();
                    for (id, b) in batch
                        .iter()
                        .chain(rx_rx.try_iter().flatten().collect::<Vec<_>>().iter())
                    {
                        rep.frames_rx += 1;
                        rep.bytes_rx += b.len() as u64;
                        node.handle_packet(t, *id, b);
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
            if node.poll_timeout().is_some_and(|d| d <= now()) {
                node.handle_timeout(now());
            }
        }
        // the receive thread saw the coordinator's stop (it may have ended the loop by closing
        // its queue)
        rep.stopped = stop.load(Ordering::SeqCst);
        stop.store(true, Ordering::SeqCst);
        drop(tx_tx);
        rep.faults = eg.injector.counters.clone();
        if let Ok(c) = receiver.join() {
            cpu_other += c;
        }
        if let Ok((c, e)) = sender.join() {
            cpu_other += c;
            rep.send_errors += e;
        }
    });
    rep.wall_ns = now();
    rep.cpu_ns = thread_cpu_ns().saturating_sub(cpu0) + cpu_other;
    rep.run_delay_ns = thread_run_delay_ns().saturating_sub(delay0);
    rep.socket_drops = socket_drops(sock).unwrap_or(0).saturating_sub(drops0);
    rep
}

/// The runner's side: start signal, `done` collection, stop.
pub struct Coordinator {
    pub sock: UdpSocket,
}

impl Coordinator {
    pub fn new() -> io::Result<Coordinator> {
        Ok(Coordinator {
            sock: bind_loopback()?,
        })
    }

    /// A coordinator listening on `ip` (e.g. the bridge of a namespace topology).
    pub fn on(ip: Ipv4Addr) -> io::Result<Coordinator> {
        Ok(Coordinator { sock: bind(ip)? })
    }

    pub fn addr(&self) -> io::Result<SocketAddrV4> {
        match self.sock.local_addr()? {
            SocketAddr::V4(a) => Ok(a),
            SocketAddr::V6(_) => Err(io::Error::other("coordinator bound to IPv6")),
        }
    }

    /// Wait until `counted` nodes said `done` (or `deadline` passes), then tell every node in
    /// `nodes` to stop. Returns how many said done and when the last did (since `start`).
    pub fn wait_and_stop(
        &self,
        counted: usize,
        nodes: &[SocketAddrV4],
        start: Instant,
        deadline: Duration,
    ) -> (usize, Duration) {
        let mut done = std::collections::HashSet::new();
        let mut last = Duration::ZERO;
        let _ = self.sock.set_read_timeout(Some(Duration::from_millis(20)));
        let mut buf = [0u8; 64];
        while done.len() < counted && start.elapsed() < deadline {
            if let Ok((n, from)) = self.sock.recv_from(&mut buf)
                && &buf[..n] == DONE
                && done.insert(from)
            {
                last = start.elapsed();
            }
        }
        // the stop goes twice: a control datagram lost to a full buffer must not hang a node
        for _ in 0..2 {
            for a in nodes {
                let _ = self.sock.send_to(STOP, a);
            }
        }
        (done.len(), last)
    }
}

/// A node's control lines, the child side: print `ready <port>`, read `go <coordinator>
/// <peer 0> <peer 1> ...`, each a port on 127.0.0.1 or an `ip:port` (a sharded peer: its shards'
/// addresses joined by commas; [`Wiring::peers`] gets the first).
pub fn child_handshake(
    sock: &UdpSocket,
    input: &mut impl BufRead,
    output: &mut impl Write,
) -> io::Result<Wiring> {
    child_handshake_sharded(sock, input, output).map(|(w, _)| w)
}

/// [`child_handshake`], with every peer's shard addresses (one entry for a peer that is not
/// sharded).
pub fn child_handshake_sharded(
    sock: &UdpSocket,
    input: &mut impl BufRead,
    output: &mut impl Write,
) -> io::Result<(Wiring, Vec<Vec<SocketAddrV4>>)> {
    let port = sock.local_addr()?.port();
    writeln!(output, "ready {port}")?;
    output.flush()?;
    let mut line = String::new();
    input.read_line(&mut line)?;
    let mut it = line.split_whitespace();
    if it.next() != Some("go") {
        return Err(io::Error::other(format!(
            "expected `go ...` from the runner, got `{}`",
            line.trim()
        )));
    }
    let one = |p: &str| {
        if p.contains(':') {
            p.parse::<SocketAddrV4>().map_err(|e| e.to_string())
        } else {
            p.parse::<u16>()
                .map(|port| SocketAddrV4::new(Ipv4Addr::LOCALHOST, port))
                .map_err(|e| e.to_string())
        }
    };
    let addrs: Vec<Vec<SocketAddrV4>> = it
        .map(|p| p.split(',').map(one).collect::<Result<Vec<_>, _>>())
        .collect::<Result<_, _>>()
        .map_err(|e| io::Error::other(format!("bad address in `{}`: {e}", line.trim())))?;
    let Some((coord, peers)) = addrs.split_first() else {
        return Err(io::Error::other("`go` without addresses"));
    };
    let (Some(coord), 1) = (coord.first(), coord.len()) else {
        return Err(io::Error::other("`go` needs one coordinator address"));
    };
    Ok((
        Wiring {
            coordinator: *coord,
            peers: peers.iter().filter_map(|p| p.first().copied()).collect(),
        },
        peers.to_vec(),
    ))
}

/// Parse a child's `ready <port>` line.
pub fn parse_ready(line: &str) -> Option<u16> {
    line.trim().strip_prefix("ready ")?.parse().ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_done_node_says_so_again_until_stopped_and_keeps_its_first_time() {
        let mut d = super::DoneReport::default();
        let mut rep = super::NodeReport::default();
        let mut sent = Vec::new();
        for t in [
            1_000,
            2_000_000,
            30_000_000,
            49_000_000,
            51_000,
            60_000_000,
            109_000_000,
        ] {
            // not done before 2 ms
            let done = t >= 2_000_000;
            d.poll(true, done, t, &mut rep, || sent.push(t));
        }
        assert_eq!(sent, vec![2_000_000, 60_000_000]);
        assert_eq!(rep.done_ns, 2_000_000);
        d.poll(true, true, 110_000_000, &mut rep, || sent.push(110_000_000));
        assert_eq!(sent, vec![2_000_000, 60_000_000, 110_000_000]);
        assert_eq!(rep.done_ns, 2_000_000);
        // a node the coordinator does not count (a switch) never says done
        let (mut d, mut rep) = (super::DoneReport::default(), super::NodeReport::default());
        d.poll(false, true, 5, &mut rep, || {
            panic!("an uncounted node sent done")
        });
        assert_eq!(rep.done_ns, 0);
    }

    use super::*;
    use crate::endpoint::Transmit;

    /// Node 0 sends `n` numbered frames to node 1, which counts them.
    struct Pinger {
        id: NodeId,
        n: u32,
        sent: u32,
        got: u32,
        /// buffers the fabric handed back
        recycled: u32,
    }

    impl Endpoint for Pinger {
        fn id(&self) -> NodeId {
            self.id
        }
        fn handle_packet(&mut self, _now: Nanos, _from: NodeId, f: &[u8]) {
            if f.len() == 4 {
                self.got += 1;
            }
        }
        fn poll_transmit(&mut self, _now: Nanos) -> Option<Transmit> {
            if self.id == 0 && self.sent < self.n {
                self.sent += 1;
                return Some(Transmit {
                    to: 1,
                    bytes: self.sent.to_be_bytes().to_vec(),
                });
            }
            None
        }
        fn poll_timeout(&self) -> Option<Nanos> {
            None
        }
        fn handle_timeout(&mut self, _now: Nanos) {}
        fn is_done(&self) -> bool {
            self.id == 1 && self.got == self.n
        }
        fn recycle(&mut self, buf: Vec<u8>) {
            if buf.len() == 4 {
                self.recycled += 1;
            }
        }
    }

    /// (reports, frames node 1 got, buffers node 0 got back)
    fn run(io: IoModel, loss: f64) -> (Vec<NodeReport>, u32, u32) {
        let coord = Coordinator::new().expect("coordinator");
        let socks: Vec<UdpSocket> = (0..2).map(|_| bind_loopback().expect("bind")).collect();
        let peers: Vec<SocketAddrV4> = socks
            .iter()
            .map(|s| match s.local_addr().expect("addr") {
                SocketAddr::V4(a) => a,
                SocketAddr::V6(_) => unreachable!(),
            })
            .collect();
        let wiring = Wiring {
            peers: peers.clone(),
            coordinator: coord.addr().expect("addr"),
        };
        let start = Instant::now();
        let (reports, got) = std::thread::scope(|s| {
            let hs: Vec<_> = socks
                .iter()
                .enumerate()
                .map(|(i, sock)| {
                    let wiring = wiring.clone();
                    s.spawn(move || {
                        let mut p = Pinger {
                            id: i as NodeId,
                            n: 2000,
                            sent: 0,
                            got: 0,
                            recycled: 0,
                        };
                        let cfg = NodeConfig {
                            io,
                            faults: Faults {
                                loss,
                                seed: 3,
                                ..Faults::default()
                            },
                            mtu: 2048,
                            deadline: Duration::from_secs(2),
                            counted: i == 1,
                        };
                        let r = serve(&mut p, sock, &wiring, &cfg);
                        (r, (p.got, p.recycled))
                    })
                })
                .collect();
            let (done, _) = coord.wait_and_stop(1, &peers, start, Duration::from_millis(1500));
            let out: Vec<(NodeReport, (u32, u32))> =
                hs.into_iter().map(|h| h.join().expect("node")).collect();
            let _ = done;
            let got = (out[1].1.0, out[0].1.1);
            (out.into_iter().map(|(r, _)| r).collect::<Vec<_>>(), got)
        });
        (reports, got.0, got.1)
    }

    #[test]
    fn every_io_model_moves_every_frame_and_stops_on_command() {
        for io in [IoModel::Event, IoModel::BusyPoll, IoModel::Threads] {
            let (reps, got, recycled) = run(io, 0.0);
            assert_eq!(got, 2000, "{io:?}");
            // the event and busy-poll loops hand every sent buffer back to its sender (the
            // threads model sends on another thread and drops them)
            let want = if io == IoModel::Threads { 0 } else { 2000 };
            assert_eq!(recycled, want, "{io:?}");
            assert_eq!(reps[0].frames_tx, 2000, "{io:?}");
            assert_eq!(reps[1].frames_rx, 2000, "{io:?}");
            assert!(
                reps[1].done_ns > 0 && reps.iter().all(|r| r.stopped),
                "{io:?} {reps:?}"
            );
        }
    }

    /// Node 1 runs as two shards; node 0 steers frame k to shard k mod 2: each shard gets
    /// exactly its half, and their frames come back to node 0 as node 1's.
    #[test]
    fn a_steered_sender_reaches_the_shard_its_key_names() {
        struct Shard {
            got: Vec<u32>,
        }
        impl Endpoint for Shard {
            fn id(&self) -> NodeId {
                1
            }
            fn handle_packet(&mut self, _now: Nanos, from: NodeId, f: &[u8]) {
                if let (0, Ok(b)) = (from, <[u8; 4]>::try_from(f)) {
                    self.got.push(u32::from_be_bytes(b));
                }
            }
            fn poll_transmit(&mut self, _now: Nanos) -> Option<Transmit> {
                None
            }
            fn poll_timeout(&self) -> Option<Nanos> {
                None
            }
            fn handle_timeout(&mut self, _now: Nanos) {}
            fn is_done(&self) -> bool {
                self.got.len() == 500
            }
        }
        let coord = Coordinator::new().expect("coordinator");
        let socks: Vec<UdpSocket> = (0..3).map(|_| bind_loopback().expect("bind")).collect();
        let addrs: Vec<SocketAddrV4> = socks
            .iter()
            .map(|s| match s.local_addr().expect("addr") {
                SocketAddr::V4(a) => a,
                SocketAddr::V6(_) => unreachable!(),
            })
            .collect();
        let wiring = Wiring {
            peers: vec![addrs[0], addrs[1]],
            coordinator: coord.addr().expect("addr"),
        };
        let steer = Steering {
            shards: vec![vec![], vec![addrs[1], addrs[2]]],
            key: Arc::new(|f: &[u8]| {
                <[u8; 4]>::try_from(f).map_or(0, |b| u32::from_be_bytes(b) as usize)
            }),
        };
        let cfg = |counted| NodeConfig {
            io: IoModel::Event,
            faults: Faults::default(),
            mtu: 2048,
            deadline: Duration::from_secs(2),
            counted,
        };
        let start = Instant::now();
        let got = std::thread::scope(|s| {
            let (w, st, socks) = (&wiring, &steer, &socks);
            let (c0, c1) = (cfg(false), cfg(true));
            let sender = s.spawn(move || {
                let mut p = Pinger {
                    id: 0,
                    n: 1000,
                    sent: 0,
                    got: 0,
                    recycled: 0,
                };
                serve_steered(&mut p, &socks[0], w, &c0, Some(st))
            });
            let shards: Vec<_> = [&socks[1], &socks[2]]
                .into_iter()
                .map(|sock| {
                    s.spawn(move || {
                        let mut sh = Shard { got: Vec::new() };
                        serve(&mut sh, sock, w, &c1);
                        sh.got
                    })
                })
                .collect();
            let (done, _) = coord.wait_and_stop(2, &addrs, start, Duration::from_millis(1500));
            assert_eq!(done, 2, "both shards got their half");
            assert_eq!(sender.join().expect("sender").frames_tx, 1000);
            shards
                .into_iter()
                .map(|h| h.join().expect("shard"))
                .collect::<Vec<_>>()
        });
        // Pinger numbers its frames 1..=1000: odd ones to shard 1, even ones to shard 0
        assert_eq!(
            got[0],
            (1..=1000).filter(|k| k % 2 == 0).collect::<Vec<u32>>()
        );
        assert_eq!(
            got[1],
            (1..=1000).filter(|k| k % 2 == 1).collect::<Vec<u32>>()
        );
    }

    #[test]
    fn loss_really_drops_datagrams() {
        let (reps, got, _) = run(IoModel::Event, 0.1);
        assert!(reps[0].faults.dropped > 100, "{reps:?}");
        assert_eq!(u64::from(got), 2000 - reps[0].faults.dropped);
        assert_eq!(reps[1].done_ns, 0, "node 1 never completes");
        assert!(
            reps.iter().all(|r| r.stopped),
            "the coordinator stopped both at its deadline"
        );
    }
}
