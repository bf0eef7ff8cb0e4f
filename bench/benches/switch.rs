//! The switch programs on the Tofino pipeline model: cost per packet of SwitchML's and ATP's
//! switch (parse, pipeline accounting, aggregation, result frames), and of NetReduce's FPGA
//! accelerator model, fed pre-built worker frames.
//! Each result frame's buffer goes back to the switch through `Endpoint::recycle`, as a fabric
//! hands a node the buffers of the frames it receives (the steady state: a switch receives as
//! many frames as it sends), so the switches with a buffer pool write results without
//! allocating. `memcpy/…` copies the same payload bytes, the yardstick of the target.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use inabench_fabric::Endpoint;
use inabench_ina::common::{AllReduceConfig, SetupNode, System};

const WORKERS: usize = 6;

/// The frames the workers of `sys` send first (one window), tagged with their sender.
fn frames(sys: &dyn System, cfg: &AllReduceConfig) -> Vec<(u32, Vec<u8>)> {
    let nodes = sys.build(cfg).expect("build").into_nodes();
    let mut out = Vec::new();
    for mut n in nodes {
        if let SetupNode::Worker(w) = &mut n {
            let id = w.id();
            while let Some(t) = w.poll_transmit(0) {
                out.push((id, t.bytes));
            }
        }
    }
    out
}

fn switch_of(sys: &dyn System, cfg: &AllReduceConfig) -> SetupNode {
    sys.build(cfg)
        .expect("build")
        .into_nodes()
        .into_iter()
        .find(|n| matches!(n, SetupNode::Switch(_)))
        .expect("a switch")
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("tofino_model");
    let cases: [(&str, &dyn System); 3] = [
        ("switchml", &inabench_ina::switchml::SwitchMl),
        ("atp", &inabench_ina::atp::Atp),
        // NetReduce's FPGA accelerator model (RoCE frames of 1 KB: ICRC checked and recomputed)
        ("netreduce", &inabench_ina::netreduce::NetReduce),
    ];
    for (name, sys) in cases {
        let cfg = AllReduceConfig {
            workers: WORKERS,
            elements: 48 * 62 * 8,
            seed: 1,
            line_rate_bps: 100e9,
            mtu: 1024,
            timeout_ns: 1_000_000,
            knobs: vec![],
        };
        let input = frames(sys, &cfg);
        g.throughput(Throughput::Elements(input.len() as u64));
        if name == "switchml" {
            // the payload (values) of every input frame, copied once: memcpy's rate on it
            let hdr = inabench_wire::ethernet::HEADER_LEN
                + inabench_wire::ipv4::HEADER_LEN
                + inabench_wire::udp::HEADER_LEN
                + inabench_wire::ina::SwitchMlHeader::LEN;
            let payload = input[0].1.len() - hdr;
            let mut dst = vec![0u8; payload];
            g.bench_function(format!("memcpy_{payload}B_per_packet"), |b| {
                b.iter(|| {
                    for (_, f) in &input {
                        let n = payload.min(f.len());
                        dst[..n].copy_from_slice(std::hint::black_box(&f[f.len() - n..]));
                        std::hint::black_box(&mut dst);
                    }
                })
            });
        }
        g.bench_function(format!("{name}_switch_per_packet"), |b| {
            b.iter_batched(
                || switch_of(sys, &cfg),
                |mut sw| {
                    let mut out = 0usize;
                    for (from, f) in &input {
                        sw.handle_packet(0, *from, f);
                        while let Some(t) = sw.poll_transmit(0) {
                            out += t.bytes.len();
                            sw.recycle(t.bytes);
                        }
                    }
                    out
                },
                criterion::BatchSize::LargeInput,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
