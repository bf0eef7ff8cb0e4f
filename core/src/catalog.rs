//! All specs of a tree: loaded, validated, looked up by id with nearest-id suggestions.

use crate::spec::{Spec, SpecError};
use std::path::{Path, PathBuf};

/// A spec with where it came from and its text (hashed into the run manifest).
#[derive(Debug, Clone)]
pub struct Entry {
    pub spec: Spec,
    pub file: PathBuf,
    pub text: String,
}

#[derive(Debug, Default)]
pub struct Catalog {
    pub entries: Vec<Entry>,
    /// Specs that failed validation (only a lenient catalogue keeps going past them): asking
    /// for one by id gives its error, every other experiment still runs.
    pub invalid: Vec<SpecError>,
}

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error("no experiment `{id}`{}", suggest(.nearest))]
    Unknown { id: String, nearest: Vec<String> },
    #[error("{0}: {1}")]
    Io(PathBuf, std::io::Error),
    #[error("two specs have the id `{id}`: {a} and {b}")]
    Duplicate { id: String, a: String, b: String },
}

fn suggest(n: &[String]) -> String {
    if n.is_empty() {
        String::new()
    } else {
        format!("; did you mean {}?", n.join(", "))
    }
}

impl Catalog {
    /// Build from (file, text) pairs (from disk or embedded in the binary).
    pub fn from_texts<I: IntoIterator<Item = (PathBuf, String)>>(
        items: I,
    ) -> Result<Catalog, CatalogError> {
        let mut entries: Vec<Entry> = Vec::new();
        for (file, text) in items {
            let spec = Spec::from_yaml(&file, &text)?;
            if let Some(prev) = entries.iter().find(|e| e.spec.id == spec.id) {
                return Err(CatalogError::Duplicate {
                    id: spec.id,
                    a: prev.file.display().to_string(),
                    b: file.display().to_string(),
                });
            }
            entries.push(Entry { spec, file, text });
        }
        entries.sort_by_key(|e| order_key(&e.spec));
        Ok(Catalog {
            entries,
            invalid: Vec::new(),
        })
    }

    /// Like `from_texts`, but a spec that fails validation is kept aside in `invalid` instead of
    /// failing the whole catalogue (one broken spec must not stop every other experiment).
    pub fn from_texts_lenient<I: IntoIterator<Item = (PathBuf, String)>>(
        items: I,
    ) -> Result<Catalog, CatalogError> {
        let mut good = Vec::new();
        let mut invalid = Vec::new();
        for (file, text) in items {
            match Spec::from_yaml(&file, &text) {
                Ok(_) => good.push((file, text)),
                Err(e) => invalid.push(e),
            }
        }
        let mut cat = Catalog::from_texts(good)?;
        cat.invalid = invalid;
        Ok(cat)
    }

    /// Load every `*/*.yaml` under `dir` (skipping `testbeds/`).
    pub fn load_dir(dir: &Path) -> Result<Catalog, CatalogError> {
        Catalog::from_texts(spec_files(dir)?)
    }

    pub fn get(&self, id: &str) -> Result<&Entry, CatalogError> {
        if let Some(e) = self.entries.iter().find(|e| e.spec.id == id) {
            return Ok(e);
        }
        // an invalid spec whose file would give this id (experiments/<paper>/<artifact>.yaml)
        if let Some(err) = self.invalid.iter().find(|err| {
            let stem = err.file.file_stem().and_then(|s| s.to_str());
            let paper = err
                .file
                .parent()
                .and_then(|p| p.file_name())
                .and_then(|s| s.to_str());
            matches!((paper, stem), (Some(p), Some(s)) if format!("{p}-{s}") == id)
        }) {
            return Err(CatalogError::Spec(err.clone()));
        }
        Err(CatalogError::Unknown {
            id: id.to_string(),
            nearest: self.nearest(id),
        })
    }

    /// Up to three ids closest to `id` (Jaro-Winkler, with prefix and paper matches first).
    pub fn nearest(&self, id: &str) -> Vec<String> {
        let mut scored: Vec<(f64, &str)> = self
            .entries
            .iter()
            .map(|e| {
                let s = e.spec.id.as_str();
                let mut score = strsim::jaro_winkler(id, s);
                if s.contains(id) || id.contains(s) {
                    score += 0.2;
                }
                (score, s)
            })
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0));
        scored
            .into_iter()
            .filter(|(s, _)| *s > 0.75)
            .take(3)
            .map(|(_, s)| s.to_string())
            .collect()
    }
}

/// Sort by paper (in catalogue order), then by artifact number.
fn order_key(s: &Spec) -> (usize, String) {
    let paper = crate::spec::PAPERS
        .iter()
        .position(|p| *p == s.paper_id)
        .unwrap_or(99);
    let art =
        s.id.trim_start_matches(&format!("{}-", s.paper_id))
            .to_string();
    // zero-pad numbers so fig10 sorts after fig9
    let mut key = String::new();
    let mut num = String::new();
    for c in art.chars() {
        if c.is_ascii_digit() {
            num.push(c);
        } else {
            if !num.is_empty() {
                key.push_str(&format!("{num:0>4}"));
                num.clear();
            }
            key.push(c);
        }
    }
    if !num.is_empty() {
        key.push_str(&format!("{num:0>4}"));
    }
    (paper, key)
}

/// The spec files of a tree, sorted.
pub fn spec_files(dir: &Path) -> Result<Vec<(PathBuf, String)>, CatalogError> {
    let mut out = Vec::new();
    let rd = std::fs::read_dir(dir).map_err(|e| CatalogError::Io(dir.to_path_buf(), e))?;
    let mut subdirs: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    subdirs.sort();
    for sub in subdirs {
        // testbeds and host profiles are not specs
        if sub
            .file_name()
            .is_some_and(|n| n == "testbeds" || n == "hosts")
        {
            continue;
        }
        let mut files: Vec<PathBuf> = std::fs::read_dir(&sub)
            .map_err(|e| CatalogError::Io(sub.clone(), e))?
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .collect();
        files.sort();
        for f in files {
            let text = std::fs::read_to_string(&f).map_err(|e| CatalogError::Io(f.clone(), e))?;
            out.push((f, text));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod lenient_tests {
    use super::*;

    #[test]
    fn one_broken_spec_does_not_stop_the_others() {
        let good = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../experiments/netreduce/fig7.yaml"
        ))
        .expect("fig7");
        let bad = good
            .replace("id: netreduce-fig7", "id: netreduce-table1")
            .replace("artifact: ", "artefact: ");
        let items = vec![
            (PathBuf::from("experiments/netreduce/fig7.yaml"), good),
            (PathBuf::from("experiments/netreduce/table1.yaml"), bad),
        ];
        assert!(Catalog::from_texts(items.clone()).is_err(), "strict fails");
        let cat = Catalog::from_texts_lenient(items).expect("lenient");
        assert_eq!(cat.entries.len(), 1);
        assert_eq!(cat.invalid.len(), 1);
        assert!(cat.get("netreduce-fig7").is_ok());
        let e = cat.get("netreduce-table1").expect_err("its own error");
        assert!(e.to_string().contains("artefact"), "{e}");
        assert!(matches!(
            cat.get("netreduce-nope"),
            Err(CatalogError::Unknown { .. })
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_id_suggests_nearest() {
        let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../experiments"));
        let c = Catalog::load_dir(dir).expect("the tree's specs are valid");
        let e = c.get("netreduce-fig8").expect_err("unknown");
        assert!(
            e.to_string()
                .starts_with("no experiment `netreduce-fig8`; did you mean netreduce-fig7"),
            "{e}"
        );
        for entry in &c.entries {
            for profile in ["quick", "full"] {
                let pts = crate::plan::expand(&entry.spec, profile)
                    .unwrap_or_else(|e| panic!("{}: {e}", entry.spec.id));
                assert!(!pts.is_empty(), "{} {profile} has no points", entry.spec.id);
            }
        }
        let e = c.get("zzzz").expect_err("unknown");
        assert_eq!(e.to_string(), "no experiment `zzzz`");
    }
}
