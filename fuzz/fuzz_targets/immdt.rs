#![no_main]
//! InfiniBand ImmDt.
//! Must never panic; the assertions check that what parses emits back.
//! The body is `inabench_wire::fuzz::immdt`, which the stable test run drives too (wire/tests/fuzz_smoke.rs).
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| inabench_wire::fuzz::immdt(data));
