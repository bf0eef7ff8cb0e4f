//! The verbs plan against the software RoCEv2 transport (systems/ina/src/roce.rs): the same
//! messages, the same RDMA WRITE addresses and lengths (the RETH of each message's first packet),
//! the same packets per message at the path MTU, the same PSNs.

use inabench_devices::verbs::{PSN_MASK, QpPlan};
use inabench_ina::common::AllReduceConfig;
use inabench_ina::netreduce::Layout;
use inabench_ina::roce::{Addr, RcSender};
use inabench_wire::roce::FrameRepr;

fn addr(i: u8) -> Addr {
    Addr {
        mac: [2, 0, 0, 0, 0, i],
        ip: [10, 0, 0, i],
        qpn: 0x100 + u32::from(i),
    }
}

#[test]
fn one_write_per_message_with_the_transports_reth_and_packets() {
    for (elements, mtu, msg_len, psn0) in [
        (100_000usize, 1024usize, 170u32, 0u32),
        (5_000, 256, 7, PSN_MASK - 3),
        (1, 4096, 1, 0x12_3456),
        (40_000, 1024, 3, 77),
    ] {
        let cfg = AllReduceConfig {
            workers: 4,
            elements,
            seed: 1,
            line_rate_bps: 1e11,
            mtu,
            timeout_ns: 1_000_000,
            knobs: vec![("msg_packets".into(), f64::from(msg_len))],
        };
        let layout = Layout::new(&cfg).expect("layout");
        let mut plan = QpPlan::rc(
            layout.payload,
            layout.msg_len,
            layout.window,
            layout.messages,
            cfg.timeout_ns,
        );
        plan.sq_psn = psn0;
        plan.validate().expect("valid plan");
        let grad = inabench_ina::common::gradient(1, 0, elements);
        let data = layout.encode(0, &grad);
        assert_eq!(plan.region_bytes(), data.len(), "MR = the encoded gradient");
        let writes = plan.writes();
        assert_eq!(writes.len() as u32, layout.messages);
        let s = RcSender::new(
            addr(1),
            addr(2),
            psn0,
            layout.packets(),
            layout.msg_len,
            layout.window,
            cfg.timeout_ns,
        );
        let p = layout.payload as usize;
        let mut packets_of = vec![0u32; writes.len()];
        for i in 0..layout.packets() {
            let m = (i / layout.msg_len) as usize;
            let f = s
                .frame(
                    i,
                    &data[i as usize * p..(i as usize + 1) * p],
                    layout.payload,
                )
                .expect("frame");
            let (repr, payload) = FrameRepr::parse(&f).expect("parse");
            assert_eq!(payload.len(), p);
            assert_eq!(repr.bth.psn, (psn0 + i) & PSN_MASK);
            packets_of[m] += 1;
            if let Some(reth) = repr.reth {
                assert_eq!(
                    i % layout.msg_len,
                    0,
                    "RETH only on a message's first packet"
                );
                assert_eq!(reth.va, writes[m].offset, "message {m}");
                assert_eq!(reth.dma_len, writes[m].len, "message {m}");
            } else {
                assert_ne!(i % layout.msg_len, 0);
            }
        }
        for (w, n) in writes.iter().zip(&packets_of) {
            assert_eq!(w.packets, *n, "packets per WRITE at the path MTU");
        }
        println!(
            "{elements} values, MTU {mtu}, MsgLen {msg_len}: {} WRITEs of {} B, {} packets",
            writes.len(),
            plan.message_bytes(),
            layout.packets()
        );
    }
}
