//! The raw fabric (AF_XDP or AF_PACKET on veth links between network namespaces, one process
//! per node; root only, CI runs as root): every Table 6 system sums exactly on each socket kind
//! forced and every node reports the kind that ran; `auto` falls back to AF_PACKET where AF_XDP
//! cannot be used and says why, and a forced AF_XDP that cannot be used fails with the reason;
//! NetReduce also under loss, and NetReduce's frames on a worker's link are RoCEv2 with a valid
//! ICRC to the suite's wire module and (where tshark is installed) to Wireshark's dissector. A
//! raw run through the CLI stores the kind that ran in its rows and manifest.

use inabench_fabric::raw::{SocketChoice, SocketsRan};
use inabench_workloads::raw_node::{RawOutcome, roce_headers, run_raw, run_raw_with, write_pcap};
use inabench_workloads::udp_node::NodeJob;
use std::path::Path;

mod support;

fn job(system: &str, loss: f64) -> NodeJob {
    NodeJob {
        system: system.into(),
        node: 0,
        workers: 3,
        elements: 20_000,
        seed: 5,
        line_rate_bps: 100e9,
        mtu: 1024,
        timeout_ns: 20_000_000,
        knobs: vec![("window".into(), 2.0), ("msg_packets".into(), 16.0)],
        io: "event".into(),
        loss,
        duplicate: 0.0,
        reorder: 0.0,
        reorder_delay_ns: 0,
        fault_seed: 1,
        deadline_ms: 30_000,
        bind_any: true,
        addresses: None,
    }
}

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_inabench"))
}

/// The run's namespaces (and with them its links) are gone.
fn no_namespaces_left(out: &RawOutcome) {
    let list = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip");
    let list = String::from_utf8_lossy(&list.stdout).to_string();
    assert!(!out.namespaces.is_empty());
    assert!(
        out.namespaces.iter().all(|n| !list.contains(n.as_str())),
        "{list}"
    );
}

#[test]
fn every_table6_system_sums_exactly_on_the_raw_fabric() {
    if !inabench_fabric::netns::is_root() {
        eprintln!("skipped: the raw fabric's namespaces and AF_PACKET sockets need root");
        return;
    }
    for (socket, label) in [
        (SocketChoice::AfXdp, "af_xdp(copy)"),
        (
            SocketChoice::AfPacket,
            "af_packet (af_xdp: not tried: af_packet was asked)",
        ),
    ] {
        for sys in ["netreduce", "switchml_rdma", "atp", "switchml"] {
            sums_exactly(sys, socket, label);
        }
    }
}

fn sums_exactly(sys: &str, socket: SocketChoice, label: &str) {
    {
        let out = run_raw_with(&job(sys, 0.0), exe(), None, socket).expect(sys);
        assert!(out.finished, "{sys}: {:?}", out.nodes);
        assert_eq!(out.socket, label, "{sys}");
        let ran = match socket {
            SocketChoice::AfPacket => SocketsRan::AfPacket,
            _ => SocketsRan::AfXdp,
        };
        assert_eq!(out.ran, Some(ran), "{sys}");
        assert!(out.nodes.iter().all(|n| n.offload == label), "{sys}");
        // nothing was lost at a socket (no loss was injected)
        assert!(
            out.nodes.iter().all(|n| n.socket_drops == 0),
            "{sys}: {:?}",
            out.nodes.iter().map(|n| n.socket_drops).collect::<Vec<_>>()
        );
        let workers: Vec<_> = out.nodes.iter().filter(|n| n.is_worker).collect();
        assert_eq!(workers.len(), 3, "{sys}");
        assert!(
            workers.iter().all(|w| w.correct && w.frames_tx > 0),
            "{sys}: a worker's sum differs from the reference: {workers:?}"
        );
        assert!(
            out.nodes.iter().all(|n| n.stopped && n.send_errors == 0),
            "{sys}"
        );
        // no frame was invented on the links (an IPv6 neighbour solicitation would be one):
        // the nodes received at most what they sent (a frame still in flight at the stop is
        // not received)
        let tx: u64 = out.nodes.iter().map(|n| n.frames_tx).sum();
        let rx: u64 = out.nodes.iter().map(|n| n.frames_rx).sum();
        assert!(rx <= tx && rx > 0, "{sys}: {tx} frames sent, {rx} received");
        let retx: u64 = workers.iter().map(|w| w.retransmissions).sum();
        eprintln!(
            "{sys} on {label}: {} nodes, {tx} frames sent, {rx} received, {retx} retransmissions, {:.1} ms",
            out.nodes.len(),
            out.duration.as_secs_f64() * 1e3
        );
        no_namespaces_left(&out);
    }
}

/// Frames larger than an AF_XDP chunk takes (a 4096-byte RoCE MTU: frames up to 4352 bytes
/// accepted, 3840 fit a chunk): `auto` runs AF_PACKET on every link and says why, the sums
/// still exact; AF_XDP forced fails the run with the same reason.
#[test]
fn auto_falls_back_to_af_packet_and_says_why() {
    if !inabench_fabric::netns::is_root() {
        eprintln!("skipped: the raw fabric's namespaces and AF_PACKET sockets need root");
        return;
    }
    let why = "frames up to 4352 bytes do not fit an AF_XDP chunk (3840 bytes at most in copy mode without multi-buffer)";
    let mut j = job("netreduce", 0.0);
    j.mtu = 4096;
    let out = run_raw_with(&j, exe(), None, SocketChoice::Auto).expect("auto");
    assert!(out.finished, "{:?}", out.nodes);
    assert_eq!(out.socket, format!("af_packet (af_xdp: {why})"));
    assert!(out.nodes.iter().filter(|n| n.is_worker).all(|w| w.correct));
    no_namespaces_left(&out);
    let e = run_raw_with(&j, exe(), None, SocketChoice::AfXdp)
        .expect_err("AF_XDP forced on links that cannot take it fails")
        .to_string();
    assert!(
        e.starts_with("the raw fabric could not start: ")
            && e.contains("AF_XDP was asked on r")
            && e.contains(why),
        "{e}"
    );
    eprintln!("forced: {e}");
}

/// A raw Table 6 run through the CLI stores what ran: every row's fabric names the socket kind
/// (`raw-veth/af_xdp` on `auto` here, `raw-veth/af_packet` when `INABENCH_RAW_SOCKET` forces
/// it), and the manifest says the raw fabric (not udp, no udp socket probe) with one line per
/// kind seen and why, whether the points ran in the runner's process or in an agent.
#[test]
fn a_raw_run_stores_the_socket_kind_in_its_rows_and_manifest() {
    if !inabench_fabric::netns::is_root() {
        eprintln!("skipped: the raw fabric's namespaces and AF_PACKET sockets need root");
        return;
    }
    let xdp = "af_xdp(copy) on every link (asked: auto)";
    // the runner's process, then an agent's (the line crosses its control channel)
    for (forced, launcher, label, sockets) in [
        (None, "inproc", "raw-veth/af_xdp", xdp),
        (
            Some("af_packet"),
            "inproc",
            "raw-veth/af_packet",
            "af_packet (af_xdp: not tried: af_packet was asked) (asked: af_packet)",
        ),
        (None, "local", "raw-veth/af_xdp", xdp),
    ] {
        let d = tempfile::tempdir().expect("a scratch folder");
        let results = d.path().join("results");
        let mut c = std::process::Command::new(exe());
        c.args(["reproduce", "netreduce-table6", "--fidelity", "emulated"])
            .args(["--set", "emulated_fabric=raw", "--set", "host_stack=nic"])
            .args(["--set", "workers=3", "--set", "elements=43516"])
            .args([
                "--repetitions",
                "1",
                "--warmup",
                "0",
                "--launcher",
                launcher,
            ])
            .args(["--headless", "--format", "json"])
            .env("INABENCH_RESULTS", &results);
        match forced {
            Some(kind) => c.env("INABENCH_RAW_SOCKET", kind),
            None => c.env_remove("INABENCH_RAW_SOCKET"),
        };
        let o = c.output().expect("inabench runs");
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
                "{label}: no {sys} throughput row"
            );
        }
        let fabrics: std::collections::BTreeSet<&str> =
            rows.iter().filter_map(|r| r["fabric"].as_str()).collect();
        assert_eq!(fabrics.into_iter().collect::<Vec<_>>(), [label]);
        let m = support::manifest_of(&run);
        // the manifest says what the rows ran on (not the planned `raw-veth`)
        assert_eq!(m["fabric"], label, "{m}");
        let drivers: Vec<&str> = m["drivers"]
            .as_array()
            .expect("drivers")
            .iter()
            .filter_map(|d| d.as_str())
            .collect();
        assert!(
            drivers.contains(&format!("emulated: {label} (software)").as_str()),
            "{drivers:?}"
        );
        // no udp socket ran, and none was probed for the manifest
        assert!(!drivers.iter().any(|d| d.contains("udp")), "{drivers:?}");
        // four points, one kind, one line (each distinct line once)
        let raw: Vec<&&str> = drivers
            .iter()
            .filter(|d| d.starts_with("raw fabric sockets"))
            .collect();
        assert_eq!(
            raw,
            [&format!("raw fabric sockets, rows {label}: {sockets}").as_str()],
            "{drivers:?}"
        );
        eprintln!(
            "{label} ({launcher}): {} rows; drivers {drivers:?}",
            rows.len()
        );
    }
}

#[test]
fn netreduce_recovers_loss_on_the_raw_fabric() {
    if !inabench_fabric::netns::is_root() {
        eprintln!("skipped: the raw fabric's namespaces and AF_PACKET sockets need root");
        return;
    }
    let out = run_raw(&job("netreduce", 0.02), exe(), None).expect("run");
    assert!(out.finished, "{:?}", out.nodes);
    let dropped: u64 = out.nodes.iter().map(|n| n.frames_dropped_by_faults).sum();
    let retx: u64 = out.nodes.iter().map(|n| n.retransmissions).sum();
    assert!(
        dropped > 0 && retx > 0,
        "dropped {dropped}, retransmitted {retx}"
    );
    assert!(out.nodes.iter().filter(|n| n.is_worker).all(|w| w.correct));
    no_namespaces_left(&out);
}

#[test]
fn netreduce_frames_on_a_worker_link_are_rocev2() {
    if !inabench_fabric::netns::is_root() {
        eprintln!("skipped: the raw fabric's namespaces and AF_PACKET sockets need root");
        return;
    }
    let j = job("netreduce", 0.0);
    // worker 0's link to the accelerator (node `workers`), captured in worker 0's namespace
    let out = run_raw_with(&j, exe(), Some((0, j.workers)), SocketChoice::Auto).expect("run");
    assert!(out.finished);
    // the captured link ran AF_PACKET (a tap does not see AF_XDP's frames), the others AF_XDP,
    // and the run says so rather than naming one kind
    let tap = "a capture runs on this link, and a packet tap does not see the frames an AF_XDP socket takes";
    assert_eq!(
        out.nodes[0].offload,
        format!("mixed: af_xdp(copy) on r1, r2; af_packet on r3 (af_xdp: {tap})")
    );
    assert!(out.socket.starts_with("mixed: "), "{}", out.socket);
    assert_eq!(out.ran, Some(SocketsRan::Mixed));
    assert!(out.nodes[1..].iter().all(|n| n.offload == "af_xdp(copy)"));
    let w0 = &out.nodes[0];
    let sent = out.captured.iter().filter(|c| c.outgoing).count() as u64;
    let got = out.captured.iter().filter(|c| !c.outgoing).count() as u64;
    // the capture saw every frame worker 0 sent once, and every frame it received (and maybe
    // one that reached the link after worker 0 stopped)
    assert_eq!(sent, w0.frames_tx, "frames worker 0 sent");
    assert!(
        got >= w0.frames_rx && got > 0,
        "{got} captured, {} received",
        w0.frames_rx
    );
    let headers: Vec<(u8, u32, u32)> = out
        .captured
        .iter()
        .map(|c| roce_headers(&c.bytes))
        .collect::<Result<_, _>>()
        .expect("every frame on the link is RoCEv2 with a valid ICRC");
    // RC WRITEs out and in, and ACKs (opcode 0x11) both ways
    assert!(headers.iter().any(|h| h.0 == 0x11), "no ACK on the link");
    assert!(headers.iter().any(|h| h.0 != 0x11), "no data on the link");
    match which_tshark() {
        None => eprintln!("tshark not installed: the capture was checked by the wire module only"),
        Some(tshark) => {
            let dir = tempfile::tempdir().expect("tempdir");
            let pcap = dir.path().join("link.pcap");
            write_pcap(&pcap, &out.captured).expect("pcap");
            let o = std::process::Command::new(tshark)
                .args(["-r"])
                .arg(&pcap)
                .args([
                    "-T",
                    "fields",
                    "-E",
                    "separator=,",
                    "-e",
                    "infiniband.bth.opcode",
                    "-e",
                    "infiniband.bth.destqp",
                    "-e",
                    "infiniband.bth.psn",
                ])
                .output()
                .expect("tshark runs");
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            let theirs: Vec<(u8, u32, u32)> = String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(|l| {
                    let f: Vec<u32> = l
                        .split(',')
                        .map(|x| {
                            let x = x.trim();
                            x.strip_prefix("0x")
                                .map_or_else(|| x.parse(), |h| u32::from_str_radix(h, 16))
                                .unwrap_or(u32::MAX)
                        })
                        .collect();
                    (
                        f[0] as u8,
                        f.get(1).copied().unwrap_or(0),
                        f.get(2).copied().unwrap_or(0),
                    )
                })
                .collect();
            assert_eq!(theirs, headers, "Wireshark reads the same BTHs");
            eprintln!(
                "tshark decoded {} RoCEv2 frames on worker 0's link",
                theirs.len()
            );
        }
    }
    no_namespaces_left(&out);
}

fn which_tshark() -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("tshark"))
            .find(|f| f.is_file())
    })
}
