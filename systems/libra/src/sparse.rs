//! The sparse-training workload: per-iteration key/value gradients of each worker, with a seeded
//! and documented update-frequency distribution, and a reader for real traces.
//!
//! # The generator
//!
//! A training sample of a sparse model touches `features` embedding rows (the non-zero features
//! of a CTR sample, the words of a sentence, the user and item of a rating). Each touched row is
//! drawn independently from a Zipf distribution over the `n` parameters of the model: the
//! parameter of heat rank r (1-based) is drawn with probability r^-s / H(n, s). A worker's
//! gradient of one iteration is the set of distinct rows its `batch` samples touched (a row
//! touched twice in a batch is one key/value pair, as a sparse push carries it), each with a
//! seeded value. The update frequency of a parameter, as a parameter server's log counts it, is
//! the number of pushes (worker x iteration) that carry it.
//!
//! The exponent is Zipf's law, s = 1, for every task: the classic rank-frequency law of words and
//! of feature ids in click logs, not a value fitted to the paper's Fig. 5. The sizes are the
//! paper's (OA 150M parameters, SE 9M) or the public datasets' (LSTM: the One Billion Word
//! vocabulary, 793,471 words; NCF: MovieLens-20M, 138,493 users + 26,744 items; DeepLight: the
//! Criteo click logs hashed into 2^24 = 16.8M rows). What the paper reports about the tasks (the
//! top 30K's share of the updates) is then an output of a run, compared with the paper.
//!
//! Heat ranks are hidden behind a bijection key = (a * (rank - 1) + b) mod n, so the keys a worker
//! sees carry no ordering information: the hot set must be found by counting (Sec. 3.3).
//!
//! # Traces
//!
//! [`read_trace`] reads a user's own gradients, one key/value pair per line:
//! `iteration worker key value` (whitespace separated: three unsigned integers and a float;
//! blank lines and lines starting with `#` are ignored). A push is one (iteration, worker): the
//! keys it carries are the parameters that worker updated in that iteration.
//! [`read_trace_file`] reads one from a file (the `trace` parameter of libra-fig5), with an error
//! naming the file or the line.

use crate::LibraError;
use inabench_rng::SplitMix64;

/// The Zipf distribution over 1..=n with exponent s, sampled by rejection-inversion
/// (W. Hörmann and G. Derflinger, "Rejection-inversion to generate variates from monotone
/// discrete distributions", ACM TOMACS 6(3), 1996): O(1) per draw and no table, so n can be
/// 150 million.
#[derive(Debug, Clone)]
pub struct Zipf {
    n: f64,
    s: f64,
    h_x1: f64,
    h_n: f64,
    shift: f64,
}

fn helper1(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

fn helper2(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + 0.25 * x))
    }
}

impl Zipf {
    pub fn new(n: u64, s: f64) -> Result<Zipf, LibraError> {
        if n == 0 || !(s > 0.0 && s.is_finite()) {
            return Err(LibraError::Config(format!(
                "Zipf needs n >= 1 and s > 0 (got n = {n}, s = {s})"
            )));
        }
        let mut z = Zipf {
            n: n as f64,
            s,
            h_x1: 0.0,
            h_n: 0.0,
            shift: 0.0,
        };
        z.h_x1 = z.h_integral(1.5) - 1.0;
        z.h_n = z.h_integral(n as f64 + 0.5);
        z.shift = 2.0 - z.h_integral_inv(z.h_integral(2.5) - z.h(2.0));
        Ok(z)
    }

    fn h_integral(&self, x: f64) -> f64 {
        let lx = x.ln();
        helper2((1.0 - self.s) * lx) * lx
    }

    fn h(&self, x: f64) -> f64 {
        (-self.s * x.ln()).exp()
    }

    fn h_integral_inv(&self, x: f64) -> f64 {
        let t = (x * (1.0 - self.s)).max(-1.0);
        (helper1(t) * x).exp()
    }

    /// One draw: a rank in 1..=n.
    pub fn sample(&self, g: &mut SplitMix64) -> u64 {
        loop {
            let u = self.h_n + g.next_f64() * (self.h_x1 - self.h_n);
            let x = self.h_integral_inv(u);
            let k = (x + 0.5).clamp(1.0, self.n).floor();
            if k - x <= self.shift || u >= self.h_integral(k + 0.5) - self.h(k) {
                return k as u64;
            }
        }
    }

    /// The exact probability mass of the `k` most likely ranks (for tests; O(k)).
    pub fn head_mass(&self, k: u64) -> f64 {
        let n = self.n as u64;
        // H(n, s) by summing the first million terms exactly and integrating the rest
        let exact = n.min(1_000_000);
        let mut total: f64 = (1..=exact).map(|r| (r as f64).powf(-self.s)).sum();
        if n > exact {
            let (a, b) = (exact as f64 + 0.5, n as f64 + 0.5);
            total += if (self.s - 1.0).abs() < 1e-12 {
                (b / a).ln()
            } else {
                (b.powf(1.0 - self.s) - a.powf(1.0 - self.s)) / (1.0 - self.s)
            };
        }
        let head: f64 = (1..=k.min(n)).map(|r| (r as f64).powf(-self.s)).sum();
        head / total
    }
}

/// A sparse model as the generator describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    pub name: &'static str,
    /// Parameters (embedding rows) of the model.
    pub params: u64,
    /// Zipf exponent of the rows' popularity.
    pub zipf_s: f64,
    /// Rows a sample touches.
    pub features: u32,
    /// Samples in one worker's mini-batch.
    pub batch: u32,
    /// Hot parameters the paper offloads for this model (Sec. 5.2).
    pub paper_hot: u32,
}

impl Task {
    /// The tasks of the paper's benchmark (sizes: see the module documentation). `features` and
    /// `batch` are ours: 39 fields per Criteo sample (DeepLight), 26 feature fields for the
    /// industrial CTR models (OA, SE), a 20-word sentence (LSTM), a user and an item (NCF); a
    /// mini-batch of 1,000 samples (NCF: 4,096 ratings).
    pub fn named(name: &str) -> Result<Task, LibraError> {
        let t = |name, params, features, batch, paper_hot| Task {
            name,
            params,
            zipf_s: 1.0,
            features,
            batch,
            paper_hot,
        };
        Ok(match name {
            "oa" => t("oa", 150_000_000, 26, 1000, 30_000),
            "se" => t("se", 9_000_000, 26, 1000, 30_000),
            "deeplight" => t("deeplight", 1 << 24, 39, 1000, 40_000),
            "lstm" => t("lstm", 793_471, 20, 1000, 60_000),
            "ncf" => t("ncf", 138_493 + 26_744, 2, 4096, 60_000),
            // a small OA for quick profiles: same law and batch, 1/10 of the parameters
            "oa_small" => t("oa_small", 15_000_000, 26, 1000, 30_000),
            other => {
                return Err(LibraError::Config(format!(
                    "unknown task `{other}` (oa, se, deeplight, lstm, ncf, oa_small)"
                )));
            }
        })
    }

    /// The same task with a given Zipf exponent (a spec may state its own).
    pub fn with_s(mut self, s: f64) -> Task {
        self.zipf_s = s;
        self
    }
}

/// The generator of a task's gradients: seeded, so a run is reproducible from its seed.
#[derive(Debug, Clone)]
pub struct SparseGen {
    pub task: Task,
    zipf: Zipf,
    seed: u64,
    mult: u64,
    offset: u64,
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl SparseGen {
    pub fn new(task: Task, seed: u64) -> Result<SparseGen, LibraError> {
        let zipf = Zipf::new(task.params, task.zipf_s)?;
        let n = task.params;
        let mut g = SplitMix64::derive(seed, "sparse/keys");
        // a multiplier coprime with n makes rank -> key a bijection of 0..n
        let mut mult = (g.next_u64() % n.max(2)) | 1;
        while gcd(mult, n) != 1 {
            mult = (mult + 2) % n.max(2);
            if mult == 0 {
                mult = 1;
            }
        }
        let offset = g.next_u64() % n;
        Ok(SparseGen {
            task,
            zipf,
            seed,
            mult,
            offset,
        })
    }

    /// The key of heat rank `rank` (1-based).
    pub fn key_of_rank(&self, rank: u64) -> u64 {
        let n = self.task.params as u128;
        ((self.mult as u128 * (rank as u128 - 1) + self.offset as u128) % n) as u64
    }

    /// The rows one sample touches (keys, possibly repeated).
    pub fn sample_keys(&self, g: &mut SplitMix64, out: &mut Vec<u64>) {
        for _ in 0..self.task.features {
            out.push(self.key_of_rank(self.zipf.sample(g)));
        }
    }

    /// The distinct keys worker `w` pushes in iteration `it`, sorted.
    pub fn batch_keys(&self, w: usize, it: u64) -> Vec<u64> {
        let mut g = SplitMix64::derive(self.seed, &format!("sparse/batch/{w}/{it}"));
        let mut keys = Vec::with_capacity((self.task.batch * self.task.features) as usize);
        for _ in 0..self.task.batch {
            self.sample_keys(&mut g, &mut keys);
        }
        keys.sort_unstable();
        keys.dedup();
        keys
    }

    /// Worker `w`'s gradient of iteration `it`: its distinct keys, each with an integer value in
    /// [-2^20, 2^20) (exact sums over thousands of workers fit in an i32).
    pub fn gradient(&self, w: usize, it: u64) -> Vec<(u64, i32)> {
        let keys = self.batch_keys(w, it);
        let mut g = SplitMix64::derive(self.seed, &format!("sparse/values/{w}/{it}"));
        keys.into_iter()
            .map(|k| (k, ((g.next_u64() >> 43) as i32) - (1 << 20)))
            .collect()
    }
}

/// One key/value pair of a trace.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceRecord {
    pub iteration: u64,
    pub worker: u32,
    pub key: u64,
    pub value: f32,
}

/// Read a trace (format: see the module documentation). Errors name the line.
pub fn read_trace(text: &str) -> Result<Vec<TraceRecord>, LibraError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |what: &str| LibraError::Trace {
            line: i + 1,
            message: what.to_string(),
        };
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() != 4 {
            return Err(bad(&format!(
                "expected `iteration worker key value`, found {} fields",
                f.len()
            )));
        }
        let iteration = f[0]
            .parse()
            .map_err(|_| bad("iteration is not an unsigned integer"))?;
        let worker = f[1]
            .parse()
            .map_err(|_| bad("worker is not an unsigned integer"))?;
        let key = f[2]
            .parse()
            .map_err(|_| bad("key is not an unsigned integer"))?;
        let value: f32 = f[3].parse().map_err(|_| bad("value is not a number"))?;
        if !value.is_finite() {
            return Err(bad("value is not finite"));
        }
        out.push(TraceRecord {
            iteration,
            worker,
            key,
            value,
        });
    }
    Ok(out)
}

/// Read a trace file (format: see the module documentation). An unreadable file, a file with
/// no record, or a bad line is an error that names the file and, for a bad line, the line.
pub fn read_trace_file(path: &std::path::Path) -> Result<Vec<TraceRecord>, LibraError> {
    let file = |message: String| LibraError::TraceFile {
        path: path.display().to_string(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| file(format!("cannot read it: {e}")))?;
    let records = read_trace(&text).map_err(|e| file(e.to_string()))?;
    if records.is_empty() {
        return Err(file(
            "it holds no record (expected lines `iteration worker key value`)".into(),
        ));
    }
    Ok(records)
}

/// The pushes (distinct iteration x worker) of a trace.
pub fn trace_pushes(records: &[TraceRecord]) -> u64 {
    records
        .iter()
        .map(|r| (r.iteration, r.worker))
        .collect::<std::collections::HashSet<_>>()
        .len() as u64
}

/// Update frequencies of a trace: pushes (distinct worker x iteration) that carry each key.
pub fn trace_frequencies(records: &[TraceRecord]) -> std::collections::HashMap<u64, u64> {
    let mut seen = std::collections::HashSet::new();
    let mut uf = std::collections::HashMap::new();
    for r in records {
        if seen.insert((r.iteration, r.worker, r.key)) {
            *uf.entry(r.key).or_insert(0) += 1;
        }
    }
    uf
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_matches_its_mass() {
        let z = Zipf::new(1000, 1.0).unwrap();
        let mut g = SplitMix64::new(3);
        let n = 400_000;
        let mut top10 = 0;
        for _ in 0..n {
            let k = z.sample(&mut g);
            assert!((1..=1000).contains(&k));
            if k <= 10 {
                top10 += 1;
            }
        }
        let want = z.head_mass(10);
        let got = top10 as f64 / n as f64;
        assert!((got - want).abs() < 0.005, "{got} vs {want}");
        // s != 1 too
        let z = Zipf::new(50_000, 1.3).unwrap();
        let mut top = 0;
        for _ in 0..n {
            if z.sample(&mut g) <= 100 {
                top += 1;
            }
        }
        let (got, want) = (top as f64 / n as f64, z.head_mass(100));
        assert!((got - want).abs() < 0.005, "{got} vs {want}");
    }

    #[test]
    fn keys_are_a_bijection_and_reproducible() {
        let t = Task::named("ncf").unwrap();
        let g = SparseGen::new(t.clone(), 9).unwrap();
        let mut seen = vec![false; t.params as usize];
        for r in 1..=t.params {
            let k = g.key_of_rank(r) as usize;
            assert!(!seen[k]);
            seen[k] = true;
        }
        assert_eq!(
            g.gradient(1, 2),
            SparseGen::new(t, 9).unwrap().gradient(1, 2)
        );
        assert_ne!(g.gradient(1, 2), g.gradient(2, 2));
    }

    #[test]
    fn traces_parse_and_errors_name_the_line() {
        let t = "# it w key value\n0 0 5 0.25\n0 1 5 -1e-3\n\n1 0 7 2\n0 0 5 0.5\n";
        let r = read_trace(t).unwrap();
        assert_eq!(r.len(), 4);
        assert_eq!(r[1].value, -1e-3);
        let uf = trace_frequencies(&r);
        assert_eq!(uf[&5], 2);
        assert_eq!(uf[&7], 1);
        match read_trace("0 0 5 x\n") {
            Err(LibraError::Trace { line: 1, .. }) => {}
            other => panic!("{other:?}"),
        }
        assert!(read_trace("0 0 5\n").is_err());
        assert!(read_trace("0 0 -5 1\n").is_err());
        assert!(read_trace("0 0 5 inf\n").is_err());
    }
}
