//! RDMA devices through rdma-core's libibverbs, loaded at run time.
//!
//! Why not the `sideway` crate (the maintained verbs wrapper): it builds `rdma-mummy-sys`, whose
//! build script compiles a stub rdma-core with CMake and generates bindings with bindgen
//! (libclang). A machine with only the Rust toolchain (CI, this one: no cmake) cannot build it,
//! and the workspace must build there. So the verbs calls are bound here with libloading, against
//! the struct layouts of rdma-core's `<infiniband/verbs.h>` (checked field by field against
//! rdma-core 44's header with a C program: the sizes and offsets are pinned by the tests below).
//!
//! What is here:
//! - [`probe`] and [`Verbs::devices`]: devices and ports (state, link layer, active MTU, rate,
//!   GIDs), and each device's [`Provider`]: a NIC's RDMA engine, or the kernel's Soft-RoCE (rxe)
//!   or Soft-iWARP (siw), told apart by vendor id and kernel driver. Only hardware providers
//!   count as devices for the `hardware` class; the Soft-RoCE rig (tools/rxe-rig) runs on rxe.
//! - [`QpPlan`]: the QP attributes and message sizes of the suite's software RoCEv2 transport
//!   (`systems/ina/src/roce.rs`: RC, path MTU 1024, one RDMA WRITE per message of
//!   `msg_len x payload` bytes, starting PSNs, hop limit 64), turned into verbs attributes. A
//!   user with a RoCE NIC runs the same QPs the software transport models.
//! - [`Connection`]: PD, MR, CQ and an RC (or UC) QP on a real device; its [`QpInfo`] is what the
//!   two sides exchange over the control channel; INIT/RTR/RTS; RDMA WRITE (with immediate), SEND,
//!   receives, completions.
//!
//! `ibv_post_send`, `ibv_post_recv` and `ibv_poll_cq` are inline functions in verbs.h that call
//! through the context's ops table; they are called the same way here (offsets pinned below).

use crate::{Probe, load};
use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};

/// The software transport's PSN space (24 bits), as in `systems/ina/src/roce.rs`.
pub const PSN_MASK: u32 = 0x00ff_ffff;

#[derive(Debug, thiserror::Error)]
pub enum VerbsError {
    #[error("no libibverbs (rdma-core) on this machine: RoCE runs need rdma-core and a RoCE NIC")]
    NoLibrary,
    #[error("libibverbs has no `{0}`: rdma-core is too old or not rdma-core")]
    Symbol(&'static str),
    #[error(
        "libibverbs found no RDMA device: this machine has no RoCE NIC (or no RDMA kernel support)"
    )]
    NoDevice,
    #[error("no RDMA device named `{0}` (devices: {1})")]
    UnknownDevice(String, String),
    #[error("{call} failed on {device}: {detail}")]
    Call {
        call: &'static str,
        device: String,
        detail: String,
    },
    #[error("bad QP attributes: {0}")]
    Plan(String),
    #[error("QP info is {0} bytes, expected {QP_INFO_LEN}")]
    QpInfoLength(usize),
}

// ---- layouts of <infiniband/verbs.h> (x86_64/aarch64 LP64) ----

/// `union ibv_gid` (8-byte aligned: it overlays two __be64).
#[repr(C, align(8))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Gid(pub [u8; 16]);

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct GlobalRoute {
    dgid: Gid,
    flow_label: u32,
    sgid_index: u8,
    hop_limit: u8,
    traffic_class: u8,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct AhAttr {
    grh: GlobalRoute,
    dlid: u16,
    sl: u8,
    src_path_bits: u8,
    static_rate: u8,
    is_global: u8,
    port_num: u8,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

#[repr(C)]
struct QpInitAttr {
    qp_context: *mut c_void,
    send_cq: *mut c_void,
    recv_cq: *mut c_void,
    srq: *mut c_void,
    cap: QpCap,
    qp_type: u32,
    sq_sig_all: c_int,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct QpAttr {
    qp_state: u32,
    cur_qp_state: u32,
    path_mtu: u32,
    path_mig_state: u32,
    qkey: u32,
    rq_psn: u32,
    sq_psn: u32,
    dest_qp_num: u32,
    qp_access_flags: c_int,
    cap: QpCap,
    ah_attr: AhAttr,
    alt_ah_attr: AhAttr,
    pkey_index: u16,
    alt_pkey_index: u16,
    en_sqd_async_notify: u8,
    sq_draining: u8,
    max_rd_atomic: u8,
    max_dest_rd_atomic: u8,
    min_rnr_timer: u8,
    port_num: u8,
    timeout: u8,
    retry_cnt: u8,
    rnr_retry: u8,
    alt_port_num: u8,
    alt_timeout: u8,
    rate_limit: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct Sge {
    addr: u64,
    length: u32,
    lkey: u32,
}

#[repr(C)]
struct SendWr {
    wr_id: u64,
    next: *mut SendWr,
    sg_list: *mut Sge,
    num_sge: c_int,
    opcode: u32,
    send_flags: u32,
    imm_data: u32,
    /// union wr: rdma = {remote_addr: u64, rkey: u32}
    wr: [u64; 4],
    qp_type: u32,
    _pad: u32,
    /// union of bind_mw / tso
    tail: [u64; 6],
}

#[repr(C)]
struct RecvWr {
    wr_id: u64,
    next: *mut RecvWr,
    sg_list: *mut Sge,
    num_sge: c_int,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct Wc {
    wr_id: u64,
    status: u32,
    opcode: u32,
    vendor_err: u32,
    byte_len: u32,
    imm_data: u32,
    qp_num: u32,
    src_qp: u32,
    wc_flags: u32,
    pkey_index: u16,
    slid: u16,
    sl: u8,
    dlid_path_bits: u8,
}

#[repr(C)]
struct Mr {
    context: *mut c_void,
    pd: *mut c_void,
    addr: *mut c_void,
    length: usize,
    handle: u32,
    lkey: u32,
    rkey: u32,
}

/// `struct ibv_device_attr`: 232 bytes; the fields read are at fixed offsets.
const DEVICE_ATTR_LEN: usize = 232;
const DEVICE_ATTR_VENDOR_ID: usize = 96;
const DEVICE_ATTR_VENDOR_PART_ID: usize = 100;
const DEVICE_ATTR_MAX_QP_WR: usize = 112;
const DEVICE_ATTR_PHYS_PORT_CNT: usize = 227;
/// `struct ibv_port_attr`: 52 bytes (the exported ibv_query_port writes its compat prefix).
const PORT_ATTR_LEN: usize = 52;
/// `ibv_context.ops` is at 8; in `struct ibv_context_ops` poll_cq is at 88, post_send at 200,
/// post_recv at 208.
const CTX_POLL_CQ: usize = 8 + 88;
const CTX_POST_SEND: usize = 8 + 200;
const CTX_POST_RECV: usize = 8 + 208;
/// `ibv_qp.qp_num`
const QP_NUM_OFFSET: usize = 52;

// enum values of verbs.h
const QPT_RC: u32 = 2;
const QPT_UC: u32 = 3;
const QPS_INIT: u32 = 1;
const QPS_RTR: u32 = 2;
const QPS_RTS: u32 = 3;
const ACCESS_LOCAL_WRITE: c_int = 1;
const ACCESS_REMOTE_WRITE: c_int = 2;
const SEND_SIGNALED: u32 = 2;
const WR_RDMA_WRITE: u32 = 0;
const WR_RDMA_WRITE_WITH_IMM: u32 = 1;
const WR_SEND: u32 = 2;
const WC_WITH_IMM: u32 = 2;
const M_STATE: c_int = 1;
const M_ACCESS_FLAGS: c_int = 8;
const M_PKEY_INDEX: c_int = 16;
const M_PORT: c_int = 32;
const M_AV: c_int = 128;
const M_PATH_MTU: c_int = 256;
const M_TIMEOUT: c_int = 512;
const M_RETRY_CNT: c_int = 1024;
const M_RNR_RETRY: c_int = 2048;
const M_RQ_PSN: c_int = 4096;
const M_MAX_QP_RD_ATOMIC: c_int = 8192;
const M_MIN_RNR_TIMER: c_int = 32768;
const M_SQ_PSN: c_int = 65536;
const M_MAX_DEST_RD_ATOMIC: c_int = 131072;
const M_DEST_QPN: c_int = 1048576;

// ---- the plan: the software transport's attributes as verbs attributes ----

/// Transport of the QP: RC (NetReduce, the ring baselines) or UC (SwitchML-RDMA).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Rc,
    Uc,
}

/// `enum ibv_mtu` of a path MTU in bytes.
pub fn mtu_enum(bytes: u32) -> Result<u32, VerbsError> {
    match bytes {
        256 => Ok(1),
        512 => Ok(2),
        1024 => Ok(3),
        2048 => Ok(4),
        4096 => Ok(5),
        b => Err(VerbsError::Plan(format!(
            "path MTU {b} is not an InfiniBand MTU (256, 512, 1024, 2048 or 4096)"
        ))),
    }
}

/// Bytes of an `enum ibv_mtu` value (0 when unknown).
pub fn mtu_bytes(e: u32) -> u32 {
    match e {
        1..=5 => 128 << e,
        _ => 0,
    }
}

/// The local ACK timeout exponent: the smallest t with 4.096 us x 2^t >= `rto_ns` (IB spec
/// 9.7.6.1.3), at least 1 (0 would mean infinite) and at most 31.
pub fn ack_timeout(rto_ns: u64) -> u8 {
    let mut t = 1u8;
    while t < 31 && 4096u64 << t < rto_ns {
        t += 1;
    }
    t
}

/// One RDMA WRITE of the plan: a message of the software transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteOp {
    /// Offset in the local MR and in the remote buffer (the RETH's VA relative to the base).
    pub offset: u64,
    /// Bytes (the RETH's DMA length).
    pub len: u32,
    /// Packets on the wire at the path MTU.
    pub packets: u32,
}

/// The QPs of a verbs run, from the parameters the software RoCEv2 transport uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QpPlan {
    pub transport: Transport,
    /// Path MTU in bytes (`AllReduceConfig::mtu`: the IB payload per packet).
    pub path_mtu: u32,
    /// Packets per message (`RcSender::msg_len`; NetReduce's MsgLen, 170 by default).
    pub msg_len: u32,
    /// Messages in flight (`RcSender::window_msgs`; NetReduce's N, 2 by default).
    pub window: u32,
    /// Messages of the whole transfer.
    pub messages: u32,
    /// Starting PSN of the sending QP (`RcSender::psn0`).
    pub sq_psn: u32,
    /// Starting PSN the responder expects (`RcResponder::psn0`).
    pub rq_psn: u32,
    /// Retransmission timeout (`RcSender::rto_ns`).
    pub rto_ns: u64,
    /// IPv6 hop limit / IPv4 TTL (roce.rs sends TTL 64).
    pub hop_limit: u8,
}

impl QpPlan {
    /// A plan with the transport's defaults: RC, the given sizes, hop limit 64.
    pub fn rc(path_mtu: u32, msg_len: u32, window: u32, messages: u32, rto_ns: u64) -> QpPlan {
        QpPlan {
            transport: Transport::Rc,
            path_mtu,
            msg_len,
            window,
            messages,
            sq_psn: 0,
            rq_psn: 0,
            rto_ns,
            hop_limit: 64,
        }
    }

    pub fn validate(&self) -> Result<(), VerbsError> {
        mtu_enum(self.path_mtu)?;
        if self.msg_len == 0 || self.window == 0 {
            return Err(VerbsError::Plan(format!(
                "messages need at least one packet and a window of at least one (got {} and {})",
                self.msg_len, self.window
            )));
        }
        let bytes = u64::from(self.msg_len) * u64::from(self.path_mtu);
        if bytes > 1 << 31 {
            return Err(VerbsError::Plan(format!(
                "a message of {bytes} bytes exceeds the 2 GiB an RDMA WRITE can carry"
            )));
        }
        if self.sq_psn > PSN_MASK || self.rq_psn > PSN_MASK {
            return Err(VerbsError::Plan("PSNs are 24-bit".into()));
        }
        Ok(())
    }

    /// Bytes of one message (one RDMA WRITE).
    pub fn message_bytes(&self) -> u32 {
        self.msg_len * self.path_mtu
    }

    /// Bytes of the memory region: every message of the transfer.
    pub fn region_bytes(&self) -> usize {
        self.message_bytes() as usize * self.messages as usize
    }

    /// The WRITEs, in order: message m at offset m x message bytes.
    pub fn writes(&self) -> Vec<WriteOp> {
        (0..self.messages)
            .map(|m| WriteOp {
                offset: u64::from(m) * u64::from(self.message_bytes()),
                len: self.message_bytes(),
                packets: self.message_bytes().div_ceil(self.path_mtu),
            })
            .collect()
    }

    /// Send queue depth: the window of messages (one WR each), plus one for a SEND.
    pub fn cap(&self) -> QpCap {
        QpCap {
            max_send_wr: self.window + 1,
            max_recv_wr: self.window + 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        }
    }

    fn init_attr(&self, port: u8) -> (QpAttr, c_int) {
        let a = QpAttr {
            qp_state: QPS_INIT,
            pkey_index: 0,
            port_num: port,
            qp_access_flags: ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE,
            ..QpAttr::default()
        };
        (a, M_STATE | M_PKEY_INDEX | M_PORT | M_ACCESS_FLAGS)
    }

    fn rtr_attr(&self, port: u8, sgid_index: u8, remote: &QpInfo) -> (QpAttr, c_int) {
        let mut a = QpAttr {
            qp_state: QPS_RTR,
            // validated: a known MTU
            path_mtu: mtu_enum(self.path_mtu).unwrap_or(3),
            dest_qp_num: remote.qpn,
            rq_psn: remote.psn & PSN_MASK,
            ..QpAttr::default()
        };
        a.ah_attr = AhAttr {
            grh: GlobalRoute {
                dgid: remote.gid,
                flow_label: 0,
                sgid_index,
                hop_limit: self.hop_limit,
                traffic_class: 0,
            },
            dlid: 0,
            sl: 0,
            src_path_bits: 0,
            static_rate: 0,
            // RoCE: always routed by GID
            is_global: 1,
            port_num: port,
        };
        let mut mask = M_STATE | M_AV | M_PATH_MTU | M_DEST_QPN | M_RQ_PSN;
        if self.transport == Transport::Rc {
            a.max_dest_rd_atomic = 1;
            a.min_rnr_timer = 12;
            mask |= M_MAX_DEST_RD_ATOMIC | M_MIN_RNR_TIMER;
        }
        (a, mask)
    }

    fn rts_attr(&self) -> (QpAttr, c_int) {
        let mut a = QpAttr {
            qp_state: QPS_RTS,
            sq_psn: self.sq_psn & PSN_MASK,
            ..QpAttr::default()
        };
        let mut mask = M_STATE | M_SQ_PSN;
        if self.transport == Transport::Rc {
            a.timeout = ack_timeout(self.rto_ns);
            a.retry_cnt = 7;
            a.rnr_retry = 7;
            a.max_rd_atomic = 1;
            mask |= M_TIMEOUT | M_RETRY_CNT | M_RNR_RETRY | M_MAX_QP_RD_ATOMIC;
        }
        (a, mask)
    }
}

/// What one side tells the other over the control channel to connect its QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInfo {
    pub qpn: u32,
    /// The PSN this side starts sending with (the other side's rq_psn).
    pub psn: u32,
    pub gid: Gid,
    /// Where the other side WRITEs: the base address and rkey of this side's MR.
    pub addr: u64,
    pub rkey: u32,
}

pub const QP_INFO_LEN: usize = 4 + 4 + 16 + 8 + 4;

impl QpInfo {
    /// Big-endian, fixed length.
    pub fn to_bytes(&self) -> [u8; QP_INFO_LEN] {
        let mut b = [0u8; QP_INFO_LEN];
        b[0..4].copy_from_slice(&self.qpn.to_be_bytes());
        b[4..8].copy_from_slice(&self.psn.to_be_bytes());
        b[8..24].copy_from_slice(&self.gid.0);
        b[24..32].copy_from_slice(&self.addr.to_be_bytes());
        b[32..36].copy_from_slice(&self.rkey.to_be_bytes());
        b
    }

    pub fn from_bytes(b: &[u8]) -> Result<QpInfo, VerbsError> {
        if b.len() != QP_INFO_LEN {
            return Err(VerbsError::QpInfoLength(b.len()));
        }
        let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut gid = Gid::default();
        gid.0.copy_from_slice(&b[8..24]);
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[24..32]);
        Ok(QpInfo {
            qpn: u32_at(0),
            psn: u32_at(4),
            gid,
            addr: u64::from_be_bytes(a),
            rkey: u32_at(32),
        })
    }
}

// ---- the library ----

type GetDeviceList = unsafe extern "C" fn(*mut c_int) -> *mut *mut c_void;
type FreeDeviceList = unsafe extern "C" fn(*mut *mut c_void);
type GetDeviceName = unsafe extern "C" fn(*mut c_void) -> *const c_char;
type OpenDevice = unsafe extern "C" fn(*mut c_void) -> *mut c_void;
type CloseDevice = unsafe extern "C" fn(*mut c_void) -> c_int;
type QueryDevice = unsafe extern "C" fn(*mut c_void, *mut u8) -> c_int;
type QueryPort = unsafe extern "C" fn(*mut c_void, u8, *mut u8) -> c_int;
type QueryGid = unsafe extern "C" fn(*mut c_void, u8, c_int, *mut Gid) -> c_int;
type AllocPd = unsafe extern "C" fn(*mut c_void) -> *mut c_void;
type DeallocPd = unsafe extern "C" fn(*mut c_void) -> c_int;
type RegMr = unsafe extern "C" fn(*mut c_void, *mut c_void, usize, c_int) -> *mut Mr;
type DeregMr = unsafe extern "C" fn(*mut Mr) -> c_int;
type CreateCq =
    unsafe extern "C" fn(*mut c_void, c_int, *mut c_void, *mut c_void, c_int) -> *mut c_void;
type DestroyCq = unsafe extern "C" fn(*mut c_void) -> c_int;
type CreateQp = unsafe extern "C" fn(*mut c_void, *mut QpInitAttr) -> *mut c_void;
type ModifyQp = unsafe extern "C" fn(*mut c_void, *mut QpAttr, c_int) -> c_int;
type DestroyQp = unsafe extern "C" fn(*mut c_void) -> c_int;
type PostSend = unsafe extern "C" fn(*mut c_void, *mut SendWr, *mut *mut SendWr) -> c_int;
type PostRecv = unsafe extern "C" fn(*mut c_void, *mut RecvWr, *mut *mut RecvWr) -> c_int;
type PollCq = unsafe extern "C" fn(*mut c_void, c_int, *mut Wc) -> c_int;

/// libibverbs, loaded, with the entry points the suite uses.
pub struct Verbs {
    _lib: libloading::Library,
    pub library: String,
    get_device_list: GetDeviceList,
    free_device_list: FreeDeviceList,
    get_device_name: GetDeviceName,
    open_device: OpenDevice,
    close_device: CloseDevice,
    query_device: QueryDevice,
    query_port: QueryPort,
    query_gid: QueryGid,
    alloc_pd: AllocPd,
    dealloc_pd: DeallocPd,
    reg_mr: RegMr,
    dereg_mr: DeregMr,
    create_cq: CreateCq,
    destroy_cq: DestroyCq,
    create_qp: CreateQp,
    modify_qp: ModifyQp,
    destroy_qp: DestroyQp,
}

/// A port of a device.
#[derive(Debug, Clone, PartialEq)]
pub struct Port {
    pub num: u8,
    /// `ibv_port_state`: 4 is ACTIVE
    pub state: u8,
    /// "Ethernet" (RoCE) or "InfiniBand"
    pub link_layer: &'static str,
    pub active_mtu: u32,
    pub max_mtu: u32,
    /// Lanes x per-lane rate, Gbit/s (nominal)
    pub rate_gbps: f64,
    /// Non-zero GIDs with their index
    pub gids: Vec<(u32, Gid)>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Device {
    pub name: String,
    pub fw_ver: String,
    pub max_qp_wr: i32,
    pub ports: Vec<Port>,
    /// `ibv_device_attr.vendor_id` (an IEEE OUI: 0x02c9 Mellanox/NVIDIA; 0xffffff is rxe's)
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    /// The kernel driver of the device's parent (`/sys/class/infiniband/<name>/device/driver`):
    /// a PCI NIC's driver (mlx5_core, bnxt_en, ...); software devices have no parent device.
    pub driver: Option<String>,
    pub provider: Provider,
}

/// What implements an RDMA device: a NIC's own RDMA engine, or the kernel's software providers
/// over an ordinary Ethernet NIC (rows on those are `emulated`, never `hardware`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Provider {
    /// Soft-RoCE: the kernel's `rdma_rxe` (vendor id 0xffffff, `RXE_VENDOR_ID`).
    SoftRoce,
    /// Soft-iWARP: the kernel's `siw` (vendor id 0x626d74, `SIW_VENDOR_ID`).
    SoftIwarp,
    /// A NIC's RDMA engine, with the kernel driver of its PCI device when sysfs names one.
    Hardware {
        driver: Option<String>,
        vendor_id: u32,
    },
}

/// `RXE_VENDOR_ID` of the kernel's drivers/infiniband/sw/rxe/rxe_param.h.
pub const RXE_VENDOR_ID: u32 = 0x00ff_ffff;
/// `SIW_VENDOR_ID` of the kernel's drivers/infiniband/sw/siw/siw.h ("bmt").
pub const SIW_VENDOR_ID: u32 = 0x0062_6d74;

impl Provider {
    /// Classify a device by its vendor id and kernel driver (the name only as a last hint: `rdma
    /// link add` lets anyone name an rxe device anything).
    pub fn classify(name: &str, vendor_id: u32, driver: Option<&str>) -> Provider {
        match driver {
            Some("rdma_rxe" | "rxe") => return Provider::SoftRoce,
            Some("siw") => return Provider::SoftIwarp,
            _ => {}
        }
        match vendor_id {
            RXE_VENDOR_ID => Provider::SoftRoce,
            SIW_VENDOR_ID => Provider::SoftIwarp,
            _ if driver.is_none() && name.starts_with("rxe") => Provider::SoftRoce,
            _ if driver.is_none() && name.starts_with("siw") => Provider::SoftIwarp,
            _ => Provider::Hardware {
                driver: driver.map(str::to_string),
                vendor_id,
            },
        }
    }

    pub fn is_hardware(&self) -> bool {
        matches!(self, Provider::Hardware { .. })
    }
}

impl std::fmt::Display for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Provider::SoftRoce => write!(f, "Soft-RoCE (rdma_rxe), software"),
            Provider::SoftIwarp => write!(f, "Soft-iWARP (siw), software"),
            Provider::Hardware { driver, vendor_id } => {
                write!(f, "hardware")?;
                if let Some(d) = driver {
                    write!(f, ", driver {d}")?;
                }
                write!(f, ", vendor {vendor_id:#06x}")?;
                let vendor = match vendor_id {
                    0x02c9 => Some("Mellanox/NVIDIA"),
                    0x14e4 => Some("Broadcom"),
                    0x8086 => Some("Intel"),
                    0x1077 => Some("Marvell/QLogic"),
                    0x1d0f => Some("Amazon"),
                    0x1425 => Some("Chelsio"),
                    _ => None,
                };
                if let Some(v) = vendor {
                    write!(f, " ({v})")?;
                }
                Ok(())
            }
        }
    }
}

/// Nominal rate of a port: `active_width` lanes x `active_speed` per lane (IB spec encodings).
pub fn port_rate_gbps(active_width: u8, active_speed: u8) -> f64 {
    let lanes = match active_width {
        1 => 1.0,
        2 => 4.0,
        4 => 8.0,
        8 => 12.0,
        16 => 2.0,
        _ => 0.0,
    };
    let per_lane = match active_speed {
        1 => 2.5,
        2 => 5.0,
        4 | 8 => 10.0,
        16 => 14.0,
        32 => 25.0,
        64 => 50.0,
        128 => 100.0,
        _ => 0.0,
    };
    lanes * per_lane
}

macro_rules! sym {
    ($lib:expr, $name:literal) => {
        // SAFETY: the type is the symbol's C signature in rdma-core's verbs.h
        *unsafe { $lib.get(concat!($name, "\0").as_bytes()) }
            .map_err(|_| VerbsError::Symbol($name))?
    };
}

impl Verbs {
    /// Load libibverbs and resolve every entry point, or say why not.
    pub fn load() -> Result<Verbs, VerbsError> {
        let (lib, library) =
            load(&["libibverbs.so.1", "libibverbs.so"]).ok_or(VerbsError::NoLibrary)?;
        Ok(Verbs {
            get_device_list: sym!(lib, "ibv_get_device_list"),
            free_device_list: sym!(lib, "ibv_free_device_list"),
            get_device_name: sym!(lib, "ibv_get_device_name"),
            open_device: sym!(lib, "ibv_open_device"),
            close_device: sym!(lib, "ibv_close_device"),
            query_device: sym!(lib, "ibv_query_device"),
            query_port: sym!(lib, "ibv_query_port"),
            query_gid: sym!(lib, "ibv_query_gid"),
            alloc_pd: sym!(lib, "ibv_alloc_pd"),
            dealloc_pd: sym!(lib, "ibv_dealloc_pd"),
            reg_mr: sym!(lib, "ibv_reg_mr"),
            dereg_mr: sym!(lib, "ibv_dereg_mr"),
            create_cq: sym!(lib, "ibv_create_cq"),
            destroy_cq: sym!(lib, "ibv_destroy_cq"),
            create_qp: sym!(lib, "ibv_create_qp"),
            modify_qp: sym!(lib, "ibv_modify_qp"),
            destroy_qp: sym!(lib, "ibv_destroy_qp"),
            _lib: lib,
            library,
        })
    }

    /// Run `f` with the list of devices alive, then free it.
    fn with_devices<T>(&self, f: impl FnOnce(&[(String, *mut c_void)]) -> T) -> T {
        let mut n: c_int = 0;
        // SAFETY: as in device_list
        let list = unsafe { (self.get_device_list)(&mut n) };
        let _guard = ListGuard(list, self.free_device_list);
        if list.is_null() {
            return f(&[]);
        }
        let names = self.device_list_from(list, n);
        f(&names)
    }

    fn device_list_from(&self, list: *mut *mut c_void, n: c_int) -> Vec<(String, *mut c_void)> {
        (0..n.max(0) as usize)
            .filter_map(|i| {
                // SAFETY: i < n entries of the array
                let d = unsafe { *list.add(i) };
                if d.is_null() {
                    return None;
                }
                // SAFETY: the name is a NUL-terminated string owned by the library
                let p = unsafe { (self.get_device_name)(d) };
                let name = if p.is_null() {
                    String::new()
                } else {
                    // SAFETY: non-null, NUL-terminated
                    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
                };
                Some((name, d))
            })
            .collect()
    }

    /// Every device with its ports and GIDs.
    pub fn devices(&self) -> Result<Vec<Device>, VerbsError> {
        self.with_devices(|list| {
            list.iter()
                .map(|(name, d)| {
                    let ctx = Context::open(self, name, *d)?;
                    ctx.describe()
                })
                .collect()
        })
    }

    /// Open a device by name (None: the first), with PD, MR, CQ and QP for `plan`.
    pub fn connect(
        &self,
        device: Option<&str>,
        port: u8,
        gid_index: u8,
        plan: &QpPlan,
    ) -> Result<Connection<'_>, VerbsError> {
        plan.validate()?;
        let ctx = self.with_devices(|list| {
            let pick = match device {
                Some(n) => list.iter().find(|(name, _)| name == n).ok_or_else(|| {
                    VerbsError::UnknownDevice(
                        n.to_string(),
                        list.iter()
                            .map(|(n, _)| n.as_str())
                            .collect::<Vec<_>>()
                            .join(", "),
                    )
                })?,
                None => list.first().ok_or(VerbsError::NoDevice)?,
            };
            Context::open(self, &pick.0, pick.1)
        })?;
        Connection::new(ctx, port, gid_index, plan.clone())
    }
}

struct ListGuard(*mut *mut c_void, FreeDeviceList);

impl Drop for ListGuard {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: the list came from ibv_get_device_list and is freed once
            unsafe { (self.1)(self.0) }
        }
    }
}

/// An open device context.
struct Context<'a> {
    v: &'a Verbs,
    name: String,
    ctx: *mut c_void,
}

impl<'a> Context<'a> {
    fn open(v: &'a Verbs, name: &str, dev: *mut c_void) -> Result<Context<'a>, VerbsError> {
        // SAFETY: dev is a live entry of the device list
        let ctx = unsafe { (v.open_device)(dev) };
        if ctx.is_null() {
            return Err(call_err("ibv_open_device", name));
        }
        Ok(Context {
            v,
            name: name.to_string(),
            ctx,
        })
    }

    fn describe(&self) -> Result<Device, VerbsError> {
        let mut attr = [0u8; DEVICE_ATTR_LEN];
        // SAFETY: attr has the size of struct ibv_device_attr
        if unsafe { (self.v.query_device)(self.ctx, attr.as_mut_ptr()) } != 0 {
            return Err(call_err("ibv_query_device", &self.name));
        }
        let fw_end = attr[..64].iter().position(|b| *b == 0).unwrap_or(64);
        let fw_ver = String::from_utf8_lossy(&attr[..fw_end]).into_owned();
        let max_qp_wr = i32::from_ne_bytes([
            attr[DEVICE_ATTR_MAX_QP_WR],
            attr[DEVICE_ATTR_MAX_QP_WR + 1],
            attr[DEVICE_ATTR_MAX_QP_WR + 2],
            attr[DEVICE_ATTR_MAX_QP_WR + 3],
        ]);
        let ports = (1..=attr[DEVICE_ATTR_PHYS_PORT_CNT])
            .map(|p| self.port(p))
            .collect::<Result<Vec<_>, _>>()?;
        let u32_at =
            |i: usize| u32::from_ne_bytes([attr[i], attr[i + 1], attr[i + 2], attr[i + 3]]);
        let vendor_id = u32_at(DEVICE_ATTR_VENDOR_ID);
        let driver =
            std::fs::read_link(format!("/sys/class/infiniband/{}/device/driver", self.name))
                .ok()
                .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
        Ok(Device {
            provider: Provider::classify(&self.name, vendor_id, driver.as_deref()),
            name: self.name.clone(),
            fw_ver,
            max_qp_wr,
            ports,
            vendor_id,
            vendor_part_id: u32_at(DEVICE_ATTR_VENDOR_PART_ID),
            driver,
        })
    }

    fn port(&self, num: u8) -> Result<Port, VerbsError> {
        // the compat struct the exported symbol fills is a prefix of ibv_port_attr
        let mut a = [0u8; PORT_ATTR_LEN + 12];
        // SAFETY: a is larger than struct ibv_port_attr
        if unsafe { (self.v.query_port)(self.ctx, num, a.as_mut_ptr()) } != 0 {
            return Err(call_err("ibv_query_port", &self.name));
        }
        let u32_at = |i: usize| u32::from_ne_bytes([a[i], a[i + 1], a[i + 2], a[i + 3]]);
        let gid_tbl_len = u32_at(12).min(256);
        let mut gids = Vec::new();
        for i in 0..gid_tbl_len {
            let mut g = Gid::default();
            // SAFETY: g is a 16-byte union ibv_gid
            if unsafe { (self.v.query_gid)(self.ctx, num, i as c_int, &mut g) } == 0
                && g != Gid::default()
            {
                gids.push((i, g));
            }
        }
        Ok(Port {
            num,
            state: a[0],
            link_layer: match a[46] {
                2 => "Ethernet",
                _ => "InfiniBand",
            },
            max_mtu: mtu_bytes(u32_at(4)),
            active_mtu: mtu_bytes(u32_at(8)),
            rate_gbps: port_rate_gbps(a[43], a[44]),
            gids,
        })
    }
}

impl Drop for Context<'_> {
    fn drop(&mut self) {
        // SAFETY: opened by ibv_open_device, closed once, after everything created on it
        unsafe { (self.v.close_device)(self.ctx) };
    }
}

fn call_err(call: &'static str, device: &str) -> VerbsError {
    VerbsError::Call {
        call,
        device: device.to_string(),
        detail: std::io::Error::last_os_error().to_string(),
    }
}

/// A completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    pub wr_id: u64,
    /// `ibv_wc_status` (0: success)
    pub status: u32,
    /// `ibv_wc_opcode`
    pub opcode: u32,
    pub byte_len: u32,
    /// The immediate (host order) of a WRITE/SEND with immediate.
    pub imm: Option<u32>,
}

/// PD, MR (over the plan's region), CQ and QP on an open device. Dropped in reverse order.
pub struct Connection<'a> {
    ctx: Context<'a>,
    plan: QpPlan,
    port: u8,
    gid_index: u8,
    pd: *mut c_void,
    mr: *mut Mr,
    cq: *mut c_void,
    qp: *mut c_void,
    /// The registered memory (the MR points into it: it never moves).
    pub buf: Box<[u8]>,
    gid: Gid,
}

impl<'a> Connection<'a> {
    fn new(
        ctx: Context<'a>,
        port: u8,
        gid_index: u8,
        plan: QpPlan,
    ) -> Result<Connection<'a>, VerbsError> {
        let v = ctx.v;
        let mut c = Connection {
            buf: vec![0u8; plan.region_bytes().max(1)].into_boxed_slice(),
            ctx,
            plan,
            port,
            gid_index,
            pd: std::ptr::null_mut(),
            mr: std::ptr::null_mut(),
            cq: std::ptr::null_mut(),
            qp: std::ptr::null_mut(),
            gid: Gid::default(),
        };
        let name = c.ctx.name.clone();
        // SAFETY: each call gets live objects created above it; failures return NULL and the
        // Drop impl releases whatever was created
        unsafe {
            // SAFETY: g is a 16-byte union ibv_gid
            if (v.query_gid)(c.ctx.ctx, port, c_int::from(gid_index), &mut c.gid) != 0 {
                return Err(call_err("ibv_query_gid", &name));
            }
            c.pd = (v.alloc_pd)(c.ctx.ctx);
            if c.pd.is_null() {
                return Err(call_err("ibv_alloc_pd", &name));
            }
            c.mr = (v.reg_mr)(
                c.pd,
                c.buf.as_mut_ptr().cast(),
                c.buf.len(),
                ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE,
            );
            if c.mr.is_null() {
                return Err(call_err("ibv_reg_mr", &name));
            }
            let cap = c.plan.cap();
            let cqe = (cap.max_send_wr + cap.max_recv_wr) as c_int;
            c.cq = (v.create_cq)(
                c.ctx.ctx,
                cqe,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            );
            if c.cq.is_null() {
                return Err(call_err("ibv_create_cq", &name));
            }
            let mut init = QpInitAttr {
                qp_context: std::ptr::null_mut(),
                send_cq: c.cq,
                recv_cq: c.cq,
                srq: std::ptr::null_mut(),
                cap,
                qp_type: match c.plan.transport {
                    Transport::Rc => QPT_RC,
                    Transport::Uc => QPT_UC,
                },
                sq_sig_all: 0,
            };
            c.qp = (v.create_qp)(c.pd, &mut init);
            if c.qp.is_null() {
                return Err(call_err("ibv_create_qp", &name));
            }
            let (mut a, mask) = c.plan.init_attr(port);
            c.modify(&mut a, mask, "ibv_modify_qp(INIT)")?;
        }
        Ok(c)
    }

    fn modify(&self, a: &mut QpAttr, mask: c_int, what: &'static str) -> Result<(), VerbsError> {
        // SAFETY: qp is live and a is a struct ibv_qp_attr
        let rc = unsafe { (self.ctx.v.modify_qp)(self.qp, a, mask) };
        if rc != 0 {
            return Err(self.rc_err(what, rc));
        }
        Ok(())
    }

    fn rc_err(&self, call: &'static str, rc: c_int) -> VerbsError {
        VerbsError::Call {
            call,
            device: self.ctx.name.clone(),
            detail: std::io::Error::from_raw_os_error(rc).to_string(),
        }
    }

    /// What the other side needs: send this over the control channel.
    pub fn info(&self) -> QpInfo {
        // SAFETY: qp and mr are live; qp_num and rkey are plain fields at their offsets
        let (qpn, rkey) = unsafe {
            (
                *(self.qp.cast::<u8>().add(QP_NUM_OFFSET).cast::<u32>()),
                (*self.mr).rkey,
            )
        };
        QpInfo {
            qpn,
            psn: self.plan.sq_psn,
            gid: self.gid,
            addr: self.buf.as_ptr() as u64,
            rkey,
        }
    }

    /// INIT -> RTR -> RTS towards `remote`.
    pub fn connect_to(&mut self, remote: &QpInfo) -> Result<(), VerbsError> {
        let (mut a, mask) = self.plan.rtr_attr(self.port, self.gid_index, remote);
        self.modify(&mut a, mask, "ibv_modify_qp(RTR)")?;
        let (mut a, mask) = self.plan.rts_attr();
        self.modify(&mut a, mask, "ibv_modify_qp(RTS)")
    }

    fn op<T>(&self, offset: usize) -> T
    where
        T: Copy,
    {
        // SAFETY: the context struct holds the ops table at the pinned offsets; T is the
        // function pointer type of that slot
        unsafe { *(self.ctx.ctx.cast::<u8>().add(offset).cast::<T>()) }
    }

    fn sge(&self, offset: u64, len: u32) -> Result<Sge, VerbsError> {
        if offset + u64::from(len) > self.buf.len() as u64 {
            return Err(VerbsError::Plan(format!(
                "{len} bytes at {offset} exceed the {}-byte region",
                self.buf.len()
            )));
        }
        Ok(Sge {
            addr: self.buf.as_ptr() as u64 + offset,
            length: len,
            // SAFETY: mr is live
            lkey: unsafe { (*self.mr).lkey },
        })
    }

    /// Post one signalled RDMA WRITE of `w` (with an immediate when given) to `remote`'s region.
    pub fn post_write(
        &self,
        wr_id: u64,
        w: &WriteOp,
        remote: &QpInfo,
        imm: Option<u32>,
    ) -> Result<(), VerbsError> {
        self.post_write_to(
            wr_id,
            w,
            remote.addr.wrapping_add(w.offset),
            remote.rkey,
            imm,
        )
    }

    /// Post `w`'s bytes of the local MR as an RDMA WRITE (with immediate when given) to the
    /// peer's virtual address `va` with R_Key `rkey` (the RETH's), whatever the peer's buffer
    /// (SwitchML-RDMA's worker names its own result address and a pool index).
    pub fn post_write_to(
        &self,
        wr_id: u64,
        w: &WriteOp,
        va: u64,
        rkey: u32,
        imm: Option<u32>,
    ) -> Result<(), VerbsError> {
        let mut sge = self.sge(w.offset, w.len)?;
        let mut wr = SendWr {
            wr_id,
            next: std::ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
            opcode: if imm.is_some() {
                WR_RDMA_WRITE_WITH_IMM
            } else {
                WR_RDMA_WRITE
            },
            send_flags: SEND_SIGNALED,
            imm_data: imm.unwrap_or(0).to_be(),
            wr: [va, u64::from(rkey), 0, 0],
            qp_type: 0,
            _pad: 0,
            tail: [0; 6],
        };
        self.post(&mut wr)
    }

    /// Post one signalled SEND of `len` bytes at `offset`.
    pub fn post_send(&self, wr_id: u64, offset: u64, len: u32) -> Result<(), VerbsError> {
        let mut sge = self.sge(offset, len)?;
        let mut wr = SendWr {
            wr_id,
            next: std::ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
            opcode: WR_SEND,
            send_flags: SEND_SIGNALED,
            imm_data: 0,
            wr: [0; 4],
            qp_type: 0,
            _pad: 0,
            tail: [0; 6],
        };
        self.post(&mut wr)
    }

    fn post(&self, wr: &mut SendWr) -> Result<(), VerbsError> {
        let f: PostSend = self.op(CTX_POST_SEND);
        let mut bad = std::ptr::null_mut();
        // SAFETY: qp is live; wr and its sge live across the call (the NIC copies the WR)
        let rc = unsafe { f(self.qp, wr, &mut bad) };
        if rc != 0 {
            return Err(self.rc_err("ibv_post_send", rc));
        }
        Ok(())
    }

    /// Post a receive for a SEND or a WRITE with immediate, into `len` bytes at `offset`.
    pub fn post_recv(&self, wr_id: u64, offset: u64, len: u32) -> Result<(), VerbsError> {
        let mut sge = self.sge(offset, len)?;
        let mut wr = RecvWr {
            wr_id,
            next: std::ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        let f: PostRecv = self.op(CTX_POST_RECV);
        let mut bad = std::ptr::null_mut();
        // SAFETY: as in post
        let rc = unsafe { f(self.qp, &mut wr, &mut bad) };
        if rc != 0 {
            return Err(self.rc_err("ibv_post_recv", rc));
        }
        Ok(())
    }

    /// Poll up to `max` completions (non-blocking).
    pub fn poll(&self, max: usize) -> Result<Vec<Completion>, VerbsError> {
        let mut wc = vec![Wc::default(); max.max(1)];
        let f: PollCq = self.op(CTX_POLL_CQ);
        // SAFETY: cq is live; wc has room for `max` entries
        let n = unsafe { f(self.cq, wc.len() as c_int, wc.as_mut_ptr()) };
        if n < 0 {
            return Err(VerbsError::Call {
                call: "ibv_poll_cq",
                device: self.ctx.name.clone(),
                detail: format!("returned {n}"),
            });
        }
        Ok(wc[..n as usize]
            .iter()
            .map(|w| Completion {
                wr_id: w.wr_id,
                status: w.status,
                opcode: w.opcode,
                byte_len: w.byte_len,
                imm: (w.wc_flags & WC_WITH_IMM != 0).then(|| u32::from_be(w.imm_data)),
            })
            .collect())
    }
}

impl Drop for Connection<'_> {
    fn drop(&mut self) {
        let v = self.ctx.v;
        // SAFETY: each object was created once on this context and is destroyed once, QP before
        // CQ and MR before PD
        unsafe {
            if !self.qp.is_null() {
                (v.destroy_qp)(self.qp);
            }
            if !self.cq.is_null() {
                (v.destroy_cq)(self.cq);
            }
            if !self.mr.is_null() {
                (v.dereg_mr)(self.mr);
            }
            if !self.pd.is_null() {
                (v.dealloc_pd)(self.pd);
            }
        }
    }
}

/// The doctor's probe: library, devices, and per device its ports (link layer, MTU, rate, GIDs).
pub fn probe() -> Probe {
    let v = match Verbs::load() {
        Ok(v) => v,
        Err(VerbsError::NoLibrary) => {
            return Probe {
                library: None,
                devices: 0,
                detail: "no libibverbs (rdma-core): hardware RoCE rows are not available".into(),
            };
        }
        Err(e) => {
            return Probe {
                library: Some("libibverbs".into()),
                devices: 0,
                detail: e.to_string(),
            };
        }
    };
    match v.devices() {
        Ok(d) => {
            let (devices, detail) = probe_sentence(&d);
            Probe {
                library: Some(v.library.clone()),
                devices,
                detail,
            }
        }
        Err(e) => Probe {
            library: Some(v.library.clone()),
            devices: 0,
            detail: e.to_string(),
        },
    }
}

/// The probe's count and sentence for a device list: every device with its provider and ports;
/// only hardware providers count (a Soft-RoCE or Soft-iWARP device runs `emulated` rows, so it
/// does not make the `hardware` class available).
pub fn probe_sentence(d: &[Device]) -> (u32, String) {
    if d.is_empty() {
        return (
            0,
            "libibverbs loaded, no RDMA device: hardware RoCE rows are not available".into(),
        );
    }
    let hardware = d.iter().filter(|x| x.provider.is_hardware()).count() as u32;
    let mut s = format!(
        "libibverbs loaded: {}",
        d.iter()
            .map(|dev| format!(
                "{} [{}] (fw {}): {}",
                dev.name,
                dev.provider,
                dev.fw_ver,
                dev.ports
                    .iter()
                    .map(|p| format!(
                        "port {} {} {}, MTU {}, {:.0} Gbit/s, {} GID(s)",
                        p.num,
                        p.link_layer,
                        if p.state == 4 { "active" } else { "down" },
                        p.active_mtu,
                        p.rate_gbps,
                        p.gids.len()
                    ))
                    .collect::<Vec<_>>()
                    .join("; ")
            ))
            .collect::<Vec<_>>()
            .join(" | ")
    );
    if hardware == 0 {
        s.push_str(
            "; no hardware RDMA device (software providers only): hardware RoCE rows are not available, rows on these are emulated",
        );
    }
    (hardware, s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// Sizes and offsets printed by a C program against rdma-core 44's verbs.h (x86_64).
    #[test]
    fn layouts_match_rdma_core() {
        assert_eq!(size_of::<Gid>(), 16);
        assert_eq!(size_of::<GlobalRoute>(), 24);
        assert_eq!(offset_of!(GlobalRoute, sgid_index), 20);
        assert_eq!(offset_of!(GlobalRoute, hop_limit), 21);
        assert_eq!(size_of::<AhAttr>(), 32);
        assert_eq!(offset_of!(AhAttr, dlid), 24);
        assert_eq!(offset_of!(AhAttr, sl), 26);
        assert_eq!(offset_of!(AhAttr, is_global), 29);
        assert_eq!(offset_of!(AhAttr, port_num), 30);
        assert_eq!(size_of::<QpCap>(), 20);
        assert_eq!(size_of::<QpInitAttr>(), 64);
        assert_eq!(offset_of!(QpInitAttr, cap), 32);
        assert_eq!(offset_of!(QpInitAttr, qp_type), 52);
        assert_eq!(offset_of!(QpInitAttr, sq_sig_all), 56);
        assert_eq!(size_of::<QpAttr>(), 144);
        assert_eq!(offset_of!(QpAttr, path_mtu), 8);
        assert_eq!(offset_of!(QpAttr, rq_psn), 20);
        assert_eq!(offset_of!(QpAttr, sq_psn), 24);
        assert_eq!(offset_of!(QpAttr, dest_qp_num), 28);
        assert_eq!(offset_of!(QpAttr, qp_access_flags), 32);
        assert_eq!(offset_of!(QpAttr, ah_attr), 56);
        assert_eq!(offset_of!(QpAttr, pkey_index), 120);
        assert_eq!(offset_of!(QpAttr, max_rd_atomic), 126);
        assert_eq!(offset_of!(QpAttr, max_dest_rd_atomic), 127);
        assert_eq!(offset_of!(QpAttr, min_rnr_timer), 128);
        assert_eq!(offset_of!(QpAttr, port_num), 129);
        assert_eq!(offset_of!(QpAttr, timeout), 130);
        assert_eq!(offset_of!(QpAttr, retry_cnt), 131);
        assert_eq!(offset_of!(QpAttr, rnr_retry), 132);
        assert_eq!(size_of::<SendWr>(), 128);
        assert_eq!(offset_of!(SendWr, sg_list), 16);
        assert_eq!(offset_of!(SendWr, num_sge), 24);
        assert_eq!(offset_of!(SendWr, opcode), 28);
        assert_eq!(offset_of!(SendWr, send_flags), 32);
        assert_eq!(offset_of!(SendWr, imm_data), 36);
        assert_eq!(offset_of!(SendWr, wr), 40);
        assert_eq!(size_of::<RecvWr>(), 32);
        assert_eq!(size_of::<Sge>(), 16);
        assert_eq!(size_of::<Wc>(), 48);
        assert_eq!(offset_of!(Wc, status), 8);
        assert_eq!(offset_of!(Wc, opcode), 12);
        assert_eq!(offset_of!(Wc, byte_len), 20);
        assert_eq!(offset_of!(Wc, imm_data), 24);
        assert_eq!(offset_of!(Wc, qp_num), 28);
        assert_eq!(offset_of!(Wc, wc_flags), 36);
        assert_eq!(size_of::<Mr>(), 48);
        assert_eq!(offset_of!(Mr, lkey), 36);
        assert_eq!(offset_of!(Mr, rkey), 40);
    }

    #[test]
    fn mtu_timeout_and_rate_encodings() {
        assert_eq!(mtu_enum(1024).expect("mtu"), 3);
        assert_eq!(mtu_bytes(3), 1024);
        for b in [256, 512, 1024, 2048, 4096] {
            assert_eq!(mtu_bytes(mtu_enum(b).expect("mtu")), b);
        }
        assert!(mtu_enum(1500).is_err());
        // 4.096 us x 2^t >= rto
        assert_eq!(ack_timeout(0), 1);
        assert_eq!(ack_timeout(8_192), 1);
        assert_eq!(ack_timeout(8_193), 2);
        assert_eq!(ack_timeout(1_000_000), 8); // 4.096 us x 256 = 1.049 ms
        assert_eq!(ack_timeout(u64::MAX), 31);
        assert_eq!(port_rate_gbps(2, 32), 100.0); // 4x EDR: a 100 GbE ConnectX-5 port
        assert_eq!(port_rate_gbps(2, 64), 200.0);
    }

    #[test]
    fn qp_attributes_follow_the_plan() {
        let mut p = QpPlan::rc(1024, 170, 2, 3, 1_000_000);
        p.sq_psn = 0x12_3456;
        let remote = QpInfo {
            qpn: 0x99,
            psn: 0x1ff_0001, // beyond 24 bits: masked
            gid: Gid([7; 16]),
            addr: 0x1000,
            rkey: 5,
        };
        let (a, m) = p.rtr_attr(1, 3, &remote);
        assert_eq!(a.qp_state, QPS_RTR);
        assert_eq!(a.path_mtu, 3);
        assert_eq!(a.dest_qp_num, 0x99);
        assert_eq!(a.rq_psn, 0xff_0001);
        assert_eq!(a.ah_attr.grh.dgid, Gid([7; 16]));
        assert_eq!(a.ah_attr.grh.sgid_index, 3);
        assert_eq!(a.ah_attr.grh.hop_limit, 64);
        assert_eq!(a.ah_attr.is_global, 1);
        assert_eq!(
            m,
            M_STATE
                | M_AV
                | M_PATH_MTU
                | M_DEST_QPN
                | M_RQ_PSN
                | M_MAX_DEST_RD_ATOMIC
                | M_MIN_RNR_TIMER
        );
        let (a, m) = p.rts_attr();
        assert_eq!((a.qp_state, a.sq_psn, a.timeout), (QPS_RTS, 0x12_3456, 8));
        assert_eq!(m & M_TIMEOUT, M_TIMEOUT);
        // UC has no ACKs: no timeout, retries or read atomics (the mask must not name them)
        p.transport = Transport::Uc;
        let (_, m) = p.rts_attr();
        assert_eq!(m, M_STATE | M_SQ_PSN);
        let (_, m) = p.rtr_attr(1, 0, &remote);
        assert_eq!(m & (M_MAX_DEST_RD_ATOMIC | M_MIN_RNR_TIMER), 0);
        assert_eq!(p.cap().max_send_wr, 3);
        assert!(QpPlan::rc(1000, 170, 2, 1, 1).validate().is_err());
        assert!(QpPlan::rc(1024, 0, 2, 1, 1).validate().is_err());
    }

    #[test]
    fn qp_info_round_trips_and_rejects_wrong_lengths() {
        let q = QpInfo {
            qpn: 0x00ab_cdef,
            psn: 0x12_3456,
            gid: Gid([
                0xfe, 0x80, 0, 0, 0, 0, 0, 0, 2, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55,
            ]),
            addr: 0x7fff_0000_1000,
            rkey: 0xdead_beef,
        };
        let b = q.to_bytes();
        assert_eq!(&b[0..4], &[0x00, 0xab, 0xcd, 0xef]);
        assert_eq!(QpInfo::from_bytes(&b).expect("parse"), q);
        assert!(matches!(
            QpInfo::from_bytes(&b[..35]),
            Err(VerbsError::QpInfoLength(35))
        ));
    }

    fn dev(name: &str, vendor_id: u32, driver: Option<&str>) -> Device {
        Device {
            name: name.into(),
            fw_ver: "0.0.0".into(),
            max_qp_wr: 1024,
            ports: vec![Port {
                num: 1,
                state: 4,
                link_layer: "Ethernet",
                active_mtu: 1024,
                max_mtu: 4096,
                rate_gbps: 100.0,
                gids: vec![(1, Gid([1; 16]))],
            }],
            vendor_id,
            vendor_part_id: 0,
            driver: driver.map(str::to_string),
            provider: Provider::classify(name, vendor_id, driver),
        }
    }

    #[test]
    fn providers_tell_hardware_from_rxe_and_siw() {
        // rxe0 as the Soft-RoCE rig's guests report it (ibv_devinfo: vendor_id 0xffffff; sysfs:
        // no parent device), and under another name
        assert_eq!(
            Provider::classify("rxe0", 0xff_ffff, None),
            Provider::SoftRoce
        );
        assert_eq!(
            Provider::classify("roce_eth0", 0xff_ffff, None),
            Provider::SoftRoce
        );
        assert_eq!(
            Provider::classify("siw_eth0", 0x62_6d74, None),
            Provider::SoftIwarp
        );
        // a ConnectX-5: vendor 0x02c9, PCI driver mlx5_core; a name like rxe0 does not override
        // a PCI driver
        let cx = Provider::classify("mlx5_0", 0x02c9, Some("mlx5_core"));
        assert!(cx.is_hardware());
        assert_eq!(
            cx.to_string(),
            "hardware, driver mlx5_core, vendor 0x02c9 (Mellanox/NVIDIA)"
        );
        assert!(Provider::classify("rxe0", 0x14e4, Some("bnxt_en")).is_hardware());
        assert!(!Provider::classify("x", 0x02c9, Some("rdma_rxe")).is_hardware());
        // only hardware devices count for the doctor's `hardware` class
        let (n, s) = probe_sentence(&[dev("rxe0", RXE_VENDOR_ID, None)]);
        assert_eq!(n, 0);
        assert!(
            s.starts_with("libibverbs loaded: rxe0 [Soft-RoCE (rdma_rxe), software] (fw 0.0.0): port 1 Ethernet active, MTU 1024"),
            "{s}"
        );
        assert!(s.contains("no hardware RDMA device"), "{s}");
        let (n, s) = probe_sentence(&[
            dev("mlx5_0", 0x02c9, Some("mlx5_core")),
            dev("rxe0", RXE_VENDOR_ID, None),
        ]);
        assert_eq!(n, 1);
        assert!(
            s.contains("mlx5_0 [hardware, driver mlx5_core, vendor 0x02c9 (Mellanox/NVIDIA)]"),
            "{s}"
        );
        assert!(!s.contains("no hardware RDMA device"), "{s}");
        assert!(!s.contains('\n'));
        assert_eq!(probe_sentence(&[]).0, 0);
    }

    #[test]
    fn absent_device_is_one_sentence() {
        let p = probe();
        assert_eq!(p.devices, 0, "this machine has no RDMA device: {p:?}");
        // CI installs libibverbs (.ci/setup), so there the library loads and finds no device
        if std::env::var_os("CI").is_some() {
            assert!(p.library.is_some(), "CI must have libibverbs: {p:?}");
            assert!(p.detail.contains("no RDMA device"), "{}", p.detail);
        }
        assert!(!p.detail.contains('\n'), "{}", p.detail);
        assert!(
            p.detail.contains("no libibverbs") || p.detail.contains("no RDMA device"),
            "{}",
            p.detail
        );
        // connecting says so too, without panicking
        let plan = QpPlan::rc(1024, 170, 2, 1, 1_000_000);
        let e = match Verbs::load() {
            Ok(v) => v.connect(None, 1, 0, &plan).err().expect("no device"),
            Err(e) => e,
        };
        let s = e.to_string();
        assert!(
            matches!(e, VerbsError::NoLibrary | VerbsError::NoDevice),
            "{s}"
        );
        assert!(!s.contains('\n'));
    }
}
