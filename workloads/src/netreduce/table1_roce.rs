//! netreduce-table1's `roce` row: one RoCEv2 RC transfer between two hosts' verbs QPs
//! ([`inabench_devices::transport::VerbsQp`] behind [`inabench_transport::HostTransport`]),
//! measured as the emulated rows are: throughput of a `total_mb` bulk transfer in `message_kb`
//! RDMA WRITEs with a window of `window` messages, every byte checked at the receiver; RTT the
//! median over 200 one-packet WRITEs of the time from posting one to its completion (on RC: its
//! ACK); CPU the mean of the two hosts' bulk-transfer thread CPU time over its wall time, percent
//! of one core.
//!
//! It spans two agents ([`Table1`](super::table1::Table1)'s `ranks`), each running
//! [`run_rank`] with its rank; the ranks exchange their QPs' connection info through the
//! harness's [`RankExchange`] (each QP as [`ConnInfoWire`] JSON, checked on arrival). Rank 0
//! records the rows; rank 1 records none (it sends rank 0 its CPU and its check of the bytes over
//! the QPs themselves).
//!
//! - The device: `INABENCH_RDMA_DEVICE` and `INABENCH_RDMA_GID_INDEX` where set; else the
//!   testbed's `nics:` entry (device, gid_index) of the rank's host ([`Rank::nic`]); else, where
//!   the testbed declares no NIC, the first device the library lists and the first IPv4-mapped
//!   GID of its port 1 (RoCEv2's). A testbed that declares NICs, none of the rank's host, fails
//!   the rank as a setup failure naming its hostname and the testbed's hosts; so does a device
//!   (or the library) missing here.
//! - The rows' label is the device's provider's: a hardware provider `hardware`, fabric `roce`;
//!   Soft-RoCE `emulated`, fabric `rdma-rxe`; Soft-iWARP `emulated`, fabric `rdma-siw`.
//! - `INABENCH_SPAN_TRANSPORT=soft-udp` runs the same body on the suite's software RC stack
//!   carried over UDP on loopback ([`inabench_transport::udp::SoftUdp`]), for hosts without an
//!   RDMA device (the tests of the harness's dispatch and exchange); its rows are `emulated`,
//!   fabric `soft-rc-udp`.

use inabench_core::event::LogLevel;
use inabench_core::plan::Point;
use inabench_core::workload::{Rank, RankExchange};
use inabench_core::{Fidelity, PointCtx, WorkloadError};
use inabench_transport::soft::Shape;
use inabench_transport::udp::SoftUdp;
use inabench_transport::{CompletionKind, ConnInfo, ConnInfoWire, HostTransport};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// One-packet messages of the RTT measurement.
pub const PINGS: u32 = 200;
/// Receives rank 1 keeps posted on its ping QP (one ping is in flight at a time; the spares
/// cover pings whose completions it has not yet polled).
const PING_RECVS: u32 = 4;
/// The immediate of rank 1's report to rank 0.
const REPORT_IMM: u32 = 0x00ff_0000;
/// How long one wait for completions may take.
pub const WAIT: Duration = Duration::from_secs(60);

/// Every rank's QPs, checked: `peers[rank][name]`.
type Peers = BTreeMap<usize, BTreeMap<String, ConnInfo>>;

/// Why an exchange round of QPs failed.
#[derive(Debug, thiserror::Error)]
enum PublishError {
    #[error("a QP's connection info cannot be written: {0}")]
    Encode(serde_json::Error),
    #[error("{0}")]
    Exchange(inabench_core::workload::ExchangeFailed),
    #[error("rank {rank}'s QP `{name}` is not connection info: {error}")]
    NotConnInfo {
        rank: usize,
        name: String,
        error: serde_json::Error,
    },
    #[error("rank {rank}'s QP `{name}`: {error}")]
    Malformed {
        rank: usize,
        name: String,
        error: inabench_transport::ConnInfoError,
    },
}

/// One exchange round of QPs: each as its wire form, every rank's read back and checked.
fn publish(
    exchange: &mut dyn RankExchange,
    qps: &[(&str, ConnInfo)],
) -> Result<Peers, PublishError> {
    let mine = qps
        .iter()
        .map(|(n, i)| serde_json::to_value(i.to_wire()).map(|v| (*n, v)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(PublishError::Encode)?;
    let all = exchange.exchange(&mine).map_err(PublishError::Exchange)?;
    let mut peers = Peers::new();
    for (rank, named) in all {
        let mut out = BTreeMap::new();
        for (name, v) in named {
            let wire: ConnInfoWire = match serde_json::from_value(v) {
                Ok(w) => w,
                Err(error) => return Err(PublishError::NotConnInfo { rank, name, error }),
            };
            let info = match ConnInfo::try_from(&wire) {
                Ok(i) => i,
                Err(error) => return Err(PublishError::Malformed { rank, name, error }),
            };
            out.insert(name, info);
        }
        peers.insert(rank, out);
    }
    Ok(peers)
}

/// The sizes of a table1 point.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    mtu: u32,
    msg_packets: u32,
    messages: u32,
    window: u32,
}

impl Sizes {
    fn of(point: &Point) -> Result<Sizes, WorkloadError> {
        let num =
            |k: &str, d: f64| -> f64 { point.params.get(k).and_then(|v| v.as_f64()).unwrap_or(d) };
        let mtu = num("mtu", 1024.0);
        let message = point
            .params
            .get("message_kb")
            .and_then(|v| v.as_f64())
            .ok_or_else(|| WorkloadError::Param("message_kb".into()))?
            * 1024.0;
        let total = num("total_mb", 16.0) * 1048576.0;
        let window = num("window", 4.0);
        let ok = [256.0, 512.0, 1024.0, 2048.0, 4096.0].contains(&mtu)
            && message >= mtu
            && (message / mtu).fract() == 0.0
            && total >= message
            && (total / message).fract() == 0.0
            && (1.0..=1024.0).contains(&window)
            && window.fract() == 0.0
            && total <= (1u64 << 31) as f64;
        if !ok {
            return Err(WorkloadError::BadParam(format!(
                "the roce row needs an InfiniBand MTU (256 to 4096), message_kb x 1024 a multiple of it, total_mb a whole number of messages (at most 2 GiB) and a window of 1 to 1024 (got mtu {mtu}, {message} B, {total} B, window {window})"
            )));
        }
        Ok(Sizes {
            mtu: mtu as u32,
            msg_packets: (message / mtu) as u32,
            messages: (total / message) as u32,
            window: window as u32,
        })
    }

    fn message_bytes(&self) -> usize {
        self.mtu as usize * self.msg_packets as usize
    }

    fn total_bytes(&self) -> usize {
        self.message_bytes() * self.messages as usize
    }
}

/// The byte the sender writes at `offset` of the bulk transfer (a seeded pattern no two
/// neighbouring messages share).
fn pattern(seed: u64, offset: usize) -> u8 {
    let mut x = seed ^ (offset as u64 / 8).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^= x >> 31;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 29;
    (x >> ((offset % 8) * 8)) as u8
}

/// This thread's CPU time, ns.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec for the call to fill
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn failed(what: impl std::fmt::Display) -> WorkloadError {
    WorkloadError::Invalid(what.to_string())
}

/// The label of rows measured on a device of this provider.
fn label(p: &inabench_devices::verbs::Provider) -> (Fidelity, &'static str) {
    use inabench_devices::verbs::Provider;
    match p {
        Provider::Hardware { .. } => (Fidelity::Hardware, "roce"),
        Provider::SoftRoce => (Fidelity::Emulated, "rdma-rxe"),
        Provider::SoftIwarp => (Fidelity::Emulated, "rdma-siw"),
    }
}

/// Open this rank's QPs (verbs, or the software stand-in) and run the body.
pub fn run_rank(
    ctx: &mut PointCtx<'_>,
    me: &Rank<'_>,
    exchange: &mut dyn RankExchange,
) -> Result<(), WorkloadError> {
    let rank = me.rank;
    if me.ranks != 2 || rank >= 2 {
        return Err(failed(format!(
            "the roce row spans 2 agents, not rank {rank} of {}",
            me.ranks
        )));
    }
    let sizes = Sizes::of(ctx.point)?;
    let rto_ns = 16_000_000;
    if std::env::var("INABENCH_SPAN_TRANSPORT").as_deref() == Ok("soft-udp") {
        let base = 0x1000_0000u64 << (rank * 4);
        let shape = |msg_len: u32, window: u32, messages: u32| Shape {
            mtu: sizes.mtu,
            msg_len,
            window,
            messages,
            rto_ns,
        };
        let q = |n: u32| 0x11 + (rank as u32) * 2 + n;
        let soft = |e| failed(format!("rank {rank}: the software QP: {e}"));
        let mut bulk = SoftUdp::new(
            shape(sizes.msg_packets, sizes.window, sizes.messages),
            q(0),
            base,
        )
        .map_err(soft)?;
        let mut ping =
            SoftUdp::new(shape(1, PING_RECVS, PINGS + 1), q(1), base + (1 << 32)).map_err(soft)?;
        ctx.fidelity = Fidelity::Emulated;
        ctx.fabric = "soft-rc-udp";
        ctx.log(
            LogLevel::Info,
            format!(
                "rank {rank} on {}: the software RC stack over UDP on loopback (no RDMA device)",
                me.host
            ),
        );
        return body(ctx, rank, sizes, &mut bulk, &mut ping, exchange);
    }
    use inabench_devices::transport::VerbsQp;
    use inabench_devices::verbs::{QpPlan, Verbs};
    // the host lacks the library, a device or the named device: a setup failure (a rerun here
    // fails the same way), in one sentence naming the host and where the device's name came from
    let setup = |what: String| WorkloadError::Setup(format!("rank {rank} on {}: {what}", me.host));
    // a testbed that declares NICs, none of this host's: no device of its own choosing
    if std::env::var_os("INABENCH_RDMA_DEVICE").is_none()
        && let Some(why) = me.nic.not_this_host(me.host)
    {
        return Err(setup(why));
    }
    let v = Verbs::load().map_err(|e| setup(e.to_string()))?;
    let devices = v.devices().map_err(|e| setup(e.to_string()))?;
    // the device: INABENCH_RDMA_DEVICE, else the testbed's NIC of this host, else the first
    let mine = me.nic.declared();
    let want = match std::env::var("INABENCH_RDMA_DEVICE") {
        Ok(n) => Some((n, "INABENCH_RDMA_DEVICE".to_string())),
        Err(_) => mine.map(|n| {
            (
                n.device.clone(),
                format!("the testbed's nics: entry for {}", n.host),
            )
        }),
    };
    let d = match &want {
        Some((n, _)) => devices.iter().find(|d| &d.name == n),
        None => devices.first(),
    }
    .ok_or_else(|| {
        let here = if devices.is_empty() {
            "none".to_string()
        } else {
            devices
                .iter()
                .map(|d| d.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        setup(match &want {
            Some((n, from)) => format!("no RDMA device `{n}` ({from}; devices here: {here})"),
            None => format!("no RDMA device (devices here: {here})"),
        })
    })?;
    let gid_index = match std::env::var("INABENCH_RDMA_GID_INDEX") {
        Ok(s) => s.parse::<u8>().map_err(|_| {
            failed(format!(
                "rank {rank}: INABENCH_RDMA_GID_INDEX `{s}` is not a GID index (0 to 255)"
            ))
        })?,
        Err(_) if mine.is_some_and(|n| n.device == d.name) => {
            let n = mine.map_or(0, |n| n.gid_index);
            u8::try_from(n).map_err(|_| {
                failed(format!(
                    "rank {rank}: the testbed's gid_index {n} for {} is not a GID index (0 to 255)",
                    d.name
                ))
            })?
        }
        Err(_) => d
            .ports
            .first()
            .and_then(|p| {
                p.gids
                    .iter()
                    .find(|(_, g)| g.0[..10] == [0; 10] && g.0[10..12] == [0xff, 0xff])
            })
            .map_or(0, |(i, _)| *i as u8),
    };
    let (fidelity, fabric) = label(&d.provider);
    let plan = |msg_len: u32, window: u32, messages: u32| {
        let mut p = QpPlan::rc(sizes.mtu, msg_len, window, messages, rto_ns);
        p.sq_psn = 0x100 * (rank as u32 + 1);
        p
    };
    let open = |p: QpPlan| {
        v.connect(Some(&d.name), 1, gid_index, &p)
            .map_err(|e| failed(format!("rank {rank}: {e}")))
    };
    let mut bulk_c = open(plan(sizes.msg_packets, sizes.window, sizes.messages))?;
    let mut ping_c = open(plan(1, PING_RECVS, PINGS + 1))?;
    let gid = std::net::Ipv6Addr::from(bulk_c.info().gid.0);
    ctx.fidelity = fidelity;
    ctx.fabric = fabric;
    ctx.log(
        LogLevel::Info,
        format!(
            "rank {rank} on {}: device {} [{}] GID index {gid_index} ({gid}): rows {fidelity}, fabric {fabric}",
            me.host,
            d.name,
            d.provider
        ),
    );
    let mut bulk = VerbsQp::new(&mut bulk_c);
    let mut ping = VerbsQp::new(&mut ping_c);
    body(ctx, rank, sizes, &mut bulk, &mut ping, exchange)
}

/// Poll `qp` until `done` says so (it sees every completion), at most [`WAIT`]; `sleep`: after
/// 64 empty polls, sleep 10 us between polls (the bulk transfer: a stand-in for a completion
/// channel, which the binding does not bind), else spin (the RTT).
fn wait<T: HostTransport>(
    qp: &mut T,
    what: &str,
    sleep: bool,
    mut done: impl FnMut(&inabench_transport::Completion) -> Result<bool, WorkloadError>,
) -> Result<(), WorkloadError> {
    let t0 = Instant::now();
    let mut empty = 0u32;
    loop {
        let cs = qp.poll(32).map_err(|e| failed(format!("{what}: {e}")))?;
        if cs.is_empty() {
            empty += 1;
            if t0.elapsed() > WAIT {
                return Err(failed(format!("{what}: no completion within {WAIT:?}")));
            }
            if sleep && empty > 64 {
                std::thread::sleep(Duration::from_micros(10));
            }
            continue;
        }
        empty = 0;
        let mut finished = false;
        for c in &cs {
            if let Some(status) = c.error {
                return Err(failed(format!(
                    "{what}: a work completion failed (status {status}, wr {})",
                    c.wr_id
                )));
            }
            finished |= done(c)?;
        }
        if finished {
            return Ok(());
        }
    }
}

/// The transfer of one repetition, on either rank.
fn body<T: HostTransport>(
    ctx: &mut PointCtx<'_>,
    rank: usize,
    sizes: Sizes,
    bulk: &mut T,
    ping: &mut T,
    exchange: &mut dyn RankExchange,
) -> Result<(), WorkloadError> {
    fn err<E: std::fmt::Display>(rank: usize, what: &'static str) -> impl Fn(E) -> WorkloadError {
        move |e| failed(format!("rank {rank}: {what}: {e}"))
    }
    let mtu = sizes.mtu as usize;
    let message = sizes.message_bytes();
    let total = sizes.total_bytes();
    let seed = ctx.seed;
    // receives first: every WRITE with immediate finds one posted
    if rank == 0 {
        ping.post_recv(u64::from(REPORT_IMM))
            .map_err(err(rank, "posting a receive"))?;
        let buf = bulk.buf_mut();
        for (i, b) in buf[..total].iter_mut().enumerate() {
            *b = pattern(seed, i);
        }
    } else {
        bulk.post_recv(0).map_err(err(rank, "posting a receive"))?;
        for k in 0..u64::from(PING_RECVS) {
            ping.post_recv(k).map_err(err(rank, "posting a receive"))?;
        }
    }
    let peers = publish(exchange, &[("bulk", bulk.info()), ("ping", ping.info())])
        .map_err(|e| failed(format!("rank {rank}: the QP exchange: {e}")))?;
    let other = 1 - rank;
    let qp_of = |name: &str| -> Result<ConnInfo, WorkloadError> {
        peers
            .get(&other)
            .and_then(|q| q.get(name))
            .copied()
            .ok_or_else(|| failed(format!("rank {other} published no `{name}` QP")))
    };
    bulk.connect(&qp_of("bulk")?)
        .map_err(err(rank, "connecting the bulk QP"))?;
    ping.connect(&qp_of("ping")?)
        .map_err(err(rank, "connecting the ping QP"))?;
    // both sides' QPs are ready to receive before the first WRITE: a second round, empty
    exchange
        .exchange(&[])
        .map_err(|e| failed(format!("rank {rank}: the barrier: {e}")))?;
    if ctx.cancelled() {
        return Err(WorkloadError::Interrupted);
    }
    if rank == 0 {
        // the bulk transfer: `window` WRITEs in flight, the last with an immediate
        let (cpu0, t0) = (thread_cpu_ns(), Instant::now());
        let (mut posted, mut completed) = (0u32, 0u32);
        let n = sizes.messages;
        while completed < n {
            while posted < n && posted - completed < sizes.window {
                let imm = (posted + 1 == n).then_some(n);
                bulk.post_write(
                    u64::from(posted),
                    u64::from(posted) * message as u64,
                    message as u32,
                    imm,
                )
                .map_err(err(rank, "posting a WRITE"))?;
                posted += 1;
            }
            wait(bulk, "the bulk transfer", true, |c| {
                if c.kind == CompletionKind::Write {
                    completed += 1;
                }
                Ok(true)
            })?;
        }
        let wall = t0.elapsed().as_nanos().max(1) as f64;
        let cpu = (thread_cpu_ns().saturating_sub(cpu0)) as f64 / wall * 100.0;
        // RTT: one one-packet WRITE at a time, posted to completed (its ACK)
        let mut rtt = Vec::with_capacity(PINGS as usize);
        // rank 1's report may complete in the same poll as the last ping's ACK
        let mut report = false;
        for k in 0..PINGS {
            let off = k as usize * mtu;
            for (i, b) in ping.buf_mut()[off..off + mtu].iter_mut().enumerate() {
                *b = pattern(seed ^ 0x5a5a, off + i);
            }
            let t = Instant::now();
            ping.post_write(u64::from(k), off as u64, mtu as u32, Some(k))
                .map_err(err(rank, "posting a ping"))?;
            wait(ping, "a ping", false, |c| {
                report |= c.kind == CompletionKind::RecvWriteImm && c.imm == Some(REPORT_IMM);
                Ok(c.kind == CompletionKind::Write)
            })?;
            rtt.push(t.elapsed().as_nanos() as u64);
        }
        // rank 1's report: its bulk CPU time, wall time and what it found
        if !report {
            wait(ping, "rank 1's report", true, |c| {
                Ok(c.kind == CompletionKind::RecvWriteImm && c.imm == Some(REPORT_IMM))
            })?;
        }
        let at = PINGS as usize * mtu;
        let word = |i: usize| {
            let b = &ping.buf()[at + 8 * i..at + 8 * i + 8];
            u64::from_le_bytes(b.try_into().unwrap_or([0; 8]))
        };
        let (cpu1, wall1, bad) = (word(0), word(1), word(2));
        if bad != 0 {
            return Err(WorkloadError::WrongResult(format!(
                "rank 1 found {} of the bytes rank 0 wrote differing (the first at byte {})",
                bad,
                word(3)
            )));
        }
        let cpu1 = cpu1 as f64 / (wall1.max(1)) as f64 * 100.0;
        ctx.record("throughput", total as f64 * 8.0 / wall);
        ctx.record("cpu", (cpu + cpu1) / 2.0);
        rtt.sort_unstable();
        if let Some(m) = rtt.get(rtt.len() / 2) {
            ctx.record("rtt", *m as f64 / 1e3);
        }
        ctx.counter(
            "bytes_checked",
            total as u64 + u64::from(PINGS) * mtu as u64,
        );
        return Ok(());
    }
    // rank 1: the bulk transfer's last WRITE carries the immediate; RC delivers in order
    let (cpu0, t0) = (thread_cpu_ns(), Instant::now());
    wait(bulk, "the bulk transfer", true, |c| {
        Ok(c.kind == CompletionKind::RecvWriteImm && c.imm == Some(sizes.messages))
    })?;
    let wall = t0.elapsed().as_nanos() as u64;
    let cpu = thread_cpu_ns().saturating_sub(cpu0);
    let got = bulk.buf();
    let mut bad = 0u64;
    let mut first = 0u64;
    for (i, b) in got[..total].iter().enumerate() {
        if *b != pattern(seed, i) {
            if bad == 0 {
                first = i as u64;
            }
            bad += 1;
        }
    }
    // the pings, in order (two may complete in one poll: each is checked and its receive
    // posted again once polled)
    let mut next = 0u32;
    while next < PINGS {
        let mut arrived = Vec::new();
        wait(ping, "a ping", false, |c| {
            if c.kind == CompletionKind::RecvWriteImm {
                arrived.push(c.imm);
            }
            Ok(true)
        })?;
        for imm in arrived {
            if imm != Some(next) {
                return Err(failed(format!(
                    "rank 1: ping {next} expected, a WRITE with immediate {imm:?} arrived"
                )));
            }
            let off = next as usize * mtu;
            for i in 0..mtu {
                if ping.buf()[off + i] != pattern(seed ^ 0x5a5a, off + i) {
                    if bad == 0 {
                        first = (total + off + i) as u64;
                    }
                    bad += 1;
                }
            }
            ping.post_recv(u64::from(next + PING_RECVS))
                .map_err(err(rank, "posting a receive"))?;
            next += 1;
        }
    }
    let at = PINGS as usize * mtu;
    for (i, w) in [cpu, wall, bad, first].iter().enumerate() {
        ping.buf_mut()[at + 8 * i..at + 8 * i + 8].copy_from_slice(&w.to_le_bytes());
    }
    ping.post_write(
        u64::from(REPORT_IMM),
        at as u64,
        mtu as u32,
        Some(REPORT_IMM),
    )
    .map_err(err(rank, "posting the report"))?;
    wait(ping, "the report", true, |c| {
        Ok(c.kind == CompletionKind::Write)
    })?;
    if bad != 0 {
        return Err(WorkloadError::WrongResult(format!(
            "{bad} bytes differ from what rank 0 wrote (the first at byte {first})"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_refuse_what_a_qp_cannot_carry() {
        let point = |kb: f64, mtu: f64| Point {
            id: "p".into(),
            system: "roce".into(),
            params: [
                (
                    "message_kb".to_string(),
                    inabench_core::value::Scalar::Float(kb),
                ),
                ("mtu".to_string(), inabench_core::value::Scalar::Float(mtu)),
                ("total_mb".to_string(), inabench_core::value::Scalar::Int(1)),
            ]
            .into_iter()
            .collect(),
            repetitions: 1,
            warmup: 0,
        };
        let s = Sizes::of(&point(64.0, 1024.0)).expect("64 KB");
        assert_eq!((s.msg_packets, s.messages, s.window), (64, 16, 4));
        assert!(matches!(
            Sizes::of(&point(64.0, 1000.0)),
            Err(WorkloadError::BadParam(_))
        ));
        assert!(matches!(
            Sizes::of(&point(0.5, 1024.0)),
            Err(WorkloadError::BadParam(_))
        ));
    }

    #[test]
    fn providers_label_rows() {
        use inabench_devices::verbs::Provider;
        assert_eq!(label(&Provider::SoftRoce), (Fidelity::Emulated, "rdma-rxe"));
        assert_eq!(
            label(&Provider::SoftIwarp),
            (Fidelity::Emulated, "rdma-siw")
        );
        assert_eq!(
            label(&Provider::Hardware {
                driver: Some("mlx5_core".into()),
                vendor_id: 0x02c9
            }),
            (Fidelity::Hardware, "roce")
        );
    }
}
