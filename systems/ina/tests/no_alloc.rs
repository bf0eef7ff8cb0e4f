//! NetReduce on the sim fabric allocates (almost) nothing per frame in the steady state: the
//! hosts build their data and ACK frames, and the FPGA accelerator its aggregates and forwarded
//! ACKs, into buffers from a `BufPool` that the fabric refills through `Endpoint::recycle`.
//! Before (issue #22), every frame sent cost at least one allocation (`FrameRepr::build`'s
//! `Vec`), and every aggregate several (the held payloads, the sum, its clone, the
//! accumulator), so this test failed there with over one allocation per event. The same for
//! SwitchML (its worker built every frame in a new `Vec` and parsed every result into one).

mod support;
use inabench_fabric::sim::{LinkConfig, NodeConfig};
use inabench_fabric::testing::{Counting, Group, allocations};
use inabench_ina::common::{AllReduceConfig, SetupNode, System};
use inabench_ina::netreduce::NetReduce;
use inabench_ina::switchml::SwitchMl;

#[global_allocator]
static ALLOC: Counting = Counting;

fn cfg(float: bool) -> AllReduceConfig {
    let mut knobs = vec![("msg_packets".into(), 16.0), ("window".into(), 4.0)];
    if float {
        knobs.push(("float".into(), 1.0));
    }
    AllReduceConfig {
        workers: 6,
        elements: 1_600_000,
        seed: 42,
        line_rate_bps: 100e9,
        mtu: 1024,
        timeout_ns: 200_000,
        knobs,
    }
}

/// Runs the system on sim, stepped by a `Group`; `snapshot_at`: the event after which the
/// allocation count is taken.
/// Returns (events, allocations from the snapshot to the end, the nodes).
fn run(sys: &dyn System, c: &AllReduceConfig, snapshot_at: u64) -> (u64, u64, Vec<SetupNode>) {
    let nodes = sys.build(c).expect("build").into_nodes();
    let cfgs = vec![
        NodeConfig {
            rx_cost_ns: 100,
            tx_cost_ns: 100,
        };
        nodes.len()
    ];
    let mut g = Group::builder()
        .link(LinkConfig::gbps100())
        .switch(c.workers as u32)
        .costs(cfgs)
        .count_all()
        .limit_ns(u64::MAX)
        .build(nodes);
    let mut events = 0u64;
    let mut at_snapshot = None;
    let mut finished = false;
    while g.step().is_some() {
        events += 1;
        if events == snapshot_at {
            at_snapshot = Some(allocations());
        }
        if g.all_done() {
            finished = true;
            break;
        }
    }
    assert!(finished, "{:?}", g.report());
    let end = allocations();
    let spent = at_snapshot.map_or(0, |a| end - a);
    (events, spent, g.into_nodes())
}

#[test]
fn netreduce_on_sim_allocates_nothing_per_frame_in_the_steady_state() {
    for float in [false, true] {
        let c = cfg(float);
        // the run is deterministic: a first one counts the events, a second takes the
        // allocation count half way through
        let (events, _, _) = run(&NetReduce, &c, 0);
        let (events2, spent, nodes) = run(&NetReduce, &c, events / 2);
        assert_eq!(events, events2, "deterministic");
        if !float {
            support::check(&nodes, &c); // the exact int32 sum
        }
        let per_event = spent as f64 / (events - events / 2) as f64;
        eprintln!(
            "float {float}: {spent} allocations over the last {} of {events} events",
            events - events / 2
        );
        assert!(
            per_event < 0.01,
            "float {float}: {spent} allocations over the last {} events ({per_event} per event)",
            events - events / 2
        );
    }
}

#[test]
fn switchml_on_sim_allocates_nothing_per_frame_in_the_steady_state() {
    let c = AllReduceConfig {
        knobs: Vec::new(),
        elements: 200_000,
        ..cfg(false)
    };
    let (events, _, _) = run(&SwitchMl, &c, 0);
    let (events2, spent, nodes) = run(&SwitchMl, &c, events / 2);
    assert_eq!(events, events2, "deterministic");
    support::check(&nodes, &c);
    let per_event = spent as f64 / (events - events / 2) as f64;
    eprintln!(
        "switchml: {spent} allocations over the last {} of {events} events",
        events - events / 2
    );
    assert!(
        per_event < 0.01,
        "{spent} allocations over the last {} events ({per_event} per event)",
        events - events / 2
    );
}
