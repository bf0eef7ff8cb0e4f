#![no_main]
//! ALEPH's testbed aggregation state machines, the user-space service's slot table and the
//! members' Gradient Receiver, beside hostile frames the input spells among a clean run's: the
//! body is `inabench_aleph::fuzz::slots` (no panic; exact aggregates, each completed once,
//! whenever no hostile frame was taken). The stable test run drives it too
//! (systems/aleph/tests/fuzz_slots.rs).
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    inabench_aleph::fuzz::slots(data);
});
