//! Drive the dashboard for real under tmux: start a run in a pseudo-terminal, read the screen
//! with capture-pane, press `q`, and check the run stopped cleanly, kept its rows, and the
//! terminal was restored.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn tmux(args: &[&str]) -> std::process::Output {
    match Command::new("tmux").args(args).output() {
        Ok(o) => o,
        Err(e) => panic!("tmux is needed for this test (.ci/setup installs it): {e}"),
    }
}

fn capture(session: &str) -> String {
    String::from_utf8_lossy(&tmux(&["capture-pane", "-p", "-t", session]).stdout).to_string()
}

#[test]
fn dashboard_runs_under_tmux_and_q_stops_cleanly() {
    if !inabench_testkit::need_tool("tmux", "tmux") {
        return;
    }
    let home = tempfile::tempdir().expect("tmp");
    std::fs::write(home.path().join("Cargo.toml"), "[workspace]\n").expect("cargo");
    let exp = home.path().join("experiments/netreduce");
    std::fs::create_dir_all(&exp).expect("mkdir");
    let works: Vec<String> = (1..=40).map(|i| (i * 10).to_string()).collect();
    std::fs::write(
        exp.join("probe.yaml"),
        format!(
            "id: netreduce-probe\npaper_id: netreduce\ntitle: Dashboard probe\ncitation: none\nartifact: none\nstatus: implemented\nworkload: harness.probe\ndescription: test fixture\nsystems: [probe]\nfidelity: [functional]\nparameters: {{sleep_ms: 200}}\nprofiles:\n  quick:\n    estimated_seconds: 8\n    grid:\n      - work: [{}]\n  full:\n    estimated_seconds: 8\n    grid:\n      - work: [1]\nmetrics:\n  - {{name: checksum, unit: \"1\", better: none}}\n  - {{name: pid, unit: \"1\", better: none}}\npaper:\n  source: none\n  values: []\n",
            works.join(", ")
        ),
    )
    .expect("spec");
    let exe = assert_cmd::cargo::cargo_bin("inabench");
    let session = format!("inabench-test-{}", std::process::id());
    let marker = home.path().join("exit-code");
    let cmd = format!(
        "cd {} && env -u CI INABENCH_HOME={} {} reproduce netreduce-probe --format md; echo $? > {}; echo SHELL-BACK; sleep 30",
        home.path().display(),
        home.path().display(),
        exe.display(),
        marker.display()
    );
    let o = tmux(&[
        "new-session",
        "-d",
        "-s",
        &session,
        "-x",
        "120",
        "-y",
        "40",
        &cmd,
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let guard = KillSession(session.clone());

    // the dashboard appears and shows the plan and progress
    let start = Instant::now();
    let mut screen = String::new();
    while start.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(200));
        screen = capture(&session);
        if screen.contains("netreduce-probe") && screen.contains("probe work=") {
            break;
        }
    }
    assert!(
        screen.contains("netreduce-probe"),
        "no dashboard:\n{screen}"
    );
    // the plan lists only the parameters that vary (work), not the fixed ones (sleep_ms)
    assert!(screen.contains("probe work="), "no plan:\n{screen}");
    assert!(
        !screen.contains("sleep_ms=200"),
        "fixed parameters listed:\n{screen}"
    );
    assert!(screen.contains("class functional"), "no class:\n{screen}");
    std::thread::sleep(Duration::from_millis(800));
    tmux(&["send-keys", "-t", &session, "q"]);

    let start = Instant::now();
    while !marker.exists() && start.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let code = std::fs::read_to_string(&marker).unwrap_or_default();
    std::thread::sleep(Duration::from_millis(300));
    let after = capture(&session);
    drop(guard);
    assert_eq!(code.trim(), "130", "exit code after q; screen:\n{after}");
    // the terminal is restored: the shell's output is visible, the alternate screen is gone
    assert!(after.contains("SHELL-BACK"), "{after}");
    assert!(after.contains("--resume"), "{after}");
    let results = home.path().join("results");
    let run = std::fs::read_dir(&results)
        .expect("results")
        .flatten()
        .next()
        .expect("a run")
        .path();
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("manifest.json")).expect("m"))
            .expect("json");
    assert_eq!(m["status"], "incomplete");
    let rows = std::fs::read_to_string(run.join("rows.jsonl")).expect("rows");
    assert!(rows.contains("\"kind\":\"row\""), "rows kept");
    assert!(Path::new(&run.join("report.md")).exists());
}

struct KillSession(String);

impl Drop for KillSession {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.0])
            .output();
    }
}
