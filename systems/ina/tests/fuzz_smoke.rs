//! The cargo-fuzz target `ina_endpoints`'s body ([`inabench_ina::fuzz::endpoints`]) on the
//! stable toolchain: every system with a schedule of each kind of hostile frame, and seeded
//! random inputs. The body panics on a wrong or unfinished sum where no documented finding
//! applies, on a flood, or on any panic of an endpoint.

use inabench_ina::fuzz::{SYSTEMS, endpoints};
use inabench_rng::SplitMix64;

/// One scheduled frame in the schedule's encoding (see `inabench_fabric::fuzz::schedule`).
fn frame(kind: u8, node: u8, from: u8, before: u16, rest: &[u8]) -> Vec<u8> {
    let mut v = vec![(node << 2) | kind, from];
    v.extend(before.to_le_bytes());
    v.extend(rest);
    v
}

#[test]
fn every_system_takes_every_kind_of_hostile_frame() {
    for (s, _) in SYSTEMS.iter().enumerate() {
        for node in 0..6u8 {
            let mut input = vec![s as u8];
            // raw bytes before the first real frame, from an id past the last node
            input.extend(frame(0, node, 2, 0, &[5, 0, 1, 2, 3, 4, 5]));
            // a cut frame mid-run, from u32::MAX
            input.extend(frame(2, node, 0, 3, &[7, 0, 20, 0]));
            // a flipped frame and a replay, late in the run and after it
            input.extend(frame(1, node, 9, 40, &[11, 0, 1, 14, 0, 0x80, 3, 0, 1]));
            input.extend(frame(3, node, 7, 60_000, &[2, 0]));
            endpoints(&input);
        }
    }
}

#[test]
fn seeded_random_inputs() {
    let mut g = SplitMix64::new(23);
    for k in 0..200u64 {
        let len = (g.next_u64() % 300) as usize;
        let mut input: Vec<u8> = (0..len).map(|_| g.next_u64() as u8).collect();
        if let Some(b) = input.first_mut() {
            *b = (k % SYSTEMS.len() as u64) as u8;
        }
        endpoints(&input);
    }
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
    for name in SYSTEMS {
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
