#![no_main]
//! The INA headers of NetReduce, SwitchML and ATP on arbitrary bytes.
use inabench_wire::ina::{AtpHeader, NetReduceHeader, SwitchMlHeader};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = NetReduceHeader::parse(data);
    let _ = SwitchMlHeader::parse(data);
    let _ = AtpHeader::parse(data);
});
