//! Experiment specs: one YAML file per experiment (schema in `experiments/SCHEMA.md`).
//!
//! Loading is strict: unknown fields are errors, and every error is one sentence naming the
//! file, the line and the field.

use crate::claims;
use crate::value::{Params, Scalar};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

/// The fidelity classes of `EXPERIMENTS.md`, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Fidelity {
    Hardware,
    Emulated,
    Simulated,
    Modelled,
    Functional,
}

impl Fidelity {
    pub const ALL: [Fidelity; 5] = [
        Fidelity::Hardware,
        Fidelity::Emulated,
        Fidelity::Simulated,
        Fidelity::Modelled,
        Fidelity::Functional,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Fidelity::Hardware => "hardware",
            Fidelity::Emulated => "emulated",
            Fidelity::Simulated => "simulated",
            Fidelity::Modelled => "modelled",
            Fidelity::Functional => "functional",
        }
    }

    /// What a number of this class means (EXPERIMENTS.md), for reports.
    pub fn meaning(self) -> &'static str {
        match self {
            Fidelity::Hardware => {
                "the systems' code through real device drivers: the paper's own conditions"
            }
            Fidelity::Emulated => {
                "the same protocol code over a software fabric on this host: absolute values differ from the paper; orderings and ratios are what is checked"
            }
            Fidelity::Simulated => {
                "the same protocol code under a discrete-event fabric in virtual time at the paper's network parameters"
            }
            Fidelity::Modelled => {
                "a closed-form or flow-level model (the paper's own equations where it gives them) at the paper's parameters"
            }
            Fidelity::Functional => {
                "hardware-independent computation (precision, clustering, counts, convergence): should match the paper closely"
            }
        }
    }

    pub fn parse(s: &str) -> Option<Fidelity> {
        Fidelity::ALL.into_iter().find(|f| f.as_str() == s)
    }
}

impl fmt::Display for Fidelity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Implemented,
    Planned,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    Lower,
    Higher,
    None,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    #[serde(default = "one")]
    pub repetitions: u32,
    #[serde(default)]
    pub warmup: u32,
    pub estimated_seconds: f64,
    #[serde(default)]
    pub parameters: Params,
    #[serde(default)]
    pub grid: Vec<BTreeMap<String, Vec<Scalar>>>,
}

fn one() -> u32 {
    1
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Metric {
    pub name: String,
    pub unit: String,
    pub better: Better,
    #[serde(default)]
    pub description: String,
    /// Classes whose values of this metric are not at the paper's scale (a run at a
    /// `rate_scale`, a host's veth instead of the paper's NIC, a small task instead of the
    /// paper's model), each with why: the report shows such a value beside the paper's without
    /// a deviation and says why (a deviation would put numbers of different scales side by
    /// side). Claims are not affected.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub not_comparable: BTreeMap<Fidelity, String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PaperValue {
    pub system: String,
    pub metric: String,
    pub value: f64,
    #[serde(default)]
    pub params: Params,
    #[serde(default)]
    pub note: Option<String>,
}

/// The paper's published numbers. A benchmark of the suite's own (`paper_id: bench`) has no paper
/// and leaves the block out (the default: no source, no values).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PaperBlock {
    pub source: String,
    #[serde(default)]
    pub note: Option<String>,
    #[serde(default)]
    pub values: Vec<PaperValue>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Claim {
    pub id: String,
    pub text: String,
    #[serde(default)]
    pub fidelity: Vec<Fidelity>,
    pub expr: String,
    #[serde(default)]
    pub tolerance: Option<String>,
    /// Set when the claim is a consistency check, not evidence: it restates arithmetic on the
    /// paper's own inputs or holds by construction of the model. The text says why; reports
    /// show such claims apart ("consistency, not evidence").
    #[serde(default)]
    pub consistency: Option<String>,
    /// Prose explaining a verdict that is a finding about the paper (the paper contradicts
    /// itself, or a faithful model disagrees), with where in the paper. Shown beside the
    /// computed numbers; it never changes a verdict.
    #[serde(default)]
    pub finding: Option<String>,
    /// What checking the claim needs of the machine (cores, a line rate, root, devices, a data
    /// set), in the classes that measure the host. Without it the verdict is `not checkable
    /// here`, naming what is missing and the classes where the claim is checked instead.
    #[serde(default)]
    pub needs: Option<Needs>,
    /// Host profile inputs the verdict can depend on (`systems.<system>.<path>.<quantity>` or
    /// `costs.<name>`, see `crate::hostprofile`): the harness reruns the claim's points with the
    /// first one moved (the others set to the same value) to find where the verdict flips, and a
    /// break-even inside the input's band makes the verdict `host-dependent`.
    #[serde(default)]
    pub rests_on: Vec<String>,
}

/// A host requirement of a claim (see `Claim::needs`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Needs {
    /// Online CPU cores the measurement needs (e.g. a scaling claim up to 8 cores).
    #[serde(default)]
    pub cores: Option<u32>,
    /// A NIC at this line rate (Gbit/s); software fabrics on loopback or veth have none.
    #[serde(default)]
    pub line_rate_gbps: Option<f64>,
    /// Root (network namespaces, XDP).
    #[serde(default)]
    pub root: bool,
    /// Devices by kind: `tofino`, `fpga`, `rdma`, `gpu`, `nic_driver_mode` (a NIC whose driver
    /// runs XDP natively, with interrupt moderation to set).
    #[serde(default)]
    pub devices: Vec<String>,
    /// A data set that is not shipped (the paper's private trace, say).
    #[serde(default)]
    pub dataset: Option<String>,
    /// The classes these needs apply in (default: the classes that measure the host,
    /// hardware and emulated).
    #[serde(default = "host_classes")]
    pub classes: Vec<Fidelity>,
    /// Why the claim needs it, in words (shown in the report and by `doctor`).
    #[serde(default)]
    pub why: Option<String>,
}

fn host_classes() -> Vec<Fidelity> {
    vec![Fidelity::Hardware, Fidelity::Emulated]
}

/// How the report lays out one of the paper's tables: one row per system (or per value of a
/// parameter), one column per metric, the paper's value beside ours in every class.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableLayout {
    pub id: String,
    pub title: String,
    /// `system` (default) or a parameter whose values make the rows.
    #[serde(default = "system_rows")]
    pub rows: String,
    /// The metrics, in the paper's column order.
    pub columns: Vec<String>,
    /// Only points whose parameters match (e.g. `host_stack: paper`).
    #[serde(default)]
    pub filter: Params,
}

fn system_rows() -> String {
    "system".to_string()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FigureKind {
    Lines,
    Bars,
    Cdf,
    Table,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Figure {
    pub id: String,
    pub title: String,
    pub kind: FigureKind,
    #[serde(default)]
    pub x: Option<String>,
    pub y: String,
    #[serde(default = "default_series")]
    pub series: Vec<String>,
    #[serde(default)]
    pub filter: Params,
    #[serde(default)]
    pub x_label: Option<String>,
    #[serde(default)]
    pub y_label: Option<String>,
    #[serde(default)]
    pub log_x: bool,
    #[serde(default)]
    pub log_y: bool,
    #[serde(default = "yes")]
    pub paper_overlay: bool,
}

fn default_series() -> Vec<String> {
    vec!["system".to_string()]
}

fn yes() -> bool {
    true
}

/// One experiment spec, as written in YAML.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    pub id: String,
    pub paper_id: String,
    pub title: String,
    pub citation: String,
    pub artifact: String,
    pub status: Status,
    #[serde(default)]
    pub workload: Option<String>,
    /// The devices of the paper's testbed that this experiment's `hardware` class needs
    /// (`tofino`, `fpga`, `rdma`, `gpu`; see [`TESTBED_DEVICES`]): the planner and `doctor` read
    /// them here, so the harness knows no paper or system by name.
    #[serde(default)]
    pub testbed_devices: Vec<String>,
    /// A system's own devices for its `hardware` rows, where they differ from
    /// `testbed_devices` (which the systems not listed here need): e.g. netreduce-table1's host
    /// I/O rows need a RoCE NIC, not the FPGA switch and the GPUs of the paper's testbed. The
    /// experiment's hardware class needs what its systems' rows need together
    /// (harness/src/doctor.rs `hardware_needs`).
    #[serde(default)]
    pub system_devices: BTreeMap<String, Vec<String>>,
    pub description: String,
    pub systems: Vec<String>,
    pub fidelity: Vec<Fidelity>,
    #[serde(default)]
    pub parameters: Params,
    pub profiles: BTreeMap<String, Profile>,
    pub metrics: Vec<Metric>,
    #[serde(default)]
    pub paper: PaperBlock,
    #[serde(default)]
    pub claims: Vec<Claim>,
    #[serde(default)]
    pub figures: Vec<Figure>,
    /// The paper's tables in their own shape (see `TableLayout`).
    #[serde(default)]
    pub tables: Vec<TableLayout>,
}

/// A spec error: one sentence with the file, line and field.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}{}: {}{}", file.display(), line.map(|l| format!(":{l}")).unwrap_or_default(), field.as_ref().map(|f| format!("field `{f}`: ")).unwrap_or_default(), message)]
pub struct SpecError {
    pub file: PathBuf,
    pub line: Option<usize>,
    pub field: Option<String>,
    pub message: String,
}

/// The range a parameter's value must lie in, decided by its name alone (see [`param_range`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamRange {
    /// A number in [0, 1]: a fault probability or a fraction.
    Probability,
    /// A whole number of at least 1: workers, GPUs, cores, packets per window, ...
    PositiveCount,
    /// A whole number of 0 or more: seeds.
    Count,
    /// A finite number of 0 or more: a time, rate, size or power (its unit is the name's suffix).
    NonNegative,
}

/// The range of parameter `name`, or `None` when its name says nothing about one.
///
/// The rules, by name: `loss`, `duplicate`, `reorder`, `sampling_rate` and names ending in
/// `_fraction` or `_efficiency` are probabilities (not `_frac`: ALEPH's `time_frac` runs past 1); the counts of things a run builds
/// (`workers`, `gpus`, `cores`, `engines`, ...) are whole numbers of at least 1; `seed` and
/// `fault_seed` are whole numbers; names ending in a unit of time, rate, size or power (`_us`,
/// `_ns`, `_ms`, `_s`, `_gbps`, `_GBps`, `_MBps`, `_mbit`, `_mhz`, `_pct`, `_bytes`, `_kb`, `_mb`,
/// `_MB`, `_gb`, `_w`, `_tflops`) are not negative when they are numbers (a text value there, such
/// as a table written out, is left to the workload).
pub fn param_range(name: &str) -> Option<ParamRange> {
    const PROBABILITIES: [&str; 4] = ["loss", "duplicate", "reorder", "sampling_rate"];
    const POSITIVE_COUNTS: [&str; 22] = [
        "workers",
        "gpus",
        "gpus_per_machine",
        "cores",
        "engines",
        "senders",
        "receivers",
        "ssds",
        "batch",
        "micro_batch",
        "elements",
        "mtu",
        "window",
        "window_packets",
        "pairs_per_packet",
        "gradients_per_packet",
        "dp_values_per_frame",
        "registers",
        "iterations",
        "epochs",
        "pushes",
        "repetitions",
    ];
    const COUNTS: [&str; 2] = ["seed", "fault_seed"];
    const PROBABILITY_SUFFIXES: [&str; 2] = ["_fraction", "_efficiency"];
    const NON_NEGATIVE_SUFFIXES: [&str; 17] = [
        "_us", "_ns", "_ms", "_s", "_gbps", "_GBps", "_MBps", "_mbit", "_mhz", "_pct", "_bytes",
        "_kb", "_mb", "_MB", "_gb", "_w", "_tflops",
    ];
    if PROBABILITIES.contains(&name) || PROBABILITY_SUFFIXES.iter().any(|s| name.ends_with(s)) {
        Some(ParamRange::Probability)
    } else if POSITIVE_COUNTS.contains(&name) {
        Some(ParamRange::PositiveCount)
    } else if COUNTS.contains(&name) {
        Some(ParamRange::Count)
    } else if NON_NEGATIVE_SUFFIXES.iter().any(|s| name.ends_with(s)) {
        Some(ParamRange::NonNegative)
    } else {
        None
    }
}

/// Check one parameter value against the range its name implies ([`param_range`]); the error
/// is one sentence naming the parameter and the value (no file or line: the caller adds where
/// the value came from). `Spec::from_yaml` runs it on every fixed, profile and grid value, and
/// command-line overrides (`--set name=value`) are checked with the same function.
pub fn check_param(name: &str, value: &Scalar) -> Result<(), ParamError> {
    let Some(range) = param_range(name) else {
        return Ok(());
    };
    let bad = |kind: ParamErrorKind| {
        Err(ParamError {
            name: name.to_string(),
            value: value.to_string(),
            kind,
        })
    };
    let v = match value.as_f64() {
        Some(v) if v.is_finite() => v,
        None if range == ParamRange::NonNegative && matches!(value, Scalar::Str(_)) => {
            return Ok(());
        }
        _ => return bad(ParamErrorKind::NotFinite),
    };
    let whole = v.fract() == 0.0 && v <= 1e9;
    match range {
        ParamRange::Probability if !(0.0..=1.0).contains(&v) => bad(ParamErrorKind::Probability),
        ParamRange::PositiveCount if !(whole && v >= 1.0) => bad(ParamErrorKind::PositiveCount),
        ParamRange::Count if !(whole && v >= 0.0) => bad(ParamErrorKind::Count),
        ParamRange::NonNegative if v < 0.0 => bad(ParamErrorKind::NonNegative),
        _ => Ok(()),
    }
}

/// A parameter value outside the range its name implies ([`check_param`]): one sentence naming
/// the parameter and the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.sentence())]
pub struct ParamError {
    pub name: String,
    /// The value as the spec or `--set` gave it.
    pub value: String,
    pub kind: ParamErrorKind,
}

/// Which range a [`ParamError`]'s value is outside of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamErrorKind {
    /// Not a finite number (a word, NaN, infinity).
    NotFinite,
    Probability,
    PositiveCount,
    Count,
    NonNegative,
}

impl ParamError {
    fn sentence(&self) -> String {
        let (name, value) = (&self.name, &self.value);
        match self.kind {
            ParamErrorKind::NotFinite => format!("`{name}` must be a finite number, not `{value}`"),
            ParamErrorKind::Probability => {
                format!("`{name}` is a probability in [0, 1], not {value}")
            }
            ParamErrorKind::PositiveCount => {
                format!("`{name}` is a whole number of at least 1, not {value}")
            }
            ParamErrorKind::Count => {
                format!("`{name}` is a whole number of 0 or more, not {value}")
            }
            ParamErrorKind::NonNegative => {
                format!("`{name}` is a time, rate or size of 0 or more, not {value}")
            }
        }
    }
}

/// The papers, and `bench`: the cross-paper benchmark family (`experiments/bench/`: every system on
/// the same workloads, no paper, so no `paper:` block).
pub const PAPERS: [&str; 6] = ["netreduce", "libra", "aleph", "p4sgd", "luwu", "bench"];

/// The device kinds a spec's `testbed_devices` may name.
pub const TESTBED_DEVICES: [&str; 4] = ["tofino", "fpga", "rdma", "gpu"];

impl Spec {
    /// Parse and validate a spec from its text; `file` is used in error messages.
    pub fn from_yaml(file: &Path, text: &str) -> Result<Spec, SpecError> {
        let spec: Spec = serde_saphyr::from_str(text).map_err(|e| {
            let at = e.location();
            let line = at.as_ref().and_then(line);
            // the field whose value the parser refused (a word where a number goes), by the
            // error's place in the text; the place is then said once, as `file:line`
            let field = at
                .as_ref()
                .and_then(|l| field_at(text, l.line(), l.column()));
            let mut message = first_sentence(&e.to_string());
            if let Some(rest) = strip_place(&message) {
                message = rest.to_string();
            }
            SpecError {
                file: file.to_path_buf(),
                line,
                field,
                message,
            }
        })?;
        spec.validate(file, text)?;
        Ok(spec)
    }

    pub fn load(file: &Path) -> Result<Spec, SpecError> {
        let text = std::fs::read_to_string(file).map_err(|e| SpecError {
            file: file.to_path_buf(),
            line: None,
            field: None,
            message: format!("cannot read the spec: {e}"),
        })?;
        Spec::from_yaml(file, &text)
    }

    pub fn metric(&self, name: &str) -> Option<&Metric> {
        self.metrics.iter().find(|m| m.name == name)
    }

    /// Every parameter name the spec's points can carry (fixed, profile, grid).
    pub fn parameter_names(&self) -> BTreeSet<String> {
        let mut names: BTreeSet<String> = self.parameters.keys().cloned().collect();
        for p in self.profiles.values() {
            names.extend(p.parameters.keys().cloned());
            for block in &p.grid {
                names.extend(block.keys().cloned());
            }
        }
        names
    }

    fn validate(&self, file: &Path, text: &str) -> Result<(), SpecError> {
        // The line is found only once an error is certain: the text is read a second time into
        // a tree of spanned nodes and the path of keys is followed from the top.
        let err = |at: &[Seg], field: &str, message: String| SpecError {
            file: file.to_path_buf(),
            line: line_of(text, at),
            field: Some(field.to_string()),
            message,
        };
        use Seg::{Index as I, Key as K, KeyItself as KeyLine};
        if !PAPERS.contains(&self.paper_id.as_str()) {
            return Err(err(
                &[K("paper_id")],
                "paper_id",
                format!("`{}` is not one of {}", self.paper_id, PAPERS.join(", ")),
            ));
        }
        if let Some((j, d)) = self
            .testbed_devices
            .iter()
            .enumerate()
            .find(|(_, d)| !TESTBED_DEVICES.contains(&d.as_str()))
        {
            return Err(err(
                &[K("testbed_devices"), I(j)],
                "testbed_devices",
                format!("`{d}` is not one of {}", TESTBED_DEVICES.join(", ")),
            ));
        }
        if !self.id.starts_with(&format!("{}-", self.paper_id)) {
            return Err(err(
                &[K("id")],
                "id",
                format!("`{}` must start with `{}-`", self.id, self.paper_id),
            ));
        }
        if let Some(stem) = file.file_stem().and_then(|s| s.to_str()) {
            let expected = format!("{}-{}", self.paper_id, stem);
            if file.extension().is_some() && stem != "spec" && expected != self.id {
                return Err(err(
                    &[K("id")],
                    "id",
                    format!(
                        "`{}` does not match the file name (expected `{expected}`)",
                        self.id
                    ),
                ));
            }
        }
        if self.status == Status::Implemented && self.workload.is_none() {
            // A `workload: ~` is the line at fault; with no `workload` key, the status that
            // asks for one.
            let at: &[Seg] = if has_key(text, "workload") {
                &[K("workload")]
            } else {
                &[K("status")]
            };
            return Err(err(
                at,
                "workload",
                "an implemented experiment needs a `workload`".into(),
            ));
        }
        if self.fidelity.is_empty() {
            return Err(err(
                &[K("fidelity")],
                "fidelity",
                "list at least one fidelity class".into(),
            ));
        }
        if self.systems.is_empty() {
            return Err(err(
                &[K("systems")],
                "systems",
                "list at least one system".into(),
            ));
        }
        for (sys, kinds) in &self.system_devices {
            if !self.systems.contains(sys) {
                return Err(err(
                    &[K("system_devices"), KeyLine(sys)],
                    &format!("system_devices.{sys}"),
                    format!("`{sys}` is not in `systems` ({})", self.systems.join(", ")),
                ));
            }
            if let Some((j, d)) = kinds
                .iter()
                .enumerate()
                .find(|(_, d)| !TESTBED_DEVICES.contains(&d.as_str()))
            {
                return Err(err(
                    &[K("system_devices"), K(sys), I(j)],
                    &format!("system_devices.{sys}"),
                    format!("`{d}` is not one of {}", TESTBED_DEVICES.join(", ")),
                ));
            }
        }
        for name in ["quick", "full"] {
            let Some(p) = self.profiles.get(name) else {
                return Err(err(
                    &[KeyLine("profiles")],
                    "profiles",
                    format!("the `{name}` profile is missing (quick and full are required)"),
                ));
            };
            if p.repetitions == 0 {
                return Err(err(
                    &[K("profiles"), K(name), K("repetitions")],
                    &format!("profiles.{name}.repetitions"),
                    "must be at least 1".into(),
                ));
            }
            for (i, block) in p.grid.iter().enumerate() {
                for (k, vals) in block {
                    if vals.is_empty() {
                        return Err(err(
                            &[K("profiles"), K(name), K("grid"), I(i), K(k)],
                            &format!("profiles.{name}.grid[{i}].{k}"),
                            "an empty list makes no points".into(),
                        ));
                    }
                }
            }
        }
        for (k, v) in &self.parameters {
            check_param(k, v).map_err(|m| {
                err(
                    &[K("parameters"), K(k)],
                    &format!("parameters.{k}"),
                    m.to_string(),
                )
            })?;
        }
        for (name, p) in &self.profiles {
            for (k, v) in &p.parameters {
                check_param(k, v).map_err(|m| {
                    err(
                        &[K("profiles"), K(name), K("parameters"), K(k)],
                        &format!("profiles.{name}.parameters.{k}"),
                        m.to_string(),
                    )
                })?;
            }
            for (i, block) in p.grid.iter().enumerate() {
                for (k, vals) in block {
                    for (j, v) in vals.iter().enumerate() {
                        check_param(k, v).map_err(|m| {
                            err(
                                &[K("profiles"), K(name), K("grid"), I(i), K(k), I(j)],
                                &format!("profiles.{name}.grid[{i}].{k}"),
                                m.to_string(),
                            )
                        })?;
                    }
                }
            }
        }
        let mut seen = BTreeSet::new();
        for (j, m) in self.metrics.iter().enumerate() {
            if !seen.insert(m.name.as_str()) {
                return Err(err(
                    &[K("metrics"), I(j), K("name")],
                    "metrics",
                    format!("metric `{}` is declared twice", m.name),
                ));
            }
        }
        // a metric's unit is parsed here, once: a unit core::units converts or a declared count
        // or label ([`crate::units::LABELS`]); a misspelt unit is an error of the spec, never a
        // label with no effect or a failure at run time
        for (j, m) in self.metrics.iter().enumerate() {
            if !crate::units::is_known(&m.unit) {
                return Err(err(
                    &[K("metrics"), I(j), K("unit")],
                    &format!("metrics[{j}].unit"),
                    crate::units::unknown_unit_message(&m.unit),
                ));
            }
        }
        let systems: BTreeSet<&str> = self.systems.iter().map(String::as_str).collect();
        for (i, v) in self.paper.values.iter().enumerate() {
            if !systems.contains(v.system.as_str()) {
                return Err(err(
                    &[K("paper"), K("values"), I(i), K("system")],
                    &format!("paper.values[{i}].system"),
                    format!(
                        "`{}` is not in `systems` ({})",
                        v.system,
                        self.systems.join(", ")
                    ),
                ));
            }
            if self.metric(&v.metric).is_none() {
                return Err(err(
                    &[K("paper"), K("values"), I(i), K("metric")],
                    &format!("paper.values[{i}].metric"),
                    format!(
                        "`{}` is not a declared metric ({})",
                        v.metric,
                        self.metric_names()
                    ),
                ));
            }
        }
        let params = self.parameter_names();
        let mut claim_ids = BTreeSet::new();
        for (i, c) in self.claims.iter().enumerate() {
            if !claim_ids.insert(c.id.as_str()) {
                return Err(err(
                    &[K("claims"), I(i), K("id")],
                    &format!("claims[{i}].id"),
                    format!("claim `{}` is declared twice", c.id),
                ));
            }
            for (j, f) in c.fidelity.iter().enumerate() {
                if !self.fidelity.contains(f) {
                    return Err(err(
                        &[K("claims"), I(i), K("fidelity"), I(j)],
                        &format!("claims[{i}].fidelity"),
                        format!(
                            "`{f}` is not one of the spec's classes ({})",
                            fid_list(&self.fidelity)
                        ),
                    ));
                }
            }
            for (j, k) in c.rests_on.iter().enumerate() {
                let parts: Vec<&str> = k.split('.').collect();
                let ok = match parts.as_slice() {
                    ["systems", a, b, q] => [a, b, q].iter().all(|x| !x.is_empty()),
                    ["costs", n] => !n.is_empty(),
                    _ => false,
                };
                if !ok {
                    return Err(err(
                        &[K("claims"), I(i), K("rests_on"), I(j)],
                        &format!("claims[{i}].rests_on"),
                        format!(
                            "`{k}` is not a host profile key (`systems.<system>.<path>.<quantity>` or `costs.<name>`)"
                        ),
                    ));
                }
            }
            let expr_at = [K("claims"), I(i), K("expr")];
            let expr = claims::parse(&c.expr)
                .map_err(|e| err(&expr_at, &format!("claims[{i}].expr"), format!("{e}")))?;
            let refs = expr.references();
            for m in &refs.metrics {
                if self.metric(m).is_none() {
                    return Err(err(
                        &expr_at,
                        &format!("claims[{i}].expr"),
                        format!("unknown metric `{m}` (declared: {})", self.metric_names()),
                    ));
                }
            }
            for s in &refs.systems {
                if s != "*" && !systems.contains(s.as_str()) {
                    return Err(err(
                        &expr_at,
                        &format!("claims[{i}].expr"),
                        format!(
                            "unknown system `{s}` (declared: {})",
                            self.systems.join(", ")
                        ),
                    ));
                }
            }
            for p in &refs.params {
                if !params.contains(p) {
                    return Err(err(
                        &expr_at,
                        &format!("claims[{i}].expr"),
                        format!("unknown parameter `{p}` (parameters: {})", join(&params)),
                    ));
                }
            }
        }
        for (i, m) in self.metrics.iter().enumerate() {
            for f in m.not_comparable.keys() {
                if !self.fidelity.contains(f) {
                    return Err(err(
                        &[K("metrics"), I(i), K("not_comparable")],
                        &format!("metrics[{i}].not_comparable"),
                        format!(
                            "`{}` is not a class of this spec ({})",
                            f.as_str(),
                            self.fidelity
                                .iter()
                                .map(|f| f.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    ));
                }
            }
        }
        for (i, t) in self.tables.iter().enumerate() {
            if t.rows != "system" && !params.contains(&t.rows) {
                return Err(err(
                    &[K("tables"), I(i), K("rows")],
                    &format!("tables[{i}].rows"),
                    format!("`{}` is neither `system` nor a parameter", t.rows),
                ));
            }
            if t.columns.is_empty() {
                return Err(err(
                    &[K("tables"), I(i), K("columns")],
                    &format!("tables[{i}].columns"),
                    "list at least one metric".into(),
                ));
            }
            for (j, m) in t.columns.iter().enumerate() {
                if self.metric(m).is_none() {
                    return Err(err(
                        &[K("tables"), I(i), K("columns"), I(j)],
                        &format!("tables[{i}].columns"),
                        format!("unknown metric `{m}` (declared: {})", self.metric_names()),
                    ));
                }
            }
        }
        for (i, f) in self.figures.iter().enumerate() {
            if self.metric(&f.y).is_none() {
                return Err(err(
                    &[K("figures"), I(i), K("y")],
                    &format!("figures[{i}].y"),
                    format!(
                        "unknown metric `{}` (declared: {})",
                        f.y,
                        self.metric_names()
                    ),
                ));
            }
            if let Some(x) = &f.x {
                if f.kind != FigureKind::Cdf && !params.contains(x) && x != "system" {
                    return Err(err(
                        &[K("figures"), I(i), K("x")],
                        &format!("figures[{i}].x"),
                        format!("`{x}` is not a parameter (parameters: {})", join(&params)),
                    ));
                }
            } else if matches!(f.kind, FigureKind::Lines) {
                // No `x` to point at (or `x: ~`): the kind that needs one.
                let at: &[Seg] = &[K("figures"), I(i), K("kind")];
                return Err(err(
                    at,
                    &format!("figures[{i}].x"),
                    "a lines figure needs `x`".into(),
                ));
            }
            for (j, s) in f.series.iter().enumerate() {
                if s != "system" && !params.contains(s) {
                    return Err(err(
                        &[K("figures"), I(i), K("series"), I(j)],
                        &format!("figures[{i}].series"),
                        format!("`{s}` is neither `system` nor a parameter"),
                    ));
                }
            }
        }
        Ok(())
    }

    pub fn metric_names(&self) -> String {
        self.metrics
            .iter()
            .map(|m| m.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn fid_list(f: &[Fidelity]) -> String {
    f.iter().map(|x| x.as_str()).collect::<Vec<_>>().join(", ")
}

fn join(s: &BTreeSet<String>) -> String {
    s.iter().map(String::as_str).collect::<Vec<_>>().join(", ")
}

/// One step of a path through the YAML document: a mapping key or a sequence index.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Seg<'a> {
    /// The value under this key.
    Key(&'a str),
    /// The key itself (for an error about what the mapping under it lacks).
    KeyItself(&'a str),
    /// The element at this index.
    Index(usize),
}

/// A YAML node with its place in the text (serde-saphyr's spans), read only to find the line of
/// an error that validation found after parsing.
#[derive(Debug)]
struct Node(serde_saphyr::Spanned<NodeKind>);

#[derive(Debug)]
enum NodeKind {
    Map(Vec<(serde_saphyr::Spanned<String>, Node)>),
    Seq(Vec<Node>),
    Scalar,
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        serde_saphyr::Spanned::<NodeKind>::deserialize(d).map(Node)
    }
}

impl<'de> Deserialize<'de> for NodeKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{Error, MapAccess, SeqAccess, Visitor};
        struct Any;
        impl<'de> Visitor<'de> for Any {
            type Value = NodeKind;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any YAML node")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<NodeKind, A::Error> {
                let mut entries = Vec::new();
                while let Some(k) = m.next_key::<serde_saphyr::Spanned<String>>()? {
                    entries.push((k, m.next_value::<Node>()?));
                }
                Ok(NodeKind::Map(entries))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<NodeKind, A::Error> {
                let mut items = Vec::new();
                while let Some(n) = s.next_element::<Node>()? {
                    items.push(n);
                }
                Ok(NodeKind::Seq(items))
            }
            fn visit_bool<E: Error>(self, _: bool) -> Result<NodeKind, E> {
                Ok(NodeKind::Scalar)
            }
            fn visit_i64<E: Error>(self, _: i64) -> Result<NodeKind, E> {
                Ok(NodeKind::Scalar)
            }
            fn visit_u64<E: Error>(self, _: u64) -> Result<NodeKind, E> {
                Ok(NodeKind::Scalar)
            }
            fn visit_i128<E: Error>(self, _: i128) -> Result<NodeKind, E> {
                Ok(NodeKind::Scalar)
            }
            fn visit_u128<E: Error>(self, _: u128) -> Result<NodeKind, E> {
                Ok(NodeKind::Scalar)
            }
            fn visit_f64<E: Error>(self, _: f64) -> Result<NodeKind, E> {
                Ok(NodeKind::Scalar)
            }
            fn visit_str<E: Error>(self, _: &str) -> Result<NodeKind, E> {
                Ok(NodeKind::Scalar)
            }
            fn visit_bytes<E: Error>(self, _: &[u8]) -> Result<NodeKind, E> {
                Ok(NodeKind::Scalar)
            }
            fn visit_unit<E: Error>(self) -> Result<NodeKind, E> {
                Ok(NodeKind::Scalar)
            }
            fn visit_none<E: Error>(self) -> Result<NodeKind, E> {
                Ok(NodeKind::Scalar)
            }
            fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<NodeKind, D::Error> {
                NodeKind::deserialize(d)
            }
        }
        d.deserialize_any(Any)
    }
}

impl Node {
    fn entry(&self, key: &str) -> Option<&(serde_saphyr::Spanned<String>, Node)> {
        match &self.0.value {
            NodeKind::Map(entries) => entries.iter().find(|(k, _)| k.value == key),
            _ => None,
        }
    }
}

fn line(l: &serde_saphyr::Location) -> Option<usize> {
    Some(l.line() as usize).filter(|l| *l > 0)
}

/// The line of the node at `path` (the value, or the key for `KeyItself`), following the keys
/// in order from the top of the document; where the path ends early (a defaulted field), the
/// line of the deepest node it reaches.
pub(crate) fn line_of(text: &str, path: &[Seg]) -> Option<usize> {
    // `.nan`/`.inf` read into a typed f64 but the untyped node rejects them by default: pass them
    // through, or a file with one has no line at all
    let pass = serde_saphyr::options! {
        non_finite_float_policy: serde_saphyr::options::NonFiniteFloatPolicy::PassThrough,
    };
    let root: Node = serde_saphyr::from_str_with_options(text, pass).ok()?;
    let mut node = &root;
    let mut at = line(&node.0.referenced);
    for seg in path {
        match *seg {
            Seg::Key(k) => match node.entry(k) {
                Some((_, v)) => node = v,
                None => break,
            },
            Seg::KeyItself(k) => {
                if let Some((key, _)) = node.entry(k) {
                    at = line(&key.referenced).or(at);
                }
                break;
            }
            Seg::Index(i) => match &node.0.value {
                NodeKind::Seq(items) if i < items.len() => node = &items[i],
                _ => break,
            },
        }
        at = line(&node.0.referenced).or(at);
    }
    at
}

/// The dotted path (`profiles.quick.repetitions`, `claims[1].expr`) of the value that starts at
/// `line`:`column`, the deepest such node; None where no value starts there (the error is about
/// a key, or the text does not parse as YAML at all).
fn field_at(text: &str, line: u64, column: u64) -> Option<String> {
    fn walk(node: &Node, path: &str, line: u64, column: u64, found: &mut Option<String>) {
        let at = &node.0.referenced;
        if !path.is_empty() && at.line() == line && at.column() == column {
            *found = Some(path.to_string());
        }
        match &node.0.value {
            NodeKind::Map(entries) => {
                for (k, v) in entries {
                    let p = if path.is_empty() {
                        k.value.clone()
                    } else {
                        format!("{path}.{}", k.value)
                    };
                    walk(v, &p, line, column, found);
                }
            }
            NodeKind::Seq(items) => {
                for (i, v) in items.iter().enumerate() {
                    walk(v, &format!("{path}[{i}]"), line, column, found);
                }
            }
            NodeKind::Scalar => {}
        }
    }
    let root: Node = serde_saphyr::from_str(text).ok()?;
    let mut found = None;
    walk(&root, "", line, column, &mut found);
    found
}

/// A parser message without its leading `line N column M: ` (the error says the line itself).
fn strip_place(message: &str) -> Option<&str> {
    let rest = message.strip_prefix("line ")?;
    let (n, rest) = rest.split_once(" column ")?;
    let (m, rest) = rest.split_once(": ")?;
    (n.chars().all(|c| c.is_ascii_digit()) && m.chars().all(|c| c.is_ascii_digit())).then_some(rest)
}

/// Whether the document's top mapping has `key` (with any value, `~` included).
fn has_key(text: &str, key: &str) -> bool {
    serde_saphyr::from_str::<Node>(text).is_ok_and(|root| root.entry(key).is_some())
}

/// The 1-based line of the first occurrence of `needle` in `text`.
pub fn locate(text: &str, needle: &str) -> Option<usize> {
    text.lines().position(|l| l.contains(needle)).map(|i| i + 1)
}

/// The first line of a library error, without its trailing period, so ours stays one sentence.
fn first_sentence(s: &str) -> String {
    let line = s.lines().find(|l| !l.trim().is_empty()).unwrap_or(s).trim();
    let line = line.strip_prefix("error: ").unwrap_or(line);
    line.trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fig7() -> String {
        std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../experiments/netreduce/fig7.yaml"
        ))
        .expect("fig7 spec in the tree")
    }

    fn load(text: &str) -> Result<Spec, SpecError> {
        Spec::from_yaml(Path::new("experiments/netreduce/fig7.yaml"), text)
    }

    /// A value of the wrong type (a word where a count goes, a list where text goes) names the
    /// file, the line once and the field, as every other spec error does.
    #[test]
    fn type_errors_name_the_field_and_say_the_line_once() {
        let base = fig7();
        let cases = [
            (
                "    repetitions: 1\n",
                "    repetitions: three\n",
                "profiles.quick.repetitions",
            ),
            (
                "    repetitions: 1\n",
                "    repetitions: [1, 2]\n",
                "profiles.quick.repetitions",
            ),
        ];
        for (from, to, field) in cases {
            assert!(base.contains(from), "{from}");
            let e = load(&base.replacen(from, to, 1)).expect_err("a type error");
            let line = base[..base.find(from).expect("in fig7")].lines().count() + 1;
            assert_eq!(e.line, Some(line), "{e}");
            assert_eq!(e.field.as_deref(), Some(field), "{e}");
            let text = e.to_string();
            assert!(!text.contains("column"), "the place said once: {text}");
            assert!(
                text.starts_with(&format!(
                    "experiments/netreduce/fig7.yaml:{line}: field `{field}`: "
                )),
                "{text}"
            );
        }
    }

    /// Out-of-range parameter values are refused when the spec is read, with the value's line and
    /// field: a negative delay in a grid, a probability above 1, zero workers, a negative delay,
    /// a profile's fractional count, a word where a probability goes.
    #[test]
    fn out_of_range_parameters_name_file_line_and_field() {
        let base = fig7();
        load(&base).expect("the shipped spec is in range");
        let grid = "        alpha_us: [0.1, 0.3, 1, 3, 10, 30, 100]";
        let cases = [
            (
                grid,
                "        alpha_us: [0.1, -0.3, 1, 3, 10, 30, 100]",
                "alpha_us: [0.1, -0.3",
                "profiles.quick.grid[2].alpha_us",
                "`alpha_us` is a time, rate or size of 0 or more, not -0.3",
            ),
            (
                "  n: 8\n",
                "  n: 8\n  loss: 1.5\n",
                "  loss: 1.5",
                "parameters.loss",
                "`loss` is a probability in [0, 1], not 1.5",
            ),
            (
                "  n: 8\n",
                "  n: 8\n  workers: 0\n",
                "  workers: 0",
                "parameters.workers",
                "`workers` is a whole number of at least 1, not 0",
            ),
            (
                "  n: 8\n",
                "  n: 8\n  reorder_delay_us: -5\n",
                "  reorder_delay_us: -5",
                "parameters.reorder_delay_us",
                "`reorder_delay_us` is a time, rate or size of 0 or more, not -5",
            ),
            (
                "    estimated_seconds: 2\n",
                "    estimated_seconds: 2\n    parameters: {workers: 2.5}\n",
                "parameters: {workers: 2.5}",
                "profiles.quick.parameters.workers",
                "`workers` is a whole number of at least 1, not 2.5",
            ),
            (
                "  n: 8\n",
                "  n: 8\n  duplicate: \"often\"\n",
                "  duplicate: \"often\"",
                "parameters.duplicate",
                "`duplicate` must be a finite number, not `often`",
            ),
        ];
        for (from, to, at, field, message) in cases {
            assert!(base.contains(from), "{from}");
            let text = base.replacen(from, to, 1);
            let e = load(&text).expect_err(to);
            assert_eq!(e.line, locate(&text, at), "{e}");
            assert_eq!(e.field.as_deref(), Some(field), "{e}");
            assert_eq!(e.message, message, "{e}");
        }
    }

    #[test]
    fn check_param_by_name() {
        let ok = |n: &str, v: Scalar| check_param(n, &v).is_ok();
        // typed, with the sentence the spec errors and `--set` print
        let e = check_param("loss", &Scalar::Float(-0.01)).expect_err("out of range");
        assert_eq!(e.kind, ParamErrorKind::Probability);
        assert_eq!(
            e.to_string(),
            "`loss` is a probability in [0, 1], not -0.01"
        );
        let e = check_param("workers", &Scalar::Str("many".into())).expect_err("a word");
        assert_eq!(
            e.to_string(),
            "`workers` must be a finite number, not `many`"
        );
        assert!(ok("loss", Scalar::Float(0.0)) && ok("loss", Scalar::Int(1)));
        assert!(!ok("loss", Scalar::Float(-0.01)) && !ok("loss", Scalar::Str("high".into())));
        assert!(ok("workers", Scalar::Int(1)) && !ok("workers", Scalar::Int(-3)));
        assert!(ok("fault_seed", Scalar::Int(0)) && !ok("fault_seed", Scalar::Float(0.5)));
        assert!(ok("timeout_us", Scalar::Int(0)) && !ok("timeout_us", Scalar::Float(-1e-9)));
        assert!(!ok("line_rate_gbps", Scalar::Float(f64::INFINITY)));
        assert!(!ok("loss", Scalar::Float(f64::NAN)));
        // a text value under a unit suffix is not a quantity (a table written out)
        assert!(ok("mpi_allreduce_us", Scalar::Str("2: 32=1.22".into())));
        assert!(!ok("mpi_allreduce_us", Scalar::Bool(true)));
        assert!(ok("time_frac", Scalar::Float(1.4)));
        assert!(ok("gemm_efficiency", Scalar::Float(0.9)));
        assert!(!ok("gemm_efficiency", Scalar::Float(1.2)));
        // a name that implies no range takes any scalar
        assert!(ok("fixed_scale", Scalar::Float(-1e300)) && ok("model", Scalar::Str("x".into())));
    }

    #[test]
    fn fig7_loads() {
        let s = load(&fig7()).expect("valid");
        assert_eq!(s.id, "netreduce-fig7");
        assert_eq!(s.fidelity[0], Fidelity::Modelled);
        assert!(s.profiles["quick"].grid.len() == 3);
    }

    #[test]
    fn unknown_field_names_file_line_and_field() {
        let text = fig7().replace("artifact: ", "artefact: ");
        let e = load(&text).expect_err("unknown field");
        let msg = e.to_string();
        assert!(msg.starts_with("experiments/netreduce/fig7.yaml:"), "{msg}");
        assert!(msg.contains("artefact"), "{msg}");
        assert_eq!(e.line, locate(&text, "artefact:"), "{msg}");
        assert!(!msg.contains('\n'), "one sentence: {msg}");
    }

    /// A metric's unit is parsed when the spec loads: a misspelt one is a spec error naming the
    /// file, the line and the field, one sentence.
    #[test]
    fn an_unknown_metric_unit_names_file_line_and_field() {
        let base = fig7();
        let at = base.find("    unit: ms").expect("a unit in fig7");
        let text = format!(
            "{}    unit: Gbsp{}",
            &base[..at],
            &base[at + "    unit: ms".len()..]
        );
        let e = load(&text).expect_err("unknown unit");
        let line = text[..at].lines().count() + 1;
        assert_eq!(e.line, Some(line), "{e}");
        assert_eq!(e.field.as_deref(), Some("metrics[0].unit"), "{e}");
        let msg = e.to_string();
        assert!(
            msg.starts_with(&format!(
                "experiments/netreduce/fig7.yaml:{line}: field `metrics[0].unit`: `Gbsp` is not a known unit: "
            )),
            "{msg}"
        );
        assert!(!msg.contains('\n'), "one sentence: {msg}");
        // a unit of core::units or a declared count loads
        for unit in ["us", "count", "x"] {
            let t = format!(
                "{}    unit: {unit}{}",
                &base[..at],
                &base[at + "    unit: ms".len()..]
            );
            assert!(load(&t).is_ok(), "{unit}");
        }
    }

    #[test]
    fn wrong_type_names_line() {
        let text = fig7().replace(
            "repetitions: 1\n    warmup: 0\n    estimated_seconds: 2",
            "repetitions: many\n    warmup: 0\n    estimated_seconds: 2",
        );
        let e = load(&text).expect_err("bad type");
        assert_eq!(e.line, locate(&text, "repetitions: many"), "{e}");
    }

    #[test]
    fn claim_with_unknown_metric() {
        let text = fig7().replace(
            "expr: \"comm_time(parallel_netreduce) < min(",
            "expr: \"gput(parallel_netreduce) < min(",
        );
        let e = load(&text).expect_err("unknown metric");
        let msg = e.to_string();
        assert!(
            msg.contains("field `claims[0].expr`: unknown metric `gput`"),
            "{msg}"
        );
        // The line of the expression at fault, not of the claim's id.
        assert_eq!(e.line, locate(&text, "expr: \"gput(parallel_netreduce)"));
    }

    #[test]
    fn claim_syntax_error() {
        let text = fig7().replace(
            "flat(comm_time(parallel_netreduce), P, 1%) and",
            "flat(comm_time(parallel_netreduce), P, 1%) and and",
        );
        let e = load(&text).expect_err("syntax");
        assert!(e.to_string().contains("claims[1].expr"), "{e}");
    }

    #[test]
    fn paper_value_with_unknown_system() {
        let text = fig7().replace(
            "  values: []",
            "  values:\n    - {system: ring, metric: comm_time, value: 1.0}",
        );
        let e = load(&text).expect_err("unknown system");
        assert!(e.to_string().contains("paper.values[0].system"), "{e}");
        assert!(e.to_string().contains("`ring` is not in `systems`"), "{e}");
    }

    #[test]
    fn implemented_needs_workload_and_profiles() {
        let text = fig7().replace("workload: netreduce.appendix_a\n", "");
        assert!(
            load(&text)
                .expect_err("workload")
                .to_string()
                .contains("needs a `workload`")
        );
        let text = fig7().replace("  full:\n", "  fast:\n");
        assert!(
            load(&text)
                .expect_err("full")
                .to_string()
                .contains("`full` profile is missing")
        );
    }

    #[test]
    fn id_must_match_file() {
        let text = fig7().replace("id: netreduce-fig7", "id: netreduce-fig8");
        assert!(
            load(&text)
                .expect_err("id")
                .to_string()
                .contains("does not match the file name")
        );
    }
}
