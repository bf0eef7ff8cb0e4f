//! Compile the C eBPF programs with `clang -O2 -g -target bpf` into a cache directory, at run
//! time (the workspace itself builds without clang). The object is named after a hash of the
//! source and the flags, so an edited program is recompiled and concurrent runs share the result.

use crate::XdpError;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The aggregation, forwarding and pass-through programs.
pub const ALEPH_SOURCE: &str = include_str!("../bpf/aleph.bpf.c");

/// The compiler: `$CLANG`, else `clang` from `PATH`.
pub fn clang() -> PathBuf {
    std::env::var_os("CLANG")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("clang"))
}

/// Where compiled objects are kept: `$INABENCH_XDP_CACHE`, else `$XDG_CACHE_HOME/inabench/xdp`,
/// else `~/.cache/inabench/xdp`, else the system's temporary directory.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("INABENCH_XDP_CACHE") {
        return PathBuf::from(d);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("inabench").join("xdp")
}

/// Whether `clang` runs.
pub fn clang_available(clang: &Path) -> bool {
    Command::new(clang)
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn flags() -> Vec<String> {
    // Debian keeps <asm/types.h> under the multiarch directory, which `-target bpf` does not search
    let multiarch = format!("/usr/include/{}-linux-gnu", std::env::consts::ARCH);
    vec![
        "-O2".into(),
        "-g".into(),
        "-target".into(),
        "bpf".into(),
        format!("-I{multiarch}"),
        "-Wall".into(),
        "-Wno-unused-function".into(),
    ]
}

/// Compile `source` (named `name` in messages) with `clang`, or reuse the cached object.
pub fn compile_with(clang: &Path, name: &str, source: &str) -> Result<PathBuf, XdpError> {
    let flags = flags();
    let mut h = Sha256::new();
    h.update(source.as_bytes());
    h.update(flags.join(" ").as_bytes());
    let digest: String = h.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let dir = cache_dir();
    let obj = dir.join(format!("{name}-{digest}.o"));
    if obj.exists() {
        return Ok(obj);
    }
    if !clang_available(clang) {
        return Err(XdpError::NoClang(clang.display().to_string()));
    }
    std::fs::create_dir_all(&dir).map_err(|e| XdpError::Io(dir.display().to_string(), e))?;
    // private names, then an atomic rename: concurrent compilations do not see half a file
    let tag = format!("{}-{:?}", std::process::id(), std::thread::current().id());
    let tag: String = tag.chars().filter(char::is_ascii_alphanumeric).collect();
    let src = dir.join(format!("{name}-{digest}.{tag}.bpf.c"));
    let tmp = dir.join(format!("{name}-{digest}.{tag}.o"));
    std::fs::write(&src, source).map_err(|e| XdpError::Io(src.display().to_string(), e))?;
    let out = Command::new(clang)
        .args(&flags)
        .arg("-c")
        .arg(&src)
        .arg("-o")
        .arg(&tmp)
        .output()
        .map_err(|e| XdpError::Io(clang.display().to_string(), e));
    let _ = std::fs::remove_file(&src);
    let out = out?;
    if !out.status.success() {
        let _ = std::fs::remove_file(&tmp);
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        if stderr.contains("bpf_helpers.h") || stderr.contains("linux/bpf.h") {
            return Err(XdpError::NoHeaders(
                stderr.lines().next().unwrap_or("").into(),
            ));
        }
        return Err(XdpError::Compile(name.to_string(), stderr));
    }
    std::fs::rename(&tmp, &obj).map_err(|e| XdpError::Io(obj.display().to_string(), e))?;
    Ok(obj)
}

/// The ALEPH programs, compiled with [`clang`].
pub fn aleph_object() -> Result<PathBuf, XdpError> {
    compile_with(&clang(), "aleph", ALEPH_SOURCE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_compiler_is_named_in_one_sentence() {
        // a source nobody compiled before, so the cache cannot answer
        let src = format!("// {}\n", std::process::id());
        let e = compile_with(Path::new("/nonexistent/clang"), "probe", &src).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, XdpError::NoClang(_)));
        assert!(msg.contains("install the Debian package `clang`"), "{msg}");
    }
}
