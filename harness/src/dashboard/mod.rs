//! The live dashboard: an `App` updated by events and key presses, and a pure `render`.
//! `run_dashboard` owns the terminal and always restores it (normal return, error, panic).

mod app;
mod render;
mod terminal;

pub use app::{Action, App, PointState};
pub use render::render;
pub use terminal::run_dashboard;
