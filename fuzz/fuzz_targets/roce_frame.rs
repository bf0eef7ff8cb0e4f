#![no_main]
//! Whole RoCEv2 frames: Ethernet, IPv4, UDP, BTH and extensions, ICRC, INA headers,
//! SwitchML-RDMA's metadata. What parses must build back to a frame that parses the same.
//! Must never panic; the assertions check that what parses emits back.
use inabench_wire::ina::switchml_rdma;
use inabench_wire::roce::{FrameRepr, IcrcCheck};
use inabench_wire::{InaKind, RoceV2Packet};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for check in [IcrcCheck::Verify, IcrcCheck::Ignore] {
        if let Ok((repr, payload)) = FrameRepr::parse_with(data, check) {
            let again = repr.build(payload).expect("a parsed frame builds");
            let (back, p) = FrameRepr::parse(&again).expect("a built frame parses");
            assert_eq!(back, repr);
            assert_eq!(p, payload);
            if let Ok(m) = switchml_rdma::Repr::extract(&repr) {
                let mut f = repr;
                m.apply(&mut f).expect("extracted metadata applies");
                assert_eq!(switchml_rdma::Repr::extract(&f), Ok(m));
            }
        }
        for kind in [
            InaKind::None,
            InaKind::NetReduce,
            InaKind::SwitchMl,
            InaKind::Atp,
        ] {
            if let Ok(p) = RoceV2Packet::parse_with(data, kind, check) {
                let again = p.build().expect("a parsed packet builds");
                assert_eq!(RoceV2Packet::parse(&again, kind), Ok(p));
            }
        }
    }
});
