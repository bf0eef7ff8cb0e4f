//! The TCP data planes of the testbed (BytePS-style PS, ALEPH with TCP, Horovod ring) on
//! rate-limited namespaces: every worker's aggregate equals the reference sum, bytes per machine
//! are what each architecture sends, and the namespaces are gone afterwards. Needs root: skipped
//! with a message without it, required when `CI` is set.

use inabench_aleph::testbed::net::{TcpRing, TcpTree, Testbed};
use inabench_xdp::netns::namespaces;

fn ready() -> bool {
    if inabench_fabric::netns::is_root() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must run the testbed tests as root"
    );
    eprintln!("skipped: the testbed needs root");
    false
}

const RATES: [f64; 9] = [60.0, 40.0, 40.0, 20.0, 20.0, 20.0, 20.0, 20.0, 80.0];
const LEN: usize = 40_000;

#[test]
fn tcp_ps_hierarchy_and_ring_aggregate_exactly() {
    if !ready() {
        return;
    }
    let tb = Testbed::create(&RATES).unwrap();
    let names: Vec<String> = (0..9).map(|i| tb.ns(i).to_string()).collect();
    // BytePS: every worker pushes to the PS and pulls the total
    let ps = TcpTree::connect(&tb, &[8; 8]).unwrap();
    let it = ps.iterate(1, LEN).unwrap();
    eprintln!("byteps {:.3} s {:?}", it.time, it.bytes);
    let g = (LEN * 4) as u64;
    for w in 0..8 {
        assert!(it.bytes[w] >= g && it.bytes[w] < g + g / 100, "worker {w}");
    }
    assert!(
        it.bytes[8] >= 8 * g,
        "the PS sends the total to each worker"
    );
    // ALEPH with TCP: worker 0 aggregates 3 and 4, worker 1 aggregates 5, worker 2 aggregates 6
    let parent = [8, 8, 8, 0, 0, 1, 2, 8];
    let h = TcpTree::connect(&tb, &parent).unwrap();
    let it = h.iterate(2, LEN).unwrap();
    eprintln!("aleph-tcp {:.3} s {:?}", it.time, it.bytes);
    assert!(
        it.bytes[0] >= 3 * g,
        "agg2 sends one aggregate up and two totals down"
    );
    assert!(
        it.bytes[8] >= 4 * g && it.bytes[8] < 5 * g,
        "the PS serves 4 senders"
    );
    let it = h.iterate(3, LEN + 1).unwrap();
    assert_eq!(it.worker_times.len(), 8);
    // Horovod: 2(n-1)/n of the gradient per worker, nothing at the PS
    let ring = TcpRing::connect(&tb, 8).unwrap();
    let it = ring.iterate(4, LEN).unwrap();
    eprintln!("horovod {:.3} s {:?}", it.time, it.bytes);
    for w in 0..8 {
        assert_eq!(it.bytes[w], 2 * 7 * g / 8, "worker {w}");
    }
    assert_eq!(it.bytes[8], 0);
    drop((ps, h, ring));
    drop(tb);
    let left = namespaces().unwrap();
    assert!(
        names.iter().all(|n| !left.contains(n)),
        "namespaces removed"
    );
}
