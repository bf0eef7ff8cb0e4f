//! The headless view: indicatif progress on stderr when stderr is a terminal, and plain log
//! lines (progress every few seconds, warnings and errors as they come) otherwise, as in CI.

use inabench_core::event::{Event, LogLevel};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::{IsTerminal, Write};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

/// What the headless view saw, for the final summary.
#[derive(Debug, Default, Clone)]
pub struct Seen {
    pub points_run: usize,
    pub points_failed: usize,
    pub rows: usize,
    pub errors: Vec<String>,
}

/// Info lines already printed: a workload logs the same line on every repetition of a point
/// (Table 6's "udp fabric: ..." three times in the quick profile), printed once. Warnings and
/// errors always print.
#[derive(Debug, Default)]
pub struct InfoOnce(std::collections::HashSet<(String, String)>);

impl InfoOnce {
    /// True the first time this source says this message.
    pub fn first(&mut self, source: &str, message: &str) -> bool {
        self.0.insert((source.to_string(), message.to_string()))
    }
}

/// Consume events until the runner drops its sender.
pub fn run(rx: Receiver<Event>, quiet: bool) -> Seen {
    let tty = std::io::stderr().is_terminal();
    let mut seen = Seen::default();
    let mut bar: Option<ProgressBar> = None;
    let mut labels: Vec<String> = Vec::new();
    let mut todo = 0u64;
    let start = Instant::now();
    let mut last_line = Instant::now();
    let mut err = std::io::stderr();
    let mut info_once = InfoOnce::default();
    for ev in rx {
        match ev {
            Event::RunStarted {
                run_id,
                experiment,
                fidelity,
                fidelities,
                profile,
                points,
            } => {
                let classes = if fidelities.len() > 1 {
                    format!(
                        "classes {}",
                        fidelities
                            .iter()
                            .map(|f| f.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                } else {
                    format!("class {fidelity}")
                };
                todo = points.iter().filter(|p| !p.done).count() as u64;
                labels = points.iter().map(|p| p.label.clone()).collect();
                if !quiet {
                    let _ = writeln!(
                        err,
                        "inabench: {experiment} ({profile} profile, {classes}), run {run_id}: {todo} points to run"
                    );
                }
                if tty && !quiet {
                    let pb = ProgressBar::with_draw_target(
                        Some(todo),
                        ProgressDrawTarget::stderr_with_hz(10),
                    );
                    let style = ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} points, eta {eta} {msg}")
                        .unwrap_or_else(|_| ProgressStyle::default_bar());
                    pb.set_style(style);
                    bar = Some(pb);
                }
            }
            Event::PointStarted { point } => {
                if let Some(pb) = &bar {
                    pb.set_message(labels.get(point).cloned().unwrap_or_default());
                }
            }
            Event::PointDone { point, failure, .. } => {
                seen.points_run += 1;
                if let Some(error) = failure.filter(|f| !f.is_interrupted()) {
                    seen.points_failed += 1;
                    let msg = format!(
                        "point failed: {}: {}",
                        labels.get(point).cloned().unwrap_or_default(),
                        error
                    );
                    seen.errors.push(msg.clone());
                    match &bar {
                        Some(pb) => pb.println(format!("error: {msg}")),
                        None => {
                            let _ = writeln!(err, "error: {msg}");
                        }
                    }
                }
                if let Some(pb) = &bar {
                    pb.inc(1);
                } else if !quiet && last_line.elapsed() >= Duration::from_secs(5) {
                    last_line = Instant::now();
                    let pct = if todo > 0 {
                        seen.points_run as f64 / todo as f64 * 100.0
                    } else {
                        100.0
                    };
                    let _ = writeln!(
                        err,
                        "[{:>6.1}s] {}/{} points ({pct:.0}%)",
                        start.elapsed().as_secs_f64(),
                        seen.points_run,
                        todo
                    );
                }
            }
            Event::Row(_) => seen.rows += 1,
            Event::Log {
                level,
                source,
                message,
            } => {
                if level == LogLevel::Info && (quiet || !info_once.first(&source, &message)) {
                    continue;
                }
                let line = format!(
                    "{}: {source}: {message}",
                    match level {
                        LogLevel::Info => "info",
                        LogLevel::Warn => "warning",
                        LogLevel::Error => "error",
                    }
                );
                match &bar {
                    Some(pb) => pb.println(line),
                    None => {
                        let _ = writeln!(err, "{line}");
                    }
                }
            }
            Event::RunFinished { status, elapsed_s } => {
                if let Some(pb) = bar.take() {
                    pb.finish_and_clear();
                }
                if !quiet {
                    let _ = writeln!(
                        err,
                        "inabench: run {} after {elapsed_s:.2}s: {} points run, {} failed, {} rows",
                        status.as_str(),
                        seen.points_run,
                        seen.points_failed,
                        seen.rows
                    );
                }
            }
            Event::Progress { .. }
            | Event::Driver { .. }
            | Event::Sample { .. }
            | Event::Counter { .. }
            | Event::ProcessCpu { .. } => {}
        }
    }
    if let Some(pb) = bar {
        pb.finish_and_clear();
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::InfoOnce;

    #[test]
    fn an_info_line_repeated_by_repetitions_prints_once() {
        let mut once = InfoOnce::default();
        let line = "udp fabric: socket offload gso, switch shards 1";
        assert!(once.first("netreduce", line));
        assert!(!once.first("netreduce", line));
        assert!(!once.first("netreduce", line));
        // another message, or the same from another source, is new
        assert!(once.first(
            "netreduce",
            "udp fabric: socket offload gso, switch shards 2"
        ));
        assert!(once.first("runner", line));
    }
}
