//! LuWu's out-of-core optimizer: Adam's update rate (parameters/s) from memory and through state
//! files on this machine's storage, against the storage's own sequential write (+fsync) and read
//! bandwidth measured in the same run, and the whole pipeline (unthrottled) for reference.
//!
//! Reads are made after evicting the file from the page cache (posix_fadvise DONTNEED, Linux), so
//! they come from the device; the "cached" read shows what the page cache would hide.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use inabench_luwu_ooc::pipeline::{self, PipelineConfig};
use inabench_luwu_ooc::store::{self, Shard, ShardState};
use inabench_train::adam::{AdamParams, AdamStep};
use std::io::{Read, Write};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// Parameters per update measurement: 4 M (48 MB of fp32 states).
const PARAMS: usize = 4 << 20;
/// The storage bandwidth file: 128 MB.
const FILE_BYTES: usize = 128 << 20;

/// Read `path` sequentially in 4 MB chunks into one reused buffer (no allocation in the loop,
/// so the time is the storage's and the kernel's, not the allocator's page faults).
fn read_seq(path: &std::path::Path, buf: &mut [u8]) -> usize {
    let mut f = std::fs::File::open(path).expect("open");
    let mut n = 0;
    loop {
        let k = f.read(buf).expect("read");
        if k == 0 {
            return n;
        }
        n += k;
    }
}

fn storage(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("bw.bin");
    let chunk = vec![0x5Au8; 4 << 20];
    let mut buf = vec![0u8; 4 << 20];
    let mut g = c.benchmark_group("luwu_ooc_storage");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(FILE_BYTES as u64));
    g.bench_function("seq_write_fsync_128MB", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let t = Instant::now();
                let mut f = std::fs::File::create(&path).expect("create");
                for _ in 0..FILE_BYTES / chunk.len() {
                    f.write_all(&chunk).expect("write");
                }
                f.sync_all().expect("fsync");
                total += t.elapsed();
            }
            total
        })
    });
    g.bench_function("seq_read_evicted_128MB", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                store::evict_from_page_cache(&path).expect("evict");
                let t = Instant::now();
                let n = read_seq(&path, &mut buf);
                total += t.elapsed();
                assert_eq!(n, FILE_BYTES);
            }
            total
        })
    });
    g.bench_function("seq_read_cached_128MB", |b| {
        b.iter(|| read_seq(&path, &mut buf))
    });
    g.finish();
}

fn updates(c: &mut Criterion) {
    let hp = AdamParams::default();
    let mut st = ShardState {
        params: vec![0.0; PARAMS],
        m: vec![0.0; PARAMS],
        v: vec![0.0; PARAMS],
    };
    store::fill_init(1, 0, 0, &mut st.params);
    let mut grads = vec![0.0; PARAMS];
    store::fill_gradients(1, 1, 0, 0, &mut grads);
    let mut g = c.benchmark_group("luwu_ooc_update");
    g.sample_size(10);
    g.throughput(Throughput::Elements(PARAMS as u64));
    let step = AdamStep::new(hp, 3);
    g.bench_function("adam_from_memory_4M", |b| {
        b.iter(|| step.apply(&mut st.params, &mut st.m, &mut st.v, &grads))
    });

    let dir = tempfile::tempdir().expect("temp dir");
    let sh = Shard {
        layer: 0,
        shard: 0,
        ssd: 0,
        offset: 0,
        len: PARAMS,
    };
    let sp = dir.path().join("l.state");
    let bp = dir.path().join("l.bf16");
    store::write_all_synced(&sp, &st.encode(&sh, 0)).expect("write");
    let mut k = 0u64;
    // read states (from the device) -> Adam -> write states and bf16 parameters + fsync
    g.bench_function("adam_from_storage_4M", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                store::evict_from_page_cache(&sp).expect("evict");
                let t = Instant::now();
                let bytes = store::read_all(&sp).expect("read");
                let mut s = ShardState::decode(&sp, &bytes, &sh, k).expect("decode");
                k += 1;
                AdamStep::new(hp, k).apply(&mut s.params, &mut s.m, &mut s.v, &grads);
                store::write_all_synced(&sp, &s.encode(&sh, k)).expect("write");
                store::write_all_synced(&bp, &s.encode_bf16(&sh, k)).expect("write");
                total += t.elapsed();
            }
            total
        })
    });
    g.finish();

    // the measurement the throughput model uses
    let r = inabench_luwu_ooc::measure_update_rate(Some(dir.path()), PARAMS).expect("rate");
    eprintln!(
        "measure_update_rate({PARAMS}): from memory {:.3e} params/s, from storage {:.3e} params/s",
        r.from_memory,
        r.from_storage.unwrap_or(f64::NAN)
    );
}

fn whole_pipeline(c: &mut Criterion) {
    let layers = vec![256 << 10; 8];
    let mut g = c.benchmark_group("luwu_ooc_pipeline");
    g.sample_size(10);
    g.throughput(Throughput::Elements(layers.iter().map(|&n| n as u64).sum()));
    g.bench_function("4ssd_8x256k_unthrottled_per_iteration", |b| {
        b.iter_custom(|iters| {
            let dir = tempfile::tempdir().expect("temp dir");
            let cfg = PipelineConfig {
                root: dir.path().to_path_buf(),
                ssds: 4,
                layer_params: layers.clone(),
                ssd_mbps: None,
                iterations: iters as usize,
                fwd_compute: vec![Duration::ZERO; layers.len()],
                bwd_compute: vec![Duration::ZERO; layers.len()],
                adam: AdamParams::default(),
                seed: 1,
            };
            let r = pipeline::run(&cfg, &AtomicBool::new(false)).expect("pipeline");
            r.iter_times.iter().sum()
        })
    });
    g.finish();
}

criterion_group!(benches, storage, updates, whole_pipeline);
criterion_main!(benches);
