//! One batched UDP socket layer for every user-space fabric path: UDP GSO on send
//! (`UDP_SEGMENT`: one system call and one trip down the stack carry up to 64 datagrams to one
//! destination) and GRO on receive (`UDP_GRO`: the kernel hands a run of datagrams of one flow
//! over in one buffer, with the segment size in a control message), where the kernel has them;
//! `sendmmsg`/`recvmmsg` of single datagrams otherwise. What this host has is probed once per
//! process ([`Offload::probe`]: a real GSO send to a GRO receiver on loopback) and reported by
//! every node ([`Offload::label`]: `gso+gro`, `gso`, `gro` or `mmsg`).
//!
//! Semantics do not change with the offload: every datagram keeps its bytes, its destination
//! and, per destination, its order; the receiver sees the same datagrams one by one
//! ([`Receiver::datagrams`] splits a GRO buffer at the segment size). GSO needs one destination
//! and one segment size per send (the last segment may be shorter): [`Sender::send`] groups a
//! batch by destination (a stable grouping, so each destination's datagrams stay in order) and
//! cuts a group where the size changes.
//!
//! Sources: udp(7) and the kernel's UDP GSO/GRO (Linux 4.18 `UDP_SEGMENT`, 5.0 `UDP_GRO`;
//! `include/uapi/linux/udp.h`: `UDP_SEGMENT` 103, `UDP_GRO` 104, at most 64 segments a send in
//! the kernels that introduced it); the socket is made with socket2, the batched calls and the
//! control messages are libc, which socket2 does not wrap.

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::OnceLock;

/// Datagrams (or GRO buffers) per `recvmmsg`, messages per `sendmmsg`.
pub const BATCH: usize = 64;
/// `include/uapi/linux/udp.h` (libc does not export them for glibc targets).
const UDP_SEGMENT: libc::c_int = 103;
const UDP_GRO: libc::c_int = 104;
/// Segments per GSO send (UDP_MAX_SEGMENTS in the kernels that introduced GSO; newer ones allow
/// more).
pub const GSO_MAX_SEGMENTS: usize = 64;
/// Payload bytes per GSO send: under the 65,507 bytes an IPv4 UDP datagram can carry.
const GSO_MAX_BYTES: usize = 65_000;
/// A GRO buffer holds up to one 64 KiB super-datagram.
const GRO_BUF: usize = 1 << 16;

/// What the batched layer uses on this host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Offload {
    /// UDP GSO on send.
    pub gso: bool,
    /// UDP GRO on receive.
    pub gro: bool,
}

impl Offload {
    /// Plain `sendmmsg`/`recvmmsg`.
    pub const NONE: Offload = Offload {
        gso: false,
        gro: false,
    };

    /// `gso+gro`, `gso`, `gro` or `mmsg`: what rows and manifests record.
    pub fn label(self) -> &'static str {
        match (self.gso, self.gro) {
            (true, true) => "gso+gro",
            (true, false) => "gso",
            (false, true) => "gro",
            (false, false) => "mmsg",
        }
    }

    /// What this host's kernel does, probed once per process (a two-segment GSO send to a GRO
    /// receiver on loopback). `INABENCH_UDP_OFFLOAD=mmsg` turns both off (to compare).
    pub fn probe() -> Offload {
        static PROBED: OnceLock<Offload> = OnceLock::new();
        *PROBED.get_or_init(|| {
            if std::env::var("INABENCH_UDP_OFFLOAD").is_ok_and(|v| v == "mmsg" || v == "off") {
                return Offload::NONE;
            }
            probe_kernel().unwrap_or(Offload::NONE)
        })
    }
}

fn set_int(fd: RawFd, level: libc::c_int, opt: libc::c_int, v: libc::c_int) -> io::Result<()> {
    // SAFETY: a valid socket and a c_int option value of the stated size
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Turn GRO on for `sock` (a [`Receiver`] with GRO must read it). Fails where the kernel has no
/// `UDP_GRO`.
pub fn enable_gro(sock: &impl AsRawFd) -> io::Result<()> {
    set_int(sock.as_raw_fd(), libc::SOL_UDP, UDP_GRO, 1)
}

fn probe_kernel() -> io::Result<Offload> {
    let rx = bind_udp(Ipv4Addr::LOCALHOST, 1 << 20)?;
    let tx = bind_udp(Ipv4Addr::LOCALHOST, 1 << 20)?;
    let to = match rx.local_addr()? {
        std::net::SocketAddr::V4(a) => a,
        std::net::SocketAddr::V6(_) => return Err(io::Error::other("IPv6 probe socket")),
    };
    let gro = enable_gro(&rx).is_ok();
    rx.set_read_timeout(Some(std::time::Duration::from_millis(200)))?;
    // two segments of 100 bytes and a last one of 50, in one GSO send
    let payload: Vec<u8> = (0..250u32).map(|i| i as u8).collect();
    let mut sender = Sender::new(Offload { gso: true, gro });
    let frames: Vec<(SocketAddrV4, &[u8])> = payload.chunks(100).map(|c| (to, c)).collect();
    let sent_gso = sender.send_gso_only(tx.as_raw_fd(), &frames);
    let mut r = Receiver::new(100, Offload { gso: false, gro });
    let mut got: Vec<Vec<u8>> = Vec::new();
    let mut coalesced = false;
    let t0 = std::time::Instant::now();
    while got.len() < 3 && t0.elapsed() < std::time::Duration::from_millis(200) {
        let n = r.recv(rx.as_raw_fd(), true);
        coalesced |= (0..n).any(|i| r.seg[i] > 0);
        r.datagrams(|_, b| got.push(b.to_vec()));
    }
    let whole = got.len() == 3 && got.concat() == payload;
    Ok(Offload {
        gso: sent_gso && whole,
        gro: gro && whole && coalesced,
    })
}

/// A UDP socket on `ip` (any port), both buffers asked at `buf` bytes (as root also past
/// `net.core.rmem_max`), made with socket2.
pub fn bind_udp(ip: Ipv4Addr, buf: usize) -> io::Result<UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    // a host that caps the buffers keeps its cap: not an error
    let _ = s.set_recv_buffer_size(buf);
    let _ = s.set_send_buffer_size(buf);
    let v = libc::c_int::try_from(buf).unwrap_or(libc::c_int::MAX);
    // as root, exceed net.core.rmem_max (the default 208 KB drops bursts of six workers);
    // failure (not root) leaves the buffer as it was
    let _ = set_int(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, v);
    let _ = set_int(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, v);
    s.bind(&SocketAddrV4::new(ip, 0).into())?;
    Ok(s.into())
}

/// `SO_MEMINFO` (`include/uapi/asm-generic/socket.h`; libc does not export it): the socket's
/// memory counters, `SK_MEMINFO_DROPS` among them.
const SO_MEMINFO: libc::c_int = 55;

/// Datagrams the kernel dropped at `sock` (its receive buffer was full, or a filter dropped
/// them): `SK_MEMINFO_DROPS` of `SO_MEMINFO` (Linux 3.9+); `None` where the kernel has no such
/// counter.
pub fn socket_drops(sock: &impl AsRawFd) -> Option<u64> {
    let mut v = [0u32; libc::SK_MEMINFO_DROPS as usize + 1];
    let mut len = std::mem::size_of_val(&v) as libc::socklen_t;
    // SAFETY: a valid socket and a u32 array of `len` bytes for the kernel to fill
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_MEMINFO,
            v.as_mut_ptr().cast(),
            &mut len,
        )
    };
    let filled = len as usize / std::mem::size_of::<u32>();
    (rc == 0 && filled > libc::SK_MEMINFO_DROPS as usize)
        .then(|| u64::from(v[libc::SK_MEMINFO_DROPS as usize]))
}

fn to_sockaddr(a: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*a.ip()).to_be(),
        },
        sin_zero: [0; 8],
    }
}

fn from_sockaddr(a: &libc::sockaddr_in) -> SocketAddrV4 {
    SocketAddrV4::new(
        Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
        u16::from_be(a.sin_port),
    )
}

/// Room for one control message of up to 16 bytes of data, aligned for `cmsghdr`.
type Ctrl = [u64; 8];

/// One message of a send: its first datagram in the (grouped) order, how many, the GSO size
/// (0: a single datagram).
#[derive(Clone, Copy)]
struct Msg {
    first: usize,
    count: usize,
    seg: u16,
}

/// Batched sends, the buffers reused from call to call.
pub struct Sender {
    off: Offload,
    order: Vec<usize>,
    /// The batch's destinations (address key, datagrams, first slot in `order`) and each
    /// datagram's index into it: the grouping's scratch, reused.
    dests: Vec<(u64, usize, usize)>,
    dest_of: Vec<u32>,
    plan: Vec<Msg>,
    addrs: Vec<libc::sockaddr_in>,
    iovs: Vec<libc::iovec>,
    ctrl: Vec<Ctrl>,
    msgs: Vec<libc::mmsghdr>,
    /// GSO sends the kernel refused (a device path without it): from then on, one datagram a
    /// message.
    gso_refused: bool,
}

// SAFETY: the raw pointers in `iovs`/`msgs` are rebuilt before every call and only point into
// the struct's own vectors and the caller's frames for the duration of that call
unsafe impl Send for Sender {}

impl Sender {
    pub fn new(off: Offload) -> Sender {
        Sender {
            off,
            order: Vec::new(),
            dests: Vec::new(),
            dest_of: Vec::new(),
            plan: Vec::new(),
            addrs: Vec::new(),
            iovs: Vec::new(),
            ctrl: Vec::new(),
            msgs: Vec::new(),
            gso_refused: false,
        }
    }

    /// What this sender uses now (GSO off after the kernel refused it once).
    pub fn offload(&self) -> Offload {
        Offload {
            gso: self.off.gso && !self.gso_refused,
            ..self.off
        }
    }

    /// Send `frames` (destination, bytes): with GSO, grouped by destination; with as few
    /// system calls as it takes. Returns how many datagrams the kernel did not take (a full
    /// buffer: lost, as on a wire).
    pub fn send<B: AsRef<[u8]>>(&mut self, fd: RawFd, frames: &[(SocketAddrV4, B)]) -> u64 {
        let gso = self.off.gso && !self.gso_refused;
        self.plan_msgs(frames, gso);
        let (failed, refused) = self.transmit(fd, frames);
        if refused.is_empty() {
            return failed;
        }
        // the kernel refused GSO (EIO/EINVAL on a path without it): these again one by one
        self.gso_refused = true;
        let again: Vec<(SocketAddrV4, &[u8])> = refused
            .iter()
            .map(|&i| (frames[i].0, frames[i].1.as_ref()))
            .collect();
        self.plan_msgs(&again, false);
        failed + self.transmit(fd, &again).0
    }

    /// The probe's send: true when the kernel took every GSO message.
    fn send_gso_only(&mut self, fd: RawFd, frames: &[(SocketAddrV4, &[u8])]) -> bool {
        self.plan_msgs(frames, true);
        let (failed, refused) = self.transmit(fd, frames);
        failed == 0 && refused.is_empty()
    }

    fn plan_msgs<B: AsRef<[u8]>>(&mut self, frames: &[(SocketAddrV4, B)], gso: bool) {
        self.order.clear();
        self.order.extend(0..frames.len());
        self.plan.clear();
        if !gso {
            self.plan.extend((0..frames.len()).map(|i| Msg {
                first: i,
                count: 1,
                seg: 0,
            }));
            return;
        }
        self.group(frames);
        let mut i = 0;
        while i < self.order.len() {
            let (dst, first) = (frames[self.order[i]].0, frames[self.order[i]].1.as_ref());
            let seg = first.len();
            let mut count = 1;
            let mut bytes = seg;
            // GSO: one destination, one size, the last one may be shorter
            if seg > 0 && seg <= usize::from(u16::MAX) {
                while i + count < self.order.len() && count < GSO_MAX_SEGMENTS {
                    let (d, b) = (
                        frames[self.order[i + count]].0,
                        frames[self.order[i + count]].1.as_ref(),
                    );
                    if d != dst || b.len() > seg || b.is_empty() || bytes + b.len() > GSO_MAX_BYTES
                    {
                        break;
                    }
                    count += 1;
                    bytes += b.len();
                    if b.len() < seg {
                        break;
                    }
                }
            }
            self.plan.push(Msg {
                first: i,
                count,
                seg: if count > 1 { seg as u16 } else { 0 },
            });
            i += count;
        }
    }

    /// `order`: the batch's datagrams grouped by destination (destinations in address order),
    /// each destination's in the order given. A batch goes to a few destinations (a switch's
    /// workers, a worker's switch shards): a counting sort over them, found by a linear search;
    /// past 32 destinations a sort by (address, index), which orders the same.
    fn group<B: AsRef<[u8]>>(&mut self, frames: &[(SocketAddrV4, B)]) {
        const FEW: usize = 32;
        let key = |a: &SocketAddrV4| (u64::from(u32::from(*a.ip())) << 16) | u64::from(a.port());
        self.dests.clear();
        self.dest_of.clear();
        for (a, _) in frames {
            let k = key(a);
            let d = match self.dests.iter().position(|e| e.0 == k) {
                Some(d) => d,
                None if self.dests.len() < FEW => {
                    self.dests.push((k, 0, 0));
                    self.dests.len() - 1
                }
                None => {
                    self.order.sort_unstable_by_key(|&i| (key(&frames[i].0), i));
                    return;
                }
            };
            self.dests[d].1 += 1;
            self.dest_of.push(d as u32);
        }
        // each destination's first slot, destinations in address order
        let mut by_addr: [u8; FEW] = [0; FEW];
        let n = self.dests.len();
        for (j, b) in by_addr.iter_mut().enumerate().take(n) {
            *b = j as u8;
        }
        by_addr[..n].sort_unstable_by_key(|&j| self.dests[usize::from(j)].0);
        let mut at = 0;
        for &j in &by_addr[..n] {
            let e = &mut self.dests[usize::from(j)];
            e.2 = at;
            at += e.1;
        }
        for (i, &d) in self.dest_of.iter().enumerate() {
            let e = &mut self.dests[d as usize];
            self.order[e.2] = i;
            e.2 += 1;
        }
    }

    /// Send the planned messages; (datagrams lost, datagrams of GSO messages the kernel refused
    /// as such, by index into `frames`).
    fn transmit<B: AsRef<[u8]>>(
        &mut self,
        fd: RawFd,
        frames: &[(SocketAddrV4, B)],
    ) -> (u64, Vec<usize>) {
        let n = self.plan.len();
        self.addrs.clear();
        self.iovs.clear();
        self.ctrl.clear();
        self.msgs.clear();
        for &i in &self.order {
            let b = frames[i].1.as_ref();
            self.iovs.push(libc::iovec {
                iov_base: b.as_ptr() as *mut libc::c_void,
                iov_len: b.len(),
            });
        }
        for m in &self.plan {
            self.addrs.push(to_sockaddr(frames[self.order[m.first]].0));
            let mut c: Ctrl = [0; 8];
            if m.seg > 0 {
                // SAFETY: `c` is aligned for cmsghdr and larger than CMSG_SPACE(2); the header
                // and its u16 payload are written inside it
                unsafe {
                    let h = c.as_mut_ptr().cast::<libc::cmsghdr>();
                    (*h).cmsg_level = libc::SOL_UDP;
                    (*h).cmsg_type = UDP_SEGMENT;
                    (*h).cmsg_len = libc::CMSG_LEN(2) as _;
                    std::ptr::write_unaligned(libc::CMSG_DATA(h).cast::<u16>(), m.seg);
                }
            }
            self.ctrl.push(c);
        }
        for k in 0..n {
            let m = self.plan[k];
            // SAFETY: a zeroed mmsghdr is a valid empty header; the pointers set here point into
            // this struct's vectors, which are not touched again until the calls below return
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_name = (&mut self.addrs[k] as *mut libc::sockaddr_in).cast();
            h.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            h.msg_hdr.msg_iov = &mut self.iovs[m.first];
            h.msg_hdr.msg_iovlen = m.count as _;
            if m.seg > 0 {
                h.msg_hdr.msg_control = self.ctrl[k].as_mut_ptr().cast();
                // SAFETY: arithmetic only
                h.msg_hdr.msg_controllen = unsafe { libc::CMSG_SPACE(2) } as _;
            }
            self.msgs.push(h);
        }
        let mut failed = 0u64;
        let mut refused = Vec::new();
        let mut at = 0;
        while at < n {
            let len = (n - at).min(1024);
            // SAFETY: msgs[at..at + len] are initialised headers pointing at live buffers
            let rc =
                unsafe { libc::sendmmsg(fd, self.msgs[at..].as_mut_ptr(), len as libc::c_uint, 0) };
            if rc > 0 {
                at += rc as usize;
                continue;
            }
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            let m = self.plan[at];
            let gso_refusal = m.seg > 0
                && matches!(
                    e.raw_os_error(),
                    Some(libc::EIO) | Some(libc::EINVAL) | Some(libc::EMSGSIZE)
                );
            if gso_refusal {
                refused.extend((m.first..m.first + m.count).map(|j| self.order[j]));
            } else {
                // the message at `at` was refused (e.g. ENOBUFS): its datagrams are lost
                failed += m.count as u64;
            }
            at += 1;
        }
        (failed, refused)
    }
}

/// Batched receives into buffers allocated once; with GRO each buffer may hold a run of
/// datagrams of one flow.
pub struct Receiver {
    off: Offload,
    bufs: Vec<Vec<u8>>,
    addrs: Vec<libc::sockaddr_in>,
    iovs: Vec<libc::iovec>,
    /// Owns the control buffers the headers point at.
    _ctrl: Vec<Ctrl>,
    msgs: Vec<libc::mmsghdr>,
    /// Per message of the last receive: its GRO segment size (0: one datagram).
    seg: Vec<usize>,
    n: usize,
}

// SAFETY: the raw pointers only point into the struct's own heap buffers
unsafe impl Send for Receiver {}

impl Receiver {
    /// Buffers for datagrams of up to `mtu` bytes (64 KiB each with GRO). The socket read must
    /// have had [`enable_gro`] when `off.gro`.
    pub fn new(mtu: usize, off: Offload) -> Receiver {
        let size = if off.gro { mtu.max(GRO_BUF) } else { mtu };
        let batch = BATCH;
        let mut bufs: Vec<Vec<u8>> = (0..batch).map(|_| vec![0u8; size]).collect();
        // SAFETY: all-zero sockaddr_in, control buffers and mmsghdr are valid values
        let mut addrs: Vec<libc::sockaddr_in> =
            (0..batch).map(|_| unsafe { std::mem::zeroed() }).collect();
        let mut ctrl: Vec<Ctrl> = vec![[0; 8]; batch];
        let mut iovs: Vec<libc::iovec> = bufs
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            })
            .collect();
        let mut msgs: Vec<libc::mmsghdr> =
            (0..batch).map(|_| unsafe { std::mem::zeroed() }).collect();
        for i in 0..batch {
            msgs[i].msg_hdr.msg_name = (&mut addrs[i] as *mut libc::sockaddr_in).cast();
            msgs[i].msg_hdr.msg_iov = &mut iovs[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
            if off.gro {
                msgs[i].msg_hdr.msg_control = ctrl[i].as_mut_ptr().cast();
            }
        }
        Receiver {
            off,
            bufs,
            addrs,
            iovs,
            _ctrl: ctrl,
            msgs,
            seg: vec![0; batch],
            n: 0,
        }
    }

    pub fn offload(&self) -> Offload {
        self.off
    }

    /// Fault in every page of the receive buffers now (one write per page; the kernel would
    /// fault them in on the first receives that fill them).
    pub fn prefault(&mut self) {
        for b in &mut self.bufs {
            for i in (0..b.len()).step_by(4096) {
                b[i] = std::hint::black_box(0);
            }
        }
    }

    /// One `recvmmsg` (non-blocking unless `block`: then it waits for the first); returns how
    /// many messages (datagrams, or GRO runs) arrived.
    pub fn recv(&mut self, fd: RawFd, block: bool) -> usize {
        for i in 0..self.msgs.len() {
            let h = &mut self.msgs[i].msg_hdr;
            h.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            if self.off.gro {
                h.msg_controllen = std::mem::size_of::<Ctrl>() as _;
            }
            self.msgs[i].msg_len = 0;
            self.iovs[i].iov_len = self.bufs[i].len();
        }
        let flags = if block {
            libc::MSG_WAITFORONE
        } else {
            libc::MSG_DONTWAIT
        };
        // SAFETY: the headers point at this struct's buffers, `msgs.len()` of them
        let rc = unsafe {
            libc::recvmmsg(
                fd,
                self.msgs.as_mut_ptr(),
                self.msgs.len() as libc::c_uint,
                flags,
                std::ptr::null_mut(),
            )
        };
        self.n = if rc < 0 { 0 } else { rc as usize };
        for i in 0..self.n {
            self.seg[i] = if self.off.gro {
                gro_size(&self.msgs[i].msg_hdr)
            } else {
                0
            };
        }
        self.n
    }

    /// Every datagram of the last `recv`, in arrival order: (source, bytes); a GRO run is split
    /// at its segment size.
    pub fn datagrams(&self, mut f: impl FnMut(SocketAddrV4, &[u8])) {
        for i in 0..self.n {
            let len = (self.msgs[i].msg_len as usize).min(self.bufs[i].len());
            let src = from_sockaddr(&self.addrs[i]);
            let data = &self.bufs[i][..len];
            match self.seg[i] {
                0 => f(src, data),
                s => data.chunks(s).for_each(|d| f(src, d)),
            }
        }
    }
}

/// The `UDP_GRO` control message's segment size, 0 when there is none.
fn gro_size(h: &libc::msghdr) -> usize {
    // SAFETY: `h` was filled by the kernel; CMSG_FIRSTHDR/NXTHDR stay inside msg_controllen
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == UDP_GRO {
                let v = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                return usize::try_from(v).unwrap_or(0);
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    0
}

/// Send every one of `pkts` to `to` (or on a connected socket: `None`) with `sendmmsg` of
/// single datagrams (no GSO: for callers whose measurement is the per-datagram kernel path),
/// until all are sent or a call fails; how many were sent, and the failure.
pub fn sendmmsg_all<P: AsRef<[u8]>>(
    sock: &impl AsRawFd,
    to: Option<SocketAddrV4>,
    pkts: &[P],
) -> (usize, Option<io::Error>) {
    // SAFETY: all-zero is a valid sockaddr_in
    let mut addr: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    if let Some(to) = to {
        addr = to_sockaddr(to);
    }
    let mut iov: Vec<libc::iovec> = pkts
        .iter()
        .map(|p| libc::iovec {
            iov_base: p.as_ref().as_ptr() as *mut libc::c_void,
            iov_len: p.as_ref().len(),
        })
        .collect();
    let mut msgs: Vec<libc::mmsghdr> = iov
        .iter_mut()
        .map(|v| {
            // SAFETY: a zeroed mmsghdr is valid (no name, no control)
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            if to.is_some() {
                m.msg_hdr.msg_name = (&mut addr as *mut libc::sockaddr_in).cast();
                m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            }
            m.msg_hdr.msg_iov = v as *mut libc::iovec;
            m.msg_hdr.msg_iovlen = 1;
            m
        })
        .collect();
    let mut done = 0usize;
    while done < msgs.len() {
        // SAFETY: a valid socket and initialised headers from `done` on, whose buffers (`pkts`,
        // `iov`, `addr`) outlive the call
        let rc = unsafe {
            libc::sendmmsg(
                sock.as_raw_fd(),
                msgs.as_mut_ptr().add(done),
                (msgs.len() - done) as libc::c_uint,
                0,
            )
        };
        if rc <= 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return (done, Some(e));
        }
        done += rc as usize;
    }
    (done, None)
}

/// One blocking `recvmmsg` (it waits for the first datagram, or the socket's read timeout) of
/// single datagrams into `bufs`; each datagram's length into `lens`. Returns how many.
pub fn recvmmsg_into<B: AsMut<[u8]>>(
    sock: &impl AsRawFd,
    bufs: &mut [B],
    lens: &mut [usize],
) -> io::Result<usize> {
    let mut iov: Vec<libc::iovec> = bufs
        .iter_mut()
        .map(|b| {
            let b = b.as_mut();
            libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            }
        })
        .collect();
    let mut msgs: Vec<libc::mmsghdr> = iov
        .iter_mut()
        .map(|v| {
            // SAFETY: a zeroed mmsghdr is valid (no name, no control)
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_iov = v as *mut libc::iovec;
            m.msg_hdr.msg_iovlen = 1;
            m
        })
        .collect();
    let want = msgs.len().min(lens.len());
    // SAFETY: a valid socket and `want` headers whose buffers outlive the call
    let rc = unsafe {
        libc::recvmmsg(
            sock.as_raw_fd(),
            msgs.as_mut_ptr(),
            want as libc::c_uint,
            libc::MSG_WAITFORONE,
            std::ptr::null_mut(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    for (l, m) in lens.iter_mut().zip(&msgs).take(rc as usize) {
        *l = m.msg_len as usize;
    }
    Ok(rc as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &UdpSocket) -> SocketAddrV4 {
        match s.local_addr().expect("addr") {
            std::net::SocketAddr::V4(a) => a,
            std::net::SocketAddr::V6(_) => unreachable!(),
        }
    }

    /// Frames of mixed sizes to two receivers, interleaved: every datagram arrives whole, once,
    /// each receiver's in the order sent, whatever the offload.
    fn round_trip(off: Offload) -> Offload {
        let a = bind_udp(Ipv4Addr::LOCALHOST, 8 << 20).expect("bind");
        let b = bind_udp(Ipv4Addr::LOCALHOST, 8 << 20).expect("bind");
        let tx = bind_udp(Ipv4Addr::LOCALHOST, 8 << 20).expect("bind");
        if off.gro {
            enable_gro(&a).expect("gro");
            enable_gro(&b).expect("gro");
        }
        let (aa, ba) = (addr(&a), addr(&b));
        // sizes: runs of 1000, a shorter one ending a run, a longer one starting the next
        let frames: Vec<(SocketAddrV4, Vec<u8>)> = (0..600u32)
            .map(|i| {
                let len = match i % 50 {
                    49 => 300,
                    0 => 1200,
                    _ => 1000,
                };
                let mut v = vec![(i % 251) as u8; len];
                v[..4].copy_from_slice(&i.to_be_bytes());
                (if i % 3 == 0 { ba } else { aa }, v)
            })
            .collect();
        let view: Vec<(SocketAddrV4, &[u8])> = frames.iter().map(|(d, v)| (*d, &v[..])).collect();
        let mut s = Sender::new(off);
        let mut lost = 0;
        for chunk in view.chunks(200) {
            lost += s.send(tx.as_raw_fd(), chunk);
        }
        assert_eq!(lost, 0);
        for (sock, dst) in [(&a, aa), (&b, ba)] {
            let want: Vec<&Vec<u8>> = frames
                .iter()
                .filter(|(d, _)| *d == dst)
                .map(|(_, v)| v)
                .collect();
            let mut r = Receiver::new(2048, off);
            let mut got: Vec<Vec<u8>> = Vec::new();
            let t0 = std::time::Instant::now();
            while got.len() < want.len() && t0.elapsed() < std::time::Duration::from_secs(5) {
                r.recv(sock.as_raw_fd(), false);
                r.datagrams(|src, d| {
                    assert_eq!(src, addr(&tx));
                    got.push(d.to_vec());
                });
            }
            assert_eq!(got.len(), want.len());
            assert!(got.iter().zip(&want).all(|(g, w)| g == *w));
        }
        s.offload()
    }

    #[test]
    fn every_datagram_arrives_whole_and_in_order_with_and_without_offload() {
        round_trip(Offload::NONE);
        let host = Offload::probe();
        eprintln!("offload on this host: {}", host.label());
        if host.gso || host.gro {
            assert_eq!(round_trip(host), host, "GSO was refused after the probe");
        }
    }

    /// The grouping equals a stable sort by destination address, with few destinations (the
    /// counting sort) and with more than 32 (the sort).
    #[test]
    fn grouping_is_a_stable_sort_by_destination() {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut s = Sender::new(Offload::NONE);
        for dests in [1u64, 2, 6, 31, 32, 33, 100] {
            let frames: Vec<(SocketAddrV4, [u8; 1])> = (0..500)
                .map(|_| {
                    let d = next() % dests;
                    // addresses not in the order they first appear
                    let ip = Ipv4Addr::new(127, 0, (d % 3) as u8, 1);
                    (SocketAddrV4::new(ip, 9000 - d as u16), [0u8])
                })
                .collect();
            s.order.clear();
            s.order.extend(0..frames.len());
            s.group(&frames);
            let mut want: Vec<usize> = (0..frames.len()).collect();
            want.sort_by_key(|&i| (u32::from(*frames[i].0.ip()), frames[i].0.port()));
            assert_eq!(s.order, want, "{dests} destinations");
        }
    }

    #[test]
    fn gso_groups_by_destination_and_cuts_at_a_size_change() {
        let d1 = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 1);
        let d2 = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 2);
        let big = [0u8; 1000];
        let small = [0u8; 10];
        let frames: Vec<(SocketAddrV4, &[u8])> = vec![
            (d1, &big),
            (d2, &big),
            (d1, &big),
            (d1, &small),
            (d1, &big),
            (d2, &big),
        ];
        let mut s = Sender::new(Offload {
            gso: true,
            gro: false,
        });
        s.plan_msgs(&frames, true);
        let plan: Vec<(usize, u16)> = s.plan.iter().map(|m| (m.count, m.seg)).collect();
        // d1: big, big, small (the short last segment), then big alone; d2: big, big
        assert_eq!(plan, vec![(3, 1000), (1, 0), (2, 1000)]);
        assert_eq!(s.order, vec![0, 2, 3, 4, 1, 5]);
    }
}
