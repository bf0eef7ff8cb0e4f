//! Launchers start the processes a run needs and connect them to the runner.
//!
//! Every launcher starts agents as `inabench agent --connect ADDR`; each agent connects back over
//! TCP, proves the per-run token (128 random bits, never on a command line: an environment
//! variable or the agent's stdin), and then runs jobs (one repetition of one point) that the
//! runner sends, streaming the events of the job back. The protocol is JSON lines. Anything that
//! does not start with a hello carrying the right token is closed without an answer. A hello
//! with the token also names the agent's build ([`crate::embedded::BUILD`]: the version and a
//! fingerprint of the sources): an agent of another build (or an older one that names none)
//! would run the jobs differently, so the start fails naming both builds and the host
//! ([`check_build`]) before any job is sent.
//!
//! - `local`: agents on this host, the runner listening on loopback only.
//! - `ssh` ([`ssh`]): one agent per hostfile slot, started over ssh as mpirun does.
//! - `slurm` ([`slurm`]): agents as the tasks of an `srun` step, inside the caller's allocation
//!   or in one `salloc` makes for the run.
//!
//! The multi-host launchers listen on an address the hosts can reach (`--listen`, the testbed's
//! runner host, or the address this host reaches the first host from).

use inabench_core::event::Event;
use inabench_core::plan::Point;
use inabench_core::spec::Fidelity;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub mod qp_exchange;
pub mod rig;
pub mod slurm;
pub mod span;
pub mod ssh;

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("cannot start an agent ({cmd}): {source}")]
    Spawn { cmd: String, source: std::io::Error },
    #[error("the control channel failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("cannot draw the run's token from the OS's random source (/dev/urandom): {0}")]
    Token(std::io::Error),
    #[error("{0} of {1} agents connected within {2:?}; the others did not")]
    Timeout(usize, usize, Duration),
    #[error("agent {index} exited during the job ({status})")]
    AgentDied { index: usize, status: String },
    #[error("agent sent an invalid message: {0}")]
    Protocol(String),
    #[error("the control channel refused a message: {0}")]
    Frame(#[from] FrameError),
    #[error("cannot listen for agents on {addr}: {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
    #[error("{who} published no QPs within {waited:?} of the round's first")]
    Silent { who: String, waited: Duration },
    #[error("{0}")]
    Unreachable(String),
    #[error("{0}")]
    Config(String),
    #[error(
        "the agent on {host} runs {agent}, this runner inabench {runner}: install the same build on every host"
    )]
    WrongBuild {
        /// the agent's host as its hello names it (its index where it names none)
        host: String,
        /// `inabench <build>`, or what an older agent that names no build is
        agent: String,
        runner: String,
    },
}

/// Most bytes of one message on the control channel (a JSON line, newline excluded): far above
/// any job or event batch the runner and agents exchange, and a bound on what a peer can make
/// the other side buffer.
pub const MAX_FRAME: usize = 64 << 20;
/// Most bytes of the hello, the first line of a connection not yet proven to carry the token.
pub const MAX_HELLO: usize = 4096;
/// How long a new connection has to send its whole hello; past it, the runner closes it.
pub const HELLO_DEADLINE: Duration = Duration::from_secs(5);
/// The most connections whose hellos are read at once; more are closed unread.
pub const MAX_PENDING_HELLOS: usize = 64;

/// Why a message on the control channel was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("a message of more than {limit} bytes")]
    TooLong { limit: usize },
    #[error("the connection closed inside a message ({bytes} bytes without its newline)")]
    Truncated { bytes: usize },
    #[error("a message that is not UTF-8")]
    NotUtf8,
}

/// Read one message: the bytes up to the next newline, at most `limit` of them. `Ok(None)` at
/// the end of the stream between messages; a message longer than `limit` is refused as soon as
/// `limit` bytes have come without a newline (so at most `limit` bytes are ever buffered), and
/// one the stream ends inside is refused as truncated, never parsed.
pub fn read_frame<R: BufRead>(r: &mut R, limit: usize) -> Result<Option<String>, LaunchError> {
    let mut buf = Vec::new();
    loop {
        let avail = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        };
        if avail.is_empty() {
            if buf.is_empty() {
                return Ok(None);
            }
            return Err(FrameError::Truncated { bytes: buf.len() }.into());
        }
        let (take, end) = match avail.iter().position(|b| *b == b'\n') {
            Some(i) => (i, true),
            None => (avail.len(), false),
        };
        if buf.len() + take > limit {
            return Err(FrameError::TooLong { limit }.into());
        }
        buf.extend_from_slice(&avail[..take]);
        r.consume(take + usize::from(end));
        if end {
            return String::from_utf8(buf)
                .map(Some)
                .map_err(|_| FrameError::NotUtf8.into());
        }
    }
}

/// Messages on the control channel.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Msg {
    Hello {
        token: String,
        index: usize,
        pid: u32,
        /// the agent's hostname
        #[serde(default)]
        host: String,
        /// the agent's [`crate::embedded::BUILD`]; empty from an agent older than the field
        #[serde(default)]
        build: String,
    },
    Job(Box<Job>),
    Event {
        event: Event,
        /// A row's value as its IEEE-754 bits (JSON text read back by serde_json may round it
        /// to a neighbouring double): the runner stores exactly what the agent measured.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bits: Option<u64>,
    },
    Done {
        ok: bool,
        error: Option<JobFailure>,
    },
    Exit,
    /// An agent's queue pairs (its rank and each QP's connection info), sent to the runner
    /// before a job's hosts connect them ([`qp_exchange`]).
    QpInfo(qp_exchange::QpSet),
    /// The runner's answer once every agent of the job sent its QPs: every rank's.
    QpPeers {
        ranks: Vec<qp_exchange::QpSet>,
    },
    /// One rank of a job that spans several agents ([`span`]): the agent runs `job` as rank
    /// `rank` of `ranks`, exchanging its QPs through the runner before it connects them.
    RankJob {
        job: Box<Job>,
        rank: usize,
        ranks: usize,
        /// The testbed's RoCE NICs (`nics:`), each with its host's name and address: the rank
        /// opens the one of its own host ([`span::RankNic`]).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        nics: Vec<span::RankNic>,
    },
    /// The runner's answer instead of the peers' QPs when the exchange cannot finish (another
    /// rank failed, or sent QPs that do not check): the agent's job fails with the reason.
    QpAbort {
        reason: String,
    },
}

/// Why a job did not succeed, typed across the agent channel (the runner keeps a wrong
/// result's rows and goes on; any other failure stops the run).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum JobFailure {
    #[error("wrong result: {message}")]
    WrongResult { message: String },
    #[error("interrupted")]
    Interrupted,
    #[error("{message}")]
    Failed { message: String },
    /// The point's parameter values are wrong for its workload: it fails again when rerun.
    #[error("{message}")]
    BadParameters { message: String },
    /// The point could not be set up to run: no agent started, no such workload here, or the
    /// host lacks what it needs (a device or driver: `WorkloadError::Setup`).
    #[error("{message}")]
    Setup { message: String },
}

impl From<inabench_core::WorkloadError> for JobFailure {
    fn from(e: inabench_core::WorkloadError) -> JobFailure {
        match e {
            inabench_core::WorkloadError::WrongResult(message) => {
                JobFailure::WrongResult { message }
            }
            inabench_core::WorkloadError::Interrupted => JobFailure::Interrupted,
            inabench_core::WorkloadError::Setup(message) => JobFailure::Setup { message },
            other if other.is_parameter_error() => JobFailure::BadParameters {
                message: other.to_string(),
            },
            other => JobFailure::Failed {
                message: other.to_string(),
            },
        }
    }
}

/// One repetition of one point, as an agent receives it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Job {
    pub workload: String,
    pub point: Point,
    pub index: usize,
    pub fidelity: Fidelity,
    pub repetition: u32,
    pub warmup: bool,
    pub seed: u64,
    pub run_id: String,
    pub experiment: String,
    pub units: BTreeMap<String, String>,
    /// `--pcap DIR` (a path on the agent's host).
    #[serde(default)]
    pub capture_dir: Option<std::path::PathBuf>,
    /// The host profile the run charges host costs from (`--host-profile`; travels to agents).
    #[serde(default)]
    pub host_profile: Option<inabench_core::hostprofile::HostProfile>,
    /// The testbed file's data addresses (`hosts[].data`) where it states them and has no rig:
    /// the point runs its workload at them where the workload takes an address plan
    /// ([`crate::executor::point_workload`]), wherever the job runs. Omitted when None, so a
    /// job line of before the field reads as no plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addresses: Option<inabench_workloads::udp_node::JobAddresses>,
}

/// A process a launcher started: an agent (`local`), an ssh client running one agent (`ssh`), or
/// `srun`/`salloc` running all of them (`slurm`). Shared by the agents it carries; terminated
/// (SIGTERM, then SIGKILL) when the last of them lets go of it.
pub struct Proc {
    child: std::sync::Mutex<Child>,
    /// what it is, for messages: "agent", "ssh to node1", "srun"
    pub label: String,
    /// the last lines of its stderr (when piped)
    tail: std::sync::Arc<std::sync::Mutex<std::collections::VecDeque<String>>>,
    /// How long [`Proc::finish`] waits after its SIGTERM before the SIGKILL (1 s; longer for a
    /// child whose own exit path must run, [`Proc::with_term_grace`]).
    term_grace: Duration,
}

impl Proc {
    pub fn new(child: Child, label: impl Into<String>) -> Proc {
        Proc {
            child: std::sync::Mutex::new(child),
            label: label.into(),
            tail: Default::default(),
            term_grace: Duration::from_secs(1),
        }
    }

    /// Wait up to `grace` after the SIGTERM before the SIGKILL: for a child that must undo what
    /// it set up on its way out (the rxe rig's script removes its guests, taps and bridge in its
    /// trap; killed before that, a bridge holding the runner's address is left behind).
    pub fn with_term_grace(mut self, grace: Duration) -> Proc {
        self.term_grace = grace;
        self
    }

    /// Keep the last lines of the child's piped stderr (a thread drains the pipe so it never
    /// fills); `echo` also copies them to this process's stderr.
    pub fn capture_stderr(self, echo: bool) -> Proc {
        let pipe = self.child.lock().ok().and_then(|mut c| c.stderr.take());
        if let Some(pipe) = pipe {
            let tail = self.tail.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    if echo {
                        eprintln!("{line}");
                    }
                    if let Ok(mut t) = tail.lock() {
                        if t.len() >= 20 {
                            t.pop_front();
                        }
                        t.push_back(line);
                    }
                }
            });
        }
        self
    }

    /// The exit status if it has exited.
    pub fn exited(&self) -> Option<std::process::ExitStatus> {
        self.child
            .lock()
            .ok()
            .and_then(|mut c| c.try_wait().ok().flatten())
    }

    /// The last non-empty stderr line, if any.
    pub fn last_words(&self) -> Option<String> {
        // give the drain thread a moment to read what the process wrote before it exited
        std::thread::sleep(Duration::from_millis(50));
        self.tail
            .lock()
            .ok()
            .and_then(|t| t.iter().rev().find(|l| !l.trim().is_empty()).cloned())
    }

    /// Wait `grace` for it to exit by itself, then SIGTERM, then SIGKILL after a second.
    pub fn finish(&self, grace: Duration) {
        let Ok(mut c) = self.child.lock() else { return };
        let wait_until = |c: &mut Child, t: Duration| {
            let deadline = Instant::now() + t;
            loop {
                match c.try_wait() {
                    Ok(Some(_)) | Err(_) => return true,
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(5))
                    }
                    Ok(None) => return false,
                }
            }
        };
        if wait_until(&mut c, grace) {
            return;
        }
        if let Ok(pid) = libc::pid_t::try_from(c.id()) {
            // SAFETY: kill has no memory preconditions; the pid is our own unreaped child.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            if wait_until(&mut c, self.term_grace) {
                return;
            }
        }
        let _ = c.kill();
        let _ = c.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.finish(Duration::ZERO);
    }
}

/// A started agent and its connection.
pub struct Agent {
    pub index: usize,
    /// the agent's process id on its host
    pub pid: u32,
    /// the host the agent runs on (its hostname, as it reported it)
    pub host: String,
    proc: Option<std::sync::Arc<Proc>>,
    pub(crate) reader: BufReader<TcpStream>,
    pub(crate) writer: BufWriter<TcpStream>,
}

/// The launcher interface: start `n` agents for a run.
pub trait Launcher {
    fn name(&self) -> &'static str;
    fn start(&self, n: usize) -> Result<Vec<Agent>, LaunchError>;
    /// How many agents a run starts (ssh: one per hostfile slot; slurm: one per task).
    fn agents(&self) -> usize {
        1
    }
    /// Whether the agents run on this host (their process ids can be sampled here).
    fn on_this_host(&self) -> bool {
        true
    }
}

/// Agents as processes on this host, connected over loopback.
pub struct LocalLauncher {
    pub exe: std::path::PathBuf,
    pub connect_timeout: Duration,
}

impl LocalLauncher {
    pub fn new() -> Result<LocalLauncher, LaunchError> {
        Ok(LocalLauncher {
            exe: std::env::current_exe()?,
            connect_timeout: Duration::from_secs(10),
        })
    }
}

/// 128 random bits from the kernel's random source (`/dev/urandom`), as hex. Without it the run
/// does not start: ssh and slurm agents connect across hosts, so a token made of the time and
/// the pid would be guessable.
pub fn new_token() -> Result<String, LaunchError> {
    let mut buf = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut buf))
        .map_err(LaunchError::Token)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// This host's name (as agents report it in their hello).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The runner's end of the control channel: a listener and the run's token. Only a connection
/// whose first line is a hello with this token (and a free agent index) becomes an agent;
/// anything else is closed without an answer.
pub struct ControlListener {
    listener: TcpListener,
    token: String,
}

impl ControlListener {
    /// Listen on `addr` (`ip:port`, port 0 for any) with a fresh token.
    pub fn bind(addr: &str) -> Result<ControlListener, LaunchError> {
        let listener = TcpListener::bind(addr).map_err(|source| LaunchError::Listen {
            addr: addr.to_string(),
            source,
        })?;
        Ok(ControlListener {
            listener,
            token: new_token()?,
        })
    }

    pub fn local_addr(&self) -> Result<std::net::SocketAddr, LaunchError> {
        Ok(self.listener.local_addr()?)
    }

    pub fn token(&self) -> &str {
        &self.token
    }

    /// Accept `n` agents (indices 0..n) within `timeout`. `procs[i]` is the process that carries
    /// agent `owner(i)`; `watch` is called while waiting and fails the start early (a process
    /// that exited before its agents connected: an unreachable host, a rejected job).
    pub fn accept(
        &self,
        n: usize,
        timeout: Duration,
        owner: &dyn Fn(usize) -> Option<std::sync::Arc<Proc>>,
        watch: &mut dyn FnMut(&[bool]) -> Result<(), LaunchError>,
    ) -> Result<Vec<Agent>, LaunchError> {
        self.listener.set_nonblocking(true)?;
        let deadline = Instant::now() + timeout;
        let mut agents: Vec<Option<Agent>> = (0..n).map(|_| None).collect();
        let mut connected = 0;
        let mut last_watch = Instant::now();
        // Hellos are read concurrently, one thread per new connection, each with its own
        // deadline: a silent or slowly dripping connection cannot hold up the agents behind
        // it (past HELLO_DEADLINE the runner shuts it down, which ends the thread's read).
        let (tx, rx) = std::sync::mpsc::channel::<(u64, TcpStream, Option<Hello>)>();
        let mut pending: BTreeMap<u64, (Instant, TcpStream)> = BTreeMap::new();
        let mut next_id = 0u64;
        let result = loop {
            if connected == n {
                break Ok(());
            }
            let mut idle = true;
            match self.listener.accept() {
                Ok((stream, _)) => {
                    idle = false;
                    if pending.len() < MAX_PENDING_HELLOS
                        && let Ok(handle) = stream.try_clone()
                    {
                        next_id += 1;
                        let (id, tx, token) = (next_id, tx.clone(), self.token.clone());
                        pending.insert(id, (Instant::now(), handle));
                        std::thread::spawn(move || {
                            let hello = read_hello(&stream, n, &token);
                            let _ = tx.send((id, stream, hello));
                        });
                    } // else: dropping the stream closes it unread
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => break Err(e.into()),
            }
            let mut wrong_build = None;
            while let Ok((id, stream, hello)) = rx.try_recv() {
                idle = false;
                pending.remove(&id);
                // refused (no hello, a wrong token, an index taken): dropping closes it
                let Some((index, pid, host, build, reader)) = hello else {
                    continue;
                };
                // an agent of this run, but of another build: the start fails, no job is sent
                if let Err(e) = check_build(index, &host, &build) {
                    wrong_build = Some(e);
                    break;
                }
                if agents[index].is_some() {
                    continue;
                }
                if stream.set_read_timeout(None).is_err() {
                    continue;
                }
                agents[index] = Some(Agent {
                    index,
                    pid,
                    host,
                    proc: owner(index),
                    reader,
                    writer: BufWriter::new(stream),
                });
                connected += 1;
            }
            if let Some(e) = wrong_build {
                break Err(e);
            }
            pending.retain(|_, (since, handle)| {
                let keep = since.elapsed() < HELLO_DEADLINE;
                if !keep {
                    let _ = handle.shutdown(std::net::Shutdown::Both);
                }
                keep
            });
            if connected == n {
                continue;
            }
            if last_watch.elapsed() >= Duration::from_millis(50) {
                last_watch = Instant::now();
                let have: Vec<bool> = agents.iter().map(Option::is_some).collect();
                if let Err(e) = watch(&have) {
                    break Err(e);
                }
            }
            if Instant::now() > deadline {
                break Err(LaunchError::Timeout(connected, n, timeout));
            }
            if idle {
                std::thread::sleep(Duration::from_millis(2));
            }
        };
        // hellos still being read are cut off; their threads end on the closed stream
        for (_, handle) in pending.values() {
            let _ = handle.shutdown(std::net::Shutdown::Both);
        }
        result?;
        Ok(agents.into_iter().flatten().collect())
    }
}

/// A hello that passed: the agent's index, pid, host, build and its reader.
type Hello = (usize, u32, String, String, BufReader<TcpStream>);

/// Whether the agent `index` on `host` whose hello named `build` may run this runner's jobs:
/// only one of the same build ([`crate::embedded::BUILD`]). An agent of another version of the
/// suite may read a job's fields differently or not at all (one before `Job.addresses` runs
/// every point at synthetic addresses) and run another workload under the same name, without a
/// word; an agent older than the hello's `build` field names none and is refused the same way.
pub fn check_build(index: usize, host: &str, build: &str) -> Result<(), LaunchError> {
    let runner = crate::embedded::BUILD;
    if build == runner {
        return Ok(());
    }
    Err(LaunchError::WrongBuild {
        host: if host.is_empty() {
            format!("an unnamed host (agent {index})")
        } else {
            host.to_string()
        },
        agent: if build.is_empty() {
            "an older inabench (its hello names no build)".to_string()
        } else {
            format!("inabench {build}")
        },
        runner: runner.to_string(),
    })
}

/// Read and check the first line of a new connection (at most [`MAX_HELLO`] bytes, each read
/// waiting at most [`HELLO_DEADLINE`]; the caller shuts the stream down when the whole hello
/// takes longer).
fn read_hello(stream: &TcpStream, n: usize, expected: &str) -> Option<Hello> {
    stream.set_nonblocking(false).ok()?;
    stream.set_read_timeout(Some(HELLO_DEADLINE)).ok()?;
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    // a bounded read: a client that never sends a newline cannot grow the buffer, and a
    // hello cut short by the end of the stream is refused, not parsed
    let line = read_frame(&mut reader, MAX_HELLO).ok()??;
    // Refuse anything that does not present this run's token.
    let Ok(Msg::Hello {
        token,
        index,
        pid,
        host,
        build,
    }) = serde_json::from_str::<Msg>(&line)
    else {
        return None;
    };
    if !constant_time_eq(token.as_bytes(), expected.as_bytes()) || index >= n {
        return None;
    }
    Some((index, pid, host, build, reader))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Launcher for LocalLauncher {
    fn name(&self) -> &'static str {
        "local"
    }

    fn start(&self, n: usize) -> Result<Vec<Agent>, LaunchError> {
        // loopback only: the local launcher's agents are on this host
        let control = ControlListener::bind("127.0.0.1:0")?;
        let addr = control.local_addr()?;
        let mut procs = Vec::new();
        for i in 0..n {
            let child = Command::new(&self.exe)
                .args([
                    "agent",
                    "--connect",
                    &addr.to_string(),
                    "--index",
                    &i.to_string(),
                ])
                .env("INABENCH_AGENT_TOKEN", control.token())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .map_err(|source| LaunchError::Spawn {
                    cmd: format!("{} agent", self.exe.display()),
                    source,
                })?;
            procs.push(std::sync::Arc::new(Proc::new(child, format!("agent {i}"))));
        }
        control.accept(
            n,
            self.connect_timeout,
            &|i| procs.get(i).cloned(),
            &mut |_| Ok(()),
        )
    }
}

impl Agent {
    /// Run one job on the agent, passing each event it streams to `on_event`.
    pub fn run_job(
        &mut self,
        job: &Job,
        on_event: &mut dyn FnMut(Event),
    ) -> Result<Result<(), JobFailure>, LaunchError> {
        serde_json::to_writer(&mut self.writer, &Msg::Job(Box::new(job.clone())))
            .map_err(|e| LaunchError::Protocol(e.to_string()))?;
        self.writer.write_all(b"\n")?;
        self.writer.flush()?;
        loop {
            let Some(line) = read_frame(&mut self.reader, MAX_FRAME)? else {
                let status = match &self.proc {
                    Some(p) => {
                        // the carrying process may need a moment to notice
                        let deadline = Instant::now() + Duration::from_millis(500);
                        let mut st = p.exited();
                        while st.is_none() && Instant::now() < deadline {
                            std::thread::sleep(Duration::from_millis(10));
                            st = p.exited();
                        }
                        match (st, p.last_words()) {
                            (Some(s), Some(w)) => format!("{s}; {}: {w}", p.label),
                            (Some(s), None) => s.to_string(),
                            (None, _) => "connection closed".to_string(),
                        }
                    }
                    None => "connection closed".to_string(),
                };
                return Err(LaunchError::AgentDied {
                    index: self.index,
                    status,
                });
            };
            match serde_json::from_str::<Msg>(&line) {
                Ok(Msg::Event { mut event, bits }) => {
                    if let (Event::Row(r), Some(b)) = (&mut event, bits) {
                        r.value = f64::from_bits(b);
                    }
                    on_event(event)
                }
                Ok(Msg::Done { ok, error }) => {
                    return Ok(if ok {
                        Ok(())
                    } else {
                        Err(error.unwrap_or(JobFailure::Failed {
                            message: "the agent gave no reason".into(),
                        }))
                    });
                }
                Ok(other) => return Err(LaunchError::Protocol(format!("unexpected {other:?}"))),
                Err(e) => return Err(LaunchError::Protocol(e.to_string())),
            }
        }
    }

    /// Ask the agent to exit and close the channel; the process that carried it is reaped
    /// (and killed if it does not go within a second) when its last agent is shut down.
    pub fn shutdown(mut self) {
        let _ = serde_json::to_writer(&mut self.writer, &Msg::Exit);
        let _ = self.writer.write_all(b"\n");
        let _ = self.writer.flush();
        let _ = self.writer.get_ref().shutdown(std::net::Shutdown::Both);
        if let Some(p) = self.proc.take()
            && let Ok(p) = std::sync::Arc::try_unwrap(p)
        {
            p.finish(Duration::from_secs(1));
        }
    }
}

/// The agent side: connect, say hello with the token, run jobs until told to exit.
pub fn agent_main(
    connect: &str,
    index: usize,
    token: &str,
    registry: &crate::registry::Registry,
) -> Result<(), LaunchError> {
    let stream = TcpStream::connect(connect)?;
    stream.set_nodelay(true)?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = BufWriter::new(stream);
    let hello = Msg::Hello {
        token: token.to_string(),
        index,
        pid: std::process::id(),
        host: hostname(),
        build: crate::embedded::BUILD.to_string(),
    };
    serde_json::to_writer(&mut writer, &hello).map_err(|e| LaunchError::Protocol(e.to_string()))?;
    writer.write_all(b"\n")?;
    writer.flush()?;
    let cancel = std::sync::atomic::AtomicBool::new(false);
    loop {
        let Some(line) = read_frame(&mut reader, MAX_FRAME)? else {
            return Ok(());
        };
        let job = match serde_json::from_str::<Msg>(&line) {
            Ok(Msg::Job(job)) => job,
            Ok(Msg::RankJob {
                job,
                rank,
                ranks,
                nics,
            }) => {
                // a rank of a job that spans agents: its body exchanges QPs on this channel
                let result = span::run_rank(
                    registry,
                    &job,
                    rank,
                    ranks,
                    &nics,
                    &cancel,
                    &mut reader,
                    &mut writer,
                );
                send_done(&mut writer, result)?;
                continue;
            }
            Ok(Msg::Exit) => return Ok(()),
            Ok(other) => return Err(LaunchError::Protocol(format!("unexpected {other:?}"))),
            Err(e) => return Err(LaunchError::Protocol(e.to_string())),
        };
        let mut io_err: Option<std::io::Error> = None;
        let mut sink = |event: Event| {
            if io_err.is_some() {
                return;
            }
            let bits = match &event {
                Event::Row(r) => Some(r.value.to_bits()),
                _ => None,
            };
            let r = serde_json::to_writer(&mut writer, &Msg::Event { event, bits })
                .map_err(std::io::Error::from)
                .and_then(|_| writer.write_all(b"\n"));
            if let Err(e) = r {
                io_err = Some(e);
            }
        };
        // the same path as a job in the runner's own process
        let result = crate::executor::run_here(registry, &job, &cancel, &mut sink);
        if let Some(e) = io_err {
            return Err(e.into());
        }
        send_done(&mut writer, result)?;
    }
}

/// An agent's answer to the runner once a job (or a rank of one) ended: `Msg::Done`, flushed.
fn send_done<W: Write>(writer: &mut W, result: Result<(), JobFailure>) -> Result<(), LaunchError> {
    let done = match result {
        Ok(()) => Msg::Done {
            ok: true,
            error: None,
        },
        Err(e) => Msg::Done {
            ok: false,
            error: Some(e),
        },
    };
    serde_json::to_writer(&mut *writer, &done).map_err(|e| LaunchError::Protocol(e.to_string()))?;
    writer.write_all(b"\n")?;
    writer.flush()?;
    Ok(())
}

/// A multi-host launcher, as the runner's placement names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemoteLauncher {
    Ssh(ssh::SshLauncher),
    Slurm(slurm::SlurmLauncher),
    Rig(rig::RigLauncher),
}

impl RemoteLauncher {
    pub fn launcher(&self) -> &dyn Launcher {
        match self {
            RemoteLauncher::Ssh(l) => l,
            RemoteLauncher::Slurm(l) => l,
            RemoteLauncher::Rig(l) => l,
        }
    }
}

/// One line for the run's manifest: the launcher and where its agents ran.
pub fn describe(name: &str, agents: &[Agent]) -> String {
    let hosts: Vec<String> = agents
        .iter()
        .map(|a| {
            if a.host.is_empty() {
                "?".to_string()
            } else {
                a.host.clone()
            }
        })
        .collect();
    format!(
        "launcher {name}: {} agent{} on {}",
        agents.len(),
        if agents.len() == 1 { "" } else { "s" },
        hosts.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    /// Every frame of `input` up to and with the end (`None`); a refused frame fails the test.
    fn frames(input: &[u8], limit: usize) -> Vec<Option<String>> {
        let mut r = BufReader::with_capacity(3, Cursor::new(input.to_vec()));
        let mut out = Vec::new();
        loop {
            let f = read_frame(&mut r, limit)
                .unwrap_or_else(|e| panic!("frame {} refused: {e}", out.len()));
            let last = f.is_none();
            out.push(f);
            if last {
                return out;
            }
        }
    }

    /// Issue #40, item 5: silent connections and one that drips a byte at a time do not hold up
    /// an agent that connects after them; the dripper is cut off at its hello deadline.
    #[test]
    fn stalled_hellos_do_not_hold_up_the_agent_behind_them() {
        use std::io::Read;
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        let control = ControlListener::bind("127.0.0.1:0").expect("bind");
        let addr = control.local_addr().expect("addr");
        let silent: Vec<TcpStream> = (0..3)
            .map(|_| TcpStream::connect(addr).expect("silent"))
            .collect();
        // a byte every 100 ms for up to 30 s, never a newline
        let dripping = Arc::new(AtomicBool::new(true));
        let mut dripper = TcpStream::connect(addr).expect("dripper");
        let drip = {
            let dripping = dripping.clone();
            std::thread::spawn(move || {
                let start = Instant::now();
                while start.elapsed() < Duration::from_secs(30) {
                    if dripper.write_all(b"{").is_err() {
                        break; // the runner closed it
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                dripping.store(false, Ordering::SeqCst);
                start.elapsed()
            })
        };
        std::thread::sleep(Duration::from_millis(300));
        let mut agent = TcpStream::connect(addr).expect("agent");
        let hello = Msg::Hello {
            token: control.token().to_string(),
            index: 0,
            pid: 42,
            host: "h".into(),
            build: crate::embedded::BUILD.into(),
        };
        let mut line = serde_json::to_vec(&hello).expect("json");
        line.push(b'\n');
        agent.write_all(&line).expect("hello");
        let got = control
            .accept(1, Duration::from_secs(60), &|_| None, &mut |_| Ok(()))
            .expect("the agent is accepted");
        assert_eq!((got[0].index, got[0].pid), (0, 42));
        assert!(
            dripping.load(Ordering::SeqCst),
            "the agent was accepted only after the dripping connection ended"
        );
        // the dripper is closed by the runner once its hello deadline passed, not at its own end
        let dripped = drip.join().expect("dripper");
        assert!(dripped < Duration::from_secs(30), "{dripped:?}");
        for mut s in silent {
            let mut b = [0u8; 1];
            assert_eq!(s.read(&mut b).unwrap_or(0), 0, "closed without an answer");
        }
    }

    #[test]
    fn the_build_check_names_both_builds_and_the_host() {
        let ours = crate::embedded::BUILD;
        assert!(check_build(0, "node1", ours).is_ok());
        let e = check_build(0, "node1", "0.0.9 (source 0123456789abcdef)").expect_err("another");
        assert_eq!(
            e.to_string(),
            format!(
                "the agent on node1 runs inabench 0.0.9 (source 0123456789abcdef), this runner \
                 inabench {ours}: install the same build on every host"
            )
        );
        let e = check_build(3, "", "").expect_err("none named");
        assert_eq!(
            e.to_string(),
            format!(
                "the agent on an unnamed host (agent 3) runs an older inabench (its hello names \
                 no build), this runner inabench {ours}: install the same build on every host"
            )
        );
        // the build is the version and a 64-bit source fingerprint
        let (version, source) = ours.split_once(" (source ").expect("a fingerprint");
        assert_eq!(version, env!("CARGO_PKG_VERSION"));
        assert_eq!(source.len(), 17, "{ours}");
    }

    /// An agent that presents the run's token but another build (or, older than the field,
    /// none) fails the start with the build check's sentence, and is sent nothing.
    #[test]
    fn an_agent_of_another_build_is_refused_before_any_job() {
        use std::io::Read;
        let other = serde_json::to_string(&Msg::Hello {
            token: String::new(),
            index: 0,
            pid: 7,
            host: "node1".into(),
            build: "0.0.9 (source 0123456789abcdef)".into(),
        })
        .expect("json");
        for (hello, says) in [
            (other, "runs inabench 0.0.9 (source 0123456789abcdef), "),
            // what an agent from before the field sends
            (
                r#"{"type":"hello","token":"","index":0,"pid":7,"host":"node1"}"#.to_string(),
                "runs an older inabench (its hello names no build), ",
            ),
        ] {
            let control = ControlListener::bind("127.0.0.1:0").expect("bind");
            let addr = control.local_addr().expect("addr");
            let hello = hello.replace(
                r#""token":"""#,
                &format!(r#""token":"{}""#, control.token()),
            );
            let client = std::thread::spawn(move || {
                let mut s = TcpStream::connect(addr).expect("connect");
                s.set_read_timeout(Some(Duration::from_secs(20)))
                    .expect("timeout");
                s.write_all(format!("{hello}\n").as_bytes()).expect("hello");
                let mut got = Vec::new();
                let _ = s.read_to_end(&mut got);
                got
            });
            let e = control
                .accept(1, Duration::from_secs(20), &|_| None, &mut |_| Ok(()))
                .err()
                .expect("the start fails");
            assert!(matches!(e, LaunchError::WrongBuild { .. }), "{e}");
            let msg = e.to_string();
            assert!(
                msg.starts_with(&format!("the agent on node1 {says}this runner inabench ")),
                "{msg}"
            );
            let got = client.join().expect("client");
            assert!(got.is_empty(), "the agent was sent {got:?}");
        }
    }

    #[test]
    fn whole_messages_up_to_the_limit_are_read() {
        assert_eq!(
            frames(b"{}\nabcd\n\n", 4),
            vec![
                Some("{}".into()),
                Some("abcd".into()),
                Some(String::new()),
                None
            ]
        );
    }

    #[test]
    fn a_message_over_the_limit_is_refused() {
        let mut r = BufReader::new(Cursor::new(b"abcde\n".to_vec()));
        assert!(matches!(
            read_frame(&mut r, 4),
            Err(LaunchError::Frame(FrameError::TooLong { limit: 4 }))
        ));
        // a peer that never sends a newline: refused after the limit, not buffered forever
        let mut endless = BufReader::new(std::io::repeat(b'x'));
        assert!(matches!(
            read_frame(&mut endless, 1 << 20),
            Err(LaunchError::Frame(FrameError::TooLong { .. }))
        ));
    }

    #[test]
    fn a_message_cut_by_the_end_of_the_stream_is_refused() {
        let hello = serde_json::to_string(&Msg::Hello {
            token: "t".into(),
            index: 0,
            pid: 1,
            host: String::new(),
            build: String::new(),
        })
        .expect("json");
        let mut r = BufReader::new(Cursor::new(hello.clone().into_bytes()));
        assert!(matches!(
            read_frame(&mut r, MAX_HELLO),
            Err(LaunchError::Frame(FrameError::Truncated { bytes })) if bytes == hello.len()
        ));
        let mut r = BufReader::new(Cursor::new(vec![0xff, 0xfe, b'\n']));
        assert!(matches!(
            read_frame(&mut r, 8),
            Err(LaunchError::Frame(FrameError::NotUtf8))
        ));
    }
}
