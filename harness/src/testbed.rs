//! The testbed file (`experiments/testbeds/*.yaml`): its types and its strict reader live in
//! core ([`inabench_core::testbed`], where the cargo-fuzz target `testbed` reaches them without
//! the harness's dependencies); re-exported here, with the embedded software testbed.

pub use inabench_core::testbed::*;

use inabench_core::overrides::{Overrides, SetParam};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// A testbed's rig that cannot run: one sentence.
#[derive(Debug, thiserror::Error)]
pub enum RigError {
    #[error("the testbed {testbed}'s rig script {script} {why}")]
    Script {
        testbed: String,
        script: String,
        why: String,
    },
    #[error(
        "the testbed {testbed}'s rig runs {runs} only; {experiment} has no rows on it (run it without this --testbed)"
    )]
    NotOnRig {
        testbed: String,
        runs: String,
        experiment: String,
    },
    #[error(
        "the testbed {testbed}'s rig boots its guests from this process (root, taps on this host): --launcher {launcher} cannot run it; leave --launcher out"
    )]
    Launcher { testbed: String, launcher: String },
    #[error(
        "the testbed {testbed}'s rig cannot run in one run experiments it stands in for (in this process) and experiments whose agents run in its guests: run them one at a time"
    )]
    Mixed { testbed: String },
    #[error("the testbed {testbed}'s data addresses: {why}")]
    Addresses { testbed: String, why: String },
    #[error("the testbed {testbed}'s rig.set: {why}")]
    Set { testbed: String, why: String },
    #[error(
        "the testbed {testbed}'s rig fixes `{fixed}`; --set `{asked}` cannot change it (run without this --testbed for other values)"
    )]
    Fixed {
        testbed: String,
        fixed: String,
        asked: String,
    },
}

/// A testbed's rig, ready to stand in for the software classes of the experiments it names:
/// the workloads it swaps in, the parameters it fixes, and what its guests said about their
/// device, for the run's manifest.
pub struct RigRun {
    pub testbed: String,
    pub rig: Rig,
    pub script: PathBuf,
    pub programs: PathBuf,
    pub set: Vec<SetParam>,
    /// The testbed's data addresses (its hosts' `data:`), which the rig's switch takes and its
    /// guests are checked against; None where it states none.
    pub addresses: Option<inabench_workloads::netreduce::rig::AddressPlan>,
    facts: Arc<Mutex<Vec<String>>>,
}

impl RigRun {
    /// The rig of the testbed file `file`, when it has one; its script must exist and its
    /// `set` entries parse.
    pub fn of(tb: &Testbed, file: &Path) -> Result<Option<RigRun>, RigError> {
        let Some(rig) = tb.rig.clone() else {
            return Ok(None);
        };
        let testbed = file.display().to_string();
        let dir = file.parent().unwrap_or(Path::new("."));
        let script = dir.join(&rig.script);
        if !script.is_file() {
            return Err(RigError::Script {
                testbed,
                script: script.display().to_string(),
                why: "is not a file (`rig.script` is relative to the testbed file's folder)".into(),
            });
        }
        let programs = match &rig.programs {
            Some(p) => dir.join(p),
            None => std::env::current_exe()
                .ok()
                .and_then(|e| e.parent().map(|d| d.join("examples")))
                .unwrap_or_else(|| PathBuf::from("examples")),
        };
        let set = rig
            .set
            .iter()
            .map(|s| {
                SetParam::parse(s).map_err(|e| RigError::Set {
                    testbed: testbed.clone(),
                    why: e.to_string(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let addresses = inabench_workloads::netreduce::rig::address_plan(tb).map_err(|e| {
            RigError::Addresses {
                testbed: testbed.clone(),
                why: e.to_string(),
            }
        })?;
        Ok(Some(RigRun {
            testbed,
            rig,
            script,
            programs,
            set,
            addresses,
            facts: Arc::new(Mutex::new(Vec::new())),
        }))
    }

    /// Every experiment asked for must be one the rig runs.
    pub fn check(&self, experiments: &[String], launcher: Option<&str>) -> Result<(), RigError> {
        if let Some(l) = launcher.filter(|l| *l != "inproc") {
            return Err(RigError::Launcher {
                testbed: self.testbed.clone(),
                launcher: l.to_string(),
            });
        }
        for e in experiments {
            if !self.rig.experiments.contains(e) {
                return Err(RigError::NotOnRig {
                    testbed: self.testbed.clone(),
                    runs: self.rig.experiments.join(", "),
                    experiment: e.clone(),
                });
            }
        }
        Ok(())
    }

    fn rig_workload(&self) -> inabench_workloads::netreduce::rig::RigTable6 {
        use inabench_workloads::netreduce::rig::{RigConfig, RigTable6};
        RigTable6::new(
            RigConfig {
                script: self.script.clone(),
                programs: self.programs.clone(),
                addresses: self.addresses.clone(),
            },
            self.facts.clone(),
        )
    }

    /// The workloads the rig stands in for (their ids): the rest of its experiments run their
    /// own workloads in agents in its guests ([`RigRun::agents`]).
    pub fn stands_in(&self) -> Vec<&'static str> {
        vec![inabench_core::Workload::id(&self.rig_workload())]
    }

    /// The launcher of a run whose experiments' workloads (`workloads`) the rig does not stand
    /// in for: agents in the rig's guests, one a worker host of the testbed, connecting to the
    /// runner host's `data.ipv4` on the rig's bridge. None: the rig stands in for every one
    /// (they run in the runner's process). A run that mixes both is refused in one sentence.
    pub fn agents(
        &self,
        tb: &Testbed,
        workloads: &[String],
    ) -> Result<Option<crate::launcher::rig::RigLauncher>, RigError> {
        let stood_in = self.stands_in();
        let own: Vec<&String> = workloads
            .iter()
            .filter(|w| !stood_in.contains(&w.as_str()))
            .collect();
        if own.is_empty() {
            return Ok(None);
        }
        if own.len() < workloads.len() {
            return Err(RigError::Mixed {
                testbed: self.testbed.clone(),
            });
        }
        let guests = tb
            .hosts
            .iter()
            .filter(|h| h.role.iter().any(|r| r == "worker"))
            .count();
        let host = tb
            .hosts
            .iter()
            .find(|h| h.role.iter().any(|r| r == "runner"))
            .and_then(|h| h.data.as_ref())
            .map(|d| d.ipv4.clone());
        let (Some(ip), true) = (host, guests > 0) else {
            return Err(RigError::Addresses {
                testbed: self.testbed.clone(),
                why: "agents in the rig's guests need worker hosts and a runner host with `data.ipv4` on the rig's bridge".into(),
            });
        };
        Ok(Some(crate::launcher::rig::RigLauncher {
            script: self.script.clone(),
            guests,
            host_ip: format!("{ip}/24"),
            boot_timeout: std::time::Duration::from_secs(600),
            connect_timeout: std::time::Duration::from_secs(60),
            run_timeout_s: 3600,
        }))
    }

    /// The command line's overrides with the rig's fixed parameters in front (the manifest
    /// records both); a `--set` of a parameter the rig fixes is refused.
    pub fn merge(&self, mut o: Overrides) -> Result<Overrides, RigError> {
        if let Some((f, a)) = self
            .set
            .iter()
            .find_map(|f| o.set.iter().find(|a| a.key == f.key).map(|a| (f, a)))
        {
            return Err(RigError::Fixed {
                testbed: self.testbed.clone(),
                fixed: f.text.clone(),
                asked: a.text.clone(),
            });
        }
        o.set.splice(0..0, self.set.iter().cloned());
        Ok(o)
    }

    /// The builtin workloads with the rig's in place of those it stands in for.
    pub fn registry(&self) -> crate::registry::Registry {
        let rig = self.rig_workload();
        let mut w = inabench_workloads::all();
        w.retain(|x| x.id() != inabench_core::Workload::id(&rig));
        w.push(Box::new(rig));
        crate::registry::Registry::new(w)
    }

    /// The manifest's lines for the rig: the device and provider its guests reported, and how
    /// the rows were made.
    /// Nothing when no guest reported (the rig did not run).
    pub fn driver_lines(&self) -> Vec<String> {
        let facts = self.facts.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if facts.is_empty() {
            return Vec::new();
        }
        let mut out = vec![format!(
            "rig {} (tools/rxe-rig, testbed {}): Soft-RoCE, the Linux kernel's software RDMA provider rdma_rxe, device rxe0 on a virtio NIC in each qemu TCG guest (emulated CPUs: no RoCE NIC, no line rate, no NIC timestamps); NetReduce's accelerator inabench_ina::fpga::Accelerator (RC QPs in the guests) and SwitchML-RDMA's switch inabench_ina::switchml_rdma (UC QPs in the guests, 1024 B a packet: the release's payload and a verbs path MTU; the spec's simulated rows send 768) on this host on the guests' taps (AF_PACKET), the ICRC recomputed in software",
            self.rig.kind, self.testbed
        )];
        if let Some(a) = &self.addresses {
            out.push(inabench_workloads::netreduce::rig::describe_plan(a));
        }
        out.extend(facts);
        out
    }
}

/// The embedded software testbed (`experiments/testbeds/local.yaml`): what runs without
/// `--testbed`.
pub fn local_text() -> String {
    crate::embedded::EMBEDDED
        .iter()
        .find(|(p, _)| p.ends_with("testbeds/local.yaml"))
        .map(|(_, t)| t.to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_embedded_local_testbed_is_the_file_and_parses() {
        let text = super::local_text();
        assert_eq!(
            text,
            include_str!("../../experiments/testbeds/local.yaml"),
            "the embedded copy"
        );
        let t = super::Testbed::from_yaml(std::path::Path::new("local.yaml"), &text)
            .expect("local.yaml");
        assert!(!t.has_hardware());
    }

    /// rxe-rig-agents.yaml: the rig stands in no workload for netreduce-table1, so its run gets
    /// the rxe-rig launcher (a guest a worker host, the runner's bridge address); table6's
    /// workload is stood in for (no launcher), and a run mixing both is one sentence.
    #[test]
    fn a_rig_that_stands_in_no_workload_boots_agents_in_its_guests() {
        let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../experiments/testbeds/rxe-rig-agents.yaml");
        let tb = super::Testbed::load(&file).expect("rxe-rig-agents.yaml");
        let rig = super::RigRun::of(&tb, &file).expect("rig").expect("a rig");
        assert_eq!(rig.stands_in(), vec!["netreduce.table6"]);
        let l = rig
            .agents(&tb, &["netreduce.table1".to_string()])
            .expect("agents")
            .expect("a launcher");
        assert_eq!((l.guests, l.host_ip.as_str()), (2, "10.77.0.254/24"));
        assert!(l.script.ends_with("tools/rxe-rig/rig.sh"), "{:?}", l.script);
        assert!(
            rig.agents(&tb, &["netreduce.table6".to_string()])
                .expect("stood in")
                .is_none()
        );
        let mixed = rig
            .agents(
                &tb,
                &[
                    "netreduce.table6".to_string(),
                    "netreduce.table1".to_string(),
                ],
            )
            .expect_err("mixed");
        assert!(
            mixed
                .to_string()
                .contains("cannot run in one run experiments it stands in for"),
            "{mixed}"
        );
    }
}
