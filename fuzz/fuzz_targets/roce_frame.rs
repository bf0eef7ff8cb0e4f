#![no_main]
//! Whole RoCEv2 frames: Ethernet, IPv4, UDP, BTH and extensions, ICRC, INA headers,
//! SwitchML-RDMA's metadata. What parses must build back to a frame that parses the same.
//! Must never panic; the assertions check that what parses emits back.
//! The body is `inabench_wire::fuzz::roce_frame`, which the stable test run drives too (wire/tests/fuzz_smoke.rs).
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| inabench_wire::fuzz::roce_frame(data));
