//! The one guard of the tests that need a third-party tool this machine may lack (tshark, tmux,
//! poppler and chromium, OpenMPI, the Python readers of the test virtual environment).
//!
//! Off CI a missing tool skips the test with the reason printed (so `cargo test --release
//! --workspace` passes on a fresh machine without `.ci/setup`); under CI (`CI` set, as CI
//! services do) the same missing tool fails the test, so CI cannot go green by skipping.
//!
//! ```no_run
//! if !inabench_testkit::need_tool("tshark", "tshark") {
//!     return;
//! }
//! ```

use std::path::PathBuf;

/// Whether the tests run under CI: `CI` is set to anything but `false`, `0` or nothing.
pub fn under_ci() -> bool {
    match std::env::var("CI") {
        Ok(v) => !matches!(v.trim(), "" | "0" | "false" | "False" | "FALSE"),
        Err(_) => false,
    }
}

/// What the guard decides for a test whose requirement is `present` or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Run,
    Skip,
    Fail,
}

/// The rule, apart from the process's environment (tested below).
pub fn decide(present: bool, ci: bool) -> Decision {
    match (present, ci) {
        (true, _) => Decision::Run,
        (false, false) => Decision::Skip,
        (false, true) => Decision::Fail,
    }
}

/// True when the test can run. `what` names what is missing ("`tshark`", "OpenMPI: ...");
/// `install` says where it comes from (the Debian package `.ci/setup` installs, ...). Off CI a
/// missing requirement prints `skipped: ...` on stderr and returns false; under CI it panics.
pub fn need(what: &str, present: bool, install: &str) -> bool {
    match decide(present, under_ci()) {
        Decision::Run => true,
        Decision::Skip => {
            eprintln!(
                "skipped: {what} is missing here ({install}; `bash .ci/setup` installs every tool the tests use); under CI=true this test fails instead"
            );
            false
        }
        Decision::Fail => panic!(
            "{what} is missing, and under CI every tool-gated test must run: {install} (`bash .ci/setup` installs it)"
        ),
    }
}

/// [`need`] for a program on the PATH; `package` is the Debian package that has it.
pub fn need_tool(program: &str, package: &str) -> bool {
    need(
        &format!("`{program}`"),
        which(program).is_some(),
        &format!("Debian package {package}"),
    )
}

/// The first `name` on the PATH that is a file.
pub fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

/// The tests' Python virtual environment (`INABENCH_PY_VENV`, default
/// `~/.cache/inabench/venv`, made by `.ci/setup`).
pub fn py_venv() -> PathBuf {
    match std::env::var_os("INABENCH_PY_VENV") {
        Some(v) => PathBuf::from(v),
        None => {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/inabench/venv")
        }
    }
}

/// The venv's python when it can import `module`: guarded by [`need`].
pub fn need_py_module(module: &str, pip: &str) -> Option<PathBuf> {
    let py = py_venv().join("bin/python");
    let ok = std::process::Command::new(&py)
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success());
    need(
        &format!("the Python module `{module}` in {}", py_venv().display()),
        ok,
        &format!("`{}` -m pip install {pip}", py.display()),
    )
    .then_some(py)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_skips_off_ci_and_fails_under_ci() {
        assert_eq!(decide(true, false), Decision::Run);
        assert_eq!(decide(true, true), Decision::Run);
        assert_eq!(decide(false, false), Decision::Skip);
        assert_eq!(decide(false, true), Decision::Fail);
    }

    #[test]
    fn which_finds_a_shell_and_not_a_made_up_name() {
        assert!(which("sh").is_some());
        assert!(which("inabench-no-such-tool-4f1c").is_none());
    }
}
