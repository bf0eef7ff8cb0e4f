//! The parameter-server all-reduce over RC (#36 item 2, "RC for NetReduce, ring and parameter
//! server"), the baseline NetReduce's paper describes ("one or several dedicated physical
//! servers ... workers send gradients to the PS(s), and the PS(s) compute the aggregation result
//! and send the result back"), on plain RC queue pairs of a host's RoCE stack through the verbs
//! binding, run by the parameter server written once over the message-level host transport
//! (`inabench_transport::ps::{PsWorker, PsServer}` on `inabench_devices::transport::VerbsQp`:
//! the same code the software RC stack runs in systems/transport/tests/ps_soft.rs).
//!
//! One process is the server host: it runs the `--servers S` servers (server j owns shard j of
//! the vector; S state machines over one QP per worker each) and listens on TCP `--port`; each
//! worker process connects to it, sends its rank and, per server, its QP's info (QPN, first
//! PSN, GID, buffer address, rkey; `ring_qps`'s checked exchange), and gets the server's QP info
//! back, the server's QP connected and its first receive posted before it answers. Each of
//! `--rounds` rounds a worker WRITEs (with immediate = the round) its shard of
//! `--shard-packets` packets to each server and takes the sum back (a WRITE with immediate from
//! the server); every worker derives its values from the seed (`value(seed, rank, round, k)`)
//! and checks every value of every round against the wrapping int32 sum of all workers'. At
//! the end each worker tells the server it is done, and the server answers once all its sums
//! were acknowledged (so no QP is destroyed under a retransmission).
//!
//! ```text
//! ps_worker server --workers N [--servers S] [--port 18800] [--shard-packets 16] [--mtu 1024]
//!                  [--rounds 3] [--rto-ms 500] [--device NAME] [--gid-index N]
//! ps_worker worker <rank> <server host's control ip> --workers N [--servers S] [--port 18800]
//!                  [--shard-packets 16] [--mtu 1024] [--rounds 3] [--seed 1] [--rto-ms 500]
//!                  [--device NAME] [--gid-index N]
//! ```
//! Prints its QPs, one line per round (worker), its completion counts and `ps_worker: ok`;
//! exits 1 on the first failure.

#[path = "ring_qps/mod.rs"]
#[allow(dead_code)] // the ring's QPs (RingQps) are not used here: the exchange and values are
mod ring_qps;

use inabench_devices::transport::VerbsQp;
use inabench_devices::verbs::{Connection, PSN_MASK, QpInfo, QpPlan, Verbs};
use inabench_transport::ps::{PsConfig, PsServer, PsWorker};
use ring_qps::{R, accept, connect, pick_gid, recv_info, send_info, value};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

struct Args {
    server: bool,
    rank: usize,
    server_ip: String,
    workers: usize,
    servers: usize,
    port: u16,
    shard_packets: u32,
    mtu: u32,
    rounds: u32,
    seed: u64,
    rto_ms: u64,
    device: Option<String>,
    gid_index: Option<u8>,
}

const USAGE: &str = "usage: ps_worker server --workers N [--servers S] [options] | ps_worker worker <rank> <server-ctl-ip> --workers N [--servers S] [options]; options: --port P --shard-packets L --mtu B --rounds R --seed S --rto-ms T --device NAME --gid-index N";

fn args() -> R<Args> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let mut out = Args {
        server: a.first().map(String::as_str) == Some("server"),
        rank: 0,
        server_ip: String::new(),
        workers: 0,
        servers: 1,
        port: 18800,
        shard_packets: 16,
        mtu: 1024,
        rounds: 3,
        seed: 1,
        rto_ms: 500,
        device: None,
        gid_index: None,
    };
    let mut i = if out.server {
        1
    } else if a.first().map(String::as_str) == Some("worker") {
        out.rank = a
            .get(1)
            .and_then(|r| r.parse().ok())
            .ok_or_else(|| USAGE.to_string())?;
        out.server_ip = a.get(2).ok_or(USAGE)?.clone();
        3
    } else {
        return Err(USAGE.into());
    };
    while i < a.len() {
        let v = a.get(i + 1).ok_or(USAGE)?;
        let bad = || format!("bad value {v} for {}", a[i]);
        match a[i].as_str() {
            "--workers" => out.workers = v.parse().map_err(|_| bad())?,
            "--servers" => out.servers = v.parse().map_err(|_| bad())?,
            "--port" => out.port = v.parse().map_err(|_| bad())?,
            "--shard-packets" => out.shard_packets = v.parse().map_err(|_| bad())?,
            "--mtu" => out.mtu = v.parse().map_err(|_| bad())?,
            "--rounds" => out.rounds = v.parse().map_err(|_| bad())?,
            "--seed" => out.seed = v.parse().map_err(|_| bad())?,
            "--rto-ms" => out.rto_ms = v.parse().map_err(|_| bad())?,
            "--device" => out.device = Some(v.clone()),
            "--gid-index" => out.gid_index = Some(v.parse().map_err(|_| bad())?),
            _ => return Err(USAGE.into()),
        }
        i += 2;
    }
    Ok(out)
}

fn main() {
    if let Err(e) = run() {
        eprintln!("ps_worker: FAILED: {e}");
        std::process::exit(1);
    }
}

fn run() -> R<()> {
    let a = args()?;
    let shard_values = (a.shard_packets as usize * a.mtu as usize) / 4;
    // the parameters are the library's to refuse (fewer than one worker, server or round)
    let cfg = PsConfig::new(a.workers, a.servers, shard_values * a.servers, a.rounds)
        .map_err(|e| e.to_string())?;
    println!("probe: {}", inabench_devices::verbs::probe().detail);
    let v = Verbs::load().map_err(|e| e.to_string())?;
    let gid_index = match a.gid_index {
        Some(i) => i,
        None => pick_gid(&v, a.device.as_deref())?,
    };
    // each QP: two slots of a shard (the shard out, the sum back), one WRITE in flight
    let plan = |k: u32| {
        let mut p = QpPlan::rc(a.mtu, a.shard_packets, 1, 2, a.rto_ms * 1_000_000);
        p.sq_psn = (PSN_MASK - 10 + k * 0x0001_0003) & PSN_MASK;
        p
    };
    let mk = |k: u32| {
        v.connect(a.device.as_deref(), 1, gid_index, &plan(k))
            .map_err(|e| format!("QP {k}: {e}"))
    };
    if a.server {
        serve(&a, cfg, gid_index, mk)
    } else {
        work(&a, cfg, gid_index, mk)
    }
}

/// Call `step` until it says done; an error after 120 s without `moved()` changing.
fn drive(mut step: impl FnMut() -> R<bool>, moved: impl Fn() -> u64, what: &str) -> R<()> {
    let mut last = (u64::MAX, Instant::now());
    while !step()? {
        let m = moved();
        if m != last.0 {
            last = (m, Instant::now());
        } else if last.1.elapsed() > Duration::from_secs(120) {
            return Err(format!("{what}: no progress in 120 s ({m} completions)"));
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    Ok(())
}

fn tag(s: &mut TcpStream, t: u8, what: &str) -> R<()> {
    s.write_all(&[t])
        .map_err(|e| format!("sending `{}` to {what}: {e}", t as char))
}

fn expect_tag(s: &mut TcpStream, t: u8, what: &str) -> R<()> {
    let mut b = [0u8; 1];
    s.read_exact(&mut b)
        .map_err(|e| format!("waiting for `{}` from {what}: {e}", t as char))?;
    if b[0] != t {
        return Err(format!("{what} sent {:#x}, not `{}`", b[0], t as char));
    }
    Ok(())
}

fn serve<'v>(
    a: &Args,
    cfg: PsConfig,
    gid_index: u8,
    mk: impl Fn(u32) -> R<Connection<'v>>,
) -> R<()> {
    let (n, s) = (cfg.workers(), cfg.servers());
    let mut servers: Vec<PsServer> = (0..s)
        .map(|j| PsServer::new(cfg, j).map_err(|e| e.to_string()))
        .collect::<R<_>>()?;
    // conns[j][i]: server j's QP to worker i
    let mut conns: Vec<Vec<Connection>> = (0..s)
        .map(|j| {
            (0..n)
                .map(|i| mk((j * n + i) as u32))
                .collect::<R<Vec<_>>>()
        })
        .collect::<R<_>>()?;
    let mut remote: Vec<Vec<Option<QpInfo>>> = vec![vec![None; n]; s];
    let l = TcpListener::bind(("0.0.0.0", a.port)).map_err(|e| format!("port {}: {e}", a.port))?;
    let mut streams: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
    for _ in 0..n {
        let mut st = accept(&l, "a worker")?;
        let mut b = [0u8; 4];
        st.read_exact(&mut b)
            .map_err(|e| format!("a worker's rank: {e}"))?;
        let i = u32::from_be_bytes(b) as usize;
        if i >= n || streams[i].is_some() {
            return Err(format!("a worker says it is rank {i} (of {n}, or twice)"));
        }
        let who = format!("worker {i}");
        for j in 0..s {
            let w = recv_info(&mut st, &who)?;
            conns[j][i]
                .connect_to(&w)
                .map_err(|e| format!("server {j}'s QP to worker {i}: {e}"))?;
            // round 0's receive before the worker learns where to write
            servers[j]
                .prime(i, &mut VerbsQp::connected(&mut conns[j][i], w))
                .map_err(|e| e.to_string())?;
            remote[j][i] = Some(w);
            println!(
                "ps_worker: server {j} of {s} on GID index {gid_index}: QP {:#x} <-> worker {i}'s QP {:#x}",
                conns[j][i].info().qpn,
                w.qpn
            );
        }
        for c in &conns {
            send_info(&mut st, &c[i].info(), &who)?;
        }
        streams[i] = Some(st);
    }
    let t0 = Instant::now();
    {
        let mut qps: Vec<Vec<VerbsQp>> = conns
            .iter_mut()
            .zip(&remote)
            .map(|(cs, rs)| {
                cs.iter_mut()
                    .zip(rs)
                    .map(|(c, r)| {
                        r.map(|r| VerbsQp::connected(c, r))
                            .ok_or("a QP unconnected")
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .collect::<Result<_, _>>()?;
        let moved = std::cell::Cell::new(0u64);
        drive(
            || {
                let mut done = true;
                for (sv, q) in servers.iter_mut().zip(qps.iter_mut()) {
                    done &= sv.progress(q).map_err(|e| e.to_string())?;
                }
                moved.set(
                    servers
                        .iter()
                        .map(|sv| sv.shards_received() + sv.writes_completed())
                        .sum(),
                );
                Ok(done)
            },
            || moved.get(),
            "the servers",
        )?;
    }
    let wall = t0.elapsed();
    for (j, sv) in servers.iter().enumerate() {
        println!(
            "ps_worker: server {j} of {s}: {} rounds, {} shards received and {} sums WRITEn with immediate and acknowledged ({n} workers x {} rounds each), shard of {} int32 values",
            sv.rounds_finished(),
            sv.shards_received(),
            sv.writes_completed(),
            cfg.rounds(),
            cfg.shard_values()
        );
    }
    // every worker took every sum: only now may the QPs go
    for (i, st) in streams.iter_mut().enumerate() {
        let st = st.as_mut().ok_or("a worker's stream is gone")?;
        expect_tag(st, b'D', &format!("worker {i}"))?;
    }
    for (i, st) in streams.iter_mut().enumerate() {
        if let Some(st) = st.as_mut() {
            tag(st, b'D', &format!("worker {i}"))?;
        }
    }
    println!(
        "ps_worker: the {s} server(s) served {n} workers {} rounds in {:.3} s",
        cfg.rounds(),
        wall.as_secs_f64()
    );
    println!("ps_worker: ok");
    Ok(())
}

fn work<'v>(
    a: &Args,
    cfg: PsConfig,
    gid_index: u8,
    mk: impl Fn(u32) -> R<Connection<'v>>,
) -> R<()> {
    let (n, s, me) = (cfg.workers(), cfg.servers(), a.rank);
    // my vector per round: value k of round r
    let inputs: Vec<Vec<i32>> = (0..cfg.rounds())
        .map(|r| (0..cfg.values()).map(|k| value(a.seed, me, r, k)).collect())
        .collect();
    let mut worker = PsWorker::new(cfg, me, inputs).map_err(|e| e.to_string())?;
    let mut conns: Vec<Connection> = (0..s)
        .map(|j| mk((0x100 + me * s + j) as u32))
        .collect::<R<_>>()?;
    let mut st = connect(&format!("{}:{}", a.server_ip, a.port))?;
    st.write_all(&(me as u32).to_be_bytes())
        .map_err(|e| format!("sending my rank: {e}"))?;
    for c in &conns {
        send_info(&mut st, &c.info(), "the server host")?;
    }
    let mut remote = Vec::with_capacity(s);
    for (j, c) in conns.iter_mut().enumerate() {
        let r = recv_info(&mut st, "the server host")?;
        c.connect_to(&r)
            .map_err(|e| format!("my QP to server {j}: {e}"))?;
        println!(
            "ps_worker: worker {me} of {n} on GID index {gid_index}: QP {:#x} (first PSN {:#08x}) <-> server {j}'s QP {:#x}",
            c.info().qpn,
            c.info().psn,
            r.qpn
        );
        remote.push(r);
    }
    let t0 = Instant::now();
    {
        let mut qps: Vec<VerbsQp> = conns
            .iter_mut()
            .zip(&remote)
            .map(|(c, r)| VerbsQp::connected(c, *r))
            .collect();
        let moved = std::cell::Cell::new(0u64);
        drive(
            || {
                let d = worker.progress(&mut qps).map_err(|e| e.to_string())?;
                moved.set(worker.writes_completed() + worker.sums_received());
                Ok(d)
            },
            || moved.get(),
            "the worker",
        )?;
    }
    let wall = t0.elapsed();
    let results = worker.results().ok_or("done without results")?;
    for (r, got) in results.iter().enumerate() {
        for (k, x) in got.iter().enumerate() {
            let want = (0..n).fold(0i32, |acc, w| {
                acc.wrapping_add(value(a.seed, w, r as u32, k))
            });
            if *x != want {
                return Err(format!(
                    "round {r} value {k} (server {}'s shard): {x}, the sum is {want} (my value {})",
                    k / cfg.shard_values(),
                    value(a.seed, me, r as u32, k)
                ));
            }
        }
        println!(
            "ps_worker: worker {me}: round {r}: {} values exact, each the sum of the {n} workers' values",
            got.len()
        );
    }
    tag(&mut st, b'D', "the server host")?;
    expect_tag(&mut st, b'D', "the server host")?;
    println!(
        "ps_worker: worker {me} of {n}: all {} rounds exact: {} int32 values a round from {s} server(s) ({} packets of {} B a shard); {} WRITEs with immediate acknowledged, {} sums received; {:.3} s",
        cfg.rounds(),
        cfg.values(),
        a.shard_packets,
        a.mtu,
        worker.writes_completed(),
        worker.sums_received(),
        wall.as_secs_f64()
    );
    println!("ps_worker: ok");
    Ok(())
}
