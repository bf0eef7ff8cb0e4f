//! Training steps per second: the MLP, CNN and transformer of systems/train with local (exact)
//! aggregation and through each system's protocol code on the `mem` fabric (a thread per node),
//! and on `udp` (a socket per node on loopback, a thread per node) for the MLP.

use criterion::{Criterion, criterion_group, criterion_main};
use inabench_ina_run::collective::{Aggregation, Fabric};
use inabench_workloads::netreduce::fig12::run;

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("train_10_steps");
    g.sample_size(10);
    let systems = [
        ("local", Aggregation::Local),
        ("ring", Aggregation::RING),
        ("netreduce", Aggregation::NETREDUCE),
        ("switchml", Aggregation::SWITCHML),
    ];
    for model in ["mlp", "cnn", "transformer"] {
        for (name, agg) in systems {
            g.bench_function(format!("{model}_{name}_mem"), |b| {
                b.iter(|| run(agg, model, 4, 10, 64, 0.05, Fabric::Mem, 1).expect("train"))
            });
        }
    }
    for (name, agg) in &systems[1..] {
        g.bench_function(format!("mlp_{name}_udp"), |b| {
            b.iter(|| run(*agg, "mlp", 4, 10, 64, 0.05, Fabric::Udp, 1).expect("train"))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
