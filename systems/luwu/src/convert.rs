//! Float-to-integer conversion at the NIC, as SwitchML does it ([`inabench_ina::bfp`]): a block
//! of values (one packet's worth) is sent as integers scaled by a power of two that every worker
//! agrees on, so the switch can add them.
//!
//! The agreed exponent of a block is the maximum over workers of the exponent of each worker's
//! largest magnitude in the block. LuWu's gradients go to the AggNIC, not back to the workers, so
//! the agreement runs as its own push/pull through the same transport: every WorkerNIC pushes its
//! block exponents with the switch's max operation (flags bit 0), the AggNIC pulls their
//! maximum and pushes it back as a parameter stream that every WorkerNIC pulls (1/64 of the
//! gradient's traffic per direction at 64 values per packet). Then each worker sends
//! `round(x * 2^(S - E))` with `S = 30 - ceil(log2 N)`, which leaves log2(N) bits of headroom so
//! the integer sum of N workers cannot overflow; the AggNIC scales the sum back. Each sum's error
//! is at most `N * 2^(E - S - 1)` ([`inabench_ina::bfp::error_bound`]): with 8 workers
//! S = 27, so at most 2^-25 of the block's largest magnitude, far below bf16's 2^-8 rounding.

use inabench_ina::bfp;

/// The exponent of each `block`-value block of `x` (the last block may be short).
pub fn block_exponents(x: &[f32], block: usize) -> Vec<i32> {
    x.chunks(block.max(1)).map(bfp::block_exponent).collect()
}

/// Quantise `x` with the agreed exponent of each block.
pub fn quantise(x: &[f32], exps: &[i32], block: usize, workers: usize) -> Vec<i32> {
    x.iter()
        .enumerate()
        .map(|(i, v)| {
            let e = exps.get(i / block.max(1)).copied().unwrap_or(-126);
            bfp::quantise(*v, e, workers)
        })
        .collect()
}

/// The floats of integer sums with the agreed exponent of each block.
pub fn dequantise(sums: &[i32], exps: &[i32], block: usize, workers: usize) -> Vec<f32> {
    sums.iter()
        .enumerate()
        .map(|(i, s)| {
            let e = exps.get(i / block.max(1)).copied().unwrap_or(-126);
            bfp::dequantise(*s, e, workers)
        })
        .collect()
}

/// bf16 rounding (round to nearest even; a NaN stays a quiet NaN) of an f32, kept as f32: the
/// paper trains in bf16. `half::bf16`, the suite's one conversion.
pub fn bf16(x: f32) -> f32 {
    half::bf16::from_f32(x).to_f32()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_within_the_bound() {
        let n = 8;
        let xs: Vec<Vec<f32>> = (0..n)
            .map(|w| {
                (0..200)
                    .map(|i| ((i * 31 + w * 7) as f32).sin() * 1e-3)
                    .collect()
            })
            .collect();
        let exps: Vec<i32> = (0..xs[0].len().div_ceil(64))
            .map(|b| xs.iter().map(|x| block_exponents(x, 64)[b]).max().unwrap())
            .collect();
        let mut sum = vec![0i32; 200];
        for x in &xs {
            for (a, q) in sum.iter_mut().zip(quantise(x, &exps, 64, n)) {
                *a = a.checked_add(q).unwrap();
            }
        }
        let got = dequantise(&sum, &exps, 64, n);
        for i in 0..200 {
            let want: f64 = xs.iter().map(|x| f64::from(x[i])).sum();
            let bound = bfp::error_bound(exps[i / 64], n) + want.abs() * 1e-7;
            assert!((f64::from(got[i]) - want).abs() <= bound, "{i}");
        }
    }

    #[test]
    fn bf16_rounds_to_nearest_even() {
        assert_eq!(bf16(1.0), 1.0);
        assert_eq!(bf16(1.0 + 1.0 / 256.0), 1.0); // tie, to even
        assert_eq!(bf16(1.0 + 3.0 / 256.0), 1.0 + 4.0 / 256.0);
        assert_eq!(bf16(-2.5).to_bits() & 0xffff, 0);
        // a NaN is a bf16 NaN (its low 16 bits cleared), infinities stay
        assert!(bf16(f32::from_bits(0x7fc0_1234)).is_nan());
        assert_eq!(bf16(f32::from_bits(0x7fc0_1234)).to_bits() & 0xffff, 0);
        assert_eq!(bf16(f32::INFINITY), f32::INFINITY);
    }
}
