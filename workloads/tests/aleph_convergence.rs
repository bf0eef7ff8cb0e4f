//! aleph-fig12's model: the testbed's communication times against hand calculations, with Sec.
//! 6.3's clustering as the testbed workloads state it.

#![cfg(feature = "aleph")]

use inabench_aleph::convergence::{System, comm_time};
use inabench_workloads::aleph::testbed_training::paper_clustering;

const G: f64 = 97e6;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1e-12)
}

#[test]
fn communication_times_match_hand_calculations() {
    let rates = [30.0, 20.0, 20.0, 10.0, 10.0, 10.0, 10.0, 10.0];
    let direct = [8; 8];
    // BytePS: 8 pushes (and pulls) share the PS's 40 Gbit/s: 5 Gbit/s each
    let t = comm_time(System::BytePs, &rates, 40.0, G, &direct).unwrap();
    assert!(close(t, G * 8.0 / 5e9), "{t}");
    // Horovod: 2(n-1)/n of the gradient at the slowest link (10 Gbit/s)
    let t = comm_time(System::Horovod, &rates, 40.0, G, &direct).unwrap();
    assert!(close(t, 2.0 * 7.0 / 8.0 * G * 8.0 / 10e9), "{t}");
    // ALEPH without clusters is BytePS
    let t = comm_time(System::Aleph, &rates, 40.0, G, &direct).unwrap();
    assert!(close(t, G * 8.0 / 5e9), "{t}");
    // Sec. 6.3's clustering: 4 flows at the PS (10 each); Agg2's link carries 3 x 10 of its 30,
    // each Agg1's 2 x 10 of its 20, the members theirs at 10: all at 10 Gbit/s
    let p = paper_clustering(&rates).unwrap();
    let t = comm_time(System::Aleph, &rates, 40.0, G, &p).unwrap();
    assert!(close(t, G * 8.0 / 10e9), "{t}");
    // a 30 Gbit/s aggregator of three members would need 4 x 10: its link limits to 7.5 each
    let t = comm_time(
        System::Aleph,
        &[30.0, 10.0, 10.0, 10.0],
        40.0,
        G,
        &[4, 0, 0, 0],
    )
    .unwrap();
    assert!(close(t, G * 8.0 / 7.5e9), "{t}");
    assert!(comm_time(System::BytePs, &rates, 40.0, G, &[8; 7]).is_err());
    assert!(comm_time(System::BytePs, &rates, 40.0, 0.0, &direct).is_err());
}
