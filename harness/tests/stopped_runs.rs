//! A run that stops on an error before its first point finishes (issue #40): its folder is
//! marked as it ends, never left `running`, and `--resume` finishes it.

mod support;

use inabench::launcher::{Job, JobFailure};
use inabench::registry::Registry;
use inabench::runner::{self, RunRequest};
use inabench_core::event::{Event, PointFailure};
use inabench_core::store::{self, RunStatus};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use support::{in_process_request, probe_entry};

fn request(results: &Path, resume: Option<PathBuf>) -> RunRequest {
    in_process_request(probe_entry(&[1, 2]), results, resume)
}

/// Panics in its first job (a workload bug); runs the others through the probe's workload.
struct PanicsFirst<'a> {
    registry: &'a Registry,
    jobs: usize,
}

impl inabench::executor::Executor for PanicsFirst<'_> {
    fn run_job(&mut self, job: &Job, sink: &mut dyn FnMut(Event)) -> Result<(), JobFailure> {
        self.jobs += 1;
        if self.jobs == 1 {
            panic!("index out of bounds: the len is 4 but the index is 500");
        }
        inabench::executor::run_here(self.registry, job, &AtomicBool::new(false), sink)
    }
}

/// A point that panics in its first repetition fails alone: the run goes on to the next point,
/// ends `incomplete` with the panic's words in the point's failure (not `running`, which a
/// panic through the runner thread left), and a resume reruns only that point.
#[test]
fn a_point_that_panics_fails_alone_and_the_run_is_marked() {
    let dir = tempfile::tempdir().expect("tmp");
    let reg = Registry::builtin();
    let prepared = runner::prepare(&request(dir.path(), None), &reg).expect("prepare");
    let (tx, rx) = std::sync::mpsc::channel();
    let mut ex = PanicsFirst {
        registry: &reg,
        jobs: 0,
    };
    let out = support::execute(prepared, &reg, tx, &mut ex).expect("the run ends");
    assert_eq!(out.manifest.status, RunStatus::Incomplete);
    assert_eq!(
        (out.manifest.points_done, out.manifest.points_failed),
        (1, 1)
    );
    let on_disk = store::read_manifest(&out.run_dir).expect("manifest");
    assert_eq!(on_disk.status, RunStatus::Incomplete);
    let failures: Vec<String> = rx
        .try_iter()
        .filter_map(|e| match e {
            Event::PointDone {
                failure: Some(PointFailure::Failed(m)),
                ..
            } => Some(m),
            _ => None,
        })
        .collect();
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert!(
        failures[0].contains("the point panicked: index out of bounds"),
        "{}",
        failures[0]
    );

    // the resume runs the failed point only, and completes the run
    let resumed =
        runner::prepare(&request(dir.path(), Some(out.run_dir.clone())), &reg).expect("resume");
    assert_eq!(resumed.plan.points.len(), 2);
    let (tx, _rx) = std::sync::mpsc::channel();
    let mut ex = PanicsFirst {
        registry: &reg,
        jobs: 1,
    };
    let out = support::execute(resumed, &reg, tx, &mut ex).expect("the resume ends");
    assert_eq!(out.manifest.status, RunStatus::Complete);
    // one point's repetitions ran again (the probe's quick profile repeats each point)
    let reps = (ex.jobs - 1) as u32;
    assert!(reps >= 1, "{reps}");
    let st = store::read_rows(&out.run_dir).expect("rows");
    assert_eq!(st.done.len(), 2);
}
