//! The Markdown summary for terminals and CI logs: the verdicts first (one row per claim, one
//! column per class), the paper's tables in their own shape, the paper's values beside ours per
//! class, then each claim's numbers.

use crate::types::Analysis;
use std::fmt::Write as _;

pub fn render_markdown(a: &Analysis) -> String {
    let m = &a.manifest;
    let mut s = String::new();
    let _ = writeln!(s, "# {}: {}\n", a.spec.id, a.spec.title);
    let classes = a
        .fidelities
        .iter()
        .map(|f| f.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    let _ = writeln!(
        s,
        "run `{}` ({} profile, seed {}), status **{}**; fidelity: **{}**",
        m.run_id,
        m.profile,
        m.seed,
        m.status.as_str(),
        if classes.is_empty() {
            "none (no rows)".to_string()
        } else {
            classes
        }
    );
    if !m.overrides.is_empty() {
        let _ = writeln!(
            s,
            "\nChanged from the spec on the command line: `{}` (the run folder's spec.yaml is the changed spec).",
            m.overrides.join(" ")
        );
    }
    if m.points_wrong > 0 {
        let _ = writeln!(
            s,
            "\n**{} point(s) returned a wrong result**: their rows are kept and every claim over them fails.",
            m.points_wrong
        );
    }
    for f in &a.fidelities {
        let _ = writeln!(s, "- {}: {}", f.as_str(), f.meaning());
    }

    let (cols, grid) = super::verdict_grid(a);
    let _ = writeln!(s, "\n## Verdicts\n");
    let header = |s: &mut String| {
        let _ = writeln!(
            s,
            "| claim | {} |\n|---|{}",
            cols.iter()
                .map(|f| f.as_str())
                .collect::<Vec<_>>()
                .join(" | "),
            "---|".repeat(cols.len())
        );
    };
    for consistency in [false, true] {
        let rows: Vec<_> = grid
            .iter()
            .filter(|r| r.consistency.is_some() == consistency)
            .collect();
        if rows.is_empty() {
            continue;
        }
        if consistency {
            let _ = writeln!(s, "\nConsistency checks, not evidence:\n");
        }
        header(&mut s);
        for r in rows {
            let cells: Vec<String> = cols
                .iter()
                .map(|f| match r.cells.get(f) {
                    Some((v, _)) => super::verdict_label(v, r.finding.is_some()),
                    None => String::new(),
                })
                .collect();
            let _ = writeln!(s, "| `{}` | {} |", r.id, cells.join(" | "));
        }
    }
    let findings: Vec<_> = grid.iter().filter(|r| r.finding.is_some()).collect();
    if !findings.is_empty() {
        let _ = writeln!(
            s,
            "\nFindings (the spec's explanation; the numbers are the run's):\n"
        );
        for r in findings {
            let _ = writeln!(
                s,
                "- `{}`: {}",
                r.id,
                r.finding.as_deref().unwrap_or_default()
            );
        }
    }
    let _ = writeln!(s, "\n{}", super::METHOD);

    let boards = super::leaderboard::leaderboards(a);
    if !boards.is_empty() {
        let _ = writeln!(s, "\n## Summary: which system is best where\n");
        for line in super::leaderboard::summary(&boards) {
            let _ = writeln!(s, "- {line}");
        }
        let _ = writeln!(s, "\n{}", super::host_profile_line(m));
    }
    for b in &boards {
        let _ = writeln!(s, "\n## {} ({})\n", b.title, b.class.as_str());
        let _ = writeln!(
            s,
            "| {} | best ({} [{}]) | ranking | no value |\n|---:|---|---|---|",
            b.param, b.metric, b.unit
        );
        for r in &b.rows {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} |",
                r.key,
                r.best_text(&b.unit),
                r.ranking_text(),
                r.missing_text()
            );
        }
    }

    for t in super::paper_tables(a) {
        let _ = writeln!(s, "\n## {}\n", t.title);
        let _ = writeln!(
            s,
            "Each cell: the paper's value, then ours per class ({}).{}\n",
            t.classes
                .iter()
                .map(|f| f.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            if t.varying.is_empty() {
                String::new()
            } else {
                format!(
                    " Values separated by / are the settings of {} (never averaged).",
                    t.varying.join(", ")
                )
            }
        );
        let _ = writeln!(
            s,
            "| | {} |\n|---|{}",
            t.columns.join(" | "),
            "---:|".repeat(t.columns.len())
        );
        for (label, cells) in &t.rows {
            let c: Vec<String> = cells.iter().map(|c| t.cell_text(c)).collect();
            let _ = writeln!(s, "| {label} | {} |", c.join(" | "));
        }
        for n in t.notes() {
            let _ = writeln!(s, "\n- {n}");
        }
    }

    for f in &a.fidelities {
        let rows: Vec<_> = a
            .comparisons
            .iter()
            .filter(|c| c.fidelity == Some(*f))
            .collect();
        if rows.is_empty() {
            continue;
        }
        let _ = writeln!(
            s,
            "\n## The paper's values beside ours: {} ({})\n",
            f.as_str(),
            a.spec.paper.source
        );
        let _ = writeln!(
            s,
            "| system | metric | at | paper | ours | deviation | fidelity |\n|---|---|---|---:|---:|---:|---|"
        );
        for c in &rows {
            let _ = writeln!(s, "| {} |", super::comparison_cells(c).join(" | "));
        }
        for n in super::comparison_notes(&rows) {
            let _ = writeln!(s, "\n- {n}");
        }
    }
    let unmeasured: Vec<_> = a
        .comparisons
        .iter()
        .filter(|c| c.fidelity.is_none())
        .collect();
    if a.comparisons.is_empty() && !super::leaderboard::is_benchmark(&a.spec) {
        let _ = writeln!(
            s,
            "\nThe paper prints no values for this artifact{}.",
            a.spec
                .paper
                .note
                .as_ref()
                .map(|n| format!(" ({n})"))
                .unwrap_or_default()
        );
    } else if !unmeasured.is_empty() {
        let _ = writeln!(
            s,
            "\nNot measured in any class of this run: {}.",
            unmeasured
                .iter()
                .map(|c| format!("{} {}", c.system, c.metric))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let _ = writeln!(s, "\n## Claims\n");
    for c in &a.claims {
        let mark = match c.verdict.as_str() {
            "holds" => "HOLDS",
            "fails" => "FAILS",
            "inconclusive" => "INCONCLUSIVE",
            "host-dependent" => "HOST-DEPENDENT",
            _ => "NOT CHECKABLE",
        };
        let _ = writeln!(
            s,
            "- **{mark}** `{}` ({}){}: {}\n  - `{}`\n  - {}{}",
            c.id,
            c.fidelity.as_str(),
            if c.consistency.is_some() {
                ", consistency check"
            } else {
                ""
            },
            c.text,
            c.expr,
            c.detail,
            match (&c.finding, c.verdict.as_str()) {
                (Some(f), "fails") => format!("\n  - finding: {f}"),
                _ => String::new(),
            }
        );
    }
    let count = |v: &str| {
        a.claims
            .iter()
            .filter(|c| c.is_evidence() && c.verdict == v)
            .count()
    };
    let holds = count("holds");
    let fails = count("fails");
    let inc = count("inconclusive");
    let nc = count("not checkable here");
    let hd = count("host-dependent");
    let cons = a.claims.iter().filter(|c| !c.is_evidence()).count();
    let _ = writeln!(
        s,
        "\nEvidence: {holds} hold, {fails} fail, {inc} inconclusive, {hd} host-dependent, {nc} not checkable here; {cons} consistency checks apart; {} rows, {} aggregated values.",
        a.rows_total,
        a.agg.len()
    );
    s
}
