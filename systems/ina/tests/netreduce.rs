//! NetReduce on the sim fabric: exact sums, under loss, duplication and reordering too.

use inabench_fabric::Endpoint;
use inabench_fabric::fault::Faults;
use inabench_fabric::sim::{LinkConfig, NodeConfig, SimFabric, SimReport};
use inabench_ina::common::{AllReduceConfig, SetupNode, System, reference_sum};
use inabench_ina::netreduce::NetReduce;

fn cfg(workers: usize, elements: usize, msg_packets: f64) -> AllReduceConfig {
    AllReduceConfig {
        workers,
        elements,
        seed: 42,
        line_rate_bps: 100e9,
        mtu: 1024,
        timeout_ns: 200_000,
        knobs: vec![("msg_packets".into(), msg_packets), ("window".into(), 2.0)],
    }
}

fn run(c: &AllReduceConfig, faults: Faults) -> (Vec<SetupNode>, SimReport) {
    let setup = NetReduce.build(c).expect("build");
    let nodes = setup.into_nodes();
    let n = nodes.len();
    let host = NodeConfig {
        rx_cost_ns: 100,
        tx_cost_ns: 100,
    };
    let mut cfgs = vec![host; n];
    cfgs[c.workers] = NodeConfig {
        rx_cost_ns: 0,
        tx_cost_ns: 0,
    };
    let mut f = SimFabric::new(nodes, cfgs, c.workers as u32, LinkConfig::gbps100(), faults);
    let rep = f
        .run_until(10_000_000_000, |nodes| nodes.iter().all(Endpoint::is_done))
        .clone();
    (f.into_nodes(), rep)
}

fn check(nodes: &[SetupNode], c: &AllReduceConfig) {
    let want = reference_sum(c.seed, c.workers, c.elements);
    for n in nodes {
        if let SetupNode::Worker(w) = n {
            let got = w.result().expect("every worker has the result");
            assert_eq!(got.len(), want.len());
            let bad = got.iter().zip(&want).filter(|(a, b)| a != b).count();
            assert_eq!(bad, 0, "worker {} has {bad} wrong elements", w.id());
        }
    }
}

#[test]
fn six_workers_exact_sum() {
    let c = cfg(6, 100_000, 170.0);
    let (nodes, rep) = run(&c, Faults::default());
    assert!(rep.finished, "{rep:?}");
    check(&nodes, &c);
    let retx: u64 = nodes
        .iter()
        .filter_map(|n| {
            if let SetupNode::Worker(w) = n {
                Some(w.stats().retransmissions)
            } else {
                None
            }
        })
        .sum();
    assert_eq!(retx, 0, "no loss, no retransmission");
}

#[test]
fn exact_under_loss_duplication_and_reordering() {
    for (i, loss) in [0.001, 0.01].into_iter().enumerate() {
        let c = cfg(6, 60_000, 16.0);
        let faults = Faults {
            loss,
            duplicate: 0.01,
            reorder: 0.01,
            reorder_delay_ns: 5_000,
            seed: 7 + i as u64,
        };
        let (nodes, rep) = run(&c, faults);
        assert!(rep.finished, "loss {loss}: {rep:?}");
        assert!(rep.faults.dropped > 0 && rep.faults.duplicated > 0 && rep.faults.reordered > 0);
        check(&nodes, &c);
        let retx: u64 = nodes
            .iter()
            .filter_map(|n| {
                if let SetupNode::Worker(w) = n {
                    Some(w.stats().retransmissions)
                } else {
                    None
                }
            })
            .sum();
        assert!(retx > 0, "losses were recovered by retransmission");
    }
}

#[test]
fn accelerator_drops_packets_whose_first_packet_was_lost() {
    // heavy loss makes first packets go missing; the run must still end exact
    let c = cfg(3, 20_000, 8.0);
    let (nodes, rep) = run(
        &c,
        Faults {
            loss: 0.05,
            seed: 3,
            ..Faults::default()
        },
    );
    assert!(rep.finished);
    check(&nodes, &c);
    let dropped = nodes
        .iter()
        .find_map(|n| {
            if let SetupNode::Switch(s) = n {
                Some(s.stats().dropped)
            } else {
                None
            }
        })
        .unwrap_or(0);
    assert!(
        dropped > 0,
        "the accelerator dropped packets of messages whose first packet was lost"
    );
}

#[test]
fn switch_ports_overhead_comes_from_the_wiring() {
    let c = cfg(6, 1_000, 170.0);
    let setup = NetReduce.build(&c).expect("build");
    let s = setup.switch.stats();
    assert_eq!((s.ports_used, s.ports_total), (6, 12));
    assert!((s.overhead_fraction - 0.5).abs() < 1e-12);
}
