//! Analysis of a run: rows exported to parquet (the `parquet` crate's column writer: typed parameter columns, a UTC
//! timestamp, the run's constants in the file's metadata) and CSV, repetitions aggregated
//! (median, mean, min, max, a 95% confidence interval of the mean), paper values joined, claims
//! evaluated.
//!
//! Statistics: the point estimate shown everywhere is the median of the repetitions (robust to a
//! slow outlier on a shared machine); the interval is Student's t interval of the mean,
//! mean +/- t(0.975, n-1) * s / sqrt(n), reported only when n >= 2. Claims are judged by
//! `inabench_core::claims::judge`: on the medians, against the planned points, and, when the
//! repetitions vary, by a percentile bootstrap over them (holds or fails only with 95%
//! confidence, inconclusive otherwise).

use crate::types::{AggRow, Analysis, ClaimResult, Comparison};
use inabench_core::claims::{self, Missing, Planned, PointState, RepObs, Verdict};
use inabench_core::plan;
use inabench_core::spec::Needs;
use inabench_core::spec::{Fidelity, Spec};
use inabench_core::store::HostFacts;
use inabench_core::store::{self, Manifest, Row, Stored};
use inabench_core::value::{Params, params_match};
use statrs::distribution::{ContinuousCDF, StudentsT};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(transparent)]
    Store(#[from] store::StoreError),
    #[error("parquet: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Render(String),
    /// The embedded font of the figures could not be registered.
    #[error(transparent)]
    Font(#[from] crate::render::svg::FontError),
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ReportError + '_ {
    move |source| ReportError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The type a parameter gets in `measurements.parquet`: the narrowest that holds every value
/// the run gave it (integers stay integers; integers mixed with decimals are decimals; anything
/// mixed with a string is text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ParamType {
    Int,
    Float,
    Bool,
    Text,
}

fn param_types(rows: &[Row]) -> BTreeMap<&str, ParamType> {
    use inabench_core::value::Scalar;
    let mut types: BTreeMap<&str, ParamType> = BTreeMap::new();
    for r in rows {
        for (k, v) in &r.params {
            let t = match v {
                Scalar::Int(_) => ParamType::Int,
                Scalar::Float(_) => ParamType::Float,
                Scalar::Bool(_) => ParamType::Bool,
                Scalar::Str(_) => ParamType::Text,
            };
            let merged = match (types.get(k.as_str()).copied(), t) {
                (None, t) => t,
                (Some(a), b) if a == b => a,
                (Some(ParamType::Int | ParamType::Float), ParamType::Int | ParamType::Float) => {
                    ParamType::Float
                }
                _ => ParamType::Text,
            };
            types.insert(k.as_str(), merged);
        }
    }
    types
}

/// One column of `measurements.parquet`: its schema leaf and its values (`None`: null).
enum ColumnData {
    Text(Vec<Option<String>>),
    Int(Vec<Option<i64>>),
    UInt32(Vec<u32>),
    Float(Vec<Option<f64>>),
    Bool(Vec<Option<bool>>),
    /// Microseconds since the Unix epoch, UTC.
    Timestamp(Vec<i64>),
}

impl ColumnData {
    fn leaf(
        &self,
        name: &str,
        nullable: bool,
    ) -> Result<parquet::schema::types::Type, ReportError> {
        use parquet::basic::{LogicalType, Repetition, TimeUnit, Type as Physical};
        use parquet::schema::types::Type;
        let (physical, logical) = match self {
            ColumnData::Text(_) => (Physical::BYTE_ARRAY, Some(LogicalType::String)),
            ColumnData::Int(_) => (Physical::INT64, None),
            ColumnData::UInt32(_) => (Physical::INT32, Some(LogicalType::integer(32, false))),
            ColumnData::Float(_) => (Physical::DOUBLE, None),
            ColumnData::Bool(_) => (Physical::BOOLEAN, None),
            ColumnData::Timestamp(_) => (
                Physical::INT64,
                Some(LogicalType::timestamp(true, TimeUnit::MICROS)),
            ),
        };
        Ok(Type::primitive_type_builder(name, physical)
            .with_repetition(if nullable {
                Repetition::OPTIONAL
            } else {
                Repetition::REQUIRED
            })
            .with_logical_type(logical)
            .build()?)
    }

    /// Write the column's values with definition levels (1 present, 0 null) when `nullable`.
    fn write(
        &self,
        col: &mut parquet::file::writer::SerializedColumnWriter<'_>,
        nullable: bool,
    ) -> Result<(), ReportError> {
        use parquet::data_type::{
            BoolType, ByteArray, ByteArrayType, DoubleType, Int32Type, Int64Type,
        };
        fn present<T: Clone>(v: &[Option<T>]) -> (Vec<T>, Vec<i16>) {
            let levels = v.iter().map(|x| i16::from(x.is_some())).collect();
            (v.iter().flatten().cloned().collect(), levels)
        }
        let levels = |l: &[i16]| if nullable { Some(l.to_vec()) } else { None };
        match self {
            ColumnData::Text(v) => {
                let (vals, l) = present(v);
                let vals: Vec<ByteArray> =
                    vals.into_iter().map(|s| s.into_bytes().into()).collect();
                col.typed::<ByteArrayType>()
                    .write_batch(&vals, levels(&l).as_deref(), None)?;
            }
            ColumnData::Int(v) => {
                let (vals, l) = present(v);
                col.typed::<Int64Type>()
                    .write_batch(&vals, levels(&l).as_deref(), None)?;
            }
            ColumnData::Float(v) => {
                let (vals, l) = present(v);
                col.typed::<DoubleType>()
                    .write_batch(&vals, levels(&l).as_deref(), None)?;
            }
            ColumnData::Bool(v) => {
                let (vals, l) = present(v);
                col.typed::<BoolType>()
                    .write_batch(&vals, levels(&l).as_deref(), None)?;
            }
            ColumnData::UInt32(v) => {
                // an unsigned 32-bit integer is stored in INT32's bits
                let vals: Vec<i32> = v.iter().map(|&x| x as i32).collect();
                col.typed::<Int32Type>().write_batch(&vals, None, None)?;
            }
            ColumnData::Timestamp(v) => {
                col.typed::<Int64Type>().write_batch(v, None, None)?;
            }
        }
        Ok(())
    }
}

/// The columns `measurements.parquet` holds: one row per measurement, `params` a group (a
/// struct to arrow, pandas and duckdb) with one typed, nullable field per parameter (null where
/// a point has no such parameter), `timestamp` a UTC timestamp in microseconds. Each entry:
/// name, data, and for `params` the group's fields.
/// Named columns, in file order.
type Columns = Vec<(String, ColumnData)>;

fn measurement_columns(rows: &[Row], run: &Manifest) -> (Columns, Columns) {
    use inabench_core::value::Scalar;
    let text = |f: fn(&Row) -> &str| {
        ColumnData::Text(rows.iter().map(|r| Some(f(r).to_string())).collect())
    };
    let mut params = Vec::new();
    for (name, t) in param_types(rows) {
        let value = |r: &Row| r.params.get(name).cloned();
        let data = match t {
            ParamType::Int => ColumnData::Int(
                rows.iter()
                    .map(|r| match value(r) {
                        Some(Scalar::Int(i)) => Some(i),
                        _ => None,
                    })
                    .collect(),
            ),
            ParamType::Float => ColumnData::Float(
                rows.iter()
                    .map(|r| value(r).as_ref().and_then(Scalar::as_f64))
                    .collect(),
            ),
            ParamType::Bool => ColumnData::Bool(
                rows.iter()
                    .map(|r| match value(r) {
                        Some(Scalar::Bool(b)) => Some(b),
                        _ => None,
                    })
                    .collect(),
            ),
            ParamType::Text => ColumnData::Text(
                rows.iter()
                    .map(|r| value(r).map(|v| v.to_string()))
                    .collect(),
            ),
        };
        params.push((name.to_string(), data));
    }
    // the run's constants, repeated on every row of the long format (a row does not carry them)
    let constant = |v: &str| ColumnData::Text(vec![Some(v.to_string()); rows.len()]);
    let head = vec![
        ("run_id".to_string(), constant(&run.run_id)),
        ("experiment".to_string(), constant(&run.experiment)),
        ("point_id".to_string(), text(|r| &r.point_id)),
        ("system".to_string(), text(|r| &r.system)),
        ("fidelity".to_string(), text(|r| r.fidelity.as_str())),
        ("fabric".to_string(), text(|r| &r.fabric)),
    ];
    let tail = vec![
        (
            "repetition".to_string(),
            ColumnData::UInt32(rows.iter().map(|r| r.repetition).collect()),
        ),
        ("metric".to_string(), text(|r| &r.metric)),
        (
            "value".to_string(),
            ColumnData::Float(rows.iter().map(|r| Some(r.value)).collect()),
        ),
        ("unit".to_string(), text(|r| &r.unit)),
        (
            "timestamp".to_string(),
            ColumnData::Timestamp(
                rows.iter()
                    .map(|r| (r.timestamp * 1e6).round() as i64)
                    .collect(),
            ),
        ),
    ];
    let mut top = head;
    // `params` goes between the row's identity and its measurement, as a marker here
    top.push(("params".to_string(), ColumnData::Int(Vec::new())));
    top.extend(tail);
    (top, params)
}

/// Write `rows` as `measurements.parquet` to `out` (snappy-compressed pages): the run's id and
/// experiment from `run` as columns, its constants also in the file's key-value metadata.
/// Returns the number of rows.
pub fn write_parquet(
    rows: &[Row],
    run: &Manifest,
    out: impl std::io::Write + Send,
) -> Result<usize, ReportError> {
    use parquet::basic::Compression;
    use parquet::file::metadata::KeyValue;
    use parquet::file::properties::WriterProperties;
    use parquet::file::writer::SerializedFileWriter;
    use parquet::schema::types::Type;
    use std::sync::Arc;
    let (top, params) = measurement_columns(rows, run);
    let mut fields = Vec::new();
    for (name, data) in &top {
        if name == "params" {
            if params.is_empty() {
                continue;
            }
            let group = params
                .iter()
                .map(|(n, d)| d.leaf(n, true).map(Arc::new))
                .collect::<Result<Vec<_>, _>>()?;
            fields.push(Arc::new(
                Type::group_type_builder("params")
                    .with_repetition(parquet::basic::Repetition::REQUIRED)
                    .with_fields(group)
                    .build()?,
            ));
        } else {
            fields.push(Arc::new(data.leaf(name, false)?));
        }
    }
    let schema = Arc::new(
        Type::group_type_builder("measurements")
            .with_fields(fields)
            .build()?,
    );
    let props = Arc::new(
        WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .build(),
    );
    let mut w = SerializedFileWriter::new(out, schema, props)?;
    // the leaves in schema order: the top columns with `params`' fields in its place
    let leaves: Vec<(&ColumnData, bool)> = top
        .iter()
        .flat_map(|(name, data)| {
            if name == "params" {
                params.iter().map(|(_, d)| (d, true)).collect::<Vec<_>>()
            } else {
                vec![(data, false)]
            }
        })
        .collect();
    let mut rg = w.next_row_group()?;
    let mut leaf = leaves.iter();
    while let Some(mut col) = rg.next_column()? {
        let Some((data, nullable)) = leaf.next() else {
            return Err(ReportError::Render(
                "the parquet schema has more columns than the rows".into(),
            ));
        };
        data.write(&mut col, *nullable)?;
        col.close()?;
    }
    rg.close()?;
    for (k, v) in run_metadata(run) {
        w.append_key_value_metadata(KeyValue::new(k, v));
    }
    w.close()?;
    Ok(rows.len())
}

/// The run's constants, written once in the parquet file's key-value metadata (`inabench.*`).
fn run_metadata(m: &Manifest) -> Vec<(String, String)> {
    let mut kv = vec![
        ("inabench.run_id".to_string(), m.run_id.clone()),
        ("inabench.experiment".to_string(), m.experiment.clone()),
        ("inabench.profile".to_string(), m.profile.clone()),
        ("inabench.seed".to_string(), m.seed.to_string()),
        ("inabench.spec_sha256".to_string(), m.spec_sha256.clone()),
        ("inabench.git_revision".to_string(), m.git_revision.clone()),
        (
            "inabench.inabench_version".to_string(),
            m.inabench_version.clone(),
        ),
    ];
    if !m.overrides.is_empty() {
        kv.push(("inabench.overrides".to_string(), m.overrides.join(" ")));
    }
    kv
}

/// Compact the run's rows (`rows.jsonl` as [`store::read_rows`] read it, once for the whole
/// report) into `measurements.parquet` in `run_dir` (written to a temp file, then renamed): the
/// export for pandas, polars, duckdb and arrow, the run's constants from `manifest` in its
/// metadata. Nothing is read back: the analysis works on the same rows. Returns the number of
/// rows written.
pub fn compact(run_dir: &Path, stored: &Stored, manifest: &Manifest) -> Result<usize, ReportError> {
    let path = run_dir.join(store::PARQUET_FILE);
    let tmp = run_dir.join(".measurements.parquet.tmp");
    let written = (|| -> Result<usize, ReportError> {
        // the error names the export, not the temp file it goes through
        let f = std::fs::File::create(&tmp).map_err(io(&path))?;
        let mut out = std::io::BufWriter::new(f);
        let n = write_parquet(&stored.rows, manifest, &mut out).map_err(|e| match e {
            ReportError::Parquet(parquet::errors::ParquetError::External(ext)) => {
                match ext.downcast::<std::io::Error>() {
                    Ok(source) => ReportError::Io {
                        path: path.clone(),
                        source: *source,
                    },
                    Err(ext) => ReportError::Parquet(parquet::errors::ParquetError::External(ext)),
                }
            }
            other => other,
        })?;
        std::io::Write::flush(&mut out).map_err(io(&path))?;
        std::fs::rename(&tmp, &path).map_err(io(&path))?;
        Ok(n)
    })();
    if written.is_err() {
        // a failed write (a full disk) leaves no half-written temp file behind
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// The aggregates as CSV (`report.csv`): one line per system, class, fabric, point and metric,
/// one column per parameter (empty where a point has none), then unit, n, median, mean, min,
/// max and the 95% interval.
pub fn aggregates_csv(agg: &[AggRow]) -> Result<Vec<u8>, ReportError> {
    use inabench_core::value::Scalar;
    // RFC 4180: a field with a comma, a quote or a line break is quoted, its quotes doubled
    fn field(s: &str) -> String {
        if s.contains([',', '"', '\n', '\r']) {
            format!("\"{}\"", s.replace('"', "\"\""))
        } else {
            s.to_string()
        }
    }
    let names: std::collections::BTreeSet<&str> = agg
        .iter()
        .flat_map(|a| a.params.keys().map(String::as_str))
        .collect();
    // a parameter named like one of the file's own columns (netreduce-fig7 has `n`) is written
    // as `param_<name>`
    const OWN: [&str; 12] = [
        "system", "fidelity", "fabric", "metric", "unit", "n", "median", "mean", "min", "max",
        "ci95_lo", "ci95_hi",
    ];
    let mut header: Vec<String> = vec!["system".into(), "fidelity".into(), "fabric".into()];
    header.extend(names.iter().map(|name| {
        if OWN.contains(name) {
            format!("param_{name}")
        } else {
            name.to_string()
        }
    }));
    header.extend(
        [
            "metric", "unit", "n", "median", "mean", "min", "max", "ci95_lo", "ci95_hi",
        ]
        .map(String::from),
    );
    let mut out = String::new();
    let mut line = |cells: Vec<String>| {
        out.push_str(&cells.iter().map(|c| field(c)).collect::<Vec<_>>().join(","));
        out.push('\n');
    };
    line(header);
    for a in agg {
        let mut cells = vec![
            a.system.clone(),
            a.fidelity.as_str().to_string(),
            a.fabric.clone(),
        ];
        // a parameter keeps its spec spelling; empty where the point has none
        cells.extend(names.iter().map(|name| match a.params.get(*name) {
            Some(Scalar::Str(s)) => s.clone(),
            Some(v) => v.to_string(),
            None => String::new(),
        }));
        cells.push(a.metric.clone());
        cells.push(a.unit.clone());
        cells.push(a.n.to_string());
        cells.extend([a.median, a.mean, a.min, a.max, a.ci_lo, a.ci_hi].map(|v| v.to_string()));
        line(cells);
    }
    Ok(out.into_bytes())
}

/// Aggregate repetitions per (system, fidelity, fabric, params, metric, unit), in that order.
pub fn aggregate(rows: &[Row]) -> Vec<AggRow> {
    type Key = (String, &'static str, String, String, String, String);
    let mut groups: BTreeMap<Key, (Params, Vec<(u32, f64)>)> = BTreeMap::new();
    for r in rows {
        let key = (
            r.system.clone(),
            r.fidelity.as_str(),
            r.fabric.clone(),
            // the canonical JSON of the parameters: the order the reports list points in
            serde_json::to_string(&r.params).unwrap_or_default(),
            r.metric.clone(),
            r.unit.clone(),
        );
        groups
            .entry(key)
            .or_insert_with(|| (r.params.clone(), Vec::new()))
            .1
            .push((r.repetition, r.value));
    }
    let mut tcache: BTreeMap<usize, f64> = BTreeMap::new();
    let mut out = Vec::with_capacity(groups.len());
    for ((system, fid, fabric, _, metric, unit), (params, mut reps)) in groups {
        let Some(fidelity) = Fidelity::parse(fid) else {
            continue;
        };
        reps.sort_by_key(|(rep, _)| *rep);
        let reps: Vec<f64> = reps.into_iter().map(|(_, v)| v).collect();
        let count = reps.len();
        let mean = reps.iter().sum::<f64>() / count as f64;
        let (lo, hi) = if count >= 2 {
            // Student's t interval of the mean
            let var = reps.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (count - 1) as f64;
            let t = *tcache.entry(count).or_insert_with(|| {
                StudentsT::new(0.0, 1.0, (count - 1) as f64)
                    .map(|d| d.inverse_cdf(0.975))
                    .unwrap_or(f64::NAN)
            });
            let half = t * var.sqrt() / (count as f64).sqrt();
            (mean - half, mean + half)
        } else {
            (mean, mean)
        };
        out.push(AggRow {
            system,
            fidelity,
            fabric,
            params,
            metric,
            unit,
            n: count,
            median: inabench_core::rng::stats::median(&reps).unwrap_or(f64::NAN),
            mean,
            min: reps.iter().copied().fold(f64::INFINITY, f64::min),
            max: reps.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            ci_lo: lo,
            ci_hi: hi,
            reps,
        });
    }
    out
}

/// The paper's values beside ours (one comparison per paper value and fidelity class present).
pub fn compare(spec: &Spec, agg: &[AggRow], fidelities: &[Fidelity]) -> Vec<Comparison> {
    let mut out = Vec::new();
    for pv in &spec.paper.values {
        let unit = spec
            .metric(&pv.metric)
            .map(|m| m.unit.clone())
            .unwrap_or_default();
        let not_comparable = |f: &Fidelity| {
            spec.metric(&pv.metric)
                .and_then(|m| m.not_comparable.get(f).cloned())
        };
        let mut any = false;
        for fid in fidelities {
            let matched: Vec<&AggRow> = agg
                .iter()
                .filter(|a| {
                    a.fidelity == *fid
                        && a.system == pv.system
                        && a.metric == pv.metric
                        && params_match(&a.params, &pv.params)
                })
                .collect();
            if matched.is_empty() {
                continue;
            }
            any = true;
            // one row per setting of the parameters that vary among the matching points (the
            // paper's value beside each, e.g. per host stack), never a median across settings
            let varying: Vec<&String> = matched
                .iter()
                .flat_map(|a| a.params.keys())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .filter(|k| !pv.params.contains_key(*k))
                .filter(|k| {
                    let first = matched[0].params.get(*k).map(|v| v.to_string());
                    matched
                        .iter()
                        .any(|a| a.params.get(*k).map(|v| v.to_string()) != first)
                })
                .collect();
            let mut groups: BTreeMap<Vec<String>, (Params, Vec<f64>)> = BTreeMap::new();
            for a in &matched {
                let mut params = pv.params.clone();
                let mut key = Vec::new();
                for k in &varying {
                    if let Some(v) = a.params.get(*k) {
                        key.push(format!("{k}={v}"));
                        params.insert((*k).clone(), v.clone());
                    }
                }
                groups
                    .entry(key)
                    .or_insert_with(|| (params, Vec::new()))
                    .1
                    .push(a.median);
            }
            for (_, (params, mut medians)) in groups {
                medians.sort_by(f64::total_cmp);
                let ours = medians[medians.len() / 2];
                out.push(Comparison {
                    system: pv.system.clone(),
                    metric: pv.metric.clone(),
                    unit: unit.clone(),
                    params,
                    paper: pv.value,
                    ours: Some(ours),
                    fidelity: Some(*fid),
                    deviation: (pv.value != 0.0 && not_comparable(fid).is_none())
                        .then(|| (ours - pv.value) / pv.value.abs()),
                    note: pv.note.clone(),
                    not_comparable: not_comparable(fid),
                });
            }
        }
        if !any {
            out.push(Comparison {
                system: pv.system.clone(),
                metric: pv.metric.clone(),
                unit,
                params: pv.params.clone(),
                paper: pv.value,
                ours: None,
                fidelity: None,
                deviation: None,
                note: pv.note.clone(),
                not_comparable: None,
            });
        }
    }
    out
}

/// What a run planned and how each planned (class, system, point) ended, for judging claims
/// against the plan.
#[derive(Debug, Clone, Default)]
pub struct PlanStates {
    pub by_class: BTreeMap<Fidelity, Vec<Planned>>,
}

impl PlanStates {
    /// From the spec's profile, the run's classes and the point records of `rows.jsonl` (read
    /// from `run_dir`; [`PlanStates::of_stored`] when the caller has read them already).
    pub fn of_run(run_dir: &Path, spec: &Spec, m: &Manifest) -> Result<PlanStates, ReportError> {
        Ok(PlanStates::of_stored(&store::read_rows(run_dir)?, spec, m))
    }

    /// From the spec's profile, the run's classes and `st`'s point records.
    pub fn of_stored(st: &Stored, spec: &Spec, m: &Manifest) -> PlanStates {
        let Ok(points) = plan::expand(spec, &m.profile) else {
            return PlanStates::default();
        };
        // runs written before multi-class runs keyed points by their bare id
        let legacy = m.fidelities.is_empty();
        let mut by_class: BTreeMap<Fidelity, Vec<Planned>> = BTreeMap::new();
        for f in m.classes() {
            for pt in &points {
                let key = if legacy {
                    pt.id.clone()
                } else {
                    plan::run_key(f, &pt.id)
                };
                let state = if let Some(w) = st.wrong.get(&key) {
                    PointState::Wrong(w.clone())
                } else if st.done.contains(&key) {
                    PointState::Done
                } else if m.systems_not_built.contains(&pt.system) {
                    PointState::Missing(Missing::NotBuilt)
                } else if let Some(why) = plan::why_not_here(&m.rows_not_here, f, &pt.system) {
                    PointState::Missing(Missing::NotHere(why.to_string()))
                } else if let Some(kind) = st.failed.get(&key) {
                    PointState::Missing(Missing::Failed(*kind, st.failed_why.get(&key).cloned()))
                } else {
                    PointState::Missing(Missing::Interrupted)
                };
                by_class.entry(f).or_default().push(Planned {
                    system: pt.system.clone(),
                    params: pt.params.clone(),
                    state,
                });
            }
        }
        PlanStates { by_class }
    }
}

/// What a claim's needs lack on the host a run ran on (None: all met).
pub fn unmet_needs(n: &Needs, class: Fidelity, host: &HostFacts) -> Option<String> {
    if !n.classes.contains(&class) {
        return None;
    }
    let mut missing = Vec::new();
    if let Some(c) = n.cores
        && (host.cores as u32) < c
    {
        missing.push(format!("{c} cores, this host has {}", host.cores));
    }
    if n.root && !host.root {
        missing.push("root, the run had none".to_string());
    }
    // the hardware class runs only where the testbed has its devices (the planner checks)
    if class != Fidelity::Hardware {
        if let Some(r) = n.line_rate_gbps {
            missing.push(format!(
                "a NIC at {} Gbit/s, the {class} fabric is software on this host",
                claims::fmt_num(r)
            ));
        }
        if !n.devices.is_empty() {
            missing.push(format!(
                "{} (the {class} class runs without devices)",
                n.devices.join(", ")
            ));
        }
        if let Some(d) = &n.dataset {
            missing.push(format!("the data set {d}, which is not shipped"));
        }
    }
    if missing.is_empty() {
        return None;
    }
    Some(format!(
        "needs {}{}",
        missing.join("; "),
        n.why
            .as_ref()
            .map(|w| format!(" ({w})"))
            .unwrap_or_default()
    ))
}

/// Each claim's verdict per class, judged against the plan and the host's facts.
pub fn check_claims_planned(
    spec: &Spec,
    agg: &[AggRow],
    fidelities: &[Fidelity],
    planned: &PlanStates,
    host: Option<&HostFacts>,
) -> Vec<ClaimResult> {
    let mut out = Vec::new();
    let mut by_class: BTreeMap<Fidelity, Vec<RepObs>> = BTreeMap::new();
    for a in agg {
        by_class.entry(a.fidelity).or_default().push(RepObs {
            system: a.system.clone(),
            params: a.params.clone(),
            metric: a.metric.clone(),
            reps: if a.reps.is_empty() {
                vec![a.median]
            } else {
                a.reps.clone()
            },
        });
    }
    for c in &spec.claims {
        let classes: Vec<Fidelity> = if c.fidelity.is_empty() {
            spec.fidelity.clone()
        } else {
            c.fidelity.clone()
        };
        let expr = match claims::parse(&c.expr) {
            Ok(e) => e,
            Err(e) => {
                let v = Verdict::NotCheckable(format!("the expression does not parse: {e}"));
                out.push(ClaimResult::of(c, classes[0], &v));
                continue;
            }
        };
        let mut any = false;
        for fid in fidelities.iter().filter(|f| classes.contains(f)) {
            any = true;
            if let (Some(n), Some(h)) = (&c.needs, host)
                && let Some(why) = unmet_needs(n, *fid, h)
            {
                let instead: Vec<&str> = classes
                    .iter()
                    .filter(|f| !n.classes.contains(f))
                    .map(|f| f.as_str())
                    .collect();
                let v = Verdict::NotCheckable(if instead.is_empty() {
                    why
                } else {
                    format!("{why}; checked in {} instead", instead.join(", "))
                });
                out.push(ClaimResult::of(c, *fid, &v));
                continue;
            }
            let obs = by_class.get(fid).map(Vec::as_slice).unwrap_or(&[]);
            let plan = planned.by_class.get(fid).map(Vec::as_slice).unwrap_or(&[]);
            let seed = claims_seed(&spec.id, &c.id, *fid);
            let v = claims::judge(&expr, obs, &spec.paper.values, plan, seed);
            out.push(ClaimResult::of(c, *fid, &v));
        }
        if !any {
            let ran = fidelities
                .iter()
                .map(|f| f.as_str())
                .collect::<Vec<_>>()
                .join(", ");
            let wants = classes
                .iter()
                .map(|f| f.as_str())
                .collect::<Vec<_>>()
                .join(", ");
            let v = Verdict::NotCheckable(format!(
                "the claim is about {wants} results; this run is {}",
                if ran.is_empty() {
                    "empty".to_string()
                } else {
                    ran
                }
            ));
            out.push(ClaimResult::of(c, classes[0], &v));
        }
    }
    out
}

/// The bootstrap's seed: fixed per (experiment, claim, class), so a report is reproducible.
fn claims_seed(experiment: &str, claim: &str, class: Fidelity) -> u64 {
    inabench_core::rng::SplitMix64::derive(0x1ab, &format!("{experiment}/{claim}/{class}"))
        .next_u64()
}

/// The claims with the break-evens the harness solved for the run (`breakeven.json`, written
/// after the run for claims that declare `rests_on:`); a file that does not read is ignored.
fn with_breakevens(
    run_dir: &Path,
    claims: Vec<crate::types::ClaimResult>,
) -> Vec<crate::types::ClaimResult> {
    let Ok(text) = std::fs::read_to_string(run_dir.join(crate::types::BREAKEVEN_FILE)) else {
        return claims;
    };
    let Ok(bes) = serde_json::from_str::<Vec<crate::types::BreakEven>>(&text) else {
        return claims;
    };
    claims
        .into_iter()
        .map(|c| {
            let (id, fidelity) = (c.id.clone(), c.fidelity);
            bes.iter()
                .filter(|b| b.claim == id && b.fidelity == fidelity)
                .fold(c, |c, b| c.with_breakeven(b))
        })
        .collect()
}

/// Analyse a run folder against its spec, reading its `rows.jsonl` (the scoreboard's path for
/// a run without `report.json`; the report after a run reads the rows once and calls
/// [`analyse_stored`]).
pub fn analyse(run_dir: &Path, spec: &Spec, manifest: Manifest) -> Result<Analysis, ReportError> {
    analyse_stored(run_dir, &store::read_rows(run_dir)?, spec, manifest)
}

/// Analyse a run's rows and point records as [`store::read_rows`] read them from `run_dir`
/// (which is read again only for the harness's `breakeven.json`).
pub fn analyse_stored(
    run_dir: &Path,
    stored: &Stored,
    spec: &Spec,
    manifest: Manifest,
) -> Result<Analysis, ReportError> {
    let rows = &stored.rows;
    let rows_total = rows.len();
    let agg = aggregate(rows);
    let mut fidelities: Vec<Fidelity> = agg.iter().map(|a| a.fidelity).collect();
    // classes the run planned count even when no row came back (every point failed)
    fidelities.extend(manifest.classes());
    fidelities.sort();
    fidelities.dedup();
    let comparisons = compare(spec, &agg, &fidelities);
    let planned = PlanStates::of_stored(stored, spec, &manifest);
    let claims = check_claims_planned(spec, &agg, &fidelities, &planned, Some(&manifest.host));
    let claims = with_breakevens(run_dir, claims);
    Ok(Analysis {
        manifest,
        spec: spec.clone(),
        rows_total,
        agg,
        comparisons,
        claims,
        fidelities,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use inabench_core::store::{Record, RunWriter};
    use inabench_core::value::Scalar;

    fn row(system: &str, p: i64, rep: u32, v: f64) -> Row {
        let mut params = Params::new();
        params.insert("P".into(), Scalar::Int(p));
        Row {
            point_id: format!("{system}{p}"),
            system: system.into(),
            fidelity: Fidelity::Emulated,
            fabric: "mem".into(),
            params,
            repetition: rep,
            metric: "gput".into(),
            value: v,
            unit: "Gbps".into(),
            timestamp: 0.0,
        }
    }

    /// A manifest as a run writes it (fields added later take their defaults).
    fn manifest(run_id: &str) -> Manifest {
        serde_json::from_value(serde_json::json!({
            "run_id": run_id, "experiment": "e", "title": "", "spec_file": "",
            "spec_sha256": "", "profile": "quick", "fidelity": "emulated", "fabric": "mem",
            "seed": 7, "git_revision": "", "inabench_version": "", "command": [],
            "host": HostFacts::default(), "testbed": "", "testbed_sha256": "", "drivers": [],
            "fidelity_reason": "", "started": "", "finished": null, "elapsed_s": 0.0,
            "status": "complete", "points_total": 2, "points_done": 2, "points_failed": 0,
        }))
        .expect("manifest")
    }

    #[test]
    fn aggregates_repetitions_with_interval() {
        let rows = vec![
            row("a", 32, 0, 1.0),
            row("a", 32, 1, 2.0),
            row("a", 32, 2, 6.0),
            row("b", 32, 0, 4.0),
        ];
        let agg = aggregate(&rows);
        assert_eq!(agg.len(), 2);
        let a = &agg[0];
        assert_eq!(
            (a.system.as_str(), a.n, a.median, a.min, a.max),
            ("a", 3, 2.0, 1.0, 6.0)
        );
        assert!((a.mean - 3.0).abs() < 1e-12);
        // s = sqrt(7), t(0.975, 2) = 4.3027
        let half = 4.302_652_7 * 7f64.sqrt() / 3f64.sqrt();
        assert!((a.ci_hi - (3.0 + half)).abs() < 1e-4, "{}", a.ci_hi);
        assert_eq!(agg[1].ci_lo, agg[1].mean);
        assert_eq!(agg[1].params["P"], Scalar::Int(32));
    }

    #[test]
    fn compacts_to_parquet_and_reads_back() {
        let d = tempfile::tempdir().expect("tmp");
        let mut w = RunWriter::open(d.path()).expect("open");
        for r in [row("a", 32, 0, 1.5), row("a", 64, 0, 2.5)] {
            let id = r.point_id.clone();
            w.append(&Record::Row(r)).expect("row");
            w.append(&Record::PointDone {
                point_id: id,
                ok: true,
                error: None,
                wrong: false,
                failure: None,
            })
            .expect("done");
        }
        w.flush().expect("flush");
        let stored = store::read_rows(d.path()).expect("rows");
        assert_eq!(
            compact(d.path(), &stored, &manifest("run-9")).expect("compact"),
            2
        );
        // read back with the parquet crate's own reader: the schema's types and every value
        use parquet::file::reader::{FileReader, SerializedFileReader};
        let f = std::fs::File::open(d.path().join(store::PARQUET_FILE)).expect("parquet");
        let r = SerializedFileReader::new(f).expect("read");
        let schema = r.metadata().file_metadata().schema_descr();
        let leaf = |path: &str| {
            (0..schema.num_columns())
                .map(|i| schema.column(i))
                .find(|c| c.path().string() == path)
                .unwrap_or_else(|| panic!("no column {path}"))
        };
        // the parameter is a typed, nullable field of the params group, the timestamp a UTC
        // timestamp in microseconds
        assert_eq!(
            leaf("params.P").physical_type(),
            parquet::basic::Type::INT64
        );
        assert_eq!(leaf("params.P").max_def_level(), 1);
        assert_eq!(
            leaf("timestamp").logical_type_ref(),
            Some(&parquet::basic::LogicalType::timestamp(
                true,
                parquet::basic::TimeUnit::MICROS
            ))
        );
        let rows: Vec<String> = r
            .get_row_iter(None)
            .expect("rows")
            .map(|row| row.expect("row").to_string())
            .collect();
        assert_eq!(rows.len(), 2);
        assert!(rows[0].contains("params: {P: 32}"), "{}", rows[0]);
        assert!(rows[1].contains("params: {P: 64}"), "{}", rows[1]);
        assert!(rows[1].contains("value: 2.5"), "{}", rows[1]);
        // the run's id and experiment are columns of every row, from the manifest
        assert!(
            rows.iter()
                .all(|r| r.contains(r#"run_id: "run-9", experiment: "e""#)),
            "{rows:?}"
        );
        assert_eq!(r.metadata().file_metadata().num_rows(), 2);
        // the run's constants come from the manifest given, once, in the file's metadata
        let kv = r
            .metadata()
            .file_metadata()
            .key_value_metadata()
            .expect("metadata");
        let meta = |k: &str| kv.iter().find(|e| e.key == k).and_then(|e| e.value.clone());
        assert_eq!(meta("inabench.run_id").as_deref(), Some("run-9"));
        assert_eq!(meta("inabench.seed").as_deref(), Some("7"));
        let agg = aggregate(&stored.rows);
        assert_eq!(
            agg.iter().map(|a| a.median).collect::<Vec<_>>(),
            vec![1.5, 2.5]
        );
        let csv = String::from_utf8(aggregates_csv(&agg).expect("csv")).expect("utf8");
        let mut lines = csv.lines();
        assert_eq!(
            lines.next(),
            Some("system,fidelity,fabric,P,metric,unit,n,median,mean,min,max,ci95_lo,ci95_hi")
        );
        assert_eq!(
            lines.next(),
            Some("a,emulated,mem,32,gput,Gbps,1,1.5,1.5,1.5,1.5,1.5,1.5")
        );
    }
}
