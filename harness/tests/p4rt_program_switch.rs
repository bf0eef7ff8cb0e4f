//! A testbed run writes SwitchML's job tables (#36 item 6, the testbed path): the harness's
//! `p4switch::program_switch`, which a run with a P4Runtime switch in its testbed calls before
//! the first point, pushes SwitchML's program with its job tables and writes a job of the run's
//! workers (`receive_udp`, `dst_addr`, the job's multicast group) besides the forwarding; the
//! switch's state then configures a data plane (`inabench_p4rt::dataplane::DataPlane::of`, the
//! software switch the entries drive) that aggregates the suite's SwitchML workers, sums exact.
//! A switch that held only the old forwarding pipeline would run no job here. In process (the
//! soft P4Runtime server on loopback); well under a second.

use inabench_fabric::{Endpoint, NodeId};
use inabench_ina::common::{AllReduceConfig, System, reference_sum};
use inabench_ina::switchml::SwitchMl;
use inabench_p4rt::dataplane::{DataPlane, RuleAction};
use inabench_p4rt::entries::switchml_workers;
use inabench_p4rt::program;
use inabench_p4rt::server::{SoftSwitch, spawn_local};
use std::path::Path;

fn testbed(addr: &str, programs: &str) -> inabench::testbed::Testbed {
    let yaml = format!(
        "name: lab\nhosts: [{{name: localhost, role: [runner]}}]\nswitch:\n  kind: tofino\n  p4runtime:\n    address: \"{addr}\"\n{programs}"
    );
    inabench::testbed::Testbed::from_yaml(Path::new("lab.yaml"), &yaml).expect("testbed")
}

/// A soft switch serving P4Runtime on loopback; the runtime keeps it serving.
fn switch() -> (tokio::runtime::Runtime, SoftSwitch, String) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (sw, _packet_outs) = SoftSwitch::new(1);
    let addr = rt
        .block_on(spawn_local(sw.clone()))
        .expect("serve")
        .to_string();
    (rt, sw, addr)
}

fn which(tool: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(tool))
            .find(|f| f.is_file())
    })
}

/// The suite's SwitchML workers of `cfg` through the data plane by hand, worker `w` on port `w`
/// (the plan's ports): each worker's result, and every frame the data plane sent.
#[allow(clippy::type_complexity)]
fn run_sent(dp: &mut dyn Endpoint, cfg: &AllReduceConfig) -> (Vec<Option<Vec<i32>>>, Vec<Vec<u8>>) {
    let mut sent = Vec::new();
    let mut workers = SwitchMl.build(cfg).expect("build").workers;
    let plan = switchml_workers(cfg.workers);
    for now in 0..100_000u64 {
        let mut moved = false;
        for (w, wk) in workers.iter_mut().enumerate() {
            while let Some(t) = wk.poll_transmit(now) {
                moved = true;
                dp.handle_packet(now, plan[w].port as NodeId, &t.bytes);
            }
        }
        while let Some(t) = dp.poll_transmit(now) {
            moved = true;
            let w = plan
                .iter()
                .position(|a| a.port as NodeId == t.to)
                .expect("a result goes to a worker's port");
            // with its worker's addresses, as dst_addr says
            assert_eq!(t.bytes[..6], plan[w].mac);
            assert_eq!(t.bytes[30..34], plan[w].ip);
            workers[w].handle_packet(now, cfg.workers as NodeId, &t.bytes);
            sent.push(t.bytes);
        }
        if !moved {
            break;
        }
    }
    (workers.iter().map(|w| w.result()).collect(), sent)
}

#[test]
fn a_testbed_run_writes_the_job_that_aggregates_its_workers() {
    let (_rt, sw, addr) = switch();
    let tb = testbed(&addr, "");
    let p4 = tb.switch.p4runtime.as_ref().expect("p4runtime");
    let lines =
        inabench::p4switch::program_switch(p4, &["switchml".to_string()], 3).expect("programmed");
    let l = &lines[0];
    println!("{l}");
    for part in [
        "pipeline `switchml` (100 registers, 4 tables",
        "3 forwarding entries read back",
        "3 receive_udp entries, 3 dst_addr entries, multicast group 1 of 3 replicas, switch_mac_and_ip 02:00:00:01:00:04 10.0.1.4 (SwitchML's synthetic switch address, node 3) read back",
        "a job of 3 workers (128 slots of 48 values), its results from 02:00:00:01:00:04 10.0.1.4",
        "SwitchML's synthetic addresses",
    ] {
        assert!(l.contains(part), "{part:?} in {l}");
    }

    // the switch's state is a job of 3 workers at the plan's addresses
    let plan = switchml_workers(3);
    let table = sw.job_table().expect("a job table");
    assert_eq!(table.rules.len(), 3);
    for r in &table.rules {
        let RuleAction::Worker {
            id,
            num_workers,
            mgid,
            bitmap,
        } = r.action
        else {
            panic!("a drop entry: {r:?}");
        };
        let a = plan[usize::from(id)];
        assert_eq!((num_workers, mgid, bitmap), (3, 1, 1 << id));
        let be = |b: &[u8]| b.iter().fold(0u64, |x, v| x << 8 | u64::from(*v));
        assert!(r.src_mac.matches(be(&a.mac)) && r.src_mac.mask == (1 << 48) - 1);
        assert!(r.src_ip.matches(be(&a.ip)) && r.src_ip.mask == 0xffff_ffff);
        assert!(r.udp_dst_port.matches(48864));
        assert_eq!(table.results.get(&id), Some(&(a.mac, a.ip)));
    }
    assert_eq!(table.groups.get(&1), Some(&vec![(0, 0), (1, 1), (2, 2)]));
    // the switch's own address: SwitchML's synthetic one (node 3), written, so no note
    let synthetic = inabench_ina::switchml::synthetic_address(3);
    assert_eq!(table.switch, Some(synthetic));

    // the data plane those entries configure sums the suite's SwitchML workers exactly
    let mut dp = DataPlane::of(&sw, 100).expect("the entries make a job");
    assert_eq!(
        dp.workers(),
        Some(3),
        "the old forwarding-only pipeline runs no job"
    );
    let cfg = AllReduceConfig {
        workers: 3,
        // three rounds of the 128-slot pool and a short last chunk
        elements: 48 * 128 * 3 + 5,
        seed: 11,
        line_rate_bps: 100e9,
        mtu: 1500,
        timeout_ns: u64::MAX / 4,
        knobs: vec![],
    };
    assert_eq!((dp.source(), dp.note()), (Some(synthetic), None));
    let want = reference_sum(cfg.seed, 3, cfg.elements);
    // frame for frame what SwitchML's own switch (no tables, the synthetic plan) sends: the
    // run without a testbed address sends what it sent before the switch had an address entry
    let mut plain = SwitchMl.build(&cfg).expect("build").switch;
    let (_, reference) = run_sent(&mut *plain, &cfg);
    let (got, sent) = run_sent(&mut dp, &cfg);
    assert_eq!(sent.len(), reference.len());
    assert!(
        sent == reference,
        "the results differ from the switch's without tables"
    );
    for (w, r) in got.iter().enumerate() {
        assert!(r.as_deref() == Some(&want[..]), "worker {w}'s sum");
    }
    let c = dp.counters();
    assert!(
        c.contains(&("misses", 0)) && c.contains(&("dropped", 0)),
        "{c:?}"
    );

    // programming again (a second run) starts from a fresh pipeline: the same job, not twice
    let again =
        inabench::p4switch::program_switch(p4, &["switchml".to_string()], 3).expect("again");
    assert!(again[0].contains("a job of 3 workers"), "{}", again[0]);
}

#[test]
fn a_testbed_p4info_without_job_tables_or_a_job_the_switch_cannot_run_gets_forwarding_only() {
    let (_rt, sw, addr) = switch();
    // the testbed's P4Info (binary) is the forwarding-only program: pushed as given, no job
    let d = tempfile::tempdir().expect("tmp");
    let bin = d.path().join("switchml.p4info.bin");
    std::fs::write(
        &bin,
        prost::Message::encode_to_vec(&program::switchml(128).p4info()),
    )
    .expect("write");
    let tb = testbed(
        &addr,
        &format!(
            "    programs:\n      switchml: {{p4info: \"{}\"}}\n",
            bin.display()
        ),
    );
    let p4 = tb.switch.p4runtime.as_ref().expect("p4runtime");
    let lines =
        inabench::p4switch::program_switch(p4, &["switchml".to_string()], 3).expect("programmed");
    let l = &lines[0];
    println!("{l}");
    assert!(
        l.contains("3 forwarding entries read back")
            && l.contains("no job written (the P4Info has no job tables")
            && l.contains("SwitchMLIngress.receive_udp")
            && l.contains("does not aggregate"),
        "{l}"
    );
    assert_eq!(DataPlane::of(&sw, 100).expect("forwarding").workers(), None);

    // one worker: the suite's program, but no job a SwitchML switch runs
    let tb = testbed(&addr, "");
    let p4 = tb.switch.p4runtime.as_ref().expect("p4runtime");
    let lines =
        inabench::p4switch::program_switch(p4, &["switchml".to_string()], 1).expect("programmed");
    assert!(
        lines[0].contains("no job written (a job of 1 workers: SwitchML's switch takes 2..=32)"),
        "{}",
        lines[0]
    );
    assert_eq!(DataPlane::of(&sw, 100).expect("forwarding").workers(), None);
}

/// A testbed whose worker hosts state their data addresses gets its job written at them, for
/// the largest `workers` of the run's points (one job on the switch at a time): the job's
/// entries name the testbed's addresses (in no rank order) and the data plane they configure
/// sums SwitchML's workers built at those addresses exactly; a testbed naming fewer workers
/// than the largest point is refused in one sentence; one stating none keeps the synthetic
/// addresses.
#[test]
fn a_testbeds_worker_addresses_make_the_job_for_the_largest_point() {
    let (_rt, sw, addr) = switch();
    let host = |name: &str, role: &str, mac: &str, ip: &str| {
        format!("  - {{name: {name}, role: [{role}], data: {{mac: '{mac}', ipv4: {ip}}}}}\n")
    };
    let hosts = [
        host(
            "localhost",
            "runner, switch",
            "52:54:00:ab:00:fe",
            "172.16.0.254",
        ),
        host("w0", "worker", "52:54:00:ab:00:42", "192.168.7.42"),
        host("w1", "worker", "52:54:00:ab:00:09", "172.16.0.9"),
        host("w2", "worker", "52:54:00:ab:00:03", "192.168.7.3"),
        host("w3", "worker", "52:54:00:ab:00:77", "10.9.8.7"),
    ];
    let yaml = |hosts: &[String]| {
        format!(
            "name: lab\nhosts:\n{}switch:\n  kind: tofino\n  p4runtime:\n    address: \"{addr}\"\n",
            hosts.concat()
        )
    };
    let tb = inabench::testbed::Testbed::from_yaml(Path::new("lab.yaml"), &yaml(&hosts))
        .expect("testbed");
    let point = |w: i64| inabench_core::plan::Point {
        id: format!("p{w}"),
        system: "switchml".into(),
        params: [("workers".to_string(), inabench_core::value::Scalar::Int(w))].into(),
        repetitions: 1,
        warmup: 0,
    };
    let points = [point(2), point(4), point(3)];
    assert_eq!(inabench::p4switch::largest_workers(&points, 2), 4);
    assert_eq!(
        inabench::p4switch::largest_workers(&[], 6),
        6,
        "no grid: the fixed value"
    );
    let (workers, stated) = inabench::p4switch::job_workers(&tb, 4).expect("4 workers");
    assert!(stated);
    assert_eq!(
        workers.iter().map(|w| (w.ip, w.port)).collect::<Vec<_>>(),
        vec![
            ([192, 168, 7, 42], 0),
            ([172, 16, 0, 9], 1),
            ([192, 168, 7, 3], 2),
            ([10, 9, 8, 7], 3)
        ]
    );
    let p4 = tb.switch.p4runtime.as_ref().expect("p4runtime");
    // the switch's own address: the testbed's switch host's
    let (switch, stated) = inabench::p4switch::job_switch(&tb, 4).expect("the switch's address");
    let mine = ([0x52, 0x54, 0, 0xab, 0, 0xfe], [172, 16, 0, 254]);
    assert_eq!((switch, stated), (mine, true));
    let lines =
        inabench::p4switch::program_switch_at(p4, &["switchml".to_string()], &workers, switch)
            .expect("programmed");
    for part in [
        "a job of 4 workers",
        "the testbed's addresses",
        "switch_mac_and_ip 52:54:00:ab:00:fe 172.16.0.254 (the testbed's switch address) read back",
    ] {
        assert!(lines[0].contains(part), "{part:?} in {}", lines[0]);
    }
    let table = sw.job_table().expect("a job table");
    let be = |b: &[u8]| b.iter().fold(0u64, |x, v| x << 8 | u64::from(*v));
    for (w, a) in workers.iter().enumerate() {
        assert!(
            table.rules.iter().any(|r| r.src_ip.matches(be(&a.ip))
                && r.src_mac.matches(be(&a.mac))
                && matches!(r.action, RuleAction::Worker { id, num_workers: 4, .. } if usize::from(id) == w)),
            "worker {w}'s receive_udp entry"
        );
    }
    // the data plane sums SwitchML's workers built at the testbed's addresses exactly
    let plan = inabench_workloads::netreduce::rig::address_plan(&tb)
        .expect("valid")
        .expect("addresses");
    let cfg = AllReduceConfig {
        workers: 4,
        elements: 48 * 128 + 5,
        seed: 2,
        line_rate_bps: 100e9,
        mtu: 1500,
        timeout_ns: u64::MAX / 4,
        knobs: vec![],
    };
    let mut dp = DataPlane::of(&sw, 100).expect("the entries make a job");
    assert_eq!((dp.source(), dp.note()), (Some(mine), None));
    let mut ws = SwitchMl.build_at(&cfg, Some(&plan)).expect("build").workers;
    let mut results = Vec::new();
    for now in 0..100_000u64 {
        let mut moved = false;
        for (w, wk) in ws.iter_mut().enumerate() {
            while let Some(t) = wk.poll_transmit(now) {
                moved = true;
                dp.handle_packet(now, w as NodeId, &t.bytes);
            }
        }
        while let Some(t) = dp.poll_transmit(now) {
            moved = true;
            let w = t.to as usize;
            assert_eq!(t.bytes[30..34], workers[w].ip, "to worker {w}'s address");
            // from the testbed's switch address, the one the workers send to
            assert_eq!(t.bytes[6..12], mine.0, "from the switch's MAC");
            assert_eq!(t.bytes[26..30], mine.1, "from the switch's address");
            assert!(
                inabench_wire::ipv4::Repr::parse(&t.bytes[14..]).is_ok(),
                "a valid IPv4 header"
            );
            ws[w].handle_packet(now, 4, &t.bytes);
            results.push(t.bytes);
        }
        if !moved {
            break;
        }
    }
    let want = reference_sum(cfg.seed, 4, cfg.elements);
    for (w, wk) in ws.iter().enumerate() {
        assert!(
            wk.result().as_deref() == Some(&want[..]),
            "worker {w}'s sum"
        );
    }
    // two rounds of the 128-slot pool (the second one value) to each of 4 workers
    assert_eq!(results.len(), 4 * 129);
    // and as Wireshark reads them: from the switch's MAC and address, to the workers', the
    // IPv4 header checksum good, SwitchML's UDP port
    match which("tshark") {
        None => eprintln!("tshark not installed: the results were checked by the wire module only"),
        Some(tshark) => {
            let dir = tempfile::tempdir().expect("tempdir");
            let pcap = dir.path().join("results.pcap");
            let mut w = inabench_wire::pcap::PcapWriter::new(std::io::BufWriter::new(
                std::fs::File::create(&pcap).expect("create"),
            ))
            .expect("pcap");
            for (i, f) in results.iter().enumerate() {
                w.write_packet(i as u64 * 1_000, f).expect("write");
            }
            w.flush().expect("flush");
            let o = std::process::Command::new(tshark)
                .args(["-o", "ip.check_checksum:TRUE", "-r"])
                .arg(&pcap)
                .args(["-T", "fields", "-E", "separator=,"])
                .args(["-e", "eth.src", "-e", "ip.src", "-e", "ip.dst"])
                .args(["-e", "ip.checksum.status", "-e", "udp.dstport"])
                .output()
                .expect("tshark runs");
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            let rows: Vec<String> = String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(str::to_string)
                .collect();
            assert_eq!(rows.len(), results.len());
            let to: Vec<String> = workers
                .iter()
                .map(|w| std::net::Ipv4Addr::from(w.ip).to_string())
                .collect();
            for r in &rows {
                let f: Vec<&str> = r.split(',').collect();
                assert_eq!(
                    (f[0], f[1], f[3], f[4]),
                    ("52:54:00:ab:00:fe", "172.16.0.254", "1", "48864"),
                    "{r}"
                );
                assert!(to.iter().any(|t| t == f[2]), "{r}");
            }
            eprintln!(
                "tshark read {} results from the switch's address",
                rows.len()
            );
        }
    }
    // three stated workers for a point of four: refused
    let three = inabench::testbed::Testbed::from_yaml(Path::new("lab.yaml"), &yaml(&hosts[..4]))
        .expect("testbed");
    let e = inabench::p4switch::job_workers(&three, 4).expect_err("too few");
    assert_eq!(
        e.to_string(),
        "the testbed's data addresses for the P4 switch's job: the address plan has 3 workers; the job has 4"
    );
    // a testbed stating none: SwitchML's synthetic addresses
    let (syn, stated) = inabench::p4switch::job_workers(&testbed(&addr, ""), 4).expect("synthetic");
    assert!(!stated);
    assert_eq!(syn, switchml_workers(4));
    assert_eq!(
        inabench::p4switch::job_switch(&testbed(&addr, ""), 4).expect("synthetic"),
        (inabench_ina::switchml::synthetic_address(4), false)
    );
}
