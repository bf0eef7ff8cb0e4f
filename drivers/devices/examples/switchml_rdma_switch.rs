//! SwitchML-RDMA's switch between RoCE hosts (#36 item 4, "SwitchML-RDMA over UC"): the suite's
//! switch logic, `inabench_ina::switchml_rdma` as `SwitchMlRdma::build` makes it (slot pool,
//! shadow copies, the worker bitmap, PSN linking of a message's packets), unchanged, served on
//! the raw fabric's AF_PACKET sockets (`fabric::raw::serve_until`), one interface per worker.
//! On the Soft-RoCE rig (tools/rxe-rig) the interfaces are the guests' data taps and the
//! workers are plain UC queue pairs of the guests' kernel RoCE stack (rdma_rxe), driven by the
//! `switchml_rdma_worker` example as SwitchML-RDMA's released client drives a NIC.
//!
//! Around the switch sits its address plan, what the release's controller installs in the
//! switch's tables per worker: the worker's MAC (learned from its link), IPv4 address, QPN,
//! result buffer and R_Key (read from the file the worker writes before it sends,
//! `<plan-dir>/guest<i>/switchml_rdma_qp`). A worker's WRITE keeps everything but its RETH
//! address, which is mapped into the switch's own plan (`switchml_rdma::result_buffer`: the
//! switch computes a packet's place from it); the switch's results are mapped back: Ethernet
//! and IP addresses (the switch is `--switch-ip`, `--switch-mac`), DestQP, RETH address and
//! R_Key the worker's own.
//!
//! The ICRC: rdma_rxe checks it on every packet, so this host side recomputes the ICRC of every
//! rewritten frame in software (`inabench_wire::roce::FrameRepr::build`, `inabench_wire::icrc`),
//! as `netreduce_accel` does. The switch model itself keeps the ICRC of the packet it rewrote,
//! as a Tofino 1 does: SwitchML-RDMA's release (RDMAExampleClient's README) finds the ICRC
//! "difficult for us to generate for large packets in Tofino 1" and disables ICRC checking on
//! the ConnectX NICs with register settings from Mellanox instead; a testbed of ConnectX NICs
//! and a Tofino 1 needs that, this rig does not. `--stale-icrc N` sends the first N results to
//! each worker with the ICRC the switch left (a Tofino 1's): the guests' kernels drop them and
//! the workers' own timeout and retry recover (the switch answers a resent packet of a finished
//! slot with its result again).
//!
//! ```text
//! switchml_rdma_switch <iface0> <iface1> ... [--plan-dir DIR] [--mtu 1024] [--msg-packets 4]
//!                      [--pool 32] [--switch-ip 10.77.0.254] [--switch-mac 52:54:00:77:00:fe]
//!                      [--stale-icrc N]
//! ```
//! `--plan-dir` defaults to RIG_CTL_DIR (the rig's run folder the guests write to); once its
//! sockets are open the switch writes `switchml_rdma_switch.ready` there. Runs until
//! the file RIG_RELAY_UNTIL names exists (the rig makes it when the guests are done), or 900 s;
//! prints its counts and exits 0 when every RoCEv2 frame from the workers had a valid ICRC,
//! every worker's plan was read, the switch sent results and no send failed; 1 otherwise.
//! Whether the sums are exact is for the workers to say.

use inabench_fabric::raw::{Link, PacketSocket, serve_until};
use inabench_fabric::{Endpoint, Nanos, NodeId, Transmit};
use inabench_ina::common::{AllReduceConfig, Switch, System};
use inabench_ina::switchml_rdma::{SwitchMlRdma, result_buffer};
use inabench_wire::ina::switchml_rdma::ResultImm;
use inabench_wire::roce::{FrameRepr, IcrcCheck};
use std::path::PathBuf;
use std::time::Duration;

/// One worker's entry in the switch's address plan.
#[derive(Debug, Clone, Copy)]
struct Entry {
    qpn: u32,
    rkey: u32,
    addr: u64,
    ip: [u8; 4],
}

fn read_entry(path: &std::path::Path) -> Result<Option<Entry>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let bad = || {
        format!(
            "{}: not `qpn Q rkey K addr A ip I`: {text:?}",
            path.display()
        )
    };
    let f: Vec<&str> = text.split_whitespace().collect();
    if f.len() != 8 || f[0] != "qpn" || f[2] != "rkey" || f[4] != "addr" || f[6] != "ip" {
        return Err(bad());
    }
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).map_err(|_| bad());
    let ip: std::net::Ipv4Addr = f[7].parse().map_err(|_| bad())?;
    Ok(Some(Entry {
        qpn: u32::try_from(hex(f[1])?).map_err(|_| bad())?,
        rkey: u32::try_from(hex(f[3])?).map_err(|_| bad())?,
        addr: hex(f[5])?,
        ip: ip.octets(),
    }))
}

#[derive(Debug, Default)]
struct Counts {
    frames_in: u64,
    roce_in: u64,
    icrc_ok: u64,
    icrc_failed: u64,
    not_roce: u64,
    /// frames from a worker before its plan entry could be read, or not addressed to the switch
    unplanned: u64,
    /// results rewritten with the worker's addresses and a recomputed ICRC
    results_out: u64,
    /// ... sent with the switch's stale ICRC instead (`--stale-icrc`)
    stale_out: Vec<u64>,
    results_to: Vec<u64>,
    rewrite_failed: u64,
    /// per worker: the RoCEv2 frames and bytes its link carried to the switch (Ethernet header
    /// to ICRC, as the tap sees them)
    link_frames: Vec<u64>,
    link_bytes: Vec<u64>,
    /// per worker: when each message's first packet (the one with the RETH, keyed by its pool
    /// index, the R_Key) came in, until the result for that pool index goes out to the worker
    first_in: Vec<std::collections::HashMap<u32, Nanos>>,
    /// per worker, in the order the results went out: a message's first packet in to the result
    /// of its first slot out, as this host clocks them
    rtt_ns: Vec<Vec<u64>>,
}

/// The switch with its address plan around it.
struct Planned {
    switch: Box<dyn Switch>,
    workers: usize,
    plan_dir: PathBuf,
    plan: Vec<Option<Entry>>,
    macs: Vec<Option<[u8; 6]>>,
    switch_ip: [u8; 4],
    switch_mac: [u8; 6],
    stale: u64,
    c: Counts,
}

impl Planned {
    fn entry(&mut self, w: usize) -> Option<Entry> {
        if self.plan[w].is_none() {
            let p = self
                .plan_dir
                .join(format!("guest{w}"))
                .join("switchml_rdma_qp");
            match read_entry(&p) {
                Ok(Some(e)) => {
                    println!(
                        "switchml_rdma_switch: plan for worker {w}: QPN {:#x}, results at {:#x} rkey {:#x}, {} (the switch's plan: {:#x} rkey {:#x})",
                        e.qpn,
                        e.addr,
                        e.rkey,
                        std::net::Ipv4Addr::from(e.ip),
                        result_buffer(w).0,
                        result_buffer(w).1
                    );
                    self.plan[w] = Some(e);
                }
                Ok(None) => {}
                Err(e) => eprintln!("switchml_rdma_switch: {e}"),
            }
        }
        self.plan[w]
    }

    /// A worker's WRITE, its RETH address mapped into the switch's plan, the ICRC recomputed;
    /// None when it is not a RoCEv2 frame to the switch from a planned worker.
    fn inbound(&mut self, now: Nanos, w: usize, frame: &[u8]) -> Option<Vec<u8>> {
        let (mut f, payload) = match FrameRepr::parse_with(frame, IcrcCheck::Verify) {
            Ok(p) => {
                self.c.roce_in += 1;
                self.c.icrc_ok += 1;
                self.c.link_frames[w] += 1;
                self.c.link_bytes[w] += frame.len() as u64;
                p
            }
            Err(_) => {
                match FrameRepr::parse_with(frame, IcrcCheck::Ignore) {
                    Ok((f, _)) => {
                        self.c.roce_in += 1;
                        self.c.icrc_failed += 1;
                        eprintln!(
                            "switchml_rdma_switch: frame from worker {w} (QP {:#x} PSN {:#x}): bad ICRC",
                            f.bth.dest_qp, f.bth.psn
                        );
                    }
                    Err(_) => self.c.not_roce += 1,
                }
                return None;
            }
        };
        if self.macs[w].is_none() {
            self.macs[w] = Some(f.src_mac);
        }
        let Some(e) = self.entry(w) else {
            self.c.unplanned += 1;
            return None;
        };
        if f.src_ip != e.ip || f.dst_ip != self.switch_ip {
            self.c.unplanned += 1;
            return None;
        }
        if let Some(r) = f.reth.as_mut() {
            let Some(off) = r.va.checked_sub(e.addr) else {
                self.c.unplanned += 1;
                return None;
            };
            r.va = result_buffer(w).0 + off;
            self.c.first_in[w].entry(r.rkey).or_insert(now);
        }
        f.build(payload).ok()
    }

    /// A result of the switch to worker `to`, with the worker's addresses and a recomputed ICRC
    /// (or the switch's stale one for the first `--stale-icrc` results).
    fn outbound(&mut self, now: Nanos, to: usize, frame: &[u8]) -> Option<Vec<u8>> {
        let (mut f, payload) = FrameRepr::parse_with(frame, IcrcCheck::Ignore).ok()?;
        if let Some(r) = f.immdt.and_then(|i| ResultImm::from_imm(i).ok())
            && let Some(t) = self.c.first_in[to].remove(&u32::from(r.pool.index()))
        {
            self.c.rtt_ns[to].push(now.saturating_sub(t));
        }
        let e = self.entry(to)?;
        let mac = self.macs.get(to).copied().flatten()?;
        f.src_mac = self.switch_mac;
        f.dst_mac = mac;
        f.src_ip = self.switch_ip;
        f.dst_ip = e.ip;
        f.bth.dest_qp = e.qpn;
        let r = f.reth.as_mut()?;
        let (base, _) = result_buffer(to);
        r.va = e.addr + r.va.checked_sub(base)?;
        r.rkey = e.rkey;
        let mut out = f.build(payload).ok()?;
        if self.c.stale_out[to] < self.stale {
            // what a Tofino 1 sends: the ICRC of the packet the switch rewrote
            self.c.stale_out[to] += 1;
            let n = out.len();
            out[n - 4..].copy_from_slice(&frame[frame.len() - 4..]);
        } else {
            self.c.results_out += 1;
        }
        self.c.results_to[to] += 1;
        Some(out)
    }
}

impl Endpoint for Planned {
    fn id(&self) -> NodeId {
        self.switch.id()
    }

    fn handle_packet(&mut self, now: Nanos, from: NodeId, frame: &[u8]) {
        self.c.frames_in += 1;
        let w = from as usize;
        if w >= self.workers {
            return;
        }
        if let Some(f) = self.inbound(now, w, frame) {
            self.switch.handle_packet(now, from, &f);
        }
    }

    fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        loop {
            let t = self.switch.poll_transmit(now)?;
            match self.outbound(now, t.to as usize, &t.bytes) {
                Some(bytes) => {
                    return Some(Transmit { to: t.to, bytes });
                }
                None => self.c.rewrite_failed += 1,
            }
        }
    }

    fn poll_timeout(&self) -> Option<Nanos> {
        self.switch.poll_timeout()
    }

    fn handle_timeout(&mut self, now: Nanos) {
        self.switch.handle_timeout(now);
    }
}

struct Args {
    ifaces: Vec<String>,
    plan_dir: Option<PathBuf>,
    mtu: u32,
    msg_packets: u32,
    pool: u32,
    switch_ip: [u8; 4],
    switch_mac: [u8; 6],
    stale: u64,
}

fn args() -> Result<Args, String> {
    let usage = "usage: switchml_rdma_switch <iface0> <iface1> ... [--plan-dir DIR] [--mtu B] [--msg-packets K] [--pool S] [--switch-ip A.B.C.D] [--switch-mac M] [--stale-icrc N]";
    let a: Vec<String> = std::env::args().skip(1).collect();
    let mut out = Args {
        ifaces: Vec::new(),
        plan_dir: std::env::var_os("RIG_CTL_DIR").map(PathBuf::from),
        mtu: 1024,
        msg_packets: 4,
        pool: 32,
        switch_ip: [10, 77, 0, 254],
        switch_mac: [0x52, 0x54, 0, 0x77, 0, 0xfe],
        stale: 0,
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
            "--plan-dir" => out.plan_dir = Some(PathBuf::from(v)),
            "--mtu" => out.mtu = v.parse().map_err(|_| bad())?,
            "--msg-packets" => out.msg_packets = v.parse().map_err(|_| bad())?,
            "--pool" => out.pool = v.parse().map_err(|_| bad())?,
            "--switch-ip" => {
                let ip: std::net::Ipv4Addr = v.parse().map_err(|_| bad())?;
                out.switch_ip = ip.octets();
            }
            "--switch-mac" => {
                let m: Vec<u8> = v
                    .split(':')
                    .map(|x| u8::from_str_radix(x, 16))
                    .collect::<Result<_, _>>()
                    .map_err(|_| bad())?;
                out.switch_mac = m.try_into().map_err(|_| bad())?;
            }
            "--stale-icrc" => out.stale = v.parse().map_err(|_| bad())?,
            _ => return Err(usage.into()),
        }
        i += 2;
    }
    if out.ifaces.len() < 2 {
        return Err(usage.into());
    }
    if out.plan_dir.is_none() {
        return Err(
            "no --plan-dir and no RIG_CTL_DIR: where do the workers write their QPs?".into(),
        );
    }
    Ok(out)
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
    // the switch as the simulated system builds it: the packet payload one path MTU (the
    // release's 1 KB: a guest's UC QP cuts a WRITE at the path MTU), `msg-packets` packets per
    // message, `pool` slots per set; elements and seed are the workers' business
    let cfg = AllReduceConfig {
        workers,
        elements: 1,
        seed: 0,
        line_rate_bps: 100e9,
        mtu: a.mtu as usize,
        timeout_ns: 1_000_000_000,
        knobs: vec![
            ("smlr_payload".into(), f64::from(a.mtu)),
            ("smlr_msg_packets".into(), f64::from(a.msg_packets)),
            ("pool".into(), f64::from(a.pool)),
        ],
    };
    let switch = match SwitchMlRdma.build(&cfg) {
        Ok(s) => s.switch,
        Err(e) => {
            eprintln!("switchml_rdma_switch: FAILED: {e}");
            std::process::exit(2);
        }
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
            eprintln!("switchml_rdma_switch: FAILED: opening {:?}: {e}", a.ifaces);
            std::process::exit(1);
        }
    };
    let plan_dir = a.plan_dir.unwrap_or_default();
    let mut sw = Planned {
        switch,
        workers,
        plan_dir: plan_dir.clone(),
        plan: vec![None; workers],
        macs: vec![None; workers],
        switch_ip: a.switch_ip,
        switch_mac: a.switch_mac,
        stale: a.stale,
        c: Counts {
            stale_out: vec![0; workers],
            results_to: vec![0; workers],
            link_frames: vec![0; workers],
            link_bytes: vec![0; workers],
            first_in: vec![Default::default(); workers],
            rtt_ns: vec![Vec::new(); workers],
            ..Counts::default()
        },
    };
    println!(
        "switchml_rdma_switch: inabench_ina::switchml_rdma's switch for {workers} workers on {:?} (AF_PACKET) at {} , {} B a packet, {} packets a message, pool {} slots x 2 sets; plans from {}{}",
        a.ifaces,
        std::net::Ipv4Addr::from(a.switch_ip),
        a.mtu,
        a.msg_packets,
        a.pool,
        plan_dir.display(),
        if a.stale > 0 {
            format!(
                "; the first {} result(s) to each worker keep the switch's stale ICRC",
                a.stale
            )
        } else {
            String::new()
        }
    );
    // the workers wait for this before their first WRITE (UC loses what comes before)
    let ready = plan_dir.join("switchml_rdma_switch.ready");
    if let Err(e) = std::fs::write(&ready, "serving\n") {
        eprintln!(
            "switchml_rdma_switch: FAILED: writing {}: {e}",
            ready.display()
        );
        std::process::exit(1);
    }
    let until = std::env::var_os("RIG_RELAY_UNTIL").map(PathBuf::from);
    let rep = serve_until(
        &mut sw,
        &links,
        a.mtu as usize + 256,
        Duration::from_secs(900),
        &mut || until.as_ref().is_some_and(|p| p.exists()),
    );
    let c = &sw.c;
    let s = sw.switch.stats();
    println!(
        "switchml_rdma_switch: {} frames in ({} RoCEv2: ICRC verified by inabench_wire::icrc {}, failed {}; {} not for the switch's plan; {} not RoCEv2), {} frames out, send errors {}, {:.1} s",
        c.frames_in,
        c.roce_in,
        c.icrc_ok,
        c.icrc_failed,
        c.unplanned,
        c.not_roce,
        rep.frames_tx,
        rep.send_errors,
        rep.wall_ns as f64 / 1e9
    );
    println!(
        "switchml_rdma_switch: switch: {} packets in, {} results out, {} dropped, {} duplicates not summed again; counters {:?}",
        s.packets_in,
        s.packets_out,
        s.dropped,
        s.duplicates_ignored,
        sw.switch.counters()
    );
    println!(
        "switchml_rdma_switch: results rewritten to the workers' QPs with the ICRC recomputed: {}; with the switch's stale ICRC: {}; rewrites failed {}",
        c.results_out,
        c.stale_out.iter().sum::<u64>(),
        c.rewrite_failed
    );
    for w in 0..workers {
        println!(
            "switchml_rdma_switch: worker {w}: {} results sent, {} of them with the stale ICRC",
            c.results_to[w], c.stale_out[w]
        );
    }
    for w in 0..workers {
        let rtts: Vec<String> = c.rtt_ns[w].iter().map(u64::to_string).collect();
        println!(
            "switchml_rdma_switch: link of worker {w}: link in {} RoCEv2 frames, {} bytes (Ethernet header to ICRC); rtt_ns by message: {}",
            c.link_frames[w],
            c.link_bytes[w],
            rtts.join(" ")
        );
    }
    let ok = c.icrc_failed == 0
        && c.roce_in > 0
        && c.results_out > 0
        && c.rewrite_failed == 0
        && rep.send_errors == 0
        && sw.plan.iter().all(Option::is_some)
        && c.stale_out.iter().all(|&n| n == a.stale);
    println!("switchml_rdma_switch: {}", if ok { "ok" } else { "FAILED" });
    std::process::exit(if ok { 0 } else { 1 });
}
