//! Issue #34's second done-means: no modelled verdict of P4SGD or LuWu reads a timing taken while
//! the run runs. This test runs the modelled class of every P4SGD and LuWu experiment (quick
//! profile, the binary, its break-even searches included) twice, each in a fresh process (so no
//! cache of the first pass can serve the second): once on the host as it is, once beside a
//! busy thread on every core of this host. Every recorded number (each row of rows.jsonl, keyed by
//! experiment, point, system, repetition and metric) and every verdict with its detail must be
//! identical. A model input measured during the run (a calibration, a wall-clock rate, a timed
//! CPU cost) moves under the busy threads and fails it: before issue #34 P4SGD's CPUSync cost per
//! frame was such a measurement (6.83-8.25 us by the host's load, p4sgd-fig15's
//! gpusync-before-cpusync flipping at 6.99 us).
//!
//! Ignored by default: it runs 15 experiments' modelled classes twice, 18 minutes on this
//! shared 2-core host at load average 5-9 (p4sgd-fig15 and -table4 take minutes each, and
//! the claims that rest on a host-profile input rerun points for their break-evens). Run it
//! with `cargo test --release --workspace --test modelled_load -- --ignored` (or the test binary,
//! target/release/deps/modelled_load-*, with `--ignored`).

use inabench::scoreboard;
use inabench_core::catalog::{Catalog, spec_files};
use inabench_core::spec::{Fidelity, Status};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo root")
        .to_path_buf()
}

/// (experiment, point, system, fidelity, repetition, metric) -> value, over every run folder.
type Rows = BTreeMap<(String, String, String, String, u64, String), f64>;

/// claim key -> (verdict, detail with the break-even searches' own wall time taken out).
type Verdicts = BTreeMap<(String, String), (String, String)>;

/// One pass: the modelled class of `ids` in a fresh process into a fresh results folder.
fn pass(cat: &Catalog, ids: &[String]) -> (Rows, Verdicts) {
    let results = tempfile::tempdir().expect("tmp");
    let out = Command::new(env!("CARGO_BIN_EXE_inabench"))
        .args(["--results"])
        .arg(results.path())
        .args(["reproduce", "--profile", "quick", "--headless"])
        .args(["--fidelity", "modelled"])
        .args(ids)
        .env("CI", "true")
        .output()
        .expect("runs");
    // exit 1 is a run with a wrong result (the verdicts show it); 2 is a usage error
    assert_ne!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut rows = Rows::new();
    for dir in std::fs::read_dir(results.path()).expect("results folder") {
        let dir = dir.expect("entry").path();
        let Ok(text) = std::fs::read_to_string(dir.join("rows.jsonl")) else {
            continue;
        };
        let name = dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        // <timestamp>-<experiment>
        let exp = name.split_once('-').map(|(_, e)| e).unwrap_or(&name);
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line).expect("a JSON row");
            if v["kind"] != "row" {
                continue;
            }
            let s = |k: &str| v[k].as_str().unwrap_or_default().to_string();
            let key = (
                exp.to_string(),
                s("point_id"),
                s("system"),
                s("fidelity"),
                v["repetition"].as_u64().unwrap_or(0),
                s("metric"),
            );
            let value = v["value"].as_f64().expect("a number");
            assert!(
                rows.insert(key.clone(), value).is_none(),
                "row recorded twice: {key:?}"
            );
        }
    }
    let board = scoreboard::collect_from(cat, results.path(), None).expect("board");
    let mut verdicts = Verdicts::new();
    for l in &board.lines {
        if !ids.contains(&l.experiment) {
            continue;
        }
        let Some(cell) = l.classes.get(&Fidelity::Modelled) else {
            continue;
        };
        verdicts.insert(
            (l.experiment.clone(), l.claim.clone()),
            (cell.verdict.clone(), without_search_times(&cell.detail)),
        );
    }
    (rows, verdicts)
}

/// A break-even sentence ends with its search's cost, `(search: N points rerun, S s)`: the
/// seconds are this host's, the rest is the model's.
fn without_search_times(detail: &str) -> String {
    let mut out = String::new();
    let mut rest = detail;
    while let Some(i) = rest.find("(search:") {
        out.push_str(&rest[..i]);
        match rest[i..].find(')') {
            Some(j) => rest = &rest[i + j + 1..],
            None => {
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

#[test]
fn search_times_are_taken_out_of_a_detail_and_nothing_else() {
    assert_eq!(
        without_search_times("holds from 6.99 us (search: 12 points rerun, 3.4 s); fails"),
        "holds from 6.99 us ; fails"
    );
    assert_eq!(without_search_times("no search"), "no search");
}

#[test]
#[ignore = "several minutes: every P4SGD and LuWu modelled class, twice (see the module doc)"]
fn p4sgd_and_luwu_modelled_classes_give_the_same_numbers_beside_busy_threads() {
    let root = root();
    let cat = Catalog::from_texts(spec_files(&root.join("experiments")).expect("specs"))
        .expect("catalogue");
    let ids: Vec<String> = cat
        .entries
        .iter()
        .map(|e| &e.spec)
        .filter(|s| s.paper_id == "p4sgd" || s.paper_id == "luwu")
        .filter(|s| s.status == Status::Implemented && s.fidelity.contains(&Fidelity::Modelled))
        .map(|s| s.id.clone())
        .collect();
    assert!(
        ids.len() >= 15,
        "only {} modelled experiments: {ids:?}",
        ids.len()
    );
    let quiet = pass(&cat, &ids);
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let stop = AtomicBool::new(false);
    let loaded = std::thread::scope(|s| {
        for _ in 0..cores {
            s.spawn(|| {
                let mut x = 1u64;
                while !stop.load(Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            });
        }
        let r = pass(&cat, &ids);
        stop.store(true, Ordering::Relaxed);
        r
    });
    // every experiment recorded numbers and judged claims
    for id in &ids {
        assert!(
            quiet.0.keys().any(|k| &k.0 == id),
            "{id}: no modelled row recorded"
        );
    }
    assert_eq!(
        quiet.0.keys().collect::<Vec<_>>(),
        loaded.0.keys().collect::<Vec<_>>(),
        "the same rows in both passes"
    );
    let moved: Vec<_> = quiet
        .0
        .iter()
        .filter(|(k, v)| loaded.0[*k].to_bits() != v.to_bits())
        .map(|(k, v)| format!("{k:?}: {v} quiet, {} loaded", loaded.0[k]))
        .collect();
    assert!(
        moved.is_empty(),
        "numbers moved with the load:\n{}",
        moved.join("\n")
    );
    assert!(
        quiet.1.len() >= 40,
        "only {} modelled verdicts",
        quiet.1.len()
    );
    assert_eq!(
        quiet.1, loaded.1,
        "verdicts or their details moved with the load"
    );
}
