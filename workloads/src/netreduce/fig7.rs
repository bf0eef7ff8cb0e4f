//! `netreduce.appendix_a` (spec: `experiments/netreduce/fig7.yaml`): NetReduce's Appendix A
//! communication times of Flat Ring, Tencent AllReduce and Parallel NetReduce, from the equations
//! as the paper prints them ([`inabench_netreduce::appendix_a`], `modelled`) or from the
//! flow-level schedule ([`inabench_netreduce::flow_sim`], `simulated`).

use inabench_core::{Fidelity, PointCtx, Workload, WorkloadError};
use inabench_netreduce::appendix_a::{
    Inputs, delta_eq4, delta_eq5, fr, pn_closed, pn_stages, ta_closed, ta_stages,
};
use inabench_netreduce::flow_sim;

/// The registered workload `netreduce.appendix_a` (fidelity: modelled).
pub struct AppendixA;

impl AppendixA {
    fn inputs(ctx: &PointCtx<'_>) -> Result<Inputs, WorkloadError> {
        let i = Inputs {
            m_bytes: ctx.param("M_MB")? * 1e6,
            n: ctx.param("n")?,
            p: ctx.param("P")?,
            alpha_s: ctx.param("alpha_us")? * 1e-6,
            b_intra: ctx.param("B_intra_GBps")? * 1e9,
            b_inter: ctx.param("B_inter_GBps")? * 1e9,
        };
        if !(i.n >= 1.0
            && i.p >= i.n
            && i.b_intra > 0.0
            && i.b_inter > 0.0
            && i.m_bytes >= 0.0
            && i.alpha_s >= 0.0)
        {
            return Err(WorkloadError::Invalid(format!(
                "Appendix A needs P >= n >= 1 and positive bandwidths (got n={}, P={}, B_intra={} B/s, B_inter={} B/s)",
                i.n, i.p, i.b_intra, i.b_inter
            )));
        }
        Ok(i)
    }
}

impl Workload for AppendixA {
    fn id(&self) -> &'static str {
        "netreduce.appendix_a"
    }

    fn fidelities(&self) -> &'static [Fidelity] {
        &[Fidelity::Modelled, Fidelity::Simulated]
    }

    fn fabric(&self, f: Fidelity) -> &'static str {
        if f == Fidelity::Simulated {
            "flow"
        } else {
            "model"
        }
    }

    fn run(&self, ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
        let i = Self::inputs(ctx)?;
        let ms = 1e3;
        if ctx.fidelity == Fidelity::Simulated {
            if !(i.n as u64).is_power_of_two() || !(i.p as u64).is_multiple_of(i.n as u64) {
                return Err(WorkloadError::Invalid(format!(
                    "the flow-level simulation needs n a power of two dividing P (n={}, P={})",
                    i.n, i.p
                )));
            }
            let (t, c) = match ctx.system() {
                "flat_ring" => flow_sim::fr(&i),
                "tencent_allreduce" => flow_sim::ta(&i),
                "parallel_netreduce" => flow_sim::pn(&i),
                other => {
                    return Err(WorkloadError::Invalid(format!(
                        "the flow-level simulation has flat_ring, tencent_allreduce and parallel_netreduce, not `{other}`"
                    )));
                }
            };
            ctx.record("comm_time", t * ms);
            ctx.counter("steps", c.steps as u64);
            ctx.counter("bytes_moved", c.bytes_moved as u64);
            ctx.progress(1, 1);
            return Ok(());
        }
        match ctx.system() {
            "flat_ring" => {
                ctx.record("comm_time", fr(&i) * ms);
                ctx.record("comm_time_closed", fr(&i) * ms);
            }
            "tencent_allreduce" => {
                ctx.record("comm_time", ta_stages(&i) * ms);
                ctx.record("comm_time_closed", ta_closed(&i) * ms);
            }
            "parallel_netreduce" => {
                ctx.record("comm_time", pn_stages(&i) * ms);
                ctx.record("comm_time_closed", pn_closed(&i) * ms);
                ctx.record("delta_eq4", delta_eq4(&i) * ms);
                ctx.record("delta_eq5", delta_eq5(&i) * ms);
            }
            other => {
                return Err(WorkloadError::Invalid(format!(
                    "Appendix A models flat_ring, tencent_allreduce and parallel_netreduce, not `{other}`"
                )));
            }
        }
        ctx.progress(1, 1);
        Ok(())
    }
}
