//! GPUs: the CUDA driver API and NCCL through `cudarc` (dynamic loading: nothing CUDA is needed
//! to build), power and energy through `nvml-wrapper` (NVML, also loaded at run time).
//!
//! cudarc panics inside its first call when the library it loads is missing, so every entry
//! here checks `is_culib_present` first and returns a sentence instead. nvml-wrapper returns an
//! error for a missing library; it is turned into the same kind of sentence.

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
}

/// Whether libcuda can be loaded (cudarc's own check, which does not panic).
pub fn cuda_present() -> bool {
    // SAFETY: only tries to load the library and drops it
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// Whether libnccl can be loaded.
pub fn nccl_present() -> bool {
    // SAFETY: as above
    unsafe { cudarc::nccl::sys::is_culib_present() }
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
    if !cuda_present() {
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
    if !nccl_present() {
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
    if !cuda_present() {
        return Err(GpuError::NoCuda);
    }
    if !nccl_present() {
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

/// GPUs through the CUDA driver API (and NCCL for the GPU baselines), for the doctor.
pub fn probe() -> Probe {
    match gpus() {
        Err(GpuError::NoCuda) => Probe {
            library: None,
            devices: 0,
            detail: GpuError::NoCuda.to_string(),
        },
        Err(e) => Probe {
            library: Some("libcuda".into()),
            devices: 0,
            detail: format!("CUDA driver loaded but {e}: no usable GPU"),
        },
        Ok(g) => {
            let nccl = match nccl_version() {
                Ok(v) => format!("NCCL {}.{}.{}", v / 10000, (v / 100) % 100, v % 100),
                Err(e) => e.to_string(),
            };
            Probe {
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
            }
        }
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
}
