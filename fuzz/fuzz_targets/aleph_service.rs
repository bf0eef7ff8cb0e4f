#![no_main]
//! ALEPH's sans-IO Aggregation Service and members (Algorithm 2, `inabench_aleph::service`)
//! beside arbitrary frames the input spells, interleaved with a valid run: the body is
//! `inabench_aleph::fuzz_service::service` (no panic, bounded sends and frames in flight, exact
//! aggregates whenever every junk frame was refused or had no effect). Its stable smoke test is
//! in that module.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    inabench_aleph::fuzz_service::service(data);
});
