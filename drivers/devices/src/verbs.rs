//! RDMA devices through rdma-core's libibverbs, loaded at run time. The suite's software RoCEv2
//! transport uses the same QP attributes and message sizes a verbs run would (RC, path MTU 1024,
//! RDMA WRITE with and without immediate), so a machine with a RoCE NIC runs the same experiment;
//! the verbs data path itself (PD, MR, CQ, QP state changes, posting and polling) needs a device
//! to be tested, which this machine's kernel does not have.

use crate::{Probe, load};
use std::os::raw::{c_int, c_void};

type GetDeviceList = unsafe extern "C" fn(*mut c_int) -> *mut *mut c_void;
type FreeDeviceList = unsafe extern "C" fn(*mut *mut c_void);

pub fn probe() -> Probe {
    let Some((lib, name)) = load(&["libibverbs.so.1", "libibverbs.so"]) else {
        return Probe {
            library: None,
            devices: 0,
            detail: "no libibverbs (rdma-core): hardware RoCE rows are not available".into(),
        };
    };
    // SAFETY: ibv_get_device_list/ibv_free_device_list have these signatures in rdma-core; the
    // list is freed before return and never dereferenced here
    let n = unsafe {
        match (
            lib.get::<GetDeviceList>(b"ibv_get_device_list\0"),
            lib.get::<FreeDeviceList>(b"ibv_free_device_list\0"),
        ) {
            (Ok(get), Ok(free)) => {
                let mut n: c_int = 0;
                let list = get(&mut n);
                if !list.is_null() {
                    free(list);
                }
                Some(n.max(0) as u32)
            }
            _ => None,
        }
    };
    match n {
        Some(0) => Probe {
            library: Some(name),
            devices: 0,
            detail: "libibverbs loaded, no RDMA device: hardware RoCE rows are not available"
                .into(),
        },
        Some(k) => Probe {
            library: Some(name),
            devices: k,
            detail: format!("libibverbs loaded: {k} RDMA device(s)"),
        },
        None => Probe {
            library: Some(name),
            devices: 0,
            detail: "libibverbs loaded but has no ibv_get_device_list".into(),
        },
    }
}
