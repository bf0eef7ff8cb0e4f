//! Device libraries loaded at run time with libloading, so the suite builds and runs on machines
//! without them, and says in one sentence what it found.
//!
//! - [`xrt`]: Xilinx's XRT C API (`libxrt_coreutil.so.2`) for FPGA boards. XRT can throw C++
//!   exceptions through its C API (e.g. when no board is present), which would abort a Rust
//!   process: device calls therefore run in a child process ([`xrt::probe`] runs
//!   `inabench __probe-xrt`), and an abort there is reported, not suffered.
//! - [`verbs`]: rdma-core's `libibverbs.so.1`: the devices and ports a RoCE run would use.
//! - [`cuda`]: `libcuda.so.1` (driver API) and `libnvidia-ml.so.1` (NVML): GPUs and their power.
//!
//! Each probe returns a [`Probe`]: whether the library is there, how many devices it sees, and a
//! sentence for `inabench doctor`.

pub mod cuda;
pub mod verbs;
pub mod xrt;

/// What a probe found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// The library was found and loaded.
    pub library: Option<String>,
    /// Devices it reports (0 when none or when the library is missing).
    pub devices: u32,
    /// One sentence for the doctor's table.
    pub detail: String,
}

impl Probe {
    pub fn usable(&self) -> bool {
        self.library.is_some() && self.devices > 0
    }
}

/// Load the first of `names` that exists.
pub(crate) fn load(names: &[&str]) -> Option<(libloading::Library, String)> {
    names.iter().find_map(|n| {
        // SAFETY: loading a shared library runs its initialisers; these are the vendors' own
        // libraries, loaded the way their C users load them
        unsafe { libloading::Library::new(n) }
            .ok()
            .map(|l| (l, n.to_string()))
    })
}
