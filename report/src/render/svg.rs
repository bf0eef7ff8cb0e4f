//! Figures drawn like the paper's (lines, grouped bars, CDF) with plotters' SVG backend and an
//! embedded font (DejaVu Sans Mono from typst-assets; no fontconfig, no system fonts). The
//! paper's values, where it prints them, are overlaid as hollow markers labelled "paper".
//! Log axes are drawn by plotting log10 of the values and labelling ticks with the real values.

use crate::analysis::ReportError;
use crate::types::{AggRow, Analysis};
use inabench_core::claims::fmt_num;
use inabench_core::spec::{Figure, FigureKind};
use inabench_core::value::{Scalar, params_match};
use plotters::prelude::*;
use plotters::style::FontStyle;
use std::collections::BTreeMap;
use std::sync::OnceLock;

pub const FONT: &str = "DejaVu Sans Mono";

const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

/// Why the embedded font could not be registered with plotters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FontError {
    #[error("the embedded DejaVu Sans Mono font is missing")]
    Missing,
    #[error("cannot load the embedded font")]
    Load,
}

/// Register the embedded font with plotters once. Pure: the outcome depends on the embedded
/// bytes alone (no input, nothing measured), so every figure of the process shares it.
fn font_ready() -> Result<(), ReportError> {
    static READY: OnceLock<Result<(), FontError>> = OnceLock::new();
    (*READY.get_or_init(|| {
        let bytes = typst_assets::fonts()
            .find(|b| {
                contains(b, b"DejaVu Sans Mono")
                    && !contains(b, b"Bold")
                    && !contains(b, b"Oblique")
            })
            .or_else(|| typst_assets::fonts().find(|b| contains(b, b"DejaVu Sans Mono")))
            .ok_or(FontError::Missing)?;
        for style in [FontStyle::Normal, FontStyle::Bold] {
            plotters::style::register_font(FONT, style, bytes).map_err(|_| FontError::Load)?;
        }
        Ok(())
    }))
    .map_err(ReportError::Font)
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn err<E: std::fmt::Display>(e: E) -> ReportError {
    ReportError::Render(format!("drawing a figure: {e}"))
}

/// One line/bar group of a figure.
struct Series {
    label: String,
    points: Vec<(f64, f64, f64, f64)>, // x, median, ci_lo, ci_hi
}

fn series_key(a: &AggRow, keys: &[String]) -> String {
    keys.iter()
        .map(|k| {
            if k == "system" {
                a.system.clone()
            } else if k == "class" {
                a.fidelity.as_str().to_string()
            } else {
                format!(
                    "{k}={}",
                    a.params.get(k).map(|v| v.to_string()).unwrap_or_default()
                )
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn tx(v: f64, log: bool) -> f64 {
    if log {
        v.max(f64::MIN_POSITIVE).log10()
    } else {
        v
    }
}

fn label(v: f64, log: bool) -> String {
    if log {
        fmt_num(10f64.powf(v))
    } else {
        fmt_num(v)
    }
}

/// Render one figure to SVG (None for `table` figures, which the report shows as tables).
pub fn render_svg(a: &Analysis, fig: &Figure) -> Result<Option<String>, ReportError> {
    if fig.kind == FigureKind::Table {
        return Ok(None);
    }
    font_ready()?;
    let unit = a
        .spec
        .metric(&fig.y)
        .map(|m| m.unit.clone())
        .unwrap_or_default();
    let rows: Vec<&AggRow> = a
        .agg
        .iter()
        .filter(|r| r.metric == fig.y && params_match(&r.params, &fig.filter))
        .collect();
    // One series per system and per parameter the run varied (never a median across a
    // parameter that varies), and per class when the run has several.
    let mut fig = fig.clone();
    let mut extra: Vec<String> = Vec::new();
    if let Some(first) = rows.first() {
        for k in first.params.keys() {
            if fig.x.as_deref() == Some(k.as_str())
                || fig.filter.contains_key(k)
                || fig.series.contains(k)
            {
                continue;
            }
            if rows.iter().any(|r| r.params.get(k) != first.params.get(k)) {
                extra.push(k.clone());
            }
        }
        if rows.iter().any(|r| r.fidelity != first.fidelity) {
            extra.push("class".to_string());
        }
    }
    fig.series.extend(extra);
    let fig = &fig;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (760, 460)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        match fig.kind {
            FigureKind::Lines => lines(a, fig, &rows, &unit, &root)?,
            FigureKind::Bars => bars(a, fig, &rows, &unit, &root)?,
            FigureKind::Cdf => cdf(fig, &rows, &unit, &root)?,
            FigureKind::Table => {}
        }
        root.present().map_err(err)?;
    }
    Ok(Some(svg))
}

fn x_of(r: &AggRow, x: &str) -> Option<f64> {
    r.params.get(x).and_then(Scalar::as_f64)
}

fn lines(
    a: &Analysis,
    fig: &Figure,
    rows: &[&AggRow],
    unit: &str,
    root: &DrawingArea<SVGBackend, plotters::coord::Shift>,
) -> Result<(), ReportError> {
    let x = fig.x.clone().unwrap_or_default();
    let mut by: BTreeMap<String, Series> = BTreeMap::new();
    for r in rows {
        let Some(xv) = x_of(r, &x) else { continue };
        let key = series_key(r, &fig.series);
        by.entry(key.clone())
            .or_insert_with(|| Series {
                label: key,
                points: Vec::new(),
            })
            .points
            .push((xv, r.median, r.ci_lo, r.ci_hi));
    }
    for s in by.values_mut() {
        s.points.sort_by(|p, q| p.0.total_cmp(&q.0));
    }
    let paper: Vec<(String, f64, f64)> = if fig.paper_overlay {
        a.spec
            .paper
            .values
            .iter()
            .filter(|v| {
                v.metric == fig.y
                    && fig
                        .filter
                        .iter()
                        .all(|(k, fv)| v.params.get(k).is_none_or(|pv| pv.same(fv)))
            })
            .filter_map(|v| {
                v.params
                    .get(&x)
                    .and_then(Scalar::as_f64)
                    .map(|xv| (v.system.clone(), xv, v.value))
            })
            .collect()
    } else {
        Vec::new()
    };
    let all_x = by
        .values()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .chain(paper.iter().map(|p| p.1));
    let all_y = by
        .values()
        .flat_map(|s| s.points.iter().flat_map(|p| [p.1, p.2, p.3]))
        .chain(paper.iter().map(|p| p.2));
    let (x0, x1) = range(all_x.map(|v| tx(v, fig.log_x)));
    let (y0, y1) = range(all_y.map(|v| tx(v, fig.log_y)));
    let (y0, y1) = if fig.log_y {
        (y0, y1)
    } else {
        (y0.min(0.0), y1 + (y1 - y0.min(0.0)) * 0.05)
    };
    let mut chart = ChartBuilder::on(root)
        .caption(&fig.title, (FONT, 17))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(err)?;
    let xl = fig.x_label.clone().unwrap_or(x.clone());
    let yl = fig
        .y_label
        .clone()
        .unwrap_or_else(|| format!("{} ({unit})", fig.y));
    chart
        .configure_mesh()
        .x_desc(xl)
        .y_desc(yl)
        .x_label_formatter(&|v| label(*v, fig.log_x))
        .y_label_formatter(&|v| label(*v, fig.log_y))
        .label_style((FONT, 12))
        .axis_desc_style((FONT, 13))
        .draw()
        .map_err(err)?;
    for (i, s) in by.values().enumerate() {
        let c = PALETTE[i % PALETTE.len()];
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .map(|p| (tx(p.0, fig.log_x), tx(p.1, fig.log_y)))
            .collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
            .map_err(err)?
            .label(s.label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
        chart
            .draw_series(pts.iter().map(|p| Circle::new(*p, 3, c.filled())))
            .map_err(err)?;
        // 95% intervals where there are repetitions
        chart
            .draw_series(s.points.iter().filter(|p| p.3 > p.2).map(|p| {
                PathElement::new(
                    vec![
                        (tx(p.0, fig.log_x), tx(p.2, fig.log_y)),
                        (tx(p.0, fig.log_x), tx(p.3, fig.log_y)),
                    ],
                    c.stroke_width(1),
                )
            }))
            .map_err(err)?;
    }
    if !paper.is_empty() {
        chart
            .draw_series(paper.iter().map(|(_, xv, v)| {
                Cross::new(
                    (tx(*xv, fig.log_x), tx(*v, fig.log_y)),
                    6,
                    BLACK.stroke_width(2),
                )
            }))
            .map_err(err)?
            .label("paper")
            .legend(|(x, y)| Cross::new((x + 9, y), 5, BLACK.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FONT, 11))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(err)?;
    Ok(())
}

fn range(vals: impl Iterator<Item = f64>) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in vals.filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    if (hi - lo).abs() < 1e-12 {
        let pad = lo.abs().max(1.0) * 0.1;
        return (lo - pad, hi + pad);
    }
    let pad = (hi - lo) * 0.04;
    (lo - pad, hi + pad)
}

fn bars(
    a: &Analysis,
    fig: &Figure,
    rows: &[&AggRow],
    unit: &str,
    root: &DrawingArea<SVGBackend, plotters::coord::Shift>,
) -> Result<(), ReportError> {
    // groups along x (a parameter, or systems), bars per series
    let group_of = |r: &AggRow| -> String {
        match &fig.x {
            Some(x) if x != "system" => r.params.get(x).map(|v| v.to_string()).unwrap_or_default(),
            _ => r.system.clone(),
        }
    };
    let mut groups: Vec<String> = Vec::new();
    let mut series: Vec<String> = Vec::new();
    let mut val: BTreeMap<(String, String), f64> = BTreeMap::new();
    for r in rows {
        let g = group_of(r);
        let by_system = fig.x.as_deref().is_none_or(|x| x == "system");
        let rest: Vec<String> = fig
            .series
            .iter()
            .filter(|k| *k != "system")
            .cloned()
            .collect();
        let s = if by_system && rest.is_empty() {
            "ours".to_string()
        } else if by_system {
            series_key(r, &rest)
        } else {
            series_key(r, &fig.series)
        };
        if !groups.contains(&g) {
            groups.push(g.clone());
        }
        if !series.contains(&s) {
            series.push(s.clone());
        }
        val.insert((g, s), r.median);
    }
    let paper: Vec<(usize, f64)> = if fig.paper_overlay {
        a.spec
            .paper
            .values
            .iter()
            .filter(|v| v.metric == fig.y)
            .filter_map(|v| {
                let g = match &fig.x {
                    Some(x) if x != "system" => v.params.get(x).map(|s| s.to_string())?,
                    _ => v.system.clone(),
                };
                groups.iter().position(|x| *x == g).map(|i| (i, v.value))
            })
            .collect()
    } else {
        Vec::new()
    };
    let ymax = val
        .values()
        .copied()
        .chain(paper.iter().map(|p| p.1))
        .fold(0.0f64, f64::max)
        .max(1e-12)
        * 1.12;
    let ng = groups.len().max(1) as f64;
    let mut chart = ChartBuilder::on(root)
        .caption(&fig.title, (FONT, 17))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..ng, 0f64..ymax)
        .map_err(err)?;
    let gl = groups.clone();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(groups.len().max(1) * 2 + 1)
        .x_label_formatter(&|v| {
            let i = v.floor() as usize;
            if (v - v.floor() - 0.5).abs() < 0.01 {
                gl.get(i).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc(
            fig.y_label
                .clone()
                .unwrap_or_else(|| format!("{} ({unit})", fig.y)),
        )
        .x_desc(fig.x_label.clone().unwrap_or_default())
        .label_style((FONT, 12))
        .axis_desc_style((FONT, 13))
        .draw()
        .map_err(err)?;
    let ns = series.len().max(1) as f64;
    for (si, s) in series.iter().enumerate() {
        let c = PALETTE[si % PALETTE.len()];
        let rects: Vec<Rectangle<(f64, f64)>> = groups
            .iter()
            .enumerate()
            .filter_map(|(gi, g)| {
                let v = *val.get(&(g.clone(), s.clone()))?;
                let w = 0.8 / ns;
                let x0 = gi as f64 + 0.1 + w * si as f64;
                Some(Rectangle::new([(x0, 0.0), (x0 + w * 0.92, v)], c.filled()))
            })
            .collect();
        chart
            .draw_series(rects)
            .map_err(err)?
            .label(s.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
    }
    if !paper.is_empty() {
        chart
            .draw_series(
                paper
                    .iter()
                    .map(|(gi, v)| Cross::new((*gi as f64 + 0.5, *v), 7, BLACK.stroke_width(2))),
            )
            .map_err(err)?
            .label("paper")
            .legend(|(x, y)| Cross::new((x + 6, y), 5, BLACK.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FONT, 11))
        .draw()
        .map_err(err)?;
    Ok(())
}

fn cdf(
    fig: &Figure,
    rows: &[&AggRow],
    unit: &str,
    root: &DrawingArea<SVGBackend, plotters::coord::Shift>,
) -> Result<(), ReportError> {
    // the empirical CDF of the per-point medians of the metric, per series
    let mut by: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for r in rows {
        by.entry(series_key(r, &fig.series))
            .or_default()
            .push(tx(r.median, fig.log_x));
    }
    let (x0, x1) = range(by.values().flatten().copied());
    let mut chart = ChartBuilder::on(root)
        .caption(&fig.title, (FONT, 17))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(60)
        .build_cartesian_2d(x0..x1, 0f64..1.02)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(
            fig.x_label
                .clone()
                .unwrap_or_else(|| format!("{} ({unit})", fig.y)),
        )
        .y_desc(fig.y_label.clone().unwrap_or_else(|| "CDF".into()))
        .x_label_formatter(&|v| label(*v, fig.log_x))
        .label_style((FONT, 12))
        .axis_desc_style((FONT, 13))
        .draw()
        .map_err(err)?;
    for (i, (name, mut v)) in by.into_iter().enumerate() {
        v.sort_by(f64::total_cmp);
        let n = v.len() as f64;
        let c = PALETTE[i % PALETTE.len()];
        let pts: Vec<(f64, f64)> = v
            .iter()
            .enumerate()
            .map(|(k, x)| (*x, (k + 1) as f64 / n))
            .collect();
        chart
            .draw_series(LineSeries::new(pts, c.stroke_width(2)))
            .map_err(err)?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FONT, 11))
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod font_tests {
    use super::*;

    /// The font's errors are typed; each says the sentence it said as text.
    #[test]
    fn font_errors_are_typed_with_their_sentences() {
        let missing = ReportError::from(FontError::Missing);
        assert!(matches!(missing, ReportError::Font(FontError::Missing)));
        assert_eq!(
            missing.to_string(),
            "the embedded DejaVu Sans Mono font is missing"
        );
        let load = ReportError::from(FontError::Load);
        assert!(matches!(load, ReportError::Font(FontError::Load)));
        assert_eq!(load.to_string(), "cannot load the embedded font");
        // the embedded font is there and registers (twice: the memo answers the second)
        assert!(font_ready().is_ok());
        assert!(font_ready().is_ok());
    }
}
