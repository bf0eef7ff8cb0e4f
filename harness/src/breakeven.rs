//! Break-even values: for every claim that declares the host profile inputs it rests on
//! (`rests_on:` in the spec), the value of that input at which its verdict flips, found by
//! rerunning the claim's points with the input moved (a bounded grid, then bisection between
//! grid values whose verdicts differ) and judging the claim again on the changed rows.
//!
//! What is rerun: in each class the claim was judged in (simulated, modelled, functional: the
//! classes whose workloads charge the profile), every point of the systems the keys name
//! (`systems.<system>....`; a `costs.<name>` key reruns every system), repetition 0 with the
//! run's seed, the other systems' rows kept as measured. One repetition suffices where the class
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
use inabench_core::store::{self, Row};
use inabench_report::analysis::{PlanStates, aggregate};
use inabench_report::types::BreakEven;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::AtomicBool;

/// Grid values tried before bisecting (besides 0, the profile's value and the band's ends).
const GRID: usize = 8;
/// Bisection steps between two grid values whose verdicts differ.
const STEPS: usize = 10;
/// At most this many flips are located per claim and class.
const MAX_FLIPS: usize = 2;

/// The classes whose workloads charge the host profile.
fn profile_classes() -> [Fidelity; 3] {
    [
        Fidelity::Simulated,
        Fidelity::Modelled,
        Fidelity::Functional,
    ]
}

/// Solve the break-evens of a finished run's claims that declare `rests_on:`; writes
/// `breakeven.json` into the run folder (nothing when no claim declares one). `log` hears one
/// line per claim.
pub fn solve(
    run_dir: &Path,
    registry: &Registry,
    profile: &HostProfile,
    log: &mut dyn FnMut(String),
) -> Result<Vec<BreakEven>> {
    let spec = Spec::load(&run_dir.join(store::SPEC_FILE))?;
    if spec.claims.iter().all(|c| c.rests_on.is_empty()) {
        return Ok(Vec::new());
    }
    let manifest = store::read_manifest(run_dir)?;
    let rows = store::read_rows(run_dir)?.rows;
    let planned = PlanStates::of_run(run_dir, &spec, &manifest)?;
    let workload = spec.workload.clone().unwrap_or_default();
    let units: BTreeMap<String, String> = spec
        .metrics
        .iter()
        .map(|m| (m.name.clone(), m.unit.clone()))
        .collect();
    // the points that ran, per class: (class, system) -> points
    let mut points: BTreeMap<(Fidelity, String), BTreeMap<String, Point>> = BTreeMap::new();
    for r in &rows {
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
            let systems: BTreeSet<String> = {
                let p: Vec<&str> = key.split('.').collect();
                (p.len() == 4 && p[0] == "systems")
                    .then(|| p[1].to_string())
                    .into_iter()
                    .collect()
            };
            let all_systems = key.starts_with("costs.");
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
                let rerun_systems: Vec<String> = points
                    .keys()
                    .filter(|(f, s)| *f == class && (all_systems || systems.contains(s)))
                    .map(|(_, s)| s.clone())
                    .collect();
                if rerun_systems.is_empty() {
                    continue;
                }
                let kept: Vec<&Row> = rows
                    .iter()
                    .filter(|r| r.fidelity == class && !rerun_systems.contains(&r.system))
                    .collect();
                let seed = claims_seed(&spec.id, &c.id, class);
                let mut verdict_at = |x: f64| -> Result<String> {
                    let mk = (class, vec![key.clone()], x.to_bits());
                    if !memo.contains_key(&mk) {
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
                                };
                                let mut sink = |e: Event| {
                                    if let Event::Row(r) = e {
                                        new_rows.push(r);
                                    }
                                };
                                // a point that fails at this value has no rows: the judge sees it
                                // missing
                                let _ = run_here(registry, &job, &cancel, &mut sink);
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
                let top = 16.0 * band.map_or(value, |b| b[1].max(value)).max(1.0);
                let bottom = (band.map_or(value, |b| b[0].min(value)) / 4.0).max(top / 4096.0);
                let mut xs: Vec<f64> = vec![0.0, value, top];
                if let Some([lo, hi]) = band {
                    xs.extend([lo, hi]);
                }
                for i in 0..GRID {
                    xs.push(bottom * (top / bottom).powf(i as f64 / (GRID - 1) as f64));
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
                        if b - a <= 1e-3 * b.max(1.0) {
                            break;
                        }
                        let m = (a + b) / 2.0;
                        if verdict_at(m)? == va {
                            a = m;
                        } else {
                            b = m;
                        }
                    }
                    flips.push(((a + b) / 2.0, va, vb));
                }
                let now = at
                    .iter()
                    .find(|(x, _)| *x == value)
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default();
                let be = describe(
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
                log(format!("{} [{class}]: {}", c.id, be.sentence));
                out.push(be);
            }
        }
    }
    let path = run_dir.join(BREAKEVEN_FILE);
    std::fs::write(&path, serde_json::to_string_pretty(&out)?)
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(out)
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
        .map(|(x, below, above)| format!("{below} below {} {unit}, {above} above", n(*x)))
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
        format!("{now} for every {key} from 0 to {} {unit}", n(top))
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
