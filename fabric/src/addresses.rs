//! The address plan of a job: each worker's MAC, IPv4 address and RoCEv2 GID on the data
//! network, and the switch's where it has one of its own. The systems' frames carry these
//! addresses; a testbed file that states its hosts' real addresses (`hosts[].data` in
//! `experiments/testbeds/*.yaml`, read by `inabench_core::testbed`) gives a plan of them, and
//! without one the systems keep their synthetic plan ([`AddressPlan::synthetic`]: worker `i` at
//! MAC 02:00:00:00:00:<i+1>, IPv4 10.0.0.<i+1>), so every run without testbed addresses is the
//! same, bit for bit, as before the plan existed.
//!
//! Sans-IO and plain data: no interface is opened here (the raw fabric opens a host's
//! `interface`).

use crate::NodeId;

/// One host's address on the data network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostAddress {
    /// The interface its frames leave by (None: several links, as a rig's host relay on one
    /// tap per guest, or a synthetic plan).
    pub interface: Option<String>,
    pub mac: [u8; 6],
    pub ipv4: [u8; 4],
    /// The RoCEv2 GID of its RDMA device on that interface; for an IPv4 RoCEv2 address the
    /// IPv4-mapped IPv6 address [`ipv4_gid`].
    pub gid: [u8; 16],
}

/// The RoCEv2 GID of an IPv4 address: `::ffff:a.b.c.d` (RFC 4291's IPv4-mapped form, the GID a
/// RoCE device lists for the interface's IPv4 address).
pub fn ipv4_gid(ip: [u8; 4]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&ip);
    g
}

/// A plan that cannot be used: one sentence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    #[error("the address plan has no worker")]
    NoWorker,
    #[error("the address plan has {have} workers; the job has {need}")]
    TooFew { have: usize, need: usize },
    #[error("workers {a} and {b} of the address plan share the {what} {value}")]
    Shared {
        a: usize,
        b: usize,
        what: &'static str,
        value: String,
    },
    #[error("worker {worker}'s MAC {mac} is a multicast address, not a host's")]
    Multicast { worker: usize, mac: String },
    #[error(
        "the address plan gives no switch address, and {system}'s workers address their frames to the switch"
    )]
    NoSwitch { system: &'static str },
    #[error(
        "the address plan gives {have} parameter server addresses (hosts with role `ps`); {system} needs {need}"
    )]
    TooFewServers {
        system: &'static str,
        have: usize,
        need: usize,
    },
}

/// A node's MAC and IPv4 address.
pub type MacIp = ([u8; 6], [u8; 4]);

/// The MAC and IPv4 address of every node of one job, by node id: workers `0..workers`, the
/// switch `workers`, then `servers` further hosts (ATP's parameter servers). What a system's
/// frames carry: from a testbed's [`AddressPlan`], or the system's own synthetic numbering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeAddresses {
    nodes: Vec<MacIp>,
}

impl NodeAddresses {
    /// The nodes' addresses for `system`: with no plan, `synthetic(node)` for every node (the
    /// system's own numbering, unchanged); with a plan, its workers' (it must name at least
    /// `workers`), its switch's (required where `switch_needed`: the workers send to it; else
    /// the synthetic one) and its servers' (at least `servers` of them).
    pub fn of(
        system: &'static str,
        plan: Option<&AddressPlan>,
        workers: usize,
        servers: usize,
        switch_needed: bool,
        synthetic: impl Fn(usize) -> MacIp,
    ) -> Result<NodeAddresses, AddressError> {
        let Some(plan) = plan else {
            return Ok(NodeAddresses {
                nodes: (0..workers + 1 + servers).map(synthetic).collect(),
            });
        };
        plan.covers(workers)?;
        let mut nodes: Vec<MacIp> = (0..workers)
            .map(|i| {
                plan.worker(i)
                    .map(|a| (a.mac, a.ipv4))
                    .ok_or(AddressError::TooFew {
                        have: i,
                        need: workers,
                    })
            })
            .collect::<Result<_, _>>()?;
        match &plan.switch {
            Some(s) => nodes.push((s.mac, s.ipv4)),
            None if switch_needed => return Err(AddressError::NoSwitch { system }),
            None => nodes.push(synthetic(workers)),
        }
        if plan.servers.len() < servers {
            return Err(AddressError::TooFewServers {
                system,
                have: plan.servers.len(),
                need: servers,
            });
        }
        nodes.extend(plan.servers.iter().take(servers).map(|a| (a.mac, a.ipv4)));
        Ok(NodeAddresses { nodes })
    }

    /// Node `node`'s MAC (all zeros past the last node, which no valid build asks).
    pub fn mac(&self, node: usize) -> [u8; 6] {
        self.nodes.get(node).map_or([0; 6], |a| a.0)
    }

    /// Node `node`'s IPv4 address (0.0.0.0 past the last node).
    pub fn ip(&self, node: usize) -> [u8; 4] {
        self.nodes.get(node).map_or([0; 4], |a| a.1)
    }

    /// The node whose IPv4 address this is.
    pub fn node_of_ip(&self, ip: [u8; 4]) -> Option<usize> {
        self.nodes.iter().position(|a| a.1 == ip)
    }

    /// How many nodes it names.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether it names none.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

/// The addresses of a job's workers (worker `i` is the plan's `i`-th) and of its switch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressPlan {
    /// None: the synthetic plan, computed for any worker index.
    workers: Option<Vec<HostAddress>>,
    /// The switch's own address (SwitchML-RDMA's switch answers as a host; SwitchML's and
    /// ATP's workers address their frames to it), where the plan gives one.
    pub switch: Option<HostAddress>,
    /// Further hosts of the job that are neither worker nor switch, in order: ATP's parameter
    /// servers (testbed hosts with role `ps`).
    pub servers: Vec<HostAddress>,
}

impl Default for AddressPlan {
    fn default() -> Self {
        AddressPlan::synthetic()
    }
}

/// `aa:bb:cc:dd:ee:ff`
pub fn fmt_mac(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// A host's IPv4 address and MAC as a program's argument carries them:
/// `A.B.C.D@aa:bb:cc:dd:ee:ff` (what the rig passes to its host-side programs, [`parse_ip_mac`]).
pub fn fmt_ip_mac(h: &HostAddress) -> String {
    format!("{}@{}", std::net::Ipv4Addr::from(h.ipv4), fmt_mac(h.mac))
}

/// [`fmt_ip_mac`]'s text back as a host address (no interface, the IPv4-mapped GID); None for
/// anything else.
pub fn parse_ip_mac(s: &str) -> Option<HostAddress> {
    let (ip, mac) = s.split_once('@')?;
    let ipv4 = ip.parse::<std::net::Ipv4Addr>().ok()?.octets();
    let bytes: Vec<u8> = mac
        .split(':')
        .map(|b| {
            (b.len() == 2)
                .then(|| u8::from_str_radix(b, 16).ok())
                .flatten()
        })
        .collect::<Option<_>>()?;
    let mac: [u8; 6] = bytes.try_into().ok()?;
    Some(HostAddress {
        interface: None,
        mac,
        ipv4,
        gid: ipv4_gid(ipv4),
    })
}

impl AddressPlan {
    /// The systems' synthetic plan: worker `i` at MAC 02:00:00:00:00:<i+1> (a locally
    /// administered unicast address), IPv4 10.0.0.<i+1>, its GID the IPv4-mapped one; the last
    /// byte wraps past 255 workers as the systems' addresses always have.
    pub fn synthetic() -> AddressPlan {
        AddressPlan {
            workers: None,
            switch: None,
            servers: Vec::new(),
        }
    }

    /// A plan of given addresses (a testbed's): every worker's MAC and IPv4 address its own, no
    /// multicast MAC.
    pub fn new(
        workers: Vec<HostAddress>,
        switch: Option<HostAddress>,
    ) -> Result<AddressPlan, AddressError> {
        if workers.is_empty() {
            return Err(AddressError::NoWorker);
        }
        for (i, w) in workers.iter().enumerate() {
            if w.mac[0] & 1 == 1 {
                return Err(AddressError::Multicast {
                    worker: i,
                    mac: fmt_mac(w.mac),
                });
            }
            for (j, o) in workers.iter().enumerate().take(i) {
                let shared = if o.mac == w.mac {
                    Some(("MAC", fmt_mac(w.mac)))
                } else if o.ipv4 == w.ipv4 {
                    Some(("IPv4 address", std::net::Ipv4Addr::from(w.ipv4).to_string()))
                } else {
                    None
                };
                if let Some((what, value)) = shared {
                    return Err(AddressError::Shared {
                        a: j,
                        b: i,
                        what,
                        value,
                    });
                }
            }
        }
        Ok(AddressPlan {
            workers: Some(workers),
            switch,
            servers: Vec::new(),
        })
    }

    /// The plan with these further hosts (ATP's parameter servers, in job order).
    pub fn with_servers(mut self, servers: Vec<HostAddress>) -> AddressPlan {
        self.servers = servers;
        self
    }

    /// Whether this is the synthetic plan.
    pub fn is_synthetic(&self) -> bool {
        self.workers.is_none()
    }

    /// How many workers the plan names (None: the synthetic plan names any number).
    pub fn len(&self) -> Option<usize> {
        self.workers.as_ref().map(Vec::len)
    }

    /// Whether the plan names no worker (never true for a plan [`AddressPlan::new`] made).
    pub fn is_empty(&self) -> bool {
        self.len() == Some(0)
    }

    /// That the plan names at least `workers` workers.
    pub fn covers(&self, workers: usize) -> Result<(), AddressError> {
        match self.len() {
            Some(have) if have < workers => Err(AddressError::TooFew {
                have,
                need: workers,
            }),
            _ => Ok(()),
        }
    }

    /// Worker `i`'s address (None: a given plan with fewer workers).
    pub fn worker(&self, i: usize) -> Option<HostAddress> {
        match &self.workers {
            Some(w) => w.get(i).cloned(),
            None => {
                let b = (i + 1) as u8;
                let ipv4 = [10, 0, 0, b];
                Some(HostAddress {
                    interface: None,
                    mac: [2, 0, 0, 0, 0, b],
                    ipv4,
                    gid: ipv4_gid(ipv4),
                })
            }
        }
    }

    /// The worker whose IPv4 address this is (the synthetic plan: the last byte less one of any
    /// 10.x.y.z address).
    pub fn node_of_ip(&self, ip: [u8; 4]) -> Option<NodeId> {
        match &self.workers {
            Some(w) => w
                .iter()
                .position(|a| a.ipv4 == ip)
                .and_then(|i| NodeId::try_from(i).ok()),
            // as the systems have always read a worker's address (NetReduce's accelerator): any
            // 10.x.y.<i+1>, so a rig's 10.77.0.<i+1> reads as the synthetic plan's does
            None => (ip[0] == 10 && ip[3] > 0).then(|| NodeId::from(ip[3] - 1)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(i: u8) -> HostAddress {
        let ipv4 = [10, 77, 0, i + 1];
        HostAddress {
            interface: Some("ens3".into()),
            mac: [0x52, 0x54, 0, 0x77, 0, i + 1],
            ipv4,
            gid: ipv4_gid(ipv4),
        }
    }

    #[test]
    fn the_synthetic_plan_is_the_systems_old_numbering() {
        let p = AddressPlan::synthetic();
        assert!(p.is_synthetic());
        let w = p.worker(2).expect("any index");
        assert_eq!(w.mac, [2, 0, 0, 0, 0, 3]);
        assert_eq!(w.ipv4, [10, 0, 0, 3]);
        assert_eq!(
            std::net::Ipv6Addr::from(w.gid).to_string(),
            "::ffff:10.0.0.3"
        );
        assert_eq!(p.node_of_ip([10, 0, 0, 3]), Some(2));
        assert_eq!(p.node_of_ip([10, 0, 0, 0]), None);
        assert_eq!(
            p.node_of_ip([10, 77, 0, 2]),
            Some(1),
            "any 10.x.y.<i+1> is worker i"
        );
        assert_eq!(p.node_of_ip([192, 168, 0, 2]), None);
        assert!(p.covers(1000).is_ok());
    }

    #[test]
    fn an_ip_at_mac_argument_reads_back_and_refuses_junk() {
        let h = host(4);
        let text = fmt_ip_mac(&h);
        assert_eq!(text, "10.77.0.5@52:54:00:77:00:05");
        let back = parse_ip_mac(&text).expect("parses");
        assert_eq!((back.ipv4, back.mac, back.gid), (h.ipv4, h.mac, h.gid));
        for bad in [
            "10.77.0.5",
            "10.77.0.5@52:54:00:77:00",
            "10.77.0.256@52:54:00:77:00:05",
            "10.77.0.5@52:54:00:77:00:0g",
            "10.77.0.5@52:54:00:77:00:005",
        ] {
            assert_eq!(parse_ip_mac(bad), None, "{bad}");
        }
    }

    #[test]
    fn node_addresses_are_the_plans_or_the_systems_own() {
        let syn = |n: usize| ([2, 0, 0, 1, 0, (n + 1) as u8], [10, 0, 1, (n + 1) as u8]);
        let none = NodeAddresses::of("S", None, 2, 1, true, syn).expect("synthetic");
        assert_eq!(none.len(), 4);
        assert_eq!(none.ip(2), [10, 0, 1, 3], "the switch");
        assert_eq!(none.mac(3), [2, 0, 0, 1, 0, 4], "the server");
        let p = AddressPlan::new(vec![host(7), host(2)], Some(host(9)))
            .expect("plan")
            .with_servers(vec![host(11)]);
        let at = NodeAddresses::of("S", Some(&p), 2, 1, true, syn).expect("plan");
        assert_eq!(
            (0..4).map(|n| at.ip(n)).collect::<Vec<_>>(),
            vec![host(7).ipv4, host(2).ipv4, host(9).ipv4, host(11).ipv4]
        );
        assert_eq!(at.node_of_ip(host(2).ipv4), Some(1));
        assert_eq!(
            NodeAddresses::of("S", Some(&p), 3, 0, true, syn),
            Err(AddressError::TooFew { have: 2, need: 3 })
        );
        let bare = AddressPlan::new(vec![host(7), host(2)], None).expect("plan");
        assert_eq!(
            NodeAddresses::of("S", Some(&bare), 2, 0, true, syn)
                .expect_err("no switch")
                .to_string(),
            "the address plan gives no switch address, and S's workers address their frames to the switch"
        );
        let free = NodeAddresses::of("S", Some(&bare), 2, 0, false, syn).expect("not needed");
        assert_eq!(free.ip(2), [10, 0, 1, 3], "the synthetic switch");
        assert_eq!(
            NodeAddresses::of("S", Some(&p), 2, 2, true, syn),
            Err(AddressError::TooFewServers {
                system: "S",
                have: 1,
                need: 2
            })
        );
    }

    #[test]
    fn a_given_plan_maps_its_own_addresses_and_refuses_a_shared_one() {
        let p = AddressPlan::new(vec![host(0), host(1), host(2)], None).expect("plan");
        assert_eq!(p.len(), Some(3));
        assert_eq!(p.worker(1), Some(host(1)));
        assert_eq!(p.worker(3), None);
        assert_eq!(p.node_of_ip([10, 77, 0, 3]), Some(2));
        assert_eq!(
            p.node_of_ip([10, 0, 0, 3]),
            None,
            "not the synthetic plan's"
        );
        assert_eq!(
            p.covers(4).expect_err("too few").to_string(),
            "the address plan has 3 workers; the job has 4"
        );
        let mut twin = host(1);
        twin.ipv4 = host(0).ipv4;
        assert_eq!(
            AddressPlan::new(vec![host(0), twin], None)
                .expect_err("shared")
                .to_string(),
            "workers 0 and 1 of the address plan share the IPv4 address 10.77.0.1"
        );
        let mut multi = host(0);
        multi.mac[0] = 1;
        assert!(matches!(
            AddressPlan::new(vec![multi], None),
            Err(AddressError::Multicast { worker: 0, .. })
        ));
        assert_eq!(AddressPlan::new(vec![], None), Err(AddressError::NoWorker));
    }
}
