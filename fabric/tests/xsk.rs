//! The AF_XDP socket (`inabench_fabric::xsk`) on a veth pair between two network namespaces
//! (root only; CI runs as root): frames cross byte for byte in bursts larger than the TX ring,
//! an AF_XDP end and an AF_PACKET end understand each other, and what cannot take AF_XDP says
//! why in one sentence. An ignored test compares the two socket kinds' frame rates.

use inabench_fabric::netns::{Netns, is_root};
use inabench_fabric::raw::{Capture, Captured, PacketSocket, enter_netns, link_name};
use inabench_fabric::xsk::{RX_FRAMES, TX_FRAMES, XdpSocket, XskError, max_frame};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Frame `k`: two locally administered MACs, ethertype 0x88b5 (local experimental), a body whose
/// length (60..=max) and bytes depend on `k`.
fn frame(k: u64, max: usize) -> Vec<u8> {
    let len = 60 + (k as usize * 97) % (max - 59);
    let mut f = vec![0x02, 0, 0, 0, 0x77, 1, 0x02, 0, 0, 0, 0x66, 2, 0x88, 0xb5];
    f.extend_from_slice(&k.to_be_bytes());
    f.extend((f.len()..len).map(|i| (i as u64 ^ k.wrapping_mul(0x9e37_79b9)) as u8));
    f
}

fn pair() -> (Netns, [String; 2]) {
    let mut ns = Netns::create(2, None).expect("namespaces");
    ns.link(0, 1, 9000).expect("link");
    let names = [ns.hosts[0].namespace.clone(), ns.hosts[1].namespace.clone()];
    (ns, names)
}

/// Open on `ns`'s link to `peer` from a thread that entered the namespace.
fn in_ns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        enter_netns(&ns).expect("setns");
        f()
    })
}

/// Many bursts, each three TX rings long, from an AF_XDP end to an AF_XDP end: every frame
/// arrives once, in order, byte for byte (the sender waits on its completion ring when the TX
/// ring is full; it starts a burst only when the receiver's RX ring has room for all of it, as
/// a link-level credit would, so no frame may be lost), and the receiver's socket counts no
/// drop.
#[test]
fn af_xdp_frames_cross_byte_exact_in_bursts_larger_than_the_ring() {
    if !is_root() {
        eprintln!("skipped: network namespaces and AF_XDP need root");
        return;
    }
    let (_ns, names) = pair();
    let max = max_frame(2048);
    let burst = 3 * TX_FRAMES as u64;
    let bursts = 6u64;
    let total = burst * bursts;
    let got = Arc::new(AtomicU64::new(0));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let g = got.clone();
    let rx = in_ns(&names[1], move || {
        let s = XdpSocket::open(&link_name(0), max).expect("AF_XDP on the receiver");
        ready_tx.send(()).expect("ready");
        let mut frames = Vec::new();
        let t = Instant::now();
        while (frames.len() as u64) < total && t.elapsed() < Duration::from_secs(20) {
            if !s.recv_with(&mut |f| frames.push(f.to_vec())) {
                std::thread::yield_now();
            } else {
                g.store(frames.len() as u64, Ordering::Release);
            }
        }
        (frames, s.drops())
    });
    ready_rx.recv().expect("the receiver's socket");
    let g = got.clone();
    let tx = in_ns(&names[0], move || {
        let s = XdpSocket::open(&link_name(1), max).expect("AF_XDP on the sender");
        for b in 0..bursts {
            // credit: the receiver has taken all but one RX ring's worth of what was sent
            while b * burst - g.load(Ordering::Acquire) > RX_FRAMES as u64 - burst {
                std::thread::yield_now();
            }
            for k in b * burst..(b + 1) * burst {
                s.send(&frame(k, max)).expect("send");
            }
            s.flush().expect("flush");
        }
    });
    tx.join().expect("sender");
    let (frames, drops) = rx.join().expect("receiver");
    assert_eq!(frames.len() as u64, total, "frames received");
    for (k, f) in frames.iter().enumerate() {
        assert_eq!(f, &frame(k as u64, max), "frame {k}");
    }
    assert_eq!(drops, 0, "the receiver's AF_XDP socket dropped frames");
}

/// One end AF_XDP, the other AF_PACKET, both ways: the same bytes.
#[test]
fn an_af_xdp_end_and_an_af_packet_end_exchange_the_same_bytes() {
    if !is_root() {
        eprintln!("skipped: network namespaces and AF_XDP need root");
        return;
    }
    let (_ns, names) = pair();
    let max = max_frame(4096);
    let xdp = in_ns(&names[0], move || {
        XdpSocket::open(&link_name(1), max).expect("AF_XDP")
    })
    .join()
    .expect("xdp end");
    assert_eq!(xdp.chunk(), 4096);
    let pkt = in_ns(&names[1], || {
        let s = PacketSocket::open(&link_name(0)).expect("AF_PACKET");
        s.ignore_outgoing().expect("PACKET_IGNORE_OUTGOING");
        s
    })
    .join()
    .expect("packet end");
    // a tap on each end of the link
    let tap_xdp = Capture::start(Some(&names[0]), &link_name(1), 10_000).expect("capture");
    let tap_pkt = Capture::start(Some(&names[1]), &link_name(0), 10_000).expect("capture");
    let n = 200u64;
    for k in 0..n {
        xdp.send(&frame(k, max)).expect("send");
    }
    xdp.flush().expect("flush");
    for k in 0..n {
        pkt.send(&frame(1000 + k, max)).expect("send");
    }
    let mut buf = vec![0u8; 9100];
    let (mut at_pkt, mut at_xdp) = (Vec::new(), Vec::new());
    let t = Instant::now();
    while (at_pkt.len() < n as usize || at_xdp.len() < n as usize)
        && t.elapsed() < Duration::from_secs(10)
    {
        while let Some((len, out)) = pkt.recv(&mut buf).expect("recv") {
            assert!(!out);
            at_pkt.push(buf[..len].to_vec());
        }
        while xdp.recv_with(&mut |f| at_xdp.push(f.to_vec())) {}
        std::thread::sleep(Duration::from_millis(1));
    }
    let want = |base: u64| (0..n).map(|k| frame(base + k, max)).collect::<Vec<_>>();
    assert_eq!(at_pkt, want(0), "AF_XDP -> AF_PACKET");
    assert_eq!(at_xdp, want(1000), "AF_PACKET -> AF_XDP");
    let ours = |c: Vec<Captured>| {
        let c: Vec<Captured> = c
            .into_iter()
            .filter(|f| f.bytes[12..14] == [0x88, 0xb5])
            .collect();
        (
            c.iter().filter(|f| f.outgoing).count(),
            c.iter().filter(|f| !f.outgoing).count(),
        )
    };
    let at_xdp_end = ours(tap_xdp.finish().expect("capture"));
    let at_pkt_end = ours(tap_pkt.finish().expect("capture"));
    eprintln!(
        "tap on the AF_XDP end (out, in): {at_xdp_end:?}; on the AF_PACKET end: {at_pkt_end:?}"
    );
    // the AF_PACKET end's tap sees every frame both ways; the AF_XDP end's sees none of them:
    // the XDP program takes the incoming ones before the taps, and copy-mode transmit does not
    // pass the outgoing ones by them
    assert_eq!(at_pkt_end, (n as usize, n as usize));
    assert_eq!(at_xdp_end, (0, 0));
    // the program is on the interface while the socket lives, and leaves with it
    let xdp_on = || {
        let o = std::process::Command::new("ip")
            .args(["-n", &names[0], "link", "show", "dev", &link_name(1)])
            .output()
            .expect("ip");
        String::from_utf8_lossy(&o.stdout).contains("prog/xdp")
    };
    assert!(xdp_on(), "no XDP program on the AF_XDP end");
    drop(xdp);
    assert!(
        !xdp_on(),
        "the XDP program stayed after its socket was dropped"
    );
}

/// What cannot take AF_XDP says why, in one sentence: an interface that is not there, frames
/// larger than a chunk, and an interface that already has an XDP program (the kernel refuses a
/// second link).
#[test]
fn what_cannot_take_af_xdp_says_why() {
    if !is_root() {
        eprintln!("skipped: network namespaces and AF_XDP need root");
        return;
    }
    let e = XdpSocket::open("inb-no-such0", 1500)
        .err()
        .expect("no such interface");
    assert!(matches!(e, XskError::NoInterface(_)), "{e}");
    assert_eq!(e.to_string(), "no interface `inb-no-such0` here");
    let e = XdpSocket::open("lo", 9256).err().expect("too large");
    assert_eq!(
        e.to_string(),
        "frames up to 9256 bytes do not fit an AF_XDP chunk (3840 bytes at most in copy mode without multi-buffer)"
    );
    let (_ns, names) = pair();
    let (first, second) = in_ns(&names[0], || {
        let a = XdpSocket::open(&link_name(1), 1500);
        let b = XdpSocket::open(&link_name(1), 1500);
        (
            a.map(|_| ()).map_err(|e| e.to_string()),
            b.err().map(|e| e.to_string()),
        )
    })
    .join()
    .expect("thread");
    // both held at once: the first is fine, the second is refused
    let second = second.expect("a second AF_XDP socket on one queue is refused");
    assert!(first.is_ok(), "{first:?}");
    assert_eq!(
        second,
        "binding the AF_XDP socket to queue 0 in copy mode was refused: Device or resource busy (os error 16) (another AF_XDP socket is bound to that queue)"
    );
    eprintln!("second socket on the same queue: {second}");
}

/// Frame rate of one veth pair, AF_PACKET and AF_XDP (copy mode, generic XDP), 64- and
/// 1024-byte frames sent as fast as the sender can for about a second while the receiver
/// counts: a figure to print, not a claim to assert. `cargo test --release -p inabench-fabric --test xsk --
/// --ignored --nocapture`.
#[test]
#[ignore]
fn frame_rate_af_packet_vs_af_xdp() {
    if !is_root() {
        eprintln!("skipped: network namespaces and AF_XDP need root");
        return;
    }
    // what one AF_XDP socket costs to make and to take down (the raw fabric makes one per link
    // end before the run and drops them after it)
    // (ten interfaces: a queue stays busy for a moment after its socket is dropped, the
    // kernel frees it asynchronously, and a new socket on it is refused until then)
    let mut ns = Netns::create(11, None).expect("namespaces");
    for i in 1..=10 {
        ns.link(0, i, 1500).expect("link");
    }
    let (open, close) = in_ns(&ns.hosts[0].namespace.clone(), || {
        let (mut open, mut close) = (Duration::ZERO, Duration::ZERO);
        for i in 1..=10 {
            let t = Instant::now();
            let s = XdpSocket::open(&link_name(i), 1500).expect("AF_XDP");
            open += t.elapsed();
            let t = Instant::now();
            drop(s);
            close += t.elapsed();
        }
        (open / 10, close / 10)
    })
    .join()
    .expect("thread");
    eprintln!("af_xdp socket: open {open:?}, drop {close:?} (mean of 10)");
    drop(ns);
    for kind in ["af_packet", "af_xdp"] {
        for size in [64usize, 1024] {
            let (_ns, names) = pair();
            let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let (ready_tx, ready_rx) = std::sync::mpsc::channel();
            let st = stop.clone();
            let xdp = kind == "af_xdp";
            let rx = in_ns(&names[1], move || {
                let mut n = 0u64;
                let mut buf = vec![0u8; 4096];
                if xdp {
                    let s = XdpSocket::open(&link_name(0), 1500).expect("AF_XDP");
                    ready_tx.send(()).expect("ready");
                    while !st.load(Ordering::Relaxed) {
                        while s.recv_with(&mut |_| n += 1) {}
                    }
                    (n, s.drops())
                } else {
                    let s = PacketSocket::open(&link_name(0)).expect("AF_PACKET");
                    ready_tx.send(()).expect("ready");
                    while !st.load(Ordering::Relaxed) {
                        while let Ok(Some(_)) = s.recv(&mut buf) {
                            n += 1;
                        }
                    }
                    (n, u64::MAX)
                }
            });
            ready_rx.recv().expect("ready");
            let tx = in_ns(&names[0], move || {
                let mut f = frame(0, 1500);
                f.resize(size.max(60), 0xa5);
                let mut n = 0u64;
                let t = Instant::now();
                if xdp {
                    let s = XdpSocket::open(&link_name(1), 1500).expect("AF_XDP");
                    while t.elapsed() < Duration::from_secs(1) {
                        for _ in 0..256 {
                            s.send(&f).expect("send");
                        }
                        n += 256;
                    }
                    s.flush().expect("flush");
                } else {
                    let s = PacketSocket::open(&link_name(1)).expect("AF_PACKET");
                    s.ignore_outgoing().expect("ignore outgoing");
                    while t.elapsed() < Duration::from_secs(1) {
                        for _ in 0..256 {
                            s.send(&f).expect("send");
                        }
                        n += 256;
                    }
                }
                (n, t.elapsed())
            });
            let (sent, took) = tx.join().expect("sender");
            std::thread::sleep(Duration::from_millis(100));
            stop.store(true, Ordering::Relaxed);
            let (got, drops) = rx.join().expect("receiver");
            let s = took.as_secs_f64();
            let drops = if drops == u64::MAX {
                "not counted".to_string()
            } else {
                drops.to_string()
            };
            eprintln!(
                "{kind:9} {size:5} B: sent {:.0} kframes/s, received {:.0} kframes/s ({got} of {sent}; socket drops {drops})",
                sent as f64 / s / 1e3,
                got as f64 / s / 1e3
            );
        }
    }
}
