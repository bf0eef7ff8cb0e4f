//! A NetReduce worker on plain RC queue pairs of a host's RoCE stack (#36 item 4, "transport
//! transparency shown for real"): what NetReduce's host does over an unmodified RDMA NIC
//! (Sec. 3.2 of the paper), on the verbs binding (drivers/devices/src/verbs.rs).
//!
//! Worker r of N has two RC QPs: a sending QP connected to the receiving QP of its successor
//! r+1 (mod N), and a receiving QP connected to its predecessor's sending QP. QPN, first PSN,
//! GID, buffer address and rkey are exchanged with the two neighbours over TCP (the control
//! NIC), nothing rewritten or synthetic. The data path runs over the message-level host
//! transport (`inabench_transport::HostTransport` on `inabench_devices::transport::VerbsQp`, as
//! `ring_worker`'s). Each message is one RDMA WRITE with immediate (the
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
//!                  [--rto-ms 500] [--split K] [--slots S] [--device NAME] [--gid-index N]
//! ```
//! `--split K` reports the time of messages 0..K-1 and K.. apart (the rig's test turns loss on
//! at message K). `--slots S` (default: every message its own place) registers S messages' worth
//! of memory per QP and reuses it in turn: message m goes to place m mod S, and is checked before
//! message m+S is posted (else after the last message). Prints one line per message and
//! `netreduce_worker: ok`; exits 1 on the first failure.

#[path = "ring_qps/mod.rs"]
mod ring_qps;

use inabench_devices::transport::VerbsQp;
use inabench_devices::verbs::{PSN_MASK, QpPlan, Verbs};
use inabench_transport::{Completion, CompletionKind, HostTransport};
use inabench_wire::ina::NetReduceHeader;
use ring_qps::{R, RingQps, pick_gid, value};
use std::time::{Duration, Instant};

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
    slots: Option<u32>,
    device: Option<String>,
    gid_index: Option<u8>,
}

fn args() -> R<Args> {
    let usage = "usage: netreduce_worker <rank> <ctl-ip-0> <ctl-ip-1> ... [--port P] [--messages M] [--msg-packets L] [--window W] [--mtu B] [--seed S] [--rto-ms T] [--split K] [--slots S] [--device NAME] [--gid-index N]";
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
        slots: None,
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
            "--slots" => out.slots = Some(v.parse().map_err(|_| bad())?),
            "--device" => out.device = Some(v.clone()),
            "--gid-index" => out.gid_index = Some(v.parse().map_err(|_| bad())?),
            _ => return Err(usage.into()),
        }
        i += 2;
    }
    if out.ips.len() < 2 || out.rank >= out.ips.len() || out.messages == 0 {
        return Err(usage.into());
    }
    if out.slots.is_some_and(|s| s <= out.window) {
        return Err(format!("--slots must exceed the window ({})", out.window));
    }
    Ok(out)
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
    // the places in each QP's memory: every message its own, or --slots of them in turn
    let slots = a.slots.unwrap_or(a.messages).min(a.messages);
    let mut plan = QpPlan::rc(a.mtu, a.msg_packets, a.window, slots, a.rto_ms * 1_000_000);
    // distinct first PSNs per worker; worker 0's first message crosses the 24-bit wrap
    plan.sq_psn = (PSN_MASK - 40 + me as u32 * 0x0010_0001) & PSN_MASK;
    let mb = plan.message_bytes() as usize;
    // my messages: the INA header, then my values
    let per_msg = (mb - NetReduceHeader::LEN) / 4;
    // message m in its place: the INA header, then my values
    let write_message = |msg: &mut [u8], m: u32| -> R<()> {
        let h = NetReduceHeader {
            ring_id: 0,
            rank: me as u16,
            msg_id: m,
            msg_len: a.msg_packets,
        };
        h.emit(&mut msg[..NetReduceHeader::LEN])
            .map_err(|e| format!("INA header: {e}"))?;
        for (k, w) in msg[NetReduceHeader::LEN..].chunks_exact_mut(4).enumerate() {
            w.copy_from_slice(&value(a.seed, me, m, k).to_be_bytes());
        }
        Ok(())
    };
    let mut header = Ok(());
    let fill = |buf: &mut [u8]| {
        for (m, msg) in buf.chunks_mut(mb).enumerate() {
            if let Err(e) = write_message(msg, m as u32) {
                header = Err(e);
            }
        }
    };
    let mut posted = a.messages.min(a.window + 1);
    let mut q = RingQps::connect(
        &v,
        a.device.as_deref(),
        gid_index,
        &plan,
        &a.ips,
        me,
        a.port,
        posted,
        fill,
    )?;
    header?;
    println!(
        "netreduce_worker: rank {me} of {n} on GID index {gid_index}: sending QP {:#x} (first PSN {:#08x}) -> rank {succ}'s receiving QP {:#x} (rkey {:#x}); receiving QP {:#x} <- rank {pred}'s sending QP {:#x}",
        q.send.info().qpn,
        plan.sq_psn,
        q.succ_recv.qpn,
        q.succ_recv.rkey,
        q.recv.info().qpn,
        q.pred_send.qpn
    );
    q.barrier(b'R')?;
    let succ_recv = q.succ_recv;
    // message m's aggregate in its place: the predecessor's INA header, then the sums of every
    // worker's values
    let check = |msg: &[u8], m: u32| -> R<String> {
        let h = NetReduceHeader::parse(&msg[..NetReduceHeader::LEN])
            .map_err(|e| format!("message {m}: INA header: {e}"))?;
        if (usize::from(h.rank), h.msg_id, h.msg_len, h.ring_id) != (pred, m, a.msg_packets, 0) {
            return Err(format!(
                "message {m}: INA header {h:?}, expected rank {pred}'s for MsgID {m}"
            ));
        }
        for (k, w) in msg[NetReduceHeader::LEN..].chunks_exact(4).enumerate() {
            let want = (0..n).fold(0i32, |s, r| s.wrapping_add(value(a.seed, r, m, k)));
            let got = i32::from_be_bytes([w[0], w[1], w[2], w[3]]);
            if got != want {
                let mine = value(a.seed, me, m, k);
                let theirs = value(a.seed, pred, m, k);
                return Err(format!(
                    "message {m} value {k}: {got}, the sum is {want} (my value {mine}, the predecessor's {theirs})"
                ));
            }
        }
        Ok(format!(
            "message {m}: aggregate exact ({per_msg} values), INA header of rank {pred}, immediate {m}"
        ))
    };
    let place = |m: usize| (m % slots as usize) * mb..(m % slots as usize + 1) * mb;

    // the all-reduce: WRITEs with immediate = MsgID, `window` in flight, over the
    // message-level transport (inabench_transport::HostTransport on the two verbs QPs as
    // connected above: the same WRITEs, into the same offsets of the successor's buffer)
    let writes = plan.writes();
    let total = a.messages as usize;
    let t0 = Instant::now();
    let (mut next, mut sent, mut got) = (0usize, 0usize, 0usize);
    let mut at = vec![Duration::ZERO; total];
    // the messages checked (in order) and their lines
    let mut lines: Vec<String> = Vec::with_capacity(total);
    {
        let pred_send = q.pred_send;
        let mut send = VerbsQp::connected(&mut q.send, succ_recv);
        let mut recv = VerbsQp::connected(&mut q.recv, pred_send);
        while sent < total || got < total {
            // message `next` takes the place of message next - slots: posted once that one's
            // data was sent and its aggregate arrived and was checked
            while next < total
                && next - sent < a.window as usize
                && (next < slots as usize || got > next - slots as usize)
            {
                if next >= slots as usize {
                    let old = next - slots as usize;
                    if lines.len() == old {
                        lines.push(check(&recv.buf()[place(old)], old as u32)?);
                    }
                    write_message(&mut send.buf_mut()[place(next)], next as u32)?;
                }
                let w = &writes[next % slots as usize];
                send.post_write(next as u64, w.offset, w.len, Some(next as u32))
                    .map_err(|e| e.to_string())?;
                next += 1;
            }
            let mut idle = true;
            for c in send.poll(4).map_err(|e| e.to_string())? {
                idle = false;
                if c.wr_id != sent as u64 || c.error.is_some() || c.kind != CompletionKind::Write {
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
                    kind: CompletionKind::RecvWriteImm,
                    error: None,
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
                    recv.post_recv(u64::from(posted))
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
    }
    let wall = t0.elapsed();

    // every message not checked yet (all of them without --slots)
    for m in lines.len()..total {
        lines.push(check(&q.recv.buf[place(m)], m as u32)?);
    }
    let values = per_msg * total;
    for (m, l) in lines.iter().enumerate() {
        println!("{l}, in at {:.6} s", at[m].as_secs_f64());
    }
    q.barrier(b'D')?;
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
        "netreduce_worker: rank {me}: all {total} messages exact: {values} int32 values, each the sum of the {n} workers' values, through plain RC QPs ({} packets of {} B per message, window {}, {slots} places); {:.3} s{split}",
        a.msg_packets,
        a.mtu,
        a.window,
        wall.as_secs_f64()
    );
    println!("netreduce_worker: ok");
    Ok(())
}
