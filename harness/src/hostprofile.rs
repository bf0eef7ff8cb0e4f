//! The host profile a run charges (`reproduce --host-profile FILE`, default the reference
//! profile `experiments/hosts/reference.yaml`) and `inabench calibrate`, which measures this
//! machine's profile. The file format and its reader are `inabench_core::hostprofile`.

use anyhow::{Context, Result};
use inabench_core::hostprofile::{HostProfile, ProfileError, REFERENCE};
use std::path::{Path, PathBuf};

/// The reference profile: from the tree on disk when there is one, else the copy embedded at
/// build time.
pub fn reference() -> Result<(HostProfile, String), ProfileError> {
    if let Some(root) = crate::paths::repo_root() {
        let file = root.join(REFERENCE);
        if file.is_file() {
            let text = std::fs::read_to_string(&file).map_err(|e| ProfileError {
                file: file.clone(),
                line: None,
                field: None,
                message: format!("cannot read the host profile: {e}"),
            })?;
            let rel = PathBuf::from(REFERENCE);
            let p = HostProfile::from_yaml(&rel, &text)?;
            return Ok((p, text));
        }
    }
    let (path, text) = crate::embedded::EMBEDDED
        .iter()
        .find(|(p, _)| *p == REFERENCE)
        .ok_or_else(|| ProfileError {
            file: PathBuf::from(REFERENCE),
            line: None,
            field: None,
            message: "no reference host profile in this tree or this binary".into(),
        })?;
    let p = HostProfile::from_yaml(Path::new(path), text)?;
    Ok((p, text.to_string()))
}

/// The profile a run charges: `file` (checked against the reference: every system, path,
/// quantity and cost the reference has, and nothing else), else the reference. An error is one
/// sentence with the file, line and field.
pub fn load(file: Option<&Path>) -> Result<HostProfile, ProfileError> {
    let (reference, _) = reference()?;
    let Some(file) = file else {
        return Ok(reference);
    };
    let text = std::fs::read_to_string(file).map_err(|e| ProfileError {
        file: file.to_path_buf(),
        line: None,
        field: None,
        message: format!("cannot read the host profile: {e}"),
    })?;
    let p = HostProfile::from_yaml(file, &text)?;
    p.check_covers(&reference, &text)?;
    Ok(p)
}

/// `inabench calibrate`: measure this machine's cost per frame of every system the reference
/// prices per frame and the Libra crate's coefficient table, `reps` times each, interleaved; write the profile to `out` (default
/// `<results>/host-<machine>.yaml`) and print what was measured beside the reference.
pub fn calibrate(out: Option<&Path>, reps: u32, results: &Path) -> Result<PathBuf> {
    let (reference, _) = reference()?;
    let machine = machine_name();
    let date = chrono::Utc::now().format("%Y-%m-%dT%H:%MZ").to_string();
    eprintln!(
        "calibrate: {reps} repetitions per system, interleaved; load average at start {}",
        load_average()
    );
    let measured = inabench_workloads::hostcost::measure(&reference, reps, &mut |s, r, ns| {
        eprintln!("  {s:<20} repetition {r}: {ns} ns");
    });
    let profile =
        inabench_workloads::hostcost::calibrated_profile(&reference, &measured, &machine, &date);
    let out = match out {
        Some(p) => p.to_path_buf(),
        None => {
            std::fs::create_dir_all(results)
                .with_context(|| format!("cannot create {}", results.display()))?;
            results.join(format!("host-{machine}.yaml"))
        }
    };
    let text = format!(
        "# Written by `inabench calibrate` ({date}); load average at the end {}.\n{}",
        load_average(),
        profile.to_yaml()
    );
    // what we write must read back as a profile that covers the reference
    let back = HostProfile::from_yaml(&out, &text)?;
    back.check_covers(&reference, &text)?;
    std::fs::write(&out, &text).with_context(|| format!("cannot write {}", out.display()))?;
    for m in &measured {
        let r = reference.value(&m.key).unwrap_or(f64::NAN);
        println!(
            "{:<20} this machine {:>7.1} ns (spread {}-{} ns, {} reps); reference {r} ns ({})",
            m.system,
            m.median(),
            m.samples.iter().min().copied().unwrap_or(0),
            m.samples.iter().max().copied().unwrap_or(0),
            m.samples.len(),
            m.key,
        );
    }
    println!(
        "host profile: {} (run with `reproduce --host-profile {}`)",
        out.display(),
        out.display()
    );
    Ok(out)
}

fn machine_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "this-host".into())
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}
