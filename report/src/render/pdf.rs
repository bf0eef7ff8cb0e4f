//! The PDF report, compiled with typst as a library: a small `World` serves a fixed template,
//! the report's data as a JSON file (so no user text is ever spliced into markup) and the SVG
//! figures; the fonts are typst-assets' embedded fonts.

use crate::analysis::ReportError;
use crate::types::Analysis;
use serde_json::json;
use std::collections::HashMap;
use typst::diag::{FileError, FileResult};
use typst::foundations::{Bytes, Datetime};
use typst::syntax::{FileId, RootedPath, Source, VirtualPath, VirtualRoot};
use typst::text::{Font, FontBook};
use typst::utils::LazyHash;
use typst::{Library, LibraryExt, World};
use typst_layout::PagedDocument;

const TEMPLATE: &str = r##"#let d = json("data.json")
#set document(title: d.title)
#set page(paper: "a4", margin: 1.6cm, numbering: "1")
#set text(font: "Libertinus Serif", size: 10pt)
#show raw: set text(font: "DejaVu Sans Mono", size: 8pt)
#let verdict(v) = {
  let c = if v == "holds" { rgb("#2c8a2c") } else if v.starts-with("fails") { rgb("#c0392b") } else if v == "inconclusive" { rgb("#c98a00") } else { rgb("#888888") }
  box(fill: c, inset: 3pt, radius: 2pt, text(fill: white, weight: "bold", v))
}
= #d.title
#d.artifact \
#text(size: 8pt, d.citation)

#block(fill: rgb("#eef4ff"), stroke: rgb("#9bb8f0"), inset: 8pt, radius: 3pt, width: 100%)[
  *Fidelity of these results:* #for f in d.fidelity [ \ *#f.name*: #f.meaning ]
  \ #text(size: 8pt)[why this class: #d.reason]
]
Run #raw(d.run_id), #d.profile profile, seed #d.seed, status *#d.status*.
#if d.wrong > 0 [ \ #text(fill: rgb("#c0392b"))[*#d.wrong point(s) returned a wrong result*: their rows are kept and every claim over them fails.] ]

== Verdicts
#for g in d.grid [
  #if g.consistency [ *Consistency checks, not evidence* ]
  #table(columns: (auto,) + d.grid_cols.map(c => auto), stroke: 0.4pt + gray, inset: 4pt,
    [*claim*], ..d.grid_cols.map(c => [*#c*]),
    ..g.rows.map(r => (text(size: 8pt)[*#r.id*: #r.text], ..r.cells.map(v => if v == "" [] else [#verdict(v)]))).flatten())
]
#for f in d.findings [ #text(size: 8pt)[*#f.id*, finding: _#f.text _] \ ]
#text(size: 7pt, d.method)

#for t in d.tables [
  == #t.title
  #text(size: 8pt)[#t.at("intro", default: "Each cell: the paper's value, then ours per class (" + t.classes.join(", ") + ").") #t.varying]
  #table(columns: (auto,) + t.columns.map(c => auto), stroke: 0.4pt + gray, inset: 3pt,
    [], ..t.columns.map(c => text(size: 8pt, weight: "bold", c)),
    ..t.rows.map(r => (text(size: 8pt, weight: "bold", r.label), ..r.cells.map(c => text(size: 7pt, c)))).flatten())
]

#if not d.benchmark [
== The paper's values beside ours
#text(size: 8pt, d.paper_source)
#if d.comparisons.len() == 0 [ The paper prints no values for this artifact; its statements are checked as claims below. ] else [
  #for g in d.comparisons [
    === #g.class
    #table(columns: 7, stroke: 0.4pt + gray, inset: 4pt,
      [*system*], [*metric*], [*at*], [*paper*], [*ours*], [*deviation*], [*fidelity*],
      ..g.rows.map(r => (r.system, r.metric, r.at, r.paper, r.ours, r.deviation, r.fidelity)).flatten().map(x => text(size: 8pt, x)))
    #text(size: 7pt, g.notes)
  ]
]
]

== Claims
#for c in d.claims [
  #block(breakable: false, below: 8pt)[
    #verdict(c.verdict) *#c.id* (#c.fidelity): #c.text \
    #raw(c.expr) \
    #text(size: 8pt, c.detail)
  ]
]

#for f in d.figures [
  #figure(image(f.file, width: 100%), caption: [#f.title (#d.fidelity_names)])
]

== What ran
#table(columns: 2, stroke: 0.4pt + gray, inset: 4pt,
  ..d.manifest.map(r => (text(weight: "bold", size: 8pt, r.at(0)), text(size: 8pt, r.at(1)))).flatten())

== How to rerun
#raw(d.rerun, block: true)
"##;

struct ReportWorld {
    library: LazyHash<Library>,
    book: LazyHash<FontBook>,
    fonts: Vec<Font>,
    main: Source,
    files: HashMap<FileId, Bytes>,
}

fn file_id(path: &str) -> Result<FileId, ReportError> {
    let vp = VirtualPath::new(path)
        .map_err(|e| ReportError::Render(format!("bad virtual path {path}: {e:?}")))?;
    Ok(FileId::new(RootedPath::new(VirtualRoot::Project, vp)))
}

impl World for ReportWorld {
    fn library(&self) -> &LazyHash<Library> {
        &self.library
    }
    fn book(&self) -> &LazyHash<FontBook> {
        &self.book
    }
    fn main(&self) -> FileId {
        self.main.id()
    }
    fn source(&self, id: FileId) -> FileResult<Source> {
        if id == self.main.id() {
            Ok(self.main.clone())
        } else {
            Err(FileError::NotFound(std::path::PathBuf::from(
                id.vpath().get_with_slash(),
            )))
        }
    }
    fn file(&self, id: FileId) -> FileResult<Bytes> {
        self.files.get(&id).cloned().ok_or_else(|| {
            FileError::NotFound(std::path::PathBuf::from(id.vpath().get_with_slash()))
        })
    }
    fn font(&self, index: usize) -> Option<Font> {
        self.fonts.get(index).cloned()
    }
    fn today(&self, _offset: Option<typst::foundations::Duration>) -> Option<Datetime> {
        Datetime::from_ymd(1970, 1, 1)
    }
}

fn data(a: &Analysis, figures: &[(String, String, String)]) -> serde_json::Value {
    let m = &a.manifest;
    let mut groups: Vec<Option<inabench_core::spec::Fidelity>> =
        a.fidelities.iter().copied().map(Some).collect();
    groups.push(None);
    let comparisons: Vec<_> = groups
        .into_iter()
        .filter_map(|g| {
            let mine: Vec<_> = a.comparisons.iter().filter(|c| c.fidelity == g).collect();
            let notes = super::comparison_notes(&mine).join(" ");
            let rows: Vec<_> = mine
                .iter()
                .map(|c| {
                    let [system, metric, at, paper, ours, deviation, fidelity] =
                        super::comparison_cells(c);
                    json!({"system": system, "metric": metric, "at": at, "paper": paper, "ours": ours, "deviation": deviation, "fidelity": fidelity})
                })
                .collect();
            (!rows.is_empty()).then(|| {
                json!({"class": g.map(|f| f.as_str()).unwrap_or("not measured"), "rows": rows, "notes": notes})
            })
        })
        .collect();
    let (cols, grid) = super::verdict_grid(a);
    let grid_groups: Vec<_> = [false, true]
        .into_iter()
        .filter_map(|consistency| {
            let rows: Vec<_> = grid
                .iter()
                .filter(|r| r.consistency.is_some() == consistency)
                .map(|r| {
                    let cells: Vec<String> = cols
                        .iter()
                        .map(|f| {
                            r.cells
                                .get(f)
                                .map(|(v, _)| super::verdict_label(v, r.finding.is_some()))
                                .unwrap_or_default()
                        })
                        .collect();
                    json!({"id": r.id, "text": r.text, "cells": cells})
                })
                .collect();
            (!rows.is_empty()).then(|| json!({"consistency": consistency, "rows": rows}))
        })
        .collect();
    let findings: Vec<_> = grid
        .iter()
        .filter_map(|r| r.finding.as_ref().map(|f| json!({"id": r.id, "text": f})))
        .collect();
    let tables: Vec<_> = super::paper_tables(a)
        .into_iter()
        .map(|t| {
            let rows: Vec<_> = t
                .rows
                .iter()
                .map(|(label, cells)| {
                    let cells: Vec<String> = cells.iter().map(|c| t.cell_text(c)).collect();
                    json!({"label": label, "cells": cells})
                })
                .collect();
            json!({
                "title": t.title,
                "classes": t.classes.iter().map(|f| f.as_str()).collect::<Vec<_>>(),
                "columns": t.columns,
                "rows": rows,
                "varying": if t.varying.is_empty() { String::new() } else { format!("Values separated by / are the settings of {} (never averaged).", t.varying.join(", ")) } + &t.notes().iter().map(|n| format!(" {n}.")).collect::<String>(),
            })
        })
        .collect();
    // a benchmark's leaderboards, in the tables' shape (a row per point, text cells)
    let mut tables = tables;
    for b in super::leaderboard::leaderboards(a) {
        let rows: Vec<_> = b
            .rows
            .iter()
            .map(|r| json!({"label": r.key, "cells": [r.best_text(&b.unit), r.ranking_text(), r.missing_text()]}))
            .collect();
        tables.push(json!({
            "title": format!("{} ({})", b.title, b.class.as_str()),
            "classes": [b.class.as_str()],
            "columns": [format!("best ({} [{}])", b.metric, b.unit), "ranking".to_string(), "no value".to_string()],
            "rows": rows,
            "intro": "A benchmark (no paper): each row ranks the systems at one point, best first; the best's lead is the ratio to the next.",
            "varying": super::leaderboard::summary(std::slice::from_ref(&b)).join(" "),
        }));
    }
    let claims: Vec<_> = a.claims.iter().map(|c| json!({"id": c.id, "text": c.text, "expr": c.expr, "fidelity": c.fidelity.as_str(), "verdict": c.verdict, "detail": c.detail})).collect();
    let figs: Vec<_> = figures
        .iter()
        .map(|(id, title, _)| json!({"file": format!("{id}.svg"), "title": title}))
        .collect();
    let manifest = super::manifest_rows(m);
    json!({
        "title": format!("{}: {}", a.spec.id, a.spec.title),
        "artifact": a.spec.artifact, "citation": a.spec.citation,
        "fidelity": a.fidelities.iter().map(|f| json!({"name": f.as_str(), "meaning": f.meaning()})).collect::<Vec<_>>(),
        "fidelity_names": a.fidelities.iter().map(|f| f.as_str()).collect::<Vec<_>>().join(", "),
        "reason": m.fidelity_reason, "run_id": m.run_id, "profile": m.profile, "seed": m.seed, "status": m.status.as_str(),
        "paper_source": a.spec.paper.source, "comparisons": comparisons, "claims": claims, "figures": figs,
        "grid_cols": cols.iter().map(|f| f.as_str()).collect::<Vec<_>>(), "grid": grid_groups, "findings": findings,
        "tables": tables, "method": super::METHOD, "wrong": m.points_wrong,
        "benchmark": super::leaderboard::is_benchmark(&a.spec),
        "manifest": manifest.into_iter().map(|(k, v)| vec![k.to_string(), v]).collect::<Vec<_>>(),
        "rerun": format!("cargo run --release -p inabench -- reproduce {} --profile {} --seed {}", a.spec.id, m.profile, m.seed),
    })
}

/// Compile the report to PDF bytes.
pub fn render_pdf(
    a: &Analysis,
    figures: &[(String, String, String)],
) -> Result<Vec<u8>, ReportError> {
    let fonts: Vec<Font> = typst_assets::fonts()
        .flat_map(|b| Font::iter(Bytes::new(b)))
        .collect();
    let book = FontBook::from_fonts(&fonts);
    let main = Source::new(file_id("/main.typ")?, TEMPLATE.to_string());
    let mut files = HashMap::new();
    files.insert(
        file_id("/data.json")?,
        Bytes::new(serde_json::to_vec(&data(a, figures))?),
    );
    for (id, _, svg) in figures {
        files.insert(
            file_id(&format!("/{id}.svg"))?,
            Bytes::new(svg.clone().into_bytes()),
        );
    }
    let world = ReportWorld {
        library: LazyHash::new(Library::default()),
        book: LazyHash::new(book),
        fonts,
        main,
        files,
    };
    let doc: PagedDocument = typst::compile(&world).output.map_err(|errs| {
        ReportError::Render(format!(
            "typst: {}",
            errs.iter()
                .map(|e| e.message.to_string())
                .collect::<Vec<_>>()
                .join("; ")
        ))
    })?;
    typst_pdf::pdf(&doc, &typst_pdf::PdfOptions::default()).map_err(|errs| {
        ReportError::Render(format!(
            "typst pdf: {}",
            errs.iter()
                .map(|e| e.message.to_string())
                .collect::<Vec<_>>()
                .join("; ")
        ))
    })
}
