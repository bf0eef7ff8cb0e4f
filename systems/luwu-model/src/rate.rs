//! The CPU optimizer's update rate: measured on this host when a run asks for it (never
//! remembered across runs of one process), then scaled to the paper's CPUs by core count and
//! capped by their DRAM bandwidth.
//!
//! The measurement is `inabench_luwu_ooc::measure_update_rate(None, n)` (Adam over fp32 states in
//! memory, one thread). While that function is not available yet (it returns an error), the same
//! measurement is taken here with `inabench_train::adam` directly, and the source is recorded.
//!
//! Scaling (a model input): Adam is element-wise, so the rate of `c` cores is `c` times one
//! core's, until the DRAM bandwidth bounds it at `mem_gbps / 28 bytes` per parameter (see
//! [`crate::hw::ADAM_DRAM_BYTES`]). One core of this host stands for one core of the target; the
//! clocks differ (this host's EPYC against the Xeons' 2.2-2.4 GHz base), which we do not correct.

use crate::hw::{ADAM_DRAM_BYTES, Cpu};
use inabench_train::adam::{AdamParams, AdamStep};
use std::time::Instant;

/// Parameters per measurement: 4 M (64 MB of fp32 states), beyond this host's caches.
pub const MEASURE_PARAMS: usize = 1 << 22;

/// One core's Adam rate on this host, params/s, and where it came from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measured {
    pub per_core: f64,
    pub source: &'static str,
}

/// The measurement, taken now: a rate of this host is a run's input, measured in the run that
/// uses it (or passed in), never kept for the next experiment of the process (whose host load,
/// frequency or placement may differ).
pub fn measure() -> Measured {
    match inabench_luwu_ooc::measure_update_rate(None, MEASURE_PARAMS) {
        Ok(r) if r.from_memory.is_finite() && r.from_memory > 0.0 => Measured {
            per_core: r.from_memory,
            source: "inabench_luwu_ooc::measure_update_rate",
        },
        _ => Measured {
            per_core: measure_here(MEASURE_PARAMS),
            source: "inabench_train::adam (fallback)",
        },
    }
}

/// Adam over `n` in-memory fp32 parameters on one thread: the best of three passes.
pub fn measure_here(n: usize) -> f64 {
    let n = n.max(1024);
    let mut p = vec![0.5f32; n];
    let mut m = vec![0.0f32; n];
    let mut v = vec![0.0f32; n];
    let g: Vec<f32> = (0..n).map(|i| ((i % 97) as f32 - 48.0) * 1e-3).collect();
    let mut best = f64::INFINITY;
    for step in 1..=3u64 {
        let t = Instant::now();
        AdamStep::new(AdamParams::default(), step).apply(&mut p, &mut m, &mut v, &g);
        best = best.min(t.elapsed().as_secs_f64());
    }
    std::hint::black_box(&p);
    n as f64 / best.max(1e-9)
}

/// The update rate of `cores` cores of `cpu`, params/s, from a per-core rate.
pub fn scaled(per_core: f64, cpu: &Cpu, cores: f64) -> f64 {
    let linear = per_core * cores;
    let dram = cpu.mem_gbps * 1e9 / ADAM_DRAM_BYTES;
    linear.min(dram)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw;

    #[test]
    fn scaling_is_linear_until_dram_caps_it() {
        let cpu = hw::NODE_CPU;
        assert_eq!(scaled(1e8, &cpu, 10.0), 1e9);
        // DRAM: 2 x 8 x 2933 MT/s x 8 B = 375.4 GB/s over 28 B/param = 13.4 G params/s
        let cap = 375.424e9 / 28.0;
        assert!((scaled(1e10, &cpu, 52.0) - cap).abs() < 1.0);
    }

    #[test]
    fn measures_a_positive_rate() {
        let r = measure_here(1 << 16);
        assert!(r.is_finite() && r > 1e6, "{r}");
    }
}
