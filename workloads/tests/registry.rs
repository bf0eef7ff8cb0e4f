//! The registry and the specs agree: every spec under `experiments/<paper>/` names a workload
//! that `all()` registers, and every registered workload (but the harness's probe) runs at least
//! one spec. With one paper's feature only, that paper's specs are checked.

use inabench_core::spec::Spec;
use std::collections::BTreeSet;
use std::path::Path;

#[test]
fn every_spec_names_a_registered_workload_and_every_workload_a_spec() {
    let registered: BTreeSet<&str> = inabench_workloads::all().iter().map(|w| w.id()).collect();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../experiments");
    let mut named = BTreeSet::new();
    let mut specs = 0;
    let mut papers = BTreeSet::new();
    for paper in std::fs::read_dir(&root).expect("experiments/") {
        let dir = paper.expect("entry").path();
        let Some(name) = dir.file_name().and_then(|n| n.to_str()).map(str::to_string) else {
            continue;
        };
        if !dir.is_dir() || name == "testbeds" || name == "tools" {
            continue;
        }
        // only the papers this build has (a feature each)
        if !registered
            .iter()
            .any(|id| id.starts_with(&format!("{name}.")) || id.starts_with(&format!("{name}_")))
        {
            continue;
        }
        papers.insert(name.clone());
        for f in std::fs::read_dir(&dir).expect("paper folder") {
            let f = f.expect("entry").path();
            if f.extension().is_none_or(|e| e != "yaml") {
                continue;
            }
            let spec = Spec::load(&f).unwrap_or_else(|e| panic!("{e}"));
            let id = spec.workload.clone().unwrap_or_default();
            assert!(
                registered.contains(id.as_str()),
                "{} names workload `{id}`, which is not registered",
                f.display()
            );
            named.insert(id);
            specs += 1;
        }
    }
    assert!(specs > 0, "no spec found under {}", root.display());
    for id in &registered {
        let paper = id.split(['.', '_']).next().unwrap_or_default();
        if *id != "harness.probe" && papers.contains(paper) {
            assert!(named.contains(*id), "workload `{id}` runs no spec");
        }
    }
}
