//! Owning the terminal: raw mode and the alternate screen, always restored.

use super::app::{Action, App};
use super::render::render;
use inabench_core::event::Event;
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::event::{self, Event as TermEvent, KeyEventKind, KeyModifiers};
use ratatui::crossterm::execute;
use ratatui::crossterm::terminal::{
    EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};

fn restore() {
    let _ = disable_raw_mode();
    let _ = execute!(
        std::io::stdout(),
        LeaveAlternateScreen,
        ratatui::crossterm::cursor::Show
    );
}

/// Restores the terminal when dropped (normal return, early return with `?`, unwinding).
struct Guard;

impl Drop for Guard {
    fn drop(&mut self) {
        restore();
    }
}

/// Run the dashboard until the runner drops its sender (or the user quits and the runner stops).
pub fn run_dashboard(
    rx: Receiver<Event>,
    cancel: Arc<AtomicBool>,
    experiment: &str,
    title: &str,
) -> std::io::Result<App> {
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        restore();
        prev(info);
    }));
    enable_raw_mode()?;
    let _guard = Guard;
    execute!(std::io::stdout(), EnterAlternateScreen)?;
    let mut term = Terminal::new(CrosstermBackend::new(std::io::stdout()))?;
    let mut app = App::new(experiment, title);
    let frame = Duration::from_millis(66);
    let mut finished_at: Option<Instant> = None;
    loop {
        // drain everything pending
        loop {
            match rx.try_recv() {
                Ok(ev) => app.update(&ev),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    finished_at.get_or_insert_with(Instant::now);
                    break;
                }
            }
        }
        term.draw(|f| render(&app, f))?;
        if let Some(t) = finished_at
            && (app.stopping || t.elapsed() >= Duration::from_millis(500))
        {
            break;
        }
        if event::poll(frame)?
            && let TermEvent::Key(k) = event::read()?
            && k.kind != KeyEventKind::Release
            && app.on_key(k.code, k.modifiers.contains(KeyModifiers::CONTROL)) == Action::Quit
        {
            app.stopping = true;
            cancel.store(true, Ordering::Relaxed);
        }
    }
    drop(term);
    Ok(app)
}
