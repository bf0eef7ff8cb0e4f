//! Device libraries loaded at run time with libloading, so the suite builds and runs on machines
//! without them, and says in one sentence what it found.
//!
//! - [`xrt`]: Xilinx's XRT C API (`libxrt_coreutil.so.2`) for FPGA boards. XRT can throw C++
//!   exceptions through its C API (e.g. when no board is present), which would abort a Rust
//!   process: device calls therefore run in a child process ([`xrt::probe`] runs
//!   `inabench __probe-xrt`), and an abort there is reported, not suffered.
//! - [`verbs`]: rdma-core's `libibverbs.so.1`: devices and ports (GIDs, link layer, MTU, rate)
//!   and the data path (PD, MR, CQ, RC/UC QP, RDMA WRITE with immediate, SEND, completions) with
//!   the QP attributes and message sizes of the suite's software RoCEv2 transport. Bound here with
//!   libloading, not with `sideway`: sideway's `rdma-mummy-sys` needs CMake and libclang to build.
//! - [`transport`]: the verbs QPs as `inabench_transport::HostTransport` (the message-level
//!   host transport the software RoCEv2 stack also implements).
//! - [`cuda`]: GPUs through `cudarc` (dynamic loading; NCCL all-reduce for the GPU baselines) and
//!   power/energy through `nvml-wrapper`; both load their libraries at run time.
//!
//! Each probe returns a [`Probe`]: whether the library is there, how many devices it sees, and a
//! sentence for `inabench doctor`.

pub mod cuda;
pub mod transport;
pub mod verbs;
pub mod xrt;

/// What a probe found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// The library was found and loaded.
    pub library: Option<String>,
    /// Devices it reports (0 when none or when the library is missing); for verbs, devices of a
    /// hardware provider only (Soft-RoCE and Soft-iWARP devices are named in `detail`).
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
