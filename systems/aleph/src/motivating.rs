//! The motivating example of Sec. 3.1 (Fig. 1, Table 1), written for any bandwidths.
//!
//! n workers with available bandwidths B_w, one PS with B_ps, a gradient of G per worker, full
//! duplex links, push and pull overlapped (the PS returns each aggregated segment at once):
//! - PS: each worker sends and receives G; the PS receives n G: T = max(n G / B_ps, G / min B_w);
//! - ring all-reduce: each worker sends (and receives) 2 (n-1)/n G at the slowest worker's rate:
//!   T = 2 (n-1)/n G / min B_w;
//! - ALEPH: the clustering M-WCHA returns on the workers (all adjacent, as under one switch in
//!   Fig. 1); an aggregator with k members sends (and receives) (1 + k) G, a plain worker G, the
//!   PS |D| G; T = the largest bytes / bandwidth over all workers and the PS.
//!
//! Per worker, `traffic` is the bytes the typical worker sends (the median over workers: Table 1
//! reports the plain workers' traffic, 4.2 Gb for ALEPH, where the aggregator w3 sends 12.6 Gb)
//! and `rate` is traffic / T for the same worker.

use crate::AlephError;
use crate::mwcha::{self, Clustering, Instance, Options};
use inabench_rng::SplitMix64;

/// Inputs (any consistent units: Gb and Gbps give seconds).
#[derive(Debug, Clone, PartialEq)]
pub struct Example {
    pub worker_bw: Vec<f64>,
    pub ps_bw: f64,
    pub gradient: f64,
    /// c and C_w of Eq. 1 (computing never binds in the example)
    pub cpu_per_worker: f64,
    pub cpu_capacity: f64,
}

/// One system's numbers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Row {
    pub comm_time: f64,
    pub traffic: f64,
    pub rate: f64,
}

fn median(v: Vec<f64>) -> f64 {
    inabench_rng::stats::median(&v).unwrap_or(f64::NAN)
}

impl Example {
    /// The paper's: 10, 10, 10, 30 Gbps workers, a 20 Gbps PS, 4.2 Gb.
    pub fn paper() -> Example {
        Example {
            worker_bw: vec![10.0, 10.0, 10.0, 30.0],
            ps_bw: 20.0,
            gradient: 4.2,
            cpu_per_worker: 10.0,
            cpu_capacity: 100.0,
        }
    }

    fn check(&self) -> Result<(), AlephError> {
        if self.worker_bw.is_empty() {
            return Err(AlephError::Invalid("the example needs workers".into()));
        }
        if self
            .worker_bw
            .iter()
            .chain([&self.ps_bw, &self.gradient])
            .any(|x| !(x.is_finite() && *x > 0.0))
        {
            return Err(AlephError::Invalid(
                "bandwidths and the gradient size must be positive".into(),
            ));
        }
        Ok(())
    }

    fn n(&self) -> f64 {
        self.worker_bw.len() as f64
    }

    fn min_bw(&self) -> f64 {
        self.worker_bw.iter().copied().fold(f64::INFINITY, f64::min)
    }

    pub fn ps(&self) -> Result<Row, AlephError> {
        self.check()?;
        let g = self.gradient;
        let t = (self.n() * g / self.ps_bw).max(g / self.min_bw());
        let traffic = g;
        Ok(Row {
            comm_time: t,
            traffic,
            rate: traffic / t,
        })
    }

    pub fn ring_allreduce(&self) -> Result<Row, AlephError> {
        self.check()?;
        let n = self.n();
        let traffic = if n > 1.0 {
            2.0 * (n - 1.0) / n * self.gradient
        } else {
            0.0
        };
        let t = traffic / self.min_bw();
        Ok(Row {
            comm_time: t,
            traffic,
            rate: if t > 0.0 { traffic / t } else { 0.0 },
        })
    }

    /// The worker graph of Fig. 1: all workers under one switch.
    pub fn instance(&self) -> Result<Instance, AlephError> {
        self.check()?;
        let n = self.worker_bw.len();
        let adj = (0..n)
            .map(|a| (0..n).filter(|&b| b != a).collect())
            .collect();
        Instance::new(
            self.worker_bw.clone(),
            vec![self.cpu_capacity; n],
            self.cpu_per_worker,
            adj,
        )
    }

    /// M-WCHA on the example.
    pub fn cluster(&self, seed: u64) -> Result<(Instance, Clustering), AlephError> {
        let inst = self.instance()?;
        let mut rng = SplitMix64::derive(seed, "aleph-mwcha");
        let c = mwcha::mwcha(&inst, &Options::default(), &mut rng);
        Ok((inst, c))
    }

    /// ALEPH's row for a given clustering.
    pub fn aleph(&self, c: &Clustering) -> Result<Row, AlephError> {
        self.check()?;
        let g = self.gradient;
        let n = self.worker_bw.len();
        let mut sent = vec![g; n];
        for cl in &c.clusters {
            let s = sent.get_mut(cl.aggregator).ok_or_else(|| {
                AlephError::Invalid(format!("aggregator {} is not a worker", cl.aggregator))
            })?;
            *s += cl.members.len() as f64 * g;
        }
        // full duplex: each worker receives what it sends
        let mut t = c.senders() as f64 * g / self.ps_bw;
        for (w, s) in sent.iter().enumerate() {
            t = t.max(s / self.worker_bw[w]);
        }
        let traffic = median(sent.clone());
        let rate = median(sent.iter().map(|s| s / t).collect());
        Ok(Row {
            comm_time: t,
            traffic,
            rate,
        })
    }
}

/// Sec. 3.2's clustering of the example (Fig. 1(c), aleph.txt:95): w3 aggregates w1 and w2, w0
/// sends to the PS directly.
pub fn paper_example_clustering(e: &Example) -> Result<Clustering, AlephError> {
    if e.worker_bw != [10.0, 10.0, 10.0, 30.0] {
        return Err(AlephError::Invalid(
            "the paper's clustering is defined for workers at 10, 10, 10 and 30 Gbps".into(),
        ));
    }
    Ok(Clustering {
        clusters: vec![
            mwcha::Cluster {
                aggregator: 3,
                members: vec![1, 2],
                direct: false,
            },
            mwcha::Cluster {
                aggregator: 0,
                members: vec![],
                direct: true,
            },
        ],
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * a.abs().max(b.abs())
    }

    #[test]
    fn sec_3_1_arithmetic() {
        let e = Example::paper();
        let ps = e.ps().expect("ps");
        assert!(close(ps.comm_time, 16.8 / 20.0));
        assert!(close(ps.rate, 4.2 / 0.84));
        let ar = e.ring_allreduce().expect("ar");
        assert!(close(ar.traffic, 2.0 * 3.0 * 4.2 / 4.0));
        assert!(close(ar.comm_time, 6.3 / 10.0));
    }

    #[test]
    fn the_papers_clustering_gives_the_papers_time() {
        let e = Example::paper();
        let c = Clustering {
            clusters: vec![
                mwcha::Cluster {
                    aggregator: 3,
                    members: vec![1, 2],
                    direct: false,
                },
                mwcha::Cluster {
                    aggregator: 0,
                    members: vec![],
                    direct: true,
                },
            ],
            ..Default::default()
        };
        let inst = e.instance().expect("instance");
        assert_eq!(mwcha::validate(&inst, &c).total(), 0);
        let r = e.aleph(&c).expect("aleph");
        // w3: 3 x 4.2 Gb over 30 Gbps; PS: 2 x 4.2 Gb over 20 Gbps; plain: 4.2 over 10
        assert!(close(r.comm_time, 0.42), "{}", r.comm_time);
        assert!(close(r.traffic, 4.2));
        assert!(close(r.rate, 10.0));
        assert_eq!(mwcha::exact_min_senders(&inst), Ok(2));
    }

    #[test]
    fn literal_line23_breaks_theorem_2_in_the_example() {
        // w3 (g = 2) is the only candidate, is always selected (median beta 2/3, p = 1) and
        // takes each of its three neighbours with alpha = 2/3 (the text's alpha) or 1/2 (Eq. 5's
        // closed count): all three, one over capacity, in (2/3)^3 = 8/27 or (1/2)^3 = 1/8 of draws.
        let inst = Example::paper().instance().expect("instance");
        let draws = 20_000;
        let (bad, n) = mwcha::literal_line23_violations(&inst, &Options::default(), 7, draws)
            .expect("no membership or adjacency violation");
        assert_eq!(n, draws);
        let share = bad as f64 / n as f64;
        assert!((share - 8.0 / 27.0).abs() < 0.015, "{share}");
        let eq5 = Options {
            alpha_counts_self: true,
            ..Options::default()
        };
        let (bad, n) = mwcha::literal_line23_violations(&inst, &eq5, 7, draws).expect("valid");
        let share = bad as f64 / n as f64;
        assert!((share - 0.125).abs() < 0.01, "{share}");
        // the suite's reading (stop at g_w) never breaks it
        for seed in 0..2000 {
            let c = mwcha::mwcha(&inst, &Options::default(), &mut SplitMix64::new(seed));
            assert_eq!(mwcha::validate(&inst, &c).capacity, 0);
        }
    }

    #[test]
    fn mwcha_on_the_example_is_valid_and_never_beats_the_optimum() {
        let e = Example::paper();
        let mut hits = 0;
        for seed in 0..200 {
            let (inst, c) = e.cluster(seed).expect("cluster");
            assert_eq!(mwcha::validate(&inst, &c).total(), 0);
            assert!(c.senders() >= 2);
            let r = e.aleph(&c).expect("row");
            assert!(r.comm_time >= 0.42 - 1e-12);
            if c.senders() == 2 {
                hits += 1;
            }
        }
        println!("M-WCHA finds the paper's clustering in {hits} of 200 seeds");
    }
}
