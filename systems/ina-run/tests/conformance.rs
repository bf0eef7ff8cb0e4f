//! Every system of `inabench_ina::SYSTEMS` gives exact results on `sim`, `mem` and `udp` threads
//! through `fabric::Fabric` (`inabench_ina_run::conformance`), and so does a system written here the
//! way a newcomer adds one (ARCHITECTURE.md, "Adding a system"): `ToySum`, a switch that sums
//! whole chunks and multicasts them, implemented in this file alone and run by the same generic
//! check without any other file changing.

use inabench_fabric::{Endpoint, Nanos, NodeId, Transmit};
use inabench_ina::common::{
    AllReduceConfig, HostStats, Setup, SetupError, Switch, SwitchStats, System, Worker,
    check_inputs, gradient,
};
use inabench_ina_run::conformance::on_every_fabric;

fn cfg(workers: usize) -> AllReduceConfig {
    AllReduceConfig {
        workers,
        elements: 3 * 256 + 17,
        seed: 5,
        line_rate_bps: 100e9,
        mtu: 1024,
        timeout_ns: 1_000_000,
        knobs: vec![],
    }
}

#[test]
fn every_listed_system_is_exact_on_every_fabric() {
    for sys in inabench_ina::SYSTEMS {
        // an all-reduce of four workers where the system builds one, else a pair (the RC stream)
        let c = [cfg(4), cfg(2)]
            .into_iter()
            .find(|c| sys.build(c).is_ok())
            .unwrap_or_else(|| panic!("{} builds for 4 or 2 workers", sys.name()));
        let out = on_every_fabric(*sys, &c).unwrap_or_else(|e| panic!("{e}"));
        let fabrics: Vec<&str> = out.iter().map(|o| o.fabric).collect();
        assert_eq!(fabrics, ["sim", "mem", "udp"], "{}", sys.name());
        for o in &out {
            assert!(o.passed(), "{}: {o:?}", sys.name());
        }
    }
}

// ---- the worked example: a new system in one file ------------------------------------------

/// Values per frame.
const CHUNK: usize = 256;
const DATA: u8 = 1;
const RESULT: u8 = 2;

/// A frame: kind, chunk index (u32 BE), values (i32 BE).
fn frame(kind: u8, chunk: u32, values: &[i32]) -> Vec<u8> {
    let mut b = Vec::with_capacity(5 + 4 * values.len());
    b.push(kind);
    b.extend_from_slice(&chunk.to_be_bytes());
    for v in values {
        b.extend_from_slice(&v.to_be_bytes());
    }
    b
}

/// (kind, chunk, values) of a well-formed frame.
fn parse(f: &[u8]) -> Option<(u8, usize, Vec<i32>)> {
    let (&kind, rest) = f.split_first()?;
    let chunk = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?) as usize;
    let body = rest.get(4..)?;
    if body.len() % 4 != 0 {
        return None;
    }
    let values = body
        .chunks_exact(4)
        .map(|c| i32::from_be_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    Some((kind, chunk, values))
}

struct ToyWorker {
    id: NodeId,
    switch: NodeId,
    input: Vec<i32>,
    next: usize,
    result: Vec<i32>,
    got: Vec<bool>,
    stats: HostStats,
}

impl Endpoint for ToyWorker {
    fn id(&self) -> NodeId {
        self.id
    }
    fn handle_packet(&mut self, _now: Nanos, _from: NodeId, f: &[u8]) {
        self.stats.packets_rx += 1;
        match parse(f) {
            Some((RESULT, c, v)) if c < self.got.len() && !self.got[c] => {
                let at = c * CHUNK;
                if let Some(slot) = self.result.get_mut(at..at + v.len()) {
                    slot.copy_from_slice(&v);
                    self.got[c] = true;
                }
            }
            _ => self.stats.malformed_rx += 1,
        }
    }
    fn poll_transmit(&mut self, _now: Nanos) -> Option<Transmit> {
        let c = self.next;
        let values = self.input.chunks(CHUNK).nth(c)?;
        self.next += 1;
        self.stats.packets_tx += 1;
        Some(Transmit {
            to: self.switch,
            bytes: frame(DATA, c as u32, values),
        })
    }
    fn poll_timeout(&self) -> Option<Nanos> {
        None
    }
    fn handle_timeout(&mut self, _now: Nanos) {}
    fn is_done(&self) -> bool {
        self.got.iter().all(|g| *g)
    }
}

impl Worker for ToyWorker {
    fn result(&self) -> Option<Vec<i32>> {
        self.is_done().then(|| self.result.clone())
    }
    fn stats(&self) -> HostStats {
        self.stats.clone()
    }
}

struct ToySwitch {
    id: NodeId,
    workers: usize,
    sums: Vec<Vec<i32>>,
    seen: Vec<usize>,
    out: std::collections::VecDeque<Transmit>,
    stats: SwitchStats,
}

impl Endpoint for ToySwitch {
    fn id(&self) -> NodeId {
        self.id
    }
    fn handle_packet(&mut self, _now: Nanos, _from: NodeId, f: &[u8]) {
        self.stats.packets_in += 1;
        let Some((DATA, c, v)) = parse(f) else {
            self.stats.dropped += 1;
            return;
        };
        let Some(sum) = self.sums.get_mut(c) else {
            self.stats.dropped += 1;
            return;
        };
        if sum.is_empty() {
            *sum = vec![0; v.len()];
        }
        if sum.len() != v.len() {
            self.stats.dropped += 1;
            return;
        }
        for (s, x) in sum.iter_mut().zip(&v) {
            *s = s.wrapping_add(*x);
        }
        self.seen[c] += 1;
        if self.seen[c] == self.workers {
            for w in 0..self.workers {
                self.out.push_back(Transmit {
                    to: w as NodeId,
                    bytes: frame(RESULT, c as u32, &self.sums[c]),
                });
            }
        }
    }
    fn poll_transmit(&mut self, _now: Nanos) -> Option<Transmit> {
        let t = self.out.pop_front()?;
        self.stats.packets_out += 1;
        Some(t)
    }
    fn poll_timeout(&self) -> Option<Nanos> {
        None
    }
    fn handle_timeout(&mut self, _now: Nanos) {}
}

impl Switch for ToySwitch {
    fn stats(&self) -> SwitchStats {
        self.stats.clone()
    }
}

/// The system: a name and a builder. Every other fact (host stack, DPDK client, sharding, fuzz
/// findings, ...) keeps `System`'s defaults.
struct ToySum;

impl System for ToySum {
    fn name(&self) -> &'static str {
        "toy_sum"
    }

    fn build_with(
        &self,
        cfg: &AllReduceConfig,
        inputs: Vec<Vec<i32>>,
    ) -> Result<Setup, SetupError> {
        check_inputs(cfg, &inputs)?;
        let chunks = cfg.elements.div_ceil(CHUNK);
        let switch = cfg.workers as NodeId;
        let workers = inputs
            .into_iter()
            .enumerate()
            .map(|(w, input)| {
                Box::new(ToyWorker {
                    id: w as NodeId,
                    switch,
                    input,
                    next: 0,
                    result: vec![0; cfg.elements],
                    got: vec![false; chunks],
                    stats: HostStats::default(),
                }) as Box<dyn Worker>
            })
            .collect();
        Ok(Setup {
            workers,
            switch: Box::new(ToySwitch {
                id: switch,
                workers: cfg.workers,
                sums: vec![Vec::new(); chunks],
                seen: vec![0; chunks],
                out: Default::default(),
                stats: SwitchStats::default(),
            }),
            others: Vec::new(),
        })
    }
}

#[test]
fn a_new_system_written_in_one_file_passes_the_same_check() {
    let c = cfg(4);
    let out = on_every_fabric(&ToySum, &c).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.len(), 3);
    for o in &out {
        assert!(o.passed(), "{o:?}");
    }
    // it keeps System's defaults: no name was matched anywhere to give it its facts
    assert!(!ToySum.ordered_transport());
    assert_eq!(ToySum.paper_host_stack(), "dpdk");
    assert_eq!(ToySum.switch_shards(&c), 1);
    assert!(ToySum.fuzz_findings().is_empty());
}

/// The check can fail: a switch that adds one worker's chunk twice is caught on every fabric.
#[test]
fn the_check_fails_a_system_that_sums_wrong() {
    struct Doubled;
    impl System for Doubled {
        fn name(&self) -> &'static str {
            "doubled"
        }
        fn build_with(
            &self,
            cfg: &AllReduceConfig,
            mut inputs: Vec<Vec<i32>>,
        ) -> Result<Setup, SetupError> {
            // worker 0's values reach the switch twice over: its gradient doubled
            for v in inputs[0].iter_mut() {
                *v = v.wrapping_mul(2);
            }
            ToySum.build_with(cfg, inputs)
        }
    }
    let c = cfg(3);
    assert!(gradient(c.seed, 0, c.elements).iter().any(|v| *v != 0));
    let out = on_every_fabric(&Doubled, &c).unwrap_or_else(|e| panic!("{e}"));
    for o in &out {
        assert!(o.finished, "{o:?}");
        assert_eq!(o.correct, 0, "{o:?}");
    }
}
