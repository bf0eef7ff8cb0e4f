//! The udp fabric with every node in its own network namespace (root only; CI runs as root):
//! exact sums, and a per-host tbf limit that really limits.

use inabench_workloads::udp_node::{NodeJob, Placement, Spawn, run_udp_placed};

fn job() -> NodeJob {
    NodeJob {
        system: "netreduce".into(),
        node: 0,
        workers: 6,
        elements: 262_144,
        seed: 3,
        line_rate_bps: 100e9,
        mtu: 1024,
        timeout_ns: 50_000_000,
        knobs: vec![("window".into(), 2.0), ("msg_packets".into(), 170.0)],
        io: "event".into(),
        loss: 0.0,
        duplicate: 0.0,
        reorder: 0.0,
        reorder_delay_ns: 0,
        fault_seed: 1,
        deadline_ms: 60_000,
        bind_any: false,
        addresses: None,
    }
}

#[test]
fn netreduce_in_namespaces_sums_exactly_at_the_link_rate() {
    if !inabench_fabric::netns::is_root() {
        eprintln!("skipped: network namespaces need root");
        return;
    }
    let spawn = Spawn::Processes(env!("CARGO_BIN_EXE_inabench").into());
    let rate = 200.0;
    let out = run_udp_placed(
        &job(),
        &spawn,
        Placement::Netns {
            rate_mbit: Some(rate),
        },
    )
    .expect("run in namespaces");
    assert!(out.finished);
    let workers: Vec<_> = out.nodes.iter().filter(|n| n.is_worker).collect();
    assert!(
        workers.iter().all(|w| w.correct),
        "every sum is the reference"
    );
    // everything the workers send goes through the switch host's one link: what it received
    // (frames, without the UDP/IP/Ethernet that carry them) cannot exceed the link's rate
    let switch = out
        .nodes
        .iter()
        .find(|n| n.switch_overhead.is_some())
        .expect("switch");
    let bits = switch.bytes_rx as f64 * 8.0;
    let mbit = bits / out.duration.as_secs_f64() / 1e6;
    let retx: u64 = workers.iter().map(|w| w.retransmissions).sum();
    eprintln!(
        "{mbit:.1} Mbit/s into the switch host over its {rate} Mbit/s link ({retx} retransmissions)"
    );
    assert!(
        mbit <= rate * 1.1,
        "{mbit} Mbit/s through a {rate} Mbit/s link"
    );
    assert!(
        mbit >= rate * 0.4,
        "{mbit} Mbit/s: the link should be the bottleneck"
    );
    // and nothing is left behind
    let list = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip");
    let mine = format!("inb{:x}x", std::process::id());
    assert!(!String::from_utf8_lossy(&list.stdout).contains(&mine));
}
