//! A SwitchML-RDMA worker on a plain UC queue pair of a host's RoCE stack (#36 item 4,
//! "SwitchML-RDMA over UC"): what SwitchML-RDMA's released client (microsoft/SwitchML,
//! `RDMAExampleClient`) does over an unmodified RDMA NIC, on the verbs binding
//! (drivers/devices/src/verbs.rs), against the suite's SwitchML-RDMA switch run on the rig's host
//! (the `switchml_rdma_switch` example). The data path runs over the message-level host
//! transport (`inabench_transport::HostTransport` on `inabench_devices::transport::VerbsQp`),
//! each WRITE to the VA and R_Key it names (`HostTransport::post_write_to`).
//!
//! Worker r's one UC QP is connected to the switch: DestQP `0x800000 | r << 16` (bit 23, the
//! worker id, queue pair index 0: `inabench_wire::ina::switchml_rdma`), the switch's GID
//! (::ffff:<switch ip>) and first PSN. The gradient (`inabench_ina::common::gradient`, the
//! simulated system's values, big-endian int32) is sent as messages of `msg-packets` packets of
//! one path MTU each: message m is one RDMA WRITE with immediate (exponents 0: int32 values)
//! whose RETH carries the worker's own result address for the message (VA) and the message's
//! first pool index (R_Key: slot `(m mod groups) x msg-packets`, shadow-copy set `(m / groups)
//! mod 2`, groups = pool / msg-packets), at most one message per slot group in flight. The
//! switch answers every packet's slot with a UC WRITE Only with Immediate of the sum to the
//! worker's result buffer (the immediate names the pool index), one receive completion each.
//! A message whose results have not all come within `--timeout-ms` is written again whole (the
//! application's own retry: UC tells a sender nothing); duplicate results are counted, not
//! summed. A message complete, its values are checked against the wrapping int32 sum of every
//! worker's gradient (`inabench_ina::common::reference_sum`) and the slot group takes its next
//! message.
//!
//! Before sending, the worker writes what the switch needs to reach it (its QPN, result
//! buffer address, R_Key and IPv4 address) to `--info-file` (the rig's run folder, which the
//! host side reads): the release installs the same per worker on the switch out of band.
//!
//! ```text
//! switchml_rdma_worker <rank> <workers> --info-file PATH [--elements 64924] [--mtu 1024]
//!                      [--msg-packets 4] [--pool 32] [--seed 1] [--timeout-ms 2000]
//!                      [--switch-ip 10.77.0.254] [--switch-psn 0] [--wait-dir DIR]
//!                      [--device NAME] [--gid-index N] [--reps R]
//! ```
//! `--reps R` (`inabench reproduce` on the rig): the stream's messages are R repetitions of
//! equally many messages; when every message of repetition r is exact the worker prints
//! `repetition r: messages a..b exact, in at T s` (T from the first WRITE, its own clock).
//! `--wait-dir DIR` (the rig's run folder, /mnt/rig): before its first WRITE the worker waits
//! (180 s at most) until every worker's info file is there (`DIR/guest<i>/<the info file's
//! name>`) and the switch said it is serving (`DIR/switchml_rdma_switch.ready`), so no worker's
//! timeout runs while another guest still boots.
//! Prints its QP, one line per 16 messages, the result and `switchml_rdma_worker: ok`; exits 1
//! on the first failure.

#[path = "ring_qps/mod.rs"]
#[allow(dead_code)]
mod ring_qps;

use inabench_devices::transport::VerbsQp;
use inabench_devices::verbs::{Gid, PSN_MASK, QpInfo, QpPlan, Transport, Verbs};
use inabench_ina::common::{gradient, reference_sum};
use inabench_transport::{CompletionKind, HostTransport, RemoteAddr};
use inabench_wire::ina::switchml_rdma::{PoolIndex, QPN_MARK, ResultImm};
use ring_qps::{R, pick_gid};
use std::time::{Duration, Instant};

/// Send work requests carry this bit in their wr_id (receives do not).
const SEND_BIT: u64 = 1 << 63;

struct Args {
    rank: usize,
    workers: usize,
    info_file: String,
    elements: usize,
    mtu: u32,
    msg_packets: usize,
    pool: usize,
    seed: u64,
    timeout_ms: u64,
    switch_ip: [u8; 4],
    switch_psn: u32,
    wait_dir: Option<String>,
    device: Option<String>,
    gid_index: Option<u8>,
    reps: usize,
}

fn args() -> R<Args> {
    let usage = "usage: switchml_rdma_worker <rank> <workers> --info-file PATH [--elements E] [--mtu B] [--msg-packets K] [--pool S] [--seed S] [--timeout-ms T] [--switch-ip A.B.C.D] [--switch-psn P] [--wait-dir DIR] [--device NAME] [--gid-index N] [--reps R]";
    let a: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize| a.get(i).and_then(|r| r.parse().ok()).ok_or(usage);
    let mut out = Args {
        rank: num(0)?,
        workers: num(1)?,
        info_file: String::new(),
        elements: 64924,
        mtu: 1024,
        msg_packets: 4,
        pool: 32,
        seed: 1,
        timeout_ms: 2000,
        switch_ip: [10, 77, 0, 254],
        switch_psn: 0,
        wait_dir: None,
        device: None,
        gid_index: None,
        reps: 1,
    };
    let mut i = 2;
    while i < a.len() {
        let v = a.get(i + 1).ok_or(usage)?;
        let bad = || format!("bad value {v} for {}", a[i]);
        match a[i].as_str() {
            "--info-file" => out.info_file = v.clone(),
            "--elements" => out.elements = v.parse().map_err(|_| bad())?,
            "--mtu" => out.mtu = v.parse().map_err(|_| bad())?,
            "--msg-packets" => out.msg_packets = v.parse().map_err(|_| bad())?,
            "--pool" => out.pool = v.parse().map_err(|_| bad())?,
            "--seed" => out.seed = v.parse().map_err(|_| bad())?,
            "--timeout-ms" => out.timeout_ms = v.parse().map_err(|_| bad())?,
            "--switch-ip" => {
                let ip: std::net::Ipv4Addr = v.parse().map_err(|_| bad())?;
                out.switch_ip = ip.octets();
            }
            "--switch-psn" => out.switch_psn = v.parse().map_err(|_| bad())?,
            "--wait-dir" => out.wait_dir = Some(v.clone()),
            "--device" => out.device = Some(v.clone()),
            "--gid-index" => out.gid_index = Some(v.parse().map_err(|_| bad())?),
            "--reps" => out.reps = v.parse().map_err(|_| bad())?,
            _ => return Err(usage.into()),
        }
        i += 2;
    }
    if out.info_file.is_empty()
        || out.workers < 2
        || out.rank >= out.workers
        || out.rank > 0x7f
        || out.elements == 0
    {
        return Err(usage.into());
    }
    let k = out.msg_packets;
    if k == 0 || k > 64 || out.pool < k || !out.pool.is_multiple_of(k) || out.pool > 0x3fff {
        return Err(format!(
            "the pool must hold whole messages: {} slots, {k} packets per message (at most 64)",
            out.pool
        ));
    }
    Ok(out)
}

fn main() {
    if let Err(e) = run() {
        eprintln!("switchml_rdma_worker: FAILED: {e}");
        std::process::exit(1);
    }
}

/// The message waiting for its results on a slot group.
#[derive(Clone, Copy)]
struct Outstanding {
    msg: usize,
    got: u64,
    deadline: Instant,
}

fn run() -> R<()> {
    let a = args()?;
    let (me, n, k) = (a.rank, a.workers, a.msg_packets);
    let bytes = a.mtu as usize;
    let per_packet = bytes / 4;
    let packets = a.elements.div_ceil(per_packet);
    let messages = packets.div_ceil(k);
    let groups = a.pool / k;
    if a.reps == 0 || !messages.is_multiple_of(a.reps) {
        return Err(format!(
            "--reps {}: the stream's {messages} messages are not whole repetitions",
            a.reps
        ));
    }
    let per_rep = messages / a.reps;
    let mut rep_left = vec![per_rep; a.reps];
    // packets of message m (the last may be short), its first pool index (as the suite's
    // switchml_rdma::Layout::pool_of)
    let len_of = |m: usize| k.min(packets - m * k);
    let pool_of = |m: usize| PoolIndex {
        slot: ((m % groups) * k) as u16,
        set: (m / groups) % 2 == 1,
    };
    println!("probe: {}", inabench_devices::verbs::probe().detail);
    let v = Verbs::load().map_err(|e| e.to_string())?;
    let gid_index = match a.gid_index {
        Some(i) => i,
        None => pick_gid(&v, a.device.as_deref())?,
    };
    // the memory: the gradient (every message its own place), then the results (the same
    // places); receive queue room for every slot's result and as many duplicates
    let grad_bytes = messages * k * bytes;
    let plan = QpPlan {
        transport: Transport::Uc,
        // distinct first PSNs per worker; worker 0's first message crosses the 24-bit wrap
        sq_psn: (PSN_MASK - 2 + me as u32 * 0x0010_0001) & PSN_MASK,
        rq_psn: a.switch_psn,
        window: 2 * a.pool as u32,
        ..QpPlan::rc(a.mtu, k as u32, 1, 2 * messages as u32, 0)
    };
    let mut q = v
        .connect(a.device.as_deref(), 1, gid_index, &plan)
        .map_err(|e| format!("the UC QP: {e}"))?;
    let grad = gradient(a.seed, me, a.elements);
    for (w, x) in q.buf[..grad_bytes].chunks_exact_mut(4).zip(&grad) {
        w.copy_from_slice(&x.to_be_bytes());
    }
    let mine = q.info();
    let results_at = mine.addr + grad_bytes as u64;
    let mut switch_gid = Gid::default();
    switch_gid.0[10..12].copy_from_slice(&[0xff, 0xff]);
    switch_gid.0[12..].copy_from_slice(&a.switch_ip);
    // the switch's QP for this worker; the R_Key is the pool index, set per message
    let switch = QpInfo {
        qpn: QPN_MARK | (me as u32) << 16,
        psn: a.switch_psn,
        gid: switch_gid,
        addr: results_at,
        rkey: 0,
    };
    let mut posted = 0u64;
    for _ in 0..2 * a.pool {
        q.post_recv(posted, 0, 0).map_err(|e| e.to_string())?;
        posted += 1;
    }
    q.connect_to(&switch)
        .map_err(|e| format!("the UC QP: {e}"))?;
    if mine.gid.0[..12] != switch_gid.0[..12] {
        return Err(format!(
            "GID index {gid_index} is not an IPv4 GID: {:?}",
            mine.gid.0
        ));
    }
    let my_ip = std::net::Ipv4Addr::new(
        mine.gid.0[12],
        mine.gid.0[13],
        mine.gid.0[14],
        mine.gid.0[15],
    );
    // what the switch needs to reach this worker, written whole (a rename) before any WRITE
    let info = format!(
        "qpn {:#x} rkey {:#x} addr {results_at:#x} ip {my_ip}\n",
        mine.qpn, mine.rkey
    );
    let tmp = format!("{}.tmp", a.info_file);
    std::fs::write(&tmp, &info)
        .and_then(|()| std::fs::rename(&tmp, &a.info_file))
        .map_err(|e| format!("writing {}: {e}", a.info_file))?;
    if let Some(dir) = &a.wait_dir {
        let name = std::path::Path::new(&a.info_file)
            .file_name()
            .ok_or("--info-file names no file")?;
        let dir = std::path::Path::new(dir);
        let mut wanted: Vec<std::path::PathBuf> = (0..n)
            .map(|i| dir.join(format!("guest{i}")).join(name))
            .collect();
        wanted.push(dir.join("switchml_rdma_switch.ready"));
        let t = Instant::now();
        while let Some(p) = wanted.iter().find(|p| !p.exists()) {
            if t.elapsed() > Duration::from_secs(180) {
                return Err(format!("after 180 s no {}", p.display()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    println!(
        "switchml_rdma_worker: rank {me} of {n}: UC QP {:#x} (first PSN {:#08x}, GID index {gid_index}, {my_ip}) -> switch QP {:#x} at {}; results at {results_at:#x} rkey {:#x}; {} values in {messages} messages of {k} x {bytes} B, pool {} slots ({groups} groups x 2 sets)",
        mine.qpn,
        plan.sq_psn,
        switch.qpn,
        std::net::Ipv4Addr::from(a.switch_ip),
        mine.rkey,
        a.elements,
        a.pool
    );

    let want = reference_sum(a.seed, n, a.elements);
    let timeout = Duration::from_millis(a.timeout_ms);
    let t0 = Instant::now();
    let mut ready: std::collections::VecDeque<usize> = (0..groups.min(messages)).collect();
    let mut out: Vec<Option<Outstanding>> = vec![None; groups];
    let (mut done, mut results, mut duplicates, mut foreign) = (0usize, 0u64, 0u64, 0u64);
    let (mut resent, mut sends_posted, mut sends_done) = (0u64, 0u64, 0u64);
    // the data path over the message-level transport (inabench_transport::HostTransport on the
    // UC QP as connected above); each WRITE names its own RETH (post_write_to)
    let mut qp = VerbsQp::connected(&mut q, switch);
    while done < messages {
        // a slot group's next message, or a message whose results are overdue, written whole
        let now = Instant::now();
        for o in out.iter_mut().flatten() {
            if o.deadline <= now && !ready.contains(&o.msg) {
                ready.push_back(o.msg);
            }
        }
        while let Some(m) = ready.pop_front() {
            let g = m % groups;
            match out[g] {
                Some(o) if o.msg == m => resent += 1,
                Some(o) => {
                    return Err(format!(
                        "message {m} ready while message {} holds slot group {g}",
                        o.msg
                    ));
                }
                None => {}
            }
            let got = out[g].map_or(0, |o| o.got);
            out[g] = Some(Outstanding {
                msg: m,
                got,
                deadline: Instant::now() + timeout,
            });
            let len = len_of(m);
            // the RETH: the worker's own result address for the message (VA), its first pool
            // index (R_Key)
            let offset = (m * k * bytes) as u64;
            let to = RemoteAddr {
                addr: switch.addr + offset,
                rkey: u32::from(pool_of(m).index()),
            };
            qp.post_write_to(
                SEND_BIT | m as u64,
                offset,
                (len * bytes) as u32,
                to,
                Some(0),
            )
            .map_err(|e| format!("message {m}: {e}"))?;
            sends_posted += 1;
        }
        let cs = qp.poll(16).map_err(|e| e.to_string())?;
        if cs.is_empty() {
            if t0.elapsed() > Duration::from_secs(300) {
                return Err(format!(
                    "after 300 s: {done} of {messages} messages complete, {results} results taken, {resent} messages resent"
                ));
            }
            std::thread::sleep(Duration::from_micros(100));
            continue;
        }
        for c in cs {
            if c.wr_id & SEND_BIT != 0 {
                if c.error.is_some() || c.kind != CompletionKind::Write {
                    return Err(format!("send completion {c:?}"));
                }
                sends_done += 1;
                continue;
            }
            if c.error.is_some()
                || c.kind != CompletionKind::RecvWriteImm
                || c.byte_len != bytes as u32
            {
                return Err(format!(
                    "receive completion {c:?}: expected a {bytes}-byte RDMA WRITE with immediate"
                ));
            }
            qp.post_recv(posted).map_err(|e| e.to_string())?;
            posted += 1;
            results += 1;
            let imm = c.imm.ok_or("a result without its immediate")?;
            let r =
                ResultImm::from_imm(imm).map_err(|e| format!("result immediate {imm:#x}: {e}"))?;
            let s = usize::from(r.pool.slot);
            let (g, j) = (s / k, s % k);
            let Some(Some(o)) = out.get(g).copied() else {
                // a result for a group with nothing outstanding: a duplicate of a finished one
                duplicates += 1;
                continue;
            };
            if pool_of(o.msg).set != r.pool.set || j >= len_of(o.msg) {
                foreign += 1;
                continue;
            }
            if o.got & (1 << j) != 0 {
                duplicates += 1;
                continue;
            }
            let got = o.got | (1 << j);
            if got.count_ones() as usize != len_of(o.msg) {
                out[g] = Some(Outstanding { got, ..o });
                continue;
            }
            // message complete: every value is the sum of every worker's
            let m = o.msg;
            let first = m * k * per_packet;
            let last = ((m * k + len_of(m)) * per_packet).min(a.elements);
            let place = &qp.buf()[grad_bytes + first * 4..grad_bytes + last * 4];
            for (i, w) in place.chunks_exact(4).enumerate() {
                let x = i32::from_be_bytes([w[0], w[1], w[2], w[3]]);
                if x != want[first + i] {
                    return Err(format!(
                        "message {m} value {}: {x}, the sum is {} (my value {})",
                        first + i,
                        want[first + i],
                        grad[first + i]
                    ));
                }
            }
            out[g] = None;
            done += 1;
            let r = m / per_rep;
            rep_left[r] -= 1;
            if rep_left[r] == 0 {
                println!(
                    "repetition {r}: messages {}..{} exact, in at {:.6} s",
                    r * per_rep,
                    (r + 1) * per_rep - 1,
                    t0.elapsed().as_secs_f64()
                );
            }
            if m + groups < messages {
                ready.push_back(m + groups);
            }
            if done.is_multiple_of(16) || done == messages {
                println!(
                    "{done} of {messages} messages exact, {:.3} s",
                    t0.elapsed().as_secs_f64()
                );
            }
        }
    }
    let wall = t0.elapsed();
    // the whole result, once more, against the reference
    let all = qp.buf()[grad_bytes..grad_bytes + 4 * a.elements]
        .chunks_exact(4)
        .map(|w| i32::from_be_bytes([w[0], w[1], w[2], w[3]]));
    let wrong = all.zip(&want).filter(|(x, w)| x != *w).count();
    if wrong > 0 {
        return Err(format!("{wrong} values differ from the sums at the end"));
    }
    println!(
        "switchml_rdma_worker: rank {me}: all {messages} messages exact: {} int32 values, each the sum of the {n} workers' values, through one plain UC QP; {results} results taken (UC WRITE Only with Immediate), {duplicates} duplicates, {foreign} for another message; messages resent after a timeout: {resent}; {sends_done} of {sends_posted} WRITEs completed; {:.3} s",
        a.elements,
        wall.as_secs_f64()
    );
    println!("switchml_rdma_worker: ok");
    Ok(())
}
