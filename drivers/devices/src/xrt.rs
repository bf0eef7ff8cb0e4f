//! FPGA boards through XRT's C API (`libxrt_coreutil.so.2`), loaded at run time.
//!
//! The bound calls are XRT's device, kernel, run and buffer-object API: `xrtDeviceOpen`,
//! `xrtDeviceLoadXclbinFile`, `xrtPLKernelOpen`, `xrtRunOpen`/`SetArg`/`Start`/`Wait`,
//! `xrtBOAlloc`/`Sync`/`Map`/`Free`, `xrtDeviceClose` ([`Xrt`] resolves them all, so a library
//! missing any of them is reported before a run starts). Device calls can throw C++ exceptions
//! through the C API; [`probe`] therefore makes them in a child process (`<exe> __probe-xrt`,
//! which runs [`child_main`]) and reports an abort there in one sentence.

use crate::{Probe, load};
use std::os::raw::{c_char, c_int, c_uint, c_void};
use std::path::Path;
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

/// Probe XRT by running `exe __probe-xrt` (at most `timeout`).
pub fn probe(exe: &Path, timeout: Duration) -> Probe {
    let name = match Xrt::load() {
        Ok(x) => x.name,
        Err(e) => {
            return Probe {
                library: None,
                devices: 0,
                detail: format!("{e}: FPGA rows use the software FPGA model"),
            };
        }
    };
    let child = Command::new(exe)
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
    match status {
        None => Probe {
            library: Some(name),
            devices: 0,
            detail: format!("XRT ({}) did not answer within {:?}", out.trim(), timeout),
        },
        Some(s) if !s.success() => {
            use std::os::unix::process::ExitStatusExt;
            Probe {
                library: Some(name.clone()),
                devices: 0,
                detail: format!(
                    "XRT loaded ({name}) but opening device 0 ended the probe process ({}): no usable FPGA board",
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
                        "XRT loaded ({name}), no FPGA board: FPGA rows use the software FPGA model"
                    )
                } else {
                    format!("XRT loaded ({name}): {boards} board(s)")
                },
            }
        }
    }
}
