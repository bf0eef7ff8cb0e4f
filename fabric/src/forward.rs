//! One forwarding switch for the runs whose switch only moves frames (a ring all-reduce, an RC
//! stream, a CPU or GPU sync over an ordinary Ethernet switch): it sends each frame on, unchanged,
//! to the node its [`Route`] names, and counts what it drops.
//!
//! It replaces four forwarders that did the same thing with four ways to find the egress node
//! (`ina::ring::IpForwarder`, `ina::stream::Forwarder`, `p4sgd::cpusync::Forwarder`,
//! `luwu::zero3::Forwarder`; all but P4SGD's CPUSync one are gone: ina's ring and RC stream
//! and LuWu's ZeRO-3 ring run this one, ina reading its counts through its `Switch` trait).
//! What they shared: a queue of frames to send in arrival order, a
//! copy of the frame as it came, no timers, a drop (counted) when the egress is unknown or not a
//! node of the run. How they differed, and what this one does:
//! - the route: the IPv4 destination's last octet minus one (ina ring: `10.x.x.(n+1)`, any
//!   EtherType, no IP check; luwu: `x.x.x.(n+1)`, the IPv4 header checked), the destination MAC
//!   (p4sgd: `02:00:4b` and the node in the last three bytes), or the other end of a two-host
//!   link (ina stream): [`Route::Ipv4Dst`], [`Route::DstMac`], [`Route::Swap`], or any function
//!   with [`Route::By`]; at a testbed's addresses (ina's ring and hierarchical all-reduce with an
//!   address plan), the node whose address it is: [`Route::Ipv4Table`]. `Ipv4Dst` checks the EtherType (IPv4) and the IP version (4), and not the
//!   first octet: the ring's frames pass both checks; a junk frame that only the old ring
//!   forwarder passed on (another EtherType, version or first octet) is now dropped, which no
//!   valid run sends.
//! - a frame back to the switch itself: only p4sgd's (whose `nodes` counts the switch) refused
//!   it; the others could not route one there (`nodes` was the hosts). Here a route to the
//!   switch's own id is always a drop.
//! - `is_done`: true (the forwarder has no work of its own) for p4sgd and luwu; ina's two kept
//!   the default `false`, which no run's stop condition asked (they wait on workers). True here.
//! - counters: ina's counted packets and bytes in, packets out and drops (its `SwitchStats`);
//!   the others only drops. All four here ([`ForwardStats`]).

use crate::endpoint::{BufPool, Endpoint, Nanos, NodeId, Transmit};
use std::collections::VecDeque;

/// How a [`Forwarder`] finds a frame's egress node.
#[derive(Debug, Clone)]
pub enum Route {
    /// IPv4 over Ethernet II: node `d - 1` for a destination address ending in `d` (`d > 0`).
    Ipv4Dst,
    /// The destination MAC: node `n` for `prefix` followed by `n` in three big-endian bytes
    /// (an Ethernet II EtherType, at least 0x0600, required).
    DstMac { prefix: [u8; 3] },
    /// A two-host link through the switch: frames from `0` go to `1` and back.
    Swap(NodeId, NodeId),
    /// Any function of (neighbour it came from, frame).
    By(fn(NodeId, &[u8]) -> Option<NodeId>),
    /// IPv4 over Ethernet II: node `n` for the destination address `table[n]` (a testbed's
    /// address plan, any numbering); an address not in the table is a drop.
    Ipv4Table(std::sync::Arc<[[u8; 4]]>),
}

impl Route {
    /// The node `frame`, which came from `from`, goes to (not yet checked against the run).
    pub fn egress(&self, from: NodeId, frame: &[u8]) -> Option<NodeId> {
        match self {
            Route::Ipv4Dst => {
                let ethertype = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
                let version = frame.get(14)? >> 4;
                let last = *frame.get(14 + 19)?;
                (ethertype == 0x0800 && version == 4 && last > 0).then(|| NodeId::from(last - 1))
            }
            Route::DstMac { prefix } => {
                let h = frame.get(..14)?;
                let ethertype = u16::from_be_bytes([h[12], h[13]]);
                (ethertype >= 0x0600 && h[..3] == prefix[..])
                    .then(|| u32::from_be_bytes([0, h[3], h[4], h[5]]))
            }
            Route::Swap(a, b) => match from {
                f if f == *a => Some(*b),
                f if f == *b => Some(*a),
                _ => None,
            },
            Route::By(f) => f(from, frame),
            Route::Ipv4Table(table) => {
                let ethertype = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
                let version = frame.get(14)? >> 4;
                let dst = frame.get(30..34)?;
                if ethertype != 0x0800 || version != 4 {
                    return None;
                }
                let n = table.iter().position(|a| a[..] == *dst)?;
                NodeId::try_from(n).ok()
            }
        }
    }
}

/// What a forwarder saw and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ForwardStats {
    pub packets_in: u64,
    pub bytes_in: u64,
    pub packets_out: u64,
    /// Frames with no egress among the run's nodes.
    pub dropped: u64,
}

/// A switch that sends every frame on, unchanged, to the node its [`Route`] names among nodes
/// `0..nodes` (never to itself), in the order frames arrive.
#[derive(Debug)]
pub struct Forwarder {
    id: NodeId,
    nodes: u32,
    route: Route,
    out: VecDeque<Transmit>,
    pool: BufPool,
    stats: ForwardStats,
}

impl Forwarder {
    /// Switch `id` of a run of `nodes` nodes (ids `0..nodes`; the switch may be one of them).
    pub fn new(id: NodeId, nodes: u32, route: Route) -> Self {
        Forwarder {
            id,
            nodes,
            route,
            out: VecDeque::new(),
            pool: BufPool::default(),
            stats: ForwardStats::default(),
        }
    }

    pub fn stats(&self) -> &ForwardStats {
        &self.stats
    }

    /// Frames dropped so far.
    pub fn dropped(&self) -> u64 {
        self.stats.dropped
    }

    pub fn route(&self) -> &Route {
        &self.route
    }
}

impl Endpoint for Forwarder {
    fn id(&self) -> NodeId {
        self.id
    }

    fn handle_packet(&mut self, _now: Nanos, from: NodeId, frame: &[u8]) {
        self.stats.packets_in += 1;
        self.stats.bytes_in += frame.len() as u64;
        match self.route.egress(from, frame) {
            Some(to) if to < self.nodes && to != self.id => {
                self.stats.packets_out += 1;
                self.out.push_back(Transmit {
                    to,
                    bytes: self.pool.take_copy(frame),
                });
            }
            _ => self.stats.dropped += 1,
        }
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

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("packets_in", self.stats.packets_in),
            ("packets_out", self.stats.packets_out),
            ("dropped", self.stats.dropped),
        ]
    }

    fn recycle(&mut self, buf: Vec<u8>) {
        self.pool.put(buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Node;
    use crate::fault::Faults;
    use crate::sim::{LinkConfig, NodeConfig, SimFabric};

    /// An Ethernet II + IPv4 header (no payload) to `10.0.8.dst`, padded to 60 bytes.
    fn ip_frame(dst: u8, mark: u8) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        f[14] = 0x45;
        f[14 + 16..14 + 20].copy_from_slice(&[10, 0, 8, dst]);
        f[59] = mark;
        f
    }

    fn mac_frame(node: u32, ethertype: u16) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[..3].copy_from_slice(&[2, 0, 0x4b]);
        f[3..6].copy_from_slice(&node.to_be_bytes()[1..]);
        f[12..14].copy_from_slice(&ethertype.to_be_bytes());
        f
    }

    #[test]
    fn each_route_names_its_node_and_refuses_the_rest() {
        assert_eq!(Route::Ipv4Dst.egress(0, &ip_frame(3, 0)), Some(2));
        assert_eq!(Route::Ipv4Dst.egress(0, &ip_frame(0, 0)), None, "octet 0");
        let mut arp = ip_frame(3, 0);
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(Route::Ipv4Dst.egress(0, &arp), None, "not IPv4");
        let mut v6 = ip_frame(3, 0);
        v6[14] = 0x65;
        assert_eq!(Route::Ipv4Dst.egress(0, &v6), None, "version 6");
        assert_eq!(Route::Ipv4Dst.egress(0, &ip_frame(3, 0)[..33]), None, "cut");
        let mac = Route::DstMac {
            prefix: [2, 0, 0x4b],
        };
        assert_eq!(
            mac.egress(9, &mac_frame(0x01_02_03, 0x0800)),
            Some(0x01_02_03)
        );
        assert_eq!(mac.egress(9, &mac_frame(5, 0x05dc)), None, "802.3 length");
        let mut other = mac_frame(5, 0x0800);
        other[2] = 0x4c;
        assert_eq!(mac.egress(9, &other), None, "another prefix");
        assert_eq!(mac.egress(9, &mac_frame(5, 0x0800)[..13]), None, "cut");
        let swap = Route::Swap(0, 1);
        assert_eq!(swap.egress(0, &[]), Some(1));
        assert_eq!(swap.egress(1, &[]), Some(0));
        assert_eq!(swap.egress(2, &[]), None);
        let by = Route::By(|from, f| f.first().map(|b| NodeId::from(*b) + from));
        assert_eq!(by.egress(2, &[3]), Some(5));
        // a testbed's plan: node n at table[n], whatever the numbering
        let table = Route::Ipv4Table(vec![[10, 0, 8, 9], [10, 0, 8, 3]].into());
        assert_eq!(table.egress(0, &ip_frame(3, 0)), Some(1));
        assert_eq!(table.egress(1, &ip_frame(9, 0)), Some(0));
        assert_eq!(table.egress(0, &ip_frame(4, 0)), None, "not in the plan");
        assert_eq!(table.egress(0, &arp), None, "not IPv4");
        assert_eq!(table.egress(0, &v6), None, "version 6");
        assert_eq!(table.egress(0, &ip_frame(3, 0)[..33]), None, "cut");
    }

    #[test]
    fn a_frame_goes_to_its_node_unchanged_and_the_rest_are_counted_drops() {
        // 3 hosts, the switch is node 3 and one of the run's 4 nodes
        let mut f = Forwarder::new(3, 4, Route::Ipv4Dst);
        let a = ip_frame(2, 7);
        f.handle_packet(0, 0, &a);
        f.handle_packet(0, 0, &ip_frame(4, 0)); // the switch itself
        f.handle_packet(0, 0, &ip_frame(9, 0)); // no such node
        f.handle_packet(0, 0, &[1, 2, 3]); // junk
        let b = ip_frame(1, 8);
        f.handle_packet(0, 1, &b);
        assert_eq!(f.poll_transmit(0), Some(Transmit { to: 1, bytes: a }));
        assert_eq!(f.poll_transmit(0), Some(Transmit { to: 0, bytes: b }));
        assert_eq!(f.poll_transmit(0), None);
        assert_eq!(
            *f.stats(),
            ForwardStats {
                packets_in: 5,
                bytes_in: 4 * 60 + 3,
                packets_out: 2,
                dropped: 3
            }
        );
        assert!(f.is_done() && f.poll_timeout().is_none());
    }

    /// A host that sends one frame to each other host at the start and keeps what it gets.
    struct Host {
        id: NodeId,
        hosts: u8,
        switch: NodeId,
        sent: bool,
        out: Vec<Vec<u8>>,
        got: Vec<(NodeId, Vec<u8>)>,
    }

    impl Endpoint for Host {
        fn id(&self) -> NodeId {
            self.id
        }
        fn handle_packet(&mut self, _now: Nanos, from: NodeId, frame: &[u8]) {
            self.got.push((from, frame.to_vec()));
        }
        fn poll_transmit(&mut self, _now: Nanos) -> Option<Transmit> {
            if !self.sent {
                self.sent = true;
                self.out = (0..self.hosts)
                    .filter(|d| u32::from(*d) != self.id)
                    .map(|d| ip_frame(d + 1, self.id as u8))
                    .collect();
            }
            self.out.pop().map(|bytes| Transmit {
                to: self.switch,
                bytes,
            })
        }
        fn poll_timeout(&self) -> Option<Nanos> {
            None
        }
        fn handle_timeout(&mut self, _now: Nanos) {}
        fn is_done(&self) -> bool {
            self.got.len() + 1 == usize::from(self.hosts)
        }
    }

    #[test]
    fn in_a_sim_run_every_frame_reaches_the_host_its_address_names() {
        let hosts = 4u8;
        let sw = NodeId::from(hosts);
        let mut nodes: Vec<Node<Host, Forwarder>> = (0..hosts)
            .map(|i| {
                Node::Worker(Host {
                    id: NodeId::from(i),
                    hosts,
                    switch: sw,
                    sent: false,
                    out: Vec::new(),
                    got: Vec::new(),
                })
            })
            .collect();
        nodes.push(Node::Switch(Forwarder::new(sw, sw + 1, Route::Ipv4Dst)));
        let zero = NodeConfig {
            rx_cost_ns: 0,
            tx_cost_ns: 0,
        };
        let mut sim = SimFabric::new(
            nodes,
            vec![zero; usize::from(hosts) + 1],
            sw,
            LinkConfig::gbps100(),
            Faults::default(),
        );
        let r = sim.run_until(1_000_000, |n| n.iter().all(|n| n.is_done()));
        assert!(r.finished);
        let nodes = sim.into_nodes();
        for n in &nodes[..usize::from(hosts)] {
            let h = n.worker().expect("a host");
            let mut senders: Vec<u8> = h
                .got
                .iter()
                .map(|(from, f)| {
                    assert_eq!(*from, sw, "frames come through the switch");
                    assert_eq!(f[14 + 19], h.id as u8 + 1, "addressed to this host");
                    f[59]
                })
                .collect();
            senders.sort();
            let want: Vec<u8> = (0..hosts).filter(|s| u32::from(*s) != h.id).collect();
            assert_eq!(senders, want, "host {}: one frame from every other", h.id);
        }
        let sw = nodes[usize::from(hosts)].switch().expect("the switch");
        assert_eq!(
            sw.stats().packets_out,
            u64::from(hosts) * u64::from(hosts - 1)
        );
        assert_eq!(sw.dropped(), 0);
    }
}
