#![no_main]
//! InfiniBand ImmDt.
//! Must never panic; the assertions check that what parses emits back.
use inabench_wire::ib;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = ib::ImmDtRepr::parse(data) {
        let mut b = [0u8; ib::IMMDT_LEN];
        r.emit(&mut b[..]).expect("a parsed ImmDt emits");
        assert_eq!(&b[..], &data[..ib::IMMDT_LEN]);
    }
});
