//! The Markdown summary: the paper-vs-ours table and the claims, for terminals and CI logs.

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
    for f in &a.fidelities {
        let _ = writeln!(s, "- {}: {}", f.as_str(), f.meaning());
    }
    let _ = writeln!(
        s,
        "\n## The paper's values beside ours ({})\n",
        a.spec.paper.source
    );
    if a.comparisons.is_empty() {
        let _ = writeln!(
            s,
            "The paper prints no values for this artifact{}.",
            a.spec
                .paper
                .note
                .as_ref()
                .map(|n| format!(" ({n})"))
                .unwrap_or_default()
        );
    } else {
        let _ = writeln!(
            s,
            "| system | metric | at | paper | ours | deviation | fidelity |\n|---|---|---|---:|---:|---:|---|"
        );
        for c in &a.comparisons {
            let _ = writeln!(s, "| {} |", super::comparison_cells(c).join(" | "));
        }
    }
    let _ = writeln!(s, "\n## Claims\n");
    for c in &a.claims {
        let mark = match c.verdict.as_str() {
            "holds" => "HOLDS",
            "fails" => "FAILS",
            _ => "NOT CHECKABLE",
        };
        let _ = writeln!(
            s,
            "- **{mark}** `{}` ({}): {}\n  - `{}`\n  - {}",
            c.id,
            c.fidelity.as_str(),
            c.text,
            c.expr,
            c.detail
        );
    }
    let holds = a.claims.iter().filter(|c| c.verdict == "holds").count();
    let fails = a.claims.iter().filter(|c| c.verdict == "fails").count();
    let nc = a.claims.len() - holds - fails;
    let _ = writeln!(
        s,
        "\n{holds} claims hold, {fails} fail, {nc} not checkable here; {} rows, {} aggregated values.",
        a.rows_total,
        a.agg.len()
    );
    s
}
