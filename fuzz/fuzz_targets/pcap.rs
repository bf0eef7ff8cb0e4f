#![no_main]
//! The pcap reader, and the frames in the capture.
//! Must never panic; the assertions check that what parses emits back.
use inabench_wire::pcap::PcapReader;
use inabench_wire::roce::FrameRepr;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = PcapReader::new(data) {
        for rec in r.flatten() {
            let _ = FrameRepr::parse(rec.data);
        }
    }
});
