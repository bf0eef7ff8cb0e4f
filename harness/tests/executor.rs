//! The runner's point loop through the `Executor` trait, with the scripted double: what a wrong
//! result, a failure and an interrupted job do to the run, its rows and its manifest, without
//! any workload running.

mod support;

use inabench::executor::Scripted;
use inabench::launcher::JobFailure;
use inabench::registry::Registry;
use inabench::runner;
use inabench_core::event::Event;
use inabench_core::store::{self, RunStatus};
use support::{in_process_request, probe_entry, probe_row as row};

#[test]
fn wrong_result_is_kept_as_data_and_a_failure_fails_only_its_point() {
    let dir = tempfile::tempdir().expect("tempdir");
    let reg = Registry::builtin();
    let req = in_process_request(probe_entry(&[1, 2, 3]), dir.path(), None);
    let prepared = runner::prepare(&req, &reg).expect("prepare");
    let ids: Vec<String> = prepared.plan.points.iter().map(|p| p.id.clone()).collect();
    assert_eq!(ids.len(), 3);
    let mut ex = Scripted::default();
    // point 1: fine; point 2: a wrong aggregate (its row stays); point 3: the job fails
    ex.steps.push_back((vec![row(&ids[0], 1.0)], Ok(())));
    ex.steps.push_back((
        vec![row(&ids[1], 2.0)],
        Err(JobFailure::WrongResult {
            message: "sum 5 != 6".into(),
        }),
    ));
    ex.steps.push_back((
        vec![],
        Err(JobFailure::Failed {
            message: "the node could not bind".into(),
        }),
    ));
    let (tx, rx) = std::sync::mpsc::channel();
    let out = support::execute(prepared, &reg, tx, &mut ex).expect("the run ends");
    assert_eq!(ex.jobs.len(), 3, "every point ran once");
    assert_eq!(ex.jobs[1].point.id, ids[1]);
    assert_eq!(out.manifest.points_wrong, 1);
    assert_eq!(out.manifest.points_failed, 1);
    assert_eq!(out.manifest.status, RunStatus::Failed);
    assert!(
        out.wrong_result
            .as_deref()
            .is_some_and(|w| w.contains("sum 5 != 6")),
        "{:?}",
        out.wrong_result
    );
    // the wrong point's row is stored, and the point counts as done (resume does not rerun it)
    let st = store::read_rows(&out.run_dir).expect("rows");
    assert_eq!(st.rows.len(), 2);
    assert_eq!(st.done.len(), 2);
    let logs: Vec<String> = rx
        .try_iter()
        .filter_map(|e| match e {
            Event::Log { message, .. } => Some(message),
            _ => None,
        })
        .collect();
    assert!(
        logs.iter().any(|m| m.contains("the node could not bind")),
        "{logs:?}"
    );
}
