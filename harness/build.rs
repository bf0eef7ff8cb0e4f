//! Embeds every spec under `experiments/` into the binary, so `inabench` works from any
//! directory; a tree found at run time (walking up from the current directory) takes precedence.

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
    let dest =
        PathBuf::from(std::env::var("OUT_DIR").unwrap_or_default()).join("embedded_specs.rs");
    if let Err(e) = std::fs::write(&dest, out) {
        println!("cargo:warning=cannot write {}: {e}", dest.display());
    }
}
