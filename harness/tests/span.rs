//! A point that spans agents (#36 items 2 and 5): netreduce-table1's `roce` row is given to two
//! agents at once with their ranks; their bodies publish their QPs over the agents' control
//! channel, the runner answers once both ranks sent (`launcher/qp_exchange.rs`), and they
//! connect and run one RC transfer. On this host (no RDMA device) the agents are `--launcher
//! local` processes and the body's QPs are the suite's software RC stack carried over UDP on
//! loopback (`INABENCH_SPAN_TRANSPORT=soft-udp`): the dispatch, the exchange, the transfer's
//! byte check and the rows are the ones a RoCE testbed runs; only the QPs differ (verbs there).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod support;

fn reproduce(results: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_inabench"));
    c.arg("reproduce")
        .arg("netreduce-table1")
        .args(args)
        .args(["--headless", "--format", "json"])
        .env("INABENCH_RESULTS", results);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("inabench runs")
}

fn text(o: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn the_roce_row_spans_two_local_agents_that_exchange_their_qps_and_check_every_byte() {
    let d = tempfile::tempdir().expect("a scratch folder");
    let results = d.path().join("results");
    let out = reproduce(
        &results,
        &[
            "--launcher",
            "local",
            "--fidelity",
            "emulated",
            "--repetitions",
            "1",
            "--warmup",
            "0",
            "--set",
            "total_mb=1,2",
        ],
        &[("INABENCH_SPAN_TRANSPORT", "soft-udp")],
    );
    assert!(out.status.success(), "{}", text(&out));
    let run = support::only_run_dir(&results);
    let rows = support::rows_of(&run);
    let roce: Vec<&serde_json::Value> = rows.iter().filter(|r| r["system"] == "roce").collect();
    // rank 0 records the rows, rank 1 none: one row of each metric a repetition (one of each
    // of the two points)
    for metric in ["throughput", "cpu", "rtt"] {
        let v: Vec<f64> = roce
            .iter()
            .filter(|r| r["metric"] == metric)
            .filter_map(|r| r["value"].as_f64())
            .collect();
        assert_eq!(v.len(), 2, "{metric}: {v:?}");
        assert!(
            v.iter().all(|x| *x > 0.0 && x.is_finite()),
            "{metric}: {v:?}"
        );
    }
    for r in &roce {
        assert_eq!(
            (r["fidelity"].as_str(), r["fabric"].as_str()),
            (Some("emulated"), Some("soft-rc-udp")),
            "{r}"
        );
    }
    // the other rows still run one agent a job, as before
    for s in ["event_driven", "parallel_dma", "dpdk"] {
        assert!(
            rows.iter()
                .any(|r| r["system"] == s && r["metric"] == "throughput"),
            "no {s} rows"
        );
    }
    let m = support::manifest_of(&run);
    let drivers: Vec<&str> = m["drivers"]
        .as_array()
        .expect("drivers")
        .iter()
        .filter_map(|l| l.as_str())
        .collect();
    // the launcher's line, and each spanning point's own line of its ranks' hosts and devices:
    // the second point's does not replace the first's
    assert!(
        drivers.iter().any(|l| l.starts_with("launcher local: ")),
        "{drivers:?}"
    );
    let spanning: Vec<&&str> = drivers
        .iter()
        .filter(|l| l.contains("netreduce-table1 spans 2 agents"))
        .collect();
    assert_eq!(spanning.len(), 2, "{drivers:?}");
    for total in ["total_mb=1", "total_mb=2"] {
        let line = spanning
            .iter()
            .find(|l| l.starts_with("[emulated] roce ") && l.contains(total))
            .unwrap_or_else(|| panic!("no line of the {total} point in {drivers:?}"));
        assert!(
            line.contains("; rank 0 on ")
                && line.contains("; rank 1 on ")
                && line.contains("software RC stack over UDP"),
            "{line}"
        );
    }
    assert!(!m["systems_not_built"].to_string().contains("roce"), "{m}");
}

#[test]
fn the_roce_row_in_one_process_is_left_out_with_why() {
    let d = tempfile::tempdir().expect("a scratch folder");
    let results = d.path().join("results");
    let out = reproduce(
        &results,
        &[
            "--fidelity",
            "emulated",
            "--repetitions",
            "1",
            "--warmup",
            "0",
            "--set",
            "total_mb=1",
        ],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out));
    let run = support::only_run_dir(&results);
    assert!(support::rows_of(&run).iter().all(|r| r["system"] != "roce"));
    let m = support::manifest_of(&run);
    let not_here = m["rows_not_here"].to_string();
    assert!(
        not_here.contains("roce") && not_here.contains("needs two hosts' RDMA devices"),
        "{m}"
    );
}

#[test]
fn a_point_needing_more_ranks_than_the_launcher_has_agents_is_one_sentence_before_it_runs() {
    let d = tempfile::tempdir().expect("a scratch folder");
    let results = d.path().join("results");
    let hostfile: PathBuf = d.path().join("hosts");
    std::fs::write(&hostfile, "inabench-no-such-host.invalid slots=1\n").expect("hostfile");
    let hf = hostfile.display().to_string();
    let out = reproduce(
        &results,
        &[
            "--launcher",
            "ssh",
            "--hostfile",
            &hf,
            "--listen",
            "127.0.0.1",
            "--fidelity",
            "emulated",
            "--repetitions",
            "1",
            "--warmup",
            "0",
        ],
        &[],
    );
    let all = text(&out);
    assert!(!out.status.success(), "{all}");
    assert!(
        all.contains("netreduce-table1 `roce` spans 2 hosts (one agent a rank) and the launcher has 1 agent; nothing of it ran"),
        "{all}"
    );
}

/// A testbed whose `nics:` name two other hosts: the local agents (this host's name is neither)
/// must not open a device of their own choosing. Each rank fails as a setup failure naming this
/// host and the testbed's hosts; `INABENCH_RDMA_DEVICE` stays the explicit override (the rank then
/// looks for that device, which this host lacks: a setup failure that says where the name came
/// from).
#[test]
fn a_rank_whose_host_the_testbeds_nics_do_not_name_fails_as_setup_and_says_why() {
    let d = tempfile::tempdir().expect("a scratch folder");
    let me = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .expect("hostname")
        .trim()
        .to_string();
    let tb = d.path().join("lab.yaml");
    std::fs::write(
        &tb,
        "name: lab\nhosts:\n  - {name: laptop, role: [runner]}\n  - {name: nic-node0, role: [worker], address: nic-node0.invalid}\n  - {name: nic-node1, role: [worker], address: nic-node1.invalid}\nnics:\n  - {host: nic-node0, kind: roce, device: mlx5_0, gid_index: 3, rate_gbps: 100}\n  - {host: nic-node1, kind: roce, device: mlx5_1, gid_index: 3, rate_gbps: 100}\nlauncher: local\n",
    )
    .expect("testbed");
    let tbs = tb.display().to_string();
    let args = [
        "--testbed",
        &tbs,
        "--launcher",
        "local",
        "--fidelity",
        "emulated",
        "--repetitions",
        "1",
        "--warmup",
        "0",
        "--set",
        "total_mb=1",
    ];
    // the roce point's failure, as its run folder's point_done record keeps it
    let failure = |results: &Path, out: &Output| -> (String, String) {
        let run = support::only_run_dir(results);
        let rows = std::fs::read_to_string(run.join("rows.jsonl")).expect("rows");
        let failed: Vec<serde_json::Value> = rows
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|r| r["kind"] == "point_done" && r["ok"] == false)
            .collect();
        assert_eq!(failed.len(), 1, "{rows}\n{}", text(out));
        (
            failed[0]["failure"].as_str().unwrap_or("").to_string(),
            failed[0]["error"].as_str().unwrap_or("").to_string(),
        )
    };
    let results = d.path().join("results");
    let out = reproduce(&results, &args, &[]);
    let (kind, error) = failure(&results, &out);
    assert_eq!(kind, "setup", "{error}");
    assert_eq!(
        error,
        format!(
            "rank 0 on {me}: the testbed's nics: declare RoCE NICs on nic-node0, nic-node1 and none on this host, `{me}` (its hostname is none of theirs, by name or address); set INABENCH_RDMA_DEVICE to open a device here anyway"
        ),
        "{}",
        text(&out)
    );
    // the explicit override: the rank looks for the device named
    let results = d.path().join("results-override");
    let out = reproduce(
        &results,
        &args,
        &[("INABENCH_RDMA_DEVICE", "inabench_none0")],
    );
    let (kind, error) = failure(&results, &out);
    assert_eq!(kind, "setup", "{error}");
    if error.contains("no libibverbs") && std::env::var_os("CI").is_none() {
        eprintln!("no libibverbs here: {error}");
    } else {
        assert!(
            error.starts_with(&format!(
                "rank 0 on {me}: no RDMA device `inabench_none0` (INABENCH_RDMA_DEVICE; devices here: "
            )),
            "{error}"
        );
    }
}
