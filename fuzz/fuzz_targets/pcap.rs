#![no_main]
//! The pcap reader, and the frames in the capture.
//! Must never panic; the assertions check that what parses emits back.
//! The body is `inabench_wire::fuzz::pcap`, which the stable test run drives too (wire/tests/fuzz_smoke.rs).
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| inabench_wire::fuzz::pcap(data));
