#![no_main]
//! The P4Runtime server's request handling: arbitrary bytes as write, read, pipeline set and get
//! requests to the software switch. Must never panic; a request without the primary's election
//! id must be refused and leave the switch as it was.
//! The body is `inabench_p4rt::fuzz::p4rt`, which the stable test run drives too (drivers/p4rt/tests/fuzz_smoke.rs).
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| inabench_p4rt::fuzz::p4rt(data));
