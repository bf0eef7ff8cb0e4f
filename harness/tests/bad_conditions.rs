//! The CLI under bad conditions (issue #40): a full results disk, out-of-range parameter values,
//! two runners on one run folder, a silent P4Runtime switch, values read back on resume.
//!
//! Every child process runs under a deadline, so a hang fails the test instead of hanging it.
//! `INABENCH_BIN` runs the same checks against another build of the binary (e.g. the one before
//! a fix, to see them fail there).

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use support::{manifest_of, probe_home};

fn exe() -> PathBuf {
    std::env::var_os("INABENCH_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_inabench")))
}

fn cmd(home: &Path) -> Command {
    let mut c = Command::new(exe());
    c.env("INABENCH_HOME", home)
        .env("CI", "true")
        .env_remove("INABENCH_RESULTS")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Wait for `child` at most `limit`; past it, kill it and fail naming what hung.
fn wait_within(mut child: Child, limit: Duration, what: &str) -> Output {
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return child.wait_with_output().expect("output"),
            Ok(None) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(50)),
            _ => {
                let _ = child.kill();
                let out = child.wait_with_output().expect("output");
                panic!(
                    "{what} did not exit within {limit:?} (killed); stderr:\n{}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
}

fn run(c: &mut Command, limit: Duration, what: &str) -> Output {
    wait_within(c.spawn().expect("spawn inabench"), limit, what)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

fn error_lines(o: &Output) -> Vec<String> {
    stderr(o)
        .lines()
        .filter(|l| l.starts_with("error"))
        .map(str::to_string)
        .collect()
}

/// A tmpfs of `size` mounted at `at`, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    /// None where mounting is not permitted here (the test is skipped with the reason printed;
    /// under CI that is a failure, through the one guard of tool-gated tests).
    fn mount(at: &Path, size: &str) -> Option<Tmpfs> {
        Tmpfs::mount_with(at, &format!("size={size}"))
    }

    /// With mount options `options` (e.g. `size=4m,nr_inodes=8`: a disk that runs out of files).
    fn mount_with(at: &Path, options: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(at).expect("mount point");
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "tmpfs"])
            .arg(at)
            .output()
            .is_ok_and(|o| o.status.success());
        inabench_testkit::need(
            "permission to mount a tmpfs (a small full disk)",
            ok,
            "run the test as root",
        )
        .then(|| Tmpfs(at.to_path_buf()))
    }

    fn resize(&self, size: &str) {
        self.remount(&format!("size={size}"));
    }

    fn remount(&self, options: &str) {
        let o = Command::new("mount")
            .args(["-o", &format!("remount,{options}")])
            .arg(&self.0)
            .output()
            .expect("remount");
        assert!(o.status.success(), "remount: {}", stderr(&o));
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Item 1: the results disk fills up mid-run. The run ends at once with one sentence naming the
/// file and the reason, exit non-zero; the manifest says `incomplete` with the points on disk;
/// rows.jsonl has no torn line; once there is room, `--resume` completes it.
#[test]
fn a_full_results_disk_ends_the_run_with_one_sentence() {
    // 1 ms a point, so rows reach the disk in many writes (at 0 ms every row of the run arrives in
    // one batch, whose failed write keeps 0 points) and the disk fills mid-run
    let home = probe_home(1, 3000, false);
    let Some(fs) = Tmpfs::mount(&home.path().join("mnt"), "256k") else {
        return;
    };
    let results = fs.0.join("results");
    let o = run(
        cmd(home.path()).args(["--results"]).arg(&results).args([
            "reproduce",
            "netreduce-probe",
            "--headless",
            "--format",
            "md",
        ]),
        Duration::from_secs(120),
        "a run on a full disk",
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let errors = error_lines(&o);
    assert_eq!(errors.len(), 1, "{}", stderr(&o));
    let e = &errors[0];
    assert!(
        e.contains("cannot write") && e.contains("rows.jsonl") && e.contains("No space left"),
        "{e}"
    );
    assert_eq!(e.matches("os error").count(), 1, "the OS error once: {e}");
    assert!(e.contains("--resume"), "{e}");
    let run_dir = support::only_run_dir(&results);
    let m = manifest_of(&run_dir);
    assert_eq!(m["status"], "incomplete", "{m}");
    let text = std::fs::read_to_string(run_dir.join("rows.jsonl")).expect("rows");
    assert!(text.is_empty() || text.ends_with('\n'), "torn last line");
    let mut done = 0;
    for l in text.lines() {
        let v: serde_json::Value = serde_json::from_str(l).expect("every line whole");
        done += usize::from(v["kind"] == "point_done");
    }
    assert!(done > 0 && done < 3000, "{done} points on disk");
    assert_eq!(m["points_done"], done, "{m}");

    fs.resize("64m");
    let o = run(
        cmd(home.path())
            .args(["--results"])
            .arg(&results)
            .args([
                "reproduce",
                "netreduce-probe",
                "--headless",
                "--format",
                "md",
            ])
            .args(["--resume", "latest"]),
        Duration::from_secs(300),
        "the resume",
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(manifest_of(&run_dir)["status"], "complete");
    assert_eq!(support::rows_of(&run_dir).len(), 3000 * 2 * 2);
}

/// Item 1: SIGTERM stops a run as SIGINT does: finished rows kept, `incomplete`, exit 130.
#[test]
fn sigterm_stops_a_run_like_sigint() {
    let home = probe_home(20, 400, false);
    let results = home.path().join("results");
    let child = cmd(home.path())
        .args(["--results"])
        .arg(&results)
        .args([
            "reproduce",
            "netreduce-probe",
            "--headless",
            "--format",
            "md",
        ])
        .spawn()
        .expect("spawn");
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        let done = std::fs::read_dir(&results)
            .ok()
            .and_then(|mut rd| rd.next())
            .and_then(|e| e.ok())
            .and_then(|e| std::fs::read_to_string(e.path().join("rows.jsonl")).ok())
            .map_or(0, |s| s.matches("point_done").count());
        if done >= 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let o = wait_within(child, Duration::from_secs(30), "a run after one SIGTERM");
    assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
    let run_dir = support::only_run_dir(&results);
    assert_eq!(manifest_of(&run_dir)["status"], "incomplete");
    assert!(stderr(&o).contains("--resume"), "{}", stderr(&o));
}

/// A copy of the probe home whose spec has `from` replaced by `to`.
fn probe_with(from: &str, to: &str) -> tempfile::TempDir {
    let home = probe_home(0, 2, false);
    let spec = home.path().join("experiments/netreduce/probe.yaml");
    let text = std::fs::read_to_string(&spec).expect("spec");
    assert!(text.contains(from), "{from}");
    std::fs::write(&spec, text.replacen(from, to, 1)).expect("write spec");
    home
}

/// Item 6: out-of-range values are refused when the spec is read: `validate` fails with the
/// file, line and field, and `reproduce` runs nothing (no run folder).
#[test]
fn out_of_range_parameters_fail_validate_and_run_nothing() {
    let cases = [
        (
            "sleep_ms: 0,",
            "sleep_ms: 0, loss: 1.5,",
            "`loss` is a probability",
        ),
        (
            "sleep_ms: 0,",
            "sleep_ms: 0, workers: 0,",
            "`workers` is a whole number of at least 1",
        ),
        (
            "sleep_ms: 0,",
            "sleep_ms: 0, reorder_delay_us: -5,",
            "`reorder_delay_us` is a time, rate or size of 0 or more, not -5",
        ),
    ];
    for (from, to, says) in cases {
        let home = probe_with(from, to);
        let spec = home.path().join("experiments/netreduce/probe.yaml");
        let o = run(
            cmd(home.path()).arg("validate").arg(&spec),
            Duration::from_secs(60),
            "validate",
        );
        assert_eq!(o.status.code(), Some(2), "{to}: {}", stderr(&o));
        let e = stderr(&o);
        assert!(e.contains("probe.yaml:11: field `parameters."), "{e}");
        assert!(e.contains(says), "{e}");
        let results = home.path().join("results");
        let o = run(
            cmd(home.path()).args(["--results"]).arg(&results).args([
                "reproduce",
                "netreduce-probe",
                "--headless",
            ]),
            Duration::from_secs(60),
            "reproduce",
        );
        assert_eq!(o.status.code(), Some(2), "{to}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{}", stderr(&o));
        let runs = std::fs::read_dir(&results).map_or(0, |d| d.count());
        assert_eq!(runs, 0, "nothing ran, no run folder");
    }
}

/// The number of `point_done` records of the one run under `results` (0 before it exists).
fn points_done(results: &Path) -> usize {
    std::fs::read_dir(results)
        .ok()
        .and_then(|mut rd| rd.next())
        .and_then(|e| e.ok())
        .and_then(|e| std::fs::read_to_string(e.path().join("rows.jsonl")).ok())
        .map_or(0, |s| s.matches("point_done").count())
}

fn wait_for_points(results: &Path, n: usize) {
    let start = Instant::now();
    while points_done(results) < n {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the run never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Item 4: `--resume` of a run that another runner is still writing is refused with one
/// sentence, before it reads or rewrites anything; the first runner finishes undisturbed.
#[test]
fn a_second_runner_on_a_live_run_is_refused() {
    let home = probe_home(25, 160, false);
    let results = home.path().join("results");
    let first = cmd(home.path())
        .args(["--results"])
        .arg(&results)
        .args([
            "reproduce",
            "netreduce-probe",
            "--headless",
            "--format",
            "md",
        ])
        .spawn()
        .expect("spawn");
    wait_for_points(&results, 2);
    let o = run(
        cmd(home.path())
            .args(["--results"])
            .arg(&results)
            .args([
                "reproduce",
                "netreduce-probe",
                "--headless",
                "--format",
                "md",
            ])
            .args(["--resume", "latest"]),
        Duration::from_secs(60),
        "the second runner",
    );
    let first = wait_within(first, Duration::from_secs(120), "the first runner");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = error_lines(&o);
    assert_eq!(e.len(), 1, "{}", stderr(&o));
    assert!(
        e[0].contains("is being written by another inabench process"),
        "{}",
        e[0]
    );
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    let run_dir = support::only_run_dir(&results);
    let m = manifest_of(&run_dir);
    assert_eq!(m["status"], "complete");
    assert_eq!(m["resumed_from"], serde_json::json!([]));
    let rows = support::rows_of(&run_dir);
    let mut keys: Vec<String> = rows
        .iter()
        .map(|r| format!("{}/{}/{}", r["point_id"], r["repetition"], r["metric"]))
        .collect();
    keys.sort();
    keys.dedup();
    assert_eq!((rows.len(), keys.len()), (160 * 2 * 2, 160 * 2 * 2));
}

/// Item 8: a run killed outright (no chance to mark its manifest) stops saying `running` once a
/// later command finds nobody holding its folder, and resumes.
#[test]
fn a_killed_run_is_marked_incomplete_by_the_next_command() {
    let home = probe_home(25, 40, false);
    let results = home.path().join("results");
    let mut first = cmd(home.path())
        .args(["--results"])
        .arg(&results)
        .args([
            "reproduce",
            "netreduce-probe",
            "--headless",
            "--format",
            "md",
        ])
        .spawn()
        .expect("spawn");
    wait_for_points(&results, 2);
    first.kill().expect("SIGKILL");
    let _ = first.wait();
    let run_dir = support::only_run_dir(&results);
    assert_eq!(manifest_of(&run_dir)["status"], "running");
    let o = run(
        cmd(home.path())
            .args(["--results"])
            .arg(&results)
            .arg("runs"),
        Duration::from_secs(60),
        "runs",
    );
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        out.contains("incomplete") && !out.contains("running"),
        "{out}"
    );
    let m = manifest_of(&run_dir);
    assert_eq!(m["status"], "incomplete");
    let o = run(
        cmd(home.path())
            .args(["--results"])
            .arg(&results)
            .args([
                "reproduce",
                "netreduce-probe",
                "--headless",
                "--format",
                "md",
            ])
            .args(["--resume", "latest"]),
        Duration::from_secs(120),
        "the resume",
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(support::rows_of(&run_dir).len(), 40 * 2 * 2);
}

/// Item 3: a testbed whose P4Runtime address accepts connections and never answers ends the
/// run with one sentence naming the address, within the client's deadline.
#[test]
fn a_silent_p4runtime_switch_is_an_error_naming_its_address() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    // accept and hold every connection, never writing a byte
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in listener.incoming().flatten() {
            held.push(s);
        }
    });
    let home = probe_home(0, 2, false);
    let tb = home.path().join("lab.yaml");
    std::fs::write(
        &tb,
        format!(
            "name: lab\nhosts: [{{name: localhost, role: [runner, worker]}}]\nswitch:\n  kind: tofino\n  p4runtime: {{address: \"{addr}\", device_id: 1}}\n"
        ),
    )
    .expect("testbed");
    let o = run(
        cmd(home.path())
            .args(["--results"])
            .arg(home.path().join("results"))
            .args([
                "reproduce",
                "netreduce-probe",
                "--headless",
                "--format",
                "md",
            ])
            .arg("--testbed")
            .arg(&tb),
        Duration::from_secs(90),
        "a run against a silent switch",
    );
    assert_ne!(o.status.code(), Some(0), "{}", stderr(&o));
    let e = error_lines(&o);
    assert_eq!(e.len(), 1, "{}", stderr(&o));
    assert!(
        e[0].contains(&addr) && e[0].contains("did not") && e[0].contains("within 10 s"),
        "{}",
        e[0]
    );
}

/// The text of a stored row's `value` (the number as written, so that no parser's rounding can
/// hide a difference), keyed by point, system, metric and repetition.
fn values_as_written(run: &Path) -> std::collections::BTreeMap<String, String> {
    let text = std::fs::read_to_string(run.join("rows.jsonl")).expect("rows");
    let mut out = std::collections::BTreeMap::new();
    for l in text.lines() {
        let v: serde_json::Value = serde_json::from_str(l).expect("json");
        if v["kind"] != "row" {
            continue;
        }
        let after_metric = &l[l.find("\"metric\":").expect("metric")..];
        let at = after_metric.find("\"value\":").expect("value") + "\"value\":".len();
        let number: String = after_metric[at..]
            .chars()
            .take_while(|c| !matches!(c, ',' | '}'))
            .collect();
        let key = format!(
            "{} {} {} {}",
            v["point_id"], v["system"], v["metric"], v["repetition"]
        );
        assert!(out.insert(key, number).is_none(), "a duplicate row");
    }
    out
}

/// Item 7: values are stored bit for bit whatever carried them: the same deterministic run in
/// process and through `--launcher local` (rows sent over the agent channel), and a resumed run
/// (rows.jsonl read back and rewritten) keeps every earlier value's exact text.
#[test]
fn values_are_exact_through_agents_and_resume() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let d = tempfile::tempdir().expect("tmp");
    let mut runs = Vec::new();
    for launcher in ["inproc", "local"] {
        let results = d.path().join(launcher);
        let o = run(
            cmd(&repo)
                .args(["--results"])
                .arg(&results)
                .args([
                    "reproduce",
                    "netreduce-fig7",
                    "--headless",
                    "--format",
                    "md",
                ])
                .args(["--fidelity", "modelled", "--launcher", launcher]),
            Duration::from_secs(300),
            launcher,
        );
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        runs.push(support::only_run_dir(&results));
    }
    let inproc = values_as_written(&runs[0]);
    let local = values_as_written(&runs[1]);
    assert!(inproc.len() > 100, "{} rows", inproc.len());
    let differ: Vec<_> = inproc
        .iter()
        .filter(|(k, v)| local.get(*k) != Some(v))
        .take(3)
        .collect();
    assert!(
        differ.is_empty(),
        "in process vs local launcher: {differ:?}"
    );

    // make the in-process run look interrupted before its last point, and resume it
    let run_dir = &runs[0];
    let rows = std::fs::read_to_string(run_dir.join("rows.jsonl")).expect("rows");
    let last_done = rows.trim_end().rfind('\n').map_or(0, |i| i + 1);
    assert!(rows[last_done..].contains("point_done"));
    std::fs::write(run_dir.join("rows.jsonl"), &rows[..last_done]).expect("cut");
    let manifest = std::fs::read_to_string(run_dir.join("manifest.json")).expect("manifest");
    std::fs::write(
        run_dir.join("manifest.json"),
        manifest.replace("\"status\": \"complete\"", "\"status\": \"incomplete\""),
    )
    .expect("manifest");
    let o = run(
        cmd(&repo)
            .args(["--results"])
            .arg(d.path().join("inproc"))
            .args([
                "reproduce",
                "netreduce-fig7",
                "--headless",
                "--format",
                "md",
            ])
            .args(["--resume", "latest"]),
        Duration::from_secs(300),
        "the resume",
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let resumed = values_as_written(run_dir);
    assert_eq!(resumed.len(), inproc.len());
    let changed: Vec<_> = inproc
        .iter()
        .filter(|(k, v)| resumed.get(*k) != Some(v))
        .take(3)
        .collect();
    assert!(changed.is_empty(), "changed by the resume: {changed:?}");
}

/// Item 8 (D9): a point that fails for its parameter value (the probe's `work` must be a whole
/// number) fails the same way when rerun, so the run is `failed`, says why in one sentence, and is
/// not offered `--resume`; the other points' rows are kept.
#[test]
fn a_point_failing_for_its_parameters_is_not_called_resumable() {
    let home = probe_home(0, 2, false);
    let spec = home.path().join("experiments/netreduce/probe.yaml");
    let text = std::fs::read_to_string(&spec).expect("spec");
    assert_eq!(text.matches("work: [100, 200]").count(), 2, "{text}");
    std::fs::write(&spec, text.replace("work: [100, 200]", "work: [100, -3]")).expect("spec");
    let results = home.path().join("results");
    let o = run(
        cmd(home.path()).args(["--results"]).arg(&results).args([
            "reproduce",
            "netreduce-probe",
            "--headless",
            "--format",
            "md",
        ]),
        Duration::from_secs(60),
        "a run with a bad parameter value",
    );
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(!e.contains("--resume"), "offered a resume: {e}");
    // the point's own error lines, then the run's one sentence
    let errors: Vec<String> = error_lines(&o)
        .into_iter()
        .filter(|l| l.contains("failed for their parameter values"))
        .collect();
    assert_eq!(errors.len(), 1, "{e}");
    assert!(
        errors[0].contains("1 of 2 points failed for their parameter values")
            && errors[0].contains("parameter `work` must be a whole number (got -3)"),
        "{}",
        errors[0]
    );
    let run_dir = support::only_run_dir(&results);
    let m = manifest_of(&run_dir);
    assert_eq!(
        (&m["status"], &m["points_done"], &m["points_invalid"]),
        (&"failed".into(), &1.into(), &1.into()),
        "{m}"
    );
    assert_eq!(
        support::rows_of(&run_dir).len(),
        2 * 2,
        "the good point's rows"
    );
}

/// Item 8 (D11): a testbed switch that cannot be programmed fails the run before any point, and
/// no run folder is left (it would have become `latest`: `--resume latest` would pick it).
#[test]
fn an_unprogrammable_switch_leaves_no_run_folder() {
    // a port nobody listens on: the connection is refused at once
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").to_string()
    };
    let home = probe_home(0, 2, false);
    let tb = home.path().join("lab.yaml");
    std::fs::write(
        &tb,
        format!(
            "name: lab\nhosts: [{{name: localhost, role: [runner, worker]}}]\nswitch:\n  kind: tofino\n  p4runtime: {{address: \"{addr}\", device_id: 1}}\n"
        ),
    )
    .expect("testbed");
    let results = home.path().join("results");
    let o = run(
        cmd(home.path())
            .args(["--results"])
            .arg(&results)
            .args([
                "reproduce",
                "netreduce-probe",
                "--headless",
                "--format",
                "md",
            ])
            .arg("--testbed")
            .arg(&tb),
        Duration::from_secs(60),
        "a run against a refused switch",
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = error_lines(&o);
    assert_eq!(e.len(), 1, "{}", stderr(&o));
    assert!(
        e[0].contains(&addr) && e[0].contains("no run folder was kept"),
        "{}",
        e[0]
    );
    let left = std::fs::read_dir(&results).map_or(0, |d| d.count());
    assert_eq!(left, 0, "a run folder was left");
    let o = run(
        cmd(home.path())
            .args(["--results"])
            .arg(&results)
            .args(["reproduce", "netreduce-probe", "--headless"])
            .args(["--resume", "latest"]),
        Duration::from_secs(60),
        "a resume of latest",
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("has no run of netreduce-probe"),
        "{}",
        stderr(&o)
    );
}

/// Item 8 (D10, D11): a report that cannot be written (the disk filled after the run) is one
/// sentence with the OS error once, and leaves no temp file in the run folder; once there is
/// room, `report` writes everything.
#[test]
fn a_report_on_a_full_disk_says_the_os_error_once_and_leaves_no_temp_file() {
    let home = probe_home(0, 400, false);
    let Some(fs) = Tmpfs::mount(&home.path().join("mnt"), "4m") else {
        return;
    };
    let results = fs.0.join("results");
    let o = run(
        cmd(home.path()).args(["--results"]).arg(&results).args([
            "reproduce",
            "netreduce-probe",
            "--headless",
            "--format",
            "md",
        ]),
        Duration::from_secs(120),
        "the run",
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let run_dir = support::only_run_dir(&results);
    for f in ["measurements.parquet", "report.md"] {
        std::fs::remove_file(run_dir.join(f)).expect("remove a report file");
    }
    // fill the disk
    let filler = fs.0.join("filler");
    let mut f = std::fs::File::create(&filler).expect("filler");
    let block = vec![7u8; 4096];
    while std::io::Write::write_all(&mut f, &block).is_ok() {}
    drop(f);
    let o = run(
        cmd(home.path())
            .args(["--results"])
            .arg(&results)
            .args(["report", "latest", "--format", "md,json"]),
        Duration::from_secs(60),
        "a report on a full disk",
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = error_lines(&o);
    assert_eq!(e.len(), 1, "{}", stderr(&o));
    assert!(e[0].contains("No space left"), "{}", e[0]);
    assert_eq!(
        e[0].matches("os error").count(),
        1,
        "the OS error once: {}",
        e[0]
    );
    let tmp: Vec<String> = std::fs::read_dir(&run_dir)
        .expect("run dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(tmp.is_empty(), "temp files left: {tmp:?}");
    std::fs::remove_file(&filler).expect("free the disk");
    let o = run(
        cmd(home.path())
            .args(["--results"])
            .arg(&results)
            .args(["report", "latest", "--format", "md,json"]),
        Duration::from_secs(60),
        "the report with room",
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(run_dir.join("report.md").exists() && run_dir.join("report.json").exists());
}

/// Item 8 (D12): an agent removes the run's token from its environment before it runs anything,
/// so no process it starts inherits it (the probe records whether the variable is there).
#[test]
fn the_agent_token_is_not_in_an_agents_environment() {
    let home = probe_with(
        "  - {name: pid, unit: \"1\", better: none}\n",
        "  - {name: pid, unit: \"1\", better: none}\n  - {name: agent_token_in_env, unit: \"1\", better: none}\n",
    );
    let results = home.path().join("results");
    let o = run(
        cmd(home.path()).args(["--results"]).arg(&results).args([
            "reproduce",
            "netreduce-probe",
            "--headless",
            "--format",
            "md",
            "--launcher",
            "local",
        ]),
        Duration::from_secs(120),
        "a local-launcher run",
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let rows = support::rows_of(&support::only_run_dir(&results));
    let seen: Vec<f64> = rows
        .iter()
        .filter(|r| r["metric"] == "agent_token_in_env")
        .map(|r| r["value"].as_f64().expect("a number"))
        .collect();
    assert_eq!(seen, vec![0.0; 2 * 2], "rows: {seen:?}");
}

/// The names of the temp files (`*.tmp`, hidden or not) in `dir`.
fn temp_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().to_string())
                .filter(|n| n.ends_with(".tmp"))
                .collect()
        })
        .unwrap_or_default()
}

/// A run stopped before its first point finished (SIGTERM during the first point) keeps its
/// folder marked `incomplete` with 0 points, no temp file, a sentence offering `--resume`, and
/// the resume completes it.
#[test]
fn a_run_stopped_before_its_first_point_is_incomplete_and_resumes() {
    // a point is 2 repetitions of 400 ms
    let home = probe_home(400, 2, false);
    let results = home.path().join("results");
    let child = cmd(home.path())
        .args(["--results"])
        .arg(&results)
        .args([
            "reproduce",
            "netreduce-probe",
            "--headless",
            "--format",
            "md",
        ])
        .spawn()
        .expect("spawn");
    let start = Instant::now();
    let manifest_written = || {
        std::fs::read_dir(&results)
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| e.ok())
            .is_some_and(|e| e.path().join("manifest.json").exists())
    };
    while !manifest_written() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the run never started"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let o = wait_within(child, Duration::from_secs(30), "a run stopped at its start");
    assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
    let run_dir = support::only_run_dir(&results);
    let m = manifest_of(&run_dir);
    assert_eq!(
        (&m["status"], &m["points_done"]),
        (&"incomplete".into(), &0.into()),
        "{m}"
    );
    assert!(
        temp_files(&run_dir).is_empty(),
        "{:?}",
        temp_files(&run_dir)
    );
    assert!(stderr(&o).contains("--resume"), "{}", stderr(&o));
    let o = run(
        cmd(home.path())
            .args(["--results"])
            .arg(&results)
            .args([
                "reproduce",
                "netreduce-probe",
                "--headless",
                "--format",
                "md",
            ])
            .args(["--resume", "latest"]),
        Duration::from_secs(60),
        "the resume",
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(manifest_of(&run_dir)["status"], "complete");
    assert_eq!(support::rows_of(&run_dir).len(), 2 * 2 * 2);
}

/// A disk that runs out of room after the run, while the report is written (a tmpfs with just
/// enough files for the run's own: the parquet temp file is one too many): one sentence naming
/// the file and the OS error once, exit 2; the manifest says `complete` with every point, no
/// temp file is left, and `report` writes it once there is room.
#[test]
fn a_report_that_cannot_be_written_after_a_run_is_one_sentence() {
    let home = probe_home(0, 20, false);
    // files on the disk during the run: its root, results/, the run folder, spec.yaml,
    // manifest.json and rows.jsonl (the manifest's last update overwrites it in place when no
    // temp file fits)
    let Some(fs) = Tmpfs::mount_with(&home.path().join("mnt"), "size=4m,nr_inodes=6") else {
        return;
    };
    let results = fs.0.join("results");
    let o = run(
        cmd(home.path()).args(["--results"]).arg(&results).args([
            "reproduce",
            "netreduce-probe",
            "--headless",
            "--format",
            "md",
        ]),
        Duration::from_secs(120),
        "a run whose report cannot be written",
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = error_lines(&o);
    assert_eq!(e.len(), 1, "{}", stderr(&o));
    let run_dir = support::only_run_dir(&results);
    let id = run_dir
        .file_name()
        .expect("id")
        .to_string_lossy()
        .to_string();
    assert!(
        e[0].contains("ended complete with 20 of 20 points on disk")
            && e[0].contains("cannot write")
            && e[0].contains("measurements.parquet")
            // the file the user knows, not the temp file the write goes through
            && !e[0].contains("measurements.parquet.tmp")
            && e[0].contains("No space left")
            && e[0].contains(&format!("inabench report {id}")),
        "{}",
        e[0]
    );
    assert_eq!(
        e[0].matches("os error").count(),
        1,
        "the OS error once: {}",
        e[0]
    );
    let m = manifest_of(&run_dir);
    assert_eq!(
        (&m["status"], &m["points_done"]),
        (&"complete".into(), &20.into()),
        "{m}"
    );
    assert!(
        temp_files(&run_dir).is_empty(),
        "{:?}",
        temp_files(&run_dir)
    );
    fs.remount("nr_inodes=64");
    let o = run(
        cmd(home.path())
            .args(["--results"])
            .arg(&results)
            .args(["report", "latest", "--format", "md"]),
        Duration::from_secs(60),
        "the report with room",
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(run_dir.join("report.md").exists() && run_dir.join("measurements.parquet").exists());
}

/// The scoreboard page and the ledger on a full disk: one sentence naming the file with the OS
/// error once, exit 2, and the old file left whole, no temp file. (A plain write truncates the
/// old file first: it rewrites a file of the same size in its own freed blocks, but leaves a
/// larger new one cut short or empty, as the audit found for scoreboard.html.)
#[test]
fn scoreboard_and_ledger_on_a_full_disk_keep_the_old_files() {
    let home = probe_home(0, 20, false);
    let Some(fs) = Tmpfs::mount(&home.path().join("mnt"), "2m") else {
        return;
    };
    let results = fs.0.join("results");
    let ledger = fs.0.join("verdicts.ledger");
    let page = results.join("scoreboard.html");
    let o = run(
        cmd(home.path()).args(["--results"]).arg(&results).args([
            "reproduce",
            "netreduce-probe",
            "--headless",
            "--format",
            "md",
        ]),
        Duration::from_secs(120),
        "the run",
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let board = || {
        let mut c = cmd(home.path());
        c.args(["--results"])
            .arg(&results)
            .args(["scoreboard", "--ledger"])
            .arg(&ledger);
        c
    };
    let o = run(&mut board(), Duration::from_secs(60), "the scoreboard");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let (old_ledger, old_page) = (
        std::fs::read(&ledger).expect("ledger"),
        std::fs::read(&page).expect("page"),
    );
    assert!(!old_ledger.is_empty() && !old_page.is_empty());
    let filler = fs.0.join("filler");
    let mut f = std::fs::File::create(&filler).expect("filler");
    let block = vec![7u8; 4096];
    while std::io::Write::write_all(&mut f, &block).is_ok() {}
    drop(f);
    // the ledger is written first
    let o = run(
        &mut board(),
        Duration::from_secs(60),
        "the ledger on a full disk",
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = error_lines(&o);
    assert_eq!(e.len(), 1, "{}", stderr(&o));
    assert!(
        e[0].contains(&format!("cannot write {}", ledger.display()))
            && e[0].contains("No space left"),
        "{}",
        e[0]
    );
    assert_eq!(e[0].matches("os error").count(), 1, "{}", e[0]);
    let o = run(
        cmd(home.path())
            .args(["--results"])
            .arg(&results)
            .arg("scoreboard"),
        Duration::from_secs(60),
        "the scoreboard on a full disk",
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = error_lines(&o);
    assert_eq!(e.len(), 1, "{}", stderr(&o));
    assert!(
        e[0].contains(&format!("cannot write {}", page.display()))
            && e[0].contains("No space left"),
        "{}",
        e[0]
    );
    assert_eq!(e[0].matches("os error").count(), 1, "{}", e[0]);
    assert_eq!(
        std::fs::read(&ledger).expect("ledger"),
        old_ledger,
        "the old ledger"
    );
    assert_eq!(
        std::fs::read(&page).expect("page"),
        old_page,
        "the old page"
    );
    for d in [&fs.0, &results] {
        assert!(temp_files(d).is_empty(), "{:?}", temp_files(d));
    }
}

/// A run whose first row cannot be written (a disk with no file left for rows.jsonl) stops before
/// any point with one sentence (file, OS error once, `--resume`), its manifest marked
/// `incomplete` with 0 points (it was left `running`), and once there is room the resume
/// completes it.
#[test]
fn a_run_that_cannot_write_its_first_row_is_marked_incomplete() {
    let home = probe_home(0, 20, false);
    // files: the disk's root, results/, the run folder, spec.yaml, manifest.json: no rows.jsonl
    let Some(fs) = Tmpfs::mount_with(&home.path().join("mnt"), "size=4m,nr_inodes=5") else {
        return;
    };
    let results = fs.0.join("results");
    let probe = || {
        let mut c = cmd(home.path());
        c.args(["--results"]).arg(&results).args([
            "reproduce",
            "netreduce-probe",
            "--headless",
            "--format",
            "md",
        ]);
        c
    };
    let o = run(
        &mut probe(),
        Duration::from_secs(60),
        "a run with no room for rows",
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = error_lines(&o);
    assert_eq!(e.len(), 1, "{}", stderr(&o));
    assert!(
        e[0].contains("cannot write")
            && e[0].contains("rows.jsonl")
            && e[0].contains("No space left")
            && e[0].contains("marked incomplete with 0 of 20 points")
            && e[0].contains("--resume"),
        "{}",
        e[0]
    );
    assert_eq!(e[0].matches("os error").count(), 1, "{}", e[0]);
    let run_dir = support::only_run_dir(&results);
    let m = manifest_of(&run_dir);
    assert_eq!(
        (&m["status"], &m["points_done"]),
        (&"incomplete".into(), &0.into()),
        "{m}"
    );
    fs.remount("nr_inodes=64");
    let o = run(
        probe().args(["--resume", "latest"]),
        Duration::from_secs(60),
        "the resume",
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(manifest_of(&run_dir)["status"], "complete");
    assert_eq!(support::rows_of(&run_dir).len(), 20 * 2 * 2);
}
