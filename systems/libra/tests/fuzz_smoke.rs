//! The cargo-fuzz target `libra_endpoints`'s body ([`inabench_libra::fuzz::endpoints`]) on the
//! stable toolchain: every variant with a schedule of each kind of hostile frame, seeded random
//! inputs, and the body's own sight of a wrong sum.

use inabench_fabric::fuzz::{every_kind, frame, seeded};
use inabench_libra::fuzz::{Outcome, VARIANTS, endpoints, run};

#[test]
fn every_variant_takes_every_kind_of_hostile_frame() {
    every_kind(endpoints, VARIANTS.len(), 5, |node| {
        [
            frame(0, node, 2, 0, &[5, 0, 1, 2, 3, 4, 5]),
            frame(2, node, 0, 3, &[7, 0, 20, 0]),
            frame(1, node, 9, 10, &[11, 0, 1, 14, 0, 0x80, 3, 0, 1]),
            frame(3, node, 7, 60_000, &[2, 0]),
        ]
        .concat()
    });
}

#[test]
fn seeded_random_inputs() {
    seeded(endpoints, VARIANTS.len(), 150);
}

#[test]
fn a_clean_schedule_gives_exact_sums_everywhere() {
    for (v, name) in VARIANTS.iter().enumerate() {
        assert_eq!(run(v, &[]), Outcome::default(), "{name}");
    }
}

/// The body can see a wrong sum: Libra as published adds a replayed push twice (the documented
/// finding), which `endpoints` lets pass only because the schedule holds a replay.
#[test]
fn the_body_sees_the_documented_replay_finding() {
    let mut wrong = 0;
    for i in 0..40u16 {
        let [lo, hi] = i.to_le_bytes();
        // the clean run's frame i replayed to the switch (node 3) mid-run
        let o = run(0, &frame(3, 3, 4, 5, &[lo, hi]));
        assert!(o.exempt && o.injected == 1, "{o:?}");
        wrong += o.wrong;
    }
    assert!(wrong > 0, "no replayed push changed a sum");
}

/// The seeds a campaign of `libra_endpoints` starts from (fuzz/seeds/libra_endpoints/, written by this test with
/// INABENCH_WRITE_SEEDS=1): each passes the body, and every one of VARIANTS has its own.
#[test]
fn the_committed_seeds_pass_the_body_for_every_system() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/libra_endpoints");
    let inputs = inabench_fabric::fuzz::check_seeds(&dir, inabench_libra::fuzz::seeds, endpoints);
    for (pick, name) in VARIANTS.iter().enumerate() {
        let n = inputs.iter().filter(|i| usize::from(i[0]) == pick).count();
        assert!(n >= 4, "{name}: {n} seeds");
    }
}

/// Inputs a campaign of `libra_endpoints` found failing (fuzz/regressions/libra_endpoints/, fuzz/CAMPAIGN.md), replayed:
/// seeded with real frames, libFuzzer forged a contribution within seconds (a clean frame's bytes
/// with more than four of them changed), which the system sums (its documented finding: no check
/// over the values) and which the body, reading the bytes as the fuzzer's own, did not exempt.
#[test]
fn campaign_regressions_pass_the_body() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/regressions/libra_endpoints");
    inabench_fabric::fuzz::run_inputs(&dir, endpoints);
}
