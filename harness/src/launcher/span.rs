//! Jobs that span agents (issue #36 items 2 and 5): one repetition of one point given to N
//! agents at once, each with its rank, whose bodies exchange their queue pairs' connection info
//! through the runner ([`super::qp_exchange`]) before they connect them.
//!
//! The first such job is netreduce-table1's `roce` row: one RoCEv2 RC transfer between two
//! hosts' verbs QPs ([`inabench_devices::transport::VerbsQp`] behind
//! [`inabench_transport::HostTransport`]), measured as the emulated rows are: throughput of a
//! `total_mb` bulk transfer in `message_kb` RDMA WRITEs with a window of `window` messages,
//! every byte checked at the receiver; RTT the median over 200 one-packet WRITEs of the time from
//! posting one to its completion (on RC: its ACK); CPU the mean of the two hosts' bulk-transfer
//! thread CPU time over its wall time, percent of one core.
//!
//! - The runner's side ([`run_spanning`]) sends [`Msg::RankJob`] to the first N agents, streams
//!   every rank's events to the run, answers each exchange round once every rank sent its QPs
//!   (or ends it with [`Msg::QpAbort`] when a rank failed), and returns the job's outcome once
//!   every rank is done. Rank 0 records the rows; rank 1 records none (it sends rank 0 its CPU
//!   and its check of the bytes over the QPs themselves).
//! - The agent's side ([`run_rank`]) opens the device, labels the rows by the device's provider
//!   (a hardware provider: `hardware`, fabric `roce`; Soft-RoCE: `emulated`, fabric `rdma-rxe`;
//!   Soft-iWARP: `emulated`, fabric `rdma-siw`), publishes, connects and runs.
//! - The device: `INABENCH_RDMA_DEVICE` and `INABENCH_RDMA_GID_INDEX` where set; else the
//!   testbed's `nics:` entry (device, gid_index) of the rank's host (by its name or `address`,
//!   which the runner sends with the job); else the first device the library lists and the first
//!   IPv4-mapped GID of its port 1 (RoCEv2's).
//! - `INABENCH_SPAN_TRANSPORT=soft-udp` runs the same body on the suite's software RC stack
//!   ([`inabench_transport::soft::SoftQp`]) carried over UDP on loopback, for hosts without an
//!   RDMA device (the tests of the dispatch and the exchange); its rows are `emulated`, fabric
//!   `soft-rc-udp`. The carrier names its UDP port in its GID's last two bytes (127.1.p.p).

use super::qp_exchange::{ExchangeError, Peers, QpSet, answer, publish, send_msg};
use super::{Agent, Job, JobFailure, LaunchError, MAX_FRAME, Msg, read_frame};
use inabench_core::event::{Event, LogLevel};
use inabench_core::plan::Plan;
use inabench_core::{Fidelity, PointCtx, WorkloadError};
use inabench_transport::soft::{Shape, SoftQp};
use inabench_transport::{CompletionKind, ConnInfo, HostTransport};
use std::cell::RefCell;
use std::io::{BufRead, Write};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// The workload and system of the first job that spans agents.
pub const TABLE1: &str = "netreduce.table1";
pub const ROCE: &str = "roce";

/// One-packet messages of the RTT measurement.
pub const PINGS: u32 = 200;
/// Receives rank 1 keeps posted on its ping QP (one ping is in flight at a time; the spares
/// cover pings whose completions it has not yet polled).
const PING_RECVS: u32 = 4;
/// The immediate of rank 1's report to rank 0.
const REPORT_IMM: u32 = 0x00ff_0000;
/// How long one wait for completions may take.
const WAIT: Duration = Duration::from_secs(60);

/// How many agents one repetition of `system`'s points of `workload` spans (1: the usual path,
/// one agent a job).
pub fn ranks_of(workload: &str, system: &str) -> usize {
    if workload == TABLE1 && system == ROCE {
        2
    } else {
        1
    }
}

/// Leave out of `plan` the rows its workload does not run in a class: netreduce-table1's
/// `hardware` class is the `roce` row (its other rows are software host I/O models on the udp
/// fabric, `emulated` only), and its `roce` row runs in agents only (`agents`: the run's points
/// go to agents), on two hosts with RDMA devices.
pub fn leave_out(plan: &mut Plan, workload: &str, agents: bool) {
    if workload != TABLE1 {
        return;
    }
    plan.leave_out(Fidelity::Hardware, |s| {
        (s != ROCE).then(|| {
            format!(
                "`{s}` is a software host I/O model on the udp fabric: its rows are emulated only"
            )
        })
    });
    if !agents {
        plan.leave_out(Fidelity::Emulated, |s| {
            (s == ROCE).then(|| {
                "needs two hosts' RDMA devices, reached through agents (a testbed's `launcher:` or --launcher local|ssh|slurm); on Soft-RoCE its rows are emulated, fabric rdma-rxe".to_string()
            })
        });
    }
}

/// A RoCE NIC of the testbed file (`nics:` with `kind: roce`), with its host's name and
/// `address`: what a rank opens when the testbed names its host's NIC.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RankNic {
    pub host: String,
    #[serde(default)]
    pub address: Option<String>,
    pub device: String,
    pub gid_index: u32,
}

/// The testbed's RoCE NICs as ranks receive them.
pub fn testbed_nics(tb: &crate::testbed::Testbed) -> Vec<RankNic> {
    tb.nics
        .iter()
        .filter(|n| n.kind == "roce")
        .map(|n| RankNic {
            host: n.host.clone(),
            address: tb
                .hosts
                .iter()
                .find(|h| h.name == n.host)
                .and_then(|h| h.address.clone()),
            device: n.device.clone(),
            gid_index: n.gid_index,
        })
        .collect()
}

/// The NIC of the host named `me` (its hostname): the entry whose host name or address is `me`,
/// or whose first label is `me`'s first label (`node0` and `node0.lab`).
pub fn nic_of<'n>(nics: &'n [RankNic], me: &str) -> Option<&'n RankNic> {
    let first = |s: &str| s.split('.').next().unwrap_or_default().to_string();
    nics.iter()
        .find(|n| n.host == me || n.address.as_deref() == Some(me))
        .or_else(|| {
            nics.iter().find(|n| {
                first(&n.host) == first(me)
                    || n.address.as_deref().is_some_and(|a| first(a) == first(me))
            })
        })
}

// ---------------------------------------------------------------- the runner's side

/// What a rank's reader thread hands the runner.
enum FromRank {
    Msg(Msg),
    Lost(LaunchError),
}

/// Run `job` as ranks 0..`ranks` on `agents[..ranks]`: each rank's events go to `sink`,
/// each exchange round is answered once every rank sent its QPs, and the job's outcome is the
/// first failing rank's (rank order), else success. `Err`: an agent's channel failed (the
/// caller drops the agents).
pub fn run_spanning(
    agents: &mut [Agent],
    job: &Job,
    ranks: usize,
    nics: &[RankNic],
    sink: &mut dyn FnMut(Event),
) -> Result<Result<(), JobFailure>, LaunchError> {
    let agents = &mut agents[..ranks];
    for (rank, a) in agents.iter_mut().enumerate() {
        send_msg(
            &mut a.writer,
            &Msg::RankJob {
                job: Box::new(job.clone()),
                rank,
                ranks,
                nics: nics.to_vec(),
            },
        )
        .map_err(channel)?;
    }
    let (tx, rx) = std::sync::mpsc::channel::<(usize, FromRank)>();
    let mut writers = Vec::with_capacity(ranks);
    let mut outcome: Vec<Option<Result<(), JobFailure>>> = vec![None; ranks];
    let mut lost: Option<LaunchError> = None;
    std::thread::scope(|scope| {
        for (rank, a) in agents.iter_mut().enumerate() {
            let reader = &mut a.reader;
            writers.push((a.index, &mut a.writer));
            let tx = tx.clone();
            scope.spawn(move || {
                loop {
                    let m = match read_frame(reader, MAX_FRAME) {
                        Ok(Some(line)) => match serde_json::from_str::<Msg>(&line) {
                            Ok(m) => FromRank::Msg(m),
                            Err(e) => FromRank::Lost(LaunchError::Protocol(e.to_string())),
                        },
                        Ok(None) => FromRank::Lost(LaunchError::AgentDied {
                            index: rank,
                            status: "connection closed".into(),
                        }),
                        Err(e) => FromRank::Lost(e),
                    };
                    let last = !matches!(m, FromRank::Msg(Msg::Event { .. } | Msg::QpInfo(_)));
                    if tx.send((rank, m)).is_err() || last {
                        return;
                    }
                }
            });
        }
        drop(tx);
        // the current exchange round: each rank's QPs once it sent them
        let mut round: Vec<Option<QpSet>> = vec![None; ranks];
        let mut aborted: Option<String> = None;
        let abort = |writers: &mut Vec<(usize, &mut std::io::BufWriter<std::net::TcpStream>)>,
                     round: &mut Vec<Option<QpSet>>,
                     reason: String| {
            // every rank waiting in this round hears why; later rounds are refused at once
            for (r, (_, w)) in writers.iter_mut().enumerate() {
                if round[r].take().is_some() {
                    let _ = send_msg(
                        &mut **w,
                        &Msg::QpAbort {
                            reason: reason.clone(),
                        },
                    );
                }
            }
            reason
        };
        while let Ok((rank, m)) = rx.recv() {
            match m {
                FromRank::Msg(Msg::Event { mut event, bits }) => {
                    if let (Event::Row(r), Some(b)) = (&mut event, bits) {
                        r.value = f64::from_bits(b);
                    }
                    sink(event);
                }
                FromRank::Msg(Msg::QpInfo(set)) => {
                    if let Some(reason) = &aborted {
                        let _ = send_msg(
                            &mut *writers[rank].1,
                            &Msg::QpAbort {
                                reason: reason.clone(),
                            },
                        );
                        continue;
                    }
                    round[rank] = Some(set);
                    if round.iter().all(Option::is_some) {
                        let sets: Vec<QpSet> = round.iter().flatten().cloned().collect();
                        match answer(&sets, ranks) {
                            Ok((_, msg)) => {
                                for (_, w) in writers.iter_mut() {
                                    if let Err(e) = send_msg(&mut **w, &msg) {
                                        lost.get_or_insert(channel(e));
                                    }
                                }
                                round.iter_mut().for_each(|s| *s = None);
                            }
                            Err(e) => {
                                aborted = Some(abort(
                                    &mut writers,
                                    &mut round,
                                    format!("the QP exchange failed: {e}"),
                                ));
                            }
                        }
                    }
                }
                FromRank::Msg(Msg::Done { ok, error }) => {
                    let r = if ok {
                        Ok(())
                    } else {
                        Err(error.unwrap_or(JobFailure::Failed {
                            message: "the agent gave no reason".into(),
                        }))
                    };
                    if let Err(e) = &r
                        && aborted.is_none()
                    {
                        // the other ranks would wait for this one's QPs forever
                        aborted = Some(abort(
                            &mut writers,
                            &mut round,
                            format!("rank {rank} failed: {e}"),
                        ));
                    }
                    outcome[rank] = Some(r);
                }
                FromRank::Msg(other) => {
                    lost.get_or_insert(LaunchError::Protocol(format!(
                        "rank {rank} sent {}",
                        format!("{other:?}").chars().take(200).collect::<String>()
                    )));
                }
                FromRank::Lost(e) => {
                    lost.get_or_insert(e);
                    // the job cannot finish: the other ranks' channels are closed so that their
                    // reader threads end (the caller drops every agent)
                    for a in writers.iter_mut() {
                        let _ = a.1.get_ref().shutdown(std::net::Shutdown::Both);
                    }
                }
            }
        }
    });
    if let Some(e) = lost {
        return Err(e);
    }
    // a rank's own failure before another rank's "the runner ended the exchange" echo of it
    let failures: Vec<JobFailure> = outcome
        .into_iter()
        .flatten()
        .filter_map(Result::err)
        .collect();
    let first = failures
        .iter()
        .find(|f| !f.to_string().contains("the runner ended the exchange"))
        .or(failures.first())
        .cloned();
    Ok(first.map_or(Ok(()), Err))
}

fn channel(e: ExchangeError) -> LaunchError {
    match e {
        ExchangeError::Channel(l) => l,
        other => LaunchError::Protocol(other.to_string()),
    }
}

// ---------------------------------------------------------------- the agent's side

/// Run rank `rank` of `ranks` of `job` on this agent; its events go out on `writer` as
/// `Msg::Event`s, its QPs are exchanged on `reader`/`writer`.
pub fn run_rank<R: BufRead, W: Write>(
    job: &Job,
    rank: usize,
    ranks: usize,
    nics: &[RankNic],
    cancel: &AtomicBool,
    reader: &mut R,
    writer: &mut W,
) -> Result<(), JobFailure> {
    let want = ranks_of(&job.workload, &job.point.system);
    if want == 1 || ranks != want || rank >= ranks {
        return Err(JobFailure::Setup {
            message: format!(
                "`{}` {} does not run as rank {rank} of {ranks} (it spans {want} agent(s))",
                job.workload, job.point.system
            ),
        });
    }
    let writer = RefCell::new(writer);
    let io_err: RefCell<Option<std::io::Error>> = RefCell::new(None);
    let mut sink = |event: Event| {
        if io_err.borrow().is_some() {
            return;
        }
        let bits = match &event {
            Event::Row(r) => Some(r.value.to_bits()),
            _ => None,
        };
        let mut w = writer.borrow_mut();
        let r = serde_json::to_writer(&mut **w, &Msg::Event { event, bits })
            .map_err(std::io::Error::from)
            .and_then(|_| w.write_all(b"\n"));
        if let Err(e) = r {
            *io_err.borrow_mut() = Some(e);
        }
    };
    let mut exchange = |rank: usize, qps: &[(&str, ConnInfo)]| -> Result<Peers, ExchangeError> {
        let mut w = writer.borrow_mut();
        w.flush()?;
        publish(reader, &mut **w, rank, qps)
    };
    let units = |m: &str| job.units.get(m).cloned().unwrap_or_default();
    let result = table1_roce(job, rank, nics, cancel, &mut sink, &units, &mut exchange);
    if let Some(e) = io_err.into_inner() {
        return Err(JobFailure::Failed {
            message: format!("the control channel failed: {e}"),
        });
    }
    writer
        .borrow_mut()
        .flush()
        .map_err(|e| JobFailure::Failed {
            message: format!("the control channel failed: {e}"),
        })?;
    result.map_err(JobFailure::from)
}

type Exchange<'x> = dyn FnMut(usize, &[(&str, ConnInfo)]) -> Result<Peers, ExchangeError> + 'x;

/// The sizes of a table1 point.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    mtu: u32,
    msg_packets: u32,
    messages: u32,
    window: u32,
}

impl Sizes {
    fn of(point: &inabench_core::plan::Point) -> Result<Sizes, WorkloadError> {
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
#[allow(clippy::too_many_arguments)]
fn table1_roce(
    job: &Job,
    rank: usize,
    nics: &[RankNic],
    cancel: &AtomicBool,
    sink: &mut dyn FnMut(Event),
    units: &dyn Fn(&str) -> String,
    exchange: &mut Exchange<'_>,
) -> Result<(), WorkloadError> {
    let sizes = Sizes::of(&job.point)?;
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
        let mut bulk = SoftUdp::new(
            shape(sizes.msg_packets, sizes.window, sizes.messages),
            q(0),
            base,
        )?;
        let mut ping = SoftUdp::new(shape(1, PING_RECVS, PINGS + 1), q(1), base + (1 << 32))?;
        let mut ctx = new_ctx(job, Fidelity::Emulated, "soft-rc-udp", cancel, sink, units);
        ctx.log(
            LogLevel::Info,
            format!(
                "rank {rank} on {}: the software RC stack over UDP on loopback (no RDMA device)",
                super::hostname()
            ),
        );
        return body(&mut ctx, rank, sizes, &mut bulk, &mut ping, exchange);
    }
    use inabench_devices::transport::VerbsQp;
    use inabench_devices::verbs::{QpPlan, Verbs};
    let v = Verbs::load().map_err(|e| failed(format!("rank {rank}: {e}")))?;
    let devices = v
        .devices()
        .map_err(|e| failed(format!("rank {rank}: {e}")))?;
    // the device: INABENCH_RDMA_DEVICE, else the testbed's NIC of this host, else the first
    let mine = nic_of(nics, &super::hostname());
    let want = std::env::var("INABENCH_RDMA_DEVICE")
        .ok()
        .or_else(|| mine.map(|n| n.device.clone()));
    let d = match &want {
        Some(n) => devices.iter().find(|d| &d.name == n),
        None => devices.first(),
    }
    .ok_or_else(|| {
        failed(format!(
            "rank {rank} on {}: no RDMA device{} (devices: {})",
            super::hostname(),
            want.as_deref()
                .map(|n| format!(" `{n}`"))
                .unwrap_or_default(),
            if devices.is_empty() {
                "none".to_string()
            } else {
                devices
                    .iter()
                    .map(|d| d.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        ))
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
    let mut ctx = new_ctx(job, fidelity, fabric, cancel, sink, units);
    ctx.log(
        LogLevel::Info,
        format!(
            "rank {rank} on {}: device {} [{}] GID index {gid_index} ({gid}): rows {fidelity}, fabric {fabric}",
            super::hostname(),
            d.name,
            d.provider
        ),
    );
    let mut bulk = VerbsQp::new(&mut bulk_c);
    let mut ping = VerbsQp::new(&mut ping_c);
    body(&mut ctx, rank, sizes, &mut bulk, &mut ping, exchange)
}

fn new_ctx<'a>(
    job: &'a Job,
    fidelity: Fidelity,
    fabric: &'static str,
    cancel: &'a AtomicBool,
    sink: &'a mut dyn FnMut(Event),
    units: &'a dyn Fn(&str) -> String,
) -> PointCtx<'a> {
    PointCtx::new(
        &job.point,
        job.index,
        fidelity,
        fabric,
        job.repetition,
        job.warmup,
        job.seed,
        &job.run_id,
        &job.experiment,
        cancel,
        sink,
        units,
    )
    .with_host_profile(job.host_profile.as_ref())
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
    exchange: &mut Exchange<'_>,
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
    let peers = exchange(rank, &[("bulk", bulk.info()), ("ping", ping.info())])
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
    exchange(rank, &[]).map_err(|e| failed(format!("rank {rank}: the barrier: {e}")))?;
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

// ---------------------------------------------------------------- the software stand-in

/// Why the software stand-in refused a call.
#[derive(Debug, thiserror::Error)]
pub enum SoftUdpError {
    #[error(transparent)]
    Soft(#[from] inabench_transport::soft::SoftError),
    #[error("the UDP carrier: {0}")]
    Io(#[from] std::io::Error),
}

/// A software RC QP whose frames a UDP socket on loopback carries to its peer's.
struct SoftUdp {
    qp: SoftQp,
    sock: std::net::UdpSocket,
    peer: Option<std::net::SocketAddr>,
    t0: Instant,
}

impl SoftUdp {
    fn new(shape: Shape, qpn: u32, base: u64) -> Result<SoftUdp, WorkloadError> {
        let sock = std::net::UdpSocket::bind("127.0.0.1:0")?;
        sock.set_nonblocking(true)?;
        let port = sock.local_addr()?.port();
        let ip = [127, 1, (port >> 8) as u8, port as u8];
        let qp = SoftQp::new(ip, qpn, 0x10 * qpn, shape, base, 0x1000 + qpn)
            .map_err(|e| failed(format!("the software QP: {e}")))?;
        Ok(SoftUdp {
            qp,
            sock,
            peer: None,
            t0: Instant::now(),
        })
    }

    fn pump(&mut self) -> Result<(), SoftUdpError> {
        let now = self.t0.elapsed().as_nanos() as u64;
        let mut buf = [0u8; 9216];
        loop {
            match self.sock.recv_from(&mut buf) {
                Ok((n, _)) => {
                    if let Ok((fr, payload)) = inabench_wire::roce::FrameRepr::parse(&buf[..n]) {
                        self.qp.handle_frame(now, &fr, payload);
                    } else {
                        self.qp.malformed += 1;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e.into()),
            }
        }
        if self.qp.poll_timeout().is_some_and(|t| t <= now) {
            self.qp.handle_timeout(now);
        }
        if let Some(peer) = self.peer {
            while let Some(f) = self.qp.poll_transmit(now) {
                match self.sock.send_to(&f, peer) {
                    Ok(_) => {}
                    // a full socket buffer is a lost frame: go-back-N resends it
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(())
    }
}

impl HostTransport for SoftUdp {
    type Error = SoftUdpError;

    fn info(&self) -> ConnInfo {
        self.qp.info()
    }

    fn connect(&mut self, remote: &ConnInfo) -> Result<(), SoftUdpError> {
        let port = u16::from_be_bytes([remote.gid[14], remote.gid[15]]);
        self.peer = Some(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
        Ok(self.qp.connect(remote)?)
    }

    fn buf(&self) -> &[u8] {
        self.qp.buf()
    }

    fn buf_mut(&mut self) -> &mut [u8] {
        self.qp.buf_mut()
    }

    fn post_write(
        &mut self,
        wr_id: u64,
        offset: u64,
        len: u32,
        imm: Option<u32>,
    ) -> Result<(), SoftUdpError> {
        self.qp.post_write(wr_id, offset, len, imm)?;
        self.pump()
    }

    fn post_write_to(
        &mut self,
        wr_id: u64,
        offset: u64,
        len: u32,
        to: inabench_transport::RemoteAddr,
        imm: Option<u32>,
    ) -> Result<(), SoftUdpError> {
        self.qp.post_write_to(wr_id, offset, len, to, imm)?;
        self.pump()
    }

    fn post_recv(&mut self, wr_id: u64) -> Result<(), SoftUdpError> {
        Ok(self.qp.post_recv(wr_id)?)
    }

    fn poll(&mut self, max: usize) -> Result<Vec<inabench_transport::Completion>, SoftUdpError> {
        self.pump()?;
        Ok(self.qp.poll(max)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn sizes_refuse_what_a_qp_cannot_carry() {
        let point = |kb: f64, mtu: f64| inabench_core::plan::Point {
            id: "p".into(),
            system: ROCE.into(),
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

    fn job() -> Job {
        Job {
            workload: TABLE1.into(),
            point: inabench_core::plan::Point {
                id: "p".into(),
                system: ROCE.into(),
                params: Default::default(),
                repetitions: 1,
                warmup: 0,
            },
            index: 0,
            fidelity: Fidelity::Emulated,
            repetition: 0,
            warmup: false,
            seed: 1,
            run_id: "r".into(),
            experiment: "netreduce-table1".into(),
            units: Default::default(),
            capture_dir: None,
            host_profile: None,
        }
    }

    /// Two agents (threads with their own connections): the runner sends each its rank, streams
    /// their events, answers two exchange rounds; then a job where rank 1 fails before it
    /// publishes: rank 0, waiting in its exchange, hears why (QpAbort) instead of waiting
    /// forever, and the job's failure is rank 1's own.
    #[test]
    fn the_runner_answers_each_round_and_ends_the_exchange_when_a_rank_fails() {
        use super::super::ControlListener;
        use super::super::qp_exchange::AgentLink;
        use inabench_transport::ipv4_gid;
        let control = ControlListener::bind("127.0.0.1:0").expect("bind");
        let addr = control.local_addr().expect("addr").to_string();
        let info = |rank: usize| ConnInfo {
            qpn: 0x20 + rank as u32,
            psn: 7,
            gid: ipv4_gid([10, 0, 0, rank as u8 + 1]),
            addr: 0x1000,
            rkey: 9,
        };
        let agents: Vec<_> = (0..2)
            .map(|me| {
                let (addr, token) = (addr.clone(), control.token().to_string());
                std::thread::spawn(move || {
                    let mut link = AgentLink::connect(&addr, me, &token).expect("connect");
                    // a runner that never answers fails the test instead of hanging it
                    link.reader
                        .get_ref()
                        .set_read_timeout(Some(Duration::from_secs(10)))
                        .expect("timeout");
                    let mut seen = Vec::new();
                    let mut why = None;
                    for job in 0..2 {
                        let line = read_frame(&mut link.reader, MAX_FRAME)
                            .expect("read")
                            .expect("a job");
                        let Ok(Msg::RankJob { rank, ranks, .. }) = serde_json::from_str(&line)
                        else {
                            panic!("not a rank job: {line}");
                        };
                        assert_eq!((rank, ranks), (me, 2));
                        let done = if job == 1 && rank == 1 {
                            Msg::Done {
                                ok: false,
                                error: Some(JobFailure::Failed {
                                    message: "rank 1: no RDMA device".into(),
                                }),
                            }
                        } else {
                            let r = link.publish(rank, &[("bulk", info(rank))]).and_then(|p| {
                                seen.push(p);
                                link.publish(rank, &[])
                            });
                            match r {
                                Ok(_) => {
                                    send_msg(
                                        &mut link.writer,
                                        &Msg::Event {
                                            event: Event::Log {
                                                level: LogLevel::Info,
                                                source: "t".into(),
                                                message: format!("rank {rank} on h: ok"),
                                            },
                                            bits: None,
                                        },
                                    )
                                    .expect("event");
                                    Msg::Done {
                                        ok: true,
                                        error: None,
                                    }
                                }
                                Err(e) => {
                                    why = Some(e.to_string());
                                    Msg::Done {
                                        ok: false,
                                        error: Some(JobFailure::Failed {
                                            message: format!("rank {rank}: {e}"),
                                        }),
                                    }
                                }
                            }
                        };
                        send_msg(&mut link.writer, &done).expect("done");
                    }
                    (seen, why)
                })
            })
            .collect();
        let mut accepted = control
            .accept(2, Duration::from_secs(20), &|_| None, &mut |_| Ok(()))
            .expect("both agents connect");
        let mut events = Vec::new();
        let ok =
            run_spanning(&mut accepted, &job(), 2, &[], &mut |e| events.push(e)).expect("channel");
        assert_eq!(ok, Ok(()));
        assert_eq!(events.len(), 2, "{events:?}");
        let failed = run_spanning(&mut accepted, &job(), 2, &[], &mut |_| {}).expect("channel");
        assert_eq!(
            failed,
            Err(JobFailure::Failed {
                message: "rank 1: no RDMA device".into()
            })
        );
        for (rank, t) in agents.into_iter().enumerate() {
            let (seen, why) = t.join().expect("agent");
            if rank == 0 {
                // rank 0 heard why its exchange ended, at once
                assert_eq!(
                    why.as_deref(),
                    Some("the runner ended the exchange: rank 1 failed: rank 1: no RDMA device")
                );
            }
            // the first job's first round: both ranks' QPs, exactly
            assert_eq!(seen[0][&0]["bulk"], info(0), "agent {rank}");
            assert_eq!(seen[0][&1]["bulk"], info(1), "agent {rank}");
        }
        for a in accepted {
            a.shutdown();
        }
    }

    #[test]
    fn a_rank_opens_its_hosts_nic_of_the_testbed() {
        let tb = crate::testbed::Testbed::from_yaml(
            std::path::Path::new("t.yaml"),
            "name: t\nhosts:\n  - {name: node0, role: [worker], address: node0.lab}\n  - {name: node1, role: [worker], address: 10.1.0.2}\nnics:\n  - {host: node0, kind: roce, device: mlx5_0, gid_index: 3, rate_gbps: 100}\n  - {host: node1, kind: roce, device: mlx5_1, gid_index: 5, rate_gbps: 100}\n",
        )
        .expect("testbed");
        let nics = testbed_nics(&tb);
        assert_eq!(nics.len(), 2);
        let dev = |me: &str| nic_of(&nics, me).map(|n| (n.device.as_str(), n.gid_index));
        assert_eq!(dev("node0"), Some(("mlx5_0", 3)));
        assert_eq!(dev("node0.lab"), Some(("mlx5_0", 3)));
        assert_eq!(dev("node0.cluster.example"), Some(("mlx5_0", 3)));
        assert_eq!(dev("10.1.0.2"), Some(("mlx5_1", 5)));
        assert_eq!(dev("node7"), None);
        // what travels: the RankJob with the testbed's NICs, read back as sent
        let m = Msg::RankJob {
            job: Box::new(job()),
            rank: 1,
            ranks: 2,
            nics: nics.clone(),
        };
        let back: Msg =
            serde_json::from_str(&serde_json::to_string(&m).expect("json")).expect("parse");
        assert!(matches!(back, Msg::RankJob { nics: n, rank: 1, .. } if n == nics));
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
