//! The sim fabric's speed: frame events per second with six hosts sending through a forwarding
//! switch (each host sends 100,000 frames of 1 KB to its successor with 16 in flight, a small
//! credit frame coming back per frame). The nodes draw their frames from a [`BufPool`] fed by
//! [`Endpoint::recycle`], as the hot endpoints do, so the figure is the fabric's own rate rather
//! than the allocator's.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use inabench_fabric::fault::Faults;
use inabench_fabric::sim::{LinkConfig, NodeConfig, SimFabric};
use inabench_fabric::{BufPool, Endpoint, Nanos, NodeId, Transmit};
use std::collections::VecDeque;

const HOSTS: u32 = 6;
const FRAMES: u64 = 100_000;

enum Node {
    Switch(VecDeque<Transmit>, BufPool),
    Host {
        pool: BufPool,
        id: NodeId,
        sent: u64,
        received: u64,
        credit: u32,
        acks: VecDeque<Transmit>,
    },
}

/// Frames: byte 0 = destination host, byte 1 = kind (0 data, 1 credit), byte 2 = source host.
impl Endpoint for Node {
    fn id(&self) -> NodeId {
        match self {
            Node::Switch(..) => HOSTS,
            Node::Host { id, .. } => *id,
        }
    }
    fn handle_packet(&mut self, _now: Nanos, _from: NodeId, frame: &[u8]) {
        match self {
            Node::Switch(q, pool) => {
                if let Some(&d) = frame.first() {
                    q.push_back(Transmit {
                        to: NodeId::from(d),
                        bytes: pool.take_copy(frame),
                    });
                }
            }
            Node::Host {
                received,
                credit,
                acks,
                pool,
                ..
            } => match frame.get(1) {
                Some(1) => *credit += 1,
                _ => {
                    *received += 1;
                    // give the sender its credit back (ACK clocking)
                    let src = frame.get(2).copied().unwrap_or(0);
                    let mut b = pool.take(4);
                    b[0] = src;
                    b[1] = 1;
                    acks.push_back(Transmit {
                        to: HOSTS,
                        bytes: b,
                    });
                }
            },
        }
    }
    fn poll_transmit(&mut self, _now: Nanos) -> Option<Transmit> {
        match self {
            Node::Switch(q, _) => q.pop_front(),
            Node::Host {
                id,
                sent,
                credit,
                acks,
                pool,
                ..
            } => {
                if let Some(a) = acks.pop_front() {
                    return Some(a);
                }
                if *sent < FRAMES && *credit > 0 {
                    *credit -= 1;
                    *sent += 1;
                    let mut f = pool.take(1024);
                    f[0] = ((*id + 1) % HOSTS) as u8;
                    f[2] = *id as u8;
                    return Some(Transmit {
                        to: HOSTS,
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
    fn recycle(&mut self, buf: Vec<u8>) {
        match self {
            Node::Switch(_, pool) | Node::Host { pool, .. } => pool.put(buf),
        }
    }
}

/// Each host keeps 16 frames in flight to its successor; credits come back per frame.
fn run() -> u64 {
    let mut nodes: Vec<Node> = (0..HOSTS)
        .map(|id| Node::Host {
            id,
            sent: 0,
            received: 0,
            credit: 16,
            acks: VecDeque::new(),
            pool: BufPool::default(),
        })
        .collect();
    nodes.push(Node::Switch(VecDeque::new(), BufPool::default()));
    let cfg = vec![
        NodeConfig {
            rx_cost_ns: 0,
            tx_cost_ns: 0
        };
        HOSTS as usize + 1
    ];
    let mut f = SimFabric::new(nodes, cfg, HOSTS, LinkConfig::gbps100(), Faults::default());
    let rep = f.run_until(u64::MAX, |n| {
        n.iter().all(|x| {
            matches!(x, Node::Switch(..))
                || matches!(x, Node::Host { received, .. } if *received == FRAMES)
        })
    });
    assert!(rep.finished, "every frame arrives");
    rep.events
}

fn fabric(c: &mut Criterion) {
    let events = run();
    let mut g = c.benchmark_group("sim");
    g.throughput(Throughput::Elements(events));
    g.sample_size(10);
    g.bench_function("frame_events", |b| b.iter(run));
    g.finish();
}

criterion_group!(benches, fabric);
criterion_main!(benches);
