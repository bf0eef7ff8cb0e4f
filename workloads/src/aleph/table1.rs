//! `aleph.motivating_example` (aleph-table1): the motivating example of Sec. 3.1, modelled
//! ([`inabench_aleph::motivating`]) and emulated on rate-limited namespaces (the testbed of
//! aleph-fig9 with the example's rates).

use super::sim::{check_clustering, invalid, record_clustering, seed};
use inabench_aleph::motivating::{Example, Row, paper_example_clustering};
use inabench_aleph::mwcha::{Clustering, Instance};
use inabench_core::event::LogLevel;
use inabench_core::{Fidelity, PointCtx, Workload, WorkloadError};

/// ALEPH's clustering of the example: `clustering: paper` (Sec. 3.2's) or `mwcha` (a draw
/// seeded by `seed` plus the repetition).
fn example_clustering(
    ctx: &PointCtx<'_>,
    e: &Example,
) -> Result<(Instance, Clustering), WorkloadError> {
    match ctx.text("clustering").ok().as_deref() {
        Some("paper") => Ok((
            e.instance().map_err(invalid)?,
            paper_example_clustering(e).map_err(invalid)?,
        )),
        None | Some("mwcha") => e.cluster(seed(ctx)?).map_err(invalid),
        Some(other) => Err(WorkloadError::Invalid(format!(
            "clustering must be paper or mwcha (got {other})"
        ))),
    }
}

fn median(v: Vec<f64>) -> f64 {
    inabench_rng::stats::median(&v).unwrap_or(f64::NAN)
}

/// aleph-table1's emulated class: the example's four workers and PS as rate-limited namespaces
/// (the testbed of aleph-fig9 with these rates), PS = the TCP aggregation service, AR = the TCP
/// ring, ALEPH = XDP aggregation on the clustering; times at the paper's scale (gradient and
/// rates scaled alike by `rate_scale`), traffic and rate of the median worker as in the model.
fn emulated_row(ctx: &mut PointCtx<'_>, e: &Example) -> Result<Row, WorkloadError> {
    use super::testbed_training::run_testbed;
    if !inabench_fabric::netns::is_root() {
        return Err(WorkloadError::Invalid(
            inabench_aleph::testbed::TestbedError::NotRoot.to_string(),
        ));
    }
    let n = e.worker_bw.len();
    let scale = ctx.param("rate_scale")?;
    if !(scale > 0.0 && scale <= 1.0) {
        return Err(WorkloadError::Invalid(
            "rate_scale must be in (0, 1]".into(),
        ));
    }
    let iterations = ctx.positive_count("iterations")? as u32;
    // 32-bit gradients: gradient_gbit x 1e9 / 32 of them, scaled like the rates
    let len = ((e.gradient * 1e9 / 32.0) * scale).round().max(1.0) as usize;
    let mut rates = e.worker_bw.clone();
    rates.push(e.ps_bw);
    let (system, parent) = match ctx.system() {
        "ps" => ("byteps", vec![n; n]),
        "ring_allreduce" => ("horovod", vec![n; n]),
        "aleph" => {
            let (inst, c) = example_clustering(ctx, e)?;
            check_clustering(ctx, &inst, &c)?;
            record_clustering(ctx, &inst, &c)?;
            let mut parent = vec![n; n];
            for cl in &c.clusters {
                for &m in &cl.members {
                    parent[m] = cl.aggregator;
                }
            }
            ("aleph", parent)
        }
        other => {
            return Err(WorkloadError::Invalid(format!(
                "the motivating example has ps, ring_allreduce and aleph, not `{other}`"
            )));
        }
    };
    let o = run_testbed(system, &rates, scale, iterations, len, &parent)?;
    ctx.log(
        LogLevel::Info,
        format!(
            "{} (emulated, {len} gradients per worker, rate_scale {scale}): {:.4} s per iteration, sending Gbps per machine {:.2?}, clustering {parent:?}",
            ctx.system(),
            o.comm_time,
            o.rates_gbps
        ),
    );
    ctx.log(
        LogLevel::Info,
        format!(
            "placement: all 5 machines' threads share this host's cores {:?} unpinned (senders, receivers, the TCP services and the XDP programs, which run in the NET_RX softirq of the CPU sending into their link), with other processes of the host",
            inabench_aleph::testbed::cpu::allowed_cores()
        ),
    );
    let workers = &o.rates_gbps[..n];
    Ok(Row {
        comm_time: o.comm_time,
        // Gb at the paper's scale: rate (already divided by rate_scale) x time
        traffic: median(workers.iter().map(|r| r * o.comm_time).collect()),
        rate: median(workers.to_vec()),
    })
}

/// aleph-table1: the motivating example (modelled; emulated on rate-limited namespaces).
pub struct MotivatingExample;

impl Workload for MotivatingExample {
    fn id(&self) -> &'static str {
        "aleph.motivating_example"
    }

    fn fidelities(&self) -> &'static [Fidelity] {
        &[Fidelity::Modelled, Fidelity::Emulated]
    }

    fn fabric(&self, f: Fidelity) -> &'static str {
        if f == Fidelity::Emulated {
            "netns"
        } else {
            "model"
        }
    }

    fn systems(&self) -> Option<&'static [&'static str]> {
        Some(&["ps", "ring_allreduce", "aleph"])
    }

    fn run(&self, ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
        let n = ctx.count("workers")?;
        let worker_bw = (0..n)
            .map(|i| ctx.param(&format!("bw_w{i}_gbps")))
            .collect::<Result<Vec<f64>, _>>()?;
        let e = Example {
            worker_bw,
            ps_bw: ctx.param("bw_ps_gbps")?,
            gradient: ctx.param("gradient_gbit")?,
            cpu_per_worker: ctx.param("cpu_per_worker_pct")?,
            cpu_capacity: ctx.param("cpu_capacity_pct")?,
        };
        let row = match ctx.system() {
            _ if ctx.fidelity == Fidelity::Emulated => emulated_row(ctx, &e)?,
            "ps" => e.ps().map_err(invalid)?,
            "ring_allreduce" => e.ring_allreduce().map_err(invalid)?,
            "aleph" => {
                let (inst, c) = example_clustering(ctx, &e)?;
                check_clustering(ctx, &inst, &c)?;
                record_clustering(ctx, &inst, &c)?;
                e.aleph(&c).map_err(invalid)?
            }
            other => {
                return Err(WorkloadError::Invalid(format!(
                    "the motivating example has ps, ring_allreduce and aleph, not `{other}`"
                )));
            }
        };
        ctx.record("comm_time", row.comm_time);
        ctx.record("traffic", row.traffic);
        ctx.record("rate", row.rate);
        ctx.progress(1, 1);
        Ok(())
    }
}
