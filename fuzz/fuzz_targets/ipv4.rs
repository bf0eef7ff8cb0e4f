#![no_main]
//! IPv4 headers (checksum, lengths, options, fragments).
//! Must never panic; the assertions check that what parses emits back.
use inabench_wire::ipv4;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = ipv4::Packet::new_checked(data) {
        let _ = (
            p.tos(),
            p.ident(),
            p.frag_offset(),
            p.ttl(),
            p.protocol(),
            p.payload(),
        );
        let _ = (p.src(), p.dst(), p.verify_checksum());
    }
    if let Ok(r) = ipv4::Repr::parse(data) {
        let mut b = vec![0u8; r.buffer_len() + r.payload_len];
        r.emit(&mut b[..]).expect("a parsed header emits");
        assert_eq!(ipv4::Repr::parse(&b[..]), Ok(r));
    }
});
