//! p4sgd-fig8's emulated CPUSync peer: OpenMPI's own `MPI_Allreduce` of a few 32-bit values per
//! rank, measured on this host (`peer/mpi_allreduce_small.c`, compiled with `mpicc` into a
//! temporary folder at run time and started with `mpirun`, one process per rank).
//!
//! CPUSync in the paper is OpenMPI's all-reduce on CPU servers; the suite's own `cpusync` runs
//! recursive doubling in this crate's Rust code, so this peer is the measurement of the real
//! library's software path (the MPI call, the collective component's algorithm choice, the byte
//! transfer layer) between processes of this host: over TCP on loopback (`--mca btl tcp,self
//! --mca btl_tcp_if_include lo --mca pml ob1`, every message through the kernel's TCP stack) or
//! over shared memory (`--mca btl vader,self --mca pml ob1`). Ranks beyond the host's cores are
//! oversubscribed (`--oversubscribe`: OpenMPI then yields the core while it polls), so the
//! latencies are this host's, not a 100G cluster's: emulated.
//!
//! Not a state machine: a launcher of external processes, like [`crate::udp`]'s threads.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The peer's C source.
pub const SOURCE: &str = include_str!("../peer/mpi_allreduce_small.c");

/// How OpenMPI's ranks reach each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// TCP over the loopback interface (the kernel's TCP path per message).
    TcpLoopback,
    /// OpenMPI's shared-memory byte transfer layer (`vader`).
    SharedMemory,
}

impl Transport {
    /// The `--mca` arguments that select it.
    pub fn mca(self) -> &'static [&'static str] {
        match self {
            Transport::TcpLoopback => &[
                "--mca",
                "btl",
                "tcp,self",
                "--mca",
                "btl_tcp_if_include",
                "lo",
                "--mca",
                "pml",
                "ob1",
            ],
            Transport::SharedMemory => &["--mca", "btl", "vader,self", "--mca", "pml", "ob1"],
        }
    }
}

/// What one run asks for.
#[derive(Debug, Clone)]
pub struct MpiRun {
    pub ranks: usize,
    pub elements: usize,
    /// Timed all-reduces per rank.
    pub ops: u64,
    /// All-reduces before the timed ones (connection set-up), checked but not timed.
    pub warmup: u64,
    pub transport: Transport,
    /// Wall-clock limit for the whole `mpirun`; it is killed past it.
    pub limit: Duration,
    /// Rank 1 adds 1 to its contribution without the others knowing (tests the sum check).
    pub corrupt: bool,
}

/// What the ranks measured: every rank's latency of every timed all-reduce (ns, rank-major)
/// and the number of results (an all-reduce on one rank, warm-up included) that differed from
/// the exact sum.
#[derive(Debug, Clone)]
pub struct MpiOutcome {
    pub latencies: Vec<u64>,
    pub wrong: u64,
    /// The MPI version line `mpirun --version` printed.
    pub version: String,
}

#[derive(Debug, thiserror::Error)]
pub enum MpiError {
    /// `mpicc` or `mpirun` is not on this host: the peer is not built (not a measurement).
    #[error("not built: {0}")]
    NotBuilt(String),
    #[error("mpicc failed to compile the peer: {0}")]
    Compile(String),
    #[error("mpirun failed: {0}")]
    Run(String),
    #[error("mpirun ran past its limit of {0:?} and was killed")]
    TimedOut(Duration),
    #[error("the peer's output is malformed: {0}")]
    Output(String),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

/// `mpicc` and `mpirun` on PATH, or why not (one sentence).
pub fn available() -> Result<String, MpiError> {
    let version = |tool: &str| -> Result<String, MpiError> {
        match Command::new(tool).arg("--version").output() {
            Ok(o) if o.status.success() => Ok(String::from_utf8_lossy(&o.stdout)
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("")
                .trim()
                .to_string()),
            Ok(o) => Err(MpiError::NotBuilt(format!(
                "`{tool} --version` exited with {}",
                o.status
            ))),
            Err(e) if e.kind() == ErrorKind::NotFound => Err(MpiError::NotBuilt(format!(
                "`{tool}` is not on PATH (OpenMPI's compiler wrapper and launcher; .ci/setup installs openmpi-bin and libopenmpi-dev)"
            ))),
            Err(e) => Err(MpiError::NotBuilt(format!(
                "`{tool}` cannot be started: {e}"
            ))),
        }
    };
    version("mpicc")?;
    version("mpirun")
}

/// A temporary folder removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<TempDir, MpiError> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let p =
            std::env::temp_dir().join(format!("inabench-p4sgd-mpi-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&p)?;
        Ok(TempDir(p))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn compile(dir: &Path) -> Result<PathBuf, MpiError> {
    let src = dir.join("mpi_allreduce_small.c");
    std::fs::write(&src, SOURCE)?;
    let exe = dir.join("mpi_allreduce_small");
    let o = Command::new("mpicc")
        .args(["-O2", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .map_err(|e| MpiError::NotBuilt(format!("`mpicc` cannot be started: {e}")))?;
    if !o.status.success() {
        return Err(MpiError::Compile(
            String::from_utf8_lossy(&o.stderr).trim().to_string(),
        ));
    }
    Ok(exe)
}

/// Parses the peer's output file: `ranks R elements E ops N wrong W`, then R x N latencies (ns).
pub fn parse(text: &str, run: &MpiRun) -> Result<(Vec<u64>, u64), MpiError> {
    let mut lines = text.lines();
    let head: Vec<&str> = lines
        .next()
        .ok_or_else(|| MpiError::Output("empty file".into()))?
        .split_whitespace()
        .collect();
    let field = |name: &str| -> Result<u64, MpiError> {
        let i = head
            .iter()
            .position(|w| *w == name)
            .ok_or_else(|| MpiError::Output(format!("no `{name}` in the first line")))?;
        head.get(i + 1)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| MpiError::Output(format!("`{name}` has no number")))
    };
    let (ranks, elements, ops, wrong) = (
        field("ranks")?,
        field("elements")?,
        field("ops")?,
        field("wrong")?,
    );
    if ranks != run.ranks as u64 || elements != run.elements as u64 || ops != run.ops {
        return Err(MpiError::Output(format!(
            "ran {ranks} ranks x {elements} elements x {ops} ops, asked {} x {} x {}",
            run.ranks, run.elements, run.ops
        )));
    }
    let latencies = lines
        .map(|l| {
            l.trim()
                .parse::<u64>()
                .map_err(|_| MpiError::Output(format!("`{l}` is not a latency in ns")))
        })
        .collect::<Result<Vec<u64>, MpiError>>()?;
    if latencies.len() as u64 != ranks * ops {
        return Err(MpiError::Output(format!(
            "{} latencies, expected {}",
            latencies.len(),
            ranks * ops
        )));
    }
    Ok((latencies, wrong))
}

/// Compiles the peer, runs it under `mpirun` with `run.ranks` processes and returns what they
/// measured. [`MpiError::NotBuilt`] when OpenMPI is not on this host.
pub fn run(run: &MpiRun) -> Result<MpiOutcome, MpiError> {
    if run.ranks < 2 || run.elements < 1 || run.ops < 1 {
        return Err(MpiError::Run(
            "ranks must be >= 2, elements and ops >= 1".into(),
        ));
    }
    let version = available()?;
    let dir = TempDir::new()?;
    let exe = compile(&dir.0)?;
    let out = dir.0.join("latencies.txt");
    let log = dir.0.join("mpirun.log");
    let mut cmd = Command::new("mpirun");
    // Open MPI 4 puts every job's session directory under one per-user directory in the temp
    // folder and removes it when a job ends: two mpiruns at once (a test beside a benchmark run)
    // could then fail with "orte_session_dir failed". Each run gets its own base, in its own
    // temporary folder (removed with it).
    cmd.env("OMPI_MCA_orte_tmpdir_base", &dir.0)
        .args(["--allow-run-as-root", "--oversubscribe", "-np"])
        .arg(run.ranks.to_string())
        .args(run.transport.mca())
        .arg(&exe)
        .arg(run.elements.to_string())
        .arg(run.ops.to_string())
        .arg(run.warmup.to_string())
        .arg(&out);
    if run.corrupt {
        cmd.arg("corrupt");
    }
    let logf = std::fs::File::create(&log)?;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(logf.try_clone()?)
        .stderr(logf)
        .spawn()
        .map_err(|e| MpiError::NotBuilt(format!("`mpirun` cannot be started: {e}")))?;
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if start.elapsed() > run.limit {
            let _ = child.kill();
            let _ = child.wait();
            return Err(MpiError::TimedOut(run.limit));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    if !status.success() {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(6).collect();
        return Err(MpiError::Run(format!(
            "exit {status}: {}",
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        )));
    }
    let text = std::fs::read_to_string(&out)?;
    let (latencies, wrong) = parse(&text, run)?;
    Ok(MpiOutcome {
        latencies,
        wrong,
        version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked() -> MpiRun {
        MpiRun {
            ranks: 2,
            elements: 8,
            ops: 2,
            warmup: 0,
            transport: Transport::SharedMemory,
            limit: Duration::from_secs(1),
            corrupt: false,
        }
    }

    #[test]
    fn parse_reads_what_the_peer_writes() {
        let (l, w) = parse(
            "ranks 2 elements 8 ops 2 wrong 3\n10\n20\n30\n40\n",
            &asked(),
        )
        .unwrap();
        assert_eq!(l, vec![10, 20, 30, 40]);
        assert_eq!(w, 3);
    }

    #[test]
    fn parse_rejects_short_or_mismatched_files() {
        assert!(parse("ranks 2 elements 8 ops 2 wrong 0\n10\n20\n30\n", &asked()).is_err());
        assert!(
            parse(
                "ranks 3 elements 8 ops 2 wrong 0\n1\n2\n3\n4\n5\n6\n",
                &asked()
            )
            .is_err()
        );
        assert!(parse("ranks 2 elements 8 ops 2 wrong 0\n1\n2\nx\n4\n", &asked()).is_err());
        assert!(parse("", &asked()).is_err());
        assert!(parse("ranks 2 elements 8 ops 2\n1\n2\n3\n4\n", &asked()).is_err());
    }
}
