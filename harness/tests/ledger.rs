//! The verdict ledger: the quick profile's verdicts of every experiment are committed in
//! `experiments/verdicts.ledger`. This test reruns the fast, deterministic experiments (`FAST`:
//! modelled and functional classes that run in seconds and read nothing measured on the host)
//! and compares each verdict with the ledger, so a change of verdict cannot go unnoticed: it
//! must change the ledger in the same commit.
//!
//! The simulated classes of `FAST_SIMULATED` are checked too: they charge host costs from the
//! reference host profile (experiments/hosts/reference.yaml), a declared input, and measure
//! nothing on this host, so they are a function of spec, profile and seed (their break-even
//! reruns included). The benchmark family's bench-allreduce, bench-hetero, bench-small and
//! bench-twojobs (their simulated class) are among them; bench-loss is not (a point with
//! SwitchML's wrong sum fails, which this test reads as a point of the suite's own that failed).
//!
//! Left out on purpose: P4SGD's larger models (fig9, fig10, fig12, fig15: deterministic since
//! #34, but tens of seconds each), the Libra aggregation experiments that take a minute or more
//! with their break-even searches (libra-fig12, libra-fig13: deterministic since their host
//! costs come from the profile, but not fast), and every emulated class (timing on a shared
//! host); their ledger lines are checked by the next full sweep, not by this test.

use inabench::scoreboard;
use inabench_core::catalog::{Catalog, spec_files};
use inabench_core::spec::{Fidelity, Status};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Deterministic experiments that run in seconds (see the module comment for what is left out).
const FAST: [&str; 24] = [
    "netreduce-fig7",
    "netreduce-fig11",
    "netreduce-table7",
    "netreduce-table8",
    "netreduce-table9",
    "netreduce-table10",
    "libra-resources",
    "libra-table2",
    "libra-fig5",
    "luwu-fig2",
    "luwu-fig3",
    "luwu-fig10",
    "luwu-fig11",
    "luwu-fig12",
    "luwu-fig13",
    "luwu-fig14",
    "luwu-fig17",
    "aleph-fig10",
    "aleph-fig13",
    "aleph-fig15-16",
    "aleph-xdp-scale",
    "p4sgd-fig11",
    "p4sgd-fig13",
    "p4sgd-table4",
];

/// Simulated classes that read only the spec and the host profile, never this host, and run in
/// seconds (netreduce-table6 in about a minute and a half with its break-even searches,
/// p4sgd-fig8 in about half a minute with its: its CPU systems read the profile since #34).
const FAST_SIMULATED: [&str; 11] = [
    "bench-allreduce",
    "bench-hetero",
    "bench-small",
    "bench-twojobs",
    "netreduce-fig7",
    "netreduce-table6",
    "libra-fig14",
    "libra-fig17",
    "libra-fig18",
    "p4sgd-fig8",
    "p4sgd-fig13",
];

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
    for (class, fast) in [
        (Fidelity::Modelled, &FAST[..]),
        (Fidelity::Functional, &FAST[..]),
        (Fidelity::Simulated, &FAST_SIMULATED[..]),
    ] {
        let ids: Vec<String> = cat
            .entries
            .iter()
            .map(|e| &e.spec)
            .filter(|s| s.status == Status::Implemented && s.fidelity.contains(&class))
            .filter(|s| fast.contains(&s.id.as_str()))
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
            // a point that fails makes a claim `not checkable here` for a reason of the suite's
            // own (fig11's dpdk points once failed for a missing profile entry and the verdicts
            // moved from holds to not checkable): a fast experiment runs every planned point
            assert!(
                !cell.detail.contains("the point failed"),
                "{} {} ({class}): a planned point failed: {}",
                l.experiment,
                l.claim,
                cell.detail
            );
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
    // every fast experiment is still in the catalogue
    for id in FAST.iter().chain(&FAST_SIMULATED) {
        assert!(
            cat.get(id).is_ok(),
            "{id} is not a spec any more: update FAST"
        );
    }
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
            [
                "holds",
                "fails",
                "inconclusive",
                "not checkable here",
                "host-dependent"
            ]
            .contains(&verdict.as_str()),
            "{verdict}"
        );
    }
}
