//! The fuzz body of ALEPH's sans-IO service and members ([`crate::service`]): arbitrary frames
//! interleaved with a valid run, for a cargo-fuzz target (`fuzz/`) and the stable smoke test
//! below to share.
//!
//! The input is read as junk frames, each `[target][from][len][len bytes]` (a `len` of 255
//! means a gradient-sized frame, [`PACKET_LEN`] bytes, and 254 a control-sized one, 16; a short
//! tail is padded with zeros). A run of 3 members, 2 segments and 3 rounds goes on beside them:
//! one valid frame, then one junk frame to any node from any id, until the junk ends; then the
//! valid frames and the members' receive timers until every member is done or nothing is left.
//!
//! What must hold: no panic; one frame never makes an endpoint send more than a bound; the
//! frames in flight stay bounded; and every aggregate a member takes equals the reference sum,
//! with every member done, whenever every junk frame was refused or had no effect (counted as
//! bad, ignored, stale, duplicate or a missed fetch). A well-formed frame the endpoints cannot
//! tell from a member's (a forged gradient, a gradient of a far later round, which resets a
//! slot as the XDP program's map does) can make a sum wrong or stall the run: ALEPH has no
//! authentication, so that is the design's, and the body does not assert exactness then.

use crate::service::{Member, MemberConfig, Service, ServiceConfig, Trainer};
use inabench_fabric::{Endpoint, Nanos, NodeId};
use inabench_wire::ina::aleph::{GRADS, PACKET_LEN};
use std::collections::VecDeque;

const MEMBERS: usize = 3;
const SEGMENTS: u32 = 2;
const ROUNDS: u32 = 3;
const SERVICE: NodeId = MEMBERS as NodeId;
/// Most frames one received frame or timeout may make an endpoint send.
const PER_FRAME: usize = MEMBERS + SEGMENTS as usize + 1;

fn grad(w: usize, round: u32, i: usize) -> i32 {
    (w as i32 + 1)
        .wrapping_mul(1_000_003)
        .wrapping_add(round as i32 * 7919)
        .wrapping_add(i as i32)
}

struct Check {
    w: usize,
    wrong: u64,
}

impl Trainer for Check {
    fn gradients(&mut self, round: u32, out: &mut [i32]) {
        for (i, g) in out.iter_mut().enumerate() {
            *g = grad(self.w, round, i);
        }
    }
    fn aggregate(&mut self, round: u32, sum: &[i32]) {
        let exact = sum
            .iter()
            .enumerate()
            .all(|(i, s)| *s == (0..MEMBERS).fold(0i32, |a, w| a.wrapping_add(grad(w, round, i))));
        self.wrong += u64::from(!exact);
    }
}

/// The counters that change on a frame with no effect.
const HARMLESS: [&str; 5] = ["bad", "ignored", "stale", "duplicates", "fetches_missed"];

fn effect(before: &[(&'static str, u64)], after: &[(&'static str, u64)]) -> bool {
    before
        .iter()
        .zip(after)
        .any(|((k, a), (_, b))| a != b && !HARMLESS.contains(k))
}

fn junk_frames(mut data: &[u8]) -> Vec<(NodeId, NodeId, Vec<u8>)> {
    let mut out = Vec::new();
    while let [t, from, len, rest @ ..] = data {
        let n = match *len {
            255 => PACKET_LEN,
            254 => 16,
            x => usize::from(x),
        };
        let take = n.min(rest.len());
        let mut f = rest[..take].to_vec();
        f.resize(n, 0);
        let to = NodeId::from(*t) % (MEMBERS as NodeId + 1);
        out.push((to, NodeId::from(*from), f));
        data = &rest[take..];
    }
    out
}

/// The body: see the module doc.
pub fn service(data: &[u8]) {
    let _ = run(data);
}

/// What one input did: junk frames delivered, and whether one of them took effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub junk: usize,
    pub took_effect: bool,
}

/// [`service`], saying what the input did (for the smoke test's coverage check).
pub fn run(data: &[u8]) -> Outcome {
    let mut members: Vec<Member<Check>> = (0..MEMBERS)
        .filter_map(|w| {
            Member::new(
                MemberConfig {
                    id: w as NodeId,
                    service: SERVICE,
                    job: 1,
                    bit: w as u8,
                    segments: SEGMENTS,
                    rounds: ROUNDS,
                    receive_timeout_ns: 1_000,
                },
                Check { w, wrong: 0 },
            )
            .ok()
        })
        .collect();
    let Ok(mut svc) = Service::new(ServiceConfig {
        id: SERVICE,
        job: 1,
        members: (0..MEMBERS as NodeId).collect(),
        segments: SEGMENTS,
    }) else {
        return Outcome {
            junk: 0,
            took_effect: false,
        };
    };
    assert_eq!(members.len(), MEMBERS);
    let mut junk: VecDeque<_> = junk_frames(data).into();
    let delivered = junk.len();
    let mut wire: VecDeque<(NodeId, NodeId, Vec<u8>)> = VecDeque::new();
    let mut now: Nanos = 0;
    let mut junk_took_effect = false;

    // what node `to` sends after a frame or a timeout
    fn drain(ep: &mut dyn Endpoint, now: Nanos, wire: &mut VecDeque<(NodeId, NodeId, Vec<u8>)>) {
        let from = ep.id();
        let mut n = 0;
        while let Some(t) = ep.poll_transmit(now) {
            n += 1;
            assert!(
                n <= PER_FRAME,
                "endpoint {from} sent over {PER_FRAME} frames"
            );
            wire.push_back((t.to, from, t.bytes));
        }
    }

    for m in members.iter_mut() {
        drain(m, now, &mut wire);
    }
    // a valid run takes about a hundred steps; a stalled one ends here
    for step in 0..5_000u64 {
        assert!(wire.len() < 1_000, "frames in flight grow without bound");
        now += 10;
        // one valid frame, then one junk frame, while both last; then whichever is left
        let (next, hostile) = if step % 2 == 1 && !junk.is_empty() {
            (junk.pop_front(), true)
        } else if let Some(f) = wire.pop_front() {
            (Some(f), false)
        } else {
            (junk.pop_front(), true)
        };
        if let Some((to, from, frame)) = next {
            let ep: &mut dyn Endpoint = if to == SERVICE {
                &mut svc
            } else {
                match members.get_mut(to as usize) {
                    Some(m) => m,
                    None => continue,
                }
            };
            let before = ep.counters();
            ep.handle_packet(now, from, &frame);
            if hostile && effect(&before, &ep.counters()) {
                junk_took_effect = true;
            }
            drain(ep, now, &mut wire);
            continue;
        }
        // nothing in flight: the members' receive timers
        let Some(t) = members
            .iter()
            .filter(|m| !m.is_done())
            .filter_map(|m| m.poll_timeout())
            .min()
        else {
            break;
        };
        now = now.max(t);
        for m in members.iter_mut() {
            if m.poll_timeout().is_some_and(|d| d <= now) {
                m.handle_timeout(now);
                drain(m, now, &mut wire);
            }
        }
    }
    if !junk_took_effect {
        for m in &members {
            assert!(m.is_done(), "member {} unfinished: {:?}", m.id(), m.stats());
            assert_eq!(m.trainer().wrong, 0, "member {} took a wrong sum", m.id());
        }
    }
    Outcome {
        junk: delivered,
        took_effect: junk_took_effect,
    }
}

/// Valid frames of every kind the run exchanges, for seeding a fuzzer's corpus (each as a
/// one-frame input of this body's format, to the service).
pub fn seeds() -> Vec<Vec<u8>> {
    use inabench_wire::ina::aleph::{ControlKind, ControlRepr};
    use inabench_xdp::proto::{Kind, Packet};
    let g: [i32; GRADS] = std::array::from_fn(|i| grad(0, 1, i));
    let mut frames = vec![
        Packet::gradient(1, 0, 1, 0, g).emit().to_vec(),
        Packet::fetch(1, 1, 1, 1).emit().to_vec(),
        ControlRepr {
            job: 1,
            kind: ControlKind::Done,
            worker: 2,
            round: 1,
            segment: SEGMENTS,
        }
        .to_bytes()
        .to_vec(),
    ];
    let mut r = Packet::gradient(1, 0xff, 1, 1, g);
    r.kind = Kind::Result;
    frames.push(r.emit().to_vec());
    frames.push(
        ControlRepr {
            job: 1,
            kind: ControlKind::Resend,
            worker: 0,
            round: 1,
            segment: 1,
        }
        .to_bytes()
        .to_vec(),
    );
    frames
        .into_iter()
        .enumerate()
        .map(|(i, f)| {
            let len = if f.len() == PACKET_LEN { 255 } else { 254 };
            let to = if i < 3 { SERVICE as u8 } else { 0 };
            let mut b = vec![to, i as u8, len];
            b.extend(f);
            b
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use inabench_rng::SplitMix64;

    #[test]
    fn the_valid_run_alone_finishes_exactly() {
        service(&[]);
    }

    /// Thousands of seeded inputs: random bytes, and the seeds with bytes flipped, cut and
    /// concatenated (the stable form of the cargo-fuzz run).
    #[test]
    fn fuzz_body_smoke() {
        let seeds = seeds();
        let mut g = SplitMix64::new(23);
        let (mut refused, mut took_effect) = (0, 0);
        for _ in 0..3_000 {
            let mut input = Vec::new();
            for _ in 0..1 + g.next_u64() % 4 {
                match g.next_u64() % 3 {
                    0 => {
                        let n = (g.next_u64() % 600) as usize;
                        input.extend((0..n).map(|_| g.next_u64() as u8));
                    }
                    _ => {
                        let mut s = seeds[(g.next_u64() % seeds.len() as u64) as usize].clone();
                        for _ in 0..g.next_u64() % 4 {
                            let i = (g.next_u64() % s.len() as u64) as usize;
                            s[i] ^= 1 << (g.next_u64() % 8);
                        }
                        if g.next_u64().is_multiple_of(4) {
                            s.truncate((g.next_u64() % s.len() as u64) as usize);
                        }
                        input.extend(s);
                    }
                }
            }
            let o = run(&input);
            if o.took_effect {
                took_effect += 1;
            } else if o.junk > 0 {
                refused += 1;
            }
        }
        // both kinds of input were seen: junk refused (the run then checked exact and
        // finished) and well-formed junk that took effect
        assert!(
            refused > 100 && took_effect > 100,
            "{refused} inputs refused, {took_effect} took effect"
        );
        eprintln!("{refused} inputs refused (run exact and finished), {took_effect} took effect");
    }
}
