//! Queue-pair connection info over the agents' control channel (issue #36 item 2): before a job's
//! hosts connect their QPs (verbs RC/UC on a RoCE NIC, or the software stack), each agent sends
//! the runner its rank and the [`ConnInfo`] of each of its QPs, named (`Msg::QpInfo`); once every
//! agent of the job has, the runner sends each of them every rank's QPs (`Msg::QpPeers`), and
//! each side connects its QPs to the peers' it needs (a ring's sending QP to its successor's
//! receiving QP, ...). Both ends check what they read: a QPN or PSN beyond 24 bits, a reserved
//! QPN, a malformed or all-zero GID, a rank given twice or missing, a QP named twice, each a
//! typed [`ExchangeError`], never a connection made with it.
//!
//! The runner's side is [`exchange`] over its [`Agent`]s; an agent's side is [`publish`] over
//! its end of the channel (the reader and writer `agent_main` holds; [`AgentLink`] connects one
//! with the hello for use outside `agent_main`).

use super::{Agent, FrameError, LaunchError, MAX_FRAME, Msg, hostname, read_frame};
use inabench_transport::{ConnInfo, ConnInfoError, ConnInfoWire};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::net::TcpStream;

/// One host's QPs as they travel: its rank in the job and each QP's name and info.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpSet {
    pub rank: usize,
    pub qps: Vec<NamedQp>,
}

/// A QP's name (what it is for: `send`, `recv`, ...) and its connection info.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamedQp {
    pub name: String,
    pub info: ConnInfoWire,
}

/// Every rank's QPs, checked: `peers[rank][name]`.
pub type Peers = BTreeMap<usize, BTreeMap<String, ConnInfo>>;

/// Why the exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    #[error("rank {rank}'s QP `{qp}`: {error}")]
    Malformed {
        rank: usize,
        qp: String,
        error: ConnInfoError,
    },
    #[error("rank {rank} names QP `{qp}` twice")]
    DuplicateQp { rank: usize, qp: String },
    #[error("rank {0} was given by two agents")]
    DuplicateRank(usize),
    #[error("rank {rank} is not one of the job's {ranks} ranks")]
    RankRange { rank: usize, ranks: usize },
    #[error("the peers' list lacks rank {0}")]
    MissingRank(usize),
    #[error("agent {agent} sent {got} while its QP info was awaited")]
    Unexpected { agent: usize, got: String },
    #[error("the runner answered {0} instead of the peers' QPs")]
    UnexpectedAnswer(String),
    #[error("the channel closed before the exchange finished")]
    Closed,
    #[error("the runner ended the exchange: {0}")]
    Aborted(String),
    #[error("a message on the control channel is not one: {0}")]
    Json(String),
    #[error(transparent)]
    Channel(#[from] LaunchError),
}

impl From<std::io::Error> for ExchangeError {
    fn from(e: std::io::Error) -> ExchangeError {
        ExchangeError::Channel(LaunchError::Io(e))
    }
}

impl From<FrameError> for ExchangeError {
    fn from(e: FrameError) -> ExchangeError {
        ExchangeError::Channel(LaunchError::Frame(e))
    }
}

/// Check one host's QPs (each info, no name twice).
pub fn check_set(set: &QpSet) -> Result<BTreeMap<String, ConnInfo>, ExchangeError> {
    let mut out = BTreeMap::new();
    for q in &set.qps {
        let info = ConnInfo::try_from(&q.info).map_err(|error| ExchangeError::Malformed {
            rank: set.rank,
            qp: q.name.clone(),
            error,
        })?;
        if out.insert(q.name.clone(), info).is_some() {
            return Err(ExchangeError::DuplicateQp {
                rank: set.rank,
                qp: q.name.clone(),
            });
        }
    }
    Ok(out)
}

/// Check every rank's QPs: ranks 0..`ranks`, each once.
pub fn check_peers(sets: &[QpSet], ranks: usize) -> Result<Peers, ExchangeError> {
    let mut peers = Peers::new();
    for s in sets {
        if s.rank >= ranks {
            return Err(ExchangeError::RankRange {
                rank: s.rank,
                ranks,
            });
        }
        let qps = check_set(s)?;
        if peers.insert(s.rank, qps).is_some() {
            return Err(ExchangeError::DuplicateRank(s.rank));
        }
    }
    if let Some(r) = (0..ranks).find(|r| !peers.contains_key(r)) {
        return Err(ExchangeError::MissingRank(r));
    }
    Ok(peers)
}

fn send<W: Write>(w: &mut W, m: &Msg) -> Result<(), ExchangeError> {
    serde_json::to_writer(&mut *w, m).map_err(|e| ExchangeError::Json(e.to_string()))?;
    w.write_all(b"\n")?;
    w.flush()?;
    Ok(())
}

fn receive<R: BufRead>(r: &mut R) -> Result<Msg, ExchangeError> {
    let line = read_frame(r, MAX_FRAME)?.ok_or(ExchangeError::Closed)?;
    serde_json::from_str(&line).map_err(|e| ExchangeError::Json(e.to_string()))
}

/// The runner's side: read each agent's QPs (one message from each, in agent order), check them
/// all, then send every agent every rank's QPs. The job's ranks are the agents' count.
pub fn exchange(agents: &mut [Agent]) -> Result<Peers, ExchangeError> {
    let mut sets = Vec::with_capacity(agents.len());
    for a in agents.iter_mut() {
        match receive(&mut a.reader)? {
            Msg::QpInfo(set) => sets.push(set),
            other => {
                return Err(ExchangeError::Unexpected {
                    agent: a.index,
                    got: format!("{other:?}").chars().take(200).collect(),
                });
            }
        }
    }
    let (peers, answer) = answer(&sets, agents.len())?;
    for a in agents.iter_mut() {
        send(&mut a.writer, &answer)?;
    }
    Ok(peers)
}

/// Check every rank's QPs (`sets`, one a rank of `ranks`) and build the answer each agent gets:
/// what was checked, in rank order.
pub fn answer(sets: &[QpSet], ranks: usize) -> Result<(Peers, Msg), ExchangeError> {
    let peers = check_peers(sets, ranks)?;
    let answer = Msg::QpPeers {
        ranks: peers
            .iter()
            .map(|(rank, qps)| QpSet {
                rank: *rank,
                qps: qps
                    .iter()
                    .map(|(name, info)| NamedQp {
                        name: name.clone(),
                        info: info.to_wire(),
                    })
                    .collect(),
            })
            .collect(),
    };
    Ok((peers, answer))
}

/// Send one message on the control channel (a JSON line).
pub(crate) fn send_msg<W: Write>(w: &mut W, m: &Msg) -> Result<(), ExchangeError> {
    send(w, m)
}

/// An agent's side: send this host's QPs (`rank`, `qps`), wait for every rank's, check them.
pub fn publish<R: BufRead, W: Write>(
    reader: &mut R,
    writer: &mut W,
    rank: usize,
    qps: &[(&str, ConnInfo)],
) -> Result<Peers, ExchangeError> {
    let set = QpSet {
        rank,
        qps: qps
            .iter()
            .map(|(name, info)| NamedQp {
                name: (*name).to_string(),
                info: info.to_wire(),
            })
            .collect(),
    };
    send(writer, &Msg::QpInfo(set))?;
    match receive(reader)? {
        Msg::QpPeers { ranks } => {
            let n = ranks.len();
            check_peers(&ranks, n)
        }
        Msg::QpAbort { reason } => Err(ExchangeError::Aborted(reason)),
        other => Err(ExchangeError::UnexpectedAnswer(
            format!("{other:?}").chars().take(200).collect(),
        )),
    }
}

/// An agent's end of the control channel, connected and past its hello.
pub struct AgentLink {
    pub reader: BufReader<TcpStream>,
    pub writer: BufWriter<TcpStream>,
}

impl AgentLink {
    /// Connect to the runner at `addr` as agent `index` with the run's `token`.
    pub fn connect(addr: &str, index: usize, token: &str) -> Result<AgentLink, ExchangeError> {
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        let reader = BufReader::new(stream.try_clone()?);
        let mut writer = BufWriter::new(stream);
        send(
            &mut writer,
            &Msg::Hello {
                token: token.to_string(),
                index,
                pid: std::process::id(),
                host: hostname(),
                build: crate::embedded::BUILD.to_string(),
            },
        )?;
        Ok(AgentLink { reader, writer })
    }

    /// [`publish`] on this link.
    pub fn publish(
        &mut self,
        rank: usize,
        qps: &[(&str, ConnInfo)],
    ) -> Result<Peers, ExchangeError> {
        publish(&mut self.reader, &mut self.writer, rank, qps)
    }
}

#[cfg(test)]
mod tests {
    use super::super::ControlListener;
    use super::*;
    use inabench_transport::ipv4_gid;
    use std::time::Duration;

    fn qp(host: u8, qpn: u32) -> ConnInfo {
        ConnInfo {
            qpn,
            psn: 0xff_fff0 - u32::from(host),
            gid: ipv4_gid([10, 0, 0, host]),
            addr: 0x7f00_0000_0000 + (u64::from(host) << 20),
            rkey: 0x100 + qpn,
        }
    }

    /// Two agents (threads here, each with its own connection and hello) publish their ring QPs;
    /// each gets both ranks' QPs back exactly, and connects its `send` QP to the other's `recv`.
    #[test]
    fn two_agents_exchange_qp_info_over_the_control_channel() {
        let control = ControlListener::bind("127.0.0.1:0").expect("bind");
        let addr = control.local_addr().expect("addr").to_string();
        let mine = |rank: usize| {
            let h = rank as u8 + 1;
            vec![
                ("send", qp(h, 0x20 + h as u32)),
                ("recv", qp(h, 0x40 + h as u32)),
            ]
        };
        let agents: Vec<_> = (0..2)
            .map(|rank| {
                let (addr, token) = (addr.clone(), control.token().to_string());
                std::thread::spawn(move || {
                    let mut link = AgentLink::connect(&addr, rank, &token)?;
                    link.publish(rank, &mine(rank))
                })
            })
            .collect();
        let mut accepted = control
            .accept(2, Duration::from_secs(20), &|_| None, &mut |_| Ok(()))
            .expect("both agents connect");
        let at_runner = exchange(&mut accepted).expect("the exchange");
        for (rank, t) in agents.into_iter().enumerate() {
            let got = t
                .join()
                .expect("agent thread")
                .expect("the agent's exchange");
            assert_eq!(got, at_runner, "agent {rank} sees what the runner checked");
        }
        for rank in 0..2 {
            let want: BTreeMap<String, ConnInfo> = mine(rank)
                .into_iter()
                .map(|(n, i)| (n.to_string(), i))
                .collect();
            assert_eq!(at_runner[&rank], want);
        }
        // rank 0's sending QP connects to rank 1's receiving QP: QPN, PSN, GID, address, rkey
        assert_eq!(at_runner[&1]["recv"], qp(2, 0x42));
        for a in accepted {
            a.shutdown();
        }
    }

    /// A malformed QP info (a QPN beyond 24 bits) from one agent fails the exchange with its
    /// typed reason at the runner, naming the rank and the QP; no agent gets a peers' list.
    #[test]
    fn malformed_qp_info_is_refused_with_its_reason() {
        let control = ControlListener::bind("127.0.0.1:0").expect("bind");
        let addr = control.local_addr().expect("addr").to_string();
        let agents: Vec<_> = (0..2)
            .map(|rank| {
                let (addr, token) = (addr.clone(), control.token().to_string());
                std::thread::spawn(move || {
                    let mut link = AgentLink::connect(&addr, rank, &token).expect("connect");
                    let mut info = qp(rank as u8 + 1, 0x20).to_wire();
                    if rank == 1 {
                        info.qpn = 0x0100_0020;
                    }
                    let set = QpSet {
                        rank,
                        qps: vec![NamedQp {
                            name: "send".into(),
                            info,
                        }],
                    };
                    send(&mut link.writer, &Msg::QpInfo(set)).expect("send");
                    // the runner never sends a peers' list: it says exit (or the stream ends)
                    !matches!(receive(&mut link.reader), Ok(Msg::QpPeers { .. }))
                })
            })
            .collect();
        let mut accepted = control
            .accept(2, Duration::from_secs(20), &|_| None, &mut |_| Ok(()))
            .expect("both agents connect");
        let err = exchange(&mut accepted).expect_err("a QPN of 25 bits");
        assert!(
            matches!(
                &err,
                ExchangeError::Malformed { rank: 1, qp, error: ConnInfoError::QpnRange(0x0100_0020) } if qp == "send"
            ),
            "{err}"
        );
        for a in accepted {
            a.shutdown();
        }
        for t in agents {
            assert!(t.join().expect("agent"), "no peers' list sent");
        }
    }

    #[test]
    fn the_peers_list_is_checked_at_the_agent_too() {
        let good = |rank: usize| QpSet {
            rank,
            qps: vec![NamedQp {
                name: "recv".into(),
                info: qp(rank as u8 + 1, 0x30).to_wire(),
            }],
        };
        assert!(check_peers(&[good(0), good(1)], 2).is_ok());
        assert!(matches!(
            check_peers(&[good(0), good(0)], 2),
            Err(ExchangeError::DuplicateRank(0))
        ));
        assert!(matches!(
            check_peers(&[good(0)], 2),
            Err(ExchangeError::MissingRank(1))
        ));
        assert!(matches!(
            check_peers(&[good(0), good(2)], 2),
            Err(ExchangeError::RankRange { rank: 2, ranks: 2 })
        ));
        let mut twice = good(1);
        twice.qps.push(twice.qps[0].clone());
        assert!(matches!(
            check_peers(&[good(0), twice], 2),
            Err(ExchangeError::DuplicateQp { rank: 1, .. })
        ));
        for (field, want) in [
            ("psn", ConnInfoError::PsnRange(1 << 24)),
            ("gid", ConnInfoError::GidFormat("fe80::1".into())),
            ("qpn", ConnInfoError::ReservedQpn(0)),
        ] {
            let mut bad = good(1);
            let i = &mut bad.qps[0].info;
            match field {
                "psn" => i.psn = 1 << 24,
                "gid" => i.gid = "fe80::1".into(),
                _ => i.qpn = 0,
            }
            // the answer an agent reads, malformed on the way
            let line = serde_json::to_string(&Msg::QpPeers {
                ranks: vec![good(0), bad],
            })
            .expect("json");
            let mut reader = std::io::Cursor::new(format!("{line}\n").into_bytes());
            let mut sink = Vec::new();
            match publish(&mut reader, &mut sink, 0, &[("recv", qp(1, 0x30))]) {
                Err(ExchangeError::Malformed { rank: 1, error, .. }) => assert_eq!(error, want),
                other => panic!("{field}: {other:?}"),
            }
            assert!(
                String::from_utf8_lossy(&sink).contains("\"type\":\"qp_info\""),
                "the agent sent its own QPs first"
            );
        }
    }
}
