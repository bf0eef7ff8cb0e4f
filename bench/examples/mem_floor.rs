//! The floor of a NetReduce all-reduce on the `mem` fabric on this host: only the byte work that
//! the wire format and the model require, with none of the fabric's or the endpoints' per-frame
//! bookkeeping (no queues, no parse, no pools, no timers, no windows), to tell whether issue #22's
//! "mem at 2x MPI over shared memory" is reachable on this host at all.
//!
//! Per 960-byte-payload RoCE frame (the `udp_probe netreduce ... mem` run's 64 MiB per worker in
//! 1 KB frames), the work a byte-faithful run cannot skip:
//! - each worker: its values written big-endian into the frame (`store_be_i32`) and the frame's
//!   ICRC computed (`wire::icrc::compute`) and written;
//! - the accelerator, per frame in: the ICRC verified and the values added into the slot's
//!   aggregate (`add_be_i32`); per aggregate: the result row written big-endian once and its CRC
//!   taken once (`icrc::SharedTail`), then per worker either a copy of the result frame with its
//!   own head's CRC combined (`copies`, what a fabric that hands each receiver its own buffer
//!   does) or nothing (`shared`: one buffer read by every worker, the least a fabric can do);
//! - each worker, per result frame: the ICRC verified and the values read out (`load_be_i32`).
//!
//! Frames are processed in messages of 170 (the probe's `msg_packets`), all workers' frames of a
//! message before the next, so frame buffers stay in cache as in a windowed run; the gradients and
//! results (64 MiB each per worker) stream from and to memory. Every worker's result is checked
//! against the element-wise sum. Printed: each phase's thread CPU on one thread, and the wall time
//! with the messages dealt round-robin to 2 threads (each with its own buffers: a perfect split
//! no real run has, since the accelerator is one serial node). Times are medians of `reps` runs.
//!
//! `cargo run --release -p inabench-bench --example mem_floor -- [workers] [elements] [reps]`
use inabench_bench::median;
use inabench_ina::common::kernel::{add_be_i32, load_be_i32, store_be_i32};
use inabench_wire::icrc;

const PAYLOAD: usize = 960;
const VALUES: usize = PAYLOAD / 4;
const MSG_FRAMES: usize = 170;
/// Ethernet 14, IPv4 20, UDP 8, BTH 12
const HEAD: usize = 54;
const FRAME: usize = HEAD + PAYLOAD + icrc::ICRC_LEN;

#[derive(Clone, Copy, Default)]
struct Phases {
    tx_ns: u64,
    acc_ns: u64,
    rx_ns: u64,
}

fn header_template() -> [u8; HEAD] {
    let mut h = [0u8; HEAD];
    h[12] = 0x08; // EtherType IPv4
    h[14] = 0x45; // IPv4, IHL 5
    let ip_len = (FRAME - 14) as u16;
    h[16..18].copy_from_slice(&ip_len.to_be_bytes());
    h[22] = 64; // TTL
    h[23] = 17; // UDP
    h[36..38].copy_from_slice(&4791u16.to_be_bytes());
    h[42] = 0x0a; // BTH opcode: RC RDMA write middle (any opcode: the bytes' cost is the same)
    h
}

fn cpu() -> u64 {
    inabench_bench::thread_cpu_ns()
}

/// The messages' output ranges: for each message index, every worker's slice of its result.
type Outs<'a> = Vec<(usize, Vec<&'a mut [i32]>)>;

/// Every worker's output cut into messages, dealt round-robin to `parts` lists.
fn deal(out: &mut [Vec<i32>], parts: usize) -> Vec<Outs<'_>> {
    let mut per_msg: Vec<Vec<&mut [i32]>> = Vec::new();
    for o in out.iter_mut() {
        for (m, c) in o.chunks_mut(VALUES * MSG_FRAMES).enumerate() {
            if per_msg.len() <= m {
                per_msg.push(Vec::new());
            }
            per_msg[m].push(c);
        }
    }
    let mut lists: Vec<Outs<'_>> = (0..parts).map(|_| Vec::new()).collect();
    for (m, slices) in per_msg.into_iter().enumerate() {
        lists[m % parts].push((m, slices));
    }
    lists
}

/// One all-reduce over the messages of `msgs` (index and every worker's output range). Returns
/// the phases' CPU.
fn run(grads: &[Vec<i32>], msgs: Outs<'_>, shared: bool) -> Phases {
    let workers = grads.len();
    let elements = grads[0].len();
    let tmpl = header_template();
    let mut frames = vec![vec![0u8; FRAME]; workers * MSG_FRAMES];
    let mut results = vec![vec![0u8; FRAME]; if shared { 1 } else { workers } * MSG_FRAMES];
    let mut acc = [0i32; VALUES];
    let shift = icrc::Shift::new(PAYLOAD);
    let mut p = Phases::default();
    for (m, mut out) in msgs {
        let first = m * MSG_FRAMES * VALUES;
        let n = MSG_FRAMES.min((elements - first).div_ceil(VALUES));
        let t0 = cpu();
        for (w, g) in grads.iter().enumerate() {
            for f in 0..n {
                let lo = first + f * VALUES;
                let hi = (lo + VALUES).min(elements);
                let fr = &mut frames[w * MSG_FRAMES + f];
                fr[..HEAD].copy_from_slice(&tmpl);
                store_be_i32(&mut fr[HEAD..HEAD + PAYLOAD], &g[lo..hi]);
                let c = icrc::compute(&fr[14..HEAD + PAYLOAD]).expect("an IPv4 RoCE frame");
                fr[HEAD + PAYLOAD..].copy_from_slice(&c.to_le_bytes());
            }
        }
        let t1 = cpu();
        for f in 0..n {
            acc.fill(0);
            for w in 0..workers {
                let fr = &frames[w * MSG_FRAMES + f];
                icrc::verify(&fr[14..]).expect("the ICRC the worker wrote");
                add_be_i32(&mut acc, &fr[HEAD..HEAD + PAYLOAD]);
            }
            let row = &mut results[f];
            row[..HEAD].copy_from_slice(&tmpl);
            store_be_i32(&mut row[HEAD..HEAD + PAYLOAD], &acc);
            let tail = icrc::SharedTail::new(&row[HEAD..HEAD + PAYLOAD], 0);
            let c = icrc::compute_with_tail(&row[14..HEAD], &tail, &shift).expect("head");
            row[HEAD + PAYLOAD..].copy_from_slice(&c.to_le_bytes());
            if !shared {
                let (first_row, rest) = results.split_at_mut(MSG_FRAMES);
                let src = &first_row[f];
                for w in 1..workers {
                    let dst = &mut rest[(w - 1) * MSG_FRAMES + f];
                    dst.copy_from_slice(src);
                    dst[33] = w as u8; // this copy's own destination address byte
                    let c = icrc::compute_with_tail(&dst[14..HEAD], &tail, &shift).expect("head");
                    dst[HEAD + PAYLOAD..].copy_from_slice(&c.to_le_bytes());
                }
            }
        }
        let t2 = cpu();
        for (w, o) in out.iter_mut().enumerate() {
            for f in 0..n {
                let lo = f * VALUES;
                let hi = (lo + VALUES).min(o.len());
                let fr = if shared || w == 0 {
                    &results[f]
                } else {
                    &results[w * MSG_FRAMES + f]
                };
                icrc::verify(&fr[14..]).expect("the ICRC the accelerator wrote");
                load_be_i32(&mut o[lo..hi], &fr[HEAD..HEAD + (hi - lo) * 4]);
            }
        }
        let t3 = cpu();
        p.tx_ns += t1 - t0;
        p.acc_ns += t2 - t1;
        p.rx_ns += t3 - t2;
    }
    p
}

/// The workers' result buffers, written once so that their pages are mapped before the timing
/// (as an RDMA NIC's registered, pinned memory is, and as MPI's benchmark reuses its buffers
/// after a warm-up all-reduce).
fn outputs(workers: usize, elements: usize) -> Vec<Vec<i32>> {
    (0..workers).map(|_| vec![-1i32; elements]).collect()
}

fn main() {
    let (workers, elements, reps) = inabench_bench::floor_args(usize::MAX);
    let grads: Vec<Vec<i32>> = (0..workers)
        .map(|w| inabench_ina::common::gradient(1, w, elements))
        .collect();
    let reference = inabench_ina::common::reference_sum(1, workers, elements);
    let check = |out: &[Vec<i32>], what: &str| {
        if out.iter().any(|o| *o != reference) {
            eprintln!("error: {what}: a result differs from the reference sum");
            std::process::exit(1);
        }
    };
    for shared in [false, true] {
        let name = if shared { "shared" } else { "copies" };
        let (mut one, mut two, mut phases) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..reps {
            let mut out = outputs(workers, elements);
            let p = run(&grads, deal(&mut out, 1).remove(0), shared);
            check(&out, name);
            one.push((p.tx_ns + p.acc_ns + p.rx_ns) as f64 / 1e9);
            phases.push(p);
            // two threads, messages dealt round-robin, each writing its messages' ranges
            let mut out = outputs(workers, elements);
            let mut lists = deal(&mut out, 2);
            let (odd, even) = (lists.remove(1), lists.remove(0));
            let g = &grads;
            let t0 = std::time::Instant::now();
            std::thread::scope(|s| {
                let h = s.spawn(move || run(g, odd, shared));
                run(g, even, shared);
                let _ = h.join();
            });
            two.push(t0.elapsed().as_secs_f64());
            check(&out, name);
        }
        let mid =
            |f: fn(&Phases) -> u64| median(phases.iter().map(|p| f(p) as f64 / 1e6).collect());
        eprintln!(
            "{name}: one thread {:.1} ms CPU (workers' send {:.1} ms, accelerator {:.1} ms, workers' receive {:.1} ms); two threads {:.1} ms wall",
            median(one.clone()) * 1e3,
            mid(|p| p.tx_ns),
            mid(|p| p.acc_ns),
            mid(|p| p.rx_ns),
            median(two.clone()) * 1e3
        );
        println!(
            "{{\"peer\":\"inabench-netreduce-mem-floor-{name}\",\"ranks\":{workers},\"elements\":{elements},\"iterations\":{reps},\"median_s\":{:.6},\"one_thread_cpu_s\":{:.6},\"accelerator_cpu_s\":{:.6},\"correct\":true}}",
            median(two),
            median(one),
            mid(|p| p.acc_ns) / 1e3
        );
    }
}
