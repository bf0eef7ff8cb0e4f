//! Changing a run from the command line without editing its YAML (nccl-tests' `-b/-e/-f`,
//! hyperfine's `--runs/--warmup`): `--set key=v1,v2` gives a parameter the values of every point,
//! `--repetitions N` and `--warmup N` replace the profile's counts.
//!
//! An override is applied to the spec and the changed spec is then read again through
//! [`Spec::from_yaml`], so it passes every check a spec file passes (and nothing runs when it does
//! not); the error is one sentence naming the override and why. The changed spec's text, with a
//! header naming the overrides, is what the run folder keeps as `spec.yaml`.
// OverrideError carries a spec error (file, line, field, text) in one variant; a run meets it
// once, before anything runs, so its size costs nothing worth a Box
#![allow(clippy::result_large_err)]

use crate::catalog::Entry;
use crate::plan;
use crate::spec::Spec;
use crate::value::Scalar;
use std::fmt;

/// `--set key=v1,v2,...`: every point of the profile has `key` set to one of the values (a
/// cartesian product with the profile's other sweeps; one value fixes it).
#[derive(Debug, Clone, PartialEq)]
pub struct SetParam {
    pub key: String,
    pub values: Vec<Scalar>,
    /// As given, for the manifest and the messages.
    pub text: String,
}

impl fmt::Display for SetParam {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.text)
    }
}

/// Every change asked for on the command line.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overrides {
    pub set: Vec<SetParam>,
    pub repetitions: Option<u32>,
    pub warmup: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OverrideError {
    #[error("--set `{0}` is not key=value[,value...]")]
    Syntax(String),
    #[error("--set `{text}`: `{value}` is not a YAML scalar (a number, a string or a boolean)")]
    Value { text: String, value: String },
    #[error("--set `{text}`: {experiment} has no parameter `{key}` (its parameters: {have})")]
    UnknownKey {
        text: String,
        experiment: String,
        key: String,
        have: String,
    },
    #[error(
        "--set `{text}`: `{value}` is {got}, but `{key}` is {want} in {experiment} (e.g. {example})"
    )]
    Kind {
        text: String,
        experiment: String,
        key: String,
        value: String,
        got: &'static str,
        want: &'static str,
        example: String,
    },
    #[error("--set `{text}`: `{value}` is listed twice")]
    Duplicate { text: String, value: String },
    #[error("--set `{0}` and a later --set give `{1}` twice")]
    Twice(String, String),
    #[error("{what} is not valid for {experiment}: {why}")]
    Invalid {
        what: String,
        experiment: String,
        why: String,
    },
}

fn kind(v: &Scalar) -> &'static str {
    match v {
        Scalar::Int(_) | Scalar::Float(_) => "a number",
        Scalar::Str(_) => "a string",
        Scalar::Bool(_) => "a boolean",
    }
}

impl SetParam {
    /// Parse `key=v1,v2`; each value is read as a YAML scalar, as in a spec (`8` a number,
    /// `true` a boolean, `udp` a string).
    pub fn parse(text: &str) -> Result<SetParam, OverrideError> {
        let (key, vals) = text
            .split_once('=')
            .ok_or_else(|| OverrideError::Syntax(text.to_string()))?;
        let key = key.trim();
        if key.is_empty() || vals.trim().is_empty() {
            return Err(OverrideError::Syntax(text.to_string()));
        }
        let mut values: Vec<Scalar> = Vec::new();
        for v in vals.split(',').map(str::trim) {
            let s: Scalar = match serde_saphyr::from_str::<Option<Scalar>>(v) {
                Ok(Some(s)) if !v.is_empty() => s,
                _ => {
                    return Err(OverrideError::Value {
                        text: text.to_string(),
                        value: v.to_string(),
                    });
                }
            };
            if values.iter().any(|x| x.same(&s)) {
                return Err(OverrideError::Duplicate {
                    text: text.to_string(),
                    value: v.to_string(),
                });
            }
            values.push(s);
        }
        Ok(SetParam {
            key: key.to_string(),
            values,
            text: text.to_string(),
        })
    }
}

impl Overrides {
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.repetitions.is_none() && self.warmup.is_none()
    }

    /// The overrides as the manifest and the report record them: `workers=4,8`,
    /// `repetitions=2`, `warmup=1`.
    pub fn describe(&self) -> Vec<String> {
        let mut out: Vec<String> = self.set.iter().map(|s| s.text.clone()).collect();
        if let Some(r) = self.repetitions {
            out.push(format!("repetitions={r}"));
        }
        if let Some(w) = self.warmup {
            out.push(format!("warmup={w}"));
        }
        out
    }

    /// The spec entry with the overrides applied to `profile`, checked like a spec file and
    /// planned once (so a duplicate point is refused here too). Unchanged when empty.
    pub fn apply(&self, entry: &Entry, profile: &str) -> Result<Entry, OverrideError> {
        if self.is_empty() {
            return Ok(entry.clone());
        }
        let mut spec = entry.spec.clone();
        let id = spec.id.clone();
        let invalid = |what: &str, why: String| OverrideError::Invalid {
            what: what.to_string(),
            experiment: id.clone(),
            why,
        };
        let names = spec.parameter_names();
        let mut seen: Vec<&str> = Vec::new();
        for s in &self.set {
            if seen.contains(&s.key.as_str()) {
                return Err(OverrideError::Twice(s.text.clone(), s.key.clone()));
            }
            seen.push(&s.key);
            if !names.contains(&s.key) {
                return Err(OverrideError::UnknownKey {
                    text: s.text.clone(),
                    experiment: id.clone(),
                    key: s.key.clone(),
                    have: names.iter().cloned().collect::<Vec<_>>().join(", "),
                });
            }
            // the kind of value the spec gives the key (any profile): a number stays a number
            let existing = existing_values(&spec, &s.key);
            if let Some(first) = existing.first()
                && existing.iter().all(|e| kind(e) == kind(first))
                && let Some(bad) = s.values.iter().find(|v| kind(v) != kind(first))
            {
                return Err(OverrideError::Kind {
                    text: s.text.clone(),
                    experiment: id.clone(),
                    key: s.key.clone(),
                    value: bad.to_string(),
                    got: kind(bad),
                    want: kind(first),
                    example: first.to_string(),
                });
            }
        }
        let Some(prof) = spec.profiles.get_mut(profile) else {
            return Err(invalid(
                &format!("--profile {profile}"),
                format!(
                    "no such profile (profiles: {})",
                    entry
                        .spec
                        .profiles
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        };
        for s in &self.set {
            prof.parameters.remove(&s.key);
            if prof.grid.is_empty() {
                prof.grid.push(Default::default());
            }
            for block in &mut prof.grid {
                block.insert(s.key.clone(), s.values.clone());
            }
        }
        if let Some(r) = self.repetitions {
            prof.repetitions = r;
        }
        if let Some(w) = self.warmup {
            prof.warmup = w;
        }
        for s in &self.set {
            spec.parameters.remove(&s.key);
        }
        let what = self
            .describe()
            .iter()
            .map(|d| format!("`{d}`"))
            .collect::<Vec<_>>()
            .join(", ");
        let body = serde_saphyr::to_string(&spec)
            .map_err(|e| invalid(&what, format!("the changed spec cannot be written: {e}")))?;
        // read again through every check of a spec file
        let spec = Spec::from_yaml(&entry.file, &body).map_err(|e| {
            invalid(
                &what,
                match &e.field {
                    Some(f) => format!("{f}: {}", e.message),
                    None => e.message.clone(),
                },
            )
        })?;
        plan::expand(&spec, profile).map_err(|e| invalid(&what, e.to_string()))?;
        let text = format!(
            "# {} with the command line's overrides: {}\n{body}",
            entry.file.display(),
            self.describe().join(" ")
        );
        Ok(Entry {
            spec,
            file: entry.file.clone(),
            text,
        })
    }
}

/// Every value the spec gives `key`: fixed, profile and grid, in every profile.
fn existing_values(spec: &Spec, key: &str) -> Vec<Scalar> {
    let mut out: Vec<Scalar> = spec.parameters.get(key).cloned().into_iter().collect();
    for p in spec.profiles.values() {
        out.extend(p.parameters.get(key).cloned());
        for block in &p.grid {
            if let Some(v) = block.get(key) {
                out.extend(v.iter().cloned());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{Catalog, spec_files};
    use std::path::Path;

    fn catalog() -> Catalog {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../experiments");
        // lenient: a spec another change leaves invalid does not hide these checks
        Catalog::from_texts_lenient(spec_files(&dir).expect("the experiments folder"))
            .expect("specs")
    }

    fn set(args: &[&str]) -> Overrides {
        Overrides {
            set: args
                .iter()
                .map(|a| SetParam::parse(a).expect("parses"))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn values_are_read_as_yaml_scalars() {
        let s = SetParam::parse("workers=4, 8,1.5,udp,true").unwrap();
        assert_eq!(s.key, "workers");
        assert_eq!(
            s.values,
            vec![
                Scalar::Int(4),
                Scalar::Int(8),
                Scalar::Float(1.5),
                Scalar::Str("udp".into()),
                Scalar::Bool(true)
            ]
        );
        assert!(matches!(
            SetParam::parse("workers"),
            Err(OverrideError::Syntax(_))
        ));
        assert!(matches!(
            SetParam::parse("workers=4,,8"),
            Err(OverrideError::Value { .. })
        ));
        assert!(matches!(
            SetParam::parse("workers=4,4.0"),
            Err(OverrideError::Duplicate { .. })
        ));
    }

    #[test]
    fn a_fixed_parameter_becomes_a_sweep_of_every_point() {
        let cat = catalog();
        let e = cat.get("netreduce-table6").unwrap();
        let before = plan::expand(&e.spec, "quick").unwrap();
        let mut o = set(&["workers=4,8"]);
        o.repetitions = Some(2);
        o.warmup = Some(1);
        let changed = o.apply(e, "quick").unwrap();
        let after = plan::expand(&changed.spec, "quick").unwrap();
        assert_eq!(after.len(), 2 * before.len());
        for w in [4, 8] {
            let n = after
                .iter()
                .filter(|p| p.params.get("workers") == Some(&Scalar::Int(w)))
                .count();
            assert_eq!(n, before.len(), "workers={w}");
        }
        assert!(after.iter().all(|p| p.repetitions == 2 && p.warmup == 1));
        assert!(!changed.spec.parameters.contains_key("workers"));
        assert!(changed.text.starts_with("# "));
        assert!(changed.text.contains("workers=4,8 repetitions=2 warmup=1"));
        // the other profile is untouched
        assert_eq!(
            plan::expand(&changed.spec, "full").unwrap().len(),
            plan::expand(&e.spec, "full").unwrap().len()
        );
    }

    #[test]
    fn a_grid_value_is_replaced_in_every_block() {
        let cat = catalog();
        let e = cat.get("netreduce-table6").unwrap();
        let changed = set(&["elements=1024"]).apply(e, "quick").unwrap();
        let after = plan::expand(&changed.spec, "quick").unwrap();
        assert!(!after.is_empty());
        assert!(
            after
                .iter()
                .all(|p| p.params.get("elements") == Some(&Scalar::Int(1024)))
        );
    }

    #[test]
    fn a_bad_override_is_one_sentence_naming_the_key() {
        let cat = catalog();
        let e = cat.get("netreduce-table6").unwrap();
        let err = set(&["wrokers=4"]).apply(e, "quick").unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("--set `wrokers=4`: netreduce-table6 has no parameter `wrokers`"));
        assert!(msg.contains("workers"), "{msg}");
        assert!(!msg.contains('\n'));
        let err = set(&["workers=four"]).apply(e, "quick").unwrap_err();
        assert!(
            err.to_string()
                .contains("`four` is a string, but `workers` is a number"),
            "{err}"
        );
        let err = set(&["workers=4", "workers=8"])
            .apply(e, "quick")
            .unwrap_err();
        assert!(matches!(err, OverrideError::Twice(..)));
        // the spec's own check: repetitions must be at least 1
        let o = Overrides {
            repetitions: Some(0),
            ..Default::default()
        };
        let err = o.apply(e, "quick").unwrap_err().to_string();
        assert!(
            err.starts_with("`repetitions=0` is not valid for netreduce-table6: profiles.quick.repetitions: must be at least 1"),
            "{err}"
        );
    }

    /// The changed spec is written and read again: every spec of the catalogue survives that
    /// round trip unchanged, so an override changes only what it names.
    #[test]
    fn every_spec_survives_the_round_trip() {
        let cat = catalog();
        for e in &cat.entries {
            let body = serde_saphyr::to_string(&e.spec).expect("writes");
            let back = Spec::from_yaml(&e.file, &body)
                .unwrap_or_else(|err| panic!("{}: {err}", e.spec.id));
            assert_eq!(
                serde_json::to_value(&back).unwrap(),
                serde_json::to_value(&e.spec).unwrap(),
                "{}",
                e.spec.id
            );
        }
    }
}
