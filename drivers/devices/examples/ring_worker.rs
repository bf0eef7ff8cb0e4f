//! The ring all-reduce over RC (#36 item 4, "ring all-reduce over RC"), the baseline NetReduce
//! and SwitchML compare with, on plain RC queue pairs of a host's RoCE stack through the verbs
//! binding: worker r of N WRITEs (with immediate = the step) to its successor's receiving QP,
//! QPs connected as in `netreduce_worker` (QPN, PSN, GID, address and rkey over TCP). The
//! vector is N chunks of `chunk-packets` packets; N-1 reduce-scatter steps (send the running sum
//! of chunk r-s, add the predecessor's chunk r-1-s) and N-1 all-gather steps (pass the finished
//! chunks on), each step's data in its own slot of both buffers. Every worker derives every
//! worker's values from the seed and checks every value of its result against the wrapping
//! int32 sum, and every receive completion (success, RDMA WRITE with immediate, the chunk's
//! bytes, immediate = step).
//!
//! ```text
//! ring_worker <rank> <control ip of worker 0> <... of worker 1> ... [--port 18700]
//!             [--chunk-packets 64] [--mtu 1024] [--seed 1] [--rto-ms 500] [--device NAME]
//!             [--gid-index N]
//! ```
//! Prints its QPs, the result and `ring_worker: ok`; exits 1 on the first failure.

#[path = "ring_qps/mod.rs"]
mod ring_qps;

use inabench_devices::verbs::{Completion, PSN_MASK, QpPlan, Verbs};
use ring_qps::{R, RingQps, pick_gid, value};
use std::time::{Duration, Instant};

// ibv_wc_opcode and ibv_wc_status values of verbs.h
const WC_RDMA_WRITE: u32 = 1;
const WC_RECV_RDMA_WITH_IMM: u32 = 129;
const WC_SUCCESS: u32 = 0;

struct Args {
    rank: usize,
    ips: Vec<String>,
    port: u16,
    chunk_packets: u32,
    mtu: u32,
    seed: u64,
    rto_ms: u64,
    device: Option<String>,
    gid_index: Option<u8>,
}

fn args() -> R<Args> {
    let usage = "usage: ring_worker <rank> <ctl-ip-0> <ctl-ip-1> ... [--port P] [--chunk-packets L] [--mtu B] [--seed S] [--rto-ms T] [--device NAME] [--gid-index N]";
    let a: Vec<String> = std::env::args().skip(1).collect();
    let rank = a
        .first()
        .and_then(|r| r.parse().ok())
        .ok_or_else(|| usage.to_string())?;
    let mut out = Args {
        rank,
        ips: Vec::new(),
        port: 18700,
        chunk_packets: 64,
        mtu: 1024,
        seed: 1,
        rto_ms: 500,
        device: None,
        gid_index: None,
    };
    let mut i = 1;
    while i < a.len() {
        if !a[i].starts_with("--") {
            out.ips.push(a[i].clone());
            i += 1;
            continue;
        }
        let v = a.get(i + 1).ok_or(usage)?;
        let bad = || format!("bad value {v} for {}", a[i]);
        match a[i].as_str() {
            "--port" => out.port = v.parse().map_err(|_| bad())?,
            "--chunk-packets" => out.chunk_packets = v.parse().map_err(|_| bad())?,
            "--mtu" => out.mtu = v.parse().map_err(|_| bad())?,
            "--seed" => out.seed = v.parse().map_err(|_| bad())?,
            "--rto-ms" => out.rto_ms = v.parse().map_err(|_| bad())?,
            "--device" => out.device = Some(v.clone()),
            "--gid-index" => out.gid_index = Some(v.parse().map_err(|_| bad())?),
            _ => return Err(usage.into()),
        }
        i += 2;
    }
    if out.ips.len() < 2 || out.rank >= out.ips.len() {
        return Err(usage.into());
    }
    Ok(out)
}

fn main() {
    if let Err(e) = run() {
        eprintln!("ring_worker: FAILED: {e}");
        std::process::exit(1);
    }
}

fn run() -> R<()> {
    let a = args()?;
    let n = a.ips.len();
    let (me, succ, pred) = (a.rank, (a.rank + 1) % n, (a.rank + n - 1) % n);
    println!("probe: {}", inabench_devices::verbs::probe().detail);
    let v = Verbs::load().map_err(|e| e.to_string())?;
    let gid_index = match a.gid_index {
        Some(i) => i,
        None => pick_gid(&v, a.device.as_deref())?,
    };
    let steps = 2 * (n as u32 - 1);
    // one WRITE per step, each in its own slot; every receive posted before the first WRITE
    let mut plan = QpPlan::rc(a.mtu, a.chunk_packets, steps, steps, a.rto_ms * 1_000_000);
    plan.sq_psn = (PSN_MASK - 20 + me as u32 * 0x0010_0001) & PSN_MASK;
    let cb = plan.message_bytes() as usize;
    let per_chunk = cb / 4;
    let mut q = RingQps::connect(
        &v,
        a.device.as_deref(),
        gid_index,
        &plan,
        &a.ips,
        me,
        a.port,
        steps,
        |_| {},
    )?;
    println!(
        "ring_worker: rank {me} of {n} on GID index {gid_index}: sending QP {:#x} (first PSN {:#08x}) -> rank {succ}'s receiving QP {:#x}; receiving QP {:#x} <- rank {pred}'s sending QP {:#x}",
        q.send.info().qpn,
        plan.sq_psn,
        q.succ_recv.qpn,
        q.recv.info().qpn,
        q.pred_send.qpn
    );
    // my vector: chunk j is "part" j of the seeded values
    let mut acc: Vec<i32> = (0..n)
        .flat_map(|j| (0..per_chunk).map(move |k| (j, k)))
        .map(|(j, k)| value(a.seed, me, j as u32, k))
        .collect();
    q.barrier(b'R')?;
    let writes = plan.writes();
    let t0 = Instant::now();
    let mut sent = 0u32;
    let chunk = |c: usize| c * per_chunk..(c + 1) * per_chunk;
    for s in 0..steps {
        let su = s as usize;
        // reduce-scatter: my running sum of chunk me-s; all-gather: the finished chunk me+1-t
        let out = if s < n as u32 - 1 {
            (me + n - su % n) % n
        } else {
            (me + 1 + n - (su - (n - 1)) % n) % n
        };
        let slot = &mut q.send.buf[su * cb..(su + 1) * cb];
        for (w, x) in slot.chunks_exact_mut(4).zip(&acc[chunk(out)]) {
            w.copy_from_slice(&x.to_be_bytes());
        }
        q.send
            .post_write(u64::from(s), &writes[su], &q.succ_recv, Some(s))
            .map_err(|e| e.to_string())?;
        // the predecessor's chunk of this step
        let t = Instant::now();
        let c = loop {
            for c in q.send.poll(4).map_err(|e| e.to_string())? {
                if c.wr_id != u64::from(sent) || c.status != WC_SUCCESS || c.opcode != WC_RDMA_WRITE
                {
                    return Err(format!("step {sent}: send completion {c:?}"));
                }
                sent += 1;
            }
            if let Some(c) = q.recv.poll(1).map_err(|e| e.to_string())?.pop() {
                break c;
            }
            if t.elapsed() > Duration::from_secs(120) {
                return Err(format!("step {s}: nothing from the predecessor in 120 s"));
            }
            std::thread::sleep(Duration::from_micros(100));
        };
        let want = Completion {
            wr_id: u64::from(s),
            status: WC_SUCCESS,
            opcode: WC_RECV_RDMA_WITH_IMM,
            byte_len: cb as u32,
            imm: Some(s),
        };
        if c != want {
            return Err(format!(
                "step {s}: receive completion {c:?}, expected {want:?}"
            ));
        }
        let inc = if s < n as u32 - 1 {
            (pred + n - su % n) % n
        } else {
            (pred + 1 + n - (su - (n - 1)) % n) % n
        };
        let data = &q.recv.buf[su * cb..(su + 1) * cb];
        for (x, w) in acc[chunk(inc)].iter_mut().zip(data.chunks_exact(4)) {
            let y = i32::from_be_bytes([w[0], w[1], w[2], w[3]]);
            *x = if s < n as u32 - 1 {
                x.wrapping_add(y)
            } else {
                y
            };
        }
    }
    let t = Instant::now();
    while sent < steps {
        for c in q.send.poll(4).map_err(|e| e.to_string())? {
            if c.wr_id != u64::from(sent) || c.status != WC_SUCCESS || c.opcode != WC_RDMA_WRITE {
                return Err(format!("step {sent}: send completion {c:?}"));
            }
            sent += 1;
        }
        if t.elapsed() > Duration::from_secs(120) {
            return Err(format!("{sent} of {steps} WRITEs acknowledged after 120 s"));
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    let wall = t0.elapsed();
    for (j, part) in acc.chunks(per_chunk).enumerate() {
        for (k, got) in part.iter().enumerate() {
            let want = (0..n).fold(0i32, |s, w| s.wrapping_add(value(a.seed, w, j as u32, k)));
            if *got != want {
                return Err(format!(
                    "chunk {j} value {k}: {got}, the sum is {want} (my value {})",
                    value(a.seed, me, j as u32, k)
                ));
            }
        }
    }
    q.barrier(b'D')?;
    println!(
        "ring_worker: rank {me}: ring all-reduce exact: {} int32 values ({n} chunks of {} packets of {} B), each the sum of the {n} workers' values, in {steps} RC WRITEs with immediate each way; {:.3} s",
        acc.len(),
        a.chunk_packets,
        a.mtu,
        wall.as_secs_f64()
    );
    println!("ring_worker: ok");
    Ok(())
}
