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
pub fn checks() -> Vec<Check> {
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
    let rdma = std::path::Path::new("/sys/class/infiniband")
        .read_dir()
        .map(|mut d| d.next().is_some())
        .unwrap_or(false);
    v.push(Check {
        name: "RDMA devices".into(),
        ok: rdma,
        detail: if rdma {
            "found under /sys/class/infiniband".into()
        } else {
            "none under /sys/class/infiniband: hardware RoCE rows are not available".into()
        },
    });
    let gpu = std::path::Path::new("/dev/nvidia0").exists();
    v.push(Check {
        name: "GPUs".into(),
        ok: gpu,
        detail: if gpu {
            "/dev/nvidia0 present".into()
        } else {
            "no /dev/nvidia0: GPU rows are modelled".into()
        },
    });
    let xrt = std::path::Path::new("/opt/xilinx/xrt").exists();
    v.push(Check {
        name: "FPGA (XRT)".into(),
        ok: xrt,
        detail: if xrt {
            "/opt/xilinx/xrt present".into()
        } else {
            "no XRT installation: FPGA rows use the software FPGA model".into()
        },
    });
    v.push(Check { name: "Tofino (P4Runtime)".into(), ok: false, detail: "no P4Runtime endpoint in the default (software) testbed: switch rows use the software switch models".into() });
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
pub fn report() -> String {
    let checks = checks();
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
