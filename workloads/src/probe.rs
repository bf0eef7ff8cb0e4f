//! `harness.probe`: a workload that measures the harness and the launchers themselves (process
//! id, CPU time and a seeded checksum of `work` numbers), used by `inabench doctor`, the
//! launcher tests and the overhead benchmark. It is named as what it is: a probe, not a system.

use inabench_core::rng::SplitMix64;
use inabench_core::{Fidelity, PointCtx, Workload, WorkloadError};

pub struct Probe;

/// The probe's computation: a wrapping sum of `work` seeded draws (the same on every fabric).
pub fn checksum(seed: u64, work: u64) -> u64 {
    let mut g = SplitMix64::new(seed);
    (0..work).fold(0u64, |acc, _| acc.wrapping_add(g.next_u64() >> 32))
}

impl Workload for Probe {
    fn id(&self) -> &'static str {
        "harness.probe"
    }

    fn fidelities(&self) -> &'static [Fidelity] {
        &[Fidelity::Functional]
    }

    fn fabric(&self, _: Fidelity) -> &'static str {
        "none"
    }

    fn run(&self, ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
        // a `work` that is not a whole number fails the point for its parameter value
        let work = match ctx.point.params.get("work") {
            Some(_) => ctx.count("work")? as u64,
            None => 1000,
        };
        let sleep_ms = ctx.param("sleep_ms").unwrap_or(0.0);
        if ctx.param("crash").unwrap_or(0.0) > 0.0 && ctx.repetition >= 1 {
            // used by tests: a worker that dies in the middle of a run
            std::process::abort();
        }
        if sleep_ms > 0.0 {
            let until =
                std::time::Instant::now() + std::time::Duration::from_secs_f64(sleep_ms / 1e3);
            while std::time::Instant::now() < until {
                if ctx.cancelled() {
                    return Err(WorkloadError::Interrupted);
                }
                std::thread::sleep(
                    std::time::Duration::from_millis(5).min(until - std::time::Instant::now()),
                );
            }
        }
        let sum = checksum(ctx.seed ^ u64::from(ctx.repetition), work);
        ctx.record("checksum", (sum % 1_000_003) as f64);
        ctx.record("pid", f64::from(std::process::id()));
        // whether the run's agent token is in this process's environment, where every process
        // it starts would inherit it (tests of the launchers: an agent removes it at start)
        ctx.record_if_declared(
            "agent_token_in_env",
            f64::from(u8::from(std::env::var_os("INABENCH_AGENT_TOKEN").is_some())),
        );
        // A deliberately wrong double (tests of the verdict engine): the system named by
        // `wrong_for` returns a wrong aggregate at `work == wrong_at`, as a real system would:
        // it records what it saw and reports the wrong result.
        let wrong_for = ctx.text("wrong_for").unwrap_or_default();
        let wrong = !wrong_for.is_empty()
            && ctx.system() == wrong_for
            && ctx.param("wrong_at").ok() == Some(work as f64);
        ctx.record_if_declared("wrong_aggregates", if wrong { 1.0 } else { 0.0 });
        if wrong {
            return Err(WorkloadError::WrongResult(format!(
                "aggregate {} != reference {sum}",
                sum.wrapping_add(1)
            )));
        }
        Ok(())
    }
}
