//! `inabench doctor` on hosts whose device libraries are there but unusable (#36 item 7): it
//! never crashes, and says what it found and why it cannot be used.
//! - a libcuda.so and a libnccl.so.2 that lack the symbols (libc under those names, first on
//!   LD_LIBRARY_PATH): cudarc 0.17 panics inside its presence check for such a library, and
//!   never looks for libnccl.so.2;
//! - XRT with XILINX_XRT unset (XRT throws through its C API and aborts the probe process) and
//!   with XILINX_XRT naming nothing.

use std::process::Command;

fn doctor(env: &[(&str, &str)], unset: &[&str], name: &str) -> String {
    let mut c = Command::new(env!("CARGO_BIN_EXE_inabench"));
    c.args(["doctor", "--json"]);
    for k in unset {
        c.env_remove(k);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().expect("doctor runs");
    assert!(
        o.status.success(),
        "doctor failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let all: serde_json::Value =
        serde_json::from_slice(&o.stdout).expect("doctor --json prints JSON");
    let check = all
        .as_array()
        .and_then(|a| a.iter().find(|c| c["name"] == name))
        .cloned()
        .unwrap_or_else(|| panic!("no check `{name}` in {all}"));
    assert_eq!(check["ok"], false, "{check}");
    check["detail"].as_str().expect("a detail").to_string()
}

#[test]
fn gpu_libraries_that_lack_symbols_are_named_not_a_crash() {
    let Some(libc) = [
        "/lib/x86_64-linux-gnu/libc.so.6",
        "/usr/lib/x86_64-linux-gnu/libc.so.6",
        "/lib64/libc.so.6",
    ]
    .into_iter()
    .find(|p| std::path::Path::new(p).exists()) else {
        eprintln!("skipped: no libc.so.6 at the usual paths");
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    for name in ["libcuda.so", "libnccl.so.2"] {
        std::os::unix::fs::symlink(libc, dir.path().join(name)).expect("symlink");
    }
    let path = dir.path().to_string_lossy().to_string();
    let d = doctor(&[("LD_LIBRARY_PATH", &path)], &[], "GPUs (CUDA)");
    assert!(
        d.contains("cannot bind it") && d.contains("undefined symbol: cu"),
        "{d}"
    );
    assert!(
        d.contains("libnccl.so.2") && d.contains("lacks ncclGetVersion"),
        "{d}"
    );
    assert!(!d.contains('\n'), "{d}");
}

fn xrt_here() -> bool {
    let here = [
        "/usr/lib/x86_64-linux-gnu",
        "/opt/xilinx/xrt/lib",
        "/usr/lib",
    ]
    .iter()
    .any(|d| {
        std::path::Path::new(d)
            .join("libxrt_coreutil.so.2")
            .exists()
    });
    if !here {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must have XRT: .ci/setup installs libxrt1"
        );
        eprintln!("skipped: no XRT library here (run .ci/setup)");
    }
    here
}

#[test]
fn xrt_without_xilinx_xrt_is_probed_not_called_no_board() {
    if !xrt_here() {
        return;
    }
    // unset: the probe gives XRT a root (the library's install, or a scratch root whose lib/
    // is the library's directory), and XRT answers for itself
    let d = doctor(&[], &["XILINX_XRT"], "FPGA (XRT)");
    assert!(
        d.contains("XILINX_XRT unset; probed with XILINX_XRT="),
        "{d}"
    );
    assert!(d.contains("no FPGA board"), "{d}");
    assert!(!d.contains("signal"), "XRT still aborted: {d}");
    // set to nothing: XRT aborts, and the doctor says it is XRT's configuration, not a board
    let d = doctor(&[("XILINX_XRT", "/nonexistent-xrt")], &[], "FPGA (XRT)");
    assert!(d.contains("XILINX_XRT=/nonexistent-xrt"), "{d}");
    assert!(d.contains("says nothing about a board"), "{d}");
    assert!(!d.contains("no FPGA board"), "{d}");
}
