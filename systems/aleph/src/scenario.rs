//! One training iteration of BytePS (parameter servers), Horovod (ring all-reduce) and ALEPH
//! (M-WCHA clusters, then the PSs) on a data-centre topology, as in ALEPH's Sec. 6.4.
//!
//! Setup (Sec. 6.4 (1)): servers with `nic_gbps` NICs; each worker's available bandwidth is
//! ratio x NIC with ratio ~ Normal(`ratio_mean`, `sigma`) clipped to [`ratio_min`, `ratio_max`]
//! (values outside the range are set to its ends); `ps_count` PSs offer `ps_gbps` each; every
//! worker moves `gradient_mb` per iteration. Workers occupy servers 0..n-1 (edge switch by edge
//! switch), the PSs the servers after them. A host's available bandwidth is the capacity of its
//! access links, in both directions.
//!
//! Routing: `Spray` (default) splits every flow evenly over all equal-cost shortest paths, the
//! ideal load balancing under which the paper's "non-blocking" network never limits a flow;
//! `Ecmp` pins each flow to one path chosen by a seeded hash, where hash collisions can
//! overload a link even in a non-blocking fabric.
//!
//! Traffic (flow level, max-min fair, push and pull overlapped as Sec. 3.1 says the systems do):
//! - BytePS: each worker exchanges G/q with each of the q PSs, push over worker -> PS and pull
//!   over PS -> worker at the same rate; the worker's gradient is one coupled flow (its parts to
//!   the q PSs advance together, as a worker's segments do).
//! - ALEPH: a cluster is one coupled flow of G: each member pushes to its aggregator and receives
//!   the aggregated result forwarded back (Sec. 5.4), and the aggregator exchanges the cluster's
//!   aggregate with the PSs, split in proportion to their bandwidth (Sec. 7), all at one rate.
//!   The aggregator's access links therefore carry (1 + k) x the rate, the constraint
//!   (1 + g_w) b <= B_w of Sec. 4.1 is built from. Streaming aggregation forces the coupling: an
//!   aggregator can forward to the PS only what its members have delivered (independent per-flow
//!   fairness would let its PS flows run ahead and starve its members' share of its link).
//!   Workers left to send directly are clusters of one.
//!
//! The iteration ends when the last flow completes.
//! - Horovod: ring all-reduce over the workers in server order, 2(n-1) synchronous steps in which
//!   every worker sends G/n to its successor.
//!
//! Metrics of the iteration (T = time until the last flow completes):
//! - worker bandwidth usage = bytes sent by all workers / T; PS usage = bytes received by all
//!   PSs / T (what iftop averages over an iteration);
//! - communication overhead = Σ over flows of bytes x links crossed (push and pull);
//! - gradient hops: see [`gradient_hops`].

use crate::AlephError;
use crate::flowsim::{FlowSim, Stats};
use crate::mwcha::{self, Clustering, Instance, Options};
use crate::topo::{Kind, Topology};
use inabench_rng::SplitMix64;

/// Inputs of a scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct Setup {
    pub workers: usize,
    pub ps_count: usize,
    pub ps_gbps: f64,
    pub nic_gbps: f64,
    pub ratio_mean: f64,
    pub sigma: f64,
    pub ratio_min: f64,
    pub ratio_max: f64,
    pub gradient_mb: f64,
    pub topology: Kind,
    /// c: computing requirement per aggregated worker, % of a core.
    pub cpu_per_worker_pct: f64,
    /// C_w: computing resource every worker offers, % of a core.
    pub cpu_capacity_pct: f64,
    pub routing: Routing,
    /// Which workers may cluster (M-WCHA's graph G).
    pub graph: WorkerGraph,
    pub seed: u64,
}

/// The worker graph G of M-WCHA (Sec. 4.1): the paper does not say how it builds it for Sec.
/// 6.4; its "one gradient hop" (Sec. 6.4 (3)) suggests workers under one edge switch, while its
/// PS usage at sigma 0.3 needs clusters across edge switches (aleph-fig13's finding).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerGraph {
    /// Workers under the same edge (leaf) switch are adjacent (one switch between them).
    Edge,
    /// Every pair of workers is adjacent.
    All,
}

impl WorkerGraph {
    pub fn parse(s: &str) -> Result<WorkerGraph, AlephError> {
        match s {
            "edge" => Ok(WorkerGraph::Edge),
            "all" => Ok(WorkerGraph::All),
            other => Err(AlephError::Invalid(format!(
                "graph `{other}` is not one of edge, all"
            ))),
        }
    }
}

/// How flows use equal-cost paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Routing {
    Spray,
    Ecmp,
}

impl Routing {
    pub fn parse(s: &str) -> Result<Routing, AlephError> {
        match s {
            "spray" => Ok(Routing::Spray),
            "ecmp" => Ok(Routing::Ecmp),
            other => Err(AlephError::Invalid(format!(
                "routing `{other}` is not one of spray, ecmp"
            ))),
        }
    }
}

impl Setup {
    /// The paper's defaults for Sec. 6.4 (100 workers, 10 PSs, fat-tree, sigma 0.1).
    pub fn paper() -> Setup {
        Setup {
            workers: 100,
            ps_count: 10,
            ps_gbps: 10.0,
            nic_gbps: 10.0,
            ratio_mean: 0.5,
            sigma: 0.1,
            ratio_min: 0.1,
            ratio_max: 0.9,
            gradient_mb: 97.0,
            topology: Kind::FatTree,
            cpu_per_worker_pct: 10.0,
            cpu_capacity_pct: 100.0,
            routing: Routing::Spray,
            graph: WorkerGraph::Edge,
            seed: 1,
        }
    }

    pub fn gradient_bytes(&self) -> f64 {
        self.gradient_mb * 1e6
    }
}

/// The three systems.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum System {
    BytePs,
    Horovod,
    Aleph,
}

impl System {
    pub fn parse(s: &str) -> Result<System, AlephError> {
        match s {
            "byteps" => Ok(System::BytePs),
            "horovod" => Ok(System::Horovod),
            "aleph" => Ok(System::Aleph),
            other => Err(AlephError::Invalid(format!(
                "system `{other}` is not one of byteps, horovod, aleph"
            ))),
        }
    }
}

/// A built scenario: topology with host rates, worker bandwidths, placement, worker graph.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub setup: Setup,
    pub topo: Topology,
    /// Available bandwidth of each worker, bytes per second.
    pub worker_rate: Vec<f64>,
    pub worker_host: Vec<usize>,
    pub ps_host: Vec<usize>,
    pub ps_rate: Vec<f64>,
    pub instance: Instance,
}

/// A normal draw (Box-Muller) from two uniforms of `rng`.
pub fn normal(rng: &mut SplitMix64, mean: f64, sd: f64) -> f64 {
    let u1 = 1.0 - rng.next_f64(); // (0, 1]
    let u2 = rng.next_f64();
    mean + sd * (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

/// Bandwidth ratios of `n` workers: Normal(mean, sd) clipped to [lo, hi].
pub fn draw_ratios(seed: u64, n: usize, mean: f64, sd: f64, lo: f64, hi: f64) -> Vec<f64> {
    let mut rng = SplitMix64::derive(seed, "aleph-bandwidth");
    (0..n)
        .map(|_| normal(&mut rng, mean, sd).clamp(lo, hi))
        .collect()
}

fn gbps(x: f64) -> f64 {
    x * 1e9 / 8.0
}

impl Scenario {
    pub fn build(setup: &Setup) -> Result<Scenario, AlephError> {
        let s = setup;
        if s.workers == 0 || s.ps_count == 0 {
            return Err(AlephError::Invalid(
                "a scenario needs at least one worker and one PS".into(),
            ));
        }
        if !(s.ratio_min > 0.0 && s.ratio_min <= s.ratio_max && s.ratio_max <= 1.0) {
            return Err(AlephError::Invalid(format!(
                "ratio range [{}, {}] must lie in (0, 1]",
                s.ratio_min, s.ratio_max
            )));
        }
        if !(s.sigma.is_finite() && s.sigma >= 0.0) {
            return Err(AlephError::Invalid(format!(
                "sigma must be non-negative (got {})",
                s.sigma
            )));
        }
        for (name, v) in [
            ("nic_gbps", s.nic_gbps),
            ("ps_gbps", s.ps_gbps),
            ("gradient_mb", s.gradient_mb),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(AlephError::Invalid(format!(
                    "{name} must be positive (got {v})"
                )));
            }
        }
        let mut topo = Topology::paper(s.topology, gbps(s.nic_gbps))?;
        let need = s.workers + s.ps_count;
        if need > topo.hosts() {
            return Err(AlephError::Invalid(format!(
                "{} workers and {} PSs need {need} servers; the topology has {}",
                s.workers,
                s.ps_count,
                topo.hosts()
            )));
        }
        let ratios = draw_ratios(
            s.seed,
            s.workers,
            s.ratio_mean,
            s.sigma,
            s.ratio_min,
            s.ratio_max,
        );
        let worker_rate: Vec<f64> = ratios.iter().map(|r| gbps(r * s.nic_gbps)).collect();
        let worker_host: Vec<usize> = (0..s.workers).collect();
        let ps_host: Vec<usize> = (s.workers..need).collect();
        let ps_rate = vec![gbps(s.ps_gbps.min(s.nic_gbps)); s.ps_count];
        for (w, &h) in worker_host.iter().enumerate() {
            topo.set_host_rate(h, worker_rate[w], worker_rate[w])?;
        }
        for (p, &h) in ps_host.iter().enumerate() {
            topo.set_host_rate(h, ps_rate[p], ps_rate[p])?;
        }
        // G joins workers under the same edge (leaf) switch (one switch between them), or all
        let mut adj = vec![Vec::new(); s.workers];
        for a in 0..s.workers {
            for b in 0..s.workers {
                let joined = s.graph == WorkerGraph::All
                    || topo.edge_of(worker_host[a]) == topo.edge_of(worker_host[b]);
                if a != b && joined {
                    adj[a].push(b);
                }
            }
        }
        let instance = Instance::new(
            worker_rate.clone(),
            vec![s.cpu_capacity_pct; s.workers],
            s.cpu_per_worker_pct,
            adj,
        )?;
        Ok(Scenario {
            setup: s.clone(),
            topo,
            worker_rate,
            worker_host,
            ps_host,
            ps_rate,
            instance,
        })
    }

    /// M-WCHA on this scenario's worker graph, with its own seeded coin flips.
    pub fn cluster(&self) -> Clustering {
        let mut rng = SplitMix64::derive(self.setup.seed, "aleph-mwcha");
        mwcha::mwcha(&self.instance, &Options::default(), &mut rng)
    }

    fn hash(&self, a: usize, b: usize) -> u64 {
        let mut r = SplitMix64::new(
            self.setup.seed ^ ((a as u64) << 32 | b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        );
        r.next_u64()
    }

    fn path(&self, a: usize, b: usize) -> Result<Vec<u32>, AlephError> {
        self.topo.path(a, b, self.hash(a, b))
    }

    /// The weighted links a flow from a to b loads.
    fn route(&self, a: usize, b: usize) -> Result<Vec<(u32, f64)>, AlephError> {
        match self.setup.routing {
            Routing::Spray => self.topo.spray(a, b),
            Routing::Ecmp => Ok(self.path(a, b)?.into_iter().map(|l| (l, 1.0)).collect()),
        }
    }

    /// The PS shares of a gradient, by PS bandwidth (Sec. 7).
    fn ps_shares(&self) -> Vec<f64> {
        let total: f64 = self.ps_rate.iter().sum();
        self.ps_rate.iter().map(|r| r / total).collect()
    }
}

/// What one simulated iteration measured.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// seconds
    pub iteration_time: f64,
    pub worker_bytes_sent: f64,
    pub ps_bytes_received: f64,
    /// bytes x links, push and pull
    pub overhead_bytes_links: f64,
    /// bytes x links of the push direction only (workers towards the PSs; for ring all-reduce
    /// the reduce-scatter phase), the other counting rule the paper's numbers may follow
    pub overhead_push_bytes_links: f64,
    pub stats: Stats,
    pub flows: usize,
}

impl Outcome {
    pub fn worker_usage_gbps(&self) -> f64 {
        self.worker_bytes_sent * 8.0 / self.iteration_time / 1e9
    }
    pub fn ps_usage_gbps(&self) -> f64 {
        self.ps_bytes_received * 8.0 / self.iteration_time / 1e9
    }
}

struct Builder<'a> {
    sc: &'a Scenario,
    sim: FlowSim,
    out: Outcome,
}

impl<'a> Builder<'a> {
    fn new(sc: &'a Scenario) -> Result<Builder<'a>, AlephError> {
        let caps = sc.topo.links().iter().map(|l| l.capacity).collect();
        Ok(Builder {
            sc,
            sim: FlowSim::new(caps)?,
            out: Outcome::default(),
        })
    }

    /// One coupled flow of `bytes`: every part (a, b, share) pushes share x bytes from host a to
    /// host b and pulls the same back over b -> a, all parts at one rate.
    fn coupled(&mut self, parts: &[(usize, usize, f64)], bytes: f64) -> Result<(), AlephError> {
        let mut res = Vec::new();
        for &(a, b, share) in parts {
            let push = self.sc.route(a, b)?;
            self.out.overhead_push_bytes_links +=
                bytes * share * push.iter().map(|(_, w)| w).sum::<f64>();
            for (l, w) in push.into_iter().chain(self.sc.route(b, a)?) {
                res.push((l, w * share));
            }
        }
        self.out.overhead_bytes_links += bytes * res.iter().map(|(_, w)| w).sum::<f64>();
        self.sim.add_weighted_flow(res, bytes)?;
        self.out.flows += 1;
        Ok(())
    }

    /// A one-way transfer; `push` counts it in the push-only overhead too.
    fn send(&mut self, a: usize, b: usize, bytes: f64, push: bool) -> Result<(), AlephError> {
        let res = self.sc.route(a, b)?;
        let crossed = bytes * res.iter().map(|(_, w)| w).sum::<f64>();
        self.out.overhead_bytes_links += crossed;
        if push {
            self.out.overhead_push_bytes_links += crossed;
        }
        self.sim.add_weighted_flow(res, bytes)?;
        self.out.flows += 1;
        Ok(())
    }

    fn finish(mut self) -> Result<Outcome, AlephError> {
        self.out.iteration_time = self.sim.run()?;
        self.out.stats = self.sim.stats();
        Ok(self.out)
    }
}

/// Simulate one iteration of `system`. ALEPH needs the clustering.
pub fn simulate(
    sc: &Scenario,
    system: System,
    clustering: Option<&Clustering>,
) -> Result<Outcome, AlephError> {
    let g = sc.setup.gradient_bytes();
    let mut b = Builder::new(sc)?;
    match system {
        System::BytePs => {
            let shares = sc.ps_shares();
            for &wh in &sc.worker_host {
                let parts: Vec<(usize, usize, f64)> = sc
                    .ps_host
                    .iter()
                    .zip(&shares)
                    .map(|(&ph, &s)| (wh, ph, s))
                    .collect();
                b.coupled(&parts, g)?;
                b.out.worker_bytes_sent += g;
                b.out.ps_bytes_received += g;
            }
            b.finish()
        }
        System::Aleph => {
            let c = clustering.ok_or_else(|| {
                AlephError::Invalid("ALEPH's simulation needs a clustering".into())
            })?;
            let shares = sc.ps_shares();
            for cl in &c.clusters {
                let ah = *sc.worker_host.get(cl.aggregator).ok_or_else(|| {
                    AlephError::Invalid(format!("aggregator {} is not a worker", cl.aggregator))
                })?;
                let mut parts = Vec::new();
                for &m in &cl.members {
                    let mh = *sc.worker_host.get(m).ok_or_else(|| {
                        AlephError::Invalid(format!("member {m} is not a worker"))
                    })?;
                    parts.push((mh, ah, 1.0));
                    // the member pushes G; the aggregator forwards G back
                    b.out.worker_bytes_sent += 2.0 * g;
                }
                for (&ph, &s) in sc.ps_host.iter().zip(&shares) {
                    parts.push((ah, ph, s));
                }
                b.coupled(&parts, g)?;
                b.out.worker_bytes_sent += g;
                b.out.ps_bytes_received += g;
            }
            b.finish()
        }
        System::Horovod => {
            let n = sc.worker_host.len();
            if n < 2 {
                return b.finish();
            }
            let chunk = g / n as f64;
            for step in 0..2 * (n - 1) {
                for i in 0..n {
                    // reduce-scatter (the first n - 1 steps) is the ring's push
                    b.send(
                        sc.worker_host[i],
                        sc.worker_host[(i + 1) % n],
                        chunk,
                        step < n - 1,
                    )?;
                    b.out.worker_bytes_sent += chunk;
                }
                b.sim.run()?;
            }
            b.finish()
        }
    }
}

/// Mean over workers of the switches a worker's gradient passes through before it is first
/// aggregated (the reading of Sec. 6.1.2 the spec explains):
/// - BytePS: to the PSs (weighted by each PS's share);
/// - ALEPH: a member to its aggregator; an aggregator with members 0 (its gradient is
///   aggregated where it is); a worker that aggregates nobody, to the PSs;
/// - Horovod: a chunk is complete after n-1 ring steps, so it passes the switches of n-1
///   consecutive ring links; averaged over the n starting points.
pub fn gradient_hops(
    sc: &Scenario,
    system: System,
    clustering: Option<&Clustering>,
) -> Result<f64, AlephError> {
    let n = sc.worker_host.len();
    let shares = sc.ps_shares();
    let to_ps = |h: usize| -> Result<f64, AlephError> {
        let mut s = 0.0;
        for (p, &ph) in sc.ps_host.iter().enumerate() {
            s += shares[p] * Topology::switches(&sc.path(h, ph)?) as f64;
        }
        Ok(s)
    };
    match system {
        System::BytePs => {
            let mut s = 0.0;
            for &h in &sc.worker_host {
                s += to_ps(h)?;
            }
            Ok(s / n as f64)
        }
        System::Aleph => {
            let c = clustering
                .ok_or_else(|| AlephError::Invalid("ALEPH's hops need a clustering".into()))?;
            let mut s = 0.0;
            for cl in &c.clusters {
                let ah = *sc.worker_host.get(cl.aggregator).ok_or_else(|| {
                    AlephError::Invalid(format!("aggregator {} is not a worker", cl.aggregator))
                })?;
                if cl.members.is_empty() {
                    s += to_ps(ah)?;
                }
                for &m in &cl.members {
                    let mh = *sc.worker_host.get(m).ok_or_else(|| {
                        AlephError::Invalid(format!("member {m} is not a worker"))
                    })?;
                    s += Topology::switches(&sc.path(mh, ah)?) as f64;
                }
            }
            Ok(s / n as f64)
        }
        System::Horovod => {
            if n < 2 {
                return Ok(0.0);
            }
            let link: Vec<f64> = (0..n)
                .map(|i| {
                    sc.path(sc.worker_host[i], sc.worker_host[(i + 1) % n])
                        .map(|p| Topology::switches(&p) as f64)
                })
                .collect::<Result<_, _>>()?;
            let ring: f64 = link.iter().sum();
            // each start skips exactly one ring link; over all starts every link is skipped once
            Ok((n as f64 * ring - ring) / n as f64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(workers: usize, sigma: f64) -> Setup {
        Setup {
            workers,
            sigma,
            ..Setup::paper()
        }
    }

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * a.abs().max(b.abs())
    }

    #[test]
    fn ring_allreduce_time_is_the_closed_form() {
        // homogeneous workers under one edge switch (sigma = 0): every step moves G/n at B
        for n in [2usize, 4, 10] {
            let sc = Scenario::build(&setup(n, 0.0)).expect("scenario");
            let o = simulate(&sc, System::Horovod, None).expect("sim");
            let b = 0.5 * 10e9 / 8.0;
            let expect = 2.0 * (n as f64 - 1.0) / n as f64 * 97e6 / b;
            assert!(
                close(o.iteration_time, expect, 1e-9),
                "n={n}: {} vs {expect}",
                o.iteration_time
            );
        }
        // across edge switches too (the non-blocking fabric is never the bottleneck)
        let sc = Scenario::build(&setup(100, 0.0)).expect("scenario");
        let o = simulate(&sc, System::Horovod, None).expect("sim");
        let expect = 2.0 * 99.0 / 100.0 * 97e6 / (0.5 * 10e9 / 8.0);
        assert!(close(o.iteration_time, expect, 1e-9));
    }

    #[test]
    fn byteps_is_bounded_by_the_ps_capacity() {
        // 100 workers at 5 Gbps, 10 PSs x 10 Gbps: each worker gets 1 Gbps; T = 8 x 97 MB / 1 Gbps
        let sc = Scenario::build(&setup(100, 0.0)).expect("scenario");
        let o = simulate(&sc, System::BytePs, None).expect("sim");
        assert!(
            close(o.iteration_time, 97e6 * 8.0 / 1e9, 1e-9),
            "{}",
            o.iteration_time
        );
        assert!(close(o.worker_usage_gbps(), 100.0, 1e-9));
        assert!(close(o.ps_usage_gbps(), 100.0, 1e-9));
    }

    #[test]
    fn per_flow_ecmp_can_collide_in_a_non_blocking_fabric() {
        // the same BytePS iteration with hashed single paths is never faster than sprayed
        let spray = Scenario::build(&setup(100, 0.0)).expect("scenario");
        let ecmp = Scenario::build(&Setup {
            routing: Routing::Ecmp,
            ..setup(100, 0.0)
        })
        .expect("scenario");
        let a = simulate(&spray, System::BytePs, None).expect("sim");
        let b = simulate(&ecmp, System::BytePs, None).expect("sim");
        assert!(b.iteration_time >= a.iteration_time * (1.0 - 1e-9));
        assert!(close(a.overhead_bytes_links, b.overhead_bytes_links, 1e-9));
    }

    #[test]
    fn aleph_degenerates_to_a_ps_with_equal_bandwidths() {
        let sc = Scenario::build(&setup(100, 0.0)).expect("scenario");
        let c = sc.cluster();
        assert_eq!(c.aggregators(), 0);
        let a = simulate(&sc, System::Aleph, Some(&c)).expect("aleph");
        let b = simulate(&sc, System::BytePs, None).expect("byteps");
        assert!(close(a.iteration_time, b.iteration_time, 1e-9));
        assert!(close(a.overhead_bytes_links, b.overhead_bytes_links, 1e-9));
    }

    #[test]
    fn a_cluster_runs_at_its_aggregators_share() {
        // 10 workers under one edge switch; worker 0 aggregates 1..=4 at 5 Gbps: the cluster's
        // rate is 5/(1+4) = 1 Gbps on the aggregator's links, so T = 8 x 97 MB / 1 Gbps
        let mut sc = Scenario::build(&setup(10, 0.0)).expect("scenario");
        sc.setup.gradient_mb = 97.0;
        let c = Clustering {
            clusters: std::iter::once(mwcha::Cluster {
                aggregator: 0,
                members: vec![1, 2, 3, 4],
                direct: false,
            })
            .chain((5..10).map(|w| mwcha::Cluster {
                aggregator: w,
                members: vec![],
                direct: true,
            }))
            .collect(),
            ..Default::default()
        };
        let o = simulate(&sc, System::Aleph, Some(&c)).expect("sim");
        assert!(
            close(o.iteration_time, 97e6 * 8.0 / 1e9, 1e-9),
            "{}",
            o.iteration_time
        );
        // 6 senders reach the PSs; workers send 4 G (members) + 5 G (aggregator) + 5 G (direct)
        assert!(close(o.ps_bytes_received, 6.0 * 97e6, 1e-12));
        assert!(close(o.worker_bytes_sent, 14.0 * 97e6, 1e-12));
    }

    #[test]
    fn hops_of_ten_workers_under_one_edge_switch() {
        let sc = Scenario::build(&setup(10, 0.3)).expect("scenario");
        assert!(close(
            gradient_hops(&sc, System::Horovod, None).expect("h"),
            9.0,
            1e-12
        ));
        assert!(close(
            gradient_hops(&sc, System::BytePs, None).expect("b"),
            3.0,
            1e-12
        ));
        let c = sc.cluster();
        let a = gradient_hops(&sc, System::Aleph, Some(&c)).expect("a");
        assert!(a < 3.0, "{a}");
    }

    #[test]
    fn overhead_counts_bytes_times_links() {
        // BytePS with 10 workers under edge 0 and PSs under edge 1 of the same pod: 4 links each
        // way, push and pull: 8 links x 97 MB per worker
        let sc = Scenario::build(&setup(10, 0.0)).expect("scenario");
        let o = simulate(&sc, System::BytePs, None).expect("sim");
        assert!(close(o.overhead_bytes_links, 10.0 * 8.0 * 97e6, 1e-12));
        // the ring: 2(n-1) steps of n chunks of G/n over 2 links
        let h = simulate(&sc, System::Horovod, None).expect("sim");
        assert!(close(h.overhead_bytes_links, 18.0 * 97e6 * 2.0, 1e-12));
        // push only: half of each (BytePS's pushes, the ring's reduce-scatter)
        assert!(close(o.overhead_push_bytes_links, 10.0 * 4.0 * 97e6, 1e-12));
        assert!(close(h.overhead_push_bytes_links, 9.0 * 97e6 * 2.0, 1e-12));
    }

    #[test]
    fn the_all_graph_clusters_across_edge_switches() {
        let edge = Scenario::build(&setup(100, 0.3)).expect("scenario");
        let all = Scenario::build(&Setup {
            graph: WorkerGraph::All,
            ..setup(100, 0.3)
        })
        .expect("scenario");
        let (ce, ca) = (edge.cluster(), all.cluster());
        assert_eq!(mwcha::validate(&all.instance, &ca).total(), 0);
        // one edge switch holds 10 workers: every cluster of G(edge) stays under one switch
        for c in &ce.clusters {
            for &m in &c.members {
                assert_eq!(
                    edge.topo.edge_of(edge.worker_host[m]),
                    edge.topo.edge_of(edge.worker_host[c.aggregator])
                );
            }
        }
        assert!(all.instance.neighbours(0).len() == 99);
        assert!(WorkerGraph::parse("ring").is_err());
    }

    #[test]
    fn invalid_setups_are_errors() {
        assert!(Scenario::build(&setup(400, 0.1)).is_err());
        assert!(Scenario::build(&setup(0, 0.1)).is_err());
        assert!(
            Scenario::build(&Setup {
                sigma: -1.0,
                ..setup(10, 0.1)
            })
            .is_err()
        );
        assert!(
            Scenario::build(&Setup {
                gradient_mb: 0.0,
                ..setup(10, 0.1)
            })
            .is_err()
        );
    }

    #[test]
    fn draws_are_clipped_and_reproducible() {
        let a = draw_ratios(3, 1000, 0.5, 0.3, 0.1, 0.9);
        assert_eq!(a, draw_ratios(3, 1000, 0.5, 0.3, 0.1, 0.9));
        assert!(a.iter().all(|r| (0.1..=0.9).contains(r)));
        let clipped = a.iter().filter(|&&r| r == 0.1 || r == 0.9).count();
        // P(|z| > 4/3) = 18%
        assert!((120..260).contains(&clipped), "{clipped}");
        let mean = a.iter().sum::<f64>() / 1000.0;
        assert!((mean - 0.5).abs() < 0.03, "{mean}");
    }
}
