#![no_main]
//! SwitchML's header and values.
//! Must never panic; the assertions check that what parses emits back.
//! The body is `inabench_wire::fuzz::switchml`, which the stable test run drives too (wire/tests/fuzz_smoke.rs).
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| inabench_wire::fuzz::switchml(data));
