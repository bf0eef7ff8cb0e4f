//! Classic libpcap files (LINKTYPE_ETHERNET, nanosecond timestamps), readable by Wireshark and
//! tshark.

use std::io::Write;

/// Writes frames to a pcap stream.
pub struct PcapWriter<W: Write> {
    out: W,
}

impl<W: Write> PcapWriter<W> {
    /// Write the global header.
    pub fn new(mut out: W) -> std::io::Result<Self> {
        out.write_all(&0xa1b2_3c4du32.to_le_bytes())?; // nanosecond-resolution magic
        out.write_all(&2u16.to_le_bytes())?;
        out.write_all(&4u16.to_le_bytes())?;
        out.write_all(&0i32.to_le_bytes())?;
        out.write_all(&0u32.to_le_bytes())?;
        out.write_all(&65_535u32.to_le_bytes())?;
        out.write_all(&1u32.to_le_bytes())?; // LINKTYPE_ETHERNET
        Ok(PcapWriter { out })
    }

    /// Write one frame with its timestamp in nanoseconds.
    pub fn write_packet(&mut self, ts_ns: u64, frame: &[u8]) -> std::io::Result<()> {
        let len = u32::try_from(frame.len())
            .map_err(|_| std::io::Error::other("frame too long for pcap"))?;
        self.out
            .write_all(&((ts_ns / 1_000_000_000) as u32).to_le_bytes())?;
        self.out
            .write_all(&((ts_ns % 1_000_000_000) as u32).to_le_bytes())?;
        self.out.write_all(&len.to_le_bytes())?;
        self.out.write_all(&len.to_le_bytes())?;
        self.out.write_all(frame)
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}
