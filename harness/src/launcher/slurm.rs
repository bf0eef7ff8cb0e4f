//! The `slurm` launcher: agents as the tasks of one `srun` step.
//!
//! Inside an allocation (`SLURM_JOB_ID` set: an `salloc` shell or an `sbatch` script) the runner
//! runs `srun --ntasks=N --distribution=cyclic EXE agent --connect ADDR` in it; N defaults to the
//! allocation's node count, so there is one agent per node. Outside one it runs the same srun
//! under `salloc --ntasks=N` (N defaults to 1). We chose salloc over `sbatch --wait`: salloc
//! keeps the allocation a child of the runner, so ending the runner (end of run, Ctrl-C) ends the
//! step and releases the allocation, it needs no batch script on a shared file system, and
//! the runner sees the allocation fail (no such partition, too many tasks) as salloc exiting
//! with its one-line error.
//!
//! The token travels in INABENCH_AGENT_TOKEN, which srun exports to the tasks (no command line
//! shows it); an agent takes its index from SLURM_PROCID. EXE is the path of this binary, as on
//! every cluster with a shared installation.

use super::{Agent, ControlListener, LaunchError, Launcher, Proc};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmLauncher {
    /// Number of agents (tasks); None: one per node of the allocation, or 1 outside one.
    pub agents: Option<usize>,
    /// Where the runner listens (`ip` or `ip:port`); None: this host's name, resolved.
    pub listen: Option<String>,
    /// The agent binary on the nodes.
    pub exe: PathBuf,
    /// How long agents may take to connect (queueing included).
    pub connect_timeout: Duration,
}

/// The allocation the runner is in, if any: (job id, node count).
pub fn allocation() -> Option<(String, usize)> {
    let job = std::env::var("SLURM_JOB_ID").ok()?;
    let nodes = std::env::var("SLURM_JOB_NUM_NODES")
        .or_else(|_| std::env::var("SLURM_NNODES"))
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    Some((job, nodes))
}

impl SlurmLauncher {
    fn listen_addr(&self) -> Result<SocketAddr, LaunchError> {
        if let Some(l) = &self.listen {
            return super::ssh::parse_listen(l);
        }
        let host = super::hostname();
        let ip = (host.as_str(), 0)
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.find(|a| a.is_ipv4()).or_else(|| a.next()))
            .map(|a| a.ip())
            .ok_or_else(|| {
                LaunchError::Config(format!(
                    "this host's name `{host}` does not resolve, so the nodes cannot connect back; give an address with --listen"
                ))
            })?;
        let ip = if ip.is_loopback() {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        } else {
            ip
        };
        Ok(SocketAddr::new(ip, 0))
    }

    /// The command that starts `n` agents connecting to `addr`.
    pub fn command(&self, n: usize, addr: &SocketAddr) -> Command {
        let srun_args = [
            "srun".to_string(),
            format!("--ntasks={n}"),
            "--distribution=cyclic".into(),
            "--kill-on-bad-exit=1".into(),
            "--job-name=inabench-agents".into(),
            "--export=ALL".into(),
        ];
        let agent_args = [
            self.exe.to_string_lossy().to_string(),
            "agent".into(),
            "--connect".into(),
            addr.to_string(),
        ];
        let mut c = if allocation().is_some() {
            let mut c = Command::new(&srun_args[0]);
            c.args(&srun_args[1..]);
            c
        } else {
            let mut c = Command::new("salloc");
            c.args([
                format!("--ntasks={n}"),
                "--job-name=inabench".into(),
                "--quiet".into(),
            ]);
            c.args(&srun_args);
            c
        };
        c.args(agent_args);
        c
    }
}

impl Launcher for SlurmLauncher {
    fn name(&self) -> &'static str {
        "slurm"
    }

    fn agents(&self) -> usize {
        self.agents
            .unwrap_or_else(|| allocation().map(|(_, nodes)| nodes).unwrap_or(1))
            .max(1)
    }

    fn on_this_host(&self) -> bool {
        false
    }

    fn start(&self, n: usize) -> Result<Vec<Agent>, LaunchError> {
        let control = ControlListener::bind(&self.listen_addr()?.to_string())?;
        let addr = control.local_addr()?;
        let mut cmd = self.command(n, &addr);
        let what = if allocation().is_some() {
            "srun"
        } else {
            "salloc"
        };
        let child = cmd
            .env("INABENCH_AGENT_TOKEN", control.token())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| LaunchError::Spawn {
                cmd: format!("{what} (is Slurm installed?)"),
                source,
            })?;
        let proc = Arc::new(Proc::new(child, what).capture_stderr(false));
        control.accept(
            n,
            self.connect_timeout,
            &|_| Some(proc.clone()),
            &mut |_| match proc.exited() {
                Some(status) => Err(LaunchError::Unreachable(format!(
                    "{what} exited before its {n} agent(s) connected back to {addr} ({status}): {}",
                    proc.last_words().unwrap_or_else(|| "no message".into())
                ))),
                None => Ok(()),
            },
        )
    }
}
