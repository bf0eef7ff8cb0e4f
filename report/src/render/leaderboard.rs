//! The benchmark family's leaderboards (`paper_id: bench`, `experiments/bench/`): no paper to
//! put beside ours, so each of the spec's `tables:` is a regime (its `rows` a parameter, its
//! `filter` the rest of the point) and each row ranks the systems by the table's first metric,
//! in the direction the metric's `better` gives: the best system, by how much it leads the next,
//! the whole ranking, and every system of the spec that has no value there with why (its build
//! refused the point, with the build's sentence the cell kept as its row `refused: <why>`; it did
//! not finish, its sum was wrong, the version cannot run it, or the point never ran). A table
//! whose metric no cell of a class recorded has no board in that class (it is another class's
//! table). Then a summary: which system is best where, and by how much.

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

/// The prefix of the row a refused cell keeps its reason in: the metric `refused: <why>` = 1
/// beside `refused` = 1 (the benchmark workloads' `REFUSAL_PREFIX`, inabench_workloads::bench).
pub const REFUSAL_PREFIX: &str = "refused: ";

/// Why `system`'s cell at `key` was refused: the sentence its row `refused: <why>` keeps.
fn refusal(
    agg: &[AggRow],
    class: Fidelity,
    t: &inabench_core::spec::TableLayout,
    key: &str,
    system: &str,
) -> Option<String> {
    agg.iter()
        .filter(|r| {
            r.fidelity == class
                && r.system == system
                && params_match(&r.params, &t.filter)
                && r.params.get(&t.rows).map(|x| x.to_string()).as_deref() == Some(key)
        })
        .find_map(|r| r.metric.strip_prefix(REFUSAL_PREFIX).map(str::to_string))
}

/// The leaderboards of a benchmark run: one per spec table and class (none for a paper's spec).
pub fn leaderboards(a: &Analysis) -> Vec<Leaderboard> {
    leaderboards_of(
        &a.spec,
        &a.agg,
        &a.fidelities,
        &a.manifest.systems_not_built,
    )
}

/// [`leaderboards`] from a spec, its aggregates, the classes present and the systems the run
/// left out of its plan.
pub fn leaderboards_of(
    spec: &Spec,
    agg: &[AggRow],
    fidelities: &[Fidelity],
    not_built: &[String],
) -> Vec<Leaderboard> {
    struct A<'a> {
        spec: &'a Spec,
        agg: &'a [AggRow],
        fidelities: &'a [Fidelity],
    }
    let a = A {
        spec,
        agg,
        fidelities,
    };
    if !is_benchmark(a.spec) {
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
        for &class in a.fidelities {
            // a table whose metric no cell of the class recorded is another class's (bench-small's
            // udp table in the simulated class, the simulated `time` among the emulated class's
            // udp cells): no board of rows that all say "records no value here"
            if !a
                .agg
                .iter()
                .any(|r| r.fidelity == class && &r.metric == metric)
            {
                continue;
            }
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
                let mut ranking: Vec<(String, f64)> = values(a.agg, class, t, &key, metric)
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
                        values(a.agg, class, t, &key, m)
                            .find(|r| &r.system == s)
                            .map(|r| r.median)
                    };
                    let why = if flag("refused").is_some_and(|v| v > 0.0) {
                        match refusal(a.agg, class, t, &key, s) {
                            Some(r) => format!("cannot run this cell: {r}"),
                            // a run from before the reason was kept with the cell
                            None => "cannot run this cell (the run prints why)".into(),
                        }
                    } else if let Some(u) = flag("unfinished_workers").filter(|v| *v > 0.0) {
                        format!(
                            "did not finish: {} workers without a result at the time limit",
                            fmt_num(u)
                        )
                    } else if flag("wrong_workers").is_some_and(|v| v > 0.0) {
                        "a wrong sum (the point failed)".into()
                    } else if flag("refused") == Some(0.0) {
                        // the cell ran and recorded no value of this metric: it does not apply
                        // to the system (bench-twojobs' fallback share on a static split)
                        format!("ran, but records no {metric} here (it does not apply to it)")
                    } else if not_built.contains(s) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use inabench_core::value::{Params, Scalar};

    const SPEC: &str = r#"
id: bench-t
paper_id: bench
title: "t"
citation: "none"
artifact: "benchmark"
status: planned
description: "t"
systems: [a, b, c, d]
fidelity: [simulated]
profiles:
  quick:
    estimated_seconds: 1
    grid:
      - {size_bytes: [4096, 65536], workers: [8]}
  full:
    estimated_seconds: 1
    grid:
      - {size_bytes: [4096, 65536], workers: [8]}
metrics:
  - {name: time, unit: us, better: lower}
  - {name: refused, unit: '', better: none}
tables:
  - {id: by-size, title: "by size", rows: size_bytes, columns: [time], filter: {workers: 8}}
"#;

    fn row(system: &str, size: i64, metric: &str, v: f64) -> AggRow {
        let mut params = Params::new();
        params.insert("size_bytes".into(), Scalar::Int(size));
        params.insert("workers".into(), Scalar::Int(8));
        AggRow {
            system: system.into(),
            fidelity: Fidelity::Simulated,
            fabric: "sim".into(),
            params,
            metric: metric.into(),
            unit: String::new(),
            n: 1,
            median: v,
            mean: v,
            min: v,
            max: v,
            ci_lo: v,
            ci_hi: v,
            reps: vec![v],
        }
    }

    /// Rows in numeric order; the fastest system first with its lead over the next; a refused
    /// cell and a system the version cannot run named with why, never ranked; the summary says
    /// who is best where.
    #[test]
    fn the_best_system_leads_and_the_missing_say_why() {
        let spec = Spec::from_yaml(std::path::Path::new("t.yaml"), SPEC).expect("spec");
        // no paper block: a benchmark's spec reads without one
        assert!(spec.paper.values.is_empty());
        let agg = vec![
            row("a", 65536, "time", 10.0),
            row("b", 65536, "time", 25.0),
            row("c", 65536, "refused", 1.0),
            row(
                "c",
                65536,
                "refused: 8 workers: c sums 2 workers at most",
                1.0,
            ),
            row("a", 4096, "time", 3.0),
            row("b", 4096, "time", 2.0),
            row("c", 4096, "time", 2.0),
        ];
        let boards = leaderboards_of(&spec, &agg, &[Fidelity::Simulated], &["d".into()]);
        assert_eq!(boards.len(), 1);
        let b = &boards[0];
        let keys: Vec<&str> = b.rows.iter().map(|r| r.key.as_str()).collect();
        assert_eq!(keys, ["4096", "65536"]);
        // a tie is said as a tie, not a win
        assert!(
            b.rows[0].best_text("us").starts_with("tie: "),
            "{}",
            b.rows[0].best_text("us")
        );
        let r = &b.rows[1];
        let (best, v, lead) = r.best().expect("a best");
        assert_eq!((best, v), ("a", 10.0));
        assert!((lead.expect("a lead") - 2.5).abs() < 1e-12);
        assert_eq!(r.best_text("us"), "a 10 us, 2.50x ahead of b (25)");
        assert_eq!(r.ranking_text(), "a 10, b 25");
        assert_eq!(r.missing.len(), 2);
        // the refusal's sentence, kept with the cell, is the reason given
        assert_eq!(
            r.missing[0],
            (
                "c".to_string(),
                "cannot run this cell: 8 workers: c sums 2 workers at most".to_string()
            )
        );

        assert!(r.missing[1].0 == "d" && r.missing[1].1.contains("this version cannot run"));
        let sum = summary(&boards);
        assert_eq!(sum.len(), 1);
        assert!(
            sum[0].contains("a at 1 of 2 (size_bytes = 65536), ahead by 2.50x"),
            "{}",
            sum[0]
        );
        // a system that ran the cell but records no value of the metric says so
        let ran = vec![row("a", 4096, "time", 3.0), row("b", 4096, "refused", 0.0)];
        let boards = leaderboards_of(&spec, &ran, &[Fidelity::Simulated], &[]);
        assert!(
            boards[0].rows[0].missing.iter().any(|(s, why)| s == "b"
                && why == "ran, but records no time here (it does not apply to it)"),
            "{:?}",
            boards[0].rows[0].missing
        );
        // a class in which no cell recorded the table's metric gets no board of it
        let boards = leaderboards_of(&spec, &ran, &[Fidelity::Simulated, Fidelity::Emulated], &[]);
        assert_eq!(
            boards.iter().map(|b| b.class).collect::<Vec<_>>(),
            [Fidelity::Simulated]
        );
        // a paper's spec gets no leaderboard
        let paper = SPEC
            .replace("paper_id: bench", "paper_id: aleph")
            .replace("id: bench-t", "id: aleph-t");
        let spec = Spec::from_yaml(std::path::Path::new("t.yaml"), &paper).expect("spec");
        assert!(leaderboards_of(&spec, &agg, &[Fidelity::Simulated], &[]).is_empty());
    }
}
