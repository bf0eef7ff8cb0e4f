//! The INA headers of the Table 6 systems. Where a paper gives the fields but not their widths,
//! the widths are our choice (documented per field) and are what the suite's switch programs
//! parse; a hardware artifact with other widths needs its own parser.

use crate::ib::RethRepr;
use crate::{Error, be16, be32, need, put16, put32};

/// NetReduce's INA header (Sec. 3.1 and 3.2): carried at the start of a message, i.e. in the
/// first packet's payload, before the tensor values ("an INA header (MsgID, MsgLen, Rank, and
/// RingID) in front of the tensor values", Sec. 3.1; the first packet "is identified by the
/// InetTag (a magic number)", Sec. 3.2). Widths (ours): InetTag 32, RingID 16, Rank 16, MsgID 32,
/// MsgLen 32 (packets per message), 16 bytes in all, 4-byte aligned like the tensor values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetReduceHeader {
    pub ring_id: u16,
    pub rank: u16,
    pub msg_id: u32,
    pub msg_len: u32,
}

impl NetReduceHeader {
    pub const LEN: usize = 16;
    /// "INET" in ASCII.
    pub const INET_TAG: u32 = 0x494e_4554;

    /// Whether a payload starts with the InetTag (a first packet of a message).
    pub fn is_first(payload: &[u8]) -> bool {
        payload.len() >= Self::LEN && be32(payload, 0) == Self::INET_TAG
    }

    pub fn parse(b: &[u8]) -> Result<Self, Error> {
        need("NetReduce header", b.len(), Self::LEN)?;
        if be32(b, 0) != Self::INET_TAG {
            return Err(Error::Malformed("NetReduce InetTag"));
        }
        Ok(NetReduceHeader {
            ring_id: be16(b, 4),
            rank: be16(b, 6),
            msg_id: be32(b, 8),
            msg_len: be32(b, 12),
        })
    }

    pub fn emit(&self, b: &mut [u8]) -> Result<(), Error> {
        need("NetReduce header buffer", b.len(), Self::LEN)?;
        put32(b, 0, Self::INET_TAG);
        put16(b, 4, self.ring_id);
        put16(b, 6, self.rank);
        put32(b, 8, self.msg_id);
        put32(b, 12, self.msg_len);
        Ok(())
    }
}

/// SwitchML's header (Sapio et al., NSDI'21), after UDP: worker id, the pool (slot) index with
/// the shadow-copy version bit, the block-floating-point exponent the worker proposes or the
/// switch returns, and the element count (64 int32 values per packet in SwitchML). Widths (ours,
/// following SwitchML's public P4 and DPDK code in spirit): worker 16, pool index 15 + version 1,
/// exponent 8 (signed), flags 8 (bit 0: result packet), elements 16: 8 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SwitchMlHeader {
    pub worker: u16,
    /// 15 bits
    pub pool_index: u16,
    pub version: bool,
    pub exponent: i8,
    pub is_result: bool,
    pub elements: u16,
}

impl SwitchMlHeader {
    pub const LEN: usize = 8;

    pub fn parse(b: &[u8]) -> Result<Self, Error> {
        need("SwitchML header", b.len(), Self::LEN)?;
        let slot = be16(b, 2);
        if b[5] & !1 != 0 {
            return Err(Error::Malformed("SwitchML flags"));
        }
        Ok(SwitchMlHeader {
            worker: be16(b, 0),
            pool_index: slot & 0x7fff,
            version: slot & 0x8000 != 0,
            exponent: b[4] as i8,
            is_result: b[5] & 1 != 0,
            elements: be16(b, 6),
        })
    }

    pub fn emit(&self, b: &mut [u8]) -> Result<(), Error> {
        need("SwitchML header buffer", b.len(), Self::LEN)?;
        if self.pool_index > 0x7fff {
            return Err(Error::Malformed("SwitchML pool index out of range"));
        }
        put16(b, 0, self.worker);
        put16(b, 2, self.pool_index | (u16::from(self.version) << 15));
        b[4] = self.exponent as u8;
        b[5] = u8::from(self.is_result);
        put16(b, 6, self.elements);
        Ok(())
    }
}

/// SwitchML-RDMA: the pool index rides in the RETH of a UC RDMA WRITE (NetReduce Sec. 6: "pool
/// index is encoded in RDMA Extended Transport Header (RETH) which position originally contains
/// Virtual Address and R_Key"). Ours: the pool index in the VA's upper 32 bits, the byte offset of
/// the chunk in the lower 32, and the job in the R_Key.
pub fn switchml_rdma_reth(pool_index: u32, offset: u32, job: u32, dma_len: u32) -> RethRepr {
    RethRepr {
        va: (u64::from(pool_index) << 32) | u64::from(offset),
        rkey: job,
        dma_len,
    }
}

/// (pool index, offset, job) from a SwitchML-RDMA RETH.
pub fn switchml_rdma_fields(r: &RethRepr) -> (u32, u32, u32) {
    ((r.va >> 32) as u32, r.va as u32, r.rkey)
}

/// ATP's header (Lao et al., NSDI'21): job id, aggregator index (hash of job and sequence),
/// worker bitmap, fan-in degree, sequence, and the resend, collision and ECN flags. Widths (ours):
/// job 16, fan-in 8, flags 8 (bit 0 resend, 1 collision, 2 ECN, 3 result), aggregator index 32,
/// bitmap 32, sequence 32: 16 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtpHeader {
    pub job: u16,
    pub fan_in: u8,
    pub resend: bool,
    pub collision: bool,
    pub ecn: bool,
    pub is_result: bool,
    pub aggregator: u32,
    pub bitmap: u32,
    pub sequence: u32,
}

impl AtpHeader {
    pub const LEN: usize = 16;

    pub fn parse(b: &[u8]) -> Result<Self, Error> {
        need("ATP header", b.len(), Self::LEN)?;
        let f = b[3];
        if f & 0xf0 != 0 {
            return Err(Error::Malformed("ATP flags"));
        }
        Ok(AtpHeader {
            job: be16(b, 0),
            fan_in: b[2],
            resend: f & 1 != 0,
            collision: f & 2 != 0,
            ecn: f & 4 != 0,
            is_result: f & 8 != 0,
            aggregator: be32(b, 4),
            bitmap: be32(b, 8),
            sequence: be32(b, 12),
        })
    }

    pub fn emit(&self, b: &mut [u8]) -> Result<(), Error> {
        need("ATP header buffer", b.len(), Self::LEN)?;
        put16(b, 0, self.job);
        b[2] = self.fan_in;
        b[3] = u8::from(self.resend)
            | (u8::from(self.collision) << 1)
            | (u8::from(self.ecn) << 2)
            | (u8::from(self.is_result) << 3);
        put32(b, 4, self.aggregator);
        put32(b, 8, self.bitmap);
        put32(b, 12, self.sequence);
        Ok(())
    }
}
