//! Break-even values: for every claim that declares the host profile inputs it rests on
//! (`rests_on:` in the spec), the value of that input at which its verdict flips, found by
//! rerunning the claim's points with the input moved (a bounded grid, then bisection between
//! grid values whose verdicts differ) and judging the claim again on the changed rows.
//!
//! What is rerun: in each class the claim was judged in (simulated, modelled, functional: the
//! classes whose workloads charge the profile), every point of the systems the key prices
//! ([`priced_systems`]: `systems.<system>....` reruns that system and those [`PRICES`] declares
//! it prices; a `costs.<name>` key reruns every system), repetition 0 with the run's seed, the
//! other systems' rows kept as measured. An input counted in whole units (unit `count`: a thread
//! count) is searched over whole values only. Each sentence ends with what its search cost
//! (points rerun, seconds). One repetition suffices where the class
//! is a function of spec, profile and seed. The results go to `breakeven.json` in the run folder;
//! the report reads it (`inabench_report::analysis`): the sentence beside the verdict, and the
//! verdict `host-dependent` where a break-even lies inside the input's band.

use crate::executor::run_here;
use crate::launcher::Job;
use crate::registry::Registry;
use anyhow::{Context, Result};
use inabench_core::claims::{self, RepObs, Verdict};
use inabench_core::event::Event;
use inabench_core::hostprofile::HostProfile;
use inabench_core::plan::Point;
use inabench_core::rng::SplitMix64;
use inabench_core::spec::{Fidelity, Spec};
use inabench_core::store::{self, Row, Stored};
use inabench_report::analysis::{PlanStates, aggregate};
use inabench_report::types::BreakEven;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

/// Grid values tried before bisecting (besides 0, the profile's value and the band's ends).
const GRID: usize = 8;
/// Bisection steps between two grid values whose verdicts differ.
const STEPS: usize = 10;
/// At most this many flips are located per claim and class.
const MAX_FLIPS: usize = 2;

/// The spec systems a profile system's entries price besides the system of the same name: the
/// declared mapping the break-even search reruns by (a system named alike is always rerun).
/// Each line says which workload charges the key to which other system; rerunning a system the
/// key does not price only repeats its rows, while leaving one out would judge the flip on
/// unchanged rows.
pub const PRICES: &[(&str, &[&str])] = &[
    // p4sgd-fig8's `switchml_dpdk` (SwitchML behind its released DPDK client) is charged
    // SwitchML's cost per frame (workloads/src/p4sgd/fig8.rs: hostcost::core_costs(ctx, "switchml"))
    ("switchml", &["switchml_dpdk"]),
    // aleph-fig10's modelled `aleph` runs ALEPH's XDP programs at aleph-xdp-scale's cost per packet
    // (workloads/src/aleph/testbed_training.rs `net_costs`: xdp_scale::PROGRAM_KEY)
    ("aleph_xdp_driver", &["aleph"]),
];

/// The systems among `present` (a class's systems in the run) that a rerun for profile `key`
/// must rerun: every one for a `costs.<name>` key; for `systems.<system>.<path>.<quantity>`,
/// `<system>` and the systems [`PRICES`] says it prices.
pub fn priced_systems(key: &str, present: &BTreeSet<String>) -> BTreeSet<String> {
    if key.starts_with("costs.") {
        return present.clone();
    }
    let p: Vec<&str> = key.split('.').collect();
    let Some(owner) = (p.len() == 4 && p[0] == "systems").then(|| p[1]) else {
        return BTreeSet::new();
    };
    let also: &[&str] = PRICES
        .iter()
        .find(|(s, _)| *s == owner)
        .map_or(&[], |(_, v)| v);
    present
        .iter()
        .filter(|s| s.as_str() == owner || also.contains(&s.as_str()))
        .cloned()
        .collect()
}

/// Whether an input takes whole values only (a thread count): the search tries whole values from
/// 1 and bisects between whole values.
fn is_count(unit: &str) -> bool {
    unit == "count"
}

/// The classes whose workloads charge the host profile.
fn profile_classes() -> [Fidelity; 3] {
    [
        Fidelity::Simulated,
        Fidelity::Modelled,
        Fidelity::Functional,
    ]
}

/// Solve the break-evens of a finished run's claims that declare `rests_on:`; writes
/// `breakeven.json` into the run folder (nothing when no claim declares one). `stored` is the
/// run's rows as [`store::read_rows`] read them from `run_dir` (read once by the caller, which
/// hands the same rows to the report). `log` hears one line per claim.
pub fn solve(
    run_dir: &Path,
    stored: &Stored,
    registry: &Registry,
    profile: &HostProfile,
    log: &mut dyn FnMut(String),
) -> Result<Vec<BreakEven>> {
    let spec = Spec::load(&run_dir.join(store::SPEC_FILE))?;
    if spec.claims.iter().all(|c| c.rests_on.is_empty()) {
        return Ok(Vec::new());
    }
    let manifest = store::read_manifest(run_dir)?;
    let planned = PlanStates::of_stored(stored, &spec, &manifest);
    let rows = &stored.rows;
    let workload = spec.workload.clone().unwrap_or_default();
    let units: BTreeMap<String, String> = spec
        .metrics
        .iter()
        .map(|m| (m.name.clone(), m.unit.clone()))
        .collect();
    // the points that ran, per class: (class, system) -> points
    let mut points: BTreeMap<(Fidelity, String), BTreeMap<String, Point>> = BTreeMap::new();
    for r in rows {
        points
            .entry((r.fidelity, r.system.clone()))
            .or_default()
            .entry(r.point_id.clone())
            .or_insert_with(|| Point {
                id: r.point_id.clone(),
                system: r.system.clone(),
                params: r.params.clone(),
                repetitions: 1,
                warmup: 0,
            });
    }
    let mut out = Vec::new();
    let solve_started = Instant::now();
    let mut total_points = 0usize;
    let cancel = AtomicBool::new(false);
    // reruns shared by the claims: (class, keys, x) -> rows of the rerun systems
    let mut memo: BTreeMap<(Fidelity, Vec<String>, u64), Vec<Row>> = BTreeMap::new();
    for c in spec.claims.iter().filter(|c| !c.rests_on.is_empty()) {
        let Ok(expr) = claims::parse(&c.expr) else {
            continue;
        };
        // one break-even per input the claim rests on, the others kept at the profile's values
        // (inputs of different kinds, a cost in ns and a rate in Gbit/s, are never moved together)
        for key in &c.rests_on {
            let Ok(cost) = profile.get(key) else {
                log(format!(
                    "{}: rests on `{key}`, which the host profile does not have: no break-even",
                    c.id
                ));
                continue;
            };
            let classes: Vec<Fidelity> = if c.fidelity.is_empty() {
                spec.fidelity.clone()
            } else {
                c.fidelity.clone()
            };
            for class in classes
                .into_iter()
                .filter(|f| profile_classes().contains(f) && manifest.classes().contains(f))
            {
                let plan = planned.by_class.get(&class).cloned().unwrap_or_default();
                let present: BTreeSet<String> = points
                    .keys()
                    .filter(|(f, _)| *f == class)
                    .map(|(_, s)| s.clone())
                    .collect();
                let rerun_systems: Vec<String> =
                    priced_systems(key, &present).into_iter().collect();
                if rerun_systems.is_empty() {
                    log(format!(
                        "{} [{class}]: `{key}` prices none of this run's systems ({}): no break-even",
                        c.id,
                        present.iter().cloned().collect::<Vec<_>>().join(", ")
                    ));
                    continue;
                }
                let started = Instant::now();
                let mut rerun_points = 0usize;
                // a value an earlier claim's search ran already is read from the memo
                let mut reused_points = 0usize;
                let per_value: usize = rerun_systems
                    .iter()
                    .map(|s| points.get(&(class, s.clone())).map_or(0, |p| p.len()))
                    .sum();
                let kept: Vec<&Row> = rows
                    .iter()
                    .filter(|r| r.fidelity == class && !rerun_systems.contains(&r.system))
                    .collect();
                let seed = claims_seed(&spec.id, &c.id, class);
                let mut verdict_at = |x: f64| -> Result<String> {
                    let mk = (class, vec![key.clone()], x.to_bits());
                    if memo.contains_key(&mk) {
                        reused_points += per_value;
                    } else {
                        let p = profile.with_value(key, x)?;
                        let mut new_rows = Vec::new();
                        for s in &rerun_systems {
                            for pt in points[&(class, s.clone())].values() {
                                let job = Job {
                                    workload: workload.clone(),
                                    point: pt.clone(),
                                    index: 0,
                                    fidelity: class,
                                    repetition: 0,
                                    warmup: false,
                                    seed: SplitMix64::derive(manifest.seed, &pt.id).next_u64(),
                                    run_id: manifest.run_id.clone(),
                                    experiment: spec.id.clone(),
                                    units: units.clone(),
                                    capture_dir: None,
                                    host_profile: Some(p.clone()),
                                    addresses: None,
                                };
                                let mut sink = |e: Event| {
                                    if let Event::Row(r) = e {
                                        new_rows.push(r);
                                    }
                                };
                                // a point that fails at this value has no rows: the judge sees it
                                // missing
                                let _ = run_here(registry, &job, &cancel, &mut sink);
                                rerun_points += 1;
                            }
                        }
                        memo.insert(mk.clone(), new_rows);
                    }
                    let mut all: Vec<Row> = kept.iter().map(|r| (*r).clone()).collect();
                    all.extend(memo[&mk].iter().cloned());
                    let obs: Vec<RepObs> = aggregate(&all)
                        .into_iter()
                        .map(|a| RepObs {
                            system: a.system,
                            params: a.params,
                            metric: a.metric,
                            reps: if a.reps.is_empty() {
                                vec![a.median]
                            } else {
                                a.reps
                            },
                        })
                        .collect();
                    let v = claims::judge(&expr, &obs, &spec.paper.values, &plan, seed);
                    Ok(label(&v).to_string())
                };
                let value = cost.value;
                let band = cost.band;
                let count = is_count(&cost.unit);
                let top = 16.0 * band.map_or(value, |b| b[1].max(value)).max(1.0);
                let bottom = (band.map_or(value, |b| b[0].min(value)) / 4.0).max(top / 4096.0);
                let mut xs: Vec<f64> = vec![value, top];
                if let Some([lo, hi]) = band {
                    xs.extend([lo, hi]);
                }
                if count {
                    // whole values from 1 (no thread is no client), doubling up to the top
                    let mut x = 1.0;
                    while x < top {
                        xs.push(x);
                        x *= 2.0;
                    }
                    xs.iter_mut().for_each(|x| *x = x.round().max(1.0));
                } else {
                    xs.push(0.0);
                    for i in 0..GRID {
                        xs.push(bottom * (top / bottom).powf(i as f64 / (GRID - 1) as f64));
                    }
                }
                xs.sort_by(f64::total_cmp);
                xs.dedup_by(|a, b| (*a - *b).abs() <= 1e-9 * b.abs().max(1.0));
                let mut at: Vec<(f64, String)> = Vec::new();
                for x in &xs {
                    at.push((*x, verdict_at(*x)?));
                }
                let mut flips = Vec::new();
                for w in 0..at.len() - 1 {
                    if at[w].1 == at[w + 1].1 || flips.len() >= MAX_FLIPS {
                        continue;
                    }
                    let (mut a, mut b) = (at[w].0, at[w + 1].0);
                    let (va, vb) = (at[w].1.clone(), at[w + 1].1.clone());
                    for _ in 0..STEPS {
                        let done = if count {
                            b - a <= 1.0
                        } else {
                            b - a <= 1e-3 * b.max(1.0)
                        };
                        if done {
                            break;
                        }
                        let m = if count {
                            ((a + b) / 2.0).floor()
                        } else {
                            (a + b) / 2.0
                        };
                        if verdict_at(m)? == va {
                            a = m;
                        } else {
                            b = m;
                        }
                    }
                    // a whole-valued input flips at the first value with the other verdict
                    flips.push((if count { b } else { (a + b) / 2.0 }, va, vb));
                }
                let now = at
                    .iter()
                    .find(|(x, _)| *x == value)
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default();
                let mut be = describe(
                    &c.id,
                    class,
                    key,
                    &cost.unit,
                    value,
                    band,
                    &cost.provenance,
                    &profile.name,
                    &now,
                    &flips,
                    top,
                );
                // what the search cost (reruns shared with an earlier claim's search through the
                // memo are counted apart, not run again)
                let seconds = started.elapsed().as_secs_f64();
                be.sentence
                    .push_str(&search_cost(rerun_points, reused_points, seconds));
                log(format!("{} [{class}]: {}", c.id, be.sentence));
                total_points += rerun_points;
                out.push(be);
            }
        }
    }
    log(format!(
        "break-evens: {} in {} s, {total_points} points rerun",
        out.len(),
        claims::fmt_num(round2(solve_started.elapsed().as_secs_f64()))
    ));
    let path = run_dir.join(BREAKEVEN_FILE);
    std::fs::write(&path, serde_json::to_string_pretty(&out)?)
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(out)
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// The tail of a break-even's sentence: the points its search ran, those it read from an earlier
/// claim's search, and its wall time.
pub fn search_cost(points: usize, reused: usize, seconds: f64) -> String {
    let shared = if reused > 0 {
        format!(", {reused} read from an earlier claim's search")
    } else {
        String::new()
    };
    format!(
        " (search: {points} point{} rerun{shared}, {} s)",
        if points == 1 { "" } else { "s" },
        claims::fmt_num(round2(seconds))
    )
}

/// The file in a run folder that holds the break-evens.
pub use inabench_report::types::BREAKEVEN_FILE;

fn label(v: &Verdict) -> &'static str {
    v.label()
}

/// The bootstrap's seed, as the report derives it (a fixed seed per experiment, claim, class).
fn claims_seed(experiment: &str, claim: &str, class: Fidelity) -> u64 {
    SplitMix64::derive(0x1ab, &format!("{experiment}/{claim}/{class}")).next_u64()
}

/// The sentence and status of one claim's break-evens.
#[allow(clippy::too_many_arguments)]
pub fn describe(
    claim: &str,
    class: Fidelity,
    key: &str,
    unit: &str,
    value: f64,
    band: Option<[f64; 2]>,
    provenance: &str,
    profile: &str,
    now: &str,
    flips: &[(f64, String, String)],
    top: f64,
) -> BreakEven {
    let n = |x: f64| claims::fmt_num(x);
    let source: String = {
        let head = provenance.split(". ").next().unwrap_or(provenance);
        let mut s: String = head.chars().take(90).collect();
        if head.chars().count() > 90 {
            s.push_str("...");
        }
        s
    };
    let pieces: Vec<String> = flips
        .iter()
        .map(|(x, below, above)| {
            if is_count(unit) {
                // a whole-valued input: `x` is the first value with the other verdict
                format!("{below} up to {}, {above} from {}", n(*x - 1.0), n(*x))
            } else {
                format!("{below} below {} {unit}, {above} above", n(*x))
            }
        })
        .collect();
    let inside: Vec<f64> = flips
        .iter()
        .map(|f| f.0)
        .filter(|x| band.is_some_and(|[lo, hi]| *x >= lo && *x <= hi))
        .collect();
    let status = if !inside.is_empty() {
        "host-dependent"
    } else if flips.is_empty() && now == "holds" {
        "does not test the input"
    } else if band.is_some() && now == "holds" {
        "holds over the whole band: does not test the input"
    } else if band.is_some() {
        "the same verdict over the whole band"
    } else {
        "no band given"
    };
    let flips_text = if pieces.is_empty() {
        let from = if is_count(unit) { 1.0 } else { 0.0 };
        format!(
            "{now} for every {key} from {} to {} {unit}",
            n(from),
            n(top)
        )
    } else {
        format!("{key}: {}", pieces.join("; "))
    };
    let band_text = band
        .map(|[lo, hi]| format!("; band {}-{} {unit}", n(lo), n(hi)))
        .unwrap_or_default();
    let sentence = format!(
        "break-even: {flips_text}; {profile} profile {} {unit} ({source}){band_text}: {status}",
        n(value)
    );
    BreakEven {
        claim: claim.to_string(),
        fidelity: class,
        key: key.to_string(),
        unit: unit.to_string(),
        value,
        band,
        flips: flips.iter().map(|f| f.0).collect(),
        status: status.to_string(),
        sentence,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(v: &[&str]) -> BTreeSet<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_key_reruns_the_systems_it_prices_by_the_declared_mapping() {
        // p4sgd-fig8's systems: SwitchML's cost per frame prices the suite's SwitchML and the one
        // behind its released DPDK client; the old rule (the system named in the key alone)
        // left switchml_dpdk's rows as they were and judged the flip on them unchanged
        let fig8 = set(&["p4sgd", "cpusync", "gpusync", "switchml", "switchml_dpdk"]);
        assert_eq!(
            priced_systems("systems.switchml.worker.frame", &fig8),
            set(&["switchml", "switchml_dpdk"])
        );
        // aleph-fig10's modelled ALEPH runs the programs aleph-xdp-scale measured
        let fig10 = set(&["aleph", "byteps", "horovod"]);
        assert_eq!(
            priced_systems("systems.aleph_xdp_driver.worker.program", &fig10),
            set(&["aleph"])
        );
        assert_eq!(
            priced_systems("systems.aleph.worker.udp_send", &fig10),
            set(&["aleph"])
        );
        // a cost of no one system reruns every system; a system absent from the run, none
        assert_eq!(priced_systems("costs.kernel_tcp_recv_byte", &fig10), fig10);
        assert!(priced_systems("systems.atp.worker.frame", &fig10).is_empty());
        assert!(priced_systems("systems.atp", &fig8).is_empty());
    }

    #[test]
    fn every_system_the_mapping_names_is_a_system_of_some_spec() {
        // a renamed or removed system would leave a line of PRICES that reruns nothing
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut systems = BTreeSet::new();
        for dir in std::fs::read_dir(root.join("experiments")).expect("experiments") {
            let dir = dir.expect("entry").path();
            let Ok(files) = std::fs::read_dir(&dir) else {
                continue;
            };
            for f in files {
                let f = f.expect("entry").path();
                if f.extension().is_some_and(|e| e == "yaml")
                    && let Ok(spec) = Spec::load(&f)
                {
                    systems.extend(spec.systems.iter().cloned());
                }
            }
        }
        assert!(systems.len() > 20, "read the specs: {systems:?}");
        for (owner, priced) in PRICES {
            for s in priced.iter() {
                assert!(
                    systems.contains(*s),
                    "PRICES says {owner}'s entries price `{s}`, which no spec under experiments/ runs"
                );
            }
        }
    }

    #[test]
    fn a_whole_valued_input_reads_as_whole_values() {
        let flips = vec![(7.0, "fails".to_string(), "holds".to_string())];
        let b = describe(
            "c",
            Fidelity::Simulated,
            "systems.atp.worker.threads",
            "count",
            12.0,
            None,
            "ATP's released client. More.",
            "reference",
            "holds",
            &flips,
            192.0,
        );
        assert!(
            b.sentence.contains("fails up to 6, holds from 7"),
            "{}",
            b.sentence
        );
        assert_eq!(b.status, "no band given");
        let b = describe(
            "c",
            Fidelity::Simulated,
            "systems.atp.worker.threads",
            "count",
            12.0,
            None,
            "p",
            "reference",
            "holds",
            &[],
            192.0,
        );
        assert!(
            b.sentence
                .contains("holds for every systems.atp.worker.threads from 1 to 192 count"),
            "{}",
            b.sentence
        );
        assert_eq!(search_cost(1, 0, 0.123), " (search: 1 point rerun, 0.12 s)");
        assert_eq!(
            search_cost(0, 96, 2.0),
            " (search: 0 points rerun, 96 read from an earlier claim's search, 2 s)"
        );
    }

    #[test]
    fn a_flip_inside_the_band_is_host_dependent_and_outside_it_is_not() {
        let flips = vec![(26.0, "fails".to_string(), "holds".to_string())];
        let b = describe(
            "c",
            Fidelity::Simulated,
            "systems.atp.worker.frame",
            "ns",
            21.0,
            Some([21.0, 73.8]),
            "NetReduce Table 1, row Parallel DMA. More.",
            "reference",
            "fails",
            &flips,
            1000.0,
        );
        assert_eq!(b.status, "host-dependent");
        assert!(
            b.sentence.contains("fails below 26 ns, holds above"),
            "{}",
            b.sentence
        );
        assert!(
            b.sentence
                .contains("reference profile 21 ns (NetReduce Table 1, row Parallel DMA)")
        );
        let flips = vec![(314.0, "fails".to_string(), "holds".to_string())];
        let b = describe(
            "c",
            Fidelity::Simulated,
            "k",
            "ns",
            21.0,
            Some([21.0, 73.8]),
            "p",
            "reference",
            "fails",
            &flips,
            1000.0,
        );
        assert_eq!(b.status, "the same verdict over the whole band");
        let b = describe(
            "c",
            Fidelity::Simulated,
            "k",
            "ns",
            21.0,
            Some([21.0, 73.8]),
            "p",
            "reference",
            "holds",
            &[],
            1000.0,
        );
        assert_eq!(b.status, "does not test the input");
        assert!(
            b.sentence.contains("holds for every k from 0 to 1000 ns"),
            "{}",
            b.sentence
        );
    }
}
