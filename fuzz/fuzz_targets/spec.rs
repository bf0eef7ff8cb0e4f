#![no_main]
//! The spec reader (core's `Spec::from_yaml`, parse and every later check) on arbitrary text.
//! Must never panic: any input is a spec or a `SpecError`. (A file named `spec.yaml` skips the
//! id-matches-the-file-name check, so every later check is reachable.)
//! The stable test run drives the same call (harness/tests/fuzz_smoke.rs).
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = inabench_core::spec::Spec::from_yaml(std::path::Path::new("spec.yaml"), &text);
});
