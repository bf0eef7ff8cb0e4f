//! The benchmark family's leaderboards (`paper_id: bench`, `experiments/bench/`): no paper to
//! put beside ours, so each of the spec's `tables:` is a regime (its `rows` a parameter, its
//! `filter` the rest of the point) and each row ranks the systems by the table's first metric,
//! in the direction the metric's `better` gives: the best system, by how much it leads the next,
//! the whole ranking, and every system of the spec that has no value there with why (its build
//! refused the point, it did not finish, its sum was wrong, the version cannot run it, or the
//! point never ran). Then a summary: which system is best where, and by how much.

use crate::types::{AggRow, Analysis};
use inabench_core::claims::fmt_num;
use inabench_core::spec::{Better, Fidelity, Spec};
use inabench_core::value::params_match;

/// Whether a spec is a benchmark of the suite's own (no paper): its report ranks systems.
pub fn is_benchmark(spec: &Spec) -> bool {
    spec.paper_id == "bench"
}

/// One regime's ranking in one class.
#[derive(Debug, Clone)]
pub struct Leaderboard {
    pub id: String,
    pub title: String,
    pub class: Fidelity,
    /// The parameter whose values are the rows.
    pub param: String,
    /// The metric ranked, and its unit.
    pub metric: String,
    pub unit: String,
    pub better: Better,
    pub rows: Vec<LeaderRow>,
}

/// One row: the systems with a value, best first, and those without, with why.
#[derive(Debug, Clone)]
pub struct LeaderRow {
    pub key: String,
    pub ranking: Vec<(String, f64)>,
    pub missing: Vec<(String, String)>,
}

impl LeaderRow {
    /// The best system, and its lead over the next as a factor (>= 1: how many times faster, or
    /// how many times the bandwidth); `None` for the factor when it is alone.
    pub fn best(&self) -> Option<(&str, f64, Option<f64>)> {
        let (s, v) = self.ranking.first()?;
        let lead = self.ranking.get(1).map(|(_, w)| {
            let (a, b) = (v.abs(), w.abs());
            if a == 0.0 || b == 0.0 {
                f64::NAN
            } else if a < b {
                b / a
            } else {
                a / b
            }
        });
        Some((s, *v, lead))
    }

    /// "netreduce 108.7 us, 1.12x ahead of switchml_rdma (121.9)" or "tie: a and b 1.5".
    pub fn best_text(&self, unit: &str) -> String {
        let Some((s, v, lead)) = self.best() else {
            return "no system has a value".into();
        };
        match (lead, self.ranking.get(1)) {
            (Some(l), Some((n, w))) if v == *w => {
                let _ = l;
                format!("tie: {s} and {n} at {} {unit}", fmt_num(v))
            }
            (Some(l), Some((n, w))) => format!(
                "{s} {} {unit}, {}x ahead of {n} ({})",
                fmt_num(v),
                fmt_lead(l),
                fmt_num(*w)
            ),
            _ => format!("{s} {} {unit}, alone", fmt_num(v)),
        }
    }

    /// The ranking as one line: "a 1.0, b 1.2, c 3.4".
    pub fn ranking_text(&self) -> String {
        self.ranking
            .iter()
            .map(|(s, v)| format!("{s} {}", fmt_num(*v)))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The systems without a value: "rc_stream: refused by its build; ...".
    pub fn missing_text(&self) -> String {
        self.missing
            .iter()
            .map(|(s, why)| format!("{s}: {why}"))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

fn fmt_lead(l: f64) -> String {
    if l.is_finite() {
        format!("{l:.2}")
    } else {
        "n/a".into()
    }
}

/// The value of `metric` for `system` at the rows matching `key` (one point per system in a
/// well-formed regime; several are listed apart).
fn values<'a>(
    agg: &'a [AggRow],
    class: Fidelity,
    t: &inabench_core::spec::TableLayout,
    key: &str,
    metric: &str,
) -> impl Iterator<Item = &'a AggRow> {
    let (param, filter) = (t.rows.clone(), t.filter.clone());
    let key = key.to_string();
    let metric = metric.to_string();
    agg.iter().filter(move |r| {
        r.fidelity == class
            && r.metric == metric
            && params_match(&r.params, &filter)
            && r.params.get(&param).map(|x| x.to_string()).as_deref() == Some(key.as_str())
    })
}

/// The leaderboards of a benchmark run: one per spec table and class (none for a paper's spec).
pub fn leaderboards(a: &Analysis) -> Vec<Leaderboard> {
    if !is_benchmark(&a.spec) {
        return Vec::new();
    }
    let mut out = Vec::new();
    for t in &a.spec.tables {
        let Some(metric) = t.columns.first() else {
            continue;
        };
        let (unit, better) = a
            .spec
            .metric(metric)
            .map(|m| (m.unit.clone(), m.better))
            .unwrap_or((String::new(), Better::Lower));
        for &class in &a.fidelities {
            let mut keys: Vec<String> = a
                .agg
                .iter()
                .filter(|r| r.fidelity == class && params_match(&r.params, &t.filter))
                .filter_map(|r| r.params.get(&t.rows).map(|x| x.to_string()))
                .collect();
            // numbers in numeric order (4096 before 65536), then text
            keys.sort_by(|x, y| match (x.parse::<f64>(), y.parse::<f64>()) {
                (Ok(p), Ok(q)) => p.total_cmp(&q),
                _ => x.cmp(y),
            });
            keys.dedup();
            let mut rows = Vec::new();
            for key in keys {
                let mut ranking: Vec<(String, f64)> = values(&a.agg, class, t, &key, metric)
                    .map(|r| (r.system.clone(), r.median))
                    .collect();
                match better {
                    Better::Higher => ranking.sort_by(|x, y| y.1.total_cmp(&x.1)),
                    _ => ranking.sort_by(|x, y| x.1.total_cmp(&y.1)),
                }
                let mut missing = Vec::new();
                for s in &a.spec.systems {
                    if ranking.iter().any(|(r, _)| r == s) {
                        continue;
                    }
                    let flag = |m: &str| {
                        values(&a.agg, class, t, &key, m)
                            .find(|r| &r.system == s)
                            .map(|r| r.median)
                    };
                    let why = if flag("refused").is_some_and(|v| v > 0.0) {
                        "refused by the system's build (the run prints its reason)".into()
                    } else if let Some(u) = flag("unfinished_workers").filter(|v| *v > 0.0) {
                        format!(
                            "did not finish: {} workers without a result at the time limit",
                            fmt_num(u)
                        )
                    } else if flag("wrong_workers").is_some_and(|v| v > 0.0) {
                        "a wrong sum (the point failed)".into()
                    } else if a.manifest.systems_not_built.contains(s) {
                        "this version cannot run the system in this workload".into()
                    } else {
                        "no value: the point failed or never ran".into()
                    };
                    missing.push((s.clone(), why));
                }
                rows.push(LeaderRow {
                    key,
                    ranking,
                    missing,
                });
            }
            out.push(Leaderboard {
                id: t.id.clone(),
                title: t.title.clone(),
                class,
                param: t.rows.clone(),
                metric: metric.clone(),
                unit: unit.clone(),
                better,
                rows,
            });
        }
    }
    out
}

/// The summary of a set of leaderboards: per board, which system is best at how many rows (and
/// where), and its smallest and largest lead.
pub fn summary(boards: &[Leaderboard]) -> Vec<String> {
    let mut out = Vec::new();
    for b in boards {
        let mut wins: Vec<(String, Vec<String>, Vec<f64>)> = Vec::new();
        for r in &b.rows {
            let Some((s, _, lead)) = r.best() else {
                continue;
            };
            let i = match wins.iter().position(|(w, _, _)| w == s) {
                Some(i) => i,
                None => {
                    wins.push((s.to_string(), Vec::new(), Vec::new()));
                    wins.len() - 1
                }
            };
            wins[i].1.push(r.key.clone());
            if let Some(l) = lead.filter(|l| l.is_finite()) {
                wins[i].2.push(l);
            }
        }
        if wins.is_empty() {
            continue;
        }
        wins.sort_by_key(|w| std::cmp::Reverse(w.1.len()));
        let parts: Vec<String> = wins
            .iter()
            .map(|(s, keys, leads)| {
                let lead = match (
                    leads.iter().copied().reduce(f64::min),
                    leads.iter().copied().reduce(f64::max),
                ) {
                    (Some(lo), Some(hi)) if (hi - lo).abs() < 0.005 => {
                        format!(", ahead by {}x", fmt_lead(lo))
                    }
                    (Some(lo), Some(hi)) => {
                        format!(", ahead by {}x to {}x", fmt_lead(lo), fmt_lead(hi))
                    }
                    _ => String::new(),
                };
                format!(
                    "{s} at {} of {} ({} = {}){lead}",
                    keys.len(),
                    b.rows.len(),
                    b.param,
                    keys.join(", ")
                )
            })
            .collect();
        out.push(format!(
            "{} ({}, {} {}): best {}",
            b.title,
            b.class.as_str(),
            b.metric,
            match b.better {
                Better::Higher => "higher is better",
                _ => "lower is better",
            },
            parts.join("; ")
        ));
    }
    out
}
