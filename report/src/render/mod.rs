//! Exporters: figures (plotters, SVG), HTML (self-contained), PDF (typst as a library),
//! Markdown (terminals and CI logs), JSON and CSV (the aggregates). One module per format, as hyperfine's exporters.

pub mod html;
pub mod leaderboard;
pub mod md;
pub mod pdf;
pub mod svg;

use crate::analysis::ReportError;
use crate::types::Analysis;
use std::path::{Path, PathBuf};

/// The report formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Html,
    Pdf,
    Md,
    Json,
    /// The aggregates, one line per point and metric (`report.csv`)
    Csv,
}

/// Why a list of report formats does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("`{0}` is not a report format (html, pdf, md, json, csv)")]
    Unknown(String),
    #[error("name at least one report format (html, pdf, md, json, csv)")]
    Empty,
}

impl Format {
    pub const ALL: [Format; 5] = [
        Format::Html,
        Format::Pdf,
        Format::Md,
        Format::Json,
        Format::Csv,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Format::Html => "html",
            Format::Pdf => "pdf",
            Format::Md => "md",
            Format::Json => "json",
            Format::Csv => "csv",
        }
    }

    /// Parse `html,pdf,md,json`.
    pub fn parse_list(s: &str) -> Result<Vec<Format>, FormatError> {
        let mut out = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let f = match part {
                "html" => Format::Html,
                "pdf" => Format::Pdf,
                "md" | "markdown" => Format::Md,
                "json" => Format::Json,
                "csv" => Format::Csv,
                other => return Err(FormatError::Unknown(other.to_string())),
            };
            if !out.contains(&f) {
                out.push(f);
            }
        }
        if out.is_empty() {
            return Err(FormatError::Empty);
        }
        Ok(out)
    }
}

/// The manifest as (label, text) rows, for the HTML and PDF "What ran" tables.
pub fn manifest_rows(m: &inabench_core::Manifest) -> Vec<(&'static str, String)> {
    let h = &m.host;
    let mut rows = manifest_rows_all(m, h);
    if !m.overrides.is_empty() {
        rows.insert(
            2,
            (
                "overrides",
                format!(
                    "{} (changed on the command line; the run's spec.yaml is the changed spec)",
                    m.overrides.join(" ")
                ),
            ),
        );
    }
    rows
}

fn manifest_rows_all(
    m: &inabench_core::Manifest,
    h: &inabench_core::store::HostFacts,
) -> Vec<(&'static str, String)> {
    vec![
        ("experiment", m.experiment.clone()),
        (
            "spec",
            format!("{} (sha256 {})", m.spec_file, m.spec_sha256),
        ),
        ("git revision", m.git_revision.clone()),
        ("inabench", m.inabench_version.clone()),
        (
            "host",
            format!(
                "{}: {}, {} cores, {:.1} GiB, Linux {}",
                h.hostname, h.cpu_model, h.cores, h.memory_gib, h.kernel
            ),
        ),
        ("rustc", h.rustc.clone()),
        (
            "testbed",
            format!("{} (sha256 {})", m.testbed, m.testbed_sha256),
        ),
        (
            "host profile",
            m.host_profile
                .clone()
                .unwrap_or_else(|| "none recorded (a run from before host profiles)".into()),
        ),
        ("drivers", m.drivers.join(", ")),
        (
            "fidelity",
            format!("{}: {}", m.fidelity.as_str(), m.fidelity_reason),
        ),
        ("fabric", m.fabric.clone()),
        (
            "started / finished",
            format!(
                "{} / {}",
                m.started,
                m.finished.clone().unwrap_or_else(|| "not finished".into())
            ),
        ),
        (
            "points",
            format!(
                "{} of {} done, {} failed",
                m.points_done, m.points_total, m.points_failed
            ),
        ),
        ("command", m.command.join(" ")),
    ]
}

/// Why some of the paper-vs-ours rows of a class show no deviation: one line per metric whose
/// values in that class are not at the paper's scale.
pub fn comparison_notes(rows: &[&crate::types::Comparison]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in rows {
        if let Some(why) = &c.not_comparable {
            let line = format!("{}: not comparable: {why}", c.metric);
            if !out.contains(&line) {
                out.push(line);
            }
        }
    }
    out
}

/// A paper-vs-ours row as text cells: system, metric [unit], at, paper, ours, deviation, fidelity.
pub fn comparison_cells(c: &crate::types::Comparison) -> [String; 7] {
    use inabench_core::claims::fmt_num;
    [
        c.system.clone(),
        format!("{} [{}]", c.metric, c.unit),
        inabench_core::value::params_key(&c.params),
        fmt_num(c.paper),
        c.ours.map(fmt_num).unwrap_or_else(|| "not measured".into()),
        match (&c.not_comparable, c.deviation) {
            (Some(_), _) => "not comparable".to_string(),
            (None, Some(d)) => format!("{:+.1}%", d * 100.0),
            (None, None) => String::new(),
        },
        c.fidelity.map(|f| f.as_str()).unwrap_or("-").to_string(),
    ]
}

/// The figures of a run as (id, title, svg): one per spec figure and class (classes are never
/// mixed in one figure).
pub fn figures(a: &Analysis) -> Result<Vec<(String, String, String)>, ReportError> {
    let mut out = Vec::new();
    if a.fidelities.len() <= 1 {
        for fig in &a.spec.figures {
            if let Some(svg) = svg::render_svg(a, fig)? {
                out.push((fig.id.clone(), fig.title.clone(), svg));
            }
        }
        return Ok(out);
    }
    for f in &a.fidelities {
        let mut one = a.clone();
        one.agg.retain(|r| r.fidelity == *f);
        if one.agg.is_empty() {
            continue;
        }
        one.fidelities = vec![*f];
        for fig in &a.spec.figures {
            if let Some(svg) = svg::render_svg(&one, fig)? {
                out.push((
                    format!("{}-{}", fig.id, f.as_str()),
                    format!("{} ({})", fig.title, f.as_str()),
                    svg,
                ));
            }
        }
    }
    Ok(out)
}

/// One report file, whole or not at all (core's atomic write: a temp file renamed over it,
/// removed on failure), the error naming the file the user asked for.
fn write(path: &Path, bytes: &[u8]) -> Result<(), ReportError> {
    use inabench_core::store::{self, StoreError};
    store::write_atomic(path, bytes).map_err(|e| match e {
        StoreError::Io { path, error } => ReportError::Io {
            path,
            source: error,
        },
        other => other.into(),
    })
}

/// Write the reports of a run folder; returns the files written.
pub fn write_reports(
    run_dir: &Path,
    a: &Analysis,
    formats: &[Format],
) -> Result<Vec<PathBuf>, ReportError> {
    let mut written = Vec::new();
    let figs = if formats
        .iter()
        .any(|f| matches!(f, Format::Html | Format::Pdf))
    {
        figures(a)?
    } else {
        Vec::new()
    };
    if !figs.is_empty() {
        let dir = run_dir.join("figures");
        std::fs::create_dir_all(&dir).map_err(|source| ReportError::Io {
            path: dir.clone(),
            source,
        })?;
        for (id, _, svg) in &figs {
            write(&dir.join(format!("{id}.svg")), svg.as_bytes())?;
        }
    }
    for f in formats {
        let (name, bytes) = match f {
            Format::Html => ("report.html", html::render_html(a, &figs).into_bytes()),
            Format::Md => ("report.md", md::render_markdown(a).into_bytes()),
            Format::Json => ("report.json", serde_json::to_vec_pretty(a)?),
            Format::Pdf => ("report.pdf", pdf::render_pdf(a, &figs)?),
            Format::Csv => ("report.csv", crate::analysis::aggregates_csv(&a.agg)?),
        };
        let p = run_dir.join(name);
        write(&p, &bytes)?;
        written.push(p);
    }
    Ok(written)
}

/// One claim across the run's classes (the report opens with these).
#[derive(Debug, Clone)]
pub struct GridRow {
    pub id: String,
    pub text: String,
    pub expr: String,
    pub consistency: Option<String>,
    pub finding: Option<String>,
    /// class -> (verdict, detail); a class the claim is not about is absent.
    pub cells: std::collections::BTreeMap<inabench_core::spec::Fidelity, (String, String)>,
}

/// The verdicts as one row per claim and one column per class (evidence first, then the
/// consistency checks), and the classes that are columns.
pub fn verdict_grid(a: &Analysis) -> (Vec<inabench_core::spec::Fidelity>, Vec<GridRow>) {
    let mut rows: Vec<GridRow> = Vec::new();
    let mut classes: Vec<inabench_core::spec::Fidelity> = Vec::new();
    for c in &a.claims {
        if !classes.contains(&c.fidelity) {
            classes.push(c.fidelity);
        }
        let row = match rows.iter_mut().position(|r| r.id == c.id) {
            Some(i) => &mut rows[i],
            None => {
                rows.push(GridRow {
                    id: c.id.clone(),
                    text: c.text.clone(),
                    expr: c.expr.clone(),
                    consistency: c.consistency.clone(),
                    finding: c.finding.clone(),
                    cells: Default::default(),
                });
                let n = rows.len() - 1;
                &mut rows[n]
            }
        };
        row.cells
            .insert(c.fidelity, (c.verdict.clone(), c.detail.clone()));
    }
    classes.sort();
    // evidence first; a stable sort keeps the spec's order inside each group
    rows.sort_by_key(|r| r.consistency.is_some());
    (classes, rows)
}

/// One cell of a paper table: the paper's value, and ours in each class.
pub type TableCell = (String, Vec<String>);

/// One of the paper's tables in its own shape: rows (systems or a parameter's values) by
/// metrics, the paper's value beside ours in each class.
#[derive(Debug, Clone)]
pub struct TableView {
    pub id: String,
    pub title: String,
    pub classes: Vec<inabench_core::spec::Fidelity>,
    /// metric [unit] per column
    pub columns: Vec<String>,
    /// (row label, per column: (paper, per class: ours))
    pub rows: Vec<(String, Vec<TableCell>)>,
    /// Parameters that still vary among the matching points (their values are listed in a cell,
    /// never averaged).
    pub varying: Vec<String>,
    /// (metric, class, why) for each column whose values in a class are not at the paper's
    /// scale (the metric's `not_comparable`): those cells say so.
    pub not_comparable: Vec<(String, inabench_core::spec::Fidelity, String)>,
}

/// The spec's table layouts filled from the aggregates (none for a benchmark: its tables are
/// leaderboards, [`leaderboard::leaderboards`]).
pub fn paper_tables(a: &Analysis) -> Vec<TableView> {
    if leaderboard::is_benchmark(&a.spec) {
        return Vec::new();
    }
    paper_tables_of(&a.spec, &a.agg, &a.fidelities)
}

/// The host profile a run's numbers rest on, for a benchmark's summary.
pub fn host_profile_line(m: &inabench_core::Manifest) -> String {
    format!(
        "Host costs: {} (declared inputs with provenance; nothing timed while the run ran).",
        m.host_profile
            .clone()
            .unwrap_or_else(|| "no host profile recorded".into())
    )
}

/// [`paper_tables`] from a spec, its aggregates and the classes present.
pub fn paper_tables_of(
    spec: &inabench_core::spec::Spec,
    agg: &[crate::types::AggRow],
    fidelities: &[inabench_core::spec::Fidelity],
) -> Vec<TableView> {
    use inabench_core::claims::fmt_num;
    use inabench_core::value::params_match;
    struct A<'a> {
        spec: &'a inabench_core::spec::Spec,
        agg: &'a [crate::types::AggRow],
    }
    let a = A { spec, agg };
    let mut out = Vec::new();
    for t in &a.spec.tables {
        let classes: Vec<_> = fidelities.to_vec();
        let row_keys: Vec<String> = if t.rows == "system" {
            a.spec.systems.clone()
        } else {
            let mut v: Vec<String> = a
                .agg
                .iter()
                .filter_map(|r| r.params.get(&t.rows).map(|x| x.to_string()))
                .collect();
            v.sort();
            v.dedup();
            v
        };
        let matches = |r: &crate::types::AggRow, key: &str| {
            params_match(&r.params, &t.filter)
                && if t.rows == "system" {
                    r.system == key
                } else {
                    r.params.get(&t.rows).map(|x| x.to_string()).as_deref() == Some(key)
                }
        };
        let mut varying: std::collections::BTreeSet<String> = Default::default();
        let mut not_comparable = Vec::new();
        let mut rows = Vec::new();
        for key in &row_keys {
            let mut cells = Vec::new();
            for m in &t.columns {
                let paper = a
                    .spec
                    .paper
                    .values
                    .iter()
                    .filter(|pv| {
                        pv.metric == *m
                            && params_match(&t.filter, &pv.params)
                            && if t.rows == "system" {
                                pv.system == *key
                            } else {
                                pv.params.get(&t.rows).map(|x| x.to_string()).as_deref()
                                    == Some(key.as_str())
                            }
                    })
                    .map(|pv| fmt_num(pv.value))
                    .collect::<Vec<_>>()
                    .join(" / ");
                let mut ours = Vec::new();
                let nc = a.spec.metric(m).map(|x| &x.not_comparable);
                for f in &classes {
                    let hits: Vec<&crate::types::AggRow> = a
                        .agg
                        .iter()
                        .filter(|r| r.fidelity == *f && r.metric == *m && matches(r, key))
                        .collect();
                    if hits.len() > 1 {
                        for k in hits[0].params.keys() {
                            if hits
                                .iter()
                                .any(|h| h.params.get(k) != hits[0].params.get(k))
                            {
                                varying.insert(k.clone());
                            }
                        }
                    }
                    let why = nc.and_then(|n| n.get(f));
                    ours.push(if hits.is_empty() {
                        "-".to_string()
                    } else {
                        let v = hits
                            .iter()
                            .map(|h| fmt_num(h.median))
                            .collect::<Vec<_>>()
                            .join(" / ");
                        match why {
                            Some(w) => {
                                let k = (m.clone(), *f, w.clone());
                                if !not_comparable.contains(&k) {
                                    not_comparable.push(k);
                                }
                                format!("{v} (not comparable)")
                            }
                            None => v,
                        }
                    });
                }
                cells.push((if paper.is_empty() { "-".into() } else { paper }, ours));
            }
            rows.push((key.clone(), cells));
        }
        let columns = t
            .columns
            .iter()
            .map(|m| match a.spec.metric(m) {
                Some(x) => format!("{m} [{}]", x.unit),
                None => m.clone(),
            })
            .collect();
        out.push(TableView {
            id: t.id.clone(),
            title: t.title.clone(),
            classes,
            columns,
            rows,
            varying: varying.into_iter().collect(),
            not_comparable,
        });
    }
    out
}

impl TableView {
    /// The notes under the table: why a class's values of a column are not at the paper's scale.
    pub fn notes(&self) -> Vec<String> {
        self.not_comparable
            .iter()
            .map(|(m, f, why)| format!("{m}, {}: not comparable: {why}", f.as_str()))
            .collect()
    }

    /// A cell as one line of text: "paper X; emulated: Y; simulated: Z".
    pub fn cell_text(&self, cell: &TableCell) -> String {
        let (paper, ours) = cell;
        let o: Vec<String> = self
            .classes
            .iter()
            .zip(ours)
            .map(|(f, v)| format!("{}: {v}", f.as_str()))
            .collect();
        format!("paper {paper}; {}", o.join("; "))
    }
}

/// A verdict with its finding mark, for the grid's cells.
pub fn verdict_label(verdict: &str, finding: bool) -> String {
    if verdict == "fails" && finding {
        "fails (finding)".to_string()
    } else {
        verdict.to_string()
    }
}

/// How the verdicts are computed, in one paragraph (every report says it).
pub const METHOD: &str = "A claim is judged per class on the median of the repetitions at each planned point. When the repetitions vary, the verdict is statistical: a percentile bootstrap (1000 resamples of each point's repetitions, with replacement, seeded) re-evaluates the claim; it holds when it holds in at least 95% of the resamples, fails when it holds in at most 5%, and is inconclusive otherwise; the 95% interval of the tightest ratio of a comparison is shown. A point with a wrong result makes every claim over it fail; planned points that never finished make a claim not checkable (k of n missing). `x == min(x(*))` on a tie is inconclusive: a tie is not a win. A claim that needs what this host lacks (cores, a line rate, devices) is not checkable here, with where it is checked instead. Consistency checks (arithmetic on the paper's own inputs, or true by construction of a model) are shown apart from evidence. A metric the run did not record is inconclusive (not measured in this run). Host costs are the run's host profile (declared inputs with provenance); a claim that declares the profile input it rests on shows where its verdict flips along that input (reruns of its points), and reads host-dependent when the flip lies inside the input's stated band.";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::AggRow;
    use inabench_core::spec::{Fidelity, Spec};
    use inabench_core::value::{Params, Scalar};

    /// A list of formats parses in order without repeats (`markdown` is `md`); a name that is
    /// not a format, or no name, is a typed error with its sentence.
    #[test]
    fn format_lists_parse_or_say_why_not() {
        assert_eq!(
            Format::parse_list("pdf, markdown,json,md"),
            Ok(vec![Format::Pdf, Format::Md, Format::Json])
        );
        let e = Format::parse_list("html,docx").expect_err("docx");
        assert_eq!(e, FormatError::Unknown("docx".into()));
        assert_eq!(
            e.to_string(),
            "`docx` is not a report format (html, pdf, md, json, csv)"
        );
        assert_eq!(Format::parse_list(" , "), Err(FormatError::Empty));
    }

    const SPEC: &str = r#"
id: aleph-t
paper_id: aleph
title: "t"
citation: "t"
artifact: "Table 2"
status: planned
description: "t"
systems: [xdp, tcp]
fidelity: [hardware, emulated, modelled]
profiles:
  quick:
    estimated_seconds: 1
    grid:
      - rate: [5, 10]
  full:
    estimated_seconds: 1
    grid:
      - rate: [5, 10]
metrics:
  - name: cores
    unit: cores
    better: lower
    not_comparable: {emulated: "measured at rate_scale 0.05"}
paper:
  source: "Table 2"
  values:
    - {system: xdp, metric: cores, value: 0.3, params: {rate: 5}}
    - {system: tcp, metric: cores, value: 3.5, params: {rate: 5}}
tables:
  - id: t5
    title: "cores at 5"
    columns: [cores]
    filter: {rate: 5}
"#;

    fn agg(system: &str, f: Fidelity, rate: i64, v: f64) -> AggRow {
        let mut params = Params::new();
        params.insert("rate".into(), Scalar::Int(rate));
        AggRow {
            system: system.into(),
            fidelity: f,
            fabric: "x".into(),
            params,
            metric: "cores".into(),
            unit: "cores".into(),
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

    /// A class whose values of a metric are declared not at the paper's scale shows them beside
    /// the paper's without a deviation and says why; another class keeps its deviation.
    #[test]
    fn a_class_not_at_the_papers_scale_gets_no_deviation() {
        let spec = Spec::from_yaml(std::path::Path::new("t.yaml"), SPEC).expect("spec");
        let fids = [Fidelity::Emulated, Fidelity::Modelled];
        let rows = vec![
            agg("xdp", Fidelity::Emulated, 5, 0.016),
            agg("tcp", Fidelity::Emulated, 5, 0.03),
            agg("xdp", Fidelity::Modelled, 5, 0.6),
            agg("tcp", Fidelity::Modelled, 5, 1.75),
            agg("xdp", Fidelity::Emulated, 10, 0.03),
        ];
        let c = crate::analysis::compare(&spec, &rows, &fids);
        let em: Vec<_> = c
            .iter()
            .filter(|c| c.fidelity == Some(Fidelity::Emulated))
            .collect();
        assert_eq!(em.len(), 2);
        for x in &em {
            assert_eq!(x.deviation, None);
            assert_eq!(
                x.not_comparable.as_deref(),
                Some("measured at rate_scale 0.05")
            );
            assert_eq!(comparison_cells(x)[5], "not comparable");
        }
        assert_eq!(
            comparison_notes(&em),
            vec!["cores: not comparable: measured at rate_scale 0.05".to_string()]
        );
        let xdp_mod = c
            .iter()
            .find(|c| c.fidelity == Some(Fidelity::Modelled) && c.system == "xdp")
            .expect("modelled xdp");
        assert_eq!(xdp_mod.not_comparable, None);
        assert!((xdp_mod.deviation.expect("a deviation") - 1.0).abs() < 1e-12);
        assert_eq!(comparison_cells(xdp_mod)[5], "+100.0%");

        let t = paper_tables_of(&spec, &rows, &fids);
        assert_eq!(t.len(), 1);
        let (label, cells) = &t[0].rows[0];
        assert_eq!(label, "xdp");
        // the filter keeps rate 5 only: one value per class, the emulated one marked
        assert_eq!(
            t[0].cell_text(&cells[0]),
            "paper 0.3; emulated: 0.016 (not comparable); modelled: 0.6"
        );
        assert_eq!(
            t[0].notes(),
            vec!["cores, emulated: not comparable: measured at rate_scale 0.05".to_string()]
        );
        // a class the spec does not run is refused in not_comparable
        let bad = SPEC.replace("{emulated: \"measured", "{simulated: \"measured");
        let e = Spec::from_yaml(std::path::Path::new("t.yaml"), &bad).expect_err("refused");
        assert!(e.to_string().contains("metrics[0].not_comparable"), "{e}");
    }
}
