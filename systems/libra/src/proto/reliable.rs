//! The reliable sender every Libra node sends with (numbered messages, a window, per-packet
//! ACKs, a timeout per destination as TCP's), and the ACK and result frames it carries.

use crate::wire;
use crate::wire::{Kind, Repr};
use inabench_fabric::{Nanos, NodeId, Transmit};
use std::collections::{BTreeMap, HashMap, VecDeque};

/// A reliable sender: numbered messages, a window, per-packet ACKs, retransmission on timeout.
/// The timeout adapts as TCP's does (RFC 6298: SRTT + 4 RTTVAR from the ACKs of packets sent
/// once, Karn's rule; doubled on a timeout), never below the configured one: a fixed timeout
/// shorter than the queueing at a busy server sets off retransmission storms. As TCP keeps one
/// estimator per connection, there is one per destination: a worker's pushes go to the switch
/// (acknowledged within microseconds) and to the server (behind its queue, milliseconds), and
/// one shared estimator, pulled down by the switch's ACKs, timed out most cold pushes spuriously.
///
/// Libra times every packet (Sec. 3.6: "the sender of a packet will mark the packet as loss if it
/// does not receive the ack before the timer expires"; it gives no timeout value), where TCP runs
/// one timer per connection (RFC 6298 5.1-5.6). Per destination, this sender keeps RFC 6298's
/// rules for that timer: an ACK of a message in flight restarts it (5.3), so a packet is declared
/// lost only when its own deadline has passed and its destination has acknowledged nothing for
/// one timeout (a deep queue at the server, which acknowledges steadily, times nothing out); an
/// expiry doubles the timeout once per timer period (5.5): each packet remembers the period its
/// deadline was set in (a period ends when the destination's backoff changes: doubled, or reset
/// by a fresh RTT sample), and only the first expiry of a deadline set in the current period
/// doubles it. Every expired packet is resent, on its own timer, as the paper describes.
/// (Until 2026-11-25 the timeout doubled on every packet's expiry and no ACK restarted it: a
/// window's packets, expiring one after the other behind the server's queue, backed it off 2^10
/// times, and a loss soon after waited the whole inflated timeout: ~450 ms on a 13-15 ms
/// iteration in libra-fig18 with `skew: zipf1`; tests/single_loss.rs.)
#[derive(Debug, Default)]
pub(super) struct Reliable {
    sent_at: Vec<Nanos>,
    retried: Vec<bool>,
    /// The destination's timer period ([`RttEstimate::period`]) when the message's current
    /// deadline was set.
    period: Vec<u32>,
    est: HashMap<NodeId, RttEstimate>,
    pub(super) msgs: Vec<(NodeId, Repr)>,
    /// 0 unsent, 1 in flight, 2 acknowledged
    state: Vec<u8>,
    deadline: BTreeMap<u32, Nanos>,
    resend: VecDeque<u32>,
    next: usize,
    acked: usize,
    pub(super) retransmissions: u64,
}

/// RFC 6298's state for one destination.
#[derive(Debug, Default, Clone, Copy)]
struct RttEstimate {
    srtt: f64,
    rttvar: f64,
    backoff: u32,
    /// Counts the changes of `backoff`: the deadlines set between two changes are one timer
    /// period, and their expiries double the timeout once.
    period: u32,
    /// When this destination last acknowledged a message in flight (RFC 6298 5.3: an ACK of
    /// new data restarts the timer).
    last_ack: Option<Nanos>,
}

impl Reliable {
    pub(super) fn add(&mut self, to: NodeId, mut r: Repr) {
        r.seq = self.msgs.len() as u32;
        self.msgs.push((to, r));
        self.state.push(0);
        self.sent_at.push(0);
        self.retried.push(false);
        self.period.push(0);
    }

    pub(super) fn all_acked(&self) -> bool {
        self.acked == self.msgs.len()
    }

    /// An ACK for message `seq` from `from`. Only a message in flight to `from` is
    /// acknowledged: an ACK for one never sent, or from another node, is a stale or forged frame
    /// (it would mark as delivered what its receiver never had).
    pub(super) fn on_ack(&mut self, seq: u32, from: NodeId, now: Nanos) {
        let i = seq as usize;
        if self.msgs.get(i).is_some_and(|(to, _)| *to == from)
            && let Some(s) = self.state.get_mut(i)
            && *s == 1
        {
            *s = 2;
            self.acked += 1;
            self.deadline.remove(&seq);
            self.est.entry(from).or_default().last_ack = Some(now);
            if !self.retried[i] {
                let rtt = now.saturating_sub(self.sent_at[i]) as f64;
                let e = self.est.entry(self.msgs[i].0).or_default();
                if e.srtt == 0.0 {
                    e.srtt = rtt;
                    e.rttvar = rtt / 2.0;
                } else {
                    e.rttvar = 0.75 * e.rttvar + 0.25 * (e.srtt - rtt).abs();
                    e.srtt = 0.875 * e.srtt + 0.125 * rtt;
                }
                if e.backoff > 0 {
                    e.backoff = 0;
                    e.period = e.period.wrapping_add(1);
                }
            }
        }
    }

    pub(super) fn rto(&self, min: u64, to: NodeId) -> u64 {
        let e = self.est.get(&to).copied().unwrap_or_default();
        let base = (e.srtt + 4.0 * e.rttvar) as u64;
        (base.max(min) << e.backoff.min(10)).min(1_000_000_000)
    }

    /// The next frame; `via`: the next hop (hosts send everything through the switch).
    pub(super) fn poll(
        &mut self,
        me: NodeId,
        via: Option<NodeId>,
        now: Nanos,
        window: usize,
        rto: u64,
    ) -> Option<Transmit> {
        let (seq, retx) = if let Some(s) = self.resend.pop_front() {
            (s, true)
        } else if self.next < self.msgs.len() && self.deadline.len() < window {
            self.next += 1;
            ((self.next - 1) as u32, false)
        } else {
            return None;
        };
        if retx {
            self.retransmissions += 1;
            self.retried[seq as usize] = true;
        } else {
            self.sent_at[seq as usize] = now;
        }
        let to = self.msgs[seq as usize].0;
        self.period[seq as usize] = self.est.get(&to).map_or(0, |e| e.period);
        let deadline = now + self.rto(rto, to);
        let (to, r) = &mut self.msgs[seq as usize];
        r.retransmit = retx;
        self.state[seq as usize] = 1;
        self.deadline.insert(seq, deadline);
        Some(Transmit {
            to: via.unwrap_or(*to),
            bytes: wire::emit(me, *to, r),
        })
    }

    pub(super) fn timeout(&self) -> Option<Nanos> {
        self.deadline.values().min().copied()
    }

    pub(super) fn on_timeout(&mut self, now: Nanos, min: u64) {
        let due: Vec<u32> = self
            .deadline
            .iter()
            .filter(|(_, d)| **d <= now)
            .map(|(s, _)| *s)
            .collect();
        for s in due {
            let to = self.msgs[s as usize].0;
            // RFC 6298 5.3: the destination acknowledged new data within the last timeout, so
            // its timer runs from that ACK; the packet waits one timeout after it
            let restart = self
                .est
                .get(&to)
                .and_then(|e| e.last_ack)
                .map(|t| t + self.rto(min, to));
            if let Some(r) = restart.filter(|r| *r > now) {
                self.deadline.insert(s, r);
                self.period[s as usize] = self.est.get(&to).map_or(0, |e| e.period);
                continue;
            }
            // one doubling per timer period (RFC 6298 5.5): the first expiry of a deadline set
            // in the current period doubles the timeout and starts the next period; the other
            // deadlines of that period, set before the doubling, add nothing
            let e = self.est.entry(to).or_default();
            if self.period[s as usize] == e.period {
                e.backoff = e.backoff.saturating_add(1);
                e.period = e.period.wrapping_add(1);
            }
            self.deadline.remove(&s);
            if self.state[s as usize] == 1 {
                self.resend.push_back(s);
            }
        }
    }
}

pub(super) fn ack(me: NodeId, to: NodeId, via: Option<NodeId>, worker: u16, seq: u32) -> Transmit {
    let r = Repr {
        kind: Kind::Ack,
        retransmit: false,
        worker,
        seq,
        aux: 0,
        pairs: vec![],
    };
    Transmit {
        to: via.unwrap_or(to),
        bytes: wire::emit(me, to, &r),
    }
}

pub(super) fn result_stream(to: NodeId, pairs: &[(u32, i32)], cap: usize, out: &mut Reliable) {
    let chunks: Vec<&[(u32, i32)]> = if pairs.is_empty() {
        vec![&[]]
    } else {
        pairs.chunks(cap.max(1)).collect()
    };
    let total = chunks.len() as u32;
    for c in chunks {
        out.add(
            to,
            Repr {
                kind: Kind::Result,
                retransmit: false,
                worker: to as u16,
                seq: 0,
                aux: total,
                pairs: c.to_vec(),
            },
        );
    }
}
