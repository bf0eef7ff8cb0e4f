#![no_main]
//! Libra's endpoints (worker, switch program, parameter server; Libra as published, with every
//! push checked, and PS-lite) on the sim fabric beside a schedule of hostile frames the input
//! spells: the body is `inabench_libra::fuzz::endpoints` (no panic, no flood, exact sums where
//! no documented finding applies). The stable test run drives it too
//! (systems/libra/tests/fuzz_smoke.rs).
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    inabench_libra::fuzz::endpoints(data);
});
