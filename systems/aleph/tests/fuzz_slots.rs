//! The cargo-fuzz target `aleph_slots`'s body ([`inabench_aleph::fuzz::slots`]) on the stable
//! toolchain: each kind of hostile frame, seeded random inputs, and the body's own sight of a
//! wrong aggregate.

use inabench_aleph::fuzz::{Outcome, run, slots};
use inabench_rng::SplitMix64;

#[test]
fn a_clean_run_is_exact() {
    assert_eq!(run(&[]), Outcome::default());
}

#[test]
fn refused_frames_change_nothing() {
    // raw bytes, a flipped magic, a cut packet, a forged gradient of another job, of a member
    // bit outside the group, and a stale one (round 0) after round 1 began: none is taken
    let input = [
        &[0u8, 3, 0, 4, 0, 1, 2, 3, 4][..],
        &[1, 5, 0, 2, 0, 0, 0xff],
        &[2, 6, 0, 2, 100, 0],
        &[3, 7, 0, 4, 0, 0, 1, 1, 0, 9],
        &[3, 8, 0, 7, 0, 0, 33, 1, 0, 9],
        &[3, 40, 0, 7, 0, 0, 1, 0, 0, 9],
    ]
    .concat();
    let o = run(&input);
    assert_eq!(o.hostile, 6);
    assert_eq!(o.taken, 0, "{o:?}");
    assert_eq!((o.wrong, o.not_once, o.receiver_wrong), (0, 0, 0), "{o:?}");
    slots(&input);
}

/// The body sees a wrong sum: a forged gradient of the run's job for member 0, round 1,
/// segment 0 before the real one is taken (no authentication: the design's), and the real
/// one is then a duplicate.
#[test]
fn a_forged_gradient_is_taken_and_seen() {
    let o = run(&[3, 0, 0, 7, 0, 0, 0, 1, 0, 9]);
    assert_eq!(o.taken, 1, "{o:?}");
    assert!(o.wrong > 0 && o.receiver_wrong > 0, "{o:?}");
}

#[test]
fn seeded_random_inputs() {
    let mut g = SplitMix64::new(23);
    for _ in 0..3000 {
        let len = (g.next_u64() % 200) as usize;
        let input: Vec<u8> = (0..len).map(|_| g.next_u64() as u8).collect();
        slots(&input);
    }
}

/// The seeds campaigns of `aleph_slots` and `aleph_service` start from (fuzz/seeds/<target>/,
/// written by this test with INABENCH_WRITE_SEEDS=1): each passes its body; the slot seeds hold
/// whole clean packets (raw) and the service seeds every kind of valid frame.
#[test]
fn the_committed_seeds_pass_the_bodies() {
    let seeds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds");
    let slot_inputs = inabench_fabric::fuzz::check_seeds(
        &seeds.join("aleph_slots"),
        inabench_aleph::fuzz::seeds,
        slots,
    );
    assert!(slot_inputs.len() >= 6, "{} slot seeds", slot_inputs.len());
    assert!(
        slot_inputs
            .iter()
            .any(|i| i.len() > 5 * inabench_wire::ina::aleph::PACKET_LEN),
        "no seed of whole packets"
    );
    let service_inputs = inabench_fabric::fuzz::check_seeds(
        &seeds.join("aleph_service"),
        || {
            inabench_aleph::fuzz_service::seeds()
                .into_iter()
                .enumerate()
                .map(|(i, s)| (format!("frame-{i}"), s))
                .collect()
        },
        inabench_aleph::fuzz_service::service,
    );
    assert_eq!(service_inputs, inabench_aleph::fuzz_service::seeds());
}
