//! Drawing: a pure function of the state.

use super::app::{App, PointState};
use inabench_core::event::{FailureKind, LogLevel};
use ratatui::Frame;
use ratatui::layout::{Constraint, Direction, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::symbols;
use ratatui::text::{Line, Span};
use ratatui::widgets::{
    Axis, Block, Borders, Chart, Dataset, Gauge, GraphType, List, ListItem, Paragraph, Row, Table,
};

const COLORS: [Color; 8] = [
    Color::Cyan,
    Color::Yellow,
    Color::Green,
    Color::Magenta,
    Color::Red,
    Color::Blue,
    Color::LightCyan,
    Color::LightYellow,
];

pub fn render(app: &App, f: &mut Frame) {
    let area = f.area();
    if area.height < 3 || area.width < 10 {
        f.render_widget(
            Paragraph::new(format!("{} {:.0}%", app.experiment, percent(app))),
            area,
        );
        return;
    }
    let rows = Layout::default()
        .direction(Direction::Vertical)
        .constraints([
            Constraint::Length(3),
            Constraint::Length(1),
            Constraint::Min(4),
            Constraint::Length(8.min(area.height / 4)),
            Constraint::Length(1),
        ])
        .split(area);
    header(app, f, rows[0]);
    let (done, total) = app.progress();
    let g = Gauge::default()
        .gauge_style(Style::default().fg(Color::Green))
        .ratio(if total == 0 {
            0.0
        } else {
            done as f64 / total as f64
        })
        .label(format!("{done}/{total} points ({:.0}%)", percent(app)));
    f.render_widget(g, rows[1]);
    let mid = Layout::default()
        .direction(Direction::Horizontal)
        .constraints([Constraint::Percentage(40), Constraint::Percentage(60)])
        .split(rows[2]);
    plan(app, f, mid[0]);
    let right = Layout::default()
        .direction(Direction::Vertical)
        .constraints([Constraint::Percentage(65), Constraint::Percentage(35)])
        .split(mid[1]);
    chart(app, f, right[0]);
    let tables = Layout::default()
        .direction(Direction::Horizontal)
        .constraints([Constraint::Percentage(55), Constraint::Percentage(45)])
        .split(right[1]);
    counters(app, f, tables[0]);
    cpu(app, f, tables[1]);
    logs(app, f, rows[3]);
    let footer = if app.stopping {
        "stopping after the current repetition..."
    } else {
        "q quit (keeps what was measured)   Tab/<- -> metric   Up/Down scroll plan"
    };
    f.render_widget(
        Paragraph::new(footer).style(Style::default().fg(Color::DarkGray)),
        rows[4],
    );
}

fn percent(app: &App) -> f64 {
    let (d, t) = app.progress();
    if t == 0 {
        0.0
    } else {
        d as f64 / t as f64 * 100.0
    }
}

fn header(app: &App, f: &mut Frame, area: Rect) {
    let status = match app.status {
        Some(s) => s.as_str().to_string(),
        None if app.stopping => "stopping".into(),
        None => "running".into(),
    };
    let eta = app
        .eta_s()
        .map(|s| format!("   eta {s:.0}s"))
        .unwrap_or_default();
    let lines = vec![
        Line::from(vec![
            Span::styled(
                app.experiment.clone(),
                Style::default().add_modifier(Modifier::BOLD),
            ),
            Span::raw(format!("  {}", app.title)),
        ]),
        Line::from(format!(
            "class {}{}   profile {}   run {}   {status}{eta}",
            app.fidelity,
            match app.classes.iter().position(|c| *c == app.fidelity) {
                Some(i) if app.classes.len() > 1 => {
                    format!(
                        " ({} of {}: {})",
                        i + 1,
                        app.classes.len(),
                        app.classes.join(", ")
                    )
                }
                _ => String::new(),
            },
            app.profile,
            app.run_id
        )),
    ];
    f.render_widget(
        Paragraph::new(lines).block(Block::default().borders(Borders::BOTTOM)),
        area,
    );
}

fn plan(app: &App, f: &mut Frame, area: Rect) {
    let visible = area.height.saturating_sub(2) as usize;
    let start = app
        .scroll
        .min(app.labels.len().saturating_sub(visible.max(1)));
    let items: Vec<ListItem> = app
        .labels
        .iter()
        .zip(&app.states)
        .enumerate()
        .skip(start)
        .take(visible)
        .map(|(_, (label, st))| {
            let (mark, style) = match st {
                PointState::Pending => ("  .  ".to_string(), Style::default().fg(Color::DarkGray)),
                PointState::Running { done, total } => (
                    format!(" {}/{} ", done, total),
                    Style::default().fg(Color::Yellow),
                ),
                PointState::Done { elapsed_s } => (
                    format!("done {:.1}s", elapsed_s),
                    Style::default().fg(Color::Green),
                ),
                PointState::Failed { kind, .. } => (
                    match kind {
                        FailureKind::WrongResult => "WRONG",
                        FailureKind::BadParameters => "BAD PARAMS",
                        FailureKind::Setup => "SETUP",
                        FailureKind::Interrupted | FailureKind::Failed => "FAILED",
                    }
                    .to_string(),
                    Style::default().fg(Color::Red),
                ),
                PointState::Earlier => ("earlier".to_string(), Style::default().fg(Color::Blue)),
            };
            ListItem::new(Line::from(vec![
                Span::styled(format!("{mark:<10}"), style),
                Span::raw(label.clone()),
            ]))
        })
        .collect();
    f.render_widget(
        List::new(items).block(Block::default().borders(Borders::ALL).title("plan")),
        area,
    );
}

fn chart(app: &App, f: &mut Frame, area: Rect) {
    let Some(metric) = &app.metric else {
        f.render_widget(
            Paragraph::new("waiting for samples...")
                .block(Block::default().borders(Borders::ALL).title("live")),
            area,
        );
        return;
    };
    let unit = app.units.get(metric).cloned().unwrap_or_default();
    let empty = Default::default();
    let per = app.series.get(metric).unwrap_or(&empty);
    let data: Vec<(String, Vec<(f64, f64)>)> = per
        .iter()
        .map(|(s, q)| {
            (
                s.clone(),
                q.iter().enumerate().map(|(i, v)| (i as f64, *v)).collect(),
            )
        })
        .collect();
    let (mut lo, mut hi, mut xmax) = (f64::INFINITY, f64::NEG_INFINITY, 1.0f64);
    for (_, pts) in &data {
        for (x, y) in pts {
            if y.is_finite() {
                lo = lo.min(*y);
                hi = hi.max(*y);
            }
            xmax = xmax.max(*x);
        }
    }
    if !lo.is_finite() {
        lo = 0.0;
        hi = 1.0;
    }
    if hi - lo < 1e-12 {
        hi = lo + lo.abs().max(1.0) * 0.1;
        lo -= lo.abs() * 0.1;
    }
    let datasets: Vec<Dataset> = data
        .iter()
        .enumerate()
        .map(|(i, (s, pts))| {
            Dataset::default()
                .name(s.clone())
                .marker(symbols::Marker::Braille)
                .graph_type(GraphType::Line)
                .style(Style::default().fg(COLORS[i % COLORS.len()]))
                .data(pts)
        })
        .collect();
    let c = Chart::new(datasets)
        .block(
            Block::default()
                .borders(Borders::ALL)
                .title(format!("live: {metric} [{unit}] (Tab: next metric)")),
        )
        .x_axis(
            Axis::default()
                .title("sample")
                .bounds([0.0, xmax])
                .labels(vec![Line::from("0"), Line::from(format!("{xmax:.0}"))]),
        )
        .y_axis(
            Axis::default()
                .title(unit.clone())
                .bounds([lo, hi])
                .labels(vec![Line::from(fmt(lo)), Line::from(fmt(hi))]),
        );
    f.render_widget(c, area);
}

fn fmt(x: f64) -> String {
    inabench_core::claims::fmt_num(x)
}

fn counters(app: &App, f: &mut Frame, area: Rect) {
    let rows: Vec<Row> = app
        .counters
        .iter()
        .flat_map(|(sys, m)| {
            m.iter()
                .map(move |(k, v)| Row::new(vec![sys.clone(), k.clone(), v.to_string()]))
        })
        .collect();
    let t = Table::new(
        rows,
        [
            Constraint::Percentage(40),
            Constraint::Percentage(40),
            Constraint::Percentage(20),
        ],
    )
    .header(
        Row::new(vec!["system", "counter", "value"])
            .style(Style::default().add_modifier(Modifier::BOLD)),
    )
    .block(Block::default().borders(Borders::ALL).title("counters"));
    f.render_widget(t, area);
}

fn cpu(app: &App, f: &mut Frame, area: Rect) {
    let rows: Vec<Row> = app
        .cpu
        .iter()
        .map(|(pid, (label, pct))| {
            Row::new(vec![pid.to_string(), label.clone(), format!("{pct:.0}%")])
        })
        .collect();
    let t = Table::new(
        rows,
        [
            Constraint::Length(8),
            Constraint::Min(8),
            Constraint::Length(6),
        ],
    )
    .header(
        Row::new(vec!["pid", "process", "cpu"])
            .style(Style::default().add_modifier(Modifier::BOLD)),
    )
    .block(
        Block::default()
            .borders(Borders::ALL)
            .title("cpu (% of a core)"),
    );
    f.render_widget(t, area);
}

fn logs(app: &App, f: &mut Frame, area: Rect) {
    let n = area.height.saturating_sub(2) as usize;
    let items: Vec<ListItem> = app
        .logs
        .iter()
        .skip(app.logs.len().saturating_sub(n))
        .map(|(lvl, l)| {
            let st = match lvl {
                LogLevel::Info => Style::default(),
                LogLevel::Warn => Style::default().fg(Color::Yellow),
                LogLevel::Error => Style::default().fg(Color::Red),
            };
            ListItem::new(Span::styled(l.clone(), st))
        })
        .collect();
    f.render_widget(
        List::new(items).block(Block::default().borders(Borders::ALL).title("log")),
        area,
    );
}

#[cfg(test)]
mod tests {
    use super::super::app::{Action, App};
    use super::render;
    use inabench_core::event::{Event, LogLevel, PlannedPoint};
    use inabench_core::spec::Fidelity;
    use inabench_core::store::RunStatus;
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;
    use ratatui::crossterm::event::KeyCode;

    fn text(t: &Terminal<TestBackend>) -> String {
        let b = t.backend().buffer();
        let mut s = String::new();
        for y in 0..b.area.height {
            for x in 0..b.area.width {
                s.push_str(b[(x, y)].symbol());
            }
            s.push('\n');
        }
        s
    }

    fn scripted() -> App {
        let mut app = App::new("netreduce-fig7", "Communication time");
        let points = (0..3)
            .map(|i| PlannedPoint {
                point_id: format!("p{i}"),
                system: "flat_ring".into(),
                label: format!("flat_ring P={}", 32 << i),
                done: i == 2,
                fidelity: Some(Fidelity::Modelled),
            })
            .collect();
        for ev in [
            Event::RunStarted {
                run_id: "r1".into(),
                experiment: "netreduce-fig7".into(),
                fidelity: Fidelity::Modelled,
                fidelities: vec![Fidelity::Modelled],
                profile: "quick".into(),
                points,
            },
            Event::PointStarted { point: 0 },
            Event::Sample {
                point: 0,
                system: "flat_ring".into(),
                metric: "comm_time".into(),
                value: 15.5,
                unit: "ms".into(),
            },
            Event::Sample {
                point: 0,
                system: "flat_ring".into(),
                metric: "comm_time".into(),
                value: 16.5,
                unit: "ms".into(),
            },
            Event::Sample {
                point: 0,
                system: "flat_ring".into(),
                metric: "goodput".into(),
                value: 80.0,
                unit: "Gbps".into(),
            },
            Event::Counter {
                point: 0,
                system: "flat_ring".into(),
                name: "retransmissions".into(),
                value: 4242,
            },
            Event::ProcessCpu {
                pid: 77,
                label: "runner".into(),
                cpu_percent: 99.0,
            },
            Event::Log {
                level: LogLevel::Warn,
                source: "runner".into(),
                message: "a warning line".into(),
            },
            Event::PointDone {
                point: 0,
                failure: None,
                elapsed_s: 1.0,
            },
            Event::PointStarted { point: 1 },
            Event::PointDone {
                point: 1,
                failure: Some(inabench_core::PointFailure::Failed("boom".into())),
                elapsed_s: 1.0,
            },
        ] {
            app.update(&ev);
        }
        app
    }

    #[test]
    fn renders_the_state() {
        let app = scripted();
        let mut t = Terminal::new(TestBackend::new(140, 40)).expect("terminal");
        t.draw(|f| render(&app, f)).expect("draw");
        let s = text(&t);
        for needle in [
            "netreduce-fig7",
            "flat_ring P=32",
            "done 1.0s",
            "FAILED",
            "earlier",
            "4242",
            "retransmissions",
            "a warning line",
            "3/3 points (100%)",
            "comm_time [ms]",
            "runner",
            "99%",
        ] {
            assert!(s.contains(needle), "`{needle}` missing:\n{s}");
        }
    }

    /// The plan marks a point by its failure's kind: a wrong result, bad parameters, its setup,
    /// any other failure; a point whose message merely reads "wrong" is marked FAILED.
    #[test]
    fn the_plan_marks_a_failure_by_its_kind() {
        use super::super::app::PointState;
        use inabench_core::event::FailureKind;
        let mut app = scripted();
        app.states = vec![
            PointState::Failed {
                kind: FailureKind::WrongResult,
                error: "sum differs".into(),
            },
            PointState::Failed {
                kind: FailureKind::BadParameters,
                error: "workers is 1..8".into(),
            },
            PointState::Failed {
                kind: FailureKind::Failed,
                error: "wrong".into(),
            },
        ];
        let mut t = Terminal::new(TestBackend::new(140, 40)).expect("terminal");
        t.draw(|f| render(&app, f)).expect("draw");
        let s = text(&t);
        let mark = |label: &str| {
            s.lines()
                .find(|l| l.contains(label))
                .map(|l| l.split(label).next().unwrap_or("").to_string())
                .unwrap_or_default()
        };
        assert!(mark("flat_ring P=32").contains("WRONG"), "{s}");
        assert!(mark("flat_ring P=64").contains("BAD PARAMS"), "{s}");
        assert!(mark("flat_ring P=128").contains("FAILED"), "{s}");
        assert!(!mark("flat_ring P=128").contains("WRONG"), "{s}");
        // a point whose setup failed (no agent, no such workload)
        app.states[2] = PointState::Failed {
            kind: FailureKind::Setup,
            error: "the launcher started no agent".into(),
        };
        t.draw(|f| render(&app, f)).expect("draw");
        let s = text(&t);
        let line = s.lines().find(|l| l.contains("flat_ring P=128"));
        assert!(
            line.is_some_and(|l| l
                .split("flat_ring P=128")
                .next()
                .unwrap_or("")
                .contains("SETUP")),
            "{s}"
        );
    }

    #[test]
    fn keys_switch_metric_and_quit() {
        let mut app = scripted();
        assert_eq!(app.metric.as_deref(), Some("comm_time"));
        assert_eq!(app.on_key(KeyCode::Tab, false), Action::None);
        assert_eq!(app.metric.as_deref(), Some("goodput"));
        let mut t = Terminal::new(TestBackend::new(140, 40)).expect("terminal");
        t.draw(|f| render(&app, f)).expect("draw");
        assert!(text(&t).contains("goodput [Gbps]"));
        assert_eq!(app.on_key(KeyCode::Char('q'), false), Action::Quit);
        assert_eq!(app.on_key(KeyCode::Char('c'), true), Action::Quit);
    }

    #[test]
    fn tiny_and_empty_terminals_do_not_panic() {
        let mut app = App::new("x", "y");
        for (w, h) in [(1, 1), (20, 5), (10, 3), (40, 12), (200, 60)] {
            let mut t = Terminal::new(TestBackend::new(w, h)).expect("terminal");
            t.draw(|f| render(&app, f)).expect("draw empty");
            let s = scripted();
            t.draw(|f| render(&s, f)).expect("draw scripted");
        }
        app.update(&Event::RunFinished {
            status: RunStatus::Complete,
            elapsed_s: 2.0,
        });
        let mut t = Terminal::new(TestBackend::new(80, 24)).expect("terminal");
        t.draw(|f| render(&app, f)).expect("draw");
        assert!(text(&t).contains("complete"));
    }
}
