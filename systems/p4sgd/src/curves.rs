//! Training loss curves of P4SGD and its baselines (what p4sgd-fig14 plots): real training on
//! this host, each system with its own arithmetic.
//!
//! - `p4sgd`: features quantised to `precision_bits` (MLWeaving's scheme), model-parallel over
//!   `workers` feature partitions, the partial activations of every micro-batch of 8 converted to
//!   32-bit fixed point and all-reduced through the P4SGD protocol code ([`ProtocolReducer`]:
//!   workers and switch program on the sim fabric, each result checked identical at all workers);
//! - `cpusync`: float32 model-parallel, activations summed pairwise (recursive doubling's order);
//! - `gpusync`: float32 model-parallel, dot products summed in blocks of 32 (a blocked SGEMM's
//!   order), activations summed exactly.
//!
//! The loss is the mean loss of the model over the full-precision training set.

use crate::allreduce::{every_node, run_nodes};
use crate::glm::{
    self, Dataset, Glm, GlmError, LocalSum, Reducer, Sgd, TreeSum, epoch_model_parallel,
};
use crate::protocol::{P4sgdSwitch, P4sgdWorker, SwitchConfig, WorkerConfig};
use inabench_fabric::Node;
use inabench_fabric::fault::Faults;
use inabench_fabric::sim::LinkConfig;
use inabench_fabric::{NodeId, Sim};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

const ELEMENTS: usize = 8;

/// All-reduce of float vectors through the P4SGD protocol: values in 32-bit fixed point with
/// `frac_bits` fractional bits, 8 per operation, on the sim fabric (endpoints kept across calls,
/// so slots are reused round after round).
pub struct ProtocolReducer {
    workers: usize,
    frac_bits: u32,
    nodes: Option<Vec<Node<P4sgdWorker, P4sgdSwitch>>>,
    faults: Faults,
    calls: u64,
    pub retransmissions: u64,
}

impl ProtocolReducer {
    pub fn new(workers: usize, frac_bits: u32, faults: Faults) -> Result<Self, GlmError> {
        let sw = workers as NodeId;
        let mut nodes = Vec::new();
        for r in 0..workers {
            let w = P4sgdWorker::new(WorkerConfig {
                rank: r,
                workers,
                switch: sw,
                slots: 256,
                elements: ELEMENTS,
                rto_ns: 20_000,
            })
            .map_err(|e| GlmError::Reduce(e.to_string()))?;
            nodes.push(Node::Worker(w));
        }
        let s = P4sgdSwitch::new(sw, SwitchConfig::paper(workers))
            .map_err(|e| GlmError::Reduce(e.to_string()))?;
        nodes.push(Node::Switch(s));
        Ok(ProtocolReducer {
            workers,
            frac_bits,
            nodes: Some(nodes),
            faults,
            calls: 0,
            retransmissions: 0,
        })
    }
}

impl Reducer for ProtocolReducer {
    fn allreduce(&mut self, parts: &[Vec<f32>]) -> Result<Vec<f32>, GlmError> {
        if parts.len() != self.workers {
            return Err(GlmError::Reduce(format!(
                "{} vectors for {} workers",
                parts.len(),
                self.workers
            )));
        }
        let n = parts[0].len();
        let scale = f64::from(1u32 << self.frac_bits);
        let limit = f64::from(i32::MAX) / self.workers as f64;
        let ops = n.div_ceil(ELEMENTS);
        // convert everything first: an error leaves the endpoints untouched
        let mut fixed_parts = Vec::with_capacity(parts.len());
        for v in parts {
            if v.len() != n {
                return Err(GlmError::Reduce("vectors of different lengths".into()));
            }
            let mut ops_of = Vec::with_capacity(ops);
            for c in 0..ops {
                let mut fixed = vec![0i32; ELEMENTS];
                for (k, f) in fixed.iter_mut().enumerate() {
                    let x = v.get(c * ELEMENTS + k).copied().unwrap_or(0.0);
                    let q = (f64::from(x) * scale).round();
                    if !q.is_finite() || q.abs() > limit {
                        return Err(GlmError::Reduce(format!(
                            "partial activation {x} does not fit 32-bit fixed point with {} fractional bits over {} workers",
                            self.frac_bits, self.workers
                        )));
                    }
                    *f = q as i32;
                }
                ops_of.push(fixed);
            }
            fixed_parts.push(ops_of);
        }
        let mut nodes = self
            .nodes
            .take()
            .ok_or_else(|| GlmError::Reduce("an earlier all-reduce failed".into()))?;
        for (p, ops_of) in fixed_parts.into_iter().enumerate() {
            let Some(Node::Worker(w)) = nodes.get_mut(p) else {
                return Err(GlmError::Reduce("worker missing".into()));
            };
            for fixed in ops_of {
                w.submit(0, fixed)
                    .map_err(|e| GlmError::Reduce(e.to_string()))?;
            }
        }
        self.calls += 1;
        let faults = Faults {
            seed: self.faults.seed.wrapping_add(self.calls),
            ..self.faults
        };
        let mut fabric = Sim {
            faults,
            ..Sim::new(LinkConfig::gbps100(), self.workers as NodeId)
        };
        let until = every_node(nodes.len(), 60_000_000_000);
        let (mut nodes, rep) =
            run_nodes(&mut fabric, nodes, &until).map_err(|e| GlmError::Reduce(e.to_string()))?;
        if !rep.finished {
            return Err(GlmError::Reduce(
                "the all-reduce did not finish in 60 s of virtual time".into(),
            ));
        }
        let mut first: Option<Vec<i32>> = None;
        for node in nodes.iter_mut() {
            if let Node::Worker(w) = node {
                let mut got: Vec<(u64, Vec<i32>)> = std::iter::from_fn(|| w.take_completed())
                    .map(|c| (c.op, c.values))
                    .collect();
                got.sort_by_key(|(op, _)| *op);
                if got.len() != ops {
                    return Err(GlmError::Reduce(format!(
                        "worker {} got {} of {ops} results",
                        w.rank(),
                        got.len()
                    )));
                }
                let flat: Vec<i32> = got.into_iter().flat_map(|(_, v)| v).collect();
                self.retransmissions = w.counters.retransmissions;
                match &first {
                    None => first = Some(flat),
                    Some(f) if *f != flat => {
                        return Err(GlmError::Reduce(
                            "workers received different aggregates".into(),
                        ));
                    }
                    Some(_) => {}
                }
            }
        }
        self.nodes = Some(nodes);
        let flat = first.ok_or_else(|| GlmError::Reduce("no workers".into()))?;
        Ok(flat
            .into_iter()
            .take(n)
            .map(|v| (f64::from(v) / scale) as f32)
            .collect())
    }
}

/// Where a data set's samples come from: a LIBSVM file found in `INABENCH_DATA_DIR` (named by
/// its path, length and modification time) or the seeded synthetic stand-in of Table II's shape.
/// Every memo of results trained on a data set keys on it, so a file that appears, changes or
/// goes away between two experiments of one process is never answered from the other's memo.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DataSource {
    File {
        path: std::path::PathBuf,
        len: u64,
        modified_ns: u128,
    },
    Synthetic,
}

impl DataSource {
    /// The source of data set `name` now: `<name>`, `<name>.svm` or `<name>.libsvm` in
    /// `INABENCH_DATA_DIR`, else the synthetic stand-in.
    pub fn find(name: &str) -> DataSource {
        let dir = std::env::var_os("INABENCH_DATA_DIR");
        DataSource::find_in(dir.as_deref().map(std::path::Path::new), name)
    }

    /// As [`DataSource::find`], looking in `dir`.
    pub fn find_in(dir: Option<&std::path::Path>, name: &str) -> DataSource {
        let Some(dir) = dir else {
            return DataSource::Synthetic;
        };
        for file in [
            name.to_string(),
            format!("{name}.svm"),
            format!("{name}.libsvm"),
        ] {
            let path = dir.join(&file);
            if let Ok(meta) = std::fs::metadata(&path)
                && meta.is_file()
            {
                let modified_ns = meta
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_nanos());
                return DataSource::File {
                    path,
                    len: meta.len(),
                    modified_ns,
                };
            }
        }
        DataSource::Synthetic
    }
}

/// The data a point trains on, and a sentence saying which it is.
pub fn load(name: &str, max_rows: usize, seed: u64) -> Result<(Dataset, String), GlmError> {
    load_from(&DataSource::find(name), name, max_rows, seed)
}

/// The data of `name` from `source`, and a sentence saying which it is.
pub fn load_from(
    source: &DataSource,
    name: &str,
    max_rows: usize,
    seed: u64,
) -> Result<(Dataset, String), GlmError> {
    if let DataSource::File { path: p, .. } = source {
        let d = glm::read_libsvm(p)?;
        let msg = format!(
            "{name}: LIBSVM file {} ({} samples x {} features)",
            p.display(),
            d.rows(),
            d.cols
        );
        return Ok((d, msg));
    }
    let s = glm::shape(name).ok_or_else(|| {
        GlmError::Invalid(format!(
            "unknown data set `{name}` (gisette, real_sim, rcv1, amazon_fashion, avazu, small)"
        ))
    })?;
    let rows = s.rows.min(max_rows.max(1));
    let d = glm::synthetic(&s, rows, seed);
    let msg = format!(
        "{name}: seeded synthetic stand-in (seed {seed}) of Table II's shape, {rows} of {} samples x {} features, {} non-zeros per row{}",
        s.rows,
        s.cols,
        s.nnz_per_row,
        if rows < s.rows { " (subsampled)" } else { "" }
    );
    Ok((d, msg))
}

type CurveKey = (String, String, DataSource, u64, String);
type CurveCache = Mutex<HashMap<CurveKey, (Vec<f64>, String)>>;

/// Losses after epochs 1..=epochs of one system, on the data set's source now
/// ([`DataSource::find`]).
#[allow(clippy::too_many_arguments)]
pub fn curve(
    system: &str,
    dataset: &str,
    max_rows: usize,
    seed: u64,
    glm_kind: Glm,
    sgd: Sgd,
    workers: usize,
    precision_bits: u32,
    epochs: usize,
) -> Result<(Vec<f64>, String), GlmError> {
    curve_from(
        &DataSource::find(dataset),
        system,
        dataset,
        max_rows,
        seed,
        glm_kind,
        sgd,
        workers,
        precision_bits,
        epochs,
    )
}

/// Losses after epochs 1..=epochs (exactly `epochs` of them) of one system trained on
/// `source`.
///
/// Memoised per process. Pure: training is a deterministic function of the key (the system, the
/// data set and its source, the seed, the rows, the model, the SGD settings, the workers and the
/// precision; nothing timed), and a curve trained further answers a shorter one with its prefix
/// (epoch k's loss does not depend on how many epochs follow).
#[allow(clippy::too_many_arguments)]
pub fn curve_from(
    source: &DataSource,
    system: &str,
    dataset: &str,
    max_rows: usize,
    seed: u64,
    glm_kind: Glm,
    sgd: Sgd,
    workers: usize,
    precision_bits: u32,
    epochs: usize,
) -> Result<(Vec<f64>, String), GlmError> {
    static CACHE: OnceLock<CurveCache> = OnceLock::new();
    let key = (
        system.to_string(),
        dataset.to_string(),
        source.clone(),
        seed,
        format!("{max_rows} {glm_kind:?} {sgd:?} {workers} {precision_bits}"),
    );
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some((losses, about)) = cache.lock().ok().and_then(|m| m.get(&key).cloned())
        && losses.len() >= epochs
    {
        // exactly the epochs asked for: a longer memo must not lengthen the answer
        return Ok((losses[..epochs].to_vec(), about));
    }
    let (data, about) = load_from(source, dataset, max_rows, seed)?;
    let mut w = vec![0f32; data.cols];
    let mut losses = Vec::new();
    match system {
        "p4sgd" => {
            let q = data.quantised(precision_bits);
            let mut r = ProtocolReducer::new(workers, 16, Faults::default())?;
            for _ in 0..epochs {
                epoch_model_parallel(&sgd, &q, &mut w, workers, &mut r)?;
                losses.push(glm::mean_loss(glm_kind, &data, &w));
            }
        }
        "cpusync" => {
            for _ in 0..epochs {
                epoch_model_parallel(&sgd, &data, &mut w, workers, &mut TreeSum)?;
                losses.push(glm::mean_loss(glm_kind, &data, &w));
            }
        }
        "gpusync" => {
            let sgd = Sgd { block: 32, ..sgd };
            for _ in 0..epochs {
                epoch_model_parallel(&sgd, &data, &mut w, workers, &mut LocalSum)?;
                losses.push(glm::mean_loss(glm_kind, &data, &w));
            }
        }
        other => return Err(GlmError::Invalid(format!("no system `{other}` in fig14"))),
    }
    if let Ok(mut m) = cache.lock() {
        m.insert(key, (losses.clone(), about.clone()));
    }
    Ok((losses, about))
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn training_through_the_protocol_gives_the_single_worker_model() {
        let s = glm::Shape {
            name: "t",
            rows: 256,
            cols: 200,
            nnz_per_row: 16,
        };
        let d = glm::synthetic(&s, 256, 4);
        let sgd = Sgd {
            glm: Glm::Logistic,
            lr: 0.1,
            batch: 64,
            micro_batch: 8,
            block: 0,
        };
        let mut w1 = vec![0f32; d.cols];
        let mut wp = w1.clone();
        let faults = Faults {
            loss: 0.05,
            duplicate: 0.05,
            reorder: 0.1,
            reorder_delay_ns: 30_000,
            seed: 3,
        };
        let mut r = ProtocolReducer::new(4, 16, faults).expect("reducer");
        for _ in 0..2 {
            glm::epoch_single(&sgd, &d, &mut w1);
            epoch_model_parallel(&sgd, &d, &mut wp, 4, &mut r).expect("mp");
        }
        let diff = w1
            .iter()
            .zip(&wp)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        // 16 fractional bits: each activation is within 2^-17 per worker of the float sum
        assert!(diff < 1e-3, "{diff}");
        assert!(w1.iter().any(|x| *x != 0.0));
    }

    #[test]
    fn fixed_point_overflow_is_an_error() {
        let mut r = ProtocolReducer::new(2, 16, Faults::default()).expect("reducer");
        assert!(r.allreduce(&[vec![1e9], vec![0.0]]).is_err());
        assert_eq!(
            r.allreduce(&[vec![1.5, -2.0], vec![0.25, 1.0]])
                .expect("sum"),
            vec![1.75, -1.0]
        );
    }

    fn cpusync_curve(source: &DataSource, seed: u64, epochs: usize) -> Vec<f64> {
        let sgd = Sgd {
            glm: Glm::Logistic,
            lr: 0.1,
            batch: 16,
            micro_batch: 8,
            block: 0,
        };
        curve_from(
            source,
            "cpusync",
            "small",
            64,
            seed,
            Glm::Logistic,
            sgd,
            2,
            32,
            epochs,
        )
        .expect("curve")
        .0
    }

    /// A memo trained further answers a shorter curve with exactly the epochs asked for: a
    /// search over "the first epoch below a target within `cap` epochs" must never see epochs
    /// beyond its cap because another experiment of the process trained longer.
    #[test]
    fn a_longer_memo_answers_with_exactly_the_epochs_asked() {
        let long = cpusync_curve(&DataSource::Synthetic, 911, 5);
        let short = cpusync_curve(&DataSource::Synthetic, 911, 2);
        assert_eq!(long.len(), 5);
        assert_eq!(short, long[..2].to_vec());
    }

    /// The data's source keys the memo: the same data set name, seed and settings trained on a
    /// LIBSVM file and on the synthetic stand-in in one process give each its own curve.
    #[test]
    fn the_data_source_keys_the_memo() {
        let dir = std::env::temp_dir().join(format!("inabench-curves-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        assert_eq!(
            DataSource::find_in(Some(&dir), "small"),
            DataSource::Synthetic
        );
        assert_eq!(DataSource::find_in(None, "small"), DataSource::Synthetic);
        std::fs::write(
            dir.join("small.svm"),
            "1 1:0.5 2:1.0\n-1 1:-0.5 3:1.0\n1 2:0.25 3:-1.0\n-1 1:1.0 2:-1.0\n",
        )
        .expect("write");
        let file = DataSource::find_in(Some(&dir), "small");
        assert!(
            matches!(&file, DataSource::File { len, .. } if *len > 0),
            "{file:?}"
        );
        let synthetic = cpusync_curve(&DataSource::Synthetic, 912, 2);
        let from_file = cpusync_curve(&file, 912, 2);
        assert_ne!(synthetic, from_file);
        // a file that changes is another source
        std::fs::write(dir.join("small.svm"), "1 1:0.5\n-1 2:0.5\n").expect("rewrite");
        assert_ne!(DataSource::find_in(Some(&dir), "small"), file);
        std::fs::remove_dir_all(&dir).ok();
    }
}
