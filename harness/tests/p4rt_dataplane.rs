//! The P4Runtime control plane drives a data plane (#36 item 6): p4runtime-shell (PyPI, the
//! third-party client .ci/setup installs) writes the SwitchML program's forwarding entries and
//! multicast group 1 into our software switch's P4Runtime server, and the switch's forwarding
//! on the raw fabric (`inabench_fabric::raw::forward_until` on AF_PACKET sockets, deciding by
//! `SoftSwitch::forwarding`, `inabench_p4rt::dataplane`) moves frames between three veth pairs
//! as those entries say; a second p4runtime-shell session modifies and deletes entries and
//! changes the group, and the frames follow at once. Root only (veth pairs), and the venv: off CI
//! a missing one is a skip with why, under CI a failure. 7.1 s (two Python sessions, and each of
//! the 8 frames watched for 300 ms).

use inabench_fabric::raw::{PacketSocket, forward_until};
use inabench_p4rt::client::Controller;
use inabench_p4rt::program;
use inabench_p4rt::server::{SoftSwitch, spawn_local};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

fn python() -> Option<std::path::PathBuf> {
    let venv = std::env::var_os("INABENCH_PY_VENV")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".cache/inabench/venv"))
        })?;
    let py = venv.join("bin/python");
    py.exists().then_some(py)
}

/// p4runtime-shell connects, fetches the P4Info our switch holds and runs `body`.
fn shell(py: &std::path::Path, addr: &str, election: u64, body: &str) -> String {
    let script = format!(
        "import sys\nimport p4runtime_sh.shell as sh\n\
         sh.setup(device_id=1, grpc_addr=sys.argv[1], election_id=(0, {election}))\n\
         T = 'SwitchMLIngress.forward_table'\n\
         def route(ip, port, op):\n    \
             te = sh.TableEntry(T)(action='SwitchMLIngress.forward')\n    \
             te.match['hdr.ipv4.dst_addr'] = ip\n    te.action['port'] = str(port)\n    \
             getattr(te, op)()\n\
         {body}\n\
         print('entries', sum(1 for _ in sh.TableEntry(T).read()))\n\
         sh.teardown()\n"
    );
    let out = Command::new(py)
        .arg("-c")
        .arg(&script)
        .arg(addr)
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "p4runtime-shell failed:\n{script}\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Three veth pairs: the switch's ends `<name>s<i>`, the hosts' ends `<name>h<i>`; removed on drop.
struct Veths(Vec<(String, String)>);

impl Veths {
    fn new(n: usize) -> Veths {
        let base = format!("p4dp{}", std::process::id() % 100_000);
        let mut v = Veths(Vec::new());
        for i in 0..n {
            let (s, h) = (format!("{base}s{i}"), format!("{base}h{i}"));
            let ok = Command::new("ip")
                .args(["link", "add", &s, "type", "veth", "peer", "name", &h])
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "ip link add {s} type veth peer name {h}");
            v.0.push((s.clone(), h.clone()));
            for d in [&s, &h] {
                // no IPv6 chatter on the test's links
                let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{d}/disable_ipv6"), "1");
                let up = Command::new("ip")
                    .args(["link", "set", d, "up"])
                    .status()
                    .is_ok_and(|s| s.success());
                assert!(up, "ip link set {d} up");
            }
        }
        v
    }

    fn switch_end(&self, i: usize) -> String {
        self.0[i].0.clone()
    }

    fn host_end(&self, i: usize) -> String {
        self.0[i].1.clone()
    }
}

impl Drop for Veths {
    fn drop(&mut self) {
        for (s, _) in &self.0 {
            let _ = Command::new("ip").args(["link", "del", s]).status();
        }
    }
}

/// An IPv4 frame to `dst` (MAC `mac`) carrying `tag`.
fn frame(mac: [u8; 6], dst: [u8; 4], tag: &str) -> Vec<u8> {
    let mut f = vec![0u8; 14 + 20];
    f[..6].copy_from_slice(&mac);
    f[6..12].copy_from_slice(&[2, 0, 0, 0x4d, 0, 1]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    let total = (20 + tag.len()) as u16;
    f[16..18].copy_from_slice(&total.to_be_bytes());
    f[22] = 64;
    f[23] = 253;
    f[26..30].copy_from_slice(&[10, 0, 1, 100]);
    f[30..34].copy_from_slice(&dst);
    f.extend_from_slice(tag.as_bytes());
    f
}

/// Send `f` from host 0 and return which hosts got it (within 300 ms), by its tag.
fn deliver(hosts: &[PacketSocket], f: &[u8], tag: &str) -> Vec<usize> {
    hosts[0].send(f).expect("send on host 0's end");
    let mut got = Vec::new();
    let mut buf = vec![0u8; 2048];
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(300) {
        for (i, h) in hosts.iter().enumerate() {
            while let Ok(Some((n, outgoing))) = h.recv(&mut buf) {
                if !outgoing && buf[..n].ends_with(tag.as_bytes()) && !got.contains(&i) {
                    got.push(i);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    got.sort_unstable();
    got
}

#[test]
fn p4runtime_shell_entries_and_groups_steer_frames_between_veth_ports() {
    let ci = std::env::var("CI").as_deref() == Ok("true");
    if !inabench_fabric::netns::is_root() {
        assert!(!ci, "CI runs as root: the veth pairs need it");
        eprintln!("skipped: not root (the test makes veth pairs)");
        return;
    }
    let Some(py) = python() else {
        assert!(
            !ci,
            "CI must have p4runtime-shell: .ci/setup installs it in ~/.cache/inabench/venv"
        );
        eprintln!("skipped: no p4runtime-shell venv (run .ci/setup)");
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (sw, _packet_outs) = SoftSwitch::new(1);
    let addr = rt
        .block_on(async {
            let addr = spawn_local(sw.clone()).await.expect("serve").to_string();
            // our driver pushes the SwitchML program's pipeline, then leaves
            let mut c = Controller::connect(&addr, 1, (0, 10))
                .await
                .expect("primary");
            c.set_pipeline(program::switchml(128).p4info(), vec![], 1)
                .await
                .expect("pipeline");
            addr
        })
        .to_string();
    // nothing written yet: the data plane forwards nothing
    let empty = sw.forwarding().expect("a pipeline");
    assert!(empty.routes.is_empty() && empty.groups.is_empty());

    let links = Veths::new(3);
    let open = |name: String| {
        let s = PacketSocket::open(&name).unwrap_or_else(|e| panic!("open {name}: {e}"));
        s.ignore_outgoing().expect("ignore outgoing");
        s
    };
    let ports: Vec<PacketSocket> = (0..3).map(|i| open(links.switch_end(i))).collect();
    let hosts: Vec<PacketSocket> = (0..3).map(|i| open(links.host_end(i))).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let fwd = {
        let (sw, stop) = (sw.clone(), stop.clone());
        std::thread::spawn(move || {
            forward_until(
                &ports,
                1500,
                Duration::from_secs(120),
                &mut |_, f| sw.forwarding().map(|t| t.egress(f)).unwrap_or_default(),
                &mut || stop.load(Ordering::Relaxed),
            )
        })
    };

    // session 1: a route per host, one dropped address, group 1 over hosts 1 and 2
    let out = shell(
        &py,
        &addr,
        20,
        "for i in range(3):\n    route('10.0.1.%d' % (i + 1), i, 'insert')\n\
         d = sh.TableEntry(T)(action='SwitchMLIngress.drop')\n\
         d.match['hdr.ipv4.dst_addr'] = '10.0.1.9'\nd.insert()\n\
         g = sh.MulticastGroupEntry(1)\ng.add(1, 1)\ng.add(2, 1)\ng.insert()",
    );
    assert!(out.contains("entries 4"), "{out}");
    let uni = [2, 0, 0, 0x4d, 0, 2];
    let bcast = [0xff; 6];
    assert_eq!(
        deliver(&hosts, &frame(uni, [10, 0, 1, 2], "a"), "a"),
        vec![1]
    );
    assert_eq!(
        deliver(&hosts, &frame(uni, [10, 0, 1, 3], "b"), "b"),
        vec![2]
    );
    assert_eq!(
        deliver(&hosts, &frame(uni, [10, 0, 1, 9], "c"), "c"),
        Vec::<usize>::new()
    );
    assert_eq!(
        deliver(&hosts, &frame(uni, [10, 0, 1, 77], "d"), "d"),
        Vec::<usize>::new()
    );
    assert_eq!(
        deliver(&hosts, &frame(bcast, [10, 0, 1, 2], "e"), "e"),
        vec![1, 2]
    );

    // session 2: 10.0.1.2 now to host 2, 10.0.1.3 deleted, group 1 over hosts 0 and 1
    let out = shell(
        &py,
        &addr,
        30,
        "route('10.0.1.2', 2, 'modify')\n\
         te = sh.TableEntry(T)\nte.match['hdr.ipv4.dst_addr'] = '10.0.1.3'\nte.delete()\n\
         g = sh.MulticastGroupEntry(1)\ng.add(0, 1)\ng.add(1, 1)\ng.modify()",
    );
    assert!(out.contains("entries 3"), "{out}");
    assert_eq!(
        deliver(&hosts, &frame(uni, [10, 0, 1, 2], "f"), "f"),
        vec![2]
    );
    assert_eq!(
        deliver(&hosts, &frame(uni, [10, 0, 1, 3], "g"), "g"),
        Vec::<usize>::new()
    );
    assert_eq!(
        deliver(&hosts, &frame(bcast, [10, 0, 1, 2], "h"), "h"),
        vec![0, 1]
    );

    stop.store(true, Ordering::Relaxed);
    let rep = fwd.join().expect("the forwarder");
    eprintln!("{rep:?}");
    assert!(rep.stopped && rep.send_errors == 0, "{rep:?}");
    assert!(rep.copies_out >= 7, "{rep:?}");
}
