//! The multi-host launchers end to end, for real: an sshd on loopback at a high port (generated
//! host and client keys in a temp dir) for `ssh`, and a single-node Slurm cluster on this host
//! (munged, slurmctld and slurmd with their files in a temp dir, started and stopped by the test)
//! for `slurm`; plus the control channel's token refusal on the address they listen on.
//!
//! Tests that need root, sshd or Slurm skip with a message where they are missing, and fail
//! when the CI variable is set (.ci/setup installs openssh-server, slurm-wlm and munge).

mod support;

use inabench::launcher::{self, ControlListener, Job, Msg};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::{manifest_of, only_run_dir, probe_home, rows_of};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn exe() -> PathBuf {
    assert_cmd::cargo::cargo_bin("inabench")
}

fn bin() -> Command {
    let mut c = Command::new(exe());
    c.current_dir(repo())
        .env_remove("INABENCH_HOME")
        .env_remove("SLURM_JOB_ID")
        .env("CI", "true");
    c
}

/// Whether a test can run; in CI a missing tool is a failure, elsewhere a skip.
fn have(ok: bool, what: &str) -> bool {
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must have {what}: .ci/setup installs it"
        );
        eprintln!("skipped: no {what} here (run .ci/setup)");
    }
    ok
}

/// `inabench doctor --json`'s check called `name`.
fn doctor_check(args: &[&str], env: &[(&str, &str)], name: &str) -> serde_json::Value {
    let mut c = bin();
    c.args(["doctor", "--json"]).args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().expect("doctor");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let all: serde_json::Value =
        serde_json::from_slice(&o.stdout).expect("doctor --json prints JSON");
    all.as_array()
        .and_then(|a| a.iter().find(|c| c["name"] == name))
        .cloned()
        .unwrap_or_else(|| panic!("no check `{name}` in {all}"))
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .expect("hostname")
        .trim()
        .to_string()
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn found(path: &str) -> bool {
    if path.starts_with('/') {
        return Path::new(path).exists();
    }
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(path).exists()))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn wait_for(what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !ok() {
        assert!(t0.elapsed() < timeout, "{what} within {timeout:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A daemon the test started: SIGTERM, then SIGKILL, at the end of the test.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        // SAFETY: kill has no memory preconditions; the pid is our own child.
        unsafe { libc::kill(self.0.id() as libc::pid_t, libc::SIGTERM) };
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(3) {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(cmd: &mut Command, log: &Path) -> Daemon {
    let f = std::fs::File::create(log).expect("log file");
    let e = f.try_clone().expect("log file");
    Daemon(
        cmd.stdin(Stdio::null())
            .stdout(f)
            .stderr(e)
            .spawn()
            .expect("start daemon"),
    )
}

fn tail(log: &Path) -> String {
    let s = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// Sorted (point, repetition, value) of one metric.
fn metric(run: &Path, name: &str) -> Vec<(String, f64)> {
    let mut v: Vec<(String, f64)> = rows_of(run)
        .iter()
        .filter(|r| r["metric"] == name)
        .map(|r| {
            (
                format!("{}/{}", r["point_id"], r["repetition"]),
                r["value"].as_f64().unwrap_or(-1.0),
            )
        })
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// Run the probe through `launcher` ("": the testbed's) with `extra` flags, under `wrap` if given
/// and with `env` added; the run folder.
fn run_probe(
    home: &Path,
    name: &str,
    launcher: &str,
    extra: &[&str],
    wrap: &[&str],
    env: &[(&str, &str)],
) -> PathBuf {
    let results = home.join(format!("results-{name}"));
    let mut c = if let Some((first, rest)) = wrap.split_first() {
        let mut c = Command::new(first);
        c.args(rest).arg(exe());
        c.current_dir(repo()).env("CI", "true");
        c
    } else {
        bin()
    };
    let o = c
        .envs(env.iter().copied())
        .env("INABENCH_HOME", home)
        .args([
            "reproduce",
            "netreduce-probe",
            "--headless",
            "--format",
            "md",
        ])
        // "": no flag, the testbed's launcher
        .args(if launcher.is_empty() {
            vec![]
        } else {
            vec!["--launcher", launcher]
        })
        .args(extra)
        .arg("--results")
        .arg(&results)
        .output()
        .expect("run inabench");
    assert!(
        o.status.success(),
        "the {name} run failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    only_run_dir(&results)
}

fn drivers(run: &Path) -> Vec<String> {
    manifest_of(run)["drivers"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|d| d.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn hello(token: &str, index: usize) -> String {
    let m = Msg::Hello {
        token: token.into(),
        index,
        pid: 1,
        host: "intruder".into(),
        build: inabench::embedded::BUILD.into(),
    };
    format!("{}\n", serde_json::to_string(&m).expect("json"))
}

/// What a client that connects and writes `first` receives before the runner closes it.
fn client(addr: std::net::SocketAddr, first: String) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        let _ = s.write_all(first.as_bytes());
        let mut got = Vec::new();
        let _ = s.read_to_end(&mut got);
        got
    })
}

/// A client that writes `first`, closes its sending side (so the runner reads the end of the
/// stream right after it), and returns what it receives.
fn client_then_eof(addr: std::net::SocketAddr, first: String) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        let _ = s.write_all(first.as_bytes());
        let _ = s.shutdown(std::net::Shutdown::Write);
        let mut got = Vec::new();
        let _ = s.read_to_end(&mut got);
        got
    })
}

#[test]
fn the_control_channel_refuses_clients_without_the_token() {
    // the address a multi-host launcher listens on: the one this host reaches the network from
    // (loopback where there is no other)
    let ip = launcher::ssh::route_source("192.0.2.1".parse().expect("ip"))
        .unwrap_or_else(|_| "127.0.0.1".parse().expect("ip"));
    let control = ControlListener::bind(&format!("{ip}:0")).expect("listen");
    let addr = control.local_addr().expect("addr");
    assert!(!ip.is_unspecified());
    let intruders = vec![
        client(addr, hello("0123456789abcdef0123456789abcdef", 0)),
        client(addr, hello("", 0)),
        client(addr, "GET / HTTP/1.0\r\n\r\n".into()),
        client(addr, hello(control.token(), 7)), // the token, but no such agent
        // the token and agent 0, but the hello cut short: the stream ends before its newline
        client_then_eof(addr, hello(control.token(), 0).trim_end().to_string()),
        // the token and agent 0 in a hello over the size limit
        client(addr, {
            let m = Msg::Hello {
                token: control.token().into(),
                index: 0,
                pid: 1,
                host: "h".repeat(launcher::MAX_HELLO),
                build: inabench::embedded::BUILD.into(),
            };
            format!("{}\n", serde_json::to_string(&m).expect("json"))
        }),
    ];
    // the intruders are in the accept queue first; then the real agent connects
    std::thread::sleep(Duration::from_millis(200));
    let agent = Command::new(exe())
        .args(["agent", "--connect", &addr.to_string(), "--index", "0"])
        .env("INABENCH_AGENT_TOKEN", control.token())
        .stdin(Stdio::null())
        .spawn()
        .expect("agent");
    let proc = std::sync::Arc::new(launcher::Proc::new(agent, "agent"));
    let mut agents = control
        .accept(
            1,
            Duration::from_secs(20),
            &|_| Some(proc.clone()),
            &mut |_| Ok(()),
        )
        .expect("the agent with the token is accepted");
    drop(proc);
    for t in intruders {
        let got = t.join().expect("client");
        assert!(got.is_empty(), "a client without the token got {got:?}");
    }
    // the accepted agent runs a job: the probe's checksum, computed here as a reference
    let job = Job {
        workload: "harness.probe".into(),
        point: inabench_core::plan::Point {
            id: "p0".into(),
            system: "probe".into(),
            params: [("work".to_string(), inabench_core::value::Scalar::Int(500))]
                .into_iter()
                .collect(),
            repetitions: 1,
            warmup: 0,
        },
        index: 0,
        fidelity: inabench_core::spec::Fidelity::Functional,
        repetition: 0,
        warmup: false,
        seed: 42,
        run_id: "r".into(),
        experiment: "netreduce-probe".into(),
        units: Default::default(),
        capture_dir: None,
        host_profile: None,
        addresses: None,
    };
    let mut values = Vec::new();
    let r = agents[0]
        .run_job(&job, &mut |e| {
            if let inabench_core::event::Event::Row(row) = e {
                values.push((row.metric.clone(), row.value));
            }
        })
        .expect("job");
    assert_eq!(r, Ok(()));
    let want = (inabench_workloads::probe::checksum(42, 500) % 1_000_003) as f64;
    assert!(
        values.contains(&("checksum".to_string(), want)),
        "{values:?}"
    );
    for a in agents.drain(..) {
        a.shutdown();
    }
}

/// Whether the ssh tests can run here: root, sshd and the ssh client.
fn have_sshd() -> bool {
    have(is_root(), "root (for sshd)")
        && have(found("/usr/sbin/sshd"), "sshd (openssh-server)")
        && have(found("ssh") && found("ssh-keygen"), "ssh (openssh-client)")
}

/// `inabench reproduce netreduce-probe` in `home` through the ssh launcher on the hosts of
/// `hostfile`, reached with the ssh config `cfg`, into `results`.
fn ssh_probe(home: &Path, hostfile: &Path, cfg: &Path, results: &Path) -> Command {
    let mut c = bin();
    c.env("INABENCH_HOME", home)
        .args([
            "reproduce",
            "netreduce-probe",
            "--headless",
            "--format",
            "md",
            "--launcher",
            "ssh",
        ])
        .arg("--hostfile")
        .arg(hostfile)
        .arg("--ssh-config")
        .arg(cfg)
        .arg("--results")
        .arg(results);
    c
}

/// An sshd on 127.0.0.1:port with a generated host key, accepting a generated client key;
/// returns the daemon and an ssh config naming it `inatest` (and `inadown`, a closed port, and
/// `inaold`, a second port of the daemon whose every session runs `old-agent` in `dir` in place
/// of the command asked for: a host whose agent is another program).
fn sshd(dir: &Path) -> (Daemon, PathBuf) {
    let keygen = |name: &str| {
        let st = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(dir.join(name))
            .status()
            .expect("ssh-keygen");
        assert!(st.success(), "ssh-keygen {name}");
    };
    keygen("host_key");
    keygen("client_key");
    std::fs::copy(dir.join("client_key.pub"), dir.join("authorized_keys")).expect("keys");
    let port = free_port();
    let down = free_port();
    let old = free_port();
    let cfg = dir.join("sshd_config");
    std::fs::write(
        &cfg,
        format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\nPidFile {d}/sshd.pid\n\
             AuthorizedKeysFile {d}/authorized_keys\nStrictModes no\nUsePAM no\n\
             PasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n\
             PermitRootLogin prohibit-password\nLogLevel ERROR\nPort {old}\n\
             Match LocalPort {old}\n  ForceCommand {d}/old-agent\n",
            d = dir.display()
        ),
    )
    .expect("sshd_config");
    // sshd needs its privilege separation directory
    let _ = std::fs::create_dir_all("/run/sshd");
    let log = dir.join("sshd.log");
    let d = spawn(
        Command::new("/usr/sbin/sshd")
            .arg("-D")
            .arg("-e")
            .arg("-f")
            .arg(&cfg),
        &log,
    );
    let t0 = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "sshd did not listen on 127.0.0.1:{port} within 10 s: {}",
            tail(&log)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let host_pub = std::fs::read_to_string(dir.join("host_key.pub")).expect("host key");
    std::fs::write(
        dir.join("known_hosts"),
        format!("[127.0.0.1]:{port} {host_pub}[127.0.0.1]:{old} {host_pub}"),
    )
    .expect("known_hosts");
    let user = Command::new("id")
        .arg("-un")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .expect("id -un");
    let client = dir.join("ssh_config");
    let common = format!(
        "  HostName 127.0.0.1\n  User {user}\n  IdentityFile {d}/client_key\n  IdentitiesOnly yes\n\
           UserKnownHostsFile {d}/known_hosts\n  StrictHostKeyChecking yes\n  LogLevel ERROR\n",
        d = dir.display()
    );
    std::fs::write(
        &client,
        format!(
            "Host inatest\n  Port {port}\n{common}\nHost inadown\n  Port {down}\n{common}\n\
             Host inaold\n  Port {old}\n{common}"
        ),
    )
    .expect("ssh_config");
    (d, client)
}

#[test]
fn ssh_launcher_matches_in_process() {
    if !have_sshd() {
        return;
    }
    let t0 = Instant::now();
    let home = probe_home(0, 3, false);
    let (_sshd, cfg) = sshd(home.path());
    let hostfile = home.path().join("hosts");
    // two agents on the one host: points go round-robin, so both run jobs
    std::fs::write(&hostfile, "# test cluster\ninatest slots=2\n").expect("hostfile");
    let inproc = run_probe(home.path(), "inproc", "inproc", &[], &[], &[]);
    let hf = hostfile.to_string_lossy().to_string();
    let c = cfg.to_string_lossy().to_string();
    let ssh = run_probe(
        home.path(),
        "ssh",
        "ssh",
        &["--hostfile", &hf, "--ssh-config", &c],
        &[],
        &[],
    );
    let want = metric(&inproc, "checksum");
    assert_eq!(want.len(), 6);
    assert_eq!(metric(&ssh, "checksum"), want);
    // the rows came from two agent processes, neither of them the runner
    let pids: std::collections::BTreeSet<u64> =
        metric(&ssh, "pid").iter().map(|(_, p)| *p as u64).collect();
    assert_eq!(pids.len(), 2, "{pids:?}");
    assert_eq!(manifest_of(&ssh)["status"], "complete");
    assert_eq!(manifest_of(&ssh)["launcher"], "ssh");
    let d = drivers(&ssh);
    assert!(
        d.iter()
            .any(|l| l.starts_with("launcher ssh: 2 agents on ")),
        "{d:?}"
    );
    // no agent outlives the run
    std::thread::sleep(Duration::from_millis(300));
    for p in &pids {
        assert!(
            !Path::new(&format!("/proc/{p}")).exists()
                || std::fs::read_to_string(format!("/proc/{p}/cmdline"))
                    .map(|c| !c.contains("agent"))
                    .unwrap_or(true),
            "agent {p} is still running"
        );
    }

    // the same hosts from a testbed file: its launcher, its worker hosts' addresses, and the
    // runner's address as the one agents connect back to
    let tb = home.path().join("testbed.yaml");
    std::fs::write(
        &tb,
        "name: ssh-loopback\nhosts:\n  - {name: here, role: [runner], address: 127.0.0.1}\n  \
         - {name: w1, role: [worker], address: inatest}\n  - {name: w2, role: [worker], address: inatest}\n\
         launcher: ssh\n",
    )
    .expect("testbed");
    let tbs = tb.to_string_lossy().to_string();
    let via_tb = run_probe(
        home.path(),
        "testbed",
        "",
        &["--testbed", &tbs, "--ssh-config", &c],
        &[],
        &[],
    );
    assert_eq!(metric(&via_tb, "checksum"), want);
    assert!(
        drivers(&via_tb).contains(&"launcher ssh: 2 agents on vm, vm".replace("vm", &hostname())),
        "{:?}",
        drivers(&via_tb)
    );

    // doctor asks the testbed's hosts the way the launcher does
    let check = doctor_check(
        &["--testbed", &tbs, "--ssh-config", &c],
        &[],
        "ssh launcher",
    );
    assert_eq!(check["ok"], true, "{check}");
    assert!(
        check["detail"].as_str().unwrap_or("").starts_with("2 of 2"),
        "{check}"
    );
    let down = home.path().join("down.yaml");
    std::fs::write(
        &down,
        "name: ssh-down\nhosts:\n  - {name: w1, role: [worker], address: inatest}\n  \
         - {name: w2, role: [worker], address: inadown}\nlauncher: ssh\n",
    )
    .expect("testbed");
    let downs = down.to_string_lossy().to_string();
    let check = doctor_check(
        &["--testbed", &downs, "--ssh-config", &c],
        &[],
        "ssh launcher",
    );
    assert_eq!(check["ok"], false, "{check}");
    let detail = check["detail"].as_str().unwrap_or("");
    assert!(
        detail.starts_with("1 of 2") && detail.contains("inadown"),
        "{check}"
    );

    // a host that cannot be reached: one sentence naming it
    std::fs::write(&hostfile, "inatest\ninadown\n").expect("hostfile");
    let o = ssh_probe(
        home.path(),
        &hostfile,
        &cfg,
        &home.path().join("results-down"),
    )
    .output()
    .expect("run");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("cannot reach host `inadown` over ssh: "),
        "{err}"
    );
    if let Some(l) = err.lines().find(|l| l.contains("cannot reach")) {
        eprintln!("{l}");
    }
    eprintln!("{d:?}");
    eprintln!("ssh launcher test: {:.1} s", t0.elapsed().as_secs_f64());
}

/// An agent of another build on a host the ssh launcher reaches: the start fails in one sentence
/// naming the host and both builds, and the agent is sent no job. The host's "inabench" is a
/// script standing for an agent from before the hello named its build: it connects back with
/// the run's token, its index and its host, as such an agent does, and keeps what it receives.
#[test]
fn an_agent_of_another_build_is_refused_over_ssh() {
    if !have_sshd() {
        return;
    }
    let home = probe_home(0, 1, false);
    let (_sshd, cfg) = sshd(home.path());
    let got = home.path().join("old-agent.got");
    let agent = home.path().join("old-agent");
    std::fs::write(
        &agent,
        format!(
            r#"#!/bin/bash
set -- $SSH_ORIGINAL_COMMAND
while [ $# -gt 0 ]; do
  case "$1" in --connect) addr=$2; shift;; --index) index=$2; shift;; esac
  shift
done
read -r token
exec 4>{got}
exec 3<>"/dev/tcp/${{addr%:*}}/${{addr##*:}}"
printf '{{"type":"hello","token":"%s","index":%s,"pid":%s,"host":"%s"}}\n' "$token" "$index" $$ "$(hostname)" >&3
cat <&3 >&4
"#,
            got = got.display()
        ),
    )
    .expect("old agent");
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let hostfile = home.path().join("hosts");
    std::fs::write(&hostfile, "inaold\n").expect("hostfile");
    let o = ssh_probe(home.path(), &hostfile, &cfg, &home.path().join("results"))
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    let want = format!(
        "the agent on {} runs an older inabench (its hello names no build), this runner \
         inabench {}: install the same build on every host",
        hostname(),
        inabench::embedded::BUILD
    );
    assert!(err.contains(&want), "{err}");
    if let Some(l) = err.lines().find(|l| l.contains("install the same build")) {
        eprintln!("{l}");
    }
    // the agent connected and was sent nothing: not a job, not an exit
    let sent = std::fs::read(&got).expect("the old agent connected");
    assert!(sent.is_empty(), "{}", String::from_utf8_lossy(&sent));
}

/// A single-node Slurm cluster on this host; its daemons stop when this is dropped.
struct Cluster {
    conf: PathBuf,
    host: String,
    _daemons: Vec<Daemon>,
}

fn slurm_cluster(dir: &Path) -> Cluster {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .expect("hostname")
        .trim()
        .to_string();
    // munge: a fresh key, the socket in the temp dir
    let key = dir.join("munge.key");
    let mut k = [0u8; 1024];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut k))
        .expect("random key");
    std::fs::write(&key, k).expect("key");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o400)).expect("chmod");
    let sock = dir.join("munge.socket");
    let d = dir.display();
    let munged = spawn(
        Command::new("munged").args([
            "-F".to_string(),
            "--force".into(),
            format!("--socket={}", sock.display()),
            format!("--key-file={}", key.display()),
            format!("--log-file={d}/munged.log"),
            format!("--pid-file={d}/munged.pid"),
            format!("--seed-file={d}/munged.seed"),
        ]),
        &dir.join("munged.out"),
    );
    wait_for("munged creates its socket", Duration::from_secs(10), || {
        sock.exists()
    });
    // this node as slurmd sees it (name, CPUs, sockets, cores, memory)
    let node = Command::new("slurmd")
        .arg("-C")
        .output()
        .expect("slurmd -C");
    let node = String::from_utf8_lossy(&node.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string();
    assert!(node.starts_with("NodeName="), "slurmd -C printed {node:?}");
    std::fs::create_dir_all(dir.join("state")).expect("state");
    std::fs::create_dir_all(dir.join("spool")).expect("spool");
    let conf = dir.join("slurm.conf");
    std::fs::write(
        &conf,
        format!(
            "ClusterName=inabench\nSlurmctldHost={host}(127.0.0.1)\nSlurmctldPort={}\nSlurmdPort={}\n\
             SlurmUser=root\nSlurmdUser=root\nAuthType=auth/munge\nCredType=cred/munge\n\
             AuthInfo=socket={}\nStateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool\n\
             SlurmctldPidFile={d}/slurmctld.pid\nSlurmdPidFile={d}/slurmd.pid\n\
             SlurmctldLogFile={d}/slurmctld.log\nSlurmdLogFile={d}/slurmd.log\n\
             ProctrackType=proctrack/pgid\nTaskPlugin=task/none\nSelectType=select/cons_tres\n\
             SelectTypeParameters=CR_Core\nSchedulerType=sched/builtin\nMpiDefault=none\n\
             ReturnToService=2\nJobCompType=jobcomp/none\nAccountingStorageType=accounting_storage/none\n\
             JobAcctGatherType=jobacct_gather/none\nSwitchType=switch/none\nPlugStackConfig=/dev/null\n\
             {node} NodeAddr=127.0.0.1 State=UNKNOWN\n\
             PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n",
            free_port(),
            free_port(),
            sock.display(),
        ),
    )
    .expect("slurm.conf");
    let ctld = spawn(
        Command::new("slurmctld")
            .args(["-D", "-i", "-f"])
            .arg(&conf)
            .env("SLURM_CONF", &conf),
        &dir.join("slurmctld.out"),
    );
    let slurmd = spawn(
        Command::new("slurmd")
            .args(["-D", "-N", &host, "-f"])
            .arg(&conf)
            .env("SLURM_CONF", &conf),
        &dir.join("slurmd.out"),
    );
    let t0 = Instant::now();
    loop {
        let o = Command::new("sinfo")
            .args(["-h", "-N", "-o", "%T"])
            .env("SLURM_CONF", &conf)
            .output()
            .expect("sinfo");
        let state = String::from_utf8_lossy(&o.stdout).trim().to_string();
        if state == "idle" {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the Slurm node did not become idle within 30 s (sinfo: {state:?}); slurmctld: {}\nslurmd: {}",
            tail(&dir.join("slurmctld.out")),
            tail(&dir.join("slurmd.out"))
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    Cluster {
        conf,
        host,
        // dropped in reverse: slurmd, slurmctld, munged
        _daemons: vec![munged, ctld, slurmd],
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        while let Some(d) = self._daemons.pop() {
            drop(d);
        }
    }
}

#[test]
fn slurm_launcher_runs_on_a_single_node_cluster() {
    if !have(is_root(), "root (for slurmd)")
        || !have(
            [
                "munged",
                "slurmctld",
                "slurmd",
                "salloc",
                "srun",
                "sinfo",
                "squeue",
            ]
            .iter()
            .all(|t| found(t)),
            "Slurm (slurm-wlm and munge)",
        )
    {
        return;
    }
    let t0 = Instant::now();
    let home = probe_home(0, 3, false);
    let dir = tempfile::tempdir().expect("tmp");
    let cluster = slurm_cluster(dir.path());
    let up = t0.elapsed();
    let inproc = run_probe(home.path(), "inproc", "inproc", &[], &[], &[]);
    let want = metric(&inproc, "checksum");
    assert_eq!(want.len(), 6);
    let conf = cluster.conf.to_string_lossy().to_string();
    let env = [("SLURM_CONF", conf.as_str())];

    // doctor finds the controller
    let check = doctor_check(&[], &env, "slurm launcher");
    assert_eq!(check["ok"], true, "{check}");
    assert!(
        check["detail"].as_str().unwrap_or("").contains("nodes 1 "),
        "{check}"
    );

    // outside an allocation: salloc + srun, two agents (SLURM_PROCID gives their indices)
    let run = run_probe(
        home.path(),
        "salloc",
        "slurm",
        &["--agents", "2", "--listen", "127.0.0.1"],
        &[],
        &env,
    );
    assert_eq!(metric(&run, "checksum"), want);
    let pids: std::collections::BTreeSet<u64> =
        metric(&run, "pid").iter().map(|(_, p)| *p as u64).collect();
    assert_eq!(pids.len(), 2, "{pids:?}");
    let m = manifest_of(&run);
    assert_eq!(m["status"], "complete");
    assert_eq!(m["launcher"], "slurm");
    let line = format!("launcher slurm: 2 agents on {h}, {h}", h = cluster.host);
    assert!(drivers(&run).contains(&line), "{:?}", drivers(&run));

    // inside an allocation: the runner under salloc, srun in it, one agent per node, listening
    // on the address this host's name resolves to
    let run = run_probe(
        home.path(),
        "srun",
        "slurm",
        &[],
        &["salloc", "--ntasks=1", "--quiet"],
        &env,
    );
    assert_eq!(metric(&run, "checksum"), want);
    let line = format!("launcher slurm: 1 agent on {}", cluster.host);
    assert!(drivers(&run).contains(&line), "{:?}", drivers(&run));
    // a runner killed outright (SIGKILL: no clean-up of its own) leaves no job behind: its agents
    // see the control connection close, the srun step ends, and salloc releases the allocation
    let squeue = || {
        let o = Command::new("squeue")
            .args(["-h", "-o", "%i"])
            .env("SLURM_CONF", &conf)
            .output()
            .expect("squeue");
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    // salloc releases its allocation as it exits; slurmctld may list the job (completing) for a
    // moment after that, longer on a loaded host
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !squeue().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(squeue(), "", "jobs left 20 s after the runs");
    // 8 repetitions of 3 s: the run alone would hold the job for 24 s
    let slow = probe_home(3000, 4, false);
    let mut runner = bin()
        .env("INABENCH_HOME", slow.path())
        .env("SLURM_CONF", &conf)
        .args([
            "reproduce",
            "netreduce-probe",
            "--headless",
            "--format",
            "md",
        ])
        .args(["--launcher", "slurm", "--listen", "127.0.0.1", "--results"])
        .arg(slow.path().join("results"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("runner");
    let rows = || {
        std::fs::read_dir(slow.path().join("results"))
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| e.ok())
            .and_then(|e| std::fs::read_to_string(e.path().join("rows.jsonl")).ok())
            .is_some_and(|r| r.contains("\"checksum\""))
    };
    wait_for("the slow run's first row", Duration::from_secs(30), || {
        rows() && !squeue().is_empty()
    });
    runner.kill().expect("kill the runner");
    let _ = runner.wait();
    // the agent finishes its current repetition (at most 3 s), finds the runner gone, and exits
    let killed = Instant::now();
    wait_for(
        "the Slurm job to end after its runner was killed",
        Duration::from_secs(20),
        || squeue().is_empty(),
    );
    assert!(
        killed.elapsed() < Duration::from_secs(10),
        "the job outlived its killed runner by {:?}",
        killed.elapsed()
    );
    drop(cluster);
    eprintln!(
        "slurm launcher test: {:.1} s ({:.1} s to bring the cluster up)",
        t0.elapsed().as_secs_f64(),
        up.as_secs_f64()
    );
}

/// Processes running `inabench agent` that connect to `port`.
fn agents_on(port: u16) -> Vec<u32> {
    let want = format!("127.0.0.1:{port}");
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .filter(|pid| {
                    std::fs::read(format!("/proc/{pid}/cmdline"))
                        .map(|c| {
                            let c = String::from_utf8_lossy(&c).replace('\0', " ");
                            c.contains(" agent --connect ") && c.contains(&want)
                        })
                        .unwrap_or(false)
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn an_interrupted_ssh_run_leaves_no_agent_behind() {
    if !have_sshd() {
        return;
    }
    let home = probe_home(400, 4, false);
    let (_sshd, cfg) = sshd(home.path());
    let hostfile = home.path().join("hosts");
    std::fs::write(&hostfile, "inatest slots=2\n").expect("hostfile");
    let port = free_port();
    let mut runner = ssh_probe(home.path(), &hostfile, &cfg, &home.path().join("results"))
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("runner");
    wait_for("two agents running", Duration::from_secs(20), || {
        agents_on(port).len() == 2
    });
    // SAFETY: kill has no memory preconditions; the pid is our own child.
    unsafe { libc::kill(runner.id() as libc::pid_t, libc::SIGINT) };
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = runner.try_wait().expect("wait") {
            break s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the runner did not stop within 20 s of SIGINT"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(130));
    wait_for(
        "the agents to exit after the interruption",
        Duration::from_secs(5),
        || agents_on(port).is_empty(),
    );
    let run = only_run_dir(&home.path().join("results"));
    assert_eq!(manifest_of(&run)["status"], "incomplete");
}
