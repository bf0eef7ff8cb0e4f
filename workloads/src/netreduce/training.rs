//! `netreduce.training`: NetReduce's training-throughput results (Fig. 11, Fig. 13 / Table 7,
//! Table 8, Fig. 14 / Table 9; specs `experiments/netreduce/fig11.yaml`, `table7.yaml`,
//! `table8.yaml` and `table9.yaml`) from the iteration model of [`inabench_netreduce::training`]
//! and communication times that come from the protocols themselves ([`inabench_ina_run::training`]
//! says how each scheme's all-reduce time is fitted and how the emulated class exchanges real
//! gradients).
//!
//! Compute: vendor peaks times an assumed utilisation (0.6 of the FP32 peak, 0.25 of the FP16
//! tensor peak: roughly what NVIDIA's published ResNet-50 training results on one V100 reach,
//! ~390 images/s FP32 and ~1,200 mixed precision, at 3 x 2 x 4.1 GMACs per image), scaled by
//! `compute_scale`, which the specs sweep as a band (0.5, 1, 1.5). Nothing here comes from the
//! paper's results.

use inabench_core::{Fidelity, PointCtx, Workload, WorkloadError};
use inabench_ina::atp::Atp;
use inabench_ina::common::System;
use inabench_ina::netreduce::NetReduce;
use inabench_ina::stream::RcStream;
use inabench_ina::switchml::SwitchMl;
use inabench_ina_run::collective::{Aggregation, Fabric};
use inabench_ina_run::training::{Schemes, dilation, emulated_with, exchange, fit_with_cached};
use inabench_netreduce::training::{self, Compute};

/// The baseline a point's speedup is relative to.
fn baseline(gpus_per_machine: f64) -> &'static str {
    if gpus_per_machine > 1.0 {
        "flat_ring"
    } else {
        "ring_allreduce"
    }
}

pub struct Training;

/// The modelled class's numbers for the same point, recorded beside the emulated ones.
struct Modelled {
    speedup: f64,
    iteration_s: f64,
}

/// The emulated class of a point (see the module docs).
/// `overlap` (default 1): whether a bucket's all-reduce starts when the bucket is ready during the
/// backward pass (wait-free back-propagation, as Horovod's and PyTorch DDP's designs do) or only
/// after the whole backward pass (0). NetReduce's testbed ran NCCL-2.4.7 under PyTorch-1.5.1 and
/// Horovod-0.16.0 (Sec. 5.1), whose designs overlap; its Table 7, however, shows iteration deltas
/// equal to communication deltas, which is what no overlap gives. The paper does not say which
/// its runs did, so the specs sweep both.
fn overlap(ctx: &PointCtx<'_>) -> bool {
    ctx.param("overlap").map(|v| v > 0.0).unwrap_or(true)
}

#[allow(clippy::too_many_arguments)]
fn run_emulated(
    ctx: &mut PointCtx<'_>,
    model_name: &str,
    model: &training::Model,
    compute: &Compute,
    batch: f64,
    bucket: f64,
    machines: usize,
    gpus_per_machine: f64,
    fp16: bool,
    modelled: Modelled,
) -> Result<(), WorkloadError> {
    if gpus_per_machine > 1.0 || fp16 {
        return Err(WorkloadError::Invalid(
            "the emulated class runs one GPU per machine and fp32 gradients".into(),
        ));
    }
    use crate::fabric::{Emulated, emulated_fabric};
    let fabric = match emulated_fabric(ctx, Emulated::Mem)? {
        Emulated::Mem => Fabric::Mem,
        Emulated::Udp => Fabric::Udp,
        // emulated_fabric never returns it (no raw runner for training here)
        Emulated::Raw => {
            return Err(WorkloadError::Invalid(
                "emulated_fabric `raw` is not run by the training workloads".into(),
            ));
        }
    };
    let scale = ctx.param("grad_scale").unwrap_or(1.0);
    if !(scale > 0.0 && scale <= 1.0) {
        return Err(WorkloadError::Invalid(format!(
            "grad_scale is in (0, 1], not {scale}"
        )));
    }
    let steps = ctx.param("steps").unwrap_or(3.0).max(1.0) as usize;
    let warmup = ctx.param("warmup_steps").unwrap_or(1.0).max(0.0) as usize;
    let system = ctx.system().to_string();
    let agg = Aggregation::parse(&system).ok_or_else(|| {
        WorkloadError::Invalid(format!("`{system}` has no emulated training exchange"))
    })?;
    // the gradients' values only feed the sum checks, not the timing: one seed for every point
    // (each point measures its own exchange, the ring's included: `exchange` remembers nothing)
    let seed = ctx.param("gradient_seed").unwrap_or(1.0) as u64;
    // the modelled class's settings (see `fit`): window 2, messages of 170 packets of 1 KB
    let knobs = [
        ("window", ctx.param("window").unwrap_or(2.0)),
        ("msg_packets", ctx.param("msg_packets").unwrap_or(170.0)),
    ];
    let ex = |agg: Aggregation| {
        exchange(
            agg, fabric, &knobs, model, scale, bucket, machines, warmup, steps, seed,
        )
        .map_err(|e| crate::fabric::run_error_in(format_args!("{agg:?}"), e))
    };
    let mine = ex(agg)?;
    // the ring's own point is its baseline: one measured exchange, so its speedup is 1
    let ring = if agg == Aggregation::RING {
        mine.clone()
    } else {
        ex(Aggregation::RING)?
    };
    let rate = ctx.param("line_rate_gbps").unwrap_or(100.0) * 1e9;
    let dil = match ctx
        .text("dilation")
        .unwrap_or_else(|_| "rc".to_string())
        .as_str()
    {
        "rc" => dilation(fabric, rate).map_err(crate::fabric::run_error)?,
        "none" => 1.0,
        other => {
            return Err(WorkloadError::Invalid(format!(
                "dilation is `rc` or `none`, not `{other}`"
            )));
        }
    };
    // compute times x dil: the same share of a GPU that is dil times slower
    let compute = &Compute {
        utilisation: compute.utilisation / dil,
        ..*compute
    };
    ctx.record_if_declared("dilation", dil);
    // the median over the kept steps: a thread-per-node fabric on two cores has outlier steps
    let mean = |its: &[training::Iteration], f: fn(&training::Iteration) -> f64| {
        let mut v: Vec<f64> = its.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        match v.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => v[n / 2],
            n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        }
    };
    let its = emulated_with(model, scale, compute, batch, bucket, overlap(ctx), &mine)
        .map_err(crate::fabric::run_error)?;
    let base = emulated_with(model, scale, compute, batch, bucket, overlap(ctx), &ring)
        .map_err(crate::fabric::run_error)?;
    let iteration_s = mean(&its, |i| i.iteration_s);
    let base_s = mean(&base, |i| i.iteration_s);
    ctx.record_if_declared("iteration_ms", iteration_s * 1e3);
    ctx.record_if_declared("comm_ms", mean(&its, |i| i.comm_s) * 1e3);
    ctx.record_if_declared("exposed_comm_ms", mean(&its, |i| i.exposed_comm_s) * 1e3);
    ctx.record_if_declared(
        "compute_ms",
        mean(&its, |i| i.forward_s + i.backward_s) * 1e3,
    );
    ctx.record_if_declared("speedup", base_s / iteration_s);
    ctx.record_if_declared("throughput", batch / iteration_s);
    ctx.record_if_declared("modelled_speedup", modelled.speedup);
    ctx.record_if_declared("modelled_iteration_ms", modelled.iteration_s * 1e3);
    ctx.record_if_declared("gradient_mb", model.gradient_bytes(4.0) * scale / 1048576.0);
    ctx.record_if_declared("buckets", mine.bucket_bytes.len() as f64);
    ctx.log(
        inabench_core::LogLevel::Info,
        format!(
            "{system}, {model_name} on {}: {} buckets of {:.2} MB in all (grad_scale {scale}), per step {:?} ms; ring {:?} ms",
            fabric.name(),
            mine.bucket_bytes.len(),
            mine.bucket_bytes.iter().sum::<f64>() / 1048576.0,
            mine.steps.iter().map(|s| (s.iter().sum::<f64>() * 1e4).round() / 10.0).collect::<Vec<_>>(),
            ring.steps.iter().map(|s| (s.iter().sum::<f64>() * 1e4).round() / 10.0).collect::<Vec<_>>(),
        ),
    );
    Ok(())
}

impl Workload for Training {
    fn id(&self) -> &'static str {
        "netreduce.training"
    }

    fn fidelities(&self) -> &'static [Fidelity] {
        &[Fidelity::Emulated, Fidelity::Modelled]
    }

    fn fabric(&self, f: Fidelity) -> &'static str {
        if f == Fidelity::Emulated {
            "mem"
        } else {
            "model"
        }
    }

    fn point_fabric(&self, f: Fidelity, point: &inabench_core::plan::Point) -> &'static str {
        // the label its `emulated_fabric` parameter picks (the run's manifest and its udp
        // socket probe follow it), as `run` picks it
        if f == Fidelity::Emulated {
            crate::fabric::planned_label(point, crate::fabric::Emulated::Mem, false)
        } else {
            self.fabric(f)
        }
    }

    fn systems(&self) -> Option<&'static [&'static str]> {
        Some(&[
            "ring_allreduce",
            "flat_ring",
            "tencent_allreduce",
            "netreduce",
            "parallel_netreduce",
            "switchml",
            "atp",
        ])
    }

    fn run(&self, ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
        let text =
            |ctx: &PointCtx<'_>, k: &str, d: &str| ctx.text(k).unwrap_or_else(|_| d.to_string());
        let model_name = text(ctx, "model", "alexnet");
        let model = training::by_name(&model_name)
            .ok_or_else(|| WorkloadError::Invalid(format!("no model `{model_name}`")))?;
        let gpu_name = text(ctx, "gpu", "v100");
        let gpu = training::gpu_by_name(&gpu_name).ok_or_else(|| {
            WorkloadError::Invalid(format!("no GPU `{gpu_name}` (v100, rtx2080)"))
        })?;
        let precision = text(ctx, "precision", "fp32");
        let fp16 = match precision.as_str() {
            "fp16" => true,
            "fp32" => false,
            other => {
                return Err(WorkloadError::Invalid(format!(
                    "precision is fp16 or fp32, not `{other}`"
                )));
            }
        };
        let n = ctx.param("gpus_per_machine").unwrap_or(1.0).max(1.0);
        let p = ctx
            .param("gpus")
            .or_else(|_| ctx.param("workers"))
            .map_err(|_| WorkloadError::Param("gpus".into()))?;
        let machines = (p / n).round() as usize;
        if machines < 2 || (machines as f64 * n - p).abs() > 1e-9 {
            return Err(WorkloadError::Invalid(format!(
                "{p} GPUs do not fill machines of {n} (at least 2 machines)"
            )));
        }
        let batch = ctx.param("batch").unwrap_or(32.0);
        let bucket = ctx.param("bucket_mb").unwrap_or(64.0) * 1048576.0;
        let overlap = overlap(ctx);
        let scale = ctx.param("compute_scale").unwrap_or(1.0);
        let rate = ctx.param("line_rate_gbps").unwrap_or(100.0) * 1e9;
        let compute = Compute {
            gpu,
            fp16,
            utilisation: scale * if fp16 { 0.25 } else { 0.6 },
        };
        let bytes_per_value = if fp16 { 2.0 } else { 4.0 };
        // host_stack: `nic` (every system's transport in the NIC); otherwise NetReduce and the
        // RC ring stay in the NIC and the software systems (SwitchML, ATP) run their host code at
        // the run's host profile's cost per frame and core (crate::hostcost): `paper` and
        // `dpdk` on the released client's threads with its transmit path (the shared DPDK
        // client model of inabench_ina::hoststack), `measured`/`software` on one thread.
        // The fit is a function of the stack, memoised per (system, machines, rate, stack).
        let software = text(ctx, "host_stack", "paper");
        let fits = |sys: &dyn System, w: usize| {
            let name = if software == "nic" || sys.paper_host_stack() == "nic" {
                "nic"
            } else {
                software.as_str()
            };
            let costs = crate::hostcost::core_costs(ctx, sys.name())?;
            let stack =
                inabench_ina_run::drive::host_stack_for(sys, Some(name), costs, None, None, None)
                    .map_err(|e| WorkloadError::Invalid(e.to_string()))?;
            fit_with_cached(sys, w, rate, &stack).map_err(crate::fabric::run_error)
        };
        let system = ctx.system().to_string();
        let schemes = Schemes {
            p,
            n,
            rc: fits(&RcStream, 2)?,
            netreduce: fits(&NetReduce, machines)?,
            switchml: if system == SwitchMl.name() {
                Some(fits(&SwitchMl, machines)?)
            } else {
                None
            },
            atp: if system == Atp.name() {
                Some(fits(&Atp, machines)?)
            } else {
                None
            },
        };
        let run = |scheme: &str| -> Option<training::Iteration> {
            schemes.comm(scheme, 1.0)?;
            Some(training::iteration(
                &model,
                &compute,
                batch,
                bytes_per_value,
                bucket,
                overlap,
                &|m| schemes.comm(scheme, m).unwrap_or(f64::INFINITY),
            ))
        };
        // `ta_form`: Tencent AllReduce from Eq. 2's closed form (default) or its printed brackets
        let system = match (system.as_str(), ctx.text("ta_form").ok().as_deref()) {
            ("tencent_allreduce", Some("stages")) => "tencent_allreduce_stages".to_string(),
            (_, None | Some("closed") | Some("stages")) => system,
            (_, Some(other)) => {
                return Err(WorkloadError::Invalid(format!(
                    "ta_form is `closed` or `stages`, not `{other}`"
                )));
            }
        };
        let it = run(&system).ok_or_else(|| {
            WorkloadError::Invalid(format!("no communication model for `{system}`"))
        })?;
        let base = run(baseline(n)).ok_or_else(|| WorkloadError::Invalid("no baseline".into()))?;
        if ctx.fidelity == Fidelity::Emulated {
            let modelled = Modelled {
                speedup: base.iteration_s / it.iteration_s,
                iteration_s: it.iteration_s,
            };
            return run_emulated(
                ctx,
                &model_name,
                &model,
                &compute,
                batch,
                bucket,
                machines,
                n,
                fp16,
                modelled,
            );
        }
        let per_gpu = batch / it.iteration_s;
        ctx.record_if_declared("images_per_s", per_gpu);
        ctx.record_if_declared("images_per_s_per_gpu", per_gpu);
        ctx.record_if_declared("throughput", per_gpu);
        ctx.record_if_declared("iteration_ms", it.iteration_s * 1e3);
        ctx.record_if_declared("comm_ms", it.comm_s * 1e3);
        ctx.record_if_declared("exposed_comm_ms", it.exposed_comm_s * 1e3);
        ctx.record_if_declared("compute_ms", (it.forward_s + it.backward_s) * 1e3);
        ctx.record_if_declared("speedup", base.iteration_s / it.iteration_s);
        ctx.record_if_declared(
            "gradient_mb",
            model.gradient_bytes(bytes_per_value) / 1048576.0,
        );
        ctx.log(
            inabench_core::LogLevel::Info,
            format!(
                "{system}: RC a={:.2} us G={:.1} Gbps; NetReduce a={:.2} us G={:.1} Gbps on {machines} machines",
                schemes.rc.a_s * 1e6,
                schemes.rc.g_bytes_per_s * 8e-9,
                schemes.netreduce.a_s * 1e6,
                schemes.netreduce.g_bytes_per_s * 8e-9
            ),
        );
        Ok(())
    }
}
