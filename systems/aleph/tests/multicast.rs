//! aleph-fig8's multicast node (XDP and TCP): every receiver gets every packet exactly once and
//! unchanged, the paced sender reaches its offered rate at a low rate, the node's CPU is counted,
//! and the namespaces are gone afterwards (also after a refused setup). Needs root, clang and
//! libbpf and two cores: skipped with a message without them, required when `CI` is set.

use inabench_aleph::testbed::multicast::{
    COPY_BITS, Measure, Options, System, gradient_packet, grads, measure, result_packet,
    split_cores,
};
use inabench_xdp::netns::namespaces;
use inabench_xdp::proto::{Kind, Packet};
use std::sync::Mutex;
use std::time::Duration;

/// One star at a time: the measurements pin threads and read per-core counters.
static SERIAL: Mutex<()> = Mutex::new(());

fn ready() -> bool {
    let why = inabench_xdp::unavailable().or_else(|| {
        split_cores(1)
            .err()
            .map(|e| format!("{e} (the node needs a core of its own)"))
    });
    match why {
        None => true,
        Some(why) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must run the multicast tests as root with clang, libbpf and two cores: {why}"
            );
            eprintln!("skipped: {why}");
            false
        }
    }
}

/// Namespaces of this process's stars.
fn ours() -> Vec<String> {
    let tag = format!("inb{:x}xs", std::process::id());
    namespaces()
        .unwrap()
        .into_iter()
        .filter(|n| n.starts_with(&tag))
        .collect()
}

fn options(system: System, egress_gbps: f64, secs: f64, segments: u32) -> Options {
    let (node_cores, other_cores) = split_cores(1).unwrap();
    Options {
        system,
        receivers: 4,
        egress_gbps,
        duration: Duration::from_secs_f64(secs),
        node_cores,
        other_cores,
        segments,
    }
}

/// Low rate, every packet in its own slot: nothing may be lost, doubled or changed.
fn exact(system: System) -> Measure {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // 4 x 528-byte copies of 2000 packets/s: about 34 Mbit/s of egress for 1.5 s
    let egress = 2000.0 * 4.0 * COPY_BITS / 1e9;
    let m = measure(&options(system, egress, 1.5, 8192)).unwrap();
    eprintln!("{system:?}: {m:?}");
    assert!(ours().is_empty(), "namespaces left: {:?}", ours());
    assert!(m.sent >= 2800 && m.sent < 8192, "{m:?}");
    assert_eq!(m.delivered, 4 * m.sent, "{m:?}");
    assert_eq!(m.duplicates, 0, "{m:?}");
    assert_eq!(m.stale_slots, 0, "{m:?}");
    assert_eq!(m.loss_pct, 0.0);
    // the paced sender's rate, seen at the receivers
    let rel = m.achieved_gbps / m.offered_gbps;
    assert!((0.93..1.05).contains(&rel), "achieved/offered {rel}: {m:?}");
    assert!((1.5..1.9).contains(&m.seconds), "{m:?}");
    // the node did work, and no more than its one core can
    assert!(m.node_cpu_s > 0.0 && m.cpu_usage_pct > 0.0, "{m:?}");
    assert!(m.cpu_usage_pct < 100.0, "{m:?}");
    m
}

#[test]
fn xdp_multicast_delivers_every_packet_exactly_once() {
    if !ready() {
        return;
    }
    exact(System::Xdp);
}

#[test]
fn tcp_multicast_delivers_every_packet_exactly_once() {
    if !ready() {
        return;
    }
    exact(System::Tcp);
}

#[test]
fn a_refused_setup_leaves_nothing_behind() {
    if !ready() {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for system in [System::Xdp, System::Tcp] {
        let mut o = options(system, 0.01, 0.2, 64);
        o.receivers = 0;
        assert!(measure(&o).is_err());
        let mut o = options(system, -1.0, 0.2, 64);
        assert!(measure(&o).is_err());
        o.egress_gbps = 0.01;
        o.node_cores.clear();
        assert!(measure(&o).is_err());
        assert!(ours().is_empty(), "namespaces left: {:?}", ours());
    }
    // a failure after the namespaces exist: a map the kernel cannot hold
    let o = options(System::Xdp, 0.01, 0.2, 1 << 30);
    assert!(measure(&o).is_err());
    assert!(ours().is_empty(), "namespaces left: {:?}", ours());
}

#[test]
fn packets_and_cores() {
    // what the sender sends and what the receivers must get: the same gradients, the round and
    // segment from the sequence number, marked as an aggregate
    let s = 16;
    let g = Packet::parse(&gradient_packet(37, s)).unwrap();
    assert_eq!(
        (g.kind, g.worker, g.round, g.segment),
        (Kind::Gradient, 0, 3, 5)
    );
    let r = Packet::parse(&result_packet(37, s)).unwrap();
    assert_eq!(
        (r.kind, r.worker, r.round, r.segment),
        (Kind::Result, 0xff, 3, 5)
    );
    assert_eq!(g.grads, r.grads);
    assert_eq!(g.grads, grads(5));
    assert_ne!(grads(5), grads(6));
    assert_ne!(gradient_packet(5, s), gradient_packet(5 + 16, s));
    if let Ok((node, other)) = split_cores(64) {
        assert!(!node.is_empty() && !other.is_empty());
        assert!(node.iter().all(|c| !other.contains(c)));
    }
    assert!(split_cores(0).is_err());
}
