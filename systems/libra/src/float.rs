//! The table-lookup floating-point summation of Sec. 3.5, built from its seven tables and run
//! the way a pipeline runs it: integer adds, shifts, compares and exact-match lookups only. No
//! float arithmetic happens in [`FloatTables::add`]; the tables are filled once (by the control
//! plane, here with f64 math).
//!
//! A positive f32 p = 2^(e-127) (m + Δm), m = 1.f1..f11, Δm = 0.f12..f23 x 2^-11, and (Eq. 1)
//! log2 p ≈ (e - 127) + log2 m + 2^(log2 Δm - log2(m ln 2)). The tables, sizes as the paper
//! counts them (256 x 2 B + 3 x 4096 x 2 B + 3 x 65536 x 2 B = 418,304 B = 408.5 KB):
//!
//! | table | key | value (u16/i16) |
//! |---|---|---|
//! | `epo` | e (8 bits) | e - 127; a marker for e = 0 (zero, subnormal) and e = 255 (inf, NaN) |
//! | `log_m` | hidden bit, f1..f11 (12 bits) | log2 m, Q0.16 |
//! | `log_dm` | f12..f23 (12 bits) = k, Δm = k 2^-23 | log2 k, Q4.12 (k = 0: marker) |
//! | `log_mln2` | hidden bit, f1..f11 (12 bits) | log2(m ln 2) + 1, Q4.12 |
//! | `exp_corr` | (log2 k - log2(m ln 2) + 1), Q4.12 (16 bits) | Δm / (m ln 2), Q0.26 |
//! | `mi` | op bit, -θ in Q4.11 (15 bits) | op 0: log2(1 + 2^θ); op 1: -log2(1 - 2^θ); Q4.12 |
//! | `exp` | frac(L), Q0.16 (16 bits) | the mantissa bits f1..f16 of 2^frac(L) |
//!
//! The sum: each operand's log magnitude L (a 32-bit fixed-point PHV field, 20 fraction bits) is
//! epo + log_m + exp_corr; with L_a >= L_b and θ = L_b - L_a, L = L_a + mi[op, -θ] (op = 1 when
//! the signs differ, the sum then taking a's sign); the exponent of the result is floor(L) + 127
//! and its mantissa exp[frac(L)].
//!
//! Where the paper is silent, our choices: the miTable covers both addition and subtraction (one
//! key bit picks the function; gradients have both signs); -θ >= 16 passes the larger operand
//! through unchanged (log2(1 ± 2^-16) is below the table's resolution); subnormal operands and results are flushed
//! to zero (the tables key on 1.f1..f11); an infinite or NaN operand gives NaN or the infinity, as
//! IEEE does; a result beyond f32's range is an infinity.
//!
//! Error bound (derived from the table resolutions, checked by the tests against f64 sums): for
//! normal operands and a normal result, |got - (x + y)| <= 2^-11 (|x| + |y|), plus 2^-125 for
//! flushed subnormals. Same signs: about 2.5e-4 relative (the miTable's Q4.11 key and Q4.12
//! value dominate). Opposite signs: the error is relative to the larger operand, so a near
//! cancellation loses all relative precision of the (tiny) result.

use std::sync::{Arc, OnceLock};

/// Fraction bits of the log-domain PHV field.
const LF: u32 = 20;
const EPO_ZERO: i16 = i16::MIN;
const EPO_SPECIAL: i16 = i16::MAX;
const DM_NONE: u16 = u16::MAX;
const MI_ZERO: u16 = u16::MAX;

/// The seven tables.
#[derive(Debug, Clone, PartialEq)]
pub struct FloatTables {
    pub epo: Vec<i16>,
    pub log_m: Vec<u16>,
    pub log_dm: Vec<u16>,
    pub log_mln2: Vec<u16>,
    pub exp_corr: Vec<u16>,
    pub mi: Vec<u16>,
    pub exp: Vec<u16>,
}

/// An operand in the log domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Log {
    Zero,
    Special,
    Value { neg: bool, l: i32 },
}

/// Lookups one [`FloatTables::add`] made (for the resources and the pipeline's stage count).
pub const LOOKUPS_PER_ADD: u32 = 2 * 5 + 2;

impl Default for FloatTables {
    fn default() -> Self {
        Self::new()
    }
}

impl FloatTables {
    /// Fill the tables (control plane).
    pub fn new() -> FloatTables {
        let ln2 = std::f64::consts::LN_2;
        let epo = (0..256)
            .map(|e| match e {
                0 => EPO_ZERO,
                255 => EPO_SPECIAL,
                e => (e - 127) as i16,
            })
            .collect();
        let m_of = |key: usize| -> Option<f64> {
            // hidden bit 1: m = 1.f1..f11; hidden bit 0 (subnormals) is never looked up
            (key >= 2048).then(|| 1.0 + (key - 2048) as f64 / 2048.0)
        };
        let log_m = (0..4096)
            .map(|k| {
                m_of(k).map_or(0, |m| {
                    (m.log2() * 65536.0).round().min(f64::from(u16::MAX)) as u16
                })
            })
            .collect();
        let log_dm = (0..4096)
            .map(|k| {
                if k == 0 {
                    DM_NONE
                } else {
                    ((k as f64).log2() * 4096.0).round() as u16
                }
            })
            .collect();
        let log_mln2 = (0..4096)
            .map(|k| m_of(k).map_or(0, |m| (((m * ln2).log2() + 1.0) * 4096.0).round() as u16))
            .collect();
        // key = 4096 (d + 1), d = log2 k - log2(m ln 2); value = 2^d 2^-23 in units of 2^-26
        let exp_corr = (0..65536)
            .map(|key| {
                let d = key as f64 / 4096.0 - 1.0;
                (2f64.powf(d) * 8.0).round().min(f64::from(u16::MAX)) as u16
            })
            .collect();
        let mi = (0..65536usize)
            .map(|key| {
                let (op, q) = (key >> 15, key & 0x7fff);
                let t = -(q as f64) / 2048.0;
                if op == 0 {
                    ((1.0 + 2f64.powf(t)).log2() * 4096.0).round() as u16
                } else if q == 0 {
                    MI_ZERO
                } else {
                    (-(1.0 - 2f64.powf(t)).log2() * 4096.0)
                        .round()
                        .min(f64::from(u16::MAX - 1)) as u16
                }
            })
            .collect();
        let exp = (0..65536)
            .map(|key| {
                ((2f64.powf(key as f64 / 65536.0) - 1.0) * 65536.0)
                    .round()
                    .min(f64::from(u16::MAX)) as u16
            })
            .collect();
        FloatTables {
            epo,
            log_m,
            log_dm,
            log_mln2,
            exp_corr,
            mi,
            exp,
        }
    }

    /// Bytes of the tables (2 bytes an entry).
    pub fn bytes(&self) -> usize {
        2 * (self.epo.len()
            + self.log_m.len()
            + self.log_dm.len()
            + self.log_mln2.len()
            + self.exp_corr.len()
            + self.mi.len()
            + self.exp.len())
    }

    fn to_log(&self, bits: u32) -> Log {
        let e = ((bits >> 23) & 0xff) as usize;
        let epo = self.epo[e];
        if epo == EPO_ZERO {
            return Log::Zero; // zero, or a subnormal flushed to zero
        }
        if epo == EPO_SPECIAL {
            return Log::Special;
        }
        let m_key = (1 << 11) | ((bits >> 12) & 0x7ff) as usize;
        let k = (bits & 0xfff) as usize;
        let mut l = (i32::from(epo) << LF) + (i32::from(self.log_m[m_key]) << (LF - 16));
        let dm = self.log_dm[k];
        if dm != DM_NONE {
            // exp_corr's key: log2 k - log2(m ln2) + 1 in Q4.12 (log_mln2 holds log2(m ln 2) + 1)
            let key = i32::from(dm) + 8192 - i32::from(self.log_mln2[m_key]);
            let corr = i32::from(self.exp_corr[key.clamp(0, 65535) as usize]);
            // Q0.26 -> Q.20, rounded
            l += (corr + (1 << 5)) >> 6;
        }
        Log::Value {
            neg: bits >> 31 == 1,
            l,
        }
    }

    fn encode(&self, neg: bool, l: i32) -> u32 {
        let sign = u32::from(neg) << 31;
        // round frac(L) to 16 bits; a carry moves to the integer part
        let r = l + (1 << (LF - 17));
        let int = r >> LF;
        let key = ((r >> (LF - 16)) & 0xffff) as usize;
        let e = int + 127;
        if e >= 255 {
            return sign | 0x7f80_0000;
        }
        if e <= 0 {
            return sign; // below the normal range: flushed to zero
        }
        sign | ((e as u32) << 23) | (u32::from(self.exp[key]) << 7)
    }

    /// x + y on f32 bit patterns, by table lookups.
    pub fn add_bits(&self, x: u32, y: u32) -> u32 {
        let (a, b) = (self.to_log(x), self.to_log(y));
        match (a, b) {
            (Log::Special, _) | (_, Log::Special) => special(x, y),
            (Log::Zero, Log::Zero) => x & y & 0x8000_0000,
            // a normal operand plus zero (or a flushed subnormal) is the operand: no lookup
            (Log::Zero, Log::Value { .. }) => y,
            (Log::Value { .. }, Log::Zero) => x,
            (Log::Value { neg: na, l: la }, Log::Value { neg: nb, l: lb }) => {
                let (neg, hi, lo, big) = if la >= lb {
                    (na, la, lb, x)
                } else {
                    (nb, lb, la, y)
                };
                let op = usize::from(na != nb);
                // -θ in Q4.11, rounded, saturating at 16
                let q = ((hi - lo + (1 << (LF - 12))) >> (LF - 11)).min(0x7fff) as usize;
                if q == 0x7fff {
                    // the smaller operand is below the table's resolution: the larger passes
                    return big;
                }
                let s = self.mi[(op << 15) | q];
                if s == MI_ZERO {
                    return 0; // exact cancellation
                }
                let s = i32::from(s) << (LF - 12);
                let l = if op == 0 { hi + s } else { hi - s };
                self.encode(neg, l)
            }
        }
    }

    pub fn add(&self, x: f32, y: f32) -> f32 {
        f32::from_bits(self.add_bits(x.to_bits(), y.to_bits()))
    }
}

/// The tables, built once per process and shared by every switch that sums floats (and by the
/// experiments that measure them). Pure: a computed table with no input.
pub fn tables() -> Arc<FloatTables> {
    static T: OnceLock<Arc<FloatTables>> = OnceLock::new();
    T.get_or_init(|| Arc::new(FloatTables::new())).clone()
}

fn special(x: u32, y: u32) -> u32 {
    let nan = |b: u32| (b >> 23) & 0xff == 0xff && b & 0x7f_ffff != 0;
    let inf = |b: u32| (b >> 23) & 0xff == 0xff && b & 0x7f_ffff == 0;
    if nan(x) || nan(y) || (inf(x) && inf(y) && (x ^ y) >> 31 == 1) {
        0x7fc0_0000
    } else if inf(x) {
        x
    } else {
        y
    }
}

/// The bound the tests check: |got - (x + y)| <= 2^-11 (|x| + |y|) + 2^-125.
pub fn error_bound(x: f32, y: f32) -> f64 {
    2f64.powi(-11) * (f64::from(x).abs() + f64::from(y).abs()) + 2f64.powi(-125)
}

/// Precision of one sum as the evaluation reports it (our reading of Table 2's "precision"):
/// 1 - |got - exact| / |exact|, floored at 0, with exact the f64 sum of the two f32 operands;
/// an exact zero sum scores 1 when we got zero and 0 otherwise.
pub fn precision(got: f64, exact: f64) -> f64 {
    if exact == 0.0 {
        return if got == 0.0 { 1.0 } else { 0.0 };
    }
    (1.0 - (got - exact).abs() / exact.abs()).max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use inabench_rng::SplitMix64;

    fn check(t: &FloatTables, x: f32, y: f32) {
        let got = t.add(x, y);
        let want = f64::from(x) + f64::from(y);
        if want.abs() > f64::from(f32::MAX) {
            assert!(got.is_infinite(), "{x} + {y}");
            return;
        }
        let err = (f64::from(got) - want).abs();
        assert!(
            err <= error_bound(x, y),
            "{x:e} + {y:e}: got {got:e}, want {want:e}, error {err:e} > {:e}",
            error_bound(x, y)
        );
    }

    #[test]
    fn tables_add_up_to_408_5_kb() {
        let t = FloatTables::new();
        assert_eq!(t.bytes(), 418_304);
        assert_eq!(t.bytes() as f64 / 1024.0, 408.5);
        assert_eq!(
            (t.epo.len(), t.log_m.len(), t.exp_corr.len()),
            (256, 4096, 65536)
        );
    }

    #[test]
    fn edge_cases_against_f64() {
        let t = FloatTables::new();
        let sub = f32::from_bits(1); // smallest subnormal
        let big_sub = f32::from_bits(0x007f_ffff);
        let cases: &[(f32, f32)] = &[
            (0.0, 0.0),
            (-0.0, -0.0),
            (0.0, 1.5),
            (-2.25, 0.0),
            (1.0, 1.0),
            (1.0, -1.0),
            (3.0, -3.0),
            (1.0, -0.999_999),
            (1.0, -0.999),
            (1.0, -0.5),
            (1e-3, -1e-3 * 0.75),
            (1.0, 1e-10),
            (1e30, 1e-30),
            (-1e30, 1e-30),
            (1.0, 2f32.powi(-17)),
            (sub, sub),
            (sub, 1.0),
            (big_sub, big_sub),
            (big_sub, -2e-38),
            (f32::MIN_POSITIVE, f32::MIN_POSITIVE),
            (f32::MIN_POSITIVE, -f32::MIN_POSITIVE * 0.5),
            (f32::MAX, f32::MAX),
            (f32::MAX, -f32::MAX),
            (1.999_999_9, 1.999_999_9),
            (-7.5, -0.125),
            (0.1, 0.2),
        ];
        for &(x, y) in cases {
            check(&t, x, y);
            check(&t, y, x);
            check(&t, -x, -y);
        }
        assert_eq!(t.add(1.0, -1.0), 0.0);
        assert_eq!(t.add(0.0, 3.5), 3.5);
        assert_eq!(t.add(1e30, 1e-30), 1e30);
        assert!(t.add(f32::INFINITY, f32::NEG_INFINITY).is_nan());
        assert_eq!(t.add(f32::INFINITY, 1.0), f32::INFINITY);
        assert!(t.add(f32::NAN, 1.0).is_nan());
    }

    #[test]
    fn random_operands_stay_within_the_bound() {
        let t = FloatTables::new();
        let mut g = SplitMix64::new(11);
        let mut worst_same = 0f64;
        for i in 0..200_000 {
            // random exponents over most of the range, both signs, and uniform (-1, 1)
            let (x, y) = if i % 2 == 0 {
                let r = |g: &mut SplitMix64| {
                    let e = (g.next_u64() % 200) as i32 - 100;
                    let s = if g.chance(0.5) { -1.0 } else { 1.0 };
                    (s * (1.0 + g.next_f64()) * 2f64.powi(e)) as f32
                };
                (r(&mut g), r(&mut g))
            } else {
                (
                    (g.next_f64() * 2.0 - 1.0) as f32,
                    (g.next_f64() * 2.0 - 1.0) as f32,
                )
            };
            check(&t, x, y);
            if (x > 0.0) == (y > 0.0) {
                let want = f64::from(x) + f64::from(y);
                worst_same = worst_same.max((f64::from(t.add(x, y)) - want).abs() / want.abs());
            }
        }
        // same signs: relative error about 2.5e-4 at worst, as derived in the module docs
        assert!(worst_same < 3e-4, "{worst_same:e}");
    }

    #[test]
    fn precision_metric() {
        assert_eq!(precision(1.0, 1.0), 1.0);
        assert!((precision(0.99, 1.0) - 0.99).abs() < 1e-12);
        assert_eq!(precision(5.0, 1.0), 0.0);
        assert_eq!(precision(0.0, 0.0), 1.0);
        assert_eq!(precision(1e-9, 0.0), 0.0);
    }
}
