//! `inabench doctor`: this machine, the testbed's devices, and for every experiment of the
//! catalogue the fidelity class `reproduce` would pick here and what is missing for a better one.
//!
//! The pick is made by the planner's own function ([`inabench_core::plan::choose_fidelity`]) over
//! the classes [`Equipment::classes`] allows: the workload's implemented classes, with
//! `hardware` only when the devices the experiment needs are where its points run: found by the
//! same probes this report prints, or, where the testbed's `ssh`/`slurm` launcher runs the ranks
//! on its hosts, declared there (`nics:` of kind roce on as many worker hosts as a row has
//! ranks; the report's `RoCE NICs (testbed)` line says they were not probed from here). A run
//! and the doctor therefore cannot disagree (a test compares doctor --json with the manifests of
//! real quick runs; tests/hw_plan.rs the declared case).

use inabench_core::spec::{Fidelity, Spec, Status};
use std::fmt::Write as _;

/// Why one of doctor's probes has no answer; each reads as the sentence a check's detail shows.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The command could not be started.
    #[error("cannot run {name}: {source}")]
    Spawn {
        name: String,
        source: std::io::Error,
    },
    /// Waiting on a started command, or building the probe's runtime, failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The command ran past its limit and was killed.
    #[error("{name} gave no answer in {secs} s")]
    NoAnswer { name: String, secs: u64 },
    /// The command ran and exited non-zero: the command line and its first line of stderr.
    #[error("`{command}`: {stderr}")]
    Failed { command: String, stderr: String },
    /// The experiment catalogue does not load.
    #[error("{0}")]
    Catalog(#[from] inabench_core::catalog::CatalogError),
    /// The P4Runtime switch refused or failed a request.
    #[error("{0}")]
    P4rt(#[from] inabench_p4rt::P4rtError),
    /// The P4Runtime switch gave no answer within the probe's limit.
    #[error("{address} did not answer within {secs} s")]
    Timeout { address: String, secs: u64 },
}

pub struct Check {
    pub name: String,
    pub ok: bool,
    pub detail: String,
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn has_cmd(cmd: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(cmd).is_file()))
        .unwrap_or(false)
}

/// The checks, each a line of the report.
pub fn checks(testbed: Option<&crate::testbed::Testbed>) -> Vec<Check> {
    let host = inabench_core::store::HostFacts::probe(crate::embedded::RUSTC_VERSION);
    let mut v = vec![
        Check {
            name: "cpu".into(),
            ok: true,
            detail: format!("{} ({} cores)", host.cpu_model, host.cores),
        },
        Check {
            name: "memory".into(),
            ok: host.memory_gib > 1.0,
            detail: format!("{:.1} GiB", host.memory_gib),
        },
        Check {
            name: "kernel".into(),
            ok: true,
            detail: host.kernel.clone(),
        },
        Check {
            name: "rustc (build)".into(),
            ok: true,
            detail: host.rustc.clone(),
        },
    ];
    let root = is_root();
    let ip = has_cmd("ip");
    v.push(Check {
        name: "network namespaces".into(),
        ok: root && ip,
        detail: match (root, ip) {
            (true, true) => "root and iproute2: the netns launcher can create hosts".into(),
            (false, _) => "not root: the netns launcher falls back to local".into(),
            (true, false) => {
                "iproute2 (`ip`) not found: the netns launcher falls back to local".into()
            }
        },
    });
    v.push(Check {
        name: "tc".into(),
        ok: has_cmd("tc"),
        detail: if has_cmd("tc") {
            "rate limits with tbf/htb available".into()
        } else {
            "`tc` not found: no per-host rate limits".into()
        },
    });
    // devices: libraries loaded at run time (see drivers/devices)
    let verbs = inabench_devices::verbs::probe();
    v.push(Check {
        name: "RDMA devices (verbs)".into(),
        ok: verbs.usable(),
        detail: verbs.detail,
    });
    let cuda = inabench_devices::cuda::probe();
    v.push(Check {
        name: "GPUs (CUDA)".into(),
        ok: cuda.usable(),
        detail: cuda.detail,
    });
    let nvml = inabench_devices::cuda::probe_nvml();
    v.push(Check {
        name: "GPU power (NVML)".into(),
        ok: nvml.usable(),
        detail: nvml.detail,
    });
    let xrt = match std::env::current_exe() {
        Ok(exe) => inabench_devices::xrt::probe(&exe, std::time::Duration::from_secs(20)),
        Err(e) => inabench_devices::Probe {
            library: None,
            devices: 0,
            detail: format!("cannot locate this executable to run the XRT probe: {e}"),
        },
    };
    v.push(Check {
        name: "FPGA (XRT)".into(),
        ok: xrt.usable(),
        detail: xrt.detail,
    });
    v.push(p4runtime_check(testbed));
    if let Some(p) = testbed.and_then(|t| t.switch.p4runtime.as_ref())
        && !p.programs.is_empty()
    {
        v.push(p4info_check(p));
    }
    // the local launcher: start one agent and have it run the probe
    let t0 = std::time::Instant::now();
    let launcher = crate::launcher::LocalLauncher::new().and_then(|l| {
        use crate::launcher::Launcher;
        l.start(1)
    });
    match launcher {
        Ok(agents) => {
            let n = agents.len();
            for a in agents {
                a.shutdown();
            }
            v.push(Check {
                name: "local launcher".into(),
                ok: n == 1,
                detail: format!(
                    "agent started and answered in {:.0} ms",
                    t0.elapsed().as_secs_f64() * 1e3
                ),
            });
        }
        Err(e) => v.push(Check {
            name: "local launcher".into(),
            ok: false,
            detail: e.to_string(),
        }),
    }
    v
}

/// Run `cmd` for at most `limit`; its output, or why there is none.
fn output_within(
    cmd: &mut std::process::Command,
    limit: std::time::Duration,
) -> Result<std::process::Output, ProbeError> {
    use std::process::Stdio;
    let name = cmd.get_program().to_string_lossy().to_string();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| ProbeError::Spawn {
            name: name.clone(),
            source,
        })?;
    let t = std::time::Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return Ok(child.wait_with_output()?),
            Ok(None) if t.elapsed() < limit => {
                std::thread::sleep(std::time::Duration::from_millis(50))
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(ProbeError::NoAnswer {
                    name,
                    secs: limit.as_secs(),
                });
            }
            Err(e) => return Err(e.into()),
        }
    }
}

fn first_line(b: &[u8]) -> String {
    String::from_utf8_lossy(b)
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
        .to_string()
}

/// The ssh launcher: the client, and whether each host the testbed names answers a
/// non-interactive `ssh host true` (as the launcher runs it: BatchMode, no password prompt).
fn ssh_check(
    testbed: Option<&crate::testbed::Testbed>,
    ssh_config: Option<&std::path::Path>,
) -> Check {
    let name = "ssh launcher".to_string();
    if !has_cmd("ssh") {
        return Check {
            name,
            ok: false,
            detail: "no ssh client (OpenSSH's `ssh`): the ssh launcher cannot start agents".into(),
        };
    }
    let hosts = testbed.map(|t| t.agent_hosts()).unwrap_or_default();
    if hosts.is_empty() {
        return Check {
            name,
            ok: true,
            detail: "ssh client found; the testbed names no worker host with an address (give --hostfile to reproduce)".into(),
        };
    }
    let mut failed = Vec::new();
    for h in hosts.iter().take(16) {
        let mut cmd = std::process::Command::new("ssh");
        if let Some(f) = ssh_config {
            cmd.arg("-F").arg(f);
        }
        let r = output_within(
            cmd.args(["-o", "BatchMode=yes", "-o", "ConnectTimeout=5", h, "true"]),
            std::time::Duration::from_secs(8),
        );
        match r {
            Ok(o) if o.status.success() => {}
            Ok(o) => failed.push(format!("{h} ({})", first_line(&o.stderr))),
            Err(e) => failed.push(format!("{h} ({e})")),
        }
    }
    let tried = hosts.len().min(16);
    Check {
        name,
        ok: failed.is_empty(),
        detail: if failed.is_empty() {
            format!("{tried} of {tried} testbed hosts answer `ssh host true` without a prompt")
        } else {
            format!(
                "{} of {tried} testbed hosts answer `ssh host true` without a prompt; not: {}",
                tried - failed.len(),
                failed.join(", ")
            )
        },
    }
}

/// The slurm launcher: inside an allocation, or a controller that answers `sinfo`.
fn slurm_check() -> Check {
    let name = "slurm launcher".to_string();
    if let Some((job, nodes)) = crate::launcher::slurm::allocation() {
        return Check {
            name,
            ok: has_cmd("srun"),
            detail: format!(
                "inside allocation {job} ({nodes} nodes): --launcher slurm starts agents with srun"
            ),
        };
    }
    if !has_cmd("sinfo") || !has_cmd("srun") {
        return Check {
            name,
            ok: false,
            detail: "no Slurm client (`sinfo`, `srun`): the slurm launcher is not available".into(),
        };
    }
    match output_within(
        std::process::Command::new("sinfo").args(["-h", "-o", "%D %T"]),
        std::time::Duration::from_secs(10),
    ) {
        Ok(o) if o.status.success() => {
            let text = String::from_utf8_lossy(&o.stdout);
            let states: Vec<String> = text
                .lines()
                .filter_map(|l| {
                    let mut f = l.split_whitespace();
                    Some(format!("{} {}", f.next()?, f.next()?))
                })
                .collect();
            Check {
                name,
                ok: !states.is_empty(),
                detail: if states.is_empty() {
                    "the Slurm controller answers but lists no node".into()
                } else {
                    format!(
                        "the Slurm controller answers: nodes {} (--launcher slurm allocates with salloc)",
                        states.join(", ")
                    )
                },
            }
        }
        Ok(o) => Check {
            name,
            ok: false,
            detail: format!(
                "no Slurm controller answers `sinfo`: {}",
                first_line(&o.stderr)
            ),
        },
        Err(e) => Check {
            name,
            ok: false,
            detail: format!("no Slurm controller answers `sinfo`: {e}"),
        },
    }
}

/// A device an experiment's `hardware` class needs, as the paper's testbed had it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Need {
    /// A programmable switch the testbed names with a P4Runtime endpoint that answers.
    P4Switch,
    /// An FPGA board XRT can open.
    Fpga,
    /// An RDMA (RoCE) NIC libibverbs lists.
    Rdma,
    /// A GPU the CUDA driver lists.
    Gpu,
}

impl Need {
    /// A spec's `testbed_devices` kind.
    pub fn from_kind(kind: &str) -> Option<Need> {
        Some(match kind {
            "tofino" => Need::P4Switch,
            "fpga" => Need::Fpga,
            "rdma" => Need::Rdma,
            "gpu" => Need::Gpu,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Need::P4Switch => "a P4Runtime switch (Tofino) in the testbed file",
            Need::Fpga => "an FPGA board (XRT)",
            Need::Rdma => "a RoCE NIC (verbs)",
            Need::Gpu => "a GPU (CUDA)",
        }
    }

    /// The doctor check that decides whether this need is met.
    fn check_name(self) -> &'static str {
        match self {
            Need::P4Switch => "Tofino (P4Runtime)",
            Need::Fpga => "FPGA (XRT)",
            Need::Rdma => "RDMA devices (verbs)",
            Need::Gpu => "GPUs (CUDA)",
        }
    }
}

/// The devices the `hardware` class of an experiment needs: the papers' testbeds.
/// NetReduce (ASPLOS'23, Sec. 6): an FPGA switch prototype, RoCE NICs (ConnectX-5), GPU servers.
/// Libra and SwitchML/ATP baselines: a Tofino switch. P4SGD (TPDS'23): FPGA workers (Alveo) and a
/// Tofino; its GPUSync baselines need GPUs. ALEPH (ToN'24): GPU servers for the training figures.
/// LuWu: GPU servers with RDMA NICs.
/// The spec names them (validated against the same four kinds): per system where
/// `system_devices` lists it, else `testbed_devices`; the experiment's hardware class needs what
/// its systems' rows need together (a host with only RoCE NICs runs netreduce-table1's rows,
/// which need no FPGA and no GPU).
pub fn hardware_needs(spec: &Spec) -> Vec<Need> {
    let mut v: Vec<Need> = spec
        .systems
        .iter()
        .flat_map(|s| hardware_needs_of(spec, s))
        .collect();
    v.sort();
    v.dedup();
    v
}

/// The devices the `hardware` rows of one system of `spec` need.
pub fn hardware_needs_of(spec: &Spec, system: &str) -> Vec<Need> {
    let kinds = spec
        .system_devices
        .get(system)
        .unwrap_or(&spec.testbed_devices);
    let mut v: Vec<Need> = kinds.iter().filter_map(|d| Need::from_kind(d)).collect();
    v.sort();
    v.dedup();
    v
}

/// The devices found, by the probes of [`checks`].
#[derive(Debug, Clone, Default)]
pub struct Devices {
    pub found: std::collections::BTreeSet<Need>,
}

impl Devices {
    pub fn from_checks(checks: &[Check]) -> Devices {
        let found = [Need::P4Switch, Need::Fpga, Need::Rdma, Need::Gpu]
            .into_iter()
            .filter(|n| checks.iter().any(|c| c.name == n.check_name() && c.ok))
            .collect();
        Devices { found }
    }

    /// What of `needs` was not found.
    pub fn missing(&self, needs: &[Need]) -> Vec<Need> {
        needs
            .iter()
            .copied()
            .filter(|n| !self.found.contains(n))
            .collect()
    }
}

/// The classes the planner may choose from for `spec` run by a workload implementing
/// `implemented`: all of them, except `hardware` when the testbed lacks a device of every
/// system's rows. Rows are chosen per system: where some systems' rows have their devices and
/// others' do not, `hardware` is planned and the runner leaves the others' rows out of it
/// (`Plan::leave_out` with [`Equipment::lacks`]: `not checkable here` with what they need).
/// The runner passes the workload's classes to [`inabench_core::plan::plan`]; this is that list
/// with the devices probed on this host applied ([`Equipment::classes`]).
pub fn planner_classes(spec: &Spec, implemented: &[Fidelity], devices: &Devices) -> Vec<Fidelity> {
    Equipment::probed(devices.clone()).classes(spec, implemented, &Rows::ANY)
}

/// Where the devices of a run's `hardware` class are looked for: where its points run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RanksRun {
    /// On this host (in process, the `local` launcher, the Soft-RoCE rig's guests behind this
    /// host): the probes of [`checks`] decide.
    Here,
    /// In agents on the testbed's hosts (the ssh and slurm launchers): the testbed's
    /// declarations decide for the devices the ranks open (its `nics:` of kind roce, its
    /// `gpus:`), this host's probes for what the runner drives itself (the P4Runtime switch,
    /// the FPGA through XRT).
    TestbedHosts,
}

impl RanksRun {
    /// Where the points of a run with the testbed's own `launcher:` run (what `doctor
    /// --testbed` assumes; `reproduce --launcher` may choose otherwise).
    pub fn of_testbed(tb: &crate::testbed::Testbed) -> RanksRun {
        match tb.launcher.as_str() {
            "ssh" | "slurm" if tb.rig.is_none() => RanksRun::TestbedHosts,
            _ => RanksRun::Here,
        }
    }
}

/// What a run's workload says of its systems' `hardware` rows: how many agents a point spans
/// ([`inabench_core::Workload::ranks`]) and whether it runs them at all
/// ([`inabench_core::Workload::not_here`]: netreduce-table1's software host I/O models are
/// emulated only).
#[derive(Clone, Copy)]
pub struct Rows<'w> {
    /// None: one agent a point, every row run (what a spec alone says).
    pub workload: Option<&'w dyn inabench_core::Workload>,
    /// The run's points go to agents.
    pub agents: bool,
}

impl Rows<'_> {
    /// Rows of one agent a point, every one run.
    pub const ANY: Rows<'static> = Rows {
        workload: None,
        agents: false,
    };

    /// How many agents a point of `system` spans.
    pub fn ranks(&self, system: &str) -> usize {
        self.workload.map_or(1, |w| w.ranks(system))
    }

    /// Whether the workload runs `system`'s `hardware` rows.
    pub fn run(&self, system: &str) -> bool {
        self.workload.is_none_or(|w| {
            w.not_here(Fidelity::Hardware, system, self.agents)
                .is_none()
        })
    }
}

/// The devices a run's `hardware` class is planned from, and where they were found: the one
/// decision the planner ([`Equipment::classes`], [`Equipment::lacks`]), the run's devices note
/// ([`Equipment::note`]) and `inabench doctor` read.
#[derive(Debug, Clone, Default)]
pub struct Equipment {
    /// The devices found: probed on this host, or, where the ranks run on the testbed's hosts,
    /// declared there (RoCE NICs, GPUs) and probed here (the switch, the FPGA).
    pub devices: Devices,
    /// Where the ranks run on the testbed's hosts: the RoCE NICs the testbed declares on the
    /// hosts that run agents (role `worker`, or none), in the file's order, as (host, device);
    /// None: the devices were probed on this host.
    pub declared: Option<Vec<(String, String)>>,
}

impl Equipment {
    /// The devices this host's probes found (the ranks run here).
    pub fn probed(devices: Devices) -> Equipment {
        Equipment {
            devices,
            declared: None,
        }
    }

    /// The devices of a run whose points run as `run` says, from this host's `checks` and the
    /// testbed's declarations.
    pub fn of(
        checks: &[Check],
        testbed: Option<&crate::testbed::Testbed>,
        run: RanksRun,
    ) -> Equipment {
        let here = Devices::from_checks(checks);
        let Some(tb) = testbed.filter(|_| run == RanksRun::TestbedHosts) else {
            return Equipment::probed(here);
        };
        let runs_agents = |host: &str| {
            tb.hosts.iter().any(|h| {
                h.name == host && (h.role.is_empty() || h.role.iter().any(|r| r == "worker"))
            })
        };
        let nics: Vec<(String, String)> = crate::launcher::span::testbed_nics(tb)
            .into_iter()
            .filter(|n| runs_agents(&n.host))
            .map(|n| (n.host, n.device))
            .collect();
        let mut found: std::collections::BTreeSet<Need> = here
            .found
            .into_iter()
            .filter(|n| matches!(n, Need::P4Switch | Need::Fpga))
            .collect();
        if !nics.is_empty() {
            found.insert(Need::Rdma);
        }
        if tb.gpus.iter().any(|g| g.count > 0 && runs_agents(&g.host)) {
            found.insert(Need::Gpu);
        }
        Equipment {
            devices: Devices { found },
            declared: Some(nics),
        }
    }

    /// The hosts with a declared RoCE NIC (each once).
    fn declared_hosts(&self) -> Option<Vec<&str>> {
        self.declared.as_ref().map(|nics| {
            let mut hosts: Vec<&str> = Vec::new();
            for (h, _) in nics {
                if !hosts.contains(&h.as_str()) {
                    hosts.push(h);
                }
            }
            hosts
        })
    }

    /// What the `hardware` rows of `system` of `spec`, spanning `ranks` agents, lack here, as
    /// the sentence a row left out shows (`needs an FPGA board (XRT), a GPU (CUDA)`); None: it
    /// has all of it. Where the ranks run on the testbed's hosts, a row that needs a RoCE NIC
    /// needs one on as many hosts as it has ranks.
    pub fn lacks(&self, spec: &Spec, system: &str, ranks: usize) -> Option<String> {
        let needs = hardware_needs_of(spec, system);
        let mut why: Vec<String> = self
            .devices
            .missing(&needs)
            .iter()
            .map(|n| n.as_str().to_string())
            .collect();
        if let Some(hosts) = self.declared_hosts()
            && needs.contains(&Need::Rdma)
        {
            if hosts.is_empty() {
                if let Some(w) = why.iter_mut().find(|w| *w == Need::Rdma.as_str()) {
                    w.push_str(" declared on a worker host of the testbed (`nics:` of kind roce)");
                }
            } else if hosts.len() < ranks {
                why.push(format!(
                    "a RoCE NIC on each of its {ranks} ranks' hosts (the testbed declares one on {} host{}: {})",
                    hosts.len(),
                    if hosts.len() == 1 { "" } else { "s" },
                    self.nic_list()
                ));
            }
        }
        (!why.is_empty()).then(|| format!("needs {}", why.join(", ")))
    }

    /// The systems of `spec` whose `hardware` rows can run here: the workload runs them and
    /// their devices are where their ranks run; in the spec's order.
    pub fn equipped<'a>(&self, spec: &'a Spec, rows: &Rows<'_>) -> Vec<&'a str> {
        spec.systems
            .iter()
            .filter(|s| rows.run(s) && self.lacks(spec, s, rows.ranks(s)).is_none())
            .map(String::as_str)
            .collect()
    }

    /// The classes the planner may choose from for `spec` run by a workload implementing
    /// `implemented`: all of them, except `hardware` when no system's rows can run here.
    pub fn classes(&self, spec: &Spec, implemented: &[Fidelity], rows: &Rows<'_>) -> Vec<Fidelity> {
        let any = !self.equipped(spec, rows).is_empty();
        implemented
            .iter()
            .copied()
            .filter(|f| *f != Fidelity::Hardware || any)
            .collect()
    }

    /// `node0 mlx5_0, node1 mlx5_1`: the declared RoCE NICs.
    fn nic_list(&self) -> String {
        join(
            self.declared
                .iter()
                .flatten()
                .map(|(h, d)| format!("{h} {d}")),
        )
    }

    /// Where the devices were found, where they were not probed here: one sentence (None: the
    /// probes of this host).
    pub fn source(&self) -> Option<String> {
        let nics = self.declared.as_ref()?;
        Some(if nics.is_empty() {
            "the ranks run on the testbed's hosts, which declare no RoCE NIC (`nics:` of kind roce on a worker host); this host's own devices are not theirs".to_string()
        } else {
            format!(
                "hardware planned from the testbed's declared NICs: {} (not probed from this host; each rank opens its own)",
                self.nic_list()
            )
        })
    }

    /// The run's devices note (the manifest's `fidelity_reason` carries it): which systems'
    /// `hardware` rows can run, what the others need, and where the devices were found.
    pub fn note(&self, spec: &Spec, rows: &Rows<'_>) -> String {
        let equipped = self.equipped(spec, rows);
        let run: Vec<&String> = spec.systems.iter().filter(|s| rows.run(s)).collect();
        let mut note = if !equipped.is_empty() && equipped.len() == run.len() {
            "the testbed has the devices hardware needs".to_string()
        } else if equipped.is_empty() {
            let mut lacks: Vec<String> = Vec::new();
            for l in run
                .iter()
                .filter_map(|s| self.lacks(spec, s, rows.ranks(s)))
            {
                if !lacks.contains(&l) {
                    lacks.push(l);
                }
            }
            if lacks.is_empty() {
                "its workload runs no row in the hardware class".to_string()
            } else {
                format!("hardware {}", lacks.join("; "))
            }
        } else {
            format!(
                "hardware runs the rows whose devices the testbed has: {}",
                equipped.join(", ")
            )
        };
        if let Some(s) = self.source() {
            note.push_str("; ");
            note.push_str(&s);
        }
        note
    }
}

/// Doctor's word on one experiment.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Verdict {
    pub experiment: String,
    /// `implemented` or `planned`
    pub status: String,
    pub workload: Option<String>,
    /// The class `reproduce` (without --fidelity) picks here; None: it cannot run here.
    pub pick: Option<Fidelity>,
    /// One sentence: why this class, or why none.
    pub reason: String,
    /// Each class the spec prefers to the pick, with what is missing for it.
    pub better: Vec<Better>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Better {
    pub class: Fidelity,
    pub missing: String,
}

fn join<T: AsRef<str>>(v: impl IntoIterator<Item = T>) -> String {
    v.into_iter()
        .map(|s| s.as_ref().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The verdict for one spec, given what its workload implements (None: no workload registered),
/// with the devices probed on this host.
pub fn verdict(spec: &Spec, implemented: Option<&[Fidelity]>, devices: &Devices) -> Verdict {
    verdict_with(
        spec,
        implemented,
        &Equipment::probed(devices.clone()),
        &Rows::ANY,
    )
}

/// The verdict for one spec with the run's [`Equipment`] and what its workload says of its
/// rows ([`Rows`]).
pub fn verdict_with(
    spec: &Spec,
    implemented: Option<&[Fidelity]>,
    equipment: &Equipment,
    rows: &Rows<'_>,
) -> Verdict {
    let devices = &equipment.devices;
    let needs = hardware_needs(spec);
    let mut v = Verdict {
        experiment: spec.id.clone(),
        status: match spec.status {
            Status::Implemented => "implemented",
            Status::Planned => "planned",
        }
        .into(),
        workload: spec.workload.clone(),
        pick: None,
        reason: String::new(),
        better: Vec::new(),
    };
    let implemented = match (spec.status, implemented) {
        (Status::Planned, _) => {
            v.reason = "planned: its systems are not implemented in this version".into();
            &[][..]
        }
        (Status::Implemented, None) => {
            v.reason = format!(
                "its workload `{}` is not in this binary",
                spec.workload.as_deref().unwrap_or("")
            );
            &[][..]
        }
        (Status::Implemented, Some(i)) => i,
    };
    let available = equipment.classes(spec, implemented, rows);
    if !implemented.is_empty() {
        match inabench_core::plan::choose_fidelity(spec, None, &available) {
            Ok(f) => {
                v.pick = Some(f);
                v.reason = format!(
                    "the best class of [{}] that `{}` implements ({}) and this testbed allows",
                    join(spec.fidelity.iter().map(|f| f.as_str())),
                    spec.workload.as_deref().unwrap_or(""),
                    join(implemented.iter().map(|f| f.as_str()))
                );
                if f == Fidelity::Hardware {
                    let left: Vec<String> = spec
                        .systems
                        .iter()
                        .filter_map(|s| {
                            equipment
                                .lacks(spec, s, rows.ranks(s))
                                .map(|w| format!("{s}'s rows {w}"))
                        })
                        .collect();
                    if !left.is_empty() {
                        v.reason += &format!("; not checkable here: {}", left.join("; "));
                    }
                }
            }
            Err(e) => v.reason = e.to_string(),
        }
    }
    for f in &spec.fidelity {
        if Some(*f) == v.pick {
            break;
        }
        let mut why = Vec::new();
        if !implemented.contains(f) {
            why.push(match (spec.status, spec.workload.as_deref()) {
                (Status::Planned, _) | (_, None) => "not implemented yet".to_string(),
                (_, Some(w)) => format!("`{w}` does not implement it"),
            });
        }
        if *f == Fidelity::Hardware {
            let miss = devices.missing(&needs);
            if needs.is_empty() {
                why.push("the devices it needs are not probed by this version".into());
            } else if !miss.is_empty() {
                why.push(format!(
                    "this testbed lacks {}",
                    join(miss.iter().map(|n| n.as_str()))
                ));
            } else if equipment.equipped(spec, rows).is_empty() {
                // every device is there, not on enough of the ranks' hosts
                why.push(join(spec.systems.iter().filter_map(|s| {
                    equipment
                        .lacks(spec, s, rows.ranks(s))
                        .map(|w| format!("{s}'s rows {w}"))
                })));
            }
        }
        v.better.push(Better {
            class: *f,
            missing: why.join("; "),
        });
    }
    v
}

/// The verdicts for every experiment of the catalogue with a run's [`Equipment`].
pub fn verdicts_with(
    catalog: &inabench_core::catalog::Catalog,
    registry: &crate::registry::Registry,
    equipment: &Equipment,
    agents: bool,
) -> Vec<Verdict> {
    catalog
        .entries
        .iter()
        .map(|e| {
            let w = e.spec.workload.as_deref().and_then(|id| registry.get(id));
            let rows = Rows {
                workload: w,
                agents,
            };
            verdict_with(&e.spec, w.map(|w| w.fidelities()), equipment, &rows)
        })
        .collect()
}

fn all_verdicts(
    checks: &[Check],
    testbed: Option<&crate::testbed::Testbed>,
) -> Result<Vec<Verdict>, ProbeError> {
    let cat = crate::paths::catalog()?;
    let reg = crate::registry::Registry::builtin();
    // `reproduce` runs points in agents with the testbed's ssh or slurm launcher, or its rig
    let agents = testbed
        .is_some_and(|t| RanksRun::of_testbed(t) == RanksRun::TestbedHosts || t.rig.is_some());
    Ok(verdicts_with(
        &cat,
        &reg,
        &doctor_equipment(checks, testbed),
        agents,
    ))
}

/// The devices doctor plans from: where the testbed's own `launcher:` runs the points.
fn doctor_equipment(checks: &[Check], testbed: Option<&crate::testbed::Testbed>) -> Equipment {
    Equipment::of(
        checks,
        testbed,
        testbed.map_or(RanksRun::Here, RanksRun::of_testbed),
    )
}

/// The checks and the verdicts as JSON: one array; checks are `{"kind": "check", "name", "ok",
/// "detail"}`, experiments `{"kind": "experiment", "name": "experiment ID", "ok": picked,
/// "detail", "experiment", "status", "workload", "pick", "reason", "better": [{"class",
/// "missing"}]}`.
/// The multi-host launchers (doctor only: a run does not wait for ssh or Slurm to answer).
pub fn launcher_checks(
    testbed: Option<&crate::testbed::Testbed>,
    ssh_config: Option<&std::path::Path>,
) -> Vec<Check> {
    vec![ssh_check(testbed, ssh_config), slurm_check()]
}

/// What the emulated testbeds and the dissector need, probed for real (doctor only).
pub fn tool_checks() -> Vec<Check> {
    let mut v = Vec::new();
    if is_root() && has_cmd("ip") && has_cmd("tc") {
        v.push(veth_tbf_check());
    }
    v.push(match inabench_xdp::unavailable() {
        None => Check {
            name: "XDP (clang, libbpf)".into(),
            ok: true,
            detail: "clang and libbpf.so.1 found: ALEPH's data plane runs at the XDP hook".into(),
        },
        Some(why) => Check {
            name: "XDP (clang, libbpf)".into(),
            ok: false,
            detail: format!("{why}: ALEPH's XDP experiments are not runnable"),
        },
    });
    v.push(if has_cmd("tshark") {
        let version = output_within(
            std::process::Command::new("tshark").arg("--version"),
            std::time::Duration::from_secs(10),
        )
        .map(|o| first_line(&o.stdout))
        .unwrap_or_else(|e| e.to_string());
        Check {
            name: "tshark".into(),
            ok: true,
            detail: format!("{version}: dissects the --pcap captures"),
        }
    } else {
        Check {
            name: "tshark".into(),
            ok: false,
            detail:
                "not found (Debian `tshark`): --pcap captures are written but not dissected here"
                    .into(),
        }
    });
    v
}

/// Make a veth pair with a tbf qdisc on one end, and remove it.
fn veth_tbf_check() -> Check {
    let a = format!("inbd{:x}a", std::process::id() % 0x00ff_ffff);
    let b = format!("inbd{:x}b", std::process::id() % 0x00ff_ffff);
    let run = |args: &[&str]| -> Result<(), ProbeError> {
        let o = output_within(
            std::process::Command::new(args[0]).args(&args[1..]),
            std::time::Duration::from_secs(10),
        )?;
        if o.status.success() {
            Ok(())
        } else {
            Err(ProbeError::Failed {
                command: args.join(" "),
                stderr: first_line(&o.stderr),
            })
        }
    };
    let r = run(&["ip", "link", "add", &a, "type", "veth", "peer", "name", &b]).and_then(|()| {
        let tbf = run(&[
            "tc", "qdisc", "add", "dev", &a, "root", "tbf", "rate", "100mbit", "burst", "32kb",
            "latency", "10ms",
        ]);
        let _ = run(&["ip", "link", "del", &a]);
        tbf
    });
    Check {
        name: "veth and tbf".into(),
        ok: r.is_ok(),
        detail: match r {
            Ok(()) => "a veth pair with a tbf rate limit was made and removed".into(),
            Err(e) => e.to_string(),
        },
    }
}

/// Everything doctor prints: the run's checks, then the tools and launchers (doctor only).
fn doctor_checks(
    testbed: Option<&crate::testbed::Testbed>,
    ssh_config: Option<&std::path::Path>,
) -> Vec<Check> {
    let mut checks = checks(testbed);
    checks.extend(tool_checks());
    checks.extend(launcher_checks(testbed, ssh_config));
    // where the ranks run on the testbed's hosts, their NICs are the testbed's word, not a probe
    let equipment = doctor_equipment(&checks, testbed);
    if let (Some(nics), Some(source)) = (&equipment.declared, equipment.source()) {
        if let Some(c) = checks
            .iter_mut()
            .find(|c| c.name == Need::Rdma.check_name())
        {
            c.detail
                .push_str(" (this host's own probe; the ranks run on the testbed's hosts)");
        }
        checks.push(Check {
            name: "RoCE NICs (testbed)".into(),
            ok: !nics.is_empty(),
            detail: source,
        });
    }
    checks
}

pub fn json(
    testbed: Option<&crate::testbed::Testbed>,
    ssh_config: Option<&std::path::Path>,
) -> String {
    let checks = doctor_checks(testbed, ssh_config);
    let mut v: Vec<serde_json::Value> = checks
        .iter()
        .map(|c| serde_json::json!({"kind": "check", "name": c.name, "ok": c.ok, "detail": c.detail}))
        .collect();
    match all_verdicts(&checks, testbed) {
        Ok(vs) => {
            for x in vs {
                let detail = verdict_line(&x);
                let mut o = serde_json::to_value(&x).unwrap_or_default();
                if let Some(m) = o.as_object_mut() {
                    m.insert("kind".into(), "experiment".into());
                    m.insert("name".into(), format!("experiment {}", x.experiment).into());
                    m.insert("ok".into(), x.pick.is_some().into());
                    m.insert("detail".into(), detail.into());
                }
                v.push(o);
            }
        }
        Err(e) => v.push(
            serde_json::json!({"kind": "check", "name": "catalogue", "ok": false, "detail": e.to_string()}),
        ),
    }
    serde_json::Value::Array(v).to_string()
}

fn verdict_line(v: &Verdict) -> String {
    let mut s = match v.pick {
        Some(f) => format!("{f}"),
        None => format!("cannot run here: {}", v.reason),
    };
    for b in &v.better {
        let _ = write!(s, "; {}: {}", b.class, b.missing);
    }
    s
}

/// The report as text.
pub fn report(
    testbed: Option<&crate::testbed::Testbed>,
    ssh_config: Option<&std::path::Path>,
) -> String {
    let checks = doctor_checks(testbed, ssh_config);
    let mut s = String::from("inabench doctor\n\nThis machine:\n");
    for c in &checks {
        let _ = writeln!(
            s,
            "  [{}] {:<20} {}",
            if c.ok { "ok" } else { "--" },
            c.name,
            c.detail
        );
    }
    let devices = doctor_equipment(&checks, testbed).devices;
    s.push_str("\nFidelity classes:\n");
    for f in Fidelity::ALL {
        let (avail, why) = match f {
            Fidelity::Hardware => (
                !devices.found.is_empty(),
                "needs the testbed's devices (Tofino via P4Runtime, FPGA via XRT, RoCE NICs, GPUs)",
            ),
            Fidelity::Emulated => (
                true,
                "software fabrics on this host (mem, udp; netns needs root)",
            ),
            Fidelity::Simulated => (true, "discrete-event fabric in virtual time"),
            Fidelity::Modelled => (true, "closed-form and flow-level models"),
            Fidelity::Functional => (true, "hardware-independent computation"),
        };
        let _ = writeln!(
            s,
            "  {:<11} {}  {}",
            f.as_str(),
            if avail { "available  " } else { "unavailable" },
            why
        );
    }
    s.push_str("\nExperiments (the class `reproduce` picks here; what a better class needs):\n");
    match all_verdicts(&checks, testbed) {
        Ok(vs) => {
            for v in vs {
                let pick = v.pick.map_or("-", |f| f.as_str());
                let _ = writeln!(s, "  {:<24} {:<11} {}", v.experiment, pick, {
                    let mut d = if v.pick.is_none() {
                        v.reason.clone()
                    } else {
                        String::new()
                    };
                    for b in &v.better {
                        if !d.is_empty() {
                            d.push_str("; ");
                        }
                        let _ = write!(d, "{}: {}", b.class, b.missing);
                    }
                    d
                });
            }
        }
        Err(e) => {
            let _ = writeln!(s, "  the catalogue does not load: {e}");
        }
    }
    s.push_str(
        "\nClaims this host cannot check (their `needs:`; checked in the other classes instead):\n",
    );
    let _ = write!(s, "{}", claim_needs_lines());
    s
}

/// The claims whose `needs:` this host does not meet, one line each.
pub fn claim_needs_lines() -> String {
    let mut s = String::new();
    let host = inabench_core::store::HostFacts::probe("");
    let Ok(cat) = crate::paths::catalog() else {
        return "  the catalogue does not load\n".into();
    };
    let mut n = 0;
    for e in &cat.entries {
        for c in &e.spec.claims {
            let Some(needs) = &c.needs else { continue };
            let classes: Vec<Fidelity> = if c.fidelity.is_empty() {
                e.spec.fidelity.clone()
            } else {
                c.fidelity.clone()
            };
            for f in classes.iter().filter(|f| needs.classes.contains(f)) {
                if let Some(why) = inabench_report::analysis::unmet_needs(needs, *f, &host) {
                    n += 1;
                    let _ = writeln!(
                        s,
                        "  {:<24} {:<30} {:<10} {why}",
                        e.spec.id,
                        c.id,
                        f.as_str()
                    );
                }
            }
        }
    }
    if n == 0 {
        s.push_str("  none\n");
    }
    s
}

/// The testbed's P4Runtime switch: reachable, which API version, whether a pipeline is loaded.
fn p4runtime_check(testbed: Option<&crate::testbed::Testbed>) -> Check {
    let name = "Tofino (P4Runtime)".to_string();
    let Some(p) = testbed.and_then(|t| t.switch.p4runtime.as_ref()) else {
        return Check {
            name,
            ok: false,
            detail:
                "no P4Runtime endpoint in the testbed: switch rows use the software switch models"
                    .into(),
        };
    };
    let probe = || -> Result<String, ProbeError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async {
            let fut = async {
                let mut c = inabench_p4rt::client::Controller::connect(
                    &p.address,
                    p.device_id,
                    (p.election_id[0], p.election_id[1]),
                )
                .await?;
                let v = c.capabilities().await?;
                let pipeline = match c.get_pipeline().await {
                    Ok(cfg) => cfg
                        .p4info
                        .and_then(|i| i.pkg_info)
                        .map_or("a pipeline without a name".to_string(), |k| {
                            format!("pipeline `{}`", k.name)
                        }),
                    Err(_) => "no pipeline loaded".to_string(),
                };
                Ok::<String, ProbeError>(format!(
                    "{} (device {}): P4Runtime {v}, {pipeline}",
                    p.address, p.device_id
                ))
            };
            tokio::time::timeout(std::time::Duration::from_secs(5), fut)
                .await
                .map_err(|_| ProbeError::Timeout {
                    address: p.address.clone(),
                    secs: 5,
                })?
        })
    };
    match probe() {
        Ok(d) => Check {
            name,
            ok: true,
            detail: d,
        },
        Err(e) => Check {
            name,
            ok: false,
            detail: e.to_string(),
        },
    }
}

/// The testbed's P4Info files: each parses and matches the suite's description of its program.
fn p4info_check(p: &crate::testbed::P4Runtime) -> Check {
    let mut problems = Vec::new();
    let mut ok = Vec::new();
    for (system, prog) in &p.programs {
        let Some(path) = prog.p4info.as_deref() else {
            continue;
        };
        let Some(desc) = crate::p4switch::program_of(system) else {
            problems.push(format!("`{system}` has no switch program in this suite"));
            continue;
        };
        match inabench_p4rt::p4info::load(std::path::Path::new(path)) {
            Ok(l) => match inabench_p4rt::p4info::check(&l.info, &desc) {
                Ok(()) => ok.push(format!("{system}: {path} matches")),
                Err(e) => problems.push(format!("{system}: {path}: {e}")),
            },
            Err(e) => problems.push(format!("{system}: {e}")),
        }
    }
    Check {
        name: "P4Info files".into(),
        ok: problems.is_empty(),
        detail: if problems.is_empty() {
            ok.join("; ")
        } else {
            problems.join("; ")
        },
    }
}

#[cfg(test)]
mod device_need_tests {
    use super::*;

    fn spec(extra: &str) -> Result<Spec, inabench_core::spec::SpecError> {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../experiments/netreduce/table1.yaml"
        ))
        .expect("table1.yaml");
        Spec::from_yaml(
            std::path::Path::new("table1.yaml"),
            &format!("{text}{extra}"),
        )
    }

    /// netreduce-table1's rows need a RoCE NIC (its system_devices), not the FPGA and the GPUs of
    /// the paper's testbed (its testbed_devices): a host with only RoCE NICs may plan its
    /// hardware class, a host without one may not; a system left out of system_devices needs
    /// testbed_devices.
    #[test]
    fn a_systems_own_devices_decide_what_its_rows_need() {
        let t1 = spec("").expect("table1 valid");
        assert_eq!(hardware_needs(&t1), [Need::Rdma]);
        assert_eq!(hardware_needs_of(&t1, "roce"), [Need::Rdma]);
        let rdma_only = Devices {
            found: [Need::Rdma].into_iter().collect(),
        };
        let all = [Fidelity::Hardware, Fidelity::Emulated];
        assert_eq!(planner_classes(&t1, &all, &rdma_only), all);
        assert_eq!(
            planner_classes(&t1, &all, &Devices::default()),
            [Fidelity::Emulated]
        );
        // without its system_devices the same spec asks for the paper's whole testbed
        let mut whole = t1.clone();
        whole.system_devices.clear();
        assert_eq!(hardware_needs(&whole), [Need::Fpga, Need::Rdma, Need::Gpu]);
        assert_eq!(
            planner_classes(&whole, &all, &rdma_only),
            [Fidelity::Emulated]
        );
        // one system left to testbed_devices brings them back for the experiment
        let mut one = t1.clone();
        one.system_devices.remove("dpdk");
        assert_eq!(
            hardware_needs_of(&one, "dpdk"),
            [Need::Fpga, Need::Rdma, Need::Gpu]
        );
        assert_eq!(hardware_needs(&one), [Need::Fpga, Need::Rdma, Need::Gpu]);
    }

    #[test]
    fn system_devices_name_listed_systems_and_known_kinds_with_file_line_field() {
        // table1.yaml carries system_devices; the texts below change one entry of it
        let base = spec("").expect("valid");
        assert!(!base.system_devices.is_empty());
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../experiments/netreduce/table1.yaml"
        ))
        .expect("table1.yaml");
        let bad_sys = text.replacen("  parallel_dma: [rdma]", "  parallel_dmaa: [rdma]", 1);
        let e = Spec::from_yaml(std::path::Path::new("table1.yaml"), &bad_sys)
            .expect_err("an unknown system")
            .to_string();
        assert!(
            e.contains("system_devices.parallel_dmaa") && e.contains("is not in `systems`"),
            "{e}"
        );
        let bad_kind = text.replacen("  parallel_dma: [rdma]", "  parallel_dma: [nic]", 1);
        let e = Spec::from_yaml(std::path::Path::new("table1.yaml"), &bad_kind)
            .expect_err("an unknown kind")
            .to_string();
        assert!(
            e.starts_with("table1.yaml:")
                && e.contains("`nic` is not one of tofino, fpga, rdma, gpu"),
            "{e}"
        );
    }

    /// Where the ranks run decides where the devices are looked for: the testbed's `ssh` or
    /// `slurm` launcher runs them on its hosts (their declarations: RoCE NICs and GPUs on
    /// worker hosts, the switch from this host's probe); `local`, and the Soft-RoCE rig (its
    /// guests' rxe devices, behind this host, whatever its launcher), run them here.
    #[test]
    fn the_ranks_hosts_decide_where_devices_are_looked_for() {
        let tb = |launcher: &str, rig: bool| {
            let rig = if rig {
                "rig: {kind: rxe, script: rig.sh, experiments: [netreduce-table1]}\n"
            } else {
                ""
            };
            crate::testbed::Testbed::from_yaml(
                std::path::Path::new("t.yaml"),
                &format!(
                    "name: t\nhosts:\n  - {{name: sw, role: [switch]}}\n  - {{name: node0, role: [worker]}}\n  - {{name: node1}}\nnics:\n  - {{host: sw, kind: roce, device: mlx5_7, rate_gbps: 100}}\n  - {{host: node0, kind: roce, device: mlx5_0, rate_gbps: 100}}\n  - {{host: node1, kind: ethernet, device: eth1, rate_gbps: 100}}\ngpus:\n  - {{host: node1, count: 2}}\nlauncher: {launcher}\n{rig}"
                ),
            )
            .expect("testbed")
        };
        assert_eq!(
            RanksRun::of_testbed(&tb("ssh", false)),
            RanksRun::TestbedHosts
        );
        assert_eq!(
            RanksRun::of_testbed(&tb("slurm", false)),
            RanksRun::TestbedHosts
        );
        assert_eq!(RanksRun::of_testbed(&tb("local", false)), RanksRun::Here);
        assert_eq!(RanksRun::of_testbed(&tb("ssh", true)), RanksRun::Here);
        let probe = |rdma: bool, p4: bool| {
            vec![
                Check {
                    name: "RDMA devices (verbs)".into(),
                    ok: rdma,
                    detail: String::new(),
                },
                Check {
                    name: "Tofino (P4Runtime)".into(),
                    ok: p4,
                    detail: String::new(),
                },
            ]
        };
        let t = tb("ssh", false);
        // declared: node0's NIC (the switch host runs no rank; node1's is Ethernet), node1's
        // GPUs, the switch as probed; this host's RDMA device is not the ranks'
        let e = Equipment::of(&probe(true, true), Some(&t), RanksRun::TestbedHosts);
        assert_eq!(e.declared, Some(vec![("node0".into(), "mlx5_0".into())]));
        assert_eq!(
            e.devices.found,
            [Need::P4Switch, Need::Rdma, Need::Gpu]
                .into_iter()
                .collect()
        );
        let e = Equipment::of(&probe(true, false), Some(&t), RanksRun::Here);
        assert_eq!(e.declared, None);
        assert_eq!(e.devices.found, [Need::Rdma].into_iter().collect());
        assert_eq!(e.source(), None);
    }
}
