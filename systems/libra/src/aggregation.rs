//! One iteration of Libra's aggregation on the `sim` fabric at 100 Gbps: the driver behind the
//! `libra.aggregation` workload (inabench-workloads; Fig. 12, 13, 14, 18).
//!
//! The switch: no CPU cost per frame, but every frame and every recirculated pass takes its
//! pipeline for the frame's time at one pipeline's bandwidth (1.6 Tbps, [`crate::proto::pass_ns`]),
//! and what the frame sends leaves after its passes.
//!
//! Host costs: declared inputs, never measured while a run runs. The workers' and the server's
//! code (the same [`crate::proto::Worker`] and [`crate::proto::Server`] for Libra, Libra with
//! float sums and the PS-lite baseline) is priced by one coefficient table ([`HostCosts`], a
//! host profile's entries read by the workload): ns per frame received or sent and ns per
//! (key, value) pair parsed or serialized, over the role's threads. [`count_ops`] counts the
//! frames and pairs each role handles in a lossless run of the point with no host cost
//! (virtual time: a function of the inputs alone), and [`OpCounts::per_frame_ns`] turns the
//! counts and the table into the cost per frame the fabric charges each node of that role (the
//! role's operations' cost over its frames: the fabric charges one cost per frame and node).
//! So two systems compared on one host (Libra's server against PS-lite's) differ only by what
//! they do, never by two timings taken apart. [`run_sim`] charges the costs and checks every
//! worker's result against the exact sums. [`measure_coefficients`] is `inabench calibrate`'s
//! measurement of the table on this machine; no run calls it.

use crate::proto::{self, Config, Inputs, Node};
use crate::sparse::SparseGen;
use crate::wire;
use crate::{LibraError, run_on};
use inabench_fabric::fault::Faults;
use inabench_fabric::sim::{LinkConfig, NodeConfig};
use inabench_fabric::wrap::{CpuMeter, Timed};
use inabench_fabric::{Endpoint, Sim, Until};
use std::collections::HashMap;

/// The inputs of one point: each worker's hot and cold pairs. With `float`, the hot values are
/// f32 bit patterns: the generator's integer value times 2^-20 (exact in f32; gradient-sized,
/// |x| < 1), for the switch's table-lookup float sum.
pub fn inputs(
    gen_: &SparseGen,
    hot: &HashMap<u64, u32>,
    workers: usize,
    libra: bool,
    float: bool,
) -> Result<Inputs, LibraError> {
    (0..workers)
        .map(|w| {
            let mut h = Vec::new();
            let mut c = Vec::new();
            for (k, v) in gen_.gradient(w, 2_000_000) {
                match hot.get(&k) {
                    Some(r) if libra => h.push((
                        *r,
                        if float {
                            (v as f32 * 2f32.powi(-20)).to_bits() as i32
                        } else {
                            v
                        },
                    )),
                    _ => c.push((
                        u32::try_from(k)
                            .map_err(|_| LibraError::Config("a key does not fit 32 bits".into()))?,
                        v,
                    )),
                }
            }
            Ok((h, c))
        })
        .collect()
}

fn link() -> LinkConfig {
    LinkConfig {
        rate_bps: 100e9,
        latency_ns: 500,
        mtu: 9216,
        queue_bytes: 4 << 20,
        framing_bytes: 24,
    }
}

/// How long an iteration may take (virtual ns) before a run gives up.
const LIMIT_NS: u64 = 120_000_000_000;

/// The `sim` fabric of a run: the star around the switch on [`link`], `costs` per node.
fn sim(cfg: &Config, costs: Vec<NodeConfig>, faults: Faults) -> Sim {
    Sim {
        costs,
        faults,
        ..Sim::new(link(), cfg.switch())
    }
}

/// Outcome of one simulated iteration.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub duration_ns: u64,
    pub wrong: usize,
    pub finished: bool,
    pub retransmissions: u64,
    pub recirculations_per_packet: f64,
    pub duplicates_ignored: u64,
    /// Per-frame costs charged (worker, server), ns.
    pub costs: (u64, u64),
    /// The fabric that ran (its report's label).
    pub fabric: &'static str,
}

/// Run one iteration on `sim` with the given per-frame costs (worker, server).
pub fn run_sim(
    cfg: &Config,
    inputs: &Inputs,
    hot_params: usize,
    placement: Option<crate::layout::Placement>,
    costs: (u64, u64),
    faults: Faults,
) -> Result<Outcome, LibraError> {
    let nodes = proto::build(cfg, inputs, hot_params, placement);
    let n = nodes.len();
    let mut nc = vec![
        NodeConfig {
            rx_cost_ns: costs.0,
            tx_cost_ns: costs.0
        };
        n
    ];
    nc[cfg.workers] = NodeConfig {
        rx_cost_ns: 0,
        tx_cost_ns: 0,
    };
    nc[cfg.workers + 1] = NodeConfig {
        rx_cost_ns: costs.1,
        tx_cost_ns: costs.1,
    };
    let (nodes, rep) = run_on(&mut sim(cfg, nc, faults), nodes, cfg.workers, LIMIT_NS)?;
    let wrong = proto::check(&nodes, inputs);
    let mut start = u64::MAX;
    let mut end = 0;
    let mut retx = 0;
    let mut rpp = 0.0;
    let mut dups = 0;
    for node in &nodes {
        match node {
            Node::Worker(wk) => {
                start = start.min(wk.stats.start_ns);
                end = end.max(wk.stats.end_ns);
                retx += wk.stats.retransmissions;
            }
            Node::Switch(s) => {
                rpp = s.pipeline.recirculations_per_packet();
                dups = s.stats.duplicates_ignored;
            }
            Node::Other(_) => {}
        }
    }
    Ok(Outcome {
        duration_ns: end.saturating_sub(start).max(1),
        wrong,
        finished: rep.finished,
        retransmissions: retx,
        recirculations_per_packet: rpp,
        duplicates_ignored: dups,
        costs,
        fabric: rep.fabric,
    })
}

/// One role's declared costs (a host profile's entries): ns per frame received or sent, ns per
/// (key, value) pair parsed or serialized, and the threads (cores) that share the work.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OpCosts {
    pub frame_ns: f64,
    pub pair_ns: f64,
    pub threads: u32,
}

impl OpCosts {
    /// Checked: finite costs of at least 0 and at least one whole thread.
    pub fn new(frame_ns: f64, pair_ns: f64, threads: f64) -> Result<OpCosts, LibraError> {
        let ok = |x: f64| x.is_finite() && x >= 0.0;
        if !(ok(frame_ns) && ok(pair_ns) && threads >= 1.0 && threads.fract() == 0.0) {
            return Err(LibraError::Config(format!(
                "a host cost is a finite number of at least 0 ns and a role at least one thread, not {frame_ns} ns a frame, {pair_ns} ns a pair on {threads} threads"
            )));
        }
        Ok(OpCosts {
            frame_ns,
            pair_ns,
            threads: threads as u32,
        })
    }
}

/// The coefficient table of the Libra crate's hosts: the workers' and the server's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostCosts {
    pub worker: OpCosts,
    pub server: OpCosts,
}

/// The operations one run's hosts did: the frames every worker received and sent and the
/// pairs those frames carried, and the same for the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OpCounts {
    pub worker_frames: u64,
    pub worker_pairs: u64,
    pub server_frames: u64,
    pub server_pairs: u64,
}

impl OpCounts {
    /// The cost per frame (worker, server) the fabric charges: a role's frames and pairs at the
    /// table's costs, over its frames and threads, in whole ns (rounded).
    pub fn per_frame_ns(&self, c: &HostCosts) -> (u64, u64) {
        let per = |frames: u64, pairs: u64, k: &OpCosts| -> u64 {
            if frames == 0 {
                return 0;
            }
            let ns = (frames as f64 * k.frame_ns + pairs as f64 * k.pair_ns)
                / frames as f64
                / f64::from(k.threads.max(1));
            ns.round() as u64
        };
        (
            per(self.worker_frames, self.worker_pairs, &c.worker),
            per(self.server_frames, self.server_pairs, &c.server),
        )
    }
}

/// The pairs a Libra frame of `len` bytes carries (its length is the headers and 8 bytes a
/// pair, [`crate::wire::frame_len`]).
fn pairs_in(len: usize) -> u64 {
    (len.saturating_sub(wire::frame_len(0)) / inabench_wire::ina::libra::PAIR_LEN) as u64
}

/// An endpoint that counts the frames it handles and the pairs they carry.
struct Counted<E> {
    inner: E,
    frames: u64,
    pairs: u64,
}

impl<E: Endpoint> Endpoint for Counted<E> {
    fn id(&self) -> inabench_fabric::NodeId {
        self.inner.id()
    }
    fn handle_packet(
        &mut self,
        now: inabench_fabric::Nanos,
        from: inabench_fabric::NodeId,
        frame: &[u8],
    ) {
        self.frames += 1;
        self.pairs += pairs_in(frame.len());
        self.inner.handle_packet(now, from, frame)
    }
    fn poll_transmit(&mut self, now: inabench_fabric::Nanos) -> Option<inabench_fabric::Transmit> {
        let t = self.inner.poll_transmit(now)?;
        self.frames += 1;
        self.pairs += pairs_in(t.bytes.len());
        Some(t)
    }
    fn poll_timeout(&self) -> Option<inabench_fabric::Nanos> {
        self.inner.poll_timeout()
    }
    fn handle_timeout(&mut self, now: inabench_fabric::Nanos) {
        self.inner.handle_timeout(now)
    }
    fn is_done(&self) -> bool {
        self.inner.is_done()
    }
}

/// The operations of one lossless iteration with no host cost (virtual time: the counts are a
/// function of the configuration and the inputs alone). `None` if it did not finish.
pub fn count_ops(
    cfg: &Config,
    inputs: &Inputs,
    hot_params: usize,
    placement: Option<crate::layout::Placement>,
) -> Result<Option<OpCounts>, LibraError> {
    let nodes: Vec<Counted<Node>> = proto::build(cfg, inputs, hot_params, placement)
        .into_iter()
        .map(|inner| Counted {
            inner,
            frames: 0,
            pairs: 0,
        })
        .collect();
    let w = cfg.workers;
    let (nodes, rep) = run_on(
        &mut sim(cfg, Vec::new(), Faults::default()),
        nodes,
        w,
        LIMIT_NS,
    )?;
    if !rep.finished {
        return Ok(None);
    }
    let mut c = OpCounts::default();
    for t in &nodes[..w] {
        c.worker_frames += t.frames;
        c.worker_pairs += t.pairs;
    }
    let s = &nodes[w + 1];
    c.server_frames = s.frames;
    c.server_pairs = s.pairs;
    Ok(Some(c))
}

/// One measurement of the coefficient table on this machine (`inabench calibrate` only; no run
/// calls it): the CPU time our worker and server code take (the suite's measuring rule,
/// [`inabench_fabric::wrap`]: the wall time inside the endpoint calls times the thread's on-CPU
/// share of the batch of events they ran in, less the clock's own cost per call) in two
/// lossless iterations of the same inputs with no host cost, one with `cap_a` and one with
/// `cap_b` pairs a server packet: the pairs are the same and the frames differ, so per role
/// `cpu = frames x frame_ns + pairs x pair_ns` gives both coefficients (`frame_ns` from the
/// difference, `pair_ns` from the rest; a negative solution, noise, reads 0). The inputs:
/// PS-lite's configuration (every pair through the server) of `inputs`. Returns the worker's
/// and the server's (frame_ns, pair_ns).
///
/// Panics only if the sim fabric refuses the nodes, which it does only for node ids that are
/// not their positions, and [`proto::build`] numbers them so.
pub fn measure_coefficients(
    inputs: &Inputs,
    cap_a: usize,
    cap_b: usize,
) -> ((f64, f64), (f64, f64)) {
    let run = |cap: usize| -> Result<[(f64, f64, f64); 2], LibraError> {
        let cfg = Config {
            workers: inputs.len(),
            libra: false,
            window: 64,
            rto_ns: 200_000,
            hot_cap: 24,
            cold_cap: cap,
            dedup_all: false,
            float: false,
        };
        let nodes: Vec<Timed<Counted<Node>>> = proto::build(&cfg, inputs, 1, None)
            .into_iter()
            .map(|inner| {
                Timed::new(
                    Counted {
                        inner,
                        frames: 0,
                        pairs: 0,
                    },
                    true,
                )
            })
            .collect();
        let w = cfg.workers;
        let view = |t: &Timed<Counted<Node>>| Some(t.stats());
        let mut meter = CpuMeter::new(256);
        // the meter counts its batches by the fabric's events (Sim::run_observed)
        let until = Until::workers(w, nodes.len(), LIMIT_NS);
        let (nodes, _) =
            sim(&cfg, Vec::new(), Faults::default())
                .run_observed(nodes, &until, |_, ns| meter.observe(ns, view))?;
        meter.finish(&nodes, view);
        let mut wk = (0.0, 0.0, 0.0);
        for (i, t) in nodes[..w].iter().enumerate() {
            wk.0 += meter.cpu_ns(i) as f64;
            wk.1 += t.inner.frames as f64;
            wk.2 += t.inner.pairs as f64;
        }
        let s = &nodes[w + 1].inner;
        Ok([
            wk,
            (meter.cpu_ns(w + 1) as f64, s.frames as f64, s.pairs as f64),
        ])
    };
    let (a, b) = match (run(cap_a), run(cap_b)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => panic!("proto::build's nodes are numbered 0..n: {e}"),
    };
    let solve = |(ca, fa, pa): (f64, f64, f64), (cb, fb, pb): (f64, f64, f64)| -> (f64, f64) {
        if fb == fa || pa + pb == 0.0 {
            return (0.0, 0.0);
        }
        // the pairs are the same in both runs (to the pair): the difference is frames alone
        let frame = ((cb - ca) / (fb - fa)).max(0.0);
        let pair = ((ca + cb - frame * (fa + fb)) / (pa + pb)).max(0.0);
        (frame, pair)
    };
    (solve(a[0], b[0]), solve(a[1], b[1]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each worker pushes `n` distinct keys (a shared range and its own), values by worker.
    fn inputs(workers: usize, n: u32) -> Inputs {
        (0..workers)
            .map(|w| {
                let cold = (0..n)
                    .map(|k| {
                        let key = if k % 2 == 0 {
                            k
                        } else {
                            1_000_000 * (w as u32 + 1) + k
                        };
                        (key, (w as i32 + 1) * (k as i32 % 97 - 48))
                    })
                    .collect();
                (Vec::new(), cold)
            })
            .collect()
    }

    fn ps_lite(workers: usize, cold_cap: usize) -> Config {
        Config {
            workers,
            libra: false,
            window: 16,
            rto_ns: 200_000,
            hot_cap: 24,
            cold_cap,
            dedup_all: false,
            float: false,
        }
    }

    #[test]
    fn the_counts_are_every_frame_and_pair_the_hosts_handle() {
        // PS-lite, lossless: a worker sends its pushes (ceil(n / cap) frames of its n pairs) and
        // a Done, gets an ACK for each, gets its keys' sums back (ceil(n / cap) frames of n
        // pairs) and acknowledges each
        let (workers, n, cap) = (4, 300u32, 128);
        let c = count_ops(&ps_lite(workers, cap), &inputs(workers, n), 1, None)
            .unwrap()
            .unwrap();
        let pkts = u64::from(n).div_ceil(cap as u64);
        let w = workers as u64;
        assert_eq!(c.worker_frames, w * ((pkts + 1) * 2 + pkts * 2));
        assert_eq!(c.worker_pairs, w * 2 * u64::from(n));
        // the server: the pushes and Dones in, their ACKs and the results out; the workers' ACKs
        // of their results are still on the wire when the last worker holds all its results
        // (the iteration's end), so the server handles none of them within the iteration
        assert_eq!(c.server_frames, w * ((pkts + 1) * 2 + pkts));
        assert_eq!(c.server_pairs, c.worker_pairs);
        // the same inputs give the same counts (virtual time, no clock read)
        assert_eq!(
            count_ops(&ps_lite(workers, cap), &inputs(workers, n), 1, None).unwrap(),
            Some(c)
        );
    }

    #[test]
    fn one_table_prices_both_roles_by_what_they_do() {
        let c = OpCounts {
            worker_frames: 10,
            worker_pairs: 500,
            server_frames: 4,
            server_pairs: 1_000,
        };
        let t = HostCosts {
            worker: OpCosts::new(100.0, 2.0, 1.0).unwrap(),
            server: OpCosts::new(300.0, 10.0, 2.0).unwrap(),
        };
        // worker (10 x 100 + 500 x 2) / 10 = 200; server (4 x 300 + 1000 x 10) / 4 / 2 = 1400
        assert_eq!(c.per_frame_ns(&t), (200, 1400));
        // more pairs a frame cost more a frame at the same table
        let denser = OpCounts {
            server_pairs: 2_000,
            ..c
        };
        assert_eq!(denser.per_frame_ns(&t).1, 2650);
        assert!(OpCosts::new(-1.0, 0.0, 1.0).is_err());
        assert!(OpCosts::new(1.0, f64::NAN, 1.0).is_err());
        assert!(OpCosts::new(1.0, 1.0, 0.0).is_err());
    }
}
