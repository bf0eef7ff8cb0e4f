//! The verbs binding's queue pairs as an `inabench_transport::HostTransport` (issue #36 item 2):
//! [`VerbsQp`] is a [`Connection`] (RC or UC, as its plan says) with the peer's info it was
//! connected to, so that code written over the trait (the ring all-reduce of
//! `inabench_transport::ring`) runs on a RoCE device's QPs as it runs on the software stack.
//! Connection info converts both ways with the binding's [`QpInfo`] (the same 36 bytes).

use crate::verbs::{Completion as WorkCompletion, Connection, Gid, QpInfo, VerbsError, WriteOp};
use inabench_transport::{
    Completion, CompletionKind, ConnInfo, ConnInfoError, HostTransport, RemoteAddr,
};

// ibv_wc_opcode values of verbs.h
const WC_RDMA_WRITE: u32 = 1;
const WC_RECV_RDMA_WITH_IMM: u32 = 129;

impl From<QpInfo> for ConnInfo {
    fn from(q: QpInfo) -> ConnInfo {
        ConnInfo {
            qpn: q.qpn,
            psn: q.psn,
            gid: q.gid.0,
            addr: q.addr,
            rkey: q.rkey,
        }
    }
}

impl From<&ConnInfo> for QpInfo {
    fn from(c: &ConnInfo) -> QpInfo {
        QpInfo {
            qpn: c.qpn,
            psn: c.psn,
            gid: Gid(c.gid),
            addr: c.addr,
            rkey: c.rkey,
        }
    }
}

/// Why a verbs QP refused a call of the trait.
#[derive(Debug, thiserror::Error)]
pub enum VerbsQpError {
    #[error(transparent)]
    Verbs(#[from] VerbsError),
    #[error("the peer's connection info: {0}")]
    Info(#[from] ConnInfoError),
    #[error("the QP is not connected")]
    NotConnected,
}

/// A verbs QP behind the message-level trait: the connection (borrowed: its owner keeps it, as
/// the rig's examples do) and the peer it was connected to.
pub struct VerbsQp<'c, 'a> {
    conn: &'c mut Connection<'a>,
    remote: Option<QpInfo>,
}

impl<'c, 'a> VerbsQp<'c, 'a> {
    /// Not yet connected: [`HostTransport::connect`] moves the QP to RTS.
    pub fn new(conn: &'c mut Connection<'a>) -> VerbsQp<'c, 'a> {
        VerbsQp { conn, remote: None }
    }

    /// Already connected (by its owner) to `remote`.
    pub fn connected(conn: &'c mut Connection<'a>, remote: QpInfo) -> VerbsQp<'c, 'a> {
        VerbsQp {
            conn,
            remote: Some(remote),
        }
    }
}

/// A device's work completion as the trait's.
pub fn completion(w: &WorkCompletion) -> Completion {
    Completion {
        wr_id: w.wr_id,
        kind: match w.opcode {
            WC_RDMA_WRITE => CompletionKind::Write,
            WC_RECV_RDMA_WITH_IMM => CompletionKind::RecvWriteImm,
            other => CompletionKind::Other(other),
        },
        error: (w.status != 0).then_some(w.status),
        byte_len: w.byte_len,
        imm: w.imm,
    }
}

impl HostTransport for VerbsQp<'_, '_> {
    type Error = VerbsQpError;

    fn info(&self) -> ConnInfo {
        self.conn.info().into()
    }

    fn connect(&mut self, remote: &ConnInfo) -> Result<(), VerbsQpError> {
        remote.validate()?;
        let q = QpInfo::from(remote);
        self.conn.connect_to(&q)?;
        self.remote = Some(q);
        Ok(())
    }

    fn buf(&self) -> &[u8] {
        &self.conn.buf
    }

    fn buf_mut(&mut self) -> &mut [u8] {
        &mut self.conn.buf
    }

    fn post_write(
        &mut self,
        wr_id: u64,
        offset: u64,
        len: u32,
        imm: Option<u32>,
    ) -> Result<(), VerbsQpError> {
        let remote = self.remote.ok_or(VerbsQpError::NotConnected)?;
        let w = WriteOp {
            offset,
            len,
            packets: 0,
        };
        Ok(self.conn.post_write(wr_id, &w, &remote, imm)?)
    }

    fn post_write_to(
        &mut self,
        wr_id: u64,
        offset: u64,
        len: u32,
        to: RemoteAddr,
        imm: Option<u32>,
    ) -> Result<(), VerbsQpError> {
        if self.remote.is_none() {
            return Err(VerbsQpError::NotConnected);
        }
        let w = WriteOp {
            offset,
            len,
            packets: 0,
        };
        Ok(self.conn.post_write_to(wr_id, &w, to.addr, to.rkey, imm)?)
    }

    fn post_recv(&mut self, wr_id: u64) -> Result<(), VerbsQpError> {
        // a WRITE with immediate consumes a receive but writes where its RETH says: no data
        Ok(self.conn.post_recv(wr_id, 0, 0)?)
    }

    fn poll(&mut self, max: usize) -> Result<Vec<Completion>, VerbsQpError> {
        Ok(self.conn.poll(max)?.iter().map(completion).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conn_info_and_qp_info_are_the_same_bytes() {
        let q = QpInfo {
            qpn: 0x11,
            psn: 0xab_cdef,
            gid: Gid(inabench_transport::ipv4_gid([192, 168, 7, 2])),
            addr: 0x7f12_3456_7000,
            rkey: 0x1234_5678,
        };
        let c = ConnInfo::from(q);
        assert_eq!(c.to_bytes(), q.to_bytes());
        assert_eq!(QpInfo::from(&c), q);
        assert_eq!(ConnInfo::from_bytes(&q.to_bytes()), Ok(c));
    }

    #[test]
    fn device_completions_map_to_the_trait_kinds() {
        let w = WorkCompletion {
            wr_id: 3,
            status: 0,
            opcode: WC_RECV_RDMA_WITH_IMM,
            byte_len: 4096,
            imm: Some(3),
        };
        assert_eq!(
            completion(&w),
            Completion {
                wr_id: 3,
                kind: CompletionKind::RecvWriteImm,
                error: None,
                byte_len: 4096,
                imm: Some(3)
            }
        );
        let e = WorkCompletion {
            status: 12,
            opcode: WC_RDMA_WRITE,
            ..w
        };
        assert_eq!(completion(&e).kind, CompletionKind::Write);
        assert_eq!(completion(&e).error, Some(12));
    }
}
