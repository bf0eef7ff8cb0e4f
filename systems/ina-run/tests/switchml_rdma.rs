//! SwitchML-RDMA on the sim fabric: exact sums over UC RDMA WRITEs, packets linked by PSN,
//! loss handled by the application, results whose ICRC the switch could not recompute, and the
//! loopback ports of the chained pipelines.

#[path = "../../ina/tests/support/mod.rs"]
mod support;
use inabench_fabric::fault::Faults;
use inabench_ina::common::{AllReduceConfig, counter_sum, switch_stats, total_retransmissions};
use inabench_ina::switchml_rdma::SwitchMlRdma;
use inabench_ina_run::drive::run_sim_tapped;
use inabench_wire::ib::opcode;
use inabench_wire::roce::{FrameRepr, IcrcCheck};
use support::check;

fn cfg(elements: usize) -> AllReduceConfig {
    AllReduceConfig {
        workers: 6,
        elements,
        seed: 5,
        line_rate_bps: 100e9,
        mtu: 1024,
        timeout_ns: 50_000,
        knobs: vec![],
    }
}

#[test]
fn exact_sum_uc_writes_and_three_quarters_of_the_ports_in_loopback() {
    let c = cfg(192 * 300 + 5);
    let dir = std::env::temp_dir().join(format!("smlr-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let pcap = dir.join("run.pcap");
    let (nodes, rep) = run_sim_tapped(
        &SwitchMlRdma,
        &c,
        Faults::default(),
        0,
        10_000_000_000,
        Some(&pcap),
    )
    .expect("run");
    assert!(rep.finished);
    check(&nodes, &c);
    assert_eq!(total_retransmissions(&nodes), 0);
    let s = switch_stats(&nodes).expect("switch");
    assert!((s.overhead_fraction - 0.75).abs() < 1e-9, "{s:?}");
    // 768 bytes per packet: four passes, i.e. three through the chained pipelines
    assert_eq!(s.recirculations, 3 * 6 * 301);

    // what went over the wire: worker packets are UC WRITEs with a valid ICRC; the switch's
    // results are UC WRITE Only with Immediate whose ICRC no longer matches
    let bytes = std::fs::read(&pcap).expect("pcap");
    let mut reader = inabench_wire::pcap::PcapReader::new(&bytes).expect("pcap parses");
    let (mut writes, mut results) = (0, 0);
    while let Some(f) = reader.next_record() {
        let f = f.expect("record");
        let (fr, _) = FrameRepr::parse_with(f.data, IcrcCheck::Ignore).expect("RoCEv2");
        assert_eq!(fr.bth.opcode & opcode::TRANSPORT_MASK, opcode::UC);
        if fr.bth.dest_qp & 0x80_0000 != 0 {
            writes += 1;
            assert!(
                FrameRepr::parse(f.data).is_ok(),
                "worker frames carry a good ICRC"
            );
        } else {
            results += 1;
            assert_eq!(fr.bth.opcode, opcode::UC_RDMA_WRITE_ONLY_IMM);
            assert!(
                FrameRepr::parse(f.data).is_err(),
                "a switch-rewritten frame keeps the old ICRC"
            );
        }
    }
    assert_eq!(writes, 6 * 301);
    assert_eq!(results, 6 * 301);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn application_level_resend_survives_loss_duplication_and_reordering() {
    let c = cfg(192 * 600);
    let f = Faults {
        loss: 0.01,
        duplicate: 0.01,
        reorder: 0.01,
        reorder_delay_ns: 500,
        seed: 8,
    };
    let (nodes, rep) = run_sim_tapped(&SwitchMlRdma, &c, f, 0, 20_000_000_000, None).expect("run");
    assert!(rep.finished && rep.faults.dropped > 0);
    check(&nodes, &c);
    assert!(total_retransmissions(&nodes) > 0);
    assert!(
        counter_sum(&nodes, "unlinked_dropped") > 0,
        "a lost first packet drops the rest of its message"
    );
}
