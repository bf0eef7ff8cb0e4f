//! SplitMix64 (Steele, Lea, Flood 2014): a tiny, fast, seedable generator. Fault injection and
//! generated data draw from it so that a run is reproducible from its seed.

pub mod stats;

/// A seeded SplitMix64 generator.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// A generator for a sub-stream (a point, a worker), derived from a base seed and a label.
    pub fn derive(seed: u64, label: &str) -> Self {
        let mut h = seed ^ 0x9E37_79B9_7F4A_7C15;
        for b in label.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01B3);
        }
        SplitMix64(h)
    }

    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1) with 53 bits.
    #[inline]
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// True with probability `p`.
    #[inline]
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.next_f64() < p
    }

    /// A standard normal draw by Box-Muller (the cosine branch) from two uniforms: u1 in (0, 1]
    /// (so its logarithm is finite), u2 in [0, 1). Two `next_u64` per draw; the one definition
    /// the training data, model initialisations and LuWu's corpus draw from (their values are
    /// those of the copies it replaced).
    pub fn normal(&mut self) -> f64 {
        let u1 = ((self.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
        let u2 = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reproducible_and_distinct() {
        let a: Vec<u64> = (0..4)
            .map(|_| 0)
            .scan(SplitMix64::new(7), |g, _| Some(g.next_u64()))
            .collect();
        let b: Vec<u64> = (0..4)
            .map(|_| 0)
            .scan(SplitMix64::new(7), |g, _| Some(g.next_u64()))
            .collect();
        let c: Vec<u64> = (0..4)
            .map(|_| 0)
            .scan(SplitMix64::new(8), |g, _| Some(g.next_u64()))
            .collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
        let mut g = SplitMix64::new(1);
        let hits = (0..100_000).filter(|_| g.chance(0.01)).count();
        assert!((800..1200).contains(&hits), "{hits}");
    }

    #[test]
    fn normal_is_standard() {
        let mut g = SplitMix64::new(3);
        let n = 200_000;
        let xs: Vec<f64> = (0..n).map(|_| g.normal()).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        assert!(mean.abs() < 0.01, "{mean}");
        assert!((var - 1.0).abs() < 0.02, "{var}");
        assert!(xs.iter().all(|x| x.is_finite()));
    }
}
