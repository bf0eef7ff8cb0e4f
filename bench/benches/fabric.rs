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
//!
//! A frame event is a frame delivered to a node (the report's `frames_rx`, summed): the sim's own
//! `events` also counts the hosts' transmit wake-ups since transmit became pull-based, which
//! broke this bench's fixed event counts (2026-11-29: `sim/frame_events` counted 3.6 M events
//! for its 2.4 M frames).
//!
//! And the 64-worker, 1 MiB-a-worker point of the benchmark family (issue 39: the sim's event
//! rate bounds it), frames delivered per wall second, the whole run (setup included: building
//! the nodes and their gradients is part of what a point costs):
//! - `sim64/{netreduce,switchml,ring_allreduce}`: the system's own endpoints, as
//!   `inabench_ina_run::drive::run_sim_stack` runs them (100 Gbps, MTU 1024, 100 us timeout, no loss),
//!   with the hosts' stack in the NIC (`HostStack::Nic`: no CPU cost charged, no transmit
//!   buffer), so the figure is the fabric plus the endpoints' own code;
//! - `sim64/null`: [`Lean`]'s endpoints on 64 hosts, each sending 1024 frames of 1 KB (1 MiB) to
//!   its successor: the fabric's own ceiling at that size of star.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use inabench_fabric::endpoint::{Endpoint, Nanos, NodeId, Transmit};
use inabench_fabric::fault::Faults;
use inabench_fabric::sim::{LinkConfig, NodeConfig, SimFabric, SimReport};
use inabench_fabric::testing::CreditRing;
use inabench_ina::common::AllReduceConfig;
use inabench_ina::hoststack::HostStack;
use std::collections::VecDeque;

const HOSTS: u32 = 6;
const FRAMES: u64 = 100_000;
/// Frames each host keeps in flight to its successor; credits come back per frame.
const CREDIT: u32 = 16;
const DATA_LEN: usize = 1024;
const CREDIT_LEN: usize = 4;
/// [`run_lean`]'s frame events (frames delivered): each data frame and each credit, once at the
/// switch and once at the host. (The sim's own event count is larger: it also counts the hosts'
/// transmit wake-ups of pull-based transmit.)
const LEAN_EVENTS: u64 = 4 * HOSTS as u64 * FRAMES;

/// The frame events of a run: the frames delivered to every node.
fn delivered(rep: &SimReport) -> u64 {
    rep.nodes.iter().map(|n| n.frames_rx).sum()
}

fn cfg() -> Vec<NodeConfig> {
    vec![
        NodeConfig {
            rx_cost_ns: 0,
            tx_cost_ns: 0
        };
        HOSTS as usize + 1
    ]
}

/// The exchange with `CreditRing`'s endpoints, stopped when the last data frame arrives; its
/// frame events (it stops before the credits then in flight arrive; the sim is deterministic, so
/// the count is the same every run).
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
    delivered(rep)
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
    fn nodes(hosts: u32, frames: u64) -> Vec<Lean> {
        let mut nodes: Vec<Lean> = (0..hosts)
            .map(|id| Lean::Host {
                id,
                hosts,
                frames,
                sent: 0,
                received: 0,
                credit: CREDIT,
                acks: VecDeque::with_capacity(64),
                data: Vec::with_capacity(64),
                small: Vec::with_capacity(64),
            })
            .collect();
        nodes.push(Lean::Switch {
            id: hosts,
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
    let events = run_lean_star(HOSTS, FRAMES);
    assert_eq!(events, LEAN_EVENTS, "no frame lost or added");
    events
}

/// [`Lean`]'s exchange on a star of `hosts` hosts, `frames` data frames each; its frame events.
fn run_lean_star(hosts: u32, frames: u64) -> u64 {
    let free = NodeConfig {
        rx_cost_ns: 0,
        tx_cost_ns: 0,
    };
    let mut f = SimFabric::new(
        Lean::nodes(hosts, frames),
        vec![free; hosts as usize + 1],
        hosts,
        LinkConfig::gbps100(),
        Faults::default(),
    );
    let events = delivered(f.run_until(u64::MAX, |_| false));
    assert_eq!(
        Lean::received(f.nodes()),
        u64::from(hosts) * frames,
        "every frame arrives"
    );
    events
}

/// Workers of the benchmark family's largest point.
const WORKERS64: usize = 64;
/// 1 MiB a worker, in int32 values.
const ELEMENTS_1MIB: usize = (1 << 20) / 4;
/// [`Lean`]'s data frames a host at `sim64/null`: 1 MiB in 1 KB frames.
const NULL_FRAMES: u64 = (1 << 20) / DATA_LEN as u64;
/// `sim64/null`'s frame events: each data frame and each credit, at the switch and at the host.
const NULL64_EVENTS: u64 = 4 * WORKERS64 as u64 * NULL_FRAMES;

/// The systems of `sim64` and the frames one run delivers. The sim is deterministic, so the count
/// is fixed (counted once, 2026-11-29); a different count means the system or the sim changed
/// what it sends. (Constants, not counted in the bench, so that a filtered run runs only the
/// system it names.)
const SYSTEMS64: [(&str, u64); 3] = [
    ("netreduce", 161_984),
    ("switchml", 699_136),
    ("ring_allreduce", 274_176),
];

/// One loss-free all-reduce of `system` at 64 workers x 1 MiB on the sim fabric; the frames
/// delivered (every node's received frames).
fn run_system64(system: &str) -> u64 {
    let sys = inabench_ina::system(system).expect("a listed system");
    let cfg = AllReduceConfig {
        workers: WORKERS64,
        elements: ELEMENTS_1MIB,
        seed: 1,
        line_rate_bps: 100e9,
        mtu: 1024,
        timeout_ns: 100_000,
        knobs: Vec::new(),
    };
    let (nodes, rep, _) = inabench_ina_run::drive::run_sim_stack(
        sys,
        &cfg,
        Faults::default(),
        &HostStack::Nic,
        u64::MAX,
        None,
    )
    .expect("the run");
    assert!(rep.finished, "{system}: every worker done");
    assert!(
        nodes.iter().all(|n| n.is_done()),
        "{system}: every node done"
    );
    rep.nodes.iter().map(|n| n.frames_rx).sum()
}

fn sim64(c: &mut Criterion) {
    let mut g = c.benchmark_group("sim64");
    g.sample_size(10);
    g.throughput(Throughput::Elements(NULL64_EVENTS));
    g.bench_function("null", |b| {
        b.iter(|| {
            let events = run_lean_star(WORKERS64 as u32, NULL_FRAMES);
            assert_eq!(events, NULL64_EVENTS, "no frame lost or added");
            events
        })
    });
    for (system, frames) in SYSTEMS64 {
        g.throughput(Throughput::Elements(frames));
        g.bench_function(system, |b| {
            b.iter(|| assert_eq!(run_system64(system), frames, "the frames sent changed"))
        });
    }
    g.finish();
}

fn sim(c: &mut Criterion) {
    let mut g = c.benchmark_group("sim");
    g.sample_size(10);
    g.throughput(Throughput::Elements(LEAN_EVENTS));
    g.bench_function("frame_events", |b| b.iter(run_lean));
    let credit_ring = run_credit_ring();
    g.throughput(Throughput::Elements(credit_ring));
    g.bench_function("frame_events_credit_ring", |b| {
        b.iter(|| assert_eq!(run_credit_ring(), credit_ring, "the frames sent changed"))
    });
    g.finish();
}

criterion_group!(benches, sim, sim64);
criterion_main!(benches);
