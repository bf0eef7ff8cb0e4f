//! ALEPH's two-level hierarchy with the aggregation in XDP (aggregators and PS) on rate-limited
//! namespaces: every worker's aggregate equals the reference sum over two iterations, the
//! aggregators send one aggregate up, and programs and namespaces are gone afterwards. Needs
//! root, clang and libbpf: skipped with a message without them, required when `CI` is set.

use inabench_aleph::testbed::net::Testbed;
use inabench_aleph::testbed::xdp::{Loss, XdpTree};
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

fn hierarchy(mode: AttachMode) {
    const RATES: [f64; 9] = [60.0, 40.0, 40.0, 20.0, 20.0, 20.0, 20.0, 20.0, 80.0];
    const LEN: usize = 128 * 200 - 5;
    let tb = Testbed::create(&RATES).unwrap();
    let names: Vec<String> = (0..9).map(|i| tb.ns(i).to_string()).collect();
    let parent = [8, 8, 8, 0, 0, 1, 2, 8];
    let t = XdpTree::create(&tb, &parent, 256, mode).unwrap();
    assert!(has_xdp(Some(tb.ns(0)), "eth0").unwrap());
    assert!(has_xdp(Some(tb.ns(8)), "eth0").unwrap());
    for iter in 0..2 {
        let it = t.iterate(iter, LEN).unwrap();
        eprintln!(
            "{} iteration {iter}: {:.3} s {:?}",
            mode.name(),
            it.time,
            it.bytes
        );
        let seg = 200 * PACKET_LEN as u64;
        // a plain worker sends its 200 segments (more only if it had to resend or fetch)
        assert!(it.bytes[7] >= seg && it.bytes[7] < 2 * seg);
        // Agg2: one aggregate up, two copies down; the PS: one copy to each of its 4 members
        assert!(
            it.bytes[0] >= 3 * seg && it.bytes[0] < 4 * seg,
            "{}",
            it.bytes[0]
        );
        assert!(
            it.bytes[8] >= 4 * seg && it.bytes[8] < 5 * seg,
            "{}",
            it.bytes[8]
        );
        // aleph-fig10's accounting: every worker's threads used CPU; the programs ran on the
        // aggregators (0, 1, 2) and the PS only, charged there
        assert!(it.cpu[..8].iter().all(|&c| c > 0.0), "{:?}", it.cpu);
        for m in [0, 1, 2, 8] {
            assert!(it.xdp[m] > 0.0, "machine {m}: {:?}", it.xdp);
        }
        for m in 3..8 {
            assert_eq!(it.xdp[m], 0.0, "machine {m} runs no program: {:?}", it.xdp);
        }
        // and not more than the iteration's wall time on 2 cores
        assert!(it.xdp.iter().sum::<f64>() < 2.0 * it.time, "{:?}", it.xdp);
    }
    // injected losses: worker 3's packet of segment 7 never reaches Agg2, the aggregator's own
    // packet of segment 9 never enters its program, worker 7's packet of segment 11 never
    // reaches the PS, and worker 4 loses the copy of segment 13's total (Algorithm 2 recovers
    // the first three from the maps, the last by a fetch from the PS)
    t.inject(&[
        Loss::Up {
            worker: 3,
            segment: 7,
        },
        Loss::Up {
            worker: 0,
            segment: 9,
        },
        Loss::Up {
            worker: 7,
            segment: 11,
        },
        Loss::Down {
            worker: 4,
            segment: 13,
        },
    ]);
    let it = t.iterate(5, LEN).unwrap();
    eprintln!(
        "{} with losses: {:.3} s {:?}",
        mode.name(),
        it.time,
        it.bytes
    );
    let seg = 200 * PACKET_LEN as u64;
    // `iterate` returned, so every worker holds every exact total: the lost gradients were
    // resent (only the Integrity Check sends a skipped packet again) and worker 4's lost copy
    // was fetched (nobody else sends it again); the recovery costs a few packets, not a round
    let pkt = PACKET_LEN as u64;
    for w in 3..8 {
        assert!(
            it.bytes[w] >= seg && it.bytes[w] <= seg + 8 * pkt,
            "worker {w}: {} bytes",
            it.bytes[w]
        );
    }
    assert!(it.bytes[4] > seg, "worker 4 fetched at least segment 13");
    drop(t);
    assert!(!has_xdp(Some(tb.ns(0)), "eth0").unwrap(), "detached");
    drop(tb);
    let left = namespaces().unwrap();
    assert!(
        names.iter().all(|n| !left.contains(n)),
        "namespaces removed"
    );
}

#[test]
fn native_xdp_hierarchy_is_exact_and_cleaned_up() {
    if ready() {
        hierarchy(AttachMode::Native);
    }
}

#[test]
fn generic_xdp_hierarchy_is_exact_and_cleaned_up() {
    if ready() {
        hierarchy(AttachMode::Generic);
    }
}
