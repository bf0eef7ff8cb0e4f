//! Wire formats, smoltcp style: for each header a zero-copy view `Packet<T: AsRef<[u8]>>`
//! (`new_checked` validates the length and the structural fields, accessors read fields, setters
//! write them when `T: AsMut<[u8]>`) and a plain `Repr` with `parse`, `emit` and `buffer_len`.
//!
//! `Repr::parse` takes the view (`Repr::parse(&packet)`, smoltcp's form) or the header's bytes
//! themselves (`Repr::parse(payload)`): a view is `AsRef<[u8]>`, and `parse` validates again, so even
//! a view made with `new_unchecked` over a short buffer gives an [`Error`], never a panic.
//! `Repr::emit` likewise takes a view or a byte slice and fails (rather than panicking) when the
//! buffer is shorter than `buffer_len()` or a field does not fit its width; only
//! [`ethernet::Repr::emit`] panics on a short buffer, as smoltcp's emitters do.
//!
//! - [`ethernet`], [`ipv4`], [`udp`]: the RoCEv2 underlay (and SwitchML's UDP transport);
//! - [`ib`]: InfiniBand BTH, RETH, AETH, ImmDt and the RC/UC opcodes with the extension headers
//!   each carries (IBA Vol. 1, Sec. 9.2-9.3);
//! - [`icrc`]: the RoCEv2 invariant CRC as IBA Annex A17 defines it (checked against a packet
//!   captured on a ConnectX-4 Lx);
//! - [`ina`]: the INA headers of NetReduce, SwitchML, SwitchML-RDMA and ATP, and of Libra, P4SGD,
//!   LuWu and ALEPH;
//! - [`roce`]: whole RoCEv2 frames ([`roce::RoceV2Packet`], [`roce::FrameRepr`]) built from and
//!   parsed into their layers, INA header included;
//! - [`pcap`]: classic libpcap files of frames, for Wireshark and tshark.

/// Declares a zero-copy view over a header: the struct, its constructors and its byte access.
/// The module supplies `check_len`, which `new_checked` runs.
macro_rules! view {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// A view without any check: accessors may panic on a short buffer.
            pub const fn new_unchecked(buffer: T) -> Self {
                $name { buffer }
            }

            /// A view whose accessors cannot panic: the buffer is long enough and the
            /// structural fields (lengths, versions) are consistent.
            pub fn new_checked(buffer: T) -> Result<Self, $crate::Error> {
                let p = $name { buffer };
                p.check_len()?;
                Ok(p)
            }

            /// The underlying buffer.
            pub fn into_inner(self) -> T {
                self.buffer
            }
        }

        impl<T: AsRef<[u8]>> AsRef<[u8]> for $name<T> {
            fn as_ref(&self) -> &[u8] {
                self.buffer.as_ref()
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> AsMut<[u8]> for $name<T> {
            fn as_mut(&mut self) -> &mut [u8] {
                self.buffer.as_mut()
            }
        }
    };
}

pub mod ethernet;
#[doc(hidden)]
pub mod fuzz;
pub mod ib;
pub mod icrc;
pub mod ina;
pub mod ipv4;
pub mod node;
pub mod pcap;
pub mod roce;
pub mod udp;

pub use ina::{InaHeader, InaKind};
pub use roce::{FrameRepr, IcrcCheck, RoceV2Packet};

/// Why bytes could not be parsed, or a header could not be emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The buffer ends before the header (or the length a header declares) does.
    #[error("truncated: {what} needs {need} bytes, {have} given")]
    Truncated {
        what: &'static str,
        need: usize,
        have: usize,
    },
    /// A field holds a value the format does not allow (or a value does not fit its field).
    #[error("malformed {0}")]
    Malformed(&'static str),
    /// A checksum or CRC does not verify.
    #[error("bad {0} checksum")]
    Checksum(&'static str),
    /// Well formed, but not something this crate speaks (another EtherType, transport, opcode).
    #[error("unsupported {0}")]
    Unsupported(&'static str),
}

/// `Err(Truncated)` unless `have >= need`.
#[inline]
pub(crate) fn need(what: &'static str, have: usize, need: usize) -> Result<(), Error> {
    if have < need {
        Err(Error::Truncated { what, need, have })
    } else {
        Ok(())
    }
}

// Big-endian field access. Callers index only after `need`/`check_len`.

#[inline]
pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[inline]
pub(crate) fn be24(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([0, b[at], b[at + 1], b[at + 2]])
}

#[inline]
pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[inline]
pub(crate) fn be64(b: &[u8], at: usize) -> u64 {
    (u64::from(be32(b, at)) << 32) | u64::from(be32(b, at + 4))
}

#[inline]
pub(crate) fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

#[inline]
pub(crate) fn put24(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 3].copy_from_slice(&v.to_be_bytes()[1..]);
}

#[inline]
pub(crate) fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

#[inline]
pub(crate) fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_be_bytes());
}

/// Sets or clears the bits of `mask` in `byte`.
pub(crate) fn set_bit(byte: &mut u8, mask: u8, on: bool) {
    if on {
        *byte |= mask;
    } else {
        *byte &= !mask;
    }
}
