//! Host costs from the run's host profile (`inabench_core::hostprofile`), for the workloads that
//! charge a software host stack: the one way a workload turns a system's profile entries into the
//! [`CoreCosts`] the ina crate's host stacks take ([`core_costs`], [`require_core_costs`]), and
//! `inabench calibrate`'s measurement of this machine ([`measure`]: the ina clients' cost per
//! frame and the Libra crate's coefficient table), which writes a profile and is never run by a
//! run.

use inabench_core::hostprofile::{Cost, HostProfile};
use inabench_core::{PointCtx, WorkloadError};
use inabench_ina::hoststack::CoreCosts;

/// The profile key of a system's cost per frame received or sent, per core.
pub fn frame_key(system: &str) -> String {
    format!("systems.{system}.worker.frame")
}

/// The profile key of a system's client latency (release to wire, per frame).
pub fn latency_key(system: &str) -> String {
    format!("systems.{system}.worker.stack_latency")
}

/// The profile key of a system's client threads.
pub fn threads_key(system: &str) -> String {
    format!("systems.{system}.worker.threads")
}

/// A system's software client costs from the point's host profile (`systems.<system>.worker.frame`
/// and `.threads`); `None` for a system the profile does not price, or where no profile is
/// attached (a context built by hand): its host stack must then be `nic`, or
/// [`inabench_ina_run::drive::host_stack_for`] says which system's cost is missing.
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
    let mut c = CoreCosts::new(v(&frame_key(system))?, v(&threads_key(system))?)
        .map_err(|e| WorkloadError::Invalid(format!("{}: {e}", p.file.display())))?;
    // the client's own latency, where the profile gives one (the DPDK model charges it per
    // frame between release and the wire)
    let latency = latency_key(system);
    if p.has(&latency) {
        c = c
            .with_latency(v(&latency)?)
            .map_err(|e| WorkloadError::Invalid(format!("{}: {e}", p.file.display())))?;
    }
    Ok(Some(c))
}

/// [`core_costs`] for a system whose software client a point runs: a profile without the
/// system's entries fails the point with one sentence naming the missing key.
pub fn require_core_costs(ctx: &PointCtx<'_>, system: &str) -> Result<CoreCosts, WorkloadError> {
    match core_costs(ctx, system)? {
        Some(c) => Ok(c),
        // the error of the missing key (or of a run without a profile), naming it
        None => {
            ctx.host_cost(&frame_key(system))?;
            ctx.host_cost(&threads_key(system))?;
            Err(WorkloadError::Invalid(format!(
                "the host profile does not price `{system}`'s client"
            )))
        }
    }
}

/// What `inabench calibrate` measured of one profile entry: every repetition's value (ns).
#[derive(Debug, Clone)]
pub struct Measured {
    /// What was measured, for the progress lines (`atp`, `libra_server_pair`, ...).
    pub system: String,
    /// The profile key it sets (`systems.atp.worker.frame`, `costs.libra_server_pair`).
    pub key: String,
    /// How, for the provenance line.
    pub method: String,
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

    /// The `q`-quantile of the samples (linear between the order statistics), 0 if none.
    pub fn quantile(&self, q: f64) -> f64 {
        let mut s = self.samples.clone();
        s.sort_unstable();
        if s.is_empty() {
            return 0.0;
        }
        let at = q.clamp(0.0, 1.0) * (s.len() - 1) as f64;
        let (lo, hi) = (at.floor() as usize, at.ceil() as usize);
        s[lo] as f64 + (s[hi] as f64 - s[lo] as f64) * (at - lo as f64)
    }
}

/// The ina systems' measuring rule, for the provenance line.
fn ina_method(system: &str) -> String {
    format!(
        "the CPU time of the suite's {system} worker code (handle_packet and poll_transmit) per frame received or sent in a lossless 6-worker all-reduce of 200,000 int32 on sim (inabench_ina_run::drive::measure_frame_ns, the measuring rule of inabench_fabric::wrap), on one core"
    )
}

/// Measure this machine's cost per frame and core of every system the reference profile prices
/// per frame and this build can run (`systems.<system>.worker.frame` with an ina system of that
/// name), `reps` times each, interleaved (system 1, system 2, ..., then again), so that a change
/// in the host's load hits every system alike; `progress` hears each sample. The measuring rule
/// is [`inabench_ina_run::drive::measure_frame_ns`]'s.
pub fn measure(
    reference: &HostProfile,
    reps: u32,
    progress: &mut dyn FnMut(&str, u32, u64),
) -> Vec<Measured> {
    let systems: Vec<String> = reference
        .systems
        .keys()
        .filter(|s| reference.has(&frame_key(s)) && inabench_ina_run::drive::system(s).is_some())
        .cloned()
        .collect();
    let mut out: Vec<Measured> = systems
        .iter()
        .map(|s| Measured {
            system: s.clone(),
            key: frame_key(s),
            method: ina_method(s),
            samples: Vec::new(),
        })
        .collect();
    #[cfg(feature = "libra")]
    let libra = libra_measure::Libra::new(reference, &mut out);
    for r in 0..reps.max(1) {
        for m in out.iter_mut().filter(|m| m.key.starts_with("systems.")) {
            if let Some(sys) = inabench_ina_run::drive::system(&m.system) {
                let ns = inabench_ina_run::drive::measure_frame_ns(sys);
                progress(&m.system, r, ns);
                m.samples.push(ns);
            }
        }
        #[cfg(feature = "libra")]
        if let Some(l) = &libra {
            l.measure_once(&mut out, r, progress);
        }
    }
    out
}

/// `inabench calibrate`'s measurement of the Libra crate's coefficient table
/// (`costs.libra_{worker,server}_{frame,pair}`; the threads are cited, not measured).
#[cfg(feature = "libra")]
mod libra_measure {
    use super::Measured;
    use inabench_core::hostprofile::HostProfile;
    use inabench_libra::proto::Inputs;

    /// Workers, server pairs a packet in the two runs.
    const WORKERS: usize = 8;
    const CAPS: (usize, usize) = (128, 16);

    pub(super) struct Libra {
        inputs: Inputs,
        /// Index in `out` of worker frame, worker pair, server frame, server pair.
        at: [usize; 4],
    }

    impl Libra {
        /// `None` where the reference has no Libra table (nothing to measure).
        pub(super) fn new(reference: &HostProfile, out: &mut Vec<Measured>) -> Option<Libra> {
            let keys = [
                ("worker", "frame"),
                ("worker", "pair"),
                ("server", "frame"),
                ("server", "pair"),
            ];
            if !keys
                .iter()
                .all(|(r, q)| reference.has(&crate::libra::aggregation::cost_key(r, q)))
            {
                return None;
            }
            // OA's gradients at the fig5 skew, 8 workers, every pair to the server (PS-lite)
            let s = crate::libra::common::FIG5_ZIPF_S
                .iter()
                .find(|(n, _)| *n == "oa")
                .map_or(1.0, |(_, s)| *s);
            let task = inabench_libra::sparse::Task::named("oa").ok()?.with_s(s);
            let g = inabench_libra::sparse::SparseGen::new(task, 1).ok()?;
            let inputs = inabench_libra::aggregation::inputs(
                &g,
                &std::collections::HashMap::new(),
                WORKERS,
                false,
                false,
            )
            .ok()?;
            let pairs: usize = inputs.iter().map(|(_, c)| c.len()).sum();
            let mut at = [0; 4];
            for (i, (role, q)) in keys.iter().enumerate() {
                at[i] = out.len();
                out.push(Measured {
                    system: format!("libra_{role}_{q}"),
                    key: crate::libra::aggregation::cost_key(role, q),
                    method: format!(
                        "the CPU time of the suite's Libra {role} code (inabench_libra::proto::{}, which Libra, Libra float and the PS-lite baseline run) by the measuring rule of inabench_fabric::wrap, in two lossless iterations on sim with no host cost of OA's gradients (fig5 skew, data seed 1, {WORKERS} workers, {pairs} pairs, PS-lite's configuration: every pair through the server) at {} and {} pairs a server packet; per role cpu = frames x frame + pairs x pair, {q} solved from the two runs (inabench_libra::aggregation::measure_coefficients)",
                        if *role == "worker" { "Worker" } else { "Server" },
                        CAPS.0,
                        CAPS.1
                    ),
                    samples: Vec::new(),
                });
            }
            Some(Libra { inputs, at })
        }

        pub(super) fn measure_once(
            &self,
            out: &mut [Measured],
            r: u32,
            progress: &mut dyn FnMut(&str, u32, u64),
        ) {
            let ((wf, wp), (sf, sp)) =
                inabench_libra::aggregation::measure_coefficients(&self.inputs, CAPS.0, CAPS.1);
            for (i, v) in [wf, wp, sf, sp].into_iter().enumerate() {
                let ns = v.round() as u64;
                let m = &mut out[self.at[i]];
                progress(&m.system, r, ns);
                m.samples.push(ns);
            }
        }
    }
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
                "measured on {machine}, {date}, by inabench calibrate: {method}, {n} repetitions interleaved with the other entries', median {median} ns, spread {lo}-{hi} ns, p10-p90 {p10:.1}-{p90:.1} ns (samples {samples:?})",
                method = m.method,
                n = m.samples.len(),
                p10 = m.quantile(0.1),
                p90 = m.quantile(0.9),
                samples = m.samples,
            ),
        };
        let parts: Vec<&str> = m.key.split('.').collect();
        let slot = match parts.as_slice() {
            ["systems", s, path, q] => p
                .systems
                .get_mut(*s)
                .and_then(|ps| ps.get_mut(*path))
                .and_then(|qs| qs.get_mut(*q)),
            ["costs", n] => p.costs.get_mut(*n),
            _ => None,
        };
        if let Some(c) = slot {
            *c = cost;
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
            key: frame_key("atp"),
            method: ina_method("atp"),
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
