//! Where specs and results live.

use inabench_core::catalog::{Catalog, CatalogError};
use std::path::{Path, PathBuf};

/// The repository root: the nearest ancestor of the current directory with `experiments/` and a
/// `Cargo.toml`, or `INABENCH_HOME`.
pub fn repo_root() -> Option<PathBuf> {
    if let Ok(h) = std::env::var("INABENCH_HOME") {
        return Some(PathBuf::from(h));
    }
    let mut dir = std::env::current_dir().ok()?;
    loop {
        if dir.join("experiments").is_dir() && dir.join("Cargo.toml").is_file() {
            return Some(dir);
        }
        if !dir.pop() {
            return None;
        }
    }
}

/// The results folder: `--results`, else `INABENCH_RESULTS`, else `<repo>/results`, else `./results`.
pub fn results_dir(flag: Option<&Path>) -> PathBuf {
    if let Some(p) = flag {
        return p.to_path_buf();
    }
    if let Ok(p) = std::env::var("INABENCH_RESULTS") {
        return PathBuf::from(p);
    }
    repo_root()
        .map(|r| r.join("results"))
        .unwrap_or_else(|| PathBuf::from("results"))
}

/// The catalogue: from the tree on disk when there is one, else the copy embedded at build time.
pub fn catalog() -> Result<Catalog, CatalogError> {
    if let Some(root) = repo_root() {
        let dir = root.join("experiments");
        let files = inabench_core::catalog::spec_files(&dir)?;
        let rel: Vec<_> = files
            .into_iter()
            .map(|(f, t)| (f.strip_prefix(&root).map(Path::to_path_buf).unwrap_or(f), t))
            .collect();
        return Catalog::from_texts_lenient(rel);
    }
    Catalog::from_texts_lenient(
        crate::embedded::EMBEDDED
            .iter()
            .filter(|(p, _)| !p.contains("/testbeds/") && !p.contains("/hosts/"))
            .map(|(p, t)| (PathBuf::from(p), t.to_string())),
    )
}

/// The git revision of the tree the binary runs from (`unknown` outside a checkout).
pub fn git_revision() -> String {
    let Some(root) = repo_root() else {
        return "unknown".into();
    };
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(&root)
        .args(["rev-parse", "HEAD"])
        .output();
    match out {
        Ok(o) if o.status.success() => {
            let rev = String::from_utf8_lossy(&o.stdout).trim().to_string();
            let dirty = std::process::Command::new("git")
                .arg("-C")
                .arg(&root)
                .args(["status", "--porcelain", "--untracked-files=no"])
                .output()
                .map(|o| !o.stdout.is_empty())
                .unwrap_or(false);
            if dirty { format!("{rev}-dirty") } else { rev }
        }
        _ => "unknown".into(),
    }
}
