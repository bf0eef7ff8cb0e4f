//! The runner: plan -> points -> workload (in this process or in agents) -> events -> store.
//!
//! Rows are appended to `rows.jsonl` as they are measured and pushed to the file at least every
//! 100 ms and at every interruption, so `q`, Ctrl-C or a killed worker keep every finished
//! row; the manifest then says `incomplete` and `--resume` runs only what is missing.

use crate::executor::{Agents, Executor, InProcess};
use crate::launcher::{Job, JobFailure, LaunchError, RemoteLauncher};
use crate::registry::Registry;
use inabench_core::catalog::Entry;
use inabench_core::event::{Event, FailureKind, LogLevel, PlannedPoint, PointFailure};
use inabench_core::plan::{self, Plan, PlanError};
use inabench_core::rng::SplitMix64;
use inabench_core::spec::Fidelity;
use inabench_core::store::{self, HostFacts, Manifest, Record, RunStatus, RunWriter, StoreError};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Set by SIGINT/SIGTERM (headless mode); the runner stops after the current repetition.
pub static SIGNALLED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    if SIGNALLED.swap(true, Ordering::SeqCst) {
        // second signal: leave now (rows up to the last flush are on disk)
        unsafe { libc::_exit(130) };
    }
}

/// Route SIGINT and SIGTERM to a clean stop.
pub fn install_signal_handlers() {
    let handler: extern "C" fn(libc::c_int) = on_signal;
    // SAFETY: the handler only touches an atomic and calls _exit, both async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, handler as libc::sighandler_t);
        libc::signal(libc::SIGTERM, handler as libc::sighandler_t);
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// Points run on the runner's own thread (models, functional checks, benchmarks).
    InProcess,
    /// Points run in an agent process started by the `local` launcher.
    Local,
    /// Points run in agents started by a multi-host launcher (ssh, slurm), round-robin.
    Remote(RemoteLauncher),
}

impl Placement {
    /// The launcher's name as the manifest records it (None: in process).
    pub fn launcher_name(&self) -> Option<&'static str> {
        match self {
            Placement::InProcess => None,
            Placement::Local => Some("local"),
            Placement::Remote(r) => Some(r.launcher().name()),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("testbed: {0}")]
    Testbed(String),
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Launch(#[from] LaunchError),
    #[error(
        "{experiment} names workload `{workload}`, which this binary does not have (it has: {have})"
    )]
    NoWorkload {
        experiment: String,
        workload: String,
        have: String,
    },
    #[error("run {run} is of {found}, not {expected}")]
    ResumeMismatch {
        run: String,
        found: String,
        expected: String,
    },
    #[error("run {0} is already complete; nothing to resume")]
    AlreadyComplete(String),
    /// Writing the run's rows failed (a full or read-only disk): the run stopped at once.
    #[error("{0}")]
    StoreWrite(String),
}

/// What `reproduce` asks for.
#[derive(Debug, Clone)]
pub struct RunRequest {
    pub entry: Entry,
    pub profile: String,
    /// The classes asked for with `--fidelity` (empty: every class the spec declares that this
    /// binary implements and this machine and testbed can run).
    pub fidelities: Vec<Fidelity>,
    pub seed: u64,
    pub resume: Option<PathBuf>,
    pub results: PathBuf,
    pub placement: Placement,
    pub command: Vec<String>,
    pub testbed_name: String,
    pub testbed_text: String,
    /// `--pcap DIR`: workloads that can capture their frames write pcap files here.
    pub capture_dir: Option<PathBuf>,
    /// `--host-profile FILE` (default the reference profile): the host costs workloads charge.
    pub host_profile: Option<inabench_core::hostprofile::HostProfile>,
    /// The command line's changes to the spec (already applied to `entry`), for the manifest.
    pub overrides: Vec<String>,
}

/// A planned run with its folder and manifest, ready to execute.
pub struct Prepared {
    pub plan: Plan,
    pub run_dir: PathBuf,
    pub manifest: Manifest,
    pub done: BTreeSet<String>,
    pub workload: String,
    pub placement: Placement,
    pub units: BTreeMap<String, String>,
    pub capture_dir: Option<PathBuf>,
    pub host_profile: Option<inabench_core::hostprofile::HostProfile>,
    /// The testbed, parsed once.
    pub testbed: crate::testbed::Testbed,
    /// The spec's fixed `workers`, else 2: what a testbed's P4 switch's job is written for at a
    /// point that names no `workers` (`p4switch::point_workers`).
    pub switch_workers: usize,
    started: Instant,
    /// A new run (not a resume): its folder holds nothing from before.
    fresh: bool,
    /// The run folder's lock, held until the run ends: a second runner on it is refused.
    _lock: store::RunLock,
}

/// Plan the run, create (or reopen) its folder and write the manifest as `running`.
pub fn prepare(req: &RunRequest, reg: &Registry) -> Result<Prepared, RunError> {
    let spec = &req.entry.spec;
    let wid = spec.workload.clone().unwrap_or_default();
    let workload = match reg.get(&wid) {
        Some(w) => w,
        None if spec.status == inabench_core::spec::Status::Planned => {
            return Err(PlanError::Planned {
                experiment: spec.id.clone(),
            }
            .into());
        }
        None => {
            return Err(RunError::NoWorkload {
                experiment: spec.id.clone(),
                workload: wid,
                have: reg.ids().join(", "),
            });
        }
    };
    let (profile, asked, seed, run_dir, mut resumed_from, done, lock) =
        if let Some(dir) = &req.resume {
            // before anything is read or rewritten: a runner still writing this run keeps it
            let lock = store::lock_run(dir)?;
            let m = store::read_manifest(dir)?;
            if m.experiment != spec.id {
                return Err(RunError::ResumeMismatch {
                    run: m.run_id,
                    found: m.experiment,
                    expected: spec.id.clone(),
                });
            }
            if m.status == RunStatus::Complete {
                return Err(RunError::AlreadyComplete(m.run_id));
            }
            let st = store::read_rows(dir)?;
            store::rewrite_rows(dir, &st)?;
            let mut from = m.resumed_from.clone();
            from.push(m.started.clone());
            (
                m.profile.clone(),
                m.classes(),
                m.seed,
                dir.clone(),
                from,
                st.done,
                Some(lock),
            )
        } else {
            let id = store::new_run_id(&req.results, &spec.id);
            (
                req.profile.clone(),
                req.fidelities.clone(),
                req.seed,
                req.results.join(id),
                Vec::new(),
                BTreeSet::new(),
                None,
            )
        };
    // the testbed, parsed once for the whole run
    let tb = crate::testbed::Testbed::from_yaml(
        std::path::Path::new(&req.testbed_name),
        &req.testbed_text,
    )
    .map_err(|e| RunError::Testbed(e.to_string()))?;
    // The classes the planner may pick: the workload's, with `hardware` only when the devices the
    // experiment needs are where its points run (`doctor::Equipment`: this host's probes, which
    // `inabench doctor` prints, or, for ranks in agents on the testbed's hosts, the testbed's
    // declared NICs; one decision for the planner, the rows and the note).
    let implemented = workload.fidelities();
    let rows = crate::doctor::Rows {
        workload: Some(workload),
        agents: req.placement != Placement::InProcess,
    };
    let equipment = implemented.contains(&Fidelity::Hardware).then(|| {
        crate::doctor::Equipment::of(
            &crate::doctor::checks(Some(&tb)),
            Some(&tb),
            ranks_run(&req.placement),
        )
    });
    let (classes, devices_note) = match &equipment {
        Some(e) => (e.classes(spec, implemented, &rows), e.note(spec, &rows)),
        None => (
            implemented.to_vec(),
            "this binary has no hardware path for it".to_string(),
        ),
    };
    let mut plan = plan::plan_classes(spec, &profile, &asked, &classes)?;
    let not_built: Vec<String> = match workload.systems() {
        Some(have) => spec
            .systems
            .iter()
            .filter(|s| !have.contains(&s.as_str()))
            .cloned()
            .collect(),
        None => Vec::new(),
    };
    plan.points.retain(|p| !not_built.contains(&p.system));
    if let Some(e) = &equipment {
        choose_rows(spec, &mut plan, e, &rows);
    }
    // rows a workload runs in one class only, or only in agents (launcher/span.rs)
    crate::launcher::span::leave_out(&mut plan, &wid, req.placement != Placement::InProcess);
    let class_list = plan
        .fidelities
        .iter()
        .map(|f| f.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    let reason = match asked.is_empty() {
        false if req.resume.is_some() => {
            format!("{class_list}: resumed with the classes of the original run")
        }
        // where the workload has a hardware path, the note says where its devices were found
        false if equipment.is_some() => {
            format!("{class_list}: asked for with --fidelity ({devices_note})")
        }
        false => format!("{class_list}: asked for with --fidelity"),
        true => format!(
            "{}: every class of [{}] that this binary implements ({}) and the testbed allows ({})",
            class_list,
            spec.fidelity
                .iter()
                .map(|f| f.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            workload
                .fidelities()
                .iter()
                .map(|f| f.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            devices_note
        ),
    };
    std::fs::create_dir_all(&run_dir).map_err(|e| StoreError::Io {
        path: run_dir.clone(),
        error: e,
    })?;
    let lock = match lock {
        Some(l) => l,
        None => store::lock_run(&run_dir)?,
    };
    // a new run whose folder cannot be filled (a full disk) leaves no folder behind
    let fresh = req.resume.is_none();
    let discard = |e: StoreError| {
        if fresh {
            let _ = std::fs::remove_dir_all(&run_dir);
        }
        e
    };
    let spec_path = run_dir.join(store::SPEC_FILE);
    std::fs::write(&spec_path, &req.entry.text)
        .map_err(|e| StoreError::Io {
            path: spec_path,
            error: e,
        })
        .map_err(discard)?;
    let run_id = run_dir
        .file_name()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_default();
    // each class's fabrics as its points pick them (one decision: these lines, the manifest's
    // `fabric` and the udp socket probe)
    let fabrics =
        |f: &Fidelity| inabench_workloads::fabric::class_fabrics(workload, *f, &plan.points);
    let mut drivers: Vec<String> = plan
        .fidelities
        .iter()
        .map(|f| crate::executor::class_line(*f, &fabrics(f)))
        .collect();
    if plan
        .fidelities
        .iter()
        .any(|f| fabrics(f).iter().any(|x| x == "udp"))
    {
        // what the udp fabric's batched socket layer uses on this host (probed once: a GSO send
        // to a GRO receiver on loopback); each point's switch shard count is in its rows
        // (counter `switch_shards`)
        let off = inabench_workloads::fabric::udp_offload();
        drivers.push(format!(
            "udp sockets: {off} (gso: UDP GSO on send, gro: UDP GRO on receive, mmsg: plain sendmmsg/recvmmsg)"
        ));
    }
    if let Some(l) = req.placement.launcher_name() {
        // replaced by where the agents ran once they connected
        drivers.push(format!("launcher {l}"));
    }
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    if req.resume.is_none() {
        resumed_from.clear();
    }
    let manifest = Manifest {
        run_id,
        experiment: spec.id.clone(),
        title: spec.title.clone(),
        spec_file: req.entry.file.display().to_string(),
        spec_sha256: store::sha256_hex(req.entry.text.as_bytes()),
        profile: profile.clone(),
        fidelity: plan.fidelity,
        fidelities: plan.fidelities.clone(),
        fabric: fabrics(&plan.fidelity).join(", "),
        seed,
        git_revision: crate::paths::git_revision(),
        inabench_version: env!("CARGO_PKG_VERSION").to_string(),
        command: req.command.clone(),
        host: HostFacts::probe(crate::embedded::RUSTC_VERSION),
        testbed: req.testbed_name.clone(),
        testbed_sha256: store::sha256_hex(req.testbed_text.as_bytes()),
        drivers,
        fidelity_reason: reason,
        started: now,
        finished: None,
        elapsed_s: 0.0,
        status: RunStatus::Running,
        points_total: plan.entries().len(),
        points_done: done.len(),
        points_failed: 0,
        points_wrong: 0,
        points_invalid: 0,
        resumed_from,
        systems_not_built: not_built,
        rows_not_here: plan.not_here.clone(),
        launcher: req.placement.launcher_name().map(str::to_string),
        host_profile: req.host_profile.as_ref().map(|h| h.label()),
        overrides: req.overrides.clone(),
    };
    store::write_manifest(&run_dir, &manifest).map_err(discard)?;
    let units = spec
        .metrics
        .iter()
        .map(|m| (m.name.clone(), m.unit.clone()))
        .collect();
    Ok(Prepared {
        plan,
        run_dir,
        manifest,
        done,
        workload: wid,
        placement: req.placement.clone(),
        units,
        capture_dir: req.capture_dir.clone(),
        host_profile: req.host_profile.clone(),
        testbed: tb,
        switch_workers: spec
            .parameters
            .get("workers")
            .and_then(|v| v.as_f64())
            .unwrap_or(2.0) as usize,
        started: Instant::now(),
        fresh,
        _lock: lock,
    })
}

/// Choose the rows of a hardware run: the `hardware` class runs only the rows of the systems
/// whose devices (`system_devices`, else `testbed_devices`) are where their ranks run
/// ([`crate::doctor::Equipment::lacks`]; `rows`: how many agents a system's point spans); every
/// other system's hardware rows are left out with what they need (`needs a RoCE NIC (verbs)`),
/// which the manifest records and the report judges `not checkable here`. A row that spans
/// agents opens their RDMA devices and is labelled by them (netreduce-table1's roce row): where
/// its hardware rows run, its emulated rows would open the same NICs and come out hardware
/// again, so they are left out of the emulated class with that sentence. Other rows keep every
/// class.
pub fn choose_rows(
    spec: &inabench_core::spec::Spec,
    plan: &mut Plan,
    equipment: &crate::doctor::Equipment,
    rows: &crate::doctor::Rows<'_>,
) {
    plan.leave_out(Fidelity::Hardware, |s| {
        equipment.lacks(spec, s, rows.ranks(s))
    });
    if !plan.fidelities.contains(&Fidelity::Hardware) {
        return;
    }
    let on_nics: Vec<String> = spec
        .systems
        .iter()
        .filter(|s| {
            rows.ranks(s) > 1 && rows.run(s) && plan.why_not_here(Fidelity::Hardware, s).is_none()
        })
        .cloned()
        .collect();
    plan.leave_out(Fidelity::Emulated, |s| {
        on_nics.iter().any(|n| n == s).then(|| {
            "its ranks open the RDMA NICs its hardware rows run on, which label its rows hardware: its emulated rows are Soft-RoCE's (the rxe rig's testbed)".to_string()
        })
    });
}

/// Why a point planned in class `planned` whose rows came out `ran` on `fabric` (a body that
/// labels its rows by the device it opened: netreduce-table1's roce row on Soft-RoCE under a
/// `hardware` plan from a testbed's declared NICs) fails: a setup failure, its rows not stored,
/// so the class reads what ran in it and never holds another class's rows.
pub fn ran_as_another_class(planned: Fidelity, ran: Fidelity, fabric: &str) -> String {
    format!(
        "planned {planned}, it ran as {ran} (fabric {fabric}): the devices its ranks opened are not the {planned} class's (the launcher's line names them), so its rows are not stored"
    )
}

/// Where a run's points run, for the devices its `hardware` class is planned from: on the
/// testbed's hosts with a multi-host launcher (ssh, slurm), else on this host (in process, the
/// `local` launcher, and the Soft-RoCE rig, whose guests' devices are rxe behind this host).
pub fn ranks_run(placement: &Placement) -> crate::doctor::RanksRun {
    use crate::launcher::RemoteLauncher;
    match placement {
        Placement::Remote(RemoteLauncher::Ssh(_) | RemoteLauncher::Slurm(_)) => {
            crate::doctor::RanksRun::TestbedHosts
        }
        Placement::Remote(RemoteLauncher::Rig(_)) | Placement::Local | Placement::InProcess => {
            crate::doctor::RanksRun::Here
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    pub run_dir: PathBuf,
    pub manifest: Manifest,
    pub wrong_result: Option<String>,
    /// The first point that failed for its parameter values (`[class] point: why`).
    pub bad_parameters: Option<String>,
}

/// Execute a prepared run, streaming events to `tx`. `cancel` (the dashboard's `q`) and
/// SIGINT/SIGTERM stop it after the current repetition.
pub fn execute(
    p: Prepared,
    reg: &Registry,
    tx: Sender<Event>,
    cancel: Arc<AtomicBool>,
) -> Result<RunOutcome, RunError> {
    // the processes the CPU sampler follows: this one, and the agents once they start
    let pids: Arc<Mutex<Vec<(u32, String)>>> =
        Arc::new(Mutex::new(vec![(std::process::id(), "runner".to_string())]));
    match p.placement.clone() {
        Placement::InProcess => {
            let flag = cancel.clone();
            let mut ex = InProcess {
                registry: reg,
                cancel: &flag,
            };
            execute_with(p, reg, tx, cancel, pids, &mut ex)
        }
        placement => {
            let mut ex = Agents::new(placement, pids.clone()).with_testbed(&p.testbed);
            let r = execute_with(p, reg, tx, cancel, pids, &mut ex);
            ex.shutdown();
            r
        }
    }
}

/// The testbed's data addresses (`hosts[].data`) as every job of the run carries them, wherever
/// it runs (`Job::addresses`; the workload that takes them is chosen per job by
/// [`crate::executor::point_workload`]): None where the testbed states none or has a rig (whose
/// workloads take them themselves). A plan that cannot be used is one sentence.
fn job_addresses(
    tb: &crate::testbed::Testbed,
) -> Result<
    Option<inabench_workloads::udp_node::JobAddresses>,
    inabench_fabric::addresses::AddressError,
> {
    if tb.rig.is_some() {
        return Ok(None);
    }
    Ok(inabench_workloads::netreduce::rig::address_plan(tb)?
        .as_ref()
        .and_then(inabench_workloads::udp_node::JobAddresses::of))
}

/// A run the testbed refuses before its first point: a new run leaves no folder behind (an
/// empty failed run would otherwise be `latest`); a resumed one keeps what it had, marked
/// incomplete, and stays resumable.
fn testbed_refused(p: &mut Prepared, why: &str) -> RunError {
    if p.fresh {
        let _ = std::fs::remove_dir_all(&p.run_dir);
        return RunError::Testbed(format!("{why}; nothing ran and no run folder was kept"));
    }
    p.manifest.status = RunStatus::Incomplete;
    if let Err(e) = store::write_manifest(&p.run_dir, &p.manifest) {
        return e.into();
    }
    RunError::Testbed(format!("{why}; run {} is unchanged", p.manifest.run_id))
}

/// [`execute`] through a given [`Executor`] (tests use [`crate::executor::Scripted`]).
pub fn execute_with(
    mut p: Prepared,
    reg: &Registry,
    tx: Sender<Event>,
    cancel: Arc<AtomicBool>,
    pids: Arc<Mutex<Vec<(u32, String)>>>,
    executor: &mut dyn Executor,
) -> Result<RunOutcome, RunError> {
    let stop = || cancel.load(Ordering::Relaxed) || SIGNALLED.load(Ordering::Relaxed);
    // a testbed that states its hosts' data addresses: every job carries them, and its point
    // runs at them where its workload takes a plan (netreduce.table6's node processes)
    let addresses = match job_addresses(&p.testbed) {
        Ok(a) => a,
        Err(e) => {
            let why = format!("the testbed's data addresses: {e}");
            return Err(testbed_refused(&mut p, &why));
        }
    };
    // a testbed with a P4Runtime switch: the job each point needs is written on it before the
    // point (`p4switch::SwitchJob`: rewritten where a point's `workers` differs from the job on
    // the switch; the switch holds one job, and a job of n workers completes no slot for fewer).
    // The first point's is written here, so that a switch that refuses it stops the run before
    // any point ran (here, not in `prepare`, which only plans and writes the run folder).
    let mut switch_job = crate::p4switch::SwitchJob::of(
        &p.testbed,
        p.plan
            .points
            .iter()
            .map(|q| q.system.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect(),
        p.switch_workers,
    );
    // the manifest's line for the switch's job, kept current as points run
    let mut switch_line: Option<usize> = None;
    if let Some(job) = switch_job.as_mut() {
        let first = p
            .plan
            .entries()
            .into_iter()
            .find(|e| !p.done.contains(&e.key()))
            .map(|e| e.point.clone());
        if let Some(first) = first {
            match job.ensure(&first) {
                Ok(lines) => p.manifest.drivers.extend(lines.unwrap_or_default()),
                Err(e) => return Err(testbed_refused(&mut p, &crate::error_sentence(&e))),
            }
        }
        p.manifest.drivers.push(job.summary());
        switch_line = Some(p.manifest.drivers.len() - 1);
    }
    let workload = reg.get(&p.workload).ok_or_else(|| RunError::NoWorkload {
        experiment: p.plan.experiment.clone(),
        workload: p.workload.clone(),
        have: reg.ids().join(", "),
    })?;
    let mut writer = match RunWriter::open(&p.run_dir) {
        Ok(w) => w,
        Err(e) => return Err(stopped_by_store_error(p, None, e)),
    };
    // Events go to the views in batches (every 20 ms or 1024 events): one wake-up of the view
    // thread per batch instead of one per event keeps the harness's cost per point small.
    let mut batch = Batch {
        buf: Vec::with_capacity(1024),
        tx: tx.clone(),
        last: Instant::now(),
    };
    let plan = p.plan.clone();
    let entries = plan.entries();
    let multi = plan.fidelities.len() > 1;
    // the plan lists only the parameters that vary among its points
    let varying: Vec<String> = plan
        .points
        .first()
        .map(|first| {
            first
                .params
                .keys()
                .filter(|k| {
                    plan.points
                        .iter()
                        .any(|q| q.params.get(*k) != first.params.get(*k))
                })
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    let short = |e: &plan::Entry<'_>| {
        let params: Vec<String> = varying
            .iter()
            .filter_map(|k| e.point.params.get(k).map(|v| format!("{k}={v}")))
            .collect();
        let base = format!("{} {}", e.point.system, params.join(" "));
        if multi {
            format!("[{}] {}", e.fidelity, base.trim_end())
        } else {
            base.trim_end().to_string()
        }
    };
    batch.push(Event::RunStarted {
        run_id: p.manifest.run_id.clone(),
        experiment: p.plan.experiment.clone(),
        fidelity: p.plan.fidelity,
        fidelities: p.plan.fidelities.clone(),
        profile: p.plan.profile.clone(),
        points: entries
            .iter()
            .map(|e| PlannedPoint {
                point_id: e.key(),
                system: e.point.system.clone(),
                label: short(e),
                done: p.done.contains(&e.key()),
                fidelity: Some(e.fidelity),
            })
            .collect(),
    });
    for n in &p.plan.not_here {
        batch.push(Event::Log {
            level: LogLevel::Warn,
            source: "runner".into(),
            message: format!(
                "[{}] {}: not checkable here, not run on this testbed: {}",
                n.fidelity, n.system, n.why
            ),
        });
    }
    if !p.done.is_empty() {
        batch.push(Event::Log {
            level: LogLevel::Info,
            source: "runner".into(),
            message: format!(
                "resuming: {} of {} points already done",
                p.done.len(),
                entries.len()
            ),
        });
    }

    // CPU sampler: this process and the agents, every 500 ms. It holds a sender of the event
    // channel, so it is stopped and joined on every way out of this function (the guard's
    // drop): the views wait for the channel to close.
    let sampler = Sampler::start(pids.clone(), tx.clone());
    // The first error writing rows.jsonl: the run stops after the job in flight.
    let mut store_err: Option<StoreError> = None;

    let mut failed = 0usize;
    // failed for their parameter values: they fail the same way when rerun
    let mut invalid = 0usize;
    let mut bad_parameters = None;
    let mut wrong = 0usize;
    let mut wrong_result = None;
    let mut last_flush = Instant::now();
    let run_id = p.manifest.run_id.clone();
    let experiment = p.plan.experiment.clone();
    let mut interrupted = false;
    let mut launch_failed = false;
    let mut class_now = None;
    // the fabrics each point's rows named, by class and point id: the manifest's class lines
    // and `fabric` say what the rows ran on, not only what was planned
    let mut rows_ran_on: BTreeMap<Fidelity, BTreeMap<String, Vec<String>>> = BTreeMap::new();

    'points: for (index, entry) in entries.iter().enumerate() {
        let (point, fidelity, key) = (entry.point, entry.fidelity, entry.key());
        if p.done.contains(&key) {
            continue;
        }
        if stop() {
            break;
        }
        let fabric = inabench_workloads::fabric::class_fabrics(workload, fidelity, &plan.points);
        let fabric = fabric.join(", ");
        if class_now != Some(fidelity) {
            class_now = Some(fidelity);
            batch.push(Event::Log {
                level: LogLevel::Info,
                source: "runner".into(),
                message: format!(
                    "class {fidelity} ({} of {}): {}; fabric {fabric}",
                    plan.fidelities
                        .iter()
                        .position(|f| *f == fidelity)
                        .map_or(1, |i| i + 1),
                    plan.fidelities.len(),
                    fidelity.meaning()
                ),
            });
        }
        batch.push(Event::PointStarted { point: index });
        let t0 = Instant::now();
        let seed = SplitMix64::derive(p.manifest.seed, &point.id).next_u64();
        let total = point.warmup + point.repetitions;
        let mut failure: Option<PointFailure> = None;
        // the switch's job for this point's `workers`, where the switch holds another
        if let Some(job) = switch_job.as_mut() {
            match job.ensure(point) {
                Ok(Some(lines)) => {
                    for line in lines {
                        batch.push(Event::Log {
                            level: LogLevel::Info,
                            source: "runner".into(),
                            message: format!(
                                "the P4 switch's job rewritten for {}: {line}",
                                point.label()
                            ),
                        });
                    }
                    if let Some(i) = switch_line {
                        p.manifest.drivers[i] = job.summary();
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    failure = Some(PointFailure::Setup(format!(
                        "the P4 switch's job for this point: {}",
                        crate::error_sentence(&e)
                    )))
                }
            }
        }
        let mut point_wrong: Option<String> = None;
        let mut point_bad_parameters = false;
        for k in 0..total {
            if failure.is_some() {
                break;
            }
            if stop() {
                interrupted = true;
                failure = Some(PointFailure::Interrupted);
                break;
            }
            // the manifest lines the point sends (Event::Driver), each kept once
            let mut point_lines: Vec<String> = Vec::new();
            // the fabrics its rows named
            let mut point_fabrics: Vec<String> = Vec::new();
            let warmup = k < point.warmup;
            let repetition = if warmup { k } else { k - point.warmup };
            // the class and fabric of a row that came out in another class than the point's
            let mut ran_as: Option<(Fidelity, String)> = None;
            let mut sink = |e: Event| {
                if let Event::Driver { line, .. } = &e {
                    point_lines.push(line.clone());
                }
                if let Event::Row(r) = &e
                    && r.fidelity != fidelity
                {
                    // labelled by the devices it ran on (Soft-RoCE under a hardware plan): not
                    // stored, not shown; the point fails below with what ran
                    ran_as.get_or_insert_with(|| (r.fidelity, r.fabric.clone()));
                    return;
                }
                if let Event::Row(r) = &e
                    && !point_fabrics.contains(&r.fabric)
                {
                    point_fabrics.push(r.fabric.clone());
                }
                if let Event::Row(r) = &e
                    && store_err.is_none()
                    && let Err(err) = writer.append_row(r)
                {
                    store_err = Some(err);
                }
                batch.push(e);
            };
            let job = Job {
                workload: p.workload.clone(),
                point: point.clone(),
                index,
                fidelity,
                repetition,
                warmup,
                seed,
                run_id: run_id.clone(),
                experiment: experiment.clone(),
                units: p.units.clone(),
                capture_dir: p.capture_dir.clone(),
                host_profile: p.host_profile.clone(),
                addresses: addresses.clone(),
            };
            // a point that panics fails alone (as an agent that dies does): the run goes on,
            // and its folder is marked as it ends, never left `running`
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                executor.run_job(&job, &mut sink)
            }))
            .unwrap_or_else(|payload| {
                Err(JobFailure::Failed {
                    message: format!("the point panicked: {}", panic_words(payload.as_ref())),
                })
            });
            for line in point_lines.drain(..) {
                if !p.manifest.drivers.contains(&line) {
                    p.manifest.drivers.push(line);
                }
            }
            if !point_fabrics.is_empty() {
                let ran = rows_ran_on.entry(fidelity).or_default();
                let before = crate::executor::class_line(
                    fidelity,
                    &inabench_workloads::fabric::ran_fabrics(workload, fidelity, &plan.points, ran),
                );
                let fabrics = ran.entry(point.id.clone()).or_default();
                for f in point_fabrics {
                    if !fabrics.contains(&f) {
                        fabrics.push(f);
                    }
                }
                let now =
                    inabench_workloads::fabric::ran_fabrics(workload, fidelity, &plan.points, ran);
                if let Some(l) = p.manifest.drivers.iter_mut().find(|l| **l == before) {
                    *l = crate::executor::class_line(fidelity, &now);
                }
                if fidelity == p.plan.fidelity {
                    p.manifest.fabric = now.join(", ");
                }
            }
            if let Some(line) = executor.take_driver_line() {
                if let Some(l) = p.placement.launcher_name() {
                    let prefix = format!("launcher {l}");
                    p.manifest.drivers.retain(|d| !d.starts_with(&prefix));
                }
                p.manifest.drivers.push(line);
            }
            launch_failed = executor.gave_up();
            if store_err.is_some() {
                break 'points;
            }
            let result = match (result, ran_as) {
                (Ok(()), Some((ran, fabric))) => {
                    let why = ran_as_another_class(fidelity, ran, &fabric);
                    let line = format!("[{fidelity}] {}: {why}", point.label());
                    if !p.manifest.drivers.contains(&line) {
                        p.manifest.drivers.push(line);
                    }
                    Err(JobFailure::Setup { message: why })
                }
                (r, _) => r,
            };
            if let Err(e) = result {
                failure = Some(match &e {
                    JobFailure::WrongResult { message } => {
                        point_wrong = Some(message.clone());
                        PointFailure::WrongResult(e.to_string())
                    }
                    JobFailure::BadParameters { .. } => {
                        point_bad_parameters = true;
                        PointFailure::BadParameters(e.to_string())
                    }
                    JobFailure::Setup { .. } => PointFailure::Setup(e.to_string()),
                    _ => PointFailure::Failed(e.to_string()),
                });
                break;
            }
            batch.push(Event::Progress {
                point: index,
                done: u64::from(k + 1),
                total: u64::from(total),
            });
        }
        let ok = failure.is_none();
        // the stored record keeps the failure's words
        let error = failure.as_ref().map(ToString::to_string);
        if ok {
            if let Err(e) = writer.append(&Record::PointDone {
                point_id: key.clone(),
                ok: true,
                error: None,
                wrong: false,
                failure: None,
            }) {
                store_err = Some(e);
                break 'points;
            }
            p.done.insert(key.clone());
        } else if let Some(m) = &point_wrong {
            // A wrong result is a measured outcome: the point's rows stay, the point counts as
            // done (resume does not hide it by rerunning it), the run goes on, and the run's
            // status and exit code say that results were wrong.
            wrong += 1;
            wrong_result.get_or_insert_with(|| format!("[{fidelity}] {}: {m}", point.label()));
            if let Err(e) = writer.append(&Record::PointDone {
                point_id: key.clone(),
                ok: false,
                error: Some(m.clone()),
                wrong: true,
                failure: Some(FailureKind::WrongResult),
            }) {
                store_err = Some(e);
                break 'points;
            }
            p.done.insert(key.clone());
            batch.push(Event::Log {
                level: LogLevel::Error,
                source: point.system.clone(),
                message: format!("WRONG RESULT [{fidelity}] {}: {m}", point.label()),
            });
        } else if !interrupted {
            failed += 1;
            if point_bad_parameters {
                invalid += 1;
                bad_parameters.get_or_insert_with(|| {
                    format!(
                        "[{fidelity}] {}: {}",
                        point.label(),
                        error.clone().unwrap_or_default()
                    )
                });
            }
            if let Err(e) = writer.append(&Record::PointDone {
                point_id: key.clone(),
                ok: false,
                error: error.clone(),
                wrong: false,
                failure: failure.as_ref().map(PointFailure::kind),
            }) {
                store_err = Some(e);
                break 'points;
            }
            batch.push(Event::Log {
                level: LogLevel::Error,
                source: point.system.clone(),
                message: format!("{}: {}", point.label(), error.clone().unwrap_or_default()),
            });
        }
        if last_flush.elapsed() >= Duration::from_millis(100) {
            if let Err(e) = writer.flush() {
                store_err = Some(e);
                break 'points;
            }
            last_flush = Instant::now();
        }
        batch.push(Event::PointDone {
            point: index,
            failure,
            elapsed_s: t0.elapsed().as_secs_f64(),
        });
        batch.maybe_flush();
        if launch_failed {
            break 'points;
        }
    }
    batch.flush();
    if store_err.is_none()
        && let Err(e) = writer.flush()
    {
        store_err = Some(e);
    }
    executor.shutdown();
    drop(sampler);
    if let Some(e) = store_err {
        return Err(stopped_by_store_error(p, Some(writer), e));
    }

    p.manifest.points_wrong += wrong;
    let status = if p.manifest.points_wrong > 0 {
        RunStatus::Failed
    } else if p.done.len() == entries.len() {
        RunStatus::Complete
    } else if invalid > 0 && invalid == failed && p.done.len() + failed == entries.len() {
        // every point ran, and each that did not finish failed for its parameter values:
        // resuming would fail the same way, so the run is not called resumable
        RunStatus::Failed
    } else {
        RunStatus::Incomplete
    };
    p.manifest.status = status;
    p.manifest.points_done = p.done.len();
    p.manifest.points_failed = failed;
    p.manifest.points_invalid = invalid;
    p.manifest.finished =
        Some(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    p.manifest.elapsed_s += p.started.elapsed().as_secs_f64();
    if let Err(e) = store::write_manifest(&p.run_dir, &p.manifest) {
        return Err(RunError::StoreWrite(format!(
            "run {} ended ({}, {} of {} points on disk) but its manifest could not be updated: {}; the next inabench command marks it",
            p.manifest.run_id,
            status.as_str(),
            p.manifest.points_done,
            p.manifest.points_total,
            store::cannot_write(&e)
        )));
    }
    batch.push(Event::RunFinished {
        status,
        elapsed_s: p.started.elapsed().as_secs_f64(),
    });
    Ok(RunOutcome {
        run_dir: p.run_dir,
        manifest: p.manifest,
        wrong_result,
        bad_parameters,
    })
}

/// End a run whose rows could not be written: cut `rows.jsonl` back to its last whole flush,
/// mark the manifest `incomplete` with the points that are on disk, and say so in one sentence.
fn stopped_by_store_error(mut p: Prepared, writer: Option<RunWriter>, e: StoreError) -> RunError {
    let cut = writer.map_or(Ok(()), RunWriter::abandon);
    let kept = store::read_rows(&p.run_dir).map(|st| st.done.len());
    p.manifest.status = RunStatus::Incomplete;
    p.manifest.points_done = kept.as_ref().copied().unwrap_or(0);
    p.manifest.finished =
        Some(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    p.manifest.elapsed_s += p.started.elapsed().as_secs_f64();
    let marked = match (cut, store::write_manifest(&p.run_dir, &p.manifest)) {
        (Ok(()), Ok(())) => format!(
            "run {} is marked incomplete with {} of {} points kept; make room and finish it with: inabench reproduce {} --resume {}",
            p.manifest.run_id,
            p.manifest.points_done,
            p.manifest.points_total,
            p.manifest.experiment,
            p.manifest.run_id
        ),
        (_, Err(m)) => format!(
            "the manifest of run {} could not be marked either ({})",
            p.manifest.run_id,
            store::io_reason(&m)
        ),
        (Err(c), Ok(())) => format!(
            "run {} is marked incomplete, but its last line may be torn ({})",
            p.manifest.run_id,
            store::io_reason(&c)
        ),
    };
    RunError::StoreWrite(format!(
        "the run stopped: cannot write {} ({}); {marked}",
        store::io_path(&e).display(),
        store::io_reason(&e)
    ))
}

/// A panic's message (its payload when it is text).
fn panic_words(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string())
}

/// Stops and joins the CPU sampler thread when dropped.
struct Sampler {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    fn start(pids: Arc<Mutex<Vec<(u32, String)>>>, tx: Sender<Event>) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || cpu_sampler(pids, flag, tx));
        Sampler {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Events on their way to the views, sent in batches.
struct Batch {
    buf: Vec<Event>,
    tx: Sender<Event>,
    last: Instant,
}

impl Batch {
    fn push(&mut self, e: Event) {
        self.buf.push(e);
        // long points still show progress: flush on time as well as at point ends
        if self.buf.len() >= 1024 || self.last.elapsed() >= Duration::from_millis(50) {
            self.flush();
        }
    }

    fn maybe_flush(&mut self) {
        if self.buf.len() >= 1024 || self.last.elapsed() >= Duration::from_millis(20) {
            self.flush();
        }
    }

    fn flush(&mut self) {
        for e in self.buf.drain(..) {
            let _ = self.tx.send(e);
        }
        self.last = Instant::now();
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Per-process CPU (percent of one core) from /proc/<pid>/stat, every 500 ms.
fn cpu_sampler(pids: Arc<Mutex<Vec<(u32, String)>>>, stop: Arc<AtomicBool>, tx: Sender<Event>) {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let mut last: BTreeMap<u32, (f64, Instant)> = BTreeMap::new();
    while !stop.load(Ordering::Relaxed) {
        let mut list = pids.lock().map(|g| g.clone()).unwrap_or_default();
        // every node process the run starts (udp fabric nodes, agents' children): the
        // descendants of the runner and of its agents, labelled by their command
        let roots: Vec<u32> = list.iter().map(|(p, _)| *p).collect();
        for (pid, label) in descendants(&roots) {
            if !list.iter().any(|(p, _)| *p == pid) {
                list.push((pid, label));
            }
        }
        for (pid, label) in list {
            let Some(t) = cpu_ticks(pid) else { continue };
            let now = Instant::now();
            if let Some((t0, i0)) = last.insert(pid, (t, now)) {
                let dt = now.duration_since(i0).as_secs_f64();
                if dt > 0.0 {
                    let pct = (t - t0) / ticks / dt * 100.0;
                    let _ = tx.send(Event::ProcessCpu {
                        pid,
                        label,
                        cpu_percent: pct,
                    });
                }
            }
        }
        for _ in 0..10 {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The processes below `roots` (children, grandchildren, ...), with a label from their
/// command line (`node <role>` for fabric nodes).
fn descendants(roots: &[u32]) -> Vec<(u32, String)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut parent: Vec<(u32, u32)> = Vec::new();
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        let ppid = stat[close + 1..]
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(pp) = ppid {
            parent.push((pid, pp));
        }
    }
    let mut found: Vec<u32> = roots.to_vec();
    let mut out = Vec::new();
    let mut grew = true;
    while grew {
        grew = false;
        for (pid, pp) in &parent {
            if found.contains(pp) && !found.contains(pid) {
                found.push(*pid);
                grew = true;
                let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                let args: Vec<String> = cmd
                    .split(|b| *b == 0)
                    .filter(|a| !a.is_empty())
                    .map(|a| String::from_utf8_lossy(a).to_string())
                    .collect();
                let name = args
                    .first()
                    .map(|a| a.rsplit('/').next().unwrap_or(a).to_string())
                    .unwrap_or_default();
                let label = if args.iter().any(|a| a == "__fabric-node") {
                    format!("node {pid}")
                } else {
                    format!("{name} {pid}")
                };
                out.push((*pid, label));
            }
        }
    }
    out
}

/// utime + stime of a process, in clock ticks.
pub fn cpu_ticks(pid: u32) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // the command name is in parentheses and may contain spaces: fields start after the last ')'
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some(utime + stime)
}

#[cfg(test)]
mod row_tests {
    use super::*;
    use crate::doctor::{Devices, Need};
    use inabench_core::claims::{Missing, PointState};
    use inabench_core::plan::NotHere;

    /// netreduce-table1 with `dpdk` left to the paper's whole testbed (testbed_devices: an FPGA,
    /// RoCE NICs, GPUs): its other three systems need a RoCE NIC only.
    fn table1_mixed() -> inabench_core::spec::Spec {
        let text = include_str!("../../experiments/netreduce/table1.yaml");
        let mixed = text.replacen("  dpdk: [rdma]\n", "", 1);
        assert_ne!(mixed, text, "table1.yaml lists dpdk's devices");
        inabench_core::spec::Spec::from_yaml(std::path::Path::new("table1.yaml"), &mixed)
            .expect("valid")
    }

    /// A testbed with only RoCE NICs runs the hardware rows of the systems that need nothing
    /// more and marks the others' with what they need; the emulated class keeps every row; the
    /// report reads those rows as `not checkable here` with the sentence.
    #[test]
    fn a_testbed_with_only_rdma_runs_the_rows_it_can_and_marks_the_others() {
        let spec = table1_mixed();
        let rdma = Devices {
            found: [Need::Rdma].into_iter().collect(),
        };
        let implemented = [Fidelity::Hardware, Fidelity::Emulated];
        let classes = crate::doctor::planner_classes(&spec, &implemented, &rdma);
        assert_eq!(
            classes, implemented,
            "hardware is planned: some rows can run"
        );
        let mut plan = plan::plan_classes(&spec, "quick", &[], &classes).expect("plan");
        choose_rows(
            &spec,
            &mut plan,
            &crate::doctor::Equipment::probed(rdma.clone()),
            &crate::doctor::Rows::ANY,
        );
        let why = "needs an FPGA board (XRT), a GPU (CUDA)";
        assert_eq!(
            plan.not_here,
            vec![NotHere {
                fidelity: Fidelity::Hardware,
                system: "dpdk".into(),
                why: why.into(),
            }]
        );
        let systems = |f: Fidelity| -> BTreeSet<String> {
            plan.entries()
                .iter()
                .filter(|e| e.fidelity == f)
                .map(|e| e.point.system.clone())
                .collect()
        };
        assert_eq!(
            systems(Fidelity::Hardware),
            ["event_driven", "parallel_dma", "roce"]
                .map(String::from)
                .into()
        );
        assert_eq!(
            systems(Fidelity::Emulated),
            ["dpdk", "event_driven", "parallel_dma", "roce"]
                .map(String::from)
                .into()
        );
        let per_system = plan.points.iter().filter(|p| p.system == "dpdk").count();
        assert_eq!(plan.entries().len(), 2 * plan.points.len() - per_system);
        // the manifest keeps them and the report judges them with the sentence
        let d = tempfile::tempdir().expect("tmp");
        let m: inabench_core::store::Manifest = serde_json::from_value(serde_json::json!({
            "run_id": "t", "experiment": spec.id, "title": "", "spec_file": "",
            "spec_sha256": "", "profile": "quick", "fidelity": "hardware",
            "fidelities": ["hardware", "emulated"], "fabric": "", "seed": 1,
            "git_revision": "", "inabench_version": "", "command": [],
            "host": serde_json::to_value(inabench_core::store::HostFacts::default())
                .expect("host"),
            "testbed": "", "testbed_sha256": "", "drivers": [], "fidelity_reason": "",
            "started": "", "finished": null, "elapsed_s": 0.0, "status": "complete",
            "points_total": 0, "points_done": 0, "points_failed": 0,
            "rows_not_here": serde_json::to_value(&plan.not_here).expect("rows"),
        }))
        .expect("manifest");
        store::write_manifest(d.path(), &m).expect("write");
        let back = store::read_manifest(d.path()).expect("read");
        assert_eq!(back.rows_not_here, plan.not_here);
        let states =
            inabench_report::analysis::PlanStates::of_run(d.path(), &spec, &back).expect("states");
        let state = |f: Fidelity, s: &str| -> Vec<PointState> {
            states.by_class[&f]
                .iter()
                .filter(|p| p.system == s)
                .map(|p| p.state.clone())
                .collect()
        };
        let dpdk = state(Fidelity::Hardware, "dpdk");
        assert_eq!(dpdk.len(), per_system);
        for st in dpdk {
            let PointState::Missing(m) = st else {
                panic!("{st:?}")
            };
            assert_eq!(m, Missing::NotHere(why.into()));
            assert_eq!(
                m.to_string(),
                "not run on this testbed: needs an FPGA board (XRT), a GPU (CUDA)"
            );
        }
        // the rows that were planned and not run read as never run, not as not here
        assert!(
            state(Fidelity::Hardware, "roce")
                .iter()
                .chain(&state(Fidelity::Emulated, "dpdk"))
                .all(|s| *s == PointState::Missing(Missing::Interrupted))
        );
        // a testbed with no RoCE NIC plans no hardware class at all
        assert_eq!(
            crate::doctor::planner_classes(&spec, &implemented, &Devices::default()),
            [Fidelity::Emulated]
        );
    }

    /// A testbed of a laptop runner (its own RoCE NIC declared, but it runs no agent) and two
    /// worker hosts, each declaring a RoCE NIC, reached by `launcher` (`ssh`).
    fn two_nic_testbed(launcher: &str, node1_nic: bool) -> crate::testbed::Testbed {
        let node1 = if node1_nic {
            "  - {host: node1, kind: roce, device: mlx5_1, gid_index: 3, rate_gbps: 100}\n"
        } else {
            ""
        };
        crate::testbed::Testbed::from_yaml(
            std::path::Path::new("lab.yaml"),
            &format!(
                "name: lab\nhosts:\n  - {{name: laptop, role: [runner]}}\n  - {{name: node0, role: [worker], address: node0.lab}}\n  - {{name: node1, role: [worker], address: node1.lab}}\nnics:\n  - {{host: laptop, kind: roce, device: mlx5_9, gid_index: 0, rate_gbps: 25}}\n  - {{host: node0, kind: roce, device: mlx5_0, gid_index: 3, rate_gbps: 100}}\n{node1}launcher: {launcher}\n"
            ),
        )
        .expect("testbed")
    }

    /// This host's probes as a runner without an RDMA device (a laptop) reports them.
    fn no_rdma_here() -> Vec<crate::doctor::Check> {
        [
            "RDMA devices (verbs)",
            "GPUs (CUDA)",
            "FPGA (XRT)",
            "Tofino (P4Runtime)",
        ]
        .into_iter()
        .map(|name| crate::doctor::Check {
            name: name.into(),
            ok: false,
            detail: "none".into(),
        })
        .collect()
    }

    fn ssh() -> Placement {
        Placement::Remote(crate::launcher::RemoteLauncher::Ssh(
            crate::launcher::ssh::SshLauncher {
                hosts: vec!["node0.lab".into(), "node1.lab".into()],
                listen: None,
                ssh_config: None,
                remote_exe: "inabench".into(),
                connect_timeout: Duration::from_secs(1),
            },
        ))
    }

    /// The planning block of `prepare` for netreduce-table1 on `tb` from `placement` on a runner
    /// whose probes are `checks`: the plan and the devices note.
    fn plan_table1(
        tb: &crate::testbed::Testbed,
        checks: &[crate::doctor::Check],
        placement: &Placement,
    ) -> (Plan, String) {
        let spec = inabench_core::spec::Spec::from_yaml(
            std::path::Path::new("table1.yaml"),
            include_str!("../../experiments/netreduce/table1.yaml"),
        )
        .expect("table1");
        let reg = Registry::builtin();
        let workload = reg.get("netreduce.table1").expect("table1's workload");
        let rows = crate::doctor::Rows {
            workload: Some(workload),
            agents: *placement != Placement::InProcess,
        };
        let e = crate::doctor::Equipment::of(checks, Some(tb), ranks_run(placement));
        let classes = e.classes(&spec, workload.fidelities(), &rows);
        let mut plan = plan::plan_classes(&spec, "quick", &[], &classes).expect("plan");
        choose_rows(&spec, &mut plan, &e, &rows);
        crate::launcher::span::leave_out(
            &mut plan,
            "netreduce.table1",
            *placement != Placement::InProcess,
        );
        (plan, e.note(&spec, &rows))
    }

    fn hardware_systems(plan: &Plan) -> BTreeSet<String> {
        plan.entries()
            .iter()
            .filter(|e| e.fidelity == Fidelity::Hardware)
            .map(|e| e.point.system.clone())
            .collect()
    }

    /// Issue #36 item 5: a laptop without an RDMA device runs netreduce-table1 over ssh on two
    /// worker hosts that declare RoCE NICs: the hardware class is planned from those
    /// declarations (the roce row spans 2 ranks, 2 hosts declare one; the runner's own declared
    /// NIC counts for nothing, it runs no rank), its other rows are left out with why, and the
    /// note says the NICs were declared, not probed. The same testbed run here (in process, or
    /// the local launcher) plans from this host's probe: no hardware class.
    #[test]
    fn a_remote_run_plans_hardware_from_the_testbeds_declared_nics() {
        let tb = two_nic_testbed("ssh", true);
        assert_eq!(ranks_run(&ssh()), crate::doctor::RanksRun::TestbedHosts);
        let (plan, note) = plan_table1(&tb, &no_rdma_here(), &ssh());
        assert_eq!(plan.fidelities, [Fidelity::Hardware, Fidelity::Emulated]);
        assert_eq!(hardware_systems(&plan), ["roce".to_string()].into());
        let why = |s: &str| plan.why_not_here(Fidelity::Hardware, s).map(str::to_string);
        for s in ["event_driven", "parallel_dma", "dpdk"] {
            assert_eq!(
                why(s),
                Some(format!(
                    "`{s}` is a software host I/O model on the udp fabric: its rows are emulated only"
                ))
            );
        }
        assert_eq!(why("roce"), None);
        assert_eq!(
            note,
            "the testbed has the devices hardware needs; hardware planned from the testbed's declared NICs: node0 mlx5_0, node1 mlx5_1 (not probed from this host; each rank opens its own)"
        );
        // the emulated class keeps every row but roce's, whose ranks would open the same NICs
        let emulated: BTreeSet<String> = plan
            .entries()
            .iter()
            .filter(|e| e.fidelity == Fidelity::Emulated)
            .map(|e| e.point.system.clone())
            .collect();
        assert_eq!(
            emulated,
            ["dpdk", "event_driven", "parallel_dma"]
                .map(String::from)
                .into()
        );
        assert_eq!(
            plan.why_not_here(Fidelity::Emulated, "roce"),
            Some(
                "its ranks open the RDMA NICs its hardware rows run on, which label its rows hardware: its emulated rows are Soft-RoCE's (the rxe rig's testbed)"
            )
        );
        // in process and with the local launcher the ranks run here: this host's probe decides
        // (in one process the roce row runs in no class, 25d22b4: the note says so instead)
        for (here, why) in [
            (
                Placement::InProcess,
                "its workload runs no row in the hardware class",
            ),
            (Placement::Local, "hardware needs a RoCE NIC (verbs)"),
        ] {
            assert_eq!(ranks_run(&here), crate::doctor::RanksRun::Here);
            let (plan, note) = plan_table1(&tb, &no_rdma_here(), &here);
            assert_eq!(plan.fidelities, [Fidelity::Emulated], "{here:?}");
            assert_eq!(note, why, "{here:?}");
        }
        // and a runner whose probe finds an RDMA device plans hardware there, from the probe
        let mut rdma_here = no_rdma_here();
        rdma_here[0].ok = true;
        let (plan, note) = plan_table1(&tb, &rdma_here, &Placement::Local);
        assert_eq!(hardware_systems(&plan), ["roce".to_string()].into());
        assert_eq!(note, "the testbed has the devices hardware needs");
    }

    /// One worker host declares a RoCE NIC: the roce row's 2 ranks cannot each open one, so no
    /// hardware row is planned, and the note says why (with the NIC it found); a runner's own
    /// RDMA device does not stand in for the workers' (the ranks do not run on it).
    #[test]
    fn one_declared_nic_for_a_two_rank_row_plans_no_hardware() {
        let tb = two_nic_testbed("ssh", false);
        let mut rdma_here = no_rdma_here();
        rdma_here[0].ok = true;
        for checks in [no_rdma_here(), rdma_here] {
            let (plan, note) = plan_table1(&tb, &checks, &ssh());
            assert_eq!(plan.fidelities, [Fidelity::Emulated]);
            assert_eq!(
                note,
                "hardware needs a RoCE NIC on each of its 2 ranks' hosts (the testbed declares one on 1 host: node0 mlx5_0); hardware planned from the testbed's declared NICs: node0 mlx5_0 (not probed from this host; each rank opens its own)"
            );
        }
        // asked for with --fidelity hardware, the row is left out with the sentence
        let spec = inabench_core::spec::Spec::from_yaml(
            std::path::Path::new("table1.yaml"),
            include_str!("../../experiments/netreduce/table1.yaml"),
        )
        .expect("table1");
        let e = crate::doctor::Equipment::of(&no_rdma_here(), Some(&tb), ranks_run(&ssh()));
        let reg = Registry::builtin();
        let rows = crate::doctor::Rows {
            workload: reg.get("netreduce.table1"),
            agents: true,
        };
        let mut plan =
            plan::plan_classes(&spec, "quick", &[Fidelity::Hardware], &[Fidelity::Hardware])
                .expect("plan");
        choose_rows(&spec, &mut plan, &e, &rows);
        assert_eq!(
            plan.why_not_here(Fidelity::Hardware, "roce"),
            Some(
                "needs a RoCE NIC on each of its 2 ranks' hosts (the testbed declares one on 1 host: node0 mlx5_0)"
            )
        );
        crate::launcher::span::leave_out(&mut plan, "netreduce.table1", true);
        assert!(plan.entries().is_empty(), "no hardware row runs");
        // no worker host declares one: the need says where to declare it
        let none = crate::testbed::Testbed::from_yaml(
            std::path::Path::new("lab.yaml"),
            "name: lab\nhosts:\n  - {name: node0, role: [worker], address: node0.lab}\nlauncher: ssh\n",
        )
        .expect("testbed");
        let (plan, note) = plan_table1(&none, &no_rdma_here(), &ssh());
        assert_eq!(plan.fidelities, [Fidelity::Emulated]);
        assert_eq!(
            note,
            "hardware needs a RoCE NIC (verbs) declared on a worker host of the testbed (`nics:` of kind roce); the ranks run on the testbed's hosts, which declare no RoCE NIC (`nics:` of kind roce on a worker host); this host's own devices are not theirs"
        );
    }
}
