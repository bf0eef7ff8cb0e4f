//! Launchers start the processes a run needs and connect them to the runner.
//!
//! `local` starts agents on this host as `inabench agent --connect ADDR --token T`; each agent
//! connects back over TCP on loopback, proves the per-run token, and then runs jobs (one
//! repetition of one point) that the runner sends, streaming the events of the job back. The
//! protocol is JSON lines. Anything that does not start with the right token is refused.

use inabench_core::event::Event;
use inabench_core::plan::Point;
use inabench_core::spec::Fidelity;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("cannot start an agent ({cmd}): {source}")]
    Spawn { cmd: String, source: std::io::Error },
    #[error("the control channel failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("agent {0} did not connect within {1:?}")]
    Timeout(usize, Duration),
    #[error("agent {index} exited during the job ({status})")]
    AgentDied { index: usize, status: String },
    #[error("agent sent an invalid message: {0}")]
    Protocol(String),
}

/// Messages on the control channel.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Msg {
    Hello {
        token: String,
        index: usize,
        pid: u32,
    },
    Job(Box<Job>),
    Event {
        event: Event,
    },
    Done {
        ok: bool,
        error: Option<String>,
    },
    Exit,
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
}

/// A started agent and its connection.
pub struct Agent {
    pub index: usize,
    pub pid: u32,
    child: Child,
    reader: BufReader<TcpStream>,
    writer: BufWriter<TcpStream>,
}

/// The launcher interface: start `n` agents for a run.
pub trait Launcher {
    fn name(&self) -> &'static str;
    fn start(&self, n: usize) -> Result<Vec<Agent>, LaunchError>;
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

impl Launcher for LocalLauncher {
    fn name(&self) -> &'static str {
        "local"
    }

    fn start(&self, n: usize) -> Result<Vec<Agent>, LaunchError> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let token = new_token();
        let mut children = Vec::new();
        for i in 0..n {
            let child = Command::new(&self.exe)
                .args([
                    "agent",
                    "--connect",
                    &addr.to_string(),
                    "--index",
                    &i.to_string(),
                ])
                .env("INABENCH_AGENT_TOKEN", &token)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .map_err(|source| LaunchError::Spawn {
                    cmd: format!("{} agent", self.exe.display()),
                    source,
                })?;
            children.push(Some(child));
        }
        listener.set_nonblocking(true)?;
        let deadline = Instant::now() + self.connect_timeout;
        let mut agents: Vec<Option<Agent>> = (0..n).map(|_| None).collect();
        let mut connected = 0;
        while connected < n {
            match listener.accept() {
                Ok((stream, _)) => {
                    stream.set_nonblocking(false)?;
                    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
                    let mut reader = BufReader::new(stream.try_clone()?);
                    let mut line = String::new();
                    if reader.read_line(&mut line).is_err() {
                        continue;
                    }
                    // Refuse anything that does not present this run's token.
                    let Ok(Msg::Hello {
                        token: t,
                        index,
                        pid,
                    }) = serde_json::from_str::<Msg>(&line)
                    else {
                        continue;
                    };
                    if t != token || index >= n || agents[index].is_some() {
                        continue;
                    }
                    stream.set_read_timeout(None)?;
                    let Some(child) = children[index].take() else {
                        continue;
                    };
                    agents[index] = Some(Agent {
                        index,
                        pid,
                        child,
                        reader,
                        writer: BufWriter::new(stream),
                    });
                    connected += 1;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() > deadline {
                        for c in children.iter_mut().flatten() {
                            let _ = c.kill();
                            let _ = c.wait();
                        }
                        return Err(LaunchError::Timeout(connected, self.connect_timeout));
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(agents.into_iter().flatten().collect())
    }
}

impl Agent {
    /// Run one job on the agent, passing each event it streams to `on_event`.
    pub fn run_job(
        &mut self,
        job: &Job,
        on_event: &mut dyn FnMut(Event),
    ) -> Result<Result<(), String>, LaunchError> {
        serde_json::to_writer(&mut self.writer, &Msg::Job(Box::new(job.clone())))
            .map_err(|e| LaunchError::Protocol(e.to_string()))?;
        self.writer.write_all(b"\n")?;
        self.writer.flush()?;
        let mut line = String::new();
        loop {
            line.clear();
            let n = self.reader.read_line(&mut line)?;
            if n == 0 {
                let status = match self.child.wait() {
                    Ok(s) => s.to_string(),
                    Err(e) => e.to_string(),
                };
                return Err(LaunchError::AgentDied {
                    index: self.index,
                    status,
                });
            }
            match serde_json::from_str::<Msg>(&line) {
                Ok(Msg::Event { event }) => on_event(event),
                Ok(Msg::Done { ok, error }) => {
                    return Ok(if ok {
                        Ok(())
                    } else {
                        Err(error.unwrap_or_default())
                    });
                }
                Ok(other) => return Err(LaunchError::Protocol(format!("unexpected {other:?}"))),
                Err(e) => return Err(LaunchError::Protocol(e.to_string())),
            }
        }
    }

    /// Ask the agent to exit and reap it (kill it if it does not go within a second).
    pub fn shutdown(mut self) {
        let _ = serde_json::to_writer(&mut self.writer, &Msg::Exit);
        let _ = self.writer.write_all(b"\n");
        let _ = self.writer.flush();
        let deadline = Instant::now() + Duration::from_secs(1);
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) => return,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                _ => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    return;
                }
            }
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
    };
    serde_json::to_writer(&mut writer, &hello).map_err(|e| LaunchError::Protocol(e.to_string()))?;
    writer.write_all(b"\n")?;
    writer.flush()?;
    let cancel = std::sync::atomic::AtomicBool::new(false);
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let job = match serde_json::from_str::<Msg>(&line) {
            Ok(Msg::Job(job)) => job,
            Ok(Msg::Exit) => return Ok(()),
            Ok(other) => return Err(LaunchError::Protocol(format!("unexpected {other:?}"))),
            Err(e) => return Err(LaunchError::Protocol(e.to_string())),
        };
        let result = match registry.get(&job.workload) {
            None => Err(format!("this agent has no workload `{}`", job.workload)),
            Some(w) => {
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
                let units = |m: &str| job.units.get(m).cloned().unwrap_or_default();
                let fabric = w.fabric(job.fidelity);
                let mut ctx = inabench_core::PointCtx::new(
                    &job.point,
                    job.index,
                    job.fidelity,
                    fabric,
                    job.repetition,
                    job.warmup,
                    job.seed,
                    &job.run_id,
                    &job.experiment,
                    &cancel,
                    &mut sink,
                    &units,
                );
                let r = w.run(&mut ctx).map_err(|e| e.to_string());
                if let Some(e) = io_err {
                    return Err(e.into());
                }
                r
            }
        };
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
