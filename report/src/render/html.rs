//! The HTML report: one self-contained page (inline CSS and SVG, no network), opens offline.

use crate::types::Analysis;
use inabench_core::claims::fmt_num;
use inabench_core::value::params_key;
use std::fmt::Write as _;

/// Escape text for HTML.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            _ => o.push(c),
        }
    }
    o
}

/// The most aggregated rows the page lists (the rest are in measurements.parquet).
pub const MAX_ROWS: usize = 2000;

const CSS: &str = "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.6em 0;font-size:.9em}th,td{border:1px solid #ccc;padding:.25em .5em;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums}th{background:#f3f3f3}
.banner{background:#eef4ff;border:1px solid #9bb8f0;padding:.6em 1em;border-radius:4px}
.v{font-weight:bold;padding:.1em .5em;border-radius:3px;color:#fff;white-space:nowrap}.holds{background:#2c8a2c}.fails{background:#c0392b}.inconclusive{background:#c98a00}.nc{background:#888}
.finding{font-style:italic;color:#633}.paper-table{font-size:.78em}.paper-table td,.paper-table th{padding:.15em .3em}.wrong{background:#fbe3e3;border:1px solid #c0392b;padding:.6em 1em;border-radius:4px}
code{background:#f5f5f5;padding:0 .2em}.fig{margin:1em 0}.small{color:#666;font-size:.85em}pre{background:#f5f5f5;padding:.6em;overflow:auto}";

pub fn render_html(a: &Analysis, figures: &[(String, String, String)]) -> String {
    let m = &a.manifest;
    let s = &a.spec;
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>{CSS}</style></head><body>\n",
        esc(&format!("{}: {}", s.id, s.title))
    );
    let _ = write!(
        h,
        "<h1>{}: {}</h1>\n<p>{}<br><span class=\"small\">{}</span></p>\n",
        esc(&s.id),
        esc(&s.title),
        esc(&s.artifact),
        esc(&s.citation)
    );
    h.push_str("<div class=\"banner\"><b>Fidelity of these results:</b> ");
    if a.fidelities.is_empty() {
        h.push_str("none (the run has no rows)");
    }
    for (i, f) in a.fidelities.iter().enumerate() {
        let _ = write!(
            h,
            "{}<b>{}</b>: {}",
            if i > 0 { "<br>" } else { "" },
            f.as_str(),
            esc(f.meaning())
        );
    }
    let _ = writeln!(
        h,
        "<br><span class=\"small\">why this class: {}</span></div>",
        esc(&m.fidelity_reason)
    );
    let _ = writeln!(
        h,
        "<p>Run <code>{}</code>, {} profile, seed {}, status <b>{}</b>, {:.2} s.</p>",
        esc(&m.run_id),
        esc(&m.profile),
        m.seed,
        m.status.as_str(),
        m.elapsed_s
    );

    if m.points_wrong > 0 {
        let _ = writeln!(
            h,
            "<p class=\"wrong\"><b>{} point(s) returned a wrong result.</b> Their rows are kept and every claim over them fails.</p>",
            m.points_wrong
        );
    }
    let (cols, grid) = super::verdict_grid(a);
    h.push_str("<h2>Verdicts</h2>\n");
    for consistency in [false, true] {
        let rows: Vec<_> = grid
            .iter()
            .filter(|r| r.consistency.is_some() == consistency)
            .collect();
        if rows.is_empty() {
            continue;
        }
        if consistency {
            h.push_str("<p><b>Consistency checks, not evidence</b> (arithmetic on the paper's own inputs, or true by construction of a model):</p>\n");
        }
        let _ = writeln!(
            h,
            "<table class=\"verdicts\" id=\"verdicts-{}\"><tr><th>claim</th>{}</tr>",
            if consistency {
                "consistency"
            } else {
                "evidence"
            },
            cols.iter()
                .map(|f| format!("<th>{}</th>", f.as_str()))
                .collect::<String>()
        );
        for r in rows {
            let _ = write!(
                h,
                "<tr><td><b>{}</b>: {}{}</td>",
                esc(&r.id),
                esc(&r.text),
                match &r.consistency {
                    Some(why) =>
                        format!("<br><span class=\"small\">consistency: {}</span>", esc(why)),
                    None => String::new(),
                }
            );
            for f in &cols {
                match r.cells.get(f) {
                    Some((v, d)) => {
                        let cls = match v.as_str() {
                            "holds" => "holds",
                            "fails" => "fails",
                            "inconclusive" => "inconclusive",
                            _ => "nc",
                        };
                        let _ = write!(
                            h,
                            "<td title=\"{}\"><span class=\"v {cls}\">{}</span></td>",
                            esc(d),
                            esc(&super::verdict_label(v, r.finding.is_some()))
                        );
                    }
                    None => h.push_str("<td></td>"),
                }
            }
            h.push_str("</tr>\n");
        }
        h.push_str("</table>\n");
    }
    for r in grid.iter().filter(|r| r.finding.is_some()) {
        let _ = writeln!(
            h,
            "<p class=\"finding\"><b>{}</b>, finding: {}</p>",
            esc(&r.id),
            esc(r.finding.as_deref().unwrap_or_default())
        );
    }
    let _ = writeln!(h, "<p class=\"small\">{}</p>", esc(super::METHOD));

    let boards = super::leaderboard::leaderboards(a);
    if !boards.is_empty() {
        h.push_str("<h2>Summary: which system is best where</h2>\n<ul>\n");
        for line in super::leaderboard::summary(&boards) {
            let _ = writeln!(h, "<li>{}</li>", esc(&line));
        }
        let _ = writeln!(
            h,
            "</ul>\n<p class=\"small\">{}</p>",
            esc(&super::host_profile_line(m))
        );
    }
    for b in &boards {
        let _ = write!(
            h,
            "<h2>{} ({})</h2>\n<table class=\"leaderboard\" id=\"leaderboard-{}-{}\"><tr><th>{}</th><th>best ({} [{}])</th><th>ranking</th><th>no value</th></tr>\n",
            esc(&b.title),
            b.class.as_str(),
            esc(&b.id),
            b.class.as_str(),
            esc(&b.param),
            esc(&b.metric),
            esc(&b.unit)
        );
        for r in &b.rows {
            let _ = writeln!(
                h,
                "<tr><td class=\"n\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&r.key),
                esc(&r.best_text(&b.unit)),
                esc(&r.ranking_text()),
                esc(&r.missing_text())
            );
        }
        h.push_str("</table>\n");
    }

    for t in super::paper_tables(a) {
        let _ = write!(
            h,
            "<h2>{}</h2>\n<p class=\"small\">Each cell: the paper's value, then ours per class.{}</p>\n<table class=\"paper-table\" id=\"table-{}\"><tr><th rowspan=\"2\"></th>",
            esc(&t.title),
            if t.varying.is_empty() {
                String::new()
            } else {
                esc(&format!(
                    " Values separated by / are the settings of {} (never averaged).",
                    t.varying.join(", ")
                ))
            },
            esc(&t.id)
        );
        for c in &t.columns {
            let _ = write!(h, "<th colspan=\"{}\">{}</th>", t.classes.len() + 1, esc(c));
        }
        h.push_str("</tr><tr>");
        for _ in &t.columns {
            h.push_str("<th>paper</th>");
            for f in &t.classes {
                let _ = write!(h, "<th>{}</th>", f.as_str());
            }
        }
        h.push_str("</tr>\n");
        for (label, cells) in &t.rows {
            let _ = write!(h, "<tr><th>{}</th>", esc(label));
            for (paper, ours) in cells {
                let _ = write!(h, "<td class=\"n\">{}</td>", esc(paper));
                for o in ours {
                    let _ = write!(h, "<td class=\"n\">{}</td>", esc(o));
                }
            }
            h.push_str("</tr>\n");
        }
        h.push_str("</table>\n");
        for n in t.notes() {
            let _ = writeln!(h, "<p class=\"small\">{}</p>", esc(&n));
        }
    }

    if !super::leaderboard::is_benchmark(s) {
        let _ = write!(
            h,
            "<h2>The paper's values beside ours</h2>\n<p class=\"small\">{}{}</p>\n",
            esc(&s.paper.source),
            s.paper
                .note
                .as_ref()
                .map(|n| format!(" ({})", esc(n)))
                .unwrap_or_default()
        );
        if a.comparisons.is_empty() {
            h.push_str("<p>The paper prints no values for this artifact; its statements are checked as claims below.</p>\n");
        } else {
            // one table per class: classes are never mixed in one comparison
            let mut groups: Vec<Option<inabench_core::spec::Fidelity>> =
                a.fidelities.iter().copied().map(Some).collect();
            groups.push(None);
            for g in groups {
                let rows: Vec<_> = a.comparisons.iter().filter(|c| c.fidelity == g).collect();
                if rows.is_empty() {
                    continue;
                }
                let _ = write!(
                    h,
                    "<h3>{}</h3>\n<table class=\"paper-vs-ours\" id=\"paper-vs-ours-{}\"><tr><th>system</th><th>metric</th><th>at</th><th>paper</th><th>ours</th><th>deviation</th><th>fidelity</th></tr>\n",
                    g.map(|f| f.as_str()).unwrap_or("not measured"),
                    g.map(|f| f.as_str()).unwrap_or("none")
                );
                let notes = super::comparison_notes(&rows);
                for c in rows {
                    h.push_str("<tr>");
                    for (k, cell) in super::comparison_cells(c).iter().enumerate() {
                        let class = if (3..6).contains(&k) {
                            " class=\"n\""
                        } else {
                            ""
                        };
                        let _ = write!(h, "<td{class}>{}</td>", esc(cell));
                    }
                    h.push_str("</tr>\n");
                }
                h.push_str("</table>\n");
                for n in notes {
                    let _ = writeln!(h, "<p class=\"small\">{}</p>", esc(&n));
                }
            }
        }
    }

    h.push_str("<h2>Claims</h2>\n<table id=\"claims\"><tr><th>verdict</th><th>claim</th><th>fidelity</th><th>numbers</th></tr>\n");
    for c in &a.claims {
        let cls = match c.verdict.as_str() {
            "holds" => "holds",
            "fails" => "fails",
            "inconclusive" => "inconclusive",
            _ => "nc",
        };
        let _ = writeln!(
            h,
            "<tr><td><span class=\"v {cls}\">{}</span></td><td><b>{}</b>: {}<br><code>{}</code></td><td>{}</td><td>{}</td></tr>",
            esc(&c.verdict),
            esc(&c.id),
            esc(&c.text),
            esc(&c.expr),
            c.fidelity.as_str(),
            esc(&c.detail)
        );
    }
    h.push_str("</table>\n");

    if !figures.is_empty() {
        h.push_str("<h2>Figures</h2>\n");
        for (id, title, svg) in figures {
            let body = svg.find("<svg").map(|i| &svg[i..]).unwrap_or(svg);
            let _ = write!(
                h,
                "<div class=\"fig\" id=\"fig-{}\"><p><b>{}</b> <span class=\"small\">({})</span></p>\n{}\n</div>\n",
                esc(id),
                esc(title),
                a.fidelities
                    .iter()
                    .map(|f| f.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                body
            );
        }
    }

    let _ = write!(
        h,
        "<h2>Results</h2>\n<details><summary>{} aggregated values from {} rows (median of repetitions; 95% t-interval of the mean when n &gt; 1)</summary>\n",
        a.agg.len(),
        a.rows_total
    );
    h.push_str("<table><tr><th>system</th><th>fidelity</th><th>fabric</th><th>parameters</th><th>metric</th><th>n</th><th>median</th><th>min</th><th>max</th><th>95% CI</th></tr>\n");
    for r in a.agg.iter().take(MAX_ROWS) {
        let ci = if r.n > 1 {
            format!("{} .. {}", fmt_num(r.ci_lo), fmt_num(r.ci_hi))
        } else {
            String::new()
        };
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} [{}]</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            esc(&r.system),
            r.fidelity.as_str(),
            esc(&r.fabric),
            esc(&params_key(&r.params)),
            esc(&r.metric),
            esc(&r.unit),
            r.n,
            fmt_num(r.median),
            fmt_num(r.min),
            fmt_num(r.max),
            ci
        );
    }
    h.push_str("</table>\n");
    if a.agg.len() > MAX_ROWS {
        let _ = writeln!(
            h,
            "<p class=\"small\">{} more in measurements.parquet.</p>",
            a.agg.len() - MAX_ROWS
        );
    }
    h.push_str("</details>\n");

    h.push_str("<h2>What ran</h2>\n<table id=\"manifest\">\n");
    for (k, v) in super::manifest_rows(m) {
        let _ = writeln!(h, "<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(&v));
    }
    h.push_str("</table>\n");
    let _ = write!(
        h,
        "<h2>How to rerun</h2>\n<pre>cargo run --release -p inabench -- reproduce {id} --profile {p} --seed {seed}\njust reproduce {id} --profile {p} --seed {seed}</pre>\n<p class=\"small\">The paper's numbers come only from the spec's <code>paper:</code> block; every other number on this page was computed by the run.</p>\n</body></html>\n",
        id = esc(&s.id),
        p = esc(&m.profile),
        seed = m.seed
    );
    h
}
