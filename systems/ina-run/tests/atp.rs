//! ATP on the sim fabric: exact sums through the switch and the parameter server, collisions
//! and resends under loss, and the recirculation the Tofino model counts.

#[path = "../../ina/tests/support/mod.rs"]
mod support;
use inabench_fabric::fault::Faults;
use inabench_ina::atp::Atp;
use inabench_ina::common::{AllReduceConfig, counter_sum, switch_stats, total_retransmissions};
use inabench_ina_run::drive::run_sim;
use support::check;

fn cfg(elements: usize, knobs: Vec<(String, f64)>) -> AllReduceConfig {
    AllReduceConfig {
        workers: 6,
        elements,
        seed: 11,
        line_rate_bps: 100e9,
        mtu: 1024,
        timeout_ns: 50_000,
        knobs,
    }
}

#[test]
fn exact_sum_and_half_the_pipeline_spent_on_recirculation() {
    let c = cfg(62 * 500 + 7, vec![]);
    let (nodes, rep) = run_sim(&Atp, &c, Faults::default(), 0, 10_000_000_000).expect("run");
    assert!(rep.finished);
    check(&nodes, &c);
    assert_eq!(total_retransmissions(&nodes), 0);
    let s = switch_stats(&nodes).expect("switch");
    // every packet (6 x 501 contributions and the 501 ACKs, plus collisions' forwards) took two passes
    assert!(s.recirculations >= 6 * 501 + 501, "{s:?}");
    assert!((s.overhead_fraction - 0.5).abs() < 1e-9, "{s:?}");
}

#[test]
fn collisions_go_to_the_parameter_server_and_still_sum_exactly() {
    // 16 aggregators for a 128-packet window: most packets collide
    let c = cfg(62 * 400, vec![("atp_pool".into(), 16.0)]);
    let (nodes, rep) = run_sim(&Atp, &c, Faults::default(), 0, 10_000_000_000).expect("run");
    assert!(rep.finished);
    check(&nodes, &c);
    assert!(
        counter_sum(&nodes, "collisions") > 100,
        "collisions happened"
    );
    assert!(counter_sum(&nodes, "ps_partial_or_raw") > 0);
}

#[test]
fn loss_duplication_and_reordering_are_survived_exactly_once() {
    let c = cfg(62 * 800, vec![]);
    let f = Faults {
        loss: 0.01,
        duplicate: 0.01,
        reorder: 0.01,
        reorder_delay_ns: 5_000,
        seed: 3,
    };
    let (nodes, rep) = run_sim(&Atp, &c, f, 0, 20_000_000_000).expect("run");
    assert!(rep.finished && rep.faults.dropped > 0);
    check(&nodes, &c);
    assert!(total_retransmissions(&nodes) > 0);
}
