#![no_main]
//! InfiniBand BTH and the opcode table.
//! Must never panic; the assertions check that what parses emits back.
use inabench_wire::ib;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = ib::Bth::new_checked(data) {
        let _ = (
            p.opcode(),
            p.pad_count(),
            p.tver(),
            p.resv6a(),
            p.resv7(),
            p.payload(),
        );
        let _ = ib::layout(p.opcode());
        let _ = ib::opcode::name(p.opcode());
    }
    if let Ok(r) = ib::BthRepr::parse(data) {
        let mut b = [0u8; ib::BTH_LEN];
        r.emit(&mut b[..]).expect("a parsed BTH emits");
        assert_eq!(ib::BthRepr::parse(&b[..]), Ok(r));
    }
});
