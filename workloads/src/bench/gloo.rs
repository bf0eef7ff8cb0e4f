//! The benchmark family's Gloo reference: Gloo's own ring all-reduce (`gloo::AllreduceRing`,
//! int32 sum; Debian's libgloo-dev, which `.ci/setup` installs) across `ranks` processes of
//! this host, connected by Gloo's TCP transport on loopback after a rendezvous through Gloo's
//! file store. The driver, `tools/gloo/gloo_allreduce.cc`, is compiled with `g++` into a
//! temporary folder at run time (as OpenMPI's peer is with `mpicc`, `inabench_p4sgd::mpi`), one
//! process per rank started here; every rank checks every result against the exact sum. Not a
//! state machine: a launcher of external processes.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The driver's C++ source.
pub const SOURCE: &str = include_str!("../../../tools/gloo/gloo_allreduce.cc");

/// What one run asks for.
#[derive(Debug, Clone)]
pub struct GlooRun {
    pub ranks: usize,
    pub elements: usize,
    /// Timed all-reduces per rank.
    pub ops: u64,
    /// All-reduces before the timed ones (connection set-up), checked but not timed.
    pub warmup: u64,
    /// Wall-clock limit for the ranks together; they are killed past it.
    pub limit: Duration,
    /// Rank 1 adds 1 to its contribution without the others knowing (tests the sum check).
    pub corrupt: bool,
}

/// What the ranks measured: every rank's latency of every timed all-reduce (ns, rank-major), the
/// results (an all-reduce on one rank, warm-up included) that differed from the exact sum, and the
/// library's package version.
#[derive(Debug, Clone)]
pub struct GlooOutcome {
    pub latencies: Vec<u64>,
    pub wrong: u64,
    pub version: String,
}

/// Why a run gave no outcome.
#[derive(Debug)]
pub enum GlooError {
    /// `g++` or Gloo's headers and library are not on this host: not a measurement.
    NotBuilt(String),
    /// The driver failed, ran past its limit, or wrote something unreadable.
    Failed(String),
}

impl std::fmt::Display for GlooError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GlooError::NotBuilt(why) => write!(f, "not built: {why}"),
            GlooError::Failed(why) => write!(f, "gloo run failed: {why}"),
        }
    }
}

impl std::error::Error for GlooError {}

fn io(what: &str) -> impl Fn(std::io::Error) -> GlooError + '_ {
    move |e| GlooError::Failed(format!("{what}: {e}"))
}

/// Gloo's headers (Debian's libgloo-dev) and `g++` on this host, and the package's version, or
/// why not (one sentence).
pub fn available() -> Result<String, GlooError> {
    if !Path::new("/usr/include/gloo/allreduce_ring.h").exists() {
        return Err(GlooError::NotBuilt(
            "Gloo's headers are not on this host (/usr/include/gloo; .ci/setup installs Debian's libgloo-dev)"
                .into(),
        ));
    }
    match Command::new("g++").arg("--version").output() {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            return Err(GlooError::NotBuilt(format!(
                "`g++ --version` exited with {}",
                o.status
            )));
        }
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return Err(GlooError::NotBuilt("`g++` is not on PATH".into()));
        }
        Err(e) => return Err(GlooError::NotBuilt(format!("`g++` cannot be started: {e}"))),
    }
    let version = Command::new("dpkg-query")
        .args(["-W", "-f", "${Version}", "libgloo-dev"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "version unknown".into());
    Ok(format!("Gloo (Debian libgloo-dev {version})"))
}

/// A temporary folder removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<TempDir, GlooError> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let p = std::env::temp_dir().join(format!(
            "inabench-bench-gloo-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(p.join("store")).map_err(io("temporary folder"))?;
        Ok(TempDir(p))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn compile(dir: &Path) -> Result<PathBuf, GlooError> {
    let src = dir.join("gloo_allreduce.cc");
    std::fs::write(&src, SOURCE).map_err(io("the driver's source"))?;
    let exe = dir.join("gloo_allreduce");
    let o = Command::new("g++")
        .args(["-O2", "-std=c++17", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(["-lgloo", "-lpthread"])
        .output()
        .map_err(|e| GlooError::NotBuilt(format!("`g++` cannot be started: {e}")))?;
    if !o.status.success() {
        return Err(GlooError::NotBuilt(format!(
            "g++ could not build the Gloo driver against this host's Gloo: {}",
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .take(3)
                .collect::<Vec<_>>()
                .join(" | ")
        )));
    }
    Ok(exe)
}

/// Parses rank `rank`'s file: `rank R ranks S elements E ops N wrong W`, then N latencies (ns).
pub fn parse(text: &str, rank: usize, run: &GlooRun) -> Result<(Vec<u64>, u64), GlooError> {
    let bad = |why: String| GlooError::Failed(format!("rank {rank}'s output: {why}"));
    let mut lines = text.lines();
    let head: Vec<&str> = lines
        .next()
        .ok_or_else(|| bad("empty file".into()))?
        .split_whitespace()
        .collect();
    let field = |name: &str| -> Result<u64, GlooError> {
        let i = head
            .iter()
            .position(|w| *w == name)
            .ok_or_else(|| bad(format!("no `{name}` in the first line")))?;
        head.get(i + 1)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| bad(format!("`{name}` has no number")))
    };
    let got = (
        field("rank")?,
        field("ranks")?,
        field("elements")?,
        field("ops")?,
    );
    let want = (rank as u64, run.ranks as u64, run.elements as u64, run.ops);
    if got != want {
        return Err(bad(format!(
            "ran (rank, ranks, elements, ops) {got:?}, asked {want:?}"
        )));
    }
    let wrong = field("wrong")?;
    let latencies = lines
        .map(|l| {
            l.trim()
                .parse::<u64>()
                .map_err(|_| bad(format!("`{l}` is not a latency in ns")))
        })
        .collect::<Result<Vec<u64>, GlooError>>()?;
    if latencies.len() as u64 != run.ops {
        return Err(bad(format!(
            "{} latencies, expected {}",
            latencies.len(),
            run.ops
        )));
    }
    Ok((latencies, wrong))
}

/// Compiles the driver, starts `run.ranks` processes of it and returns what they measured.
/// [`GlooError::NotBuilt`] when Gloo or `g++` is not on this host.
pub fn run(run: &GlooRun) -> Result<GlooOutcome, GlooError> {
    if run.ranks < 2 || run.elements < 1 || run.ops < 1 {
        return Err(GlooError::Failed(
            "ranks must be >= 2, elements and ops >= 1".into(),
        ));
    }
    let version = available()?;
    let dir = TempDir::new()?;
    let exe = compile(&dir.0)?;
    let out = dir.0.join("latencies");
    let mut children: Vec<Child> = Vec::with_capacity(run.ranks);
    let kill_all = |children: &mut Vec<Child>| {
        for c in children.iter_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    };
    for rank in 0..run.ranks {
        let log = std::fs::File::create(dir.0.join(format!("rank{rank}.log")))
            .map_err(io("a rank's log"))?;
        let err = log.try_clone().map_err(io("a rank's log"))?;
        let mut cmd = Command::new(&exe);
        cmd.arg(rank.to_string())
            .arg(run.ranks.to_string())
            .arg(dir.0.join("store"))
            .arg(run.elements.to_string())
            .arg(run.ops.to_string())
            .arg(run.warmup.to_string())
            .arg(&out);
        if run.corrupt {
            cmd.arg("corrupt");
        }
        match cmd.stdin(Stdio::null()).stdout(log).stderr(err).spawn() {
            Ok(c) => children.push(c),
            Err(e) => {
                kill_all(&mut children);
                return Err(GlooError::Failed(format!(
                    "rank {rank} cannot be started: {e}"
                )));
            }
        }
    }
    let start = Instant::now();
    let mut status = vec![None; run.ranks];
    while status.iter().any(Option::is_none) {
        for (k, c) in children.iter_mut().enumerate() {
            if status[k].is_none() {
                status[k] = c.try_wait().map_err(io("waiting for a rank"))?;
            }
        }
        if status.iter().any(|s| s.is_some_and(|s| !s.success())) {
            break;
        }
        if start.elapsed() > run.limit {
            kill_all(&mut children);
            return Err(GlooError::Failed(format!(
                "the ranks ran past their limit of {:?} and were killed",
                run.limit
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    if let Some(rank) = status.iter().position(|s| s.is_some_and(|s| !s.success())) {
        kill_all(&mut children);
        let text =
            std::fs::read_to_string(dir.0.join(format!("rank{rank}.log"))).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(4).collect();
        return Err(GlooError::Failed(format!(
            "rank {rank} exited with {}: {}",
            status[rank].map_or("?".to_string(), |s| s.to_string()),
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        )));
    }
    let (mut latencies, mut wrong) = (Vec::new(), 0);
    for rank in 0..run.ranks {
        let path = PathBuf::from(format!("{}.{rank}", out.display()));
        let text = std::fs::read_to_string(&path).map_err(io("a rank's output"))?;
        let (l, w) = parse(&text, rank, run)?;
        latencies.extend(l);
        wrong += w;
    }
    Ok(GlooOutcome {
        latencies,
        wrong,
        version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked() -> GlooRun {
        GlooRun {
            ranks: 2,
            elements: 8,
            ops: 2,
            warmup: 0,
            limit: Duration::from_secs(1),
            corrupt: false,
        }
    }

    #[test]
    fn parse_reads_what_the_driver_writes() {
        let (l, w) = parse(
            "rank 1 ranks 2 elements 8 ops 2 wrong 3\n10\n20\n",
            1,
            &asked(),
        )
        .expect("parses");
        assert_eq!(l, vec![10, 20]);
        assert_eq!(w, 3);
    }

    #[test]
    fn parse_rejects_short_or_mismatched_files() {
        let a = asked();
        assert!(parse("rank 0 ranks 2 elements 8 ops 2 wrong 0\n10\n", 0, &a).is_err());
        assert!(parse("rank 1 ranks 2 elements 8 ops 2 wrong 0\n1\n2\n", 0, &a).is_err());
        assert!(parse("rank 0 ranks 3 elements 8 ops 2 wrong 0\n1\n2\n", 0, &a).is_err());
        assert!(parse("rank 0 ranks 2 elements 8 ops 2 wrong 0\n1\nx\n", 0, &a).is_err());
        assert!(parse("rank 0 ranks 2 elements 8 ops 2\n1\n2\n", 0, &a).is_err());
        assert!(parse("", 0, &a).is_err());
    }
}
