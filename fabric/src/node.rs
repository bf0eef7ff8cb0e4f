//! One generic role node: a fabric runs workers, a switch and other nodes (a parameter server,
//! an accelerator, a forwarder) side by side as one node type, `Node<W, S, O>`, with one
//! forwarding [`Endpoint`] impl, instead of an enum per system that forwards every call by hand
//! (smoltcp's `FaultInjector` composes around any `Device` the same way).
//!
//! ```
//! use inabench_fabric::{Endpoint, Node};
//! # use inabench_fabric::{Nanos, NodeId, Transmit};
//! # struct W(NodeId);
//! # impl Endpoint for W {
//! #     fn id(&self) -> NodeId { self.0 }
//! #     fn handle_packet(&mut self, _: Nanos, _: NodeId, _: &[u8]) {}
//! #     fn poll_transmit(&mut self, _: Nanos) -> Option<Transmit> { None }
//! #     fn poll_timeout(&self) -> Option<Nanos> { None }
//! #     fn handle_timeout(&mut self, _: Nanos) {}
//! # }
//! let nodes: Vec<Node<W, W>> = vec![Node::Worker(W(0)), Node::Worker(W(1)), Node::Switch(W(2))];
//! assert_eq!(nodes[2].id(), 2);
//! assert!(nodes[0].worker().is_some() && nodes[2].worker().is_none());
//! ```

use crate::endpoint::{Endpoint, Nanos, NodeId, Transmit};

/// A node of a run in one of three roles. `O` defaults to a boxed endpoint, so a system with no
/// third role writes `Node<MyWorker, MySwitch>`.
///
/// `WAIT_ON_WORKERS` is the one thing the role decides: with `false` (the default) every call,
/// `is_done` included, is the variant's; with `true` a switch or other node counts as done
/// (`is_done` is `true` whatever the endpoint says) and only a worker's own `is_done` is asked,
/// so a run's "every node done" waits on its workers (ina's `SetupNode`: its switches keep
/// `Endpoint`'s default `false`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node<W, S, O = Box<dyn Endpoint>, const WAIT_ON_WORKERS: bool = false> {
    Worker(W),
    Switch(S),
    Other(O),
}

impl<W, S, O, const WAIT_ON_WORKERS: bool> Node<W, S, O, WAIT_ON_WORKERS> {
    pub fn worker(&self) -> Option<&W> {
        match self {
            Node::Worker(w) => Some(w),
            _ => None,
        }
    }

    pub fn switch(&self) -> Option<&S> {
        match self {
            Node::Switch(s) => Some(s),
            _ => None,
        }
    }

    pub fn other(&self) -> Option<&O> {
        match self {
            Node::Other(o) => Some(o),
            _ => None,
        }
    }

    pub fn worker_mut(&mut self) -> Option<&mut W> {
        match self {
            Node::Worker(w) => Some(w),
            _ => None,
        }
    }

    pub fn switch_mut(&mut self) -> Option<&mut S> {
        match self {
            Node::Switch(s) => Some(s),
            _ => None,
        }
    }

    pub fn other_mut(&mut self) -> Option<&mut O> {
        match self {
            Node::Other(o) => Some(o),
            _ => None,
        }
    }

    pub fn into_worker(self) -> Option<W> {
        match self {
            Node::Worker(w) => Some(w),
            _ => None,
        }
    }

    pub fn into_switch(self) -> Option<S> {
        match self {
            Node::Switch(s) => Some(s),
            _ => None,
        }
    }

    pub fn into_other(self) -> Option<O> {
        match self {
            Node::Other(o) => Some(o),
            _ => None,
        }
    }

    pub fn is_worker(&self) -> bool {
        matches!(self, Node::Worker(_))
    }

    pub fn is_switch(&self) -> bool {
        matches!(self, Node::Switch(_))
    }

    pub fn is_other(&self) -> bool {
        matches!(self, Node::Other(_))
    }
}

impl<W: Endpoint, S: Endpoint, O: Endpoint, const WAIT_ON_WORKERS: bool>
    Node<W, S, O, WAIT_ON_WORKERS>
{
    /// The node as an endpoint, whatever its role.
    pub fn endpoint(&self) -> &dyn Endpoint {
        match self {
            Node::Worker(w) => w,
            Node::Switch(s) => s,
            Node::Other(o) => o,
        }
    }

    pub fn endpoint_mut(&mut self) -> &mut dyn Endpoint {
        match self {
            Node::Worker(w) => w,
            Node::Switch(s) => s,
            Node::Other(o) => o,
        }
    }
}

/// Every call goes to the variant's endpoint, unchanged (defaulted methods too: a node's
/// `counters` and `recycle` are its variant's, and so is `is_done` unless `WAIT_ON_WORKERS`).
impl<W: Endpoint, S: Endpoint, O: Endpoint, const WAIT_ON_WORKERS: bool> Endpoint
    for Node<W, S, O, WAIT_ON_WORKERS>
{
    fn id(&self) -> NodeId {
        self.endpoint().id()
    }
    fn handle_packet(&mut self, now: Nanos, from: NodeId, frame: &[u8]) {
        self.endpoint_mut().handle_packet(now, from, frame)
    }
    fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        self.endpoint_mut().poll_transmit(now)
    }
    fn poll_timeout(&self) -> Option<Nanos> {
        self.endpoint().poll_timeout()
    }
    fn handle_timeout(&mut self, now: Nanos) {
        self.endpoint_mut().handle_timeout(now)
    }
    fn is_done(&self) -> bool {
        match self {
            Node::Worker(w) => w.is_done(),
            _ if WAIT_ON_WORKERS => true,
            n => n.endpoint().is_done(),
        }
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        self.endpoint().counters()
    }
    fn recycle(&mut self, buf: Vec<u8>) {
        self.endpoint_mut().recycle(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// An endpoint that logs every call it gets (tagged with its name) and answers with values
    /// that name it.
    struct Rec {
        name: &'static str,
        id: NodeId,
        log: Arc<Mutex<Vec<String>>>,
    }

    impl Rec {
        fn note(&self, s: String) {
            self.log
                .lock()
                .expect("log")
                .push(format!("{}:{s}", self.name));
        }
    }

    impl Endpoint for Rec {
        fn id(&self) -> NodeId {
            self.id
        }
        fn handle_packet(&mut self, now: Nanos, from: NodeId, frame: &[u8]) {
            self.note(format!("packet {now} {from} {frame:?}"));
        }
        fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
            self.note(format!("poll_transmit {now}"));
            Some(Transmit {
                to: self.id + 100,
                bytes: self.name.as_bytes().to_vec(),
            })
        }
        fn poll_timeout(&self) -> Option<Nanos> {
            self.note("poll_timeout".into());
            Some(u64::from(self.id) * 1000)
        }
        fn handle_timeout(&mut self, now: Nanos) {
            self.note(format!("timeout {now}"));
        }
        fn is_done(&self) -> bool {
            self.note("is_done".into());
            self.name == "switch"
        }
        fn counters(&self) -> Vec<(&'static str, u64)> {
            vec![(self.name, u64::from(self.id))]
        }
        fn recycle(&mut self, buf: Vec<u8>) {
            self.note(format!("recycle {}", buf.len()));
        }
    }

    fn exercise(n: &mut dyn Endpoint) -> (NodeId, Option<Transmit>, Option<Nanos>, bool) {
        n.handle_packet(5, 7, &[1, 2]);
        let t = n.poll_transmit(6);
        let to = n.poll_timeout();
        n.handle_timeout(8);
        let done = n.is_done();
        n.recycle(vec![0; 3]);
        (n.id(), t, to, done)
    }

    #[test]
    fn a_node_forwards_every_call_to_its_variant() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let rec = |name, id| Rec {
            name,
            id,
            log: log.clone(),
        };
        let mut nodes: Vec<Node<Rec, Rec, Rec>> = vec![
            Node::Worker(rec("worker", 1)),
            Node::Switch(rec("switch", 2)),
            Node::Other(rec("other", 3)),
        ];
        for (k, (name, id)) in [("worker", 1), ("switch", 2), ("other", 3)]
            .into_iter()
            .enumerate()
        {
            log.lock().expect("log").clear();
            let (got_id, t, to, done) = exercise(&mut nodes[k]);
            assert_eq!(got_id, id);
            assert_eq!(
                t,
                Some(Transmit {
                    to: id + 100,
                    bytes: name.as_bytes().to_vec()
                })
            );
            assert_eq!(to, Some(u64::from(id) * 1000));
            assert_eq!(done, name == "switch");
            assert_eq!(nodes[k].counters(), vec![(name, u64::from(id))]);
            let want: Vec<String> = [
                "packet 5 7 [1, 2]",
                "poll_transmit 6",
                "poll_timeout",
                "timeout 8",
                "is_done",
                "recycle 3",
            ]
            .iter()
            .map(|c| format!("{name}:{c}"))
            .collect();
            assert_eq!(*log.lock().expect("log"), want, "{name}");
        }
    }

    #[test]
    fn waiting_on_workers_counts_the_other_roles_done_and_asks_only_workers() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let rec = |name, id| Rec {
            name,
            id,
            log: log.clone(),
        };
        // Rec's is_done is true for "switch" only: each role's answer tells the rules apart
        let mut waits: Vec<Node<Rec, Rec, Rec, true>> = vec![
            Node::Worker(rec("worker", 1)),
            Node::Switch(rec("other", 2)),
            Node::Other(rec("worker", 3)),
        ];
        let own: Vec<Node<Rec, Rec, Rec>> = vec![
            Node::Worker(rec("worker", 1)),
            Node::Switch(rec("other", 2)),
            Node::Other(rec("switch", 3)),
        ];
        log.lock().expect("log").clear();
        let got: Vec<bool> = waits.iter().map(|n| n.is_done()).collect();
        assert_eq!(got, [false, true, true]);
        assert_eq!(
            *log.lock().expect("log"),
            ["worker:is_done"],
            "only the worker asked"
        );
        let got: Vec<bool> = own.iter().map(|n| n.is_done()).collect();
        assert_eq!(got, [false, false, true], "each variant's own answer");
        // every other call still goes to the variant
        let (id, t, to, _) = exercise(&mut waits[1]);
        assert_eq!((id, t.map(|t| t.to), to), (2, Some(102), Some(2000)));
    }

    #[test]
    fn accessors_name_the_role() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let rec = |name, id| Rec {
            name,
            id,
            log: log.clone(),
        };
        let mut w: Node<Rec, Rec, Rec> = Node::Worker(rec("worker", 1));
        let s: Node<Rec, Rec, Rec> = Node::Switch(rec("switch", 2));
        let o: Node<Rec, Rec, Rec> = Node::Other(rec("other", 3));
        assert_eq!(w.worker().map(|r| r.id), Some(1));
        assert!(w.switch().is_none() && w.other().is_none() && w.is_worker());
        assert_eq!(s.switch().map(|r| r.id), Some(2));
        assert!(s.worker().is_none() && s.is_switch() && !s.is_other());
        assert_eq!(o.other().map(|r| r.name), Some("other"));
        assert!(o.is_other() && !o.is_worker());
        if let Some(r) = w.worker_mut() {
            r.id = 9;
        }
        assert_eq!(w.id(), 9);
        assert!(w.switch_mut().is_none() && w.other_mut().is_none());
        assert_eq!(s.into_switch().map(|r| r.id), Some(2));
        assert!(o.into_worker().is_none());
        assert_eq!(w.into_worker().map(|r| r.id), Some(9));
    }

    #[test]
    fn the_default_other_role_is_a_boxed_endpoint() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut n: Node<Rec, Rec> = Node::Other(Box::new(Rec {
            name: "boxed",
            id: 4,
            log: log.clone(),
        }));
        assert_eq!(n.id(), 4);
        assert_eq!(n.poll_timeout(), Some(4000));
        assert_eq!(n.poll_transmit(1).map(|t| t.to), Some(104));
        assert!(n.worker().is_none() && n.other().is_some());
    }
}
