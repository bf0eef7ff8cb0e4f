//! No process-wide cache holds a measurement (#35 item 6): every `static` `OnceLock`/`LazyLock`
//! in the library and workload crates' sources is either a memo of a pure function, with a
//! comment within the lines above it saying `Pure:` and why (a computed table, a simulation in
//! virtual time keyed by every input), or one of the few listed below with what it holds.
//! A new cache fails this test until it is classified: a rate, a timing or any other value
//! measured on this host is a run's input (measured in the run, or passed in), never
//! remembered for the next experiment of the process.

mod scan;

use scan::sources;
use std::path::{Path, PathBuf};

/// Caches whose file carries no `Pure:` comment, by (file name, static), with what they hold.
const CLASSIFIED: &[(&str, &str, &str)] = &[
    (
        "lib.rs",
        "NAMES",
        "the system list's names: derived from a constant list",
    ),
    (
        "fuzz.rs",
        "NAMES",
        "the fuzzed systems' names: derived from a constant list",
    ),
    (
        "sparse.rs",
        "NAMES",
        "benchmark systems' names: derived from a constant list",
    ),
    (
        "allreduce.rs",
        "NAMES",
        "benchmark systems' names: derived from a constant list",
    ),
    (
        "libbpf.rs",
        "LIBBPF",
        "a loaded library handle, not a value of a run",
    ),
    (
        "batch.rs",
        "PROBED",
        "fabric's udp offloads: an environment setting (INABENCH_UDP_OFFLOAD=mmsg|off turns \
         them off), read once, else this kernel's GSO/GRO support (a yes/no capability probed \
         once, not a timing or a rate); neither changes between the experiments of a process, \
         and rows and manifests record which was used",
    ),
    (
        "training.rs",
        "CACHE",
        "systems/ina-run training (fit_with_cached): fits of simulated runs in virtual time, \
         keyed by system, workers, line rate and host stack (a measured host cost is passed \
         in and is part of the key); the emulated class's wall-time memo (exchange_cached) is \
         gone since 633c7fe, see the test below",
    ),
];

/// The statics that hold a lazily filled value: (file, line number, name, lines above it).
fn lazy_statics(root: &Path) -> Vec<(PathBuf, usize, String, String)> {
    let mut files = Vec::new();
    for top in [
        "core",
        "fabric",
        "report",
        "harness",
        "systems",
        "workloads",
        "drivers",
        "wire",
        "bench",
    ] {
        sources(&root.join(top), &mut files);
    }
    files.sort();
    let mut found = Vec::new();
    for f in files {
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue;
        };
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let t = line.trim_start();
            let Some(rest) = t
                .strip_prefix("static ")
                .or_else(|| t.strip_prefix("pub static "))
                .or_else(|| t.strip_prefix("pub(crate) static "))
            else {
                continue;
            };
            if !(rest.contains("OnceLock") || rest.contains("LazyLock")) {
                continue;
            }
            let name = rest.split(':').next().unwrap_or("").trim().to_string();
            let above = lines[i.saturating_sub(25)..i].join("\n");
            found.push((f.clone(), i + 1, name, above));
        }
    }
    found
}

#[test]
fn every_process_wide_cache_is_pure_or_classified() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let found = lazy_statics(&root);
    // the scan sees the caches it is about (a broken scan must not pass)
    for (file, name) in [
        ("curves.rs", "CACHE"),
        ("aggregation.rs", "SWITCHML_RATES"),
        ("float.rs", "T"),
    ] {
        assert!(
            found
                .iter()
                .any(|(f, _, n, _)| f.ends_with(file) && n == name),
            "the scan missed {file}'s {name}"
        );
    }
    let mut unclassified = Vec::new();
    for (f, line, name, above) in &found {
        let file = f.file_name().map(|n| n.to_string_lossy().to_string());
        let listed = CLASSIFIED
            .iter()
            .any(|(lf, ln, _)| file.as_deref() == Some(*lf) && name == ln);
        if !above.contains("Pure:") && !listed {
            unclassified.push(format!("{}:{line} {name}", f.display()));
        }
    }
    assert!(
        unclassified.is_empty(),
        "process-wide caches with no `Pure:` comment saying why they hold no measurement \
         (a measured value is a run's input, not a process-wide memo): {unclassified:?}"
    );
}

/// The optimizer rate of LuWu's models is measured by the run that asks for it: its module
/// keeps no static.
#[test]
fn the_measured_adam_rate_is_not_remembered() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let text =
        std::fs::read_to_string(root.join("systems/luwu-model/src/rate.rs")).expect("rate.rs");
    assert!(
        !text.lines().any(|l| l.trim_start().starts_with("static ")),
        "rate.rs keeps a measurement in a static"
    );
}

/// The emulated class of netreduce.training measures its exchange at every point (633c7fe): no
/// source keeps a wall-clock exchange for the process any more.
#[test]
fn the_emulated_exchange_is_not_remembered() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    sources(&root.join("systems"), &mut files);
    sources(&root.join("workloads"), &mut files);
    assert!(
        files.iter().any(|f| f.ends_with("ina-run/src/training.rs")),
        "the scan missed systems/ina-run/src/training.rs"
    );
    let keeping: Vec<_> = files
        .iter()
        .filter(|f| std::fs::read_to_string(f).is_ok_and(|t| t.contains("fn exchange_cached")))
        .collect();
    assert!(
        keeping.is_empty(),
        "a wall-clock exchange memo is back: {keeping:?}"
    );
}
