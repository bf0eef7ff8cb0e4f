//! Where the `hardware` class is planned from (issue #36 item 5), through the binary:
//! `inabench doctor --testbed` on a testbed whose points run on its hosts (`launcher: ssh`)
//! plans netreduce-table1's hardware class from the RoCE NICs its worker hosts declare, and says
//! they were declared, not probed here; with `launcher: local` the ranks run here and this
//! host's probe decides. (The same decision plans a run: `runner::prepare`, tested in the
//! harness's `runner::row_tests`.) No ssh host is reached: the hosts' addresses are `.invalid`.
//! And a point whose rows come out in another class than its own (a body that labels its rows
//! by the device it opened: Soft-RoCE under a hardware plan) fails as a setup failure that says
//! so, its rows not stored under either class.

mod support;

use inabench::launcher::{Job, JobFailure};
use inabench::registry::Registry;
use inabench::runner;
use inabench_core::event::{Event, FailureKind};
use inabench_core::spec::Fidelity;
use inabench_core::store;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::AtomicBool;
use support::{in_process_request, probe_entry};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo")
        .to_path_buf()
}

/// A laptop runner and two worker hosts; node1's NIC only where `node1_nic`.
fn testbed(dir: &Path, launcher: &str, node1_nic: bool) -> PathBuf {
    let node1 = if node1_nic {
        "  - {host: node1, kind: roce, device: mlx5_1, gid_index: 3, rate_gbps: 100}\n"
    } else {
        ""
    };
    let text = format!(
        "name: lab\nhosts:\n  - {{name: laptop, role: [runner]}}\n  - {{name: node0, role: [worker], address: node0.invalid}}\n  - {{name: node1, role: [worker], address: node1.invalid}}\nnics:\n  - {{host: node0, kind: roce, device: mlx5_0, gid_index: 3, rate_gbps: 100}}\n{node1}launcher: {launcher}\n"
    );
    let p = dir.join(format!("lab-{launcher}-{node1_nic}.yaml"));
    std::fs::write(&p, text).expect("write the testbed");
    p
}

/// `inabench doctor --json --testbed FILE`, parsed.
fn doctor(tb: &Path) -> Vec<serde_json::Value> {
    let o = Command::new(env!("CARGO_BIN_EXE_inabench"))
        .current_dir(repo())
        .env_remove("INABENCH_HOME")
        .args(["doctor", "--json", "--testbed"])
        .arg(tb)
        .output()
        .expect("doctor");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    v.as_array().expect("array").clone()
}

fn named<'a>(all: &'a [serde_json::Value], name: &str) -> Option<&'a serde_json::Value> {
    all.iter().find(|c| c["name"] == name)
}

#[test]
fn doctor_plans_hardware_from_the_declared_nics_where_the_ranks_run_on_the_testbeds_hosts() {
    let dir = tempfile::tempdir().expect("tmp");
    // two worker hosts declare a RoCE NIC: table1's roce row (2 ranks) has one on each
    let all = doctor(&testbed(dir.path(), "ssh", true));
    let nics = named(&all, "RoCE NICs (testbed)").expect("the declared NICs' line");
    assert_eq!(nics["ok"], true, "{nics}");
    assert_eq!(
        nics["detail"],
        "hardware planned from the testbed's declared NICs: node0 mlx5_0, node1 mlx5_1 (not probed from this host; each rank opens its own)"
    );
    let t1 = named(&all, "experiment netreduce-table1").expect("table1's verdict");
    assert_eq!(t1["pick"], "hardware", "{t1}");
    // whatever this host's own probe says (here: no RDMA device), it is not what decided
    let here = named(&all, "RDMA devices (verbs)").expect("the probe");
    assert!(
        here["detail"]
            .as_str()
            .unwrap_or("")
            .ends_with(" (this host's own probe; the ranks run on the testbed's hosts)"),
        "{here}"
    );

    // one worker host declares one: the 2-rank row cannot run, and doctor says why
    let all = doctor(&testbed(dir.path(), "ssh", false));
    let t1 = named(&all, "experiment netreduce-table1").expect("table1's verdict");
    assert_eq!(t1["pick"], "emulated", "{t1}");
    let better = t1["better"][0]["missing"].as_str().unwrap_or("");
    assert_eq!(t1["better"][0]["class"], "hardware", "{t1}");
    assert!(
        better.contains(
            "roce's rows needs a RoCE NIC on each of its 2 ranks' hosts (the testbed declares one on 1 host: node0 mlx5_0)"
        ),
        "{better}"
    );
}

#[test]
fn with_the_local_launcher_this_hosts_probe_decides() {
    let dir = tempfile::tempdir().expect("tmp");
    let all = doctor(&testbed(dir.path(), "local", true));
    assert!(
        named(&all, "RoCE NICs (testbed)").is_none(),
        "the ranks run here: no declared line"
    );
    let here = named(&all, "RDMA devices (verbs)").expect("the probe");
    let t1 = named(&all, "experiment netreduce-table1").expect("table1's verdict");
    let want = if here["ok"] == true {
        "hardware"
    } else {
        "emulated"
    };
    assert_eq!(t1["pick"], want, "{t1} with {here}");
}

/// Runs every job through the fixture's workload, but labels the rows of the point `relabel`
/// as a device-labelled body would on a device of another class (`emulated`, `rdma-rxe`).
struct Relabels<'a> {
    registry: &'a Registry,
    relabel: &'a str,
}

impl inabench::executor::Executor for Relabels<'_> {
    fn run_job(&mut self, job: &Job, sink: &mut dyn FnMut(Event)) -> Result<(), JobFailure> {
        let other = job.point.id == self.relabel;
        inabench::executor::run_here(self.registry, job, &AtomicBool::new(false), &mut |e| {
            sink(match e {
                Event::Row(mut r) if other => {
                    r.fidelity = Fidelity::Emulated;
                    r.fabric = "rdma-rxe".into();
                    Event::Row(r)
                }
                e => e,
            })
        })
    }
}

#[test]
fn a_point_whose_rows_come_out_in_another_class_fails_as_setup_and_says_so() {
    let dir = tempfile::tempdir().expect("tmp");
    let req = in_process_request(probe_entry(&[1, 2]), dir.path(), None);
    let reg = Registry::builtin();
    let prepared = runner::prepare(&req, &reg).expect("prepare");
    let first = prepared.plan.points[0].clone();
    let (tx, _rx) = std::sync::mpsc::channel();
    let out = support::execute(
        prepared,
        &reg,
        tx,
        &mut Relabels {
            registry: &reg,
            relabel: &first.id,
        },
    )
    .expect("the run ends");
    assert_eq!(
        (out.manifest.points_done, out.manifest.points_failed),
        (1, 1)
    );
    let why = "planned functional, it ran as emulated (fabric rdma-rxe): the devices its ranks opened are not the functional class's (the launcher's line names them), so its rows are not stored";
    assert_eq!(
        why,
        runner::ran_as_another_class(Fidelity::Functional, Fidelity::Emulated, "rdma-rxe")
    );
    assert!(
        out.manifest
            .drivers
            .contains(&format!("[functional] {}: {why}", first.label())),
        "{:?}",
        out.manifest.drivers
    );
    let st = store::read_rows(&out.run_dir).expect("rows");
    let key = inabench_core::plan::run_key(Fidelity::Functional, &first.id);
    assert_eq!(st.failed.get(&key), Some(&FailureKind::Setup));
    // no row of the relabelled point is stored, under either class; the other point's are
    assert!(
        st.rows.iter().all(|r| r.point_id != first.id),
        "{:?}",
        st.rows
    );
    assert!(st.rows.iter().all(|r| r.fidelity == Fidelity::Functional));
    assert!(!st.rows.is_empty());
    let raw = std::fs::read_to_string(out.run_dir.join(store::ROWS_FILE)).expect("rows.jsonl");
    assert!(
        raw.lines()
            .filter(|l| l.contains("\"kind\":\"row\""))
            .all(|l| !l.contains("rdma-rxe") && !l.contains(&first.id)),
        "{raw}"
    );
    assert!(raw.contains(why), "the point's record keeps the sentence");
}

/// A stand-in for `ssh` on PATH: answers `ssh -G` with loopback and runs the remote command on
/// this host, so the ssh launcher's agents start here (each reports this host's name).
const FAKE_SSH: &str = r#"#!/bin/sh
while [ $# -gt 0 ]; do
  case "$1" in
    -F|-o) shift 2 ;;
    -T) shift ;;
    -G) echo "hostname 127.0.0.1"; echo "port 22"; exit 0 ;;
    --) shift; exec sh -c "$1" ;;
    *) shift ;;
  esac
done
exit 255
"#;

/// `reproduce netreduce-table1` with the ssh launcher (through the stand-in above) on a testbed
/// whose two worker hosts declare RoCE NICs, from this host, which has none: the run plans the
/// hardware class from the declarations (its manifest says so), leaves the roce row out of the
/// emulated class and the software models out of hardware, each with why, and the hardware
/// point, whose rank finds no `mlx5_0` here, fails as a setup failure in one sentence naming
/// the host and the declared device and where its name came from, not as a wrong result.
#[test]
fn a_run_over_ssh_plans_hardware_from_the_declared_nics_and_a_missing_device_fails_its_point() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tmp");
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("bin");
    std::fs::write(bin.join("ssh"), FAKE_SSH).expect("ssh");
    std::fs::set_permissions(bin.join("ssh"), std::fs::Permissions::from_mode(0o755))
        .expect("chmod");
    // the agents run here and look their NIC up by this host's name: name the first host so
    let me = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .expect("hostname")
        .trim()
        .to_string();
    let tb = dir.path().join("lab.yaml");
    std::fs::write(
        &tb,
        format!(
            "name: lab\nhosts:\n  - {{name: laptop, role: [runner]}}\n  - {{name: '{me}', role: [worker], address: '{me}'}}\n  - {{name: '{me}-b', role: [worker], address: '{me}-b'}}\nnics:\n  - {{host: '{me}', kind: roce, device: mlx5_0, gid_index: 3, rate_gbps: 100}}\n  - {{host: '{me}-b', kind: roce, device: mlx5_1, gid_index: 3, rate_gbps: 100}}\nlauncher: ssh\n"
        ),
    )
    .expect("testbed");
    let results = dir.path().join("results");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let o = Command::new(env!("CARGO_BIN_EXE_inabench"))
        .current_dir(repo())
        .env_remove("INABENCH_HOME")
        .env_remove("INABENCH_RDMA_DEVICE")
        .env_remove("INABENCH_SPAN_TRANSPORT")
        .env("PATH", path)
        .args([
            "reproduce",
            "netreduce-table1",
            "--headless",
            "--listen",
            "127.0.0.1",
        ])
        .arg("--testbed")
        .arg(&tb)
        .arg("--results")
        .arg(&results)
        .output()
        .expect("reproduce");
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let run = std::fs::read_dir(&results)
        .expect("results")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.is_dir())
        .unwrap_or_else(|| panic!("no run folder:\n{all}"));
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("manifest.json")).expect("m"))
            .expect("manifest");
    assert_eq!(m["launcher"], "ssh", "{m}");
    assert_eq!(
        m["fidelities"],
        serde_json::json!(["hardware", "emulated"]),
        "{m}"
    );
    let reason = m["fidelity_reason"].as_str().unwrap_or("");
    assert!(
        reason.contains(&format!(
            "hardware planned from the testbed's declared NICs: {me} mlx5_0, {me}-b mlx5_1 (not probed from this host; each rank opens its own)"
        )),
        "{reason}"
    );
    let not_here: Vec<(String, String)> = m["rows_not_here"]
        .as_array()
        .expect("rows_not_here")
        .iter()
        .map(|n| {
            (
                n["fidelity"].as_str().unwrap_or("").to_string(),
                n["system"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    for (class, system) in [
        ("emulated", "roce"),
        ("hardware", "event_driven"),
        ("hardware", "parallel_dma"),
        ("hardware", "dpdk"),
    ] {
        assert!(
            not_here.contains(&(class.into(), system.into())),
            "{class} {system}: {not_here:?}"
        );
    }
    assert_eq!(not_here.len(), 4, "{not_here:?}");
    // the hardware roce point ran in the agents and failed for its device, in one sentence
    let rows = std::fs::read_to_string(run.join("rows.jsonl")).expect("rows");
    let done: Vec<serde_json::Value> = rows
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|r: &serde_json::Value| r["kind"] == "point_done")
        .collect();
    let failed: Vec<&serde_json::Value> = done.iter().filter(|r| r["ok"] == false).collect();
    assert_eq!(failed.len(), 1, "{rows}");
    assert!(
        failed[0]["point_id"]
            .as_str()
            .unwrap_or("")
            .starts_with("hardware-"),
        "{}",
        failed[0]
    );
    let error = failed[0]["error"].as_str().unwrap_or("");
    if error.contains("no libibverbs") && std::env::var_os("CI").is_none() {
        // no libibverbs on this host: the rank fails loading it (CI installs it)
        eprintln!("no libibverbs here: {error}");
        assert!(error.starts_with(&format!("rank 0 on {me}: ")), "{error}");
    } else {
        assert!(
            error.starts_with(&format!(
                "rank 0 on {me}: no RDMA device `mlx5_0` (the testbed's nics: entry for {me}; devices here: "
            )),
            "{error}\n{all}"
        );
    }
    // the host lacks the device: a setup failure (a rerun here fails again), not the point's
    // parameters, not a wrong result, not the workload's own failure
    assert_eq!(failed[0]["failure"], "setup", "{}", failed[0]);
    // the emulated rows of the three software models ran in the agents
    assert_eq!(done.iter().filter(|r| r["ok"] == true).count(), 3, "{rows}");
}
