#![no_main]
//! InfiniBand RETH.
//! Must never panic; the assertions check that what parses emits back.
use inabench_wire::ib;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = ib::RethRepr::parse(data) {
        let mut b = [0u8; ib::RETH_LEN];
        r.emit(&mut b[..]).expect("a parsed RETH emits");
        assert_eq!(&b[..], &data[..ib::RETH_LEN]);
    }
});
