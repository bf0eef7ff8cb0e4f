//! aleph-fig12's model: the curve's reading, the CSV reader's errors, and a default curve that
//! really learns (the testbed's communication times: workloads/tests/aleph_convergence.rs).

use inabench_aleph::convergence::{Curve, CurveError, trained_curve};

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
        assert!(e.to_string().contains(says), "{text:?}: {e}");
    }
    assert_eq!(
        Curve::from_csv("epoch,accuracy\n1,40\n3,50\n", 0.1),
        Err(CurveError::EpochOutOfOrder {
            line: 3,
            epoch: 3,
            expected: 2
        })
    );
    assert_eq!(
        Curve::from_csv("epoch,accuracy\n", 0.1),
        Err(CurveError::Empty)
    );
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
