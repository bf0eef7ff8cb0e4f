//! A spec and a profile expanded into points: one system x one parameter combination.

use crate::spec::{Fidelity, Spec};
use crate::value::{Params, params_key};

/// One unit of work: a system at one parameter combination, with its repetitions.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Point {
    /// Stable id: a hash of the system and the parameters (so resume finds it again).
    pub id: String,
    pub system: String,
    pub params: Params,
    pub repetitions: u32,
    pub warmup: u32,
}

impl Point {
    pub fn label(&self) -> String {
        format!("{} {}", self.system, params_key(&self.params))
    }
}

/// The planned run: every point in every class (`fidelities`, best first).
#[derive(Debug, Clone)]
pub struct Plan {
    pub experiment: String,
    pub profile: String,
    /// The first class (`fidelities[0]`).
    pub fidelity: Fidelity,
    pub fidelities: Vec<Fidelity>,
    pub points: Vec<Point>,
    pub estimated_seconds: f64,
    /// The rows of a class the plan does not run here, and why (a testbed without the devices a
    /// system's `hardware` rows need): left out of [`Plan::entries`], recorded in the manifest,
    /// and judged `not checkable here` with their sentence, never dropped silently.
    pub not_here: Vec<NotHere>,
}

/// One system's rows of one class that this testbed cannot run.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NotHere {
    pub fidelity: Fidelity,
    pub system: String,
    /// What is missing, as a sentence: `needs an FPGA board (XRT)`.
    pub why: String,
}

/// One unit of a run: a point in one class.
#[derive(Debug, Clone, Copy)]
pub struct Entry<'a> {
    pub fidelity: Fidelity,
    pub point: &'a Point,
}

impl Entry<'_> {
    /// The key of the entry in the run's store (`point_done`): the class and the point's id.
    pub fn key(&self) -> String {
        run_key(self.fidelity, &self.point.id)
    }
}

/// The store key of a point in a class.
pub fn run_key(fidelity: Fidelity, point_id: &str) -> String {
    format!("{fidelity}-{point_id}")
}

impl Plan {
    /// Every (class, point) of the run in the order it runs: class by class, best first; the
    /// rows [`Plan::not_here`] lists are not among them.
    pub fn entries(&self) -> Vec<Entry<'_>> {
        self.fidelities
            .iter()
            .flat_map(|f| {
                self.points
                    .iter()
                    .filter(move |p| self.why_not_here(*f, &p.system).is_none())
                    .map(move |p| Entry {
                        fidelity: *f,
                        point: p,
                    })
            })
            .collect()
    }

    /// Why a system's rows of a class do not run here (None: they run).
    pub fn why_not_here(&self, fidelity: Fidelity, system: &str) -> Option<&str> {
        why_not_here(&self.not_here, fidelity, system)
    }

    /// Leave out of the `class` rows every system for which `lacks` names what this testbed
    /// lacks (`needs ...`); the other classes and systems keep every row.
    pub fn leave_out(&mut self, class: Fidelity, lacks: impl Fn(&str) -> Option<String>) {
        if !self.fidelities.contains(&class) {
            return;
        }
        let mut out: Vec<NotHere> = Vec::new();
        for p in &self.points {
            let s = p.system.as_str();
            if why_not_here(&out, class, s).is_none()
                && why_not_here(&self.not_here, class, s).is_none()
                && let Some(why) = lacks(s)
            {
                out.push(NotHere {
                    fidelity: class,
                    system: s.to_string(),
                    why,
                });
            }
        }
        self.not_here.extend(out);
    }
}

/// Why `system`'s rows of `fidelity` are in `not_here` (a manifest's `rows_not_here`).
pub fn why_not_here<'a>(
    not_here: &'a [NotHere],
    fidelity: Fidelity,
    system: &str,
) -> Option<&'a str> {
    not_here
        .iter()
        .find(|n| n.fidelity == fidelity && n.system == system)
        .map(|n| n.why.as_str())
}

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("{experiment} has no profile `{profile}` (profiles: {available})")]
    NoProfile {
        experiment: String,
        profile: String,
        available: String,
    },
    #[error(
        "{experiment} is planned, not implemented yet: its systems do not exist in this version"
    )]
    Planned { experiment: String },
    #[error("{experiment} supports {supported}; `{asked}` is not one of them")]
    FidelityNotInSpec {
        experiment: String,
        asked: Fidelity,
        supported: String,
    },
    #[error("{experiment}: two points of the plan are the same ({label}): list each value once")]
    DuplicatePoint { experiment: String, label: String },
    #[error("{experiment}: no implementation can produce `{asked}` here ({why})")]
    FidelityUnavailable {
        experiment: String,
        asked: Fidelity,
        why: String,
    },
}

/// The id of a point: 12 hex digits of a 64-bit FNV-1a hash over the system and the canonical
/// parameters. Stable across runs and versions (resume relies on it); not cryptographic, and
/// with 48 bits a collision among even a million points is unlikely (p < 2e-3). `expand` checks
/// that the ids of a plan are unique and fails loudly if they are not.
pub fn point_id(system: &str, params: &Params) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    eat(system.as_bytes());
    eat(&[0]);
    eat(params_key(params).as_bytes());
    const HEX: &[u8; 16] = b"0123456789abcdef";
    (0..12)
        .rev()
        .map(|i| char::from(HEX[((h >> (i * 4)) & 0xf) as usize]))
        .collect()
}

/// Expand a spec's profile into points, in a stable order: grid blocks, then the cartesian
/// product of each block (last parameter fastest), then systems.
pub fn expand(spec: &Spec, profile: &str) -> Result<Vec<Point>, PlanError> {
    let prof = spec
        .profiles
        .get(profile)
        .ok_or_else(|| PlanError::NoProfile {
            experiment: spec.id.clone(),
            profile: profile.to_string(),
            available: spec.profiles.keys().cloned().collect::<Vec<_>>().join(", "),
        })?;
    let mut base = spec.parameters.clone();
    base.extend(prof.parameters.clone());
    let mut combos: Vec<Params> = Vec::new();
    if prof.grid.is_empty() {
        combos.push(base.clone());
    }
    for block in &prof.grid {
        let mut acc = vec![base.clone()];
        for (k, vals) in block {
            let mut next = Vec::with_capacity(acc.len() * vals.len());
            for p in &acc {
                for v in vals {
                    let mut q = p.clone();
                    q.insert(k.clone(), v.clone());
                    next.push(q);
                }
            }
            acc = next;
        }
        combos.extend(acc);
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut points = Vec::new();
    for params in combos {
        for system in &spec.systems {
            let id = point_id(system, &params);
            if !seen.insert(id.clone()) {
                return Err(PlanError::DuplicatePoint {
                    experiment: spec.id.clone(),
                    label: format!("{system} {}", params_key(&params)),
                });
            }
            {
                points.push(Point {
                    id,
                    system: system.clone(),
                    params: params.clone(),
                    repetitions: prof.repetitions,
                    warmup: prof.warmup,
                });
            }
        }
    }
    Ok(points)
}

/// Choose the fidelity class: the one asked for, or the best of the spec's classes that an
/// implementation offers (`available`: the classes the workload implements and the testbed allows).
pub fn choose_fidelity(
    spec: &Spec,
    asked: Option<Fidelity>,
    available: &[Fidelity],
) -> Result<Fidelity, PlanError> {
    if let Some(a) = asked {
        if !spec.fidelity.contains(&a) {
            return Err(PlanError::FidelityNotInSpec {
                experiment: spec.id.clone(),
                asked: a,
                supported: spec
                    .fidelity
                    .iter()
                    .map(|f| f.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        if !available.contains(&a) {
            return Err(PlanError::FidelityUnavailable {
                experiment: spec.id.clone(),
                asked: a,
                why: format!(
                    "available here: {}",
                    if available.is_empty() {
                        "none".to_string()
                    } else {
                        available
                            .iter()
                            .map(|f| f.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                ),
            });
        }
        return Ok(a);
    }
    spec.fidelity
        .iter()
        .copied()
        .find(|f| available.contains(f))
        .ok_or_else(|| PlanError::FidelityUnavailable {
            experiment: spec.id.clone(),
            asked: spec.fidelity[0],
            why: "none of the spec's classes is implemented or available".into(),
        })
}

/// Choose the classes of a run: the ones asked for (each must be in the spec and available), or,
/// when none is asked for, every class of the spec that is available here, in the spec's order.
pub fn choose_classes(
    spec: &Spec,
    asked: &[Fidelity],
    available: &[Fidelity],
) -> Result<Vec<Fidelity>, PlanError> {
    if asked.is_empty() {
        let all: Vec<Fidelity> = spec
            .fidelity
            .iter()
            .copied()
            .filter(|f| available.contains(f))
            .collect();
        if all.is_empty() {
            // the same error as asking for the best class
            choose_fidelity(spec, None, available)?;
        }
        return Ok(all);
    }
    let mut out = Vec::new();
    for a in asked {
        let f = choose_fidelity(spec, Some(*a), available)?;
        if !out.contains(&f) {
            out.push(f);
        }
    }
    Ok(out)
}

/// Build the plan of a run over one or more classes (`asked` empty: every available class).
pub fn plan_classes(
    spec: &Spec,
    profile: &str,
    asked: &[Fidelity],
    available: &[Fidelity],
) -> Result<Plan, PlanError> {
    if spec.status == crate::spec::Status::Planned {
        return Err(PlanError::Planned {
            experiment: spec.id.clone(),
        });
    }
    let points = expand(spec, profile)?;
    let fidelities = choose_classes(spec, asked, available)?;
    let estimated_seconds = spec
        .profiles
        .get(profile)
        .map(|p| p.estimated_seconds)
        .unwrap_or(0.0);
    Ok(Plan {
        experiment: spec.id.clone(),
        profile: profile.to_string(),
        fidelity: fidelities[0],
        fidelities,
        points,
        estimated_seconds,
        not_here: Vec::new(),
    })
}

/// Build the plan of a run in one class (the one asked for, or the best available).
pub fn plan(
    spec: &Spec,
    profile: &str,
    asked: Option<Fidelity>,
    available: &[Fidelity],
) -> Result<Plan, PlanError> {
    if spec.status == crate::spec::Status::Planned {
        return Err(PlanError::Planned {
            experiment: spec.id.clone(),
        });
    }
    let one = choose_fidelity(spec, asked, available)?;
    plan_classes(spec, profile, &[one], available)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn fig7() -> Spec {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../experiments/netreduce/fig7.yaml"
        ))
        .expect("spec");
        Spec::from_yaml(Path::new("fig7.yaml"), &text).expect("valid")
    }

    #[test]
    fn expands_blocks_times_systems() {
        let s = fig7();
        let pts = expand(&s, "quick").expect("quick");
        // A: 11 B_intra; B: 3 x 6; C: 3 x 7 -> 50 combos x 3 systems
        assert_eq!(pts.len(), (11 + 18 + 21) * 3);
        let first = &pts[0];
        assert_eq!(first.params["n"].as_f64(), Some(8.0));
        assert_eq!(first.params["panel"].to_string(), "A");
        let ids: std::collections::BTreeSet<_> = pts.iter().map(|p| p.id.clone()).collect();
        assert_eq!(ids.len(), pts.len(), "ids are unique");
        // stable across calls
        assert_eq!(expand(&s, "quick").expect("again")[17].id, pts[17].id);
    }

    #[test]
    fn every_available_class_by_default_or_the_listed_ones() {
        let s = fig7(); // fidelity: [modelled, simulated]
        let both = [Fidelity::Simulated, Fidelity::Modelled];
        let p = plan_classes(&s, "quick", &[], &both).expect("plan");
        assert_eq!(p.fidelities, vec![Fidelity::Modelled, Fidelity::Simulated]);
        assert_eq!(p.entries().len(), 2 * p.points.len());
        let keys: std::collections::BTreeSet<_> = p.entries().iter().map(|e| e.key()).collect();
        assert_eq!(
            keys.len(),
            2 * p.points.len(),
            "keys are unique across classes"
        );
        // only what is available here
        let p = plan_classes(&s, "quick", &[], &[Fidelity::Simulated]).expect("plan");
        assert_eq!(p.fidelities, vec![Fidelity::Simulated]);
        // a list picks several, in the order given
        let p = plan_classes(
            &s,
            "quick",
            &[Fidelity::Simulated, Fidelity::Modelled],
            &both,
        )
        .expect("plan");
        assert_eq!(p.fidelities, vec![Fidelity::Simulated, Fidelity::Modelled]);
        assert!(plan_classes(&s, "quick", &[Fidelity::Emulated], &both).is_err());
        assert!(plan_classes(&s, "quick", &[], &[Fidelity::Hardware]).is_err());
    }

    /// A class's rows of a system the testbed cannot run leave that class's entries only, each
    /// with its sentence; the other class keeps every row.
    #[test]
    fn rows_left_out_of_one_class_keep_their_reason() {
        let s = fig7();
        let both = [Fidelity::Simulated, Fidelity::Modelled];
        let mut p = plan_classes(&s, "quick", &[], &both).expect("plan");
        let n = p.points.len();
        let sys: Vec<String> = s.systems.clone();
        let per_system = p.points.iter().filter(|q| q.system == sys[0]).count();
        p.leave_out(Fidelity::Simulated, |x| {
            (x == sys[0]).then(|| "needs a GPU (CUDA)".to_string())
        });
        // asked twice (a resume): no second entry
        p.leave_out(Fidelity::Simulated, |x| {
            (x == sys[0]).then(|| "needs a GPU (CUDA)".to_string())
        });
        assert_eq!(
            p.not_here,
            vec![NotHere {
                fidelity: Fidelity::Simulated,
                system: sys[0].clone(),
                why: "needs a GPU (CUDA)".into()
            }]
        );
        let e = p.entries();
        assert_eq!(e.len(), 2 * n - per_system);
        assert!(
            !e.iter()
                .any(|x| x.fidelity == Fidelity::Simulated && x.point.system == sys[0])
        );
        assert_eq!(
            e.iter()
                .filter(|x| x.fidelity == Fidelity::Modelled && x.point.system == sys[0])
                .count(),
            per_system
        );
        assert_eq!(
            p.why_not_here(Fidelity::Simulated, &sys[0]),
            Some("needs a GPU (CUDA)")
        );
        assert_eq!(p.why_not_here(Fidelity::Modelled, &sys[0]), None);
        // a class the plan does not run is left alone
        p.leave_out(Fidelity::Hardware, |_| Some("needs everything".into()));
        assert_eq!(p.not_here.len(), 1);
    }

    #[test]
    fn unknown_profile_and_fidelity() {
        let s = fig7();
        assert!(
            expand(&s, "huge")
                .expect_err("profile")
                .to_string()
                .contains("profiles: full, quick")
        );
        let e = choose_fidelity(&s, Some(Fidelity::Emulated), &[Fidelity::Modelled])
            .expect_err("not in spec");
        assert!(
            e.to_string().contains("supports modelled, simulated"),
            "{e}"
        );
        let e = choose_fidelity(&s, Some(Fidelity::Simulated), &[Fidelity::Modelled])
            .expect_err("unavailable");
        assert!(e.to_string().contains("available here: modelled"), "{e}");
        assert_eq!(
            choose_fidelity(&s, None, &[Fidelity::Modelled]).expect("best"),
            Fidelity::Modelled
        );
        assert_eq!(
            choose_fidelity(&s, None, &[Fidelity::Simulated, Fidelity::Modelled]).expect("best"),
            Fidelity::Modelled,
            "the spec's order is the preference"
        );
    }
}
