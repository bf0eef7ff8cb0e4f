#![no_main]
//! The Table 6 systems' endpoints (NetReduce, SwitchML, SwitchML-RDMA, ATP, ring all-reduce)
//! on the sim fabric beside a schedule of hostile frames the input spells: the body is
//! `inabench_ina::fuzz::endpoints` (no panic, no flood, exact sums where no documented finding
//! applies). The stable test run drives it too (systems/ina/tests/fuzz_smoke.rs).
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    inabench_ina::fuzz::endpoints(data);
});
