//! ALEPH's flow-level simulator (max-min fair sharing): ring all-reduce steps among 1,000
//! workers on a 1,024-server fat-tree, as flow-rate updates per second.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use inabench_aleph::flowsim::FlowSim;
use inabench_aleph::topo::Topology;

fn run(topo: &Topology, caps: &[f64], steps: usize) -> u64 {
    let workers = 1000;
    let mut sim = FlowSim::new(caps.to_vec()).expect("sim");
    for step in 0..steps {
        for i in 0..workers {
            let path = topo
                .path(i, (i + 1) % workers, (step * workers + i) as u64)
                .expect("path");
            sim.add_flow(path, 97e6 / workers as f64).expect("flow");
        }
        sim.run().expect("run");
    }
    sim.stats().flow_updates
}

fn bench(c: &mut Criterion) {
    let nic = 10e9 / 8.0;
    let topo = Topology::fat_tree(8, 4, 4, 16, 32, nic).expect("fat-tree");
    let caps: Vec<f64> = topo.links().iter().map(|l| l.capacity).collect();
    let updates = run(&topo, &caps, 20);
    let mut g = c.benchmark_group("aleph_flowsim");
    g.throughput(Throughput::Elements(updates));
    g.sample_size(10);
    g.bench_function("ring_1000_workers_20_steps", |b| {
        b.iter(|| run(&topo, &caps, 20))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
