//! The cargo-fuzz target `ina_endpoints`'s body ([`inabench_ina::fuzz::endpoints`]) on the
//! stable toolchain: every system with a schedule of each kind of hostile frame, and seeded
//! random inputs. The body panics on a wrong or unfinished sum where no documented finding
//! applies, on a flood, or on any panic of an endpoint.

use inabench_fabric::fuzz::{every_kind, frame, seeded};
use inabench_ina::fuzz::{endpoints, systems};

#[test]
fn every_system_takes_every_kind_of_hostile_frame() {
    every_kind(endpoints, systems().len(), 6, |node| {
        [
            // raw bytes before the first real frame, from an id past the last node
            frame(0, node, 2, 0, &[5, 0, 1, 2, 3, 4, 5]),
            // a cut frame mid-run, from u32::MAX
            frame(2, node, 0, 3, &[7, 0, 20, 0]),
            // a flipped frame and a replay, late in the run and after it
            frame(1, node, 9, 40, &[11, 0, 1, 14, 0, 0x80, 3, 0, 1]),
            frame(3, node, 7, 60_000, &[2, 0]),
        ]
        .concat()
    });
}

#[test]
fn seeded_random_inputs() {
    seeded(endpoints, systems().len(), 200);
}

/// The body can see a wrong sum: a flipped payload byte of a SwitchML contribution (no payload
/// integrity check: the documented finding) ends in wrong results, which `endpoints` lets pass
/// only because the schedule holds a flip.
#[test]
fn the_body_sees_the_documented_switchml_finding() {
    let mut wrong = 0;
    for i in 0..40u16 {
        // frame i of the clean run, its last byte (offset 0xffff modulo the length) flipped,
        // to the switch (node 3: after the three workers) before its first real frame
        let [lo, hi] = i.to_le_bytes();
        let input = frame(1, 3, 4, 0, &[lo, hi, 0, 0xff, 0xff, 0x01]);
        let o = inabench_ina::fuzz::run("switchml", &input);
        assert!(o.exempt && o.injected == 1, "{o:?}");
        wrong += o.wrong;
    }
    assert!(wrong > 0, "no flipped contribution changed a sum");
}

#[test]
fn a_clean_schedule_gives_exact_sums_everywhere() {
    for name in systems() {
        let o = inabench_ina::fuzz::run(name, &[]);
        assert_eq!(
            o,
            inabench_ina::fuzz::Outcome::default(),
            "{name}: a run with nothing hostile"
        );
    }
}

/// Found by the fuzzer (`ina_endpoints`, within seconds): a clean run's frame replayed to ATP's
/// switch after the run is answered with one frame per worker (the switch multicasts), which
/// the body's first bound (two frames per frame) called a flood. The bound is one frame per node.
#[test]
fn a_replay_to_the_atp_switch_after_the_run_may_multicast() {
    endpoints(&[0x5d, 0xff, 0xf9, 0xff, 0xff, 0xd4, 0x0a]);
}

/// The seeds a campaign of `ina_endpoints` starts from (fuzz/seeds/ina_endpoints/, written by
/// this test with INABENCH_WRITE_SEEDS=1): each passes the body, and every system has its own.
#[test]
fn the_committed_seeds_pass_the_body_for_every_system() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/ina_endpoints");
    let inputs = inabench_fabric::fuzz::check_seeds(&dir, inabench_ina::fuzz::seeds, endpoints);
    for (pick, name) in systems().iter().enumerate() {
        let n = inputs.iter().filter(|i| usize::from(i[0]) == pick).count();
        assert!(n >= 4, "{name}: {n} seeds");
    }
}

/// Inputs a campaign of `ina_endpoints` found failing (fuzz/regressions/ina_endpoints/, fuzz/CAMPAIGN.md), replayed:
/// seeded with real frames, libFuzzer forged a contribution within seconds (a clean frame's bytes
/// with more than four of them changed), which the system sums (its documented finding: no check
/// over the values) and which the body, reading the bytes as the fuzzer's own, did not exempt.
#[test]
fn campaign_regressions_pass_the_body() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/regressions/ina_endpoints");
    inabench_fabric::fuzz::run_inputs(&dir, endpoints);
}
