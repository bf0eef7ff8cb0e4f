//! SwitchML's block floating point: a switch adds integers, so float gradients are sent as
//! integers scaled by a per-block power of two that all workers agree on. Each block (one packet's
//! worth of values) first has its exponent negotiated: every worker offers the exponent of its
//! largest magnitude in the block and the switch keeps the maximum (the SwitchML program with the
//! `op_max` knob); then every worker scales by the agreed exponent, the switch sums the integers,
//! and the workers scale the sum back.
//!
//! The scale leaves `log2(workers)` bits of headroom below 2^31, so the integer sum cannot
//! overflow: with S = 30 - ceil(log2 N), a value x in a block with agreed exponent E (|x| < 2^E)
//! is sent as round(x * 2^(S - E)), |q| < 2^S, and N of them stay below 2^30. Each value's
//! quantisation error is at most 2^(E - S - 1), so the sum's is at most N * 2^(E - S - 1)
//! ([`error_bound`]).

/// The exponent of a block: the smallest e with max|x| < 2^e (e = -126 for an all-zero block).
pub fn block_exponent(block: &[f32]) -> i32 {
    let m = block.iter().fold(0f32, |a, x| a.max(x.abs()));
    if m == 0.0 || !m.is_finite() {
        return -126;
    }
    // m = f * 2^e with 0.5 <= f < 1
    let bits = m.to_bits();
    let exp = ((bits >> 23) & 0xff) as i32;
    if exp == 0 {
        // subnormal: below 2^-126
        -126
    } else {
        exp - 126
    }
}

/// The scale exponent S for `workers`.
pub fn headroom(workers: usize) -> i32 {
    30 - (workers.max(1) as f64).log2().ceil() as i32
}

/// Quantise `x` with the block's agreed exponent `e`.
pub fn quantise(x: f32, e: i32, workers: usize) -> i32 {
    let q = f64::from(x) * 2f64.powi(headroom(workers) - e);
    q.round().clamp(f64::from(i32::MIN), f64::from(i32::MAX)) as i32
}

/// The float of an integer sum in a block with agreed exponent `e`.
pub fn dequantise(sum: i32, e: i32, workers: usize) -> f32 {
    (f64::from(sum) * 2f64.powi(e - headroom(workers))) as f32
}

/// The largest quantisation error of a sum of `workers` values in a block with exponent `e`
/// (before the final rounding to f32).
pub fn error_bound(e: i32, workers: usize) -> f64 {
    workers as f64 * 2f64.powi(e - headroom(workers) - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponents_bound_the_block() {
        assert_eq!(block_exponent(&[0.0, 0.0]), -126);
        assert_eq!(block_exponent(&[0.75]), 0);
        assert_eq!(block_exponent(&[1.0]), 1);
        assert_eq!(block_exponent(&[-3.0, 0.1]), 2);
        for x in [1e-30f32, 3e-5, 0.4, 7.0, 1e20] {
            let e = block_exponent(&[x]);
            assert!(
                f64::from(x) < 2f64.powi(e) && f64::from(x) >= 2f64.powi(e - 1),
                "{x} {e}"
            );
        }
    }

    #[test]
    #[allow(clippy::needless_range_loop)]
    fn sums_stay_within_the_bound_and_never_overflow() {
        let workers = 6;
        let block: Vec<Vec<f32>> = (0..workers)
            .map(|w| {
                (0..48)
                    .map(|i| ((i * 7 + w * 13) as f32).sin() * 3.9)
                    .collect()
            })
            .collect();
        let e = (0..workers)
            .map(|w| block_exponent(&block[w]))
            .max()
            .unwrap_or(-126);
        for i in 0..48 {
            let q: i64 = (0..workers)
                .map(|w| i64::from(quantise(block[w][i], e, workers)))
                .sum();
            assert!(q.abs() < 1 << 30, "headroom");
            let got = f64::from(dequantise(q as i32, e, workers));
            let want: f64 = (0..workers).map(|w| f64::from(block[w][i])).sum();
            assert!(
                (got - want).abs() <= error_bound(e, workers) + want.abs() * 1e-7,
                "{i}"
            );
        }
        // the extreme: every worker at the top of the block
        let top = 2f32.powi(e) * 0.9999;
        let q: i64 = (0..workers)
            .map(|_| i64::from(quantise(top, e, workers)))
            .sum();
        assert!(q < i64::from(i32::MAX));
    }
}
