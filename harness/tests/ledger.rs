//! The verdict ledger: the quick profile's verdicts of every experiment are committed in
//! `experiments/verdicts.ledger`. This test reruns the fast, deterministic experiments (the
//! modelled and functional classes of every spec whose quick profile is estimated at 2 s or
//! less) and compares each verdict with the ledger, so a change of verdict cannot go unnoticed:
//! it must change the ledger in the same commit.

use inabench::scoreboard;
use inabench_core::catalog::{Catalog, spec_files};
use inabench_core::spec::{Fidelity, Status};
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo root")
        .to_path_buf()
}

#[test]
fn fast_verdicts_match_the_ledger() {
    let root = root();
    let ledger_path = root.join("experiments/verdicts.ledger");
    let text = std::fs::read_to_string(&ledger_path).expect("experiments/verdicts.ledger exists");
    let ledger = scoreboard::parse_ledger(&text);
    assert!(!ledger.is_empty(), "the ledger has no verdicts");
    let cat = Catalog::from_texts(spec_files(&root.join("experiments")).expect("specs"))
        .expect("catalogue");
    let results = tempfile::tempdir().expect("tmp");
    let mut checked = 0;
    for class in [Fidelity::Modelled, Fidelity::Functional] {
        let ids: Vec<String> = cat
            .entries
            .iter()
            .map(|e| &e.spec)
            .filter(|s| s.status == Status::Implemented && s.fidelity.contains(&class))
            .filter(|s| s.profiles["quick"].estimated_seconds <= 2.0)
            .map(|s| s.id.clone())
            .collect();
        if ids.is_empty() {
            continue;
        }
        let out = Command::new(env!("CARGO_BIN_EXE_inabench"))
            .args(["--results"])
            .arg(results.path())
            .args([
                "reproduce",
                "--profile",
                "quick",
                "--headless",
                "--format",
                "json",
            ])
            .args(["--fidelity", class.as_str()])
            .args(&ids)
            .env("CI", "true")
            .output()
            .expect("runs");
        // exit 1 is a run with a wrong result, which the verdicts show; 2 is a usage error
        assert_ne!(
            out.status.code(),
            Some(2),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let board = scoreboard::collect_from(&cat, results.path(), None).expect("board");
        for l in &board.lines {
            if !ids.contains(&l.experiment) {
                continue;
            }
            let Some(cell) = l.classes.get(&class) else {
                continue;
            };
            let key = (l.experiment.clone(), l.claim.clone(), class.to_string());
            match ledger.get(&key) {
                Some(v) => assert_eq!(
                    v, &cell.verdict,
                    "{} {} ({class}) is now `{}` ({}), the ledger says `{v}`: a change of verdict must update experiments/verdicts.ledger in the same commit",
                    l.experiment, l.claim, cell.verdict, cell.detail
                ),
                None => panic!(
                    "{} {} ({class}) is not in experiments/verdicts.ledger: add its verdict `{}`",
                    l.experiment, l.claim, cell.verdict
                ),
            }
            checked += 1;
        }
    }
    assert!(checked >= 20, "only {checked} verdicts were compared");
}

#[test]
fn the_ledger_names_known_experiments_and_verdicts() {
    let root = root();
    let text = std::fs::read_to_string(root.join("experiments/verdicts.ledger")).expect("ledger");
    let cat = Catalog::from_texts(spec_files(&root.join("experiments")).expect("specs"))
        .expect("catalogue");
    for ((exp, claim, class), verdict) in scoreboard::parse_ledger(&text) {
        let e = cat
            .get(&exp)
            .unwrap_or_else(|_| panic!("{exp} is not a spec"));
        assert!(
            e.spec.claims.iter().any(|c| c.id == claim),
            "{exp} has no claim {claim}"
        );
        assert!(Fidelity::parse(&class).is_some(), "{class}");
        assert!(
            ["holds", "fails", "inconclusive", "not checkable here"].contains(&verdict.as_str()),
            "{verdict}"
        );
    }
}
