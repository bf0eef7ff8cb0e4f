//! P4SGD's hot paths.
//!
//! - GLM training throughput (samples per second on one core): the suite's single-worker SGD
//!   (`glm::epoch_single`) and its model-parallel SGD with 8 workers emulated in one thread
//!   (`glm::epoch_model_parallel`, all-reduce by `LocalSum`), against a straightforward
//!   single-threaded mini-batch SGD written here with plain loops over per-row `(index, value)`
//!   lists (the honest baseline). Same data (the `small` stand-in, 4,096 x 8,192, 64 non-zeros
//!   per row, seed 1), same settings (logistic, batch 64, learning rate 0.5); before anything is
//!   timed, one epoch of each from the same zero model must give the same model to 1e-4.
//! - The protocol's per-operation latency: one all-reduce of 8 x i32 across 8 workers through
//!   the P4SGD switch (Alg. 2 and 3), issued one after another, every result checked against the
//!   exact sum: `direct` (the state machines called in a loop, no fabric: their CPU cost per
//!   operation), `mem` (a thread per node, in-process channels) and `udp` (a thread and a
//!   loopback UDP socket per node, sendmmsg/recvmmsg, event-driven I/O). The time per iteration
//!   is the mean submission-to-result latency of the workers' operations (a closed loop, so
//!   iterations x mean latency is the loop's time); thread start-up is not in it.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use inabench_fabric::{Endpoint, NodeId};
use inabench_p4sgd::driver::{self, LatencyStats};
use inabench_p4sgd::glm::{self, Dataset, Glm, LocalSum, Sgd};
use inabench_p4sgd::protocol::{P4sgdSwitch, P4sgdWorker, PAPER_SLOTS, SwitchConfig, WorkerConfig};
use inabench_p4sgd::{allreduce, udp};
use std::hint::black_box;
use std::time::{Duration, Instant};

const WORKERS: usize = 8;
const ELEMENTS: usize = 8;
/// Retransmission timeout of the real-time runs (the spec's `emulated_timeout_us`).
const RTO_NS: u64 = 5_000_000;

const SGD: Sgd = Sgd {
    glm: Glm::Logistic,
    lr: 0.5,
    batch: 64,
    micro_batch: 8,
    block: 0,
};

/// The baseline: mini-batch logistic-regression SGD in plain loops, no code of the suite.
struct Plain {
    rows: Vec<Vec<(usize, f32)>>,
    labels: Vec<f32>,
    cols: usize,
}

impl Plain {
    fn from(d: &Dataset) -> Plain {
        let rows = (0..d.rows())
            .map(|i| {
                let (idx, val) = d.row(i);
                idx.iter()
                    .zip(val)
                    .map(|(j, v)| (*j as usize, *v))
                    .collect()
            })
            .collect();
        Plain {
            rows,
            labels: d.labels.clone(),
            cols: d.cols,
        }
    }

    fn epoch(&self, lr: f32, batch: usize, w: &mut [f32]) {
        let mut grad = vec![0f32; self.cols];
        let mut acts = vec![0f32; batch];
        let mut start = 0;
        while start < self.rows.len() {
            let end = (start + batch).min(self.rows.len());
            for i in start..end {
                let mut a = 0f32;
                for &(j, v) in &self.rows[i] {
                    a += v * w[j];
                }
                acts[i - start] = a;
            }
            for g in grad.iter_mut() {
                *g = 0.0;
            }
            for i in start..end {
                let y = self.labels[i];
                // d/da of log(1 + exp(-y a))
                let g = -y / (1.0 + (y * acts[i - start]).exp());
                for &(j, v) in &self.rows[i] {
                    grad[j] += g * v;
                }
            }
            let scale = lr / (end - start) as f32;
            for j in 0..self.cols {
                w[j] -= scale * grad[j];
            }
            start = end;
        }
    }
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn training(c: &mut Criterion) {
    let Some(shape) = glm::shape("small") else {
        panic!("the `small` shape is gone");
    };
    let d = glm::synthetic(&shape, shape.rows, 1);
    let plain = Plain::from(&d);
    // the same model from the same start, checked before timing
    let mut w_plain = vec![0f32; d.cols];
    let mut w_single = w_plain.clone();
    let mut w_mp = w_plain.clone();
    plain.epoch(SGD.lr, SGD.batch, &mut w_plain);
    glm::epoch_single(&SGD, &d, &mut w_single);
    glm::epoch_model_parallel(&SGD, &d, &mut w_mp, WORKERS, &mut LocalSum).expect("mp epoch");
    assert!(w_plain.iter().any(|x| *x != 0.0), "the baseline learned");
    let (ds, dm) = (max_diff(&w_plain, &w_single), max_diff(&w_plain, &w_mp));
    assert!(
        ds < 1e-4 && dm < 1e-4,
        "models differ: single {ds}, mp {dm}"
    );
    eprintln!(
        "p4sgd training: the same model after one epoch (max |diff|: single {ds:e}, model-parallel {dm:e})"
    );

    let mut g = c.benchmark_group("p4sgd_train_epoch");
    g.throughput(Throughput::Elements(d.rows() as u64));
    g.sample_size(10);
    g.bench_function("baseline_plain_loops", |b| {
        b.iter(|| {
            let mut w = vec![0f32; d.cols];
            plain.epoch(SGD.lr, SGD.batch, &mut w);
            black_box(w)
        })
    });
    g.bench_function("suite_single", |b| {
        b.iter(|| {
            let mut w = vec![0f32; d.cols];
            glm::epoch_single(&SGD, &d, &mut w);
            black_box(w)
        })
    });
    g.bench_function("suite_model_parallel_8", |b| {
        b.iter(|| {
            let mut w = vec![0f32; d.cols];
            glm::epoch_model_parallel(&SGD, &d, &mut w, WORKERS, &mut LocalSum).expect("mp epoch");
            black_box(w)
        })
    });
    g.finish();
}

/// `ops` all-reduces with the state machines called directly (no fabric, time 0 throughout).
fn direct(ops: u64) -> Duration {
    let sw_id = WORKERS as NodeId;
    let mut ws: Vec<P4sgdWorker> = (0..WORKERS)
        .map(|r| {
            P4sgdWorker::new(WorkerConfig {
                rank: r,
                workers: WORKERS,
                switch: sw_id,
                slots: PAPER_SLOTS,
                elements: ELEMENTS,
                rto_ns: RTO_NS,
            })
            .expect("worker")
        })
        .collect();
    let mut sw = P4sgdSwitch::new(
        sw_id,
        SwitchConfig {
            elements: ELEMENTS,
            ..SwitchConfig::paper(WORKERS)
        },
    )
    .expect("switch");
    let inputs: Vec<Vec<Vec<i32>>> = (0..ops)
        .map(|op| {
            (0..WORKERS)
                .map(|w| driver::input(1, w, op, ELEMENTS))
                .collect()
        })
        .collect();
    let t = Instant::now();
    let mut results: Vec<Vec<i32>> = Vec::with_capacity(ops as usize);
    for (op, ins) in inputs.into_iter().enumerate() {
        for (w, v) in ws.iter_mut().zip(ins) {
            w.submit(0, v).expect("submit");
        }
        // until every worker holds the result and the slot is confirmed
        loop {
            let mut moved = false;
            for w in ws.iter_mut() {
                while let Some(tx) = w.poll_transmit(0) {
                    moved = true;
                    sw.handle_packet(0, w.rank() as NodeId, &tx.bytes);
                }
            }
            while let Some(tx) = sw.poll_transmit(0) {
                moved = true;
                ws[tx.to as usize].handle_packet(0, sw_id, &tx.bytes);
            }
            if !moved {
                break;
            }
        }
        let mut first: Option<Vec<i32>> = None;
        for w in ws.iter_mut() {
            let c = w.take_completed().expect("a result");
            assert_eq!(c.op, op as u64);
            match &first {
                Some(f) => assert_eq!(f, &c.values, "workers disagree"),
                None => first = Some(c.values),
            }
        }
        results.push(first.expect("eight workers"));
    }
    let el = t.elapsed();
    // every result against the exact sum, outside the timing
    for (op, r) in results.iter().enumerate() {
        assert_eq!(r, &driver::reference(1, WORKERS, op as u64, ELEMENTS));
    }
    assert!(ws.iter().all(|w| w.is_done()), "every slot confirmed");
    el
}

fn check(o: &allreduce::Outcome, ops: u64) {
    assert_eq!(o.wrong, 0, "results differ from the exact sum");
    assert_eq!(o.unfinished, 0, "workers did not finish");
    assert_eq!(o.latencies.len() as u64, ops * WORKERS as u64);
}

/// Mean latency x ops: the closed loop's time for `ops` operations.
fn loop_time(o: &allreduce::Outcome, ops: u64) -> Duration {
    let s = LatencyStats::of(&o.latencies).expect("latencies");
    Duration::from_nanos((s.mean_us * 1e3 * ops as f64) as u64)
}

fn allreduce(c: &mut Criterion) {
    let mut g = c.benchmark_group("p4sgd_allreduce_8x8_i32_8_workers");
    g.throughput(Throughput::Elements(1));
    g.sample_size(10);
    g.bench_function(BenchmarkId::new("fabric", "direct"), |b| {
        b.iter_custom(direct)
    });
    g.bench_function(BenchmarkId::new("fabric", "mem"), |b| {
        b.iter_custom(|iters| {
            let o =
                allreduce::run_p4sgd(WORKERS, ELEMENTS, iters, 1, None, RTO_NS).expect("mem run");
            check(&o, iters);
            loop_time(&o, iters)
        })
    });
    g.bench_function(BenchmarkId::new("fabric", "udp"), |b| {
        b.iter_custom(|iters| {
            let (o, _) = udp::run_p4sgd(
                WORKERS,
                ELEMENTS,
                iters,
                1,
                RTO_NS,
                &udp::UdpOptions::default(),
            )
            .expect("udp run");
            check(&o, iters);
            loop_time(&o, iters)
        })
    });
    g.finish();
}

criterion_group!(benches, training, allreduce);
criterion_main!(benches);
