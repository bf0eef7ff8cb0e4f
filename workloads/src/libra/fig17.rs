//! `libra.fig17` (libra-fig17): the extra time per iteration of SwitchML's scaling-factor
//! negotiation, as an op_max all-reduce on `sim` and on `mem`; the negotiation itself (its
//! inputs, configuration and runs) is [`inabench_libra::negotiation`].

use super::aggregation::switchml_time_ns;
use super::common::{opt, task_of};
use crate::hostcost::require_core_costs;
use inabench_core::{Fidelity, LogLevel, PointCtx, Workload, WorkloadError};
use inabench_ina::hoststack::HostStack;
use inabench_ina::switchml::SwitchMl;
use inabench_ina_run::drive::host_stack_for;
use inabench_libra::negotiation::{
    Negotiated, config, exponents, run_mem, scan_ns, sim_outcome, sim_setup,
};
use inabench_libra::sparse::SparseGen;

/// `libra.fig17`: the negotiation all-reduce per iteration, against the number of workers.
pub struct Fig17;

impl Workload for Fig17 {
    fn id(&self) -> &'static str {
        "libra.fig17"
    }
    fn fidelities(&self) -> &'static [Fidelity] {
        &[Fidelity::Emulated, Fidelity::Simulated]
    }
    fn fabric(&self, f: Fidelity) -> &'static str {
        if f == Fidelity::Emulated {
            "mem"
        } else {
            "sim"
        }
    }
    fn systems(&self) -> Option<&'static [&'static str]> {
        Some(&["switchml"])
    }
    fn run(&self, ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
        let task = task_of(ctx)?;
        let workers = ctx.count("workers")?;
        let memory_mb = opt(ctx, "memory_mb", 1.0);
        let gen_ = SparseGen::new(task.clone(), 1 + u64::from(ctx.repetition))
            .map_err(|e| WorkloadError::Invalid(e.to_string()))?;
        let it = u64::from(ctx.repetition);
        let inputs: Vec<Vec<i32>> = (0..workers)
            .map(|w| exponents(&gen_, task.params, w, it))
            .collect();
        let blocks = inputs.first().map_or(0, Vec::len);
        let emulated = ctx.fidelity == Fidelity::Emulated;
        // the retransmission timeout: 100 us in virtual time. On `mem` no frame is lost (no
        // faults are injected), so a retransmission there is only ever spurious: the switch
        // thread of a 2-core host queues up to workers x pool frames (87K at 32 workers), which
        // set off 385K retransmissions with netreduce.table6's 50 ms; 1 s keeps them out
        let rto_us = opt(ctx, "timeout_us", if emulated { 1e6 } else { 100.0 });
        let cfg = config(workers, blocks, memory_mb, (rto_us * 1000.0) as u64);
        // the host stack on sim (inabench_ina::hoststack), priced by the host profile's
        // SwitchML entries: `measured` (default: the profile's cost per frame and core on one
        // thread) or `dpdk` (that cost over the released client's 4 cores, and its 64-packet
        // transmit buffer drained every 10 us); on `mem` no stack is charged
        let stack_name = ctx.text("host_stack").ok();
        let (stack, costs) = if emulated {
            (HostStack::Nic, None)
        } else {
            let costs = require_core_costs(ctx, "switchml")?;
            let stack = host_stack_for(
                &SwitchMl,
                Some(stack_name.as_deref().unwrap_or("measured")),
                Some(costs),
                None,
                None,
                None,
            )
            .map_err(|e| WorkloadError::Invalid(e.to_string()))?;
            (stack, Some(costs))
        };
        let cost = stack.frame_ns();
        let o = if emulated {
            run_mem(&cfg, inputs, std::time::Duration::from_secs(120))
        } else {
            run_sim_stack(&cfg, inputs, &stack)
        }
        .map_err(|e| match e {
            inabench_libra::LibraError::Run(e) => crate::fabric::run_error(e),
            other => WorkloadError::Invalid(other.to_string()),
        })?;
        ctx.fabric = o.fabric;
        let (ns, wrong) = (o.duration_ns, o.wrong);
        ctx.counter("retransmissions", o.retransmissions);
        if !o.finished {
            return Err(WorkloadError::Invalid(
                "the negotiation did not finish within its time limit".into(),
            ));
        }
        if wrong > 0 {
            return Err(WorkloadError::WrongResult(format!(
                "{wrong} of {workers} workers agreed on exponents that differ from the maximum"
            )));
        }
        ctx.record("negotiation_delay", ns as f64 / 1e6);
        // a wall-clock time of this host's exponent scan: recorded in the emulated class only, so
        // the simulated class reads nothing timed on this host
        let scan = if emulated { scan_ns(task.params) } else { 0 };
        if emulated {
            ctx.record_if_declared("exponent_scan_ms", scan as f64 / 1e6);
        }
        // the data round is only simulated (its rate on sim, see `aggregation`): comparing it
        // with a wall time on `mem` would mix classes
        if let Some(costs) = costs
            && (ctx.declares("data_round_ms") || ctx.declares("negotiation_share"))
        {
            let data = switchml_time_ns(
                workers,
                task.params,
                memory_mb,
                stack_name.as_deref(),
                costs,
            )?;
            ctx.record_if_declared("data_round_ms", data / 1e6);
            ctx.record_if_declared("negotiation_share", ns as f64 / data * 100.0);
        }
        ctx.log(
            LogLevel::Info,
            format!(
                "{} x{workers} ({}): {blocks} block exponents a worker negotiated in {:.3} ms ({} retransmissions); computing them from a dense gradient takes {:.1} ms on this host (emulated only); host stack {} at {} ns a frame (host profile)",
                task.name,
                if emulated { "mem, wall time" } else { "sim" },
                ns as f64 / 1e6,
                o.retransmissions,
                scan as f64 / 1e6,
                if emulated { "none (mem)" } else { stack.name() },
                if emulated { 0 } else { cost }
            ),
        );
        Ok(())
    }
}

/// The negotiation on `sim` (virtual time), the hosts' stack as `stack` says
/// ([`inabench_ina::hoststack`]), through the sim driver of [`inabench_ina_run::drive`] (the
/// negotiation's setup and reading are [`inabench_libra::negotiation`]'s).
fn run_sim_stack(
    cfg: &inabench_ina::common::AllReduceConfig,
    inputs: Vec<Vec<i32>>,
    stack: &HostStack,
) -> Result<Negotiated, inabench_libra::LibraError> {
    let (setup, want) = sim_setup(cfg, inputs)?;
    let (nodes, rep, _) = inabench_ina_run::drive::run_setup_sim_stack(
        setup,
        cfg,
        inabench_fabric::fault::Faults::default(),
        stack,
        600_000_000_000,
    )?;
    Ok(sim_outcome(&nodes, &want, rep.finished))
}

#[cfg(test)]
mod tests {
    use super::*;
    use inabench_libra::negotiation::reference_max;
    use inabench_libra::sparse::Task;

    fn inputs(workers: usize, params: u64) -> Vec<Vec<i32>> {
        let mut t = Task::named("se").unwrap();
        t.params = params;
        let g = SparseGen::new(t, 7).unwrap();
        (0..workers).map(|w| exponents(&g, params, w, 0)).collect()
    }

    /// (Was libra's negotiation test; the sim driver is the workload's.)
    #[test]
    fn sim_negotiation_agrees_on_the_maximum() {
        let inp = inputs(4, 2_000_000);
        let want = reference_max(&inp);
        assert!(want.iter().zip(&inp[0]).any(|(m, x)| m > x));
        let cfg = config(4, inp[0].len(), 1.0, 100_000);
        let o = run_sim_stack(&cfg, inp, &HostStack::Measured(200)).unwrap();
        assert!(o.finished);
        assert_eq!(o.wrong, 0);
        assert!(o.duration_ns > 0);
    }
}
