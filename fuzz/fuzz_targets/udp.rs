#![no_main]
//! UDP headers and the checksum.
//! Must never panic; the assertions check that what parses emits back.
use inabench_wire::udp;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = udp::Packet::new_checked(data) {
        let _ = (p.src_port(), p.dst_port(), p.payload());
        let _ = p.verify_checksum([10, 0, 0, 1], [10, 0, 0, 2]);
    }
    if let Ok(r) = udp::Repr::parse(data) {
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(&mut b[..]).expect("a parsed header emits");
    }
});
