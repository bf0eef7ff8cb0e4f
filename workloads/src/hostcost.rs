//! Host costs from the run's host profile (`inabench_core::hostprofile`), for the workloads that
//! charge a software host stack: the one way a workload turns a system's profile entries into the
//! [`CoreCosts`] the ina crate's host stacks take ([`core_costs`]), and `inabench calibrate`'s
//! measurement of this machine ([`calibrate`]), which writes a profile and is never run by a run.

use inabench_core::hostprofile::{Cost, HostProfile};
use inabench_core::{PointCtx, WorkloadError};
use inabench_ina::hoststack::CoreCosts;

/// The profile key of a system's cost per frame received or sent, per core.
pub fn frame_key(system: &str) -> String {
    format!("systems.{system}.worker.frame")
}

/// The profile key of a system's client threads.
pub fn threads_key(system: &str) -> String {
    format!("systems.{system}.worker.threads")
}

/// A system's software client costs from the point's host profile (`systems.<system>.worker.frame`
/// and `.threads`); `None` for a system the profile does not price, or where no profile is
/// attached (a context built by hand): its host stack must then be `nic`, or
/// [`inabench_ina::drive::host_stack_for`] says which system's cost is missing.
pub fn core_costs(ctx: &PointCtx<'_>, system: &str) -> Result<Option<CoreCosts>, WorkloadError> {
    match ctx.host_profile {
        Some(p) => costs_of(p, system),
        None => Ok(None),
    }
}

/// [`core_costs`] from a profile.
pub fn costs_of(p: &HostProfile, system: &str) -> Result<Option<CoreCosts>, WorkloadError> {
    if !p.has(&frame_key(system)) {
        return Ok(None);
    }
    let v = |k: &str| {
        p.value(k)
            .map_err(|e| WorkloadError::Invalid(e.to_string()))
    };
    let c = CoreCosts::new(v(&frame_key(system))?, v(&threads_key(system))?)
        .map_err(|e| WorkloadError::Invalid(format!("{}: {e}", p.file.display())))?;
    Ok(Some(c))
}

/// What `inabench calibrate` measured of one system: every repetition's ns per frame and core.
#[derive(Debug, Clone)]
pub struct Measured {
    pub system: String,
    pub samples: Vec<u64>,
}

impl Measured {
    /// The median of the samples.
    pub fn median(&self) -> f64 {
        let mut s = self.samples.clone();
        s.sort_unstable();
        match s.len() {
            0 => 0.0,
            n if n % 2 == 1 => s[n / 2] as f64,
            n => (s[n / 2 - 1] + s[n / 2]) as f64 / 2.0,
        }
    }
}

/// Measure this machine's cost per frame and core of every system the reference profile prices
/// per frame and this build can run (`systems.<system>.worker.frame` with an ina system of that
/// name), `reps` times each, interleaved (system 1, system 2, ..., then again), so that a change
/// in the host's load hits every system alike; `progress` hears each sample. The measuring rule
/// is [`inabench_ina::drive::measure_frame_ns`]'s.
pub fn measure(
    reference: &HostProfile,
    reps: u32,
    progress: &mut dyn FnMut(&str, u32, u64),
) -> Vec<Measured> {
    let systems: Vec<String> = reference
        .systems
        .keys()
        .filter(|s| reference.has(&frame_key(s)) && inabench_ina::drive::system(s).is_some())
        .cloned()
        .collect();
    let mut out: Vec<Measured> = systems
        .iter()
        .map(|s| Measured {
            system: s.clone(),
            samples: Vec::new(),
        })
        .collect();
    for r in 0..reps.max(1) {
        for m in &mut out {
            if let Some(sys) = inabench_ina::drive::system(&m.system) {
                let ns = inabench_ina::drive::measure_frame_ns(sys);
                progress(&m.system, r, ns);
                m.samples.push(ns);
            }
        }
    }
    out
}

/// A profile of this machine: the reference with each measured system's `frame` replaced by the
/// median of its samples (provenance: machine, date, method, repetitions, spread; the band is
/// the samples' range), every other entry kept from the reference with its provenance.
pub fn calibrated_profile(
    reference: &HostProfile,
    measured: &[Measured],
    machine: &str,
    date: &str,
) -> HostProfile {
    let mut p = reference.clone();
    p.name = format!("calibrated-{machine}");
    p.description = format!(
        "This machine's ({machine}, {date}) measured cost per frame of the systems' own host code (inabench calibrate); every entry not measured is the reference profile's ({}), with its provenance.",
        reference.file.display()
    );
    for m in measured {
        let (Some(lo), Some(hi)) = (m.samples.iter().min(), m.samples.iter().max()) else {
            continue;
        };
        let median = m.median();
        let cost = Cost {
            value: median,
            unit: "ns".into(),
            band: Some([*lo as f64, *hi as f64]),
            provenance: format!(
                "measured on {machine}, {date}, by inabench calibrate: the CPU time of the suite's {sys} worker code (handle_packet and poll_transmit) per frame received or sent in a lossless 6-worker all-reduce of 200,000 int32 on sim (inabench_ina::drive::measure_frame_ns, the measuring rule of inabench_fabric::wrap), on one core, {n} repetitions interleaved with the other systems', median {median} ns, spread {lo}-{hi} ns (samples {samples:?})",
                sys = m.system,
                n = m.samples.len(),
                samples = m.samples,
            ),
        };
        if let Some(q) = p
            .systems
            .get_mut(&m.system)
            .and_then(|ps| ps.get_mut("worker"))
        {
            q.insert("frame".into(), cost);
        }
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn reference() -> HostProfile {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../experiments/hosts/reference.yaml"
        );
        HostProfile::load(Path::new(path)).expect("the reference profile")
    }

    #[test]
    fn the_reference_prices_atp_and_switchml_on_their_released_clients_threads() {
        let r = reference();
        let atp = costs_of(&r, "atp").unwrap().unwrap();
        assert_eq!(atp.threads, inabench_ina::hoststack::ATP_RELEASE_CORES);
        let sml = costs_of(&r, "switchml").unwrap().unwrap();
        assert_eq!(sml.threads, inabench_ina::hoststack::SWITCHML_RELEASE_CORES);
        // NetReduce's paper stack is the NIC; its entry prices only table6's hypothetical dpdk rows
        let nr = costs_of(&r, "netreduce").unwrap().unwrap();
        assert_eq!(nr.threads, inabench_ina::hoststack::SWITCHML_RELEASE_CORES);
        assert!(costs_of(&r, "ring").unwrap().is_none());
    }

    #[test]
    fn a_calibrated_profile_replaces_only_what_was_measured_and_reads_back() {
        let r = reference();
        let m = vec![Measured {
            system: "atp".into(),
            samples: vec![300, 200, 250],
        }];
        let p = calibrated_profile(&r, &m, "box", "2026-11-28");
        let f = p.get(&frame_key("atp")).unwrap();
        assert_eq!(f.value, 250.0);
        assert_eq!(f.band, Some([200.0, 300.0]));
        assert!(f.provenance.contains("3 repetitions"), "{}", f.provenance);
        assert_eq!(
            p.get(&frame_key("switchml")).unwrap(),
            r.get(&frame_key("switchml")).unwrap()
        );
        // what calibrate writes reads back and covers the reference
        let text = p.to_yaml();
        let back = HostProfile::from_yaml(Path::new("c.yaml"), &text).unwrap();
        back.check_covers(&r, &text).unwrap();
        assert_eq!(back.value(&frame_key("atp")).unwrap(), 250.0);
    }
}
