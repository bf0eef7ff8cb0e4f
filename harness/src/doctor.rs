//! `inabench doctor`: this machine and what each fidelity class needs. The hardware probes
//! (P4Runtime, XRT, verbs, CUDA) come with the drivers; here the software side is checked.

use inabench_core::spec::Fidelity;
use std::fmt::Write as _;

pub struct Check {
    pub name: String,
    pub ok: bool,
    pub detail: String,
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn has_cmd(cmd: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(cmd).is_file()))
        .unwrap_or(false)
}

/// The checks, each a line of the report.
pub fn checks(testbed: Option<&crate::testbed::Testbed>) -> Vec<Check> {
    let host = inabench_core::store::HostFacts::probe(crate::embedded::RUSTC_VERSION);
    let mut v = vec![
        Check {
            name: "cpu".into(),
            ok: true,
            detail: format!("{} ({} cores)", host.cpu_model, host.cores),
        },
        Check {
            name: "memory".into(),
            ok: host.memory_gib > 1.0,
            detail: format!("{:.1} GiB", host.memory_gib),
        },
        Check {
            name: "kernel".into(),
            ok: true,
            detail: host.kernel.clone(),
        },
        Check {
            name: "rustc (build)".into(),
            ok: true,
            detail: host.rustc.clone(),
        },
    ];
    let root = is_root();
    let ip = has_cmd("ip");
    v.push(Check {
        name: "network namespaces".into(),
        ok: root && ip,
        detail: match (root, ip) {
            (true, true) => "root and iproute2: the netns launcher can create hosts".into(),
            (false, _) => "not root: the netns launcher falls back to local".into(),
            (true, false) => {
                "iproute2 (`ip`) not found: the netns launcher falls back to local".into()
            }
        },
    });
    v.push(Check {
        name: "tc".into(),
        ok: has_cmd("tc"),
        detail: if has_cmd("tc") {
            "rate limits with tbf/htb available".into()
        } else {
            "`tc` not found: no per-host rate limits".into()
        },
    });
    // devices: libraries loaded at run time (see drivers/devices)
    let verbs = inabench_devices::verbs::probe();
    v.push(Check {
        name: "RDMA devices (verbs)".into(),
        ok: verbs.usable(),
        detail: verbs.detail,
    });
    let cuda = inabench_devices::cuda::probe();
    v.push(Check {
        name: "GPUs (CUDA)".into(),
        ok: cuda.usable(),
        detail: cuda.detail,
    });
    let nvml = inabench_devices::cuda::probe_nvml();
    v.push(Check {
        name: "GPU power (NVML)".into(),
        ok: nvml.usable(),
        detail: nvml.detail,
    });
    let xrt = match std::env::current_exe() {
        Ok(exe) => inabench_devices::xrt::probe(&exe, std::time::Duration::from_secs(20)),
        Err(e) => inabench_devices::Probe {
            library: None,
            devices: 0,
            detail: format!("cannot locate this executable to run the XRT probe: {e}"),
        },
    };
    v.push(Check {
        name: "FPGA (XRT)".into(),
        ok: xrt.usable(),
        detail: xrt.detail,
    });
    v.push(p4runtime_check(testbed));
    // the local launcher: start one agent and have it run the probe
    let t0 = std::time::Instant::now();
    let launcher = crate::launcher::LocalLauncher::new().and_then(|l| {
        use crate::launcher::Launcher;
        l.start(1)
    });
    match launcher {
        Ok(agents) => {
            let n = agents.len();
            for a in agents {
                a.shutdown();
            }
            v.push(Check {
                name: "local launcher".into(),
                ok: n == 1,
                detail: format!(
                    "agent started and answered in {:.0} ms",
                    t0.elapsed().as_secs_f64() * 1e3
                ),
            });
        }
        Err(e) => v.push(Check {
            name: "local launcher".into(),
            ok: false,
            detail: e.to_string(),
        }),
    }
    v
}

/// The report as text.
/// The checks as JSON: `[{"name", "ok", "detail"}, ...]`.
pub fn json(testbed: Option<&crate::testbed::Testbed>) -> String {
    let v: Vec<serde_json::Value> = checks(testbed)
        .into_iter()
        .map(|c| serde_json::json!({"name": c.name, "ok": c.ok, "detail": c.detail}))
        .collect();
    serde_json::Value::Array(v).to_string()
}

pub fn report(testbed: Option<&crate::testbed::Testbed>) -> String {
    let checks = checks(testbed);
    let mut s = String::from("inabench doctor\n\nThis machine:\n");
    for c in &checks {
        let _ = writeln!(
            s,
            "  [{}] {:<20} {}",
            if c.ok { "ok" } else { "--" },
            c.name,
            c.detail
        );
    }
    let has = |n: &str| checks.iter().any(|c| c.name == n && c.ok);
    s.push_str("\nFidelity classes:\n");
    for f in Fidelity::ALL {
        let (avail, why) = match f {
            Fidelity::Hardware => (
                has("RDMA devices") || has("GPUs") || has("FPGA (XRT)"),
                "needs the testbed's devices (Tofino via P4Runtime, FPGA via XRT, RoCE NICs, GPUs)",
            ),
            Fidelity::Emulated => (
                true,
                "software fabrics on this host (mem, udp; netns needs root)",
            ),
            Fidelity::Simulated => (true, "discrete-event fabric in virtual time"),
            Fidelity::Modelled => (true, "closed-form and flow-level models"),
            Fidelity::Functional => (true, "hardware-independent computation"),
        };
        let _ = writeln!(
            s,
            "  {:<11} {}  {}",
            f.as_str(),
            if avail { "available  " } else { "unavailable" },
            why
        );
    }
    s
}

/// The testbed's P4Runtime switch: reachable, which API version, whether a pipeline is loaded.
fn p4runtime_check(testbed: Option<&crate::testbed::Testbed>) -> Check {
    let name = "Tofino (P4Runtime)".to_string();
    let Some(p) = testbed.and_then(|t| t.switch.p4runtime.as_ref()) else {
        return Check {
            name,
            ok: false,
            detail:
                "no P4Runtime endpoint in the testbed: switch rows use the software switch models"
                    .into(),
        };
    };
    let probe = || -> Result<String, String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        rt.block_on(async {
            let fut = async {
                let mut c = inabench_p4rt::client::Controller::connect(
                    &p.address,
                    p.device_id,
                    (p.election_id[0], p.election_id[1]),
                )
                .await
                .map_err(|e| e.to_string())?;
                let v = c.capabilities().await.map_err(|e| e.to_string())?;
                let pipeline = match c.get_pipeline().await {
                    Ok(cfg) => cfg
                        .p4info
                        .and_then(|i| i.pkg_info)
                        .map_or("a pipeline without a name".to_string(), |k| {
                            format!("pipeline `{}`", k.name)
                        }),
                    Err(_) => "no pipeline loaded".to_string(),
                };
                Ok::<String, String>(format!(
                    "{} (device {}): P4Runtime {v}, {pipeline}",
                    p.address, p.device_id
                ))
            };
            tokio::time::timeout(std::time::Duration::from_secs(5), fut)
                .await
                .map_err(|_| format!("{} did not answer within 5 s", p.address))?
        })
    };
    match probe() {
        Ok(d) => Check {
            name,
            ok: true,
            detail: d,
        },
        Err(e) => Check {
            name,
            ok: false,
            detail: e,
        },
    }
}
