#![no_main]
//! InfiniBand AETH and its syndromes.
//! Must never panic; the assertions check that what parses emits back.
use inabench_wire::ib;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = ib::AethRepr::parse(data) {
        let mut b = [0u8; ib::AETH_LEN];
        r.emit(&mut b[..]).expect("a parsed AETH emits");
        assert_eq!(&b[..], &data[..ib::AETH_LEN]);
    }
});
