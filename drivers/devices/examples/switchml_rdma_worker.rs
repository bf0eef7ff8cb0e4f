//! A SwitchML-RDMA worker on a plain UC queue pair of a host's RoCE stack (#36 item 4,
//! "SwitchML-RDMA over UC"): what SwitchML-RDMA's released client (microsoft/SwitchML,
//! `RDMAExampleClient`) does over an unmodified RDMA NIC, on the verbs binding
//! (drivers/devices/src/verbs.rs), against the suite's SwitchML-RDMA switch run on the rig's host
//! (the `switchml_rdma_switch` example). The worker's logic (messages, slot groups, timeouts
//! and resends, results and their exact check) is `inabench_transport::switchml_rdma::
//! SmlrWorker`, the code the software UC stack runs in systems/transport/tests/uc_rnr.rs,
//! here over the message-level host transport on the verbs QP
//! (`inabench_devices::transport::VerbsQp`), each WRITE to the VA and R_Key it names
//! (`HostTransport::post_write_to`); this program sets the QP up, tells the switch where it
//! is, runs the worker's rounds on its own clock and prints what they say.
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
use inabench_transport::switchml_rdma::{SmlrError, SmlrEvent, SmlrPlan, SmlrWorker};
use inabench_wire::ina::switchml_rdma::QPN_MARK;
use ring_qps::{R, pick_gid};
use std::time::{Duration, Instant};

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

fn run() -> R<()> {
    let a = args()?;
    let (me, n, k) = (a.rank, a.workers, a.msg_packets);
    let bytes = a.mtu as usize;
    let grad = gradient(a.seed, me, a.elements);
    let mut worker = SmlrWorker::new(
        SmlrPlan {
            workers: n,
            rank: me,
            elements: a.elements,
            packet_bytes: bytes,
            msg_packets: k,
            pool: a.pool,
            timeout_ns: a.timeout_ms.saturating_mul(1_000_000),
            reps: a.reps,
        },
        grad,
        reference_sum(a.seed, n, a.elements),
    )
    .map_err(|e| match e {
        SmlrError::Reps { reps, messages } => {
            format!("--reps {reps}: the stream's {messages} messages are not whole repetitions")
        }
        e => e.to_string(),
    })?;
    let (messages, groups) = (worker.messages(), worker.groups());
    println!("probe: {}", inabench_devices::verbs::probe().detail);
    let v = Verbs::load().map_err(|e| e.to_string())?;
    let gid_index = match a.gid_index {
        Some(i) => i,
        None => pick_gid(&v, a.device.as_deref())?,
    };
    // the memory: the gradient (every message its own place), then the results (the same
    // places); receive queue room for every slot's result and as many duplicates
    let grad_bytes = worker.results_offset();
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
    {
        // the gradient into the buffer and the receives, through the host transport
        let mut qp = VerbsQp::new(&mut q);
        worker
            .write_gradient(&mut qp)
            .map_err(|e| format!("the UC QP: {e}"))?;
        worker.post_receives(&mut qp).map_err(|e| e.to_string())?;
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

    let t0 = Instant::now();
    // the worker's rounds over the message-level transport (inabench_transport::HostTransport
    // on the UC QP as connected above), on this program's clock (nanoseconds from t0)
    let mut qp = VerbsQp::connected(&mut q, switch);
    while !worker.done() {
        let now = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let round = worker.progress(&mut qp, now).map_err(|e| e.to_string())?;
        for e in round.events {
            match e {
                SmlrEvent::Repetition { rep, first, last } => println!(
                    "repetition {rep}: messages {first}..{last} exact, in at {:.6} s",
                    t0.elapsed().as_secs_f64()
                ),
                SmlrEvent::Exact { done, .. } => {
                    if done.is_multiple_of(16) || done == messages {
                        println!(
                            "{done} of {messages} messages exact, {:.3} s",
                            t0.elapsed().as_secs_f64()
                        );
                    }
                }
            }
        }
        if round.completions == 0 {
            if t0.elapsed() > Duration::from_secs(300) {
                let s = worker.stats();
                return Err(format!(
                    "after 300 s: {} of {messages} messages complete, {} results taken, {} messages resent",
                    s.done, s.results, s.resent
                ));
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    let wall = t0.elapsed();
    // the whole result, once more, against the reference
    worker.check_result(&qp).map_err(|e| e.to_string())?;
    let s = worker.stats();
    println!(
        "switchml_rdma_worker: rank {me}: all {messages} messages exact: {} int32 values, each the sum of the {n} workers' values, through one plain UC QP; {} results taken (UC WRITE Only with Immediate), {} duplicates, {} for another message; messages resent after a timeout: {}; {} of {} WRITEs completed; {:.3} s",
        a.elements,
        s.results,
        s.duplicates,
        s.foreign,
        s.resent,
        s.sends_done,
        s.sends_posted,
        wall.as_secs_f64()
    );
    println!("switchml_rdma_worker: ok");
    Ok(())
}
