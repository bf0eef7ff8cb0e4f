//! A testbed's data addresses reach the points that run in agents (#36 item 1): every job the
//! runner sends carries the testbed's address plan (`Job::addresses`, omitted when there is
//! none), and the agent picks the workload that runs the point at it through the same function
//! as the runner's own process (`executor::point_workload`). Under `--launcher local`,
//! netreduce-table6's emulated node processes build their nodes at the testbed's addresses:
//! on the raw fabric (root) a capture of worker 0's link (`--pcap`) holds only frames between
//! the plan's hosts, every system's sums exact; the same run on a testbed without `data:` holds
//! only the synthetic 10.x addresses and has the same rows. A workload that takes no plan says
//! so in the manifest. On the way, the manifest's class lines name the fabrics the rows carried
//! (the raw fabric's sockets, table1's roce row on the software RC over UDP).

use inabench::executor::{PointWorkload, point_workload};
use inabench::launcher::{Job, JobFailure};
use inabench_workloads::udp_node::JobAddresses;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod support;

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_inabench"))
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

/// The plan's hosts: three workers, a switch and a parameter server, none at a 10.x address
/// (the systems' synthetic plans are all 10.x).
const HOSTS: [(&str, &str, &str, [u8; 4]); 5] = [
    ("w0", "worker", "52:54:00:ab:00:42", [192, 168, 7, 42]),
    ("w1", "worker", "52:54:00:ab:00:09", [172, 16, 0, 9]),
    ("w2", "worker", "52:54:00:ab:00:03", [192, 168, 7, 3]),
    ("sw", "switch", "52:54:00:ab:00:fe", [172, 16, 0, 254]),
    ("ps", "ps", "52:54:00:ab:00:c8", [192, 168, 7, 200]),
];

const HOSTS_LINE: &str = "netreduce.table6's node processes (udp, raw) build their nodes at the testbed file's data addresses: worker 0 192.168.7.42@52:54:00:ab:00:42; worker 1 172.16.0.9@52:54:00:ab:00:09; worker 2 192.168.7.3@52:54:00:ab:00:03; switch 172.16.0.254@52:54:00:ab:00:fe; server 0 192.168.7.200@52:54:00:ab:00:c8";

/// A testbed file in `dir`: with the hosts' `data:` addresses, or the runner host alone.
fn testbed(dir: &Path, with_data: bool) -> PathBuf {
    let mut text = "name: lab\nhosts:\n  - {name: localhost, role: [runner]}\n".to_string();
    if with_data {
        for (name, role, mac, ip) in HOSTS {
            let ip = ip.map(|b| b.to_string()).join(".");
            text.push_str(&format!(
                "  - {{name: {name}, role: [{role}], data: {{mac: '{mac}', ipv4: {ip}}}}}\n"
            ));
        }
    }
    text.push_str("switch:\n  kind: soft\n");
    let tb = dir.join(if with_data { "lab.yaml" } else { "plain.yaml" });
    std::fs::write(&tb, text).expect("testbed file");
    tb
}

fn ok(o: &Output) {
    assert!(
        o.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// `reproduce netreduce-table6`, emulated, 3 workers, one message, under `--launcher local`
/// with `tb` and `extra` settings; the run's folder.
fn table6_local(dir: &Path, tb: &Path, tag: &str, extra: &[&str]) -> PathBuf {
    let results = dir.join(format!("results-{tag}"));
    let mut c = Command::new(exe());
    c.current_dir(repo())
        .args(["reproduce", "netreduce-table6", "--fidelity", "emulated"])
        .args(["--launcher", "local"])
        .args(["--set", "host_stack=nic", "--set", "workers=3"])
        .args(["--set", "elements=43516"])
        .args(["--repetitions", "1", "--warmup", "0"])
        .args(["--headless", "--format", "json", "--testbed"])
        .arg(tb)
        .env("INABENCH_RESULTS", &results);
    for s in extra {
        c.args(["--set", s]);
    }
    ok(&c.output().expect("inabench runs"));
    support::only_run_dir(&results)
}

/// (system, metric) of every row: what a run measured, whatever the values.
fn row_keys(run: &Path) -> BTreeSet<(String, String)> {
    support::rows_of(run)
        .iter()
        .map(|r| (r["system"].to_string(), r["metric"].to_string()))
        .collect()
}

/// Every system's emulated row is there and the run completed: each worker of every point
/// checked its sum against the reference (a wrong one fails the point, and the run).
fn complete_with_every_system(run: &Path) -> serde_json::Value {
    let m = support::manifest_of(run);
    assert_eq!(m["status"], "complete", "{m}");
    let rows = support::rows_of(run);
    for sys in ["netreduce", "switchml_rdma", "atp", "switchml"] {
        assert!(
            rows.iter()
                .any(|r| r["system"] == sys && r["metric"] == "throughput"),
            "no {sys} throughput row"
        );
    }
    let drivers = m["drivers"].to_string();
    assert!(drivers.contains("launcher local"), "{drivers}");
    m
}

/// (source, destination) IPv4 addresses.
type IpPairs = BTreeSet<([u8; 4], [u8; 4])>;

/// Each class's line in the manifest's `drivers` names the fabrics its rows carry, no other
/// (a workload sets a row's fabric as it learns it: the raw fabric's sockets, table1's roce row
/// on the software RC over UDP); the manifest's `fabric` is its first class's.
fn class_lines_say_what_the_rows_say(run: &Path) {
    let m = support::manifest_of(run);
    let rows = support::rows_of(run);
    let drivers: Vec<String> = m["drivers"]
        .as_array()
        .expect("drivers")
        .iter()
        .filter_map(|d| d.as_str().map(String::from))
        .collect();
    let classes: Vec<String> = m["fidelities"]
        .as_array()
        .expect("fidelities")
        .iter()
        .filter_map(|c| c.as_str().map(String::from))
        .collect();
    for (i, class) in classes.iter().enumerate() {
        let mut fabrics: Vec<String> = Vec::new();
        for r in rows.iter().filter(|r| r["fidelity"] == class.as_str()) {
            let f = r["fabric"].as_str().expect("a fabric").to_string();
            if !fabrics.contains(&f) {
                fabrics.push(f);
            }
        }
        let line = drivers
            .iter()
            .find(|d| d.starts_with(&format!("{class}: ")))
            .unwrap_or_else(|| panic!("no {class} line: {drivers:?}"));
        let listed: BTreeSet<&str> = line[class.len() + 2..]
            .split(" (")
            .next()
            .expect("fabrics")
            .split(", ")
            .collect();
        let ran: BTreeSet<&str> = fabrics.iter().map(String::as_str).collect();
        assert_eq!(listed, ran, "{line} / rows on {fabrics:?}");
        if i == 0 {
            let top: BTreeSet<&str> = m["fabric"].as_str().expect("fabric").split(", ").collect();
            assert_eq!(top, ran, "{m}");
        }
    }
}

/// Every IPv4 (source, destination) pair of a capture's frames (ATP's own ethertype 0x0700
/// carries IPv4 too).
fn ip_pairs(pcap: &Path) -> IpPairs {
    let bytes = std::fs::read(pcap).expect("capture");
    let mut r = inabench_wire::pcap::PcapReader::new(&bytes).expect("a pcap file");
    let mut pairs = BTreeSet::new();
    while let Some(rec) = r.next_record() {
        let b = rec.expect("a whole record").data;
        assert!(
            b.len() >= 34 && matches!(b[12..14], [0x08, 0x00] | [0x07, 0x00]) && b[14] == 0x45,
            "not IPv4: {b:02x?}"
        );
        let ip = |at: usize| -> [u8; 4] { b[at..at + 4].try_into().expect("4 bytes") };
        pairs.insert((ip(26), ip(30)));
    }
    pairs
}

/// The run's captures (one per point), each's IPv4 pairs.
fn captures(dir: &Path) -> Vec<(String, IpPairs)> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .expect("the capture folder")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcap"))
        .map(|p| (p.display().to_string(), ip_pairs(&p)))
        .collect();
    out.sort();
    out
}

/// Under `--launcher local` on the raw fabric, every system's node processes in the agent run
/// at the testbed's addresses (a capture of worker 0's link holds only frames between the
/// plan's hosts, worker 0's address among them) with exact sums; on a testbed without `data:`
/// the same run's frames carry the synthetic 10.x addresses and its rows are the same.
#[test]
fn agents_run_table6_node_processes_at_the_testbeds_addresses_on_the_raw_fabric() {
    if !inabench_fabric::netns::is_root() {
        eprintln!("skipped: the raw fabric's namespaces and AF_PACKET sockets need root");
        return;
    }
    let d = tempfile::tempdir().expect("a scratch folder");
    let known: BTreeSet<[u8; 4]> = HOSTS.iter().map(|h| h.3).collect();
    let mut keys = Vec::new();
    for with_data in [true, false] {
        let pcap = d.path().join(format!("pcap-{with_data}"));
        std::fs::create_dir_all(&pcap).expect("capture folder");
        let tb = testbed(d.path(), with_data);
        let pcap_arg = pcap.display().to_string();
        let run = {
            let results = d.path().join(format!("results-raw-{with_data}"));
            let o = Command::new(exe())
                .current_dir(repo())
                .args(["reproduce", "netreduce-table6", "--fidelity", "emulated"])
                .args(["--launcher", "local", "--pcap", &pcap_arg])
                .args(["--set", "host_stack=nic", "--set", "workers=3"])
                .args(["--set", "elements=43516", "--set", "emulated_fabric=raw"])
                .args(["--repetitions", "1", "--warmup", "0"])
                .args(["--headless", "--format", "json", "--testbed"])
                .arg(&tb)
                .env("INABENCH_RESULTS", &results)
                .output()
                .expect("inabench runs");
            ok(&o);
            support::only_run_dir(&results)
        };
        let m = complete_with_every_system(&run);
        class_lines_say_what_the_rows_say(&run);
        let drivers = m["drivers"].to_string();
        assert!(drivers.contains("emulated: raw-veth/"), "{drivers}");
        assert_eq!(drivers.contains(HOSTS_LINE), with_data, "{drivers}");
        assert!(!drivers.contains("takes no address plan"), "{drivers}");
        let caps = captures(&pcap);
        assert_eq!(caps.len(), 4, "a capture per system's point: {caps:?}");
        for (file, pairs) in &caps {
            assert!(!pairs.is_empty(), "{file}: nothing captured");
            if with_data {
                for (s, t) in pairs {
                    assert!(
                        known.contains(s) && known.contains(t),
                        "{file}: a frame from {s:?} to {t:?}, outside the testbed's plan"
                    );
                }
                assert!(
                    pairs
                        .iter()
                        .any(|(s, t)| *s == HOSTS[0].3 || *t == HOSTS[0].3),
                    "{file}: worker 0's address in none of its link's frames: {pairs:?}"
                );
            } else {
                assert!(
                    pairs.iter().all(|(s, t)| s[0] == 10 && t[0] == 10),
                    "{file}: {pairs:?}"
                );
            }
            eprintln!("{file}: address pairs {pairs:?}");
        }
        keys.push(row_keys(&run));
    }
    assert_eq!(keys[0], keys[1], "the same rows with and without the plan");
}

/// On the udp fabric (no root), under `--launcher local`: the manifest says the agent's node
/// processes ran at the testbed's addresses, every system's sums exact; without `data:` the
/// line is absent and the rows are the same.
#[test]
fn agents_say_they_ran_table6_at_the_testbeds_addresses_on_udp() {
    let d = tempfile::tempdir().expect("a scratch folder");
    let with = table6_local(d.path(), &testbed(d.path(), true), "with", &[]);
    let m = complete_with_every_system(&with);
    let drivers = m["drivers"].to_string();
    assert!(drivers.contains(HOSTS_LINE), "{drivers}");
    let without = table6_local(d.path(), &testbed(d.path(), false), "without", &[]);
    let m = complete_with_every_system(&without);
    let drivers = m["drivers"].to_string();
    assert!(!drivers.contains("data addresses"), "{drivers}");
    assert_eq!(row_keys(&with), row_keys(&without));
}

fn job(workload: &str, addresses: Option<JobAddresses>) -> Job {
    Job {
        workload: workload.into(),
        point: inabench_core::plan::Point {
            id: "p".into(),
            system: "netreduce".into(),
            params: Default::default(),
            repetitions: 1,
            warmup: 0,
        },
        index: 0,
        fidelity: inabench_core::Fidelity::Emulated,
        repetition: 0,
        warmup: false,
        seed: 1,
        run_id: "r".into(),
        experiment: "e".into(),
        units: Default::default(),
        capture_dir: None,
        host_profile: None,
        addresses,
    }
}

fn plan_of_hosts() -> JobAddresses {
    use inabench_fabric::addresses::{AddressPlan, parse_ip_mac};
    let host = |mac: &str, ip: [u8; 4]| {
        parse_ip_mac(&format!("{}@{mac}", ip.map(|b| b.to_string()).join("."))).expect("an address")
    };
    let plan = AddressPlan::new(
        HOSTS[..3].iter().map(|h| host(h.2, h.3)).collect(),
        Some(host(HOSTS[3].2, HOSTS[3].3)),
    )
    .expect("a valid plan")
    .with_servers(vec![host(HOSTS[4].2, HOSTS[4].3)]);
    JobAddresses::of(&plan).expect("not synthetic")
}

/// The job line: the plan travels in it and reads back; without one there is no `addresses`
/// key, so an agent of before the field reads the line as it did. The one function that picks
/// a point's workload takes table6 at the plan, keeps a workload that takes none (with a line
/// saying so), and fails a job whose plan does not parse in one sentence.
#[test]
fn the_job_carries_the_plan_and_one_function_picks_the_workload_at_it() {
    let with = job("netreduce.table6", Some(plan_of_hosts()));
    let line = serde_json::to_string(&with).expect("json");
    assert!(
        line.contains("\"at\":\"192.168.7.42@52:54:00:ab:00:42\""),
        "{line}"
    );
    let back: Job = serde_json::from_str(&line).expect("reads");
    assert_eq!(back.addresses, with.addresses);
    let none = serde_json::to_string(&job("netreduce.table6", None)).expect("json");
    assert!(!none.contains("addresses"), "{none}");
    assert!(
        serde_json::from_str::<Job>(&none)
            .expect("an old line reads")
            .addresses
            .is_none()
    );

    let reg = inabench::registry::Registry::builtin();
    let (w, note) = point_workload(&reg, &with).expect("table6 at the plan");
    assert!(matches!(w, PointWorkload::Addressed(_)));
    assert_eq!(w.get().id(), "netreduce.table6");
    assert_eq!(note, None);
    let (w, note) = point_workload(&reg, &job("netreduce.table6", None)).expect("builtin");
    assert!(matches!(w, PointWorkload::Builtin(_)));
    assert_eq!(note, None);
    let (w, note) =
        point_workload(&reg, &job("netreduce.table1", Some(plan_of_hosts()))).expect("builtin");
    assert!(matches!(w, PointWorkload::Builtin(_)));
    assert_eq!(
        note.as_deref(),
        Some(
            "netreduce.table1 takes no address plan: the frames its points build carry its systems' synthetic addresses, not the testbed file's data addresses"
        )
    );
    let mut bad = plan_of_hosts();
    bad.workers[1].at = "172.16.0.9".into();
    let Err(JobFailure::Setup { message }) =
        point_workload(&reg, &job("netreduce.table6", Some(bad)))
    else {
        panic!("a plan that does not parse fails the job");
    };
    assert_eq!(
        message,
        "the job's address plan: worker 1's address `172.16.0.9` is not A.B.C.D@aa:bb:cc:dd:ee:ff"
    );
}

/// A workload that takes no address plan (the harness's probe) run under `--launcher local` on
/// a testbed with `data:`: its points run, and the manifest says the testbed's addresses were
/// not taken instead of leaving it unsaid.
#[test]
fn a_workload_without_a_plan_says_so_in_the_manifest() {
    let home = support::probe_home(0, 2, false);
    let tb = testbed(home.path(), true);
    let results = home.path().join("results");
    let o = Command::new(exe())
        .env("INABENCH_HOME", home.path())
        .args(["--results"])
        .arg(&results)
        .args(["reproduce", "netreduce-probe", "--launcher", "local"])
        .args(["--headless", "--format", "json", "--testbed"])
        .arg(&tb)
        .output()
        .expect("inabench runs");
    ok(&o);
    let run = support::only_run_dir(&results);
    let m = support::manifest_of(&run);
    assert_eq!(m["status"], "complete", "{m}");
    let drivers = m["drivers"].to_string();
    assert!(
        drivers.contains("harness.probe takes no address plan: the frames its points build carry its systems' synthetic addresses, not the testbed file's data addresses"),
        "{drivers}"
    );
    assert!(
        !drivers.contains("build their nodes at the testbed"),
        "{drivers}"
    );
}

/// netreduce-table1 under `--launcher local` on the software RC over UDP: its roce row's rows
/// are `soft-rc-udp` (the rank sets it) and the manifest's emulated line says so beside the
/// other rows' `udp`, instead of `udp` alone.
#[test]
fn table1s_manifest_names_the_fabric_its_roce_row_ran_on() {
    let d = tempfile::tempdir().expect("a scratch folder");
    let results = d.path().join("results");
    let o = Command::new(exe())
        .current_dir(repo())
        .args(["reproduce", "netreduce-table1", "--launcher", "local"])
        .args([
            "--fidelity",
            "emulated",
            "--repetitions",
            "1",
            "--warmup",
            "0",
        ])
        .args(["--set", "total_mb=2", "--headless", "--format", "json"])
        .env("INABENCH_RESULTS", &results)
        .env("INABENCH_SPAN_TRANSPORT", "soft-udp")
        .output()
        .expect("inabench runs");
    ok(&o);
    let run = support::only_run_dir(&results);
    class_lines_say_what_the_rows_say(&run);
    let m = support::manifest_of(&run);
    let drivers = m["drivers"].to_string();
    assert!(
        drivers.contains("emulated: soft-rc-udp, udp (software)"),
        "{drivers}"
    );
}
