#![no_main]
//! The testbed reader (core's `Testbed::from_yaml`, parse and every later check) on arbitrary
//! text: the body is `inabench_core::testbed::fuzz` (never a panic; an error's line lies in the
//! text). The stable test run drives the same reader (harness/tests/fuzz_smoke.rs) and the body
//! (core's testbed tests).
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    inabench_core::testbed::fuzz(data);
});
