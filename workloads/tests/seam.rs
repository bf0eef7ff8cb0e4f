//! The seam between systems and fabrics holds (issue #35):
//! - no system, workload or harness file builds a fabric itself (`SimFabric::new`,
//!   `fabric::mem::run(`, `fabric::udp::serve`, `fabric::raw::serve`), nor a process-per-node
//!   fabric from its parts (the udp coordinator and the node handshake): nodes run through
//!   `fabric::Fabric` (`Sim`, `Mem`, `UdpThreads`, `FabricChoice`, and `procs::UdpProcesses`
//!   for a process per node, udp and raw), the one door being `Fabric::run_deployment`;
//! - no code matches on the name of a system of `inabench_ina::SYSTEMS` to decide what it does:
//!   a system's facts are methods of `inabench_ina::common::System`.
//! - no protocol crate under `systems/` depends on the experiment machinery
//!   (`inabench-ina-run`: the sim drivers and calibration, node processes, training's collective
//!   and exchange), and no module of `inabench_ina` runs nodes on a fabric or launches node
//!   processes itself (that machinery moved out; it does not come back).
//!
//! Both scan the source text (what a reviewer would grep), so a new violation fails here with
//! its file and line.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n == "target") {
                continue;
            }
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn relative(p: &Path) -> String {
    let r = root();
    let canon = r.canonicalize().unwrap_or(r);
    p.canonicalize()
        .ok()
        .and_then(|c| c.strip_prefix(&canon).ok().map(|x| x.display().to_string()))
        .unwrap_or_else(|| p.display().to_string())
}

#[test]
fn no_system_or_workload_builds_a_fabric_itself() {
    let mut files = Vec::new();
    for d in ["systems", "workloads", "harness", "drivers"] {
        rust_files(&root().join(d), &mut files);
    }
    assert!(files.len() > 50, "the scan found {} files", files.len());
    let forbidden = [
        "SimFabric::new",
        "mem::run(",
        "udp::serve(",
        "udp::serve_prepared(",
        "raw::serve(",
        // a process per node wired by hand instead of through `procs::UdpProcesses`
        "Coordinator::new(",
        "Coordinator::on(",
        "child_handshake",
    ];
    let mut found = Vec::new();
    for f in &files {
        let rel = relative(f);
        if rel.ends_with("workloads/tests/seam.rs") {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap_or_default();
        for (i, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            for pat in forbidden {
                if code.contains(pat) {
                    found.push(format!("{rel}:{}: {}", i + 1, code));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "built a fabric outside fabric/ (run the nodes through fabric::Fabric):\n{}",
        found.join("\n")
    );
}

/// Files that may name systems in a match, and why.
const NAME_TABLES: &[(&str, &str)] = &[(
    "systems/ina-run/src/training.rs",
    "Schemes::comm: the analytic schemes of NetReduce's Appendix A (flat ring, Tencent's \
     all-reduce, parallel NetReduce) by the names the modelled specs give them: formulas, not \
     the protocol systems",
)];

/// Whether `code` compares or matches a string literal `lit`: `"x" =>`, `"x" |`, `| "x"`,
/// `== "x"`, `!= "x"`.
fn matches_literal(code: &str, lit: &str) -> bool {
    let q = format!("\"{lit}\"");
    let mut from = 0;
    while let Some(at) = code[from..].find(&q) {
        let start = from + at;
        let end = start + q.len();
        let after = code[end..].trim_start();
        let before = code[..start].trim_end();
        if after.starts_with("=>")
            || (after.starts_with('|') && !after.starts_with("||"))
            || (before.ends_with('|') && !before.ends_with("||"))
            || before.ends_with("==")
            || before.ends_with("!=")
        {
            return true;
        }
        from = end;
    }
    false
}

#[test]
fn the_matcher_finds_matches_and_comparisons_only() {
    assert!(matches_literal(r#""atp" => 1,"#, "atp"));
    assert!(matches_literal(r#""switchml" | "atp" => 1,"#, "atp"));
    assert!(matches_literal(r#"if name == "atp" {"#, "atp"));
    assert!(matches_literal(r#"if name != "atp" {"#, "atp"));
    assert!(!matches_literal(r#"system("atp")"#, "atp"));
    assert!(!matches_literal(r#"&["netreduce", "atp"]"#, "atp"));
    assert!(!matches_literal(r#"x || "atp".is_empty()"#, "atp"));
}

#[test]
fn no_code_matches_on_a_systems_name() {
    let names: Vec<&str> = inabench_ina::SYSTEMS.iter().map(|s| s.name()).collect();
    assert!(names.len() >= 6, "{names:?}");
    let mut files = Vec::new();
    for d in [
        "systems/ina/src",
        "systems/ina-run/src",
        "workloads/src/netreduce",
        "workloads/src/fabric.rs",
        "workloads/src/hostcost.rs",
        "harness/src",
    ] {
        let p = root().join(d);
        if p.is_file() {
            files.push(p);
        } else {
            rust_files(&p, &mut files);
        }
    }
    let mut found = Vec::new();
    for f in &files {
        let rel = relative(f);
        if NAME_TABLES.iter().any(|(file, _)| *file == rel) {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap_or_default();
        for (i, line) in text.lines().enumerate() {
            let code = line.trim_start();
            // in-file tests name systems to build them; the code above them may not
            if code.starts_with("#[cfg(test)]") {
                break;
            }
            if code.starts_with("//") {
                continue;
            }
            for n in &names {
                if matches_literal(code, n) {
                    found.push(format!("{rel}:{}: {}", i + 1, code));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "decides by a system's name (make it a method of inabench_ina::common::System):\n{}",
        found.join("\n")
    );
}

/// Experiment machinery lives above the protocols: no crate under `systems/` but the
/// machinery's own (`systems/ina-run`) depends on `inabench-ina-run`, so a protocol crate never
/// reaches its training glue (and the dependency graph stays acyclic).
#[test]
fn no_protocol_crate_depends_on_the_experiment_machinery() {
    let systems = root().join("systems");
    let mut manifests = Vec::new();
    for e in std::fs::read_dir(&systems).expect("systems/").flatten() {
        let m = e.path().join("Cargo.toml");
        if m.is_file() {
            manifests.push(m);
        }
    }
    assert!(manifests.len() >= 9, "found {} crates", manifests.len());
    let mut found = Vec::new();
    for m in &manifests {
        let rel = relative(m);
        let text = std::fs::read_to_string(m).expect("a manifest");
        if text.contains("name = \"inabench-ina-run\"") {
            continue;
        }
        for (i, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("inabench-ina-run") {
                found.push(format!("{rel}:{}: {line}", i + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "a protocol crate depends on the experiment machinery:\n{}",
        found.join("\n")
    );
    let workloads = std::fs::read_to_string(root().join("workloads/Cargo.toml")).expect("manifest");
    assert!(
        workloads.lines().any(|l| l.starts_with("inabench-ina-run")),
        "the scan reads dependency lines as workloads' manifest writes them"
    );
}

/// Modules of `inabench_ina` that may drive nodes on a fabric, and why.
const INA_DRIVERS: &[(&str, &str)] = &[(
    "systems/ina/src/fuzz.rs",
    "the fuzz body (the cargo-fuzz target ina_endpoints and tests/fuzz_smoke.rs): hostile \
     schedules through fabric::fuzz, the fuzzing harness's own sim star",
)];

/// What runs nodes on a fabric or launches node processes: the fabrics and their drivers, the
/// process-per-node launcher and its namespaces, the calibration's CPU meter.
const DRIVER_APIS: &[&str] = &[
    "Sim::new(",
    "Sim {",
    "Mem {",
    "UdpThreads",
    "FabricChoice",
    "UdpProcesses",
    "procs::",
    "run_deployment(",
    "run_observed(",
    "Until {",
    "netns::",
    "raw::",
    "CpuMeter",
    "Timed::",
    "sim_fabric(",
    "SimFabric",
];

/// `file`'s code lines (not comments, nothing after `#[cfg(test)]`) that use a driver API.
fn driver_uses(file: &Path) -> Vec<String> {
    let rel = relative(file);
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let mut found = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let code = line.trim_start();
        if code.starts_with("#[cfg(test)]") {
            break;
        }
        if code.starts_with("//") {
            continue;
        }
        if DRIVER_APIS.iter().any(|p| code.contains(p)) {
            found.push(format!("{rel}:{}: {code}", i + 1));
        }
    }
    found
}

/// The protocol crate runs nothing (#35 item 3): the sim drivers and the calibration
/// (`inabench_ina_run::drive`), the systems as node processes (`udp_node`, `raw_node`) and
/// training's glue live in `inabench-ina-run`. A module of `systems/ina/src` that runs nodes on a
/// fabric or launches node processes fails here with its file and line; in-file tests (after
/// `#[cfg(test)]`) and test-only modules (`#[cfg(test)] mod x;` in lib.rs, the in-file tests'
/// virtual-time driver) may drive their nodes, as quinn-proto's tests do.
#[test]
fn the_protocol_crate_runs_no_driver() {
    let dir = root().join("systems/ina/src");
    let lib = std::fs::read_to_string(dir.join("lib.rs")).expect("ina's lib.rs");
    let lines: Vec<&str> = lib.lines().map(str::trim).collect();
    let test_only: Vec<String> = lines
        .windows(2)
        .filter(|w| w[0] == "#[cfg(test)]")
        .filter_map(|w| {
            w[1].strip_prefix("mod ")
                .or(w[1].strip_prefix("pub(crate) mod "))
        })
        .map(|m| format!("systems/ina/src/{}.rs", m.trim_end_matches(';')))
        .collect();
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    assert!(files.len() > 15, "the scan found {} files", files.len());
    let mut found = Vec::new();
    for f in &files {
        let rel = relative(f);
        if INA_DRIVERS.iter().any(|(file, _)| *file == rel) || test_only.contains(&rel) {
            continue;
        }
        found.extend(driver_uses(f));
    }
    assert!(
        found.is_empty(),
        "the protocol crate runs nodes itself (put the driver in systems/ina-run):\n{}",
        found.join("\n")
    );
    // the scan sees a driver where one is: the machinery's own sim driver
    assert!(
        !driver_uses(&root().join("systems/ina-run/src/drive.rs")).is_empty(),
        "the scan finds no driver in inabench_ina_run::drive"
    );
}
