//! The trait systems implement: the harness runs a point through it without knowing the system.

use crate::event::{Event, LogLevel};
use crate::plan::Point;
use crate::spec::Fidelity;
use crate::store::Row;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    #[error("parameter `{0}` is missing or not a number")]
    Param(String),
    /// A parameter's value the workload cannot run with (out of its range, not whole): the point
    /// fails the same way every time it runs, so a run is not finished by resuming it.
    #[error("{0}")]
    BadParam(String),
    #[error("{0}")]
    Invalid(String),
    #[error("wrong result: {0}")]
    WrongResult(String),
    /// The host lacks what the point needs (a device, a driver): a rerun on the same host fails
    /// the same way. Not the point's parameters ([`WorkloadError::BadParam`]): the same point
    /// runs on a host that has them.
    #[error("{0}")]
    Setup(String),
    #[error("interrupted")]
    Interrupted,
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

impl WorkloadError {
    /// Whether the error comes from the point's parameter values (missing, not a number, out of
    /// range): rerunning the point (`--resume`) fails the same way until the spec is changed.
    pub fn is_parameter_error(&self) -> bool {
        matches!(self, WorkloadError::Param(_) | WorkloadError::BadParam(_))
    }
}

/// A registered way of running an experiment's points (e.g. `netreduce.appendix_a`).
pub trait Workload: Send + Sync {
    /// The id specs name in `workload:`.
    fn id(&self) -> &'static str;
    /// The fidelity classes this implementation can produce.
    fn fidelities(&self) -> &'static [Fidelity];
    /// The fabric label recorded in each row for a class (`model`, `mem`, `udp`, `sim`, ...).
    fn fabric(&self, fidelity: Fidelity) -> &'static str;
    /// The fabric a point of a class runs on, as the run's manifest records it before the point
    /// runs (its rows carry what did run): [`Workload::fabric`] unless the workload picks its
    /// fabric from the point's parameters (`emulated_fabric`).
    fn point_fabric(&self, fidelity: Fidelity, _point: &Point) -> &'static str {
        self.fabric(fidelity)
    }
    /// The spec systems this implementation can run (`None`: all of them). The planner leaves
    /// the others out of the plan and the manifest says which were left out.
    fn systems(&self) -> Option<&'static [&'static str]> {
        None
    }
    /// Run one repetition of one point, reporting through `ctx`.
    fn run(&self, ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError>;
    /// How many agents one repetition of `system`'s points spans (1: one agent or the runner's
    /// own process runs it through [`Workload::run`]; more: each agent runs
    /// [`Workload::run_rank`] with its rank).
    fn ranks(&self, _system: &str) -> usize {
        1
    }
    /// Why `system`'s rows of class `class` are not run here, if they are not (`agents`: the
    /// run's points go to agents): the planner leaves them out and the manifest keeps the reason.
    fn not_here(&self, _class: Fidelity, _system: &str, _agents: bool) -> Option<String> {
        None
    }
    /// Run rank `rank.rank` of `rank.ranks` of one repetition of a point that spans agents
    /// ([`Workload::ranks`] > 1), publishing what the other ranks need through `exchange`. The
    /// body may relabel `ctx.fidelity` and `ctx.fabric` by what it finds (a device's provider)
    /// before it records.
    fn run_rank(
        &self,
        ctx: &mut PointCtx<'_>,
        rank: &Rank<'_>,
        _exchange: &mut dyn RankExchange,
    ) -> Result<(), WorkloadError> {
        Err(WorkloadError::Invalid(format!(
            "`{}` {} does not run as rank {} of {} (it spans {} agent(s))",
            self.id(),
            ctx.point.system,
            rank.rank,
            rank.ranks,
            self.ranks(&ctx.point.system)
        )))
    }
}

/// A RoCE NIC the testbed file names (`nics:` with `kind: roce`), with its host's name and
/// `address`: what a rank opens on that host.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RankNic {
    pub host: String,
    #[serde(default)]
    pub address: Option<String>,
    pub device: String,
    pub gid_index: u32,
}

/// Where a rank of a point that spans agents runs.
#[derive(Debug, Clone, Copy)]
pub struct Rank<'a> {
    pub rank: usize,
    pub ranks: usize,
    /// This host's name (for the rows' log).
    pub host: &'a str,
    /// The testbed's NIC of this host, or why there is none.
    pub nic: HostNic<'a>,
}

/// What the testbed's `nics:` say of a rank's host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostNic<'a> {
    /// The `nics:` entry of this host (by its name or address).
    Declared(&'a RankNic),
    /// The testbed declares no RoCE NIC (a rig's guests, a host of its own): the rank opens a
    /// device of its own choosing.
    Undeclared,
    /// The testbed declares RoCE NICs (all of them here), none of this host's name or address:
    /// the rank has no device of the testbed's to open, and opening one of its own choosing
    /// would measure a NIC the testbed does not name.
    NotThisHost(&'a [RankNic]),
}

impl<'a> HostNic<'a> {
    /// This host's declared NIC, if the testbed names one.
    pub fn declared(&self) -> Option<&'a RankNic> {
        match self {
            HostNic::Declared(n) => Some(n),
            _ => None,
        }
    }

    /// Where the testbed declares NICs but not on `host`: the sentence that says so, naming
    /// `host` and the testbed's hosts with NICs (None otherwise).
    pub fn not_this_host(&self, host: &str) -> Option<String> {
        let HostNic::NotThisHost(nics) = self else {
            return None;
        };
        let mut hosts: Vec<&str> = Vec::new();
        for n in nics.iter() {
            if !hosts.contains(&n.host.as_str()) {
                hosts.push(&n.host);
            }
        }
        Some(format!(
            "the testbed's nics: declare RoCE NICs on {} and none on this host, `{host}` (its hostname is none of theirs, by name or address); set INABENCH_RDMA_DEVICE to open a device here anyway",
            hosts.join(", ")
        ))
    }
}

/// Every rank's published endpoints of one round: `[rank][name]`.
pub type Published =
    std::collections::BTreeMap<usize, std::collections::BTreeMap<String, serde_json::Value>>;

/// Why an exchange round failed (the channel, a malformed endpoint, another rank's failure or
/// silence: the runner's sentence).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ExchangeFailed(pub String);

/// How the ranks of a point that spans agents exchange what they need of each other (a queue
/// pair's connection info): the harness implements it over its control channel, through the
/// runner, which answers a round once every rank published.
pub trait RankExchange {
    /// Publish this rank's named `endpoints` and wait for every rank's. Every rank calls it the
    /// same number of times (a round each; an empty round is a barrier).
    fn exchange(
        &mut self,
        endpoints: &[(&str, serde_json::Value)],
    ) -> Result<Published, ExchangeFailed>;
}

/// What a workload sees of the run while it measures one repetition of a point.
pub struct PointCtx<'a> {
    pub point: &'a Point,
    pub index: usize,
    pub fidelity: Fidelity,
    pub fabric: &'static str,
    pub repetition: u32,
    /// Warm-up repetitions are run but not stored.
    pub warmup: bool,
    pub seed: u64,
    pub run_id: &'a str,
    pub experiment: &'a str,
    pub cancel: &'a AtomicBool,
    /// Where a workload that can capture its frames writes pcap files (`reproduce --pcap DIR`);
    /// `None`: no capture.
    pub capture_dir: Option<&'a Path>,
    /// The host profile the run charges host costs from (`reproduce --host-profile`, default
    /// the reference profile); `None` where no harness attached one (a workload that needs a
    /// host cost then fails with [`PointCtx::host_cost`]'s error).
    pub host_profile: Option<&'a crate::hostprofile::HostProfile>,
    sink: &'a mut dyn FnMut(Event),
    units: &'a dyn Fn(&str) -> String,
}

impl<'a> PointCtx<'a> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        point: &'a Point,
        index: usize,
        fidelity: Fidelity,
        fabric: &'static str,
        repetition: u32,
        warmup: bool,
        seed: u64,
        run_id: &'a str,
        experiment: &'a str,
        cancel: &'a AtomicBool,
        sink: &'a mut dyn FnMut(Event),
        units: &'a dyn Fn(&str) -> String,
    ) -> Self {
        PointCtx {
            point,
            index,
            fidelity,
            fabric,
            repetition,
            warmup,
            seed,
            run_id,
            experiment,
            cancel,
            capture_dir: None,
            host_profile: None,
            sink,
            units,
        }
    }

    /// The same context, charging host costs from `profile` (see [`PointCtx::host_profile`]).
    pub fn with_host_profile(
        mut self,
        profile: Option<&'a crate::hostprofile::HostProfile>,
    ) -> Self {
        self.host_profile = profile;
        self
    }

    /// The host profile's value at a dotted key (`systems.atp.worker.frame`, `costs.<name>`);
    /// an error names the key and the profile.
    pub fn host_cost(&self, key: &str) -> Result<f64, WorkloadError> {
        let p = self.host_profile.ok_or_else(|| {
            WorkloadError::Invalid(format!(
                "this run has no host profile, and `{key}` is a host cost (reproduce reads experiments/hosts/reference.yaml unless --host-profile names another)"
            ))
        })?;
        p.value(key)
            .map_err(|e| WorkloadError::Invalid(e.to_string()))
    }

    /// The same context, capturing frames into `dir` (see [`PointCtx::capture_dir`]).
    pub fn with_capture_dir(mut self, dir: Option<&'a Path>) -> Self {
        self.capture_dir = dir;
        self
    }

    /// A numeric parameter of the point.
    pub fn param(&self, name: &str) -> Result<f64, WorkloadError> {
        self.point
            .params
            .get(name)
            .and_then(|v| v.as_f64())
            .ok_or_else(|| WorkloadError::Param(name.to_string()))
    }

    /// A whole-number parameter (0 to 10^9): counts, sizes, repetitions.
    pub fn count(&self, name: &str) -> Result<usize, WorkloadError> {
        let v = self.param(name)?;
        if v >= 0.0 && v.fract() == 0.0 && v <= 1e9 {
            Ok(v as usize)
        } else {
            Err(WorkloadError::BadParam(format!(
                "parameter `{name}` must be a whole number (got {v})"
            )))
        }
    }

    /// A whole-number parameter that must be at least 1.
    pub fn positive_count(&self, name: &str) -> Result<usize, WorkloadError> {
        match self.count(name) {
            Ok(n) if n >= 1 => Ok(n),
            _ => Err(WorkloadError::BadParam(format!(
                "parameter `{name}` must be a positive whole number (got {})",
                self.param(name)?
            ))),
        }
    }

    /// A parameter of the point as text (a word such as `nic`, or a number written out).
    pub fn text(&self, name: &str) -> Result<String, WorkloadError> {
        self.point
            .params
            .get(name)
            .map(|v| v.to_string())
            .ok_or_else(|| WorkloadError::Param(name.to_string()))
    }

    pub fn system(&self) -> &str {
        &self.point.system
    }

    pub fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }

    /// Record a measurement of `metric` for the point's system (the unit comes from the spec).
    pub fn record(&mut self, metric: &str, value: f64) {
        let system = self.point.system.clone();
        self.record_for(&system, metric, value);
    }

    /// Record a measurement for another system of the same point (e.g. a model that
    /// evaluates a comparison term). Rows are stored unless this is a warm-up repetition;
    /// views take their live samples from `Row` and `Sample` events alike.
    pub fn record_for(&mut self, system: &str, metric: &str, value: f64) {
        let unit = (self.units)(metric);
        if self.warmup {
            // warm-up values feed the live charts only
            (self.sink)(Event::Sample {
                point: self.index,
                system: system.to_string(),
                metric: metric.to_string(),
                value,
                unit,
            });
            return;
        }
        // a stored row is also the views' live sample (no second copy)
        let row = Row {
            point_id: self.point.id.clone(),
            system: system.to_string(),
            fidelity: self.fidelity,
            fabric: self.fabric.to_string(),
            params: self.point.params.clone(),
            repetition: self.repetition,
            metric: metric.to_string(),
            value,
            unit,
            timestamp: crate::store::now_s(),
        };
        (self.sink)(Event::Row(row));
    }

    /// Record `value`, measured in `unit`, converted to the unit the spec declares for `metric`
    /// (see [`crate::units`]): the one place a workload's quantity meets the spec's unit. A
    /// metric the spec does not declare, or a unit of another dimension, is an error.
    pub fn record_in(&mut self, metric: &str, value: f64, unit: &str) -> Result<(), WorkloadError> {
        let system = self.point.system.clone();
        self.record_for_in(&system, metric, value, unit)
    }

    /// [`PointCtx::record_in`] for a metric only when the spec declares it (a workload shared by
    /// experiments with different metric lists).
    pub fn record_in_if_declared(
        &mut self,
        metric: &str,
        value: f64,
        unit: &str,
    ) -> Result<(), WorkloadError> {
        if self.declares(metric) {
            self.record_in(metric, value, unit)?;
        }
        Ok(())
    }

    /// [`PointCtx::record_in`] for another system of the same point.
    pub fn record_for_in(
        &mut self,
        system: &str,
        metric: &str,
        value: f64,
        unit: &str,
    ) -> Result<(), WorkloadError> {
        let declared = (self.units)(metric);
        if declared.is_empty() {
            return Err(WorkloadError::Invalid(format!(
                "the spec declares no metric `{metric}`"
            )));
        }
        let v = crate::units::convert(value, unit, &declared).map_err(|e| {
            WorkloadError::Invalid(format!("metric `{metric}` (declared in `{declared}`): {e}"))
        })?;
        self.record_for(system, metric, v);
        Ok(())
    }

    /// Whether the spec declares `metric`.
    pub fn declares(&self, metric: &str) -> bool {
        !(self.units)(metric).is_empty()
    }

    /// Record a metric only when the spec declares it (a workload shared by experiments with
    /// different metric lists).
    pub fn record_if_declared(&mut self, metric: &str, value: f64) {
        if self.declares(metric) {
            self.record(metric, value);
        }
    }

    pub fn counter(&mut self, name: &str, value: u64) {
        let system = self.point.system.clone();
        (self.sink)(Event::Counter {
            point: self.index,
            system,
            name: name.to_string(),
            value,
        });
    }

    pub fn progress(&mut self, done: u64, total: u64) {
        (self.sink)(Event::Progress {
            point: self.index,
            done,
            total,
        });
    }

    /// Add `line` to the run manifest's `drivers` (each distinct line once): what carried the
    /// point's frames where that is decided as it runs.
    pub fn driver_line(&mut self, line: impl Into<String>) {
        (self.sink)(Event::Driver {
            point: self.index,
            line: line.into(),
        });
    }

    pub fn log(&mut self, level: LogLevel, message: impl Into<String>) {
        (self.sink)(Event::Log {
            level,
            source: self.point.system.clone(),
            message: message.into(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::Params;

    fn point() -> Point {
        Point {
            id: "p".into(),
            system: "s".into(),
            params: Params::new(),
            repetitions: 1,
            warmup: 0,
        }
    }

    /// Run `f` with a point context whose spec declares `goodput` in `declared`; the rows it
    /// records come back as (value, unit).
    fn with_ctx<R>(
        declared: &str,
        f: impl FnOnce(&mut PointCtx<'_>) -> R,
    ) -> (R, Vec<(f64, String)>) {
        let p = point();
        let cancel = AtomicBool::new(false);
        let mut got = Vec::new();
        let mut sink = |e: Event| {
            if let Event::Row(r) = e {
                got.push((r.value, r.unit));
            }
        };
        let units = |m: &str| {
            if m == "goodput" {
                declared.to_string()
            } else {
                String::new()
            }
        };
        let r = {
            let mut ctx = PointCtx::new(
                &p,
                0,
                Fidelity::Simulated,
                "sim",
                0,
                false,
                1,
                "r",
                "e",
                &cancel,
                &mut sink,
                &units,
            );
            f(&mut ctx)
        };
        (r, got)
    }

    /// What a workload records for one quantity when the spec declares `declared`.
    fn recorded(declared: &str, value: f64, unit: &str) -> Result<Vec<f64>, WorkloadError> {
        let (r, got) = with_ctx(declared, |c| c.record_in("goodput", value, unit));
        r?;
        assert!(got.iter().all(|(_, u)| u == declared));
        Ok(got.into_iter().map(|(v, _)| v).collect())
    }

    #[test]
    fn a_spec_that_changes_its_unit_gets_the_same_quantity() {
        let gbps = recorded("Gbps", 2.5e9, "bps").expect("Gbps");
        let mbps = recorded("Mbps", 2.5e9, "bps").expect("Mbps");
        assert_eq!(gbps, vec![2.5]);
        assert_eq!(mbps, vec![2500.0]);
    }

    #[test]
    fn another_dimension_or_an_undeclared_metric_is_an_error() {
        assert!(matches!(
            recorded("ms", 2.5e9, "bps"),
            Err(WorkloadError::Invalid(m)) if m.contains("declared in `ms`")
        ));
        let (r, _) = with_ctx("Gbps", |c| c.record_in("nope", 1.0, "s"));
        assert!(r.is_err());
    }
}
