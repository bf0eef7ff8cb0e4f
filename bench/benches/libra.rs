//! Libra's hot paths: the table-lookup float sum (pairs/s) against plain f32 addition and
//! SwitchML's block floating point (exponent agreement, quantise, integer add, scale back), and
//! Algorithm 1's packaging (keys/s) of an OA-sized hot set (30K hot parameters on 48 registers).

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use inabench_ina::bfp;
use inabench_libra::float::FloatTables;
use inabench_libra::layout::{Placement, package_alg1, pairs_per_packet};
use inabench_libra::sparse::{SparseGen, Task};
use std::collections::HashMap;
use std::hint::black_box;

const PAIRS: usize = 1 << 16;

/// Gradient-like pairs: both signs, magnitudes over six orders.
fn pairs() -> Vec<(f32, f32)> {
    let mut g = inabench_rng::SplitMix64::new(7);
    let mut x = || {
        let m = 10f64.powf(g.next_f64() * 6.0 - 5.0);
        (if g.chance(0.5) { -m } else { m }) as f32
    };
    (0..PAIRS).map(|_| (x(), x())).collect()
}

fn float_sum(c: &mut Criterion) {
    let data = pairs();
    let t = FloatTables::new();
    let mut g = c.benchmark_group("libra_float_sum");
    g.throughput(Throughput::Elements(PAIRS as u64));
    g.bench_function("table_lookup", |b| {
        b.iter(|| {
            let mut acc = 0u32;
            for &(x, y) in black_box(&data) {
                acc ^= t.add_bits(x.to_bits(), y.to_bits());
            }
            acc
        })
    });
    g.bench_function("f32_add", |b| {
        b.iter(|| {
            let mut acc = 0u32;
            for &(x, y) in black_box(&data) {
                acc ^= (black_box(x) + black_box(y)).to_bits();
            }
            acc
        })
    });
    // SwitchML between two workers: per block of one packet's values (48) the agreed exponent
    // is the larger of the two blocks' exponents; both sides quantise, the switch adds the
    // integers, the sum is scaled back
    let per = 48;
    let xs: Vec<f32> = data.iter().map(|p| p.0).collect();
    let ys: Vec<f32> = data.iter().map(|p| p.1).collect();
    g.bench_function("switchml_block_fp", |b| {
        b.iter(|| {
            let mut acc = 0u32;
            for (bx, by) in black_box(&xs).chunks(per).zip(black_box(&ys).chunks(per)) {
                let e = bfp::block_exponent(bx).max(bfp::block_exponent(by));
                for (&x, &y) in bx.iter().zip(by) {
                    let q = bfp::quantise(x, e, 2).wrapping_add(bfp::quantise(y, e, 2));
                    acc ^= bfp::dequantise(q, e, 2).to_bits();
                }
            }
            acc
        })
    });
    g.finish();
}

fn alg1(c: &mut Criterion) {
    // OA's hot set: the 30K most popular keys of the generator, ranked
    let task = Task::named("oa").expect("oa");
    let k = task.paper_hot as u64;
    let gen_ = SparseGen::new(task, 1).expect("generator");
    let hot: HashMap<u64, u32> = (1..=k)
        .map(|r| (gen_.key_of_rank(r), (r - 1) as u32))
        .collect();
    let placement = Placement::heat(k as usize, 48).expect("placement");
    // a worker's hot keys of 16 mini-batches, in the order the worker holds them
    let ranks: Vec<u32> = (0..16)
        .flat_map(|it| gen_.batch_keys(0, it))
        .filter_map(|key| hot.get(&key).copied())
        .collect();
    let cap = pairs_per_packet(&inabench_ina::tofino::TofinoModel::PAPER);
    let mut g = c.benchmark_group("libra_alg1");
    g.throughput(Throughput::Elements(ranks.len() as u64));
    g.bench_function("package_oa_30k_hot", |b| {
        b.iter(|| {
            package_alg1(black_box(&ranks), cap, &placement)
                .packets
                .len()
        })
    });
    g.finish();
}

criterion_group!(benches, float_sum, alg1);
criterion_main!(benches);
