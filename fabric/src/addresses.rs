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
}

/// The addresses of a job's workers (worker `i` is the plan's `i`-th) and of its switch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressPlan {
    /// None: the synthetic plan, computed for any worker index.
    workers: Option<Vec<HostAddress>>,
    /// The switch's own address (SwitchML-RDMA's switch answers as a host), where the plan
    /// gives one.
    pub switch: Option<HostAddress>,
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

impl AddressPlan {
    /// The systems' synthetic plan: worker `i` at MAC 02:00:00:00:00:<i+1> (a locally
    /// administered unicast address), IPv4 10.0.0.<i+1>, its GID the IPv4-mapped one; the last
    /// byte wraps past 255 workers as the systems' addresses always have.
    pub fn synthetic() -> AddressPlan {
        AddressPlan {
            workers: None,
            switch: None,
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
        })
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
