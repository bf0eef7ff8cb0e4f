//! A testbed's P4Runtime switch holds one job, and a job of n workers completes no slot for a
//! point of fewer: the runner rewrites the switch's job before each point whose `workers`
//! differs from the job on the switch (`p4switch::SwitchJob`, one call in the point loop), logs
//! each write and says in the manifest how many writes it made for which values. Through the
//! runner's real point loop (`runner::execute_with`) with the soft P4Runtime switch on loopback
//! and an executor that reads the switch's job as each point starts. In process; about a second.

mod support;

use inabench::executor::Executor;
use inabench::launcher::{Job, JobFailure};
use inabench::registry::Registry;
use inabench::runner::{self, RunRequest};
use inabench_core::catalog::Entry;
use inabench_core::event::Event;
use inabench_core::spec::{Fidelity, Spec};
use inabench_core::store::RunStatus;
use inabench_core::{PointCtx, Workload, WorkloadError};
use inabench_p4rt::dataplane::RuleAction;
use inabench_p4rt::server::{SoftSwitch, spawn_local};
use std::path::{Path, PathBuf};
use support::in_process_request;

/// A workload that runs nothing (the executor below stands in for it).
struct Nothing;

impl Workload for Nothing {
    fn id(&self) -> &'static str {
        "test.nothing"
    }
    fn fidelities(&self) -> &'static [Fidelity] {
        &[Fidelity::Functional]
    }
    fn fabric(&self, _f: Fidelity) -> &'static str {
        "model"
    }
    fn run(&self, _ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
        Ok(())
    }
}

/// What the switch held as a point started: (point id, worker rules, their `num_workers`
/// values).
type Seen = (String, usize, Vec<u16>);

/// Reads the soft switch's job as each point starts.
struct ReadsTheSwitch {
    sw: SoftSwitch,
    seen: Vec<Seen>,
}

impl Executor for ReadsTheSwitch {
    fn run_job(&mut self, job: &Job, _sink: &mut dyn FnMut(Event)) -> Result<(), JobFailure> {
        let table = self.sw.job_table().map_err(|e| JobFailure::Failed {
            message: e.to_string(),
        })?;
        let mut n: Vec<u16> = table
            .rules
            .iter()
            .filter_map(|r| match r.action {
                RuleAction::Worker { num_workers, .. } => Some(num_workers),
                RuleAction::Drop => None,
            })
            .collect();
        let rules = n.len();
        n.dedup();
        self.seen.push((job.point.id.clone(), rules, n));
        Ok(())
    }
}

fn entry(grid: &str) -> Entry {
    let text = format!(
        "id: netreduce-p4-per-point\npaper_id: netreduce\ntitle: p4 per point\ncitation: none\nartifact: none\nstatus: implemented\nworkload: test.nothing\ndescription: test fixture\nsystems: [switchml]\nfidelity: [functional]\nprofiles:\n  quick:\n    estimated_seconds: 1\n    grid:\n      - {grid}\n  full:\n    estimated_seconds: 1\n    grid:\n      - {grid}\nmetrics:\n  - {{name: checksum, unit: \"1\", better: none}}\npaper:\n  source: none\n  values: []\n"
    );
    let file = PathBuf::from("experiments/netreduce/p4-per-point.yaml");
    let spec = Spec::from_yaml(&file, &text).expect("fixture spec");
    Entry { spec, file, text }
}

/// What a run shows: the switch at each point, the write logs, the manifest's line, the points.
type Shown = (Vec<Seen>, Vec<String>, String, Vec<String>);

/// Run `grid` on a testbed whose P4Runtime switch is a soft one: what the executor read at each
/// point, the runner's write logs and the manifest's switch line.
fn run(grid: &str) -> Shown {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (sw, _outs) = SoftSwitch::new(1);
    let addr = rt
        .block_on(spawn_local(sw.clone()))
        .expect("serve")
        .to_string();
    let testbed = format!(
        "name: lab\nhosts: [{{name: localhost, role: [runner]}}]\nswitch:\n  kind: tofino\n  p4runtime:\n    address: \"{addr}\"\n"
    );
    inabench::testbed::Testbed::from_yaml(Path::new("lab.yaml"), &testbed).expect("testbed");
    let dir = tempfile::tempdir().expect("tempdir");
    let reg = Registry::new(vec![Box::new(Nothing)]);
    let req = RunRequest {
        testbed_name: "lab.yaml".into(),
        testbed_text: testbed,
        ..in_process_request(entry(grid), dir.path(), None)
    };
    let prepared = runner::prepare(&req, &reg).expect("prepare");
    let ids = prepared.plan.points.iter().map(|p| p.id.clone()).collect();
    let mut ex = ReadsTheSwitch {
        sw,
        seen: Vec::new(),
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let out = support::execute(prepared, &reg, tx, &mut ex).expect("the run ends");
    assert_eq!(out.manifest.status, RunStatus::Complete);
    let writes: Vec<String> = rx
        .try_iter()
        .filter_map(|e| match e {
            Event::Log { message, .. } if message.starts_with("the P4 switch's job") => {
                Some(message)
            }
            _ => None,
        })
        .collect();
    let line = out
        .manifest
        .drivers
        .iter()
        .find(|d| d.contains("the job written") || d.contains("the job rewritten"))
        .cloned()
        .unwrap_or_default();
    drop(rt);
    (ex.seen, writes, line, ids)
}

#[test]
fn points_of_2_4_3_workers_get_three_jobs_in_point_order() {
    let (seen, logged, line, ids) = run("workers: [2, 4, 3]");
    // at each point the switch holds the job of that point's workers: one rule per worker,
    // every rule's num_workers the point's
    assert_eq!(
        seen,
        vec![
            (ids[0].clone(), 2, vec![2]),
            (ids[1].clone(), 4, vec![4]),
            (ids[2].clone(), 3, vec![3]),
        ]
    );
    // the first write before the run (its lines in the manifest), the two rewrites logged
    assert_eq!(logged.len(), 2, "{logged:?}");
    assert!(logged[0].contains("a job of 4 workers"), "{}", logged[0]);
    assert!(logged[1].contains("a job of 3 workers"), "{}", logged[1]);
    assert!(
        line.contains("the job rewritten per point")
            && line.contains("3 writes for 3 `workers` values, in point order 2, 4, 3 workers"),
        "{line}"
    );
    // the rewrites' read-backs are in the manifest's line, not only in the log
    assert!(
        line.ends_with("; read back after each value's write: 2 workers: switchml: a job of 2 workers (128 slots of 48 values) read back; 4 workers: switchml: a job of 4 workers (128 slots of 48 values) read back; 3 workers: switchml: a job of 3 workers (128 slots of 48 values) read back"),
        "{line}"
    );
}

/// A rewrite that leaves the switch forwarding without a job (one worker: SwitchML's switch
/// takes 2 or more) is said in the manifest's line, where the first write's lines say a job.
#[test]
fn a_rewrite_without_a_job_is_in_the_manifest() {
    let (_, logged, line, _) = run("workers: [2, 1, 3]");
    assert_eq!(logged.len(), 2, "{logged:?}");
    assert!(
        line.contains("3 writes for 3 `workers` values, in point order 2, 1, 3 workers")
            && line.contains("; 1 workers: switchml: no job written (a job of 1 workers: SwitchML's switch takes 2..="),
        "{line}"
    );
}

#[test]
fn a_grid_with_one_workers_value_writes_the_job_once() {
    let (seen, logged, line, _) = run("{workers: [3], elements: [10, 20, 30]}");
    assert_eq!(seen.len(), 3);
    assert!(
        seen.iter().all(|(_, rules, n)| *rules == 3 && n == &[3]),
        "{seen:?}"
    );
    assert!(logged.is_empty(), "{logged:?}");
    assert!(
        line.contains("the job written once, for 3 workers"),
        "{line}"
    );
}
