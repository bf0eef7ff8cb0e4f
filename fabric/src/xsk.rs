//! `xsk`: an AF_XDP socket on one interface's receive queue 0, in copy mode, with the XDP program
//! that hands that queue's frames to it, made with nothing but system calls (no libbpf): the raw
//! fabric's ([`crate::raw`]) second socket kind.
//!
//! What [`XdpSocket::open`] builds, in the order the kernel needs it:
//! 1. `socket(AF_XDP, SOCK_RAW)`; a UMEM (one anonymous mapping of equal chunks) registered with
//!    `XDP_UMEM_REG`; the fill, completion, RX and TX rings sized with their socket options and
//!    mapped at the offsets `XDP_MMAP_OFFSETS` gives;
//! 2. `bind` to (ifindex, queue 0) with `XDP_COPY` (veth has no zero-copy);
//! 3. an `XSKMAP` (`bpf(BPF_MAP_CREATE)`) whose entry 0 is the socket, and a five-instruction XDP
//!    program (`bpf(BPF_PROG_LOAD)`): `bpf_redirect_map(xskmap, ctx->rx_queue_index, XDP_PASS)`,
//!    so a frame on a queue with no socket goes on to the kernel's stack;
//! 4. the program attached to the interface in generic (SKB) mode by a BPF link
//!    (`bpf(BPF_LINK_CREATE)`, `BPF_XDP`): the link is a descriptor, so the program leaves the
//!    interface when the socket is dropped or its process ends, however it ends.
//!
//! Costs, measured on this host (2 loaded cores, fabric/tests/xsk.rs's ignored bench): a socket
//! takes about 12 ms to make and 24 ms to drop, and its queue stays busy for a moment after the
//! drop (the kernel frees it asynchronously: a new socket on that queue is refused with `EBUSY`
//! until then; the raw fabric opens each interface once per node process).
//!
//! Every failure is an [`XskError`] whose message is one sentence naming the step and, where the
//! kernel's answer says more, why (no `CAP_NET_ADMIN`, no AF_XDP in this kernel, another XDP
//! program on the interface): the raw fabric records it when it falls back to `AF_PACKET`.
//!
//! Layouts are the kernel's UAPI, cited from this host's headers (linux-libc-dev 6.1):
//! `struct sockaddr_xdp`, `struct xdp_ring_offset`, `struct xdp_mmap_offsets`,
//! `struct xdp_umem_reg`, `struct xdp_statistics`, `struct xdp_desc`, the socket options and the
//! ring page offsets from `<linux/if_xdp.h>`; `union bpf_attr`'s `BPF_MAP_CREATE`,
//! `BPF_MAP_*_ELEM`, `BPF_PROG_LOAD` and `BPF_LINK_CREATE` members, `enum bpf_cmd`,
//! `enum bpf_map_type`, `enum bpf_prog_type`, `enum bpf_attach_type`, `struct xdp_md` and the
//! helper numbering (`___BPF_FUNC_MAPPER`) from `<linux/bpf.h>`; `XDP_FLAGS_SKB_MODE` from
//! `<linux/if_link.h>`. Newer kernels append fields to these structures and accept the shorter
//! forms.

use std::cell::{Cell, RefCell};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};

/// The label a node reports for a link on this socket.
pub const KIND: &str = "af_xdp(copy)";

/// Frames the UMEM holds for receiving (all of them on the fill ring at the start): the RX
/// ring's size, what a receiver that falls behind can hold before the kernel drops (counted in
/// [`XdpSocket::drops`]). The UMEM is pinned memory: (2048 + 512) chunks of 2 KiB, 5 MiB per
/// socket (10 MiB with 4 KiB chunks), and the raw fabric opens one per link end (n(n-1) for
/// n nodes).
pub const RX_FRAMES: u32 = 2048;
/// Frames the UMEM holds for sending: the TX and completion rings' size.
pub const TX_FRAMES: u32 = 512;
/// Descriptors queued on the TX ring before the kernel is told to send them.
const TX_BATCH: u32 = 32;
/// Frames taken from the RX ring before their slots (and chunks, on the fill ring) go back.
pub const RX_BATCH: u32 = 32;

/// `XDP_PACKET_HEADROOM` (include/linux/bpf.h in the kernel tree; not in the UAPI headers):
/// what the kernel keeps free in front of a received frame inside its chunk.
const XDP_PACKET_HEADROOM: usize = 256;

// <linux/if_xdp.h>
const XDP_COPY: u16 = 1 << 1;
const XDP_MMAP_OFFSETS: libc::c_int = 1;
const XDP_RX_RING: libc::c_int = 2;
const XDP_TX_RING: libc::c_int = 3;
const XDP_UMEM_REG: libc::c_int = 4;
const XDP_UMEM_FILL_RING: libc::c_int = 5;
const XDP_UMEM_COMPLETION_RING: libc::c_int = 6;
const XDP_STATISTICS: libc::c_int = 7;
const XDP_PGOFF_RX_RING: libc::off_t = 0;
const XDP_PGOFF_TX_RING: libc::off_t = 0x8000_0000;
const XDP_UMEM_PGOFF_FILL_RING: libc::off_t = 0x1_0000_0000;
const XDP_UMEM_PGOFF_COMPLETION_RING: libc::off_t = 0x1_8000_0000;
const AF_XDP: libc::c_int = 44;
const SOL_XDP: libc::c_int = 283;

// <linux/bpf.h>: enum bpf_cmd, bpf_map_type, bpf_prog_type, bpf_attach_type; helper 51 is
// `redirect_map` in ___BPF_FUNC_MAPPER; XDP_PASS is 2 in enum xdp_action
const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
const BPF_FUNC_REDIRECT_MAP: i32 = 51;
const BPF_PSEUDO_MAP_FD: u8 = 1;
const XDP_PASS: i32 = 2;
// <linux/if_link.h>
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;

/// `struct sockaddr_xdp`.
#[repr(C)]
struct SockaddrXdp {
    family: u16,
    flags: u16,
    ifindex: u32,
    queue_id: u32,
    shared_umem_fd: u32,
}

/// `struct xdp_ring_offset`.
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct RingOffset {
    producer: u64,
    consumer: u64,
    desc: u64,
    flags: u64,
}

/// `struct xdp_mmap_offsets`.
#[repr(C)]
#[derive(Default)]
struct MmapOffsets {
    rx: RingOffset,
    tx: RingOffset,
    fr: RingOffset,
    cr: RingOffset,
}

/// `struct xdp_umem_reg` (the 6.1 form; later kernels append `tx_metadata_len`).
#[repr(C)]
struct UmemReg {
    addr: u64,
    len: u64,
    chunk_size: u32,
    headroom: u32,
    flags: u32,
}

/// `struct xdp_statistics` (the kernel writes every field; one is read).
#[repr(C)]
#[derive(Default)]
#[allow(dead_code)]
struct Statistics {
    rx_dropped: u64,
    rx_invalid_descs: u64,
    tx_invalid_descs: u64,
    rx_ring_full: u64,
    rx_fill_ring_empty_descs: u64,
    tx_ring_empty_descs: u64,
}

/// `struct xdp_desc`.
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct Desc {
    addr: u64,
    len: u32,
    options: u32,
}

/// `union bpf_attr` for `BPF_MAP_CREATE` (up to `map_name`).
#[repr(C)]
#[derive(Default)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

/// `union bpf_attr` for `BPF_MAP_*_ELEM`.
#[repr(C)]
#[derive(Default)]
struct MapElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// `union bpf_attr` for `BPF_PROG_LOAD` (up to `expected_attach_type`).
#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// `union bpf_attr` for `BPF_LINK_CREATE` (up to `flags`, padded to the 8-byte alignment of
/// the member that follows).
#[repr(C)]
#[derive(Default)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
}

/// `struct bpf_insn`: opcode, destination register (low nibble) and source register (high
/// nibble), offset, immediate.
#[repr(C)]
#[derive(Clone, Copy)]
struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: dst | (src << 4),
        off,
        imm,
    }
}

/// The XDP program: `return bpf_redirect_map(&xskmap, ctx->rx_queue_index, XDP_PASS);`.
fn program(map_fd: RawFd) -> [Insn; 6] {
    [
        // r2 = *(u32 *)(r1 + 16): xdp_md.rx_queue_index (BPF_LDX | BPF_MEM | BPF_W)
        insn(0x61, 2, 1, 16, 0),
        // r1 = the map (BPF_LD | BPF_DW | BPF_IMM, src BPF_PSEUDO_MAP_FD; two slots)
        insn(0x18, 1, BPF_PSEUDO_MAP_FD, 0, map_fd),
        insn(0, 0, 0, 0, 0),
        // r3 = XDP_PASS: the action when no socket is in the map at that index
        // (BPF_ALU64 | BPF_MOV | BPF_K)
        insn(0xb7, 3, 0, 0, XDP_PASS),
        // call bpf_redirect_map (BPF_JMP | BPF_CALL)
        insn(0x85, 0, 0, 0, BPF_FUNC_REDIRECT_MAP),
        // return r0 (BPF_JMP | BPF_EXIT)
        insn(0x95, 0, 0, 0, 0),
    ]
}

/// Why an AF_XDP socket could not be made: one sentence.
#[derive(Debug, thiserror::Error)]
pub enum XskError {
    #[error("no interface `{0}` here")]
    NoInterface(String),
    #[error(
        "frames up to {frame} bytes do not fit an AF_XDP chunk ({max} bytes at most in copy mode without multi-buffer)"
    )]
    FrameTooLarge { frame: usize, max: usize },
    #[error("`{iface}` has {queues} receive queues and this socket serves queue 0 only")]
    Queues { iface: String, queues: usize },
    #[error("{step} was refused: {source}{}", hint(step, source))]
    Refused {
        step: &'static str,
        source: io::Error,
    },
}

/// What the kernel's answer to `step` most likely means, as a clause.
fn hint(step: &str, e: &io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => {
            " (this process lacks CAP_NET_ADMIN, CAP_BPF or CAP_IPC_LOCK)"
        }
        Some(libc::EAFNOSUPPORT) => " (this kernel has no AF_XDP: CONFIG_XDP_SOCKETS)",
        Some(libc::ENOSYS) => " (this kernel has no bpf(2))",
        Some(libc::EBUSY) | Some(libc::EEXIST) if step.contains("attach") => {
            " (another XDP program is attached to the interface)"
        }
        Some(libc::EBUSY) if step.contains("binding") => {
            " (another AF_XDP socket is bound to that queue)"
        }
        Some(libc::EINVAL) if step.contains("XSKMAP") => " (this kernel lacks BPF_MAP_TYPE_XSKMAP)",
        _ => "",
    }
}

fn refused(step: &'static str) -> impl FnOnce(io::Error) -> XskError {
    move |source| XskError::Refused { step, source }
}

fn cvt(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// `bpf(cmd, attr, sizeof attr)`: a new descriptor or 0.
fn bpf<T>(cmd: libc::c_long, attr: &mut T) -> io::Result<libc::c_int> {
    // SAFETY: `attr` is a `union bpf_attr` prefix of the given size for `cmd`; the kernel reads
    // at most that many bytes and may write back into it
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            (attr as *mut T).cast::<libc::c_void>(),
            std::mem::size_of::<T>() as libc::c_uint,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as libc::c_int)
    }
}

fn own(fd: libc::c_int) -> OwnedFd {
    // SAFETY: a descriptor the kernel just returned, owned from here on
    unsafe { OwnedFd::from_raw_fd(fd) }
}

fn setsockopt<T>(fd: RawFd, opt: libc::c_int, val: &T) -> io::Result<()> {
    // SAFETY: an option value of its own size
    cvt(unsafe {
        libc::setsockopt(
            fd,
            SOL_XDP,
            opt,
            (val as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    })
    .map(|_| ())
}

/// One shared mapping, unmapped on drop.
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Mapping {
    fn new(len: usize, fd: RawFd, offset: libc::off_t) -> io::Result<Mapping> {
        let (flags, fd) = if fd < 0 {
            (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1)
        } else {
            (libc::MAP_SHARED | libc::MAP_POPULATE, fd)
        };
        // SAFETY: a fresh mapping the kernel places; checked for MAP_FAILED
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                offset,
            )
        };
        if ptr == libc::MAP_FAILED {
            Err(io::Error::last_os_error())
        } else {
            Ok(Mapping {
                ptr: ptr.cast(),
                len,
            })
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// One of the four rings: the kernel's producer and consumer indices and the entries, in a
/// mapping of the socket. This side keeps its own index (published in batches) and a cached
/// copy of the kernel's (read again only when the cache says full or empty): each shared index
/// is a cache line both sides write, and touching it once per frame costs more than the frame.
struct Ring<T> {
    _map: Mapping,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    entries: *mut T,
    size: u32,
    /// This side's index (the producer's on fill/TX, the consumer's on RX/completion).
    mine: Cell<u32>,
    /// The kernel's index as last read.
    theirs: Cell<u32>,
}

impl<T: Copy> Ring<T> {
    fn map(
        fd: RawFd,
        off: &RingOffset,
        size: u32,
        pgoff: libc::off_t,
        producer_side: bool,
    ) -> io::Result<Ring<T>> {
        let len = off.desc as usize + size as usize * std::mem::size_of::<T>();
        let map = Mapping::new(len, fd, pgoff)?;
        // SAFETY: the offsets are inside the mapping (the kernel laid it out so) and aligned
        // for their types
        let (producer, consumer, entries) = unsafe {
            (
                map.ptr.add(off.producer as usize) as *const AtomicU32,
                map.ptr.add(off.consumer as usize) as *const AtomicU32,
                map.ptr.add(off.desc as usize) as *mut T,
            )
        };
        // SAFETY: the indices are live u32s in the mapping
        let (p, c) = unsafe {
            (
                (*producer).load(Ordering::Acquire),
                (*consumer).load(Ordering::Acquire),
            )
        };
        let (mine, theirs) = if producer_side { (p, c) } else { (c, p) };
        Ok(Ring {
            _map: map,
            producer,
            consumer,
            entries,
            size,
            mine: Cell::new(mine),
            theirs: Cell::new(theirs),
        })
    }

    /// As producer: room for one more entry (the kernel's consumer index read again only when
    /// the cached one says full).
    fn has_room(&self) -> bool {
        if self.mine.get().wrapping_sub(self.theirs.get()) < self.size {
            return true;
        }
        // SAFETY: a live u32 in the mapping, written by the kernel
        self.theirs
            .set(unsafe { (*self.consumer).load(Ordering::Acquire) });
        self.mine.get().wrapping_sub(self.theirs.get()) < self.size
    }

    /// As producer: write one entry (room checked by the caller); the kernel sees it at the
    /// next [`Ring::publish`].
    fn write(&self, v: T) {
        let p = self.mine.get();
        // SAFETY: index masked into the ring; the slot belongs to the producer until published
        unsafe {
            self.entries
                .add((p & (self.size - 1)) as usize)
                .write_volatile(v)
        };
        self.mine.set(p.wrapping_add(1));
    }

    /// As producer: publish every entry written (Release: the entries before the index); as
    /// consumer: give back every entry taken.
    fn publish(&self, producer_side: bool) {
        let idx = if producer_side {
            self.producer
        } else {
            self.consumer
        };
        // SAFETY: a live u32 in the mapping
        unsafe { (*idx).store(self.mine.get(), Ordering::Release) };
    }

    /// As producer: entries written that the kernel has not taken yet (read afresh).
    fn unconsumed(&self) -> u32 {
        // SAFETY: a live u32 in the mapping, written by the kernel
        self.theirs
            .set(unsafe { (*self.consumer).load(Ordering::Acquire) });
        self.mine.get().wrapping_sub(self.theirs.get())
    }

    /// As consumer: take the next entry, if the kernel has produced one (its producer index
    /// read again only when the cached one says empty); given back at the next
    /// [`Ring::publish`].
    fn take(&self) -> Option<T> {
        let c = self.mine.get();
        if c == self.theirs.get() {
            // SAFETY: a live u32 in the mapping, written by the kernel
            self.theirs
                .set(unsafe { (*self.producer).load(Ordering::Acquire) });
            if c == self.theirs.get() {
                return None;
            }
        }
        // SAFETY: index masked into the ring; Acquire on the producer index made it visible
        let v = unsafe {
            self.entries
                .add((c & (self.size - 1)) as usize)
                .read_volatile()
        };
        self.mine.set(c.wrapping_add(1));
        Some(v)
    }
}

/// An AF_XDP socket in copy mode on queue 0 of one interface, with its UMEM, rings and the XDP
/// program (attached while the socket lives) that sends that queue's frames to it.
pub struct XdpSocket {
    // dropped first: the program leaves the interface before anything else goes
    _link: OwnedFd,
    _prog: OwnedFd,
    _map: OwnedFd,
    fill: Ring<u64>,
    comp: Ring<u64>,
    rx: Ring<Desc>,
    tx: Ring<Desc>,
    umem: Mapping,
    fd: OwnedFd,
    chunk: usize,
    tx_free: RefCell<Vec<u64>>,
    /// Descriptors written to the TX ring since the last kick.
    pending: Cell<u32>,
    /// Frames taken from the RX ring since the last publish.
    taken: Cell<u32>,
    pub iface: String,
}

// SAFETY: the raw pointers are into mappings this value owns; nothing in it is tied to a thread
unsafe impl Send for XdpSocket {}

/// The largest frame a chunk of `chunk` bytes takes in copy mode.
pub fn max_frame(chunk: usize) -> usize {
    chunk - XDP_PACKET_HEADROOM
}

impl XdpSocket {
    /// Make the socket on `iface` (queue 0) for frames up to `frame` bytes, attach its program.
    pub fn open(iface: &str, frame: usize) -> Result<XdpSocket, XskError> {
        let chunk = [2048usize, 4096]
            .into_iter()
            .find(|&c| frame <= max_frame(c))
            .ok_or(XskError::FrameTooLarge {
                frame,
                max: max_frame(4096),
            })?;
        let name =
            std::ffi::CString::new(iface).map_err(|_| XskError::NoInterface(iface.to_string()))?;
        // SAFETY: a NUL-terminated name
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if ifindex == 0 {
            return Err(XskError::NoInterface(iface.to_string()));
        }
        let queues = std::fs::read_dir(format!("/sys/class/net/{iface}/queues"))
            .map(|d| {
                d.filter(|e| {
                    e.as_ref()
                        .is_ok_and(|e| e.file_name().to_string_lossy().starts_with("rx-"))
                })
                .count()
            })
            .unwrap_or(1);
        if queues > 1 {
            return Err(XskError::Queues {
                iface: iface.to_string(),
                queues,
            });
        }
        // SAFETY: plain socket(2)
        let fd = own(
            cvt(unsafe { libc::socket(AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) })
                .map_err(refused("opening an AF_XDP socket"))?,
        );
        let raw = fd.as_raw_fd();
        let frames = (RX_FRAMES + TX_FRAMES) as usize;
        let umem = Mapping::new(frames * chunk, -1, 0).map_err(refused("mapping the UMEM"))?;
        let reg = UmemReg {
            addr: umem.ptr as u64,
            len: (frames * chunk) as u64,
            chunk_size: chunk as u32,
            headroom: 0,
            flags: 0,
        };
        setsockopt(raw, XDP_UMEM_REG, &reg).map_err(refused("registering the UMEM"))?;
        for (opt, n) in [
            (XDP_UMEM_FILL_RING, RX_FRAMES),
            (XDP_UMEM_COMPLETION_RING, TX_FRAMES),
            (XDP_RX_RING, RX_FRAMES),
            (XDP_TX_RING, TX_FRAMES),
        ] {
            setsockopt(raw, opt, &n).map_err(refused("sizing the AF_XDP rings"))?;
        }
        let mut off = MmapOffsets::default();
        let mut len = std::mem::size_of::<MmapOffsets>() as libc::socklen_t;
        // SAFETY: an out-parameter of the given size
        cvt(unsafe {
            libc::getsockopt(
                raw,
                SOL_XDP,
                XDP_MMAP_OFFSETS,
                (&mut off as *mut MmapOffsets).cast(),
                &mut len,
            )
        })
        .map_err(refused("reading the ring offsets (XDP_MMAP_OFFSETS)"))?;
        let map = refused("mapping the AF_XDP rings");
        let fill = Ring::<u64>::map(raw, &off.fr, RX_FRAMES, XDP_UMEM_PGOFF_FILL_RING, true);
        let comp = Ring::<u64>::map(
            raw,
            &off.cr,
            TX_FRAMES,
            XDP_UMEM_PGOFF_COMPLETION_RING,
            false,
        );
        let rx = Ring::<Desc>::map(raw, &off.rx, RX_FRAMES, XDP_PGOFF_RX_RING, false);
        let tx = Ring::<Desc>::map(raw, &off.tx, TX_FRAMES, XDP_PGOFF_TX_RING, true);
        let (fill, comp, rx, tx) = match (fill, comp, rx, tx) {
            (Ok(f), Ok(c), Ok(r), Ok(t)) => (f, c, r, t),
            (Err(e), ..) | (_, Err(e), ..) | (_, _, Err(e), _) | (.., Err(e)) => {
                return Err(map(e));
            }
        };
        // every receive chunk on the fill ring; the send chunks after them are this side's
        for i in 0..RX_FRAMES as u64 {
            fill.write(i * chunk as u64);
        }
        fill.publish(true);
        let tx_free = (RX_FRAMES as u64..(RX_FRAMES + TX_FRAMES) as u64)
            .map(|i| i * chunk as u64)
            .collect();
        let sxdp = SockaddrXdp {
            family: AF_XDP as u16,
            flags: XDP_COPY,
            ifindex,
            queue_id: 0,
            shared_umem_fd: 0,
        };
        // SAFETY: a sockaddr_xdp of its own size
        cvt(unsafe {
            libc::bind(
                raw,
                (&sxdp as *const SockaddrXdp).cast(),
                std::mem::size_of::<SockaddrXdp>() as libc::socklen_t,
            )
        })
        .map_err(refused("binding the AF_XDP socket to queue 0 in copy mode"))?;
        let mut mc = MapCreateAttr {
            map_type: BPF_MAP_TYPE_XSKMAP,
            key_size: 4,
            value_size: 4,
            max_entries: 1,
            ..MapCreateAttr::default()
        };
        mc.map_name[..7].copy_from_slice(b"inb_xsk");
        let map_fd = own(bpf(BPF_MAP_CREATE, &mut mc).map_err(refused("creating the XSKMAP"))?);
        let (key, value) = (0u32, raw as u32);
        let mut up = MapElemAttr {
            map_fd: map_fd.as_raw_fd() as u32,
            key: &key as *const u32 as u64,
            value: &value as *const u32 as u64,
            ..MapElemAttr::default()
        };
        bpf(BPF_MAP_UPDATE_ELEM, &mut up).map_err(refused("putting the socket in the XSKMAP"))?;
        let insns = program(map_fd.as_raw_fd());
        let license = b"Apache-2.0\0";
        let mut pl = ProgLoadAttr {
            prog_type: BPF_PROG_TYPE_XDP,
            insn_cnt: insns.len() as u32,
            insns: insns.as_ptr() as u64,
            license: license.as_ptr() as u64,
            expected_attach_type: BPF_XDP,
            ..ProgLoadAttr::default()
        };
        pl.prog_name[..7].copy_from_slice(b"inb_xsk");
        let prog = own(bpf(BPF_PROG_LOAD, &mut pl).map_err(refused("loading the XDP program"))?);
        let mut lc = LinkCreateAttr {
            prog_fd: prog.as_raw_fd() as u32,
            target_ifindex: ifindex,
            attach_type: BPF_XDP,
            flags: XDP_FLAGS_SKB_MODE,
        };
        let link = own(bpf(BPF_LINK_CREATE, &mut lc)
            .map_err(refused("attaching the XDP program (generic mode)"))?);
        Ok(XdpSocket {
            _link: link,
            _prog: prog,
            _map: map_fd,
            fill,
            comp,
            rx,
            tx,
            umem,
            fd,
            chunk,
            tx_free: RefCell::new(tx_free),
            pending: Cell::new(0),
            taken: Cell::new(0),
            iface: iface.to_string(),
        })
    }

    /// The chunk size of the UMEM (2048 or 4096 bytes).
    pub fn chunk(&self) -> usize {
        self.chunk
    }

    /// Send chunks the kernel has finished with, back to this side.
    fn reclaim(&self) {
        let mut free = self.tx_free.borrow_mut();
        let before = free.len();
        while let Some(addr) = self.comp.take() {
            free.push(addr);
        }
        if free.len() > before {
            self.comp.publish(false);
        }
    }

    /// Tell the kernel to send what the TX ring holds (copy mode sends in the system call, a
    /// batch at a time). A busy or full device is not an error: the frames stay on the ring.
    fn kick(&self) -> io::Result<()> {
        self.tx.publish(true);
        // SAFETY: sendto with no data on a bound AF_XDP socket
        let rc = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                std::ptr::null(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null(),
                0,
            )
        };
        if rc >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EBUSY) | Some(libc::ENOBUFS) | Some(libc::EINTR) => {
                Ok(())
            }
            _ => Err(e),
        }
    }

    /// Queue one whole frame for sending; it leaves by [`XdpSocket::flush`] or when a batch has
    /// gathered. When every send chunk is in flight this waits for the kernel to finish some
    /// (backpressure, as a blocking `AF_PACKET` send does), up to a second; then `WouldBlock`.
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        if frame.len() > self.chunk {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a {}-byte frame does not fit a {}-byte chunk",
                    frame.len(),
                    self.chunk
                ),
            ));
        }
        let mut waited: Option<std::time::Instant> = None;
        let addr = loop {
            if self.tx_free.borrow().is_empty() {
                self.reclaim();
            }
            if self.tx.has_room()
                && let Some(a) = self.tx_free.borrow_mut().pop()
            {
                break a;
            }
            self.kick()?;
            self.reclaim();
            let t = *waited.get_or_insert_with(std::time::Instant::now);
            if t.elapsed() > std::time::Duration::from_secs(1) {
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    "the AF_XDP TX ring made no progress for a second",
                ));
            }
            std::thread::yield_now();
        };
        // SAFETY: `addr` is a send chunk of the UMEM, not in flight; the frame fits
        unsafe {
            std::ptr::copy_nonoverlapping(
                frame.as_ptr(),
                self.umem.ptr.add(addr as usize),
                frame.len(),
            )
        };
        self.tx.write(Desc {
            addr,
            len: frame.len() as u32,
            options: 0,
        });
        let pending = self.pending.get() + 1;
        self.pending.set(pending);
        if pending >= TX_BATCH {
            self.pending.set(0);
            self.kick()?;
        }
        Ok(())
    }

    /// Send every frame queued so far (the system call is repeated until the ring is empty, or
    /// up to a second).
    pub fn flush(&self) -> io::Result<()> {
        let start = std::time::Instant::now();
        self.pending.set(0);
        self.tx.publish(true);
        while self.tx.unconsumed() > 0 {
            self.kick()?;
            self.reclaim();
            if start.elapsed() > std::time::Duration::from_secs(1) {
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    "the AF_XDP TX ring made no progress for a second",
                ));
            }
        }
        self.reclaim();
        Ok(())
    }

    /// The next received frame, handed to `f` in place (its chunk goes back to the fill ring
    /// after); false when none waits. The RX ring's consumer index and the fill ring's producer
    /// index are published every [`RX_BATCH`] frames and whenever the RX ring is found empty.
    pub fn recv_with(&self, f: &mut dyn FnMut(&[u8])) -> bool {
        let Some(d) = self.rx.take() else {
            if self.taken.get() > 0 {
                self.taken.set(0);
                self.rx.publish(false);
                self.fill.publish(true);
            }
            return false;
        };
        let end = d.addr as usize + d.len as usize;
        if end <= self.umem.len {
            // SAFETY: a received frame inside the UMEM, owned by this side until its chunk is
            // given back below
            let frame = unsafe {
                std::slice::from_raw_parts(self.umem.ptr.add(d.addr as usize), d.len as usize)
            };
            f(frame);
        }
        // the fill ring has room: it is as large as the receive chunks, and this one is out
        self.fill.write(d.addr - d.addr % self.chunk as u64);
        let taken = self.taken.get() + 1;
        if taken >= RX_BATCH {
            self.taken.set(0);
            self.rx.publish(false);
            self.fill.publish(true);
        } else {
            self.taken.set(taken);
        }
        true
    }

    /// One received frame copied into `buf` (truncated to it); its length, `None` when none
    /// waits.
    pub fn recv(&self, buf: &mut [u8]) -> Option<usize> {
        let mut n = None;
        self.recv_with(&mut |f| {
            let k = f.len().min(buf.len());
            buf[..k].copy_from_slice(&f[..k]);
            n = Some(f.len());
        });
        n
    }

    /// Frames the kernel dropped at this socket (`XDP_STATISTICS`' `rx_dropped`, which in copy
    /// mode counts every frame that found the RX ring full or no chunk on the fill ring: the
    /// `rx_ring_full` counter counts the same frames a second time, measured on this kernel);
    /// 0 where the kernel does not say.
    pub fn drops(&self) -> u64 {
        let mut s = Statistics::default();
        let mut len = std::mem::size_of::<Statistics>() as libc::socklen_t;
        // SAFETY: an out-parameter of the given size
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                SOL_XDP,
                XDP_STATISTICS,
                (&mut s as *mut Statistics).cast(),
                &mut len,
            )
        };
        if rc < 0 { 0 } else { s.rx_dropped }
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}
