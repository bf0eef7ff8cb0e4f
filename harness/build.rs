//! Embeds every spec under `experiments/` into the binary, so `inabench` works from any
//! directory; a tree found at run time (walking up from the current directory) takes precedence.
//! Also fingerprints the sources the binary is built from ([`BUILD`]): the runner refuses an
//! agent whose build differs (`launcher::check_build`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let exp = root.join("experiments");
    println!("cargo:rerun-if-changed={}", exp.display());
    let mut files: Vec<PathBuf> = Vec::new();
    if let Ok(rd) = std::fs::read_dir(&exp) {
        for sub in rd.flatten() {
            let p = sub.path();
            if p.is_dir() {
                println!("cargo:rerun-if-changed={}", p.display());
                if let Ok(rd2) = std::fs::read_dir(&p) {
                    for f in rd2.flatten() {
                        let fp = f.path();
                        if fp.extension().is_some_and(|x| x == "yaml") {
                            println!("cargo:rerun-if-changed={}", fp.display());
                            files.push(fp);
                        }
                    }
                }
            }
        }
    }
    files.sort();
    let mut out = String::from(
        "/// (path relative to the repository, text) of every spec and testbed file at build time.\npub static EMBEDDED: &[(&str, &str)] = &[\n",
    );
    for f in &files {
        let rel = f.strip_prefix(&root).unwrap_or(f).display().to_string();
        let abs = f.canonicalize().unwrap_or(f.clone());
        let _ = writeln!(
            out,
            "    ({rel:?}, include_str!({:?})),",
            abs.display().to_string()
        );
    }
    out.push_str("];\n");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = std::process::Command::new(rustc)
        .arg("-V")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let _ = writeln!(out, "pub const RUSTC_VERSION: &str = {version:?};");
    let build = format!(
        "{} (source {:016x})",
        std::env::var("CARGO_PKG_VERSION").unwrap_or_default(),
        source_fingerprint(&root)
    );
    let _ = writeln!(
        out,
        "/// What identifies this build: the crate version and a fingerprint of every source file\n\
         /// compiled in (the crates this binary depends on in the workspace, the specs, the\n\
         /// embedded tools, Cargo.lock).\npub const BUILD: &str = {build:?};"
    );
    let dest =
        PathBuf::from(std::env::var("OUT_DIR").unwrap_or_default()).join("embedded_specs.rs");
    if let Err(e) = std::fs::write(&dest, out) {
        println!("cargo:warning=cannot write {}: {e}", dest.display());
    }
}

/// FNV-1a (64 bits) over the relative path and bytes of every file the binary is built from:
/// this crate and the workspace crates it depends on (each crate's directory without its
/// `tests`, `benches` and `examples`), `experiments/`, `tools/` (sources embedded as text),
/// the workspace's `Cargo.toml` and `Cargo.lock`. It changes whenever the job format, a
/// workload or a spec changes, and is the same for the same sources built on any host; a
/// hand-written hash, as std's hasher may differ between compiler releases.
fn source_fingerprint(root: &Path) -> u64 {
    let workspace = std::fs::read_to_string(root.join("Cargo.toml")).unwrap_or_default();
    // `inabench-x = { path = "dir" }` lines of [workspace.dependencies]
    let paths: Vec<(String, String)> = workspace
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.split_once('=')?;
            let name = name.trim();
            let (_, after) = rest.split_once("path = \"")?;
            let (dir, _) = after.split_once('"')?;
            name.starts_with("inabench-")
                .then(|| (name.to_string(), dir.to_string()))
        })
        .collect();
    let mut crates: Vec<String> = vec!["harness".into()];
    let mut i = 0;
    while i < crates.len() {
        for dep in normal_dependencies(&root.join(&crates[i]).join("Cargo.toml")) {
            if let Some((_, dir)) = paths.iter().find(|(n, _)| *n == dep)
                && !crates.contains(dir)
            {
                crates.push(dir.clone());
            }
        }
        i += 1;
    }
    let mut files: Vec<PathBuf> = Vec::new();
    for c in &crates {
        if let Ok(rd) = std::fs::read_dir(root.join(c)) {
            for e in rd.flatten() {
                let name = e.file_name();
                if ["tests", "benches", "examples", "target"]
                    .iter()
                    .any(|x| name == *x)
                    || name.to_string_lossy().starts_with('.')
                {
                    continue;
                }
                println!("cargo:rerun-if-changed={}", e.path().display());
                walk(&e.path(), &mut files);
            }
        }
    }
    for extra in ["experiments", "tools", "Cargo.toml", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={}", root.join(extra).display());
        walk(&root.join(extra), &mut files);
    }
    let mut rel: Vec<(String, PathBuf)> = files
        .into_iter()
        .map(|f| (f.strip_prefix(root).unwrap_or(&f).display().to_string(), f))
        .collect();
    rel.sort();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    for (name, path) in &rel {
        let body = std::fs::read(path).unwrap_or_default();
        eat(name.as_bytes());
        eat(&(body.len() as u64).to_le_bytes());
        eat(&body);
    }
    h
}

/// The `inabench-*` names in a Cargo.toml's `[dependencies]` section.
fn normal_dependencies(manifest: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(manifest).unwrap_or_default();
    let mut section = String::new();
    let mut out = Vec::new();
    for line in text.lines() {
        let l = line.trim();
        if l.starts_with('[') {
            section = l.to_string();
        } else if section == "[dependencies]" && l.starts_with("inabench-") {
            let end = l.find(['.', ' ', '=']).unwrap_or(l.len());
            out.push(l[..end].to_string());
        }
    }
    out
}

/// Every file under `p` (or `p` itself), hidden ones left out.
fn walk(p: &Path, out: &mut Vec<PathBuf>) {
    if p.is_dir() {
        if let Ok(rd) = std::fs::read_dir(p) {
            for e in rd.flatten() {
                if !e.file_name().to_string_lossy().starts_with('.') {
                    walk(&e.path(), out);
                }
            }
        }
    } else if p.is_file() {
        out.push(p.to_path_buf());
    }
}
