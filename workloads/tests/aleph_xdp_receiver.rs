//! ALEPH's Gradient Receiver (Sec. 5.5) on the rate-limited testbed (`ReceiverPath::Xdp`, what
//! aleph-fig10 runs): every plain worker's `eth0` runs the receiver program, the worker waits for
//! one notification per round and reads its totals from the map; every total equals the reference
//! sum (`iterate` fails otherwise), the program's run time is charged to the worker's own machine,
//! a lost copy is fetched from the PS into the same map, and programs and namespaces are gone
//! afterwards. Needs root, clang and libbpf: skipped with a message without them, required when
//! `CI` is set.
#![cfg(feature = "aleph")]

use inabench_aleph::testbed::net::Testbed;
use inabench_aleph::testbed::xdp::{Loss, ReceiverPath, XdpTree};
use inabench_xdp::AttachMode;
use inabench_xdp::netns::{has_xdp, namespaces};
use inabench_xdp::proto::PACKET_LEN;

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

fn receivers(mode: AttachMode) {
    // Agg2 (0) aggregates workers 3 and 4, Agg1s (1, 2) workers 5 and 6, worker 7 sends to the PS
    const RATES: [f64; 9] = [60.0, 40.0, 40.0, 20.0, 20.0, 20.0, 20.0, 20.0, 80.0];
    const LEN: usize = 128 * 200 - 5;
    const PLAIN: std::ops::Range<usize> = 3..8;
    let tb = Testbed::create(&RATES).unwrap();
    let names: Vec<String> = (0..9).map(|i| tb.ns(i).to_string()).collect();
    let parent = [8, 8, 8, 0, 0, 1, 2, 8];
    let t = XdpTree::create_with(&tb, &parent, 256, mode, ReceiverPath::Xdp).unwrap();
    // the plain workers run the receiver; the aggregators their Aggregation Service
    for m in 0..8 {
        assert!(has_xdp(Some(tb.ns(m)), "eth0").unwrap(), "machine {m}");
    }
    let seg = 200 * PACKET_LEN as u64;
    for iter in 0..2 {
        // returns only if every worker holds every total, each equal to the reference sum
        let it = t.iterate(iter, LEN).unwrap();
        eprintln!(
            "{} iteration {iter}: {:.3} s, cpu {:?}, xdp {:?}",
            mode.name(),
            it.time,
            it.cpu,
            it.xdp
        );
        for w in PLAIN {
            // the receiver program ran on the worker's machine and is charged there
            assert!(it.xdp[w] > 0.0, "worker {w}: {:?}", it.xdp);
            // its threads (the sender, the wait for the signal, the map read) used CPU
            assert!(it.cpu[w] > 0.0, "worker {w}: {:?}", it.cpu);
            // its 200 gradient packets, and fetches only if a copy was dropped (veth's native
            // XDP ring drops a burst beyond its 256 entries): less than a round more
            assert!(
                it.bytes[w] >= seg && it.bytes[w] < 2 * seg,
                "worker {w}: {} bytes",
                it.bytes[w]
            );
        }
        for m in [0, 1, 2, 8] {
            assert!(it.xdp[m] > 0.0, "machine {m}: {:?}", it.xdp);
        }
        assert!(it.xdp.iter().sum::<f64>() < 2.0 * it.time, "{:?}", it.xdp);
    }
    // worker 4 loses the copy of segment 13 (from Agg2) and worker 7 that of segment 2 (from
    // the PS): no notification comes, the map names the segment and the fetch from the PS's map
    // lands in the receiver's map, which then signals
    t.inject(&[
        Loss::Down {
            worker: 4,
            segment: 13,
        },
        Loss::Down {
            worker: 7,
            segment: 2,
        },
    ]);
    let it = t.iterate(5, LEN).unwrap();
    eprintln!("{} with losses: {:?}", mode.name(), it.bytes);
    for w in [4, 7] {
        assert!(
            it.bytes[w] > seg && it.bytes[w] < 2 * seg,
            "worker {w} fetched its lost total: {} bytes",
            it.bytes[w]
        );
    }
    drop(t);
    for m in 0..8 {
        assert!(!has_xdp(Some(tb.ns(m)), "eth0").unwrap(), "detached");
    }
    drop(tb);
    let left = namespaces().unwrap();
    assert!(
        names.iter().all(|n| !left.contains(n)),
        "namespaces removed"
    );
}

#[test]
fn native_gradient_receivers_deliver_exact_totals_charged_to_the_worker() {
    if ready() {
        receivers(AttachMode::Native);
    }
}

#[test]
fn generic_gradient_receivers_deliver_exact_totals_charged_to_the_worker() {
    if ready() {
        receivers(AttachMode::Generic);
    }
}
