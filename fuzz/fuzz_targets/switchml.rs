#![no_main]
//! SwitchML's header and values.
//! Must never panic; the assertions check that what parses emits back.
use inabench_wire::ina::{SwitchMlHeader, SwitchMlPacket};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = SwitchMlPacket::new_checked(data) {
        let _ = (p.values(), p.value(0), p.exponent(), p.flags());
    }
    if let Ok(h) = SwitchMlHeader::parse(data) {
        let mut b = [0u8; SwitchMlHeader::LEN];
        h.emit(&mut b[..]).expect("a parsed header emits");
        assert_eq!(&b[..], &data[..SwitchMlHeader::LEN]);
    }
});
