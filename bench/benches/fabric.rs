//! The sim fabric's speed: frame events per second with six hosts sending through a forwarding
//! switch (each host sends 100,000 frames of 1 KB to its successor with 16 in flight, a small
//! credit frame coming back per frame: `fabric::testing::CreditRing`). The nodes draw their frames
//! from a `BufPool` fed by `Endpoint::recycle`, as the hot endpoints do, so the figure is the
//! fabric's own rate rather than the allocator's.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use inabench_fabric::fault::Faults;
use inabench_fabric::sim::{LinkConfig, NodeConfig, SimFabric};
use inabench_fabric::testing::CreditRing;

const HOSTS: u32 = 6;
const FRAMES: u64 = 100_000;

/// Each host keeps 16 frames in flight to its successor; credits come back per frame.
fn run() -> u64 {
    let nodes = CreditRing::nodes(HOSTS, FRAMES, 16);
    let cfg = vec![
        NodeConfig {
            rx_cost_ns: 0,
            tx_cost_ns: 0
        };
        HOSTS as usize + 1
    ];
    let mut f = SimFabric::new(nodes, cfg, HOSTS, LinkConfig::gbps100(), Faults::default());
    let rep = f.run_until(u64::MAX, |n| {
        CreditRing::received(n) == u64::from(HOSTS) * FRAMES
    });
    assert!(rep.finished, "every frame arrives");
    rep.events
}

fn fabric(c: &mut Criterion) {
    let events = run();
    let mut g = c.benchmark_group("sim");
    g.throughput(Throughput::Elements(events));
    g.sample_size(10);
    g.bench_function("frame_events", |b| b.iter(run));
    g.finish();
}

criterion_group!(benches, fabric);
criterion_main!(benches);
