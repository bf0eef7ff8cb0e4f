//! A bump in the wire between RoCE hosts, on the host of the Soft-RoCE rig (#36 item 4, the step
//! before NetReduce's accelerator sits there): every frame that comes in on one tap goes out on
//! the tap of its destination MAC, as it is, except that
//! - every RoCEv2 frame's ICRC is checked with the suite's own `inabench_wire::icrc` (the code the
//!   NetReduce accelerator and the switches use to rebuild packets), so a frame the kernel's
//!   rdma_rxe built and our computation disagree on is counted;
//! - the ICRC of the first RC RDMA WRITE Middle packet is corrupted (the last four bytes
//!   inverted): the receiving kernel must drop it, and its RC go-back-N must resend that PSN.
//!
//! ```text
//! icrc_relay <tap0> <tap1> ...   # tap i leads to guest i, MAC 52:54:00:77:00:<i+1>
//! ```
//! Runs until the file named by RIG_RELAY_UNTIL exists (the rig makes it when the guests are
//! done), then prints its counts and exits 0 when every frame verified, the corrupted PSN came
//! again and nothing else failed; 1 otherwise.

use inabench_fabric::raw::PacketSocket;
use inabench_wire::icrc;
use std::collections::HashSet;
use std::time::{Duration, Instant};

const ROCE_PORT: u16 = 4791;
const RC_RDMA_WRITE_MIDDLE: u8 = 0x07;

/// A RoCEv2 frame's IP packet (ICRC included), BTH opcode, destination QP and PSN.
fn roce(frame: &[u8]) -> Option<(std::ops::Range<usize>, u8, u32, u32)> {
    if frame.len() < 14 + 20 + 8 + 12 + 4 || frame[12..14] != [0x08, 0x00] {
        return None;
    }
    let ip = 14;
    let ihl = usize::from(frame[ip] & 0x0f) * 4;
    if frame[ip] >> 4 != 4 || frame[ip + 9] != 17 || ihl < 20 {
        return None;
    }
    let udp = ip + ihl;
    let bth = udp + 8;
    if frame.len() < bth + 12 + 4
        || u16::from_be_bytes([frame[udp + 2], frame[udp + 3]]) != ROCE_PORT
    {
        return None;
    }
    let qp = u32::from_be_bytes([0, frame[bth + 5], frame[bth + 6], frame[bth + 7]]);
    let psn = u32::from_be_bytes([0, frame[bth + 9], frame[bth + 10], frame[bth + 11]]);
    // the IP packet ends where its total length says (an Ethernet pad may follow)
    let end = ip + usize::from(u16::from_be_bytes([frame[ip + 2], frame[ip + 3]]));
    (end <= frame.len() && end >= bth + 12 + 4).then_some((ip..end, frame[bth], qp, psn))
}

fn main() {
    let taps: Vec<String> = std::env::args().skip(1).collect();
    if taps.len() < 2 {
        eprintln!("usage: icrc_relay <tap0> <tap1> ... (RIG_RELAY_UNTIL names the stop file)");
        std::process::exit(2);
    }
    let until = std::env::var_os("RIG_RELAY_UNTIL").map(std::path::PathBuf::from);
    let socks: Vec<PacketSocket> = match taps
        .iter()
        .map(|t| {
            let s = PacketSocket::open(t)?;
            s.ignore_outgoing()?;
            Ok(s)
        })
        .collect::<std::io::Result<_>>()
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("icrc_relay: FAILED: opening the taps {taps:?}: {e}");
            std::process::exit(1);
        }
    };
    let mut buf = vec![0u8; 65536];
    let (mut frames, mut roce_frames, mut verified, mut failed, mut send_errors) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut corrupted: Option<(u32, u32)> = None;
    let mut resent = 0u64;
    let mut seen: HashSet<(u32, u32)> = HashSet::new();
    let started = Instant::now();
    loop {
        let mut idle = true;
        for (i, s) in socks.iter().enumerate() {
            let Ok(Some((n, outgoing))) = s.recv(&mut buf) else {
                continue;
            };
            if outgoing || n > buf.len() {
                continue;
            }
            idle = false;
            frames += 1;
            let frame = &mut buf[..n];
            if let Some((ip, op, qp, psn)) = roce(frame) {
                roce_frames += 1;
                match icrc::verify(&frame[ip.clone()]) {
                    Ok(()) => verified += 1,
                    Err(e) => {
                        failed += 1;
                        eprintln!(
                            "icrc_relay: frame from tap {i} (QP {qp:#x} PSN {psn:#x}): {e:?}"
                        );
                    }
                }
                if corrupted == Some((qp, psn)) {
                    resent += 1;
                }
                if corrupted.is_none() && op == RC_RDMA_WRITE_MIDDLE && !seen.contains(&(qp, psn)) {
                    for b in &mut frame[ip.end - 4..ip.end] {
                        *b = !*b;
                    }
                    corrupted = Some((qp, psn));
                }
                seen.insert((qp, psn));
            }
            // to the tap of the destination MAC (52:54:00:77:00:<j+1>), else to every other tap
            let dst = frame[..6]
                .starts_with(&[0x52, 0x54, 0x00, 0x77, 0x00])
                .then(|| usize::from(frame[5]).wrapping_sub(1))
                .filter(|j| *j < socks.len() && *j != i);
            for (j, out) in socks.iter().enumerate() {
                if j != i && dst.is_none_or(|d| d == j) && out.send(frame).is_err() {
                    send_errors += 1;
                }
            }
        }
        if idle {
            if until.as_ref().is_some_and(|p| p.exists()) {
                break;
            }
            if started.elapsed() > Duration::from_secs(900) {
                eprintln!("icrc_relay: stopping after 900 s");
                break;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    println!(
        "icrc_relay: {frames} frames relayed, {roce_frames} RoCEv2, ICRC verified by inabench_wire::icrc: {verified}, failed: {failed}, send errors: {send_errors}"
    );
    match corrupted {
        Some((qp, psn)) => println!(
            "icrc_relay: corrupted the ICRC of RC WRITE Middle QP {qp:#x} PSN {psn:#x}; that PSN came again {resent} time(s)"
        ),
        None => println!("icrc_relay: no RC WRITE Middle packet to corrupt"),
    }
    let ok =
        failed == 0 && roce_frames > 0 && corrupted.is_some() && resent > 0 && send_errors == 0;
    println!("icrc_relay: {}", if ok { "ok" } else { "FAILED" });
    std::process::exit(if ok { 0 } else { 1 });
}
