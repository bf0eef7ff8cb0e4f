//! FPGA boards through XRT's C API (`libxrt_coreutil.so.2`), loaded at run time.
//!
//! The bound calls are XRT's device, kernel, run and buffer-object API: `xrtDeviceOpen`,
//! `xrtDeviceLoadXclbinFile`, `xrtPLKernelOpen`, `xrtRunOpen`/`SetArg`/`Start`/`Wait`,
//! `xrtBOAlloc`/`Sync`/`Map`/`Free`, `xrtDeviceClose` ([`Xrt`] resolves them all, so a library
//! missing any of them is reported before a run starts). Device calls can throw C++ exceptions
//! through the C API; [`probe`] therefore makes them in a child process (`<exe> __probe-xrt`,
//! which runs [`child_main`]) and reports an abort there in one sentence. XRT also aborts when
//! `XILINX_XRT` is unset or wrong, which says nothing about a board: the probe gives the child a
//! root where it is unset ([`probe_root`]) and names the setting in what it reports.

use crate::{Probe, load};
use std::os::raw::{c_char, c_int, c_uint, c_void};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub const LIBRARIES: [&str; 2] = ["libxrt_coreutil.so.2", "libxrt_coreutil.so"];

type Handle = *mut c_void;

/// The XRT C API's entry points (resolved, not yet called).
pub struct Xrt {
    _lib: libloading::Library,
    pub name: String,
    pub device_open: unsafe extern "C" fn(c_uint) -> Handle,
    pub device_close: unsafe extern "C" fn(Handle) -> c_int,
    pub load_xclbin_file: unsafe extern "C" fn(Handle, *const c_char) -> c_int,
    pub kernel_open: unsafe extern "C" fn(Handle, *const u8, *const c_char) -> Handle,
    pub run_open: unsafe extern "C" fn(Handle) -> Handle,
    pub run_start: unsafe extern "C" fn(Handle) -> c_int,
    pub run_wait: unsafe extern "C" fn(Handle) -> c_int,
    pub bo_alloc: unsafe extern "C" fn(Handle, usize, c_uint, c_uint) -> Handle,
    pub bo_sync: unsafe extern "C" fn(Handle, c_int, usize, usize) -> c_int,
    pub bo_map: unsafe extern "C" fn(Handle) -> *mut c_void,
    pub bo_free: unsafe extern "C" fn(Handle) -> c_int,
}

#[derive(Debug, thiserror::Error)]
pub enum XrtError {
    #[error("no XRT library ({})", LIBRARIES.join(" or "))]
    Missing,
    #[error("{library} lacks {symbol}: {message}")]
    Symbol {
        library: String,
        symbol: &'static str,
        message: String,
    },
}

impl Xrt {
    pub fn load() -> Result<Xrt, XrtError> {
        let (lib, name) = load(&LIBRARIES).ok_or(XrtError::Missing)?;
        macro_rules! sym {
            ($s:literal) => {{
                // SAFETY: the symbol's C signature is the one the field declares (XRT's xrt.h)
                let r = unsafe { lib.get(concat!($s, "\0").as_bytes()) };
                *r.map_err(|e| XrtError::Symbol {
                    library: name.clone(),
                    symbol: $s,
                    message: e.to_string(),
                })?
            }};
        }
        Ok(Xrt {
            device_open: sym!("xrtDeviceOpen"),
            device_close: sym!("xrtDeviceClose"),
            load_xclbin_file: sym!("xrtDeviceLoadXclbinFile"),
            kernel_open: sym!("xrtPLKernelOpen"),
            run_open: sym!("xrtRunOpen"),
            run_start: sym!("xrtRunStart"),
            run_wait: sym!("xrtRunWait"),
            bo_alloc: sym!("xrtBOAlloc"),
            bo_sync: sym!("xrtBOSync"),
            bo_map: sym!("xrtBOMap"),
            bo_free: sym!("xrtBOFree"),
            name: name.clone(),
            _lib: lib,
        })
    }
}

/// The child side: count the boards XRT can open and print `xrt <library> boards <n>`. A C++
/// exception escaping XRT aborts this process, which the parent reports.
pub fn child_main() -> i32 {
    let x = match Xrt::load() {
        Ok(x) => x,
        Err(e) => {
            println!("xrt-missing {e}");
            return 0;
        }
    };
    let mut n = 0u32;
    while n < 16 {
        // SAFETY: xrtDeviceOpen takes a device index and returns a handle or null
        let h = unsafe { (x.device_open)(n) };
        if h.is_null() {
            break;
        }
        // SAFETY: a handle xrtDeviceOpen returned
        unsafe { (x.device_close)(h) };
        n += 1;
    }
    println!("xrt {} boards {n}", x.name);
    0
}

/// The directory the loaded XRT library `name` came from (read from `/proc/self/maps` while it
/// is loaded).
fn loaded_dir(name: &str) -> Option<PathBuf> {
    let stem = name.split(".so").next().unwrap_or(name);
    std::fs::read_to_string("/proc/self/maps")
        .ok()?
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| {
            Path::new(p)
                .file_name()
                .is_some_and(|f| f.to_string_lossy().starts_with(&format!("{stem}.so")))
        })
        .and_then(|p| Path::new(p).parent().map(Path::to_path_buf))
}

/// The `XILINX_XRT` the probe process runs with, and a note saying where it came from. XRT's
/// device calls abort (an exception through the C API) when `XILINX_XRT` is unset or names a
/// directory whose `lib/` lacks `libxrt_core.so.2`, which says nothing about a board; XRT's
/// `setup.sh` sets it. When it is unset: the install holding the library (`<root>/lib/...`, as
/// in /opt/xilinx/xrt), or, for a distribution's multiarch directory, `scratch` made into a root
/// whose `lib` links to it. Set: used as it is.
pub fn probe_root(
    set: Option<std::ffi::OsString>,
    lib_dir: Option<&Path>,
    scratch: &Path,
) -> (Option<PathBuf>, String) {
    if let Some(v) = set {
        let p = PathBuf::from(v);
        let note = format!("XILINX_XRT={}", p.display());
        return (Some(p), note);
    }
    let Some(dir) = lib_dir else {
        return (None, "XILINX_XRT unset".into());
    };
    if dir.file_name().is_some_and(|f| f == "lib")
        && let Some(root) = dir.parent()
    {
        let note = format!(
            "XILINX_XRT unset; probed with XILINX_XRT={} (the install holding the library)",
            root.display()
        );
        return (Some(root.to_path_buf()), note);
    }
    let link = scratch.join("lib");
    let made = std::fs::create_dir_all(scratch).and_then(|()| {
        if std::fs::read_link(&link).is_ok_and(|t| t == dir) {
            return Ok(());
        }
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(dir, &link)
    });
    match made {
        Ok(()) => (
            Some(scratch.to_path_buf()),
            format!(
                "XILINX_XRT unset; probed with XILINX_XRT={} (its lib/ is {})",
                scratch.display(),
                dir.display()
            ),
        ),
        Err(e) => (
            None,
            format!(
                "XILINX_XRT unset, and no root for {} could be made: {e}",
                dir.display()
            ),
        ),
    }
}

/// Probe XRT by running `exe __probe-xrt` (at most `timeout`), with `XILINX_XRT` as
/// [`probe_root`] says.
pub fn probe(exe: &Path, timeout: Duration) -> Probe {
    let (name, dir) = match Xrt::load() {
        Ok(x) => {
            let dir = loaded_dir(&x.name);
            (x.name.clone(), dir)
        }
        Err(e) => {
            return Probe {
                library: None,
                devices: 0,
                detail: format!("{e}: FPGA rows use the software FPGA model"),
            };
        }
    };
    // removed again after the probe
    let scratch = std::env::temp_dir().join(format!("inabench-xrt-root-{}", std::process::id()));
    let (root, note) = probe_root(std::env::var_os("XILINX_XRT"), dir.as_deref(), &scratch);
    let mut cmd = Command::new(exe);
    if let Some(r) = &root {
        cmd.env("XILINX_XRT", r);
    }
    let child = cmd
        .arg("__probe-xrt")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            return Probe {
                library: Some(name),
                devices: 0,
                detail: format!("cannot start the XRT probe process: {e}"),
            };
        }
    };
    let t0 = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if t0.elapsed() < timeout => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let mut out = String::new();
    if let Some(mut o) = child.stdout.take() {
        let _ = std::io::Read::read_to_string(&mut o, &mut out);
    }
    if root.as_deref() == Some(scratch.as_path()) {
        let _ = std::fs::remove_dir_all(&scratch);
    }
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut err);
    }
    // what XRT said last (its own `[XRT]` lines first, else the process's last line)
    let said = err
        .lines()
        .chain(out.lines())
        .rfind(|l| l.contains("[XRT]"))
        .or_else(|| err.lines().rfind(|l| !l.trim().is_empty()))
        .map(|l| format!("; it said `{}`", l.trim()))
        .unwrap_or_default();
    match status {
        None => Probe {
            library: Some(name.clone()),
            devices: 0,
            detail: format!("XRT ({name}, {note}) did not answer within {timeout:?}{said}"),
        },
        Some(s) if !s.success() => {
            use std::os::unix::process::ExitStatusExt;
            Probe {
                library: Some(name.clone()),
                devices: 0,
                detail: format!(
                    "XRT loaded ({name}) but its device probe ended ({}) with {note}{said}: XRT is not usable as configured (this says nothing about a board); FPGA rows use the software FPGA model",
                    s.signal().map_or_else(
                        || s.to_string(),
                        |sig| format!("signal {sig}, an exception thrown through XRT's C API")
                    )
                ),
            }
        }
        Some(_) => {
            let boards = out
                .split_whitespace()
                .skip_while(|w| *w != "boards")
                .nth(1)
                .and_then(|n| n.parse::<u32>().ok())
                .unwrap_or(0);
            Probe {
                library: Some(name.clone()),
                devices: boards,
                detail: if boards == 0 {
                    format!(
                        "XRT loaded ({name}, {note}), no FPGA board: FPGA rows use the software FPGA model"
                    )
                } else {
                    format!("XRT loaded ({name}, {note}): {boards} board(s)")
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// XILINX_XRT for the probe: as set; else the install root above a `lib` directory; else a
    /// scratch root whose `lib` links to the library's directory (XRT aborts without one).
    #[test]
    fn the_probe_gets_an_xrt_root() {
        let scratch =
            std::env::temp_dir().join(format!("inabench-xrt-test-{}", std::process::id()));
        let (r, note) = probe_root(Some("/opt/x".into()), Some(Path::new("/usr/lib")), &scratch);
        assert_eq!(r.as_deref(), Some(Path::new("/opt/x")));
        assert_eq!(note, "XILINX_XRT=/opt/x");
        let (r, note) = probe_root(None, Some(Path::new("/opt/xilinx/xrt/lib")), &scratch);
        assert_eq!(r.as_deref(), Some(Path::new("/opt/xilinx/xrt")));
        assert!(note.starts_with("XILINX_XRT unset; probed with XILINX_XRT=/opt/xilinx/xrt"));
        assert!(!scratch.exists(), "nothing made for an install root");
        let multiarch = std::env::temp_dir();
        let (r, note) = probe_root(None, Some(&multiarch), &scratch);
        assert_eq!(r.as_deref(), Some(scratch.as_path()), "{note}");
        assert_eq!(
            std::fs::read_link(scratch.join("lib")).expect("lib link"),
            multiarch
        );
        // made again: the same link, no error
        let (r2, _) = probe_root(None, Some(&multiarch), &scratch);
        assert_eq!(r2, r);
        let _ = std::fs::remove_dir_all(&scratch);
        let (r, note) = probe_root(None, None, &scratch);
        assert_eq!((r, note.as_str()), (None, "XILINX_XRT unset"));
    }
}
