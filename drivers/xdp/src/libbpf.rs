//! libbpf's C API, loaded at run time from `libbpf.so.1` (Debian: `libbpf1`).
//!
//! Only the calls this crate makes are bound. libbpf 1.x returns a negative errno from calls that
//! return `int` and NULL (with `errno` set) from calls that return a pointer.

use crate::XdpError;
use std::os::raw::{c_char, c_int, c_long, c_void};
use std::sync::OnceLock;

pub const LIBRARIES: [&str; 2] = ["libbpf.so.1", "libbpf.so"];

/// `BPF_ANY` for map updates.
pub const BPF_ANY: u64 = 0;
/// `BPF_F_LOCK`: read or write a map value holding a `bpf_spin_lock` under that lock.
pub const BPF_F_LOCK: u64 = 4;
/// `BPF_F_TEST_XDP_LIVE_FRAMES`: a test run's XDP frames come from a page pool and the
/// program's verdict is carried out (Linux 5.18).
pub const BPF_F_TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;
/// `XDP_FLAGS_SKB_MODE` (generic XDP).
pub const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
/// `XDP_FLAGS_DRV_MODE` (native, in the driver).
pub const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

type Obj = *mut c_void;

/// The entry points (resolved once per process).
pub struct Libbpf {
    _lib: libloading::Library,
    pub name: String,
    pub object_open_file: unsafe extern "C" fn(*const c_char, *const c_void) -> Obj,
    pub object_load: unsafe extern "C" fn(Obj) -> c_int,
    pub object_close: unsafe extern "C" fn(Obj),
    pub find_program_by_name: unsafe extern "C" fn(Obj, *const c_char) -> *mut c_void,
    pub program_fd: unsafe extern "C" fn(*const c_void) -> c_int,
    pub find_map_by_name: unsafe extern "C" fn(Obj, *const c_char) -> *mut c_void,
    pub map_fd: unsafe extern "C" fn(*const c_void) -> c_int,
    pub map_set_max_entries: unsafe extern "C" fn(*mut c_void, u32) -> c_int,
    pub map_lookup_elem_flags:
        unsafe extern "C" fn(c_int, *const c_void, *mut c_void, u64) -> c_int,
    pub map_update_elem: unsafe extern "C" fn(c_int, *const c_void, *const c_void, u64) -> c_int,
    pub xdp_attach: unsafe extern "C" fn(c_int, c_int, u32, *const c_void) -> c_int,
    pub xdp_detach: unsafe extern "C" fn(c_int, u32, *const c_void) -> c_int,
    pub xdp_query_id: unsafe extern "C" fn(c_int, c_int, *mut u32) -> c_int,
    pub get_error: unsafe extern "C" fn(*const c_void) -> c_long,
    /// `bpf_enable_stats(BPF_STATS_RUN_TIME)`: an fd that keeps run-time stats on while open.
    pub enable_stats: unsafe extern "C" fn(c_int) -> c_int,
    /// `bpf_prog_test_run_opts`: run a loaded program on a given packet in the kernel
    /// (`BPF_PROG_TEST_RUN`), its return value and run time (ns per repetition) in the options.
    pub prog_test_run_opts: unsafe extern "C" fn(c_int, *mut TestRunOpts) -> c_int,
}

/// `struct bpf_test_run_opts` (libbpf's bpf.h, 1.x; `sz` is the struct's size, which libbpf
/// checks against the fields it knows).
#[repr(C)]
#[derive(Debug)]
pub struct TestRunOpts {
    pub sz: usize,
    pub data_in: *const c_void,
    pub data_out: *mut c_void,
    pub data_size_in: u32,
    pub data_size_out: u32,
    pub ctx_in: *const c_void,
    pub ctx_out: *mut c_void,
    pub ctx_size_in: u32,
    pub ctx_size_out: u32,
    /// Out: the program's return value.
    pub retval: u32,
    pub repeat: c_int,
    /// Out: the mean run time per repetition (ns), as the kernel's test-run timer reads it.
    pub duration: u32,
    pub flags: u32,
    pub cpu: u32,
    pub batch_size: u32,
}

// SAFETY: the struct holds only a library handle and function pointers into it, which libbpf
// allows to be called from any thread.
unsafe impl Send for Libbpf {}
// SAFETY: as above; nothing in it is mutated after loading
unsafe impl Sync for Libbpf {}

/// Why libbpf could not be loaded (kept for the process: every later call gets the same).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    #[error("libbpf.so.1 is not installed: install the Debian package `libbpf1`")]
    NotInstalled,
    /// The library lacks a symbol this crate binds (`reason`: the dynamic loader's message).
    #[error("{library} lacks {symbol}: {reason}")]
    MissingSymbol {
        library: String,
        symbol: &'static str,
        reason: String,
    },
}

static LIBBPF: OnceLock<Result<Libbpf, LoadError>> = OnceLock::new();

impl Libbpf {
    /// libbpf, loaded on first use.
    pub fn get() -> Result<&'static Libbpf, XdpError> {
        LIBBPF
            .get_or_init(Libbpf::load)
            .as_ref()
            .map_err(|e| XdpError::Libbpf(e.clone()))
    }

    fn load() -> Result<Libbpf, LoadError> {
        let mut found = None;
        for name in LIBRARIES {
            // SAFETY: libbpf's initialisers have no preconditions
            if let Ok(lib) = unsafe { libloading::Library::new(name) } {
                found = Some((lib, name.to_string()));
                break;
            }
        }
        let (lib, name) = found.ok_or(LoadError::NotInstalled)?;
        macro_rules! sym {
            ($s:literal) => {{
                // SAFETY: the field's type is the symbol's C signature (libbpf.h, bpf.h)
                let r = unsafe { lib.get(concat!($s, "\0").as_bytes()) };
                *r.map_err(|e| LoadError::MissingSymbol {
                    library: name.clone(),
                    symbol: $s,
                    reason: e.to_string(),
                })?
            }};
        }
        Ok(Libbpf {
            object_open_file: sym!("bpf_object__open_file"),
            object_load: sym!("bpf_object__load"),
            object_close: sym!("bpf_object__close"),
            find_program_by_name: sym!("bpf_object__find_program_by_name"),
            program_fd: sym!("bpf_program__fd"),
            find_map_by_name: sym!("bpf_object__find_map_by_name"),
            map_fd: sym!("bpf_map__fd"),
            map_set_max_entries: sym!("bpf_map__set_max_entries"),
            map_lookup_elem_flags: sym!("bpf_map_lookup_elem_flags"),
            map_update_elem: sym!("bpf_map_update_elem"),
            xdp_attach: sym!("bpf_xdp_attach"),
            xdp_detach: sym!("bpf_xdp_detach"),
            xdp_query_id: sym!("bpf_xdp_query_id"),
            get_error: sym!("libbpf_get_error"),
            enable_stats: sym!("bpf_enable_stats"),
            prog_test_run_opts: sym!("bpf_prog_test_run_opts"),
            name: name.clone(),
            _lib: lib,
        })
    }
}

/// Turn a libbpf `int` return into a result (negative errno on failure).
pub fn check(call: &'static str, rc: c_int) -> Result<c_int, XdpError> {
    if rc < 0 {
        Err(XdpError::Call {
            call,
            error: std::io::Error::from_raw_os_error(-rc),
        })
    } else {
        Ok(rc)
    }
}

/// The error of a libbpf call that returned NULL.
pub fn null_error(lib: &Libbpf, call: &'static str) -> XdpError {
    // SAFETY: libbpf_get_error only inspects the pointer value (NULL here) and errno
    let e = unsafe { (lib.get_error)(std::ptr::null()) };
    let errno = if e < 0 {
        -e as i32
    } else {
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::ENOENT)
    };
    XdpError::Call {
        call,
        error: std::io::Error::from_raw_os_error(errno),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_errors_read_as_the_former_strings() {
        assert_eq!(
            XdpError::Libbpf(LoadError::NotInstalled).to_string(),
            "libbpf: libbpf.so.1 is not installed: install the Debian package `libbpf1`"
        );
        let e = LoadError::MissingSymbol {
            library: "libbpf.so.1".into(),
            symbol: "bpf_xdp_attach",
            reason: "undefined symbol".into(),
        };
        assert_eq!(
            XdpError::Libbpf(e.clone()).to_string(),
            "libbpf: libbpf.so.1 lacks bpf_xdp_attach: undefined symbol"
        );
        assert_ne!(e, LoadError::NotInstalled);
    }
}
