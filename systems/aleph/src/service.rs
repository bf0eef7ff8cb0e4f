//! ALEPH's Aggregation Service and Gradient Receiver with the Integrity Check (Algorithm 2,
//! Sec. 5.3-5.6) as sans-IO endpoints: [`Service`] (the PS) and [`Member`] (a worker) implement
//! [`fabric::Endpoint`](inabench_fabric::Endpoint), so any fabric can run them (the loss sweep of
//! `tests/reliability.rs` runs them on `sim`). No socket, thread or clock: time comes in as
//! arguments, and the member's receive timeout is a deadline it asks for.
//!
//! The service keeps, per segment, the slot the XDP program keeps in its map (a round, a bitmap
//! of the members' bits, the wrapping Q15.16 sum; duplicates and older rounds dropped) and,
//! beside it, the last completed aggregate of the previous round, so a member that lost it can
//! still fetch it after a faster member has started the next round (a round is retired when a
//! segment's slot is overwritten by the round after it: by then every member has every
//! aggregate of the round before, since none could have sent the newer round otherwise).
//!
//! Algorithm 2, as the paper gives it and as run here:
//! - lines 1-6 (the PS): "each worker sends a message to the PS when complete gradients have been
//!   transmitted"; on it the PS checks every segment's bitmap for that worker's bit and "sends
//!   requests to corresponding workers for lost packets": a [`ControlKind::Done`] from member `b`
//!   for round `r` gives one [`ControlKind::Resend`] per segment whose slot holds round `r`
//!   without bit `b`, or still an older round (nobody's round-`r` gradient has arrived); the
//!   member answers with that segment's gradient again.
//! - lines 8-13 (a worker): a member checks which aggregates of its round lack the multicast
//!   signal and requests them: when its receive timer fires (no new aggregate for
//!   `receive_timeout_ns`; the testbed's receiver threads wait 100 ms of wall-clock silence,
//!   [`DEFAULT_RECEIVE_TIMEOUT_NS`]), it sends a fetch ([`Kind::Fetch`]) per missing segment, and
//!   the service answers each from the slot or the retained aggregate (as the XDP program
//!   answers from its map).
//!
//! What the paper does not say, and the least the algorithm needs: how a lost "done" (or a lost
//! resend request, or a lost resent gradient) is recovered. Here the member sends its "done"
//! again on every receive timeout until the round's results are complete, so lines 1-6 run
//! again. The messages' encoding (16-byte header-only control messages, kinds 3 and 4) is the
//! suite's choice: `inabench_wire::ina::aleph` ([`ControlRepr`]).

use inabench_fabric::{Endpoint, Nanos, NodeId, Transmit};
use inabench_wire::ina::aleph::{ControlKind, ControlRepr, GRADS, Kind, PACKET_LEN};
use inabench_xdp::proto::{Packet, Receiver};
use std::collections::VecDeque;

use crate::AlephError;

/// The member's receive timeout when none is given: 100 ms, the silence after which the
/// testbed's receiver threads run Algorithm 2's lines 8-13 (`testbed::xdp`).
pub const DEFAULT_RECEIVE_TIMEOUT_NS: Nanos = 100_000_000;

/// The service: its node, the job, the members' nodes (index = the member's bit) and the
/// segments of a round.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    pub id: NodeId,
    pub job: u16,
    pub members: Vec<NodeId>,
    pub segments: u32,
}

#[derive(Debug, Clone)]
struct Slot {
    round: u32,
    bitmap: u32,
    sum: [i32; GRADS],
    /// The last completed aggregate of an earlier round (kept for fetches until retired).
    prev: Option<(u32, Box<[i32; GRADS]>)>,
}

/// What the service did, for the rows and the tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceCounters {
    /// Gradients added into a slot.
    pub aggregated: u64,
    /// Aggregates completed (each multicast to every member).
    pub completed: u64,
    /// Gradients whose bit was already set in the round.
    pub duplicates: u64,
    /// Gradients of a round older than the slot's.
    pub stale: u64,
    /// Slots overwritten by a newer round before they completed (members that follow the
    /// protocol never cause one).
    pub abandoned: u64,
    /// "Done" messages taken (Algorithm 2, line 1).
    pub dones: u64,
    /// Resend requests sent (lines 5-6).
    pub resend_requests: u64,
    /// Fetches answered with an aggregate (lines 8-13, the PS's side).
    pub fetches_served: u64,
    /// Fetches of an aggregate not complete (or no longer kept).
    pub fetches_missed: u64,
    /// Frames refused: malformed, another job, a bit outside the group, a segment out of range.
    pub bad: u64,
}

/// The Aggregation Service with the PS's half of the Integrity Check.
#[derive(Debug)]
pub struct Service {
    cfg: ServiceConfig,
    full_mask: u32,
    slots: Vec<Slot>,
    out: VecDeque<Transmit>,
    counters: ServiceCounters,
}

impl Service {
    /// 1 to 32 members (the bitmap's width) and at least one segment.
    pub fn new(cfg: ServiceConfig) -> Result<Service, AlephError> {
        let m = cfg.members.len();
        if m == 0 || m > 32 || cfg.segments == 0 {
            return Err(AlephError::Invalid(format!(
                "ALEPH service: {m} members (1..=32) and {} segments (> 0)",
                cfg.segments
            )));
        }
        let full_mask = if m == 32 { u32::MAX } else { (1u32 << m) - 1 };
        let slots = vec![
            Slot {
                round: 0,
                bitmap: 0,
                sum: [0; GRADS],
                prev: None,
            };
            cfg.segments as usize
        ];
        Ok(Service {
            cfg,
            full_mask,
            slots,
            out: VecDeque::new(),
            counters: ServiceCounters::default(),
        })
    }

    pub fn stats(&self) -> &ServiceCounters {
        &self.counters
    }

    /// The member bit's mask, if `worker` is a member of the group.
    fn member_bit(&self, worker: u8) -> Option<u32> {
        let bit = 1u32.checked_shl(u32::from(worker)).unwrap_or(0);
        (bit & self.full_mask != 0).then_some(bit)
    }

    fn send_result(&mut self, to: NodeId, round: u32, segment: u32, sum: &[i32; GRADS]) {
        let mut r = Packet::gradient(self.cfg.job, 0xff, round, segment, *sum);
        r.kind = Kind::Result;
        self.out.push_back(Transmit {
            to,
            bytes: r.emit().to_vec(),
        });
    }

    fn on_gradient(&mut self, p: &Packet, bit: u32) {
        let Some(slot) = self.slots.get_mut(p.segment as usize) else {
            self.counters.bad += 1;
            return;
        };
        if p.round < slot.round {
            self.counters.stale += 1;
            return;
        }
        if p.round > slot.round {
            if slot.bitmap == self.full_mask {
                slot.prev = Some((slot.round, Box::new(slot.sum)));
            } else if slot.round != 0 {
                self.counters.abandoned += 1;
            }
            slot.round = p.round;
            slot.bitmap = 0;
            slot.sum = [0; GRADS];
        }
        if slot.bitmap & bit != 0 {
            self.counters.duplicates += 1;
            return;
        }
        for (s, g) in slot.sum.iter_mut().zip(&p.grads) {
            *s = s.wrapping_add(*g);
        }
        slot.bitmap |= bit;
        self.counters.aggregated += 1;
        if slot.bitmap == self.full_mask {
            self.counters.completed += 1;
            let sum = slot.sum;
            for i in 0..self.cfg.members.len() {
                let to = self.cfg.members[i];
                self.send_result(to, p.round, p.segment, &sum);
            }
        }
    }

    /// Algorithm 2, lines 8-13 on the PS's side: answer from the slot or the retained aggregate,
    /// to the fetch's sender (the XDP program reflects a fetch the same way).
    fn on_fetch(&mut self, from: NodeId, p: &Packet) {
        let Some(slot) = self.slots.get(p.segment as usize) else {
            self.counters.bad += 1;
            return;
        };
        let sum = if slot.round == p.round && slot.bitmap == self.full_mask {
            Some(slot.sum)
        } else {
            match &slot.prev {
                Some((r, s)) if *r == p.round => Some(**s),
                _ => None,
            }
        };
        match sum {
            Some(s) => {
                self.counters.fetches_served += 1;
                self.send_result(from, p.round, p.segment, &s);
            }
            None => self.counters.fetches_missed += 1,
        }
    }

    /// Algorithm 2, lines 1-6: the segments of `round` whose bitmap lacks `bit`.
    fn on_done(&mut self, c: &ControlRepr, bit: u32) {
        if c.segment != self.cfg.segments {
            self.counters.bad += 1;
            return;
        }
        self.counters.dones += 1;
        let to = self.cfg.members[usize::from(c.worker)];
        for (i, s) in self.slots.iter().enumerate() {
            let lacks = s.round < c.round || (s.round == c.round && s.bitmap & bit == 0);
            if lacks {
                let m = ControlRepr {
                    job: self.cfg.job,
                    kind: ControlKind::Resend,
                    worker: c.worker,
                    round: c.round,
                    segment: i as u32,
                };
                self.out.push_back(Transmit {
                    to,
                    bytes: m.to_bytes().to_vec(),
                });
                self.counters.resend_requests += 1;
            }
        }
    }
}

impl Endpoint for Service {
    fn id(&self) -> NodeId {
        self.cfg.id
    }

    fn handle_packet(&mut self, _now: Nanos, from: NodeId, frame: &[u8]) {
        if frame.len() == ControlRepr::LEN {
            match ControlRepr::parse(frame) {
                Ok(c) if c.job == self.cfg.job && c.kind == ControlKind::Done && c.round != 0 => {
                    match self.member_bit(c.worker) {
                        Some(bit) => self.on_done(&c, bit),
                        None => self.counters.bad += 1,
                    }
                }
                _ => self.counters.bad += 1,
            }
            return;
        }
        let Ok(p) = Packet::parse(frame) else {
            self.counters.bad += 1;
            return;
        };
        let bit = match self.member_bit(p.worker) {
            Some(b) if p.job == self.cfg.job && p.round != 0 => b,
            _ => {
                self.counters.bad += 1;
                return;
            }
        };
        match p.kind {
            Kind::Gradient => self.on_gradient(&p, bit),
            Kind::Fetch => self.on_fetch(from, &p),
            Kind::Result => self.counters.bad += 1,
        }
    }

    fn poll_transmit(&mut self, _now: Nanos) -> Option<Transmit> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Nanos> {
        None
    }

    fn handle_timeout(&mut self, _now: Nanos) {}

    /// The service serves for as long as the fabric runs.
    fn is_done(&self) -> bool {
        true
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let c = &self.counters;
        vec![
            ("aggregated", c.aggregated),
            ("completed", c.completed),
            ("duplicates", c.duplicates),
            ("stale", c.stale),
            ("abandoned", c.abandoned),
            ("dones", c.dones),
            ("resend_requests", c.resend_requests),
            ("fetches_served", c.fetches_served),
            ("fetches_missed", c.fetches_missed),
            ("bad", c.bad),
        ]
    }
}

/// A member's training side: its gradients of a round, and the aggregate of a round once every
/// segment's has arrived.
pub trait Trainer: Send {
    /// Fill `out` (segments x [`GRADS`] Q15.16 values) with this member's gradients of `round`.
    fn gradients(&mut self, round: u32, out: &mut [i32]);
    /// The complete aggregate of `round` (segments x [`GRADS`]).
    fn aggregate(&mut self, round: u32, sum: &[i32]);
}

/// A member: its node, the service's node, the job, its bit, the segments of a round, how many
/// rounds it runs (1..=rounds), and its receive timeout.
#[derive(Debug, Clone)]
pub struct MemberConfig {
    pub id: NodeId,
    pub service: NodeId,
    pub job: u16,
    pub bit: u8,
    pub segments: u32,
    pub rounds: u32,
    /// No new aggregate for this long runs Algorithm 2's lines 8-13 (and resends the "done").
    pub receive_timeout_ns: Nanos,
}

/// What a member did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemberCounters {
    /// Gradient packets sent, first sends and resends.
    pub gradients_sent: u64,
    /// Gradients sent again on a resend request (lines 1-6).
    pub resent: u64,
    /// "Done" messages sent, first sends and those on a timeout.
    pub dones_sent: u64,
    /// Receive timeouts that found aggregates missing.
    pub timeouts: u64,
    /// Fetches sent (lines 8-13).
    pub fetches_sent: u64,
    /// New aggregates taken.
    pub aggregates: u64,
    /// Aggregates or requests of another round, and aggregates already taken.
    pub ignored: u64,
    /// Frames refused: malformed, another job, another member's request.
    pub bad: u64,
}

/// A worker with the worker's half of the Integrity Check.
pub struct Member<T: Trainer> {
    cfg: MemberConfig,
    trainer: T,
    round: u32,
    grads: Vec<i32>,
    rx: Receiver,
    rounds_done: u32,
    out: VecDeque<Transmit>,
    deadline: Option<Nanos>,
    /// The round started with no time at hand: the deadline is set on the next poll.
    arm: bool,
    counters: MemberCounters,
}

impl<T: Trainer> Member<T> {
    /// At least one segment and one round, a timeout above zero, a bit below 32.
    pub fn new(cfg: MemberConfig, trainer: T) -> Result<Member<T>, AlephError> {
        if cfg.segments == 0 || cfg.rounds == 0 || cfg.receive_timeout_ns == 0 || cfg.bit >= 32 {
            return Err(AlephError::Invalid(format!(
                "ALEPH member: {} segments, {} rounds, timeout {} ns (all > 0), bit {} (< 32)",
                cfg.segments, cfg.rounds, cfg.receive_timeout_ns, cfg.bit
            )));
        }
        let mut m = Member {
            rx: Receiver::new(1, cfg.segments as usize),
            grads: vec![0; cfg.segments as usize * GRADS],
            cfg,
            trainer,
            round: 0,
            rounds_done: 0,
            out: VecDeque::new(),
            deadline: None,
            arm: false,
            counters: MemberCounters::default(),
        };
        m.start(1, None);
        Ok(m)
    }

    pub fn stats(&self) -> &MemberCounters {
        &self.counters
    }

    pub fn trainer(&self) -> &T {
        &self.trainer
    }

    /// Rounds whose every aggregate was taken.
    pub fn rounds_done(&self) -> u32 {
        self.rounds_done
    }

    fn gradient(&self, s: u32) -> Vec<u8> {
        let at = s as usize * GRADS;
        let mut g = [0i32; GRADS];
        g.copy_from_slice(&self.grads[at..at + GRADS]);
        Packet::gradient(self.cfg.job, self.cfg.bit, self.round, s, g)
            .emit()
            .to_vec()
    }

    fn done_msg(&mut self) {
        let d = ControlRepr {
            job: self.cfg.job,
            kind: ControlKind::Done,
            worker: self.cfg.bit,
            round: self.round,
            segment: self.cfg.segments,
        };
        self.out.push_back(Transmit {
            to: self.cfg.service,
            bytes: d.to_bytes().to_vec(),
        });
        self.counters.dones_sent += 1;
    }

    /// Send a round's gradients, then its "done" (Algorithm 2, line 1's message).
    fn start(&mut self, round: u32, now: Option<Nanos>) {
        self.round = round;
        self.rx = Receiver::new(round, self.cfg.segments as usize);
        self.trainer.gradients(round, &mut self.grads);
        for s in 0..self.cfg.segments {
            let bytes = self.gradient(s);
            self.out.push_back(Transmit {
                to: self.cfg.service,
                bytes,
            });
            self.counters.gradients_sent += 1;
        }
        self.done_msg();
        self.set_deadline(now);
    }

    fn set_deadline(&mut self, now: Option<Nanos>) {
        match now {
            Some(t) => {
                self.deadline = Some(t.saturating_add(self.cfg.receive_timeout_ns));
                self.arm = false;
            }
            None => self.arm = true,
        }
    }

    fn finished(&self) -> bool {
        self.rounds_done == self.cfg.rounds
    }

    fn on_result(&mut self, now: Nanos, p: &Packet) {
        if p.round != self.round || !self.rx.on_packet(p) {
            self.counters.ignored += 1;
            return;
        }
        self.counters.aggregates += 1;
        self.set_deadline(Some(now));
        if !self.rx.complete() {
            return;
        }
        let mut sum = vec![0i32; self.cfg.segments as usize * GRADS];
        for (s, chunk) in sum.chunks_exact_mut(GRADS).enumerate() {
            if let Some(a) = self.rx.aggregate(s as u32) {
                chunk.copy_from_slice(a);
            }
        }
        self.trainer.aggregate(self.round, &sum);
        self.rounds_done += 1;
        if self.finished() {
            self.deadline = None;
            self.arm = false;
        } else {
            self.start(self.round + 1, Some(now));
        }
    }

    fn on_resend(&mut self, c: &ControlRepr) {
        if c.round != self.round || c.segment >= self.cfg.segments {
            self.counters.ignored += 1;
            return;
        }
        let bytes = self.gradient(c.segment);
        self.out.push_back(Transmit {
            to: self.cfg.service,
            bytes,
        });
        self.counters.gradients_sent += 1;
        self.counters.resent += 1;
    }
}

impl<T: Trainer> Endpoint for Member<T> {
    fn id(&self) -> NodeId {
        self.cfg.id
    }

    fn handle_packet(&mut self, now: Nanos, _from: NodeId, frame: &[u8]) {
        if self.finished() {
            self.counters.ignored += 1;
            return;
        }
        if frame.len() == ControlRepr::LEN {
            match ControlRepr::parse(frame) {
                Ok(c)
                    if c.job == self.cfg.job
                        && c.kind == ControlKind::Resend
                        && c.worker == self.cfg.bit =>
                {
                    self.on_resend(&c)
                }
                _ => self.counters.bad += 1,
            }
            return;
        }
        if frame.len() != PACKET_LEN {
            self.counters.bad += 1;
            return;
        }
        match Packet::parse(frame) {
            Ok(p) if p.job == self.cfg.job && p.kind == Kind::Result => self.on_result(now, &p),
            _ => self.counters.bad += 1,
        }
    }

    fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        if self.arm {
            self.set_deadline(Some(now));
        }
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Nanos> {
        self.deadline
    }

    /// Algorithm 2, lines 8-13: fetch every aggregate still missing, and send the "done" again
    /// (a lost "done", resend request or resent gradient is recovered this way).
    fn handle_timeout(&mut self, now: Nanos) {
        match self.deadline {
            Some(d) if d <= now && !self.finished() => {}
            _ => return,
        }
        self.counters.timeouts += 1;
        for s in self.rx.missing() {
            let f = Packet::fetch(self.cfg.job, self.cfg.bit, self.round, s);
            self.out.push_back(Transmit {
                to: self.cfg.service,
                bytes: f.emit().to_vec(),
            });
            self.counters.fetches_sent += 1;
        }
        self.done_msg();
        self.set_deadline(Some(now));
    }

    fn is_done(&self) -> bool {
        self.finished()
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let c = &self.counters;
        vec![
            ("gradients_sent", c.gradients_sent),
            ("resent", c.resent),
            ("dones_sent", c.dones_sent),
            ("timeouts", c.timeouts),
            ("fetches_sent", c.fetches_sent),
            ("aggregates", c.aggregates),
            ("ignored", c.ignored),
            ("bad", c.bad),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed {
        bit: i32,
        got: Vec<(u32, Vec<i32>)>,
    }

    impl Trainer for Fixed {
        fn gradients(&mut self, round: u32, out: &mut [i32]) {
            for (i, g) in out.iter_mut().enumerate() {
                *g = self.bit * 1000 + round as i32 * 10 + i as i32;
            }
        }
        fn aggregate(&mut self, round: u32, sum: &[i32]) {
            self.got.push((round, sum.to_vec()));
        }
    }

    fn drain(e: &mut dyn Endpoint, now: Nanos) -> Vec<Transmit> {
        std::iter::from_fn(|| e.poll_transmit(now)).collect()
    }

    fn control(t: &Transmit) -> Option<ControlRepr> {
        ControlRepr::parse(&t.bytes[..]).ok()
    }

    /// Lines 1-6: a lost gradient is named in a resend request on the "done", the member
    /// sends it again, the aggregate completes; lines 8-13: a lost aggregate is fetched on the
    /// timeout and answered from the retained copy after the next round began.
    #[test]
    fn a_lost_gradient_and_a_lost_aggregate_are_recovered_exactly() {
        let cfg = |id: NodeId, bit: u8| MemberConfig {
            id,
            service: 2,
            job: 5,
            bit,
            segments: 2,
            rounds: 2,
            receive_timeout_ns: 1_000,
        };
        let mk = |b: u8| Fixed {
            bit: i32::from(b),
            got: Vec::new(),
        };
        let mut m0 = Member::new(cfg(0, 0), mk(0)).expect("member");
        let mut m1 = Member::new(cfg(1, 1), mk(1)).expect("member");
        let mut svc = Service::new(ServiceConfig {
            id: 2,
            job: 5,
            members: vec![0, 1],
            segments: 2,
        })
        .expect("service");
        let t0 = drain(&mut m0, 0);
        let t1 = drain(&mut m1, 0);
        assert_eq!((t0.len(), t1.len()), (3, 3)); // two gradients and a "done" each
        assert_eq!(m0.poll_timeout(), Some(1_000));
        // member 1's gradient of segment 1 is lost
        for t in &t0 {
            svc.handle_packet(10, 0, &t.bytes);
        }
        for t in [&t1[0], &t1[2]] {
            svc.handle_packet(10, 1, &t.bytes);
        }
        let out = drain(&mut svc, 10);
        // segment 0's aggregate to both members, one resend request to member 1 for segment 1
        let resends: Vec<_> = out.iter().filter_map(control).collect();
        assert_eq!(resends.len(), 1);
        assert_eq!(
            (resends[0].kind, resends[0].worker, resends[0].segment),
            (ControlKind::Resend, 1, 1)
        );
        assert_eq!(out.len(), 3);
        for t in &out {
            match t.to {
                0 => m0.handle_packet(20, 2, &t.bytes),
                _ => m1.handle_packet(20, 2, &t.bytes),
            }
        }
        let again = drain(&mut m1, 20);
        assert_eq!(again.len(), 1);
        svc.handle_packet(30, 1, &again[0].bytes);
        let results = drain(&mut svc, 30);
        assert_eq!(results.len(), 2);
        // member 0 gets segment 1; member 1's copy is lost
        m0.handle_packet(40, 2, &results[0].bytes);
        assert_eq!(m0.rounds_done(), 1);
        let want: Vec<i32> = (0..2 * GRADS as i32).map(|i| 1000 + 20 + 2 * i).collect();
        assert_eq!(m0.trainer().got, vec![(1, want.clone())]);
        // member 0 starts round 2; its segment-1 gradient overwrites the slot of round 1
        let r2 = drain(&mut m0, 40);
        svc.handle_packet(50, 0, &r2[1].bytes);
        // member 1's timer: a fetch of segment 1 and the "done" again
        assert_eq!(m1.poll_timeout(), Some(1_020));
        m1.handle_timeout(1_020);
        let f = drain(&mut m1, 1_020);
        assert_eq!(f.len(), 2);
        assert_eq!(m1.stats().fetches_sent, 1);
        for t in &f {
            svc.handle_packet(1_030, 1, &t.bytes);
        }
        let answer = drain(&mut svc, 1_030);
        // the retained aggregate; the "done" of round 1 names nothing (the slot is at round 2)
        assert_eq!(answer.len(), 1);
        assert_eq!(svc.stats().fetches_served, 1);
        m1.handle_packet(1_040, 2, &answer[0].bytes);
        assert_eq!(m1.rounds_done(), 1);
        assert_eq!(m1.trainer().got, vec![(1, want)]);
        assert_eq!(svc.stats().abandoned, 0);
    }

    #[test]
    fn junk_and_foreign_frames_are_counted_not_taken() {
        let mut svc = Service::new(ServiceConfig {
            id: 1,
            job: 5,
            members: vec![0],
            segments: 1,
        })
        .expect("service");
        let bad_bit = Packet::gradient(5, 1, 1, 0, [1; GRADS]).emit();
        let other_job = Packet::gradient(6, 0, 1, 0, [1; GRADS]).emit();
        let bad_seg = Packet::gradient(5, 0, 1, 1, [1; GRADS]).emit();
        let short_done = ControlRepr {
            job: 5,
            kind: ControlKind::Done,
            worker: 0,
            round: 1,
            segment: 7,
        }
        .to_bytes();
        for f in [
            &bad_bit[..],
            &other_job[..],
            &bad_seg[..],
            &short_done[..],
            &[1, 2, 3][..],
            &bad_bit[..PACKET_LEN - 1],
        ] {
            svc.handle_packet(0, 0, f);
        }
        assert_eq!(svc.stats().bad, 6);
        assert!(svc.poll_transmit(0).is_none());
        assert!(
            Service::new(ServiceConfig {
                id: 0,
                job: 0,
                members: vec![0; 33],
                segments: 1
            })
            .is_err()
        );
    }
}
