//! GPUs: the CUDA driver API and NCCL through `cudarc` (dynamic loading: nothing CUDA is needed
//! to build), power and energy through `nvml-wrapper` (NVML, also loaded at run time).
//!
//! cudarc panics inside its first call when the library it loads is missing, so every entry
//! here checks `is_culib_present` first and returns a sentence instead. cudarc 0.17 also panics
//! *inside* `is_culib_present` when it finds a library that lacks any symbol it binds (a driver
//! older than CUDA 12.8's API, an NCCL older than 2.28): both presence checks therefore run under
//! [`guarded`], which turns that panic into [`GpuError::Unusable`] naming the library and the
//! symbol. cudarc never tries `libnccl.so.2` (the only name NVIDIA's PyPI wheel ships): where it
//! finds no NCCL, [`nccl_elsewhere`] looks under that name and says what it found and why the
//! binding cannot use it. nvml-wrapper returns an error for a missing library; it is turned into
//! the same kind of sentence.

use crate::Probe;

#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error("no CUDA driver library (libcuda.so.1): GPU rows are modelled")]
    NoCuda,
    #[error("no NCCL library (libnccl.so.2): the NCCL GPU baselines are modelled")]
    NoNccl,
    #[error("CUDA driver call {0} failed: {1}")]
    Cuda(&'static str, String),
    #[error("NCCL call {0} failed: {1}")]
    Nccl(&'static str, String),
    #[error("NVML: {0}")]
    Nvml(String),
    #[error("{library} is there but cudarc 0.17 cannot bind it ({why}): {consequence}")]
    Unusable {
        library: &'static str,
        why: String,
        consequence: &'static str,
    },
    #[error(
        "{found} is there but cudarc 0.17 does not look for that name (it tries libnccl.so, libnccl.so.1, ...): the NCCL GPU baselines are modelled"
    )]
    NcclOtherName { found: String },
}

/// A panic inside a [`guarded`] call: the first line of its message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Panicked(pub String);

/// Run `f`, turning a panic inside it into its message (one line), with the panic hook silenced
/// for the call (the doctor's output stays one sentence per check).
pub fn guarded<T>(f: impl FnOnce() -> T + std::panic::UnwindSafe) -> Result<T, Panicked> {
    // one guarded call at a time: two interleaved take/set pairs could leave the silent hook
    static HOOK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = HOOK
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let r = std::panic::catch_unwind(f);
    std::panic::set_hook(hook);
    r.map_err(|p| {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic without a message".into());
        Panicked(msg.lines().next().unwrap_or_default().to_string())
    })
}

/// libcuda's state: `Ok(true)` loadable with every symbol cudarc binds, `Ok(false)` absent, or
/// why a library that is there is unusable.
pub fn cuda_library() -> Result<bool, GpuError> {
    // SAFETY: only tries to load the library and drops it
    guarded(|| unsafe { cudarc::driver::sys::is_culib_present() }).map_err(|Panicked(why)| {
        GpuError::Unusable {
            library: "the CUDA driver library",
            why,
            consequence: "GPU rows are modelled",
        }
    })
}

/// libnccl's state, as [`cuda_library`].
pub fn nccl_library() -> Result<bool, GpuError> {
    // SAFETY: as above
    guarded(|| unsafe { cudarc::nccl::sys::is_culib_present() }).map_err(|Panicked(why)| {
        GpuError::Unusable {
            library: "the NCCL library",
            why,
            consequence: "the NCCL GPU baselines are modelled",
        }
    })
}

/// Why a library found under another NCCL name cannot tell its version.
#[derive(Debug, thiserror::Error)]
pub enum NcclVersionError {
    /// The library has no `ncclGetVersion` (it is not NCCL).
    #[error("it lacks ncclGetVersion: {0}")]
    Lacks(#[source] libloading::Error),
    /// `ncclGetVersion` answered an NCCL error code.
    #[error("ncclGetVersion returned {0}")]
    Returned(i32),
}

/// NCCL under a name cudarc does not try (`candidates`, e.g. `libnccl.so.2`): `None` when none
/// loads; otherwise the library and its version (`ncclGetVersion`), or why it cannot be asked.
pub fn nccl_elsewhere(candidates: &[&str]) -> Option<(String, Result<i32, NcclVersionError>)> {
    let (lib, name) = crate::load(candidates)?;
    // SAFETY: ncclGetVersion's C signature is `ncclResult_t ncclGetVersion(int *version)`
    let f = unsafe { lib.get::<unsafe extern "C" fn(*mut i32) -> i32>(b"ncclGetVersion\0") };
    let version = match f {
        Err(e) => Err(NcclVersionError::Lacks(e)),
        Ok(f) => {
            let mut v = 0i32;
            // SAFETY: a valid out-pointer
            match unsafe { f(&mut v) } {
                0 => Ok(v),
                rc => Err(NcclVersionError::Returned(rc)),
            }
        }
    };
    Some((name, version))
}

/// The names NVIDIA ships NCCL under that cudarc 0.17 does not try.
pub const NCCL_OTHER_NAMES: [&str; 1] = ["libnccl.so.2"];

/// One sentence on NCCL: its version, or why it cannot be used.
pub fn nccl_status() -> String {
    match nccl_version() {
        Ok(v) => format!("NCCL {}", version_text(v)),
        Err(GpuError::NoNccl) => match nccl_elsewhere(&NCCL_OTHER_NAMES) {
            None => GpuError::NoNccl.to_string(),
            Some((found, v)) => {
                let found = match v {
                    Ok(v) => format!("{found} (NCCL {})", version_text(v)),
                    Err(why) => format!("{found} ({why})"),
                };
                GpuError::NcclOtherName { found }.to_string()
            }
        },
        Err(e) => e.to_string(),
    }
}

fn version_text(v: i32) -> String {
    // NCCL >= 2.9 encodes major*10000 + minor*100 + patch, older major*1000 + minor*100 + patch
    if v >= 10000 {
        format!("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100)
    } else {
        format!("{}.{}.{}", v / 1000, (v / 100) % 10, v % 100)
    }
}

/// Whether libcuda can be loaded with every symbol cudarc binds ([`cuda_library`]; a library
/// that lacks one counts as absent here).
pub fn cuda_present() -> bool {
    matches!(cuda_library(), Ok(true))
}

/// Whether libnccl can be loaded with every symbol cudarc binds ([`nccl_library`]).
pub fn nccl_present() -> bool {
    matches!(nccl_library(), Ok(true))
}

/// A GPU the CUDA driver lists.
#[derive(Debug, Clone, PartialEq)]
pub struct Gpu {
    pub ordinal: i32,
    pub name: String,
    pub memory_bytes: usize,
}

/// The GPUs, or why there are none. Never panics on a machine without CUDA.
pub fn gpus() -> Result<Vec<Gpu>, GpuError> {
    use cudarc::driver::result;
    if !cuda_library()? {
        return Err(GpuError::NoCuda);
    }
    result::init().map_err(|e| GpuError::Cuda("cuInit", e.to_string()))?;
    let n = result::device::get_count()
        .map_err(|e| GpuError::Cuda("cuDeviceGetCount", e.to_string()))?;
    (0..n)
        .map(|i| {
            let d =
                result::device::get(i).map_err(|e| GpuError::Cuda("cuDeviceGet", e.to_string()))?;
            let name = result::device::get_name(d)
                .map_err(|e| GpuError::Cuda("cuDeviceGetName", e.to_string()))?;
            // SAFETY: d is a device handle from cuDeviceGet
            let memory_bytes = unsafe { result::device::total_mem(d) }
                .map_err(|e| GpuError::Cuda("cuDeviceTotalMem", e.to_string()))?;
            Ok(Gpu {
                ordinal: i,
                name,
                memory_bytes,
            })
        })
        .collect()
}

/// NCCL's version (e.g. 22304 for 2.23.4), or why not.
pub fn nccl_version() -> Result<i32, GpuError> {
    if !nccl_library()? {
        return Err(GpuError::NoNccl);
    }
    cudarc::nccl::result::get_nccl_version()
        .map_err(|e| GpuError::Nccl("ncclGetVersion", format!("{e:?}")))
}

/// NCCL all-reduce (sum) of one f32 vector per local GPU, the collective of the GPU baselines
/// (GPUSync, Horovod/BytePS-style rings): `inputs[g]` goes to GPU g, every GPU ends with the
/// element-wise sum, which is copied back. Fewer GPUs than inputs, a missing libcuda or libnccl,
/// or vectors of different lengths are errors, never panics.
pub fn nccl_all_reduce_sum(inputs: &[Vec<f32>]) -> Result<Vec<Vec<f32>>, GpuError> {
    use cudarc::driver::CudaContext;
    use cudarc::nccl::{Comm, ReduceOp, group_end, group_start};
    if !cuda_library()? {
        return Err(GpuError::NoCuda);
    }
    if !nccl_library()? {
        return Err(GpuError::NoNccl);
    }
    let n = inputs.first().map_or(0, Vec::len);
    if inputs.iter().any(|v| v.len() != n) {
        return Err(GpuError::Nccl(
            "ncclAllReduce",
            "every GPU's vector must have the same length".into(),
        ));
    }
    let have = gpus()?.len();
    if inputs.len() > have {
        return Err(GpuError::Cuda(
            "cuDeviceGetCount",
            format!("{} inputs but {have} GPU(s)", inputs.len()),
        ));
    }
    let cuda = |call: &'static str| {
        move |e: cudarc::driver::DriverError| GpuError::Cuda(call, e.to_string())
    };
    let nccl = |call: &'static str| {
        move |e: cudarc::nccl::result::NcclError| GpuError::Nccl(call, format!("{e:?}"))
    };
    let streams = (0..inputs.len())
        .map(|g| CudaContext::new(g).map(|c| c.default_stream()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(cuda("cuCtxCreate"))?;
    let mut bufs = streams
        .iter()
        .zip(inputs)
        .map(|(s, v)| s.memcpy_stod(v))
        .collect::<Result<Vec<_>, _>>()
        .map_err(cuda("cuMemcpyHtoD"))?;
    let comms = Comm::from_devices(streams.clone()).map_err(nccl("ncclCommInitAll"))?;
    group_start().map_err(nccl("ncclGroupStart"))?;
    for (c, b) in comms.iter().zip(bufs.iter_mut()) {
        c.all_reduce_in_place(b, &ReduceOp::Sum)
            .map_err(nccl("ncclAllReduce"))?;
    }
    group_end().map_err(nccl("ncclGroupEnd"))?;
    streams
        .iter()
        .zip(&bufs)
        .map(|(s, b)| s.memcpy_dtov(b).map_err(cuda("cuMemcpyDtoH")))
        .collect()
}

/// GPUs through the CUDA driver API (and NCCL for the GPU baselines), for the doctor: what was
/// found and, when it cannot be used, why; NCCL's state is said in every case. Never panics.
pub fn probe() -> Probe {
    let nccl = nccl_status();
    match gpus() {
        Err(GpuError::NoCuda) => Probe {
            library: None,
            devices: 0,
            detail: format!("{}; {nccl}", GpuError::NoCuda),
        },
        Err(e @ GpuError::Unusable { .. }) => Probe {
            library: None,
            devices: 0,
            detail: format!("{e}; {nccl}"),
        },
        Err(e) => Probe {
            library: Some("libcuda".into()),
            devices: 0,
            detail: format!("CUDA driver loaded but {e}: no usable GPU; {nccl}"),
        },
        Ok(g) => Probe {
            library: Some("libcuda".into()),
            devices: g.len() as u32,
            detail: format!(
                "CUDA driver loaded: {} GPU(s){}; {nccl}",
                g.len(),
                g.iter()
                    .map(|g| format!(
                        " [{}: {}, {:.0} GiB]",
                        g.ordinal,
                        g.name,
                        g.memory_bytes as f64 / (1u64 << 30) as f64
                    ))
                    .collect::<String>()
            ),
        },
    }
}

/// Power and energy of the GPUs through NVML (P4SGD's Table IV reads power with nvidia-smi,
/// which is NVML's command-line front end).
pub struct PowerMeter {
    nvml: nvml_wrapper::Nvml,
}

/// One reading per GPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PowerReading {
    pub index: u32,
    /// Instantaneous board power, watts.
    pub watts: f64,
    /// Energy since the driver was loaded, joules (Volta and newer).
    pub energy_j: Option<f64>,
}

impl PowerMeter {
    /// Initialise NVML, or say why not (a missing library is an error, not a panic).
    pub fn new() -> Result<PowerMeter, GpuError> {
        nvml_wrapper::Nvml::init()
            .map(|nvml| PowerMeter { nvml })
            .map_err(|e| match e {
                nvml_wrapper::error::NvmlError::LibloadingError(_) => GpuError::Nvml(
                    "no NVML (libnvidia-ml.so.1): GPU power is modelled from cited figures".into(),
                ),
                e => GpuError::Nvml(format!("initialisation failed: {e}")),
            })
    }

    pub fn devices(&self) -> Result<u32, GpuError> {
        self.nvml
            .device_count()
            .map_err(|e| GpuError::Nvml(e.to_string()))
    }

    /// Read every GPU's power and energy counter.
    pub fn read(&self) -> Result<Vec<PowerReading>, GpuError> {
        (0..self.devices()?)
            .map(|i| {
                let d = self
                    .nvml
                    .device_by_index(i)
                    .map_err(|e| GpuError::Nvml(e.to_string()))?;
                let mw = d.power_usage().map_err(|e| GpuError::Nvml(e.to_string()))?;
                Ok(PowerReading {
                    index: i,
                    watts: f64::from(mw) / 1e3,
                    energy_j: d.total_energy_consumption().ok().map(|mj| mj as f64 / 1e3),
                })
            })
            .collect()
    }
}

/// GPUs and their power readings through NVML, for the doctor.
pub fn probe_nvml() -> Probe {
    match PowerMeter::new() {
        Err(e) => Probe {
            library: None,
            devices: 0,
            detail: e.to_string().trim_start_matches("NVML: ").to_string(),
        },
        Ok(m) => match m.read() {
            Ok(r) => Probe {
                library: Some("libnvidia-ml".into()),
                devices: r.len() as u32,
                detail: format!(
                    "NVML loaded: {} GPU(s) with power readings{}",
                    r.len(),
                    r.iter()
                        .map(|p| format!(" [{}: {:.1} W]", p.index, p.watts))
                        .collect::<String>()
                ),
            },
            Err(e) => Probe {
                library: Some("libnvidia-ml".into()),
                devices: 0,
                detail: format!("NVML loaded but {e}: no GPU power readings"),
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This machine has no GPU and no CUDA: every entry says so in one sentence, none panics
    /// (cudarc would panic inside its first call if the presence check were skipped).
    #[test]
    fn absent_gpu_is_one_sentence() {
        if cuda_present() {
            eprintln!("libcuda is present here: the absent path is not exercised");
            return;
        }
        assert!(matches!(gpus(), Err(GpuError::NoCuda)));
        let p = probe();
        assert_eq!((p.devices, p.library.is_none()), (0, true));
        assert!(
            p.detail.starts_with("no CUDA driver library"),
            "{}",
            p.detail
        );
        assert!(!p.detail.contains('\n'));
        if !nccl_present() {
            assert!(matches!(nccl_version(), Err(GpuError::NoNccl)));
        }
        let n = probe_nvml();
        assert_eq!(n.devices, 0);
        assert!(n.detail.contains("NVML"), "{}", n.detail);
        assert!(!n.detail.contains('\n'));
        assert!(PowerMeter::new().is_err());
        let e = nccl_all_reduce_sum(&[vec![1.0; 4], vec![2.0; 4]]).expect_err("no GPU");
        assert!(matches!(e, GpuError::NoCuda), "{e}");
    }

    /// A panic inside a guarded call (what cudarc 0.17 does for a library lacking a symbol)
    /// comes back as its first line; the call's value otherwise.
    #[test]
    fn a_panic_in_a_guarded_call_is_its_message() {
        let e = guarded(|| -> bool {
            panic!(
                "Expected symbol in library: DlSym {{ desc: \"undefined symbol: cuFoo\" }}\nmore"
            )
        })
        .expect_err("a panic");
        assert_eq!(
            e.to_string(),
            "Expected symbol in library: DlSym { desc: \"undefined symbol: cuFoo\" }"
        );
        assert_eq!(guarded(|| 7), Ok(7));
        // the hook is back: a later panic is still reported (not asserted: it prints)
    }

    /// NCCL under a name cudarc does not try: a library there that is not NCCL (libc under
    /// the name libnccl.so.2) is named with what it lacks; a name that loads nothing is None.
    #[test]
    fn nccl_under_another_name_is_found_and_judged() {
        let dir = std::env::temp_dir().join(format!("inabench-nccl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        let libc = [
            "/lib/x86_64-linux-gnu/libc.so.6",
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            "/lib64/libc.so.6",
        ]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists());
        let Some(libc) = libc else {
            eprintln!("no libc.so.6 at the usual paths: skipped");
            return;
        };
        let fake = dir.join("libnccl.so.2");
        let _ = std::fs::remove_file(&fake);
        std::os::unix::fs::symlink(libc, &fake).expect("symlink");
        let fake = fake.to_string_lossy().to_string();
        let (name, v) = nccl_elsewhere(&[fake.as_str()]).expect("it loads");
        assert_eq!(name, fake);
        let why = v.expect_err("libc has no ncclGetVersion");
        assert!(matches!(why, NcclVersionError::Lacks(_)), "{why:?}");
        // the sentence the doctor shows, with the loader's own words after it
        let said = why.to_string();
        assert!(said.starts_with("it lacks ncclGetVersion: "), "{said}");
        assert_eq!(
            NcclVersionError::Returned(3).to_string(),
            "ncclGetVersion returned 3"
        );
        let missing = dir.join("nothing.so").to_string_lossy().to_string();
        assert!(nccl_elsewhere(&[missing.as_str()]).is_none());
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(version_text(23203), "2.32.3");
        assert_eq!(version_text(2708), "2.7.8");
    }
}
