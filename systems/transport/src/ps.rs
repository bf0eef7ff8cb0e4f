//! The parameter-server all-reduce over any [`HostTransport`], written once (issue #36 item 2,
//! "RC for NetReduce, ring and parameter server"): `n` workers and `s` servers, server `j`
//! owning shard `j` of the vector (`values / s` whole int32 values, a contiguous range). A
//! worker has one queue pair per server, a server one per worker. Each round a worker WRITEs
//! (with immediate = the round) its shard of the round's values into the server's QP for it;
//! once all `n` workers' shards of the round are in, the server WRITEs (with immediate = the
//! round) their wrapping int32 sum back to each worker. Values travel big-endian, as the ring's
//! ([`crate::ring`]).
//!
//! The design, where NetReduce's description of the baseline ("one or several dedicated physical
//! servers ... workers send gradients to the PS(s), and the PS(s) compute the aggregation result
//! and send the result back", one connection per worker and PS) leaves it open:
//! - **one WRITE per shard per round**, not chunks: the RC transport already cuts a message into
//!   MTU packets and paces them by its window; chunking would only let a server start summing
//!   before a worker's whole shard is in, which the paper does not describe and the software
//!   stack's `Shape` (one message size per QP) does not need. A larger vector is a larger shard
//!   (or more servers, `s`, the one parameter that changes the traffic: `n x s` connections).
//! - **co-located or dedicated is a deployment choice, not a parameter**: a server is its own
//!   state machine ([`PsServer`]) over its own QPs, so a host may run a worker and a server (the
//!   worker's QP to it then crosses the host's own stack) or only a server, as the paper's
//!   dedicated PS machines do. The tests run dedicated server hosts; the Soft-RoCE rig runs
//!   the servers in a guest of their own (drivers/devices/examples/ps_worker.rs).
//!
//! Each QP's buffer has two slots of a shard's bytes, reused every round: slot 0 (offset 0)
//! carries the worker's shard to the server, slot 1 (offset one shard) the sum back; a WRITE
//! goes from a slot into the same slot of the peer (`post_write`). A slot is rewritten only after
//! the WRITE that read it completed (RC: acknowledged) and what landed in it was consumed: a
//! worker sends round `r + 1` to a server only once round `r`'s WRITE completed and round `r`'s
//! sum arrived; a server sends a worker round `r + 1`'s sum only once round `r`'s WRITE to it
//! completed. Receives are reused the same way, one posted at a time per QP (wr_id = round): a
//! worker posts round `r`'s just before its WRITE of round `r` (the sum cannot come earlier), a
//! server posts round `r + 1`'s on taking round `r`'s shard (before it sends round `r`'s sum, so
//! a worker's next shard never finds none), round 0's before the workers learn its QPs
//! ([`PsServer::prime`]).
//!
//! Every completion is checked: no error status; a WRITE's completion in posting order (wr_id =
//! round; a send completion's byte count is not checked: verbs leave it undefined); a receive a
//! WRITE with immediate of a shard's bytes with wr_id and immediate = the round it is due.
//! [`PsWorker::progress`] and [`PsServer::progress`] never block: a blocking caller (the rig's
//! `ps_worker`) calls them until done, a sans-IO host ([`PsHost`]) after every event.

use crate::soft::{Shape, SoftError, SoftQp};
use crate::{Completion, CompletionKind, ConnInfo, HostTransport, MASK_24};
use inabench_fabric::{Endpoint, Forwarder, Nanos, Node, NodeId, Route, Transmit};
use inabench_wire::roce::FrameRepr;
use std::fmt;
use std::ops::Range;

/// Who stopped, and on which connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Party {
    /// Worker `me`, on its QP to server `server`.
    Worker { me: usize, server: usize },
    /// Server `me`, on its QP to worker `worker`.
    Server { me: usize, worker: usize },
}

impl fmt::Display for Party {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Party::Worker { me, server } => write!(f, "worker {me} (its QP to server {server})"),
            Party::Server { me, worker } => write!(f, "server {me} (its QP to worker {worker})"),
        }
    }
}

/// Why a parameter server could not be set up: bad parameters, each refused with one sentence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PsConfigError {
    #[error("a parameter server all-reduce needs at least 1 worker (got {0})")]
    Workers(usize),
    #[error("a parameter server all-reduce needs at least 1 server (got {0})")]
    Servers(usize),
    #[error("a parameter server all-reduce needs at least 1 round (got 0)")]
    Rounds,
    #[error(
        "{values} values do not split into {servers} shards of whole values of at least one (one shard per server)"
    )]
    Values { values: usize, servers: usize },
    #[error("a shard of {0} int32 values is more bytes than one RDMA WRITE carries (2^31)")]
    ShardSize(usize),
    #[error("{role} {index} of {count} does not exist")]
    Index {
        role: &'static str,
        index: usize,
        count: usize,
    },
    #[error("worker {me}: {got} rounds of values for a run of {rounds} rounds")]
    InputRounds { me: usize, got: usize, rounds: u32 },
    #[error("worker {me}: round {round}'s vector is {got} values, the run's is {values}")]
    InputLength {
        me: usize,
        round: u32,
        got: usize,
        values: usize,
    },
}

/// Why a worker or server stopped.
#[derive(Debug, thiserror::Error)]
pub enum PsError<E: std::error::Error + 'static> {
    #[error("{who}: the transport refused a call: {source}")]
    Transport {
        who: Party,
        #[source]
        source: E,
    },
    #[error("{who}, round {round}: {what} completion {got:?}")]
    Completion {
        who: Party,
        round: u32,
        what: &'static str,
        got: Completion,
    },
    #[error("{role} {me}: given {got} queue pairs, it has one per {peer} ({want})")]
    Qps {
        role: &'static str,
        me: usize,
        peer: &'static str,
        got: usize,
        want: usize,
    },
    #[error("{who}: the QP's buffer is {got} bytes, two shard slots need {need}")]
    Buffer { who: Party, got: usize, need: usize },
}

/// The shape of a parameter-server all-reduce: `workers`, `servers`, the vector's `values`
/// (split into `servers` shards of equal length) and `rounds` (all-reduces one after the other
/// over the same QPs, slots and receives).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PsConfig {
    workers: usize,
    servers: usize,
    values: usize,
    rounds: u32,
}

impl PsConfig {
    /// Refuses fewer than one worker, server or round, and a vector that does not split into
    /// `servers` shards of whole values.
    pub fn new(
        workers: usize,
        servers: usize,
        values: usize,
        rounds: u32,
    ) -> Result<PsConfig, PsConfigError> {
        if workers < 1 {
            return Err(PsConfigError::Workers(workers));
        }
        if servers < 1 {
            return Err(PsConfigError::Servers(servers));
        }
        if rounds < 1 {
            return Err(PsConfigError::Rounds);
        }
        if values == 0 || !values.is_multiple_of(servers) {
            return Err(PsConfigError::Values { values, servers });
        }
        if values / servers > (1 << 29) {
            return Err(PsConfigError::ShardSize(values / servers));
        }
        Ok(PsConfig {
            workers,
            servers,
            values,
            rounds,
        })
    }

    pub fn workers(&self) -> usize {
        self.workers
    }

    pub fn servers(&self) -> usize {
        self.servers
    }

    pub fn values(&self) -> usize {
        self.values
    }

    pub fn rounds(&self) -> u32 {
        self.rounds
    }

    /// Values of one server's shard.
    pub fn shard_values(&self) -> usize {
        self.values / self.servers
    }

    /// Bytes of one message: a shard of int32 values.
    pub fn shard_bytes(&self) -> u32 {
        (self.shard_values() * 4) as u32
    }

    /// Bytes each QP's buffer needs: the two slots.
    pub fn region_bytes(&self) -> usize {
        2 * self.shard_bytes() as usize
    }

    /// The values server `j` owns.
    pub fn shard(&self, j: usize) -> Range<usize> {
        let k = self.shard_values();
        j * k..(j + 1) * k
    }

    fn check(&self, role: &'static str, index: usize, count: usize) -> Result<(), PsConfigError> {
        if index >= count {
            return Err(PsConfigError::Index { role, index, count });
        }
        Ok(())
    }
}

/// Write `vals` big-endian into `slot`.
fn store(slot: &mut [u8], vals: &[i32]) {
    for (w, x) in slot.chunks_exact_mut(4).zip(vals) {
        w.copy_from_slice(&x.to_be_bytes());
    }
}

/// The big-endian int32 values of `slot`.
fn load(slot: &[u8]) -> impl Iterator<Item = i32> + '_ {
    slot.chunks_exact(4)
        .map(|w| i32::from_be_bytes([w[0], w[1], w[2], w[3]]))
}

/// Check the QPs a role was given: one per peer, each with both slots.
fn check_qps<T: HostTransport>(
    cfg: &PsConfig,
    qps: &[T],
    role: &'static str,
    me: usize,
    who: impl Fn(usize) -> Party,
) -> Result<(), PsError<T::Error>> {
    let (peer, want) = if role == "worker" {
        ("server", cfg.servers)
    } else {
        ("worker", cfg.workers)
    };
    if qps.len() != want {
        return Err(PsError::Qps {
            role,
            me,
            peer,
            got: qps.len(),
            want,
        });
    }
    let need = cfg.region_bytes();
    match qps.iter().position(|q| q.buf().len() < need) {
        Some(k) => Err(PsError::Buffer {
            who: who(k),
            got: qps[k].buf().len(),
            need,
        }),
        None => Ok(()),
    }
}

/// One connection's progress, on either side.
#[derive(Debug, Clone, Copy, Default)]
struct Link {
    /// Rounds whose WRITE was posted.
    posted: u32,
    /// WRITEs completed.
    sent: u32,
    /// Rounds whose data arrived (and was taken).
    received: u32,
}

impl Link {
    /// Take a completion: a WRITE's is checked (completed in posting order, wr_id = its round)
    /// and counted here; `Ok(true)` hands a receive to the caller's own check; a failed one, or
    /// one of another kind, is refused.
    fn take<E: std::error::Error>(
        &mut self,
        c: Completion,
        who: Party,
    ) -> Result<bool, PsError<E>> {
        match (c.kind, c.error) {
            (_, Some(_)) => Err(self.refuse(c, who, "a failed")),
            (CompletionKind::Write, None) => {
                if c.wr_id != u64::from(self.sent) || self.sent >= self.posted {
                    return Err(PsError::Completion {
                        who,
                        round: self.sent,
                        what: "a WRITE's",
                        got: c,
                    });
                }
                self.sent += 1;
                Ok(false)
            }
            (CompletionKind::RecvWriteImm, None) => Ok(true),
            (CompletionKind::Other(_), None) => Err(self.refuse(c, who, "an unexpected")),
        }
    }

    /// Whether `c` is the receive due next: wr_id and immediate its round, `bytes` long.
    fn due(&self, c: &Completion, bytes: u32) -> bool {
        c.wr_id == u64::from(self.received) && c.imm == Some(self.received) && c.byte_len == bytes
    }

    /// `c` refused, at the round whose data this link waits for.
    fn refuse<E: std::error::Error>(
        &self,
        c: Completion,
        who: Party,
        what: &'static str,
    ) -> PsError<E> {
        PsError::Completion {
            who,
            round: self.received,
            what,
            got: c,
        }
    }
}

/// Completions taken from a QP per poll.
const POLL: usize = 16;

/// One worker of the parameter-server all-reduce.
#[derive(Debug, Clone)]
pub struct PsWorker {
    cfg: PsConfig,
    me: usize,
    inputs: Vec<Vec<i32>>,
    results: Vec<Vec<i32>>,
    links: Vec<Link>,
}

impl PsWorker {
    /// Worker `me` of `cfg.workers()`, with one vector of `cfg.values()` values per round.
    pub fn new(cfg: PsConfig, me: usize, inputs: Vec<Vec<i32>>) -> Result<PsWorker, PsConfigError> {
        cfg.check("worker", me, cfg.workers)?;
        if inputs.len() != cfg.rounds as usize {
            return Err(PsConfigError::InputRounds {
                me,
                got: inputs.len(),
                rounds: cfg.rounds,
            });
        }
        if let Some((r, v)) = inputs
            .iter()
            .enumerate()
            .find(|(_, v)| v.len() != cfg.values)
        {
            return Err(PsConfigError::InputLength {
                me,
                round: r as u32,
                got: v.len(),
                values: cfg.values,
            });
        }
        Ok(PsWorker {
            cfg,
            me,
            results: vec![vec![0; cfg.values]; cfg.rounds as usize],
            inputs,
            links: vec![Link::default(); cfg.servers],
        })
    }

    pub fn config(&self) -> &PsConfig {
        &self.cfg
    }

    /// WRITEs completed (one per server per round once done).
    pub fn writes_completed(&self) -> u64 {
        self.links.iter().map(|l| u64::from(l.sent)).sum()
    }

    /// Sums received (one per server per round once done).
    pub fn sums_received(&self) -> u64 {
        self.links.iter().map(|l| u64::from(l.received)).sum()
    }

    pub fn done(&self) -> bool {
        self.links
            .iter()
            .all(|l| l.received == self.cfg.rounds && l.sent == self.cfg.rounds)
    }

    /// Every round's summed vector, once done.
    pub fn results(&self) -> Option<&[Vec<i32>]> {
        self.done().then_some(&self.results[..])
    }

    /// Do what can be done now on `qps` (`qps[j]`: the QP to server `j`, connected): send a
    /// shard once its slot and the previous round's sum allow, take completions, store the
    /// sums. `Ok(true)` once done.
    pub fn progress<T: HostTransport>(&mut self, qps: &mut [T]) -> Result<bool, PsError<T::Error>> {
        let me = self.me;
        let who = |server| Party::Worker { me, server };
        check_qps(&self.cfg, qps, "worker", me, who)?;
        let sb = self.cfg.shard_bytes();
        let (rounds, cfg) = (self.cfg.rounds, self.cfg);
        for (j, qp) in qps.iter_mut().enumerate() {
            let tr = |source| PsError::Transport {
                who: who(j),
                source,
            };
            loop {
                let l = &mut self.links[j];
                if l.posted < rounds && l.posted == l.received && l.sent == l.posted {
                    let r = l.posted;
                    // the sum's receive first: it cannot arrive before this WRITE
                    qp.post_recv(u64::from(r)).map_err(tr)?;
                    store(
                        &mut qp.buf_mut()[..sb as usize],
                        &self.inputs[r as usize][cfg.shard(j)],
                    );
                    qp.post_write(u64::from(r), 0, sb, Some(r)).map_err(tr)?;
                    l.posted += 1;
                }
                let cs = qp.poll(POLL).map_err(tr)?;
                if cs.is_empty() {
                    break;
                }
                for c in cs {
                    let l = &mut self.links[j];
                    // a receive: the sum of the round due, which this worker's WRITE preceded
                    let r = l.received;
                    if l.take(c, who(j))? {
                        if !l.due(&c, sb) || r >= l.posted {
                            return Err(l.refuse(c, who(j), "the sum's receive"));
                        }
                        let slot = &qp.buf()[sb as usize..2 * sb as usize];
                        for (x, y) in self.results[r as usize][cfg.shard(j)]
                            .iter_mut()
                            .zip(load(slot))
                        {
                            *x = y;
                        }
                        self.links[j].received += 1;
                    }
                }
            }
        }
        Ok(self.done())
    }
}

/// One server of the parameter-server all-reduce: it owns shard `me`.
#[derive(Debug, Clone)]
pub struct PsServer {
    cfg: PsConfig,
    me: usize,
    /// The round being summed.
    acc: Vec<i32>,
    /// The last finished round's sum (sent from it to each worker as its slot frees).
    out: Vec<i32>,
    /// Rounds whose sum is finished.
    finished: u32,
    /// Round 0's receive posted, per worker.
    primed: Vec<bool>,
    links: Vec<Link>,
}

impl PsServer {
    /// Server `me` of `cfg.servers()`.
    pub fn new(cfg: PsConfig, me: usize) -> Result<PsServer, PsConfigError> {
        cfg.check("server", me, cfg.servers)?;
        let k = cfg.shard_values();
        Ok(PsServer {
            cfg,
            me,
            acc: vec![0; k],
            out: vec![0; k],
            finished: 0,
            primed: vec![false; cfg.workers],
            links: vec![Link::default(); cfg.workers],
        })
    }

    pub fn config(&self) -> &PsConfig {
        &self.cfg
    }

    /// Post round 0's receive on the QP to worker `i`: before the worker learns the QP, so its
    /// first WRITE finds a receive (else RC answers it with RNR NAKs until
    /// [`PsServer::progress`] posts it).
    pub fn prime<T: HostTransport>(
        &mut self,
        i: usize,
        qp: &mut T,
    ) -> Result<(), PsError<T::Error>> {
        let me = self.me;
        if i >= self.cfg.workers {
            return Err(PsError::Qps {
                role: "server",
                me,
                peer: "worker",
                got: i + 1,
                want: self.cfg.workers,
            });
        }
        if !self.primed[i] {
            qp.post_recv(0).map_err(|source| PsError::Transport {
                who: Party::Server { me, worker: i },
                source,
            })?;
            self.primed[i] = true;
        }
        Ok(())
    }

    /// Shards taken from workers (one per worker per round once done).
    pub fn shards_received(&self) -> u64 {
        self.links.iter().map(|l| u64::from(l.received)).sum()
    }

    /// Sums WRITEn and completed (one per worker per round once done).
    pub fn writes_completed(&self) -> u64 {
        self.links.iter().map(|l| u64::from(l.sent)).sum()
    }

    /// Rounds whose sum is finished.
    pub fn rounds_finished(&self) -> u32 {
        self.finished
    }

    pub fn done(&self) -> bool {
        self.links.iter().all(|l| l.sent == self.cfg.rounds)
    }

    /// Do what can be done now on `qps` (`qps[i]`: the QP to worker `i`, connected): take the
    /// workers' shards, finish a round once all are in, send its sum to each worker whose slot
    /// is free. `Ok(true)` once every sum of every round was acknowledged.
    pub fn progress<T: HostTransport>(&mut self, qps: &mut [T]) -> Result<bool, PsError<T::Error>> {
        let me = self.me;
        let who = |worker| Party::Server { me, worker };
        check_qps(&self.cfg, qps, "server", me, who)?;
        for (i, qp) in qps.iter_mut().enumerate() {
            self.prime(i, qp)?;
        }
        let sb = self.cfg.shard_bytes() as usize;
        let rounds = self.cfg.rounds;
        loop {
            let mut moved = false;
            // the last finished round's sum to each worker whose previous sum was acknowledged
            if let Some(r) = self.finished.checked_sub(1) {
                for (i, qp) in qps.iter_mut().enumerate() {
                    let l = &mut self.links[i];
                    if l.posted == r && l.sent == l.posted {
                        store(&mut qp.buf_mut()[sb..2 * sb], &self.out);
                        qp.post_write(u64::from(r), sb as u64, sb as u32, Some(r))
                            .map_err(|source| PsError::Transport {
                                who: who(i),
                                source,
                            })?;
                        l.posted += 1;
                        moved = true;
                    }
                }
            }
            for (i, qp) in qps.iter_mut().enumerate() {
                let tr = |source| PsError::Transport {
                    who: who(i),
                    source,
                };
                let cs = qp.poll(POLL).map_err(tr)?;
                moved |= !cs.is_empty();
                for c in cs {
                    let l = &mut self.links[i];
                    // a receive: the shard of the round being summed (a worker's next shard
                    // comes only after this round's sum)
                    let r = l.received;
                    if l.take(c, who(i))? {
                        if !l.due(&c, sb as u32) || r != self.finished || r >= rounds {
                            return Err(l.refuse(c, who(i), "a shard's receive"));
                        }
                        for (x, y) in self.acc.iter_mut().zip(load(&qp.buf()[..sb])) {
                            *x = x.wrapping_add(y);
                        }
                        l.received += 1;
                        if r + 1 < rounds {
                            // the next round's, before this round's sum goes out
                            qp.post_recv(u64::from(r + 1)).map_err(tr)?;
                        }
                    }
                }
            }
            if self.finished < rounds && self.links.iter().all(|l| l.received > self.finished) {
                std::mem::swap(&mut self.acc, &mut self.out);
                self.acc.iter_mut().for_each(|x| *x = 0);
                self.finished += 1;
                moved = true;
            }
            if !moved {
                break;
            }
        }
        Ok(self.done())
    }
}

/// A host of the software parameter server: a worker or a server, its QPs (one per peer), and
/// the switch it hangs off.
pub struct PsHost {
    id: NodeId,
    switch: NodeId,
    pub qps: Vec<SoftQp>,
    pub role: PsRole,
    /// Where [`Endpoint::poll_transmit`] looks first (the QPs take turns).
    next: usize,
    error: Option<String>,
}

/// What a [`PsHost`] runs.
#[derive(Debug, Clone)]
pub enum PsRole {
    Worker(PsWorker),
    Server(PsServer),
}

impl PsHost {
    /// The first thing that went wrong (a transport call refused, a completion not the one
    /// expected), if anything did.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    pub fn worker(&self) -> Option<&PsWorker> {
        match &self.role {
            PsRole::Worker(w) => Some(w),
            PsRole::Server(_) => None,
        }
    }

    pub fn server(&self) -> Option<&PsServer> {
        match &self.role {
            PsRole::Server(s) => Some(s),
            PsRole::Worker(_) => None,
        }
    }

    /// The stack's retransmissions on all of this host's QPs.
    pub fn retransmissions(&self) -> u64 {
        self.qps.iter().map(SoftQp::retransmissions).sum()
    }

    fn progress(&mut self) {
        if self.error.is_some() {
            return;
        }
        let r = match &mut self.role {
            PsRole::Worker(w) => w.progress(&mut self.qps).map(|_| ()),
            PsRole::Server(s) => s.progress(&mut self.qps).map(|_| ()),
        };
        if let Err(e) = r {
            self.error = Some(e.to_string());
        }
    }
}

impl Endpoint for PsHost {
    fn id(&self) -> NodeId {
        self.id
    }

    fn handle_packet(&mut self, now: Nanos, _from: NodeId, frame: &[u8]) {
        match FrameRepr::parse(frame) {
            Ok((fr, payload)) => {
                // a frame for no QP of this host goes to the first, which counts it foreign
                let qpn = fr.bth.dest_qp;
                let k = self.qps.iter().position(|q| q.info().qpn == qpn);
                if let Some(qp) = self.qps.get_mut(k.unwrap_or(0)) {
                    qp.handle_frame(now, &fr, payload);
                }
            }
            Err(_) => {
                if let Some(q) = self.qps.first_mut() {
                    q.malformed += 1;
                }
            }
        }
        self.progress();
    }

    fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        self.progress();
        let k = self.qps.len();
        for t in 0..k {
            let q = (self.next + t) % k;
            if let Some(bytes) = self.qps[q].poll_transmit(now) {
                self.next = (q + 1) % k;
                return Some(Transmit {
                    to: self.switch,
                    bytes,
                });
            }
        }
        None
    }

    fn poll_timeout(&self) -> Option<Nanos> {
        self.qps.iter().filter_map(SoftQp::poll_timeout).min()
    }

    fn handle_timeout(&mut self, now: Nanos) {
        for q in &mut self.qps {
            q.handle_timeout(now);
        }
    }

    fn is_done(&self) -> bool {
        match &self.role {
            PsRole::Worker(w) => w.done(),
            PsRole::Server(s) => s.done(),
        }
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let sum = |f: fn(&SoftQp) -> u64| self.qps.iter().map(f).sum::<u64>();
        vec![
            ("retransmissions", self.retransmissions()),
            ("malformed", sum(|q| q.malformed)),
            ("access_errors", sum(|q| q.access_errors)),
            ("rnr_naks_sent", sum(SoftQp::rnr_naks_sent)),
        ]
    }
}

/// A node of the software parameter server: workers are `Worker`s, servers `Other`s.
pub type PsNode = Node<PsHost, Forwarder, PsHost>;

/// Why [`ps_nodes`] could not build the parameter server.
#[derive(Debug, thiserror::Error)]
pub enum PsSetupError {
    #[error(transparent)]
    Config(#[from] PsConfigError),
    #[error("a shard of {shard} bytes is not whole packets of {mtu} bytes")]
    Mtu { shard: u32, mtu: u32 },
    #[error(transparent)]
    Qp(#[from] SoftError),
    #[error("{0}")]
    Prime(String),
}

/// The nodes of a software parameter server: workers `0..n` (inputs[i]: worker i's vector per
/// round), servers `n..n+s` (node `k` at 10.0.10.(k+1)), one forwarding switch (node `n + s`,
/// routing by IPv4 destination's last octet); every QP connected to its peer's with the info each
/// side's [`HostTransport::info`] gave (what a control channel carries between hosts), each
/// server's round-0 receives posted before. A QP's messages are a shard's bytes (`mtu`-byte
/// packets), one in flight; run until the first `n + s` nodes are done.
pub fn ps_nodes(
    cfg: PsConfig,
    inputs: Vec<Vec<Vec<i32>>>,
    mtu: u32,
    rto_ns: u64,
) -> Result<Vec<PsNode>, PsSetupError> {
    let (n, s) = (cfg.workers, cfg.servers);
    if inputs.len() != n {
        return Err(PsConfigError::Index {
            role: "worker",
            index: inputs.len(),
            count: n,
        }
        .into());
    }
    let sb = cfg.shard_bytes();
    if mtu == 0 || !sb.is_multiple_of(mtu) {
        return Err(PsSetupError::Mtu { shard: sb, mtu });
    }
    let shape = Shape {
        mtu,
        msg_len: sb / mtu,
        window: 1,
        // the buffer holds both slots; a QP sends one message a round
        messages: cfg.rounds.max(2),
        rto_ns,
    };
    let switch = (n + s) as NodeId;
    // QP k of host h: QPN 0x100 + k, its first PSN near the 24-bit wrap
    let qp = |ip: [u8; 4], h: u32, k: u32| {
        let psn = (MASK_24 - 10 + h * 0x0001_0003 + k * 0x0000_0101) & MASK_24;
        SoftQp::new(
            ip,
            0x100 + k,
            psn,
            shape,
            0x1000_0000 * u64::from(h + 1) + 0x10_0000 * u64::from(k),
            0x4000 + (h << 8) + k,
        )
    };
    let mut workers = Vec::with_capacity(n);
    for (i, v) in inputs.into_iter().enumerate() {
        let ip = [10, 0, 10, i as u8 + 1];
        let qps = (0..s as u32)
            .map(|j| qp(ip, i as u32, j))
            .collect::<Result<Vec<_>, _>>()?;
        workers.push((qps, PsWorker::new(cfg, i, v)?));
    }
    let mut servers = Vec::with_capacity(s);
    for j in 0..s {
        let ip = [10, 0, 10, (n + j) as u8 + 1];
        let mut qps = (0..n as u32)
            .map(|i| qp(ip, (n + j) as u32, i))
            .collect::<Result<Vec<_>, _>>()?;
        let mut server = PsServer::new(cfg, j)?;
        for (i, q) in qps.iter_mut().enumerate() {
            server
                .prime(i, q)
                .map_err(|e| PsSetupError::Prime(e.to_string()))?;
        }
        servers.push((qps, server));
    }
    // the exchange: worker i's QP j and server j's QP i learn each other's info
    let w_info: Vec<Vec<ConnInfo>> = workers
        .iter()
        .map(|(q, _)| q.iter().map(HostTransport::info).collect())
        .collect();
    let s_info: Vec<Vec<ConnInfo>> = servers
        .iter()
        .map(|(q, _)| q.iter().map(HostTransport::info).collect())
        .collect();
    for (i, (qps, _)) in workers.iter_mut().enumerate() {
        for (j, q) in qps.iter_mut().enumerate() {
            q.connect(&s_info[j][i])?;
        }
    }
    for (j, (qps, _)) in servers.iter_mut().enumerate() {
        for (i, q) in qps.iter_mut().enumerate() {
            q.connect(&w_info[i][j])?;
        }
    }
    let host = |id: usize, qps, role| PsHost {
        id: id as NodeId,
        switch,
        qps,
        role,
        next: 0,
        error: None,
    };
    let mut nodes: Vec<PsNode> = Vec::with_capacity(n + s + 1);
    for (i, (qps, w)) in workers.into_iter().enumerate() {
        nodes.push(Node::Worker(host(i, qps, PsRole::Worker(w))));
    }
    for (j, (qps, sv)) in servers.into_iter().enumerate() {
        nodes.push(Node::Other(host(n + j, qps, PsRole::Server(sv))));
    }
    nodes.push(Node::Switch(Forwarder::new(
        switch,
        (n + s) as u32 + 1,
        Route::Ipv4Dst,
    )));
    Ok(nodes)
}
