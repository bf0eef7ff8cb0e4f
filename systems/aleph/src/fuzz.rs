//! The fuzz body of ALEPH's testbed aggregation state machines: the user-space service's
//! [`SlotTable`] (the XDP program's slot semantics) and the members' Gradient Receiver
//! ([`inabench_xdp::proto::Receiver`], Algorithm 2 lines 8-13), both sans-IO. The cargo-fuzz target
//! `aleph_slots` (fuzz/) and the stable `tests/fuzz_slots.rs` call [`slots`]. (The sans-IO
//! service and members of Algorithm 2 have their own body, [`crate::fuzz_service`].)
//!
//! A clean run: 3 members send gradients of 4 segments in 2 rounds to the table; each completed
//! segment's aggregate goes, as a result packet, to that round's receiver. The input is read as
//! hostile frames, each placed before one of the clean run's gradient packets (or after the
//! last) and handed to the table and to the receiver of the round in progress: per frame a byte
//! (kind: low two bits), two bytes for the place, then by kind: the fuzzer's own bytes (a
//! two-byte length, at most 600), a clean packet with one byte flipped (index, two-byte offset,
//! nonzero xor), a clean packet cut short (index, two-byte length), or a packet forged from
//! fields (job, kind, worker, round, segment, a value for every gradient).
//!
//! What must hold: no panic; and whenever no hostile frame was taken (the table answered Bad,
//! Stale or Duplicate, or it did not parse; the receiver refused it), every segment of every
//! round completes exactly once with the reference sum, and both receivers hold every segment's
//! aggregate, exact. A well-formed packet the table cannot tell from a member's is taken: ALEPH
//! has no authentication (the design's, as in `fuzz_service`), and exactness is not asserted then.

use crate::testbed::udp::{Offer, SlotTable};
use inabench_fabric::fuzz::Cursor;
use inabench_xdp::proto::{GRADS, Kind, PACKET_LEN, Packet, Receiver};

const MEMBERS: u8 = 3;
const SEGMENTS: u32 = 4;
const ROUNDS: u32 = 2;
const JOB: u16 = 7;

fn grads(w: u8, round: u32, segment: u32) -> [i32; GRADS] {
    let mut g = [0i32; GRADS];
    for (i, x) in g.iter_mut().enumerate() {
        *x = (i32::from(w) + 1)
            .wrapping_mul(1_000_003)
            .wrapping_add((round * 16 + segment) as i32 * 7919)
            .wrapping_sub(i as i32 * 65_537);
    }
    g
}

fn reference(round: u32, segment: u32) -> [i32; GRADS] {
    let mut s = [0i32; GRADS];
    for w in 0..MEMBERS {
        for (a, g) in s.iter_mut().zip(grads(w, round, segment)) {
            *a = a.wrapping_add(g);
        }
    }
    s
}

/// The clean run's gradient packets, in the order sent (round by round, segment by segment).
fn clean() -> Vec<Packet> {
    let mut v = Vec::new();
    for round in 1..=ROUNDS {
        for segment in 0..SEGMENTS {
            for w in 0..MEMBERS {
                v.push(Packet::gradient(
                    JOB,
                    w,
                    round,
                    segment,
                    grads(w, round, segment),
                ));
            }
        }
    }
    v
}

/// The hostile frames `data` spells: (place, bytes).
fn hostile(data: &[u8], clean: &[Packet]) -> Vec<(usize, Vec<u8>)> {
    let mut c = Cursor(data);
    let mut out = Vec::new();
    while out.len() < 64 {
        let (Some(head), Some(at)) = (c.u8(), c.u16()) else {
            break;
        };
        let at = at as usize % (clean.len() + 1);
        let frame = match head & 3 {
            0 => {
                let Some(len) = c.u16() else { break };
                let len = (len as usize % 601).min(c.0.len());
                let (b, rest) = c.0.split_at(len);
                c.0 = rest;
                b.to_vec()
            }
            1 => {
                let (Some(i), Some(off), Some(x)) = (c.u8(), c.u16(), c.u8()) else {
                    break;
                };
                let mut b = clean[i as usize % clean.len()].emit().to_vec();
                b[off as usize % PACKET_LEN] ^= x.max(1);
                b
            }
            2 => {
                let (Some(i), Some(len)) = (c.u8(), c.u16()) else {
                    break;
                };
                let b = clean[i as usize % clean.len()].emit();
                b[..len as usize % PACKET_LEN].to_vec()
            }
            _ => {
                let (Some(job), Some(kind), Some(worker), Some(round), Some(segment), Some(v)) =
                    (c.u16(), c.u8(), c.u8(), c.u8(), c.u8(), c.u8())
                else {
                    break;
                };
                let kind = match kind % 3 {
                    0 => Kind::Gradient,
                    1 => Kind::Result,
                    _ => Kind::Fetch,
                };
                let p = Packet {
                    // mostly the run's job, so the checks past the job are reached
                    job: if job % 4 == 0 { job } else { JOB },
                    kind,
                    worker: worker % 40,
                    round: u32::from(round % 5),
                    segment: u32::from(segment % 6),
                    grads: [i32::from(v as i8); GRADS],
                };
                p.emit().to_vec()
            }
        };
        out.push((at, frame));
    }
    out.sort_by_key(|(at, _)| *at);
    out
}

/// The seed inputs of the cargo-fuzz target `aleph_slots` (`fuzz/seeds/aleph_slots/`), built
/// from the clean run's own packets (so the fuzzer mutates real headers and gradients): each
/// named by what it holds, one frame at each of five places spread over the run.
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    let clean = clean();
    let n = clean.len();
    let picked: Vec<usize> = (0..5).map(|k| k * (n - 1) / 4).collect();
    let raw = |at: usize, bytes: &[u8]| {
        let mut v = vec![0u8];
        v.extend((at as u16).to_le_bytes());
        v.extend((bytes.len() as u16).to_le_bytes());
        v.extend(bytes);
        v
    };
    let mut out: Vec<(String, Vec<u8>)> = Vec::new();
    let mut add = |name: &str, frames: Vec<Vec<u8>>| out.push((name.to_string(), frames.concat()));
    // a member's packet again, just after the original
    add(
        "duplicate",
        picked
            .iter()
            .map(|&i| raw(i + 1, &clean[i].emit()))
            .collect(),
    );
    // a packet of the next round before this round is done
    add(
        "next_round_early",
        picked
            .iter()
            .map(|&i| raw(i % (n / 2), &clean[(i % (n / 2)) + n / 2].emit()))
            .collect(),
    );
    // the exact result of a segment, before its last member's packet
    add(
        "result",
        picked
            .iter()
            .map(|&i| {
                let p = &clean[i];
                let mut r =
                    Packet::gradient(JOB, 0xff, p.round, p.segment, reference(p.round, p.segment));
                r.kind = Kind::Result;
                raw(i, &r.emit())
            })
            .collect(),
    );
    // a header byte and a gradient byte flipped
    add(
        "flip",
        picked
            .iter()
            .flat_map(|&i| {
                [
                    [
                        &[1u8][..],
                        &(i as u16).to_le_bytes(),
                        &[i as u8],
                        &3u16.to_le_bytes(),
                        &[0x01],
                    ]
                    .concat(),
                    [
                        &[1u8][..],
                        &(i as u16).to_le_bytes(),
                        &[i as u8],
                        &((PACKET_LEN - 3) as u16).to_le_bytes(),
                        &[0x80],
                    ]
                    .concat(),
                ]
            })
            .collect(),
    );
    // cut to half
    add(
        "cut",
        picked
            .iter()
            .map(|&i| {
                [
                    &[2u8][..],
                    &(i as u16).to_le_bytes(),
                    &[i as u8],
                    &((PACKET_LEN / 2) as u16).to_le_bytes(),
                ]
                .concat()
            })
            .collect(),
    );
    // forged from fields: the run's job, a gradient of member 1, round 1, segment 2
    add(
        "forged",
        picked
            .iter()
            .map(|&i| {
                [
                    &[3u8][..],
                    &(i as u16).to_le_bytes(),
                    &1u16.to_le_bytes(),
                    &[0, 1, 1, 2, 7],
                ]
                .concat()
            })
            .collect(),
    );
    out
}

/// What a run beside the hostile frames came to.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Outcome {
    /// Hostile frames the table or a receiver took (added, completed, or a new aggregate).
    pub taken: u64,
    /// Hostile frames handed over.
    pub hostile: u64,
    /// (round, segment) completions whose sum is not the reference.
    pub wrong: u64,
    /// (round, segment) pairs completed other than exactly once.
    pub not_once: u64,
    /// Segments a receiver lacks, or holds a wrong aggregate for, at the end.
    pub receiver_wrong: u64,
}

/// Run the clean schedule beside the hostile frames `data` spells.
pub fn run(data: &[u8]) -> Outcome {
    let clean = clean();
    let plan = hostile(data, &clean);
    let mut table = SlotTable::new(JOB, u32::from(MEMBERS), SEGMENTS)
        .unwrap_or_else(|e| panic!("a slot table of {MEMBERS} members: {e}"));
    let mut receivers: Vec<Receiver> = (1..=ROUNDS)
        .map(|r| Receiver::new(r, SEGMENTS as usize))
        .collect();
    let mut completed = vec![0u64; (ROUNDS * SEGMENTS) as usize];
    let mut o = Outcome::default();
    let mut next = plan.iter().peekable();
    for i in 0..=clean.len() {
        // the round in progress: the next clean packet's (the last round after the end)
        let round = clean.get(i).map_or(ROUNDS, |p| p.round);
        while let Some((_, bytes)) = next.next_if(|(at, _)| *at == i) {
            o.hostile += 1;
            let Ok(p) = Packet::parse(bytes) else {
                continue;
            };
            if matches!(table.offer(&p), Offer::Added | Offer::Complete(_)) {
                o.taken += 1;
            }
            if receivers[(round - 1) as usize].on_packet(&p) {
                o.taken += 1;
            }
        }
        let Some(p) = clean.get(i) else { break };
        if let Offer::Complete(sum) = table.offer(p) {
            let k = ((p.round - 1) * SEGMENTS + p.segment) as usize;
            completed[k] += 1;
            if *sum != reference(p.round, p.segment) {
                o.wrong += 1;
            }
            // the multicast result, through its bytes, to the round's receiver
            let mut r = Packet::gradient(JOB, 0xff, p.round, p.segment, *sum);
            r.kind = Kind::Result;
            let r = Packet::parse(&r.emit()).unwrap_or_else(|e| panic!("a result parses: {e}"));
            receivers[(p.round - 1) as usize].on_packet(&r);
        }
    }
    o.not_once = completed.iter().filter(|&&n| n != 1).count() as u64;
    for (r, rx) in receivers.iter().enumerate() {
        for s in 0..SEGMENTS {
            if rx.aggregate(s) != Some(&reference(r as u32 + 1, s)) {
                o.receiver_wrong += 1;
            }
        }
    }
    o
}

/// The body: exact results whenever no hostile frame was taken.
pub fn slots(data: &[u8]) {
    let o = run(data);
    if o.taken == 0 {
        assert!(
            o.wrong == 0 && o.not_once == 0 && o.receiver_wrong == 0,
            "{o:?} though no hostile frame was taken"
        );
    }
}
