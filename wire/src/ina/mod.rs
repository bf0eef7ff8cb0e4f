//! The INA headers of the systems NetReduce's Table 6 compares, each as its paper describes it
//! and, where the paper gives no widths, as the authors' released code lays it out (or, where
//! there is no code, as they most plausibly built it; every such choice is said where it is made).
//!
//! | system | where the INA metadata rides | module |
//! |---|---|---|
//! | NetReduce | the first 16 bytes of each RDMA WRITE message, so in its first (or only) packet, right after the RETH | [`netreduce`] |
//! | SwitchML | an 8-byte header after UDP (port 0xbee0), then 4-byte values | [`switchml`] |
//! | SwitchML-RDMA | no header of its own: UC RDMA WRITE (with immediate) whose R_Key holds the pool index, ImmDt the exponents, DestQP the worker | [`switchml_rdma`] |
//! | ATP | a 14-byte header after IPv4, 62 values, a 12-byte trailer | [`atp`] |
//!
//! and the headers of the other four papers' systems (layouts ours where the paper gives none):
//!
//! | system | where | module |
//! |---|---|---|
//! | Libra | a 16-byte header after UDP, then key-value pairs | [`libra`] |
//! | P4SGD | a 10-byte header after Ethernet (EtherType 0x88B5), then values | [`p4sgd`] |
//! | LuWu | a 16-byte header after UDP, then values | [`luwu`] |
//! | ALEPH | a 16-byte header after UDP, then 128 values; and its TCP service's chunk header | [`aleph`] |

pub mod aleph;
pub mod atp;
pub mod libra;
pub mod luwu;
pub mod netreduce;
pub mod p4sgd;
pub mod switchml;
pub mod switchml_rdma;

pub use atp::{Packet as AtpPacket, Repr as AtpHeader};
pub use netreduce::{Packet as NetReducePacket, Repr as NetReduceHeader};
pub use switchml::{Packet as SwitchMlPacket, Repr as SwitchMlHeader};

use crate::Error;

/// Which INA header a payload starts with (for [`crate::RoceV2Packet::parse`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum InaKind {
    /// No INA header: the payload is the application's.
    #[default]
    None,
    /// NetReduce: only the first (or only) packet of a message carries the header, marked by the
    /// InetTag; other packets have none.
    NetReduce,
    /// SwitchML's header at the start of every packet's payload.
    SwitchMl,
    /// ATP's header at the start of every packet's payload.
    Atp,
}

/// An INA header that rides at the start of a payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InaHeader {
    NetReduce(NetReduceHeader),
    SwitchMl(SwitchMlHeader),
    Atp(AtpHeader),
}

impl InaHeader {
    pub fn kind(&self) -> InaKind {
        match self {
            InaHeader::NetReduce(_) => InaKind::NetReduce,
            InaHeader::SwitchMl(_) => InaKind::SwitchMl,
            InaHeader::Atp(_) => InaKind::Atp,
        }
    }

    /// Bytes of the header.
    pub fn buffer_len(&self) -> usize {
        match self {
            InaHeader::NetReduce(h) => h.buffer_len(),
            InaHeader::SwitchMl(h) => h.buffer_len(),
            InaHeader::Atp(h) => h.buffer_len(),
        }
    }

    pub fn emit<B: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, out: &mut B) -> Result<(), Error> {
        match self {
            InaHeader::NetReduce(h) => h.emit(out),
            InaHeader::SwitchMl(h) => h.emit(out),
            InaHeader::Atp(h) => h.emit(out),
        }
    }
}
