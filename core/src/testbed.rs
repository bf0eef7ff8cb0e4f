//! The testbed file (`experiments/testbeds/*.yaml`): what exists where. Hosts and their roles,
//! NICs, the switch (soft, tofino through P4Runtime, fpga through XRT), GPUs, storage for
//! out-of-core work, and the launcher. Parsed strictly: an unknown or misspelt field, a wrong
//! type or an inconsistent value is one sentence with the file and line (a check after parsing
//! follows the offending field's path through the YAML's spans, as the spec reader does, so the
//! line is the field's own even where an earlier line holds the same key).
//!
//! Here in core (not the harness) so the cargo-fuzz target `testbed` builds without the
//! harness's dependencies; the harness re-exports it as `inabench::testbed`.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

use crate::spec::{Seg, line_of};

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
    /// A stand-in rig on this machine (the Soft-RoCE rig, tools/rxe-rig): the experiments it
    /// runs rows of, in place of their software classes.
    #[serde(default)]
    pub rig: Option<Rig>,
}

/// A rig of qemu guests whose kernels run a software RDMA device (`kind: rxe`: Soft-RoCE,
/// rdma_rxe), booted by a script for each point: its rows are `emulated`, never `hardware`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Rig {
    /// rxe (Soft-RoCE, the kernel's rdma_rxe), the only kind
    pub kind: String,
    /// The rig's script (tools/rxe-rig/rig.sh), relative to the testbed file's folder.
    pub script: String,
    /// The folder holding the rig's programs (the devices crate's examples netreduce_worker and
    /// netreduce_accel), relative to the testbed file's folder; absent: `examples` beside the
    /// inabench binary (where `cargo test --release --no-run` builds them).
    #[serde(default)]
    pub programs: Option<String>,
    /// The experiments the rig runs (their ids).
    pub experiments: Vec<String>,
    /// Parameter values the rig fixes, as `reproduce --set` takes them (`workers=3`): recorded
    /// as the run's overrides.
    #[serde(default)]
    pub set: Vec<String>,
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
    /// The host's address on the data network its frames cross (a worker's RoCE or Ethernet
    /// interface; the switch host's side of it): what the systems' address plans take instead
    /// of their synthetic values (`Testbed::data_addresses`). Absent: the synthetic plan.
    #[serde(default)]
    pub data: Option<DataAddress>,
}

/// One host's data-network address as the testbed file writes it; checked by the reader (a bad
/// MAC, IPv4 address or GID is an error with its file, line and field).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DataAddress {
    /// The interface the frames leave by (`ens3`, `enp1s0f0`: a rig's guest's virtio NIC, a
    /// host's RoCE NIC's netdev); absent where the host's side is several links (a rig's host
    /// relay on one tap per guest).
    #[serde(default)]
    pub interface: Option<String>,
    /// `aa:bb:cc:dd:ee:ff`
    pub mac: String,
    /// `a.b.c.d`
    pub ipv4: String,
    /// The RoCEv2 GID the host's RDMA device uses on that interface (IPv6 form; for an IPv4
    /// address, `::ffff:a.b.c.d`); for RoCE hosts, absent elsewhere.
    #[serde(default)]
    pub gid: Option<String>,
}

/// A host's data-network address, read: what an address plan is built from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostAddress {
    pub host: String,
    pub interface: Option<String>,
    pub mac: [u8; 6],
    pub ipv4: [u8; 4],
    pub gid: Option<[u8; 16]>,
}

/// `aa:bb:cc:dd:ee:ff` (hex digits, either case) as six bytes.
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 6 {
        return None;
    }
    let mut out = [0u8; 6];
    for (o, p) in out.iter_mut().zip(parts) {
        if p.len() != 2 {
            return None;
        }
        *o = u8::from_str_radix(p, 16).ok()?;
    }
    Some(out)
}

/// A GID in IPv6 form (`fe80::...`, `::ffff:10.77.0.1`) as its 16 bytes.
pub fn parse_gid(s: &str) -> Option<[u8; 16]> {
    s.parse::<std::net::Ipv6Addr>().ok().map(|a| a.octets())
}

impl DataAddress {
    /// The address read, or the field that does not read and why.
    fn read(&self, host: &str) -> Result<HostAddress, (&'static str, String)> {
        if let Some(i) = &self.interface
            && (i.is_empty() || i.len() > 15 || i.contains(['/', ' ']))
        {
            return Err((
                "interface",
                format!(
                    "host {host}'s data.interface `{i}` is not an interface name (1 to 15 characters, no `/` or space)"
                ),
            ));
        }
        let mac = parse_mac(&self.mac).ok_or_else(|| {
            (
                "mac",
                format!(
                    "host {host}'s data.mac `{}` is not a MAC address (aa:bb:cc:dd:ee:ff)",
                    self.mac
                ),
            )
        })?;
        if mac[0] & 1 == 1 {
            return Err((
                "mac",
                format!(
                    "host {host}'s data.mac `{}` is a multicast address, not a host's",
                    self.mac
                ),
            ));
        }
        let ipv4 = self
            .ipv4
            .parse::<std::net::Ipv4Addr>()
            .map_err(|_| {
                (
                    "ipv4",
                    format!(
                        "host {host}'s data.ipv4 `{}` is not an IPv4 address (a.b.c.d)",
                        self.ipv4
                    ),
                )
            })?
            .octets();
        let gid = match &self.gid {
            None => None,
            Some(g) => Some(parse_gid(g).ok_or_else(|| {
                (
                    "gid",
                    format!(
                        "host {host}'s data.gid `{g}` is not a GID in IPv6 form (::ffff:a.b.c.d)"
                    ),
                )
            })?),
        };
        Ok(HostAddress {
            host: host.to_string(),
            interface: self.interface.clone(),
            mac,
            ipv4,
            gid,
        })
    }
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
        // The line of a check after parsing is found only once the error is certain: the text
        // is read again into spanned nodes and the field's path followed from the top.
        let err = |at: &[Seg], message: String| TestbedError {
            file: file.display().to_string(),
            line: line_of(text, at),
            message,
        };
        use Seg::{Index as I, Key as K};
        let t: Testbed = serde_saphyr::from_str(text).map_err(|e| {
            let line = e.location().map(|l| l.line() as usize).filter(|l| *l > 0);
            let m = e.to_string();
            TestbedError {
                file: file.display().to_string(),
                line,
                message: m.lines().next().unwrap_or("invalid testbed").to_string(),
            }
        })?;
        let kind = [K("switch"), K("kind")];
        if !["soft", "tofino", "fpga"].contains(&t.switch.kind.as_str()) {
            return Err(err(
                &kind,
                format!(
                    "switch.kind is soft, tofino or fpga, not `{}`",
                    t.switch.kind
                ),
            ));
        }
        if t.switch.kind == "tofino" && t.switch.p4runtime.is_none() {
            return Err(err(
                &kind,
                "a tofino switch needs `p4runtime: {address: host:port}`".into(),
            ));
        }
        if t.switch.kind == "fpga" && t.switch.xrt.is_none() {
            return Err(err(
                &kind,
                "an fpga switch needs `xrt: {device: ...}`".into(),
            ));
        }
        if let Some(p) = &t.switch.p4runtime
            && !p.address.contains(':')
        {
            return Err(err(
                &[K("switch"), K("p4runtime"), K("address")],
                format!("p4runtime.address is host:port, not `{}`", p.address),
            ));
        }
        if !["local", "netns", "ssh", "slurm"].contains(&t.launcher.as_str()) {
            return Err(err(
                &[K("launcher")],
                format!(
                    "launcher is local, netns, ssh or slurm, not `{}`",
                    t.launcher
                ),
            ));
        }
        let hosts: Vec<&str> = t.hosts.iter().map(|h| h.name.as_str()).collect();
        let named = (t.nics.iter().enumerate())
            .map(|(i, n)| (&n.host, "nics", i))
            .chain(t.gpus.iter().enumerate().map(|(i, g)| (&g.host, "gpus", i)))
            .chain(
                t.storage
                    .iter()
                    .enumerate()
                    .map(|(i, s)| (&s.host, "storage", i)),
            );
        for (h, what, i) in named {
            if !hosts.contains(&h.as_str()) {
                return Err(err(
                    &[K(what), I(i), K("host")],
                    format!("{what} names host `{h}`, which `hosts` does not list"),
                ));
            }
        }
        if let Some(r) = &t.rig {
            if r.kind != "rxe" {
                return Err(err(
                    &[K("rig"), K("kind")],
                    format!(
                        "rig.kind is rxe (Soft-RoCE in qemu guests), not `{}`",
                        r.kind
                    ),
                ));
            }
            if r.experiments.is_empty() {
                return Err(err(
                    &[K("rig"), K("experiments")],
                    "rig.experiments names no experiment".into(),
                ));
            }
            if let Some(i) = r.set.iter().position(|s| !s.contains('=')) {
                return Err(err(
                    &[K("rig"), K("set"), I(i)],
                    format!("rig.set `{}` is not key=value", r.set[i]),
                ));
            }
        }
        let mut seen: Vec<HostAddress> = Vec::new();
        for (i, h) in t.hosts.iter().enumerate() {
            let Some(d) = &h.data else { continue };
            let a = d
                .read(&h.name)
                .map_err(|(field, m)| err(&[K("hosts"), I(i), K("data"), K(field)], m))?;
            if let Some(o) = seen.iter().find(|o| o.mac == a.mac || o.ipv4 == a.ipv4) {
                let field = if o.mac == a.mac { "mac" } else { "ipv4" };
                return Err(err(
                    &[K("hosts"), I(i), K("data"), K(field)],
                    format!(
                        "host {}'s data.{field} is host {}'s too: each host has its own",
                        h.name, o.host
                    ),
                ));
            }
            let roce = t.nics.iter().any(|n| n.host == h.name && n.kind == "roce");
            if roce && a.gid.is_none() {
                return Err(err(
                    &[K("hosts"), I(i), K("data")],
                    format!(
                        "host {} has a RoCE NIC: its data address needs `gid` (the RoCEv2 GID, ::ffff:{})",
                        h.name,
                        std::net::Ipv4Addr::from(a.ipv4)
                    ),
                ));
            }
            seen.push(a);
        }
        for (i, n) in t.nics.iter().enumerate() {
            let bad_kind = !["roce", "ethernet"].contains(&n.kind.as_str());
            // `!(x > 0)`, not `x <= 0`: NaN is not a rate either
            let bad_rate = !(n.rate_gbps > 0.0 && n.rate_gbps.is_finite());
            if bad_kind || bad_rate {
                let field = if bad_kind { "kind" } else { "rate_gbps" };
                return Err(err(
                    &[K("nics"), I(i), K(field)],
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

    /// The data-network addresses of the hosts with role `role` (`worker`, `switch`) that give
    /// one, in the file's order (worker i of a job is the i-th): what an address plan is built
    /// from. Empty when none gives one (the systems keep their synthetic plan).
    pub fn data_addresses(&self, role: &str) -> Vec<HostAddress> {
        self.hosts
            .iter()
            .filter(|h| h.role.iter().any(|r| r == role))
            .filter_map(|h| h.data.as_ref().and_then(|d| d.read(&h.name).ok()))
            .collect()
    }

    /// Whether the testbed has devices for `hardware` rows.
    pub fn has_hardware(&self) -> bool {
        self.switch.kind != "soft"
            || self.nics.iter().any(|n| n.kind == "roce")
            || self.gpus.iter().any(|g| g.count > 0)
    }
}

/// The cargo-fuzz target `testbed`'s body (fuzz/fuzz_targets/testbed.rs; the stable
/// harness/tests/fuzz_smoke.rs drives the same reader): arbitrary bytes as a testbed file. Any
/// input is a testbed or a `TestbedError`, never a panic; an error's line is one of the text's
/// lines (or one past the last, where the parser reports the end of input), and a testbed that
/// reads answers its questions.
pub fn fuzz(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    match Testbed::from_yaml(Path::new("testbed.yaml"), &text) {
        Ok(t) => {
            let _ = t.has_hardware();
            let _ = t.agent_hosts();
            let _ = t.data_addresses("worker");
        }
        Err(e) => {
            if let Some(l) = e.line {
                // YAML breaks lines at `\r\n`, `\r` and `\n` (a lone `\r` too: the fuzzer's
                // first find was "\r\r%", an error on line 3); the parser may also name the
                // line after the last, for the end of input.
                let lines = text.replace("\r\n", "\n").split(['\r', '\n']).count() + 1;
                assert!(
                    (1..=lines).contains(&l),
                    "error line {l} outside the text's {lines} lines: {e}"
                );
            }
        }
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

    #[test]
    fn a_later_check_names_the_offending_fields_own_line() {
        // the first `kind:` is a NIC's (line 5), the switch's is on line 8
        let e = parse(
            "name: x\nhosts: [{name: a}]\nnics:\n  - host: a\n    kind: roce\n    device: m0\n    rate_gbps: 100\nswitch:\n  kind: tofino\n",
        )
        .expect_err("tofino without p4runtime");
        assert_eq!(e.line, Some(9), "{e}");
        // the second NIC's host, not the first's
        let e = parse(
            "name: x\nhosts: [{name: a}]\nnics:\n  - {host: a, kind: roce, device: m0, rate_gbps: 1}\n  - {host: b, kind: roce, device: m1, rate_gbps: 1}\n",
        )
        .expect_err("unknown host");
        assert_eq!(e.line, Some(5), "{e}");
        // the rate, on its own line, and NaN is not a positive rate
        let e = parse(
            "name: x\nhosts: [{name: a}]\nnics:\n  - host: a\n    kind: roce\n    device: m0\n    rate_gbps: .nan\n",
        )
        .expect_err("NaN rate");
        assert_eq!(e.line, Some(7), "{e}");
        let e = parse(
            "name: x\nhosts: [{name: a}]\nswitch:\n  kind: tofino\n  p4runtime: {address: sw}\n",
        )
        .expect_err("no port");
        assert_eq!(e.line, Some(5), "{e}");
        let e = parse("name: x\nlauncher: pbs\nhosts: [{name: a}]\n").expect_err("launcher");
        assert_eq!(e.line, Some(2), "{e}");
    }

    #[test]
    fn a_rig_entry_reads_and_its_errors_name_their_line() {
        let t = parse(include_str!("../../experiments/testbeds/rxe-rig.yaml")).expect("rxe-rig");
        let r = t.rig.clone().expect("a rig");
        assert_eq!(r.kind, "rxe");
        assert_eq!(r.experiments, ["netreduce-table6"]);
        // the rig's device is software: no hardware rows
        assert!(!t.has_hardware());
        let e = parse(
            "name: x\nhosts: [{name: a}]\nrig:\n  kind: siw\n  script: r.sh\n  experiments: [e]\n",
        )
        .expect_err("kind");
        assert_eq!(e.line, Some(4), "{e}");
        assert!(e.to_string().contains("`siw`"), "{e}");
        let e = parse(
            "name: x\nhosts: [{name: a}]\nrig:\n  kind: rxe\n  script: r.sh\n  experiments: []\n",
        )
        .expect_err("no experiment");
        assert_eq!(e.line, Some(6), "{e}");
        let e = parse("name: x\nhosts: [{name: a}]\nrig:\n  kind: rxe\n  script: r.sh\n  experiments: [e]\n  set:\n    - workers=3\n    - paper\n")
            .expect_err("set");
        assert_eq!(e.line, Some(9), "{e}");
        let e = parse("name: x\nhosts: [{name: a}]\nrig:\n  kind: rxe\n  experiments: [e]\n")
            .expect_err("no script");
        assert!(e.to_string().contains("script"), "{e}");
    }

    /// The rig's file states its guests' data addresses (worker i the i-th) and its switch's.
    #[test]
    fn hosts_data_addresses_read_in_file_order() {
        let t = parse(include_str!("../../experiments/testbeds/rxe-rig.yaml")).expect("rxe-rig");
        let w = t.data_addresses("worker");
        assert_eq!(w.len(), 3);
        for (i, a) in w.iter().enumerate() {
            let b = i as u8 + 1;
            assert_eq!(a.host, format!("guest{i}"));
            assert_eq!(a.interface.as_deref(), Some("eth0"));
            assert_eq!(a.mac, [0x52, 0x54, 0, 0x77, 0, b]);
            assert_eq!(a.ipv4, [10, 77, 0, b]);
            let mut gid = [0u8; 16];
            gid[10..12].copy_from_slice(&[0xff, 0xff]);
            gid[12..].copy_from_slice(&[10, 77, 0, b]);
            assert_eq!(a.gid, Some(gid));
        }
        let s = t.data_addresses("switch");
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].interface, None);
        assert_eq!(s[0].mac, [0x52, 0x54, 0, 0x77, 0, 0xfe]);
        assert_eq!(s[0].ipv4, [10, 77, 0, 254]);
        // no addresses: nothing (the systems keep their synthetic plan)
        let l = parse(include_str!("../../experiments/testbeds/local.yaml")).expect("local");
        assert!(l.data_addresses("worker").is_empty());
    }

    /// A bad data address is one sentence naming the file, the field's own line and the field.
    #[test]
    fn a_bad_data_address_names_its_file_line_and_field() {
        let host = |data: &str| {
            format!("name: x\nhosts:\n  - name: a\n    role: [worker]\n    data:\n{data}")
        };
        let cases = [
            (
                "      interface: eth0\n      mac: '52:54:00:77:00'\n      ipv4: 10.0.0.1\n",
                7,
                "data.mac `52:54:00:77:00` is not a MAC address",
            ),
            (
                "      interface: eth0\n      mac: '01:00:5e:00:00:01'\n      ipv4: 10.0.0.1\n",
                7,
                "is a multicast address",
            ),
            (
                "      interface: eth0\n      mac: '52:54:00:77:00:01'\n      ipv4: 10.0.0.256\n",
                8,
                "data.ipv4 `10.0.0.256` is not an IPv4 address",
            ),
            (
                "      interface: eth0\n      mac: '52:54:00:77:00:01'\n      ipv4: 10.0.0.1\n      gid: '::ffff:10.0.0'\n",
                9,
                "data.gid `::ffff:10.0.0` is not a GID",
            ),
            (
                "      interface: 'eth 0'\n      mac: '52:54:00:77:00:01'\n      ipv4: 10.0.0.1\n",
                6,
                "data.interface `eth 0` is not an interface name",
            ),
            (
                "      mac: '52:54:00:77:00:01'\n      ip: 10.0.0.1\n",
                7,
                "ip",
            ),
        ];
        for (data, line, says) in cases {
            let e = parse(&host(data)).expect_err(says);
            assert_eq!(e.line, Some(line), "{e}");
            assert!(
                e.to_string().starts_with(&format!("tb.yaml:{line}: ")),
                "{e}"
            );
            assert!(e.to_string().contains(says), "{e}");
        }
        // two hosts on one address: the second's field
        let twin = "name: x\nhosts:\n  - name: a\n    data: {mac: '52:54:00:00:00:01', ipv4: 10.0.0.1}\n  - name: b\n    data:\n      mac: '52:54:00:00:00:02'\n      ipv4: 10.0.0.1\n";
        let e = parse(twin).expect_err("shared ipv4");
        assert_eq!(e.line, Some(8), "{e}");
        assert!(
            e.to_string().contains("host b's data.ipv4 is host a's too"),
            "{e}"
        );
        // a RoCE host's address needs its GID
        let roce = "name: x\nhosts:\n  - name: a\n    data: {interface: enp1s0f0, mac: '52:54:00:00:00:01', ipv4: 10.0.0.1}\nnics:\n  - {host: a, kind: roce, device: mlx5_0, rate_gbps: 100}\n";
        let e = parse(roce).expect_err("no gid");
        assert_eq!(e.line, Some(4), "{e}");
        assert!(
            e.to_string().contains("needs `gid`") && e.to_string().contains("::ffff:10.0.0.1"),
            "{e}"
        );
        let ok = roce.replace("ipv4: 10.0.0.1}", "ipv4: 10.0.0.1, gid: '::ffff:10.0.0.1'}");
        assert_eq!(
            parse(&ok).expect("with gid").hosts[0]
                .data
                .as_ref()
                .and_then(|d| d.gid.clone())
                .as_deref(),
            Some("::ffff:10.0.0.1")
        );
    }

    #[test]
    fn the_fuzz_body_takes_what_the_target_gives() {
        for input in [
            &b""[..],
            b"\xff\xfe",
            // found by the fuzzer: carriage returns break YAML lines (an error on line 3)
            b"\r\r%",
            b"name: x\nhosts: [",
            b"name: x\nhosts: [{name: a}]\nswitch: {kind: fpga}\n",
            include_bytes!("../../experiments/testbeds/local.yaml"),
        ] {
            fuzz(input);
        }
    }
}
