//! Where the `hardware` class is planned from (issue #36 item 5), through the binary:
//! `inabench doctor --testbed` on a testbed whose points run on its hosts (`launcher: ssh`)
//! plans netreduce-table1's hardware class from the RoCE NICs its worker hosts declare, and says
//! they were declared, not probed here; with `launcher: local` the ranks run here and this
//! host's probe decides. (The same decision plans a run: `runner::prepare`, tested in the
//! harness's `runner::row_tests`.) No ssh host is reached: the hosts' addresses are `.invalid`.

use std::path::{Path, PathBuf};
use std::process::Command;

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
    assert!(named(&all, "RDMA devices (verbs)").is_some());

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
