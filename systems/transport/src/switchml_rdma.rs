//! SwitchML-RDMA's worker over any [`HostTransport`], written once: what SwitchML-RDMA's
//! released client (microsoft/SwitchML, `RDMAExampleClient`) does over an unmodified RDMA NIC's
//! UC queue pair connected to the switch (DestQP bit 23 | worker id:
//! `inabench_wire::ina::switchml_rdma`), against the suite's switch
//! (`inabench_ina::switchml_rdma`).
//!
//! The QP's buffer holds the gradient (big-endian int32, from offset 0, the last packet padded
//! with zeros) and then the results (the same places, from [`SmlrWorker::results_offset`]).
//! The gradient is sent as messages of `msg_packets` packets of `packet_bytes` each: message m
//! is one RDMA WRITE with immediate 0 (exponents 0: int32 values) from its place in the
//! gradient, its RETH the worker's own result address for the message (VA: the buffer's base +
//! the results' offset + the message's place) and the message's first pool index (R_Key: slot
//! `(m mod groups) x msg_packets`, shadow-copy set `(m / groups) mod 2`, groups = pool /
//! msg_packets), at most one message per slot group in flight. The switch answers every
//! packet's slot with a UC WRITE Only with Immediate of the sum into the result place (the
//! immediate names the pool index), one receive each; every receive taken is posted again. A
//! message whose results have not all come within the timeout is written again whole (the
//! application's own retry: UC tells a sender nothing); a result already taken is counted as a
//! duplicate, one for another message of its slot group (a late answer to a resend) as foreign,
//! neither summed. A message complete, each of its values is checked against the sums given
//! ([`SmlrWorker::new`]'s `sums`, e.g. `inabench_ina::common::reference_sum`) and its slot
//! group takes its next message.
//!
//! Sans-IO: [`SmlrWorker::progress`] (one round: resends due, new WRITEs, up to 16
//! completions) never blocks and is told the time (nanoseconds on any clock that does not go
//! back); [`SmlrWorker::next_deadline`] says when a resend falls due. The verbs rig's
//! `switchml_rdma_worker` (drivers/devices/examples, on `VerbsQp`) calls it until done, waiting
//! 100 us after a round that took nothing; a sans-IO host on a software `SoftQp`
//! (systems/transport/tests/uc_rnr.rs) after every event, until a round takes nothing.

use crate::{Completion, CompletionKind, HostTransport, RemoteAddr};
use inabench_wire::ina::switchml_rdma::{PoolIndex, ResultImm};
use std::collections::VecDeque;

/// Send work requests carry this bit in their wr_id (receives do not).
pub const SEND_BIT: u64 = 1 << 63;

/// Completions taken per poll.
const POLL_BATCH: usize = 16;

/// What one worker sends and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SmlrPlan {
    /// Workers in the job (every result is the sum of all of theirs).
    pub workers: usize,
    /// This worker (0..workers; 7 bits, the DestQP's worker id).
    pub rank: usize,
    /// int32 values in the gradient.
    pub elements: usize,
    /// Bytes of one packet's payload (one path MTU; a multiple of 4).
    pub packet_bytes: usize,
    /// Packets per message (1..=64).
    pub msg_packets: usize,
    /// The switch's pool of slots: whole messages, at most 0x3fff.
    pub pool: usize,
    /// A message whose results have not all come this long after its WRITE is written again.
    pub timeout_ns: u64,
    /// The stream's messages are this many repetitions of equally many messages
    /// ([`SmlrEvent::Repetition`] says when each is exact).
    pub reps: usize,
}

/// Why the worker refused its plan or stopped.
#[derive(Debug, thiserror::Error)]
pub enum SmlrError<E: std::error::Error> {
    #[error("worker {rank} of {workers}: SwitchML-RDMA needs at least 2 workers, ranks below 128")]
    Rank { rank: usize, workers: usize },
    #[error(
        "the pool must hold whole messages: {pool} slots, {k} packets per message (at most 64)"
    )]
    Pool { pool: usize, k: usize },
    #[error(
        "{elements} values of {packet_bytes}-byte packets: a gradient needs at least one value and packets of whole int32 values"
    )]
    Shape {
        elements: usize,
        packet_bytes: usize,
    },
    #[error("{what} holds {got} values, the plan {elements}")]
    Values {
        what: &'static str,
        got: usize,
        elements: usize,
    },
    #[error("{reps} repetitions: the stream's {messages} messages are not whole repetitions")]
    Reps { reps: usize, messages: usize },
    #[error("the QP's buffer is {have} bytes, the gradient and its results need {need}")]
    Buffer { have: usize, need: usize },
    #[error("{0}")]
    Transport(#[source] E),
    #[error("message {msg}: {source}")]
    Post {
        msg: usize,
        #[source]
        source: E,
    },
    #[error("message {msg} ready while message {holder} holds slot group {group}")]
    Overlap {
        msg: usize,
        holder: usize,
        group: usize,
    },
    #[error("send completion {0:?}")]
    SendCompletion(Completion),
    #[error("receive completion {got:?}: expected a {bytes}-byte RDMA WRITE with immediate")]
    ReceiveCompletion { got: Completion, bytes: usize },
    #[error("a result without its immediate")]
    NoImmediate,
    #[error("result immediate {imm:#x}: {source}")]
    Immediate {
        imm: u32,
        #[source]
        source: inabench_wire::Error,
    },
    #[error("message {msg} value {index}: {got}, the sum is {sum} (my value {mine})")]
    Wrong {
        msg: usize,
        index: usize,
        got: i32,
        sum: i32,
        mine: i32,
    },
    #[error("{0} values differ from the sums at the end")]
    WrongAtEnd(usize),
}

/// What [`SmlrWorker::progress`] saw happen, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmlrEvent {
    /// Every message of repetition `rep` (messages `first..=last`) is exact; comes before the
    /// [`SmlrEvent::Exact`] of the message that completed it.
    Repetition {
        rep: usize,
        first: usize,
        last: usize,
    },
    /// Message `msg` is complete and every value exact; `done` messages are.
    Exact { msg: usize, done: usize },
}

/// What one [`SmlrWorker::progress`] call did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SmlrProgress {
    /// Completions taken (0: nothing came; a blocking caller may wait a little).
    pub completions: usize,
    pub events: Vec<SmlrEvent>,
}

/// The worker's counts so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SmlrStats {
    /// Messages complete and exact.
    pub done: usize,
    /// Results taken (receive completions of WRITEs with immediate).
    pub results: u64,
    /// Results for a packet already taken (or for a slot group with nothing outstanding).
    pub duplicates: u64,
    /// Results for another message of the slot group (the other set, or past its packets).
    pub foreign: u64,
    /// Messages written again after their timeout.
    pub resent: u64,
    /// WRITEs posted and completed.
    pub sends_posted: u64,
    pub sends_done: u64,
}

/// The message waiting for its results on a slot group.
#[derive(Debug, Clone, Copy)]
struct Outstanding {
    msg: usize,
    /// Packets whose result was taken (bit j: the message's packet j).
    got: u64,
    deadline: u64,
}

/// One SwitchML-RDMA worker's stream of messages on its UC QP to the switch.
#[derive(Debug, Clone)]
pub struct SmlrWorker {
    plan: SmlrPlan,
    packets: usize,
    messages: usize,
    groups: usize,
    gradient: Vec<i32>,
    sums: Vec<i32>,
    ready: VecDeque<usize>,
    out: Vec<Option<Outstanding>>,
    rep_left: Vec<usize>,
    /// wr_id of the next receive posted
    next_recv: u64,
    stats: SmlrStats,
}

impl SmlrWorker {
    /// Worker `plan.rank` sending `gradient`, its results to be `sums` (both `plan.elements`
    /// values).
    pub fn new(
        plan: SmlrPlan,
        gradient: Vec<i32>,
        sums: Vec<i32>,
    ) -> Result<SmlrWorker, SmlrError<std::convert::Infallible>> {
        if plan.workers < 2 || plan.rank >= plan.workers || plan.rank > 0x7f {
            return Err(SmlrError::Rank {
                rank: plan.rank,
                workers: plan.workers,
            });
        }
        if plan.elements == 0 || plan.packet_bytes < 4 || !plan.packet_bytes.is_multiple_of(4) {
            return Err(SmlrError::Shape {
                elements: plan.elements,
                packet_bytes: plan.packet_bytes,
            });
        }
        let k = plan.msg_packets;
        if k == 0 || k > 64 || plan.pool < k || !plan.pool.is_multiple_of(k) || plan.pool > 0x3fff {
            return Err(SmlrError::Pool { pool: plan.pool, k });
        }
        for (what, v) in [("the gradient", &gradient), ("the sums", &sums)] {
            if v.len() != plan.elements {
                return Err(SmlrError::Values {
                    what,
                    got: v.len(),
                    elements: plan.elements,
                });
            }
        }
        let packets = plan.elements.div_ceil(plan.packet_bytes / 4);
        let messages = packets.div_ceil(k);
        if plan.reps == 0 || !messages.is_multiple_of(plan.reps) {
            return Err(SmlrError::Reps {
                reps: plan.reps,
                messages,
            });
        }
        let groups = plan.pool / k;
        Ok(SmlrWorker {
            plan,
            packets,
            messages,
            groups,
            gradient,
            sums,
            ready: (0..groups.min(messages)).collect(),
            out: vec![None; groups],
            rep_left: vec![messages / plan.reps; plan.reps],
            next_recv: 0,
            stats: SmlrStats::default(),
        })
    }

    pub fn plan(&self) -> &SmlrPlan {
        &self.plan
    }

    /// Messages in the stream.
    pub fn messages(&self) -> usize {
        self.messages
    }

    /// Slot groups of the pool (messages in flight at most).
    pub fn groups(&self) -> usize {
        self.groups
    }

    /// Where the results begin in the QP's buffer (the gradient's bytes, whole messages).
    pub fn results_offset(&self) -> usize {
        self.messages * self.plan.msg_packets * self.plan.packet_bytes
    }

    /// Bytes the QP's buffer needs: the gradient and the results.
    pub fn region_bytes(&self) -> usize {
        2 * self.results_offset()
    }

    /// Receives to post before the first WRITE: one per slot and as many for duplicates.
    pub fn receives(&self) -> usize {
        2 * self.plan.pool
    }

    pub fn stats(&self) -> SmlrStats {
        self.stats
    }

    pub fn done(&self) -> bool {
        self.stats.done == self.messages
    }

    /// When the earliest message in flight falls due for a resend.
    pub fn next_deadline(&self) -> Option<u64> {
        self.out.iter().flatten().map(|o| o.deadline).min()
    }

    /// Packets of message `m` (the last may be short).
    fn len_of(&self, m: usize) -> usize {
        self.plan
            .msg_packets
            .min(self.packets - m * self.plan.msg_packets)
    }

    /// Message `m`'s first pool index (as the suite's `switchml_rdma::Layout::pool_of`).
    pub fn pool_of(&self, m: usize) -> PoolIndex {
        PoolIndex {
            slot: ((m % self.groups) * self.plan.msg_packets) as u16,
            set: (m / self.groups) % 2 == 1,
        }
    }

    /// Write the gradient into the QP's buffer (big-endian int32 from offset 0; the padding and
    /// the result area are left as they are).
    pub fn write_gradient<T: HostTransport>(&self, t: &mut T) -> Result<(), SmlrError<T::Error>> {
        let need = self.region_bytes();
        let buf = t.buf_mut();
        if buf.len() < need {
            return Err(SmlrError::Buffer {
                have: buf.len(),
                need,
            });
        }
        for (w, x) in buf.chunks_exact_mut(4).zip(&self.gradient) {
            w.copy_from_slice(&x.to_be_bytes());
        }
        Ok(())
    }

    /// Post [`SmlrWorker::receives`] receives (before the switch can answer).
    pub fn post_receives<T: HostTransport>(
        &mut self,
        t: &mut T,
    ) -> Result<(), SmlrError<T::Error>> {
        for _ in 0..self.receives() {
            t.post_recv(self.next_recv).map_err(SmlrError::Transport)?;
            self.next_recv += 1;
        }
        Ok(())
    }

    /// One round at `now` (the rig's loop, once): write again each message whose results are
    /// overdue, write each slot group's next message, take up to 16 completions (posting a
    /// receive for each result taken). Stops at the first wrong value or unexpected completion.
    /// A caller calls it again at once while it takes completions (a message that completed
    /// readies its group's next one), else when a completion can have come or at
    /// [`SmlrWorker::next_deadline`].
    pub fn progress<T: HostTransport>(
        &mut self,
        t: &mut T,
        now: u64,
    ) -> Result<SmlrProgress, SmlrError<T::Error>> {
        let need = self.region_bytes();
        if t.buf().len() < need {
            return Err(SmlrError::Buffer {
                have: t.buf().len(),
                need,
            });
        }
        let mut p = SmlrProgress::default();
        if self.done() {
            return Ok(p);
        }
        for o in self.out.iter().flatten() {
            if o.deadline <= now && !self.ready.contains(&o.msg) {
                self.ready.push_back(o.msg);
            }
        }
        while let Some(m) = self.ready.pop_front() {
            self.post(t, m, now)?;
        }
        let cs = t.poll(POLL_BATCH).map_err(SmlrError::Transport)?;
        p.completions = cs.len();
        for c in cs {
            self.take(t, c, &mut p.events)?;
        }
        Ok(p)
    }

    /// Write message `m` whole (again, if it is the one its slot group holds).
    fn post<T: HostTransport>(
        &mut self,
        t: &mut T,
        m: usize,
        now: u64,
    ) -> Result<(), SmlrError<T::Error>> {
        let g = m % self.groups;
        match self.out[g] {
            Some(o) if o.msg == m => self.stats.resent += 1,
            Some(o) => {
                return Err(SmlrError::Overlap {
                    msg: m,
                    holder: o.msg,
                    group: g,
                });
            }
            None => {}
        }
        let got = self.out[g].map_or(0, |o| o.got);
        self.out[g] = Some(Outstanding {
            msg: m,
            got,
            deadline: now.saturating_add(self.plan.timeout_ns),
        });
        let (k, bytes) = (self.plan.msg_packets, self.plan.packet_bytes);
        // the RETH: the worker's own result address for the message (VA), its first pool
        // index (R_Key)
        let offset = (m * k * bytes) as u64;
        let to = RemoteAddr {
            addr: t.info().addr + self.results_offset() as u64 + offset,
            rkey: u32::from(self.pool_of(m).index()),
        };
        t.post_write_to(
            SEND_BIT | m as u64,
            offset,
            (self.len_of(m) * bytes) as u32,
            to,
            Some(0),
        )
        .map_err(|source| SmlrError::Post { msg: m, source })?;
        self.stats.sends_posted += 1;
        Ok(())
    }

    /// One completion: a WRITE done, or a result (checked, counted, its message finished when
    /// it is the last).
    fn take<T: HostTransport>(
        &mut self,
        t: &mut T,
        c: Completion,
        events: &mut Vec<SmlrEvent>,
    ) -> Result<(), SmlrError<T::Error>> {
        let (k, bytes) = (self.plan.msg_packets, self.plan.packet_bytes);
        if c.wr_id & SEND_BIT != 0 {
            if c.error.is_some() || c.kind != CompletionKind::Write {
                return Err(SmlrError::SendCompletion(c));
            }
            self.stats.sends_done += 1;
            return Ok(());
        }
        if c.error.is_some() || c.kind != CompletionKind::RecvWriteImm || c.byte_len != bytes as u32
        {
            return Err(SmlrError::ReceiveCompletion { got: c, bytes });
        }
        t.post_recv(self.next_recv).map_err(SmlrError::Transport)?;
        self.next_recv += 1;
        self.stats.results += 1;
        let imm = c.imm.ok_or(SmlrError::NoImmediate)?;
        let r = ResultImm::from_imm(imm).map_err(|source| SmlrError::Immediate { imm, source })?;
        let s = usize::from(r.pool.slot);
        let (g, j) = (s / k, s % k);
        let Some(Some(o)) = self.out.get(g).copied() else {
            // a result for a group with nothing outstanding: a duplicate of a finished one
            self.stats.duplicates += 1;
            return Ok(());
        };
        if self.pool_of(o.msg).set != r.pool.set || j >= self.len_of(o.msg) {
            // a late result of the group's previous message (its resend answered twice): it
            // landed in that message's own place, not this message's
            self.stats.foreign += 1;
            return Ok(());
        }
        if o.got & (1 << j) != 0 {
            self.stats.duplicates += 1;
            return Ok(());
        }
        let got = o.got | (1 << j);
        if got.count_ones() as usize != self.len_of(o.msg) {
            self.out[g] = Some(Outstanding { got, ..o });
            return Ok(());
        }
        // message complete: every value is the sum of every worker's
        let m = o.msg;
        let per_packet = bytes / 4;
        let first = m * k * per_packet;
        let last = ((m * k + self.len_of(m)) * per_packet).min(self.plan.elements);
        let at = self.results_offset();
        let place = &t.buf()[at + first * 4..at + last * 4];
        for (i, w) in place.chunks_exact(4).enumerate() {
            let x = i32::from_be_bytes([w[0], w[1], w[2], w[3]]);
            if x != self.sums[first + i] {
                return Err(SmlrError::Wrong {
                    msg: m,
                    index: first + i,
                    got: x,
                    sum: self.sums[first + i],
                    mine: self.gradient[first + i],
                });
            }
        }
        self.out[g] = None;
        self.stats.done += 1;
        let per_rep = self.messages / self.plan.reps;
        let rep = m / per_rep;
        self.rep_left[rep] -= 1;
        if self.rep_left[rep] == 0 {
            events.push(SmlrEvent::Repetition {
                rep,
                first: rep * per_rep,
                last: (rep + 1) * per_rep - 1,
            });
        }
        if m + self.groups < self.messages {
            self.ready.push_back(m + self.groups);
        }
        events.push(SmlrEvent::Exact {
            msg: m,
            done: self.stats.done,
        });
        Ok(())
    }

    /// Values of the whole result area that differ from the sums (0 once done, unless a late
    /// duplicate overwrote a place with something else).
    pub fn wrong_values(&self, buf: &[u8]) -> usize {
        let at = self.results_offset();
        let area = buf.get(at..at + 4 * self.plan.elements).unwrap_or(&[]);
        let differ = area
            .chunks_exact(4)
            .zip(&self.sums)
            .filter(|(w, x)| i32::from_be_bytes([w[0], w[1], w[2], w[3]]) != **x)
            .count();
        differ + (self.plan.elements - area.len() / 4)
    }

    /// The whole result, once more, against the sums.
    pub fn check_result<T: HostTransport>(&self, t: &T) -> Result<(), SmlrError<T::Error>> {
        match self.wrong_values(t.buf()) {
            0 => Ok(()),
            wrong => Err(SmlrError::WrongAtEnd(wrong)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ConnInfo, ipv4_gid};

    /// A loopback "switch" in the transport itself: every WRITE posted is answered at once with
    /// one result per packet (the sums given), unless told to lose it.
    #[derive(Debug, thiserror::Error)]
    #[error("never")]
    struct Never;

    struct Echo {
        buf: Vec<u8>,
        sums: Vec<i32>,
        packet_bytes: usize,
        recvs: VecDeque<u64>,
        cq: VecDeque<Completion>,
        /// WRITEs whose results are lost (by order of posting)
        lose: Vec<usize>,
        writes: usize,
        rkeys: Vec<u32>,
    }

    impl HostTransport for Echo {
        type Error = Never;
        fn info(&self) -> ConnInfo {
            ConnInfo {
                qpn: 0x11,
                psn: 0,
                gid: ipv4_gid([10, 0, 0, 1]),
                addr: 0x1000,
                rkey: 7,
            }
        }
        fn connect(&mut self, _: &ConnInfo) -> Result<(), Never> {
            Ok(())
        }
        fn buf(&self) -> &[u8] {
            &self.buf
        }
        fn buf_mut(&mut self) -> &mut [u8] {
            &mut self.buf
        }
        fn post_write(&mut self, _: u64, _: u64, _: u32, _: Option<u32>) -> Result<(), Never> {
            unreachable!("the worker names every RETH")
        }
        fn post_write_to(
            &mut self,
            wr_id: u64,
            _offset: u64,
            len: u32,
            to: RemoteAddr,
            _imm: Option<u32>,
        ) -> Result<(), Never> {
            let lost = self.lose.contains(&self.writes);
            self.writes += 1;
            self.rkeys.push(to.rkey);
            self.cq.push_back(Completion {
                wr_id,
                kind: CompletionKind::Write,
                error: None,
                byte_len: len,
                imm: None,
            });
            if lost {
                return Ok(());
            }
            let first = PoolIndex::from_index(to.rkey).expect("pool index");
            let per = self.packet_bytes / 4;
            for j in 0..len as usize / self.packet_bytes {
                let at = (to.addr - 0x1000) as usize + j * self.packet_bytes;
                let v0 = (at - self.buf.len() / 2) / 4;
                for i in 0..per {
                    let x = self.sums.get(v0 + i).copied().unwrap_or(0);
                    self.buf[at + 4 * i..at + 4 * i + 4].copy_from_slice(&x.to_be_bytes());
                }
                let pool = first.advance(j as u16).expect("slot");
                let imm = ResultImm {
                    pool,
                    exponents: [0, 0],
                }
                .to_imm()
                .expect("imm");
                let wr_id = self.recvs.pop_front().expect("a receive posted");
                self.cq.push_back(Completion {
                    wr_id,
                    kind: CompletionKind::RecvWriteImm,
                    error: None,
                    byte_len: self.packet_bytes as u32,
                    imm: Some(imm),
                });
            }
            Ok(())
        }
        fn post_recv(&mut self, wr_id: u64) -> Result<(), Never> {
            self.recvs.push_back(wr_id);
            Ok(())
        }
        fn poll(&mut self, max: usize) -> Result<Vec<Completion>, Never> {
            let n = max.min(self.cq.len());
            Ok(self.cq.drain(..n).collect())
        }
    }

    /// Rounds at `now` until one takes nothing; every event.
    fn rounds(w: &mut SmlrWorker, t: &mut Echo, now: u64) -> Vec<SmlrEvent> {
        let mut events = Vec::new();
        loop {
            let p = w.progress(t, now).expect("progress");
            events.extend(p.events);
            if p.completions == 0 {
                return events;
            }
        }
    }

    fn plan() -> SmlrPlan {
        SmlrPlan {
            workers: 3,
            rank: 1,
            elements: 10 * 8 + 3,
            packet_bytes: 32,
            msg_packets: 2,
            pool: 4,
            timeout_ns: 1000,
            reps: 1,
        }
    }

    fn echo(w: &SmlrWorker, sums: &[i32], lose: Vec<usize>) -> Echo {
        Echo {
            buf: vec![0; w.region_bytes()],
            sums: sums.to_vec(),
            packet_bytes: w.plan().packet_bytes,
            recvs: VecDeque::new(),
            cq: VecDeque::new(),
            lose,
            writes: 0,
            rkeys: Vec::new(),
        }
    }

    #[test]
    fn a_stream_sums_exactly_and_a_lost_answer_is_resent_after_its_timeout() {
        let p = plan();
        let grad: Vec<i32> = (0..p.elements as i32).collect();
        let sums: Vec<i32> = grad.iter().map(|x| 3 * x + 1).collect();
        let mut w = SmlrWorker::new(p, grad, sums.clone()).expect("plan");
        // 83 values: 11 packets of 8, 6 messages of 2 (the last one packet), 2 slot groups
        assert_eq!((w.messages(), w.groups()), (6, 2));
        // the third WRITE (message 2, set 1 of group 0) gets no answer
        let mut t = echo(&w, &sums, vec![2]);
        w.write_gradient(&mut t).expect("gradient");
        w.post_receives(&mut t).expect("receives");
        let p0 = rounds(&mut w, &mut t, 0);
        assert!(!w.done());
        assert!(p0.contains(&SmlrEvent::Exact { msg: 1, done: 2 }));
        assert_eq!(w.next_deadline(), Some(1000), "message 2 waits");
        // before its deadline nothing is resent
        rounds(&mut w, &mut t, 999);
        assert_eq!(w.stats().resent, 0);
        let p1 = rounds(&mut w, &mut t, 1000);
        let s = w.stats();
        assert!(w.done(), "{s:?}");
        assert_eq!(s.resent, 1);
        assert_eq!(s.results, 11);
        assert_eq!(s.sends_posted, 7);
        assert_eq!(p1.last(), Some(&SmlrEvent::Exact { msg: 4, done: 6 }));
        assert!(p1.contains(&SmlrEvent::Repetition {
            rep: 0,
            first: 0,
            last: 5
        }));
        // R_Keys: the pool index, slot (m mod 2) x 2 above the set bit (m / 2) mod 2; message 5
        // goes while message 2 waits, then 2 again, then 4
        let index = |slot: u32, set: u32| slot << 1 | set;
        assert_eq!(
            t.rkeys,
            vec![
                index(0, 0),
                index(2, 0),
                index(0, 1),
                index(2, 1),
                index(2, 0),
                index(0, 1),
                index(0, 0)
            ]
        );
        w.check_result(&t).expect("exact");
    }

    #[test]
    fn a_wrong_sum_stops_the_worker_with_its_value() {
        let p = plan();
        let grad: Vec<i32> = vec![5; p.elements];
        let sums: Vec<i32> = vec![15; p.elements];
        let mut w = SmlrWorker::new(p, grad, sums.clone()).expect("plan");
        let mut bad = sums;
        bad[17] = 14;
        let mut t = echo(&w, &bad, vec![]);
        w.write_gradient(&mut t).expect("gradient");
        w.post_receives(&mut t).expect("receives");
        let e = loop {
            match w.progress(&mut t, 0) {
                Ok(p) => assert!(p.completions > 0, "stopped without the wrong value"),
                Err(e) => break e,
            }
        };
        assert_eq!(
            e.to_string(),
            "message 1 value 17: 14, the sum is 15 (my value 5)"
        );
    }

    #[test]
    fn plans_that_cannot_run_are_refused_with_their_reason() {
        let e = |p: SmlrPlan| {
            SmlrWorker::new(p, vec![0; p.elements], vec![0; p.elements])
                .expect_err("refused")
                .to_string()
        };
        assert_eq!(
            e(SmlrPlan { pool: 5, ..plan() }),
            "the pool must hold whole messages: 5 slots, 2 packets per message (at most 64)"
        );
        assert_eq!(
            e(SmlrPlan { reps: 4, ..plan() }),
            "4 repetitions: the stream's 6 messages are not whole repetitions"
        );
        assert_eq!(
            e(SmlrPlan { rank: 3, ..plan() }),
            "worker 3 of 3: SwitchML-RDMA needs at least 2 workers, ranks below 128"
        );
        let w = SmlrWorker::new(plan(), vec![0; 83], vec![0; 83]).expect("plan");
        let mut small = echo(&w, &[], vec![]);
        small.buf.truncate(100);
        assert_eq!(
            w.write_gradient(&mut small).expect_err("small").to_string(),
            "the QP's buffer is 100 bytes, the gradient and its results need 768"
        );
    }
}
