#![no_main]
//! LuWu's push/pull job (WorkerNIC and AggNIC transports, SmartSwitch; sum and max) on the sim
//! fabric beside a schedule of hostile frames the input spells: the body is
//! `inabench_luwu::fuzz::endpoints` (no panic, no flood, an exact job where no documented
//! finding applies). The stable test run drives it too (systems/luwu/tests/fuzz_smoke.rs).
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    inabench_luwu::fuzz::endpoints(data);
});
