//! SwitchML-RDMA: SwitchML over RoCEv2, as NetReduce Sec. 6 describes it and the authors'
//! P4 code (microsoft/SwitchML, `p4/RDMAReceiver.p4`, `p4/RDMASender.p4`, `p4/types.p4`) builds it.
//!
//! It has no header of its own. Workers send UC RDMA WRITEs, "RDMA Write Immediate in Unreliable
//! Connection (UC) transport mode" (NetReduce line 517), and the INA metadata rides in RoCE fields:
//! "pool index is encoded in RDMA Extended Transport Header (RETH) which position originally
//! contains Virtual Address and R_Key ... RETH only appears in the first packet in a message, and
//! SwitchML RDMA links non-first packets to first packets by using a sequence number ... it
//! reloads Virtual Address and R_Key back to packet RETH" (line 519). In the P4 code:
//!
//! - R_Key = the pool index of the message's first slot: bit 0 the shadow-copy set, bits 14-1
//!   the slot (`POOL_INDEX (hdr.ib_reth.r_key)`; each later packet of the message takes the next
//!   slot of the same set, `pool_index |+| 2`, if its PSN is the next one);
//! - the RETH's Virtual Address is the worker's result buffer, passed through to the result
//!   packets, and its DMA Length the message length;
//! - ImmDt, on the WRITE Last/Only with Immediate, carries two 8-bit exponents for block floating
//!   point: `e0 = imm[31:24]`, `e1 = imm[23:16]`;
//! - DestQP is the switch's QPN: bit 23 set, bits 22-16 the worker id, bits 15-0 the worker's
//!   queue pair index;
//! - results go back as UC WRITEs to the worker's own QPN and R_Key (installed on the switch out
//!   of band) with an immediate of `{0, pool index (15 bits), e1, e0}` ([`ResultImm`]).
//!
//! The ICRC cannot be recomputed by the switch, so the NICs' ICRC check is turned off (NetReduce
//! line 521; the code's `disable-icrc.sh`): parse such frames with
//! [`IcrcCheck::Ignore`](crate::roce::IcrcCheck::Ignore).

use crate::Error;
use crate::ib::{self, RethRepr, opcode};
use crate::roce::FrameRepr;

/// Bit 23 of the switch's QPNs ("always 1 to make Wireshark debugging easier").
pub const QPN_MARK: u32 = 0x80_0000;
/// Worker ids are 7 bits (DestQP bits 22-16).
pub const MAX_WORKER: u8 = 0x7f;
/// Slots are 14 bits (pool index bits 14-1).
pub const MAX_SLOT: u16 = 0x3fff;

/// A pool index: a slot and one of its two shadow-copy sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PoolIndex {
    /// 14 bits.
    pub slot: u16,
    pub set: bool,
}

impl PoolIndex {
    /// The 15-bit pool index: `slot << 1 | set` (for a slot within [`MAX_SLOT`]).
    pub fn index(self) -> u16 {
        (self.slot << 1) | u16::from(self.set)
    }

    /// From a 15-bit pool index (as the R_Key or a result immediate carries it).
    pub fn from_index(i: u32) -> Result<PoolIndex, Error> {
        if i > 0x7fff {
            return Err(Error::Malformed("SwitchML-RDMA pool index over 15 bits"));
        }
        Ok(PoolIndex {
            slot: (i >> 1) as u16,
            set: i & 1 != 0,
        })
    }

    /// The pool index of the packet `k` packets after this one in the same message: the next
    /// slots of the same set, as the switch computes it.
    pub fn advance(self, k: u16) -> Result<PoolIndex, Error> {
        let slot = self
            .slot
            .checked_add(k)
            .filter(|s| *s <= MAX_SLOT)
            .ok_or(Error::Malformed("SwitchML-RDMA slot past the pool"))?;
        Ok(PoolIndex { slot, ..self })
    }
}

/// The SwitchML-RDMA metadata of a worker-to-switch packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// 7 bits.
    pub worker: u8,
    /// The worker's queue pair index (DestQP bits 15-0).
    pub qp_index: u16,
    /// The message's first slot, in the R_Key of the first (or only) packet.
    pub pool: Option<PoolIndex>,
    /// `[e0, e1]`, in the ImmDt of the last (or only) packet with immediate.
    pub exponents: Option<[u8; 2]>,
}

impl Repr {
    /// The switch QPN this worker's queue pair sends to.
    pub fn dest_qp(&self) -> Result<u32, Error> {
        if self.worker > MAX_WORKER {
            return Err(Error::Malformed("SwitchML-RDMA worker id over 7 bits"));
        }
        Ok(QPN_MARK | (u32::from(self.worker) << 16) | u32::from(self.qp_index))
    }

    /// The ImmDt carrying the exponents.
    pub fn imm(exponents: [u8; 2]) -> u32 {
        (u32::from(exponents[0]) << 24) | (u32::from(exponents[1]) << 16)
    }

    /// Write this metadata into a UC RDMA WRITE frame: DestQP, the RETH's R_Key (a first/only
    /// packet must have a pool index, others must not) and the ImmDt (an opcode with immediate
    /// must have exponents, others must not). The RETH's VA and DMA length are the caller's.
    pub fn apply(&self, frame: &mut FrameRepr) -> Result<(), Error> {
        let op = frame.bth.opcode;
        if op & opcode::TRANSPORT_MASK != opcode::UC || !is_write(op) {
            return Err(Error::Unsupported(
                "SwitchML-RDMA opcode (UC RDMA WRITE only)",
            ));
        }
        let l = ib::layout(op)?;
        frame.bth.dest_qp = self.dest_qp()?;
        match (l.reth, self.pool) {
            (true, Some(pool)) => {
                if pool.slot > MAX_SLOT {
                    return Err(Error::Malformed("SwitchML-RDMA slot over 14 bits"));
                }
                let r = frame.reth.get_or_insert(RethRepr {
                    va: 0,
                    rkey: 0,
                    dma_len: 0,
                });
                r.rkey = u32::from(pool.index());
            }
            (false, None) => frame.reth = None,
            _ => {
                return Err(Error::Malformed(
                    "SwitchML-RDMA pool index and RETH disagree",
                ));
            }
        }
        match (l.immdt, self.exponents) {
            (true, Some(e)) => frame.immdt = Some(Self::imm(e)),
            (false, None) => frame.immdt = None,
            _ => {
                return Err(Error::Malformed(
                    "SwitchML-RDMA exponents and ImmDt disagree",
                ));
            }
        }
        Ok(())
    }

    /// Read the metadata from a worker's UC RDMA WRITE frame. A DestQP without bit 23 is not a
    /// switch QPN (`Malformed`); a non-UC-WRITE opcode is `Unsupported`.
    pub fn extract(frame: &FrameRepr) -> Result<Repr, Error> {
        let op = frame.bth.opcode;
        if op & opcode::TRANSPORT_MASK != opcode::UC || !is_write(op) {
            return Err(Error::Unsupported(
                "SwitchML-RDMA opcode (UC RDMA WRITE only)",
            ));
        }
        let qp = frame.bth.dest_qp;
        if qp & QPN_MARK == 0 {
            return Err(Error::Malformed("SwitchML-RDMA QPN without bit 23"));
        }
        let pool = match frame.reth {
            Some(r) => Some(PoolIndex::from_index(r.rkey)?),
            None => None,
        };
        Ok(Repr {
            worker: ((qp >> 16) & 0x7f) as u8,
            qp_index: (qp & 0xffff) as u16,
            pool,
            exponents: frame.immdt.map(|i| [(i >> 24) as u8, (i >> 16) as u8]),
        })
    }
}

fn is_write(op: u8) -> bool {
    (opcode::WRITE_FIRST..=opcode::WRITE_ONLY_IMM).contains(&(op & opcode::OPERATION_MASK))
}

/// The immediate of a switch-to-worker result packet: `{0, pool index (15 bits), e1, e0}`
/// (microsoft/SwitchML `RDMASender.p4`, `set_immediate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ResultImm {
    pub pool: PoolIndex,
    /// `[e0, e1]`.
    pub exponents: [u8; 2],
}

impl ResultImm {
    pub fn to_imm(self) -> Result<u32, Error> {
        if self.pool.slot > MAX_SLOT {
            return Err(Error::Malformed("SwitchML-RDMA slot over 14 bits"));
        }
        Ok((u32::from(self.pool.index()) << 16)
            | (u32::from(self.exponents[1]) << 8)
            | u32::from(self.exponents[0]))
    }

    /// Bit 31 must be zero.
    pub fn from_imm(imm: u32) -> Result<ResultImm, Error> {
        if imm >> 31 != 0 {
            return Err(Error::Malformed("SwitchML-RDMA result immediate bit 31"));
        }
        Ok(ResultImm {
            pool: PoolIndex::from_index(imm >> 16)?,
            exponents: [imm as u8, (imm >> 8) as u8],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ib::BthRepr;

    fn frame(op: u8) -> FrameRepr {
        let l = ib::layout(op).expect("opcode");
        FrameRepr {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_ip: [10, 0, 0, 1],
            dst_ip: [10, 0, 0, 2],
            src_port: 0xc001,
            tos: 0,
            ttl: 64,
            bth: BthRepr {
                opcode: op,
                solicited: false,
                migreq: true,
                pad_count: 0,
                pkey: 0xffff,
                fecn: false,
                becn: false,
                dest_qp: 0,
                ack_req: false,
                psn: 9,
            },
            reth: l.reth.then_some(RethRepr {
                va: 0x7f00_0000_1000,
                rkey: 0,
                dma_len: 1024,
            }),
            aeth: None,
            immdt: l.immdt.then_some(0),
        }
    }

    #[test]
    fn only_with_immediate() {
        let r = Repr {
            worker: 5,
            qp_index: 0x0102,
            pool: Some(PoolIndex {
                slot: 100,
                set: true,
            }),
            exponents: Some([0x85, 0x7f]),
        };
        let mut f = frame(opcode::UC_RDMA_WRITE_ONLY_IMM);
        r.apply(&mut f).expect("apply");
        assert_eq!(f.bth.dest_qp, 0x85_0102);
        let reth = f.reth.expect("reth");
        assert_eq!(
            (reth.rkey, reth.va, reth.dma_len),
            (201, 0x7f00_0000_1000, 1024)
        );
        assert_eq!(f.immdt, Some(0x857f_0000));
        assert_eq!(Repr::extract(&f), Ok(r));
    }

    #[test]
    fn middle_packets_carry_no_pool() {
        let r = Repr {
            worker: 0,
            qp_index: 7,
            pool: None,
            exponents: None,
        };
        let mut f = frame(opcode::UC_RDMA_WRITE_MIDDLE);
        r.apply(&mut f).expect("apply");
        assert_eq!(Repr::extract(&f), Ok(r));
        // a pool index on a middle packet, or none on a first packet, is refused
        let with_pool = Repr {
            pool: Some(PoolIndex {
                slot: 0,
                set: false,
            }),
            ..r
        };
        assert!(with_pool.apply(&mut f).is_err());
        assert!(r.apply(&mut frame(opcode::UC_RDMA_WRITE_FIRST)).is_err());
        assert!(r.apply(&mut frame(opcode::UC_RDMA_WRITE_LAST_IMM)).is_err());
    }

    #[test]
    fn refusals() {
        let r = Repr {
            worker: 0x80,
            qp_index: 0,
            pool: None,
            exponents: None,
        };
        assert!(r.apply(&mut frame(opcode::UC_RDMA_WRITE_MIDDLE)).is_err());
        assert!(matches!(
            Repr { worker: 1, ..r }.apply(&mut frame(opcode::RC_RDMA_WRITE_MIDDLE)),
            Err(Error::Unsupported(_))
        ));
        assert!(matches!(
            Repr::extract(&frame(opcode::UC_SEND_ONLY)),
            Err(Error::Unsupported(_))
        ));
        let mut f = frame(opcode::UC_RDMA_WRITE_FIRST);
        f.bth.dest_qp = 0x01_0000;
        assert_eq!(
            Repr::extract(&f),
            Err(Error::Malformed("SwitchML-RDMA QPN without bit 23"))
        );
        f.bth.dest_qp = QPN_MARK;
        if let Some(reth) = f.reth.as_mut() {
            reth.rkey = 0x8000;
        }
        assert!(matches!(Repr::extract(&f), Err(Error::Malformed(_))));
    }

    #[test]
    fn pool_index_and_result_immediate() {
        let p = PoolIndex {
            slot: 10,
            set: false,
        };
        assert_eq!(
            p.advance(3),
            Ok(PoolIndex {
                slot: 13,
                set: false
            })
        );
        assert!(
            PoolIndex {
                slot: MAX_SLOT,
                set: true
            }
            .advance(1)
            .is_err()
        );
        assert_eq!(
            PoolIndex::from_index(0x7fff).map(PoolIndex::index),
            Ok(0x7fff)
        );
        let r = ResultImm {
            pool: PoolIndex {
                slot: 0x3fff,
                set: true,
            },
            exponents: [0x11, 0x22],
        };
        let imm = r.to_imm().expect("imm");
        assert_eq!(imm, 0x7fff_2211);
        assert_eq!(ResultImm::from_imm(imm), Ok(r));
        assert!(ResultImm::from_imm(0x8000_0000).is_err());
        assert!(
            ResultImm {
                pool: PoolIndex {
                    slot: 0x4000,
                    set: false
                },
                ..r
            }
            .to_imm()
            .is_err()
        );
    }
}
