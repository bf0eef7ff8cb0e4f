//! A NetReduce worker on plain RC queue pairs of a host's RoCE stack (#36 item 4, "transport
//! transparency shown for real"): what NetReduce's host does over an unmodified RDMA NIC
//! (Sec. 3.2 of the paper), on the verbs binding (drivers/devices/src/verbs.rs).
//!
//! Worker r of N has two RC QPs: a sending QP connected to the receiving QP of its successor
//! r+1 (mod N), and a receiving QP connected to its predecessor's sending QP. QPN, first PSN,
//! GID, buffer address and rkey are exchanged with the two neighbours over TCP (the control
//! NIC), nothing rewritten or synthetic. Each message is one RDMA WRITE with immediate (the
//! immediate is its MsgID) of MsgLen packets: the NetReduce INA header (InetTag, RingID 0, Rank r,
//! MsgID, MsgLen) in front of the message's int32 values (big-endian), at most `window` messages
//! in flight. Every worker derives every worker's values from the seed, so it knows the sums.
//! Between the hosts sits NetReduce's accelerator (the `netreduce_accel` example on the rig's
//! host): it answers each WRITE with the aggregate of all N workers' packets at the same place,
//! in the headers the predecessor sent, so the receiving QP (its PSN, QPN, ICRC and rkey checks
//! are the kernel's) takes the aggregate where the predecessor's own data would have gone.
//!
//! The worker then checks, for every message: the receive completion (success, RDMA WRITE with
//! immediate, MsgLen x MTU bytes, immediate = MsgID), the INA header (the predecessor's: its Rank
//! and this MsgID) and every value against the wrapping int32 sum of the N workers' values. A
//! plain relay in place of the accelerator fails the check (the predecessor's own values are not
//! the sums).
//!
//! ```text
//! netreduce_worker <rank> <control ip of worker 0> <... of worker 1> ... [--port 18600]
//!                  [--messages 8] [--msg-packets 170] [--window 2] [--mtu 1024] [--seed 1]
//!                  [--rto-ms 500] [--split K] [--device NAME] [--gid-index N]
//! ```
//! `--split K` reports the time of messages 0..K-1 and K.. apart (the rig's test turns loss on
//! at message K). Prints one line per message and `netreduce_worker: ok`; exits 1 on the first
//! failure.

use inabench_devices::verbs::{Completion, PSN_MASK, QpInfo, QpPlan, Verbs};
use inabench_wire::ina::NetReduceHeader;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

// ibv_wc_opcode and ibv_wc_status values of verbs.h
const WC_RDMA_WRITE: u32 = 1;
const WC_RECV_RDMA_WITH_IMM: u32 = 129;
const WC_SUCCESS: u32 = 0;

type R<T> = Result<T, String>;

struct Args {
    rank: usize,
    ips: Vec<String>,
    port: u16,
    messages: u32,
    msg_packets: u32,
    window: u32,
    mtu: u32,
    seed: u64,
    rto_ms: u64,
    split: Option<u32>,
    device: Option<String>,
    gid_index: Option<u8>,
}

fn args() -> R<Args> {
    let usage = "usage: netreduce_worker <rank> <ctl-ip-0> <ctl-ip-1> ... [--port P] [--messages M] [--msg-packets L] [--window W] [--mtu B] [--seed S] [--rto-ms T] [--split K] [--device NAME] [--gid-index N]";
    let a: Vec<String> = std::env::args().skip(1).collect();
    let rank = a
        .first()
        .and_then(|r| r.parse().ok())
        .ok_or_else(|| usage.to_string())?;
    let mut out = Args {
        rank,
        ips: Vec::new(),
        port: 18600,
        messages: 8,
        msg_packets: 170,
        window: 2,
        mtu: 1024,
        seed: 1,
        rto_ms: 500,
        split: None,
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
            "--messages" => out.messages = v.parse().map_err(|_| bad())?,
            "--msg-packets" => out.msg_packets = v.parse().map_err(|_| bad())?,
            "--window" => out.window = v.parse().map_err(|_| bad())?,
            "--mtu" => out.mtu = v.parse().map_err(|_| bad())?,
            "--seed" => out.seed = v.parse().map_err(|_| bad())?,
            "--rto-ms" => out.rto_ms = v.parse().map_err(|_| bad())?,
            "--split" => out.split = Some(v.parse().map_err(|_| bad())?),
            "--device" => out.device = Some(v.clone()),
            "--gid-index" => out.gid_index = Some(v.parse().map_err(|_| bad())?),
            _ => return Err(usage.into()),
        }
        i += 2;
    }
    if out.ips.len() < 2 || out.rank >= out.ips.len() || out.messages == 0 {
        return Err(usage.into());
    }
    Ok(out)
}

/// SplitMix64's output function.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Value `k` of message `m` of worker `w`: any int32 (so the sums wrap).
fn value(seed: u64, w: usize, m: u32, k: usize) -> i32 {
    let h = mix(seed ^ mix(((w as u64) << 48) ^ (u64::from(m) << 32) ^ k as u64));
    h as u32 as i32
}

/// The first IPv4-mapped GID (::ffff:a.b.c.d) of the device's port 1, else index 0.
fn pick_gid(v: &Verbs, device: Option<&str>) -> R<u8> {
    let devs = v.devices().map_err(|e| e.to_string())?;
    let d = match device {
        Some(n) => devs.iter().find(|d| d.name == n),
        None => devs.first(),
    }
    .ok_or("no RDMA device")?;
    let port = d.ports.first().ok_or("the device has no port")?;
    Ok(port
        .gids
        .iter()
        .find(|(_, g)| g.0[..10] == [0; 10] && g.0[10..12] == [0xff, 0xff])
        .map_or(0, |(i, _)| *i as u8))
}

fn send_info(s: &mut TcpStream, i: &QpInfo, what: &str) -> R<()> {
    s.write_all(&i.to_bytes())
        .map_err(|e| format!("sending QP info to {what}: {e}"))
}

fn recv_info(s: &mut TcpStream, what: &str) -> R<QpInfo> {
    let mut b = [0u8; inabench_devices::verbs::QP_INFO_LEN];
    s.read_exact(&mut b)
        .map_err(|e| format!("receiving QP info from {what}: {e}"))?;
    QpInfo::from_bytes(&b).map_err(|e| e.to_string())
}

fn connect(addr: &str) -> R<TcpStream> {
    let t = Instant::now();
    loop {
        match TcpStream::connect(addr) {
            Ok(s) => {
                s.set_read_timeout(Some(Duration::from_secs(180)))
                    .map_err(|e| e.to_string())?;
                return Ok(s);
            }
            Err(e) if t.elapsed() > Duration::from_secs(180) => {
                return Err(format!("connecting to {addr}: {e}"));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

fn accept(l: &TcpListener, what: &str) -> R<TcpStream> {
    let s = l.accept().map_err(|e| format!("accepting {what}: {e}"))?.0;
    s.set_read_timeout(Some(Duration::from_secs(180)))
        .map_err(|e| e.to_string())?;
    Ok(s)
}

/// Every worker reaches `tag` (worker 0 gathers and releases the others).
fn barrier(star: &mut [TcpStream], tag: u8, worker0: bool) -> R<()> {
    let err = |e: std::io::Error| format!("barrier {}: {e}", tag as char);
    let mut b = [0u8; 1];
    if worker0 {
        for s in star.iter_mut() {
            s.read_exact(&mut b).map_err(err)?;
            if b[0] != tag {
                return Err(format!("barrier {}: got {}", tag as char, b[0] as char));
            }
        }
        for s in star.iter_mut() {
            s.write_all(&[tag]).map_err(err)?;
        }
    } else {
        for s in star.iter_mut() {
            s.write_all(&[tag]).map_err(err)?;
            s.read_exact(&mut b).map_err(err)?;
            if b[0] != tag {
                return Err(format!("barrier {}: got {}", tag as char, b[0] as char));
            }
        }
    }
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("netreduce_worker: FAILED: {e}");
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
    let mut plan = QpPlan::rc(
        a.mtu,
        a.msg_packets,
        a.window,
        a.messages,
        a.rto_ms * 1_000_000,
    );
    // distinct first PSNs per worker; worker 0's first message crosses the 24-bit wrap
    plan.sq_psn = (PSN_MASK - 40 + me as u32 * 0x0010_0001) & PSN_MASK;
    let mb = plan.message_bytes() as usize;
    let mut send = v
        .connect(a.device.as_deref(), 1, gid_index, &plan)
        .map_err(|e| format!("the sending QP: {e}"))?;
    let mut recv = v
        .connect(a.device.as_deref(), 1, gid_index, &plan)
        .map_err(|e| format!("the receiving QP: {e}"))?;
    // my messages: the INA header, then my values
    let per_msg = (mb - NetReduceHeader::LEN) / 4;
    for (m, msg) in send.buf.chunks_mut(mb).enumerate() {
        NetReduceHeader {
            ring_id: 0,
            rank: me as u16,
            msg_id: m as u32,
            msg_len: a.msg_packets,
        }
        .emit(&mut msg[..NetReduceHeader::LEN])
        .map_err(|e| format!("INA header: {e}"))?;
        for (k, w) in msg[NetReduceHeader::LEN..].chunks_exact_mut(4).enumerate() {
            w.copy_from_slice(&value(a.seed, me, m as u32, k).to_be_bytes());
        }
    }
    // control: a stream to the successor (my sending QP's peer), one from the predecessor, and
    // the barrier's star at worker 0
    let ring =
        TcpListener::bind(("0.0.0.0", a.port)).map_err(|e| format!("port {}: {e}", a.port))?;
    let star_l = if me == 0 {
        Some(
            TcpListener::bind(("0.0.0.0", a.port + 1))
                .map_err(|e| format!("port {}: {e}", a.port + 1))?,
        )
    } else {
        None
    };
    let mut to_succ = connect(&format!("{}:{}", a.ips[succ], a.port))?;
    let mut from_pred = accept(&ring, "the predecessor")?;
    send_info(&mut to_succ, &send.info(), "the successor")?;
    let pred_send = recv_info(&mut from_pred, "the predecessor")?;
    recv.connect_to(&pred_send)
        .map_err(|e| format!("the receiving QP: {e}"))?;
    let mut posted = a.messages.min(a.window + 1);
    for m in 0..posted {
        recv.post_recv(u64::from(m), 0, 0)
            .map_err(|e| e.to_string())?;
    }
    send_info(&mut from_pred, &recv.info(), "the predecessor")?;
    let succ_recv = recv_info(&mut to_succ, "the successor")?;
    send.connect_to(&succ_recv)
        .map_err(|e| format!("the sending QP: {e}"))?;
    println!(
        "netreduce_worker: rank {me} of {n} on GID index {gid_index}: sending QP {:#x} (first PSN {:#08x}) -> rank {succ}'s receiving QP {:#x} (rkey {:#x}); receiving QP {:#x} <- rank {pred}'s sending QP {:#x}",
        send.info().qpn,
        plan.sq_psn,
        succ_recv.qpn,
        succ_recv.rkey,
        recv.info().qpn,
        pred_send.qpn
    );
    let mut star = match &star_l {
        Some(l) => (1..n)
            .map(|_| accept(l, "a worker for the barrier"))
            .collect::<R<Vec<_>>>()?,
        None => vec![connect(&format!("{}:{}", a.ips[0], a.port + 1))?],
    };
    barrier(&mut star, b'R', me == 0)?;

    // the all-reduce: WRITEs with immediate = MsgID, `window` in flight
    let writes = plan.writes();
    let total = a.messages as usize;
    let t0 = Instant::now();
    let (mut next, mut sent, mut got) = (0usize, 0usize, 0usize);
    let mut at = vec![Duration::ZERO; total];
    while sent < total || got < total {
        while next < total && next - sent < a.window as usize {
            send.post_write(next as u64, &writes[next], &succ_recv, Some(next as u32))
                .map_err(|e| e.to_string())?;
            next += 1;
        }
        let mut idle = true;
        for c in send.poll(4).map_err(|e| e.to_string())? {
            idle = false;
            if c.wr_id != sent as u64 || c.status != WC_SUCCESS || c.opcode != WC_RDMA_WRITE {
                return Err(format!(
                    "message {sent}: send completion {c:?} (status 12 is IBV_WC_RETRY_EXC_ERR: the QP's retries ran out)"
                ));
            }
            sent += 1;
        }
        for c in recv.poll(4).map_err(|e| e.to_string())? {
            idle = false;
            let want = Completion {
                wr_id: got as u64,
                status: WC_SUCCESS,
                opcode: WC_RECV_RDMA_WITH_IMM,
                byte_len: mb as u32,
                imm: Some(got as u32),
            };
            if c != want {
                return Err(format!(
                    "message {got}: receive completion {c:?}, expected {want:?}"
                ));
            }
            at[got] = t0.elapsed();
            got += 1;
            if posted < a.messages {
                recv.post_recv(u64::from(posted), 0, 0)
                    .map_err(|e| e.to_string())?;
                posted += 1;
            }
        }
        if idle {
            if t0.elapsed() > Duration::from_secs(300) {
                return Err(format!(
                    "after 300 s: {sent} of {total} messages acknowledged, {got} of {total} aggregates received"
                ));
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    let wall = t0.elapsed();

    // every message: the predecessor's INA header, then the sums of every worker's values
    let mut values = 0usize;
    for (m, msg) in recv.buf.chunks(mb).enumerate() {
        let h = NetReduceHeader::parse(&msg[..NetReduceHeader::LEN])
            .map_err(|e| format!("message {m}: INA header: {e}"))?;
        if (usize::from(h.rank), h.msg_id, h.msg_len, h.ring_id)
            != (pred, m as u32, a.msg_packets, 0)
        {
            return Err(format!(
                "message {m}: INA header {h:?}, expected rank {pred}'s for MsgID {m}"
            ));
        }
        for (k, w) in msg[NetReduceHeader::LEN..].chunks_exact(4).enumerate() {
            let want = (0..n).fold(0i32, |s, r| s.wrapping_add(value(a.seed, r, m as u32, k)));
            let got = i32::from_be_bytes([w[0], w[1], w[2], w[3]]);
            if got != want {
                let mine = value(a.seed, me, m as u32, k);
                let theirs = value(a.seed, pred, m as u32, k);
                return Err(format!(
                    "message {m} value {k}: {got}, the sum is {want} (my value {mine}, the predecessor's {theirs})"
                ));
            }
            values += 1;
        }
        println!(
            "message {m}: aggregate exact ({per_msg} values), INA header of rank {pred}, immediate {m}, in at {:.3} s",
            at[m].as_secs_f64()
        );
    }
    barrier(&mut star, b'D', me == 0)?;
    let split = match a.split {
        Some(k) if k > 0 && (k as usize) < total => {
            let k = k as usize;
            format!(
                "; messages 0..{k} in {:.3} s, {k}..{total} in {:.3} s",
                at[k - 1].as_secs_f64(),
                (at[total - 1] - at[k - 1]).as_secs_f64()
            )
        }
        _ => String::new(),
    };
    println!(
        "netreduce_worker: rank {me}: all {total} messages exact: {values} int32 values, each the sum of the {n} workers' values, through plain RC QPs ({} packets of {} B per message, window {}); {:.3} s{split}",
        a.msg_packets,
        a.mtu,
        a.window,
        wall.as_secs_f64()
    );
    println!("netreduce_worker: ok");
    Ok(())
}
