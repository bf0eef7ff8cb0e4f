//! Hot-parameter identification (Sec. 3.3 and 5.3).
//!
//! - [`Principle1`]: the top-k parameters are hot when T_k / T_n >= p and 4 B x k <= c x 20 MB
//!   (MB = 2^20 bytes, as the paper's 408.5 KB = 418,304 B counts); k is the smallest such k, or
//!   the memory bound when p cannot be reached within it.
//! - [`hot_list`]: the evaluation's procedure: sort by update frequency, add 1,000 parameters at
//!   a time from the top, and stop at the first block whose share of all updates is below the
//!   threshold (1%); that block is not added.
//! - [`precision`]: |H_g ∩ H_s| / |H_g|, H_g from the whole dataset and H_s from a sample.
//! - [`count_updates`]: a task's update frequencies over a dataset and over a random sample of
//!   it: the dataset is `pushes` mini-batches of the generator's samples; each sample is in the
//!   sample with probability `rate` (seeded), and the sampled samples are trained in mini-batches
//!   of the same size, so a parameter's sampled frequency counts the sampled pushes carrying it.

use crate::LibraError;
use crate::sparse::SparseGen;
use inabench_rng::SplitMix64;
use std::collections::HashSet;

/// Update frequencies: `uf[key]` pushes carried the key.
#[derive(Debug, Clone, PartialEq)]
pub struct Frequencies {
    pub uf: Vec<u32>,
}

impl Frequencies {
    /// The frequencies of a trace ([`crate::sparse::trace_frequencies`]): the keys are
    /// renumbered in ascending key order (shares and ranks do not depend on key names); a count
    /// above u32::MAX is an error.
    pub fn from_counts(
        counts: &std::collections::HashMap<u64, u64>,
    ) -> Result<Frequencies, LibraError> {
        let mut keys: Vec<(&u64, &u64)> = counts.iter().collect();
        keys.sort_unstable();
        let uf = keys
            .into_iter()
            .map(|(k, c)| {
                u32::try_from(*c).map_err(|_| {
                    LibraError::Config(format!("key {k} is updated {c} times, above 2^32"))
                })
            })
            .collect::<Result<Vec<u32>, _>>()?;
        Ok(Frequencies { uf })
    }

    pub fn total(&self) -> u64 {
        self.uf.iter().map(|&c| u64::from(c)).sum()
    }

    /// Keys with a non-zero frequency in descending order of frequency (ties: smaller key
    /// first), up to `limit` of them.
    pub fn ranked(&self, limit: usize) -> Vec<(u32, u64)> {
        let mut v: Vec<(u32, u64)> = self
            .uf
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(k, c)| (*c, k as u64))
            .collect();
        let order = |a: &(u32, u64), b: &(u32, u64)| b.0.cmp(&a.0).then(a.1.cmp(&b.1));
        if v.len() > limit {
            v.select_nth_unstable_by(limit, order);
            v.truncate(limit);
        }
        v.sort_unstable_by(order);
        v
    }

    /// The share of all updates carried by the `k` most frequent keys.
    pub fn top_share(&self, k: usize) -> f64 {
        let top: u64 = self.ranked(k).iter().map(|(c, _)| u64::from(*c)).sum();
        top as f64 / self.total().max(1) as f64
    }
}

/// Count update frequencies of the whole dataset and of a sample at `rate`.
pub fn count_updates(
    gen_: &SparseGen,
    pushes: u64,
    rate: f64,
    seed: u64,
) -> Result<(Frequencies, Frequencies), LibraError> {
    let n = usize::try_from(gen_.task.params)
        .map_err(|_| LibraError::Config("too many parameters for this host".into()))?;
    if !(0.0..=1.0).contains(&rate) {
        return Err(LibraError::Config(format!(
            "sampling rate {rate} is not in [0, 1]"
        )));
    }
    let mut full = vec![0u32; n];
    let mut samp = if rate > 0.0 {
        vec![0u32; n]
    } else {
        Vec::new()
    };
    let batch = gen_.task.batch as usize;
    let mut draw = SplitMix64::derive(seed, "hot/dataset");
    let mut pick = SplitMix64::derive(seed, "hot/sample");
    let mut push_keys = Vec::new();
    let mut samp_keys = Vec::new();
    let mut samp_in_batch = 0usize;
    let mut one = Vec::new();
    let flush = |keys: &mut Vec<u64>, uf: &mut Vec<u32>| {
        keys.sort_unstable();
        keys.dedup();
        for &k in keys.iter() {
            uf[k as usize] += 1;
        }
        keys.clear();
    };
    for _ in 0..pushes {
        for _ in 0..batch {
            one.clear();
            gen_.sample_keys(&mut draw, &mut one);
            push_keys.extend_from_slice(&one);
            if pick.chance(rate) {
                samp_keys.extend_from_slice(&one);
                samp_in_batch += 1;
                if samp_in_batch == batch {
                    flush(&mut samp_keys, &mut samp);
                    samp_in_batch = 0;
                }
            }
        }
        flush(&mut push_keys, &mut full);
    }
    if samp_in_batch > 0 {
        flush(&mut samp_keys, &mut samp);
    }
    Ok((Frequencies { uf: full }, Frequencies { uf: samp }))
}

/// The paper's procedure: blocks of `step` keys from the top while a block's share of all
/// updates is at least `threshold`.
pub fn hot_list(f: &Frequencies, step: usize, threshold: f64) -> Vec<u64> {
    let total = f.total().max(1) as f64;
    let step = step.max(1);
    let mut limit = step * 64;
    loop {
        let ranked = f.ranked(limit);
        // all non-zero keys are ranked when fewer than `limit` came back
        let complete = ranked.len() < limit;
        let mut hot = Vec::new();
        for block in ranked.chunks(step) {
            let share = block.iter().map(|(c, _)| f64::from(*c)).sum::<f64>() / total;
            if share < threshold {
                return hot;
            }
            hot.extend(block.iter().map(|(_, k)| *k));
        }
        if complete {
            return hot;
        }
        limit *= 4;
    }
}

/// |H_g ∩ H_s| / |H_g| (1 when H_g is empty).
pub fn precision(global: &[u64], sampled: &[u64]) -> f64 {
    if global.is_empty() {
        return 1.0;
    }
    let s: HashSet<u64> = sampled.iter().copied().collect();
    global.iter().filter(|k| s.contains(k)).count() as f64 / global.len() as f64
}

/// Principle 1's design parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Principle1 {
    /// Share of updates the switch should take.
    pub p: f64,
    /// Share of the switch memory for aggregation.
    pub c: f64,
    /// Switch memory in bytes (20 MB).
    pub switch_bytes: f64,
    /// Bytes per parameter (4).
    pub bytes_per_param: f64,
}

/// What Principle 1 decided.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HotChoice {
    pub k: usize,
    /// T_k / T_n.
    pub share: f64,
    /// True when the memory condition, not p, set k.
    pub memory_bound: bool,
}

impl Principle1 {
    pub fn paper(p: f64, c: f64) -> Principle1 {
        Principle1 {
            p,
            c,
            switch_bytes: 20.0 * 1048576.0,
            bytes_per_param: 4.0,
        }
    }

    pub fn max_k(&self) -> usize {
        (self.c * self.switch_bytes / self.bytes_per_param).floor() as usize
    }

    /// Choose k from frequencies.
    pub fn choose(&self, f: &Frequencies) -> Result<HotChoice, LibraError> {
        if !(self.p > 0.0 && self.p < 1.0 && self.c > 0.0 && self.c < 1.0) {
            return Err(LibraError::Config(format!(
                "Principle 1 needs p and c in (0, 1) (got p = {}, c = {})",
                self.p, self.c
            )));
        }
        let total = f.total().max(1) as f64;
        let max_k = self.max_k();
        let ranked = f.ranked(max_k);
        let mut acc = 0u64;
        for (i, (c, _)) in ranked.iter().enumerate() {
            acc += u64::from(*c);
            if acc as f64 / total >= self.p {
                return Ok(HotChoice {
                    k: i + 1,
                    share: acc as f64 / total,
                    memory_bound: false,
                });
            }
        }
        Ok(HotChoice {
            k: ranked.len(),
            share: acc as f64 / total,
            memory_bound: true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sparse::Task;

    #[test]
    fn hot_list_follows_the_procedure() {
        // 10,000 keys: key k has frequency 10,000 - k; the first blocks carry > 1% each
        let uf: Vec<u32> = (0..10_000u32).map(|k| 10_000 - k).collect();
        let f = Frequencies { uf };
        let total = f.total() as f64;
        let hot = hot_list(&f, 1000, 0.01);
        assert_eq!(hot.len() % 1000, 0);
        // every included block carries >= 1%, the next one < 1%
        let share = |a: u64, b: u64| (a..b).map(|k| (10_000 - k) as f64).sum::<f64>() / total;
        let n = hot.len() as u64;
        assert!(share(n - 1000, n) >= 0.01);
        assert!(n == 10_000 || share(n, n + 1000) < 0.01);
        assert_eq!(hot[0], 0);
        assert_eq!(precision(&hot, &hot), 1.0);
        assert_eq!(precision(&hot, &[]), 0.0);
    }

    #[test]
    fn principle1_picks_the_smallest_k() {
        let f = Frequencies {
            uf: vec![50, 30, 10, 5, 5],
        };
        let c = Principle1::paper(0.8, 0.05).choose(&f).unwrap();
        assert_eq!((c.k, c.memory_bound), (2, false));
        let tight = Principle1 {
            p: 0.95,
            c: 0.5,
            switch_bytes: 8.0,
            bytes_per_param: 4.0,
        };
        let c = tight.choose(&f).unwrap();
        assert_eq!((c.k, c.memory_bound), (1, true));
        assert!(Principle1::paper(1.5, 0.05).choose(&f).is_err());
    }

    #[test]
    fn sampling_finds_most_hot_parameters() {
        let t = Task::named("lstm").unwrap();
        let g = SparseGen::new(t, 5).unwrap();
        let (full, samp) = count_updates(&g, 400, 0.1, 5).unwrap();
        assert!(full.total() > samp.total());
        let hg = hot_list(&full, 1000, 0.01);
        let hs = hot_list(&samp, 1000, 0.01);
        assert!(!hg.is_empty());
        assert!(precision(&hg, &hs) > 0.5, "{}", precision(&hg, &hs));
    }
}
