//! No allocation per frame on the sim fabric's hot path: endpoints that send from a
//! [`BufPool`] fed by [`Endpoint::recycle`] run a long stream of frames, and the allocations
//! this thread makes in the steady state (the second half of the run) are counted with the
//! counting allocator of `fabric::testing`. Before the event slab and the recycle path, every
//! frame cost at least one allocation (its `Vec`), so this test failed.
#![cfg(feature = "testing")]

use inabench_fabric::fault::Faults;
use inabench_fabric::sim::{LinkConfig, NodeConfig, SimFabric};
use inabench_fabric::testing::{Counting, allocations};
use inabench_fabric::{BufPool, Endpoint, Nanos, NodeId, Transmit};
use std::collections::VecDeque;

#[global_allocator]
static ALLOC: Counting = Counting;

const HOSTS: u32 = 4;

/// Hosts send 1 KB frames to their successor through a forwarding switch, 8 in flight, with a
/// credit frame back per frame (as `bench/benches/fabric.rs`).
enum Node {
    Switch(VecDeque<Transmit>, BufPool),
    Host {
        id: NodeId,
        sent: u64,
        received: u64,
        credit: u32,
        acks: VecDeque<Transmit>,
        pool: BufPool,
        frames: u64,
    },
}

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
                    let mut b = pool.take(4);
                    b[0] = frame.get(2).copied().unwrap_or(0);
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
                frames,
                ..
            } => {
                if let Some(a) = acks.pop_front() {
                    return Some(a);
                }
                if *sent < *frames && *credit > 0 {
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

fn received(nodes: &[Node]) -> u64 {
    nodes
        .iter()
        .map(|n| match n {
            Node::Host { received, .. } => *received,
            Node::Switch(..) => 0,
        })
        .sum()
}

#[test]
fn the_sim_fabric_allocates_nothing_per_frame_in_the_steady_state() {
    const FRAMES: u64 = 20_000;
    let mut nodes: Vec<Node> = (0..HOSTS)
        .map(|id| Node::Host {
            id,
            sent: 0,
            received: 0,
            credit: 8,
            acks: VecDeque::with_capacity(64),
            pool: BufPool::default(),
            frames: FRAMES,
        })
        .collect();
    nodes.push(Node::Switch(
        VecDeque::with_capacity(64),
        BufPool::default(),
    ));
    let cfg = vec![
        NodeConfig {
            rx_cost_ns: 50,
            tx_cost_ns: 50
        };
        HOSTS as usize + 1
    ];
    let mut f = SimFabric::new(nodes, cfg, HOSTS, LinkConfig::gbps100(), Faults::default());
    // the allocation count when half the frames have arrived, and at the end
    let mut half: Option<(u64, u64)> = None;
    let total = u64::from(HOSTS) * FRAMES;
    let rep = f.run_until_at(u64::MAX, |_, n| {
        let r = received(n);
        if half.is_none() && r >= total / 2 {
            half = Some((allocations(), r));
        }
        r == total
    });
    assert!(rep.finished);
    let end = allocations();
    let (at_half, r_half) = half.expect("half way seen");
    let frames = (total - r_half) * 4; // each data frame: host->switch->host, credit back twice
    let per_frame = (end - at_half) as f64 / frames as f64;
    assert!(
        per_frame < 0.001,
        "{} allocations for {frames} frames in the steady state ({per_frame} per frame)",
        end - at_half
    );
}
