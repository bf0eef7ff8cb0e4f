//! Wire formats, smoltcp style: for each header a zero-copy view `Packet<T: AsRef<[u8]>>`
//! (`new_checked` validates the length, accessors read fields, setters write them when
//! `T: AsMut<[u8]>`) and a plain `Repr` with `parse` and `emit`. Parsing never panics on short or
//! malformed input: it returns an [`Error`].
//!
//! - [`ethernet`], [`ipv4`], [`udp`]: the RoCEv2 underlay;
//! - [`ib`]: InfiniBand BTH, RETH, AETH, ImmDt and the RC/UC opcodes;
//! - [`icrc`]: the RoCEv2 invariant CRC, masked and computed as the specification (IBA Annex A17)
//!   and Linux's rxe define it;
//! - [`roce`]: whole RoCEv2 frames built from and parsed into their layers;
//! - [`pcap`]: classic libpcap files of frames, for Wireshark and tshark.
//!
//! - [`ina`]: the INA headers of NetReduce, SwitchML, SwitchML-RDMA and ATP.

pub mod ethernet;
pub mod ib;
pub mod icrc;
pub mod ina;
pub mod ipv4;
pub mod pcap;
pub mod roce;
pub mod udp;

/// Why a frame could not be parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("truncated: {what} needs {need} bytes, {have} given")]
    Truncated {
        what: &'static str,
        need: usize,
        have: usize,
    },
    #[error("malformed {0}")]
    Malformed(&'static str),
    #[error("bad {0} checksum")]
    Checksum(&'static str),
    #[error("unsupported {0}")]
    Unsupported(&'static str),
}

pub(crate) fn need(what: &'static str, have: usize, need: usize) -> Result<(), Error> {
    if have < need {
        Err(Error::Truncated { what, need, have })
    } else {
        Ok(())
    }
}

pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

pub(crate) fn be24(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([0, b[at], b[at + 1], b[at + 2]])
}

pub(crate) fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

pub(crate) fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

pub(crate) fn put24(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 3].copy_from_slice(&v.to_be_bytes()[1..]);
}
