//! The parameter server: the cold parameters' sums (with no hot set, the PS-lite baseline).

use super::reliable::{Reliable, ack, result_stream};
use super::{Config, Stats};
use crate::wire;
use crate::wire::Kind;
use inabench_fabric::{Endpoint, Nanos, NodeId, Transmit};
use std::collections::{HashMap, HashSet, VecDeque};

/// The parameter server (PS-lite's role): cold keys, or every key without Libra.
pub struct Server {
    cfg: Config,
    sums: HashMap<u32, i32>,
    keys: Vec<Vec<u32>>,
    records: HashSet<(u16, u32)>,
    done: Vec<bool>,
    results: Reliable,
    results_built: bool,
    out: VecDeque<Transmit>,
    pub stats: Stats,
}

impl Server {
    pub fn new(cfg: Config) -> Server {
        Server {
            sums: HashMap::new(),
            keys: vec![Vec::new(); cfg.workers],
            records: HashSet::new(),
            done: vec![false; cfg.workers],
            results: Reliable::default(),
            results_built: false,
            out: VecDeque::new(),
            stats: Stats::default(),
            cfg,
        }
    }

    fn me(&self) -> NodeId {
        self.cfg.server()
    }
}

impl Endpoint for Server {
    fn id(&self) -> NodeId {
        self.me()
    }

    fn handle_packet(&mut self, now: Nanos, _from: NodeId, frame: &[u8]) {
        self.stats.packets_rx += 1;
        let Ok((src, dst, r)) = wire::parse(frame) else {
            self.stats.malformed += 1;
            return;
        };
        let w = r.worker;
        // only what is addressed to the server, from the worker the frame names
        if usize::from(w) >= self.cfg.workers || dst != self.me() || src != NodeId::from(w) {
            self.stats.malformed += 1;
            return;
        }
        match r.kind {
            Kind::PushCold => {
                // a server keeps a record of every push (it has the memory a switch lacks)
                if self.records.insert((w, r.seq)) {
                    for (k, v) in &r.pairs {
                        let s = self.sums.entry(*k).or_insert(0);
                        *s = s.wrapping_add(*v);
                        self.keys[usize::from(w)].push(*k);
                    }
                } else {
                    self.stats.duplicates_ignored += 1;
                }
                let via = Some(self.cfg.switch());
                self.out.push_back(ack(self.me(), src, via, w, r.seq));
            }
            Kind::Done => {
                self.done[usize::from(w)] = true;
                let via = Some(self.cfg.switch());
                self.out.push_back(ack(self.me(), src, via, w, r.seq));
                if !self.results_built && self.done.iter().all(|d| *d) {
                    self.results_built = true;
                    for (wk, keys) in self.keys.iter_mut().enumerate() {
                        keys.sort_unstable();
                        keys.dedup();
                        let pairs: Vec<(u32, i32)> =
                            keys.iter().map(|k| (*k, self.sums[k])).collect();
                        result_stream(wk as NodeId, &pairs, self.cfg.cold_cap, &mut self.results);
                    }
                }
            }
            Kind::Ack => self.results.on_ack(r.seq, src, now),
            _ => self.stats.malformed += 1,
        }
    }

    fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        let t = match self.out.pop_front() {
            Some(t) => t,
            None => {
                let me = self.me();
                let via = Some(self.cfg.switch());
                self.results
                    .poll(me, via, now, self.cfg.window, self.cfg.rto_ns)?
            }
        };
        self.stats.packets_tx += 1;
        self.stats.bytes_tx += t.bytes.len() as u64;
        Some(t)
    }

    fn poll_timeout(&self) -> Option<Nanos> {
        self.results.timeout()
    }

    fn handle_timeout(&mut self, now: Nanos) {
        self.results.on_timeout(now, self.cfg.rto_ns);
    }

    fn is_done(&self) -> bool {
        true
    }
}
