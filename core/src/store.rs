//! Run folders: `results/<run-id>/` with `manifest.json`, `spec.yaml` (the spec as run),
//! `rows.jsonl` (append-only, written as rows are measured) and, once compacted by the report
//! crate, `measurements.parquet`. An interrupted run keeps every finished row; `--resume`
//! finishes only the points that have no `point_done` record.

use crate::event::FailureKind;
use crate::spec::Fidelity;
use crate::value::Params;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

/// A measurement row, in the long format of ARCHITECTURE.md. The run's constants (its id, the
/// experiment) are not a row's: the manifest (and `Event::RunStarted`) carry them, and the
/// parquet export writes them from the manifest. Lines of older folders that repeat them still
/// read (the fields are ignored).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub point_id: String,
    pub system: String,
    pub fidelity: Fidelity,
    pub fabric: String,
    pub params: Params,
    pub repetition: u32,
    pub metric: String,
    pub value: f64,
    pub unit: String,
    /// Unix time in seconds.
    pub timestamp: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    Running,
    Complete,
    Incomplete,
    Failed,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Complete => "complete",
            RunStatus::Incomplete => "incomplete",
            RunStatus::Failed => "failed",
        }
    }
}

/// Facts about the host a run ran on.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HostFacts {
    pub hostname: String,
    pub cpu_model: String,
    pub cores: usize,
    pub memory_gib: f64,
    pub kernel: String,
    pub rustc: String,
    /// Whether the run had root (network namespaces, XDP).
    #[serde(default)]
    pub root: bool,
}

impl HostFacts {
    /// Read from /proc (Linux); fields that cannot be read stay empty.
    pub fn probe(rustc: &str) -> HostFacts {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let cpuinfo = read("/proc/cpuinfo");
        let cpu_model = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split(':').nth(1))
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        let memory_kib: f64 = read("/proc/meminfo")
            .lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        HostFacts {
            hostname: read("/proc/sys/kernel/hostname").trim().to_string(),
            cpu_model,
            cores: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            memory_gib: memory_kib / (1024.0 * 1024.0),
            kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
            rustc: rustc.to_string(),
            // SAFETY: geteuid has no preconditions and cannot fail
            root: unsafe { libc::geteuid() } == 0,
        }
    }
}

/// `manifest.json`: what was run, where, how, and how it ended.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub run_id: String,
    pub experiment: String,
    pub title: String,
    pub spec_file: String,
    pub spec_sha256: String,
    pub profile: String,
    /// The first (best) class of the run; `fidelities` lists them all.
    pub fidelity: Fidelity,
    /// Every class the run ran, best first (runs before multi-class runs list none: read
    /// `classes()`).
    #[serde(default)]
    pub fidelities: Vec<Fidelity>,
    pub fabric: String,
    pub seed: u64,
    pub git_revision: String,
    pub inabench_version: String,
    pub command: Vec<String>,
    pub host: HostFacts,
    pub testbed: String,
    pub testbed_sha256: String,
    pub drivers: Vec<String>,
    pub fidelity_reason: String,
    pub started: String,
    pub finished: Option<String>,
    pub elapsed_s: f64,
    pub status: RunStatus,
    pub points_total: usize,
    pub points_done: usize,
    pub points_failed: usize,
    /// Points that finished with a wrong result (counted in `points_done` too).
    #[serde(default)]
    pub points_wrong: usize,
    /// Points that failed for their parameter values (counted in `points_failed` too): they fail
    /// the same way when rerun, so `--resume` does not finish them.
    #[serde(default)]
    pub points_invalid: usize,
    #[serde(default)]
    pub resumed_from: Vec<String>,
    /// Systems of the spec this version cannot run yet (left out of the plan).
    #[serde(default)]
    pub systems_not_built: Vec<String>,
    /// The rows of a class the plan left out because the testbed lacks what they need (a
    /// system's `hardware` rows without its devices), with the sentence: judged `not checkable
    /// here`, never dropped silently.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rows_not_here: Vec<crate::plan::NotHere>,
    /// The launcher that started the processes of the run (`local`, `ssh`, `slurm`); None: the
    /// points ran in the runner's process.
    #[serde(default)]
    pub launcher: Option<String>,
    /// What the command line changed in the spec (`--set key=v1,v2`, `--repetitions N`,
    /// `--warmup N`), as given; the run folder's `spec.yaml` is the changed spec.
    #[serde(default)]
    pub overrides: Vec<String>,
    /// The host profile the run charged host costs from: its name, file and SHA-256 prefix
    /// (`reproduce --host-profile`; absent in runs made before profiles existed).
    #[serde(default)]
    pub host_profile: Option<String>,
}

impl Manifest {
    /// The classes the run ran, best first.
    pub fn classes(&self) -> Vec<Fidelity> {
        if self.fidelities.is_empty() {
            vec![self.fidelity]
        } else {
            self.fidelities.clone()
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The OS error is part of the sentence, not a chained cause, so `{:#}` says it once.
    #[error("{path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{path}:{line}: not a valid record ({message})")]
    Corrupt {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error("no run `{0}` in the results folder")]
    NoRun(String),
    #[error("the results folder has no runs yet")]
    NoRuns,
    #[error("the results folder has no run of {0}")]
    NoRunOf(String),
    #[error(
        "run {0} is being written by another inabench process; let it finish (or stop it) before resuming it"
    )]
    InUse(String),
}

/// The file an error is about (the results folder for `NoRun`/`NoRuns`: an empty path).
pub fn io_path(e: &StoreError) -> &Path {
    match e {
        StoreError::Io { path, .. } | StoreError::Corrupt { path, .. } => path,
        StoreError::NoRun(_)
        | StoreError::NoRuns
        | StoreError::NoRunOf(_)
        | StoreError::InUse(_) => Path::new(""),
    }
}

/// Why, without the path: the operating system's words for an I/O error.
pub fn io_reason(e: &StoreError) -> String {
    match e {
        StoreError::Io { error, .. } => error.to_string(),
        other => other.to_string(),
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |error| StoreError::Io {
        path: path.to_path_buf(),
        error,
    }
}

/// One line of `rows.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Record {
    Row(Row),
    PointDone {
        point_id: String,
        ok: bool,
        error: Option<String>,
        /// The point finished with a wrong result (a wrong aggregate): its rows are kept as
        /// data, resume does not rerun it, and every claim over it fails.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        wrong: bool,
        /// How a point that did not finish failed (bad parameters, wrong result, other); absent
        /// for a finished point and in records written before it was kept (then a failed
        /// point reads as [`FailureKind::Failed`], a wrong one as [`FailureKind::WrongResult`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failure: Option<FailureKind>,
    },
}

/// An advisory lock on a run folder (`flock` on the folder itself), held by the one process
/// that writes the run; released when dropped or when the process ends, however it ends.
#[derive(Debug)]
pub struct RunLock {
    _dir: File,
}

/// Take the run folder's lock, or say that another process holds it ([`StoreError::InUse`]).
pub fn lock_run(dir: &Path) -> Result<RunLock, StoreError> {
    use std::os::fd::AsRawFd;
    let f = File::open(dir).map_err(io(dir))?;
    // SAFETY: flock(2) on a descriptor this function owns.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            let id = dir.file_name().map_or_else(
                || dir.display().to_string(),
                |n| n.to_string_lossy().to_string(),
            );
            return Err(StoreError::InUse(id));
        }
        return Err(io(dir)(e));
    }
    Ok(RunLock { _dir: f })
}

pub const ROWS_FILE: &str = "rows.jsonl";
pub const MANIFEST_FILE: &str = "manifest.json";
pub const PARQUET_FILE: &str = "measurements.parquet";
pub const SPEC_FILE: &str = "spec.yaml";

/// A run folder being written.
pub struct RunWriter {
    pub dir: PathBuf,
    rows: BufWriter<File>,
    /// The file's length after the last successful [`RunWriter::flush`]: whole lines only.
    flushed: u64,
}

impl RunWriter {
    /// Create `results/<run-id>/` (or open it for appending when resuming).
    pub fn open(dir: &Path) -> Result<RunWriter, StoreError> {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let path = dir.join(ROWS_FILE);
        let f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io(&path))?;
        let flushed = f.metadata().map_err(io(&path))?.len();
        Ok(RunWriter {
            dir: dir.to_path_buf(),
            rows: BufWriter::with_capacity(1 << 16, f),
            flushed,
        })
    }

    pub fn append(&mut self, rec: &Record) -> Result<(), StoreError> {
        let path = || self.dir.join(ROWS_FILE);
        serde_json::to_writer(&mut self.rows, rec).map_err(|e| StoreError::Io {
            path: path(),
            error: e.into(),
        })?;
        self.rows.write_all(b"\n").map_err(|e| StoreError::Io {
            path: path(),
            error: e,
        })
    }

    /// Append a row without copying it (the line `append(&Record::Row(..))` writes).
    pub fn append_row(&mut self, row: &Row) -> Result<(), StoreError> {
        #[derive(Serialize)]
        struct Tagged<'a> {
            kind: &'static str,
            #[serde(flatten)]
            row: &'a Row,
        }
        let path = || self.dir.join(ROWS_FILE);
        serde_json::to_writer(&mut self.rows, &Tagged { kind: "row", row }).map_err(|e| {
            StoreError::Io {
                path: path(),
                error: e.into(),
            }
        })?;
        self.rows.write_all(b"\n").map_err(|e| StoreError::Io {
            path: path(),
            error: e,
        })
    }

    /// Push buffered rows to the file (after each point, and on interruption).
    pub fn flush(&mut self) -> Result<(), StoreError> {
        let path = self.dir.join(ROWS_FILE);
        self.rows.flush().map_err(io(&path))?;
        self.flushed = self.rows.get_ref().metadata().map_err(io(&path))?.len();
        Ok(())
    }

    /// Give up after a write error: drop what is buffered and cut the file back to its length
    /// at the last successful flush, so no torn line is left (a full disk gets those bytes
    /// back for the manifest). Records after that flush are lost; `--resume` measures their
    /// points again.
    pub fn abandon(self) -> Result<(), StoreError> {
        let path = self.dir.join(ROWS_FILE);
        let (f, _unwritten) = self.rows.into_parts();
        f.set_len(self.flushed).map_err(io(&path))
    }

    pub fn write_manifest(&self, m: &Manifest) -> Result<(), StoreError> {
        write_manifest(&self.dir, m)
    }
}

/// Write the manifest atomically (temp file + rename), so a crash never leaves half a manifest.
pub fn write_manifest(dir: &Path, m: &Manifest) -> Result<(), StoreError> {
    let path = dir.join(MANIFEST_FILE);
    let tmp = dir.join(".manifest.json.tmp");
    let text = serde_json::to_string_pretty(m).map_err(|e| StoreError::Io {
        path: path.clone(),
        error: e.into(),
    })?;
    if let Err(e) = std::fs::write(&tmp, &text) {
        let _ = std::fs::remove_file(&tmp);
        // A full disk has no room for a second copy: overwrite the old manifest's bytes in
        // place (no new blocks while the text is no longer than the old one), then cut it to
        // length. Only this fallback can leave half a manifest, if it fails midway.
        return overwrite_in_place(&path, text.as_bytes()).map_err(|_| StoreError::Io {
            path: tmp,
            error: e,
        });
    }
    std::fs::rename(&tmp, &path).map_err(io(&path))
}

/// Write `bytes` to `path` whole or not at all: a temp file beside it (`.<name>.tmp`), renamed
/// over it. On failure (a full disk) the old file is unchanged, the temp file is removed, and the
/// error names `path` itself.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let name = path
        .file_name()
        .map_or_else(|| "file".into(), |n| n.to_string_lossy().to_string());
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    let written = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path));
    written.map_err(|error| {
        let _ = std::fs::remove_file(&tmp);
        StoreError::Io {
            path: path.to_path_buf(),
            error,
        }
    })
}

/// `cannot write <path> (<the OS's words>)`: a write error as one clause, the OS error once.
pub fn cannot_write(e: &StoreError) -> String {
    match e {
        StoreError::Io { path, error } => format!("cannot write {} ({error})", path.display()),
        other => other.to_string(),
    }
}

fn overwrite_in_place(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = OpenOptions::new().write(true).open(path)?;
    f.write_all(bytes)?;
    f.set_len(bytes.len() as u64)?;
    f.sync_data()
}

/// A run whose manifest says `running` but whose folder nobody holds locked ([`lock_run`]) was
/// killed: it is marked `incomplete` (on disk too, best effort), so that it stops saying
/// `running` and `--resume` finishes it.
pub fn settle_if_ownerless(dir: &Path, m: &mut Manifest) {
    if m.status != RunStatus::Running {
        return;
    }
    let Ok(_lock) = lock_run(dir) else { return };
    m.status = RunStatus::Incomplete;
    if let Ok(st) = read_rows(dir) {
        m.points_done = st.done.len();
    }
    let _ = write_manifest(dir, m);
}

pub fn read_manifest(dir: &Path) -> Result<Manifest, StoreError> {
    let path = dir.join(MANIFEST_FILE);
    let text = std::fs::read_to_string(&path).map_err(io(&path))?;
    serde_json::from_str(&text).map_err(|e| StoreError::Corrupt {
        path,
        line: e.line(),
        message: e.to_string(),
    })
}

/// What `rows.jsonl` holds: the rows of finished points, and which points finished.
#[derive(Debug, Default)]
pub struct Stored {
    pub rows: Vec<Row>,
    pub done: BTreeSet<String>,
    /// Points whose last record says they failed, with how (resume runs them again).
    pub failed: std::collections::BTreeMap<String, FailureKind>,
    /// What a failed point's record says went wrong (its error), where it says so.
    pub failed_why: std::collections::BTreeMap<String, String>,
    /// Points that finished with a wrong result, with the message (also in `done`).
    pub wrong: std::collections::BTreeMap<String, String>,
    /// Rows of points that never finished (dropped: resume measures them again).
    pub dropped_rows: usize,
    /// A torn last line (the process died mid-write) is ignored and counted here.
    pub torn_lines: usize,
}

/// Read `rows.jsonl`, keeping only rows of points that finished successfully.
pub fn read_rows(dir: &Path) -> Result<Stored, StoreError> {
    let path = dir.join(ROWS_FILE);
    let f = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Stored::default()),
        Err(e) => return Err(StoreError::Io { path, error: e }),
    };
    let mut all = Vec::new();
    let mut st = Stored::default();
    let lines: Vec<String> = BufReader::new(f)
        .lines()
        .collect::<Result<_, _>>()
        .map_err(io(&path))?;
    let n = lines.len();
    for (i, line) in lines.into_iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Record>(&line) {
            Ok(Record::Row(mut r)) => {
                // serde_json (built without `float_roundtrip`) may round a 17-digit number to
                // its neighbour: the value is read again from its text, exactly
                if let Some(v) = exact_number(&line, "value") {
                    r.value = v;
                }
                all.push(r)
            }
            Ok(Record::PointDone {
                point_id,
                ok,
                wrong,
                error,
                failure,
            }) => {
                if ok || wrong {
                    st.failed.remove(&point_id);
                    st.failed_why.remove(&point_id);
                    if wrong {
                        st.wrong.insert(point_id.clone(), error.unwrap_or_default());
                    }
                    st.done.insert(point_id);
                } else {
                    // records written before the kind was kept: a failure of any other kind
                    match error.filter(|e| !e.trim().is_empty()) {
                        Some(e) => st.failed_why.insert(point_id.clone(), e),
                        None => st.failed_why.remove(&point_id),
                    };
                    st.failed
                        .insert(point_id, failure.unwrap_or(FailureKind::Failed));
                }
            }
            Err(_) if i + 1 == n => st.torn_lines += 1,
            Err(e) => {
                return Err(StoreError::Corrupt {
                    path,
                    line: i + 1,
                    message: e.to_string(),
                });
            }
        }
    }
    for r in all {
        // multi-class runs key their point records by class and point id; older runs by the id
        if st
            .done
            .contains(&crate::plan::run_key(r.fidelity, &r.point_id))
            || st.done.contains(&r.point_id)
        {
            st.rows.push(r);
        } else {
            st.dropped_rows += 1;
        }
    }
    Ok(st)
}

/// The number under `key` in the top level of the JSON object `line`, parsed by Rust's correctly
/// rounded `f64::from_str`, so that every stored value reads back bit for bit (serde_json's
/// default parser rounds about one 17-digit number in seven to a neighbouring double). None when
/// the key is absent or not a plain number.
pub fn exact_number(line: &str, key: &str) -> Option<f64> {
    let b = line.as_bytes();
    let (mut i, mut depth) = (0usize, 0usize);
    while i < b.len() {
        match b[i] {
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.saturating_sub(1),
            b'"' => {
                let start = i + 1;
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                let text = line.get(start..i.min(b.len()))?;
                let mut j = i + 1;
                while j < b.len() && b[j].is_ascii_whitespace() {
                    j += 1;
                }
                if depth == 1 && text == key && b.get(j) == Some(&b':') {
                    let rest = line[j + 1..].trim_start();
                    let end = rest
                        .find(|c: char| !matches!(c, '0'..='9' | '-' | '+' | '.' | 'e' | 'E'))
                        .unwrap_or(rest.len());
                    return rest[..end].parse().ok();
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// Rewrite `rows.jsonl` with only finished points (before a resume appends to it).
pub fn rewrite_rows(dir: &Path, st: &Stored) -> Result<(), StoreError> {
    let path = dir.join(ROWS_FILE);
    let tmp = dir.join(".rows.jsonl.tmp");
    {
        let f = File::create(&tmp).map_err(io(&tmp))?;
        let mut w = BufWriter::new(f);
        for r in &st.rows {
            serde_json::to_writer(&mut w, &Record::Row(r.clone())).map_err(|e| StoreError::Io {
                path: tmp.clone(),
                error: e.into(),
            })?;
            w.write_all(b"\n").map_err(io(&tmp))?;
        }
        for id in &st.done {
            let wrong = st.wrong.get(id);
            let rec = Record::PointDone {
                point_id: id.clone(),
                ok: wrong.is_none(),
                error: wrong.cloned(),
                wrong: wrong.is_some(),
                failure: wrong.map(|_| FailureKind::WrongResult),
            };
            serde_json::to_writer(&mut w, &rec).map_err(|e| StoreError::Io {
                path: tmp.clone(),
                error: e.into(),
            })?;
            w.write_all(b"\n").map_err(io(&tmp))?;
        }
        w.flush().map_err(io(&tmp))?;
    }
    std::fs::rename(&tmp, &path).map_err(io(&path))
}

/// A new run id: `<UTC time>-<experiment>`, unique in `results`.
pub fn new_run_id(results: &Path, experiment: &str) -> String {
    let base = format!(
        "{}-{experiment}",
        chrono::Utc::now().format("%Y%m%dT%H%M%SZ")
    );
    let mut id = base.clone();
    let mut k = 2;
    while results.join(&id).exists() {
        id = format!("{base}-{k}");
        k += 1;
    }
    id
}

/// All runs in `results`, newest first (by start time).
pub fn list_runs(results: &Path) -> Result<Vec<Manifest>, StoreError> {
    let mut out = Vec::new();
    let rd = match std::fs::read_dir(results) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => {
            return Err(StoreError::Io {
                path: results.to_path_buf(),
                error: e,
            });
        }
    };
    for entry in rd.flatten() {
        let dir = entry.path();
        if dir.join(MANIFEST_FILE).exists()
            && let Ok(mut m) = read_manifest(&dir)
        {
            settle_if_ownerless(&dir, &mut m);
            out.push(m);
        }
    }
    out.sort_by(|a, b| b.started.cmp(&a.started).then(b.run_id.cmp(&a.run_id)));
    Ok(out)
}

/// Whether a run failed before any of its points ran (an older version kept such a folder when
/// the testbed's switch could not be programmed): it holds nothing to report or resume.
pub fn is_empty_failure(m: &Manifest) -> bool {
    m.status == RunStatus::Failed && m.points_done == 0 && m.points_failed == 0
}

/// Resolve `latest` or a run id (or a unique prefix of one) to its folder. `latest` is the
/// newest run of any experiment, passing over runs that failed before any point ran.
pub fn resolve_run(results: &Path, which: &str) -> Result<PathBuf, StoreError> {
    let runs = list_runs(results)?;
    if which == "latest" {
        return runs
            .iter()
            .find(|m| !is_empty_failure(m))
            .or(runs.first())
            .map(|m| results.join(&m.run_id))
            .ok_or(StoreError::NoRuns);
    }
    if results.join(which).join(MANIFEST_FILE).exists() {
        return Ok(results.join(which));
    }
    let matches: Vec<_> = runs
        .iter()
        .filter(|m| m.run_id.starts_with(which))
        .collect();
    match matches.as_slice() {
        [m] => Ok(results.join(&m.run_id)),
        _ => Err(StoreError::NoRun(which.to_string())),
    }
}

/// `--resume latest` for `experiment`: its newest run, passing over runs that failed before any
/// point ran (a newer run of another experiment does not hide it).
pub fn resolve_latest_of(results: &Path, experiment: &str) -> Result<PathBuf, StoreError> {
    list_runs(results)?
        .iter()
        .find(|m| m.experiment == experiment && !is_empty_failure(m))
        .map(|m| results.join(&m.run_id))
        .ok_or_else(|| StoreError::NoRunOf(experiment.to_string()))
}

pub fn now_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::Scalar;

    fn row(point: &str, rep: u32, v: f64) -> Row {
        let mut params = Params::new();
        params.insert("P".into(), Scalar::Int(32));
        Row {
            point_id: point.into(),
            system: "flat_ring".into(),
            fidelity: Fidelity::Modelled,
            fabric: "model".into(),
            params,
            repetition: rep,
            metric: "comm_time".into(),
            value: v,
            unit: "ms".into(),
            timestamp: 1.0,
        }
    }

    /// Every stored value reads back bit for bit (issue #40, item 7): the audit's examples, and
    /// 20000 seeded doubles spread over magnitudes, written by `append_row` and read by
    /// `read_rows` (what resume and the report see), and again after `rewrite_rows`.
    #[test]
    fn values_read_back_bit_for_bit() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut g = crate::rng::SplitMix64::new(40);
        let mut values = vec![
            24.522000000000002,
            15.792777777777776,
            0.1 + 0.2,
            -0.0,
            5e-324,
        ];
        while values.len() < 20_000 {
            let mantissa = (g.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
            let exp = (g.next_u64() % 40) as i32 - 20;
            values.push(mantissa * 10f64.powi(exp));
        }
        {
            let mut w = RunWriter::open(dir.path()).expect("open");
            for (i, v) in values.iter().enumerate() {
                w.append_row(&row("p1", i as u32, *v)).expect("row");
            }
            w.append(&Record::PointDone {
                point_id: "p1".into(),
                ok: true,
                error: None,
                wrong: false,
                failure: None,
            })
            .expect("done");
            w.flush().expect("flush");
        }
        let check = |st: &Stored| {
            assert_eq!(st.rows.len(), values.len());
            let differ = st
                .rows
                .iter()
                .zip(&values)
                .filter(|(r, v)| r.value.to_bits() != v.to_bits())
                .count();
            assert_eq!(differ, 0, "{differ} of {} values changed", values.len());
        };
        let st = read_rows(dir.path()).expect("read");
        check(&st);
        rewrite_rows(dir.path(), &st).expect("rewrite");
        check(&read_rows(dir.path()).expect("read again"));
    }

    fn manifest(id: &str, started: &str) -> Manifest {
        Manifest {
            run_id: id.into(),
            experiment: "x".into(),
            title: String::new(),
            spec_file: String::new(),
            spec_sha256: String::new(),
            profile: "quick".into(),
            fidelity: Fidelity::Modelled,
            fidelities: vec![],
            fabric: "model".into(),
            seed: 1,
            git_revision: String::new(),
            inabench_version: String::new(),
            command: vec![],
            host: HostFacts::default(),
            testbed: String::new(),
            testbed_sha256: String::new(),
            drivers: vec![],
            fidelity_reason: String::new(),
            started: started.into(),
            finished: None,
            elapsed_s: 0.0,
            status: RunStatus::Complete,
            points_total: 0,
            points_done: 0,
            points_failed: 0,
            points_wrong: 0,
            points_invalid: 0,
            resumed_from: vec![],
            systems_not_built: vec![],
            rows_not_here: vec![],
            launcher: None,
            overrides: vec![],
            host_profile: None,
        }
    }

    #[test]
    fn rows_round_trip_and_unfinished_points_are_dropped() {
        let d = tempfile::tempdir().expect("tmp");
        let mut w = RunWriter::open(d.path()).expect("open");
        w.append(&Record::Row(row("a", 0, 1.5))).expect("row");
        w.append(&Record::Row(row("a", 1, 2.5))).expect("row");
        w.append(&Record::PointDone {
            point_id: "a".into(),
            ok: true,
            error: None,
            wrong: false,
            failure: None,
        })
        .expect("done");
        w.append(&Record::Row(row("b", 0, 9.0))).expect("row");
        w.flush().expect("flush");
        drop(w);
        // a torn last line, as a killed process leaves it
        let mut f = OpenOptions::new()
            .append(true)
            .open(d.path().join(ROWS_FILE))
            .expect("append");
        f.write_all(b"{\"kind\":\"row\",\"run_id\":").expect("torn");
        drop(f);
        let st = read_rows(d.path()).expect("read");
        assert_eq!(st.rows, vec![row("a", 0, 1.5), row("a", 1, 2.5)]);
        assert_eq!(st.dropped_rows, 1);
        assert_eq!(st.torn_lines, 1);
        assert!(st.done.contains("a") && !st.done.contains("b"));
        rewrite_rows(d.path(), &st).expect("rewrite");
        let again = read_rows(d.path()).expect("read again");
        assert_eq!(again.rows.len(), 2);
        assert_eq!(again.torn_lines, 0);
        assert_eq!(again.dropped_rows, 0);
    }

    /// A row's line holds no run constants (the manifest has them): `append_row` writes what
    /// `append(&Record::Row(..))` writes, and a line of an older folder that repeats the run's
    /// id and experiment still reads, to the same row.
    #[test]
    fn rows_carry_no_run_constants_and_old_lines_still_read() {
        let d = tempfile::tempdir().expect("tmp");
        let mut w = RunWriter::open(d.path()).expect("open");
        w.append_row(&row("a", 0, 3.5)).expect("row");
        w.append(&Record::Row(row("a", 0, 3.5))).expect("row");
        w.flush().expect("flush");
        let text = std::fs::read_to_string(d.path().join(ROWS_FILE)).expect("rows");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0], lines[1]);
        assert!(
            lines[0].starts_with(r#"{"kind":"row","point_id":"a","#),
            "{}",
            lines[0]
        );
        assert!(
            !lines[0].contains("run_id") && !lines[0].contains("experiment"),
            "{}",
            lines[0]
        );
        let old = tempfile::tempdir().expect("tmp");
        std::fs::write(
            old.path().join(ROWS_FILE),
            concat!(
                r#"{"kind":"row","run_id":"run-7","experiment":"netreduce-fig7","point_id":"a","system":"flat_ring","fidelity":"modelled","fabric":"model","params":{"P":32},"repetition":1,"metric":"comm_time","value":3.5,"unit":"ms","timestamp":1.0}"#,
                "\n",
                r#"{"kind":"point_done","point_id":"a","ok":true,"error":null}"#,
                "\n",
            ),
        )
        .expect("write");
        let st = read_rows(old.path()).expect("an old folder loads");
        assert_eq!(st.rows, vec![row("a", 1, 3.5)]);
    }

    /// A point_done record keeps how the point failed; one written before the field (an old
    /// results folder) still loads, its failed point as `Failed`, its wrong one as wrong.
    #[test]
    fn point_records_keep_the_failure_kind_and_old_records_load() {
        let d = tempfile::tempdir().expect("tmp");
        let mut w = RunWriter::open(d.path()).expect("open");
        for (id, kind) in [
            ("bad", FailureKind::BadParameters),
            ("other", FailureKind::Failed),
        ] {
            w.append(&Record::PointDone {
                point_id: id.into(),
                ok: false,
                error: Some(format!("{id} failed")),
                wrong: false,
                failure: Some(kind),
            })
            .expect("failed");
        }
        w.append(&Record::PointDone {
            point_id: "wrong".into(),
            ok: false,
            error: Some("sum 3, expected 4".into()),
            wrong: true,
            failure: Some(FailureKind::WrongResult),
        })
        .expect("wrong");
        w.flush().expect("flush");
        drop(w);
        let text = std::fs::read_to_string(d.path().join(ROWS_FILE)).expect("rows");
        assert!(text.contains(r#""failure":"bad_parameters""#), "{text}");
        assert!(text.contains(r#""failure":"wrong_result""#), "{text}");
        let st = read_rows(d.path()).expect("read");
        assert_eq!(st.failed.get("bad"), Some(&FailureKind::BadParameters));
        assert_eq!(st.failed.get("other"), Some(&FailureKind::Failed));
        assert!(st.done.contains("wrong") && !st.failed.contains_key("wrong"));
        // a resume keeps the wrong point's kind and drops the failed ones (it runs them again)
        rewrite_rows(d.path(), &st).expect("rewrite");
        let text = std::fs::read_to_string(d.path().join(ROWS_FILE)).expect("rows");
        assert_eq!(
            text.trim(),
            r#"{"kind":"point_done","point_id":"wrong","ok":false,"error":"sum 3, expected 4","wrong":true,"failure":"wrong_result"}"#
        );

        // written before the kind was kept
        let old = tempfile::tempdir().expect("tmp");
        std::fs::write(
            old.path().join(ROWS_FILE),
            concat!(
                r#"{"kind":"point_done","point_id":"f","ok":false,"error":"agent lost"}"#,
                "\n",
                r#"{"kind":"point_done","point_id":"w","ok":false,"error":"sum 3","wrong":true}"#,
                "\n",
                r#"{"kind":"point_done","point_id":"a","ok":true,"error":null}"#,
                "\n",
            ),
        )
        .expect("write");
        let st = read_rows(old.path()).expect("an old folder loads");
        assert_eq!(st.failed.get("f"), Some(&FailureKind::Failed));
        assert_eq!(st.failed.len(), 1);
        assert_eq!(st.wrong.get("w").map(String::as_str), Some("sum 3"));
        assert!(st.done.contains("a") && st.done.contains("w"));
    }

    #[test]
    fn corrupt_middle_line_is_an_error_with_line() {
        let d = tempfile::tempdir().expect("tmp");
        std::fs::write(
            d.path().join(ROWS_FILE),
            "garbage\n{\"kind\":\"point_done\",\"point_id\":\"a\",\"ok\":true,\"error\":null}\n",
        )
        .expect("write");
        let e = read_rows(d.path()).expect_err("corrupt");
        assert!(e.to_string().contains(":1: not a valid record"), "{e}");
    }

    #[test]
    fn resolve_latest_and_prefix() {
        let d = tempfile::tempdir().expect("tmp");
        assert!(matches!(
            resolve_run(d.path(), "latest"),
            Err(StoreError::NoRuns)
        ));
        for (id, started) in [("20260101-a", "2026-01-01"), ("20260102-b", "2026-01-02")] {
            let dir = d.path().join(id);
            std::fs::create_dir_all(&dir).expect("mkdir");
            let m = manifest(id, started);
            write_manifest(&dir, &m).expect("manifest");
        }
        assert!(
            resolve_run(d.path(), "latest")
                .expect("latest")
                .ends_with("20260102-b")
        );
        assert!(
            resolve_run(d.path(), "20260101")
                .expect("prefix")
                .ends_with("20260101-a")
        );
        assert!(resolve_run(d.path(), "2026").is_err(), "ambiguous prefix");
    }

    /// A run that failed before any point ran (kept by older versions when the testbed's switch
    /// could not be programmed) is not `latest`; one with a failed point is.
    #[test]
    fn latest_passes_over_a_run_that_failed_before_any_point() {
        let d = tempfile::tempdir().expect("tmp");
        let write = |id: &str, started: &str, status: RunStatus, failed: usize| {
            let dir = d.path().join(id);
            std::fs::create_dir_all(&dir).expect("mkdir");
            let mut m = manifest(id, started);
            m.status = status;
            m.points_failed = failed;
            write_manifest(&dir, &m).expect("manifest");
        };
        write("20260101-a", "2026-01-01", RunStatus::Incomplete, 0);
        write("20260102-b", "2026-01-02", RunStatus::Failed, 0);
        let latest = || resolve_run(d.path(), "latest").expect("latest");
        assert!(latest().ends_with("20260101-a"), "{}", latest().display());
        // by its id it is still found
        assert!(
            resolve_run(d.path(), "20260102-b")
                .expect("id")
                .ends_with("20260102-b")
        );
        write("20260103-c", "2026-01-03", RunStatus::Failed, 2);
        assert!(latest().ends_with("20260103-c"), "{}", latest().display());
    }

    /// `--resume latest` of an experiment is that experiment's newest run, whatever ran since.
    #[test]
    fn the_latest_run_of_an_experiment() {
        let d = tempfile::tempdir().expect("tmp");
        let write = |id: &str, started: &str, experiment: &str, status: RunStatus| {
            let dir = d.path().join(id);
            std::fs::create_dir_all(&dir).expect("mkdir");
            let mut m = manifest(id, started);
            m.experiment = experiment.into();
            m.status = status;
            write_manifest(&dir, &m).expect("manifest");
        };
        write("1-a", "2026-01-01", "x", RunStatus::Incomplete);
        write("2-b", "2026-01-02", "y", RunStatus::Incomplete);
        write("3-c", "2026-01-03", "x", RunStatus::Failed);
        let of = |e: &str| resolve_latest_of(d.path(), e);
        assert!(
            of("x").expect("x").ends_with("1-a"),
            "the empty failure passed over"
        );
        assert!(of("y").expect("y").ends_with("2-b"));
        assert!(matches!(of("z"), Err(StoreError::NoRunOf(e)) if e == "z"));
        assert!(
            resolve_run(d.path(), "latest")
                .expect("latest")
                .ends_with("2-b")
        );
    }

    /// `write_atomic` replaces a file whole; when it cannot (here the name is a folder, as a
    /// full disk fails the temp file's write) nothing is left beside it and the error names the
    /// file, with the OS error once in `cannot_write`'s clause.
    #[test]
    fn an_atomic_write_that_fails_leaves_no_temp_file() {
        let dir = tempfile::tempdir().expect("tmp");
        let file = dir.path().join("ledger");
        write_atomic(&file, b"old").expect("write");
        write_atomic(&file, b"new").expect("rewrite");
        assert_eq!(std::fs::read(&file).expect("read"), b"new");
        let folder = dir.path().join("page.html");
        std::fs::create_dir_all(folder.join("inside")).expect("mkdir");
        let e = write_atomic(&folder, b"x").expect_err("a folder is in the way");
        assert_eq!(io_path(&e), folder.as_path());
        let said = cannot_write(&e);
        assert!(
            said.starts_with(&format!("cannot write {} (", folder.display())),
            "{said}"
        );
        assert_eq!(said.matches("os error").count(), 1, "{said}");
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .expect("ls")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().to_string())
            .collect();
        left.sort();
        assert_eq!(left, ["ledger", "page.html"]);
    }
}
