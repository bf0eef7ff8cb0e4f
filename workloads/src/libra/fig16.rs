//! `libra.fig16` (libra-fig16): recirculations per packet for the placements and packagings.

use super::common::{identify_hot, invalid, opt, task_of};
use inabench_core::{Fidelity, LogLevel, PointCtx, Workload, WorkloadError};
use inabench_ina::tofino::TofinoModel;
use inabench_libra::layout::{
    Placement, RegisterPipeline, package_alg1, package_sequential, pairs_per_packet,
};
use inabench_libra::sparse::SparseGen;

/// `libra.fig16`: hot parameters identified by sampling, placed on `registers` register arrays;
/// every worker's hot gradients of `iterations` iterations packaged and run through the
/// pipeline model.
pub struct Fig16;

impl Workload for Fig16 {
    fn id(&self) -> &'static str {
        "libra.fig16"
    }
    fn fidelities(&self) -> &'static [Fidelity] {
        &[Fidelity::Functional]
    }
    fn fabric(&self, _f: Fidelity) -> &'static str {
        "model"
    }
    fn systems(&self) -> Option<&'static [&'static str]> {
        Some(&["libra", "heat_layout", "random_layout", "random_alg1"])
    }
    fn run(&self, ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
        let task = task_of(ctx)?;
        let workers = ctx.count("workers")?;
        let iterations = ctx.count("iterations")? as u64;
        let model = TofinoModel::PAPER;
        let m = opt(
            ctx,
            "registers",
            f64::from(model.stages * model.registers_per_stage),
        ) as usize;
        let k = opt(ctx, "hot_params", f64::from(task.paper_hot)) as usize;
        let gen_ = SparseGen::new(task.clone(), ctx.seed).map_err(invalid)?;
        let hot = identify_hot(
            &gen_,
            ctx.count("identify_pushes")? as u64,
            opt(ctx, "sampling_rate", 0.08),
            k,
            ctx.seed,
        )?;
        let n = hot.len();
        let (placement, alg1) = match ctx.system() {
            "libra" => (Placement::heat(n, m), true),
            "heat_layout" => (Placement::heat(n, m), false),
            "random_layout" => (Placement::random(n, m, ctx.seed), false),
            "random_alg1" => (Placement::random(n, m, ctx.seed), true),
            other => return Err(invalid(format!("system `{other}` is not built"))),
        };
        let placement = placement.map_err(invalid)?;
        // pairs per packet: the 192-byte packet the paper states (footnote 2) holds 24 8-byte
        // pairs; `pairs_per_packet` sweeps it (the paper gives neither this nor m for Fig. 16)
        let cap = opt(ctx, "pairs_per_packet", pairs_per_packet(&model) as f64) as usize;
        if cap == 0 {
            return Err(invalid("pairs_per_packet must be at least 1".to_string()));
        }
        let mut pipe = RegisterPipeline::new(model);
        let mut overflow = 0usize;
        for it in 0..iterations {
            for w in 0..workers {
                // the hot part of the worker's gradient, in the order the worker holds it
                let g: Vec<u32> = gen_
                    .batch_keys(w, 1_000_000 + it)
                    .iter()
                    .filter_map(|key| hot.get(key).copied())
                    .collect();
                let pkts = if alg1 {
                    let p = package_alg1(&g, cap, &placement);
                    overflow += p.overflow_packets;
                    p.packets
                } else {
                    package_sequential(&g, cap)
                };
                for p in &pkts {
                    let frame = inabench_libra::wire::frame_len(p.len());
                    pipe.process(p, &placement, frame as u32);
                }
            }
        }
        let s = pipe.pipeline.stats;
        ctx.record(
            "recirculations_per_packet",
            pipe.recirculations_per_packet(),
        );
        ctx.record_if_declared(
            "packets_per_push",
            s.packets as f64 / (iterations as f64 * workers as f64),
        );
        ctx.counter("packets", s.packets);
        ctx.counter("recirculations", s.recirculations);
        ctx.log(
            LogLevel::Info,
            format!(
                "{}: {} hot parameters on {m} registers ({} slots each), {} packets, {} recirculations, {overflow} G' packets",
                ctx.system(),
                n,
                placement.slots_per_register(),
                s.packets,
                s.recirculations
            ),
        );
        Ok(())
    }
}
