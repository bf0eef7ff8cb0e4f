//! A message-level host transport (issue #36 item 2): what a host's side of an RDMA all-reduce
//! needs from its RoCE stack, and nothing of how the stack does it.
//!
//! - [`HostTransport`]: one queue pair: its registered buffer, an RDMA WRITE (with immediate) of
//!   a message from that buffer into the same offset of the peer's buffer, receives for the
//!   peer's WRITEs with immediate (or one to an address and R_Key the peer names per message,
//!   [`HostTransport::post_write_to`]), and completions; its [`ConnInfo`] (QPN, first PSN, GID,
//!   buffer address and rkey) is what the two sides exchange before [`HostTransport::connect`].
//! - Two implementations: [`soft::SoftQp`], the suite's software RoCEv2 stack, RC or UC
//!   ([`QpType`]; `inabench_ina::roce`) as a sans-IO QP whose frames a [`soft::SoftHost`] endpoint carries on
//!   any fabric; and `inabench_devices::transport::VerbsQp`, a verbs RC or UC QP of a real (or
//!   Soft-RoCE) device.
//! - [`ring::RingAllReduce`]: the ring all-reduce (reduce-scatter then all-gather, one WRITE with
//!   immediate per step) written once over the trait; the same code runs on both.
//! - [`switchml_rdma::SmlrWorker`]: SwitchML-RDMA's worker (each message one WRITE with
//!   immediate to the switch, its pool index as R_Key and its result address as VA; one message
//!   per slot group in flight, resent whole after a timeout; every result checked exactly),
//!   sans-IO over the trait, told the time: the rig's `switchml_rdma_worker` runs it on a verbs
//!   UC QP, tests/uc_rnr.rs on a software UC QP.
//! - [`ps`]: the parameter-server all-reduce (`n` workers, `s` servers each owning a shard, one
//!   RC QP per worker and server; a worker WRITEs with immediate its shard, the server WRITEs
//!   with immediate the sum back), written once over the trait ([`ps::PsWorker`],
//!   [`ps::PsServer`]); [`ps::ps_nodes`] runs it on software QPs on any fabric
//!   (tests/ps_soft.rs), the rig's `ps_worker` on verbs RC QPs.
//!
//! Connection info travels as [`ConnInfoWire`] (plain numbers and the GID as text, JSON through
//! serde) or as [`ConnInfo::to_bytes`]; both are checked on the way in ([`ConnInfoError`]): a
//! QPN or PSN beyond 24 bits, a reserved QPN (0 and 1), an all-zero or malformed GID.

pub mod ps;
pub mod ring;
pub mod soft;
pub mod switchml_rdma;
pub mod udp;

use serde::{Deserialize, Serialize};

/// QPNs and PSNs are 24-bit (the BTH's fields).
pub const MASK_24: u32 = 0x00ff_ffff;

/// What one side of a queue pair tells the other to connect to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnInfo {
    /// The queue pair number (24 bits, not 0 or 1: those are the subnet-management QPs).
    pub qpn: u32,
    /// The first PSN this side sends with (the peer's expected PSN; 24 bits).
    pub psn: u32,
    /// This side's GID (RoCEv2 over IPv4: the IPv4-mapped address ::ffff:a.b.c.d).
    pub gid: [u8; 16],
    /// Where the peer WRITEs: the base address and rkey of this side's registered buffer.
    pub addr: u64,
    pub rkey: u32,
}

/// Why connection info was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnInfoError {
    #[error("QPN {0:#x} is beyond the 24 bits of a BTH's destination QP")]
    QpnRange(u64),
    #[error("QPN {0} is reserved (QP0 and QP1 are the management QPs, never an RC or UC QP)")]
    ReservedQpn(u32),
    #[error("PSN {0:#x} is beyond the 24 bits of a BTH's PSN")]
    PsnRange(u64),
    #[error("rkey {0:#x} is beyond 32 bits")]
    RkeyRange(u64),
    #[error("GID `{0}` is not 8 groups of 1-4 hex digits separated by `:`")]
    GidFormat(String),
    #[error("the GID is all zeros (no port's GID table holds it)")]
    ZeroGid,
    #[error("connection info is {0} bytes, expected {CONN_INFO_LEN}")]
    Length(usize),
}

/// Bytes of [`ConnInfo::to_bytes`] (the verbs binding's `QpInfo` layout).
pub const CONN_INFO_LEN: usize = 4 + 4 + 16 + 8 + 4;

impl ConnInfo {
    /// Check the fields a peer could get wrong.
    pub fn validate(&self) -> Result<(), ConnInfoError> {
        if self.qpn > MASK_24 {
            return Err(ConnInfoError::QpnRange(u64::from(self.qpn)));
        }
        if self.qpn < 2 {
            return Err(ConnInfoError::ReservedQpn(self.qpn));
        }
        if self.psn > MASK_24 {
            return Err(ConnInfoError::PsnRange(u64::from(self.psn)));
        }
        if self.gid == [0; 16] {
            return Err(ConnInfoError::ZeroGid);
        }
        Ok(())
    }

    /// Big-endian, fixed length (the same bytes as the verbs binding's `QpInfo::to_bytes`).
    pub fn to_bytes(&self) -> [u8; CONN_INFO_LEN] {
        let mut b = [0u8; CONN_INFO_LEN];
        b[0..4].copy_from_slice(&self.qpn.to_be_bytes());
        b[4..8].copy_from_slice(&self.psn.to_be_bytes());
        b[8..24].copy_from_slice(&self.gid);
        b[24..32].copy_from_slice(&self.addr.to_be_bytes());
        b[32..36].copy_from_slice(&self.rkey.to_be_bytes());
        b
    }

    /// Read and check [`ConnInfo::to_bytes`]'s form.
    pub fn from_bytes(b: &[u8]) -> Result<ConnInfo, ConnInfoError> {
        let b: &[u8; CONN_INFO_LEN] = b.try_into().map_err(|_| ConnInfoError::Length(b.len()))?;
        let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[8..24]);
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[24..32]);
        let c = ConnInfo {
            qpn: u32_at(0),
            psn: u32_at(4),
            gid,
            addr: u64::from_be_bytes(a),
            rkey: u32_at(32),
        };
        c.validate()?;
        Ok(c)
    }

    /// The wire form (for a JSON control channel).
    pub fn to_wire(&self) -> ConnInfoWire {
        ConnInfoWire {
            qpn: u64::from(self.qpn),
            psn: u64::from(self.psn),
            gid: gid_text(&self.gid),
            addr: self.addr,
            rkey: u64::from(self.rkey),
        }
    }

    /// The IPv4 address of an IPv4-mapped GID (::ffff:a.b.c.d), if it is one.
    pub fn ipv4(&self) -> Option<[u8; 4]> {
        (self.gid[..10] == [0; 10] && self.gid[10..12] == [0xff, 0xff])
            .then(|| [self.gid[12], self.gid[13], self.gid[14], self.gid[15]])
    }
}

/// The GID of an IPv4 address (RoCEv2's IPv4-mapped form, ::ffff:a.b.c.d).
pub fn ipv4_gid(ip: [u8; 4]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&ip);
    g
}

/// A GID as `ibv_devinfo -v` prints it: 8 groups of 4 hex digits.
pub fn gid_text(g: &[u8; 16]) -> String {
    g.chunks(2)
        .map(|p| format!("{:02x}{:02x}", p[0], p[1]))
        .collect::<Vec<_>>()
        .join(":")
}

/// Read [`gid_text`]'s form (each group 1-4 hex digits).
pub fn parse_gid(s: &str) -> Result<[u8; 16], ConnInfoError> {
    let bad = || ConnInfoError::GidFormat(s.chars().take(64).collect());
    let groups: Vec<&str> = s.split(':').collect();
    if groups.len() != 8 {
        return Err(bad());
    }
    let mut g = [0u8; 16];
    for (i, grp) in groups.iter().enumerate() {
        if grp.is_empty() || grp.len() > 4 || !grp.bytes().all(|c| c.is_ascii_hexdigit()) {
            return Err(bad());
        }
        let v = u16::from_str_radix(grp, 16).map_err(|_| bad())?;
        g[2 * i..2 * i + 2].copy_from_slice(&v.to_be_bytes());
    }
    Ok(g)
}

/// Connection info as it travels on a text channel: every number wide enough to carry what a
/// faulty peer might send, so that a wrong value is refused with its [`ConnInfoError`], not
/// with a parser's message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnInfoWire {
    pub qpn: u64,
    pub psn: u64,
    /// 8 groups of hex digits (`0000:0000:0000:0000:0000:ffff:0a00:0001`).
    pub gid: String,
    pub addr: u64,
    pub rkey: u64,
}

impl TryFrom<&ConnInfoWire> for ConnInfo {
    type Error = ConnInfoError;

    fn try_from(w: &ConnInfoWire) -> Result<ConnInfo, ConnInfoError> {
        let qpn = u32::try_from(w.qpn).map_err(|_| ConnInfoError::QpnRange(w.qpn))?;
        let psn = u32::try_from(w.psn).map_err(|_| ConnInfoError::PsnRange(w.psn))?;
        let rkey = u32::try_from(w.rkey).map_err(|_| ConnInfoError::RkeyRange(w.rkey))?;
        let c = ConnInfo {
            qpn,
            psn,
            gid: parse_gid(&w.gid)?,
            addr: w.addr,
            rkey,
        };
        c.validate()?;
        Ok(c)
    }
}

/// What a completion reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompletionKind {
    /// One of this side's WRITEs was acknowledged (RC) or sent (UC).
    Write,
    /// A peer's WRITE with immediate arrived whole, consuming one posted receive.
    RecvWriteImm,
    /// Anything else the device reports (its `ibv_wc_opcode`).
    Other(u32),
}

/// One completion of a [`HostTransport`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    pub wr_id: u64,
    pub kind: CompletionKind,
    /// `None`: success; else the device's `ibv_wc_status` (the software stack reports
    /// [`STATUS_REMOTE_ACCESS`], [`STATUS_RNR_RETRY_EXC`] and [`STATUS_WR_FLUSH`]).
    pub error: Option<u32>,
    /// Bytes the completion covers (a received WRITE's length).
    pub byte_len: u32,
    /// The immediate of a WRITE with immediate.
    pub imm: Option<u32>,
}

/// `IBV_WC_RNR_RETRY_EXC_ERR`: an RC WRITE (with immediate) the peer answered with RNR NAKs
/// (no receive posted) more times in a row than the QP's `rnr_retry` allows (7: never).
pub const STATUS_RNR_RETRY_EXC: u32 = 13;

/// `IBV_WC_WR_FLUSH_ERR`: a work request flushed because its QP went to the error state (the
/// WRITEs posted after one that failed).
pub const STATUS_WR_FLUSH: u32 = 5;

/// A queue pair's transport service: fixed when the QP is made (as `ibv_qp_init_attr::qp_type`),
/// not part of [`ConnInfo`]: both sides choose it before they exchange their info.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpType {
    /// Reliable Connection: ACKs, go-back-N, RNR NAKs.
    Rc,
    /// Unreliable Connection: no ACKs; a message with a lost packet is dropped whole.
    Uc,
}

/// `IBV_WC_REM_ACCESS_ERR`: the software stack's status for a WRITE with immediate whose data
/// was refused (a wrong rkey, or an address outside the buffer).
pub const STATUS_REMOTE_ACCESS: u32 = 10;

/// Where a WRITE lands at the peer: the RETH's virtual address and R_Key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteAddr {
    pub addr: u64,
    pub rkey: u32,
}

/// One queue pair of a host, at the level of messages.
///
/// A message is one RDMA WRITE of `len` bytes from `offset` of this side's buffer into the same
/// offset of the peer's buffer, optionally with a 32-bit immediate that consumes one receive the
/// peer posted and completes there. Completions arrive through [`HostTransport::poll`], in order
/// per kind.
pub trait HostTransport {
    type Error: std::error::Error + Send + Sync + 'static;

    /// What the peer needs to connect to this QP (send it over the control channel).
    fn info(&self) -> ConnInfo;
    /// Connect to the peer's QP (RC/UC: INIT -> RTR -> RTS towards it).
    fn connect(&mut self, remote: &ConnInfo) -> Result<(), Self::Error>;
    /// The registered buffer: messages are written from it and into it.
    fn buf(&self) -> &[u8];
    fn buf_mut(&mut self) -> &mut [u8];
    /// Post a WRITE of `len` bytes at `offset` into the peer's buffer at `offset`.
    fn post_write(
        &mut self,
        wr_id: u64,
        offset: u64,
        len: u32,
        imm: Option<u32>,
    ) -> Result<(), Self::Error>;
    /// Post a WRITE of `len` bytes at `offset` to `to`, an address and R_Key the peer named
    /// for this message rather than "the same offset of the buffer it connected with"
    /// (SwitchML-RDMA's worker: the VA is its own result address for the message, the R_Key
    /// the message's pool index, which the switch reads as a slot). The frames are those of
    /// [`HostTransport::post_write`] with this RETH.
    fn post_write_to(
        &mut self,
        wr_id: u64,
        offset: u64,
        len: u32,
        to: RemoteAddr,
        imm: Option<u32>,
    ) -> Result<(), Self::Error>;
    /// Post a receive for one WRITE with immediate (its data lands where the WRITE says).
    fn post_recv(&mut self, wr_id: u64) -> Result<(), Self::Error>;
    /// Up to `max` completions (never blocks).
    fn poll(&mut self, max: usize) -> Result<Vec<Completion>, Self::Error>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> ConnInfo {
        ConnInfo {
            qpn: 0x11,
            psn: 0xff_fff0,
            gid: ipv4_gid([10, 0, 0, 1]),
            addr: 0x7f00_0000_1000,
            rkey: 0xdead_beef,
        }
    }

    #[test]
    fn info_round_trips_through_bytes_and_wire_form() {
        let i = info();
        assert_eq!(ConnInfo::from_bytes(&i.to_bytes()), Ok(i));
        let w = i.to_wire();
        assert_eq!(w.gid, "0000:0000:0000:0000:0000:ffff:0a00:0001");
        assert_eq!(ConnInfo::try_from(&w), Ok(i));
        assert_eq!(i.ipv4(), Some([10, 0, 0, 1]));
    }

    #[test]
    fn malformed_info_is_refused_with_its_reason() {
        let w = info().to_wire();
        let bad = |f: &dyn Fn(&mut ConnInfoWire)| {
            let mut x = w.clone();
            f(&mut x);
            ConnInfo::try_from(&x)
        };
        assert_eq!(
            bad(&|x| x.qpn = 0x100_0000),
            Err(ConnInfoError::QpnRange(0x100_0000))
        );
        assert_eq!(
            bad(&|x| x.qpn = 1u64 << 40),
            Err(ConnInfoError::QpnRange(1 << 40))
        );
        assert_eq!(bad(&|x| x.qpn = 1), Err(ConnInfoError::ReservedQpn(1)));
        assert_eq!(
            bad(&|x| x.psn = 0x100_0000),
            Err(ConnInfoError::PsnRange(0x100_0000))
        );
        assert_eq!(
            bad(&|x| x.rkey = 1 << 32),
            Err(ConnInfoError::RkeyRange(1 << 32))
        );
        for g in [
            "",
            "fe80::1",
            "0:0:0:0:0:ffff:a00",
            "0:0:0:0:0:ffff:a00:1:2",
            "0:0:0:0:0:ffff:a00:1g",
            "0:0:0:0:0:ffff:a00:10000",
        ] {
            assert!(
                matches!(bad(&|x| x.gid = g.into()), Err(ConnInfoError::GidFormat(_))),
                "{g}"
            );
        }
        assert_eq!(
            bad(&|x| x.gid = "0:0:0:0:0:0:0:0".into()),
            Err(ConnInfoError::ZeroGid)
        );
        assert_eq!(
            ConnInfo::from_bytes(&[0u8; 35]),
            Err(ConnInfoError::Length(35))
        );
        let mut b = info().to_bytes();
        b[0] = 1; // QPN 0x0100_0011
        assert_eq!(
            ConnInfo::from_bytes(&b),
            Err(ConnInfoError::QpnRange(0x0100_0011))
        );
    }
}
