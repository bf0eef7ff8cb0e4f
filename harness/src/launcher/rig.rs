//! The `rxe-rig` launcher: agents in the Soft-RoCE rig's guests (tools/rxe-rig), booted by the
//! runner itself, for experiments whose rows span hosts' RDMA devices (netreduce-table1's
//! `roce` row) and that a testbed's `rig:` lists without standing in a workload for them.
//!
//! `start(n)` boots `n` guests (`rig.sh run --guests n --share DIR --host-ip ADDR/PREFIX --
//! COMMAND`) with this binary in the share, waits for each guest's data NIC to come up, listens
//! on the host's address on the rig's bridge, and hands guest `i` its agent command (`exec
//! /mnt/share/inabench agent --connect ADDR --index i --token-stdin`) and the run's token through
//! files in the share (the token in a file only root reads, never on a command line). Each guest
//! runs its agent until the runner tells it to exit; the guests then power off and rig.sh tears
//! the rig down. The rig's process belongs to agent 0 (ended with the agents).

use super::{Agent, ControlListener, LaunchError, Launcher, Proc};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What each guest runs: wait for its agent command in the share, then run it with the token
/// on stdin.
const GUEST_CMD: &str = r#"i=0
while [ ! -f "$RIG_SHARE/cmd-$RIG_GUEST" ] && [ $i -lt 1200 ]; do sleep 0.5; i=$((i+1)); done
sh -c "$(cat "$RIG_SHARE/cmd-$RIG_GUEST")" < "$RIG_SHARE/token-$RIG_GUEST"
echo "agent exited $?"
"#;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RigLauncher {
    /// tools/rxe-rig/rig.sh
    pub script: PathBuf,
    /// The guests booted (one agent each).
    pub guests: usize,
    /// This host's address on the rig's bridge, ADDR/PREFIX (the testbed's runner host's
    /// `data.ipv4`, /24: rig.sh's network).
    pub host_ip: String,
    /// How long the guests may take to boot and bring their NIC up.
    pub boot_timeout: Duration,
    /// How long the agents may take to connect once told to.
    pub connect_timeout: Duration,
    /// rig.sh's own `--timeout` (seconds) for the whole run in the guests.
    pub run_timeout_s: u32,
}

fn config(what: impl Into<String>) -> LaunchError {
    LaunchError::Unreachable(what.into())
}

/// A fresh folder only root reads: the rig's share.
fn share_dir() -> Result<PathBuf, LaunchError> {
    use std::os::unix::fs::DirBuilderExt;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let dir = std::env::temp_dir().join(format!(
        "inabench-rig-share-{}-{nanos:08x}",
        std::process::id()
    ));
    std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
    Ok(dir)
}

/// Write `text` to `dir/name` as rig.sh's guests read it: whole (written aside, then renamed),
/// readable by root only.
fn put(dir: &Path, name: &str, text: &str) -> Result<(), LaunchError> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    std::io::Write::write_all(&mut f, text.as_bytes())?;
    drop(f);
    std::fs::rename(&tmp, dir.join(name))?;
    Ok(())
}

impl Launcher for RigLauncher {
    fn name(&self) -> &'static str {
        "rxe-rig"
    }

    fn agents(&self) -> usize {
        self.guests
    }

    fn on_this_host(&self) -> bool {
        false
    }

    fn start(&self, n: usize) -> Result<Vec<Agent>, LaunchError> {
        if n == 0 || n > self.guests {
            return Err(LaunchError::Config(format!(
                "the rig boots {} guest(s), one agent each; {n} were asked for",
                self.guests
            )));
        }
        let ip = self
            .host_ip
            .split('/')
            .next()
            .unwrap_or_default()
            .to_string();
        let share = share_dir()?;
        std::fs::copy(std::env::current_exe()?, share.join("inabench"))?;
        put(&share, "guest-cmd.sh", GUEST_CMD)?;
        let mut child = Command::new(&self.script)
            .arg("run")
            .args(["--guests", &n.to_string(), "--share"])
            .arg(&share)
            .args(["--host-ip", &self.host_ip])
            .args(["--timeout", &self.run_timeout_s.to_string(), "--"])
            .arg("sh /mnt/share/guest-cmd.sh")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| LaunchError::Spawn {
                cmd: self.script.display().to_string(),
                source,
            })?;
        // rig.sh's log: its run folder, and its last lines for a failure's sentence
        let tail: Arc<Mutex<Vec<String>>> = Arc::default();
        let (tx, rx) = std::sync::mpsc::channel::<PathBuf>();
        if let Some(err) = child.stderr.take() {
            let tail = tail.clone();
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(err).lines().map_while(Result::ok) {
                    if let Some(d) = line.split("run folder ").nth(1) {
                        let _ = tx.send(PathBuf::from(d.trim()));
                    }
                    if let Ok(mut t) = tail.lock() {
                        t.push(line);
                        let k = t.len().saturating_sub(8);
                        t.drain(..k);
                    }
                }
            });
        }
        // rig.sh's trap removes the guests, taps and bridge: give it time to (15 s at most)
        let rig = Arc::new(Proc::new(child, "rig.sh").with_term_grace(Duration::from_secs(15)));
        let last =
            |tail: &Arc<Mutex<Vec<String>>>| tail.lock().map(|t| t.join(" / ")).unwrap_or_default();
        let t0 = Instant::now();
        let run_dir = loop {
            if let Ok(d) = rx.recv_timeout(Duration::from_millis(200)) {
                break d;
            }
            if let Some(status) = rig.exited() {
                return Err(config(format!(
                    "the rig did not boot ({status}): {}",
                    last(&tail)
                )));
            }
            if t0.elapsed() > self.boot_timeout {
                return Err(config(format!(
                    "the rig named no run folder within {:?}: {}",
                    self.boot_timeout,
                    last(&tail)
                )));
            }
        };
        let up = |g: usize| {
            std::fs::read_to_string(run_dir.join(format!("ctl/guest{g}/setup.log")))
                .is_ok_and(|s| s.contains(&format!("guest {g}: data nic")))
        };
        while !(0..n).all(up) {
            if let Some(status) = rig.exited() {
                return Err(config(format!(
                    "the rig ended before its guests were up ({status}): {}",
                    last(&tail)
                )));
            }
            if t0.elapsed() > self.boot_timeout {
                return Err(config(format!(
                    "the rig's guests did not bring their data NIC up within {:?} (run folder {})",
                    self.boot_timeout,
                    run_dir.display()
                )));
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        let control = ControlListener::bind(&format!("{ip}:0"))?;
        let addr = control.local_addr()?;
        for g in 0..n {
            put(
                &share,
                &format!("token-{g}"),
                &format!("{}\n", control.token()),
            )?;
            put(
                &share,
                &format!("cmd-{g}"),
                &format!(
                    "exec /mnt/share/inabench agent --connect {addr} --index {g} --token-stdin\n"
                ),
            )?;
        }
        let agents = control.accept(
            n,
            self.connect_timeout,
            &|i| (i == 0).then(|| rig.clone()),
            &mut |_| match rig.exited() {
                Some(status) => Err(config(format!(
                    "the rig ended before its agents connected back to {addr} ({status}): {}",
                    last(&tail)
                ))),
                None => Ok(()),
            },
        );
        // the share (a copy of this binary) goes once the rig has ended or was ended
        let weak = Arc::downgrade(&rig);
        drop(rig);
        std::thread::spawn(move || {
            while weak.upgrade().is_some_and(|p| p.exited().is_none()) {
                std::thread::sleep(Duration::from_secs(1));
            }
            let _ = std::fs::remove_dir_all(&share);
        });
        agents
    }
}
