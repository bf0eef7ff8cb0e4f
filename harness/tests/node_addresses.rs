//! A process per node at a testbed's addresses (#36 item 1): the node job carries the address
//! plan (`NodeJob::addresses`, the raw fabric's `RawJob` through its `job`), and every node
//! process builds its own node at it (`System::build_node_at`). On the raw fabric (a namespace
//! per node, veth links; root only, CI runs as root) each addressed Table 6 system sums exactly
//! at a plan of non-synthetic addresses, and a capture on worker 0's link to the switch sees only
//! IPv4 frames between the plan's hosts, worker 0's from its own MAC and IPv4 address; the same
//! job without a plan is seen at the synthetic 10.x addresses. On udp processes NetReduce, whose
//! accelerator drops a worker's frame from an address it does not know, sums exactly at the plan.
//! A job line without a plan is the line it was before the field existed, and such a line reads.

use inabench_fabric::addresses::{AddressPlan, HostAddress, ipv4_gid};
use inabench_fabric::raw::SocketChoice;
use inabench_workloads::raw_node::run_raw_with;
use inabench_workloads::udp_node::{JobAddresses, NodeJob, Spawn, run_udp};
use std::collections::BTreeSet;
use std::path::Path;

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_inabench"))
}

fn host(mac_last: u8, ip: [u8; 4]) -> HostAddress {
    HostAddress {
        interface: Some(format!("eth{mac_last}")),
        mac: [0x52, 0x54, 0, 0xab, 0, mac_last],
        ipv4: ip,
        gid: ipv4_gid(ip),
    }
}

/// Three workers, a switch and a parameter server at addresses none of the systems' synthetic
/// plans use (those are all 10.x).
fn plan() -> AddressPlan {
    AddressPlan::new(
        vec![
            host(0x42, [192, 168, 7, 42]),
            host(0x09, [172, 16, 0, 9]),
            host(0x03, [192, 168, 7, 3]),
        ],
        Some(host(0xfe, [172, 16, 0, 254])),
    )
    .expect("a valid plan")
    .with_servers(vec![host(0xc8, [192, 168, 7, 200])])
}

fn job(system: &str, plan: Option<&AddressPlan>) -> NodeJob {
    NodeJob {
        bind_any: true,
        addresses: plan.and_then(JobAddresses::of),
        ..NodeJob::for_config(
            system,
            &inabench_ina::common::AllReduceConfig {
                workers: 3,
                elements: 20_000,
                seed: 5,
                line_rate_bps: 100e9,
                mtu: 1024,
                timeout_ns: 20_000_000,
                knobs: vec![("window".into(), 2.0), ("msg_packets".into(), 16.0)],
            },
            &Default::default(),
            "event",
            30_000,
        )
    }
}

#[test]
fn a_job_line_carries_the_plan_and_a_line_without_one_is_unchanged() {
    let p = plan();
    let with = job("atp", Some(&p));
    let back = with
        .addresses
        .as_ref()
        .expect("a stated plan")
        .plan()
        .expect("parses");
    assert_eq!(back, p, "the plan survives its job line");
    let line = serde_json::to_string(&with).expect("json");
    assert!(
        line.contains("\"at\":\"192.168.7.42@52:54:00:ab:00:42\""),
        "{line}"
    );
    let read: NodeJob = serde_json::from_str(&line).expect("reads");
    assert_eq!(read.addresses, with.addresses);
    // without a plan: no `addresses` key, and a line of before the field reads as no plan
    let none = serde_json::to_string(&job("atp", None)).expect("json");
    assert!(!none.contains("addresses"), "{none}");
    let old: NodeJob = serde_json::from_str(&none).expect("an old line reads");
    assert!(old.addresses.is_none());
    // the synthetic plan is stated by stating none
    assert!(JobAddresses::of(&AddressPlan::synthetic()).is_none());
    // a host that does not parse is one sentence
    let mut bad = with.addresses.clone().expect("plan");
    bad.workers[1].at = "172.16.0.9".into();
    assert_eq!(
        bad.plan().expect_err("no MAC").to_string(),
        "the job's address plan: worker 1's address `172.16.0.9` is not A.B.C.D@aa:bb:cc:dd:ee:ff"
    );
}

/// (source, destination) IPv4 addresses.
type IpPairs = BTreeSet<([u8; 4], [u8; 4])>;
/// (source MAC, source IPv4 address).
type Senders = BTreeSet<([u8; 6], [u8; 4])>;

/// Every captured frame's (source, destination) IPv4 addresses, and worker 0's own frames'
/// (source MAC, source IPv4).
fn addresses_seen(frames: &[inabench_fabric::raw::Captured]) -> (IpPairs, Senders) {
    let mut pairs = BTreeSet::new();
    let mut own = BTreeSet::new();
    for f in frames {
        let b = &f.bytes;
        // an IPv4 header after Ethernet: ethertype 0x0800, or ATP's own 0x0700 (its frames
        // are IPv4 with protocol 253 under it)
        assert!(
            b.len() >= 34 && matches!(b[12..14], [0x08, 0x00] | [0x07, 0x00]) && b[14] == 0x45,
            "not IPv4: {b:02x?}"
        );
        let ip = |at: usize| -> [u8; 4] { b[at..at + 4].try_into().expect("4 bytes") };
        pairs.insert((ip(26), ip(30)));
        if f.outgoing {
            own.insert((b[6..12].try_into().expect("6 bytes"), ip(26)));
        }
    }
    (pairs, own)
}

#[test]
fn every_addressed_system_runs_node_processes_at_the_plan_on_the_raw_fabric() {
    if !inabench_fabric::netns::is_root() {
        eprintln!("skipped: the raw fabric's namespaces and AF_PACKET sockets need root");
        return;
    }
    let p = plan();
    let known: BTreeSet<[u8; 4]> = (0..3)
        .filter_map(|i| p.worker(i))
        .chain(p.switch.clone())
        .chain(p.servers.clone())
        .map(|h| h.ipv4)
        .collect();
    let w0 = p.worker(0).expect("worker 0");
    for sys in ["switchml", "atp", "netreduce", "switchml_rdma"] {
        // worker 0's link to node 3 (the switch, or NetReduce's accelerator)
        let out =
            run_raw_with(&job(sys, Some(&p)), exe(), Some((0, 3)), SocketChoice::Auto).expect(sys);
        assert!(out.finished, "{sys}: {:?}", out.nodes);
        let workers: Vec<_> = out.nodes.iter().filter(|n| n.is_worker).collect();
        assert_eq!(workers.len(), 3, "{sys}");
        assert!(
            workers.iter().all(|w| w.correct),
            "{sys}: a worker's sum differs from the reference: {workers:?}"
        );
        let (pairs, own) = addresses_seen(&out.captured);
        assert!(!pairs.is_empty(), "{sys}: nothing captured");
        for (s, d) in &pairs {
            assert!(
                known.contains(s) && known.contains(d),
                "{sys}: a frame from {s:?} to {d:?}, outside the plan"
            );
        }
        assert_eq!(
            own,
            [(w0.mac, w0.ipv4)].into(),
            "{sys}: worker 0 sends from its own MAC and IPv4 address"
        );
        eprintln!(
            "{sys} at the plan: {} frames captured on worker 0's link, address pairs {:?}",
            out.captured.len(),
            pairs
        );
    }
    // the same job without a plan: the synthetic numbering (10.x), none of the plan's
    let out = run_raw_with(
        &job("switchml", None),
        exe(),
        Some((0, 3)),
        SocketChoice::Auto,
    )
    .expect("synthetic");
    assert!(out.finished);
    let (pairs, _) = addresses_seen(&out.captured);
    assert!(
        pairs.iter().all(|(s, d)| s[0] == 10 && d[0] == 10),
        "{pairs:?}"
    );
}

#[test]
fn netreduce_node_processes_sum_exactly_at_the_plan_on_udp() {
    let p = plan();
    let out = run_udp(
        &NodeJob {
            bind_any: false,
            ..job("netreduce", Some(&p))
        },
        &Spawn::Processes(exe().to_path_buf()),
    )
    .expect("udp processes");
    assert!(out.finished, "{:?}", out.nodes);
    let workers: Vec<_> = out.nodes.iter().filter(|n| n.is_worker).collect();
    assert_eq!(workers.len(), 3);
    assert!(workers.iter().all(|w| w.correct), "{workers:?}");
    // the plan is refused before any node starts where it cannot address the job
    let mut four = job("netreduce", Some(&p));
    four.workers = 4;
    let e = run_udp(&four, &Spawn::Processes(exe().to_path_buf()))
        .expect_err("3 addresses for 4 workers")
        .to_string();
    assert_eq!(e, "the address plan has 3 workers; the job has 4");
}

mod support;

/// `reproduce netreduce-table6` on a testbed that states its hosts' data addresses (no rig):
/// the emulated class's node processes build at them (the manifest's line lists the hosts), and
/// every system's rows are there, each point's sums checked by its workers.
#[test]
fn a_table6_run_on_a_testbed_with_data_addresses_builds_its_node_processes_at_them() {
    let d = tempfile::tempdir().expect("a scratch folder");
    let host = |name: &str, role: &str, mac: &str, ip: &str| {
        format!("  - {{name: {name}, role: [{role}], data: {{mac: '{mac}', ipv4: {ip}}}}}\n")
    };
    let tb = d.path().join("lab.yaml");
    std::fs::write(
        &tb,
        format!(
            "name: lab\nhosts:\n  - {{name: localhost, role: [runner]}}\n{}{}{}{}{}switch:\n  kind: soft\n",
            host("w0", "worker", "52:54:00:ab:00:42", "192.168.7.42"),
            host("w1", "worker", "52:54:00:ab:00:09", "172.16.0.9"),
            host("w2", "worker", "52:54:00:ab:00:03", "192.168.7.3"),
            host("sw", "switch", "52:54:00:ab:00:fe", "172.16.0.254"),
            host("ps", "ps", "52:54:00:ab:00:c8", "192.168.7.200"),
        ),
    )
    .expect("testbed file");
    let results = d.path().join("results");
    let o = std::process::Command::new(exe())
        .args(["reproduce", "netreduce-table6", "--fidelity", "emulated"])
        .args(["--set", "host_stack=nic", "--set", "workers=3"])
        .args(["--set", "elements=43516"])
        .args(["--repetitions", "1", "--warmup", "0"])
        .args(["--headless", "--format", "json", "--testbed"])
        .arg(&tb)
        .env("INABENCH_RESULTS", &results)
        .output()
        .expect("inabench runs");
    assert!(
        o.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let run = support::only_run_dir(&results);
    let rows = support::rows_of(&run);
    for sys in ["netreduce", "switchml_rdma", "atp", "switchml"] {
        assert!(
            rows.iter()
                .any(|r| r["system"] == sys && r["metric"] == "throughput"),
            "no {sys} throughput row"
        );
    }
    let m = support::manifest_of(&run);
    assert_eq!(m["status"], "complete", "{m}");
    let drivers = m["drivers"].to_string();
    assert!(
        drivers.contains("netreduce.table6's node processes (udp, raw) build their nodes at the testbed file's data addresses: worker 0 192.168.7.42@52:54:00:ab:00:42; worker 1 172.16.0.9@52:54:00:ab:00:09; worker 2 192.168.7.3@52:54:00:ab:00:03; switch 172.16.0.254@52:54:00:ab:00:fe; server 0 192.168.7.200@52:54:00:ab:00:c8"),
        "{drivers}"
    );
}
