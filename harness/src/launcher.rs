//! Launchers start the processes a run needs and connect them to the runner.
//!
//! Every launcher starts agents as `inabench agent --connect ADDR`; each agent connects back over
//! TCP, proves the per-run token (128 random bits, never on a command line: an environment
//! variable or the agent's stdin), and then runs jobs (one repetition of one point) that the
//! runner sends, streaming the events of the job back. The protocol is JSON lines. Anything that
//! does not start with a hello carrying the right token is closed without an answer.
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

pub mod slurm;
pub mod ssh;

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("cannot start an agent ({cmd}): {source}")]
    Spawn { cmd: String, source: std::io::Error },
    #[error("the control channel failed: {0}")]
    Io(#[from] std::io::Error),
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
    #[error("{0}")]
    Unreachable(String),
    #[error("{0}")]
    Config(String),
}

/// Most bytes of one message on the control channel (a JSON line, newline excluded): far above
/// any job or event batch the runner and agents exchange, and a bound on what a peer can make
/// the other side buffer.
pub const MAX_FRAME: usize = 64 << 20;
/// Most bytes of the hello, the first line of a connection not yet proven to carry the token.
pub const MAX_HELLO: usize = 4096;

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
    },
    Job(Box<Job>),
    Event {
        event: Event,
    },
    Done {
        ok: bool,
        error: Option<JobFailure>,
    },
    Exit,
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
}

impl From<inabench_core::WorkloadError> for JobFailure {
    fn from(e: inabench_core::WorkloadError) -> JobFailure {
        match e {
            inabench_core::WorkloadError::WrongResult(message) => {
                JobFailure::WrongResult { message }
            }
            inabench_core::WorkloadError::Interrupted => JobFailure::Interrupted,
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
}

impl Proc {
    pub fn new(child: Child, label: impl Into<String>) -> Proc {
        Proc {
            child: std::sync::Mutex::new(child),
            label: label.into(),
            tail: Default::default(),
        }
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
            if wait_until(&mut c, Duration::from_secs(1)) {
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
    reader: BufReader<TcpStream>,
    writer: BufWriter<TcpStream>,
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

/// 128 random bits from the kernel, as hex.
pub fn new_token() -> String {
    let mut buf = [0u8; 16];
    let ok = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut buf))
        .is_ok();
    if !ok {
        // fall back to time and pid (still unguessable enough for a loopback channel of one run)
        let t =
            inabench_core::store::now_s().to_bits() ^ u64::from(std::process::id()).rotate_left(32);
        buf[..8].copy_from_slice(&t.to_le_bytes());
    }
    buf.iter().map(|b| format!("{b:02x}")).collect()
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
            token: new_token(),
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
        while connected < n {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    let Some((index, pid, host, reader)) = self.hello(&stream, n) else {
                        continue; // refused: dropping the stream closes it
                    };
                    if agents[index].is_some() {
                        continue;
                    }
                    stream.set_read_timeout(None)?;
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
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if last_watch.elapsed() >= Duration::from_millis(50) {
                        last_watch = Instant::now();
                        let have: Vec<bool> = agents.iter().map(Option::is_some).collect();
                        watch(&have)?;
                    }
                    if Instant::now() > deadline {
                        return Err(LaunchError::Timeout(connected, n, timeout));
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(agents.into_iter().flatten().collect())
    }

    /// Read and check the first line of a new connection.
    fn hello(
        &self,
        stream: &TcpStream,
        n: usize,
    ) -> Option<(usize, u32, String, BufReader<TcpStream>)> {
        stream.set_nonblocking(false).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
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
        }) = serde_json::from_str::<Msg>(&line)
        else {
            return None;
        };
        if !constant_time_eq(token.as_bytes(), self.token.as_bytes()) || index >= n {
            return None;
        }
        Some((index, pid, host, reader))
    }
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
                Ok(Msg::Event { event }) => on_event(event),
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
            Ok(Msg::Exit) => return Ok(()),
            Ok(other) => return Err(LaunchError::Protocol(format!("unexpected {other:?}"))),
            Err(e) => return Err(LaunchError::Protocol(e.to_string())),
        };
        let mut io_err: Option<std::io::Error> = None;
        let mut sink = |event: Event| {
            if io_err.is_some() {
                return;
            }
            let r = serde_json::to_writer(&mut writer, &Msg::Event { event })
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
        serde_json::to_writer(&mut writer, &done)
            .map_err(|e| LaunchError::Protocol(e.to_string()))?;
        writer.write_all(b"\n")?;
        writer.flush()?;
    }
}

/// A multi-host launcher, as the runner's placement names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemoteLauncher {
    Ssh(ssh::SshLauncher),
    Slurm(slurm::SlurmLauncher),
}

impl RemoteLauncher {
    pub fn launcher(&self) -> &dyn Launcher {
        match self {
            RemoteLauncher::Ssh(l) => l,
            RemoteLauncher::Slurm(l) => l,
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

    fn frames(input: &[u8], limit: usize) -> Vec<Result<Option<String>, String>> {
        let mut r = BufReader::with_capacity(3, Cursor::new(input.to_vec()));
        let mut out = Vec::new();
        loop {
            let f = read_frame(&mut r, limit).map_err(|e| e.to_string());
            let last = !matches!(f, Ok(Some(_)));
            out.push(f);
            if last {
                return out;
            }
        }
    }

    #[test]
    fn whole_messages_up_to_the_limit_are_read() {
        assert_eq!(
            frames(b"{}\nabcd\n\n", 4),
            vec![
                Ok(Some("{}".into())),
                Ok(Some("abcd".into())),
                Ok(Some(String::new())),
                Ok(None)
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
