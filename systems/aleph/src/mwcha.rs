//! M-WCHA: MDS-based Worker Clustering for Hierarchical Aggregation (ALEPH, Sec. 4.1,
//! Algorithm 1, Eq. 2-6), the constraints of the HA problem (Eq. 1) as a validator, and an exact
//! solver of Eq. 1 for small components.
//!
//! # The algorithm as implemented
//!
//! Inputs: workers W with available bandwidth B_w and computing resource C_w, the computing
//! requirement c of one aggregated worker, and the worker graph G (an edge joins two workers that
//! can communicate directly). The bandwidth requirement is b = min_w B_w (Sec. 4.1) and the
//! aggregation capacity g_w = min(B_w / b - 1, C_w / c) (Eq. 1), rounded down to a whole number
//! of workers. N(w) is w's closed neighbourhood (w and its neighbours), as the paper defines it.
//!
//! Each round, with U the unclustered workers (Eq. 4):
//! 1. ḡ_w = min(g_w, |N(w) ∩ U|) (Eq. 2) and ĝ_w = the smallest power of two 2^x >= ḡ_w,
//!    x ∈ ℕ = {0, 1, ...} (Eq. 3), so ḡ_w = 0 gives ĝ_w = 1.
//! 2. w ∈ U is a candidate aggregator (CA) unless some unclustered worker within two hops of w in
//!    G has a larger ĝ (lines 8-12).
//! 3. α(w) = ḡ_w / (unclustered workers adjacent to w) for each CA (Eq. 5), β(w') = Σ α over the
//!    CAs in N(w') (Eq. 6). In CA order, each CA w becomes an aggregator with probability 1/m,
//!    m the median of β over N(w) ∩ U, and then adds each unclustered neighbour to V_w with
//!    probability α(w) (lines 18-23).
//!
//! If a round selects no aggregator, all unclustered workers send to the PS directly and the
//! algorithm stops (Sec. 4.1, last paragraph). A worker that sends directly is a cluster of its
//! own (Eq. 1 requires every worker to be in some V_w), so the objective |D| counts it.
//!
//! # Where the paper is vague, and what we chose
//!
//! - **Rounding of g_w.** Eq. 1 is real-valued; the capacity is a number of workers, so we take
//!   the floor (with a 1e-9 guard against rounding errors).
//! - **Which workers the 2-hop comparison looks at.** Only unclustered ones: clustered workers can
//!   never become aggregators (proof of Theorem 3), and if they took part a clustered worker with
//!   a large ĝ could block every candidate. The two hops may pass through any worker.
//! - **α's denominator.** Eq. 5 writes |N(w) - ∪V|, which with the closed N(w) counts w itself;
//!   the text calls it "the number of unclustered workers adjacent to w". We follow the text
//!   (`alpha_counts_self = false`): with the closed count even a forced star (a hub whose
//!   capacity covers all its neighbours) loses a neighbour with probability 1 - 1/k per
//!   neighbour, and the unit tests show it (the option keeps the literal reading available).
//!   α is at most 1.
//! - **β for CAs.** Line 17 updates β only for non-CAs, but the median of line 19 runs over
//!   N(w) - ∪V, which contains the CA w itself; we evaluate Eq. 6 for every unclustered worker.
//!   The median of an even number of values is the mean of the two middle ones; m = 0 selects
//!   with probability 1, and 1/m is capped at 1.
//! - **Capacity in line 23.** Adding each neighbour with probability α(w) keeps |V_w| - 1 <= g_w
//!   only in expectation, while Theorem 2 claims it always holds. We visit the unclustered
//!   neighbours in a random order and stop adding at g_w, which is what makes Theorem 2 true.
//!   `literal_line23 = true` reads line 23 as written (every unclustered neighbour added with
//!   probability α(w), no stop), which can break Theorem 2; [`literal_line23_violations`]
//!   counts how often over many draws.
//! - **CAs absorbed in the same round.** A CA that an earlier CA of the round has already taken
//!   as a member is skipped (otherwise it would be in two clusters, against Theorem 3).
//! - **Empty rounds.** "If no aggregator is selected in a round ... the algorithm stops" is applied
//!   literally (`stop_on_empty_round = true`); a round can be empty only when all coin flips fail.
//!   A bound on the number of rounds guards the other setting.
//! - **The PS.** V = W ∪ {p} in the paper, but G's edges join workers; the PS is not a vertex of
//!   the graph the algorithm walks (if it were adjacent to all workers, every pair of workers
//!   would be within two hops).

use crate::AlephError;
use inabench_rng::SplitMix64;

/// An instance of the HA problem (Eq. 1).
#[derive(Debug, Clone)]
pub struct Instance {
    bandwidth: Vec<f64>,
    compute: Vec<f64>,
    c: f64,
    adj: Vec<Vec<usize>>,
    cap: Vec<usize>,
}

impl Instance {
    /// `bandwidth[w]` = B_w, `compute[w]` = C_w (same unit as `c`), `adj` the worker graph
    /// (symmetric, no self loops; duplicates are removed).
    pub fn new(
        bandwidth: Vec<f64>,
        compute: Vec<f64>,
        c: f64,
        adj: Vec<Vec<usize>>,
    ) -> Result<Instance, AlephError> {
        let n = bandwidth.len();
        if n == 0 {
            return Err(AlephError::Invalid(
                "an instance needs at least one worker".into(),
            ));
        }
        if compute.len() != n || adj.len() != n {
            return Err(AlephError::Invalid(format!(
                "{n} bandwidths but {} computing resources and {} adjacency lists",
                compute.len(),
                adj.len()
            )));
        }
        if let Some((w, b)) = bandwidth
            .iter()
            .enumerate()
            .find(|(_, b)| !(b.is_finite() && **b > 0.0))
        {
            return Err(AlephError::Invalid(format!(
                "worker {w} has bandwidth {b}; bandwidths must be positive"
            )));
        }
        if let Some((w, x)) = compute
            .iter()
            .enumerate()
            .find(|(_, x)| !(x.is_finite() && **x >= 0.0))
        {
            return Err(AlephError::Invalid(format!(
                "worker {w} has computing resource {x}; it must be non-negative"
            )));
        }
        if !(c.is_finite() && c > 0.0) {
            return Err(AlephError::Invalid(format!(
                "the computing requirement c must be positive (got {c})"
            )));
        }
        let mut adj = adj;
        for (w, list) in adj.iter_mut().enumerate() {
            list.sort_unstable();
            list.dedup();
            if let Some(&v) = list.iter().find(|&&v| v >= n || v == w) {
                return Err(AlephError::Invalid(format!(
                    "worker {w} lists neighbour {v} (there are {n} workers, no self loops)"
                )));
            }
        }
        for w in 0..n {
            for &v in &adj[w] {
                if adj[v].binary_search(&w).is_err() {
                    return Err(AlephError::Invalid(format!(
                        "the graph is not symmetric: {w} lists {v} but {v} does not list {w}"
                    )));
                }
            }
        }
        let b = bandwidth.iter().copied().fold(f64::INFINITY, f64::min);
        let cap = bandwidth
            .iter()
            .zip(&compute)
            .map(|(bw, cw)| {
                let g = (bw / b - 1.0).min(cw / c);
                (g + 1e-9).floor().max(0.0) as usize
            })
            .collect();
        Ok(Instance {
            bandwidth,
            compute,
            c,
            adj,
            cap,
        })
    }

    pub fn n(&self) -> usize {
        self.bandwidth.len()
    }

    /// b = min_w B_w, the sending rate of every worker (Sec. 4.1).
    pub fn b(&self) -> f64 {
        self.bandwidth.iter().copied().fold(f64::INFINITY, f64::min)
    }

    pub fn bandwidth(&self, w: usize) -> f64 {
        self.bandwidth[w]
    }

    pub fn compute(&self, w: usize) -> f64 {
        self.compute[w]
    }

    pub fn c(&self) -> f64 {
        self.c
    }

    /// g_w of Eq. 1, in whole workers.
    pub fn capacity(&self, w: usize) -> usize {
        self.cap[w]
    }

    /// The neighbours of w (sorted, without w).
    pub fn neighbours(&self, w: usize) -> &[usize] {
        &self.adj[w]
    }

    pub fn adjacent(&self, a: usize, b: usize) -> bool {
        self.adj.get(a).is_some_and(|l| l.binary_search(&b).is_ok())
    }

    /// The connected components of G, each sorted.
    pub fn components(&self) -> Vec<Vec<usize>> {
        let n = self.n();
        let mut seen = vec![false; n];
        let mut out = Vec::new();
        for s in 0..n {
            if seen[s] {
                continue;
            }
            seen[s] = true;
            let mut comp = vec![s];
            let mut i = 0;
            while i < comp.len() {
                let u = comp[i];
                i += 1;
                for &v in &self.adj[u] {
                    if !seen[v] {
                        seen[v] = true;
                        comp.push(v);
                    }
                }
            }
            comp.sort_unstable();
            out.push(comp);
        }
        out
    }
}

/// One cluster V_w: the aggregator and the workers it aggregates.
#[derive(Debug, Clone, PartialEq)]
pub struct Cluster {
    pub aggregator: usize,
    pub members: Vec<usize>,
    /// The worker was left unclustered when a round selected no aggregator and sends its
    /// gradient to the PS directly.
    pub direct: bool,
}

/// The output of a clustering algorithm.
#[derive(Debug, Clone, Default)]
pub struct Clustering {
    pub clusters: Vec<Cluster>,
    /// Rounds of the while loop of Algorithm 1.
    pub rounds: usize,
    /// The round bound stopped the algorithm (only with `stop_on_empty_round = false`).
    pub hit_round_limit: bool,
}

impl Clustering {
    /// |D| of Eq. 1: every cluster sends one aggregated gradient to the PS, singletons included.
    pub fn senders(&self) -> usize {
        self.clusters.len()
    }

    /// Clusters whose aggregator aggregates at least one other worker.
    pub fn aggregators(&self) -> usize {
        self.clusters
            .iter()
            .filter(|c| !c.members.is_empty())
            .count()
    }

    /// Workers that send straight to the PS: direct senders and aggregators without members.
    pub fn singletons(&self) -> usize {
        self.clusters
            .iter()
            .filter(|c| c.members.is_empty())
            .count()
    }
}

/// Readings of Algorithm 1 where the paper leaves a choice (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Options {
    /// Eq. 5's denominator counts w itself (the literal closed neighbourhood) instead of the
    /// unclustered workers adjacent to w (the text).
    pub alpha_counts_self: bool,
    /// Stop when a round selects no aggregator (the paper's rule).
    pub stop_on_empty_round: bool,
    /// Rounds after which the remaining workers send directly (a guard; 0 = 4n + 64).
    pub max_rounds: usize,
    /// Line 23 as written: add every unclustered neighbour with probability α(w) and no stop
    /// at g_w (the default stops at g_w, which Theorem 2 needs; see the module documentation).
    pub literal_line23: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            alpha_counts_self: false,
            stop_on_empty_round: true,
            max_rounds: 0,
            literal_line23: false,
        }
    }
}

fn pow2_at_least(x: usize) -> usize {
    x.max(1).next_power_of_two()
}

fn median(v: &mut [f64]) -> f64 {
    inabench_rng::stats::median_in_place(v).unwrap_or(0.0)
}

/// Run M-WCHA on `inst`, drawing its coin flips from `rng`.
pub fn mwcha(inst: &Instance, opts: &Options, rng: &mut SplitMix64) -> Clustering {
    let n = inst.n();
    let max_rounds = if opts.max_rounds == 0 {
        4 * n + 64
    } else {
        opts.max_rounds
    };
    let mut clustered = vec![false; n];
    let mut left = n;
    let mut out = Clustering::default();
    let mut gbar = vec![0usize; n];
    let mut ghat = vec![0usize; n];
    let mut unc_adj = vec![0usize; n];
    let mut hop1 = vec![0usize; n];
    let mut is_ca = vec![false; n];
    let mut alpha = vec![0.0f64; n];
    let mut beta = vec![0.0f64; n];
    while left > 0 {
        if out.rounds >= max_rounds {
            out.hit_round_limit = true;
            direct_rest(&mut out, &mut clustered);
            break;
        }
        out.rounds += 1;
        // Step 1: Eq. 2 and Eq. 3 for every worker.
        for w in 0..n {
            unc_adj[w] = inst.adj[w].iter().filter(|&&v| !clustered[v]).count();
            let closed = unc_adj[w] + usize::from(!clustered[w]);
            gbar[w] = inst.cap[w].min(closed);
            ghat[w] = pow2_at_least(gbar[w]);
        }
        // Step 2: the largest ĝ among unclustered workers within two hops.
        for x in 0..n {
            let own = if clustered[x] { 0 } else { ghat[x] };
            hop1[x] = inst.adj[x]
                .iter()
                .filter(|&&v| !clustered[v])
                .map(|&v| ghat[v])
                .fold(own, usize::max);
        }
        let mut cas = Vec::new();
        for w in 0..n {
            is_ca[w] = false;
            if clustered[w] {
                continue;
            }
            let best = inst.adj[w]
                .iter()
                .map(|&x| hop1[x])
                .fold(hop1[w], usize::max);
            if ghat[w] >= best {
                is_ca[w] = true;
                cas.push(w);
            }
        }
        // Step 3: Eq. 5 for the CAs, Eq. 6 for the unclustered workers.
        for &w in &cas {
            let denom = if opts.alpha_counts_self {
                unc_adj[w] + 1
            } else {
                unc_adj[w]
            };
            alpha[w] = if denom == 0 {
                0.0
            } else {
                (gbar[w] as f64 / denom as f64).min(1.0)
            };
        }
        for w in 0..n {
            beta[w] = 0.0;
            if clustered[w] {
                continue;
            }
            let mut s = if is_ca[w] { alpha[w] } else { 0.0 };
            for &v in &inst.adj[w] {
                if is_ca[v] {
                    s += alpha[v];
                }
            }
            beta[w] = s;
        }
        let mut selected = 0usize;
        let mut vals = Vec::new();
        let mut cand = Vec::new();
        for &w in &cas {
            if clustered[w] {
                continue; // absorbed by an earlier CA of this round
            }
            vals.clear();
            vals.push(beta[w]);
            vals.extend(
                inst.adj[w]
                    .iter()
                    .filter(|&&v| !clustered[v])
                    .map(|&v| beta[v]),
            );
            let m = median(&mut vals);
            let p = if m <= 0.0 { 1.0 } else { (1.0 / m).min(1.0) };
            if !rng.chance(p) {
                continue;
            }
            selected += 1;
            clustered[w] = true;
            left -= 1;
            cand.clear();
            cand.extend(inst.adj[w].iter().copied().filter(|&v| !clustered[v]));
            // Fisher-Yates: visit the unclustered neighbours in a random order
            for i in (1..cand.len()).rev() {
                let j = (rng.next_u64() % (i as u64 + 1)) as usize;
                cand.swap(i, j);
            }
            let mut members = Vec::new();
            for &v in &cand {
                if !opts.literal_line23 && members.len() >= inst.cap[w] {
                    break;
                }
                if rng.chance(alpha[w]) {
                    clustered[v] = true;
                    left -= 1;
                    members.push(v);
                }
            }
            members.sort_unstable();
            out.clusters.push(Cluster {
                aggregator: w,
                members,
                direct: false,
            });
        }
        if selected == 0 && opts.stop_on_empty_round {
            direct_rest(&mut out, &mut clustered);
            break;
        }
    }
    out
}

fn direct_rest(out: &mut Clustering, clustered: &mut [bool]) {
    for (w, c) in clustered.iter_mut().enumerate() {
        if !*c {
            *c = true;
            out.clusters.push(Cluster {
                aggregator: w,
                members: Vec::new(),
                direct: true,
            });
        }
    }
}

/// Violations of Eq. 1's constraints by a clustering.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Violations {
    /// Clusters with more members than the aggregator's capacity g_w (Theorem 2).
    pub capacity: usize,
    /// Workers in no cluster or in more than one, plus references to unknown workers (Theorem 3).
    pub membership: usize,
    /// Members not adjacent to their aggregator in G.
    pub adjacency: usize,
}

impl Violations {
    pub fn total(&self) -> usize {
        self.capacity + self.membership + self.adjacency
    }
}

impl std::fmt::Display for Violations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} capacity, {} membership and {} adjacency violations",
            self.capacity, self.membership, self.adjacency
        )
    }
}

/// Check a clustering against Eq. 1: capacities respected, every worker in exactly one cluster,
/// members adjacent to their aggregator. This is independent of how the clustering was made.
pub fn validate(inst: &Instance, c: &Clustering) -> Violations {
    let n = inst.n();
    let mut seen = vec![0usize; n];
    let mut v = Violations::default();
    for cl in &c.clusters {
        for &w in std::iter::once(&cl.aggregator).chain(&cl.members) {
            match seen.get_mut(w) {
                Some(s) => *s += 1,
                None => v.membership += 1,
            }
        }
        if cl.aggregator < n {
            if cl.members.len() > inst.capacity(cl.aggregator) {
                v.capacity += 1;
            }
            v.adjacency += cl
                .members
                .iter()
                .filter(|&&m| m < n && !inst.adjacent(cl.aggregator, m))
                .count();
        }
    }
    v.membership += seen.iter().filter(|&&s| s != 1).count();
    v
}

/// Draws of M-WCHA on `inst` (coin flips seeded `seed`, `seed + 1`, ...) whose clustering gives
/// some aggregator more members than its capacity g_w (Theorem 2), with `opts` except that line
/// 23 is read literally: (violating draws, draws). Membership and adjacency violations cannot
/// come from line 23; a draw with any is an error of the implementation.
pub fn literal_line23_violations(
    inst: &Instance,
    opts: &Options,
    seed: u64,
    draws: usize,
) -> Result<(usize, usize), AlephError> {
    let o = Options {
        literal_line23: true,
        ..*opts
    };
    let mut bad = 0;
    for d in 0..draws {
        let c = mwcha(inst, &o, &mut SplitMix64::new(seed.wrapping_add(d as u64)));
        let v = validate(inst, &c);
        if v.membership + v.adjacency > 0 {
            return Err(AlephError::Invalid(format!(
                "M-WCHA with line 23 read literally, draw {d}: {v}"
            )));
        }
        if v.capacity > 0 {
            bad += 1;
        }
    }
    Ok((bad, draws))
}

/// The largest component [`exact_min_senders`] solves.
pub const EXACT_MAX: usize = 24;

/// The minimum |D| of Eq. 1 (clusters, singletons included), solved exactly component by
/// component: for k = a lower bound, k+1, ... every k-subset of the component is tried as the
/// aggregator set, and a capacitated bipartite matching (augmenting paths) decides whether the
/// other workers can be assigned to adjacent aggregators within their capacities.
pub fn exact_min_senders(inst: &Instance) -> Result<usize, AlephError> {
    let mut total = 0;
    for comp in inst.components() {
        if comp.len() > EXACT_MAX {
            return Err(AlephError::TooLarge {
                max: EXACT_MAX,
                got: comp.len(),
            });
        }
        total += solve_component(inst, &comp);
    }
    Ok(total)
}

fn solve_component(inst: &Instance, comp: &[usize]) -> usize {
    let k_n = comp.len();
    let local = |w: usize| comp.binary_search(&w).ok();
    let cap: Vec<usize> = comp.iter().map(|&w| inst.capacity(w)).collect();
    let adj: Vec<Vec<usize>> = comp
        .iter()
        .map(|&w| inst.adj[w].iter().filter_map(|&v| local(v)).collect())
        .collect();
    // lower bound: the k largest (g + 1) must cover the component
    let mut cover: Vec<usize> = cap.iter().map(|g| g + 1).collect();
    cover.sort_unstable_by(|a, b| b.cmp(a));
    let mut lb = 1;
    let mut acc = 0;
    for (i, c) in cover.iter().enumerate() {
        acc += c;
        if acc >= k_n {
            lb = i + 1;
            break;
        }
    }
    for k in lb..=k_n {
        let mut idx: Vec<usize> = (0..k).collect();
        loop {
            if feasible(&idx, &cap, &adj, k_n) {
                return k;
            }
            // next k-subset in lexicographic order
            let mut i = k;
            while i > 0 && idx[i - 1] == k_n - k + i - 1 {
                i -= 1;
            }
            if i == 0 {
                break;
            }
            idx[i - 1] += 1;
            for j in i..k {
                idx[j] = idx[j - 1] + 1;
            }
        }
    }
    k_n
}

fn feasible(centers: &[usize], cap: &[usize], adj: &[Vec<usize>], n: usize) -> bool {
    let mut is_center = vec![false; n];
    for &c in centers {
        is_center[c] = true;
    }
    let others: Vec<usize> = (0..n).filter(|&u| !is_center[u]).collect();
    let slots: usize = centers.iter().map(|&c| cap[c]).sum();
    if slots < others.len() {
        return false;
    }
    // quick domination check
    if others
        .iter()
        .any(|&u| !adj[u].iter().any(|&c| is_center[c] && cap[c] > 0))
    {
        return false;
    }
    let mut assigned: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut visited = vec![false; n];
    for &u in &others {
        visited.iter_mut().for_each(|v| *v = false);
        if !augment(u, &is_center, cap, adj, &mut assigned, &mut visited) {
            return false;
        }
    }
    true
}

fn augment(
    u: usize,
    is_center: &[bool],
    cap: &[usize],
    adj: &[Vec<usize>],
    assigned: &mut [Vec<usize>],
    visited: &mut [bool],
) -> bool {
    for &c in &adj[u] {
        if !is_center[c] || visited[c] || cap[c] == 0 {
            continue;
        }
        visited[c] = true;
        if assigned[c].len() < cap[c] {
            assigned[c].push(u);
            return true;
        }
        for i in 0..assigned[c].len() {
            let v = assigned[c][i];
            if augment(v, is_center, cap, adj, assigned, visited) {
                assigned[c][i] = u;
                return true;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random_instance(rng: &mut SplitMix64, n: usize, p_edge: f64) -> Instance {
        let mut adj = vec![Vec::new(); n];
        for a in 0..n {
            for b in a + 1..n {
                if rng.chance(p_edge) {
                    adj[a].push(b);
                    adj[b].push(a);
                }
            }
        }
        let bw: Vec<f64> = (0..n).map(|_| 1.0 + 9.0 * rng.next_f64()).collect();
        let cpu: Vec<f64> = (0..n).map(|_| 100.0 * rng.next_f64()).collect();
        Instance::new(bw, cpu, 10.0, adj).expect("valid instance")
    }

    fn all_options() -> Vec<Options> {
        let mut v = Vec::new();
        for a in [false, true] {
            for s in [false, true] {
                v.push(Options {
                    alpha_counts_self: a,
                    stop_on_empty_round: s,
                    max_rounds: 0,
                    literal_line23: false,
                });
            }
        }
        v
    }

    #[test]
    fn invariants_hold_on_many_random_graphs() {
        let mut rng = SplitMix64::new(42);
        for trial in 0..600 {
            let n = 1 + (rng.next_u64() % 60) as usize;
            let p = [0.05, 0.2, 0.5, 1.0][trial % 4];
            let inst = random_instance(&mut rng, n, p);
            for o in all_options() {
                let c = mwcha(&inst, &o, &mut SplitMix64::new(trial as u64));
                let v = validate(&inst, &c);
                assert_eq!(v.total(), 0, "trial {trial} n={n} p={p} {o:?}: {v}");
                assert!(!c.hit_round_limit, "trial {trial}: round limit");
                assert!(c.senders() <= n && c.senders() >= 1);
            }
        }
    }

    #[test]
    fn literal_line23_only_breaks_capacity() {
        // Line 23 read literally overfills aggregators on dense random graphs (capacity
        // violations) but never puts a worker in two clusters or a member out of reach.
        let mut rng = SplitMix64::new(9);
        let mut over = 0;
        for trial in 0..200 {
            let n = 5 + (rng.next_u64() % 40) as usize;
            let inst = random_instance(&mut rng, n, 0.5);
            let (bad, draws) =
                literal_line23_violations(&inst, &Options::default(), trial, 5).expect("valid");
            assert!(bad <= draws);
            over += bad;
        }
        assert!(over > 0, "no capacity violation in 1000 literal draws");
        // a star whose hub has capacity 1 and 6 leaves: the literal rule adds each leaf with
        // alpha = 1/6, so more than one leaf (a violation) in 1 - (5/6)^6 - (5/6)^5 = 26.3%
        let mut adj = vec![Vec::new(); 7];
        for leaf in 1..7 {
            adj[0].push(leaf);
            adj[leaf].push(0);
        }
        let mut bw = vec![1.0; 7];
        bw[0] = 2.0;
        let inst = Instance::new(bw, vec![1000.0; 7], 1.0, adj).expect("valid");
        assert_eq!(inst.capacity(0), 1);
        let (bad, draws) =
            literal_line23_violations(&inst, &Options::default(), 1, 20_000).expect("valid");
        let want = 1.0 - (5.0f64 / 6.0).powi(6) - (5.0f64 / 6.0).powi(5);
        let share = bad as f64 / draws as f64;
        assert!((share - want).abs() < 0.015, "{share} vs {want}");
    }

    #[test]
    fn validator_catches_each_kind_of_violation() {
        // path 0-1-2, capacities from bandwidths 1, 3, 1: g = 0, 2, 0
        let inst = Instance::new(
            vec![1.0, 3.0, 1.0],
            vec![100.0; 3],
            10.0,
            vec![vec![1], vec![0, 2], vec![1]],
        )
        .expect("valid");
        assert_eq!(inst.capacity(1), 2);
        let ok = Clustering {
            clusters: vec![Cluster {
                aggregator: 1,
                members: vec![0, 2],
                direct: false,
            }],
            ..Default::default()
        };
        assert_eq!(validate(&inst, &ok), Violations::default());
        let over = Clustering {
            clusters: vec![
                Cluster {
                    aggregator: 0,
                    members: vec![1],
                    direct: false,
                },
                Cluster {
                    aggregator: 2,
                    members: vec![],
                    direct: true,
                },
            ],
            ..Default::default()
        };
        assert_eq!(validate(&inst, &over).capacity, 1);
        let twice = Clustering {
            clusters: vec![
                Cluster {
                    aggregator: 1,
                    members: vec![0, 2],
                    direct: false,
                },
                Cluster {
                    aggregator: 2,
                    members: vec![],
                    direct: true,
                },
            ],
            ..Default::default()
        };
        assert_eq!(validate(&inst, &twice).membership, 1);
        let missing = Clustering {
            clusters: vec![Cluster {
                aggregator: 1,
                members: vec![0],
                direct: false,
            }],
            ..Default::default()
        };
        assert_eq!(validate(&inst, &missing).membership, 1);
        let far = Clustering {
            clusters: vec![
                Cluster {
                    aggregator: 1,
                    members: vec![2],
                    direct: false,
                },
                Cluster {
                    aggregator: 0,
                    members: vec![],
                    direct: true,
                },
            ],
            ..Default::default()
        };
        assert_eq!(validate(&inst, &far), Violations::default());
        // 0 and 2 are not adjacent
        let inst2 = Instance::new(
            vec![1.0, 1.0, 3.0],
            vec![100.0; 3],
            10.0,
            vec![vec![1], vec![0, 2], vec![1]],
        )
        .expect("valid");
        let bad_adj = Clustering {
            clusters: vec![Cluster {
                aggregator: 2,
                members: vec![0, 1],
                direct: false,
            }],
            ..Default::default()
        };
        assert_eq!(validate(&inst2, &bad_adj).adjacency, 1);
    }

    #[test]
    fn capacity_uses_bandwidth_and_computing_limits() {
        // b = 1: bandwidth allows 9, 4 and 0; computing allows 100/10 = 10, 20/10 = 2, 10
        let inst = Instance::new(
            vec![10.0, 5.0, 1.0],
            vec![100.0, 20.0, 100.0],
            10.0,
            vec![vec![], vec![], vec![]],
        )
        .expect("valid");
        assert_eq!(inst.capacity(0), 9);
        assert_eq!(inst.capacity(1), 2);
        assert_eq!(inst.capacity(2), 0);
    }

    #[test]
    fn rejects_bad_inputs() {
        assert!(Instance::new(vec![], vec![], 1.0, vec![]).is_err());
        assert!(Instance::new(vec![1.0], vec![1.0], 0.0, vec![vec![]]).is_err());
        assert!(Instance::new(vec![-1.0], vec![1.0], 1.0, vec![vec![]]).is_err());
        assert!(Instance::new(vec![1.0, 1.0], vec![1.0; 2], 1.0, vec![vec![1], vec![]]).is_err());
        assert!(Instance::new(vec![1.0], vec![1.0], 1.0, vec![vec![0]]).is_err());
        assert!(Instance::new(vec![1.0], vec![1.0], 1.0, vec![vec![3]]).is_err());
    }

    #[test]
    fn ratio_against_the_exact_solver_is_at_least_one() {
        let mut rng = SplitMix64::new(7);
        let mut worst: f64 = 1.0;
        let mut sum = 0.0;
        let mut count = 0.0;
        for trial in 0..300 {
            let n = 2 + (rng.next_u64() % 15) as usize;
            let p = [0.15, 0.3, 0.6, 1.0][trial % 4];
            let inst = random_instance(&mut rng, n, p);
            let opt = exact_min_senders(&inst).expect("small");
            let c = mwcha(
                &inst,
                &Options::default(),
                &mut SplitMix64::new(trial as u64),
            );
            assert_eq!(validate(&inst, &c).total(), 0);
            assert!(
                c.senders() >= opt,
                "trial {trial}: M-WCHA {} below the optimum {opt}",
                c.senders()
            );
            let r = c.senders() as f64 / opt as f64;
            worst = worst.max(r);
            sum += r;
            count += 1.0;
        }
        println!(
            "M-WCHA / OPT over 300 random graphs: mean {:.3}, worst {worst:.3}",
            sum / count
        );
    }

    #[test]
    fn exact_solver_on_hand_checked_graphs() {
        // a 5-clique where only worker 0 can aggregate, 3 others: OPT = 2 ({0,+3}, {last})
        let clique = |n: usize| -> Vec<Vec<usize>> {
            (0..n)
                .map(|a| (0..n).filter(|&b| b != a).collect())
                .collect()
        };
        let inst = Instance::new(
            vec![4.0, 1.0, 1.0, 1.0, 1.0],
            vec![100.0; 5],
            10.0,
            clique(5),
        )
        .expect("valid");
        assert_eq!(exact_min_senders(&inst), Ok(2));
        // isolated workers: every one is its own cluster
        let inst =
            Instance::new(vec![5.0; 4], vec![100.0; 4], 10.0, vec![vec![]; 4]).expect("valid");
        assert_eq!(exact_min_senders(&inst), Ok(4));
        // a path 0-1-2-3-4 with bandwidths making 1 and 3 capacity 2: OPT = 2
        let inst = Instance::new(
            vec![1.0, 3.0, 1.0, 3.0, 1.0],
            vec![100.0; 5],
            10.0,
            vec![vec![1], vec![0, 2], vec![1, 3], vec![2, 4], vec![3]],
        )
        .expect("valid");
        assert_eq!(exact_min_senders(&inst), Ok(2));
        // too large a component is an error, not a hang
        let inst = Instance::new(vec![2.0; 30], vec![100.0; 30], 10.0, clique(30)).expect("valid");
        assert!(matches!(
            exact_min_senders(&inst),
            Err(AlephError::TooLarge { .. })
        ));
    }

    #[test]
    fn forced_optimum_is_found() {
        // a star whose hub can aggregate all k leaves; leaves have capacity 0: OPT = 1
        for k in 1..=12 {
            let mut adj = vec![Vec::new(); k + 1];
            for leaf in 1..=k {
                adj[0].push(leaf);
                adj[leaf].push(0);
            }
            let mut bw = vec![1.0; k + 1];
            bw[0] = (k + 1) as f64;
            let inst = Instance::new(bw, vec![1000.0; k + 1], 1.0, adj).expect("valid");
            assert_eq!(exact_min_senders(&inst), Ok(1));
            for seed in 0..50 {
                let c = mwcha(&inst, &Options::default(), &mut SplitMix64::new(seed));
                assert_eq!(validate(&inst, &c).total(), 0);
                assert_eq!(c.senders(), 1, "k={k} seed={seed}: {:?}", c.clusters);
            }
        }
        // disjoint cliques, each with one worker able to take all the others: OPT = #cliques
        let (cliques, size) = (6, 8);
        let n = cliques * size;
        let mut adj = vec![Vec::new(); n];
        let mut bw = vec![1.0; n];
        for q in 0..cliques {
            for a in 0..size {
                for b in 0..size {
                    if a != b {
                        adj[q * size + a].push(q * size + b);
                    }
                }
            }
            bw[q * size + q % size] = size as f64;
        }
        let inst = Instance::new(bw, vec![1000.0; n], 1.0, adj).expect("valid");
        assert_eq!(exact_min_senders(&inst), Ok(cliques));
        for seed in 0..50 {
            let c = mwcha(&inst, &Options::default(), &mut SplitMix64::new(seed));
            assert_eq!(c.senders(), cliques, "seed {seed}");
        }
    }

    #[test]
    fn literal_alpha_misses_the_forced_optimum() {
        // The literal Eq. 5 (closed neighbourhood in the denominator) adds each leaf of a forced
        // star with probability k/(k+1) only, so it often needs more than one cluster.
        let k = 8;
        let mut adj = vec![Vec::new(); k + 1];
        for leaf in 1..=k {
            adj[0].push(leaf);
            adj[leaf].push(0);
        }
        let mut bw = vec![1.0; k + 1];
        bw[0] = (k + 1) as f64;
        let inst = Instance::new(bw, vec![1000.0; k + 1], 1.0, adj).expect("valid");
        let o = Options {
            alpha_counts_self: true,
            ..Options::default()
        };
        let worse = (0..200)
            .filter(|&s| mwcha(&inst, &o, &mut SplitMix64::new(s)).senders() > 1)
            .count();
        assert!(worse > 50, "{worse} of 200 runs above the optimum");
    }

    #[test]
    fn homogeneous_bandwidth_admits_no_aggregator() {
        let n = 10;
        let adj = (0..n)
            .map(|a| (0..n).filter(|&b| b != a).collect())
            .collect();
        let inst = Instance::new(vec![5.0; n], vec![100.0; n], 10.0, adj).expect("valid");
        let c = mwcha(&inst, &Options::default(), &mut SplitMix64::new(3));
        assert_eq!(c.aggregators(), 0);
        assert_eq!(c.senders(), n);
        assert_eq!(exact_min_senders(&inst), Ok(n));
    }

    #[test]
    fn deterministic_for_a_seed() {
        let mut rng = SplitMix64::new(11);
        let inst = random_instance(&mut rng, 40, 0.2);
        let a = mwcha(&inst, &Options::default(), &mut SplitMix64::new(5));
        let b = mwcha(&inst, &Options::default(), &mut SplitMix64::new(5));
        assert_eq!(a.clusters, b.clusters);
    }
}
