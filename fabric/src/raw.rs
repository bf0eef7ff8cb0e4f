//! `raw`: the endpoints' frames (whole Ethernet frames) sent and received as they are on named
//! network interfaces through `AF_PACKET` sockets (`SOCK_RAW`, every ethertype), one process per
//! node (the runner is `inabench_ina_run::raw_node`).
//!
//! Topology: one point-to-point link per pair of nodes (a veth pair between two network
//! namespaces, [`crate::netns::Netns::link`]); a frame an endpoint addresses to node `j`
//! ([`crate::Transmit::to`]) goes out on the link to `j`, and a frame that comes in on the link
//! to `i` is from node `i`, whatever MAC addresses it carries. This is a host cabled to a switch
//! port: a bridge (or a learning switch) would deliver each frame by its destination MAC, which
//! bypasses a bump-in-the-wire accelerator such as NetReduce's, whose workers address their RC
//! frames to each other's MACs. Frames are neither rewritten nor encapsulated.
//!
//! Control (done, stop) stays on a UDP socket to the runner's [`crate::udp::Coordinator`] (the
//! namespaces' management bridge), as on the `udp` fabric; faults are applied on each node's
//! egress from the same seeded generator per link.
//!
//! Socket kind, per link, chosen when the node opens its links ([`open_links`]): an AF_XDP
//! socket in copy mode on the interface's queue 0 with its own XDP program ([`crate::xsk`],
//! label `af_xdp(copy)`) where one can be made on that interface, else `AF_PACKET`
//! ([`SOCKET_KIND`]), the reason AF_XDP could not be used kept in one sentence. The choice
//! ([`SocketChoice`]) is `auto` (that order), `af_xdp` (no fallback: a link that cannot take it
//! fails the node with the reason) or `af_packet`; the process-per-node runner reads it from
//! `INABENCH_RAW_SOCKET` ([`SOCKET_ENV`]). Each node reports the kind per link and why the
//! other was not used ([`socket_label`]: `af_xdp(copy)`, `af_packet (af_xdp: <reason>)`, or
//! `mixed: ...` naming which links ran which), and its [`NodeReport::offload`] is `af_xdp(copy)`,
//! `af_packet` or [`MIXED_KIND`]. The frames on the wire are the same either way; a packet
//! capture on an interface whose frames an AF_XDP socket takes does not see them (the XDP
//! program takes them before the taps, and the socket's copy-mode transmit does not pass them).

use crate::endpoint::{Endpoint, Nanos, NodeId};
use crate::fault::{Fate, FaultInjector};
use crate::udp::{DONE, NodeConfig, NodeReport, STOP};
use crate::xsk::XdpSocket;
use std::collections::BinaryHeap;
use std::io;
use std::net::{SocketAddrV4, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// The `AF_PACKET` socket kind (what a node whose links all run on it reports).
pub const SOCKET_KIND: &str = "af_packet";

/// What a node reports when some of its links ran AF_XDP and some `AF_PACKET`.
pub const MIXED_KIND: &str = "af_xdp(copy)+af_packet";

/// The environment variable the process-per-node runner reads the [`SocketChoice`] from
/// (`auto`, `af_xdp`, `af_packet`; unset: `auto`).
pub const SOCKET_ENV: &str = "INABENCH_RAW_SOCKET";

/// Which socket a link is opened with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SocketChoice {
    /// AF_XDP where it can be opened on the interface, else `AF_PACKET` (the reason kept).
    #[default]
    Auto,
    /// AF_XDP or fail with the reason.
    AfXdp,
    /// `AF_PACKET` only.
    AfPacket,
}

impl SocketChoice {
    /// `auto`, `af_xdp` or `af_packet`; an empty string is `auto`.
    pub fn parse(s: &str) -> Result<SocketChoice, SocketChoiceError> {
        match s.trim() {
            "" | "auto" => Ok(SocketChoice::Auto),
            "af_xdp" => Ok(SocketChoice::AfXdp),
            "af_packet" => Ok(SocketChoice::AfPacket),
            other => Err(SocketChoiceError::Unknown(other.to_string())),
        }
    }

    /// The name [`SocketChoice::parse`] reads.
    pub fn name(self) -> &'static str {
        match self {
            SocketChoice::Auto => "auto",
            SocketChoice::AfXdp => "af_xdp",
            SocketChoice::AfPacket => "af_packet",
        }
    }

    /// From [`SOCKET_ENV`] (unset or empty: `auto`).
    pub fn from_env() -> Result<SocketChoice, SocketChoiceError> {
        match std::env::var(SOCKET_ENV) {
            Ok(v) => SocketChoice::parse(&v).map_err(|_| SocketChoiceError::FromEnv(v)),
            Err(_) => Ok(SocketChoice::Auto),
        }
    }
}

/// A socket kind [`SocketChoice::parse`] does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SocketChoiceError {
    #[error("no raw socket kind `{0}` (auto, af_xdp or af_packet)")]
    Unknown(String),
    #[error("{SOCKET_ENV}=`{0}` is no raw socket kind (auto, af_xdp or af_packet)")]
    FromEnv(String),
}

/// The interface in node `i`'s namespace that leads to node `peer`.
pub fn link_name(peer: usize) -> String {
    format!("r{peer}")
}

/// An `AF_PACKET` raw socket bound to one interface: every frame the interface receives (and,
/// unless filtered, sends), sent as given.
pub struct PacketSocket {
    fd: OwnedFd,
    pub iface: String,
}

fn cvt(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

impl PacketSocket {
    /// Open and bind to `iface`. The socket is made with protocol 0 (it receives nothing) and
    /// only the bind turns on every ethertype, so no frame of another interface is queued
    /// before the bind.
    pub fn open(iface: &str) -> io::Result<PacketSocket> {
        let name = std::ffi::CString::new(iface).map_err(io::Error::other)?;
        // SAFETY: a NUL-terminated name
        let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if index == 0 {
            return Err(io::Error::other(format!("no interface `{iface}` here")));
        }
        // SAFETY: plain socket(2)
        let raw =
            cvt(unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) })?;
        // SAFETY: a descriptor socket(2) just returned, owned from here on
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let big: libc::c_int = 8 << 20;
        for opt in [libc::SO_RCVBUFFORCE, libc::SO_SNDBUFFORCE] {
            // SAFETY: an int option of the right size; refused without CAP_NET_ADMIN (then
            // the default buffers stay)
            unsafe {
                libc::setsockopt(
                    raw,
                    libc::SOL_SOCKET,
                    opt,
                    (&big as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
        }
        // SAFETY: zeroed sockaddr_ll is a valid starting value
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        sll.sll_ifindex = index as i32;
        // SAFETY: a sockaddr_ll of its own size
        cvt(unsafe {
            libc::bind(
                raw,
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        })?;
        Ok(PacketSocket {
            fd,
            iface: iface.to_string(),
        })
    }

    /// Stop the kernel from queueing a copy of every frame this socket's host sends on the
    /// interface (`PACKET_IGNORE_OUTGOING`, Linux 4.20): a node need not read its own frames
    /// back. [`PacketSocket::recv`] still flags any that come.
    pub fn ignore_outgoing(&self) -> io::Result<()> {
        let one: libc::c_int = 1;
        // SAFETY: an int option of the right size
        cvt(unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_IGNORE_OUTGOING,
                (&one as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        })
        .map(|_| ())
    }

    /// Send one whole frame on the bound interface.
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        // SAFETY: a valid buffer; a bound packet socket sends on its interface
        let n = unsafe { libc::send(self.fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// One waiting frame into `buf` without blocking: its length and whether this host sent it
    /// (`PACKET_OUTGOING`); `None` when nothing waits.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Option<(usize, bool)>> {
        // SAFETY: zeroed sockaddr_ll is a valid out-parameter
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        // SAFETY: valid buffer and address of the given sizes
        let n = unsafe {
            libc::recvfrom(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                (&mut sll as *mut libc::sockaddr_ll).cast(),
                &mut len,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
                _ => Err(e),
            };
        }
        Ok(Some((n as usize, sll.sll_pkttype == libc::PACKET_OUTGOING)))
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// What moves one link's whole frames: an `AF_PACKET` socket, an AF_XDP socket, or either
/// ([`LinkSocket`]).
pub trait FrameIo {
    /// The label a node reports for this socket ([`SOCKET_KIND`], [`crate::xsk::KIND`]).
    fn kind(&self) -> &'static str;
    /// Send (or queue, until [`FrameIo::flush`]) one whole frame.
    fn send_frame(&self, frame: &[u8]) -> io::Result<()>;
    /// Send whatever is queued.
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
    /// Hand the next waiting frame (and whether this host sent it) to `f` without blocking,
    /// through `scratch` where the socket copies; false when none waits. A frame larger than
    /// `scratch` is taken and not handed on.
    fn recv_with(&self, scratch: &mut [u8], f: &mut dyn FnMut(&[u8], bool)) -> io::Result<bool>;
    /// The descriptor to poll for readability.
    fn poll_fd(&self) -> RawFd;
    /// Frames the kernel dropped at this socket so far (0 where it does not say).
    fn drops(&self) -> u64 {
        0
    }
}

impl FrameIo for PacketSocket {
    fn kind(&self) -> &'static str {
        SOCKET_KIND
    }
    fn send_frame(&self, frame: &[u8]) -> io::Result<()> {
        self.send(frame)
    }
    fn recv_with(&self, scratch: &mut [u8], f: &mut dyn FnMut(&[u8], bool)) -> io::Result<bool> {
        match self.recv(scratch)? {
            None => Ok(false),
            Some((n, outgoing)) => {
                if n <= scratch.len() {
                    f(&scratch[..n], outgoing);
                }
                Ok(true)
            }
        }
    }
    fn poll_fd(&self) -> RawFd {
        self.raw_fd()
    }
}

impl FrameIo for XdpSocket {
    fn kind(&self) -> &'static str {
        crate::xsk::KIND
    }
    fn send_frame(&self, frame: &[u8]) -> io::Result<()> {
        self.send(frame)
    }
    fn flush(&self) -> io::Result<()> {
        XdpSocket::flush(self)
    }
    fn recv_with(&self, _scratch: &mut [u8], f: &mut dyn FnMut(&[u8], bool)) -> io::Result<bool> {
        Ok(XdpSocket::recv_with(self, &mut |frame| f(frame, false)))
    }
    fn poll_fd(&self) -> RawFd {
        self.raw_fd()
    }
    fn drops(&self) -> u64 {
        XdpSocket::drops(self)
    }
}

/// A link's socket, whichever kind [`open_link`] could open.
pub enum LinkSocket {
    Packet(PacketSocket),
    Xdp(Box<XdpSocket>),
}

impl FrameIo for LinkSocket {
    fn kind(&self) -> &'static str {
        match self {
            LinkSocket::Packet(s) => s.kind(),
            LinkSocket::Xdp(s) => FrameIo::kind(&**s),
        }
    }
    fn send_frame(&self, frame: &[u8]) -> io::Result<()> {
        match self {
            LinkSocket::Packet(s) => s.send(frame),
            LinkSocket::Xdp(s) => s.send(frame),
        }
    }
    fn flush(&self) -> io::Result<()> {
        match self {
            LinkSocket::Packet(_) => Ok(()),
            LinkSocket::Xdp(s) => s.flush(),
        }
    }
    fn recv_with(&self, scratch: &mut [u8], f: &mut dyn FnMut(&[u8], bool)) -> io::Result<bool> {
        match self {
            LinkSocket::Packet(s) => FrameIo::recv_with(s, scratch, f),
            LinkSocket::Xdp(s) => FrameIo::recv_with(&**s, scratch, f),
        }
    }
    fn poll_fd(&self) -> RawFd {
        match self {
            LinkSocket::Packet(s) => s.raw_fd(),
            LinkSocket::Xdp(s) => s.raw_fd(),
        }
    }
    fn drops(&self) -> u64 {
        match self {
            LinkSocket::Packet(_) => 0,
            LinkSocket::Xdp(s) => s.drops(),
        }
    }
}

/// Which kind one link ran and, when it is `AF_PACKET`, why AF_XDP was not used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkKind {
    pub iface: String,
    pub kind: &'static str,
    pub why_not_xdp: Option<String>,
}

/// Open `iface` for frames up to `max_frame` bytes as `choice` says: the socket and which kind
/// it is. `why_packet` is the reason recorded when `choice` is [`SocketChoice::AfPacket`]. The
/// error is one sentence: the interface has no `AF_PACKET` socket, or AF_XDP was asked and
/// cannot be used (with the reason).
pub fn open_link(
    iface: &str,
    choice: SocketChoice,
    max_frame: usize,
    why_packet: &str,
) -> io::Result<(LinkSocket, LinkKind)> {
    let packet = |why: String| -> io::Result<(LinkSocket, LinkKind)> {
        let s = PacketSocket::open(iface).map_err(|e| {
            io::Error::new(e.kind(), format!("no AF_PACKET socket on {iface}: {e}"))
        })?;
        // its own frames are not read back (where the kernel refuses, they are skipped as they
        // come)
        let _ = s.ignore_outgoing();
        Ok((
            LinkSocket::Packet(s),
            LinkKind {
                iface: iface.to_string(),
                kind: SOCKET_KIND,
                why_not_xdp: Some(why),
            },
        ))
    };
    if choice == SocketChoice::AfPacket {
        return packet(why_packet.to_string());
    }
    match XdpSocket::open(iface, max_frame) {
        Ok(s) => Ok((
            LinkSocket::Xdp(Box::new(s)),
            LinkKind {
                iface: iface.to_string(),
                kind: crate::xsk::KIND,
                why_not_xdp: None,
            },
        )),
        Err(e) if choice == SocketChoice::AfXdp => Err(io::Error::other(format!(
            "AF_XDP was asked on {iface} and cannot be used: {e}"
        ))),
        Err(e) => packet(e.to_string()),
    }
}

/// How node links to one peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkPlan {
    pub peer: NodeId,
    pub choice: SocketChoice,
    /// Recorded as the reason AF_XDP was not used when `choice` is `AfPacket`.
    pub why_packet: String,
}

impl LinkPlan {
    /// The link to `peer` with `choice`, for the reason that the choice was asked.
    pub fn new(peer: NodeId, choice: SocketChoice) -> LinkPlan {
        LinkPlan {
            peer,
            choice,
            why_packet: format!("not tried: {} was asked", choice.name()),
        }
    }
}

/// A node's links, opened, with what ran on each and the node's label for it.
pub struct OpenedLinks {
    pub links: Vec<Link<LinkSocket>>,
    pub kinds: Vec<LinkKind>,
    /// [`socket_label`] of `kinds`.
    pub label: String,
}

/// Open the link to each planned peer ([`link_name`] of the peer) for frames up to
/// `max_frame` bytes.
pub fn open_links(plans: &[LinkPlan], max_frame: usize) -> io::Result<OpenedLinks> {
    let mut links = Vec::new();
    let mut kinds = Vec::new();
    for p in plans {
        let (sock, kind) = open_link(
            &link_name(p.peer as usize),
            p.choice,
            max_frame,
            &p.why_packet,
        )?;
        links.push(Link { peer: p.peer, sock });
        kinds.push(kind);
    }
    let label = socket_label(&kinds);
    Ok(OpenedLinks {
        links,
        kinds,
        label,
    })
}

/// What a node records about its links' sockets, in one line: `af_xdp(copy)` when every link
/// ran AF_XDP; `af_packet (af_xdp: <reason>)` when every link ran `AF_PACKET` (each distinct
/// reason once, prefixed by its links when they differ); `mixed: af_xdp(copy) on r1, r2;
/// af_packet on r3 (af_xdp: <reason>)` otherwise. `none` for no links.
pub fn socket_label(kinds: &[LinkKind]) -> String {
    let xdp: Vec<&str> = kinds
        .iter()
        .filter(|k| k.why_not_xdp.is_none())
        .map(|k| k.iface.as_str())
        .collect();
    let packet: Vec<&LinkKind> = kinds.iter().filter(|k| k.why_not_xdp.is_some()).collect();
    let reasons = || {
        let mut distinct: Vec<&str> = packet
            .iter()
            .filter_map(|k| k.why_not_xdp.as_deref())
            .collect();
        distinct.sort_unstable();
        distinct.dedup();
        if distinct.len() == 1 {
            distinct[0].to_string()
        } else {
            packet
                .iter()
                .map(|k| format!("{}: {}", k.iface, k.why_not_xdp.as_deref().unwrap_or("")))
                .collect::<Vec<_>>()
                .join("; ")
        }
    };
    match (xdp.is_empty(), packet.is_empty()) {
        (true, true) => "none".into(),
        (false, true) => crate::xsk::KIND.into(),
        (true, false) => format!("{SOCKET_KIND} (af_xdp: {})", reasons()),
        (false, false) => format!(
            "mixed: {} on {}; {SOCKET_KIND} on {} (af_xdp: {})",
            crate::xsk::KIND,
            xdp.join(", "),
            packet
                .iter()
                .map(|k| k.iface.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            reasons()
        ),
    }
}

/// Which socket kind carried a node's links, or a run's, in a word: AF_XDP on every link,
/// `AF_PACKET` on every link, or some of each (the rows' fabric label names it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketsRan {
    AfXdp,
    AfPacket,
    Mixed,
}

impl SocketsRan {
    /// The kind a node's [`socket_label`] says ran; `None` for a node without links (`none`) or
    /// a label [`socket_label`] does not make.
    pub fn of_label(label: &str) -> Option<SocketsRan> {
        if label == crate::xsk::KIND {
            Some(SocketsRan::AfXdp)
        } else if label == SOCKET_KIND
            || label
                .strip_prefix(SOCKET_KIND)
                .is_some_and(|rest| rest.starts_with(" (af_xdp: "))
        {
            Some(SocketsRan::AfPacket)
        } else if label.starts_with("mixed: ") {
            Some(SocketsRan::Mixed)
        } else {
            None
        }
    }

    /// The kind a run's nodes ran, from their labels: the one kind when every node ran it,
    /// [`SocketsRan::Mixed`] when they differ; `None` when there is no node or a label names
    /// no kind.
    pub fn of_nodes<'a>(labels: impl IntoIterator<Item = &'a str>) -> Option<SocketsRan> {
        let mut ran = None;
        for label in labels {
            let kind = SocketsRan::of_label(label)?;
            ran = match ran {
                None => Some(kind),
                Some(k) if k == kind => Some(k),
                Some(_) => Some(SocketsRan::Mixed),
            };
        }
        ran
    }

    /// `af_xdp`, `af_packet` or `mixed`.
    pub fn name(self) -> &'static str {
        match self {
            SocketsRan::AfXdp => "af_xdp",
            SocketsRan::AfPacket => SOCKET_KIND,
            SocketsRan::Mixed => "mixed",
        }
    }
}

/// The [`NodeReport::offload`] of a node on `links`: one kind, or [`MIXED_KIND`].
fn kinds_of<S: FrameIo>(links: &[Link<S>]) -> &'static str {
    let mut kinds = links.iter().map(|l| l.sock.kind());
    match kinds.next() {
        None => SOCKET_KIND,
        Some(first) if kinds.all(|k| k == first) => first,
        Some(_) => MIXED_KIND,
    }
}

/// Node `peer` is reached through `sock`.
pub struct Link<S = PacketSocket> {
    pub peer: NodeId,
    pub sock: S,
}

/// A held-back frame: (due, sequence, destination, bytes).
type Held = std::cmp::Reverse<(Nanos, u64, NodeId, Vec<u8>)>;

fn wait_readable(fds: &[RawFd], timeout_ms: i32) {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: a valid array of pollfds of the given length
    unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, timeout_ms) };
}

/// Serve `node` on its links until the coordinator (reached over `ctl`) says stop or the
/// deadline passes: the same endpoint calls, timers, faults and done report as the `udp`
/// fabric's event loop ([`crate::udp::serve`]); `cfg.mtu` is the largest frame accepted.
/// The report's `offload` is the links' socket kind ([`SOCKET_KIND`], [`crate::xsk::KIND`] or
/// [`MIXED_KIND`]) and its `socket_drops` what the AF_XDP sockets dropped. A frame to a node
/// with no link is counted in `send_errors`, as a frame the kernel refused; frames an AF_XDP
/// socket queued leave when the endpoint has nothing more to send.
pub fn serve<N: Endpoint, S: FrameIo>(
    node: &mut N,
    links: &[Link<S>],
    ctl: &UdpSocket,
    coordinator: SocketAddrV4,
    cfg: &NodeConfig,
) -> NodeReport {
    let start = Instant::now();
    let now = || start.elapsed().as_nanos() as Nanos;
    let cpu0 = crate::wrap::thread_cpu_ns().unwrap_or(0);
    let deadline = cfg.deadline.as_nanos() as Nanos;
    let mut rep = NodeReport {
        offload: kinds_of(links),
        ..NodeReport::default()
    };
    let _ = ctl.set_nonblocking(true);
    let id = node.id();
    let mut injector = FaultInjector::new(cfg.faults);
    let mut held: BinaryHeap<Held> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut fds: Vec<RawFd> = links.iter().map(|l| l.sock.poll_fd()).collect();
    fds.push(ctl.as_raw_fd());
    let mut buf = vec![0u8; cfg.mtu.max(2048) + 64];
    let mut done = crate::udp::DoneReport::default();
    let busy = cfg.io == crate::udp::IoModel::BusyPoll;
    let send = |rep: &mut NodeReport, to: NodeId, bytes: &[u8]| match links
        .iter()
        .find(|l| l.peer == to)
    {
        Some(l) => {
            if l.sock.send_frame(bytes).is_err() {
                rep.send_errors += 1;
            }
        }
        None => rep.send_errors += 1,
    };
    let flush = |rep: &mut NodeReport| {
        for l in links {
            if l.sock.flush().is_err() {
                rep.send_errors += 1;
            }
        }
    };
    loop {
        let t = now();
        while let Some(tx) = node.poll_transmit(t) {
            rep.frames_tx += 1;
            rep.bytes_tx += tx.bytes.len() as u64;
            match injector.fate(id, tx.to) {
                Fate::Drop => {}
                Fate::Deliver {
                    copies,
                    extra_delay_ns,
                } => {
                    if copies > 1 {
                        send(&mut rep, tx.to, &tx.bytes);
                    }
                    if extra_delay_ns > 0 {
                        seq += 1;
                        held.push(std::cmp::Reverse((
                            t + extra_delay_ns,
                            seq,
                            tx.to,
                            tx.bytes,
                        )));
                    } else {
                        send(&mut rep, tx.to, &tx.bytes);
                        node.recycle(tx.bytes);
                    }
                }
            }
        }
        while held.peek().is_some_and(|h| h.0.0 <= t) {
            if let Some(std::cmp::Reverse((_, _, to, b))) = held.pop() {
                send(&mut rep, to, &b);
            }
        }
        flush(&mut rep);
        done.poll(cfg.counted, node.is_done(), t, &mut rep, || {
            let _ = ctl.send_to(DONE, coordinator);
        });
        if t > deadline {
            break;
        }
        let mut got = 0usize;
        let t = now();
        for l in links {
            let mut take = |frame: &[u8], outgoing: bool| {
                if outgoing || frame.len() > cfg.mtu {
                    return;
                }
                got += 1;
                rep.frames_rx += 1;
                rep.bytes_rx += frame.len() as u64;
                node.handle_packet(t, l.peer, frame);
            };
            while let Ok(true) = l.sock.recv_with(&mut buf, &mut take) {}
        }
        let mut cbuf = [0u8; 64];
        let mut stop = false;
        while let Ok((n, from)) = ctl.recv_from(&mut cbuf) {
            if from == std::net::SocketAddr::V4(coordinator) && &cbuf[..n] == STOP {
                stop = true;
            }
        }
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
        if got == 0 && !busy {
            let wake = [node.poll_timeout(), held.peek().map(|h| h.0.0)]
                .into_iter()
                .flatten()
                .min()
                .map(|w| w.saturating_sub(now()) / 1_000_000)
                .unwrap_or(5)
                .min(5) as i32;
            wait_readable(&fds, wake);
        }
    }
    rep.wall_ns = now();
    rep.cpu_ns = crate::wrap::thread_cpu_ns()
        .unwrap_or(0)
        .saturating_sub(cpu0);
    rep.faults = injector.counters.clone();
    rep.socket_drops = links.iter().map(|l| l.sock.drops()).sum();
    rep
}

/// Serve `node` on `links` with no coordinator, until `stop()` says so (asked whenever no frame
/// waits, at least every 5 ms) or `limit` passes: a bump in the wire between hosts that run
/// stacks of their own, such as NetReduce's accelerator on the Soft-RoCE rig's taps
/// (tools/rxe-rig, drivers/devices' `netreduce_accel` example) or on a NIC host of a testbed.
/// The same endpoint calls and timers as [`serve`]; frames larger than `mtu` are not taken, and
/// no faults are injected here (an endpoint that loses frames wraps the node). The report's
/// `stopped` says whether `stop` ended it (false: the limit); `done_ns` is when the endpoint
/// first said it was done, if it ever did.
pub fn serve_until<N: Endpoint, S: FrameIo>(
    node: &mut N,
    links: &[Link<S>],
    mtu: usize,
    limit: std::time::Duration,
    stop: &mut dyn FnMut() -> bool,
) -> NodeReport {
    let start = Instant::now();
    let now = || start.elapsed().as_nanos() as Nanos;
    let cpu0 = crate::wrap::thread_cpu_ns().unwrap_or(0);
    let limit = limit.as_nanos() as Nanos;
    let mut rep = NodeReport {
        offload: kinds_of(links),
        ..NodeReport::default()
    };
    let fds: Vec<RawFd> = links.iter().map(|l| l.sock.poll_fd()).collect();
    let mut buf = vec![0u8; mtu.max(2048) + 64];
    loop {
        let t = now();
        while let Some(tx) = node.poll_transmit(t) {
            rep.frames_tx += 1;
            rep.bytes_tx += tx.bytes.len() as u64;
            match links.iter().find(|l| l.peer == tx.to) {
                Some(l) if l.sock.send_frame(&tx.bytes).is_ok() => {}
                _ => rep.send_errors += 1,
            }
            node.recycle(tx.bytes);
        }
        for l in links {
            if l.sock.flush().is_err() {
                rep.send_errors += 1;
            }
        }
        if rep.done_ns == 0 && node.is_done() {
            rep.done_ns = t.max(1);
        }
        if t > limit {
            break;
        }
        let mut got = 0usize;
        for l in links {
            let mut take = |frame: &[u8], outgoing: bool| {
                if outgoing || frame.len() > mtu {
                    return;
                }
                got += 1;
                rep.frames_rx += 1;
                rep.bytes_rx += frame.len() as u64;
                node.handle_packet(now(), l.peer, frame);
            };
            while let Ok(true) = l.sock.recv_with(&mut buf, &mut take) {}
        }
        if let Some(d) = node.poll_timeout() {
            let t = now();
            if d <= t {
                node.handle_timeout(t);
            }
        }
        if got == 0 {
            if stop() {
                rep.stopped = true;
                break;
            }
            let wake = node
                .poll_timeout()
                .map_or(5, |w| w.saturating_sub(now()) / 1_000_000)
                .min(5) as i32;
            wait_readable(&fds, wake);
        }
    }
    rep.wall_ns = now();
    rep.cpu_ns = crate::wrap::thread_cpu_ns()
        .unwrap_or(0)
        .saturating_sub(cpu0);
    rep.socket_drops = links.iter().map(|l| l.sock.drops()).sum();
    rep
}

/// What [`forward_until`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ForwardReport {
    pub frames_in: u64,
    /// Copies sent (a frame to k ports is k copies).
    pub copies_out: u64,
    /// Frames that went to no port (or only to ports past the list).
    pub dropped: u64,
    pub send_errors: u64,
    /// Whether `stop` ended it (false: the limit).
    pub stopped: bool,
}

/// A software switch's forwarding on AF_PACKET sockets, one per switch port: every frame that
/// comes in on `ports[i]` goes out as it is on each port `decide(i, frame)` names (a port past
/// the list counts as a send error), until `stop()` says so (asked whenever no frame waits, at
/// least every 5 ms) or `limit` passes. Frames this host sent on a port are not taken in again;
/// frames larger than `mtu` are not taken. The decision is the caller's: `inabench_p4rt`'s
/// `SoftSwitch::forwarding` gives the one a P4Runtime controller wrote (#36 item 6).
pub fn forward_until(
    ports: &[PacketSocket],
    mtu: usize,
    limit: std::time::Duration,
    decide: &mut dyn FnMut(usize, &[u8]) -> Vec<u32>,
    stop: &mut dyn FnMut() -> bool,
) -> ForwardReport {
    let start = Instant::now();
    let fds: Vec<RawFd> = ports.iter().map(PacketSocket::raw_fd).collect();
    let mut buf = vec![0u8; mtu.max(2048) + 64];
    let mut rep = ForwardReport::default();
    loop {
        if start.elapsed() > limit {
            break;
        }
        let mut got = 0usize;
        for (i, p) in ports.iter().enumerate() {
            while let Ok(Some((n, outgoing))) = p.recv(&mut buf) {
                if outgoing || n > buf.len() || n > mtu {
                    continue;
                }
                got += 1;
                rep.frames_in += 1;
                let out = decide(i, &buf[..n]);
                if out.is_empty() {
                    rep.dropped += 1;
                }
                for o in out {
                    match ports.get(o as usize) {
                        Some(s) if s.send(&buf[..n]).is_ok() => rep.copies_out += 1,
                        _ => rep.send_errors += 1,
                    }
                }
            }
        }
        if got == 0 {
            if stop() {
                rep.stopped = true;
                break;
            }
            wait_readable(&fds, 5);
        }
    }
    rep
}

/// Move the calling thread into the network namespace `name` (`/run/netns/<name>`, as `ip netns`
/// makes them). Only this thread moves.
pub fn enter_netns(name: &str) -> io::Result<()> {
    let f = std::fs::File::open(format!("/run/netns/{name}"))?;
    // SAFETY: a namespace file descriptor; CLONE_NEWNET moves only this thread's network view
    cvt(unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) }).map(|_| ())
}

/// One captured frame: its bytes and whether the capturing side sent it.
#[derive(Debug, Clone)]
pub struct Captured {
    pub bytes: Vec<u8>,
    pub outgoing: bool,
}

/// A capture of every frame on one interface (both directions), on its own thread and socket,
/// independent of the nodes that send them: what a tap on the cable would see.
pub struct Capture {
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<io::Result<Vec<Captured>>>,
}

impl Capture {
    /// Capture on `iface` in namespace `netns` (`None`: this one), at most `limit` frames.
    /// Returns once the socket is bound, so nothing sent after this returns is missed.
    pub fn start(netns: Option<&str>, iface: &str, limit: usize) -> io::Result<Capture> {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<io::Result<()>>();
        let (ns, ifc, flag) = (netns.map(str::to_string), iface.to_string(), stop.clone());
        let handle = std::thread::spawn(move || {
            let opened = ns
                .as_deref()
                .map_or(Ok(()), enter_netns)
                .and_then(|()| PacketSocket::open(&ifc));
            let sock = match opened {
                Ok(s) => {
                    let _ = ready_tx.send(Ok(()));
                    s
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(io::Error::new(e.kind(), e.to_string())));
                    return Err(e);
                }
            };
            let mut out = Vec::new();
            let mut buf = vec![0u8; 65_536];
            loop {
                let mut any = false;
                while let Some((n, outgoing)) = sock.recv(&mut buf)? {
                    any = true;
                    if out.len() < limit {
                        out.push(Captured {
                            bytes: buf[..n.min(buf.len())].to_vec(),
                            outgoing,
                        });
                    }
                }
                if flag.load(Ordering::SeqCst) {
                    break;
                }
                if !any {
                    wait_readable(&[sock.raw_fd()], 5);
                }
            }
            Ok(out)
        });
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Capture { stop, handle }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(io::Error::other(
                "the capture thread ended before it started",
            )),
        }
    }

    /// Stop and return what was captured.
    pub fn finish(self) -> io::Result<Vec<Captured>> {
        self.stop.store(true, Ordering::SeqCst);
        self.handle
            .join()
            .map_err(|_| io::Error::other("the capture thread panicked"))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netns::{Netns, is_root};

    fn kind(iface: &str, why: Option<&str>) -> LinkKind {
        LinkKind {
            iface: iface.into(),
            kind: if why.is_some() {
                SOCKET_KIND
            } else {
                crate::xsk::KIND
            },
            why_not_xdp: why.map(str::to_string),
        }
    }

    /// A node's label names the kind per link and every reason AF_XDP was not used; links of
    /// both kinds are called mixed, never one kind.
    #[test]
    fn the_socket_label_says_which_kind_ran_where_and_why() {
        assert_eq!(socket_label(&[]), "none");
        assert_eq!(
            socket_label(&[kind("r1", None), kind("r2", None)]),
            "af_xdp(copy)"
        );
        assert_eq!(
            socket_label(&[kind("r1", Some("no XSKMAP")), kind("r2", Some("no XSKMAP"))]),
            "af_packet (af_xdp: no XSKMAP)"
        );
        assert_eq!(
            socket_label(&[kind("r1", Some("a")), kind("r2", Some("b"))]),
            "af_packet (af_xdp: r1: a; r2: b)"
        );
        assert_eq!(
            socket_label(&[kind("r1", None), kind("r2", None), kind("r3", Some("tap"))]),
            "mixed: af_xdp(copy) on r1, r2; af_packet on r3 (af_xdp: tap)"
        );
        // the kind in a word, from a node's label and across nodes
        let x = socket_label(&[kind("r1", None), kind("r2", None)]);
        let p = socket_label(&[kind("r1", Some("a")), kind("r2", Some("b"))]);
        let m = socket_label(&[kind("r1", None), kind("r2", Some("tap"))]);
        assert_eq!(SocketsRan::of_label(&x), Some(SocketsRan::AfXdp));
        assert_eq!(SocketsRan::of_label(&p), Some(SocketsRan::AfPacket));
        assert_eq!(
            SocketsRan::of_label(SOCKET_KIND),
            Some(SocketsRan::AfPacket)
        );
        assert_eq!(SocketsRan::of_label(&m), Some(SocketsRan::Mixed));
        for not_a_kind in ["none", "", "af_packetx", "af_xdp", "gso+gro"] {
            assert_eq!(SocketsRan::of_label(not_a_kind), None, "{not_a_kind}");
        }
        assert_eq!(
            SocketsRan::of_nodes([x.as_str(), x.as_str()]),
            Some(SocketsRan::AfXdp)
        );
        assert_eq!(
            SocketsRan::of_nodes([p.as_str(), p.as_str()]),
            Some(SocketsRan::AfPacket)
        );
        // nodes of different kinds are mixed though each node ran one kind
        assert_eq!(
            SocketsRan::of_nodes([x.as_str(), p.as_str()]),
            Some(SocketsRan::Mixed)
        );
        assert_eq!(SocketsRan::of_nodes([]), None);
        assert_eq!(SocketsRan::of_nodes([x.as_str(), "none"]), None);
        assert_eq!(
            [SocketsRan::AfXdp, SocketsRan::AfPacket, SocketsRan::Mixed].map(SocketsRan::name),
            ["af_xdp", "af_packet", "mixed"]
        );
        assert_eq!(SocketChoice::parse(""), Ok(SocketChoice::Auto));
        for c in [
            SocketChoice::Auto,
            SocketChoice::AfXdp,
            SocketChoice::AfPacket,
        ] {
            assert_eq!(SocketChoice::parse(c.name()), Ok(c));
        }
        assert_eq!(
            SocketChoice::parse("dpdk").map_err(|e| e.to_string()),
            Err("no raw socket kind `dpdk` (auto, af_xdp or af_packet)".into())
        );
    }

    /// Two namespaces, one link: frames cross it byte for byte in both directions, the sender
    /// does not read its own frames back, and a capture on the link sees each once.
    #[test]
    fn frames_cross_a_link_as_they_are() {
        if !is_root() {
            eprintln!("skipped: network namespaces need root");
            return;
        }
        let mut ns = Netns::create(2, None).expect("namespaces");
        ns.link(0, 1, 9000).expect("link");
        let names: Vec<String> = ns.hosts.iter().map(|h| h.namespace.clone()).collect();
        // IPv6 is off on the link (where the kernel has IPv6 at all)
        let v6 = std::process::Command::new("ip")
            .args(["netns", "exec", &names[0], "cat"])
            .arg(format!(
                "/proc/sys/net/ipv6/conf/{}/disable_ipv6",
                link_name(1)
            ))
            .output()
            .expect("ip");
        if std::path::Path::new("/proc/sys/net/ipv6").exists() {
            assert_eq!(String::from_utf8_lossy(&v6.stdout).trim(), "1");
        }
        let cap = Capture::start(Some(&names[0]), &link_name(1), 1000).expect("capture");
        // an arbitrary frame: a MAC that is no interface's and an ethertype nobody handles
        let frame = |k: u8| {
            let mut f = vec![0x02, 0, 0, 0, 0x77, k, 0x02, 0, 0, 0, 0x66, k, 0x88, 0xb5];
            f.extend((0..200u16).map(|i| (i as u8) ^ k));
            f
        };
        let side = |me: usize, peer: usize| {
            let n = names[me].clone();
            std::thread::spawn(move || {
                enter_netns(&n).expect("setns");
                let s = PacketSocket::open(&link_name(peer)).expect("socket");
                (s, n)
            })
        };
        let (a, _) = side(0, 1).join().expect("a");
        let (b, _) = side(1, 0).join().expect("b");
        // a takes no copies of its own frames; the capture (another socket) still sees them
        a.ignore_outgoing().expect("PACKET_IGNORE_OUTGOING");
        for k in 0..50u8 {
            a.send(&frame(k)).expect("send");
        }
        b.send(&frame(200)).expect("send back");
        std::thread::sleep(std::time::Duration::from_millis(100));
        let mut buf = vec![0u8; 4096];
        let mut got_b = Vec::new();
        while let Some((n, out)) = b.recv(&mut buf).expect("recv") {
            if !out {
                got_b.push(buf[..n].to_vec());
            }
        }
        let mut got_a = Vec::new();
        while let Some((n, out)) = a.recv(&mut buf).expect("recv") {
            got_a.push((buf[..n].to_vec(), out));
        }
        assert_eq!(got_b, (0..50).map(frame).collect::<Vec<_>>());
        assert!(got_a.iter().all(|(_, o)| !o), "a read its own frames back");
        let incoming: Vec<_> = got_a
            .iter()
            .filter(|(_, o)| !o)
            .map(|(f, _)| f.clone())
            .collect();
        assert_eq!(incoming, vec![frame(200)]);
        let c = cap.finish().expect("capture");
        assert_eq!(c.iter().filter(|f| f.outgoing).count(), 50);
        assert_eq!(c.iter().filter(|f| !f.outgoing).count(), 1);
    }

    /// A bump in the wire served with `serve_until`: every frame that comes in on its link is
    /// answered on the same link (its bytes reversed after the Ethernet header, so an echo of
    /// the kernel's own frames cannot pass), one frame to a node with no link is a send error,
    /// and the loop ends when `stop` says so, not before.
    #[test]
    fn serve_until_answers_on_its_links_until_stopped() {
        if !is_root() {
            eprintln!("skipped: network namespaces need root");
            return;
        }
        struct Echo(Vec<Transmit>, u32);
        impl Endpoint for Echo {
            fn id(&self) -> NodeId {
                9
            }
            fn handle_packet(&mut self, _now: Nanos, from: NodeId, frame: &[u8]) {
                // only the test's frames (ethertype 0x88b5), not the kernel's
                if frame.len() > 14 && frame[12..14] == [0x88, 0xb5] {
                    let mut f = frame.to_vec();
                    f[14..].reverse();
                    self.0.push(Transmit { to: from, bytes: f });
                    self.1 += 1;
                    if self.1 == 3 {
                        // a node this bump has no link to
                        self.0.push(Transmit {
                            to: 5,
                            bytes: frame.to_vec(),
                        });
                    }
                }
            }
            fn poll_transmit(&mut self, _now: Nanos) -> Option<Transmit> {
                (!self.0.is_empty()).then(|| self.0.remove(0))
            }
            fn poll_timeout(&self) -> Option<Nanos> {
                None
            }
            fn handle_timeout(&mut self, _now: Nanos) {}
        }
        use crate::endpoint::Transmit;
        let mut ns = Netns::create(2, None).expect("namespaces");
        ns.link(0, 1, 9000).expect("link");
        let names: Vec<String> = ns.hosts.iter().map(|h| h.namespace.clone()).collect();
        let stop = Arc::new(AtomicBool::new(false));
        let (n0, flag) = (names[0].clone(), stop.clone());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let bump = std::thread::spawn(move || {
            enter_netns(&n0).expect("setns");
            let sock = PacketSocket::open(&link_name(1)).expect("socket");
            sock.ignore_outgoing().expect("PACKET_IGNORE_OUTGOING");
            ready_tx.send(()).expect("ready");
            let links = [Link { peer: 1, sock }];
            let mut stops = 0u32;
            serve_until(
                &mut Echo(Vec::new(), 0),
                &links,
                1500,
                std::time::Duration::from_secs(60),
                &mut || {
                    stops += 1;
                    flag.load(Ordering::SeqCst)
                },
            )
        });
        // the host sends once the bump's socket is bound
        ready_rx.recv().expect("the bump's socket");
        let n1 = names[1].clone();
        let host = std::thread::spawn(move || {
            enter_netns(&n1).expect("setns");
            let s = PacketSocket::open(&link_name(0)).expect("socket");
            s.ignore_outgoing().expect("PACKET_IGNORE_OUTGOING");
            let frame = |k: u8| {
                let mut f = vec![0x02, 0, 0, 0, 0x77, k, 0x02, 0, 0, 0, 0x66, k, 0x88, 0xb5];
                f.extend((0..100u16).map(|i| (i as u8).wrapping_mul(3) ^ k));
                f
            };
            let mut got = Vec::new();
            let mut buf = vec![0u8; 4096];
            for k in 0..20u8 {
                s.send(&frame(k)).expect("send");
                let t = Instant::now();
                loop {
                    match s.recv(&mut buf).expect("recv") {
                        Some((n, false)) if buf[12..14] == [0x88, 0xb5] => {
                            got.push(buf[..n].to_vec());
                            break;
                        }
                        _ if t.elapsed() > std::time::Duration::from_secs(10) => {
                            panic!("no answer to frame {k}")
                        }
                        _ => std::thread::sleep(std::time::Duration::from_micros(200)),
                    }
                }
            }
            let want: Vec<Vec<u8>> = (0..20)
                .map(|k| {
                    let mut f = frame(k);
                    f[14..].reverse();
                    f
                })
                .collect();
            (got, want)
        });
        let (got, want) = host.join().expect("host");
        assert_eq!(got, want);
        // still serving: nothing told it to stop
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!bump.is_finished(), "serve_until ended before stop said so");
        stop.store(true, Ordering::SeqCst);
        let rep = bump.join().expect("bump");
        assert!(rep.stopped);
        assert_eq!(rep.frames_tx, 21);
        assert_eq!(rep.send_errors, 1);
        assert!(rep.frames_rx >= 20, "{rep:?}");
        assert_eq!(rep.offload, SOCKET_KIND);
    }
}
