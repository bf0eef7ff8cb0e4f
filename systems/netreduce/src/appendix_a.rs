//! NetReduce Appendix A: communication time of one iteration for Flat Ring all-reduce (FR,
//! Eq. 1), Tencent hierarchical all-reduce (TA, Eq. 2) and Parallel NetReduce (PN, Eq. 3), and
//! the differences of Eq. 4 and Eq. 5, written exactly as the paper prints them.
//!
//! Symbols (Table 4): M gradient size (bytes), n GPUs per machine, P GPUs in the job, alpha
//! per-hop latency (s), B_intra and B_inter bandwidths (bytes/s).
//!
//! Eq. 2 is given twice in the paper: as the sum of three bracketed stages, and as a simplified
//! closed form. They disagree in the intra-machine transmission term: the stages sum to
//! 2(n-1)/n^2 + 2(n-1)/n = 2(n-1)(n+1)/n^2 times M/B_intra, the closed form says 4(n-1)/n. We
//! evaluate both ([`ta_stages`], [`ta_closed`]) and let the report show the difference.

/// Model inputs in SI units.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Inputs {
    pub m_bytes: f64,
    pub n: f64,
    pub p: f64,
    pub alpha_s: f64,
    pub b_intra: f64,
    pub b_inter: f64,
}

/// Eq. (1): T_fr = 2(P-1)alpha + 2 (P-1)/P M/B_inter.
pub fn fr(i: &Inputs) -> f64 {
    2.0 * (i.p - 1.0) * i.alpha_s + 2.0 * (i.p - 1.0) / i.p * i.m_bytes / i.b_inter
}

/// Eq. (2), stage by stage as its three brackets write it:
/// [2 alpha log2 n + 2(n-1)/n M/(n B_intra)] + [2(P/n-1) alpha + 2 (P/n-1)/(P/n) M/B_inter]
/// + [(log2 n + n - 1) alpha + 2 (n-1)/n M/B_intra].
pub fn ta_stages(i: &Inputs) -> f64 {
    let (n, p, a, m) = (i.n, i.p, i.alpha_s, i.m_bytes);
    let l = n.log2();
    let s1 = 2.0 * a * l + 2.0 * (n - 1.0) / n * m / (n * i.b_intra);
    let s2 = 2.0 * (p / n - 1.0) * a + 2.0 * (p / n - 1.0) / (p / n) * m / i.b_inter;
    let s3 = (l + n - 1.0) * a + 2.0 * (n - 1.0) / n * m / i.b_intra;
    s1 + s2 + s3
}

/// Eq. (2), the paper's simplified closed form:
/// (n^2 + 3n log2 n - 3n + 2P)/n alpha + (4(n-1) P B_inter + 2(P-n) n B_intra)/(n P B_intra B_inter) M.
pub fn ta_closed(i: &Inputs) -> f64 {
    let (n, p, a, m) = (i.n, i.p, i.alpha_s, i.m_bytes);
    let l = n.log2();
    (n * n + 3.0 * n * l - 3.0 * n + 2.0 * p) / n * a
        + (4.0 * (n - 1.0) * p * i.b_inter + 2.0 * (p - n) * n * i.b_intra)
            / (n * p * i.b_intra * i.b_inter)
            * m
}

/// Eq. (3), stage by stage: [(n-1)alpha + (n-1) M/(n B_intra)] + (alpha + M/B_inter)
/// + [(n-1)alpha + (n-1) M/(n B_intra)].
pub fn pn_stages(i: &Inputs) -> f64 {
    let (n, a, m) = (i.n, i.alpha_s, i.m_bytes);
    let intra = (n - 1.0) * a + (n - 1.0) * m / (n * i.b_intra);
    intra + (a + m / i.b_inter) + intra
}

/// Eq. (3), closed form: (2n-1) alpha + (2(n-1) B_inter + n B_intra)/(n B_intra B_inter) M.
pub fn pn_closed(i: &Inputs) -> f64 {
    let (n, a, m) = (i.n, i.alpha_s, i.m_bytes);
    (2.0 * n - 1.0) * a
        + (2.0 * (n - 1.0) * i.b_inter + n * i.b_intra) / (n * i.b_intra * i.b_inter) * m
}

/// Eq. (4): Delta T_ta-pn = (2P/n + 3 log2 n - n - 2) alpha
/// + ((P-2n) n B_intra + 2(n-1) P B_inter)/(n P B_intra B_inter) M.
pub fn delta_eq4(i: &Inputs) -> f64 {
    let (n, p, a, m) = (i.n, i.p, i.alpha_s, i.m_bytes);
    (2.0 * p / n + 3.0 * n.log2() - n - 2.0) * a
        + ((p - 2.0 * n) * n * i.b_intra + 2.0 * (n - 1.0) * p * i.b_inter)
            / (n * p * i.b_intra * i.b_inter)
            * m
}

/// Eq. (5): Delta T_fr-pn = (2P - 2n - 1) alpha
/// + ((P-2) n B_intra - 2(n-1) P B_inter)/(n P B_intra B_inter) M.
pub fn delta_eq5(i: &Inputs) -> f64 {
    let (n, p, a, m) = (i.n, i.p, i.alpha_s, i.m_bytes);
    (2.0 * p - 2.0 * n - 1.0) * a
        + ((p - 2.0) * n * i.b_intra - 2.0 * (n - 1.0) * p * i.b_inter)
            / (n * p * i.b_intra * i.b_inter)
            * m
}

/// The sufficient condition of Eq. (6) together with P > 3n (Sec. 3.4).
pub fn sufficient(i: &Inputs) -> bool {
    i.p > 3.0 * i.n && i.b_intra / i.b_inter >= 2.0 * i.p / (i.p - 2.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(b_intra_gbps: f64, p: f64, alpha_us: f64) -> Inputs {
        Inputs {
            m_bytes: 100e6,
            n: 8.0,
            p,
            alpha_s: alpha_us * 1e-6,
            b_intra: b_intra_gbps * 1e9,
            b_inter: 12.5e9,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * a.abs().max(b.abs()).max(1e-30)
    }

    #[test]
    fn hand_computed_values() {
        // FR at P=32, alpha=1us, M=100MB, B_inter=12.5GB/s: 62us + 2*31/32*8ms = 15.562 ms
        let i = at(50.0, 32.0, 1.0);
        assert!(
            close(fr(&i), 62e-6 + 2.0 * 31.0 / 32.0 * 0.008),
            "{}",
            fr(&i)
        );
        // PN: 15 alpha + 2*7/8 * 100e6/(8*50e9)... = 15us + 2*(7*100e6/(8*50e9)) + 8 ms
        let expect = 15e-6 + 2.0 * 7.0 * 100e6 / (8.0 * 50e9) + 0.008;
        assert!(
            close(pn_stages(&i), expect),
            "{} vs {expect}",
            pn_stages(&i)
        );
    }

    #[test]
    fn pn_closed_form_matches_its_stages() {
        for b in [15.75, 50.0, 100.0] {
            for p in [32.0, 1024.0] {
                let i = at(b, p, 3.0);
                assert!(close(pn_stages(&i), pn_closed(&i)));
            }
        }
    }

    #[test]
    fn ta_closed_form_differs_from_its_stages_in_the_intra_term() {
        let i = at(50.0, 32.0, 1.0);
        let diff = ta_closed(&i) - ta_stages(&i);
        // closed 4(n-1)/n vs stages 2(n-1)(n+1)/n^2 times M/B_intra
        let n = 8.0;
        let expect = (4.0 * (n - 1.0) / n - 2.0 * (n - 1.0) * (n + 1.0) / (n * n)) * 100e6 / 50e9;
        assert!(close(diff, expect), "{diff} vs {expect}");
        // and with alpha only (M = 0) they agree
        let j = Inputs { m_bytes: 0.0, ..i };
        assert!(close(ta_closed(&j), ta_stages(&j)));
    }

    #[test]
    fn eq4_and_eq5_are_the_differences_of_the_closed_forms() {
        for b in [15.75, 50.0, 100.0] {
            for p in [32.0, 256.0] {
                for a in [0.1, 100.0] {
                    let i = at(b, p, a);
                    assert!(close(delta_eq4(&i), ta_closed(&i) - pn_closed(&i)));
                    assert!(close(delta_eq5(&i), fr(&i) - pn_closed(&i)));
                }
            }
        }
    }

    #[test]
    fn sufficient_condition_implies_pn_wins() {
        for b in [15.75, 20.0, 25.0, 30.0, 50.0, 100.0] {
            for p in [32.0, 64.0, 1024.0] {
                for a in [0.1, 1.0, 100.0] {
                    let i = at(b, p, a);
                    if sufficient(&i) {
                        assert!(
                            pn_stages(&i) < fr(&i) && pn_stages(&i) < ta_stages(&i),
                            "{i:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn pn_is_independent_of_p() {
        assert!(close(
            pn_stages(&at(50.0, 32.0, 1.0)),
            pn_stages(&at(50.0, 1024.0, 1.0))
        ));
    }
}
