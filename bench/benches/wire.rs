//! Wire and data-path kernels: the RoCEv2 ICRC, frame build/parse, and the aggregation kernels
//! (int32 and f32 element-wise adds over packet payloads) against this machine's memcpy.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use inabench_wire::ib::{BthRepr, RethRepr, opcode};
use inabench_wire::roce::FrameRepr;
use std::hint::black_box;

fn frame() -> FrameRepr {
    FrameRepr {
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac: [2, 0, 0, 0, 0, 2],
        src_ip: [10, 0, 0, 1],
        dst_ip: [10, 0, 0, 2],
        src_port: 49152,
        tos: 0,
        ttl: 64,
        bth: BthRepr {
            opcode: opcode::RC | opcode::WRITE_FIRST,
            solicited: false,
            migreq: false,
            pad_count: 0,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: 17,
            ack_req: false,
            psn: 1,
        },
        reth: Some(RethRepr {
            va: 0,
            rkey: 1,
            dma_len: 4096,
        }),
        aeth: None,
        immdt: None,
    }
}

fn wire(c: &mut Criterion) {
    let payload = vec![0x5au8; 4096];
    let bytes = frame().build(&payload).expect("build");
    let ip = bytes[inabench_wire::roce::IP_OFFSET..bytes.len() - 4].to_vec();
    let mut g = c.benchmark_group("wire");
    g.throughput(Throughput::Bytes(ip.len() as u64));
    g.bench_function("icrc_4k", |b| {
        b.iter(|| inabench_wire::icrc::compute(black_box(&ip)))
    });
    g.bench_function("build_4k_frame", |b| {
        b.iter(|| frame().build(black_box(&payload)))
    });
    g.bench_function("parse_4k_frame", |b| {
        b.iter(|| FrameRepr::parse(black_box(&bytes)).map(|(r, p)| (r.bth.psn, p.len())))
    });
    g.finish();
    // NetReduce's 1 KB frames: the plain build into a reused buffer (headers, payload, ICRC over
    // all of it) against the accelerator's build of one result copy, whose last 1008 payload
    // bytes (shared by every copy) were hashed once beforehand (`build_shared_tail_into`)
    let payload = vec![0x5au8; 1024];
    let bytes = frame().build(&payload).expect("build");
    let ip = bytes[inabench_wire::roce::IP_OFFSET..bytes.len() - 4].to_vec();
    let (head, tail) = payload.split_at(16);
    let shared = inabench_wire::icrc::SharedTail::new(tail, 0);
    let shift = inabench_wire::icrc::Shift::new(shared.len());
    let mut buf = Vec::new();
    // in this thread's CPU time, so other processes on a shared host do not count
    let mut g = c.benchmark_group("wire_1k");
    g.throughput(Throughput::Bytes(ip.len() as u64));
    g.bench_function("icrc_1k", |b| {
        cpu_iter(b, || inabench_wire::icrc::compute(black_box(&ip)))
    });
    g.bench_function("build_1k_into", |b| {
        cpu_iter(b, || frame().build_into(&mut buf, black_box(&payload)))
    });
    g.bench_function("build_1k_shared_tail_into", |b| {
        cpu_iter(b, || {
            frame().build_shared_tail_into(&mut buf, &[black_box(head)], tail, &shared, &shift)
        })
    });
    g.bench_function("parse_1k_frame", |b| {
        cpu_iter(b, || {
            FrameRepr::parse(black_box(&bytes)).map(|(r, p)| (r.bth.psn, p.len()))
        })
    });
    g.finish();
}

/// Criterion's `iter` timed in this thread's CPU time.
fn cpu_iter<O>(b: &mut criterion::Bencher<'_>, mut f: impl FnMut() -> O) {
    b.iter_custom(|iters| inabench_bench::cpu_time(iters, &mut f))
}

fn aggregation(c: &mut Criterion) {
    // one aggregator slot: add a 1 KB payload (256 values) into the running sum, 1 MB at a time
    let n = 1 << 18;
    let src_i: Vec<i32> = (0..n as i32).collect();
    let mut acc_i = vec![0i32; n];
    let src_f: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let mut acc_f = vec![0f32; n];
    let src_b = vec![1u8; n * 4];
    let mut dst_b = vec![0u8; n * 4];
    let mut g = c.benchmark_group("aggregate");
    g.throughput(Throughput::Bytes((n * 4) as u64));
    g.bench_function("memcpy_1m", |b| {
        b.iter(|| dst_b.copy_from_slice(black_box(&src_b)))
    });
    g.bench_function("i32_add_1m", |b| {
        b.iter(|| {
            for (a, x) in acc_i.iter_mut().zip(black_box(&src_i)) {
                *a = a.wrapping_add(*x);
            }
        })
    });
    g.bench_function("f32_add_1m", |b| {
        b.iter(|| {
            for (a, x) in acc_f.iter_mut().zip(black_box(&src_f)) {
                *a += *x;
            }
        })
    });
    g.finish();
}

criterion_group!(benches, wire, aggregation);
criterion_main!(benches);
