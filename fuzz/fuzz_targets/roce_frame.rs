#![no_main]
//! Whole frames: Ethernet, IPv4, UDP, BTH and extensions, ICRC. Must never panic; what parses
//! must build back to the same bytes' headers.
use inabench_wire::roce::FrameRepr;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((repr, payload)) = FrameRepr::parse(data) {
        let again = repr.build(payload).expect("a parsed frame builds");
        let (back, p) = FrameRepr::parse(&again).expect("a built frame parses");
        assert_eq!(back, repr);
        assert_eq!(p, payload);
    }
});
