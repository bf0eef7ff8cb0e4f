//! Where one repetition of one point runs: the [`Executor`] trait at the runner's measuring
//! boundary (hyperfine's `Executor`: the point loop above it is the same whatever runs the job).
//!
//! - [`InProcess`]: the runner's own thread (models, functional checks, benchmarks);
//! - [`Agents`]: agent processes a launcher starts (`local`, `ssh`, `slurm`), jobs round-robin;
//! - [`Scripted`]: a test double that plays back given events and outcomes.
//!
//! Failures are typed ([`JobFailure`]) on every path, the agent channel included.

use crate::launcher::{Agent, Job, JobFailure, Launcher, LocalLauncher, span};
use crate::registry::Registry;
use crate::runner::Placement;
use inabench_core::PointCtx;
use inabench_core::event::{Event, LogLevel};
use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

/// Runs jobs (one repetition of one point each) and streams their events.
pub trait Executor {
    /// Run `job`, passing every event it produces to `sink`.
    fn run_job(&mut self, job: &Job, sink: &mut dyn FnMut(Event)) -> Result<(), JobFailure>;
    /// A line for the manifest's `drivers` when the executor started something (a launcher and
    /// where its agents ran); given once.
    fn take_driver_line(&mut self) -> Option<String> {
        None
    }
    /// True when no further job can run (hosts that cannot be reached now will not be reached
    /// on the next point either): the runner stops, and the run stays resumable.
    fn gave_up(&self) -> bool {
        false
    }
    /// Stop whatever the executor started.
    fn shutdown(&mut self) {}
}

/// The manifest's `drivers` line of a class: its fabrics and what carries them (the hardware
/// class: the testbed's devices, each row still carrying the class of the device that ran it;
/// every other class: software).
pub fn class_line<S: AsRef<str>>(class: inabench_core::Fidelity, fabrics: &[S]) -> String {
    let by = match class {
        inabench_core::Fidelity::Hardware => "the testbed's devices",
        _ => "software",
    };
    let names: Vec<&str> = fabrics.iter().map(AsRef::as_ref).collect();
    format!("{class}: {} ({by})", names.join(", "))
}

/// The manifest's line of a point that spanned `ranks` agents: its class and label, then each
/// rank's own line of where it ran (`rank_lines`: `rank 0 on HOST: device ...`, in the order
/// they arrived), in rank order so that every repetition of the point gives the same line. One
/// line a point, so a run of several spanning points keeps every point's hosts and devices.
fn spanning_line(job: &Job, ranks: usize, mut rank_lines: Vec<String>) -> String {
    let rank_of = |l: &String| {
        l.strip_prefix("rank ")
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or(usize::MAX)
    };
    rank_lines.sort_by_key(rank_of);
    format!(
        "[{}] {}: {} spans {ranks} agents; {}",
        job.fidelity,
        job.point.label(),
        job.experiment,
        rank_lines.join("; ")
    )
}

/// Run `job` in this process through the workload it names. The agents' side runs jobs through
/// this same function, so a point is measured the same way wherever it runs.
pub fn run_here(
    registry: &Registry,
    job: &Job,
    cancel: &AtomicBool,
    sink: &mut dyn FnMut(Event),
) -> Result<(), JobFailure> {
    let (w, note) = point_workload(registry, job)?;
    if let Some(line) = note {
        sink(Event::Driver {
            point: job.index,
            line,
        });
    }
    let units = |m: &str| job.units.get(m).cloned().unwrap_or_default();
    let mut ctx = job_ctx(job, w.get(), cancel, sink, &units);
    w.get().run(&mut ctx).map_err(JobFailure::from)
}

/// The workload that runs a job's point: the registry's own, or, where the job carries the
/// testbed's data addresses ([`Job::addresses`]) and the workload takes an address plan
/// (`netreduce::table6::at_addresses`), that workload built at them.
pub enum PointWorkload<'r> {
    Builtin(&'r dyn inabench_core::Workload),
    Addressed(Box<dyn inabench_core::Workload>),
}

impl PointWorkload<'_> {
    pub fn get(&self) -> &dyn inabench_core::Workload {
        match self {
            PointWorkload::Builtin(w) => *w,
            PointWorkload::Addressed(w) => w.as_ref(),
        }
    }
}

/// Which workload runs `job`'s point at which addresses: the one place that decides it, for a
/// job in the runner's process, in an agent and for a rank of a job that spans agents. With
/// the workload, a line for the manifest where the job carries addresses its workload does not
/// take (its points ran at its systems' synthetic addresses). A job's plan that does not parse
/// fails the job in one sentence.
pub fn point_workload<'r>(
    registry: &'r Registry,
    job: &Job,
) -> Result<(PointWorkload<'r>, Option<String>), JobFailure> {
    let Some(w) = registry.get(&job.workload) else {
        return Err(JobFailure::Setup {
            message: format!("this binary has no workload `{}`", job.workload),
        });
    };
    let Some(addresses) = &job.addresses else {
        return Ok((PointWorkload::Builtin(w), None));
    };
    let plan = addresses.plan().map_err(|e| JobFailure::Setup {
        message: e.to_string(),
    })?;
    let at = inabench_workloads::netreduce::table6::at_addresses(plan)
        .into_iter()
        .find(|a| a.id() == job.workload);
    Ok(match at {
        Some(a) => (PointWorkload::Addressed(a), None),
        None => (
            PointWorkload::Builtin(w),
            Some(format!(
                "{} takes no address plan: the frames its points build carry its systems' synthetic addresses, not the testbed file's data addresses",
                job.workload
            )),
        ),
    })
}

/// The context of one job's point for `w`, the same wherever it runs (the runner's process, an
/// agent, a rank of a job that spans agents).
pub(crate) fn job_ctx<'a>(
    job: &'a Job,
    w: &dyn inabench_core::Workload,
    cancel: &'a AtomicBool,
    sink: &'a mut dyn FnMut(Event),
    units: &'a dyn Fn(&str) -> String,
) -> PointCtx<'a> {
    PointCtx::new(
        &job.point,
        job.index,
        job.fidelity,
        w.fabric(job.fidelity),
        job.repetition,
        job.warmup,
        job.seed,
        &job.run_id,
        &job.experiment,
        cancel,
        sink,
        units,
    )
    .with_capture_dir(job.capture_dir.as_deref())
    .with_host_profile(job.host_profile.as_ref())
}

/// Jobs on the runner's own thread; the run's cancel flag reaches the workload.
pub struct InProcess<'a> {
    pub registry: &'a Registry,
    pub cancel: &'a AtomicBool,
}

impl Executor for InProcess<'_> {
    fn run_job(&mut self, job: &Job, sink: &mut dyn FnMut(Event)) -> Result<(), JobFailure> {
        run_here(self.registry, job, self.cancel, sink)
    }
}

/// Jobs in agent processes, started on the first job by the placement's launcher; an agent that
/// dies is dropped with the others and the next job starts new ones.
pub struct Agents {
    placement: Placement,
    agents: Vec<Agent>,
    /// The processes the runner's CPU sampler follows (the agents are added when they start).
    pids: Arc<Mutex<Vec<(u32, String)>>>,
    driver_line: Option<String>,
    gave_up: bool,
    /// The testbed's RoCE NICs, sent with each rank of a job that spans agents.
    nics: Vec<span::RankNic>,
}

impl Agents {
    pub fn new(placement: Placement, pids: Arc<Mutex<Vec<(u32, String)>>>) -> Agents {
        Agents {
            placement,
            agents: Vec::new(),
            pids,
            driver_line: None,
            gave_up: false,
            nics: Vec::new(),
        }
    }

    /// The testbed whose `nics:` the ranks of a spanning job open (each its own host's).
    pub fn with_testbed(mut self, tb: &crate::testbed::Testbed) -> Agents {
        self.nics = span::testbed_nics(tb);
        self
    }

    /// Start the placement's agents: `local` starts `at_least` (1 unless a job spans more),
    /// the multi-host launchers as many as they say.
    fn start(&mut self, at_least: usize, sink: &mut dyn FnMut(Event)) -> Result<(), JobFailure> {
        let started = match &self.placement {
            Placement::Remote(r) => {
                let l = r.launcher();
                l.start(l.agents()).map(|a| (a, l.on_this_host(), l.name()))
            }
            _ => LocalLauncher::new()
                .and_then(|l| l.start(at_least.max(1)).map(|a| (a, true, "local"))),
        };
        match started {
            Ok((a, here, name)) => {
                if here && let Ok(mut g) = self.pids.lock() {
                    g.retain(|(_, l)| l == "runner");
                    g.extend(a.iter().map(|x| (x.pid, format!("agent {}", x.index))));
                }
                let line = crate::launcher::describe(name, &a);
                sink(Event::Log {
                    level: LogLevel::Info,
                    source: "runner".into(),
                    message: line.clone(),
                });
                self.driver_line = Some(line);
                self.agents = a;
                Ok(())
            }
            Err(e) => {
                self.gave_up = matches!(self.placement, Placement::Remote(_));
                Err(JobFailure::Setup {
                    message: e.to_string(),
                })
            }
        }
    }

    /// How many agents the placement starts (None: `local`, which starts what a job needs).
    fn fixed_agents(&self) -> Option<usize> {
        match &self.placement {
            Placement::Remote(r) => Some(r.launcher().agents()),
            _ => None,
        }
    }

    /// One repetition of a point that spans `ranks` agents ([`span`]): ranks 0..`ranks` on
    /// the first `ranks` agents; the point's manifest line names each rank's host and device
    /// ([`spanning_line`]).
    fn run_spanning(
        &mut self,
        job: &Job,
        ranks: usize,
        sink: &mut dyn FnMut(Event),
    ) -> Result<(), JobFailure> {
        let too_few = |have: usize| JobFailure::Setup {
            message: format!(
                "{} `{}` spans {ranks} hosts (one agent a rank) and the launcher has {have} agent{}; nothing of it ran",
                job.experiment,
                job.point.system,
                if have == 1 { "" } else { "s" }
            ),
        };
        // a launcher with too few agents is refused before it starts any
        if let Some(n) = self.fixed_agents()
            && n < ranks
        {
            return Err(too_few(n));
        }
        if self.agents.len() < ranks {
            self.shutdown();
            self.start(ranks, sink)?;
        }
        if self.agents.len() < ranks {
            return Err(too_few(self.agents.len()));
        }
        let mut rank_lines: Vec<String> = Vec::new();
        let mut on_event = |e: Event| {
            if let Event::Log { message, .. } = &e
                && message.starts_with("rank ")
                && message.contains(" on ")
            {
                rank_lines.push(message.clone());
            }
            sink(e)
        };
        let r = span::run_spanning(
            &mut self.agents,
            job,
            ranks,
            &self.nics,
            span::ROUND_DEADLINE,
            &mut on_event,
        );
        if !rank_lines.is_empty() {
            // a point's own line (the runner keeps each distinct line once): every spanning
            // point keeps its ranks' hosts and devices, beside the launcher's line
            sink(Event::Driver {
                point: job.index,
                line: spanning_line(job, ranks, rank_lines),
            });
        }
        match r {
            Ok(r) => r,
            Err(e) => {
                self.shutdown();
                Err(JobFailure::Failed {
                    message: e.to_string(),
                })
            }
        }
    }
}

impl Executor for Agents {
    fn run_job(&mut self, job: &Job, sink: &mut dyn FnMut(Event)) -> Result<(), JobFailure> {
        let ranks = span::ranks_of(&job.workload, &job.point.system);
        if ranks > 1 {
            return self.run_spanning(job, ranks, sink);
        }
        if self.agents.is_empty() {
            self.start(1, sink)?;
        }
        let slot = job.index % self.agents.len().max(1);
        let Some(agent) = self.agents.get_mut(slot) else {
            return Err(JobFailure::Setup {
                message: "the launcher started no agent".into(),
            });
        };
        match agent.run_job(job, sink) {
            Ok(r) => r,
            Err(e) => {
                // the agent is gone: drop them all; the next job starts new ones
                self.shutdown();
                Err(JobFailure::Failed {
                    message: e.to_string(),
                })
            }
        }
    }

    fn take_driver_line(&mut self) -> Option<String> {
        self.driver_line.take()
    }

    fn gave_up(&self) -> bool {
        self.gave_up
    }

    fn shutdown(&mut self) {
        for a in self.agents.drain(..) {
            a.shutdown();
        }
    }
}

/// A test double: each job takes the next scripted step, emits its events (with the job's
/// point index) and returns its outcome; jobs past the end of the script succeed silently.
#[derive(Default)]
pub struct Scripted {
    pub steps: VecDeque<(Vec<Event>, Result<(), JobFailure>)>,
    /// The jobs it was given, in order.
    pub jobs: Vec<Job>,
}

impl Executor for Scripted {
    fn run_job(&mut self, job: &Job, sink: &mut dyn FnMut(Event)) -> Result<(), JobFailure> {
        self.jobs.push(job.clone());
        let Some((events, outcome)) = self.steps.pop_front() else {
            return Ok(());
        };
        for e in events {
            sink(e);
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::class_line;
    use inabench_core::Fidelity;

    /// A spanning point's line names its class and point, then its ranks in rank order
    /// whatever order their lines arrived in (each repetition's line is the same line).
    #[test]
    fn a_spanning_points_line_names_the_point_and_its_ranks_in_rank_order() {
        let job: crate::launcher::Job = serde_json::from_value(serde_json::json!({
            "workload": "netreduce.table1",
            "point": {"id": "p", "system": "roce", "params": {"total_mb": 2}, "repetitions": 1, "warmup": 0},
            "index": 0, "fidelity": "emulated", "repetition": 0, "warmup": false, "seed": 1,
            "run_id": "r", "experiment": "netreduce-table1", "units": {}
        }))
        .expect("a job");
        let line = |order: &[&str]| {
            super::spanning_line(&job, 2, order.iter().map(|s| s.to_string()).collect())
        };
        let want = "[emulated] roce total_mb=2: netreduce-table1 spans 2 agents; rank 0 on a: rxe0; rank 1 on b: rxe0";
        assert_eq!(line(&["rank 1 on b: rxe0", "rank 0 on a: rxe0"]), want);
        assert_eq!(line(&["rank 0 on a: rxe0", "rank 1 on b: rxe0"]), want);
    }

    /// A hardware row is not "software": each class's line says what carries it.
    #[test]
    fn each_class_line_says_what_carries_it() {
        assert_eq!(
            class_line(Fidelity::Hardware, &["roce"]),
            "hardware: roce (the testbed's devices)"
        );
        assert_eq!(
            class_line(Fidelity::Emulated, &["udp", "raw-veth"]),
            "emulated: udp, raw-veth (software)"
        );
        assert_eq!(
            class_line(Fidelity::Simulated, &["sim"]),
            "simulated: sim (software)"
        );
    }
}
