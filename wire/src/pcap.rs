//! Classic libpcap files (the format of `tcpdump -w`, LINKTYPE_ETHERNET) with microsecond or
//! nanosecond timestamps, readable by Wireshark and tshark; and a reader for them.
//!
//! ```text
//! global header  magic (0xa1b2c3d4 us / 0xa1b23c4d ns), version 2.4, thiszone 0, sigfigs 0,
//!                snaplen, linktype (1 = Ethernet)                          24 bytes
//! each record    ts_sec, ts_usec or ts_nsec, incl_len, orig_len            16 bytes, then the frame
//! ```
//!
//! The writer always writes little-endian (the magic tells a reader the order); the reader takes
//! either order.

use crate::{Error, need};
use std::io::Write;

pub const MAGIC_MICROS: u32 = 0xa1b2_c3d4;
pub const MAGIC_NANOS: u32 = 0xa1b2_3c4d;
pub const LINKTYPE_ETHERNET: u32 = 1;
/// tcpdump's default snapshot length.
pub const DEFAULT_SNAPLEN: u32 = 262_144;
const GLOBAL_LEN: usize = 24;
const RECORD_LEN: usize = 16;

/// Timestamp resolution of a capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Resolution {
    Micros,
    #[default]
    Nanos,
}

/// Writes frames to a pcap stream. Frames longer than the snapshot length are cut to it (the
/// record keeps the original length).
#[derive(Debug)]
pub struct PcapWriter<W: Write> {
    out: W,
    resolution: Resolution,
    snaplen: u32,
}

impl<W: Write> PcapWriter<W> {
    /// A nanosecond-resolution capture with the default snapshot length; writes the global header.
    pub fn new(out: W) -> std::io::Result<Self> {
        Self::with_options(out, Resolution::Nanos, DEFAULT_SNAPLEN)
    }

    /// Writes the global header.
    pub fn with_options(mut out: W, resolution: Resolution, snaplen: u32) -> std::io::Result<Self> {
        let magic = match resolution {
            Resolution::Micros => MAGIC_MICROS,
            Resolution::Nanos => MAGIC_NANOS,
        };
        let mut h = [0u8; GLOBAL_LEN];
        h[0..4].copy_from_slice(&magic.to_le_bytes());
        h[4..6].copy_from_slice(&2u16.to_le_bytes());
        h[6..8].copy_from_slice(&4u16.to_le_bytes());
        // thiszone and sigfigs stay 0
        h[16..20].copy_from_slice(&snaplen.to_le_bytes());
        h[20..24].copy_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
        out.write_all(&h)?;
        Ok(PcapWriter {
            out,
            resolution,
            snaplen,
        })
    }

    /// Write one frame taken at `ts_ns` nanoseconds since the Unix epoch (or since any origin:
    /// tshark shows relative times too). Microsecond captures round down.
    pub fn write_packet(&mut self, ts_ns: u64, frame: &[u8]) -> std::io::Result<()> {
        let orig = u32::try_from(frame.len())
            .map_err(|_| std::io::Error::other("frame too long for pcap"))?;
        let incl = orig.min(self.snaplen);
        let secs = u32::try_from(ts_ns / 1_000_000_000)
            .map_err(|_| std::io::Error::other("timestamp past 2106 for pcap"))?;
        let frac = match self.resolution {
            Resolution::Micros => (ts_ns % 1_000_000_000) / 1_000,
            Resolution::Nanos => ts_ns % 1_000_000_000,
        } as u32;
        let mut r = [0u8; RECORD_LEN];
        r[0..4].copy_from_slice(&secs.to_le_bytes());
        r[4..8].copy_from_slice(&frac.to_le_bytes());
        r[8..12].copy_from_slice(&incl.to_le_bytes());
        r[12..16].copy_from_slice(&orig.to_le_bytes());
        self.out.write_all(&r)?;
        self.out.write_all(&frame[..incl as usize])
    }

    pub fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }

    pub fn get_ref(&self) -> &W {
        &self.out
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}

/// One frame of a capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Record<'a> {
    /// Nanoseconds since the capture's epoch.
    pub ts_ns: u64,
    /// The frame's length on the wire (`data` may be shorter, cut at the snapshot length).
    pub orig_len: u32,
    pub data: &'a [u8],
}

/// Reads a classic pcap capture from memory (either byte order, either resolution).
#[derive(Debug, Clone)]
pub struct PcapReader<'a> {
    rest: &'a [u8],
    big_endian: bool,
    pub resolution: Resolution,
    pub snaplen: u32,
    pub linktype: u32,
}

impl<'a> PcapReader<'a> {
    /// Read the global header; an unknown magic is `Unsupported` (pcapng, for one).
    pub fn new(bytes: &'a [u8]) -> Result<Self, Error> {
        need("pcap global header", bytes.len(), GLOBAL_LEN)?;
        let le = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        let be = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        let (big_endian, resolution) = match (le, be) {
            (MAGIC_MICROS, _) => (false, Resolution::Micros),
            (MAGIC_NANOS, _) => (false, Resolution::Nanos),
            (_, MAGIC_MICROS) => (true, Resolution::Micros),
            (_, MAGIC_NANOS) => (true, Resolution::Nanos),
            _ => return Err(Error::Unsupported("pcap magic (classic pcap only)")),
        };
        let r = PcapReader {
            rest: &bytes[GLOBAL_LEN..],
            big_endian,
            resolution,
            snaplen: 0,
            linktype: 0,
        };
        Ok(PcapReader {
            snaplen: r.u32_at(bytes, 16),
            linktype: r.u32_at(bytes, 20),
            ..r
        })
    }

    fn u32_at(&self, b: &[u8], at: usize) -> u32 {
        let w = [b[at], b[at + 1], b[at + 2], b[at + 3]];
        if self.big_endian {
            u32::from_be_bytes(w)
        } else {
            u32::from_le_bytes(w)
        }
    }

    /// The next record, `None` at the end, or an error for a cut or inconsistent record.
    pub fn next_record(&mut self) -> Option<Result<Record<'a>, Error>> {
        if self.rest.is_empty() {
            return None;
        }
        let r = self.read_record();
        if r.is_err() {
            // a cut or corrupt record: what follows cannot be framed
            self.rest = &[];
        }
        Some(r)
    }

    fn read_record(&mut self) -> Result<Record<'a>, Error> {
        let b = self.rest;
        need("pcap record header", b.len(), RECORD_LEN)?;
        let secs = u64::from(self.u32_at(b, 0));
        let frac = u64::from(self.u32_at(b, 4));
        let incl = self.u32_at(b, 8) as usize;
        let orig_len = self.u32_at(b, 12);
        let per_sec = match self.resolution {
            Resolution::Micros => 1_000_000,
            Resolution::Nanos => 1_000_000_000,
        };
        if frac >= per_sec {
            return Err(Error::Malformed("pcap timestamp fraction"));
        }
        if incl > orig_len as usize {
            return Err(Error::Malformed("pcap captured length over the original"));
        }
        need("pcap record data", b.len() - RECORD_LEN, incl)?;
        let data = &b[RECORD_LEN..RECORD_LEN + incl];
        self.rest = &b[RECORD_LEN + incl..];
        Ok(Record {
            ts_ns: secs * 1_000_000_000 + frac * (1_000_000_000 / per_sec),
            orig_len,
            data,
        })
    }
}

impl<'a> Iterator for PcapReader<'a> {
    type Item = Result<Record<'a>, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_record()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micro_and_nano_round_trip() {
        for res in [Resolution::Micros, Resolution::Nanos] {
            let mut w = PcapWriter::with_options(Vec::new(), res, 8).expect("header");
            w.write_packet(1_500_000_123_456, &[1, 2, 3])
                .expect("write");
            w.write_packet(2_000_000_000, &[9; 10]).expect("write");
            let bytes = w.into_inner();
            let magic = if res == Resolution::Micros {
                [0xd4, 0xc3, 0xb2, 0xa1]
            } else {
                [0x4d, 0x3c, 0xb2, 0xa1]
            };
            assert_eq!(bytes[..4], magic);
            assert_eq!(bytes.len(), 24 + 16 + 3 + 16 + 8);
            let r = PcapReader::new(&bytes).expect("header");
            assert_eq!((r.resolution, r.snaplen, r.linktype), (res, 8, 1));
            let recs: Vec<Record> = r.map(|x| x.expect("record")).collect();
            let first_ts = if res == Resolution::Micros {
                1_500_000_123_000
            } else {
                1_500_000_123_456
            };
            assert_eq!(
                recs,
                vec![
                    Record {
                        ts_ns: first_ts,
                        orig_len: 3,
                        data: &[1, 2, 3]
                    },
                    Record {
                        ts_ns: 2_000_000_000,
                        orig_len: 10,
                        data: &[9; 8]
                    }
                ]
            );
        }
    }

    #[test]
    fn big_endian_captures_read() {
        let mut b = vec![0xa1, 0xb2, 0xc3, 0xd4, 0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0];
        b.extend_from_slice(&[0, 0, 0xff, 0xff, 0, 0, 0, 1]);
        b.extend_from_slice(&[0, 0, 0, 5, 0, 0, 0, 7, 0, 0, 0, 2, 0, 0, 0, 2, 0xaa, 0xbb]);
        let mut r = PcapReader::new(&b).expect("header");
        assert_eq!(r.snaplen, 65_535);
        let rec = r.next().expect("one").expect("record");
        assert_eq!((rec.ts_ns, rec.data), (5_000_007_000, &[0xaa, 0xbb][..]));
        assert!(r.next().is_none());
    }

    #[test]
    fn malformed_are_errors() {
        let mut w = PcapWriter::new(Vec::new()).expect("header");
        w.write_packet(0, &[1, 2, 3, 4]).expect("write");
        let good = w.into_inner();
        for n in 0..24 {
            assert!(PcapReader::new(&good[..n]).is_err());
        }
        for n in 25..good.len() {
            let mut r = PcapReader::new(&good[..n]).expect("header");
            assert!(
                matches!(r.next(), Some(Err(Error::Truncated { .. }))),
                "{n}"
            );
            assert!(r.next().is_none(), "stops after an error");
        }
        assert!(matches!(
            PcapReader::new(&[
                0x0a, 0x0d, 0x0d, 0x0a, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
            ]),
            Err(Error::Unsupported(_))
        ));
        let mut frac = good.clone();
        frac[28..32].copy_from_slice(&1_000_000_000u32.to_le_bytes());
        assert!(matches!(
            PcapReader::new(&frac).expect("header").next(),
            Some(Err(Error::Malformed(_)))
        ));
        let mut incl = good.clone();
        incl[36..40].copy_from_slice(&3u32.to_le_bytes());
        assert!(matches!(
            PcapReader::new(&incl).expect("header").next(),
            Some(Err(Error::Malformed(_)))
        ));
        let mut w = PcapWriter::new(Vec::new()).expect("header");
        assert!(w.write_packet(u64::MAX, &[]).is_err());
    }
}
