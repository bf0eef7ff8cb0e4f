//! Network namespaces of an emulated testbed never outlive the run: an interrupted run (SIGINT)
//! removes them before it exits, and those of a killed run (SIGKILL, no clean-up possible) are
//! reaped by the next run that makes namespaces. Uses aleph-fig11's quick profile (eight worker
//! namespaces and a PS). Needs root, clang and libbpf: skipped with a message without them,
//! required when the CI variable is set (.ci/setup installs them).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn ready() -> bool {
    let why = if !inabench_fabric::netns::is_root() {
        Some("not root".to_string())
    } else {
        inabench_xdp::unavailable()
    };
    match why {
        None => true,
        Some(why) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must run the namespace tests as root with clang and libbpf: {why}"
            );
            eprintln!("skipped: {why}");
            false
        }
    }
}

/// The namespaces a process made (`inb<pid hex>x...`, as drivers/fabric names them).
fn namespaces_of(pid: u32) -> Vec<String> {
    let out = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list");
    let prefix = format!("inb{pid:x}x");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(&prefix))
        .map(str::to_string)
        .collect()
}

fn start(results: &Path) -> Child {
    Command::new(assert_cmd::cargo::cargo_bin("inabench"))
        .current_dir(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".."))
        .env_remove("INABENCH_HOME")
        .env("CI", "true")
        .args(["--results"])
        .arg(results)
        .args(["reproduce", "aleph-fig11", "--headless", "--format", "md"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn inabench")
}

/// Wait until the run has its testbed up (all nine machines).
fn wait_for_testbed(child: &mut Child) -> Vec<String> {
    let t = Instant::now();
    loop {
        let ns = namespaces_of(child.id());
        if ns.len() >= 9 {
            return ns;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the run ended ({status}) before its testbed came up");
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "no testbed after 120 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: kill(2) on our own child's pid
    unsafe { libc::kill(child.id() as i32, sig) };
}

#[test]
fn interrupted_and_killed_runs_leave_no_namespaces() {
    if !ready() {
        return;
    }
    let results = tempfile::tempdir().expect("tmp");

    // SIGINT: the runner stops, the point's testbed is dropped, then the process exits
    let mut a = start(results.path());
    let pid_a = a.id();
    let made = wait_for_testbed(&mut a);
    signal(&a, libc::SIGINT);
    let out = a.wait_with_output().expect("wait");
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        namespaces_of(pid_a),
        Vec::<String>::new(),
        "an interrupted run removed its namespaces ({made:?} were made)"
    );

    // SIGKILL: nothing runs in the killed process, so its namespaces stay behind ...
    let mut b = start(results.path());
    let pid_b = b.id();
    wait_for_testbed(&mut b);
    signal(&b, libc::SIGKILL);
    let _ = b.wait();
    assert!(
        !namespaces_of(pid_b).is_empty(),
        "a killed run cannot clean up (this check keeps the next one honest)"
    );
    // ... until the next run that makes a testbed reaps them (their owner is gone)
    let mut c = start(results.path());
    wait_for_testbed(&mut c);
    let left = namespaces_of(pid_b);
    signal(&c, libc::SIGINT);
    let _ = c.wait();
    assert_eq!(left, Vec::<String>::new(), "the next run reaped them");
    assert_eq!(namespaces_of(c.id()), Vec::<String>::new());
}
