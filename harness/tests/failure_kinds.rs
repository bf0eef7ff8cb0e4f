//! A failed point's kind goes through the store to the report (#35 item 6): the runner's
//! `point_done` record keeps it, `store::read_rows` gives it back, and the plan's states tell a
//! point that failed for its parameter values, or in its setup, from one that failed otherwise. A results folder
//! written before the kind was kept loads, reads its failures as "the point failed" and resumes
//! the same points as before. A failed point's error reaches the plan's sentence too.

mod support;

use inabench::executor::Scripted;
use inabench::launcher::JobFailure;
use inabench::registry::Registry;
use inabench::runner::{self, RunRequest};
use inabench_core::catalog::Entry;
use inabench_core::claims::{Missing, PointState};
use inabench_core::event::FailureKind;
use inabench_core::plan::run_key;
use inabench_core::spec::Fidelity;
use inabench_core::store;
use inabench_report::analysis::PlanStates;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use support::{in_process_request, probe_entry, probe_row as row};

fn entry() -> Entry {
    probe_entry(&[1, 2, 3, 4, 5])
}

fn request(results: &Path, resume: Option<PathBuf>) -> RunRequest {
    in_process_request(entry(), results, resume)
}

/// The plan's states of the run's one class, in plan order.
fn states(run_dir: &Path) -> Vec<PointState> {
    let m = store::read_manifest(run_dir).expect("manifest");
    let plan = PlanStates::of_run(run_dir, &entry().spec, &m).expect("plan states");
    plan.by_class[&Fidelity::Functional]
        .iter()
        .map(|p| p.state.clone())
        .collect()
}

/// The points a resume of `run_dir` counts as done (it runs the others again).
fn resumed_done(results: &Path, run_dir: &Path) -> BTreeSet<String> {
    let reg = Registry::builtin();
    let p = runner::prepare(&request(results, Some(run_dir.to_path_buf())), &reg)
        .expect("prepare a resume");
    p.done.clone()
}

#[test]
fn a_points_failure_kind_reaches_the_report_and_old_folders_read_as_before() {
    let dir = tempfile::tempdir().expect("tempdir");
    let reg = Registry::builtin();
    let prepared = runner::prepare(&request(dir.path(), None), &reg).expect("prepare");
    let ids: Vec<String> = prepared.plan.points.iter().map(|p| p.id.clone()).collect();
    assert_eq!(ids.len(), 5);
    let key = |i: usize| run_key(Fidelity::Functional, &ids[i]);
    let mut ex = Scripted::default();
    // 1: bad parameters; 2: a failure of another kind; 3: a wrong result; 4: fine; 5: setup
    ex.steps.push_back((
        vec![],
        Err(JobFailure::BadParameters {
            message: "work must be below 2".into(),
        }),
    ));
    ex.steps.push_back((
        vec![],
        Err(JobFailure::Failed {
            message: "the node could not bind".into(),
        }),
    ));
    ex.steps.push_back((
        vec![row(&ids[2], 2.0)],
        Err(JobFailure::WrongResult {
            message: "sum 5 != 6".into(),
        }),
    ));
    ex.steps.push_back((vec![row(&ids[3], 1.0)], Ok(())));
    ex.steps.push_back((
        vec![],
        Err(JobFailure::Setup {
            message: "the launcher started no agent".into(),
        }),
    ));
    let (tx, _rx) = std::sync::mpsc::channel();
    let out = support::execute(prepared, &reg, tx, &mut ex).expect("the run ends");
    assert_eq!(ex.jobs.len(), 5, "every point ran once");
    assert_eq!(
        (out.manifest.points_failed, out.manifest.points_invalid),
        (3, 1)
    );

    // the store keeps each failure's kind
    let text = std::fs::read_to_string(out.run_dir.join(store::ROWS_FILE)).expect("rows");
    for kind in ["bad_parameters", "failed", "wrong_result", "setup"] {
        assert!(
            text.contains(&format!(r#""failure":"{kind}""#)),
            "{kind}: {text}"
        );
    }
    let st = store::read_rows(&out.run_dir).expect("rows");
    assert_eq!(st.failed.get(&key(0)), Some(&FailureKind::BadParameters));
    assert_eq!(st.failed.get(&key(1)), Some(&FailureKind::Failed));
    assert_eq!(st.failed.get(&key(4)), Some(&FailureKind::Setup));
    assert_eq!(st.failed.len(), 3);

    // the report's plan tells them apart, by type and in its sentence, which quotes the error
    let new = states(&out.run_dir);
    let says = [
        "the point failed for its parameter values: ",
        "the point failed: ",
        "",
        "",
        "the point's setup failed: ",
    ];
    let words = [
        "work must be below 2",
        "the node could not bind",
        "",
        "",
        "the launcher started no agent",
    ];
    let kinds = [
        FailureKind::BadParameters,
        FailureKind::Failed,
        FailureKind::WrongResult,
        FailureKind::WrongResult,
        FailureKind::Setup,
    ];
    assert_eq!(new[2], PointState::Wrong("sum 5 != 6".into()));
    assert_eq!(new[3], PointState::Done);
    for i in [0, 1, 4] {
        let PointState::Missing(m @ Missing::Failed(kind, Some(why))) = &new[i] else {
            panic!("point {i}: {:?}", new[i]);
        };
        assert_eq!(*kind, kinds[i], "point {i}");
        assert!(why.contains(words[i]), "point {i}: {why}");
        let sentence = m.to_string();
        assert!(
            sentence.starts_with(says[i]) && sentence.contains(words[i]),
            "point {i}: {sentence}"
        );
    }
    let done_new = resumed_done(dir.path(), &out.run_dir);
    assert_eq!(done_new, BTreeSet::from([key(2), key(3)]));

    // the same folder as an older version wrote it: no `failure` field in any record
    let old: String = text
        .lines()
        .map(|l| {
            let mut l = l.to_string();
            for kind in ["bad_parameters", "failed", "wrong_result", "setup"] {
                l = l.replace(&format!(r#","failure":"{kind}""#), "");
            }
            l + "\n"
        })
        .collect();
    assert!(!old.contains("failure"), "{old}");
    std::fs::write(out.run_dir.join(store::ROWS_FILE), old).expect("write the old records");
    let st = store::read_rows(&out.run_dir).expect("an old folder loads");
    assert_eq!(st.failed.get(&key(0)), Some(&FailureKind::Failed));
    assert_eq!(st.failed.get(&key(1)), Some(&FailureKind::Failed));
    assert_eq!(st.failed.get(&key(4)), Some(&FailureKind::Failed));
    // every failure reads as "the point failed", still with its error
    let old = states(&out.run_dir);
    assert_eq!(old[2..4], new[2..4]);
    for i in [0, 1, 4] {
        let PointState::Missing(m @ Missing::Failed(FailureKind::Failed, Some(why))) = &old[i]
        else {
            panic!("point {i}: {:?}", old[i]);
        };
        assert!(why.contains(words[i]), "point {i}: {why}");
        assert!(
            m.to_string().starts_with("the point failed: "),
            "point {i}: {m}"
        );
    }
    assert_eq!(resumed_done(dir.path(), &out.run_dir), done_new);
}
