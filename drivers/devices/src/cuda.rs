//! CUDA (driver API) and NVML, loaded at run time.

use crate::{Probe, load};
use std::os::raw::{c_int, c_uint};

type CuInit = unsafe extern "C" fn(c_uint) -> c_int;
type CuDeviceGetCount = unsafe extern "C" fn(*mut c_int) -> c_int;
type NvmlInit = unsafe extern "C" fn() -> c_int;
type NvmlCount = unsafe extern "C" fn(*mut c_uint) -> c_int;
type NvmlShutdown = unsafe extern "C" fn() -> c_int;

/// GPUs through the CUDA driver API.
pub fn probe() -> Probe {
    let Some((lib, name)) = load(&["libcuda.so.1", "libcuda.so"]) else {
        return Probe {
            library: None,
            devices: 0,
            detail: "no CUDA driver library (libcuda.so.1): GPU rows are modelled".into(),
        };
    };
    // SAFETY: the symbols have these C signatures in the CUDA driver API
    let r = unsafe {
        let init: libloading::Symbol<CuInit> = match lib.get(b"cuInit\0") {
            Ok(s) => s,
            Err(e) => {
                return Probe {
                    library: Some(name),
                    devices: 0,
                    detail: format!("libcuda has no cuInit: {e}"),
                };
            }
        };
        let count: libloading::Symbol<CuDeviceGetCount> = match lib.get(b"cuDeviceGetCount\0") {
            Ok(s) => s,
            Err(e) => {
                return Probe {
                    library: Some(name),
                    devices: 0,
                    detail: format!("libcuda has no cuDeviceGetCount: {e}"),
                };
            }
        };
        let rc = init(0);
        if rc != 0 {
            Err(rc)
        } else {
            let mut n: c_int = 0;
            let rc = count(&mut n);
            if rc == 0 {
                Ok(n.max(0) as u32)
            } else {
                Err(rc)
            }
        }
    };
    match r {
        Ok(n) => Probe {
            library: Some(name),
            devices: n,
            detail: format!("CUDA driver loaded: {n} GPU(s)"),
        },
        Err(rc) => Probe {
            library: Some(name),
            devices: 0,
            detail: format!(
                "CUDA driver loaded but cuInit/cuDeviceGetCount returned error {rc}: no usable GPU"
            ),
        },
    }
}

/// GPUs and their power readings through NVML.
pub fn probe_nvml() -> Probe {
    let Some((lib, name)) = load(&["libnvidia-ml.so.1", "libnvidia-ml.so"]) else {
        return Probe {
            library: None,
            devices: 0,
            detail: "no NVML (libnvidia-ml.so.1): GPU power is modelled from cited figures".into(),
        };
    };
    // SAFETY: the symbols have these C signatures in NVML
    let r = unsafe {
        match (
            lib.get::<NvmlInit>(b"nvmlInit_v2\0"),
            lib.get::<NvmlCount>(b"nvmlDeviceGetCount_v2\0"),
            lib.get::<NvmlShutdown>(b"nvmlShutdown\0"),
        ) {
            (Ok(init), Ok(count), Ok(shutdown)) => {
                let rc = init();
                if rc != 0 {
                    Err(rc)
                } else {
                    let mut n: c_uint = 0;
                    let rc = count(&mut n);
                    shutdown();
                    if rc == 0 { Ok(n) } else { Err(rc) }
                }
            }
            _ => Err(-1),
        }
    };
    match r {
        Ok(n) => Probe {
            library: Some(name),
            devices: n,
            detail: format!("NVML loaded: {n} GPU(s) with power readings"),
        },
        Err(rc) => Probe {
            library: Some(name),
            devices: 0,
            detail: format!(
                "NVML loaded but initialisation failed (error {rc}): no GPU power readings"
            ),
        },
    }
}
