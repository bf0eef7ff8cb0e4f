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

/// The planned run.
#[derive(Debug, Clone)]
pub struct Plan {
    pub experiment: String,
    pub profile: String,
    pub fidelity: Fidelity,
    pub points: Vec<Point>,
    pub estimated_seconds: f64,
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

/// Build the plan of a run.
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
    let points = expand(spec, profile)?;
    let fidelity = choose_fidelity(spec, asked, available)?;
    let estimated_seconds = spec
        .profiles
        .get(profile)
        .map(|p| p.estimated_seconds)
        .unwrap_or(0.0);
    Ok(Plan {
        experiment: spec.id.clone(),
        profile: profile.to_string(),
        fidelity,
        points,
        estimated_seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn fig7() -> Spec {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../experiments/netreduce/fig7.yaml"
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
