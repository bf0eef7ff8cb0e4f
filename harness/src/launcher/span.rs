//! Jobs that span agents (issue #36 items 2 and 5): one repetition of one point given to N
//! agents at once, each with its rank, whose bodies exchange what they need of each other (their
//! queue pairs' connection info) through the runner ([`super::qp_exchange`]) before they connect.
//!
//! The harness only dispatches: a workload says how many agents a system's points span
//! ([`inabench_core::Workload::ranks`]) and which rows it does not run here ([`inabench_core::Workload::not_here`]), and holds
//! the body ([`inabench_core::Workload::run_rank`]; the first is netreduce-table1's `roce` row,
//! `inabench_workloads::netreduce::table1_roce`).
//!
//! - The runner's side ([`run_spanning`]) sends [`Msg::RankJob`] to the first N agents, streams
//!   every rank's events to the run, answers each exchange round once every rank sent its QPs
//!   (or ends it with [`Msg::QpAbort`] when a rank failed, or when a rank stays silent past the
//!   round's deadline: [`ROUND_DEADLINE`]), and returns the job's outcome once every rank is done.
//! - The agent's side ([`run_rank`]) runs the workload's rank body with a [`RankExchange`] over
//!   its end of the channel ([`ChannelExchange`]: `Msg::QpInfo` out, `Msg::QpPeers` or
//!   `Msg::QpAbort` back), and the testbed's NIC of its own host ([`nic_of`]).

use super::qp_exchange::{ExchangeError, QpSet, answer, publish, send_msg};
use super::{Agent, Job, JobFailure, LaunchError, MAX_FRAME, Msg, read_frame};
use crate::registry::Registry;
use inabench_core::event::Event;
use inabench_core::plan::Plan;
use inabench_core::workload::{ExchangeFailed, HostNic, Published, Rank, RankExchange};
use inabench_transport::{ConnInfo, ConnInfoWire};
use std::cell::RefCell;
use std::io::{BufRead, Write};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// How long the runner waits, once a round has begun (a rank published), for the other ranks to
/// publish theirs: a rank's body publishes after opening its QPs (seconds at most) and, for the
/// barrier round, after connecting them; between rounds its only waits are for completions, each
/// at most 60 s (`table1_roce::WAIT`). A rank silent for twice that plus a margin,
/// 2 x 60 s + 30 s = 150 s, is not coming: the round is ended with `Msg::QpAbort` naming it.
pub const ROUND_DEADLINE: Duration = Duration::from_secs(150);

/// The built-in workloads, which the agents run (the decisions of [`ranks_of`] and
/// [`leave_out`] are theirs). Pure: the list of workload values, built from code alone, holding
/// no measurement.
fn builtin() -> &'static Registry {
    static R: std::sync::OnceLock<Registry> = std::sync::OnceLock::new();
    R.get_or_init(Registry::builtin)
}

/// How many agents one repetition of `system`'s points of `workload` spans (1: the usual path,
/// one agent a job): the workload's [`inabench_core::Workload::ranks`].
pub fn ranks_of(workload: &str, system: &str) -> usize {
    builtin().get(workload).map_or(1, |w| w.ranks(system))
}

/// Leave out of `plan` the rows its workload does not run (`agents`: the run's points go to
/// agents), each with the workload's sentence ([`inabench_core::Workload::not_here`]).
pub fn leave_out(plan: &mut Plan, workload: &str, agents: bool) {
    let Some(w) = builtin().get(workload) else {
        return;
    };
    for class in plan.fidelities.clone() {
        plan.leave_out(class, |s| w.not_here(class, s, agents));
    }
}

pub use inabench_core::workload::RankNic;

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
/// or whose first label is `me`'s first label (`node0` and `node0.lab`). A testbed that declares
/// NICs, none of them `me`'s, is [`HostNic::NotThisHost`] (the rank fails as a setup failure
/// rather than open a device the testbed does not name); one that declares none (the rxe rig's
/// file names its guests' rxe0, so its ranks find theirs) is [`HostNic::Undeclared`].
pub fn nic_of<'n>(nics: &'n [RankNic], me: &str) -> HostNic<'n> {
    if nics.is_empty() {
        return HostNic::Undeclared;
    }
    let first = |s: &str| s.split('.').next().unwrap_or_default().to_string();
    nics.iter()
        .find(|n| n.host == me || n.address.as_deref() == Some(me))
        .or_else(|| {
            nics.iter().find(|n| {
                first(&n.host) == first(me)
                    || n.address.as_deref().is_some_and(|a| first(a) == first(me))
            })
        })
        .map_or(HostNic::NotThisHost(nics), HostNic::Declared)
}

// ---------------------------------------------------------------- the runner's side

/// What a rank's reader thread hands the runner.
enum FromRank {
    Msg(Msg),
    Lost(LaunchError),
}

/// Run `job` as ranks 0..`ranks` on `agents[..ranks]`: each rank's events go to `sink`,
/// each exchange round is answered once every rank sent its QPs, and the job's outcome is the
/// first failing rank's (rank order), else success. `Err`: an agent's channel failed, or a rank
/// published nothing within `deadline` of a round's first QPs (`LaunchError::Silent`: the
/// waiting ranks get `Msg::QpAbort` with that sentence, and the caller drops the agents, the
/// silent one still running its body).
pub fn run_spanning(
    agents: &mut [Agent],
    job: &Job,
    ranks: usize,
    nics: &[RankNic],
    deadline: Duration,
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
        // when the current round's first QPs arrived (None: no round under way)
        let mut began: Option<std::time::Instant> = None;
        loop {
            let next = match began {
                Some(t0) if aborted.is_none() => {
                    match rx.recv_timeout(deadline.saturating_sub(t0.elapsed())) {
                        Ok(x) => Some(x),
                        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => None,
                        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                    }
                }
                _ => match rx.recv() {
                    Ok(x) => Some(x),
                    Err(_) => break,
                },
            };
            let Some((rank, m)) = next else {
                // a rank stayed silent: end the round, and the job (the silent rank's body may
                // never end; the caller drops every agent)
                let silent: Vec<usize> = (0..ranks).filter(|r| round[*r].is_none()).collect();
                let who = match silent.as_slice() {
                    [one] => format!("rank {one}"),
                    many => format!(
                        "ranks {}",
                        many.iter()
                            .map(|r| r.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                };
                let e = LaunchError::Silent {
                    who,
                    waited: deadline,
                };
                aborted = Some(abort(&mut writers, &mut round, e.to_string()));
                lost.get_or_insert(e);
                for a in writers.iter_mut() {
                    let _ = a.1.get_ref().shutdown(std::net::Shutdown::Both);
                }
                began = None;
                continue;
            };
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
                    began.get_or_insert_with(std::time::Instant::now);
                    if round.iter().all(Option::is_some) {
                        began = None;
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

/// An agent's end of the control channel as a [`RankExchange`]: each round publishes this rank's
/// QPs (`Msg::QpInfo`, each endpoint read as connection info) and returns every rank's as the
/// runner answered them, or the runner's reason for ending the exchange.
pub struct ChannelExchange<'c, R, W> {
    pub rank: usize,
    pub reader: &'c mut R,
    pub writer: &'c RefCell<&'c mut W>,
}

impl<R: BufRead, W: Write> RankExchange for ChannelExchange<'_, R, W> {
    fn exchange(
        &mut self,
        endpoints: &[(&str, serde_json::Value)],
    ) -> Result<Published, ExchangeFailed> {
        let mut qps = Vec::with_capacity(endpoints.len());
        for (name, v) in endpoints {
            let wire: ConnInfoWire = serde_json::from_value(v.clone())
                .map_err(|e| ExchangeFailed(format!("QP `{name}` is not connection info: {e}")))?;
            let info = ConnInfo::try_from(&wire)
                .map_err(|e| ExchangeFailed(format!("QP `{name}`: {e}")))?;
            qps.push((*name, info));
        }
        let mut w = self.writer.borrow_mut();
        let peers = w
            .flush()
            .map_err(ExchangeError::from)
            .and_then(|()| publish(self.reader, &mut **w, self.rank, &qps))
            .map_err(|e| ExchangeFailed(e.to_string()))?;
        let mut out = Published::new();
        for (rank, named) in peers {
            let mut m = std::collections::BTreeMap::new();
            for (name, info) in named {
                let v = serde_json::to_value(info.to_wire())
                    .map_err(|e| ExchangeFailed(e.to_string()))?;
                m.insert(name, v);
            }
            out.insert(rank, m);
        }
        Ok(out)
    }
}

/// Run rank `rank` of `ranks` of `job` on this agent through `registry`'s workload; its events go
/// out on `writer` as `Msg::Event`s, its QPs are exchanged on `reader`/`writer`.
#[allow(clippy::too_many_arguments)]
pub fn run_rank<R: BufRead, W: Write>(
    registry: &Registry,
    job: &Job,
    rank: usize,
    ranks: usize,
    nics: &[RankNic],
    cancel: &AtomicBool,
    reader: &mut R,
    writer: &mut W,
) -> Result<(), JobFailure> {
    let (at, note) = crate::executor::point_workload(registry, job)?;
    let w = at.get();
    let want = w.ranks(&job.point.system);
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
    if let Some(line) = note {
        sink(Event::Driver {
            point: job.index,
            line,
        });
    }
    let units = |m: &str| job.units.get(m).cloned().unwrap_or_default();
    let host = super::hostname();
    let me = Rank {
        rank,
        ranks,
        host: &host,
        nic: nic_of(nics, &host),
    };
    let result = {
        let mut ctx = crate::executor::job_ctx(job, w, cancel, &mut sink, &units);
        let mut exchange = ChannelExchange {
            rank,
            reader,
            writer: &writer,
        };
        w.run_rank(&mut ctx, &me, &mut exchange)
    };
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

#[cfg(test)]
mod tests {
    use super::*;
    use inabench_core::event::LogLevel;
    use std::time::Duration;

    fn job() -> Job {
        Job {
            workload: "netreduce.table1".into(),
            point: inabench_core::plan::Point {
                id: "p".into(),
                system: "roce".into(),
                params: Default::default(),
                repetitions: 1,
                warmup: 0,
            },
            index: 0,
            fidelity: inabench_core::Fidelity::Emulated,
            repetition: 0,
            warmup: false,
            seed: 1,
            run_id: "r".into(),
            experiment: "netreduce-table1".into(),
            units: Default::default(),
            capture_dir: None,
            host_profile: None,
            addresses: None,
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
        let ok = run_spanning(&mut accepted, &job(), 2, &[], ROUND_DEADLINE, &mut |e| {
            events.push(e)
        })
        .expect("channel");
        assert_eq!(ok, Ok(()));
        assert_eq!(events.len(), 2, "{events:?}");
        let failed = run_spanning(&mut accepted, &job(), 2, &[], ROUND_DEADLINE, &mut |_| {})
            .expect("channel");
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

    /// A rank that takes its job and never publishes (a test double: it reads its RankJob and
    /// then only waits for its channel to close): the runner, with a 1 s round deadline, ends
    /// the round once rank 0 has waited that long, rank 0 hears a sentence naming rank 1, and
    /// the job fails with that sentence, in seconds, not never.
    #[test]
    fn a_rank_that_never_publishes_ends_the_round_at_the_deadline() {
        use super::super::ControlListener;
        use super::super::qp_exchange::AgentLink;
        use inabench_transport::ipv4_gid;
        let control = ControlListener::bind("127.0.0.1:0").expect("bind");
        let addr = control.local_addr().expect("addr").to_string();
        let agents: Vec<_> = (0..2)
            .map(|me| {
                let (addr, token) = (addr.clone(), control.token().to_string());
                std::thread::spawn(move || {
                    let mut link = AgentLink::connect(&addr, me, &token).expect("connect");
                    link.reader
                        .get_ref()
                        .set_read_timeout(Some(Duration::from_secs(20)))
                        .expect("timeout");
                    let line = read_frame(&mut link.reader, MAX_FRAME)
                        .expect("read")
                        .expect("a job");
                    assert!(line.contains("\"rank_job\""), "{line}");
                    if me == 1 {
                        // silent: the next read ends when the runner closes the channel
                        let r = read_frame(&mut link.reader, MAX_FRAME);
                        assert!(!matches!(r, Ok(Some(_))), "{r:?}");
                        return None;
                    }
                    let info = ConnInfo {
                        qpn: 0x20,
                        psn: 7,
                        gid: ipv4_gid([10, 0, 0, 1]),
                        addr: 0x1000,
                        rkey: 9,
                    };
                    link.publish(0, &[("bulk", info)])
                        .err()
                        .map(|e| e.to_string())
                })
            })
            .collect();
        let mut accepted = control
            .accept(2, Duration::from_secs(20), &|_| None, &mut |_| Ok(()))
            .expect("both agents connect");
        let t0 = std::time::Instant::now();
        let r = run_spanning(
            &mut accepted,
            &job(),
            2,
            &[],
            Duration::from_secs(1),
            &mut |_| {},
        );
        let took = t0.elapsed();
        let Err(e) = r else {
            panic!("the job did not fail: {r:?}");
        };
        assert!(
            matches!(&e, LaunchError::Silent { who, .. } if who == "rank 1"),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "rank 1 published no QPs within 1s of the round's first"
        );
        assert!(
            took >= Duration::from_secs(1) && took < Duration::from_secs(5),
            "{took:?}"
        );
        let heard: Vec<_> = agents
            .into_iter()
            .map(|t| t.join().expect("agent"))
            .collect();
        assert_eq!(
            heard[0].as_deref(),
            Some(
                "the runner ended the exchange: rank 1 published no QPs within 1s of the round's first"
            )
        );
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
        let dev = |me: &str| {
            nic_of(&nics, me)
                .declared()
                .map(|n| (n.device.as_str(), n.gid_index))
        };
        assert_eq!(dev("node0"), Some(("mlx5_0", 3)));
        assert_eq!(dev("node0.lab"), Some(("mlx5_0", 3)));
        assert_eq!(dev("node0.cluster.example"), Some(("mlx5_0", 3)));
        assert_eq!(dev("10.1.0.2"), Some(("mlx5_1", 5)));
        // a host the testbed's NICs do not name: no device of its own choosing, one sentence
        let node7 = nic_of(&nics, "node7");
        assert_eq!(node7, HostNic::NotThisHost(&nics));
        assert_eq!(
            node7.not_this_host("node7").as_deref(),
            Some(
                "the testbed's nics: declare RoCE NICs on node0, node1 and none on this host, `node7` (its hostname is none of theirs, by name or address); set INABENCH_RDMA_DEVICE to open a device here anyway"
            )
        );
        // a testbed of no NICs (the rig's guests without `nics:`): the rank picks its device
        assert_eq!(nic_of(&[], "guest0"), HostNic::Undeclared);
        assert_eq!(HostNic::Undeclared.not_this_host("guest0"), None);
        // the rxe rig's own file: each guest's hostname (tools/rxe-rig/guest.sh) finds its rxe0
        let rig = crate::testbed::Testbed::load(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../experiments/testbeds/rxe-rig-agents.yaml"),
        )
        .expect("the rig's testbed");
        let rig_nics = testbed_nics(&rig);
        for g in ["guest0", "guest1"] {
            assert_eq!(
                nic_of(&rig_nics, g).declared().map(|n| n.device.as_str()),
                Some("rxe0"),
                "{g}"
            );
        }
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
}
