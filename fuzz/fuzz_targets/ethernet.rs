#![no_main]
//! Ethernet II headers.
//! Must never panic; the assertions check that what parses emits back.
use inabench_wire::ethernet;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = ethernet::Repr::parse(data);
    if let Ok(p) = ethernet::Packet::new_checked(data) {
        let _ = (p.dst(), p.src(), p.ethertype(), p.payload());
        if let Ok(r) = ethernet::Repr::parse(&p) {
            let mut b = [0u8; ethernet::HEADER_LEN];
            r.emit(&mut b[..]);
            assert_eq!(ethernet::Repr::parse(&b[..]), Ok(r));
        }
    }
});
