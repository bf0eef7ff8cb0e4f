//! The cargo-fuzz target `luwu_endpoints`'s body ([`inabench_luwu::fuzz::endpoints`]) on the
//! stable toolchain: both push/pull jobs with a schedule of each kind of hostile frame, seeded
//! random inputs, and the body's own sight of an inexact job.

use inabench_fabric::fuzz::{every_kind, frame, seeded};
use inabench_luwu::fuzz::{SYSTEMS, endpoints, run};

#[test]
fn both_jobs_take_every_kind_of_hostile_frame() {
    every_kind(endpoints, SYSTEMS.len(), 5, |node| {
        [
            frame(0, node, 2, 0, &[5, 0, 1, 2, 3, 4, 5]),
            frame(0, node, 0, 9, &[0, 0]),
            frame(2, node, 0, 3, &[7, 0, 20, 0]),
            frame(1, node, 9, 10, &[11, 0, 1, 14, 0, 0x80, 3, 0, 1]),
            frame(3, node, 7, 60_000, &[2, 0]),
        ]
        .concat()
    });
}

#[test]
fn seeded_random_inputs() {
    seeded(endpoints, SYSTEMS.len(), 100);
}

#[test]
fn a_clean_schedule_gives_an_exact_job() {
    for (s, name) in SYSTEMS.iter().enumerate() {
        let o = run(s, &[]);
        assert!(
            o.finished && o.exact && o.changed_after == 0 && !o.exempt,
            "{name}: {o:?}"
        );
    }
}

/// The body can see an inexact job: a flipped value (no checksum: the documented finding),
/// which `endpoints` lets pass only because the schedule holds a flip.
#[test]
fn the_body_sees_the_documented_flip_finding() {
    let mut inexact = 0;
    for i in (0..600u16).step_by(7) {
        for at in (30..100u16).step_by(3) {
            let [lo, hi] = i.to_le_bytes();
            let [a0, a1] = at.to_le_bytes();
            // frame i of the clean run, byte `at` flipped, to the switch (node 3) first
            let o = run(0, &frame(1, 3, 4, 0, &[lo, hi, 0, a0, a1, 0x01]));
            assert!(o.exempt && o.injected == 1, "{o:?}");
            inexact += usize::from(!o.exact);
        }
    }
    assert!(inexact > 0, "no flipped frame made the job inexact");
}

/// The seeds a campaign of `luwu_endpoints` starts from (fuzz/seeds/luwu_endpoints/, written by this test with
/// INABENCH_WRITE_SEEDS=1): each passes the body, and every one of SYSTEMS has its own.
#[test]
fn the_committed_seeds_pass_the_body_for_every_system() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/luwu_endpoints");
    let inputs = inabench_fabric::fuzz::check_seeds(&dir, inabench_luwu::fuzz::seeds, endpoints);
    for (pick, name) in SYSTEMS.iter().enumerate() {
        let n = inputs.iter().filter(|i| usize::from(i[0]) == pick).count();
        assert!(n >= 4, "{name}: {n} seeds");
    }
}
