//! The ring all-reduce over RC (#36 item 4, "ring all-reduce over RC"), the baseline NetReduce
//! and SwitchML compare with, on plain RC queue pairs of a host's RoCE stack through the verbs
//! binding, run by the ring written once over the message-level host transport
//! (`inabench_transport::ring::RingAllReduce` on `inabench_devices::transport::VerbsQp`: the
//! same code the software RC stack runs in systems/transport/tests/ring_soft.rs): worker r of N WRITEs (with immediate = the step) to its successor's receiving QP,
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

use inabench_devices::transport::VerbsQp;
use inabench_devices::verbs::{PSN_MASK, QpPlan, Verbs};
use inabench_transport::ring::RingAllReduce;
use ring_qps::{R, RingQps, pick_gid, value};
use std::time::{Duration, Instant};

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
    let acc: Vec<i32> = (0..n)
        .flat_map(|j| (0..per_chunk).map(move |k| (j, k)))
        .map(|(j, k)| value(a.seed, me, j as u32, k))
        .collect();
    let mut ring = RingAllReduce::new(n, me, acc).map_err(|e| e.to_string())?;
    if ring.chunk_bytes() as usize != cb || ring.steps() != steps {
        return Err(format!(
            "the ring's shape ({} steps of {} B) is not the QPs' ({steps} of {cb} B)",
            ring.steps(),
            ring.chunk_bytes()
        ));
    }
    q.barrier(b'R')?;
    let t0 = Instant::now();
    {
        // the ring over the message-level transport (the code the software stack runs), on
        // the two verbs QPs as connected above
        let (succ_recv, pred_send) = (q.succ_recv, q.pred_send);
        let mut send = VerbsQp::connected(&mut q.send, succ_recv);
        let mut recv = VerbsQp::connected(&mut q.recv, pred_send);
        let mut last = (0, Instant::now());
        while !ring
            .progress(&mut send, &mut recv)
            .map_err(|e| e.to_string())?
        {
            let moved = ring.received() + ring.sent();
            if moved != last.0 {
                last = (moved, Instant::now());
            } else if last.1.elapsed() > Duration::from_secs(120) {
                return Err(format!(
                    "no progress in 120 s: {} of {steps} steps received, {} WRITEs acknowledged",
                    ring.received(),
                    ring.sent()
                ));
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    let acc = ring.result().ok_or("the ring finished without a result")?;
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
