#![no_main]
//! ATP's header and trailer.
//! Must never panic; the assertions check that what parses emits back.
use inabench_wire::ina::{AtpHeader, atp};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = AtpHeader::parse(data) {
        let mut b = [0u8; AtpHeader::LEN];
        h.emit(&mut b[..]).expect("a parsed header emits");
        assert_eq!(&b[..], &data[..AtpHeader::LEN]);
    }
    if let Ok(t) = atp::Trailer::parse(data) {
        let mut b = [0u8; atp::Trailer::LEN];
        t.emit(&mut b[..]).expect("a parsed trailer emits");
        assert_eq!(&b[..], &data[..atp::Trailer::LEN]);
    }
});
