#![no_main]
//! P4SGD's endpoints (worker transport and switch program) and its baselines' hosts (MPI
//! recursive doubling, NCCL ring and tree, with their forwarding switch) on the sim fabric
//! beside a schedule of hostile frames the input spells: the body is
//! `inabench_p4sgd::fuzz::endpoints` (no panic, no flood, every all-reduce exact and delivered
//! once where no documented finding applies). The stable test run drives it too
//! (systems/p4sgd/tests/fuzz_smoke.rs).
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    inabench_p4sgd::fuzz::endpoints(data);
});
