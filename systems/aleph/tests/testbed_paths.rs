//! The single-aggregator measurements of aleph-fig5, -table2 and -fig7: every returned aggregate
//! is checked inside (a wrong one is an error) and the affinity limit is lifted afterwards (the
//! clusterings the testbed uses: workloads/tests/aleph_testbed_clustering.rs). Needs root, clang
//! and libbpf: skipped with a message without them, required when `CI` is set.

use inabench_aleph::testbed::cpu::{Path, isolated_split, measure, measure_isolated};
use inabench_aleph::testbed::latency;
use inabench_xdp::AttachMode;
use std::time::Duration;

fn ready() -> bool {
    match inabench_xdp::unavailable() {
        None => true,
        Some(why) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must run the XDP tests as root with clang and libbpf: {why}"
            );
            eprintln!("skipped: {why}");
            false
        }
    }
}

fn allowed() -> usize {
    // SAFETY: a zeroed set to fill
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set);
        libc::CPU_COUNT(&set) as usize
    }
}

#[test]
fn throughput_paths_aggregate_and_restore_affinity() {
    if !ready() {
        return;
    }
    let before = allowed();
    for p in [
        Path::Xdp(AttachMode::Native),
        Path::Xdp(AttachMode::Generic),
        Path::Tcp,
        Path::Udp,
    ] {
        let m = measure(p, 1, Duration::from_millis(300), None).unwrap();
        eprintln!("{p:?}: {m:?}");
        assert!(m.gbps > 0.0 && m.gbps.is_finite(), "{p:?}");
        assert!((0.0..100.0).contains(&m.loss_pct));
        assert!(m.host_cores <= 1.2, "one core allowed: {m:?}");
        assert_eq!(allowed(), before, "the affinity limit is lifted");
    }
    // paced: the TCP path offers about the target
    let m = measure(Path::Tcp, 1, Duration::from_millis(500), Some(0.2)).unwrap();
    assert!(m.gbps < 0.3, "{m:?}");
    assert!(measure(Path::Tcp, 1, Duration::from_millis(10), Some(-1.0)).is_err());
    // paced: the user-space UDP service aggregates about what is offered, and loses nothing at
    // a rate far below what it can take
    let m = measure(Path::Udp, 1, Duration::from_millis(500), Some(0.05)).unwrap();
    assert!(m.gbps > 0.03 && m.gbps < 0.07, "{m:?}");
    assert!(m.loss_pct < 1.0, "{m:?}");
}

#[test]
fn isolated_paths_receive_on_the_measured_core() {
    if !ready() {
        return;
    }
    let before = allowed();
    if before < 2 {
        assert!(
            std::env::var_os("CI").is_none(),
            "the isolated placement needs 2 cores, CI has {before}"
        );
        eprintln!("skipped: the isolated placement needs 2 cores ({before} allowed)");
        return;
    }
    // no core left for the senders
    assert!(isolated_split(before).is_err());
    assert!(isolated_split(0).is_err());
    for p in [
        Path::Xdp(AttachMode::Native),
        Path::Tcp,
        Path::TcpSegmented,
        Path::Udp,
    ] {
        // paced far below what any path takes: the aggregator keeps up, and its receive path
        // (the NAPI threads pinned to the measured core) and service threads did the work, so
        // their CPU is not zero; nothing else of the run is counted there, so it stays below
        // the one measured core
        let m = measure_isolated(p, 1, Duration::from_millis(600), Some(0.05)).unwrap();
        eprintln!("{p:?}: {m:?}");
        assert!(m.gbps > 0.03 && m.gbps < 0.07, "{p:?}: {m:?}");
        assert!(m.loss_pct < 1.0, "{p:?}: {m:?}");
        assert!(m.cpu_cores > 0.0 && m.cpu_cores < 1.05, "{p:?}: {m:?}");
        assert_eq!(allowed(), before, "the caller's affinity is restored");
    }
    assert!(measure_isolated(Path::Tcp, 1, Duration::from_millis(10), Some(0.0)).is_err());
}

#[test]
fn packets_come_back_aggregated() {
    if !ready() {
        return;
    }
    let x = latency::xdp(2000.0, Duration::from_millis(300)).unwrap();
    let t = latency::tcp(2000.0, Duration::from_millis(300)).unwrap();
    eprintln!("xdp {x:?}\ntcp {t:?}");
    for l in [x, t] {
        assert!(l.sent >= 500, "{l:?}");
        assert_eq!(l.returned, l.sent, "no loss at 2000 packets/s");
        assert!(l.mean_us > 0.0 && l.mean_us < 1e6);
    }
}
