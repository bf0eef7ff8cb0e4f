//! aleph-fig12's model: the curve's reading, the CSV reader's errors, the testbed's communication
//! times against hand calculations, and a default curve that really learns.

use inabench_aleph::convergence::{Curve, System, comm_time, trained_curve};
use inabench_aleph::testbed::workloads::paper_clustering;

const G: f64 = 97e6;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1e-12)
}

#[test]
fn the_curve_is_read_proportionally_and_linearly() {
    let c = Curve {
        acc: vec![0.4, 0.6, 0.7],
        start: 0.1,
    };
    // 150 paper epochs on a 3-epoch curve: epoch 50 is the curve's first epoch
    assert!(close(c.at(50.0, 150.0), 0.4));
    assert!(close(c.at(25.0, 150.0), 0.25), "{}", c.at(25.0, 150.0));
    assert!(close(c.at(75.0, 150.0), 0.5));
    assert!(close(c.at(150.0, 150.0), 0.7));
    assert!(
        close(c.at(400.0, 150.0), 0.7),
        "after the end: the last value"
    );
    assert!(close(c.at(0.0, 150.0), 0.1));
    assert!(close(c.at(-3.0, 150.0), 0.1));
}

#[test]
fn the_csv_curve_is_checked_line_by_line() {
    let c = Curve::from_csv("epoch,accuracy\n1, 40\n2,55.5\n\n3,61\n", 0.1).unwrap();
    assert_eq!(c.acc, vec![0.40, 0.555, 0.61]);
    for (text, says) in [
        (
            "epoch,accuracy\n1,40\n3,50\n",
            "line 3: epoch 3 where epoch 2",
        ),
        ("epoch,accuracy\n1,140\n", "line 2: accuracy 140"),
        ("epoch,accuracy\n1;40\n", "line 2: `1;40` is not"),
        ("epoch,accuracy\n1,40,7\n", "line 2"),
        ("epoch,accuracy\n", "no `epoch,accuracy` line"),
    ] {
        let e = Curve::from_csv(text, 0.1).unwrap_err();
        assert!(e.contains(says), "{text:?}: {e}");
    }
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

#[test]
fn the_default_curve_learns() {
    let c = trained_curve(3, 2000, 1);
    assert_eq!(c.acc.len(), 3);
    // 10 classes: chance is 10%; a broken trainer or prediction stays there
    assert!(c.start < 0.25, "{c:?}");
    assert!(c.acc[2] > 0.35, "{c:?}");
    assert!(c.acc[2] > c.start + 0.2, "{c:?}");
    // seeded: the same curve again
    assert_eq!(trained_curve(3, 2000, 1), c);
}
