//! The host profile (`experiments/hosts/*.yaml`): what a host costs, as a declared input.
//!
//! The simulated and modelled classes charge software host stacks (and other host-side work)
//! a cost per frame, per key, per operation. Those costs are an input of the run, never a
//! measurement taken while it runs: a profile file holds every one, each with its provenance
//! (a citation: the paper's table and row, a released client's configuration; or "measured on
//! <machine>, <date>, <method>, N repetitions, spread"), so a simulated verdict is a function of
//! the spec, the profile and the seed alone. `experiments/hosts/reference.yaml` is the default;
//! `reproduce --host-profile FILE` runs another, `inabench calibrate` writes this machine's.
//!
//! The file has two maps of costs, both open (a crate adds an entry to the reference profile
//! and reads it, no code here changes):
//!
//! ```yaml
//! name: reference
//! description: what this profile is
//! systems:                     # per system, per code path, per quantity
//!   atp:
//!     worker:
//!       frame: {value: 21.0, unit: ns, provenance: "NetReduce Table 1, row ...", band: [16, 96]}
//! costs:                       # named inputs that belong to no one system's code path
//!   osu_allreduce_8: {value: 12.5, unit: us, provenance: "..."}
//! ```
//!
//! An entry is addressed by a dotted key: `systems.<system>.<path>.<quantity>` or
//! `costs.<name>` ([`HostProfile::get`]). Reading is strict, in the spec reader's style: an
//! unknown or misspelt field, a wrong type, a negative or non-finite value, a band whose ends
//! are out of order, an empty provenance, and (checked against the reference profile,
//! [`HostProfile::check_covers`]) a system, path, quantity or cost the reference has and this
//! file lacks, or one it has that the reference does not, are each one sentence with the file,
//! the line and the field, and nothing runs.

use crate::spec::{Seg, line_of};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One declared input: its value, unit, where it comes from, and the range a reader on another
/// host (or another reading of the source) could plausibly have.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cost {
    pub value: f64,
    /// `ns`, `us`, `ms`, `s`, `count`, `bytes`, `Gbps`, ... (free text, shown beside the value)
    pub unit: String,
    /// Where the value comes from: a citation, or the measurement's machine, date, method,
    /// repetitions and spread.
    pub provenance: String,
    /// The plausible range `[lo, hi]` of the input; a verdict whose break-even lies inside it is
    /// `host-dependent` (see `core::claims`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub band: Option<[f64; 2]>,
}

/// The costs of one system: code path (`worker`, `server`, `client`, ...) to quantity to cost.
pub type SystemCosts = BTreeMap<String, BTreeMap<String, Cost>>;

/// A host profile as written in its file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostProfile {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub systems: BTreeMap<String, SystemCosts>,
    #[serde(default)]
    pub costs: BTreeMap<String, Cost>,
    /// The file it was read from (set by the reader, not written in the YAML; kept when a job
    /// carries the profile to an agent).
    #[serde(default, skip_serializing_if = "is_empty_path")]
    pub file: PathBuf,
    /// SHA-256 of the file's bytes (set by the reader, as `file`): the manifest and the report
    /// name it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sha256: String,
}

/// A profile error: one sentence with the file, line and field.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}{}: {}{}", file.display(), line.map(|l| format!(":{l}")).unwrap_or_default(), field.as_ref().map(|f| format!("field `{f}`: ")).unwrap_or_default(), message)]
pub struct ProfileError {
    pub file: PathBuf,
    pub line: Option<usize>,
    pub field: Option<String>,
    pub message: String,
}

/// Where the reference profile lives, relative to the suite's root.
pub const REFERENCE: &str = "experiments/hosts/reference.yaml";

impl HostProfile {
    /// Parse and check a profile's text; `file` is used in error messages.
    pub fn from_yaml(file: &Path, text: &str) -> Result<HostProfile, ProfileError> {
        let mut p: HostProfile = serde_saphyr::from_str(text).map_err(|e| {
            let line = e.location().map(|l| l.line() as usize).filter(|l| *l > 0);
            let msg = e.to_string();
            let first = msg
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or(&msg)
                .trim();
            let first = first.strip_prefix("error: ").unwrap_or(first);
            // serde-saphyr starts with "line L column C: "; the line is ours already
            let first = match first.split_once(": ") {
                Some((at, rest)) if at.starts_with("line ") && at.contains(" column ") => rest,
                _ => first,
            };
            // serde names the offending field between backticks (`unknown field `vlaue``)
            let field = first
                .split('`')
                .nth(1)
                .filter(|_| first.contains("field"))
                .map(str::to_string);
            ProfileError {
                file: file.to_path_buf(),
                line,
                field,
                message: first.trim_end_matches('.').to_string(),
            }
        })?;
        p.file = file.to_path_buf();
        p.sha256 = crate::store::sha256_hex(text.as_bytes());
        p.check(text)?;
        Ok(p)
    }

    /// Read and check a profile file.
    pub fn load(file: &Path) -> Result<HostProfile, ProfileError> {
        let text = std::fs::read_to_string(file).map_err(|e| ProfileError {
            file: file.to_path_buf(),
            line: None,
            field: None,
            message: format!("cannot read the host profile: {e}"),
        })?;
        HostProfile::from_yaml(file, &text)
    }

    /// Every entry, by its dotted key, in key order.
    pub fn entries(&self) -> Vec<(String, &Cost)> {
        let mut v = Vec::new();
        for (s, paths) in &self.systems {
            for (p, qs) in paths {
                for (q, c) in qs {
                    v.push((format!("systems.{s}.{p}.{q}"), c));
                }
            }
        }
        for (n, c) in &self.costs {
            v.push((format!("costs.{n}"), c));
        }
        v
    }

    /// The entry at a dotted key (`systems.atp.worker.frame`, `costs.osu_allreduce_8`).
    pub fn get(&self, key: &str) -> Result<&Cost, ProfileError> {
        let parts: Vec<&str> = key.split('.').collect();
        let found = match parts.as_slice() {
            ["systems", s, p, q] => self
                .systems
                .get(*s)
                .and_then(|ps| ps.get(*p))
                .and_then(|qs| qs.get(*q)),
            ["costs", n] => self.costs.get(*n),
            _ => {
                return Err(self.missing(
                    key,
                    "is not a profile key (`systems.<system>.<path>.<quantity>` or `costs.<name>`)",
                ));
            }
        };
        found.ok_or_else(|| self.missing(key, "is not in this host profile"))
    }

    /// The value at a dotted key.
    pub fn value(&self, key: &str) -> Result<f64, ProfileError> {
        self.get(key).map(|c| c.value)
    }

    /// `systems.<system>.<path>.<quantity>`'s value.
    pub fn system_value(
        &self,
        system: &str,
        path: &str,
        quantity: &str,
    ) -> Result<f64, ProfileError> {
        self.value(&format!("systems.{system}.{path}.{quantity}"))
    }

    /// Whether the profile has an entry at `key`.
    pub fn has(&self, key: &str) -> bool {
        self.get(key).is_ok()
    }

    /// The same profile with the entry at `key` set to `value` (the break-even search's
    /// reruns); its provenance says so and its hash names the change.
    pub fn with_value(&self, key: &str, value: f64) -> Result<HostProfile, ProfileError> {
        if !(value.is_finite() && value >= 0.0) {
            return Err(self.missing(key, &format!("cannot be set to {value}")));
        }
        let mut p = self.clone();
        let slot = match key.split('.').collect::<Vec<_>>().as_slice() {
            ["systems", s, q, k] => p
                .systems
                .get_mut(*s)
                .and_then(|ps| ps.get_mut(*q))
                .and_then(|qs| qs.get_mut(*k)),
            ["costs", n] => p.costs.get_mut(*n),
            _ => None,
        };
        let c = slot.ok_or_else(|| self.missing(key, "is not in this host profile"))?;
        c.value = value;
        c.provenance = format!("set to {value} to find a break-even ({})", c.provenance);
        p.sha256 = crate::store::sha256_hex(format!("{}+{key}={value}", self.sha256).as_bytes());
        Ok(p)
    }

    /// A short label for reports and the manifest: the name and the hash's first 12 digits.
    pub fn label(&self) -> String {
        format!(
            "{} ({}, sha256 {})",
            self.name,
            self.file.display(),
            &self.sha256[..self.sha256.len().min(12)]
        )
    }

    /// The profile as YAML (what `calibrate` writes; without the reader's `file` and `sha256`).
    pub fn to_yaml(&self) -> String {
        let mut p = self.clone();
        p.file = PathBuf::new();
        p.sha256.clear();
        serde_saphyr::to_string(&p).unwrap_or_default()
    }

    /// Check that this profile gives every system, path, quantity and cost the reference gives,
    /// and nothing the reference does not (a misspelt quantity would otherwise be read by no
    /// one and the reference's value used in silence). `text` is this profile's file text, for
    /// lines.
    pub fn check_covers(&self, reference: &HostProfile, text: &str) -> Result<(), ProfileError> {
        use Seg::{Key as K, KeyItself as KI};
        let err = |at: &[Seg], field: String, message: String| ProfileError {
            file: self.file.clone(),
            line: line_of(text, at),
            field: Some(field),
            message,
        };
        let refname = reference.file.display().to_string();
        for (s, paths) in &reference.systems {
            let Some(mine) = self.systems.get(s) else {
                return Err(err(
                    &[KI("systems")],
                    format!("systems.{s}"),
                    format!(
                        "no entry for system `{s}`, which the reference profile {refname} has (every profile gives every system the suite charges)"
                    ),
                ));
            };
            for (p, qs) in paths {
                let Some(mq) = mine.get(p) else {
                    return Err(err(
                        &[K("systems"), KI(s)],
                        format!("systems.{s}.{p}"),
                        format!(
                            "no code path `{p}` for `{s}`, which the reference profile {refname} has"
                        ),
                    ));
                };
                for q in qs.keys() {
                    if !mq.contains_key(q) {
                        return Err(err(
                            &[K("systems"), K(s), KI(p)],
                            format!("systems.{s}.{p}.{q}"),
                            format!("no quantity `{q}`, which the reference profile {refname} has"),
                        ));
                    }
                }
            }
        }
        for n in reference.costs.keys() {
            if !self.costs.contains_key(n) {
                return Err(err(
                    &[KI("costs")],
                    format!("costs.{n}"),
                    format!("no cost `{n}`, which the reference profile {refname} has"),
                ));
            }
        }
        // and nothing the reference does not have
        for (key, _) in self.entries() {
            if reference.get(&key).is_err() {
                let parts: Vec<&str> = key.split('.').collect();
                let at: Vec<Seg> = match parts.as_slice() {
                    ["systems", s, p, q] => {
                        if !reference.systems.contains_key(*s) {
                            vec![K("systems"), KI(s)]
                        } else if !reference.systems[*s].contains_key(*p) {
                            vec![K("systems"), K(s), KI(p)]
                        } else {
                            vec![K("systems"), K(s), K(p), KI(q)]
                        }
                    }
                    [_, n] => vec![K("costs"), KI(n)],
                    _ => vec![],
                };
                return Err(err(
                    &at,
                    key.clone(),
                    format!(
                        "unknown key: the reference profile {refname} has no `{key}`{}",
                        nearest(&key, &reference.entries())
                    ),
                ));
            }
        }
        Ok(())
    }

    fn missing(&self, key: &str, what: &str) -> ProfileError {
        ProfileError {
            file: self.file.clone(),
            line: None,
            field: Some(key.to_string()),
            message: format!("`{key}` {what}"),
        }
    }

    /// The checks after parsing: every value finite and not negative, bands in order, every
    /// provenance and unit written.
    fn check(&self, text: &str) -> Result<(), ProfileError> {
        use Seg::Key as K;
        let err = |at: &[Seg], field: &str, message: String| ProfileError {
            file: self.file.clone(),
            line: line_of(text, at),
            field: Some(field.to_string()),
            message,
        };
        if self.name.trim().is_empty() {
            return Err(err(&[K("name")], "name", "a profile needs a name".into()));
        }
        let mut all: Vec<(Vec<Seg>, String, &Cost)> = Vec::new();
        for (s, paths) in &self.systems {
            for (p, qs) in paths {
                for (q, c) in qs {
                    all.push((
                        vec![K("systems"), K(s), K(p), K(q)],
                        format!("systems.{s}.{p}.{q}"),
                        c,
                    ));
                }
            }
        }
        for (n, c) in &self.costs {
            all.push((vec![K("costs"), K(n)], format!("costs.{n}"), c));
        }
        for (mut at, key, c) in all {
            let field = |f: &str| format!("{key}.{f}");
            if !(c.value.is_finite() && c.value >= 0.0) {
                at.push(K("value"));
                return Err(err(
                    &at,
                    &field("value"),
                    format!("a cost is a finite number of at least 0, not {}", c.value),
                ));
            }
            if c.provenance.trim().is_empty() {
                at.push(K("provenance"));
                return Err(err(
                    &at,
                    &field("provenance"),
                    "every cost says where it comes from (a citation, or the machine, date, method, repetitions and spread of its measurement)".into(),
                ));
            }
            if c.unit.trim().is_empty() {
                at.push(K("unit"));
                return Err(err(
                    &at,
                    &field("unit"),
                    "every cost has a unit (`ns`, `us`, `count`, ...)".into(),
                ));
            }
            if let Some([lo, hi]) = c.band
                && !(lo.is_finite() && hi.is_finite() && lo >= 0.0 && lo <= hi)
            {
                at.push(K("band"));
                return Err(err(
                    &at,
                    &field("band"),
                    format!("a band is [lo, hi] with 0 <= lo <= hi, not [{lo}, {hi}]"),
                ));
            }
        }
        Ok(())
    }
}

fn is_empty_path(p: &Path) -> bool {
    p.as_os_str().is_empty()
}

/// ", did you mean `x`?" for the nearest reference key, if one is close.
fn nearest(key: &str, entries: &[(String, &Cost)]) -> String {
    entries
        .iter()
        .map(|(k, _)| (strsim::levenshtein(key, k), k))
        .min()
        .filter(|(d, _)| *d <= 4)
        .map(|(_, k)| format!(" (did you mean `{k}`?)"))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference() -> (String, HostProfile) {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../experiments/hosts/reference.yaml"
        );
        let text = std::fs::read_to_string(path).expect("the reference profile in the tree");
        let p = HostProfile::from_yaml(Path::new("reference.yaml"), &text)
            .expect("the reference profile reads");
        (text, p)
    }

    fn load(text: &str) -> Result<HostProfile, ProfileError> {
        let (_, r) = reference();
        let p = HostProfile::from_yaml(Path::new("mine.yaml"), text)?;
        p.check_covers(&r, text)?;
        Ok(p)
    }

    const SMALL: &str = "name: small\nsystems:\n  atp:\n    worker:\n      frame: {value: 21.0, unit: ns, provenance: \"a citation\", band: [16, 96]}\ncosts:\n  x: {value: 1, unit: us, provenance: p}\n";

    #[test]
    fn the_reference_profile_reads_and_covers_itself_and_every_entry_has_provenance() {
        let (text, r) = reference();
        r.check_covers(&r, &text).unwrap();
        assert!(!r.entries().is_empty());
        for (k, c) in r.entries() {
            assert!(c.provenance.len() > 20, "{k}: provenance too thin");
        }
        assert_eq!(r.sha256.len(), 64);
    }

    #[test]
    fn entries_are_read_by_dotted_key() {
        let p = HostProfile::from_yaml(Path::new("s.yaml"), SMALL).unwrap();
        assert_eq!(p.value("systems.atp.worker.frame").unwrap(), 21.0);
        assert_eq!(p.system_value("atp", "worker", "frame").unwrap(), 21.0);
        assert_eq!(p.get("costs.x").unwrap().unit, "us");
        assert_eq!(
            p.get("systems.atp.worker.frame").unwrap().band,
            Some([16.0, 96.0])
        );
        let e = p.value("systems.atp.worker.frame_tx").unwrap_err();
        assert!(
            e.to_string()
                .contains("`systems.atp.worker.frame_tx` is not in this host profile"),
            "{e}"
        );
        assert!(p.get("atp.frame").is_err());
        let q = p.with_value("systems.atp.worker.frame", 40.0).unwrap();
        assert_eq!(q.value("systems.atp.worker.frame").unwrap(), 40.0);
        assert_ne!(q.sha256, p.sha256);
        assert!(p.with_value("systems.atp.worker.frame", -1.0).is_err());
    }

    #[test]
    fn a_missing_system_is_one_sentence_with_file_line_and_field() {
        let (text, _) = reference();
        // drop the `switchml:` block (its lines up to `costs:`)
        let lines: Vec<&str> = text.lines().collect();
        let from = lines.iter().position(|l| *l == "  switchml:").unwrap();
        let to = lines.iter().position(|l| l.starts_with("costs:")).unwrap();
        let cut = [&lines[..from], &lines[to..]].concat().join("\n");
        let e = load(&cut).unwrap_err();
        let line = lines.iter().position(|l| *l == "systems:").unwrap() + 1;
        assert_eq!(e.line, Some(line), "{e}");
        assert_eq!(e.field.as_deref(), Some("systems.switchml"));
        let s = e.to_string();
        assert!(
            s.starts_with(&format!(
                "mine.yaml:{line}: field `systems.switchml`: no entry for system `switchml`"
            )),
            "{s}"
        );
        assert_eq!(s.matches(". ").count(), 0, "one sentence: {s}");
    }

    #[test]
    fn a_negative_cost_is_one_sentence_with_file_line_and_field() {
        let (text, _) = reference();
        let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
        let frame = lines.iter().position(|l| l == "      frame:").unwrap();
        let i = frame
            + lines[frame..]
                .iter()
                .position(|l| l.starts_with("        value:"))
                .unwrap();
        lines[i] = "        value: -5".into();
        let e = load(&lines.join("\n")).unwrap_err();
        assert_eq!(e.line, Some(i + 1), "{e}");
        assert_eq!(e.field.as_deref(), Some("systems.atp.worker.frame.value"));
        assert!(
            e.to_string()
                .contains("a cost is a finite number of at least 0, not -5"),
            "{e}"
        );
    }

    #[test]
    fn an_unknown_key_is_one_sentence_with_file_line_and_field() {
        // a misspelt field of a cost: serde's own error, with the line
        let bad = SMALL.replace("provenance: p}", "provenence: p}");
        let e = HostProfile::from_yaml(Path::new("s.yaml"), &bad).unwrap_err();
        assert_eq!(e.line, Some(7), "{e}");
        assert_eq!(e.field.as_deref(), Some("provenence"), "{e}");
        assert!(
            e.to_string()
                .starts_with("s.yaml:7: field `provenence`: unknown field"),
            "{e}"
        );
        // a misspelt top-level key
        let e = HostProfile::from_yaml(Path::new("s.yaml"), &format!("{SMALL}sytems: {{}}\n"))
            .unwrap_err();
        assert_eq!(e.line, Some(8), "{e}");
        assert_eq!(e.field.as_deref(), Some("sytems"), "{e}");
        // a misspelt quantity: the reference's is missing
        let (text, _) = reference();
        let e = load(&text.replacen("      threads:", "      threadz:", 1)).unwrap_err();
        assert!(e.to_string().contains("no quantity `threads`"), "{e}");
        // an extra quantity beside the reference's own: the unknown key, at its line
        let i = text.lines().position(|l| l == "      threads:").unwrap();
        let extra = text.replacen(
            "      threads:",
            "      threadz:\n        value: 1\n        unit: count\n        provenance: pp\n      threads:",
            1,
        );
        let e = load(&extra).unwrap_err();
        assert_eq!(e.line, Some(i + 1), "{e}");
        assert_eq!(
            e.field.as_deref(),
            Some("systems.atp.worker.threadz"),
            "{e}"
        );
        assert!(e.to_string().contains("unknown key"), "{e}");
        assert!(
            e.to_string()
                .contains("did you mean `systems.atp.worker.threads`"),
            "{e}"
        );
    }

    #[test]
    fn bands_in_order_and_provenance_written() {
        let e = HostProfile::from_yaml(Path::new("s.yaml"), &SMALL.replace("[16, 96]", "[96, 16]"))
            .unwrap_err();
        assert_eq!(e.line, Some(5), "{e}");
        assert!(e.to_string().contains("band"), "{e}");
        let e = HostProfile::from_yaml(
            Path::new("s.yaml"),
            &SMALL.replace("\"a citation\"", "\"\""),
        )
        .unwrap_err();
        assert!(e.to_string().contains("says where it comes from"), "{e}");
    }
}
