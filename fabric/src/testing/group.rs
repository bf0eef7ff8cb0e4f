//! [`Group`]: one virtual-time test driver for a set of endpoints (quinn-proto's test `Pair`,
//! turmoil's `Sim`): it owns the nodes, the virtual clock and the links (a [`SimFabric`] star),
//! steps or drives the run, never hangs (a run that cannot finish is an [`Unfinished`] error
//! naming the nodes that are not done and the virtual time), and has link verbs a test uses to
//! make a fault happen exactly where it wants one: [`Group::hold`] / [`Group::release`] frames
//! matching a predicate, [`Group::drop_nth`], [`Group::partition`] / [`Group::heal`].
//!
//! ```ignore
//! let mut g = Group::builder().link(LinkConfig::gbps100()).limit_ns(1_000_000_000).seed(7)
//!     .workers(workers).build(nodes);
//! let cold = g.drop_nth(|f| f.to == SERVER && is_cold_push(f.bytes), 17);
//! let done = g.drive_bounded()?;          // Err(Unfinished { not_done, at_ns }), never a hang
//! assert_eq!(g.dropped(cold), 1);
//! ```
//!
//! The verbs act where a frame leaves its sender, before its link: a dropped or held frame costs
//! no link time and the fabric never sees it (its counts are of frames that left); a released
//! frame leaves at the time of the release, after whatever its sender sent meanwhile (so a hold
//! reorders, as turmoil's does). The star's own faults ([`Faults`], seeded) apply to every frame
//! that leaves, as on [`crate::Sim`].

use crate::endpoint::{Endpoint, Nanos, NodeId, Transmit};
use crate::fault::Faults;
use crate::sim::{LinkConfig, NodeConfig, SimFabric, SimReport, Tap};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

/// A frame on a link, as a link verb's predicate sees it.
#[derive(Debug, Clone, Copy)]
pub struct Frame<'a> {
    pub from: NodeId,
    pub to: NodeId,
    pub bytes: &'a [u8],
}

/// A predicate over a frame.
pub type Pred = Box<dyn FnMut(&Frame) -> bool + Send>;

/// A frame a rule saw: when, which link, its bytes, and whether it was leaving its sender
/// (false: arriving at its receiver, [`Group::watch`] only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub at: Nanos,
    pub from: NodeId,
    pub to: NodeId,
    pub bytes: Vec<u8>,
    pub leaving: bool,
}

/// A rule added by a link verb; ask [`Group::matched`] / [`Group::dropped`] about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rule(usize);

/// A bounded run did not finish: who is not done, and when it stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the run did not finish: node(s) {not_done:?} not done at {at_ns} ns ({why})",
    why = if *idle { "nothing left to happen" } else { "the time limit" }
)]
pub struct Unfinished {
    /// The counted nodes that were not done.
    pub not_done: Vec<NodeId>,
    /// The virtual time the run stopped at.
    pub at_ns: Nanos,
    /// True when no event was left (the run was stuck); false when the limit came first.
    pub idle: bool,
}

/// What a finished run reports.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    /// When the last counted node was first seen done.
    pub at_ns: Nanos,
    /// When each node was first seen done (0: never).
    pub done_ns: Vec<Nanos>,
}

enum Action {
    /// Drop the `n`-th match (1-based), once.
    DropNth(u64),
    /// Drop every match.
    DropAll,
    /// Keep every match until released.
    Hold,
    /// Let every match go, noting it as it leaves and as it arrives.
    Watch,
}

struct RuleState {
    pred: Pred,
    action: Action,
    active: bool,
    matched: u64,
    dropped: u64,
    held: u64,
    /// The frames it dropped, held or watched.
    seen: Vec<Seen>,
}

/// The link verbs' state, shared by the group and the gates of its nodes.
#[derive(Default)]
struct Rules {
    rules: Vec<RuleState>,
    /// Frames held, per sender, with the rule that held them.
    held: Vec<VecDeque<(usize, Transmit)>>,
    /// Frames released, per sender, to leave before anything else it sends.
    released: Vec<VecDeque<Transmit>>,
}

impl Rules {
    /// What happens to `t` leaving `from` at `now`: `Some(t)` goes on, `None` was dropped or
    /// held.
    fn apply(&mut self, now: Nanos, from: NodeId, t: Transmit) -> Option<Transmit> {
        for (k, r) in self.rules.iter_mut().enumerate() {
            let f = Frame {
                from,
                to: t.to,
                bytes: &t.bytes,
            };
            if !r.active || !(r.pred)(&f) {
                continue;
            }
            r.matched += 1;
            let seen = |t: &Transmit| Seen {
                at: now,
                from,
                to: t.to,
                bytes: t.bytes.clone(),
                leaving: true,
            };
            match r.action {
                Action::DropNth(n) if r.matched == n => {
                    r.dropped += 1;
                    r.active = false;
                    r.seen.push(seen(&t));
                    return None;
                }
                Action::DropNth(_) => {}
                Action::DropAll => {
                    r.dropped += 1;
                    r.seen.push(seen(&t));
                    return None;
                }
                Action::Hold => {
                    r.held += 1;
                    r.seen.push(seen(&t));
                    if let Some(h) = self.held.get_mut(from as usize) {
                        h.push_back((k, t));
                    }
                    return None;
                }
                Action::Watch => r.seen.push(seen(&t)),
            }
        }
        Some(t)
    }

    /// Note a frame arriving, for the watch rules.
    fn arrive(&mut self, now: Nanos, from: NodeId, to: NodeId, bytes: &[u8]) {
        for r in &mut self.rules {
            if matches!(r.action, Action::Watch) && r.active && (r.pred)(&Frame { from, to, bytes })
            {
                r.seen.push(Seen {
                    at: now,
                    from,
                    to,
                    bytes: bytes.to_vec(),
                    leaving: false,
                });
            }
        }
    }
}

fn lock(r: &Mutex<Rules>) -> MutexGuard<'_, Rules> {
    // a panicking predicate poisons the lock; the rules themselves stay consistent
    r.lock().unwrap_or_else(|e| e.into_inner())
}

/// A node of a group: its endpoint behind the link verbs' gate.
struct Gate<N> {
    inner: N,
    id: NodeId,
    rules: Arc<Mutex<Rules>>,
}

impl<N: Endpoint> Endpoint for Gate<N> {
    fn id(&self) -> NodeId {
        self.inner.id()
    }
    fn handle_packet(&mut self, now: Nanos, from: NodeId, frame: &[u8]) {
        {
            let mut rules = lock(&self.rules);
            if !rules.rules.is_empty() {
                rules.arrive(now, from, self.id, frame);
            }
        }
        self.inner.handle_packet(now, from, frame)
    }
    fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        let mut rules = lock(&self.rules);
        if let Some(t) = rules
            .released
            .get_mut(self.id as usize)
            .and_then(VecDeque::pop_front)
        {
            return Some(t);
        }
        if rules.rules.is_empty() {
            drop(rules);
            return self.inner.poll_transmit(now);
        }
        while let Some(t) = self.inner.poll_transmit(now) {
            if let Some(t) = rules.apply(now, self.id, t) {
                return Some(t);
            }
        }
        None
    }
    fn poll_timeout(&self) -> Option<Nanos> {
        self.inner.poll_timeout()
    }
    fn handle_timeout(&mut self, now: Nanos) {
        self.inner.handle_timeout(now)
    }
    fn is_done(&self) -> bool {
        self.inner.is_done()
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        self.inner.counters()
    }
    fn recycle(&mut self, buf: Vec<u8>) {
        self.inner.recycle(buf)
    }
}

/// How a [`Group`] is built: links, host costs, the switch, faults, the limit and which nodes
/// must be done.
pub struct Builder {
    link: LinkConfig,
    costs: Vec<NodeConfig>,
    switch: Option<NodeId>,
    faults: Faults,
    limit_ns: Nanos,
    counted: Option<Vec<bool>>,
    workers: Option<usize>,
    push_transmit: bool,
    tap: Option<Tap>,
    all: bool,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            link: LinkConfig::gbps100(),
            costs: Vec::new(),
            switch: None,
            faults: Faults::default(),
            limit_ns: 60_000_000_000,
            counted: None,
            workers: None,
            push_transmit: false,
            tap: None,
            all: false,
        }
    }
}

impl Builder {
    /// Every link of the star (default [`LinkConfig::gbps100`]).
    pub fn link(mut self, link: LinkConfig) -> Self {
        self.link = link;
        self
    }

    /// Per-node receive and transmit costs (nodes past the end cost nothing).
    pub fn costs(mut self, costs: Vec<NodeConfig>) -> Self {
        self.costs = costs;
        self
    }

    /// The star's centre (default: the last node).
    pub fn switch(mut self, id: NodeId) -> Self {
        self.switch = Some(id);
        self
    }

    /// Seeded loss, duplication and reordering on every link (the seed included).
    pub fn faults(mut self, faults: Faults) -> Self {
        self.faults = faults;
        self
    }

    /// The faults' seed.
    pub fn seed(mut self, seed: u64) -> Self {
        self.faults.seed = seed;
        self
    }

    /// Give up after this much virtual time (default 60 s).
    pub fn limit_ns(mut self, limit_ns: Nanos) -> Self {
        self.limit_ns = limit_ns;
        self
    }

    /// The first `n` nodes must be done for the run to finish (the default: every node but the
    /// switch).
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = Some(n);
        self
    }

    /// Every node must be done for the run to finish (the switch too).
    pub fn count_all(mut self) -> Self {
        self.all = true;
        self
    }

    /// `counted[i]`: node `i` must be done for the run to finish.
    pub fn counted(mut self, counted: Vec<bool>) -> Self {
        self.counted = Some(counted);
        self
    }

    /// Hosts push every frame at once (see [`SimFabric::set_push_transmit`]).
    pub fn push_transmit(mut self, on: bool) -> Self {
        self.push_transmit = on;
        self
    }

    /// See every frame put on a link (after the link verbs).
    pub fn tap(mut self, tap: Tap) -> Self {
        self.tap = Some(tap);
        self
    }

    /// The group of `nodes` (node `i` must have id `i`).
    ///
    /// # Panics
    /// If a node's id is not its index (a test's own mistake).
    pub fn build<N: Endpoint>(self, nodes: Vec<N>) -> Group<N> {
        let n = nodes.len();
        for (i, node) in nodes.iter().enumerate() {
            assert_eq!(node.id() as usize, i, "node {i} has id {}", node.id());
        }
        let switch = self.switch.unwrap_or_else(|| n.saturating_sub(1) as NodeId);
        let counted = match (self.counted, self.workers) {
            _ if self.all => vec![true; n],
            (Some(c), _) => c,
            (None, Some(w)) => (0..n).map(|i| i < w).collect(),
            (None, None) => (0..n).map(|i| i as NodeId != switch).collect(),
        };
        let rules = Arc::new(Mutex::new(Rules {
            rules: Vec::new(),
            held: vec![VecDeque::new(); n],
            released: vec![VecDeque::new(); n],
        }));
        let free = NodeConfig {
            rx_cost_ns: 0,
            tx_cost_ns: 0,
        };
        let cfg = (0..n)
            .map(|i| self.costs.get(i).copied().unwrap_or(free))
            .collect();
        let gates = nodes
            .into_iter()
            .enumerate()
            .map(|(i, inner)| Gate {
                inner,
                id: i as NodeId,
                rules: rules.clone(),
            })
            .collect();
        let mut sim = SimFabric::new(gates, cfg, switch, self.link, self.faults);
        sim.set_push_transmit(self.push_transmit);
        if let Some(tap) = self.tap {
            sim.set_tap(tap);
        }
        Group {
            sim,
            rules,
            counted,
            limit_ns: self.limit_ns,
            done_ns: vec![0; n],
        }
    }
}

/// A set of endpoints on a virtual-time star, with a clock a test steps and link verbs (see the
/// module doc).
pub struct Group<N: Endpoint> {
    sim: SimFabric<Gate<N>>,
    rules: Arc<Mutex<Rules>>,
    counted: Vec<bool>,
    limit_ns: Nanos,
    done_ns: Vec<Nanos>,
}

impl Group<Box<dyn Endpoint>> {
    /// A builder (the node type comes with [`Builder::build`]).
    pub fn builder() -> Builder {
        Builder::default()
    }
}

impl<N: Endpoint> Group<N> {
    /// Handle the next event, if one is due before the limit; its virtual time.
    pub fn step(&mut self) -> Option<Nanos> {
        let t = self.sim.step(self.limit_ns)?;
        self.note_done(t);
        Some(t)
    }

    fn note_done(&mut self, now: Nanos) {
        for (i, g) in self.sim.nodes().iter().enumerate() {
            if self.done_ns[i] == 0 && g.inner.is_done() {
                self.done_ns[i] = now.max(1);
            }
        }
    }

    /// The counted nodes not done now.
    pub fn not_done(&self) -> Vec<NodeId> {
        self.sim
            .nodes()
            .iter()
            .enumerate()
            .filter(|(i, g)| self.counted.get(*i).copied().unwrap_or(false) && !g.inner.is_done())
            .map(|(i, _)| i as NodeId)
            .collect()
    }

    /// Every counted node is done.
    pub fn all_done(&self) -> bool {
        self.sim
            .nodes()
            .iter()
            .zip(&self.counted)
            .all(|(g, c)| !*c || g.inner.is_done())
    }

    /// Step until every counted node is done (true), or no event is left before the limit
    /// (false). As [`crate::Sim`], done is checked after each event.
    pub fn drive(&mut self) -> bool {
        while self.step().is_some() {
            if self.all_done() {
                return true;
            }
        }
        false
    }

    /// Handle every event up to virtual time `t` (those at `t` included); the clock then reads
    /// the last event's time (it does not run on through idle time). The done check is left
    /// to the caller.
    pub fn drive_until(&mut self, t: Nanos) {
        while let Some(now) = self.sim.step(t.min(self.limit_ns)) {
            self.note_done(now);
        }
    }

    /// [`Group::drive`], or an [`Unfinished`] error naming the counted nodes not done when no
    /// event is left or the limit comes: a stuck run fails, never hangs.
    pub fn drive_bounded(&mut self) -> Result<Finished, Unfinished> {
        if self.drive() {
            let at_ns = self
                .done_ns
                .iter()
                .zip(&self.counted)
                .filter(|(_, c)| **c)
                .map(|(d, _)| *d)
                .max()
                .unwrap_or(self.sim.now());
            return Ok(Finished {
                at_ns,
                done_ns: self.done_ns.clone(),
            });
        }
        Err(Unfinished {
            not_done: self.not_done(),
            at_ns: self.sim.now(),
            idle: self.sim.now() < self.limit_ns,
        })
    }

    fn add(&mut self, pred: Pred, action: Action) -> Rule {
        let mut r = lock(&self.rules);
        r.rules.push(RuleState {
            pred,
            action,
            active: true,
            matched: 0,
            dropped: 0,
            held: 0,
            seen: Vec::new(),
        });
        Rule(r.rules.len() - 1)
    }

    /// Drop the `n`-th frame (1-based) that matches `pred` from now on; the others go.
    pub fn drop_nth(&mut self, pred: impl FnMut(&Frame) -> bool + Send + 'static, n: u64) -> Rule {
        self.add(Box::new(pred), Action::DropNth(n.max(1)))
    }

    /// Drop every frame that matches `pred` until [`Group::lift`].
    pub fn drop_all(&mut self, pred: impl FnMut(&Frame) -> bool + Send + 'static) -> Rule {
        self.add(Box::new(pred), Action::DropAll)
    }

    /// Keep every frame that matches `pred` at its sender until [`Group::release`].
    pub fn hold(&mut self, pred: impl FnMut(&Frame) -> bool + Send + 'static) -> Rule {
        self.add(Box::new(pred), Action::Hold)
    }

    /// End `rule`; frames it holds leave now, in the order they were held, before anything else
    /// their senders send.
    pub fn release(&mut self, rule: Rule) {
        let senders = {
            let mut r = lock(&self.rules);
            if let Some(s) = r.rules.get_mut(rule.0) {
                s.active = false;
            }
            let mut senders = Vec::new();
            let Rules { held, released, .. } = &mut *r;
            for (from, h) in held.iter_mut().enumerate() {
                let (go, stay): (VecDeque<_>, VecDeque<_>) =
                    h.drain(..).partition(|(k, _)| *k == rule.0);
                *h = stay;
                if !go.is_empty() {
                    released[from].extend(go.into_iter().map(|(_, t)| t));
                    senders.push(from as NodeId);
                }
            }
            senders
        };
        for s in senders {
            self.sim.kick(s);
        }
    }

    /// End `rule` (a drop rule stops dropping; a hold releases what it holds).
    pub fn lift(&mut self, rule: Rule) {
        self.release(rule)
    }

    /// Nothing crosses the link between `a` and `b` (in a star, a host and the switch) either
    /// way until [`Group::heal`]: frames are dropped where they leave.
    pub fn partition(&mut self, a: NodeId, b: NodeId) -> Rule {
        self.drop_all(move |f| (f.from == a && f.to == b) || (f.from == b && f.to == a))
    }

    /// End a partition.
    pub fn heal(&mut self, partition: Rule) {
        self.release(partition)
    }

    /// Note every frame that matches `pred` as it leaves its sender and as it arrives (read
    /// them with [`Group::seen`]); it changes nothing in the run.
    pub fn watch(&mut self, pred: impl FnMut(&Frame) -> bool + Send + 'static) -> Rule {
        self.add(Box::new(pred), Action::Watch)
    }

    /// The frames `rule` dropped, held or watched, in order, with their times.
    pub fn seen(&self, rule: Rule) -> Vec<Seen> {
        lock(&self.rules)
            .rules
            .get(rule.0)
            .map_or_else(Vec::new, |r| r.seen.clone())
    }

    /// Frames `rule` matched (a drop-nth rule counts up to its drop).
    pub fn matched(&self, rule: Rule) -> u64 {
        lock(&self.rules).rules.get(rule.0).map_or(0, |r| r.matched)
    }

    /// Frames `rule` dropped.
    pub fn dropped(&self, rule: Rule) -> u64 {
        lock(&self.rules).rules.get(rule.0).map_or(0, |r| r.dropped)
    }

    /// Frames `rule` held (released or not).
    pub fn held(&self, rule: Rule) -> u64 {
        lock(&self.rules).rules.get(rule.0).map_or(0, |r| r.held)
    }

    /// The virtual time now.
    pub fn now(&self) -> Nanos {
        self.sim.now()
    }

    /// The fabric's counts so far (frames that left, per node; drops by queue, MTU and faults).
    pub fn report(&self) -> &SimReport {
        self.sim.report()
    }

    /// When each node was first seen done (0: not yet).
    pub fn done_ns(&self) -> &[Nanos] {
        &self.done_ns
    }

    pub fn node(&self, id: NodeId) -> &N {
        &self.sim.nodes()[id as usize].inner
    }

    /// A node to change between steps; [`Group::kick`] it if what it sends changed.
    pub fn node_mut(&mut self, id: NodeId) -> &mut N {
        &mut self.sim.nodes_mut()[id as usize].inner
    }

    /// Let the fabric poll node `id` now (after a change made through [`Group::node_mut`]).
    pub fn kick(&mut self, id: NodeId) {
        self.sim.kick(id);
    }

    pub fn nodes(&self) -> impl Iterator<Item = &N> {
        self.sim.nodes().iter().map(|g| &g.inner)
    }

    pub fn into_nodes(self) -> Vec<N> {
        self.sim.into_nodes().into_iter().map(|g| g.inner).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forward::{Forwarder, Route};
    use crate::node::Node;

    /// Host 0 sends `count` frames `[1, seq]` to host 1 (one every `period` ns from 0, or all at
    /// once when 0); host 1 keeps (arrival, seq) and is done with `want` of them. Node 2 forwards
    /// on byte 0.
    struct Host {
        id: NodeId,
        count: u8,
        period: Nanos,
        sent: u8,
        want: usize,
        got: Vec<(Nanos, u8)>,
    }

    impl Endpoint for Host {
        fn id(&self) -> NodeId {
            self.id
        }
        fn handle_packet(&mut self, now: Nanos, _from: NodeId, frame: &[u8]) {
            self.got.push((now, frame[1]));
        }
        fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
            let due = self.period == 0 || now >= Nanos::from(self.sent) * self.period;
            (self.id == 0 && self.sent < self.count && due).then(|| {
                self.sent += 1;
                Transmit {
                    to: 2,
                    bytes: vec![1, self.sent],
                }
            })
        }
        fn poll_timeout(&self) -> Option<Nanos> {
            (self.id == 0 && self.period > 0 && self.sent < self.count)
                .then(|| Nanos::from(self.sent) * self.period)
        }
        fn handle_timeout(&mut self, _now: Nanos) {}
        fn is_done(&self) -> bool {
            self.id == 0 || self.got.len() >= self.want
        }
    }

    type N = Node<Host, Forwarder>;

    fn group(count: u8, period: Nanos, want: usize) -> Group<N> {
        let host = |id| {
            Node::Worker(Host {
                id,
                count,
                period,
                sent: 0,
                want,
                got: Vec::new(),
            })
        };
        let fwd = Forwarder::new(2, 3, Route::By(|_, f| f.first().map(|b| NodeId::from(*b))));
        Group::builder()
            .limit_ns(1_000_000_000)
            .build(vec![host(0), host(1), Node::Switch(fwd)])
    }

    fn got(g: &Group<N>) -> Vec<u8> {
        let h = g.node(1).worker().expect("host 1");
        h.got.iter().map(|(_, s)| *s).collect()
    }

    #[test]
    fn with_no_verb_every_frame_arrives_and_the_run_finishes() {
        let mut g = group(5, 0, 5);
        let w = g.watch(|f| f.to == 1);
        let done = g.drive_bounded().expect("finishes");
        assert_eq!(got(&g), [1, 2, 3, 4, 5]);
        let seen = g.seen(w);
        let (out, arrived): (Vec<&Seen>, Vec<&Seen>) = seen.iter().partition(|s| s.leaving);
        assert_eq!((out.len(), arrived.len()), (5, 5));
        for (o, a) in out.iter().zip(&arrived) {
            assert_eq!((o.from, a.from, o.bytes.clone()), (2, 2, a.bytes.clone()));
            assert!(a.at > o.at, "a frame arrives after it leaves");
        }
        assert!(done.at_ns > 0 && done.at_ns == g.done_ns()[1]);
        assert_eq!(g.report().nodes[0].frames_tx, 5);
    }

    #[test]
    fn a_dropped_nth_frame_is_not_delivered_and_only_it() {
        let mut g = group(5, 0, 4);
        let r = g.drop_nth(|f| f.from == 0 && f.bytes.first() == Some(&1), 3);
        g.drive_bounded().expect("four arrive");
        g.drive();
        assert_eq!(got(&g), [1, 2, 4, 5], "the third frame never arrives");
        assert_eq!(
            (g.dropped(r), g.matched(r)),
            (1, 3),
            "one drop, then the rule ends"
        );
        assert_eq!(
            g.report().nodes[0].frames_tx,
            4,
            "the dropped frame never left"
        );
    }

    #[test]
    fn a_stuck_run_is_unfinished_and_names_the_node() {
        // host 1 waits for 5 frames, one is dropped: nothing is left to happen
        let mut g = group(5, 0, 5);
        g.drop_nth(|f| f.to == 2, 2);
        let e = g.drive_bounded().expect_err("stuck");
        assert_eq!(e.not_done, vec![1]);
        assert!(e.idle, "no event left");
        assert!(e.to_string().contains("[1] not done"), "{e}");
        // a sender that goes on beyond the limit: the limit ends it
        let mut g = group(200, 10_000_000, 300);
        let e = g.drive_bounded().expect_err("limit");
        assert_eq!(
            (e.not_done.clone(), e.at_ns, e.idle),
            (vec![1], 1_000_000_000, false)
        );
    }

    #[test]
    fn a_held_frame_arrives_after_its_release_and_after_later_frames() {
        let mut g = group(4, 1_000, 4);
        let r = g.hold(|f| f.bytes.get(1) == Some(&2));
        g.drive_until(50_000);
        assert_eq!(got(&g), [1, 3, 4], "frame 2 is held");
        assert_eq!(g.held(r), 1);
        assert!(!g.all_done());
        let released_at = g.now();
        g.release(r);
        g.drive_bounded().expect("the held frame arrives");
        assert_eq!(got(&g), [1, 3, 4, 2]);
        let h = g.node(1).worker().expect("host 1");
        assert!(
            h.got[3].0 > released_at && released_at >= h.got[2].0,
            "it arrived after the release, after frame 4: {:?}",
            h.got
        );
        // without the hold it arrives about 1 us after frame 1
        let mut g = group(4, 1_000, 4);
        g.drive_bounded().expect("finishes");
        let h = g.node(1).worker().expect("host 1");
        assert!(h.got[1].0 < 10_000 && h.got[1].1 == 2, "{:?}", h.got);
    }

    #[test]
    fn a_partition_drops_both_ways_until_healed() {
        let mut g = group(10, 1_000, 6);
        let p = g.partition(2, 0);
        g.drive_until(3_500); // frames 1..4 leave at 0, 1, 2, 3 us
        assert!(got(&g).is_empty());
        assert_eq!(g.dropped(p), 4);
        g.heal(p);
        g.drive_bounded().expect("the rest arrive");
        assert_eq!(got(&g), [5, 6, 7, 8, 9, 10]);
        // a partition elsewhere (host 1's link) stops host 0's frames at the switch
        let mut g = group(3, 0, 3);
        let p = g.partition(1, 2);
        assert!(g.drive_bounded().is_err());
        assert_eq!(g.dropped(p), 3);
    }
}
