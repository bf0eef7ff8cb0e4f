//! Exporters: figures (plotters, SVG), HTML (self-contained), PDF (typst as a library),
//! Markdown (terminals and CI logs) and JSON. One module per format, as hyperfine's exporters.

pub mod html;
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
}

impl Format {
    /// Parse `html,pdf,md,json`.
    pub fn parse_list(s: &str) -> Result<Vec<Format>, String> {
        let mut out = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let f = match part {
                "html" => Format::Html,
                "pdf" => Format::Pdf,
                "md" | "markdown" => Format::Md,
                "json" => Format::Json,
                other => {
                    return Err(format!(
                        "`{other}` is not a report format (html, pdf, md, json)"
                    ));
                }
            };
            if !out.contains(&f) {
                out.push(f);
            }
        }
        if out.is_empty() {
            return Err("name at least one report format (html, pdf, md, json)".into());
        }
        Ok(out)
    }
}

/// The manifest as (label, text) rows, for the HTML and PDF "What ran" tables.
pub fn manifest_rows(m: &inabench_core::Manifest) -> Vec<(&'static str, String)> {
    let h = &m.host;
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

/// A paper-vs-ours row as text cells: system, metric [unit], at, paper, ours, deviation, fidelity.
pub fn comparison_cells(c: &crate::types::Comparison) -> [String; 7] {
    use inabench_core::claims::fmt_num;
    [
        c.system.clone(),
        format!("{} [{}]", c.metric, c.unit),
        inabench_core::value::params_key(&c.params),
        fmt_num(c.paper),
        c.ours.map(fmt_num).unwrap_or_else(|| "not measured".into()),
        c.deviation
            .map(|d| format!("{:+.1}%", d * 100.0))
            .unwrap_or_default(),
        c.fidelity.map(|f| f.as_str()).unwrap_or("-").to_string(),
    ]
}

/// The figures of a run as (id, title, svg).
pub fn figures(a: &Analysis) -> Result<Vec<(String, String, String)>, ReportError> {
    let mut out = Vec::new();
    for fig in &a.spec.figures {
        if let Some(svg) = svg::render_svg(a, fig)? {
            out.push((fig.id.clone(), fig.title.clone(), svg));
        }
    }
    Ok(out)
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), ReportError> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).map_err(|source| ReportError::Io {
        path: tmp.clone(),
        source,
    })?;
    std::fs::rename(&tmp, path).map_err(|source| ReportError::Io {
        path: path.to_path_buf(),
        source,
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
        };
        let p = run_dir.join(name);
        write(&p, &bytes)?;
        written.push(p);
    }
    Ok(written)
}
