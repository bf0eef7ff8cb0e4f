//! A sans-IO flow-level network simulator with max-min fair sharing.
//!
//! Resources (directed links, or any capacity) have a rate in bytes per second; a flow has a size
//! in bytes and the resources it crosses, each with a weight: the share of the flow's rate the
//! resource carries (1 on a single path; 1/k on each of k equal-cost paths when traffic is
//! sprayed; a resource listed twice is used twice). Whenever the set
//! of active flows changes, rates are recomputed by progressive filling (Bertsekas and Gallager,
//! *Data Networks*, Sec. 6.5.2): all unfrozen flows grow at the same pace until some resource is
//! full, the flows crossing it are frozen at the current level, and so on until every flow is
//! frozen. The result is the max-min fair allocation. Time then jumps to the next completion
//! (a heap of predicted completion times). Max-min allocations decompose over the connected
//! components of the flow-resource graph, so after a completion only the component of the
//! resources the finished flows used is recomputed; every other flow keeps its rate, exactly.
//!
//! The simulator owns no clock and does no I/O: the caller adds flows and calls [`FlowSim::run`],
//! which advances virtual time until the flows added so far have completed (a barrier, as a
//! synchronous collective step needs).

use crate::AlephError;

/// Identifies a flow of a [`FlowSim`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowId(usize);

#[derive(Debug, Clone)]
struct Flow {
    res: Vec<(u32, f64)>,
    /// bytes left at `t_upd`
    remaining: f64,
    t_upd: f64,
    rate: f64,
    finish: Option<f64>,
    version: u32,
}

/// A heap entry: the level at which a resource fills (min first), its slot and version.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Level(f64, usize, u32);

impl Eq for Level {}

impl PartialOrd for Level {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Level {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other
            .0
            .total_cmp(&self.0)
            .then_with(|| other.1.cmp(&self.1))
    }
}

/// Work counters of a simulation.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Stats {
    /// Flow completions.
    pub completions: u64,
    /// Rate recomputations (of a component or of everything).
    pub recomputes: u64,
    /// Flow rate assignments summed over recomputations.
    pub flow_updates: u64,
    /// Bottleneck resources found, summed over recomputations.
    pub levels: u64,
}

/// The simulator.
#[derive(Debug, Clone)]
pub struct FlowSim {
    cap: Vec<f64>,
    flows: Vec<Flow>,
    /// flows added since the last run (their component is recomputed first)
    fresh: Vec<usize>,
    /// active flows per resource (finished ones removed lazily)
    users: Vec<Vec<usize>>,
    events: std::collections::BinaryHeap<Level>,
    left: usize,
    now: f64,
    stats: Stats,
    // scratch, reset after use
    load: Vec<f64>,
    count: Vec<f64>,
    slot: Vec<usize>,
    touched: Vec<u32>,
    mark: Vec<bool>,
}

impl FlowSim {
    /// A simulator over resources with the given capacities (bytes per second).
    pub fn new(capacities: Vec<f64>) -> Result<FlowSim, AlephError> {
        if let Some((i, c)) = capacities
            .iter()
            .enumerate()
            .find(|(_, c)| !(c.is_finite() && **c > 0.0))
        {
            return Err(AlephError::Invalid(format!(
                "resource {i} has capacity {c}; capacities must be positive"
            )));
        }
        let n = capacities.len();
        Ok(FlowSim {
            cap: capacities,
            flows: Vec::new(),
            fresh: Vec::new(),
            users: vec![Vec::new(); n],
            events: std::collections::BinaryHeap::new(),
            left: 0,
            now: 0.0,
            stats: Stats::default(),
            load: vec![0.0; n],
            count: vec![0.0; n],
            slot: vec![usize::MAX; n],
            touched: Vec::new(),
            mark: Vec::new(),
        })
    }

    /// Start a flow of `bytes` over `resources` (weight 1 each) at the current time.
    pub fn add_flow(&mut self, resources: Vec<u32>, bytes: f64) -> Result<FlowId, AlephError> {
        self.add_weighted_flow(resources.into_iter().map(|r| (r, 1.0)).collect(), bytes)
    }

    /// Start a flow of `bytes` whose rate loads each resource with the given weight.
    pub fn add_weighted_flow(
        &mut self,
        resources: Vec<(u32, f64)>,
        bytes: f64,
    ) -> Result<FlowId, AlephError> {
        if resources.is_empty() {
            return Err(AlephError::Invalid(
                "a flow must cross at least one resource".into(),
            ));
        }
        if let Some(&(_, w)) = resources.iter().find(|(_, w)| !(w.is_finite() && *w > 0.0)) {
            return Err(AlephError::Invalid(format!(
                "a flow's resource weights must be positive (got {w})"
            )));
        }
        if let Some(&(r, _)) = resources
            .iter()
            .find(|(r, _)| *r as usize >= self.cap.len())
        {
            return Err(AlephError::Invalid(format!(
                "resource {r} does not exist ({} resources)",
                self.cap.len()
            )));
        }
        if !(bytes.is_finite() && bytes > 0.0) {
            return Err(AlephError::Invalid(format!(
                "a flow's size must be positive (got {bytes})"
            )));
        }
        let id = self.flows.len();
        for &(r, _) in &resources {
            let u = &mut self.users[r as usize];
            if u.last() != Some(&id) {
                u.push(id);
            }
        }
        self.flows.push(Flow {
            res: resources,
            remaining: bytes,
            t_upd: self.now,
            rate: 0.0,
            finish: None,
            version: 0,
        });
        self.mark.push(false);
        self.fresh.push(id);
        self.left += 1;
        Ok(FlowId(id))
    }

    /// Virtual time now, seconds.
    pub fn now(&self) -> f64 {
        self.now
    }

    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// When a flow completed.
    pub fn finish(&self, f: FlowId) -> Option<f64> {
        self.flows.get(f.0).and_then(|x| x.finish)
    }

    /// The rate a flow had in the last allocation (bytes per second).
    pub fn rate(&self, f: FlowId) -> Option<f64> {
        self.flows.get(f.0).map(|x| x.rate)
    }

    /// The active flows connected (through shared resources) to the seeds' resources.
    fn component(&mut self, seeds: &[usize]) -> Vec<usize> {
        let mut out = Vec::new();
        let mut res_seen: Vec<u32> = Vec::new();
        let mut stack: Vec<u32> = Vec::new();
        for &f in seeds {
            for &(r, _) in &self.flows[f].res {
                if self.slot[r as usize] == usize::MAX {
                    self.slot[r as usize] = 0;
                    res_seen.push(r);
                    stack.push(r);
                }
            }
        }
        while let Some(r) = stack.pop() {
            let flows = &self.flows;
            self.users[r as usize].retain(|&f| flows[f].finish.is_none());
            for i in 0..self.users[r as usize].len() {
                let f = self.users[r as usize][i];
                if self.mark[f] {
                    continue;
                }
                self.mark[f] = true;
                out.push(f);
                for &(q, _) in &self.flows[f].res {
                    if self.slot[q as usize] == usize::MAX {
                        self.slot[q as usize] = 0;
                        res_seen.push(q);
                        stack.push(q);
                    }
                }
            }
        }
        for r in res_seen {
            self.slot[r as usize] = usize::MAX;
        }
        for &f in &out {
            self.mark[f] = false;
        }
        out
    }

    /// Max-min fair rates of `flows`, which must be a union of whole components.
    ///
    /// All unfrozen flows share one level L. Resource r is full when its frozen load plus
    /// L x (weight of its unfrozen flows) reaches its capacity, at L_r = (cap - frozen) / weight.
    /// A min-heap of L_r (lazily updated) yields the next bottleneck; its flows freeze at L_r and
    /// update the resources they cross. Each flow is frozen once: O(F P log R).
    fn allocate(&mut self, flows: &[usize]) {
        self.stats.recomputes += 1;
        self.touched.clear();
        for &f in flows {
            for &(r, w) in &self.flows[f].res {
                let ri = r as usize;
                if self.slot[ri] == usize::MAX {
                    self.slot[ri] = self.touched.len();
                    self.touched.push(r);
                    self.load[ri] = 0.0;
                    self.count[ri] = 0.0;
                }
                self.count[ri] += w;
            }
        }
        let nt = self.touched.len();
        let mut start = vec![0usize; nt + 1];
        for &f in flows {
            for &(r, _) in &self.flows[f].res {
                start[self.slot[r as usize] + 1] += 1;
            }
        }
        for i in 0..nt {
            start[i + 1] += start[i];
        }
        let mut fill = start.clone();
        let mut members = vec![0usize; start[nt]];
        for &f in flows {
            for &(r, _) in &self.flows[f].res {
                let i = self.slot[r as usize];
                members[fill[i]] = f;
                fill[i] += 1;
            }
        }
        let mut version = vec![0u32; nt];
        let mut heap = std::collections::BinaryHeap::with_capacity(nt);
        let key = |cap: f64, load: f64, weight: f64| (cap - load).max(0.0) / weight;
        for (i, &r) in self.touched.iter().enumerate() {
            let ri = r as usize;
            heap.push(Level(key(self.cap[ri], 0.0, self.count[ri]), i, 0));
        }
        let mut left = flows.len();
        while left > 0 {
            let Some(Level(level, i, v)) = heap.pop() else {
                break;
            };
            if v != version[i] || self.count[self.touched[i] as usize] <= 1e-12 {
                continue;
            }
            self.stats.levels += 1;
            for &f in &members[start[i]..start[i + 1]] {
                if self.mark[f] {
                    continue;
                }
                self.mark[f] = true;
                left -= 1;
                self.flows[f].rate = level;
                self.stats.flow_updates += 1;
                for &(r, w) in &self.flows[f].res {
                    let ri = r as usize;
                    self.load[ri] += w * level;
                    self.count[ri] -= w;
                    let j = self.slot[ri];
                    version[j] += 1;
                    if self.count[ri] > 1e-12 {
                        heap.push(Level(
                            key(self.cap[ri], self.load[ri], self.count[ri]),
                            j,
                            version[j],
                        ));
                    }
                }
            }
        }
        for &f in flows {
            self.mark[f] = false;
        }
        for &r in &self.touched {
            self.slot[r as usize] = usize::MAX;
        }
    }

    /// Recompute a component's rates at `now` and schedule its completions.
    fn reschedule(&mut self, comp: &[usize]) -> Result<(), AlephError> {
        if comp.is_empty() {
            return Ok(());
        }
        let now = self.now;
        for &f in comp {
            let fl = &mut self.flows[f];
            fl.remaining = (fl.remaining - fl.rate * (now - fl.t_upd)).max(0.0);
            fl.t_upd = now;
        }
        self.allocate(comp);
        for &f in comp {
            let fl = &mut self.flows[f];
            if fl.rate.is_nan() || fl.rate <= 0.0 {
                return Err(AlephError::Stuck(format!("flow {f} got rate {}", fl.rate)));
            }
            fl.version = fl.version.wrapping_add(1);
            self.events
                .push(Level(now + fl.remaining / fl.rate, f, fl.version));
        }
        Ok(())
    }

    /// Advance virtual time until every flow added so far has completed; returns the time.
    pub fn run(&mut self) -> Result<f64, AlephError> {
        let fresh = std::mem::take(&mut self.fresh);
        let comp = self.component(&fresh);
        self.reschedule(&comp)?;
        let mut done = Vec::new();
        while self.left > 0 {
            done.clear();
            let Some(&Level(t, _, _)) = self.events.peek() else {
                return Err(AlephError::Stuck(format!(
                    "{} flows active and no completion scheduled",
                    self.left
                )));
            };
            let horizon = t + 1e-9 * t.abs().max(1e-12);
            while let Some(&Level(te, f, v)) = self.events.peek() {
                if te > horizon {
                    break;
                }
                self.events.pop();
                let fl = &self.flows[f];
                if fl.version != v || fl.finish.is_some() {
                    continue;
                }
                done.push(f);
            }
            self.now = self.now.max(t);
            for &f in &done {
                let fl = &mut self.flows[f];
                fl.finish = Some(self.now);
                fl.remaining = 0.0;
                fl.t_upd = self.now;
            }
            self.left -= done.len();
            self.stats.completions += done.len() as u64;
            let comp = self.component(&done);
            self.reschedule(&comp)?;
        }
        Ok(self.now)
    }

    /// Compute the max-min fair rates of all unfinished flows now (without advancing time).
    pub fn allocate_all(&mut self) -> Result<(), AlephError> {
        let all: Vec<usize> = (0..self.flows.len())
            .filter(|&f| self.flows[f].finish.is_none())
            .collect();
        self.reschedule(&all)?;
        self.fresh.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
    }

    #[test]
    fn one_flow_gets_the_link_rate() {
        let mut s = FlowSim::new(vec![1.25e9, 5e9]).expect("sim");
        let f = s.add_flow(vec![0, 1], 97e6).expect("flow");
        let t = s.run().expect("run");
        assert!(close(t, 97e6 / 1.25e9), "{t}");
        assert!(close(s.rate(f).expect("rate"), 1.25e9));
    }

    #[test]
    fn a_bottleneck_is_shared_fairly() {
        for n in [1usize, 2, 3, 7, 50] {
            let mut s = FlowSim::new(vec![10.0; n + 1]).expect("sim");
            // n flows share resource 0; each also has a private, larger resource
            let ids: Vec<FlowId> = (0..n)
                .map(|i| s.add_flow(vec![0, 1 + i as u32], 5.0).expect("flow"))
                .collect();
            s.allocate_all().expect("allocate");
            for id in &ids {
                assert!(close(s.rate(*id).expect("rate"), 10.0 / n as f64));
            }
            let t = s.run().expect("run");
            assert!(close(t, 5.0 * n as f64 / 10.0), "n={n}: {t}");
        }
    }

    #[test]
    fn max_min_is_not_equal_share() {
        // classic example: link A (cap 1) carries f0 and f1, link B (cap 10) carries f1 and f2.
        // f0 = f1 = 0.5 (A is the bottleneck), f2 takes the rest of B: 9.5.
        let mut s = FlowSim::new(vec![1.0, 10.0]).expect("sim");
        let f0 = s.add_flow(vec![0], 1.0).expect("flow");
        let f1 = s.add_flow(vec![0, 1], 1.0).expect("flow");
        let f2 = s.add_flow(vec![1], 1.0).expect("flow");
        s.allocate_all().expect("allocate");
        assert!(close(s.rate(f0).expect("r"), 0.5));
        assert!(close(s.rate(f1).expect("r"), 0.5));
        assert!(close(s.rate(f2).expect("r"), 9.5));
    }

    #[test]
    fn freed_capacity_is_reused() {
        // two flows of 1 and 3 bytes on one link of 1 B/s: both at 0.5 until t=2, then the
        // larger one alone at 1 B/s for its last 2 bytes: done at t=4.
        let mut s = FlowSim::new(vec![1.0]).expect("sim");
        let a = s.add_flow(vec![0], 1.0).expect("flow");
        let b = s.add_flow(vec![0], 3.0).expect("flow");
        let t = s.run().expect("run");
        assert!(close(s.finish(a).expect("a"), 2.0));
        assert!(close(s.finish(b).expect("b"), 4.0));
        assert!(close(t, 4.0));
        assert_eq!(s.stats().completions, 2);
    }

    #[test]
    fn a_resource_used_twice_counts_twice() {
        let mut s = FlowSim::new(vec![2.0]).expect("sim");
        let f = s.add_flow(vec![0, 0], 1.0).expect("flow");
        s.run().expect("run");
        assert!(close(s.rate(f).expect("r"), 1.0));
    }

    #[test]
    fn sprayed_flow_uses_parallel_paths() {
        // resource 0 then two parallel resources of 1 B/s: one sprayed flow of rate 2
        let mut s = FlowSim::new(vec![10.0, 1.0, 1.0]).expect("sim");
        let f = s
            .add_weighted_flow(vec![(0, 1.0), (1, 0.5), (2, 0.5)], 4.0)
            .expect("flow");
        let t = s.run().expect("run");
        assert!(close(s.rate(f).expect("r"), 2.0));
        assert!(close(t, 2.0));
    }

    #[test]
    fn rejects_bad_inputs() {
        assert!(
            FlowSim::new(vec![1.0])
                .expect("sim")
                .add_weighted_flow(vec![(0, 0.0)], 1.0)
                .is_err()
        );
        assert!(FlowSim::new(vec![0.0]).is_err());
        let mut s = FlowSim::new(vec![1.0]).expect("sim");
        assert!(s.add_flow(vec![], 1.0).is_err());
        assert!(s.add_flow(vec![1], 1.0).is_err());
        assert!(s.add_flow(vec![0], -1.0).is_err());
        assert!(s.add_flow(vec![0], f64::NAN).is_err());
    }
}
