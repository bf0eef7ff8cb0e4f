//! What sets aleph-xdp-scale's two timings of the aggregation program apart (issue #33): the
//! in-place cost (BPF statistics while a veth group aggregates) and the `BPF_PROG_TEST_RUN` cost,
//! each under a setup changed one thing at a time. Needs root, clang and libbpf; built by
//! `cargo test --release --workspace --no-run` (target/release/examples/xdp_cost_probe). What
//! it measured is in experiments/aleph/xdp-scale.yaml's description.
//!
//! - `inplace <seconds> <segments> <senders: other|node> <test-run block> [group|fresh]
//!   [slices, 0: one per 400 ms]`: one [`cpu::program_cost_with`] measurement on one line
//!   (`group 0` is aleph-xdp-scale's design, `fresh 1` the former one).
//! - `testrun <segments> <rounds> <block>...`: test runs alone on the calling thread's CPU for
//!   each block size (run it under `taskset -c 0 chrt -f 50` as the measurement does).
//! - `same <segments> <rounds> <times>`: one map timed again and again beside fresh maps.
//! - `stats <runs>`: what the BPF statistics count per run of the empty program on this CPU.

use inabench_aleph::testbed::cpu;
use std::time::Duration;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize| -> Result<u32, Box<dyn std::error::Error>> {
        Ok(args
            .get(i)
            .ok_or_else(|| format!("argument {i} missing"))?
            .parse()?)
    };
    match args.first().map(String::as_str) {
        Some("inplace") => {
            let setup = cpu::CostSetup {
                segments: num(2)?,
                senders_on_node: args.get(3).map(String::as_str) == Some("node"),
                test_run_block: num(4)?,
                test_run_on_group: args.get(5).map(String::as_str) != Some("fresh"),
                slices: match args.get(6) {
                    Some(n) => n.parse()?,
                    None => 0,
                },
            };
            let c = cpu::program_cost_with(Duration::from_secs(u64::from(num(1)?)), None, &setup)?;
            println!(
                "inplace {setup:?}: aggregate {:.1} egress {:.1} program {:.1} (p10 {:.1} p90 {:.1}) \
                 noop/run {:.1} raw {:.1} packets {} windows {} | test run {:.1} (p10 {:.1} p90 \
                 {:.1}) store {:.1} complete {:.1} floor {:.1} | ratio {:.2}",
                c.aggregate_ns,
                c.egress_ns,
                c.ns_per_packet,
                c.p10_ns,
                c.p90_ns,
                c.noop_ns_per_run,
                c.raw_ns_per_packet,
                c.packets,
                c.windows,
                c.test_run.net_ns,
                c.test_run.net_p10_ns,
                c.test_run.net_p90_ns,
                c.test_run.store_ns,
                c.test_run.complete_ns,
                c.test_run.floor_ns,
                c.aggregate_ns / c.test_run.net_ns
            );
        }
        Some("same") => {
            // one aggregator timed again and again, against a fresh one each time
            let (segments, rounds, times) = (num(1)?, num(2)?, num(3)?);
            let agg = inabench_xdp::Aggregator::load(segments)?;
            agg.configure(&inabench_xdp::Config {
                job: 1,
                full_mask: 3,
                forward: inabench_xdp::Forward::Multicast,
                port: inabench_xdp::group::PORT,
            })?;
            let (mut same, mut fresh) = (String::new(), String::new());
            for t in 0..times {
                let first = 1 + t * (rounds / segments + 2);
                let c = inabench_xdp::testrun::aggregation_cost_on(&agg, 1, 2, rounds, 1, first)?;
                same += &format!(" {:.1}", c.net_ns);
                let c = inabench_xdp::testrun::aggregation_cost(2, segments, rounds)?;
                fresh += &format!(" {:.1}", c.net_ns);
            }
            println!("same map:{same}\nfresh maps:{fresh}");
        }
        Some("stats") => {
            // what the BPF statistics count per run of the empty program on this thread's core,
            // test-run on a gradient frame (the in-place measurement subtracts the same share,
            // counted on the members' receive path on the other core)
            let times = num(1)?;
            let agg = inabench_xdp::Aggregator::load(16)?;
            let f = inabench_xdp::testrun::frame(inabench_xdp::group::PORT, &[0u8; 528]);
            let stats = inabench_xdp::RunStats::enable()?;
            let p0 = agg.program_run_time(inabench_xdp::Program::Pass)?;
            let mut duration = 0u64;
            for _ in 0..times {
                duration += u64::from(
                    agg.test_run(inabench_xdp::Program::Pass, &f, 1)?
                        .duration_ns,
                );
            }
            let p = agg.program_run_time(inabench_xdp::Program::Pass)?.since(p0);
            drop(stats);
            let mut off = 0u64;
            for _ in 0..times {
                off += u64::from(
                    agg.test_run(inabench_xdp::Program::Pass, &f, 1)?
                        .duration_ns,
                );
            }
            println!(
                "stats on this core: counted {:.1} ns per run of the empty program ({} runs); \
                 test-run duration {:.1} ns with the statistics on, {:.1} off",
                p.nanos as f64 / p.runs.max(1) as f64,
                p.runs,
                duration as f64 / f64::from(times),
                off as f64 / f64::from(times)
            );
        }
        Some("testrun") => {
            let (segments, rounds) = (num(1)?, num(2)?);
            for i in 3..args.len() {
                let block = num(i)?;
                let c =
                    inabench_xdp::testrun::aggregation_cost_in_blocks(2, segments, rounds, block)?;
                println!(
                    "testrun segments {segments} block {block}: net {:.1} (p10 {:.1} p90 {:.1}) \
                     store {:.1} complete {:.1} floor {:.1}",
                    c.net_ns, c.net_p10_ns, c.net_p90_ns, c.store_ns, c.complete_ns, c.floor_ns
                );
            }
        }
        _ => return Err("usage: xdp_cost_probe inplace|testrun ...".into()),
    }
    Ok(())
}
