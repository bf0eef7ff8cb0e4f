#![no_main]
//! NetReduce's INA header.
//! Must never panic; the assertions check that what parses emits back.
use inabench_wire::ina::{NetReduceHeader, NetReducePacket};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = NetReduceHeader::is_first(data);
    if let Ok(p) = NetReducePacket::new_checked(data) {
        let _ = (
            p.inet_tag(),
            p.ring_id(),
            p.rank(),
            p.msg_id(),
            p.msg_len(),
            p.payload(),
        );
    }
    if let Ok(h) = NetReduceHeader::parse(data) {
        let mut b = [0u8; NetReduceHeader::LEN];
        h.emit(&mut b[..]).expect("a parsed header emits");
        assert_eq!(&b[..], &data[..NetReduceHeader::LEN]);
    }
});
