//! The one event stream: everything a run produces flows through it to the views and the store.

use crate::spec::Fidelity;
use crate::store::Row;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    Info,
    Warn,
    Error,
}

/// What a run reports as it goes. Agents send the same events over the control channel.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The plan is known.
    RunStarted {
        run_id: String,
        experiment: String,
        fidelity: Fidelity,
        /// Every class of the run, in the order they run.
        #[serde(default)]
        fidelities: Vec<Fidelity>,
        profile: String,
        points: Vec<PlannedPoint>,
    },
    /// A point starts (index into the plan).
    PointStarted { point: usize },
    /// Progress inside a point (work units done of total, e.g. repetitions or bytes).
    Progress { point: usize, done: u64, total: u64 },
    /// A live sample for the charts (not necessarily stored).
    Sample {
        point: usize,
        system: String,
        metric: String,
        value: f64,
        unit: String,
    },
    /// A measurement row to store.
    Row(Row),
    /// A counter a system reports (packets, losses, retransmissions): the running total.
    Counter {
        point: usize,
        system: String,
        name: String,
        value: u64,
    },
    /// CPU of a process of the run, percent of one core.
    ProcessCpu {
        pid: u32,
        label: String,
        cpu_percent: f64,
    },
    Log {
        level: LogLevel,
        source: String,
        message: String,
    },
    /// A line a point adds to the run manifest's `drivers` (what carried its frames when that
    /// is decided as the point runs, e.g. the raw fabric's socket kind and why): the runner
    /// keeps each distinct line once.
    Driver { point: usize, line: String },
    /// A point finished; `failure` says why when it did not (the run goes on with the next
    /// point).
    PointDone {
        point: usize,
        failure: Option<PointFailure>,
        elapsed_s: f64,
    },
    /// The run is over (complete, incomplete or failed).
    RunFinished {
        status: crate::store::RunStatus,
        elapsed_s: f64,
    },
}

/// A point as the views show it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PlannedPoint {
    pub point_id: String,
    pub system: String,
    pub label: String,
    /// Already done in an earlier attempt (resume).
    pub done: bool,
    /// The class the point runs in.
    #[serde(default)]
    pub fidelity: Option<Fidelity>,
}

/// Why a point did not finish, typed from the job to the views (they never compare the text).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PointFailure {
    /// The run was stopped (SIGINT, SIGTERM) during the point: it is pending, not failed, and a
    /// resume runs it.
    Interrupted,
    /// It ran and a result was wrong (a measured outcome: its rows stay).
    WrongResult(String),
    /// It fails for its parameter values (rerunning fails the same way).
    BadParameters(String),
    /// Its setup failed: no agent could be started, the binary has no such workload, the host
    /// lacks what the point needs (a device or driver: `WorkloadError::Setup`), or its rows came
    /// out in another class than planned (rerunning may succeed once the launcher, binary or
    /// host is fixed).
    Setup(String),
    /// Anything else: the workload's own error, an agent lost mid-point, a panic, ...
    Failed(String),
}

/// The kind of a [`PointFailure`], without its words: what the views decide by. A run folder's
/// `point_done` records keep it (`failure`, snake_case), so the report reads it back typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    Interrupted,
    WrongResult,
    BadParameters,
    Setup,
    Failed,
}

impl PointFailure {
    pub fn is_interrupted(&self) -> bool {
        matches!(self, PointFailure::Interrupted)
    }

    pub fn kind(&self) -> FailureKind {
        match self {
            PointFailure::Interrupted => FailureKind::Interrupted,
            PointFailure::WrongResult(_) => FailureKind::WrongResult,
            PointFailure::BadParameters(_) => FailureKind::BadParameters,
            PointFailure::Setup(_) => FailureKind::Setup,
            PointFailure::Failed(_) => FailureKind::Failed,
        }
    }
}

impl std::fmt::Display for PointFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PointFailure::Interrupted => f.write_str("interrupted"),
            PointFailure::WrongResult(m)
            | PointFailure::BadParameters(m)
            | PointFailure::Setup(m)
            | PointFailure::Failed(m) => f.write_str(m),
        }
    }
}
