//! The P4Runtime control plane drives an aggregating data plane (#36 item 6): p4runtime-shell
//! (PyPI, the third-party client .ci/setup installs) writes a SwitchML job into our software
//! switch's P4Runtime server the way the SwitchML release's controller writes its switch
//! (`receive_udp`: a worker per source MAC/IP and UDP port with its id, bitmap bit, the job's
//! worker count and multicast group; `dst_addr`: where each worker's results go; the group's
//! replicas: node id = worker id on the worker's port). `inabench_p4rt::dataplane::DataPlane`
//! is the switch those entries configure (systems/ina's SwitchML switch, `switchml::table`),
//! run on the raw fabric (`inabench_fabric::raw::serve_until`, AF_PACKET on the switch's ends
//! of veth pairs); the suite's SwitchML workers run as raw nodes on the other ends, each in a
//! network namespace of its own. The controller also sets the switch's own MAC and IPv4 as the
//! release's does (`switch_mac_and_ip`'s default entry, `set_switch_mac_and_ip`; p4app-switchML
//! `dev_root/controller/udp_sender.py`): every result the workers take comes from that address.
//! Three workers all-reduce with exact sums; a frame claiming to
//! be worker 1 from an address no entry names is dropped and counted, never summed; then the
//! controller removes worker 2, sets the count to 2 and resets the switch's address, and a
//! two-worker job sums exactly from SwitchML's synthetic switch address (which the data plane
//! names in its note) while the removed worker's frames are dropped; a third session writes an entry whose count
//! disagrees and the switch refuses the job with why. Root only (veth pairs, namespaces), and
//! the venv: off CI a missing one is a skip with why, under CI a failure (inabench-testkit).

use inabench_fabric::raw::{Link, PacketSocket, enter_netns, serve_until};
use inabench_fabric::{Endpoint, Nanos, NodeId, Transmit};
use inabench_ina::common::{AllReduceConfig, System, Worker, reference_sum};
use inabench_ina::switchml::SwitchMl;
use inabench_ina::switchml::table::TableError;
use inabench_p4rt::client::Controller;
use inabench_p4rt::dataplane::{DataPlane, DataplaneError};
use inabench_p4rt::program;
use inabench_p4rt::server::{SoftSwitch, spawn_local};
use inabench_wire::node::{ip_of, mac_of};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Ports: 0..3 the workers', 3 a stray host's.
const PORTS: usize = 4;
/// The data plane's node id (the workers name the switch by their job's own numbering).
const SWITCH: NodeId = 100;

/// p4runtime-shell connects, fetches the P4Info our switch holds and runs `body` with
/// `worker(w, n, op)` (worker `w` of an `n`-worker job, `receive_udp`) and `result_addr(w, op)`
/// (`dst_addr`), `switch_addr(mac, ip)` (`switch_mac_and_ip`'s default entry) and
/// `refused(f)`; prints the number of `receive_udp` entries.
fn shell(py: &std::path::Path, addr: &str, election: u64, body: &str) -> String {
    let script = format!(
        "import sys\nimport p4runtime_sh.shell as sh\n\
         sh.setup(device_id=1, grpc_addr=sys.argv[1], election_id=(0, {election}))\n\
         RX = 'SwitchMLIngress.receive_udp'\nTX = 'SwitchMLEgress.dst_addr'\n\
         SW = 'SwitchMLEgress.switch_mac_and_ip'\n\
         def switch_addr(mac, ip):\n    \
             te = sh.TableEntry(SW)(action='SwitchMLEgress.set_switch_mac_and_ip')\n    \
             te.is_default = True\n    \
             te.action['switch_mac'] = mac\n    te.action['switch_ip'] = ip\n    \
             te.modify()\n\
         def refused(f):\n    \
             try:\n        f()\n        return 'accepted'\n    \
             except Exception as e:\n        return 'refused'\n\
         def worker(w, n, op):\n    \
             te = sh.TableEntry(RX)(action='SwitchMLIngress.set_bitmap')\n    \
             te.match['hdr.ethernet.src_addr'] = '02:00:00:01:00:%02x&&&ff:ff:ff:ff:ff:ff' % (w + 1)\n    \
             te.match['hdr.ipv4.src_addr'] = '10.0.1.%d&&&255.255.255.255' % (w + 1)\n    \
             te.match['hdr.udp.dst_port'] = '0xbee0&&&0xfff0'\n    \
             te.priority = 10\n    \
             te.action['mgid'] = '1'\n    te.action['worker_id'] = str(w)\n    \
             te.action['num_workers'] = str(n)\n    te.action['worker_bitmap'] = str(1 << w)\n    \
             getattr(te, op)()\n\
         def result_addr(w, op):\n    \
             te = sh.TableEntry(TX)(action='SwitchMLEgress.set_dst_addr')\n    \
             te.match['eg_md.switchml_md.worker_id'] = str(w)\n    \
             te.action['eth_dst_addr'] = '02:00:00:01:00:%02x' % (w + 1)\n    \
             te.action['ip_dst_addr'] = '10.0.1.%d' % (w + 1)\n    \
             getattr(te, op)()\n\
         {body}\n\
         print('workers', sum(1 for _ in sh.TableEntry(RX).read()))\n\
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

fn ip(args: &[&str]) {
    let ok = Command::new("ip")
        .args(args)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "ip {}", args.join(" "));
}

/// A veth pair per port: the switch's end `<base>s<i>` here, the host's end `<base>h<i>` in
/// namespace `<base>n<i>`, IPv6 off (no chatter on the links); removed on drop.
struct Rig {
    base: String,
}

impl Rig {
    fn new() -> Rig {
        let base = format!("p4ag{}", std::process::id() % 100_000);
        let rig = Rig { base };
        for i in 0..PORTS {
            let (s, h, n) = (rig.switch_end(i), rig.host_end(i), rig.netns(i));
            ip(&["netns", "add", &n]);
            ip(&["link", "add", &s, "type", "veth", "peer", "name", &h]);
            ip(&["link", "set", &h, "netns", &n]);
            let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{s}/disable_ipv6"), "1");
            let off = format!("echo 1 > /proc/sys/net/ipv6/conf/{h}/disable_ipv6");
            ip(&["netns", "exec", &n, "sh", "-c", &off]);
            ip(&["link", "set", &s, "up"]);
            ip(&["netns", "exec", &n, "ip", "link", "set", &h, "up"]);
        }
        rig
    }

    fn switch_end(&self, i: usize) -> String {
        format!("{}s{i}", self.base)
    }

    fn host_end(&self, i: usize) -> String {
        format!("{}h{i}", self.base)
    }

    fn netns(&self, i: usize) -> String {
        format!("{}n{i}", self.base)
    }

    /// An AF_PACKET socket on host `i`'s end, from the calling thread (which moves into the
    /// host's namespace).
    fn host_socket(&self, i: usize) -> PacketSocket {
        enter_netns(&self.netns(i)).expect("enter the host's namespace");
        let s = PacketSocket::open(&self.host_end(i)).expect("open the host's end");
        s.ignore_outgoing().expect("ignore outgoing");
        s
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        for i in 0..PORTS {
            let _ = Command::new("ip")
                .args(["link", "del", &self.switch_end(i)])
                .status();
            let _ = Command::new("ip")
                .args(["netns", "del", &self.netns(i)])
                .status();
        }
    }
}

/// A worker that checks every frame it receives is addressed to it (the `dst_addr` entry's MAC
/// and IP) from the switch's address `from` (MAC and IP) and says when it is done.
struct Checked {
    w: Box<dyn Worker>,
    mac: [u8; 6],
    ip: [u8; 4],
    from: ([u8; 6], [u8; 4]),
    frames_in: u64,
    wrong_dst: u64,
    wrong_src: u64,
    done: Arc<AtomicBool>,
}

impl Endpoint for Checked {
    fn id(&self) -> NodeId {
        self.w.id()
    }
    fn handle_packet(&mut self, now: Nanos, from: NodeId, f: &[u8]) {
        self.frames_in += 1;
        if f.len() < 34 || f[..6] != self.mac || f[30..34] != self.ip {
            self.wrong_dst += 1;
        }
        if f.len() < 34 || f[6..12] != self.from.0 || f[26..30] != self.from.1 {
            self.wrong_src += 1;
        }
        self.w.handle_packet(now, from, f);
    }
    fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        self.w.poll_transmit(now)
    }
    fn poll_timeout(&self) -> Option<Nanos> {
        self.w.poll_timeout()
    }
    fn handle_timeout(&mut self, now: Nanos) {
        self.w.handle_timeout(now)
    }
    fn is_done(&self) -> bool {
        let d = self.w.is_done();
        if d {
            self.done.store(true, Ordering::Relaxed);
        }
        d
    }
}

fn cfg(workers: usize, seed: u64) -> AllReduceConfig {
    AllReduceConfig {
        workers,
        // three rounds of the 128-slot pool and a short last chunk
        elements: 48 * 128 * 3 + 5,
        seed,
        line_rate_bps: 10e9,
        mtu: 1500,
        timeout_ns: 20_000_000,
        knobs: vec![],
    }
}

/// What one job on the rig did.
struct Job {
    results: Vec<Option<Vec<i32>>>,
    wrong_dst: Vec<u64>,
    wrong_src: Vec<u64>,
    /// The data plane's note (no switch address written), as its caller's manifest would say.
    note: Option<String>,
    counters: Vec<(&'static str, u64)>,
    switch_send_errors: u64,
}

/// The data plane `sw`'s entries say, on the rig's switch ends; the first `n` hosts run the
/// workers of `cfg(n, seed)` (worker `w` on port `w`), each checking its results come from
/// `from`; `stray` frames go in on port 3 first.
fn run_job(
    sw: &SoftSwitch,
    rig: &Rig,
    n: usize,
    seed: u64,
    stray: &[Vec<u8>],
    from: ([u8; 6], [u8; 4]),
) -> Job {
    let mut dp = DataPlane::of(sw, SWITCH).expect("the entries make a job");
    assert_eq!(dp.workers(), Some(n), "the job's count is the table's");
    assert_eq!(dp.source(), Some(from), "the results' source");
    let note = dp.note().map(|n| n.to_string());
    let c = cfg(n, seed);
    let workers = SwitchMl.build(&c).expect("build").workers;
    let ports: Vec<Link> = (0..PORTS)
        .map(|i| {
            let sock = PacketSocket::open(&rig.switch_end(i)).expect("open the switch's end");
            sock.ignore_outgoing().expect("ignore outgoing");
            Link {
                peer: i as NodeId,
                sock,
            }
        })
        .collect();
    let stop = AtomicBool::new(false);
    let (stop, ports) = (&stop, &ports);
    std::thread::scope(|s| {
        let switch = s.spawn(move || {
            let rep = serve_until(&mut dp, ports, 1500, Duration::from_secs(60), &mut || {
                stop.load(Ordering::Relaxed)
            });
            (rep, dp)
        });
        // the stray host's frames first, then the workers
        s.spawn(|| {
            let sock = rig.host_socket(3);
            for f in stray {
                sock.send(f).expect("send the stray frame");
            }
        })
        .join()
        .expect("the stray host");
        std::thread::sleep(Duration::from_millis(200));
        let hosts: Vec<_> = workers
            .into_iter()
            .enumerate()
            .map(|(w, wk)| {
                s.spawn(move || {
                    let link = Link {
                        peer: n as NodeId,
                        sock: rig.host_socket(w),
                    };
                    let done = Arc::new(AtomicBool::new(false));
                    let mut node = Checked {
                        w: wk,
                        mac: mac_of(1, w as u32),
                        ip: ip_of(1, w as u32),
                        from,
                        frames_in: 0,
                        wrong_dst: 0,
                        wrong_src: 0,
                        done: done.clone(),
                    };
                    let rep = serve_until(
                        &mut node,
                        &[link],
                        1500,
                        Duration::from_secs(30),
                        &mut || done.load(Ordering::Relaxed),
                    );
                    assert_eq!(rep.send_errors, 0, "worker {w}");
                    assert!(node.frames_in > 0, "worker {w} got frames");
                    (node.w.result(), (node.wrong_dst, node.wrong_src))
                })
            })
            .collect();
        let (results, wrong): (Vec<_>, Vec<_>) = hosts
            .into_iter()
            .map(|h| h.join().expect("a worker"))
            .unzip();
        let (wrong_dst, wrong_src) = wrong.into_iter().unzip();
        std::thread::sleep(Duration::from_millis(100));
        stop.store(true, Ordering::Relaxed);
        let (rep, dp) = switch.join().expect("the switch");
        assert!(rep.stopped, "{rep:?}");
        Job {
            results,
            wrong_dst,
            wrong_src,
            note,
            counters: dp.counters(),
            switch_send_errors: rep.send_errors,
        }
    })
}

fn counter(job: &Job, name: &str) -> u64 {
    job.counters
        .iter()
        .find(|(k, _)| *k == name)
        .map_or_else(|| panic!("no counter {name}: {:?}", job.counters), |c| c.1)
}

/// The first `k` frames worker `w` of `cfg(n, seed)` sends, with source IP `10.0.1.<src>` and
/// MAC `02:00:00:01:00:<src>` when given.
fn frames_of(n: usize, seed: u64, w: usize, k: usize, src: Option<u8>) -> Vec<Vec<u8>> {
    let mut wk = SwitchMl
        .build(&cfg(n, seed))
        .expect("build")
        .workers
        .swap_remove(w);
    (0..k)
        .map(|_| {
            let mut f = wk.poll_transmit(0).expect("a frame").bytes;
            if let Some(b) = src {
                f[11] = b;
                f[14 + 15] = b;
                f[14 + 10..14 + 12].fill(0);
                let ck = inabench_wire::ipv4::checksum(&f[14..34]);
                f[14 + 10..14 + 12].copy_from_slice(&ck.to_be_bytes());
            }
            f
        })
        .collect()
}

#[test]
fn p4runtime_shell_entries_configure_switchml_aggregation_on_veth_ports() {
    let root = inabench_testkit::need(
        "root (the test makes veth pairs and network namespaces)",
        inabench_fabric::netns::is_root(),
        "run the tests as root, as CI does",
    );
    if !root {
        return;
    }
    let Some(py) = inabench_testkit::need_py_module("p4runtime_sh", "p4runtime-shell") else {
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
            // our driver pushes the program with its job tables (128 slots, 48 values a
            // packet), then leaves
            let mut c = Controller::connect(&addr, 1, (0, 10))
                .await
                .expect("primary");
            c.set_pipeline(program::switchml_with_job_tables(128).p4info(), vec![], 1)
                .await
                .expect("pipeline");
            addr
        })
        .to_string();
    // nothing written: no job, the data plane only forwards (and has nothing to forward by)
    let idle = DataPlane::of(&sw, SWITCH).expect("a pipeline");
    assert_eq!(idle.workers(), None);

    let rig = Rig::new();

    // session 1: the release's controller's writes for three workers (worker w on port w) and
    // the switch's own address (its setup's set_switch_mac_and_ip); the default entry is only
    // modified (an insert is refused), and read when asked for
    let out = shell(
        &py,
        &addr,
        20,
        "g = sh.MulticastGroupEntry(1)\n\
         for w in range(3):\n    worker(w, 3, 'insert')\n    result_addr(w, 'insert')\n    g.add(w, w)\n\
         g.insert()\n\
         switch_addr('52:54:00:ab:00:fe', '172.16.0.254')\n\
         def insert_default():\n    \
             te = sh.TableEntry(SW)(action='SwitchMLEgress.set_switch_mac_and_ip')\n    \
             te.is_default = True\n    te.action['switch_mac'] = '52:54:00:ab:00:fd'\n    \
             te.action['switch_ip'] = '172.16.0.253'\n    te.insert()\n\
         print('insert of the default entry', refused(insert_default))\n\
         te = sh.TableEntry(SW)\nte.is_default = True\n\
         print('default entries read', sum(1 for _ in te.read()))\n\
         print('match entries read', sum(1 for _ in sh.TableEntry(SW).read()))",
    );
    for line in [
        "workers 3",
        "insert of the default entry refused",
        "default entries read 1",
        "match entries read 0",
    ] {
        assert!(out.contains(line), "{line:?} in {out}");
    }
    let mine = ([0x52, 0x54, 0, 0xab, 0, 0xfe], [172, 16, 0, 254]);
    // a host no entry names, claiming to be worker 1 with other values (10.0.1.99)
    let stray = frames_of(3, 99, 1, 20, Some(99));
    let job = run_job(&sw, &rig, 3, 7, &stray, mine);
    let want = reference_sum(7, 3, cfg(3, 7).elements);
    for (w, r) in job.results.iter().enumerate() {
        assert!(r.as_deref() == Some(&want[..]), "worker {w}'s sum");
    }
    assert_eq!(
        job.wrong_dst,
        vec![0, 0, 0],
        "results carry dst_addr's addresses"
    );
    assert_eq!(
        job.wrong_src,
        vec![0, 0, 0],
        "results come from switch_mac_and_ip's address"
    );
    assert_eq!(job.note, None);
    assert_eq!(counter(&job, "misses"), 20, "{:?}", job.counters);
    assert_eq!(counter(&job, "dropped"), 20, "{:?}", job.counters);
    assert_eq!(counter(&job, "forwarded"), 0);
    assert!(
        counter(&job, "aggregated_in") >= 3 * 385,
        "{:?}",
        job.counters
    );
    assert_eq!(job.switch_send_errors, 0);
    eprintln!("three workers: {:?}", job.counters);

    // session 2: worker 2 leaves; the count is 2 and the group loses its replica
    let out = shell(
        &py,
        &addr,
        30,
        "worker(2, 3, 'delete')\nresult_addr(2, 'delete')\n\
         worker(0, 2, 'modify')\nworker(1, 2, 'modify')\n\
         g = sh.MulticastGroupEntry(1)\ng.add(0, 0)\ng.add(1, 1)\ng.modify()\n\
         te = sh.TableEntry(SW)\nte.is_default = True\nte.modify()\n\
         te = sh.TableEntry(SW)\nte.is_default = True\n\
         print('default entries read', sum(1 for _ in te.read()))",
    );
    assert!(out.contains("workers 2"), "{out}");
    // the switch's address reset: none read back
    assert!(out.contains("default entries read 0"), "{out}");
    // the removed worker still sends (its own frames, from its own address)
    let removed = frames_of(3, 99, 2, 20, None);
    // no switch address: SwitchML's synthetic one (node 2 of a two-worker job), and said
    let job = run_job(&sw, &rig, 2, 8, &removed, (mac_of(1, 2), ip_of(1, 2)));
    let want = reference_sum(8, 2, cfg(2, 8).elements);
    for (w, r) in job.results.iter().enumerate() {
        assert!(
            r.as_deref() == Some(&want[..]),
            "worker {w}'s two-worker sum"
        );
    }
    assert_eq!(job.wrong_dst, vec![0, 0]);
    assert_eq!(job.wrong_src, vec![0, 0]);
    assert_eq!(
        job.note.as_deref(),
        Some(
            "no switch_mac_and_ip entry is written: the switch's results leave from SwitchML's synthetic switch address 02:00:00:01:00:03 10.0.1.3 (node 2 of the job), not one its controller set"
        )
    );
    assert_eq!(counter(&job, "misses"), 20, "{:?}", job.counters);
    assert_eq!(counter(&job, "dropped"), 20, "{:?}", job.counters);
    eprintln!("two workers: {:?}", job.counters);

    // session 3: worker 2 back with a count of 3 while the others say 2: refused with why
    let out = shell(
        &py,
        &addr,
        40,
        "worker(2, 3, 'insert')\nresult_addr(2, 'insert')",
    );
    assert!(out.contains("workers 3"), "{out}");
    match DataPlane::of(&sw, SWITCH) {
        Err(DataplaneError::Job(TableError::CountsDisagree(a, b))) => {
            assert_eq!((a.min(b), a.max(b)), (2, 3));
        }
        Err(e) => panic!("another refusal: {e}"),
        Ok(_) => panic!("a job whose entries disagree on the count ran"),
    }
}
