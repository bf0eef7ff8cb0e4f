//! The sim fabric's speed: frame events per second with six hosts sending through a forwarding
//! switch (each host sends 100,000 frames of 1 KB to its successor with 16 in flight, a small
//! credit frame coming back per frame).
//!
//! Two sets of endpoints run the same exchange (the same frames, lengths, destinations and order,
//! so the fabric schedules the same events):
//! - `sim/frame_events`: [`Lean`], endpoints that cost as little as an endpoint can, so the figure
//!   is the fabric's own rate: the switch forwards the very buffer it received (the sim hands it
//!   back through `Endpoint::recycle` right after `handle_packet`), hosts reuse delivered buffers
//!   without zeroing them (they write the three header bytes they send), and the run ends when the
//!   event queue empties (no stop condition summed over the nodes per event).
//! - `sim/frame_events_credit_ring`: `fabric::testing::CreditRing`, the endpoints this bench used
//!   until 2026-11-26 (each forward a copy into a pooled buffer, each frame a zeroed 1 KB buffer,
//!   the stop condition summing every node's count per event): kept so the two figures can be
//!   compared; at the last stop ~45% of its samples were those endpoints' own memset/memcpy.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use inabench_fabric::endpoint::{Endpoint, Nanos, NodeId, Transmit};
use inabench_fabric::fault::Faults;
use inabench_fabric::sim::{LinkConfig, NodeConfig, SimFabric};
use inabench_fabric::testing::CreditRing;
use std::collections::VecDeque;

const HOSTS: u32 = 6;
const FRAMES: u64 = 100_000;
/// Frames each host keeps in flight to its successor; credits come back per frame.
const CREDIT: u32 = 16;
const DATA_LEN: usize = 1024;
const CREDIT_LEN: usize = 4;
/// [`run_lean`]'s events: each data frame and each credit, one event at the switch and one at
/// the host.
const LEAN_EVENTS: u64 = 4 * HOSTS as u64 * FRAMES;
/// [`run_credit_ring`]'s events: it stops when the last data frame arrives, before the 168 events
/// of the credits then in flight. The sim is deterministic, so the count is fixed (it was counted
/// once); a different count means the sim's schedule changed. Both counts are constants so that
/// a run with `--test` (one iteration per bench, no measurement) runs each exchange once.
const CREDIT_RING_EVENTS: u64 = 2_399_832;

fn cfg() -> Vec<NodeConfig> {
    vec![
        NodeConfig {
            rx_cost_ns: 0,
            tx_cost_ns: 0
        };
        HOSTS as usize + 1
    ]
}

/// The exchange with `CreditRing`'s endpoints, stopped when the last data frame arrives.
fn run_credit_ring() -> u64 {
    let nodes = CreditRing::nodes(HOSTS, FRAMES, CREDIT);
    let mut f = SimFabric::new(
        nodes,
        cfg(),
        HOSTS,
        LinkConfig::gbps100(),
        Faults::default(),
    );
    let rep = f.run_until(u64::MAX, |n| {
        CreditRing::received(n) == u64::from(HOSTS) * FRAMES
    });
    assert!(rep.finished, "every frame arrives");
    assert_eq!(rep.events, CREDIT_RING_EVENTS, "the sim's schedule changed");
    rep.events
}

/// The same exchange as `CreditRing` (frames: byte 0 = destination host, byte 1 = kind, 0 data
/// and 1 credit, byte 2 = source host), at an endpoint's least cost.
enum Lean {
    Switch {
        id: NodeId,
        /// The destination of the frame just handled; its buffer comes back in `recycle`.
        pending: Option<NodeId>,
        queue: VecDeque<Transmit>,
    },
    Host {
        id: NodeId,
        hosts: u32,
        frames: u64,
        sent: u64,
        received: u64,
        credit: u32,
        /// The hosts owed a credit frame, in arrival order.
        acks: VecDeque<u8>,
        /// Delivered buffers, by length (a data buffer is reused for data, a credit's for credits).
        data: Vec<Vec<u8>>,
        small: Vec<Vec<u8>>,
    },
}

impl Lean {
    fn nodes() -> Vec<Lean> {
        let mut nodes: Vec<Lean> = (0..HOSTS)
            .map(|id| Lean::Host {
                id,
                hosts: HOSTS,
                frames: FRAMES,
                sent: 0,
                received: 0,
                credit: CREDIT,
                acks: VecDeque::with_capacity(64),
                data: Vec::with_capacity(64),
                small: Vec::with_capacity(64),
            })
            .collect();
        nodes.push(Lean::Switch {
            id: HOSTS,
            pending: None,
            queue: VecDeque::with_capacity(64),
        });
        nodes
    }

    fn received(nodes: &[Lean]) -> u64 {
        nodes
            .iter()
            .map(|n| match n {
                Lean::Host { received, .. } => *received,
                Lean::Switch { .. } => 0,
            })
            .sum()
    }
}

impl Endpoint for Lean {
    fn id(&self) -> NodeId {
        match self {
            Lean::Switch { id, .. } | Lean::Host { id, .. } => *id,
        }
    }
    #[inline]
    fn handle_packet(&mut self, _now: Nanos, _from: NodeId, frame: &[u8]) {
        match self {
            Lean::Switch { pending, .. } => *pending = frame.first().map(|&d| NodeId::from(d)),
            Lean::Host {
                received,
                credit,
                acks,
                ..
            } => match frame.get(1) {
                Some(1) => *credit += 1,
                _ => {
                    *received += 1;
                    acks.push_back(frame.get(2).copied().unwrap_or(0));
                }
            },
        }
    }
    #[inline]
    fn recycle(&mut self, buf: Vec<u8>) {
        match self {
            Lean::Switch { pending, queue, .. } => {
                if let Some(to) = pending.take() {
                    queue.push_back(Transmit { to, bytes: buf });
                }
            }
            Lean::Host { data, small, .. } => {
                if buf.len() == DATA_LEN {
                    data.push(buf);
                } else if buf.len() == CREDIT_LEN {
                    small.push(buf);
                }
            }
        }
    }
    #[inline]
    fn poll_transmit(&mut self, _now: Nanos) -> Option<Transmit> {
        match self {
            Lean::Switch { queue, .. } => queue.pop_front(),
            Lean::Host {
                id,
                hosts,
                frames,
                sent,
                credit,
                acks,
                data,
                small,
                ..
            } => {
                if let Some(src) = acks.pop_front() {
                    let mut b = small.pop().unwrap_or_else(|| vec![0; CREDIT_LEN]);
                    b[0] = src;
                    b[1] = 1;
                    return Some(Transmit {
                        to: *hosts,
                        bytes: b,
                    });
                }
                if *sent < *frames && *credit > 0 {
                    *credit -= 1;
                    *sent += 1;
                    // a reused buffer keeps its old payload: only the header bytes matter here
                    let mut f = data.pop().unwrap_or_else(|| vec![0; DATA_LEN]);
                    f[0] = ((*id + 1) % *hosts) as u8;
                    f[1] = 0;
                    f[2] = *id as u8;
                    return Some(Transmit {
                        to: *hosts,
                        bytes: f,
                    });
                }
                None
            }
        }
    }
    fn poll_timeout(&self) -> Option<Nanos> {
        None
    }
    fn handle_timeout(&mut self, _now: Nanos) {}
}

/// The exchange with [`Lean`]'s endpoints, run until no event is left (every data frame and
/// every credit delivered).
fn run_lean() -> u64 {
    let mut f = SimFabric::new(
        Lean::nodes(),
        cfg(),
        HOSTS,
        LinkConfig::gbps100(),
        Faults::default(),
    );
    let events = f.run_until(u64::MAX, |_| false).events;
    assert_eq!(
        Lean::received(f.nodes()),
        u64::from(HOSTS) * FRAMES,
        "every frame arrives"
    );
    assert_eq!(events, LEAN_EVENTS, "no frame lost or added");
    events
}

fn sim(c: &mut Criterion) {
    let mut g = c.benchmark_group("sim");
    g.sample_size(10);
    g.throughput(Throughput::Elements(LEAN_EVENTS));
    g.bench_function("frame_events", |b| b.iter(run_lean));
    g.throughput(Throughput::Elements(CREDIT_RING_EVENTS));
    g.bench_function("frame_events_credit_ring", |b| b.iter(run_credit_ring));
    g.finish();
}

criterion_group!(benches, sim);
criterion_main!(benches);
