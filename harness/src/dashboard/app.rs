//! Dashboard state: updated by events and keys, never by drawing.

use inabench_core::event::{Event, FailureKind, LogLevel};
use inabench_core::store::RunStatus;
use ratatui::crossterm::event::KeyCode;
use std::collections::{BTreeMap, VecDeque};

/// How many samples per series and log lines are kept.
pub const KEEP: usize = 200;

#[derive(Debug, Clone, PartialEq)]
pub enum PointState {
    Pending,
    Running {
        done: u64,
        total: u64,
    },
    Done {
        elapsed_s: f64,
    },
    /// Finished without its result: the failure's kind (never read from its words) and its
    /// sentence.
    Failed {
        kind: FailureKind,
        error: String,
    },
    Earlier,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    None,
    Quit,
}

#[derive(Debug, Clone)]
pub struct App {
    pub experiment: String,
    pub title: String,
    pub run_id: String,
    /// The class running now (the first until a point of another starts).
    pub fidelity: String,
    /// Every class of the run, in order.
    pub classes: Vec<String>,
    /// The class of each planned point.
    pub point_class: Vec<String>,
    pub profile: String,
    pub labels: Vec<String>,
    pub states: Vec<PointState>,
    pub status: Option<RunStatus>,
    pub elapsed_s: f64,
    /// Sum of the durations of points finished in this session, for the ETA.
    done_time_s: f64,
    done_count: usize,
    /// (metric -> system -> samples)
    pub series: BTreeMap<String, BTreeMap<String, VecDeque<f64>>>,
    pub units: BTreeMap<String, String>,
    pub metric: Option<String>,
    pub counters: BTreeMap<String, BTreeMap<String, u64>>,
    pub cpu: BTreeMap<u32, (String, f64)>,
    pub logs: VecDeque<(LogLevel, String)>,
    pub scroll: usize,
    pub stopping: bool,
}

impl App {
    pub fn new(experiment: &str, title: &str) -> App {
        App {
            experiment: experiment.to_string(),
            title: title.to_string(),
            run_id: String::new(),
            fidelity: String::new(),
            classes: Vec::new(),
            point_class: Vec::new(),
            profile: String::new(),
            labels: Vec::new(),
            states: Vec::new(),
            status: None,
            elapsed_s: 0.0,
            done_time_s: 0.0,
            done_count: 0,
            series: BTreeMap::new(),
            units: BTreeMap::new(),
            metric: None,
            counters: BTreeMap::new(),
            cpu: BTreeMap::new(),
            logs: VecDeque::new(),
            scroll: 0,
            stopping: false,
        }
    }

    /// A chart line or counter row: the system, and its class when the run has several (one
    /// line per system and per class).
    fn series_name(&self, system: &str) -> String {
        if self.classes.len() > 1 && !self.fidelity.is_empty() {
            format!("{system} [{}]", self.fidelity)
        } else {
            system.to_string()
        }
    }

    pub fn update(&mut self, ev: &Event) {
        match ev {
            Event::RunStarted {
                run_id,
                experiment,
                fidelity,
                fidelities,
                profile,
                points,
            } => {
                self.run_id = run_id.clone();
                self.experiment = experiment.clone();
                self.fidelity = fidelity.to_string();
                self.classes = fidelities.iter().map(|f| f.to_string()).collect();
                self.point_class = points
                    .iter()
                    .map(|p| p.fidelity.map(|f| f.to_string()).unwrap_or_default())
                    .collect();
                self.profile = profile.clone();
                self.labels = points.iter().map(|p| p.label.clone()).collect();
                self.states = points
                    .iter()
                    .map(|p| {
                        if p.done {
                            PointState::Earlier
                        } else {
                            PointState::Pending
                        }
                    })
                    .collect();
            }
            Event::PointStarted { point } => {
                if let Some(c) = self.point_class.get(*point).filter(|c| !c.is_empty()) {
                    self.fidelity.clone_from(c);
                }
                if let Some(s) = self.states.get_mut(*point) {
                    *s = PointState::Running { done: 0, total: 0 };
                }
                // keep the running point in view
                if *point >= self.scroll + 8 {
                    self.scroll = point.saturating_sub(4);
                }
            }
            Event::Progress { point, done, total } => {
                if let Some(s) = self.states.get_mut(*point) {
                    *s = PointState::Running {
                        done: *done,
                        total: *total,
                    };
                }
            }
            Event::Sample {
                system,
                metric,
                value,
                unit,
                ..
            } => {
                let series = self.series_name(system);
                self.sample(&series, metric, *value, unit)
            }
            Event::Row(r) => {
                let series = self.series_name(&r.system);
                self.sample(&series, &r.metric, r.value, &r.unit)
            }
            Event::Counter {
                system,
                name,
                value,
                ..
            } => {
                let series = self.series_name(system);
                self.counters
                    .entry(series)
                    .or_default()
                    .insert(name.clone(), *value);
            }
            Event::ProcessCpu {
                pid,
                label,
                cpu_percent,
            } => {
                self.cpu.insert(*pid, (label.clone(), *cpu_percent));
            }
            Event::Log {
                level,
                source,
                message,
            } => self.log(*level, format!("{source}: {message}")),
            Event::PointDone {
                point,
                failure,
                elapsed_s,
            } => {
                if let Some(s) = self.states.get_mut(*point) {
                    *s = match failure {
                        None => PointState::Done {
                            elapsed_s: *elapsed_s,
                        },
                        Some(f) if f.is_interrupted() => PointState::Pending,
                        Some(f) => PointState::Failed {
                            kind: f.kind(),
                            error: f.to_string(),
                        },
                    };
                }
                if failure.is_none() {
                    self.done_time_s += elapsed_s;
                    self.done_count += 1;
                }
            }
            // the manifest's lines; the point's own log says the same
            Event::Driver { .. } => {}
            Event::RunFinished { status, elapsed_s } => {
                self.status = Some(*status);
                self.elapsed_s = *elapsed_s;
            }
        }
    }

    fn sample(&mut self, system: &str, metric: &str, value: f64, unit: &str) {
        let q = self
            .series
            .entry(metric.to_string())
            .or_default()
            .entry(system.to_string())
            .or_default();
        q.push_back(value);
        while q.len() > KEEP {
            q.pop_front();
        }
        if !self.units.contains_key(metric) {
            self.units.insert(metric.to_string(), unit.to_string());
        }
        if self.metric.is_none() {
            self.metric = Some(metric.to_string());
        }
    }

    fn log(&mut self, level: LogLevel, line: String) {
        self.logs.push_back((level, line));
        while self.logs.len() > KEEP {
            self.logs.pop_front();
        }
    }

    pub fn on_key(&mut self, code: KeyCode, ctrl: bool) -> Action {
        match code {
            KeyCode::Char('q') | KeyCode::Esc => Action::Quit,
            KeyCode::Char('c') if ctrl => Action::Quit,
            KeyCode::Tab | KeyCode::Right => {
                self.cycle_metric(1);
                Action::None
            }
            KeyCode::Left | KeyCode::BackTab => {
                self.cycle_metric(-1);
                Action::None
            }
            KeyCode::Down => {
                if self.scroll + 1 < self.labels.len() {
                    self.scroll += 1;
                }
                Action::None
            }
            KeyCode::Up => {
                self.scroll = self.scroll.saturating_sub(1);
                Action::None
            }
            _ => Action::None,
        }
    }

    fn cycle_metric(&mut self, step: isize) {
        let names: Vec<&String> = self.series.keys().collect();
        if names.is_empty() {
            return;
        }
        let cur = self
            .metric
            .as_ref()
            .and_then(|m| names.iter().position(|n| *n == m))
            .unwrap_or(0) as isize;
        let next = (cur + step).rem_euclid(names.len() as isize) as usize;
        self.metric = Some(names[next].clone());
    }

    /// (points finished or earlier, points in the plan)
    pub fn progress(&self) -> (usize, usize) {
        let done = self
            .states
            .iter()
            .filter(|s| {
                matches!(
                    s,
                    PointState::Done { .. } | PointState::Earlier | PointState::Failed { .. }
                )
            })
            .count();
        (done, self.states.len())
    }

    /// Seconds left, from the mean duration of the points finished so far.
    pub fn eta_s(&self) -> Option<f64> {
        if self.done_count == 0 {
            return None;
        }
        let (done, total) = self.progress();
        Some(self.done_time_s / self.done_count as f64 * (total - done) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use inabench_core::PointFailure;

    /// The view decides by the failure's kind, not its words: an interrupted point is pending
    /// (a resume runs it), a point whose own message reads "interrupted" failed.
    #[test]
    fn a_point_is_pending_only_when_the_run_was_interrupted() {
        let mut app = App::new("x", "x");
        app.states = vec![PointState::Pending; 5];
        let done = |point, failure| Event::PointDone {
            point,
            failure,
            elapsed_s: 1.0,
        };
        app.update(&done(0, None));
        app.update(&done(1, Some(PointFailure::Interrupted)));
        app.update(&done(2, Some(PointFailure::Failed("interrupted".into()))));
        app.update(&done(
            3,
            Some(PointFailure::WrongResult("sum differs".into())),
        ));
        app.update(&done(
            4,
            Some(PointFailure::BadParameters("workers is 1..8".into())),
        ));
        assert!(matches!(app.states[0], PointState::Done { .. }));
        assert_eq!(app.states[1], PointState::Pending);
        assert_eq!(
            app.states[2],
            PointState::Failed {
                kind: FailureKind::Failed,
                error: "interrupted".into()
            }
        );
        assert_eq!(
            app.states[3],
            PointState::Failed {
                kind: FailureKind::WrongResult,
                error: "sum differs".into()
            }
        );
        assert_eq!(
            app.states[4],
            PointState::Failed {
                kind: FailureKind::BadParameters,
                error: "workers is 1..8".into()
            }
        );
    }
}
