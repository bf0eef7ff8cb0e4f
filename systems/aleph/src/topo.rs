//! Data-centre topologies of ALEPH's simulation (Sec. 6.4 (1)) with shortest-path ECMP routing.
//!
//! - Fat-tree: `pods` pods of `edges_per_pod` edge and `aggs_per_pod` aggregation switches, every
//!   edge switch joined to every aggregation switch of its pod, aggregation switch j of every pod
//!   joined to core switches j*m .. j*m+m-1 (m = cores / aggs_per_pod), `servers_per_edge`
//!   servers per edge switch. The paper's: 8 pods x (4 + 4), 16 cores, 10 servers per edge
//!   switch = 320 servers.
//! - Leaf-spine: every leaf joined to every spine, `servers_per_leaf` servers per leaf. The
//!   paper's: 30 spines, 30 leaves, 10 servers per leaf = 300 servers.
//!
//! "Non-blocking (uplinks and downlinks 1:1)": each switch's uplinks together carry what its
//! downlinks can, so an edge switch with 10 servers at 10 Gbps and 4 uplinks has 25 Gbps uplinks.
//! Links are full duplex: every cable is two directed links, each a resource of its own. A host's
//! access links carry the host's available bandwidth (set with [`Topology::set_host_rate`]).
//! Node numbering: hosts 0..H, then the switches.

use crate::AlephError;
use std::collections::HashMap;

/// Which topology.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    FatTree,
    LeafSpine,
}

impl Kind {
    pub fn parse(s: &str) -> Result<Kind, AlephError> {
        match s {
            "fat_tree" => Ok(Kind::FatTree),
            "leaf_spine" => Ok(Kind::LeafSpine),
            other => Err(AlephError::Invalid(format!(
                "topology `{other}` is not one of fat_tree, leaf_spine"
            ))),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Link {
    pub from: u32,
    pub to: u32,
    /// bytes per second
    pub capacity: f64,
}

#[derive(Debug, Clone, Copy)]
enum Shape {
    FatTree {
        pods: usize,
        edges_per_pod: usize,
        aggs_per_pod: usize,
        cores: usize,
        servers_per_edge: usize,
    },
    LeafSpine {
        spines: usize,
        leaves: usize,
        servers_per_leaf: usize,
    },
}

/// A topology: nodes, directed links, and the structure routing needs.
#[derive(Debug, Clone)]
pub struct Topology {
    shape: Shape,
    hosts: usize,
    links: Vec<Link>,
    index: HashMap<(u32, u32), u32>,
    up: Vec<u32>,
    down: Vec<u32>,
}

impl Topology {
    /// A non-blocking fat-tree; `nic` is the server link rate in bytes per second.
    pub fn fat_tree(
        pods: usize,
        edges_per_pod: usize,
        aggs_per_pod: usize,
        cores: usize,
        servers_per_edge: usize,
        nic: f64,
    ) -> Result<Topology, AlephError> {
        if pods == 0 || edges_per_pod == 0 || aggs_per_pod == 0 || servers_per_edge == 0 {
            return Err(AlephError::Invalid(
                "a fat-tree needs at least one of everything".into(),
            ));
        }
        if cores == 0 || !cores.is_multiple_of(aggs_per_pod) {
            return Err(AlephError::Invalid(format!(
                "{cores} cores do not split evenly over {aggs_per_pod} aggregation switches per pod"
            )));
        }
        positive(nic)?;
        let shape = Shape::FatTree {
            pods,
            edges_per_pod,
            aggs_per_pod,
            cores,
            servers_per_edge,
        };
        let edges = pods * edges_per_pod;
        let hosts = edges * servers_per_edge;
        let mut t = Topology::empty(shape, hosts);
        let m = cores / aggs_per_pod;
        let edge_up = servers_per_edge as f64 * nic / aggs_per_pod as f64;
        let agg_up = edges_per_pod as f64 * edge_up / m as f64;
        for h in 0..hosts {
            let e = t.edge_node(h);
            let up = t.cable(h as u32, e, nic);
            t.up.push(up);
            t.down.push(t.index[&(e, h as u32)]);
        }
        for p in 0..pods {
            for e in 0..edges_per_pod {
                for a in 0..aggs_per_pod {
                    let en = (hosts + p * edges_per_pod + e) as u32;
                    let an = t.agg_node(p, a);
                    t.cable(en, an, edge_up);
                }
            }
            for a in 0..aggs_per_pod {
                for j in 0..m {
                    let an = t.agg_node(p, a);
                    let cn = t.core_node(a * m + j);
                    t.cable(an, cn, agg_up);
                }
            }
        }
        Ok(t)
    }

    /// The paper's fat-tree: 16 core, 32 aggregation, 32 edge switches and 320 servers.
    pub fn paper_fat_tree(nic: f64) -> Result<Topology, AlephError> {
        Topology::fat_tree(8, 4, 4, 16, 10, nic)
    }

    /// A non-blocking leaf-spine.
    pub fn leaf_spine(
        spines: usize,
        leaves: usize,
        servers_per_leaf: usize,
        nic: f64,
    ) -> Result<Topology, AlephError> {
        if spines == 0 || leaves == 0 || servers_per_leaf == 0 {
            return Err(AlephError::Invalid(
                "a leaf-spine needs at least one of everything".into(),
            ));
        }
        positive(nic)?;
        let shape = Shape::LeafSpine {
            spines,
            leaves,
            servers_per_leaf,
        };
        let hosts = leaves * servers_per_leaf;
        let mut t = Topology::empty(shape, hosts);
        let up = servers_per_leaf as f64 * nic / spines as f64;
        for h in 0..hosts {
            let l = t.edge_node(h);
            let link = t.cable(h as u32, l, nic);
            t.up.push(link);
            t.down.push(t.index[&(l, h as u32)]);
        }
        for l in 0..leaves {
            for s in 0..spines {
                t.cable((hosts + l) as u32, (hosts + leaves + s) as u32, up);
            }
        }
        Ok(t)
    }

    /// The paper's leaf-spine: 30 spine and 30 leaf switches, 300 servers.
    pub fn paper_leaf_spine(nic: f64) -> Result<Topology, AlephError> {
        Topology::leaf_spine(30, 30, 10, nic)
    }

    /// The paper's topology of a kind.
    pub fn paper(kind: Kind, nic: f64) -> Result<Topology, AlephError> {
        match kind {
            Kind::FatTree => Topology::paper_fat_tree(nic),
            Kind::LeafSpine => Topology::paper_leaf_spine(nic),
        }
    }

    fn empty(shape: Shape, hosts: usize) -> Topology {
        Topology {
            shape,
            hosts,
            links: Vec::new(),
            index: HashMap::new(),
            up: Vec::with_capacity(hosts),
            down: Vec::with_capacity(hosts),
        }
    }

    /// Add both directions of a cable; returns the index of a -> b.
    fn cable(&mut self, a: u32, b: u32, cap: f64) -> u32 {
        let i = self.links.len() as u32;
        self.links.push(Link {
            from: a,
            to: b,
            capacity: cap,
        });
        self.links.push(Link {
            from: b,
            to: a,
            capacity: cap,
        });
        self.index.insert((a, b), i);
        self.index.insert((b, a), i + 1);
        i
    }

    fn edge_node(&self, h: usize) -> u32 {
        (self.hosts + self.edge_of(h)) as u32
    }

    fn agg_node(&self, pod: usize, a: usize) -> u32 {
        match self.shape {
            Shape::FatTree {
                pods,
                edges_per_pod,
                aggs_per_pod,
                ..
            } => (self.hosts + pods * edges_per_pod + pod * aggs_per_pod + a) as u32,
            Shape::LeafSpine { .. } => u32::MAX,
        }
    }

    fn core_node(&self, c: usize) -> u32 {
        match self.shape {
            Shape::FatTree {
                pods,
                edges_per_pod,
                aggs_per_pod,
                ..
            } => (self.hosts + pods * edges_per_pod + pods * aggs_per_pod + c) as u32,
            Shape::LeafSpine { .. } => u32::MAX,
        }
    }

    pub fn hosts(&self) -> usize {
        self.hosts
    }

    pub fn links(&self) -> &[Link] {
        &self.links
    }

    /// The edge (leaf) switch of a host, counted from 0.
    pub fn edge_of(&self, h: usize) -> usize {
        match self.shape {
            Shape::FatTree {
                servers_per_edge, ..
            } => h / servers_per_edge,
            Shape::LeafSpine {
                servers_per_leaf, ..
            } => h / servers_per_leaf,
        }
    }

    fn pod_of_edge(&self, e: usize) -> usize {
        match self.shape {
            Shape::FatTree { edges_per_pod, .. } => e / edges_per_pod,
            Shape::LeafSpine { .. } => 0,
        }
    }

    /// Set the capacity of a host's access links (its available bandwidth), bytes per second.
    pub fn set_host_rate(&mut self, h: usize, up: f64, down: f64) -> Result<(), AlephError> {
        if h >= self.hosts {
            return Err(AlephError::Invalid(format!(
                "host {h} does not exist ({} hosts)",
                self.hosts
            )));
        }
        positive(up)?;
        positive(down)?;
        self.links[self.up[h] as usize].capacity = up;
        self.links[self.down[h] as usize].capacity = down;
        Ok(())
    }

    /// The directed links from host `src` to host `dst`, choosing among equal-cost paths with
    /// `hash` (ECMP). Empty when src == dst.
    pub fn path(&self, src: usize, dst: usize, hash: u64) -> Result<Vec<u32>, AlephError> {
        if src >= self.hosts || dst >= self.hosts {
            return Err(AlephError::Invalid(format!(
                "hosts {src} and {dst}: there are {} hosts",
                self.hosts
            )));
        }
        if src == dst {
            return Ok(Vec::new());
        }
        let (es, ed) = (self.edge_of(src), self.edge_of(dst));
        let (ns, nd) = (self.edge_node(src), self.edge_node(dst));
        let mut nodes = vec![src as u32, ns];
        if es != ed {
            match self.shape {
                Shape::FatTree {
                    aggs_per_pod,
                    cores,
                    ..
                } => {
                    let (ps, pd) = (self.pod_of_edge(es), self.pod_of_edge(ed));
                    let a = (hash % aggs_per_pod as u64) as usize;
                    nodes.push(self.agg_node(ps, a));
                    if ps != pd {
                        let m = cores / aggs_per_pod;
                        let j = ((hash / aggs_per_pod as u64) % m as u64) as usize;
                        nodes.push(self.core_node(a * m + j));
                        nodes.push(self.agg_node(pd, a));
                    }
                }
                Shape::LeafSpine { spines, leaves, .. } => {
                    let s = (hash % spines as u64) as usize;
                    nodes.push((self.hosts + leaves + s) as u32);
                }
            }
            nodes.push(nd);
        }
        nodes.push(dst as u32);
        nodes
            .windows(2)
            .map(|w| {
                self.index.get(&(w[0], w[1])).copied().ok_or_else(|| {
                    AlephError::Invalid(format!("no link from node {} to node {}", w[0], w[1]))
                })
            })
            .collect()
    }

    /// The directed links from `src` to `dst` with the share of the traffic each carries when
    /// the traffic is sprayed evenly over all equal-cost shortest paths (ideal load balancing,
    /// what "non-blocking" assumes). Every hop's weights sum to 1.
    pub fn spray(&self, src: usize, dst: usize) -> Result<Vec<(u32, f64)>, AlephError> {
        let mut out: Vec<(u32, f64)> = Vec::new();
        let ways: u64 = match self.shape {
            Shape::FatTree {
                aggs_per_pod,
                cores,
                ..
            } => (aggs_per_pod * (cores / aggs_per_pod)) as u64,
            Shape::LeafSpine { spines, .. } => spines as u64,
        };
        let w = 1.0 / ways as f64;
        for h in 0..ways {
            for l in self.path(src, dst, h)? {
                match out.iter_mut().find(|(x, _)| *x == l) {
                    Some(e) => e.1 += w,
                    None => out.push((l, w)),
                }
            }
        }
        Ok(out)
    }

    /// Switches a path passes through (links - 1).
    pub fn switches(path: &[u32]) -> usize {
        path.len().saturating_sub(1)
    }
}

fn positive(x: f64) -> Result<(), AlephError> {
    if x.is_finite() && x > 0.0 {
        Ok(())
    } else {
        Err(AlephError::Invalid(format!(
            "a link rate must be positive (got {x})"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paper_sizes() {
        let ft = Topology::paper_fat_tree(1.25e9).expect("fat-tree");
        assert_eq!(ft.hosts(), 320);
        // cables: 320 host + 8 pods * 16 edge-agg + 32 aggs * 4 cores
        assert_eq!(ft.links().len(), 2 * (320 + 128 + 128));
        let ls = Topology::paper_leaf_spine(1.25e9).expect("leaf-spine");
        assert_eq!(ls.hosts(), 300);
        assert_eq!(ls.links().len(), 2 * (300 + 900));
    }

    #[test]
    fn path_lengths() {
        let ft = Topology::paper_fat_tree(1.25e9).expect("fat-tree");
        let sw = |a, b| Topology::switches(&ft.path(a, b, 12345).expect("path"));
        assert_eq!(sw(0, 9), 1); // same edge switch
        assert_eq!(sw(0, 10), 3); // same pod
        assert_eq!(sw(0, 40), 5); // another pod
        assert_eq!(sw(3, 3), 0);
        let ls = Topology::paper_leaf_spine(1.25e9).expect("leaf-spine");
        assert_eq!(Topology::switches(&ls.path(0, 9, 7).expect("path")), 1);
        assert_eq!(Topology::switches(&ls.path(0, 299, 7).expect("path")), 3);
        assert!(ft.path(0, 320, 1).is_err());
    }

    #[test]
    fn non_blocking_capacities() {
        let nic = 1.25e9;
        let ft = Topology::paper_fat_tree(nic).expect("fat-tree");
        // every switch: capacity in == capacity out towards the core, i.e. uplinks carry 10 x NIC
        let p = ft.path(0, 40, 0).expect("path");
        let caps: Vec<f64> = p.iter().map(|&l| ft.links()[l as usize].capacity).collect();
        assert_eq!(caps[0], nic);
        assert_eq!(caps[1] * 4.0, 10.0 * nic);
        // an aggregation switch: 4 edge downlinks of 25 Gbps, 4 core uplinks of 25 Gbps
        assert_eq!(caps[2], caps[1]);
    }

    #[test]
    fn spray_weights_sum_to_one_per_hop() {
        let ft = Topology::paper_fat_tree(1.25e9).expect("fat-tree");
        let s = ft.spray(0, 40).expect("spray");
        let total: f64 = s.iter().map(|(_, w)| w).sum();
        assert!((total - 6.0).abs() < 1e-12, "{total}");
        // 1 + 4 + 16 + 16 + 4 + 1 links
        assert_eq!(s.len(), 42);
        let ls = Topology::paper_leaf_spine(1.25e9).expect("leaf-spine");
        let s = ls.spray(0, 299).expect("spray");
        assert_eq!(s.len(), 2 + 60);
        assert_eq!(ft.spray(0, 5).expect("spray").len(), 2);
    }

    #[test]
    fn ecmp_spreads_over_aggregation_switches() {
        let ft = Topology::paper_fat_tree(1.25e9).expect("fat-tree");
        let mut seen = std::collections::BTreeSet::new();
        for h in 0..64u64 {
            seen.insert(ft.path(0, 40, h).expect("path")[1]);
        }
        assert_eq!(seen.len(), 4);
    }
}
