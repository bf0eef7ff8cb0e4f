//! The `ssh` launcher: agents started over ssh on the hosts of a hostfile, as mpirun does.
//!
//! For each agent the runner runs `ssh -o BatchMode=yes -T HOST -- exec EXE agent --connect
//! ADDR --index I --token-stdin` with the user's keys and ssh configuration (or the `-F` file
//! given with `--ssh-config`), writes the run's token on ssh's stdin (so it is on no command
//! line `ps` shows), and waits for the agent to connect back to ADDR. EXE is the path of this
//! binary: like mpirun, the launcher expects the same installation path on every host. An ssh
//! that exits before its agent connected (exit 255: the host cannot be reached) fails the start
//! with one sentence naming the host. Agents exit when told to or when the runner's connection
//! closes (end of run, interruption, a killed runner), so nothing outlives the run.

use super::{Agent, ControlListener, LaunchError, Launcher, Proc};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshLauncher {
    /// One ssh destination per agent (a hostfile's slots expanded).
    pub hosts: Vec<String>,
    /// Where the runner listens (`ip` or `ip:port`); None: the address this host reaches the
    /// first host from.
    pub listen: Option<String>,
    /// `ssh -F FILE`; None: the user's configuration.
    pub ssh_config: Option<PathBuf>,
    /// The agent binary on the hosts.
    pub remote_exe: PathBuf,
    pub connect_timeout: Duration,
}

/// Why a hostfile gives no hosts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostfileError {
    /// A word after the host that is not `slots=N` with N > 0 (line counted from 1).
    #[error("line {line}: `{word}` is not `slots=N` with N a positive integer")]
    Slots { line: usize, word: String },
    #[error("it names no host")]
    NoHost,
}

/// Parse a hostfile: one host per line, optionally `slots=N` (that many agents on it), `#`
/// comments and blank lines ignored. Returns one entry per agent.
pub fn parse_hostfile(text: &str) -> Result<Vec<String>, HostfileError> {
    let mut hosts = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        let mut words = line.split_whitespace();
        let Some(host) = words.next() else { continue };
        let mut slots = 1usize;
        for w in words {
            match w.strip_prefix("slots=").map(str::parse::<usize>) {
                Some(Ok(n)) if n > 0 => slots = n,
                _ => {
                    return Err(HostfileError::Slots {
                        line: i + 1,
                        word: w.to_string(),
                    });
                }
            }
        }
        hosts.extend(std::iter::repeat_n(host.to_string(), slots));
    }
    if hosts.is_empty() {
        return Err(HostfileError::NoHost);
    }
    Ok(hosts)
}

impl SshLauncher {
    /// Hosts from a hostfile.
    pub fn from_hostfile(file: &Path) -> Result<Vec<String>, LaunchError> {
        let text = std::fs::read_to_string(file).map_err(|e| {
            LaunchError::Config(format!("cannot read the hostfile {}: {e}", file.display()))
        })?;
        parse_hostfile(&text)
            .map_err(|e| LaunchError::Config(format!("hostfile {}: {e}", file.display())))
    }

    fn ssh(&self) -> Command {
        let mut c = Command::new("ssh");
        if let Some(f) = &self.ssh_config {
            c.arg("-F").arg(f);
        }
        c.args(["-o", "BatchMode=yes", "-o", "ConnectTimeout=10"]);
        c
    }

    /// The address the runner listens on.
    fn listen_addr(&self) -> Result<SocketAddr, LaunchError> {
        if let Some(l) = &self.listen {
            return parse_listen(l);
        }
        let Some(first) = self.hosts.first() else {
            return Err(LaunchError::Config("the ssh launcher has no host".into()));
        };
        // ask ssh where `first` really is (its configuration may rename it), then which local
        // address the route to it leaves from
        let out = self
            .ssh()
            .args(["-G", first])
            .stdin(Stdio::null())
            .output()
            .map_err(|source| LaunchError::Spawn {
                cmd: "ssh -G".into(),
                source,
            })?;
        let cfg = String::from_utf8_lossy(&out.stdout);
        let field = |k: &str| {
            cfg.lines()
                .find_map(|l| l.strip_prefix(k).map(|v| v.trim().to_string()))
        };
        let name = field("hostname ").unwrap_or_else(|| first.clone());
        let port: u16 = field("port ").and_then(|p| p.parse().ok()).unwrap_or(22);
        let target = (name.as_str(), port)
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| {
                LaunchError::Unreachable(format!(
                    "cannot resolve host `{first}` ({name}) to choose the address agents connect back to; give one with --listen"
                ))
            })?;
        Ok(SocketAddr::new(route_source(target.ip())?, 0))
    }
}

/// `ip` or `ip:port` (port 0: any).
pub fn parse_listen(l: &str) -> Result<SocketAddr, LaunchError> {
    if let Ok(a) = l.parse::<SocketAddr>() {
        return Ok(a);
    }
    if let Ok(ip) = l.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, 0));
    }
    (l, 0)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.find(|a| a.is_ipv4()))
        .ok_or_else(|| {
            LaunchError::Config(format!(
                "--listen takes an address (ip or ip:port), not `{l}`"
            ))
        })
}

/// The local address the route to `to` leaves from (a connected UDP socket sends nothing).
pub fn route_source(to: IpAddr) -> Result<IpAddr, LaunchError> {
    if to.is_loopback() {
        return Ok(if to.is_ipv4() {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        } else {
            to
        });
    }
    let bind: SocketAddr = if to.is_ipv4() {
        "0.0.0.0:0"
            .parse()
            .map_err(|_| LaunchError::Config("bind".into()))?
    } else {
        "[::]:0"
            .parse()
            .map_err(|_| LaunchError::Config("bind".into()))?
    };
    let s = UdpSocket::bind(bind)?;
    s.connect(SocketAddr::new(to, 9))?;
    Ok(s.local_addr()?.ip())
}

/// A word for a POSIX shell, single-quoted.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

impl Launcher for SshLauncher {
    fn name(&self) -> &'static str {
        "ssh"
    }

    fn agents(&self) -> usize {
        self.hosts.len()
    }

    fn on_this_host(&self) -> bool {
        false
    }

    fn start(&self, n: usize) -> Result<Vec<Agent>, LaunchError> {
        if self.hosts.is_empty() {
            return Err(LaunchError::Config("the ssh launcher has no host".into()));
        }
        let control = ControlListener::bind(&self.listen_addr()?.to_string())?;
        let addr = control.local_addr()?;
        let mut procs: Vec<Arc<Proc>> = Vec::new();
        let mut hosts = Vec::new();
        for i in 0..n {
            let host = &self.hosts[i % self.hosts.len()];
            let remote = format!(
                "exec {} agent --connect {addr} --index {i} --token-stdin",
                shell_quote(&self.remote_exe.to_string_lossy())
            );
            let mut child = self
                .ssh()
                .args(["-T", host, "--", &remote])
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|source| LaunchError::Spawn {
                    cmd: format!("ssh {host}"),
                    source,
                })?;
            if let Some(mut stdin) = child.stdin.take() {
                use std::io::Write;
                // the token on the agent's stdin; a host that is already gone shows up below
                let _ = writeln!(stdin, "{}", control.token());
            }
            procs.push(Arc::new(
                Proc::new(child, format!("ssh {host}")).capture_stderr(false),
            ));
            hosts.push(host.clone());
        }
        control.accept(
            n,
            self.connect_timeout,
            &|i| procs.get(i).cloned(),
            &mut |have| {
                for (i, p) in procs.iter().enumerate() {
                    if have.get(i).copied().unwrap_or(true) {
                        continue;
                    }
                    if let Some(status) = p.exited() {
                        let why = p.last_words().unwrap_or_else(|| status.to_string());
                        return Err(LaunchError::Unreachable(if status.code() == Some(255) {
                            format!("cannot reach host `{}` over ssh: {why}", hosts[i])
                        } else {
                            format!(
                                "the agent on host `{}` exited before connecting back to {addr} ({status}): {why}",
                                hosts[i]
                            )
                        }));
                    }
                }
                Ok(())
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostfiles_expand_slots_and_reject_typos() {
        let h = parse_hostfile("# cluster\nnode1 slots=2\n\nnode2 # the second\n").unwrap();
        assert_eq!(h, vec!["node1", "node1", "node2"]);
        let e = parse_hostfile("node1\nnode2 slot=2\n").unwrap_err();
        assert_eq!(
            e,
            HostfileError::Slots {
                line: 2,
                word: "slot=2".into()
            }
        );
        assert_eq!(
            e.to_string(),
            "line 2: `slot=2` is not `slots=N` with N a positive integer"
        );
        assert_eq!(
            parse_hostfile("node1 slots=0\n"),
            Err(HostfileError::Slots {
                line: 1,
                word: "slots=0".into()
            })
        );
        let none = parse_hostfile("# nothing\n").unwrap_err();
        assert_eq!(none, HostfileError::NoHost);
        assert_eq!(none.to_string(), "it names no host");
    }

    #[test]
    fn quoting_survives_a_shell() {
        let q = shell_quote("/opt/it's here/inabench");
        let out = Command::new("sh")
            .args(["-c", &format!("printf %s {q}")])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "/opt/it's here/inabench"
        );
    }

    #[test]
    fn listen_addresses() {
        assert_eq!(
            parse_listen("10.0.0.1").unwrap(),
            "10.0.0.1:0".parse::<SocketAddr>().unwrap()
        );
        assert_eq!(parse_listen("10.0.0.1:7000").unwrap().port(), 7000);
        assert!(parse_listen("not an address!").is_err());
        assert_eq!(
            route_source("127.0.0.5".parse().unwrap()).unwrap(),
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        );
    }
}
