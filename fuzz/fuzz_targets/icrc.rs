#![no_main]
//! The ICRC over arbitrary IP packets.
//! Must never panic; the assertions check that what parses emits back.
use inabench_wire::icrc;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = icrc::read(data);
    if icrc::verify(data).is_ok() {
        let mut again = data.to_vec();
        icrc::fill(&mut again).expect("a verified packet fills");
        assert_eq!(again, data);
    }
});
