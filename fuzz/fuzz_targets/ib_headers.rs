#![no_main]
//! The IB transport headers and the ICRC check on arbitrary bytes.
use inabench_wire::ib::{AethRepr, Bth, BthRepr, RethRepr};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(b) = Bth::new_checked(data) {
        let _ = BthRepr::parse(&b);
    }
    let _ = RethRepr::parse(data);
    let _ = AethRepr::parse(data);
    let _ = inabench_wire::icrc::verify(data);
    if let Ok(p) = inabench_wire::ipv4::Packet::new_checked(data) {
        let _ = inabench_wire::ipv4::Repr::parse(&p);
    }
    if let Ok(p) = inabench_wire::udp::Packet::new_checked(data) {
        let _ = inabench_wire::udp::Repr::parse(&p);
    }
});
