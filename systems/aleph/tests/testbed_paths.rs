//! The single-aggregator measurements of aleph-fig5, -table2 and -fig7: every returned aggregate
//! is checked inside (a wrong one is an error) and the affinity limit is lifted afterwards (the
//! clusterings the testbed uses: workloads/tests/aleph_testbed_clustering.rs). Needs root, clang
//! and libbpf: skipped with a message without them, required when `CI` is set.

use inabench_aleph::testbed::cpu::{Path, measure};
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
