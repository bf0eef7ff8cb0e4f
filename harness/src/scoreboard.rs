//! The scoreboard: every claim of every experiment, per class, from the latest run of each
//! experiment that ran that class. Evidence and consistency checks are counted apart; a failing
//! claim whose spec explains it carries its finding.

use inabench_core::catalog::Catalog;
use inabench_core::spec::{Fidelity, Spec, Status};
use inabench_core::store::{self, Manifest};
use inabench_report::ClaimResult;
// the report's escaper (one definition: it also escapes `'`)
use inabench_report::render::html::esc;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// One claim's verdict in one class, with the run it comes from.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Cell {
    pub verdict: String,
    pub detail: String,
    pub run_id: String,
}

/// One claim of one experiment across classes.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Line {
    pub experiment: String,
    pub claim: String,
    pub text: String,
    pub consistency: bool,
    pub finding: Option<String>,
    pub classes: BTreeMap<Fidelity, Cell>,
}

impl Line {
    /// A claim's line, with its consistency and finding as the spec says them today (a stale run
    /// may lack a finding).
    fn of(spec: &Spec, c: &ClaimResult) -> Line {
        let now = spec.claims.iter().find(|x| x.id == c.id);
        Line {
            experiment: spec.id.clone(),
            claim: c.id.clone(),
            text: c.text.clone(),
            consistency: now.map_or(c.consistency.is_some(), |x| x.consistency.is_some()),
            finding: now.map_or(c.finding.clone(), |x| x.finding.clone()),
            classes: BTreeMap::new(),
        }
    }
}

/// The scoreboard.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Board {
    pub lines: Vec<Line>,
    /// Implemented experiments without any run in the results folder.
    pub never_run: Vec<String>,
    /// experiment -> run id -> the run's folder (for links).
    #[serde(skip)]
    pub runs: BTreeMap<String, BTreeMap<String, PathBuf>>,
}

#[derive(Debug, thiserror::Error)]
pub enum BoardError {
    #[error(transparent)]
    Store(#[from] store::StoreError),
    #[error(transparent)]
    Catalog(#[from] inabench_core::catalog::CatalogError),
    #[error("{path}: {message}")]
    Report { path: PathBuf, message: String },
    /// A page that could not be written (the OS error said once).
    #[error("cannot write {path} ({source})")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A run's claim verdicts: from its `report.json`, else analysed from its rows.
fn claims_of(dir: &Path) -> Result<Vec<ClaimResult>, BoardError> {
    let json = dir.join("report.json");
    if let Ok(text) = std::fs::read_to_string(&json) {
        #[derive(serde::Deserialize)]
        struct Only {
            claims: Vec<ClaimResult>,
        }
        if let Ok(o) = serde_json::from_str::<Only>(&text) {
            return Ok(o.claims);
        }
    }
    let m = store::read_manifest(dir)?;
    let spec = Spec::load(&dir.join(store::SPEC_FILE)).map_err(|e| BoardError::Report {
        path: dir.to_path_buf(),
        message: e.to_string(),
    })?;
    let a = inabench_report::analysis::analyse(dir, &spec, m).map_err(|e| BoardError::Report {
        path: dir.to_path_buf(),
        message: e.to_string(),
    })?;
    Ok(a.claims)
}

/// Collect the board from `results` (only `paper`'s experiments when given).
pub fn collect(results: &Path, paper: Option<&str>) -> Result<Board, BoardError> {
    let cat = crate::paths::catalog()?;
    collect_from(&cat, results, paper)
}

/// Collect the board for a catalogue (tests use their own).
pub fn collect_from(
    cat: &Catalog,
    results: &Path,
    paper: Option<&str>,
) -> Result<Board, BoardError> {
    let mut runs: Vec<Manifest> = store::list_runs(results)?;
    // newest first: the first run found for a class is the latest one
    runs.sort_by(|a, b| b.started.cmp(&a.started));
    let mut board = Board::default();
    for e in &cat.entries {
        let spec = &e.spec;
        if spec.status != Status::Implemented || paper.is_some_and(|p| spec.paper_id != p) {
            continue;
        }
        let mine: Vec<&Manifest> = runs.iter().filter(|m| m.experiment == spec.id).collect();
        if mine.is_empty() {
            board.never_run.push(spec.id.clone());
            continue;
        }
        let mut lines: BTreeMap<String, Line> = BTreeMap::new();
        let order: Vec<String> = spec.claims.iter().map(|c| c.id.clone()).collect();
        let mut seen_class: Vec<Fidelity> = Vec::new();
        // claims about a class no run ran (hardware on a software host): their `not checkable`
        // verdicts from the newest run, so they are on the board too
        let mut unran: Vec<(ClaimResult, String)> = Vec::new();
        for m in mine {
            let classes: Vec<Fidelity> = m
                .classes()
                .into_iter()
                .filter(|f| !seen_class.contains(f))
                .collect();
            if classes.is_empty() || m.status == store::RunStatus::Running {
                continue;
            }
            let dir = results.join(&m.run_id);
            let Ok(claims) = claims_of(&dir) else {
                continue;
            };
            if seen_class.is_empty() {
                unran = claims
                    .iter()
                    .filter(|c| !m.classes().contains(&c.fidelity))
                    .map(|c| (c.clone(), m.run_id.clone()))
                    .collect();
            }
            seen_class.extend(classes.iter().copied());
            board
                .runs
                .entry(spec.id.clone())
                .or_default()
                .insert(m.run_id.clone(), dir);
            for c in claims.iter().filter(|c| classes.contains(&c.fidelity)) {
                let line = lines
                    .entry(c.id.clone())
                    .or_insert_with(|| Line::of(spec, c));
                line.classes.insert(
                    c.fidelity,
                    Cell {
                        verdict: c.verdict.clone(),
                        detail: c.detail.clone(),
                        run_id: m.run_id.clone(),
                    },
                );
            }
        }
        for (c, run_id) in unran {
            if seen_class.contains(&c.fidelity) {
                continue;
            }
            let line = lines
                .entry(c.id.clone())
                .or_insert_with(|| Line::of(spec, &c));
            line.classes.entry(c.fidelity).or_insert(Cell {
                verdict: c.verdict.clone(),
                detail: c.detail.clone(),
                run_id,
            });
        }
        for id in &order {
            if let Some(l) = lines.remove(id) {
                board.lines.push(l);
            }
        }
        // claims a run had that the spec no longer has are left out: the board is about the
        // claims as the specs state them now
    }
    Ok(board)
}

/// Counts per verdict, for evidence and for consistency checks.
pub fn totals(board: &Board) -> (BTreeMap<String, usize>, BTreeMap<String, usize>) {
    let mut ev = BTreeMap::new();
    let mut co = BTreeMap::new();
    for l in &board.lines {
        for c in l.classes.values() {
            let mut key = c.verdict.clone();
            if key == "fails" && l.finding.is_some() {
                key = "fails (finding)".into();
            }
            *(if l.consistency { &mut co } else { &mut ev })
                .entry(key)
                .or_insert(0) += 1;
        }
    }
    (ev, co)
}

fn fmt_totals(t: &BTreeMap<String, usize>) -> String {
    let n: usize = t.values().sum();
    let parts: Vec<String> = t.iter().map(|(k, v)| format!("{v} {k}")).collect();
    format!("{n} verdicts: {}", parts.join(", "))
}

fn short(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        format!(
            "{}...",
            s.chars().take(n.saturating_sub(3)).collect::<String>()
        )
    }
}

/// The board as a terminal table: one line per claim and class.
pub fn terminal(board: &Board) -> String {
    let mut out = String::new();
    let (ev, co) = totals(board);
    let _ = writeln!(
        out,
        "{:<24} {:<34} {:<10} {:<20} WHY",
        "EXPERIMENT", "CLAIM", "CLASS", "VERDICT"
    );
    for consistency in [false, true] {
        if consistency && board.lines.iter().any(|l| l.consistency) {
            let _ = writeln!(out, "-- consistency checks, not evidence --");
        }
        for l in board.lines.iter().filter(|l| l.consistency == consistency) {
            for (f, c) in &l.classes {
                let verdict = if c.verdict == "fails" && l.finding.is_some() {
                    "fails (finding)".to_string()
                } else {
                    c.verdict.clone()
                };
                let why = if c.verdict == "fails" {
                    l.finding.clone().unwrap_or_else(|| c.detail.clone())
                } else {
                    c.detail.clone()
                };
                let _ = writeln!(
                    out,
                    "{:<24} {:<34} {:<10} {:<20} {}",
                    short(&l.experiment, 24),
                    short(&l.claim, 34),
                    f.as_str(),
                    verdict,
                    short(&why, 100)
                );
            }
        }
    }
    if !board.never_run.is_empty() {
        let _ = writeln!(out, "never run: {}", board.never_run.join(", "));
    }
    let _ = writeln!(out, "evidence: {}", fmt_totals(&ev));
    let _ = writeln!(out, "consistency checks: {}", fmt_totals(&co));
    out
}

/// The board as a self-contained HTML page linking each run's report.
pub fn html(board: &Board, results: &Path, page: &Path) -> String {
    let base = page.parent().unwrap_or(results);
    let link = |exp: &str, run: &str| -> String {
        board
            .runs
            .get(exp)
            .and_then(|r| r.get(run))
            .map(|dir| {
                let report = dir.join("report.html");
                let rel = report
                    .strip_prefix(base)
                    .map(Path::to_path_buf)
                    .unwrap_or(report);
                rel.display().to_string()
            })
            .unwrap_or_default()
    };
    let (ev, co) = totals(board);
    let mut h = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>inabench scoreboard</title><style>\
         body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse;width:100%}\
         td,th{border:1px solid #ccc;padding:4px 6px;vertical-align:top;font-size:13px}th{background:#f3f3f3}\
         .holds{background:#e3f6e3}.fails{background:#fbe3e3}.inconclusive{background:#fff5d6}\
         .nc{background:#eee;color:#555}.finding{font-style:italic;color:#633}</style></head><body>\
         <h1>inabench scoreboard</h1>",
    );
    let _ = write!(
        h,
        "<p>Every claim of every experiment, per class, from the latest run of each experiment that ran \
         that class. Evidence: {}. Consistency checks (arithmetic on the paper's own inputs, or true by \
         construction of a model), shown apart: {}.</p>",
        esc(&fmt_totals(&ev)),
        esc(&fmt_totals(&co))
    );
    for consistency in [false, true] {
        let _ = write!(
            h,
            "<h2>{}</h2><table><tr><th>experiment</th><th>claim</th><th>class</th><th>verdict</th><th>numbers and why</th></tr>",
            if consistency {
                "Consistency checks, not evidence"
            } else {
                "Evidence"
            }
        );
        for l in board.lines.iter().filter(|l| l.consistency == consistency) {
            for (f, c) in &l.classes {
                let class = match c.verdict.as_str() {
                    "holds" => "holds",
                    "fails" => "fails",
                    "inconclusive" => "inconclusive",
                    _ => "nc",
                };
                let finding = match (&l.finding, c.verdict.as_str()) {
                    (Some(fd), "fails") => {
                        format!("<div class=\"finding\">finding: {}</div>", esc(fd))
                    }
                    _ => String::new(),
                };
                let _ = write!(
                    h,
                    "<tr><td><a href=\"{}\">{}</a></td><td title=\"{}\">{}</td><td>{}</td><td class=\"{class}\">{}</td><td>{}{finding}</td></tr>",
                    esc(&link(&l.experiment, &c.run_id)),
                    esc(&l.experiment),
                    esc(&l.text),
                    esc(&l.claim),
                    f.as_str(),
                    esc(&c.verdict),
                    esc(&c.detail)
                );
            }
        }
        h.push_str("</table>");
    }
    if !board.never_run.is_empty() {
        let _ = write!(h, "<p>Never run: {}</p>", esc(&board.never_run.join(", ")));
    }
    h.push_str("</body></html>\n");
    h
}

/// Write the HTML page.
pub fn write_html(board: &Board, results: &Path, page: &Path) -> Result<(), BoardError> {
    if let Some(d) = page.parent() {
        std::fs::create_dir_all(d).map_err(|source| BoardError::Io {
            path: d.to_path_buf(),
            source,
        })?;
    }
    // whole or not at all: a full disk keeps the old page (no empty file left)
    store::write_atomic(page, html(board, results, page).as_bytes()).map_err(|e| match e {
        store::StoreError::Io { path, error } => BoardError::Io {
            path,
            source: error,
        },
        other => BoardError::Store(other),
    })
}

/// The ledger's header: what the file is and how to refresh it.
pub const LEDGER_HEADER: &str = "# The quick profile's verdicts: experiment, claim, class, verdict (tab-separated).\n# Refresh: inabench reproduce --all --profile quick && inabench scoreboard --ledger experiments/verdicts.ledger\n# A change of verdict must change this file in the same commit (harness/tests/ledger.rs checks the fast ones).\n";

/// The board as ledger lines, sorted.
pub fn ledger(board: &Board) -> String {
    let mut lines: Vec<String> = board
        .lines
        .iter()
        .flat_map(|l| {
            l.classes
                .iter()
                .map(move |(f, c)| format!("{}\t{}\t{}\t{}", l.experiment, l.claim, f, c.verdict))
        })
        .collect();
    lines.sort();
    let mut out = LEDGER_HEADER.to_string();
    for l in lines {
        out.push_str(&l);
        out.push('\n');
    }
    out
}

/// Parse ledger text into (experiment, claim, class) -> verdict.
pub fn parse_ledger(text: &str) -> BTreeMap<(String, String, String), String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (f.len() == 4).then(|| {
                (
                    (f[0].to_string(), f[1].to_string(), f[2].to_string()),
                    f[3].to_string(),
                )
            })
        })
        .collect()
}
