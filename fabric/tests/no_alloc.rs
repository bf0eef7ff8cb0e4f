//! No allocation per frame on the sim fabric's hot path: endpoints that send from a
//! [`BufPool`] fed by [`Endpoint::recycle`] run a long stream of frames, and the allocations
//! this thread makes in the steady state (the second half of the run) are counted with the
//! counting allocator of `fabric::testing`. Before the event slab and the recycle path, every
//! frame cost at least one allocation (its `Vec`), so this test failed.
#![cfg(feature = "testing")]

use inabench_fabric::fault::Faults;
use inabench_fabric::sim::{LinkConfig, NodeConfig, SimFabric};
use inabench_fabric::testing::{Counting, CreditRing, allocations};

#[global_allocator]
static ALLOC: Counting = Counting;

const HOSTS: u32 = 4;

#[test]
fn the_sim_fabric_allocates_nothing_per_frame_in_the_steady_state() {
    const FRAMES: u64 = 20_000;
    // hosts send 1 KB frames to their successor through a forwarding switch, 8 in flight, with a
    // credit frame back per frame (as `bench/benches/fabric.rs`)
    let nodes = CreditRing::nodes(HOSTS, FRAMES, 8);
    let cfg = vec![
        NodeConfig {
            rx_cost_ns: 50,
            tx_cost_ns: 50
        };
        HOSTS as usize + 1
    ];
    let mut f = SimFabric::new(nodes, cfg, HOSTS, LinkConfig::gbps100(), Faults::default());
    // the allocation count when half the frames have arrived, and at the end
    let mut half: Option<(u64, u64)> = None;
    let total = u64::from(HOSTS) * FRAMES;
    let rep = f.run_until_at(u64::MAX, |_, n| {
        let r = CreditRing::received(n);
        if half.is_none() && r >= total / 2 {
            half = Some((allocations(), r));
        }
        r == total
    });
    assert!(rep.finished);
    let end = allocations();
    let (at_half, r_half) = half.expect("half way seen");
    let frames = (total - r_half) * 4; // each data frame: host->switch->host, credit back twice
    let per_frame = (end - at_half) as f64 / frames as f64;
    assert!(
        per_frame < 0.001,
        "{} allocations for {frames} frames in the steady state ({per_frame} per frame)",
        end - at_half
    );
}
