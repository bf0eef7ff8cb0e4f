//! The `Fabric` trait: the same toy endpoints on `sim`, `mem` and `udp` through one call, one
//! report type, and the same faults applied the same way (loss really drops frames on every
//! fabric; `mem` now reorders too). A mix of node types runs as `Box<dyn Endpoint>`.

use inabench_fabric::fault::Faults;
use inabench_fabric::sim::LinkConfig;
use inabench_fabric::udp::IoModel;
use inabench_fabric::{
    Endpoint, Fabric, FabricError, Mem, Nanos, NodeId, Sim, Transmit, UdpThreads, Until,
};
use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

const FRAMES: u32 = 200;

/// Echoes every frame back to its sender (byte 0 of a frame names the sender).
struct Echo {
    id: NodeId,
    out: VecDeque<Transmit>,
}

impl Endpoint for Echo {
    fn id(&self) -> NodeId {
        self.id
    }
    fn handle_packet(&mut self, _now: Nanos, from: NodeId, frame: &[u8]) {
        self.out.push_back(Transmit {
            to: from,
            bytes: frame.to_vec(),
        });
    }
    fn poll_transmit(&mut self, _now: Nanos) -> Option<Transmit> {
        self.out.pop_front()
    }
    fn poll_timeout(&self) -> Option<Nanos> {
        None
    }
    fn handle_timeout(&mut self, _now: Nanos) {}
    fn is_done(&self) -> bool {
        true
    }
}

/// Sends `FRAMES` numbered frames to the echo node, resends the unanswered ones every
/// `resend_ns`, and is done when every number came back. Counts arrivals out of order.
struct Pinger {
    id: NodeId,
    echo: NodeId,
    to_send: VecDeque<u32>,
    answered: BTreeSet<u32>,
    last_seen: Option<u32>,
    inversions: Arc<AtomicU64>,
    resend_at: Option<Nanos>,
    resend_ns: u64,
}

impl Pinger {
    fn new(id: NodeId, echo: NodeId, resend_ns: u64, inversions: Arc<AtomicU64>) -> Pinger {
        Pinger {
            id,
            echo,
            to_send: (0..FRAMES).collect(),
            answered: BTreeSet::new(),
            last_seen: None,
            inversions,
            resend_at: None,
            resend_ns,
        }
    }
}

impl Endpoint for Pinger {
    fn id(&self) -> NodeId {
        self.id
    }
    fn handle_packet(&mut self, _now: Nanos, _from: NodeId, frame: &[u8]) {
        if frame.len() < 4 {
            return;
        }
        let seq = u32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
        if self.last_seen.is_some_and(|l| seq < l) {
            self.inversions.fetch_add(1, Ordering::Relaxed);
        }
        self.last_seen = Some(seq);
        self.answered.insert(seq);
    }
    fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        let seq = self.to_send.pop_front()?;
        if self.resend_at.is_none() {
            self.resend_at = Some(now + self.resend_ns);
        }
        let mut bytes = seq.to_be_bytes().to_vec();
        bytes.resize(64, 0);
        Some(Transmit {
            to: self.echo,
            bytes,
        })
    }
    fn poll_timeout(&self) -> Option<Nanos> {
        if self.is_done() { None } else { self.resend_at }
    }
    fn handle_timeout(&mut self, now: Nanos) {
        self.resend_at = None;
        if !self.is_done() {
            self.to_send = (0..FRAMES).filter(|s| !self.answered.contains(s)).collect();
            self.resend_at = Some(now + self.resend_ns);
        }
    }
    fn is_done(&self) -> bool {
        self.answered.len() == FRAMES as usize
    }
}

/// Two pingers (ids 0, 1) and the echo (id 2), as a mix of node types; the counter of
/// out-of-order arrivals the pingers saw.
fn nodes_counted(resend_ns: u64) -> (Vec<Box<dyn Endpoint>>, Arc<AtomicU64>) {
    let inv = Arc::new(AtomicU64::new(0));
    let nodes: Vec<Box<dyn Endpoint>> = vec![
        Box::new(Pinger::new(0, 2, resend_ns, inv.clone())),
        Box::new(Pinger::new(1, 2, resend_ns, inv.clone())),
        Box::new(Echo {
            id: 2,
            out: VecDeque::new(),
        }),
    ];
    (nodes, inv)
}

fn nodes(resend_ns: u64) -> Vec<Box<dyn Endpoint>> {
    nodes_counted(resend_ns).0
}

fn fabrics(faults: Faults) -> Vec<Box<dyn Fabric<Box<dyn Endpoint>>>> {
    let mut sim = Sim::new(LinkConfig::gbps100(), 2);
    sim.faults = faults;
    vec![
        Box::new(sim),
        Box::new(Mem { mtu: 1500, faults }),
        Box::new(UdpThreads {
            mtu: 1500,
            faults,
            io: IoModel::Event,
        }),
    ]
}

#[test]
fn every_fabric_runs_the_same_nodes_through_one_call() {
    for mut f in fabrics(Faults::default()) {
        let until = Until::workers(2, 3, 20_000_000_000);
        let (out, rep) = f
            .run(nodes(5_000_000_000), &until)
            .unwrap_or_else(|e| panic!("{}: {e}", f.name()));
        assert_eq!(rep.fabric, f.name());
        assert!(rep.finished, "{}: {rep:?}", rep.fabric);
        assert_eq!(out.len(), 3);
        assert!(out.iter().all(|n| n.is_done()));
        assert_eq!(rep.nodes.len(), 3);
        for w in 0..2 {
            // lossless: every frame once each way
            assert_eq!(rep.nodes[w].frames_tx, u64::from(FRAMES), "{}", rep.fabric);
            assert_eq!(rep.nodes[w].frames_rx, u64::from(FRAMES), "{}", rep.fabric);
            assert!(rep.nodes[w].done_ns > 0 && rep.nodes[w].done_ns <= rep.time_ns);
        }
        assert_eq!(rep.nodes[2].frames_tx, 2 * u64::from(FRAMES));
        assert_eq!(rep.faults.dropped, 0);
    }
}

#[test]
fn loss_really_drops_frames_on_every_fabric_and_resends_recover() {
    let faults = Faults {
        loss: 0.1,
        seed: 7,
        ..Faults::default()
    };
    for mut f in fabrics(faults) {
        let until = Until::workers(2, 3, 20_000_000_000);
        // resend after 20 ms (real time on mem/udp, virtual on sim)
        let (_, rep) = f.run(nodes(20_000_000), &until).expect("runs");
        assert!(rep.finished, "{}: {rep:?}", rep.fabric);
        assert!(rep.faults.dropped > 0, "{}: nothing dropped", rep.fabric);
        let tx: u64 = rep.nodes[..2].iter().map(|n| n.frames_tx).sum();
        assert!(
            tx > 2 * u64::from(FRAMES),
            "{}: lost frames must be resent ({tx} sent)",
            rep.fabric
        );
    }
}

#[test]
fn mem_reorders_like_the_other_fabrics() {
    let faults = Faults {
        reorder: 0.3,
        reorder_delay_ns: 3_000_000,
        seed: 3,
        ..Faults::default()
    };
    for mut f in fabrics(faults) {
        let until = Until::workers(2, 3, 20_000_000_000);
        let (nodes, inversions) = nodes_counted(5_000_000_000);
        let (out, rep) = f.run(nodes, &until).expect("runs");
        assert!(rep.finished, "{}", rep.fabric);
        assert!(out.iter().all(|n| n.is_done()));
        assert!(rep.faults.reordered > 0, "{}", rep.fabric);
        // delayed frames arrive after later ones: the pingers see numbers out of order
        assert!(
            inversions.load(Ordering::Relaxed) > 0,
            "{}: no frame arrived out of order",
            rep.fabric
        );
    }
}

#[test]
fn nodes_must_have_their_index_as_id() {
    let mut f = Sim::new(LinkConfig::gbps100(), 0);
    let bad: Vec<Box<dyn Endpoint>> = vec![Box::new(Echo {
        id: 3,
        out: VecDeque::new(),
    })];
    let r = f.run(bad, &Until::workers(0, 1, 1_000));
    assert!(matches!(r, Err(FabricError::BadIds { index: 0, id: 3 })));
}

/// A worker of the stop-check test: bounces a count off the hub until it reaches `limit`. Done
/// at `limit`, also (when `back`) while its count is 2 mod 5 (done, then not done again), and
/// once the frames every node received (`total`, shared) reach `cap`: a done state another
/// node's event can turn.
struct Bouncer {
    id: NodeId,
    hub: NodeId,
    count: u64,
    limit: u64,
    back: bool,
    out: Option<u64>,
    total: Arc<AtomicU64>,
    cap: u64,
}

impl Endpoint for Bouncer {
    fn id(&self) -> NodeId {
        self.id
    }
    fn handle_packet(&mut self, _now: Nanos, _from: NodeId, frame: &[u8]) {
        self.total.fetch_add(1, Ordering::Relaxed);
        let Ok(b) = <[u8; 8]>::try_from(frame) else {
            return;
        };
        self.count = u64::from_le_bytes(b);
        if self.count < self.limit {
            self.out = Some(self.count);
        }
    }
    fn poll_transmit(&mut self, _now: Nanos) -> Option<Transmit> {
        self.out.take().map(|c| Transmit {
            to: self.hub,
            bytes: c.to_le_bytes().to_vec(),
        })
    }
    fn poll_timeout(&self) -> Option<Nanos> {
        None
    }
    fn handle_timeout(&mut self, _now: Nanos) {}
    fn is_done(&self) -> bool {
        self.count >= self.limit
            || (self.back && self.count % 5 == 2)
            || self.total.load(Ordering::Relaxed) >= self.cap
    }
}

/// The hub: answers count `c` with `c + 1`; done while it has nothing to send (not counted).
struct Hub {
    id: NodeId,
    out: VecDeque<Transmit>,
    total: Arc<AtomicU64>,
}

impl Endpoint for Hub {
    fn id(&self) -> NodeId {
        self.id
    }
    fn handle_packet(&mut self, _now: Nanos, from: NodeId, frame: &[u8]) {
        self.total.fetch_add(1, Ordering::Relaxed);
        let Ok(b) = <[u8; 8]>::try_from(frame) else {
            return;
        };
        self.out.push_back(Transmit {
            to: from,
            bytes: (u64::from_le_bytes(b) + 1).to_le_bytes().to_vec(),
        });
    }
    fn poll_transmit(&mut self, _now: Nanos) -> Option<Transmit> {
        self.out.pop_front()
    }
    fn poll_timeout(&self) -> Option<Nanos> {
        None
    }
    fn handle_timeout(&mut self, _now: Nanos) {}
    fn is_done(&self) -> bool {
        self.out.is_empty()
    }
}

fn bouncers(workers: u32, back: &[u32], cap: u64) -> Vec<Box<dyn Endpoint>> {
    let total = Arc::new(AtomicU64::new(0));
    let mut nodes: Vec<Box<dyn Endpoint>> = (0..workers)
        .map(|i| {
            Box::new(Bouncer {
                id: i,
                hub: workers,
                count: 0,
                limit: 20 + 3 * u64::from(i),
                back: back.contains(&i),
                out: Some(0),
                total: total.clone(),
                cap,
            }) as Box<dyn Endpoint>
        })
        .collect();
    nodes.push(Box::new(Hub {
        id: workers,
        out: VecDeque::new(),
        total,
    }));
    nodes
}

/// `sim`'s stop check looks at the node that handled the event and one witness, not every node
/// after every event (issue #39): its runs end at the same event, with the same done times of
/// every node, as the full scan after every event (the check before), also for done states
/// that go back, that another node's event turns (a shared cap), with loss, and unfinished.
#[test]
fn sims_stop_check_ends_where_a_scan_of_every_node_after_every_event_does() {
    let lossy = Faults {
        loss: 0.05,
        seed: 11,
        ..Faults::default()
    };
    let mut ends = BTreeSet::new();
    let mut naive_missed = 0;
    for faults in [Faults::default(), lossy] {
        for back in [&[][..], &[1, 3], &[0, 1, 2, 3, 4]] {
            for cap in [u64::MAX, 40, 97, 150] {
                for limit_ns in [u64::MAX, 3_000] {
                    let case = format!("{faults:?} back {back:?} cap {cap} limit {limit_ns}");
                    let until = Until::workers(5, 6, limit_ns);
                    let mut sim = Sim::new(LinkConfig::gbps100(), 5);
                    sim.faults = faults;
                    let (_, rep) = sim.run(bouncers(5, back, cap), &until).expect("runs");
                    // the check before: every node after every event
                    let free = inabench_fabric::sim::NodeConfig {
                        rx_cost_ns: 0,
                        tx_cost_ns: 0,
                    };
                    let mut f = inabench_fabric::sim::SimFabric::new(
                        bouncers(5, back, cap),
                        vec![free; 6],
                        5,
                        LinkConfig::gbps100(),
                        faults,
                    );
                    let mut done_at = vec![0; 6];
                    let want = f
                        .run_until_at(limit_ns, |now, nodes| {
                            let mut all = true;
                            for (i, node) in nodes.iter().enumerate() {
                                if node.is_done() {
                                    if done_at[i] == 0 {
                                        done_at[i] = now.max(1);
                                    }
                                } else if i < 5 {
                                    all = false;
                                }
                            }
                            all
                        })
                        .clone();
                    assert_eq!(rep.finished, want.finished, "{case}");
                    assert_eq!(rep.end_ns, want.end_ns, "{case}");
                    let got: Vec<Nanos> = rep.nodes.iter().map(|n| n.done_ns).collect();
                    assert_eq!(got, done_at, "{case}");
                    let frames: Vec<u64> = rep.nodes.iter().map(|n| n.frames_rx).collect();
                    let frames_want: Vec<u64> = want.nodes.iter().map(|n| n.frames_rx).collect();
                    assert_eq!(frames, frames_want, "{case}");
                    ends.insert((want.finished, want.end_ns));
                    // a check that looked only at the node that handled the event would miss
                    // the workers a shared cap turns at another node's event
                    let mut f = inabench_fabric::sim::SimFabric::new(
                        bouncers(5, back, cap),
                        vec![free; 6],
                        5,
                        LinkConfig::gbps100(),
                        faults,
                    );
                    let mut seen: Option<Vec<bool>> = None;
                    let naive = f
                        .run_until_event(limit_ns, |_, node, nodes| {
                            let seen = seen
                                .get_or_insert_with(|| nodes.iter().map(|n| n.is_done()).collect());
                            seen[node as usize] = nodes[node as usize].is_done();
                            seen[..5].iter().all(|d| *d)
                        })
                        .clone();
                    if naive.end_ns != want.end_ns {
                        naive_missed += 1;
                    }
                }
            }
        }
    }
    // the cases end differently: early (a cap; a moment every worker is done at once), at the
    // workers' own end, at the limit, unfinished (a lost frame, no resend)
    assert!(ends.len() >= 6, "{ends:?}");
    assert!(
        naive_missed > 0,
        "no case needs more than the handling node's state"
    );
    assert!(
        ends.iter().any(|e| e.0) && ends.iter().any(|e| !e.0),
        "{ends:?}"
    );
}
