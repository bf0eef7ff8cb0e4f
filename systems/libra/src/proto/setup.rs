//! One run's nodes (workers, the switch, the server), built from the inputs, and the checks
//! of their results against exact sums.

use super::{Config, Server, Switch, Worker};
use crate::layout::Placement;
use crate::wire::Kind;
use std::collections::{HashMap, HashSet};

/// A node of a run: a worker, the switch, or the parameter server (`Other`), one forwarding
/// `Endpoint` impl ([`inabench_fabric::Node`]).
pub type Node = inabench_fabric::Node<Box<Worker>, Box<Switch>, Box<Server>>;

/// One iteration's inputs: each worker's (hot (rank, value), cold (key, value)) pairs.
pub type Inputs = Vec<(Vec<(u32, i32)>, Vec<(u32, i32)>)>;

/// Build the nodes of a run: workers 0..n, the switch n, the server n + 1.
pub fn build(
    cfg: &Config,
    inputs: &Inputs,
    hot_params: usize,
    placement: Option<Placement>,
) -> Vec<Node> {
    let mut v: Vec<Node> = inputs
        .iter()
        .enumerate()
        .map(|(w, (h, c))| {
            Node::Worker(Box::new(Worker::new(
                w,
                cfg.clone(),
                h,
                c,
                placement.as_ref(),
            )))
        })
        .collect();
    v.push(Node::Switch(Box::new(Switch::new(
        cfg.clone(),
        hot_params,
        placement,
    ))));
    v.push(Node::Other(Box::new(Server::new(cfg.clone()))));
    v
}

/// Check every worker's results against the exact sums of its own hot ranks and cold keys. Returns the number of wrong workers.
pub fn check(nodes: &[Node], inputs: &Inputs) -> usize {
    let mut hot: HashMap<u32, i32> = HashMap::new();
    let mut cold: HashMap<u32, i32> = HashMap::new();
    let float = nodes
        .iter()
        .any(|n| matches!(n, Node::Switch(s) if s.cfg.float));
    if float {
        match float_reference(nodes) {
            Some(r) => hot = r,
            // the switch did not aggregate every push exactly once: every worker is wrong
            None => return inputs.len(),
        }
    }
    for (h, c) in inputs {
        for (k, v) in h {
            if !float {
                let s = hot.entry(*k).or_insert(0);
                *s = s.wrapping_add(*v);
            }
        }
        for (k, v) in c {
            let s = cold.entry(*k).or_insert(0);
            *s = s.wrapping_add(*v);
        }
    }
    let mut wrong = 0;
    for n in nodes {
        if let Node::Worker(w) = n {
            let (h, c) = &inputs[w.rank];
            let cold_ok = w.cold_result.len() == c.len()
                && c.iter().all(|(k, _)| w.cold_result.get(k) == cold.get(k));
            // with Libra the switch returns every touched rank; with PS-lite the hot pairs
            // travel as cold ones
            let hot_ok = if w.cfg.libra {
                w.hot_result.len() == h.len()
                    && h.iter().all(|(k, _)| w.hot_result.get(k) == hot.get(k))
            } else {
                h.is_empty()
            };
            if !(w.finished && cold_ok && hot_ok) {
                wrong += 1;
            }
        }
    }
    wrong
}

/// The reference of the switch's float sums: every worker's hot pushes, checked to appear
/// exactly once in the switch's aggregation log, folded with the table-lookup sum
/// ([`crate::float::FloatTables::add_bits`], starting from +0.0) in the log's order (the
/// lookup sum is not associative, so the reference replays the order the switch saw). `None`
/// when a push is missing from the log or appears twice.
pub fn float_reference(nodes: &[Node]) -> Option<HashMap<u32, i32>> {
    let t = crate::float::tables();
    let mut packets: HashMap<(u16, u32), &[(u32, i32)]> = HashMap::new();
    let mut log: &[(u16, u32)] = &[];
    for n in nodes {
        match n {
            Node::Worker(w) => {
                for (seq, (_, r)) in w.pushes.msgs.iter().enumerate() {
                    if r.kind == Kind::PushHot {
                        packets.insert((w.rank as u16, seq as u32), &r.pairs);
                    }
                }
            }
            Node::Switch(s) => log = &s.aggregation_log,
            Node::Other(_) => {}
        }
    }
    if log.len() != packets.len() {
        return None;
    }
    let mut seen = HashSet::new();
    let mut out: HashMap<u32, i32> = HashMap::new();
    for id in log {
        if !seen.insert(*id) {
            return None;
        }
        for (k, v) in *packets.get(id)? {
            let s = out.entry(*k).or_insert(0);
            *s = t.add_bits(*s as u32, *v as u32) as i32;
        }
    }
    Some(out)
}
