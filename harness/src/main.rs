//! `inabench`: rerun the experiments of in-network aggregation papers.

use anyhow::{Context, Result, anyhow, bail};
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use inabench::registry::Registry;
use inabench::runner::{self, Placement, RunRequest};
use inabench::{doctor, headless, launcher, paths, scoreboard};
use inabench_core::catalog::{Catalog, Entry};
use inabench_core::overrides::{Overrides, SetParam};
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
    version = inabench::embedded::BUILD,
    about = "Rerun the experiments of in-network aggregation papers and check their claims"
)]
struct Cli {
    /// Results folder (default: <repo>/results)
    #[arg(long, global = true, env = "INABENCH_RESULTS")]
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
        /// Only this paper's
        #[arg(long, value_parser = PossibleValuesParser::new(inabench_core::spec::PAPERS))]
        paper: Option<String>,
        /// Print the experiments as JSON (one object per experiment)
        #[arg(long)]
        json: bool,
    },
    /// Describe an experiment: what it measures, parameters, the paper's values, claims
    Show {
        /// An experiment id (see `inabench list`)
        id: String,
        /// Print the spec as JSON
        #[arg(long)]
        json: bool,
    },
    /// Check every spec (or the given files) against the schema
    Validate {
        /// Spec files (default: every spec of the catalogue)
        files: Vec<PathBuf>,
        /// Print one JSON object per spec: file, id, ok, error
        #[arg(long)]
        json: bool,
    },
    /// Plan, run, store, analyse and report experiments
    Reproduce {
        /// Experiment ids (see `inabench list`), or spec files outside the catalogue
        /// (path/to/spec.yaml)
        #[arg(required_unless_present = "all")]
        ids: Vec<String>,
        /// Every implemented experiment of the catalogue, one after the other, ending with the
        /// scoreboard
        #[arg(long, conflicts_with = "ids")]
        all: bool,
        /// quick (CI scale) or full (the paper's scale)
        #[arg(long, value_enum, default_value_t = ProfileArg::Quick)]
        profile: ProfileArg,
        /// Classes to run, comma-separated (default: every class the spec declares that this
        /// machine and testbed can run)
        #[arg(long, value_delimiter = ',', value_parser = fidelity_parser())]
        fidelity: Vec<Fidelity>,
        /// Testbed file (default: the embedded software testbed, experiments/testbeds/local.yaml)
        #[arg(long)]
        testbed: Option<PathBuf>,
        /// The run's seed: every random draw of every point derives from it
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Log lines and progress on stderr instead of the dashboard
        #[arg(long)]
        headless: bool,
        /// Finish an interrupted run (a run id, a unique prefix, or `latest`: the newest run of
        /// the experiment)
        #[arg(long)]
        resume: Option<String>,
        /// Where points run: inproc (the runner's thread), local (an agent process), ssh (agents on
        /// the hostfile's hosts) or slurm (agents as srun tasks); default: the testbed's launcher
        /// when it is ssh or slurm, else inproc
        #[arg(long, value_enum)]
        launcher: Option<LauncherArg>,
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
        /// Report formats to write, comma-separated (csv: the aggregates, report.csv)
        #[arg(long, value_delimiter = ',', default_value = "html,pdf,md,json", value_parser = format_parser())]
        format: Vec<Format>,
        /// Write the frames of NetReduce Table 6's simulated all-reduces to pcap files in this
        /// folder (other workloads ignore it)
        #[arg(long)]
        pcap: Option<PathBuf>,
        /// The host costs the simulated and modelled classes charge (default: the reference
        /// profile, experiments/hosts/reference.yaml; `inabench calibrate` writes this machine's)
        #[arg(long, value_name = "FILE")]
        host_profile: Option<PathBuf>,
        /// Give a parameter these values at every point of the profile, replacing the spec's
        /// (repeatable; `inabench show ID` lists the parameters): --set workers=4,8
        #[arg(long = "set", value_name = "KEY=V1,V2", conflicts_with = "all")]
        set: Vec<String>,
        /// Measured repetitions per point, replacing the profile's
        #[arg(long, value_name = "N")]
        repetitions: Option<u32>,
        /// Unmeasured warm-up repetitions before them, replacing the profile's
        #[arg(long, value_name = "N")]
        warmup: Option<u32>,
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
    Runs {
        /// Print the runs' manifests as JSON (an array)
        #[arg(long)]
        json: bool,
    },
    /// Every claim of every experiment, from the latest run of each, per class
    Scoreboard {
        /// Print the scoreboard as JSON: each claim with its verdict per class, and the
        /// experiments never run
        #[arg(long)]
        json: bool,
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
        /// Report formats to write, comma-separated
        #[arg(long, value_delimiter = ',', default_value = "html,pdf,md,json", value_parser = format_parser())]
        format: Vec<Format>,
    },
    /// Print a completion script for a shell (e.g. `inabench completions bash >
    /// ~/.local/share/bash-completion/completions/inabench`)
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff), generated from the same definitions as --help (`inabench man
    /// > inabench.1; man ./inabench.1`)
    Man,
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
    /// (internal) one node of a `raw` fabric run (AF_PACKET on veth links), started by the runner
    #[command(name = "__raw-node", hide = true)]
    RawNode,
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

/// `--profile`: the two profiles every spec has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ProfileArg {
    /// CI scale: seconds to a minute
    Quick,
    /// the paper's scale
    Full,
}

impl ProfileArg {
    fn as_str(self) -> &'static str {
        match self {
            ProfileArg::Quick => "quick",
            ProfileArg::Full => "full",
        }
    }
}

/// `--launcher`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LauncherArg {
    /// the runner's thread
    Inproc,
    /// an agent process on this host
    Local,
    /// agents on the hostfile's hosts
    Ssh,
    /// agents as srun tasks
    Slurm,
}

impl LauncherArg {
    fn as_str(self) -> &'static str {
        match self {
            LauncherArg::Inproc => "inproc",
            LauncherArg::Local => "local",
            LauncherArg::Ssh => "ssh",
            LauncherArg::Slurm => "slurm",
        }
    }
}

/// The fidelity classes as clap's possible values (listed in --help and the completions).
fn fidelity_parser() -> impl TypedValueParser<Value = Fidelity> {
    PossibleValuesParser::new(Fidelity::ALL.map(Fidelity::as_str))
        .try_map(|s| Fidelity::parse(&s).ok_or("not a fidelity class"))
}

/// The report formats as clap's possible values.
fn format_parser() -> impl TypedValueParser<Value = Format> {
    PossibleValuesParser::new(Format::ALL.map(Format::as_str)).try_map(|s| {
        Format::ALL
            .into_iter()
            .find(|f| f.as_str() == s)
            .ok_or("not a report format")
    })
}

fn main() {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("error: {}", inabench::error_sentence(&e));
            std::process::exit(2);
        }
    }
}

#[allow(clippy::result_large_err)] // --set parse errors carry a spec error; met once, before any run
fn run(cli: Cli) -> Result<i32> {
    let results = paths::results_dir(cli.results.as_deref());
    match cli.cmd {
        Cmd::List { paper, json } => list(paper.as_deref(), json),
        Cmd::Show { id, json } => show(&id, json),
        Cmd::Validate { files, json } => validate(&files, json),
        Cmd::Completions { shell } => {
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "inabench",
                &mut std::io::stdout(),
            );
            Ok(0)
        }
        Cmd::Man => {
            clap_mangen::Man::new(Cli::command())
                .render(&mut std::io::stdout())
                .context("cannot write the man page")?;
            Ok(0)
        }
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
            set,
            repetitions,
            warmup,
        } => {
            // parsed before anything runs: a bad override is one sentence and nothing starts
            let overrides = Overrides {
                set: set
                    .iter()
                    .map(|s| SetParam::parse(s))
                    .collect::<Result<_, _>>()?,
                repetitions,
                warmup,
            };
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
            let fidelity = uniq(fidelity);
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
            // a testbed with a rig (the Soft-RoCE rig): its workloads stand in for the software
            // classes of the experiments it names, with the parameters it fixes (recorded as the
            // run's overrides); anything else on it is one sentence before anything runs
            let rig = match &testbed {
                Some(p) => inabench::testbed::RigRun::of(&inabench::testbed::Testbed::load(p)?, p)?,
                None => None,
            };
            if let Some(r) = &rig {
                r.check(&ids, launcher.map(LauncherArg::as_str))?;
            }
            // a resumed run keeps the overrides it was planned with
            let overrides = match &rig {
                Some(r) if resume.is_none() => r.merge(overrides)?,
                _ => overrides,
            };
            // a rig that stands in no workload for the experiments boots agents in its guests
            let rig_agents = match (&rig, &testbed) {
                (Some(r), Some(p)) if launcher.is_none() => {
                    let cat = load_catalog()?;
                    let workloads: Vec<String> = ids
                        .iter()
                        .filter_map(|id| cat.entries.iter().find(|e| &e.spec.id == id))
                        .filter_map(|e| e.spec.workload.clone())
                        .collect();
                    r.agents(&inabench::testbed::Testbed::load(p)?, &workloads)?
                }
                _ => None,
            };
            let placement = match rig_agents {
                Some(l) => Placement::Remote(launcher::RemoteLauncher::Rig(l)),
                None => placement(
                    launcher.map(LauncherArg::as_str),
                    testbed.as_deref(),
                    hostfile.as_deref(),
                    ssh_config,
                    listen,
                    agents,
                )?,
            };
            let formats = uniq(format);
            let code = reproduce(
                &ids,
                profile.as_str(),
                &fidelity,
                testbed.as_deref(),
                seed,
                headless,
                resume.as_deref(),
                placement,
                &formats,
                &results,
                capture_dir,
                &overrides,
                &host_profile,
                rig.as_ref(),
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
        Cmd::Runs { json } => runs(&results, json),
        Cmd::Scoreboard {
            json,
            html,
            paper,
            ledger,
        } => {
            let board = scoreboard::collect(&results, paper.as_deref())?;
            if let Some(path) = &ledger {
                // whole or not at all: a full disk keeps the old ledger
                store::write_atomic(path, scoreboard::ledger(&board).as_bytes())
                    .map_err(|e| anyhow!("the ledger: {}", store::cannot_write(&e)))?;
                if !json {
                    println!("ledger: {}", path.display());
                }
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&board)?);
                return Ok(0);
            }
            print!("{}", scoreboard::terminal(&board));
            let html = html.unwrap_or_else(|| results.join("scoreboard.html"));
            scoreboard::write_html(&board, &results, &html)?;
            println!("scoreboard: {}", html.display());
            Ok(0)
        }
        Cmd::Report { run, format } => {
            let formats = uniq(format);
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
        Cmd::RawNode => {
            let stdin = std::io::stdin();
            let stdout = std::io::stdout();
            inabench_workloads::raw_node::child_main(&mut stdin.lock(), &mut stdout.lock())
                .context("raw fabric node")?;
            Ok(0)
        }
        Cmd::FabricNode => {
            let stdin = std::io::stdin();
            let stdout = std::io::stdout();
            inabench_workloads::udp_node::child_main(&mut stdin.lock(), &mut stdout.lock())
                .context("fabric node")?;
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

/// The values in their first order, each once (`--format md,md` writes one report.md).
fn uniq<T: PartialEq>(v: Vec<T>) -> Vec<T> {
    let mut out: Vec<T> = Vec::with_capacity(v.len());
    for x in v {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    out
}

/// An argument of `reproduce` that names a spec file rather than an experiment id.
fn is_spec_file(id: &str) -> bool {
    id.ends_with(".yaml") || id.ends_with(".yml") || id.contains('/')
}

fn load_catalog() -> Result<Catalog> {
    Ok(paths::catalog()?)
}

fn list(paper: Option<&str>, json: bool) -> Result<i32> {
    let cat = load_catalog()?;
    for e in &cat.invalid {
        eprintln!("warning: an invalid spec is left out: {e}");
    }
    if json {
        let items: Vec<serde_json::Value> = cat
            .entries
            .iter()
            .filter(|e| paper.is_none_or(|p| p == e.spec.paper_id))
            .map(|e| {
                let s = &e.spec;
                serde_json::json!({
                    "id": s.id,
                    "paper": s.paper_id,
                    "artifact": s.artifact,
                    "status": s.status,
                    "fidelity": s.fidelity,
                    "title": s.title,
                    "file": e.file,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&items)?);
        return Ok(0);
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

fn show(id: &str, json: bool) -> Result<i32> {
    let cat = load_catalog()?;
    let e = cat.get(id)?;
    let s = &e.spec;
    if json {
        let points: std::collections::BTreeMap<&String, usize> = s
            .profiles
            .keys()
            .map(|name| {
                let n = inabench_core::plan::expand(s, name)
                    .map(|v| v.len())
                    .unwrap_or(0);
                (name, n)
            })
            .collect();
        let v = serde_json::json!({ "file": e.file, "points": points, "spec": s });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(0);
    }
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

fn validate(files: &[PathBuf], json: bool) -> Result<i32> {
    if json {
        // one object per spec: the catalogue's, or the files given
        let mut out: Vec<serde_json::Value> = Vec::new();
        if files.is_empty() {
            let cat = load_catalog()?;
            for e in &cat.entries {
                out.push(serde_json::json!({"file": e.file, "id": e.spec.id, "ok": true}));
            }
            for e in &cat.invalid {
                out.push(serde_json::json!({"file": e.file, "ok": false, "error": e.to_string()}));
            }
        } else {
            for f in files {
                out.push(match inabench_core::spec::Spec::load(f) {
                    Ok(s) => serde_json::json!({"file": f, "id": s.id, "ok": true}),
                    Err(e) => serde_json::json!({"file": f, "ok": false, "error": e.to_string()}),
                });
            }
        }
        let bad = out.iter().any(|v| v["ok"] == false);
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(if bad { 2 } else { 0 });
    }
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
    overrides: &Overrides,
    host_profile: &inabench_core::hostprofile::HostProfile,
    rig: Option<&inabench::testbed::RigRun>,
) -> Result<i32> {
    let cat = load_catalog()?;
    // resolve every id (or spec file) and apply the overrides first, so a typo in the third id
    // or a bad --set fails before the first runs
    let entries = ids
        .iter()
        .map(|id| -> Result<Entry> {
            let entry = if is_spec_file(id) {
                let file = PathBuf::from(id);
                let text = std::fs::read_to_string(&file)
                    .with_context(|| format!("cannot read the spec {id}"))?;
                let spec = inabench_core::spec::Spec::from_yaml(&file, &text)?;
                Entry { spec, file, text }
            } else {
                cat.get(id).cloned()?
            };
            Ok(overrides.apply(&entry, profile)?)
        })
        .collect::<Result<Vec<_>>>()?;
    if resume.is_some() && entries.len() > 1 {
        bail!("--resume continues one run; give one experiment id");
    }
    if resume.is_some() && !overrides.is_empty() {
        bail!(
            "--resume finishes a run as it was planned; --set, --repetitions and --warmup cannot change it"
        );
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
    let registry = rig.map_or_else(Registry::builtin, |r| r.registry());
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
            // the newest run of this experiment, not whichever ran last
            Some("latest") => Some(store::resolve_latest_of(results, &entry.spec.id)?),
            Some(r) => Some(store::resolve_run(results, r)?),
            None => None,
        };
        // a run made with overrides resumes with the changed spec it keeps
        let (entry, recorded) = match &resume_dir {
            Some(dir) => {
                let m = store::read_manifest(dir)?;
                if m.overrides.is_empty() {
                    (entry, Vec::new())
                } else {
                    let kept = dir.join(store::SPEC_FILE);
                    let text = std::fs::read_to_string(&kept)
                        .with_context(|| format!("cannot read {}", kept.display()))?;
                    let file = PathBuf::from(&m.spec_file);
                    let spec = inabench_core::spec::Spec::from_yaml(&file, &text)?;
                    (Entry { spec, file, text }, m.overrides)
                }
            }
            None => (entry, overrides.describe()),
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
            overrides: recorded,
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
        if let Some(r) = rig {
            // the device and provider the rig's guests reported, in the manifest the report reads
            let mut m = store::read_manifest(&run_dir)?;
            for l in r.driver_lines() {
                if !m.drivers.contains(&l) {
                    m.drivers.push(l);
                }
            }
            store::write_manifest(&run_dir, &m)?;
        }
        let m = &outcome.manifest;
        if let Some(w) = &outcome.wrong_result {
            eprintln!(
                "error: WRONG RESULT in {} ({} point(s) wrong; their rows are kept and the claims over them fail): {w}",
                m.experiment, m.points_wrong
            );
            exit = 1;
        }
        // rows.jsonl read once: the break-even search and the report take the same rows
        let stored = store::read_rows(&run_dir);
        // where the verdicts of claims that rest on a host profile input flip (reruns of their
        // points with the input moved; harness/src/breakeven.rs); the report shows them
        if let Ok(stored) = &stored
            && let Err(e) =
                inabench::breakeven::solve(&run_dir, stored, &registry, host_profile, &mut |l| {
                    eprintln!("{l}")
                })
        {
            eprintln!(
                "warning: no break-even values: {}",
                inabench::error_sentence(&e)
            );
        }
        let reported = stored
            .map_err(anyhow::Error::from)
            .and_then(|stored| report_stored(&run_dir, &stored, formats, true));
        if let Err(e) = reported {
            // the run's rows and manifest are on disk, marked: only the report is missing
            bail!(
                "run {} ended {} with {} of {} points on disk, but its report could not be written: {}; make room and write it with: inabench report {}",
                m.run_id,
                m.status.as_str(),
                m.points_done,
                m.points_total,
                inabench::error_sentence(&e),
                m.run_id
            );
        }
        match m.status {
            RunStatus::Complete => {}
            RunStatus::Incomplete => {
                // say which failures a resume cannot mend
                let failed = match (m.points_failed, m.points_invalid) {
                    (0, _) => String::new(),
                    (f, 0) => format!("; {f} failed and run again on resume"),
                    (f, i) => format!(
                        "; {f} failed, {i} of them for their parameter values, which fail the same way until the spec is changed"
                    ),
                };
                eprintln!(
                    "run {} is incomplete ({} of {} points{failed}); finish it with: inabench reproduce {} --resume {}",
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
            RunStatus::Failed | RunStatus::Running => {
                if m.points_wrong == 0
                    && let Some(first) = &outcome.bad_parameters
                {
                    eprintln!(
                        "error: run {} failed: {} of {} points failed for their parameter values (first: {first}); fix the spec and run it again (resuming would fail the same way)",
                        m.run_id, m.points_invalid, m.points_total
                    );
                }
                exit = 1
            }
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
    report_stored(dir, &store::read_rows(dir)?, formats, print)
}

/// [`report`] on the run's rows as [`store::read_rows`] read them from `dir`.
fn report_stored(
    dir: &Path,
    stored: &store::Stored,
    formats: &[Format],
    print: bool,
) -> Result<()> {
    let manifest = store::read_manifest(dir)?;
    let spec_path = dir.join(store::SPEC_FILE);
    let spec = inabench_core::spec::Spec::load(&spec_path)?;
    use inabench_report::analysis::ReportError;
    // a file that could not be written, named with the OS's words once
    let unwritten = |e: ReportError| match e {
        ReportError::Io { path, source } => anyhow!("cannot write {} ({source})", path.display()),
        other => other.into(),
    };
    // rows.jsonl read once: the parquet export and the analysis take the same rows
    let n = inabench_report::analysis::compact(dir, stored, &manifest).map_err(|e| match e {
        // the parquet writer's own error names no file
        ReportError::Parquet(p) => anyhow!(
            "cannot write {} ({p})",
            dir.join(store::PARQUET_FILE).display()
        ),
        other => unwritten(other),
    })?;
    let analysis = inabench_report::analysis::analyse_stored(dir, stored, &spec, manifest)?;
    let written = write_reports(dir, &analysis, formats).map_err(unwritten)?;
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

fn runs(results: &Path, json: bool) -> Result<i32> {
    let runs = store::list_runs(results)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&runs)?);
        return Ok(0);
    }
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
