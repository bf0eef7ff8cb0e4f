//! The kernel's floor under a NetReduce all-reduce on the `udp` fabric on this host: the same
//! datagrams through loopback UDP in the same pattern (every worker sends its 64 MiB to the
//! switch in 1 KB datagrams, window of 2 messages of 170; the switch sends each datagram's
//! "result" to every worker once it has that datagram from all of them), through the fabric's own
//! batched socket layer (`fabric::batch`: GSO on send, GRO on receive, as probed), with no
//! endpoint work at all: no headers built or parsed, no ICRC, no values added, no pools, no
//! timers. A thread per node (the fabric runs a process per node). Not a strict bound: its
//! waits (a blocking receive whenever the window is full) are not the fabric's, and at small
//! sizes their wake-ups dominate (1 MiB, 6 workers: 0.023 s here against the fabric's 0.018 s);
//! at 64 MiB it is the kernel's cost of the traffic. Printed: the wall time of the whole
//! exchange (median of `reps`) and each thread's CPU, to set beside MPI over TCP loopback
//! (`bench/peers/run.sh`).
//!
//! `cargo run --release -p inabench-bench --example udp_floor -- [workers] [elements] [reps]`
use inabench_bench::median;
use inabench_fabric::batch::{Offload, Receiver, Sender, bind_udp, enable_gro};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// A frame of the probe's run: 1 KB MTU RoCE frame (Ethernet header not on the socket)
const DGRAM: usize = 1004;
const VALUES: usize = 240;
const MSG: usize = 170;
const WINDOW: usize = 2;
const BUF: usize = 32 << 20;
/// No datagram for this long: one was lost (a full socket buffer), the run cannot finish.
const STALL: Duration = Duration::from_secs(5);

fn addr(s: &UdpSocket) -> std::io::Result<SocketAddrV4> {
    match s.local_addr()? {
        std::net::SocketAddr::V4(a) => Ok(a),
        std::net::SocketAddr::V6(_) => Err(std::io::Error::other("an IPv6 address on loopback")),
    }
}

fn cpu() -> u64 {
    inabench_bench::thread_cpu_ns()
}

fn datagram(idx: u32) -> Vec<u8> {
    let mut d = vec![0x5au8; DGRAM];
    d[..4].copy_from_slice(&idx.to_le_bytes());
    d
}

/// One worker: sends its `n` datagrams (indices 0..n) a message at a time, window of 2 messages,
/// until it has every result. Returns its CPU (ns) or why it stopped.
fn worker(sock: UdpSocket, to: SocketAddrV4, n: usize, off: Offload) -> Result<u64, String> {
    let t0 = cpu();
    let fd = sock.as_raw_fd();
    let (mut tx, mut rx) = (Sender::new(off), Receiver::new(DGRAM, off));
    let frames: Vec<(SocketAddrV4, Vec<u8>)> = (0..n).map(|i| (to, datagram(i as u32))).collect();
    let (mut sent, mut got) = (0usize, 0usize);
    let mut last = Instant::now();
    while got < n {
        if sent < n && sent < (got / MSG + WINDOW) * MSG {
            let end = (sent + MSG).min(n);
            if tx.send(fd, &frames[sent..end]) > 0 {
                return Err("the kernel refused datagrams".into());
            }
            sent = end;
        }
        let window_full = sent == n || sent >= (got / MSG + WINDOW) * MSG;
        if rx.recv(fd, window_full) > 0 {
            rx.datagrams(|_, _| got += 1);
            last = Instant::now();
        } else if last.elapsed() > STALL {
            return Err(format!(
                "stalled at {got} of {n} results: a datagram was lost"
            ));
        }
    }
    Ok(cpu() - t0)
}

/// The switch: counts each datagram index's arrivals; at the last worker's, sends that datagram
/// back to every worker. Returns its CPU (ns).
fn switch(sock: UdpSocket, to: Vec<SocketAddrV4>, n: usize, off: Offload) -> Result<u64, String> {
    let t0 = cpu();
    let fd = sock.as_raw_fd();
    let workers = to.len();
    let (mut tx, mut rx) = (Sender::new(off), Receiver::new(DGRAM, off));
    let mut count = vec![0u8; n];
    let mut out: Vec<(SocketAddrV4, Vec<u8>)> = Vec::new();
    let mut spare: Vec<Vec<u8>> = Vec::new();
    let (mut done, mut last) = (0usize, Instant::now());
    while done < n {
        if rx.recv(fd, true) == 0 {
            if last.elapsed() > STALL {
                return Err(format!("stalled at {done} of {n} aggregates"));
            }
            continue;
        }
        last = Instant::now();
        rx.datagrams(|_, d| {
            let i = u32::from_le_bytes([d[0], d[1], d[2], d[3]]) as usize;
            if let Some(c) = count.get_mut(i) {
                *c += 1;
                if usize::from(*c) == workers {
                    done += 1;
                    for a in &to {
                        let mut b = spare.pop().unwrap_or_default();
                        b.clear();
                        b.extend_from_slice(d);
                        out.push((*a, b));
                    }
                }
            }
        });
        if !out.is_empty() {
            if tx.send(fd, &out) > 0 {
                return Err("the kernel refused datagrams".into());
            }
            spare.extend(out.drain(..).map(|(_, b)| b));
        }
    }
    Ok(cpu() - t0)
}

fn main() {
    let (workers, elements, reps) = inabench_bench::floor_args(255);
    let n = elements.div_ceil(VALUES);
    let off = Offload::probe();
    let (mut walls, mut sw_cpu, mut w_cpu) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..reps {
        let socks = || -> std::io::Result<UdpSocket> {
            let s = bind_udp(Ipv4Addr::LOCALHOST, BUF)?;
            if off.gro {
                enable_gro(&s)?;
            }
            Ok(s)
        };
        let made = (|| -> std::io::Result<_> {
            let sw = socks()?;
            let ws = (0..workers)
                .map(|_| socks())
                .collect::<Result<Vec<_>, _>>()?;
            let to = ws.iter().map(addr).collect::<Result<Vec<_>, _>>()?;
            Ok((addr(&sw)?, sw, ws, to))
        })();
        let (sw_addr, sw, ws, to) = match made {
            Ok(m) => m,
            Err(e) => {
                eprintln!("error: loopback UDP sockets: {e}");
                std::process::exit(1);
            }
        };
        let t0 = Instant::now();
        let (s, w) = std::thread::scope(|sc| {
            let h = sc.spawn(move || switch(sw, to, n, off));
            let hs: Vec<_> = ws
                .into_iter()
                .map(|s| sc.spawn(move || worker(s, sw_addr, n, off)))
                .collect();
            let w: Vec<_> = hs
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err("a worker panicked".into())))
                .collect();
            (
                h.join()
                    .unwrap_or_else(|_| Err("the switch panicked".into())),
                w,
            )
        });
        walls.push(t0.elapsed().as_secs_f64());
        match (s, w.into_iter().collect::<Result<Vec<_>, _>>()) {
            (Ok(s), Ok(w)) => {
                sw_cpu.push(s as f64 / 1e6);
                w_cpu.push(w.iter().sum::<u64>() as f64 / 1e6 / workers as f64);
            }
            (Err(e), _) | (_, Err(e)) => {
                eprintln!("error: {e}");
                std::process::exit(1);
            }
        }
    }
    eprintln!(
        "udp floor ({}): {workers} workers, {n} datagrams of {DGRAM} B each way per worker: wall {:.1} ms, switch CPU {:.1} ms, each worker's CPU {:.1} ms (medians of {reps})",
        off.label(),
        median(walls.clone()) * 1e3,
        median(sw_cpu),
        median(w_cpu)
    );
    println!(
        "{{\"peer\":\"inabench-udp-floor\",\"offload\":\"{}\",\"ranks\":{workers},\"elements\":{elements},\"iterations\":{reps},\"median_s\":{:.6},\"correct\":true}}",
        off.label(),
        median(walls)
    );
}
