//! A Libra worker: pushes its hot pairs to the switch and its cold pairs to the server,
//! then collects the results.

use super::reliable::{Reliable, ack};
use super::{Config, Stats};
use crate::layout::{Placement, package_alg1, package_sequential};
use crate::wire;
use crate::wire::{Kind, Repr};
use inabench_fabric::{Endpoint, Nanos, NodeId, Transmit};
use std::collections::{HashMap, HashSet, VecDeque};

/// A worker.
pub struct Worker {
    pub rank: usize,
    pub(super) cfg: Config,
    pub(super) pushes: Reliable,
    pushes_len: usize,
    done_sent: bool,
    acks: VecDeque<Transmit>,
    /// Results by source: (seen (source, seq), expected total)
    seen: HashSet<(NodeId, u32)>,
    got: HashMap<NodeId, u32>,
    expect: HashMap<NodeId, u32>,
    pub hot_result: HashMap<u32, i32>,
    pub cold_result: HashMap<u32, i32>,
    pub stats: Stats,
    started: bool,
    pub(super) finished: bool,
}

impl Worker {
    /// `hot`: (rank, value) pairs for the switch (packaged by Algorithm 1 on `placement`);
    /// `cold`: (key, value) pairs for the server.
    pub fn new(
        rank: usize,
        cfg: Config,
        hot: &[(u32, i32)],
        cold: &[(u32, i32)],
        placement: Option<&Placement>,
    ) -> Worker {
        let mut pushes = Reliable::default();
        let value: HashMap<u32, i32> = hot.iter().copied().collect();
        let ranks: Vec<u32> = hot.iter().map(|p| p.0).collect();
        let hot_pkts = match placement {
            Some(pl) => package_alg1(&ranks, cfg.hot_cap, pl).packets,
            None => package_sequential(&ranks, cfg.hot_cap),
        };
        let cold_pkts: Vec<&[(u32, i32)]> = cold.chunks(cfg.cold_cap.max(1)).collect();
        let mk = |kind, pairs: Vec<(u32, i32)>| Repr {
            kind,
            retransmit: false,
            worker: rank as u16,
            seq: 0,
            aux: 0,
            pairs,
        };
        // interleave the two paths so that both are busy from the start
        let mut h = hot_pkts.into_iter();
        let mut c = cold_pkts.into_iter();
        loop {
            let a = h.next();
            let b = c.next();
            if a.is_none() && b.is_none() {
                break;
            }
            if let Some(p) = a {
                let pairs = p.iter().map(|r| (*r, value[r])).collect();
                pushes.add(cfg.switch(), mk(Kind::PushHot, pairs));
            }
            if let Some(p) = b {
                pushes.add(cfg.server(), mk(Kind::PushCold, p.to_vec()));
            }
        }
        let pushes_len = pushes.msgs.len();
        Worker {
            rank,
            cfg,
            pushes,
            pushes_len,
            done_sent: false,
            acks: VecDeque::new(),
            seen: HashSet::new(),
            got: HashMap::new(),
            expect: HashMap::new(),
            hot_result: HashMap::new(),
            cold_result: HashMap::new(),
            stats: Stats::default(),
            started: false,
            finished: false,
        }
    }

    fn me(&self) -> NodeId {
        self.rank as NodeId
    }

    fn check_finished(&mut self, now: Nanos) {
        let sources: Vec<NodeId> = if self.cfg.libra {
            vec![self.cfg.switch(), self.cfg.server()]
        } else {
            vec![self.cfg.server()]
        };
        let complete = sources.iter().all(|s| {
            self.expect
                .get(s)
                .is_some_and(|&t| self.got.get(s).copied().unwrap_or(0) >= t)
        });
        if !self.finished && self.done_sent && self.pushes.all_acked() && complete {
            self.finished = true;
            self.stats.end_ns = now;
        }
    }

    /// Pushes this worker made (packets, before the Done markers).
    pub fn push_packets(&self) -> usize {
        self.pushes_len
    }
}

impl Endpoint for Worker {
    fn id(&self) -> NodeId {
        self.me()
    }

    fn handle_packet(&mut self, now: Nanos, _from: NodeId, frame: &[u8]) {
        self.stats.packets_rx += 1;
        let Ok((src, dst, r)) = wire::parse(frame) else {
            self.stats.malformed += 1;
            return;
        };
        // only what is addressed to this worker, from the switch or the server
        if dst != self.me()
            || !(src == self.cfg.switch() && self.cfg.libra || src == self.cfg.server())
        {
            self.stats.malformed += 1;
            return;
        }
        match r.kind {
            Kind::Ack => self.pushes.on_ack(r.seq, src, now),
            Kind::Result => {
                // acknowledge every copy (the first ACK may have been lost)
                self.acks.push_back(ack(
                    self.me(),
                    src,
                    Some(self.cfg.switch()),
                    self.rank as u16,
                    r.seq,
                ));
                if self.seen.insert((src, r.seq)) {
                    self.expect.insert(src, r.aux);
                    *self.got.entry(src).or_insert(0) += 1;
                    let into = if src == self.cfg.switch() {
                        &mut self.hot_result
                    } else {
                        &mut self.cold_result
                    };
                    for (k, v) in r.pairs {
                        into.insert(k, v);
                    }
                }
            }
            _ => self.stats.malformed += 1,
        }
        if !self.done_sent && self.pushes.all_acked() {
            self.done_sent = true;
            let mk = || Repr {
                kind: Kind::Done,
                retransmit: false,
                worker: self.rank as u16,
                seq: 0,
                aux: 0,
                pairs: vec![],
            };
            if self.cfg.libra {
                self.pushes.add(self.cfg.switch(), mk());
            }
            self.pushes.add(self.cfg.server(), mk());
        }
        self.check_finished(now);
    }

    fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        if !self.started {
            self.started = true;
            self.stats.start_ns = now;
        }
        let t = match self.acks.pop_front() {
            Some(t) => t,
            None => {
                let me = self.me();
                let via = Some(self.cfg.switch());
                self.pushes
                    .poll(me, via, now, self.cfg.window, self.cfg.rto_ns)?
            }
        };
        self.stats.packets_tx += 1;
        self.stats.bytes_tx += t.bytes.len() as u64;
        self.stats.retransmissions = self.pushes.retransmissions;
        Some(t)
    }

    fn poll_timeout(&self) -> Option<Nanos> {
        self.pushes.timeout()
    }

    fn handle_timeout(&mut self, now: Nanos) {
        self.pushes.on_timeout(now, self.cfg.rto_ns);
    }

    fn is_done(&self) -> bool {
        self.finished
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![("retransmissions", self.pushes.retransmissions)]
    }
}
