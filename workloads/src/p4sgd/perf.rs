//! The throughput and epoch-time workloads of Sec. 5.3-5.4: `p4sgd.fig9` (model vs data
//! parallelism), `p4sgd.fig10` (speedup vs batch), `p4sgd.fig11` (scale-up with engines),
//! `p4sgd.fig12` (scale-out with workers) and `p4sgd.fig13` (P4SGD vs SwitchML, CPUSync and
//! GPUSync).
//!
//! Classes:
//! - modelled: [`super::models`] (Eq. 1-3 with the FPGA timing model, the cited GPU/CPU inputs,
//!   the CPU rate measured here and the all-reduce latencies measured by running the protocols
//!   in the simulator);
//! - simulated (P4SGD and the FPGA data-parallel system only): real GLM training on the data
//!   set (or its stand-in), its activations (or gradients) all-reduced through the P4SGD
//!   protocol code on the sim fabric with the FPGA compute times of the timing model
//!   ([`inabench_p4sgd::emulate::TimedReducer`]); the iteration time is measured in virtual
//!   time, so the class is a simulation (it was labelled emulated before; nothing here runs in
//!   real time);
//!   with the spec parameter `simulated_values: seeded`, the same timed pipeline with seeded
//!   values checked against the exact sum, no training ([`inabench_p4sgd::emulate::simulate`]).
//!
//! Epoch time = mean iteration time x samples / batch (the data set's full sample count).

use super::models::{self, Inputs, Sys};
use inabench_core::{Fidelity, LogLevel, PointCtx, Workload, WorkloadError};
use inabench_p4sgd::curves;
use inabench_p4sgd::emulate::{Compute, ELEMENTS, Mode, TimedFabric, TimedReducer};
use inabench_p4sgd::glm::{self, Glm, Sgd};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

fn err(e: impl std::fmt::Display) -> WorkloadError {
    WorkloadError::Invalid(e.to_string())
}

/// Samples and features of a data set (Table II's shape; `small` is the quick stand-in).
pub fn shape_of(name: &str) -> Result<(usize, usize), WorkloadError> {
    glm::shape(name)
        .map(|s| (s.rows, s.cols))
        .ok_or_else(|| err(format!("unknown data set `{name}`")))
}

/// Memo of iteration times. Pure: the timed pipeline runs in virtual time, so a mean is a
/// deterministic function of its key (every input of the run, the data's source included).
fn cache() -> &'static Mutex<HashMap<String, (f64, String)>> {
    static C: OnceLock<Mutex<HashMap<String, (f64, String)>>> = OnceLock::new();
    C.get_or_init(|| Mutex::new(HashMap::new()))
}

/// What an emulated or simulated run is.
#[derive(Debug, Clone)]
pub struct Run<'a> {
    pub dataset: &'a str,
    pub workers: usize,
    pub batch: usize,
    pub iterations: usize,
    pub mode: Mode,
    pub glm: Glm,
    pub lr: f32,
}

/// Mean iteration time (ns) of real training through the timed protocol (the emulated class),
/// and a sentence on the data; cached per process, keyed by the data's source too.
pub fn emulated_iteration_ns(inp: &Inputs, r: &Run<'_>) -> Result<(f64, String), WorkloadError> {
    let source = curves::DataSource::find(r.dataset);
    let key = format!(
        "emu {} {} {} {} {:?} {:?} {} {} {:?}",
        r.dataset, r.workers, r.batch, r.iterations, r.mode, r.glm, r.lr, inp.seed, inp.fpga
    ) + &format!("{:?} {source:?}", inp.sim);
    if let Some(v) = cache().lock().ok().and_then(|m| m.get(&key).cloned()) {
        return Ok(v);
    }
    let needed = r.iterations.max(1) * r.batch;
    let (data, about) = curves::load_from(&source, r.dataset, needed, inp.seed).map_err(err)?;
    let q = data.quantised(inp.fpga.precision_bits);
    let compute = Compute::new(&inp.fpga, r.mode, q.cols, r.workers).map_err(err)?;
    let rto = match r.mode {
        Mode::ModelParallel => inp.sim.timeout_ns,
        Mode::DataParallel => {
            // a whole gradient leaves at once: the timeout must outlast its serialisation
            let frame_ns = models::p4sgd_frame_bytes(inp)? * 8.0 * 1e9 / inp.sim.rate_bps;
            inp.sim.timeout_ns + (4.0 * q.cols.div_ceil(ELEMENTS) as f64 * frame_ns) as u64
        }
    };
    let fabric = TimedFabric::new(r.workers, inp.sim.clone(), rto, inp.seed).map_err(err)?;
    let mut red = TimedReducer::new(fabric, r.mode, compute, 16, r.batch);
    let sgd = Sgd {
        glm: r.glm,
        lr: r.lr,
        batch: r.batch,
        micro_batch: ELEMENTS,
        block: 0,
    };
    let mut w = vec![0f32; q.cols];
    while red.iterations.len() < r.iterations {
        let before = red.iterations.len();
        match r.mode {
            Mode::ModelParallel => {
                glm::epoch_model_parallel(&sgd, &q, &mut w, r.workers, &mut red).map_err(err)?
            }
            Mode::DataParallel => {
                glm::epoch_data_parallel(&sgd, &q, &mut w, r.workers, &mut red).map_err(err)?
            }
        }
        if red.iterations.len() == before {
            return Err(err("an epoch without iterations"));
        }
    }
    let its = &red.iterations[..r.iterations];
    let mean = its.iter().sum::<f64>() / its.len() as f64;
    let about = format!(
        "{about}; {} iterations measured, {} retransmissions in the last",
        its.len(),
        red.fabric.retransmissions
    );
    if let Ok(mut m) = cache().lock() {
        m.insert(key, (mean, about.clone()));
    }
    Ok((mean, about))
}

/// Mean iteration time (ns) of the timed pipeline with seeded values (the simulated class).
pub fn simulated_iteration_ns(
    inp: &Inputs,
    features: usize,
    workers: usize,
    batch: usize,
    iterations: usize,
) -> Result<f64, WorkloadError> {
    let key = format!(
        "sim {features} {workers} {batch} {iterations} {} {:?} {:?}",
        inp.seed, inp.fpga, inp.sim
    );
    if let Some(v) = cache().lock().ok().and_then(|m| m.get(&key).cloned()) {
        return Ok(v.0);
    }
    let (t, _) = inabench_p4sgd::emulate::simulate(
        &inp.fpga,
        inp.sim.clone(),
        features,
        workers,
        batch,
        iterations.max(1),
        inp.seed,
    )
    .map_err(|e| WorkloadError::WrongResult(e.to_string()))?;
    let mean = t.iter().sum::<f64>() / t.len() as f64;
    if let Ok(mut m) = cache().lock() {
        m.insert(key, (mean, String::new()));
    }
    Ok(mean)
}

/// One P4SGD (or FPGA-DP) iteration time in the point's class.
fn fpga_iteration_ns(
    ctx: &mut PointCtx<'_>,
    inp: &Inputs,
    sys: Sys,
    dataset: &str,
    workers: usize,
    batch: usize,
) -> Result<f64, WorkloadError> {
    let (_, features) = shape_of(dataset)?;
    let seeded = ctx.text("simulated_values").is_ok_and(|v| v == "seeded");
    match ctx.fidelity {
        Fidelity::Modelled => models::iteration_ns(inp, sys, features, workers, batch),
        Fidelity::Simulated if seeded && sys == Sys::P4sgd => {
            let its = ctx.count("measure_iterations")?;
            simulated_iteration_ns(inp, features, workers, batch, its)
        }
        Fidelity::Simulated => {
            let glm_name = ctx.text("glm")?;
            let r = Run {
                dataset,
                workers,
                batch,
                iterations: ctx.count("measure_iterations")?,
                mode: if sys == Sys::P4sgdDp {
                    Mode::DataParallel
                } else {
                    Mode::ModelParallel
                },
                glm: Glm::parse(&glm_name).ok_or_else(|| err(format!("unknown glm {glm_name}")))?,
                lr: ctx.param("lr")? as f32,
            };
            let (t, about) = emulated_iteration_ns(inp, &r)?;
            ctx.log(
                LogLevel::Info,
                format!("simulated (trained) {sys:?}: {about}"),
            );
            Ok(t)
        }
        other => Err(err(format!("{other:?} is not a class of this workload"))),
    }
}

fn fabric_of(f: Fidelity) -> &'static str {
    match f {
        Fidelity::Modelled => "model",
        _ => "sim",
    }
}

fn system(ctx: &PointCtx<'_>) -> Result<Sys, WorkloadError> {
    Sys::parse(ctx.system()).ok_or_else(|| err(format!("unknown system {}", ctx.system())))
}

/// Records nothing for a system the class does not cover, and says so.
fn modelled_only(ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
    let s = ctx.system().to_string();
    ctx.log(
        LogLevel::Info,
        format!("{s} is modelled only: no {:?} rows", ctx.fidelity),
    );
    Ok(())
}

pub struct Fig9;

impl Workload for Fig9 {
    fn id(&self) -> &'static str {
        "p4sgd.fig9"
    }
    fn fidelities(&self) -> &'static [Fidelity] {
        &[Fidelity::Simulated, Fidelity::Modelled]
    }
    fn fabric(&self, f: Fidelity) -> &'static str {
        fabric_of(f)
    }
    fn systems(&self) -> Option<&'static [&'static str]> {
        Some(&[
            "p4sgd",
            "p4sgd_dp",
            "gpusync",
            "gpusync_dp",
            "cpusync",
            "cpusync_dp",
        ])
    }
    fn run(&self, ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
        let inp = Inputs::from_ctx(ctx)?;
        let sys = system(ctx)?;
        let dataset = ctx.text("dataset")?;
        let (rows, features) = shape_of(&dataset)?;
        let workers = ctx.count("workers")?;
        let batch = ctx.count("batch")?;
        let t = match (ctx.fidelity, sys) {
            (Fidelity::Modelled, _) => models::iteration_ns(&inp, sys, features, workers, batch)?,
            // the simulated transport carries P4SGD's frame (ELEMENTS values): a point that sweeps
            // another DP payload is the modelled class's only
            _ if inp.dp_values_per_frame != inabench_p4sgd::emulate::ELEMENTS => {
                let v = inp.dp_values_per_frame;
                ctx.log(
                    LogLevel::Info,
                    format!(
                        "dp_values_per_frame {v} is modelled only (the simulated transport carries \
                         P4SGD's {}): no {:?} rows",
                        inabench_p4sgd::emulate::ELEMENTS,
                        ctx.fidelity
                    ),
                );
                return Ok(());
            }
            (_, Sys::P4sgd | Sys::P4sgdDp) => {
                fpga_iteration_ns(ctx, &inp, sys, &dataset, workers, batch)?
            }
            _ => return modelled_only(ctx),
        };
        ctx.record("epoch_time", t * 1e-9 * rows as f64 / batch as f64);
        Ok(())
    }
}

pub struct Fig10;

impl Workload for Fig10 {
    fn id(&self) -> &'static str {
        "p4sgd.fig10"
    }
    fn fidelities(&self) -> &'static [Fidelity] {
        &[Fidelity::Simulated, Fidelity::Modelled]
    }
    fn fabric(&self, f: Fidelity) -> &'static str {
        fabric_of(f)
    }
    fn systems(&self) -> Option<&'static [&'static str]> {
        Some(&["p4sgd"])
    }
    fn run(&self, ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
        let inp = Inputs::from_ctx(ctx)?;
        let dataset = ctx.text("dataset")?;
        let workers = ctx.count("workers")?;
        let batch = ctx.count("batch")?;
        let t = fpga_iteration_ns(ctx, &inp, Sys::P4sgd, &dataset, workers, batch)?;
        let t16 = fpga_iteration_ns(ctx, &inp, Sys::P4sgd, &dataset, workers, 16)?;
        let thr = batch as f64 / t * 1e9;
        let thr16 = 16.0 / t16 * 1e9;
        ctx.record("throughput", thr);
        ctx.record("speedup", thr / thr16);
        Ok(())
    }
}

pub struct Fig11;

impl Workload for Fig11 {
    fn id(&self) -> &'static str {
        "p4sgd.fig11"
    }
    fn fidelities(&self) -> &'static [Fidelity] {
        &[Fidelity::Modelled]
    }
    fn fabric(&self, f: Fidelity) -> &'static str {
        fabric_of(f)
    }
    fn systems(&self) -> Option<&'static [&'static str]> {
        Some(&["p4sgd"])
    }
    fn run(&self, ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
        let inp = Inputs::from_ctx(ctx)?;
        let dataset = ctx.text("dataset")?;
        let workers = ctx.count("workers")?;
        let batch = ctx.count("batch")?;
        let (_, features) = shape_of(&dataset)?;
        let t = models::iteration_ns(&inp, Sys::P4sgd, features, workers, batch)?;
        let mut one = inp.clone();
        one.fpga.engines = 1;
        let t1 = models::iteration_ns(&one, Sys::P4sgd, features, workers, batch)?;
        ctx.record("throughput", batch as f64 / t * 1e9);
        ctx.record("speedup", t1 / t);
        Ok(())
    }
}

pub struct Fig12;

impl Workload for Fig12 {
    fn id(&self) -> &'static str {
        "p4sgd.fig12"
    }
    fn fidelities(&self) -> &'static [Fidelity] {
        &[Fidelity::Simulated, Fidelity::Modelled]
    }
    fn fabric(&self, f: Fidelity) -> &'static str {
        fabric_of(f)
    }
    fn systems(&self) -> Option<&'static [&'static str]> {
        Some(&["p4sgd"])
    }
    fn run(&self, ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
        let inp = Inputs::from_ctx(ctx)?;
        let dataset = ctx.text("dataset")?;
        let workers = ctx.count("workers")?;
        let batch = ctx.count("batch")?;
        let t = fpga_iteration_ns(ctx, &inp, Sys::P4sgd, &dataset, workers, batch)?;
        let t1 = fpga_iteration_ns(ctx, &inp, Sys::P4sgd, &dataset, 1, batch)?;
        ctx.record("throughput", batch as f64 / t * 1e9);
        ctx.record("speedup", t1 / t);
        Ok(())
    }
}

pub struct Fig13;

impl Workload for Fig13 {
    fn id(&self) -> &'static str {
        "p4sgd.fig13"
    }
    fn fidelities(&self) -> &'static [Fidelity] {
        &[Fidelity::Simulated, Fidelity::Modelled]
    }
    fn fabric(&self, f: Fidelity) -> &'static str {
        fabric_of(f)
    }
    fn systems(&self) -> Option<&'static [&'static str]> {
        Some(&["p4sgd", "switchml", "cpusync", "gpusync"])
    }
    fn run(&self, ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
        // the same rows as fig9's: epoch time per system
        Fig9.run(ctx)?;
        // and, modelled, each system's speedup over its own one-worker epoch (same data set and
        // batch): the scalability the paper compares
        if ctx.fidelity == Fidelity::Modelled {
            let inp = Inputs::from_ctx(ctx)?;
            let sys = system(ctx)?;
            let (_, features) = shape_of(&ctx.text("dataset")?)?;
            let workers = ctx.count("workers")?;
            let batch = ctx.count("batch")?;
            let t = models::iteration_ns(&inp, sys, features, workers, batch)?;
            let t1 = models::iteration_ns(&inp, sys, features, 1, batch)?;
            ctx.record_if_declared("scaling", t1 / t);
        }
        Ok(())
    }
}
