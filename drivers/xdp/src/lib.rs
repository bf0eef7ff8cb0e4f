//! ALEPH's data plane in the kernel at the XDP hook (ALEPH Sec. 5): the Aggregation Service,
//! Gradient Forwarder, Gradient Receiver and the fetch side of the Integrity Check as eBPF programs
//! (`bpf/aleph.bpf.c`), and the user-space side that compiles, loads, attaches and reads them.
//!
//! Why libbpf is loaded at run time, not through libbpf-rs: libbpf-rs depends on libbpf-sys,
//! which builds or links libbpf when the crate is compiled and needs the libelf and zlib headers
//! (and, for skeletons, clang) on the building machine. The workspace must build on a machine
//! that has only the Rust toolchain, so this crate binds the dozen libbpf calls it makes with
//! `libloading` from Debian's `libbpf.so.1` when a program is loaded, like the suite's other
//! run-time loaded C libraries (drivers/devices), and compiles the C programs with
//! `clang -O2 -g -target bpf` at run time into a cache directory ([`compile`]). A machine without
//! them gets a one-sentence error naming the package to install.
//!
//! What the verifier accepts (kernel 6.18, clang 14): the 128-gradient add loop runs fully
//! unrolled *inside* the `bpf_spin_lock` region (no helper calls there, only map-value and packet
//! accesses with constant offsets after one bounds check), so no per-element atomics are needed.
//! Both native (driver) and generic XDP work on veth here; native redirects and XDP_TX into a veth
//! need NAPI on its peer, which any XDP program attached there turns on (`xdp_pass`).
//!
//! Choices where the paper is silent: a 32-bit round number in every packet and slot (a slot is
//! reset by the first packet of a newer round, so a completed aggregate stays in the map for the
//! receivers and for fetches until then, instead of being cleared at once); 32-bit bitmaps (up to
//! 32 members; the paper's 0xFFFF suggests 16); Q15.16 fixed-point gradients with wrapping sums;
//! a `fetch` packet kind that the aggregation program answers from its map (the paper says lost
//! aggregates are requested, not how); the receiver marks a stored aggregate with an all-ones
//! bitmap (Algorithm 2 line 11's signal) and counts the round's aggregates to find the last one;
//! a devmap broadcast with a devmap egress program as Fig. 4's "XDP_Multiredirect" plus per-veth
//! XDP address rewriting.

pub mod aggregator;
pub mod bench;
pub mod compile;
pub mod group;
pub mod libbpf;
pub mod netns;
pub mod proto;
pub mod testrun;

pub use aggregator::{
    Aggregator, AttachMode, Attachment, Config, Forward, Program, ProgramTime, ReceiverConfig,
    Route, RunStats, Stats, TestRun,
};

#[derive(Debug, thiserror::Error)]
pub enum XdpError {
    #[error("clang ({0}) is not installed: install the Debian package `clang` (and `llvm`)")]
    NoClang(String),
    #[error("the libbpf headers are missing ({0}): install the Debian package `libbpf-dev`")]
    NoHeaders(String),
    /// libbpf could not be loaded (the same error for every call of the process).
    #[error("libbpf: {0}")]
    Libbpf(libbpf::LoadError),
    #[error("clang could not compile {0}: {1}")]
    Compile(String, String),
    #[error("{call} failed: {error}")]
    Call {
        call: &'static str,
        error: std::io::Error,
    },
    #[error("cannot attach XDP in {mode} mode to {interface}: {error}")]
    Attach {
        interface: String,
        mode: &'static str,
        error: String,
    },
    #[error("the eBPF object has no {0} `{1}`")]
    Missing(&'static str, String),
    #[error("no interface {0}")]
    NoInterface(String),
    #[error("{0}")]
    Netns(String),
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
}

/// Why XDP tests and measurements cannot run here (not root, no clang, no libbpf), or `None`.
pub fn unavailable() -> Option<String> {
    if !inabench_fabric::netns::is_root() {
        return Some("XDP needs root".into());
    }
    if !compile::clang_available(&compile::clang()) {
        return Some(XdpError::NoClang(compile::clang().display().to_string()).to_string());
    }
    if let Err(e) = libbpf::Libbpf::get() {
        return Some(e.to_string());
    }
    None
}
