//! InfiniBand transport headers as RoCEv2 carries them after UDP port 4791: the Base Transport
//! Header ([`bth`]), the RDMA Extended Transport Header ([`reth`]), the ACK Extended Transport
//! Header ([`aeth`]) and Immediate Data ([`immdt`]), with the RC and UC opcodes and the extension
//! headers each one carries (IBA Vol. 1, Sec. 9.2-9.3 and its OpCode table).

pub mod aeth;
pub mod bth;
pub mod immdt;
pub mod reth;

pub use aeth::{NakCode, Packet as Aeth, Repr as AethRepr, Syndrome};
pub use bth::{Packet as Bth, Repr as BthRepr};
pub use immdt::{Packet as ImmDt, Repr as ImmDtRepr};
pub use reth::{Packet as Reth, Repr as RethRepr};

use crate::Error;

pub const BTH_LEN: usize = bth::HEADER_LEN;
pub const RETH_LEN: usize = reth::HEADER_LEN;
pub const AETH_LEN: usize = aeth::HEADER_LEN;
pub const IMMDT_LEN: usize = immdt::HEADER_LEN;
/// The default partition key (full membership of the default partition).
pub const DEFAULT_PKEY: u16 = 0xffff;
/// PSNs, QPNs and MSNs are 24-bit.
pub const PSN_MASK: u32 = 0x00ff_ffff;
pub const QPN_MASK: u32 = 0x00ff_ffff;

/// BTH opcodes: the transport in the top three bits (RC 000, UC 001), the operation in the low
/// five. `RC | WRITE_FIRST` and [`RC_RDMA_WRITE_FIRST`](opcode::RC_RDMA_WRITE_FIRST) are the same
/// byte.
pub mod opcode {
    /// Reliable Connection.
    pub const RC: u8 = 0x00;
    /// Unreliable Connection (SwitchML-RDMA's transport).
    pub const UC: u8 = 0x20;
    /// The transport bits.
    pub const TRANSPORT_MASK: u8 = 0xe0;
    /// The operation bits.
    pub const OPERATION_MASK: u8 = 0x1f;

    pub const SEND_FIRST: u8 = 0x00;
    pub const SEND_MIDDLE: u8 = 0x01;
    pub const SEND_LAST: u8 = 0x02;
    pub const SEND_LAST_IMM: u8 = 0x03;
    pub const SEND_ONLY: u8 = 0x04;
    pub const SEND_ONLY_IMM: u8 = 0x05;
    pub const WRITE_FIRST: u8 = 0x06;
    pub const WRITE_MIDDLE: u8 = 0x07;
    pub const WRITE_LAST: u8 = 0x08;
    pub const WRITE_LAST_IMM: u8 = 0x09;
    pub const WRITE_ONLY: u8 = 0x0a;
    pub const WRITE_ONLY_IMM: u8 = 0x0b;
    /// RC only.
    pub const ACKNOWLEDGE: u8 = 0x11;

    pub const RC_SEND_FIRST: u8 = RC | SEND_FIRST;
    pub const RC_SEND_MIDDLE: u8 = RC | SEND_MIDDLE;
    pub const RC_SEND_LAST: u8 = RC | SEND_LAST;
    pub const RC_SEND_LAST_IMM: u8 = RC | SEND_LAST_IMM;
    pub const RC_SEND_ONLY: u8 = RC | SEND_ONLY;
    pub const RC_SEND_ONLY_IMM: u8 = RC | SEND_ONLY_IMM;
    pub const RC_RDMA_WRITE_FIRST: u8 = RC | WRITE_FIRST;
    pub const RC_RDMA_WRITE_MIDDLE: u8 = RC | WRITE_MIDDLE;
    pub const RC_RDMA_WRITE_LAST: u8 = RC | WRITE_LAST;
    pub const RC_RDMA_WRITE_LAST_IMM: u8 = RC | WRITE_LAST_IMM;
    pub const RC_RDMA_WRITE_ONLY: u8 = RC | WRITE_ONLY;
    pub const RC_RDMA_WRITE_ONLY_IMM: u8 = RC | WRITE_ONLY_IMM;
    pub const RC_ACKNOWLEDGE: u8 = RC | ACKNOWLEDGE;

    pub const UC_SEND_FIRST: u8 = UC | SEND_FIRST;
    pub const UC_SEND_MIDDLE: u8 = UC | SEND_MIDDLE;
    pub const UC_SEND_LAST: u8 = UC | SEND_LAST;
    pub const UC_SEND_LAST_IMM: u8 = UC | SEND_LAST_IMM;
    pub const UC_SEND_ONLY: u8 = UC | SEND_ONLY;
    pub const UC_SEND_ONLY_IMM: u8 = UC | SEND_ONLY_IMM;
    pub const UC_RDMA_WRITE_FIRST: u8 = UC | WRITE_FIRST;
    pub const UC_RDMA_WRITE_MIDDLE: u8 = UC | WRITE_MIDDLE;
    pub const UC_RDMA_WRITE_LAST: u8 = UC | WRITE_LAST;
    pub const UC_RDMA_WRITE_LAST_IMM: u8 = UC | WRITE_LAST_IMM;
    pub const UC_RDMA_WRITE_ONLY: u8 = UC | WRITE_ONLY;
    pub const UC_RDMA_WRITE_ONLY_IMM: u8 = UC | WRITE_ONLY_IMM;

    /// RoCEv2 Congestion Notification Packet (IBA Annex A17): a BTH with BECN set and 16
    /// reserved bytes. Parsed by [`BthRepr`](super::BthRepr); [`layout`](super::layout) does not
    /// speak it.
    pub const CNP: u8 = 0x81;

    /// Every opcode [`layout`](super::layout) accepts.
    pub const ALL: [u8; 25] = [
        RC_SEND_FIRST,
        RC_SEND_MIDDLE,
        RC_SEND_LAST,
        RC_SEND_LAST_IMM,
        RC_SEND_ONLY,
        RC_SEND_ONLY_IMM,
        RC_RDMA_WRITE_FIRST,
        RC_RDMA_WRITE_MIDDLE,
        RC_RDMA_WRITE_LAST,
        RC_RDMA_WRITE_LAST_IMM,
        RC_RDMA_WRITE_ONLY,
        RC_RDMA_WRITE_ONLY_IMM,
        RC_ACKNOWLEDGE,
        UC_SEND_FIRST,
        UC_SEND_MIDDLE,
        UC_SEND_LAST,
        UC_SEND_LAST_IMM,
        UC_SEND_ONLY,
        UC_SEND_ONLY_IMM,
        UC_RDMA_WRITE_FIRST,
        UC_RDMA_WRITE_MIDDLE,
        UC_RDMA_WRITE_LAST,
        UC_RDMA_WRITE_LAST_IMM,
        UC_RDMA_WRITE_ONLY,
        UC_RDMA_WRITE_ONLY_IMM,
    ];

    /// The first packet of a multi-packet message (carries the RETH for a WRITE).
    pub fn is_first(op: u8) -> bool {
        matches!(op & OPERATION_MASK, SEND_FIRST | WRITE_FIRST)
    }

    pub fn is_middle(op: u8) -> bool {
        matches!(op & OPERATION_MASK, SEND_MIDDLE | WRITE_MIDDLE)
    }

    pub fn is_last(op: u8) -> bool {
        matches!(
            op & OPERATION_MASK,
            SEND_LAST | SEND_LAST_IMM | WRITE_LAST | WRITE_LAST_IMM
        )
    }

    /// A one-packet message.
    pub fn is_only(op: u8) -> bool {
        matches!(
            op & OPERATION_MASK,
            SEND_ONLY | SEND_ONLY_IMM | WRITE_ONLY | WRITE_ONLY_IMM
        )
    }

    /// Whether the packet carries the start of a message (first or only): where NetReduce's
    /// INA header is.
    pub fn starts_message(op: u8) -> bool {
        is_first(op) || is_only(op)
    }

    /// Whether the packet carries the end of a message (last or only): the only packets whose
    /// payload may be padded (PadCnt > 0).
    pub fn ends_message(op: u8) -> bool {
        is_last(op) || is_only(op)
    }

    /// Wireshark's name of a known opcode.
    pub fn name(op: u8) -> &'static str {
        match op {
            RC_SEND_FIRST => "RC Send First",
            RC_SEND_MIDDLE => "RC Send Middle",
            RC_SEND_LAST => "RC Send Last",
            RC_SEND_LAST_IMM => "RC Send Last Immediate",
            RC_SEND_ONLY => "RC Send Only",
            RC_SEND_ONLY_IMM => "RC Send Only Immediate",
            RC_RDMA_WRITE_FIRST => "RC RDMA Write First",
            RC_RDMA_WRITE_MIDDLE => "RC RDMA Write Middle",
            RC_RDMA_WRITE_LAST => "RC RDMA Write Last",
            RC_RDMA_WRITE_LAST_IMM => "RC RDMA Write Last Immediate",
            RC_RDMA_WRITE_ONLY => "RC RDMA Write Only",
            RC_RDMA_WRITE_ONLY_IMM => "RC RDMA Write Only Immediate",
            RC_ACKNOWLEDGE => "RC Acknowledge",
            UC_SEND_FIRST => "UC Send First",
            UC_SEND_MIDDLE => "UC Send Middle",
            UC_SEND_LAST => "UC Send Last",
            UC_SEND_LAST_IMM => "UC Send Last Immediate",
            UC_SEND_ONLY => "UC Send Only",
            UC_SEND_ONLY_IMM => "UC Send Only Immediate",
            UC_RDMA_WRITE_FIRST => "UC RDMA Write First",
            UC_RDMA_WRITE_MIDDLE => "UC RDMA Write Middle",
            UC_RDMA_WRITE_LAST => "UC RDMA Write Last",
            UC_RDMA_WRITE_LAST_IMM => "UC RDMA Write Last Immediate",
            UC_RDMA_WRITE_ONLY => "UC RDMA Write Only",
            UC_RDMA_WRITE_ONLY_IMM => "UC RDMA Write Only Immediate",
            CNP => "CNP",
            _ => "unknown",
        }
    }
}

/// Which extension headers follow the BTH for an opcode, in this order: RETH, AETH, ImmDt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Layout {
    pub reth: bool,
    pub aeth: bool,
    pub immdt: bool,
    /// Whether the packet may carry a payload (an ACKNOWLEDGE carries none).
    pub payload: bool,
}

impl Layout {
    /// Bytes of extension headers after the BTH.
    pub fn ext_len(&self) -> usize {
        usize::from(self.reth) * RETH_LEN
            + usize::from(self.aeth) * AETH_LEN
            + usize::from(self.immdt) * IMMDT_LEN
    }
}

/// The header layout of an opcode (IBA Vol. 1, Sec. 9.2), or `Unsupported` for the opcodes this crate
/// does not speak (RDMA READ, atomics, the invalidate SENDs, RD, UD, CNP).
pub fn layout(op: u8) -> Result<Layout, Error> {
    use opcode::*;
    let transport = op & TRANSPORT_MASK;
    if transport != RC && transport != UC {
        return Err(Error::Unsupported("transport (only RC and UC)"));
    }
    let l = |reth, aeth, immdt| {
        Ok(Layout {
            reth,
            aeth,
            immdt,
            payload: !aeth,
        })
    };
    match op & OPERATION_MASK {
        SEND_FIRST | SEND_MIDDLE | SEND_LAST | SEND_ONLY | WRITE_MIDDLE | WRITE_LAST => {
            l(false, false, false)
        }
        SEND_LAST_IMM | SEND_ONLY_IMM | WRITE_LAST_IMM => l(false, false, true),
        WRITE_FIRST | WRITE_ONLY => l(true, false, false),
        WRITE_ONLY_IMM => l(true, false, true),
        ACKNOWLEDGE if transport == RC => l(false, true, false),
        _ => Err(Error::Unsupported("opcode")),
    }
}

#[cfg(test)]
mod tests {
    use super::opcode::*;
    use super::*;

    #[test]
    fn layouts_follow_the_iba_opcode_table() {
        let reth = [
            RC_RDMA_WRITE_FIRST,
            RC_RDMA_WRITE_ONLY,
            RC_RDMA_WRITE_ONLY_IMM,
            UC_RDMA_WRITE_FIRST,
            UC_RDMA_WRITE_ONLY,
            UC_RDMA_WRITE_ONLY_IMM,
        ];
        let imm = [
            RC_SEND_LAST_IMM,
            RC_SEND_ONLY_IMM,
            RC_RDMA_WRITE_LAST_IMM,
            RC_RDMA_WRITE_ONLY_IMM,
            UC_SEND_LAST_IMM,
            UC_SEND_ONLY_IMM,
            UC_RDMA_WRITE_LAST_IMM,
            UC_RDMA_WRITE_ONLY_IMM,
        ];
        for op in ALL {
            let l = layout(op).expect("known");
            assert_eq!(l.reth, reth.contains(&op), "{}", name(op));
            assert_eq!(l.immdt, imm.contains(&op), "{}", name(op));
            assert_eq!(l.aeth, op == RC_ACKNOWLEDGE);
            assert_eq!(l.payload, op != RC_ACKNOWLEDGE);
            assert_ne!(name(op), "unknown");
            // exactly one position per data opcode
            if op != RC_ACKNOWLEDGE {
                let n = [is_first(op), is_middle(op), is_last(op), is_only(op)]
                    .iter()
                    .filter(|x| **x)
                    .count();
                assert_eq!(n, 1, "{}", name(op));
            }
        }
        assert_eq!(layout(RC_RDMA_WRITE_ONLY_IMM).expect("known").ext_len(), 20);
        assert_eq!(UC_RDMA_WRITE_ONLY_IMM, 0x2b);
        assert_eq!(RC_ACKNOWLEDGE, 0x11);
    }

    #[test]
    fn unsupported_opcodes() {
        for op in [
            0x0c, // RC RDMA READ request
            0x10, // RC RDMA READ response only
            0x12, // RC ATOMIC ACK
            0x16, // RC SEND last with invalidate
            0x31, // UC ACK does not exist
            0x2c, // UC RDMA READ does not exist
            0x64, // UD SEND only
            CNP,
        ] {
            assert!(layout(op).is_err(), "{op:#x}");
        }
        assert_eq!(name(0x64), "unknown");
    }
}
