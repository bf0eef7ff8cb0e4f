//! The testbed file (`experiments/testbeds/*.yaml`): what exists where. Hosts and their roles,
//! NICs, the switch (soft, tofino through P4Runtime, fpga through XRT), GPUs, storage for
//! out-of-core work, and the launcher. Parsed strictly: an unknown or misspelt field, a wrong
//! type or an inconsistent value is one sentence with the file and line.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Testbed {
    pub name: String,
    pub hosts: Vec<Host>,
    #[serde(default)]
    pub switch: Switch,
    #[serde(default)]
    pub nics: Vec<Nic>,
    #[serde(default)]
    pub gpus: Vec<Gpus>,
    #[serde(default)]
    pub storage: Vec<Storage>,
    #[serde(default = "default_launcher")]
    pub launcher: String,
}

fn default_launcher() -> String {
    "local".into()
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Host {
    pub name: String,
    #[serde(default)]
    pub role: Vec<String>,
    /// Address the launcher reaches it at (ssh/slurm); absent for this machine.
    #[serde(default)]
    pub address: Option<String>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Switch {
    /// soft | tofino | fpga
    pub kind: String,
    #[serde(default)]
    pub p4runtime: Option<P4Runtime>,
    #[serde(default)]
    pub xrt: Option<Xrt>,
}

impl Default for Switch {
    fn default() -> Self {
        Switch {
            kind: "soft".into(),
            p4runtime: None,
            xrt: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct P4Runtime {
    /// host:port of the P4Runtime server
    pub address: String,
    #[serde(default = "one")]
    pub device_id: u64,
    /// [high, low] of the 128-bit election id
    #[serde(default = "election")]
    pub election_id: [u64; 2],
    /// Per system: the compiled program and its P4Info (paths); absent: the suite's own
    /// description of the program (its tables and registers) is pushed as P4Info.
    #[serde(default)]
    pub programs: BTreeMap<String, Program>,
}

fn one() -> u64 {
    1
}

fn election() -> [u64; 2] {
    [0, 1]
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Program {
    pub p4info: Option<String>,
    pub device_config: Option<String>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Xrt {
    /// device index or PCI BDF
    pub device: String,
    /// per system: the xclbin to load
    #[serde(default)]
    pub xclbin: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Nic {
    pub host: String,
    /// roce | ethernet
    pub kind: String,
    pub device: String,
    #[serde(default)]
    pub gid_index: u32,
    pub rate_gbps: f64,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Gpus {
    pub host: String,
    pub count: u32,
    #[serde(default)]
    pub model: Option<String>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Storage {
    pub host: String,
    pub path: String,
}

/// A testbed file error: one sentence with the file and line.
#[derive(Debug, thiserror::Error)]
#[error("{file}{}: {message}", line.map(|l| format!(":{l}")).unwrap_or_default())]
pub struct TestbedError {
    pub file: String,
    pub line: Option<usize>,
    pub message: String,
}

fn line_of(text: &str, needle: &str) -> Option<usize> {
    text.lines().position(|l| l.contains(needle)).map(|i| i + 1)
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

impl Testbed {
    /// The hosts agents run on (workers, or hosts without a role) that have an address: where
    /// the ssh launcher starts agents, and what `doctor` asks.
    pub fn agent_hosts(&self) -> Vec<String> {
        self.hosts
            .iter()
            .filter(|h| h.role.is_empty() || h.role.iter().any(|r| r == "worker"))
            .filter_map(|h| h.address.clone())
            .collect()
    }

    pub fn from_yaml(file: &Path, text: &str) -> Result<Testbed, TestbedError> {
        let err = |line, message: String| TestbedError {
            file: file.display().to_string(),
            line,
            message,
        };
        let t: Testbed = serde_saphyr::from_str(text).map_err(|e| {
            let line = e.location().map(|l| l.line() as usize).filter(|l| *l > 0);
            let m = e.to_string();
            err(
                line,
                m.lines().next().unwrap_or("invalid testbed").to_string(),
            )
        })?;
        if !["soft", "tofino", "fpga"].contains(&t.switch.kind.as_str()) {
            return Err(err(
                line_of(text, "kind:"),
                format!(
                    "switch.kind is soft, tofino or fpga, not `{}`",
                    t.switch.kind
                ),
            ));
        }
        if t.switch.kind == "tofino" && t.switch.p4runtime.is_none() {
            return Err(err(
                line_of(text, "kind:"),
                "a tofino switch needs `p4runtime: {address: host:port}`".into(),
            ));
        }
        if t.switch.kind == "fpga" && t.switch.xrt.is_none() {
            return Err(err(
                line_of(text, "kind:"),
                "an fpga switch needs `xrt: {device: ...}`".into(),
            ));
        }
        if let Some(p) = &t.switch.p4runtime
            && !p.address.contains(':')
        {
            return Err(err(
                line_of(text, "address:"),
                format!("p4runtime.address is host:port, not `{}`", p.address),
            ));
        }
        if !["local", "netns", "ssh", "slurm"].contains(&t.launcher.as_str()) {
            return Err(err(
                line_of(text, "launcher:"),
                format!(
                    "launcher is local, netns, ssh or slurm, not `{}`",
                    t.launcher
                ),
            ));
        }
        let hosts: Vec<&str> = t.hosts.iter().map(|h| h.name.as_str()).collect();
        let named = t
            .nics
            .iter()
            .map(|n| (&n.host, "nics"))
            .chain(t.gpus.iter().map(|g| (&g.host, "gpus")))
            .chain(t.storage.iter().map(|s| (&s.host, "storage")));
        for (h, what) in named {
            if !hosts.contains(&h.as_str()) {
                return Err(err(
                    line_of(text, &format!("host: {h}")),
                    format!("{what} names host `{h}`, which `hosts` does not list"),
                ));
            }
        }
        for n in &t.nics {
            if !["roce", "ethernet"].contains(&n.kind.as_str()) || n.rate_gbps <= 0.0 {
                return Err(err(
                    line_of(text, &format!("device: {}", n.device)),
                    format!(
                        "NIC {} needs kind roce or ethernet and a positive rate_gbps",
                        n.device
                    ),
                ));
            }
        }
        Ok(t)
    }

    pub fn load(file: &Path) -> Result<Testbed, TestbedError> {
        let text = std::fs::read_to_string(file).map_err(|e| TestbedError {
            file: file.display().to_string(),
            line: None,
            message: format!("cannot read the testbed file: {e}"),
        })?;
        Testbed::from_yaml(file, &text)
    }

    /// Whether the testbed has devices for `hardware` rows.
    pub fn has_hardware(&self) -> bool {
        self.switch.kind != "soft"
            || self.nics.iter().any(|n| n.kind == "roce")
            || self.gpus.iter().any(|g| g.count > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Testbed, TestbedError> {
        Testbed::from_yaml(Path::new("tb.yaml"), s)
    }

    #[test]
    fn the_local_testbed_parses() {
        let t = parse(include_str!("../../experiments/testbeds/local.yaml")).expect("local.yaml");
        assert_eq!(t.switch.kind, "soft");
        assert!(!t.has_hardware());
    }

    #[test]
    fn errors_name_the_file_the_line_and_the_field() {
        let e = parse("name: x\nhosts:\n  - name: a\n    rolle: [worker]\n").expect_err("typo");
        let s = e.to_string();
        assert!(s.starts_with("tb.yaml:4: "), "{s}");
        assert!(s.contains("rolle"), "{s}");
        let e = parse("name: x\nhosts: [{name: a}]\nswitch:\n  kind: tofino\n")
            .expect_err("no p4runtime");
        assert_eq!(
            e.to_string(),
            "tb.yaml:4: a tofino switch needs `p4runtime: {address: host:port}`"
        );
        let e = parse("name: x\nhosts: [{name: a}]\ngpus:\n  - host: b\n    count: 8\n")
            .expect_err("unknown host");
        assert!(e.to_string().contains("`b`"), "{e}");
        let ok = parse(
            "name: t\nhosts: [{name: a}]\nswitch:\n  kind: tofino\n  p4runtime: {address: 'sw:9559', device_id: 1}\nnics:\n  - {host: a, kind: roce, device: mlx5_0, rate_gbps: 100}\n",
        )
        .expect("tofino testbed");
        assert!(ok.has_hardware());
        assert_eq!(ok.switch.p4runtime.map(|p| p.election_id), Some([0, 1]));
    }
}
