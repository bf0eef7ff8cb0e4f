//! The sim fabric with toy endpoints: exact timing, seeded faults, MTU. (Queueing behind a busy
//! link is exercised by the systems' tests, where many frames leave at once.)

use inabench_fabric::fault::Faults;
use inabench_fabric::sim::{LinkConfig, NodeConfig, SimFabric};
use inabench_fabric::{Endpoint, Nanos, NodeId, Transmit};
use std::collections::VecDeque;

/// Byte 0 of a toy frame names the destination host; the switch forwards on it.
struct Switch {
    id: NodeId,
    out: VecDeque<Transmit>,
}

/// Sends `total` numbered frames to `peer` with stop-and-wait and a timeout.
struct Sender {
    id: NodeId,
    peer: u8,
    total: u32,
    next: u32,
    acked: u32,
    size: usize,
    timeout_ns: u64,
    deadline: Option<Nanos>,
    pending: bool,
    retransmissions: u64,
}

/// Receives in order, acknowledges cumulatively; records arrival times.
struct Receiver {
    id: NodeId,
    peer: u8,
    expected: u32,
    arrivals: Vec<Nanos>,
    acks: VecDeque<Transmit>,
}

enum Node {
    S(Switch),
    Tx(Sender),
    Rx(Receiver),
}

impl Endpoint for Node {
    fn id(&self) -> NodeId {
        match self {
            Node::S(s) => s.id,
            Node::Tx(s) => s.id,
            Node::Rx(r) => r.id,
        }
    }

    fn handle_packet(&mut self, now: Nanos, _from: NodeId, frame: &[u8]) {
        match self {
            Node::S(s) => {
                if let Some(&dst) = frame.first() {
                    s.out.push_back(Transmit {
                        to: NodeId::from(dst),
                        bytes: frame.to_vec(),
                    });
                }
            }
            Node::Tx(s) => {
                if frame.len() >= 5 {
                    let seq = u32::from_be_bytes([frame[1], frame[2], frame[3], frame[4]]);
                    if seq == s.next && s.deadline.is_some() {
                        s.acked += 1;
                        s.next += 1;
                        s.deadline = None;
                        s.pending = s.next < s.total;
                    }
                }
            }
            Node::Rx(r) => {
                if frame.len() >= 5 {
                    let seq = u32::from_be_bytes([frame[1], frame[2], frame[3], frame[4]]);
                    if seq == r.expected {
                        r.expected += 1;
                        r.arrivals.push(now);
                    }
                    if r.expected > 0 {
                        let mut ack = vec![r.peer];
                        ack.extend_from_slice(&(r.expected - 1).to_be_bytes());
                        r.acks.push_back(Transmit { to: 2, bytes: ack });
                    }
                }
            }
        }
    }

    fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        match self {
            Node::S(s) => s.out.pop_front(),
            Node::Tx(s) => {
                if s.pending && s.deadline.is_none() {
                    s.pending = false;
                    s.deadline = Some(now + s.timeout_ns);
                    let mut f = vec![0u8; s.size];
                    f[0] = s.peer;
                    f[1..5].copy_from_slice(&s.next.to_be_bytes());
                    return Some(Transmit { to: 2, bytes: f });
                }
                None
            }
            Node::Rx(r) => r.acks.pop_front(),
        }
    }

    fn poll_timeout(&self) -> Option<Nanos> {
        match self {
            Node::Tx(s) => s.deadline,
            _ => None,
        }
    }

    fn handle_timeout(&mut self, now: Nanos) {
        if let Node::Tx(s) = self
            && s.deadline.is_some_and(|d| now >= d)
        {
            s.deadline = None;
            s.pending = true;
            s.retransmissions += 1;
        }
    }

    fn is_done(&self) -> bool {
        match self {
            Node::Tx(s) => s.acked == s.total,
            _ => true,
        }
    }
}

fn fabric(total: u32, size: usize, link: LinkConfig, faults: Faults, cost: u64) -> SimFabric<Node> {
    let nodes = vec![
        Node::Tx(Sender {
            id: 0,
            peer: 1,
            total,
            next: 0,
            acked: 0,
            size,
            timeout_ns: 50_000,
            deadline: None,
            pending: total > 0,
            retransmissions: 0,
        }),
        Node::Rx(Receiver {
            id: 1,
            peer: 0,
            expected: 0,
            arrivals: vec![],
            acks: VecDeque::new(),
        }),
        Node::S(Switch {
            id: 2,
            out: VecDeque::new(),
        }),
    ];
    let host = NodeConfig {
        rx_cost_ns: cost,
        tx_cost_ns: cost,
    };
    let sw = NodeConfig {
        rx_cost_ns: 0,
        tx_cost_ns: 0,
    };
    SimFabric::new(nodes, vec![host, host, sw], 2, link, faults)
}

fn arrivals(f: SimFabric<Node>) -> (Vec<Nanos>, u64) {
    let mut out = (vec![], 0);
    for n in f.into_nodes() {
        match n {
            Node::Rx(r) => out.0 = r.arrivals,
            Node::Tx(s) => out.1 = s.retransmissions,
            Node::S(_) => {}
        }
    }
    out
}

fn all_done(n: &[Node]) -> bool {
    n.iter().all(Endpoint::is_done)
}

#[test]
fn one_frame_timing_is_exact() {
    let mut f = fabric(1, 1500, LinkConfig::gbps100(), Faults::default(), 50);
    f.run_until(1_000_000_000, all_done);
    let (arr, _) = arrivals(f);
    // sender tx cost 50, two hops of (1500 + 24 framing) x 8 / 100 Gbps = 121.92 -> 122 ns
    // serialization + 1000 ns latency, receiver rx cost 50
    assert_eq!(arr, vec![50 + 2 * (122 + 1000) + 50]);
}

#[test]
fn stop_and_wait_round_trips_are_exact() {
    // stop-and-wait sends one at a time: each round trip is 2 * (2 hops) + costs; 10 frames
    let mut f = fabric(10, 1500, LinkConfig::gbps100(), Faults::default(), 0);
    let rep = f.run_until(1_000_000_000, all_done).clone();
    assert!(rep.finished);
    let (arr, _) = arrivals(f);
    assert_eq!(arr.len(), 10);
    // the ack is 5 bytes (+24 framing): 3 ns serialization per hop
    let rtt = 2 * (122 + 1000) + 2 * (3 + 1000);
    for w in arr.windows(2) {
        assert_eq!(w[1] - w[0], rtt);
    }
}

#[test]
fn loss_is_seeded_reproducible_and_recovered() {
    let link = LinkConfig::gbps100();
    let run = |loss: f64, seed: u64| {
        let mut f = fabric(
            5_000,
            256,
            link,
            Faults {
                loss,
                seed,
                ..Faults::default()
            },
            0,
        );
        let rep = f.run_until(u64::MAX, all_done).clone();
        let (arr, retx) = arrivals(f);
        (rep, arr.len(), retx)
    };
    let (a, n_a, _) = run(0.01, 7);
    let (b, _, _) = run(0.01, 7);
    let (c, _, _) = run(0.01, 8);
    assert_eq!(a, b, "same seed, same run");
    assert_ne!(a.faults, c.faults, "another seed drops other frames");
    assert_eq!(n_a, 5_000, "stop-and-wait recovers every loss");
    for (loss, lo, hi) in [(0.0, 0.0, 0.0), (0.01, 0.006, 0.014), (0.1, 0.085, 0.115)] {
        let (rep, n, retx) = run(loss, 3);
        let sent: u64 = rep.nodes.iter().map(|s| s.frames_tx).sum();
        let frac = rep.faults.dropped as f64 / sent as f64;
        assert!(frac >= lo && frac <= hi, "loss {loss}: dropped {frac}");
        assert_eq!(n, 5_000);
        assert_eq!(retx > 0, loss > 0.0);
    }
}

#[test]
fn duplicates_and_reordering_happen() {
    let mut f = fabric(
        2_000,
        128,
        LinkConfig::gbps100(),
        Faults {
            duplicate: 0.05,
            reorder: 0.05,
            reorder_delay_ns: 3_000,
            seed: 1,
            ..Faults::default()
        },
        0,
    );
    let rep = f.run_until(u64::MAX, all_done).clone();
    assert!(
        rep.faults.duplicated > 50 && rep.faults.reordered > 50,
        "{:?}",
        rep.faults
    );
    assert_eq!(
        arrivals(f).0.len(),
        2_000,
        "the receiver takes each frame once"
    );
}

#[test]
fn oversized_frames_are_dropped_and_counted() {
    let link = LinkConfig {
        mtu: 1000,
        ..LinkConfig::gbps100()
    };
    let mut f = fabric(1, 1500, link, Faults::default(), 0);
    let rep = f.run_until(200_000, all_done).clone();
    assert!(!rep.finished);
    assert!(rep.dropped_mtu >= 1);
}
