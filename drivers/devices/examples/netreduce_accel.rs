//! NetReduce's accelerator as a bump in the wire between RoCE hosts (#36 item 4, "transport
//! transparency shown for real"): the suite's `inabench_ina::fpga::Accelerator`, unchanged, served
//! on the raw fabric's AF_PACKET sockets (`fabric::raw::serve_until`), one interface per worker.
//! On the Soft-RoCE rig (tools/rxe-rig) the interfaces are the guests' data taps and the workers
//! are plain RC queue pairs of the guests' kernel RoCE stack (rdma_rxe), driven by the
//! `netreduce_worker` example: each worker's RC QP writes its messages to its successor's QP,
//! the accelerator aggregates them and sends the aggregate to every worker in the headers of its
//! predecessor's packets (QPN, PSN, RETH as the predecessor sent them, ICRC recomputed by
//! `inabench_wire::icrc`), and ACKs and NAKs pass through to their destination.
//!
//! ```text
//! netreduce_accel <iface0> <iface1> ... [--msg-packets 170] [--window 2] [--mtu 1024]
//!                 [--loss P --loss-from-msg K --seed S] [--release lazy|one-window-away]
//!                 [--worker A.B.C.D@aa:bb:cc:dd:ee:ff ...]
//! ```
//! Interface i leads to worker i. `--worker`, once per interface in the same order: worker i's
//! data address as the testbed file states it (the rig's workload passes its testbed's plan,
//! `workloads/src/netreduce/rig.rs`), which the accelerator finds its workers by
//! (`Accelerator::with_addresses`); without it, worker i is at 10.x.y.<i+1> (the accelerator's
//! synthetic `AddressPlan`, which reads the rig's guests at 10.77.0.<i+1> the same way).
//! `--loss P`: once the first packet of message K (MsgID >= K, read from its INA header) has come
//! in, every frame crossing the bump (either way: the guests' stacks inject nothing) is lost with
//! probability P, from a seeded generator per link direction (`fabric::fault`); messages 0..K-1
//! run clean, so one rig run shows both. The workers' RC go-back-N must recover.
//! `--release`: when an aggregator is freed (`netreduce::Release`): `lazy` (the suite's default)
//! or `one-window-away` (the paper's rule, Sec. 3.1).
//!
//! Runs until the file RIG_RELAY_UNTIL names exists (the rig makes it when the guests are done),
//! or 900 s; prints its counts and exits 0 when every RoCEv2 frame from the workers had a valid
//! ICRC, the accelerator sent aggregates, and (with loss) frames were lost; 1 otherwise. Whether
//! the sums are exact is for the workers to say: they compare what their RC QPs received with
//! the sums they compute themselves.

use inabench_fabric::addresses::{AddressPlan, parse_ip_mac};
use inabench_fabric::fault::{Fate, FaultInjector, Faults};
use inabench_fabric::raw::{Link, PacketSocket, serve_until};
use inabench_fabric::{Endpoint, Nanos, NodeId, Transmit};
use inabench_ina::common::Switch;
use inabench_ina::fpga::Accelerator;
use inabench_ina::netreduce::{Layout, Release};
use inabench_wire::icrc;
use inabench_wire::ina::NetReduceHeader;
use std::collections::{HashMap, HashSet};
use std::time::Duration;

const ROCE_PORT: u16 = 4791;
/// BTH opcodes (RC) of the first packet of a WRITE with a RETH right before the payload (First,
/// Only): where NetReduce's INA header rides.
const WRITE_FIRST_OR_ONLY: [u8; 2] = [0x06, 0x0a];
/// RC ACKNOWLEDGE.
const ACK: u8 = 0x11;

/// A RoCEv2 frame's IP packet range, BTH opcode, destination QP, PSN and (a WRITE's first
/// packet with a NetReduce header) its MsgID.
struct Roce {
    ip: std::ops::Range<usize>,
    op: u8,
    qp: u32,
    psn: u32,
    msg_id: Option<u32>,
}

fn roce(frame: &[u8]) -> Option<Roce> {
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
    let end = ip + usize::from(u16::from_be_bytes([frame[ip + 2], frame[ip + 3]]));
    if end > frame.len() || end < bth + 12 + 4 {
        return None;
    }
    let op = frame[bth];
    // a first packet: BTH, RETH (16 bytes), then the payload, which starts with the INA header
    let payload = bth + 12 + 16;
    let msg_id = (WRITE_FIRST_OR_ONLY.contains(&op) && end >= payload + NetReduceHeader::LEN + 4)
        .then(|| NetReduceHeader::parse(&frame[payload..end - 4]).ok())
        .flatten()
        .map(|h| h.msg_id);
    Some(Roce {
        ip: ip..end,
        op,
        qp: u32::from_be_bytes([0, frame[bth + 5], frame[bth + 6], frame[bth + 7]]),
        psn: u32::from_be_bytes([0, frame[bth + 9], frame[bth + 10], frame[bth + 11]]),
        msg_id,
    })
}

/// What the bump saw.
#[derive(Debug, Default)]
struct Counts {
    frames_in: u64,
    roce_in: u64,
    icrc_ok: u64,
    icrc_failed: u64,
    not_roce: u64,
    /// data packets whose (sender, QP, PSN) came before: the senders' go-back-N resending
    resent_in: u64,
    /// ... of them before the loss began
    resent_clean: u64,
    acks_in: u64,
    lost_in: u64,
    lost_out: u64,
    /// the highest MsgID seen in an INA header
    last_msg: Option<u32>,
    /// per worker (its link): RoCEv2 frames and their bytes (Ethernet header to ICRC, as on the
    /// tap) that came in from it, data, resends and ACKs alike
    link_frames: Vec<u64>,
    link_bytes: Vec<u64>,
    /// per (worker, MsgID): when the message's first packet (WRITE First/Only with the INA
    /// header) first came in from the worker's link, and when the first packet of its aggregate
    /// first left on that link (the serving loop's clock, ns)
    first_in: HashMap<(NodeId, u32), Nanos>,
    first_out: HashMap<(NodeId, u32), Nanos>,
}

/// The accelerator, with the loss of the bump around it (off until message `loss_from`).
struct Bump {
    acc: Accelerator,
    faults: FaultInjector,
    loss_from: u32,
    lossy: bool,
    seen: HashSet<(u8, u32, u32)>,
    c: Counts,
}

impl Endpoint for Bump {
    fn id(&self) -> NodeId {
        self.acc.id()
    }

    fn handle_packet(&mut self, now: Nanos, from: NodeId, frame: &[u8]) {
        self.c.frames_in += 1;
        let Some(r) = roce(frame) else {
            // the guests' own traffic on the data NIC (IPv6 neighbour discovery and the like):
            // the accelerator drops what it cannot parse
            self.c.not_roce += 1;
            self.acc.handle_packet(now, from, frame);
            return;
        };
        self.c.roce_in += 1;
        if let Some(w) = self.c.link_frames.get_mut(from as usize) {
            *w += 1;
            self.c.link_bytes[from as usize] += frame.len() as u64;
        }
        match icrc::verify(&frame[r.ip.clone()]) {
            Ok(()) => self.c.icrc_ok += 1,
            Err(e) => {
                self.c.icrc_failed += 1;
                eprintln!(
                    "netreduce_accel: frame from worker {from} (QP {:#x} PSN {:#x}): {e:?}",
                    r.qp, r.psn
                );
            }
        }
        if let Some(m) = r.msg_id {
            self.c.first_in.entry((from, m)).or_insert(now);
            self.c.last_msg = self.c.last_msg.max(Some(m));
            if m >= self.loss_from && !self.lossy && self.faults.faults.loss > 0.0 {
                self.lossy = true;
                eprintln!("netreduce_accel: loss on from message {m}'s first packet");
            }
        }
        if r.op == ACK {
            self.c.acks_in += 1;
        } else if !self.seen.insert((frame[14 + 15], r.qp, r.psn)) {
            self.c.resent_in += 1;
            if !self.lossy {
                self.c.resent_clean += 1;
            }
        }
        if self.lossy && self.faults.fate(from, self.id()) == Fate::Drop {
            self.c.lost_in += 1;
            return;
        }
        self.acc.handle_packet(now, from, frame);
    }

    fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        loop {
            let t = self.acc.poll_transmit(now)?;
            if self.lossy && self.faults.fate(self.id(), t.to) == Fate::Drop {
                self.c.lost_out += 1;
                self.acc.recycle(t.bytes);
                continue;
            }
            if let Some(m) = roce(&t.bytes).and_then(|r| r.msg_id) {
                self.c.first_out.entry((t.to, m)).or_insert(now);
            }
            return Some(t);
        }
    }

    fn poll_timeout(&self) -> Option<Nanos> {
        self.acc.poll_timeout()
    }

    fn handle_timeout(&mut self, now: Nanos) {
        self.acc.handle_timeout(now);
    }

    fn recycle(&mut self, buf: Vec<u8>) {
        self.acc.recycle(buf);
    }
}

struct Args {
    ifaces: Vec<String>,
    msg_packets: u32,
    window: u32,
    mtu: u32,
    loss: f64,
    loss_from: u32,
    seed: u64,
    release: Release,
    /// `--worker` addresses, in worker order (empty: the synthetic plan)
    at: Vec<String>,
}

fn args() -> Result<Args, String> {
    let usage = "usage: netreduce_accel <iface0> <iface1> ... [--msg-packets N] [--window N] [--mtu B] [--loss P --loss-from-msg K --seed S] [--release lazy|one-window-away] [--worker A.B.C.D@MAC (one per interface)]";
    let a: Vec<String> = std::env::args().skip(1).collect();
    let mut out = Args {
        ifaces: Vec::new(),
        msg_packets: 170,
        window: 2,
        mtu: 1024,
        loss: 0.0,
        loss_from: 0,
        seed: 1,
        release: Release::Lazy,
        at: Vec::new(),
    };
    let mut i = 0;
    while i < a.len() {
        if !a[i].starts_with("--") {
            out.ifaces.push(a[i].clone());
            i += 1;
            continue;
        }
        let v = a.get(i + 1).ok_or(usage)?;
        let bad = || format!("bad value {v} for {}", a[i]);
        match a[i].as_str() {
            "--msg-packets" => out.msg_packets = v.parse().map_err(|_| bad())?,
            "--window" => out.window = v.parse().map_err(|_| bad())?,
            "--mtu" => out.mtu = v.parse().map_err(|_| bad())?,
            "--loss" => out.loss = v.parse().map_err(|_| bad())?,
            "--loss-from-msg" => out.loss_from = v.parse().map_err(|_| bad())?,
            "--seed" => out.seed = v.parse().map_err(|_| bad())?,
            "--worker" => out.at.push(v.clone()),
            "--release" => {
                out.release = match v.as_str() {
                    "lazy" => Release::Lazy,
                    "one-window-away" => Release::OneWindowAway,
                    _ => return Err(bad()),
                }
            }
            _ => return Err(usage.into()),
        }
        i += 2;
    }
    if out.ifaces.len() < 2 || !(0.0..1.0).contains(&out.loss) {
        return Err(usage.into());
    }
    if !out.at.is_empty() && out.at.len() != out.ifaces.len() {
        return Err(format!(
            "{} --worker addresses for {} interfaces: give one per interface, in the same order",
            out.at.len(),
            out.ifaces.len()
        ));
    }
    Ok(out)
}

/// The plan the `--worker` addresses state (None: none given, the synthetic plan).
fn plan_of(at: &[String]) -> Result<Option<AddressPlan>, String> {
    if at.is_empty() {
        return Ok(None);
    }
    let workers = at
        .iter()
        .map(|a| {
            parse_ip_mac(a).ok_or_else(|| format!("--worker {a}: not A.B.C.D@aa:bb:cc:dd:ee:ff"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    AddressPlan::new(workers, None)
        .map(Some)
        .map_err(|e| format!("--worker addresses: {e}"))
}

fn main() {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let workers = a.ifaces.len();
    let plan = match plan_of(&a.at) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    // the layout the workers use: N workers, MsgLen packets of `mtu` bytes, a window of N
    // messages; `messages` and `elements` are the hosts' business (the accelerator addresses
    // aggregators by MsgID and PSN only)
    let layout = Layout {
        float: false,
        workers,
        msg_len: a.msg_packets,
        window: a.window,
        payload: a.mtu,
        messages: 1,
        elements: 1,
        qps: 1,
        release: a.release,
    };
    let links = match a
        .ifaces
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let sock = PacketSocket::open(t)?;
            sock.ignore_outgoing()?;
            Ok(Link {
                peer: i as NodeId,
                sock,
            })
        })
        .collect::<std::io::Result<Vec<_>>>()
    {
        Ok(l) => l,
        Err(e) => {
            eprintln!("netreduce_accel: FAILED: opening {:?}: {e}", a.ifaces);
            std::process::exit(1);
        }
    };
    let mut bump = Bump {
        acc: match &plan {
            Some(p) => Accelerator::new(workers as NodeId, layout).with_addresses(p.clone()),
            None => Accelerator::new(workers as NodeId, layout),
        },
        faults: FaultInjector::new(Faults {
            loss: a.loss,
            seed: a.seed,
            ..Faults::default()
        }),
        loss_from: a.loss_from,
        lossy: false,
        seen: HashSet::new(),
        c: Counts {
            link_frames: vec![0; workers],
            link_bytes: vec![0; workers],
            ..Counts::default()
        },
    };
    println!(
        "netreduce_accel: inabench_ina::fpga::Accelerator for {workers} workers on {:?} (AF_PACKET) at {}, MsgLen {} x {} B, window {}, aggregators freed {:?}{}",
        a.ifaces,
        if plan.is_some() {
            format!("the given addresses {}", a.at.join(" "))
        } else {
            "10.x.y.<i+1> (the synthetic plan)".to_string()
        },
        a.msg_packets,
        a.mtu,
        a.window,
        a.release,
        if a.loss > 0.0 {
            format!(
                ", loss {} both ways from message {} (seed {})",
                a.loss, a.loss_from, a.seed
            )
        } else {
            String::new()
        }
    );
    let until = std::env::var_os("RIG_RELAY_UNTIL").map(std::path::PathBuf::from);
    let rep = serve_until(
        &mut bump,
        &links,
        a.mtu as usize + 256,
        Duration::from_secs(900),
        &mut || until.as_ref().is_some_and(|p| p.exists()),
    );
    let c = &bump.c;
    let s = bump.acc.stats();
    println!(
        "netreduce_accel: {} frames in ({} RoCEv2: ICRC verified by inabench_wire::icrc {}, failed {}; {} ACK/NAK; {} data packets resent by the workers' go-back-N, {} of them before the loss began; {} not RoCEv2), {} frames out, send errors {}, {:.1} s",
        c.frames_in,
        c.roce_in,
        c.icrc_ok,
        c.icrc_failed,
        c.acks_in,
        c.resent_in,
        c.resent_clean,
        c.not_roce,
        rep.frames_tx,
        rep.send_errors,
        rep.wall_ns as f64 / 1e9
    );
    println!(
        "netreduce_accel: accelerator: {} packets in, {} out (aggregates and ACKs), {} dropped, {} duplicates not summed again; messages 0..={}; counters {:?}",
        s.packets_in,
        s.packets_out,
        s.dropped,
        s.duplicates_ignored,
        c.last_msg.map_or("none".into(), |m| m.to_string()),
        bump.acc.counters()
    );
    println!(
        "netreduce_accel: lost on purpose: {} frames to the accelerator, {} from it",
        c.lost_in, c.lost_out
    );
    // per worker: what its link carried to the bump, and each message's round trip on the link
    // (its first packet in to its aggregate's first packet out; `-` where either is missing)
    for w in 0..workers {
        let rtt: Vec<String> = (0..=c.last_msg.unwrap_or(0))
            .map(|m| {
                let k = (w as NodeId, m);
                match (c.first_in.get(&k), c.first_out.get(&k)) {
                    (Some(i), Some(o)) if o >= i => (o - i).to_string(),
                    _ => "-".into(),
                }
            })
            .collect();
        println!(
            "netreduce_accel: worker {w}: link in {} RoCEv2 frames, {} bytes (Ethernet header to ICRC); rtt_ns by MsgID: {}",
            c.link_frames[w],
            c.link_bytes[w],
            rtt.join(" ")
        );
    }
    let ok = c.icrc_failed == 0
        && c.roce_in > 0
        && s.packets_out > 0
        && rep.send_errors == 0
        && (a.loss == 0.0 || c.lost_in + c.lost_out > 0);
    println!("netreduce_accel: {}", if ok { "ok" } else { "FAILED" });
    std::process::exit(if ok { 0 } else { 1 });
}
