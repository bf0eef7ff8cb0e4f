#![no_main]
//! The P4Runtime server over sequences of requests to one switch (write, read, pipeline set and
//! get, arbitration by another controller), so that the state one request leaves meets the next
//! (a register grown by RECONCILE_AND_COMMIT and then written). Must never panic, and the switch
//! must answer every later request without INTERNAL.
//! The body is `inabench_p4rt::fuzz::p4rt_sequence`, which the stable test run drives too
//! (drivers/p4rt/tests/fuzz_smoke.rs).
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| inabench_p4rt::fuzz::p4rt_sequence(data));
