//! The sans-IO scheduling core of the out-of-core optimizer (Sec. 3.3, Fig. 9): per-SSD priority
//! queues and the rotation of layer tasks between task queues. No threads, files or clocks here:
//! the runtime ([`crate::pipeline`]) feeds events in and carries the actions out, and the tests
//! below drive it by hand.
//!
//! A training iteration is a sequence of `2L` parameter demands: forward over layers `0..L`, then
//! backward over `L-1..=0` (activation checkpointing recomputes each layer's forward in backward,
//! so backward needs the parameters again). Each demand is a layer task:
//! - forward: (1) read parameters -> (2) push them when the workers ask; the task then frees its
//!   buffers;
//! - backward+opt: (1) read parameters -> (2) push -> (3) accept gradients while reading the model
//!   states -> (4) Adam update -> (5) write the model states; the task frees its buffers when the
//!   writes are done.
//!
//! Choices where the paper is silent:
//! - "the layer is assigned with all its data buffers" at step (1): the node has a fixed number
//!   of buffer sets (`buffers`), and a task is admitted (its parameter reads issued) only when a
//!   set is free, in demand order. This bounds the node's memory and is the pipeline's prefetch
//!   depth; backward tasks may be admitted while forward is still running.
//! - Parameters are pushed in demand order only when the workers ask for them (the push primitive
//!   "waits for AggNIC to read its parameters"; the workers' receive buffers are one layer).
//! - The next iteration starts after the previous one is committed (its forward needs layer 0,
//!   which backward updates last).

use crate::store::{FileKind, Layout, Shard};
use std::collections::VecDeque;

/// The three per-SSD queues, in priority order (Sec. 3.3: "The read parameters queue has the
/// highest priority, followed by the read model states queue, and then the write model states
/// queue").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IoKind {
    ReadParams = 0,
    ReadStates = 1,
    WriteStates = 2,
}

impl IoKind {
    pub fn is_read(self) -> bool {
        self != IoKind::WriteStates
    }
}

/// One SSD's three queues, holding the runtime's requests `T`.
#[derive(Debug)]
pub struct SsdQueues<T> {
    queues: [VecDeque<T>; 3],
}

impl<T> Default for SsdQueues<T> {
    fn default() -> Self {
        SsdQueues {
            queues: [VecDeque::new(), VecDeque::new(), VecDeque::new()],
        }
    }
}

impl<T> SsdQueues<T> {
    pub fn push(&mut self, kind: IoKind, req: T) {
        self.queues[kind as usize].push_back(req);
    }

    /// The next request to serve: the oldest of the highest-priority non-empty queue.
    pub fn pop(&mut self) -> Option<(IoKind, T)> {
        self.pop_where(|_| true)
    }

    /// The next read (parameters before model states).
    pub fn pop_read(&mut self) -> Option<(IoKind, T)> {
        self.pop_where(IoKind::is_read)
    }

    /// The next write.
    pub fn pop_write(&mut self) -> Option<(IoKind, T)> {
        self.pop_where(|k| !k.is_read())
    }

    fn pop_where(&mut self, ok: impl Fn(IoKind) -> bool) -> Option<(IoKind, T)> {
        for kind in [IoKind::ReadParams, IoKind::ReadStates, IoKind::WriteStates] {
            if ok(kind)
                && let Some(r) = self.queues[kind as usize].pop_front()
            {
                return Some((kind, r));
            }
        }
        None
    }

    pub fn len(&self) -> usize {
        self.queues.iter().map(VecDeque::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An event the scheduler's state cannot take (see [`Scheduler::handle`]); nothing changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchedError {
    #[error("no layer {layer}")]
    NoLayer { layer: usize },
    #[error("no shard {shard} of layer {layer}")]
    NoShard { shard: usize, layer: usize },
    #[error("{phase:?} layer {layer} asked for out of order")]
    OutOfOrder { phase: Phase, layer: usize },
    /// An I/O completion or update that was never issued (`what`: which, in words).
    #[error("unexpected {what} of layer {layer}")]
    Unexpected { what: &'static str, layer: usize },
    #[error("duplicate gradients of layer {layer}")]
    DuplicateGrads { layer: usize },
}

/// Forward or backward+opt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    Fwd,
    Bwd,
}

/// What the scheduler asks the runtime to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Queue an I/O on `shard.ssd`'s `kind` queue; `file` is what it reads or writes (a write
    /// writes both of the shard's files).
    Io {
        kind: IoKind,
        shard: Shard,
        file: FileKind,
    },
    /// Hand layer `layer`'s parameters to the workers (they asked and they are read).
    Push { phase: Phase, layer: usize },
    /// Run Adam on `layer` (its gradients and model states are in its buffers).
    Update { layer: usize },
    /// Every layer's states of this step are written: commit the step.
    Commit,
}

/// What the runtime tells the scheduler.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Event {
    /// An I/O of `kind` on shard `shard` of `layer` finished.
    IoDone {
        kind: IoKind,
        layer: usize,
        shard: usize,
    },
    /// The workers ask for `layer`'s parameters in `phase`.
    Want { phase: Phase, layer: usize },
    /// `layer`'s aggregated gradients arrived.
    Grads { layer: usize },
    /// Adam finished on `layer`.
    Updated { layer: usize },
}

#[derive(Debug, Clone, Default)]
struct Task {
    /// Per shard: its parameter read is outstanding.
    params_wait: Vec<bool>,
    params_pending: usize,
    params_ready: bool,
    wanted: bool,
}

#[derive(Debug, Clone, Default)]
struct BwdState {
    states_issued: bool,
    states_pending: usize,
    grads: bool,
    update_issued: bool,
    updated: bool,
    writes_pending: usize,
    written: bool,
}

/// The layer-task scheduler of one iteration.
#[derive(Debug)]
pub struct Scheduler {
    layout: Layout,
    buffers: usize,
    /// Demand entries `0..2L`: entry `e` is layer `e` forward for `e < L`, else layer `2L-1-e`
    /// backward.
    tasks: Vec<Task>,
    bwd: Vec<BwdState>,
    next_admit: usize,
    next_push: usize,
    busy: usize,
    written_layers: usize,
    committed: bool,
    out: VecDeque<Action>,
}

impl Scheduler {
    /// A scheduler for one iteration over `layout` with `buffers` buffer sets (at least 1).
    pub fn new(layout: Layout, buffers: usize) -> Scheduler {
        let l = layout.layers();
        let mut s = Scheduler {
            tasks: vec![Task::default(); 2 * l],
            bwd: vec![BwdState::default(); l],
            layout,
            buffers: buffers.max(1),
            next_admit: 0,
            next_push: 0,
            busy: 0,
            written_layers: 0,
            committed: false,
            out: VecDeque::new(),
        };
        s.admit();
        s
    }

    fn entry(&self, phase: Phase, layer: usize) -> usize {
        match phase {
            Phase::Fwd => layer,
            Phase::Bwd => 2 * self.layout.layers() - 1 - layer,
        }
    }

    fn of_entry(&self, e: usize) -> (Phase, usize) {
        let l = self.layout.layers();
        if e < l {
            (Phase::Fwd, e)
        } else {
            (Phase::Bwd, 2 * l - 1 - e)
        }
    }

    /// The next action, if any.
    pub fn poll(&mut self) -> Option<Action> {
        self.out.pop_front()
    }

    /// Whether the iteration is complete (the commit was asked for).
    pub fn done(&self) -> bool {
        self.committed
    }

    /// Buffer sets in use.
    pub fn busy_buffers(&self) -> usize {
        self.busy
    }

    fn admit(&mut self) {
        while self.next_admit < self.tasks.len() && self.busy < self.buffers {
            let e = self.next_admit;
            let (_, layer) = self.of_entry(e);
            let shards = self.layout.shards(layer);
            self.tasks[e].params_pending = shards.len();
            self.tasks[e].params_wait = vec![true; shards.len()];
            for &shard in shards {
                self.out.push_back(Action::Io {
                    kind: IoKind::ReadParams,
                    shard,
                    file: FileKind::Params,
                });
            }
            self.busy += 1;
            self.next_admit += 1;
        }
    }

    fn try_push(&mut self) {
        while self.next_push < self.next_admit {
            let e = self.next_push;
            if !(self.tasks[e].wanted && self.tasks[e].params_ready) {
                break;
            }
            let (phase, layer) = self.of_entry(e);
            self.out.push_back(Action::Push { phase, layer });
            self.next_push += 1;
            match phase {
                Phase::Fwd => {
                    self.busy -= 1;
                    self.admit();
                }
                Phase::Bwd => {
                    // (3): accept gradients while reading the model states.
                    let shards = self.layout.shards(layer);
                    let b = &mut self.bwd[layer];
                    b.states_issued = true;
                    b.states_pending = shards.len();
                    for &shard in shards {
                        self.out.push_back(Action::Io {
                            kind: IoKind::ReadStates,
                            shard,
                            file: FileKind::State,
                        });
                    }
                }
            }
        }
    }

    fn try_update(&mut self, layer: usize) {
        let b = &mut self.bwd[layer];
        if b.grads && b.states_issued && b.states_pending == 0 && !b.update_issued {
            b.update_issued = true;
            self.out.push_back(Action::Update { layer });
        }
    }

    /// Feed an event. Events that make no sense in the current state (a duplicate, an I/O that
    /// was never issued) are reported as a [`SchedError`] and change nothing.
    pub fn handle(&mut self, ev: Event) -> Result<(), SchedError> {
        match ev {
            Event::Want { phase, layer } => {
                if layer >= self.layout.layers() {
                    return Err(SchedError::NoLayer { layer });
                }
                let e = self.entry(phase, layer);
                if e != self.next_push || self.tasks[e].wanted {
                    return Err(SchedError::OutOfOrder { phase, layer });
                }
                self.tasks[e].wanted = true;
                self.try_push();
            }
            Event::IoDone { kind, layer, shard } => {
                if layer >= self.layout.layers() || shard >= self.layout.shards(layer).len() {
                    return Err(SchedError::NoShard { shard, layer });
                }
                match kind {
                    IoKind::ReadParams => {
                        // the oldest admitted entry of this layer waiting for this shard (a
                        // layer's forward and backward tasks may both be reading it)
                        let e = (self.next_push..self.next_admit)
                            .find(|&e| {
                                self.of_entry(e).1 == layer
                                    && self.tasks[e].params_wait.get(shard) == Some(&true)
                            })
                            .ok_or(SchedError::Unexpected {
                                what: "parameter read",
                                layer,
                            })?;
                        let t = &mut self.tasks[e];
                        t.params_wait[shard] = false;
                        t.params_pending -= 1;
                        t.params_ready = t.params_pending == 0;
                        self.try_push();
                    }
                    IoKind::ReadStates => {
                        let b = &mut self.bwd[layer];
                        if b.states_pending == 0 {
                            return Err(SchedError::Unexpected {
                                what: "state read",
                                layer,
                            });
                        }
                        b.states_pending -= 1;
                        self.try_update(layer);
                    }
                    IoKind::WriteStates => {
                        let b = &mut self.bwd[layer];
                        if b.writes_pending == 0 {
                            return Err(SchedError::Unexpected {
                                what: "state write",
                                layer,
                            });
                        }
                        b.writes_pending -= 1;
                        if b.writes_pending == 0 {
                            b.written = true;
                            self.written_layers += 1;
                            self.busy -= 1;
                            self.admit();
                            if self.written_layers == self.layout.layers() {
                                self.committed = true;
                                self.out.push_back(Action::Commit);
                            }
                        }
                    }
                }
            }
            Event::Grads { layer } => {
                let b = self
                    .bwd
                    .get_mut(layer)
                    .ok_or(SchedError::NoLayer { layer })?;
                if b.grads {
                    return Err(SchedError::DuplicateGrads { layer });
                }
                b.grads = true;
                self.try_update(layer);
            }
            Event::Updated { layer } => {
                let shards = self
                    .layout
                    .shards
                    .get(layer)
                    .ok_or(SchedError::NoLayer { layer })?
                    .clone();
                let b = &mut self.bwd[layer];
                if !b.update_issued || b.updated {
                    return Err(SchedError::Unexpected {
                        what: "update",
                        layer,
                    });
                }
                b.updated = true;
                b.writes_pending = shards.len();
                for shard in shards {
                    self.out.push_back(Action::Io {
                        kind: IoKind::WriteStates,
                        shard,
                        file: FileKind::State,
                    });
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use inabench_rng::SplitMix64;

    #[test]
    fn parameter_reads_are_served_before_state_reads_before_state_writes() {
        let mut q = SsdQueues::default();
        q.push(IoKind::WriteStates, "w1");
        q.push(IoKind::ReadStates, "s1");
        q.push(IoKind::WriteStates, "w2");
        q.push(IoKind::ReadParams, "p1");
        q.push(IoKind::ReadStates, "s2");
        q.push(IoKind::ReadParams, "p2");
        let order: Vec<&str> = std::iter::from_fn(|| q.pop().map(|(_, r)| r)).collect();
        assert_eq!(order, ["p1", "p2", "s1", "s2", "w1", "w2"]);
        assert!(q.is_empty());
    }

    #[test]
    fn read_and_write_lanes_keep_their_own_priority() {
        let mut q = SsdQueues::default();
        q.push(IoKind::WriteStates, 1);
        q.push(IoKind::ReadStates, 2);
        q.push(IoKind::ReadParams, 3);
        assert_eq!(q.pop_write(), Some((IoKind::WriteStates, 1)));
        assert_eq!(q.pop_write(), None);
        assert_eq!(q.pop_read(), Some((IoKind::ReadParams, 3)));
        assert_eq!(q.pop_read(), Some((IoKind::ReadStates, 2)));
        assert_eq!(q.pop_read(), None);
    }

    fn layout() -> Layout {
        Layout::new(2, &[4, 4, 4]).unwrap()
    }

    fn drain(s: &mut Scheduler) -> Vec<Action> {
        std::iter::from_fn(|| s.poll()).collect()
    }

    #[test]
    fn tasks_rotate_through_the_steps_in_the_papers_order() {
        let mut s = Scheduler::new(layout(), 2);
        // two buffer sets: forward layers 0 and 1 are admitted, 2 shards each
        let a = drain(&mut s);
        assert_eq!(a.len(), 4);
        assert!(a.iter().all(|a| matches!(
            a,
            Action::Io {
                kind: IoKind::ReadParams,
                shard: Shard { layer: 0 | 1, .. },
                ..
            }
        )));
        // the workers ask for layer 0 before it is read: nothing is pushed yet
        s.handle(Event::Want {
            phase: Phase::Fwd,
            layer: 0,
        })
        .unwrap();
        assert!(drain(&mut s).is_empty());
        for shard in 0..2 {
            s.handle(Event::IoDone {
                kind: IoKind::ReadParams,
                layer: 0,
                shard,
            })
            .unwrap();
        }
        // pushed, buffer freed, forward layer 2 admitted
        let a = drain(&mut s);
        assert_eq!(
            a[0],
            Action::Push {
                phase: Phase::Fwd,
                layer: 0
            }
        );
        assert_eq!(a.len(), 3);
        // asking for layer 2 before layer 1 is an error and changes nothing
        assert!(
            s.handle(Event::Want {
                phase: Phase::Fwd,
                layer: 2
            })
            .is_err()
        );
        for layer in [1, 2] {
            for shard in 0..2 {
                s.handle(Event::IoDone {
                    kind: IoKind::ReadParams,
                    layer,
                    shard,
                })
                .unwrap();
            }
            s.handle(Event::Want {
                phase: Phase::Fwd,
                layer,
            })
            .unwrap();
        }
        let a = drain(&mut s);
        // pushes of 1 and 2, then backward layers 2 and 1 admitted (4 parameter reads)
        assert_eq!(
            a.iter()
                .filter(|a| matches!(a, Action::Push { .. }))
                .count(),
            2
        );
        assert_eq!(a.len(), 6);
        // backward layer 2: push, then its state reads are issued
        for shard in 0..2 {
            s.handle(Event::IoDone {
                kind: IoKind::ReadParams,
                layer: 2,
                shard,
            })
            .unwrap();
        }
        s.handle(Event::Want {
            phase: Phase::Bwd,
            layer: 2,
        })
        .unwrap();
        let a = drain(&mut s);
        assert_eq!(
            a[0],
            Action::Push {
                phase: Phase::Bwd,
                layer: 2
            }
        );
        assert_eq!(
            a.iter()
                .filter(|a| matches!(
                    a,
                    Action::Io {
                        kind: IoKind::ReadStates,
                        ..
                    }
                ))
                .count(),
            2
        );
        // the update waits for both the gradients and every state read
        s.handle(Event::Grads { layer: 2 }).unwrap();
        s.handle(Event::IoDone {
            kind: IoKind::ReadStates,
            layer: 2,
            shard: 0,
        })
        .unwrap();
        assert!(drain(&mut s).is_empty());
        s.handle(Event::IoDone {
            kind: IoKind::ReadStates,
            layer: 2,
            shard: 1,
        })
        .unwrap();
        assert_eq!(drain(&mut s), [Action::Update { layer: 2 }]);
        // backward layer 0 is not admitted until layer 2's writes free its buffers
        s.handle(Event::Updated { layer: 2 }).unwrap();
        let a = drain(&mut s);
        assert_eq!(a.len(), 2);
        assert!(a.iter().all(|a| matches!(
            a,
            Action::Io {
                kind: IoKind::WriteStates,
                ..
            }
        )));
        assert_eq!(s.busy_buffers(), 2);
        s.handle(Event::IoDone {
            kind: IoKind::WriteStates,
            layer: 2,
            shard: 0,
        })
        .unwrap();
        assert!(drain(&mut s).is_empty());
        s.handle(Event::IoDone {
            kind: IoKind::WriteStates,
            layer: 2,
            shard: 1,
        })
        .unwrap();
        let a = drain(&mut s);
        assert!(a.iter().all(|a| matches!(
            a,
            Action::Io {
                kind: IoKind::ReadParams,
                shard: Shard { layer: 0, .. },
                ..
            }
        )));
        assert_eq!(a.len(), 2);
        assert_eq!(
            s.handle(Event::Grads { layer: 2 }),
            Err(SchedError::DuplicateGrads { layer: 2 })
        );
    }

    #[test]
    fn a_shard_read_counts_for_the_task_that_asked_for_it() {
        // one layer: its forward and backward tasks are both admitted and read the same shards
        let mut s = Scheduler::new(Layout::new(2, &[4]).unwrap(), 2);
        assert_eq!(drain(&mut s).len(), 4);
        let done = |shard| Event::IoDone {
            kind: IoKind::ReadParams,
            layer: 0,
            shard,
        };
        s.handle(done(0)).unwrap();
        s.handle(done(0)).unwrap();
        s.handle(Event::Want {
            phase: Phase::Fwd,
            layer: 0,
        })
        .unwrap();
        // shard 0 twice is not both shards: forward still waits for shard 1
        let a = drain(&mut s);
        assert!(a.is_empty(), "{a:?}");
        s.handle(done(1)).unwrap();
        assert_eq!(
            drain(&mut s),
            [Action::Push {
                phase: Phase::Fwd,
                layer: 0
            }]
        );
        assert!(
            s.handle(done(0)).is_err(),
            "no third read of shard 0 was issued"
        );
    }

    /// Drive whole iterations with I/O completions in a seeded random order, as a runtime with
    /// many SSDs would deliver them: every layer is pushed twice in demand order, updated once,
    /// the buffer bound holds throughout, and the commit comes exactly once, last.
    #[test]
    fn random_completion_orders_keep_the_invariants() {
        for seed in 0..50 {
            let mut rng = SplitMix64::new(seed);
            let layers = 1 + (rng.next_u64() % 6) as usize;
            let ssds = 1 + (rng.next_u64() % 4) as usize;
            let sizes: Vec<usize> = (0..layers)
                .map(|_| 1 + (rng.next_u64() % 5) as usize)
                .collect();
            let buffers = 1 + (rng.next_u64() % 4) as usize;
            let mut s = Scheduler::new(Layout::new(ssds, &sizes).unwrap(), buffers);
            let mut inflight: Vec<Event> = vec![];
            let mut pushes = vec![];
            let mut updates = vec![0usize; layers];
            let mut commits = 0;
            let mut next_want = 0usize;
            let mut waiting_push = false;
            let mut steps = 0;
            while commits == 0 {
                steps += 1;
                assert!(steps < 10_000, "stuck");
                while let Some(a) = s.poll() {
                    assert!(commits == 0, "action after the commit");
                    match a {
                        Action::Io { kind, shard, .. } => inflight.push(Event::IoDone {
                            kind,
                            layer: shard.layer,
                            shard: shard.shard,
                        }),
                        Action::Push { phase, layer } => {
                            pushes.push((phase, layer));
                            waiting_push = false;
                            if phase == Phase::Bwd {
                                inflight.push(Event::Grads { layer });
                            }
                        }
                        Action::Update { layer } => {
                            updates[layer] += 1;
                            inflight.push(Event::Updated { layer });
                        }
                        Action::Commit => commits += 1,
                    }
                }
                assert!(s.busy_buffers() <= buffers);
                if !waiting_push && next_want < 2 * layers && rng.chance(0.5) {
                    let (phase, layer) = if next_want < layers {
                        (Phase::Fwd, next_want)
                    } else {
                        (Phase::Bwd, 2 * layers - 1 - next_want)
                    };
                    s.handle(Event::Want { phase, layer }).unwrap();
                    next_want += 1;
                    waiting_push = true;
                } else if !inflight.is_empty() {
                    let i = (rng.next_u64() % inflight.len() as u64) as usize;
                    let ev = inflight.swap_remove(i);
                    s.handle(ev).unwrap();
                }
            }
            let expect: Vec<(Phase, usize)> = (0..layers)
                .map(|l| (Phase::Fwd, l))
                .chain((0..layers).rev().map(|l| (Phase::Bwd, l)))
                .collect();
            assert_eq!(pushes, expect, "seed {seed}");
            assert!(updates.iter().all(|&u| u == 1), "seed {seed}: {updates:?}");
            assert!(inflight.is_empty());
            assert!(s.done());
        }
    }
}
