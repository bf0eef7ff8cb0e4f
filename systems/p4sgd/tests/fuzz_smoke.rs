//! The cargo-fuzz target `p4sgd_endpoints`'s body ([`inabench_p4sgd::fuzz::endpoints`]) on the
//! stable toolchain: every system with a schedule of each kind of hostile frame, seeded random
//! inputs, and the body's own sight of a wrong sum.

use inabench_fabric::fuzz::{every_kind, frame, seeded};
use inabench_p4sgd::fuzz::{Outcome, SYSTEMS, endpoints, run};

#[test]
fn every_system_takes_every_kind_of_hostile_frame() {
    every_kind(endpoints, SYSTEMS.len(), 5, |node| {
        [
            frame(0, node, 2, 0, &[5, 0, 1, 2, 3, 4, 5]),
            frame(2, node, 0, 3, &[7, 0, 20, 0]),
            frame(3, node, 5, 8, &[4, 0]),
            frame(1, node, 9, 10, &[11, 0, 1, 14, 0, 0x80, 3, 0, 1]),
            frame(3, node, 7, 60_000, &[2, 0]),
        ]
        .concat()
    });
}

#[test]
fn seeded_random_inputs() {
    seeded(endpoints, SYSTEMS.len(), 150);
}

#[test]
fn a_clean_schedule_gives_exact_sums_everywhere() {
    for (s, name) in SYSTEMS.iter().enumerate() {
        assert_eq!(run(s, &[]), Outcome::default(), "{name}");
    }
}

/// The body can see a wrong sum: P4SGD's switch sums a flipped value (no payload checksum: the
/// documented finding), which `endpoints` lets pass only because the schedule holds a flip.
#[test]
fn the_body_sees_the_documented_flip_finding() {
    let mut wrong = 0;
    for i in 0..12u16 {
        for at in (14..120u16).step_by(5) {
            let [lo, hi] = i.to_le_bytes();
            let [a0, a1] = at.to_le_bytes();
            // frame i of the clean run, byte `at` flipped, to the switch (node 4) first
            let o = run(0, &frame(1, 4, 5, 0, &[lo, hi, 0, a0, a1, 0x01]));
            assert!(o.exempt && o.injected == 1, "{o:?}");
            wrong += o.wrong;
        }
    }
    assert!(wrong > 0, "no flipped value changed a sum");
}

/// The seeds a campaign of `p4sgd_endpoints` starts from (fuzz/seeds/p4sgd_endpoints/, written by this test with
/// INABENCH_WRITE_SEEDS=1): each passes the body, and every one of SYSTEMS has its own.
#[test]
fn the_committed_seeds_pass_the_body_for_every_system() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/p4sgd_endpoints");
    let inputs = inabench_fabric::fuzz::check_seeds(&dir, inabench_p4sgd::fuzz::seeds, endpoints);
    for (pick, name) in SYSTEMS.iter().enumerate() {
        let n = inputs.iter().filter(|i| usize::from(i[0]) == pick).count();
        assert!(n >= 4, "{name}: {n} seeds");
    }
}

/// Inputs a campaign of `p4sgd_endpoints` found failing (fuzz/regressions/p4sgd_endpoints/, fuzz/CAMPAIGN.md), replayed:
/// seeded with real frames, libFuzzer forged a contribution within seconds (a clean frame's bytes
/// with more than four of them changed), which the system sums (its documented finding: no check
/// over the values) and which the body, reading the bytes as the fuzzer's own, did not exempt.
#[test]
fn campaign_regressions_pass_the_body() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/regressions/p4sgd_endpoints");
    inabench_fabric::fuzz::run_inputs(&dir, endpoints);
}
