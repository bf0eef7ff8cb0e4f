//! `inabench`: rerun the experiments of in-network aggregation papers.

use anyhow::{Context, Result, anyhow, bail};
use clap::{Parser, Subcommand};
use inabench::registry::Registry;
use inabench::runner::{self, Placement, RunRequest};
use inabench::{doctor, headless, launcher, paths, scoreboard};
use inabench_core::catalog::Catalog;
use inabench_core::spec::{Fidelity, Status};
use inabench_core::store::{self, RunStatus};
use inabench_report::{Format, write_reports};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

#[derive(Parser)]
#[command(
    name = "inabench",
    version,
    about = "Rerun the experiments of in-network aggregation papers and check their claims"
)]
struct Cli {
    /// Results folder (default: <repo>/results, or $INABENCH_RESULTS)
    #[arg(long, global = true)]
    results: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

// parsed once per process: the size of `Reproduce` does not matter
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Cmd {
    /// List every experiment of the catalogue
    List {
        /// Only this paper's (netreduce, libra, aleph, p4sgd, luwu)
        #[arg(long)]
        paper: Option<String>,
    },
    /// Describe an experiment: what it measures, parameters, the paper's values, claims
    Show { id: String },
    /// Check every spec (or the given files) against the schema
    Validate { files: Vec<PathBuf> },
    /// Plan, run, store, analyse and report experiments
    Reproduce {
        /// Experiment ids (see `inabench list`)
        #[arg(required_unless_present = "all")]
        ids: Vec<String>,
        /// Every implemented experiment of the catalogue, one after the other, ending with the
        /// scoreboard
        #[arg(long, conflicts_with = "ids")]
        all: bool,
        /// quick (CI scale) or full (the paper's scale)
        #[arg(long, default_value = "quick")]
        profile: String,
        /// Classes to run, comma-separated: hardware, emulated, simulated, modelled, functional
        /// (default: every class the spec declares that this machine and testbed can run)
        #[arg(long)]
        fidelity: Option<String>,
        /// Testbed file (default: the embedded software testbed, experiments/testbeds/local.yaml)
        #[arg(long)]
        testbed: Option<PathBuf>,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Log lines and progress on stderr instead of the dashboard
        #[arg(long)]
        headless: bool,
        /// Finish an interrupted run (a run id, a unique prefix, or `latest`)
        #[arg(long)]
        resume: Option<String>,
        /// Where points run: inproc (the runner's thread), local (an agent process), ssh (agents on
        /// the hostfile's hosts) or slurm (agents as srun tasks); default: the testbed's launcher
        /// when it is ssh or slurm, else inproc
        #[arg(long)]
        launcher: Option<String>,
        /// ssh launcher: hosts, one a line, optionally `slots=N` (default: the testbed's hosts
        /// with an address)
        #[arg(long)]
        hostfile: Option<PathBuf>,
        /// ssh launcher: an ssh configuration file (`ssh -F`) instead of the user's
        #[arg(long)]
        ssh_config: Option<PathBuf>,
        /// ssh and slurm launchers: the address (ip or ip:port) agents connect back to (default:
        /// the testbed's runner host's address, else one this host reaches the hosts from)
        #[arg(long)]
        listen: Option<String>,
        /// slurm launcher: how many agents (tasks); default one per node of the allocation
        #[arg(long)]
        agents: Option<usize>,
        /// Report formats to write
        #[arg(long, default_value = "html,pdf,md,json")]
        format: String,
        /// Write the frames of every all-reduce to pcap files in this folder (sim fabric)
        #[arg(long)]
        pcap: Option<PathBuf>,
        /// The host costs the simulated and modelled classes charge (default: the reference
        /// profile, experiments/hosts/reference.yaml; `inabench calibrate` writes this machine's)
        #[arg(long, value_name = "FILE")]
        host_profile: Option<PathBuf>,
    },
    /// Measure this machine's host costs (each software client's cost per frame, interleaved
    /// over the systems) and write them as a host profile for `reproduce --host-profile`
    Calibrate {
        /// Where to write the profile (default: <results>/host-<machine>.yaml)
        #[arg(long)]
        out: Option<PathBuf>,
        /// Measurements per system
        #[arg(long, default_value_t = 9)]
        reps: u32,
    },
    /// List past runs
    Runs,
    /// Every claim of every experiment, from the latest run of each, per class
    Scoreboard {
        /// Also write an HTML page with links to each run's report (default:
        /// <results>/scoreboard.html)
        #[arg(long)]
        html: Option<PathBuf>,
        /// Only this paper's experiments
        #[arg(long)]
        paper: Option<String>,
        /// Write the verdict ledger (one `experiment claim class verdict` line per verdict) to
        /// this file, e.g. experiments/verdicts.ledger
        #[arg(long)]
        ledger: Option<PathBuf>,
    },
    /// Rebuild the report of a stored run
    Report {
        /// A run id, a unique prefix of one, or `latest`
        run: String,
        #[arg(long, default_value = "html,pdf,md,json")]
        format: String,
    },
    /// This machine and what each fidelity class needs
    Doctor {
        /// Testbed file to probe (its P4Runtime switch, ...); default: the software testbed
        #[arg(long)]
        testbed: Option<PathBuf>,
        /// Print the checks as JSON
        #[arg(long)]
        json: bool,
        /// An ssh configuration file (`ssh -F`) for checking the testbed's hosts
        #[arg(long)]
        ssh_config: Option<PathBuf>,
    },
    /// Serve the software switch's P4Runtime service (what a testbed's `p4runtime` can name
    /// when there is no Tofino), until interrupted
    SoftSwitch {
        /// Address to listen on
        #[arg(long, default_value = "127.0.0.1:9559")]
        listen: String,
        /// P4Runtime device id
        #[arg(long, default_value_t = 1)]
        device_id: u64,
    },
    /// (internal) one node of a `udp` fabric run, started by the runner
    #[command(name = "__fabric-node", hide = true)]
    FabricNode,
    /// (internal) XRT's device calls, in a process of their own (doctor runs it)
    #[command(name = "__probe-xrt", hide = true)]
    ProbeXrt,
    /// (internal) an agent started by a launcher
    #[command(hide = true)]
    Agent {
        #[arg(long)]
        connect: String,
        /// default: SLURM_PROCID (slurm tasks), else 0
        #[arg(long)]
        index: Option<usize>,
        /// read the run's token from the first line of stdin (ssh) instead of
        /// INABENCH_AGENT_TOKEN
        #[arg(long)]
        token_stdin: bool,
    },
}

fn main() {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::exit(2);
        }
    }
}

fn run(cli: Cli) -> Result<i32> {
    let results = paths::results_dir(cli.results.as_deref());
    match cli.cmd {
        Cmd::List { paper } => list(paper.as_deref()),
        Cmd::Show { id } => show(&id),
        Cmd::Validate { files } => validate(&files),
        Cmd::Reproduce {
            ids,
            all,
            profile,
            fidelity,
            testbed,
            seed,
            headless,
            resume,
            launcher,
            hostfile,
            ssh_config,
            listen,
            agents,
            format,
            pcap,
            host_profile,
        } => {
            // read and checked against the reference before anything runs (one sentence with
            // file, line and field); handed to the workloads through their point context
            let host_profile = inabench::hostprofile::load(host_profile.as_deref())?;
            // handed to the workloads through their point context (and to agents in each job)
            let capture_dir = match pcap {
                Some(dir) => {
                    std::fs::create_dir_all(&dir).with_context(|| {
                        format!("cannot create the pcap folder {}", dir.display())
                    })?;
                    Some(dir.canonicalize().unwrap_or(dir))
                }
                None => None,
            };
            let fidelity: Vec<Fidelity> = match fidelity {
                None => Vec::new(),
                Some(list) => list
                    .split(',')
                    .map(str::trim)
                    .filter(|f| !f.is_empty())
                    .map(|f| Fidelity::parse(f).ok_or_else(|| anyhow!("`{f}` is not a fidelity class (hardware, emulated, simulated, modelled, functional)")))
                    .collect::<Result<_>>()?,
            };
            let ids = if all {
                let cat = load_catalog()?;
                for e in &cat.invalid {
                    eprintln!("warning: skipping an invalid spec: {e}");
                }
                cat.entries
                    .iter()
                    .filter(|e| e.spec.status == inabench_core::spec::Status::Implemented)
                    .map(|e| e.spec.id.clone())
                    .collect()
            } else {
                ids
            };
            let placement = placement(
                launcher.as_deref(),
                testbed.as_deref(),
                hostfile.as_deref(),
                ssh_config,
                listen,
                agents,
            )?;
            let formats = Format::parse_list(&format).map_err(|e| anyhow!("{e}"))?;
            let code = reproduce(
                &ids,
                &profile,
                &fidelity,
                testbed.as_deref(),
                seed,
                headless,
                resume.as_deref(),
                placement,
                &formats,
                &results,
                capture_dir,
                &host_profile,
            )?;
            if all {
                println!();
                let board = scoreboard::collect(&results, None)?;
                print!("{}", scoreboard::terminal(&board));
                let html = results.join("scoreboard.html");
                scoreboard::write_html(&board, &results, &html)?;
                println!("scoreboard: {}", html.display());
            }
            Ok(code)
        }
        Cmd::Calibrate { out, reps } => {
            inabench::hostprofile::calibrate(out.as_deref(), reps, &results)?;
            Ok(0)
        }
        Cmd::Runs => runs(&results),
        Cmd::Scoreboard {
            html,
            paper,
            ledger,
        } => {
            let board = scoreboard::collect(&results, paper.as_deref())?;
            if let Some(path) = ledger {
                std::fs::write(&path, scoreboard::ledger(&board))
                    .with_context(|| format!("cannot write the ledger {}", path.display()))?;
                println!("ledger: {}", path.display());
            }
            print!("{}", scoreboard::terminal(&board));
            let html = html.unwrap_or_else(|| results.join("scoreboard.html"));
            scoreboard::write_html(&board, &results, &html)?;
            println!("scoreboard: {}", html.display());
            Ok(0)
        }
        Cmd::Report { run, format } => {
            let formats = Format::parse_list(&format).map_err(|e| anyhow!("{e}"))?;
            let dir = store::resolve_run(&results, &run)?;
            report(&dir, &formats, true)?;
            Ok(0)
        }
        Cmd::Doctor {
            testbed,
            json,
            ssh_config,
        } => {
            let tb = match &testbed {
                Some(p) => Some(inabench::testbed::Testbed::load(p)?),
                None => None,
            };
            if json {
                println!("{}", doctor::json(tb.as_ref(), ssh_config.as_deref()));
            } else {
                print!("{}", doctor::report(tb.as_ref(), ssh_config.as_deref()));
            }
            Ok(0)
        }
        Cmd::ProbeXrt => Ok(inabench_devices::xrt::child_main()),
        Cmd::SoftSwitch { listen, device_id } => {
            let rt = tokio::runtime::Runtime::new().context("cannot start the server's runtime")?;
            rt.block_on(async {
                let l = tokio::net::TcpListener::bind(&listen)
                    .await
                    .with_context(|| format!("cannot listen on {listen}"))?;
                let addr = l.local_addr()?;
                let (sw, mut dataplane) = inabench_p4rt::server::SoftSwitch::new(device_id);
                println!("P4Runtime (software switch, device {device_id}) listening on {addr}");
                use std::io::Write as _;
                let _ = std::io::stdout().flush();
                tokio::spawn(async move {
                    while let Some(p) = dataplane.recv().await {
                        eprintln!("packet-out: {} bytes", p.payload.len());
                    }
                });
                sw.serve(l).await.context("the P4Runtime server stopped")?;
                Ok::<(), anyhow::Error>(())
            })?;
            Ok(0)
        }
        Cmd::FabricNode => {
            let stdin = std::io::stdin();
            let stdout = std::io::stdout();
            inabench_workloads::udp_node::child_main(&mut stdin.lock(), &mut stdout.lock())
                .map_err(|e| anyhow::anyhow!("fabric node: {e}"))?;
            Ok(0)
        }
        Cmd::Agent {
            connect,
            index,
            token_stdin,
        } => {
            let token = if token_stdin {
                let mut line = String::new();
                std::io::stdin()
                    .read_line(&mut line)
                    .context("the agent reads its token from stdin")?;
                line.trim().to_string()
            } else {
                let t = std::env::var("INABENCH_AGENT_TOKEN")
                    .context("the agent needs INABENCH_AGENT_TOKEN from its launcher")?;
                // not inherited by the processes the agent starts (fabric nodes, ip netns exec)
                // SAFETY: no other thread runs yet that reads the environment.
                unsafe { std::env::remove_var("INABENCH_AGENT_TOKEN") };
                t
            };
            let index = match index {
                Some(i) => i,
                None => std::env::var("SLURM_PROCID")
                    .ok()
                    .and_then(|p| p.parse().ok())
                    .unwrap_or(0),
            };
            launcher::agent_main(&connect, index, &token, &Registry::builtin())?;
            Ok(0)
        }
    }
}

/// Where points run, from `--launcher` and its flags (or the testbed's launcher and hosts).
fn placement(
    launcher: Option<&str>,
    testbed: Option<&Path>,
    hostfile: Option<&Path>,
    ssh_config: Option<PathBuf>,
    listen: Option<String>,
    agents: Option<usize>,
) -> Result<Placement> {
    use launcher::{RemoteLauncher, slurm::SlurmLauncher, ssh::SshLauncher};
    let tb = match testbed {
        Some(p) => Some(inabench::testbed::Testbed::load(p)?),
        None => None,
    };
    let name = match launcher {
        Some(l) => l.to_string(),
        None => match &tb {
            Some(t) if ["ssh", "slurm"].contains(&t.launcher.as_str()) => t.launcher.clone(),
            _ => "inproc".to_string(),
        },
    };
    // the testbed's runner host, when it has an address, is where agents connect back to
    let listen = listen.or_else(|| {
        tb.as_ref().and_then(|t| {
            t.hosts
                .iter()
                .find(|h| h.role.iter().any(|r| r == "runner"))
                .and_then(|h| h.address.clone())
        })
    });
    let exe = std::env::current_exe().context("cannot find this binary's path")?;
    Ok(match name.as_str() {
        "inproc" => Placement::InProcess,
        "local" => Placement::Local,
        "ssh" => {
            let hosts = match (hostfile, &tb) {
                (Some(f), _) => SshLauncher::from_hostfile(f)?,
                (None, Some(t)) => t.agent_hosts(),
                (None, None) => Vec::new(),
            };
            if hosts.is_empty() {
                bail!(
                    "the ssh launcher needs hosts: --hostfile FILE, or a testbed whose worker hosts have an `address`"
                );
            }
            Placement::Remote(RemoteLauncher::Ssh(SshLauncher {
                hosts,
                listen,
                ssh_config,
                remote_exe: exe,
                connect_timeout: std::time::Duration::from_secs(30),
            }))
        }
        "slurm" => Placement::Remote(RemoteLauncher::Slurm(SlurmLauncher {
            agents,
            listen,
            exe,
            connect_timeout: std::time::Duration::from_secs(300),
        })),
        other => bail!(
            "`{other}` is not a launcher (inproc, local, ssh, slurm; netns is a fabric placement, not a launcher here)"
        ),
    })
}

fn load_catalog() -> Result<Catalog> {
    Ok(paths::catalog()?)
}

fn list(paper: Option<&str>) -> Result<i32> {
    let cat = load_catalog()?;
    for e in &cat.invalid {
        eprintln!("warning: an invalid spec is left out: {e}");
    }
    if let Some(p) = paper
        && !inabench_core::spec::PAPERS.contains(&p)
    {
        bail!(
            "no paper `{p}` (papers: {})",
            inabench_core::spec::PAPERS.join(", ")
        );
    }
    let mut out = String::new();
    out.push_str(&format!(
        "{:<24} {:<10} {:<22} {:<12} {:<40} {}\n",
        "ID", "PAPER", "ARTIFACT", "STATUS", "FIDELITY", "TITLE"
    ));
    let mut n = 0;
    for e in &cat.entries {
        let s = &e.spec;
        if paper.is_some_and(|p| p != s.paper_id) {
            continue;
        }
        n += 1;
        let status = match s.status {
            Status::Implemented => "implemented",
            Status::Planned => "planned",
        };
        let fid = s
            .fidelity
            .iter()
            .map(|f| f.as_str())
            .collect::<Vec<_>>()
            .join(",");
        out.push_str(&format!(
            "{:<24} {:<10} {:<22} {:<12} {:<40} {}\n",
            s.id,
            s.paper_id,
            truncate(&s.artifact, 22),
            status,
            fid,
            s.title
        ));
    }
    let implemented = cat
        .entries
        .iter()
        .filter(|e| {
            paper.is_none_or(|p| p == e.spec.paper_id) && e.spec.status == Status::Implemented
        })
        .count();
    out.push_str(&format!("\n{n} experiments, {implemented} implemented\n"));
    print!("{out}");
    Ok(0)
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(n - 1).collect::<String>())
    }
}

fn show(id: &str) -> Result<i32> {
    let cat = load_catalog()?;
    let e = cat.get(id)?;
    let s = &e.spec;
    let mut o = String::new();
    o.push_str(&format!(
        "{}: {}\n{}\n{}\n\n",
        s.id, s.title, s.citation, s.artifact
    ));
    o.push_str(&format!(
        "status: {}   spec: {}\n",
        if s.status == Status::Implemented {
            "implemented"
        } else {
            "planned (its systems do not exist yet)"
        },
        e.file.display()
    ));
    o.push_str(&format!(
        "systems: {}\nfidelity classes: {}\n\n",
        s.systems.join(", "),
        s.fidelity
            .iter()
            .map(|f| f.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    ));
    o.push_str(&format!(
        "What it measures:\n  {}\n\n",
        s.description.trim().replace('\n', "\n  ")
    ));
    if !s.parameters.is_empty() {
        o.push_str(&format!(
            "Fixed parameters: {}\n",
            inabench_core::value::params_key(&s.parameters)
        ));
    }
    for (name, p) in &s.profiles {
        let points = inabench_core::plan::expand(s, name)
            .map(|v| v.len())
            .unwrap_or(0);
        o.push_str(&format!(
            "\nProfile {name}: {points} points x {} repetitions (+{} warm-up), estimated {}\n",
            p.repetitions,
            p.warmup,
            human_secs(p.estimated_seconds)
        ));
        if !p.parameters.is_empty() {
            o.push_str(&format!(
                "  parameters: {}\n",
                inabench_core::value::params_key(&p.parameters)
            ));
        }
        for block in &p.grid {
            let parts: Vec<String> = block
                .iter()
                .map(|(k, v)| {
                    format!(
                        "{k} in [{}]",
                        v.iter()
                            .map(|x| x.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                })
                .collect();
            o.push_str(&format!("  sweep: {}\n", parts.join(" x ")));
        }
    }
    o.push_str("\nMetrics:\n");
    for m in &s.metrics {
        o.push_str(
            &format!(
                "  {} [{}] ({:?} is better): {}\n",
                m.name, m.unit, m.better, m.description
            )
            .replace("(None is better)", "(no better direction)"),
        );
    }
    o.push_str(&format!("\nThe paper's values ({}):\n", s.paper.source));
    if let Some(n) = &s.paper.note {
        o.push_str(&format!("  note: {n}\n"));
    }
    if s.paper.values.is_empty() {
        o.push_str("  (none printed)\n");
    }
    for v in &s.paper.values {
        let unit = s.metric(&v.metric).map(|m| m.unit.as_str()).unwrap_or("");
        let at = if v.params.is_empty() {
            String::new()
        } else {
            format!(" at {}", inabench_core::value::params_key(&v.params))
        };
        o.push_str(&format!(
            "  {} {} = {} {unit}{at}\n",
            v.system, v.metric, v.value
        ));
    }
    o.push_str("\nClaims:\n");
    for c in &s.claims {
        let f = if c.fidelity.is_empty() {
            String::new()
        } else {
            format!(
                " [{}]",
                c.fidelity
                    .iter()
                    .map(|f| f.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        o.push_str(&format!("  {}{f}: {}\n      {}\n", c.id, c.text, c.expr));
    }
    print!("{o}");
    Ok(0)
}

fn human_secs(s: f64) -> String {
    if s < 90.0 {
        format!("{s:.0} s")
    } else if s < 5400.0 {
        format!("{:.0} min", s / 60.0)
    } else {
        format!("{:.1} h", s / 3600.0)
    }
}

fn validate(files: &[PathBuf]) -> Result<i32> {
    if files.is_empty() {
        let cat = load_catalog()?;
        for e in &cat.invalid {
            eprintln!("error: {e}");
        }
        if !cat.invalid.is_empty() {
            println!(
                "{} specs valid, {} invalid",
                cat.entries.len(),
                cat.invalid.len()
            );
            return Ok(2);
        }
        println!("{} specs valid", cat.entries.len());
        return Ok(0);
    }
    let mut bad = 0;
    for f in files {
        match inabench_core::spec::Spec::load(f) {
            Ok(s) => println!("{}: ok ({})", f.display(), s.id),
            Err(e) => {
                eprintln!("error: {e}");
                bad += 1;
            }
        }
    }
    Ok(if bad > 0 { 2 } else { 0 })
}

#[allow(clippy::too_many_arguments)]
fn reproduce(
    ids: &[String],
    profile: &str,
    fidelity: &[Fidelity],
    testbed: Option<&Path>,
    seed: u64,
    headless_flag: bool,
    resume: Option<&str>,
    placement: Placement,
    formats: &[Format],
    results: &Path,
    capture_dir: Option<PathBuf>,
    host_profile: &inabench_core::hostprofile::HostProfile,
) -> Result<i32> {
    let cat = load_catalog()?;
    // resolve every id first, so a typo in the third id fails before the first runs
    let entries = ids
        .iter()
        .map(|id| cat.get(id).cloned())
        .collect::<Result<Vec<_>, _>>()?;
    if resume.is_some() && entries.len() > 1 {
        bail!("--resume continues one run; give one experiment id");
    }
    let (testbed_name, testbed_text) = match testbed {
        None => (
            "local (embedded software testbed)".to_string(),
            inabench::testbed::local_text(),
        ),
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read the testbed file {}", p.display()))?;
            (p.display().to_string(), text)
        }
    };
    let registry = Registry::builtin();
    let interactive = std::io::stdout().is_terminal()
        && std::io::stdin().is_terminal()
        && !headless_flag
        && std::env::var_os("CI").is_none();
    if !interactive {
        runner::install_signal_handlers();
    }
    let mut exit = 0;
    for entry in entries {
        let resume_dir = match resume {
            Some(r) => Some(store::resolve_run(results, r)?),
            None => None,
        };
        let req = RunRequest {
            entry: entry.clone(),
            profile: profile.to_string(),
            fidelities: fidelity.to_vec(),
            seed,
            resume: resume_dir,
            results: results.to_path_buf(),
            placement: placement.clone(),
            command: std::env::args().collect(),
            testbed_name: testbed_name.clone(),
            testbed_text: testbed_text.clone(),
            capture_dir: capture_dir.clone(),
            host_profile: Some(host_profile.clone()),
        };
        let prepared = runner::prepare(&req, &registry)?;
        let run_dir = prepared.run_dir.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let cancel = Arc::new(AtomicBool::new(false));
        let outcome = std::thread::scope(|scope| -> Result<runner::RunOutcome> {
            let reg = &registry;
            let c2 = cancel.clone();
            let handle = scope.spawn(move || runner::execute(prepared, reg, tx, c2));
            if interactive {
                let title = entry.spec.title.clone();
                if let Err(e) =
                    inabench::dashboard::run_dashboard(rx, cancel.clone(), &entry.spec.id, &title)
                {
                    eprintln!("warning: the dashboard failed ({e}); the run goes on headless");
                }
            } else {
                headless::run(rx, false);
            }
            handle
                .join()
                .map_err(|_| anyhow!("the runner thread panicked"))?
                .map_err(anyhow::Error::from)
        })?;
        let m = &outcome.manifest;
        if let Some(w) = &outcome.wrong_result {
            eprintln!(
                "error: WRONG RESULT in {} ({} point(s) wrong; their rows are kept and the claims over them fail): {w}",
                m.experiment, m.points_wrong
            );
            exit = 1;
        }
        // where the verdicts of claims that rest on a host profile input flip (reruns of their
        // points with the input moved; harness/src/breakeven.rs); the report shows them
        if let Err(e) =
            inabench::breakeven::solve(&run_dir, &registry, host_profile, &mut |l| eprintln!("{l}"))
        {
            eprintln!("warning: no break-even values: {e:#}");
        }
        report(&run_dir, formats, true)?;
        match m.status {
            RunStatus::Complete => {}
            RunStatus::Incomplete => {
                eprintln!(
                    "run {} is incomplete ({} of {} points); finish it with: inabench reproduce {} --resume {}",
                    m.run_id, m.points_done, m.points_total, m.experiment, m.run_id
                );
                if exit == 0 {
                    exit = if runner::SIGNALLED.load(std::sync::atomic::Ordering::Relaxed)
                        || cancel.load(std::sync::atomic::Ordering::Relaxed)
                    {
                        130
                    } else {
                        1
                    };
                }
            }
            RunStatus::Failed | RunStatus::Running => exit = 1,
        }
        if exit == 130 {
            break;
        }
    }
    Ok(exit)
}

/// The embedded default testbed.
/// Compact, analyse and write the reports of a run folder; print the summary.
fn report(dir: &Path, formats: &[Format], print: bool) -> Result<()> {
    let manifest = store::read_manifest(dir)?;
    let spec_path = dir.join(store::SPEC_FILE);
    let spec = inabench_core::spec::Spec::load(&spec_path)?;
    let n = inabench_report::analysis::compact(dir)?;
    let analysis = inabench_report::analysis::analyse(dir, &spec, manifest)?;
    let written = write_reports(dir, &analysis, formats)?;
    if print {
        println!(
            "{}",
            inabench_report::render::md::render_markdown(&analysis)
        );
        println!("{} rows in {}", n, dir.join(store::PARQUET_FILE).display());
        for w in written {
            println!("report: {}", w.display());
        }
    }
    Ok(())
}

fn runs(results: &Path) -> Result<i32> {
    let runs = store::list_runs(results)?;
    if runs.is_empty() {
        println!("no runs yet in {}", results.display());
        return Ok(0);
    }
    println!(
        "{:<48} {:<24} {:<11} {:<21} {:>10} FIDELITY",
        "RUN", "EXPERIMENT", "STATUS", "START", "DURATION"
    );
    for m in runs {
        println!(
            "{:<48} {:<24} {:<11} {:<21} {:>9.1}s {}",
            m.run_id,
            m.experiment,
            m.status.as_str(),
            m.started,
            m.elapsed_s,
            m.classes()
                .iter()
                .map(|f| f.as_str())
                .collect::<Vec<_>>()
                .join(",")
        );
    }
    Ok(0)
}
