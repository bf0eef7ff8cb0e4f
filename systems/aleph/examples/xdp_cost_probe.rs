//! What sets aleph-xdp-scale's two timings of the aggregation program apart (issue #33): the
//! in-place cost (BPF statistics while a veth group aggregates) and the `BPF_PROG_TEST_RUN` cost,
//! each under a setup changed one thing at a time. Needs root, clang and libbpf; built by
//! `cargo test --release --workspace --no-run` (target/release/examples/xdp_cost_probe). What
//! it measured is in experiments/aleph/xdp-scale.yaml's description.
//!
//! - `inplace <seconds> <segments> <senders: other|node> <test-run block> [group|fresh]
//!   [slices, 0: one per 400 ms] [copied|live] [stats|nostats] [empty-egress]`: one
//!   [`cpu::program_cost_with`]
//!   measurement on one line (`group 0` is aleph-xdp-scale's design, `fresh 1` the former one;
//!   `live` the test runs with live frames, `stats` the BPF statistics on during them too, their
//!   count of the program's run time printed as `counted`; `empty-egress` the broadcast copies
//!   through the empty devmap program, whose count per run, egress + noop/run, is the
//!   statistics' own share on the aggregator's core in place).
//! - `testrun <segments> <rounds> <block>...`: test runs alone on the calling thread's CPU for
//!   each block size (run it under `taskset -c 0 chrt -f 50` as the measurement does).
//! - `same <segments> <rounds> <times>`: one map timed again and again beside fresh maps.
//! - `stats <runs>`: what the BPF statistics count per run of the empty program on this CPU.
//! - `counted <segments> <rounds> <repeat> <times>`: with the BPF statistics on, what they count
//!   per run of the aggregation program and of the floor program in copied and in live test
//!   runs alternately (2 members, every frame run `repeat` times in one call: the first run
//!   aggregates, the others are duplicates), on one fresh aggregator with no members (a live
//!   redirect then sends nothing); run it under `taskset -c 0 chrt -f 50`.

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
                test_run_mode: match args.get(7) {
                    Some(m) => inabench_xdp::testrun::TestRunMode::from_name(m)
                        .ok_or_else(|| format!("test-run mode {m}: copied or live"))?,
                    None => inabench_xdp::testrun::TestRunMode::Copied,
                },
                test_run_stats: args.get(8).map(String::as_str) == Some("stats"),
                empty_egress: args.get(9).map(String::as_str) == Some("empty-egress"),
            };
            let c = cpu::program_cost_with(Duration::from_secs(u64::from(num(1)?)), None, &setup)?;
            println!(
                "inplace {setup:?}: aggregate {:.1} egress {:.1} program {:.1} (p10 {:.1} p90 {:.1}) \
                 noop/run {:.1} raw {:.1} packets {} windows {} | test run {:.1} (p10 {:.1} p90 \
                 {:.1}) store {:.1} complete {:.1} floor {:.1} counted {:.1} floor counted {:.1} \
                 | ratio {:.2}",
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
                c.test_run.counted_ns.unwrap_or(f64::NAN),
                c.test_run.counted_floor_ns.unwrap_or(f64::NAN),
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
        Some("counted") => {
            use inabench_xdp::testrun::TestRunMode;
            use inabench_xdp::{Program, ProgramTime};
            let (segments, rounds, repeat, times) = (num(1)?, num(2)?, num(3)?, num(4)?);
            let agg = inabench_xdp::Aggregator::load(segments)?;
            agg.configure(&inabench_xdp::Config {
                job: 1,
                full_mask: 3,
                forward: inabench_xdp::Forward::Multicast,
                port: inabench_xdp::group::PORT,
            })?;
            let stats = inabench_xdp::RunStats::enable()?;
            let mut round = 1u32;
            for _ in 0..times {
                for mode in TestRunMode::ALL {
                    let floor = match mode {
                        TestRunMode::Copied => Program::Pass,
                        TestRunMode::Live => Program::Drop,
                    };
                    let run = |p: Program, f: &[u8]| match mode {
                        TestRunMode::Copied => agg.test_run(p, f, repeat),
                        TestRunMode::Live => agg.test_run_live_repeated(p, f, repeat),
                    };
                    let (a0, f0, s0) = (
                        agg.program_run_time(Program::Aggregate)?,
                        agg.program_run_time(floor)?,
                        agg.stats()?,
                    );
                    let (mut ta, mut tf) = (0u64, 0u64);
                    for r in 0..rounds {
                        for w in 0..2u8 {
                            let f = inabench_xdp::testrun::frame(
                                inabench_xdp::group::PORT,
                                &inabench_xdp::proto::Packet::gradient(
                                    1,
                                    w,
                                    round + r / segments,
                                    r % segments,
                                    [r as i32; inabench_xdp::proto::GRADS],
                                )
                                .emit(),
                            );
                            ta += u64::from(run(Program::Aggregate, &f)?.duration_ns);
                            tf += u64::from(run(floor, &f)?.duration_ns);
                        }
                    }
                    round += rounds / segments + 2;
                    let per = |t: ProgramTime| t.nanos as f64 / t.runs.max(1) as f64;
                    let (a, f) = (
                        agg.program_run_time(Program::Aggregate)?.since(a0),
                        agg.program_run_time(floor)?.since(f0),
                    );
                    let s1 = agg.stats()?;
                    let calls = f64::from(rounds) * 2.0;
                    println!(
                        "{:6} repeat {repeat}: counted aggregate {:.1} ns/run ({} runs), floor \
                         {:.1} ns/run ({} runs); timer aggregate {:.1}, floor {:.1} ns/run; \
                         aggregated {} duplicates {}",
                        mode.name(),
                        per(a),
                        a.runs,
                        per(f),
                        f.runs,
                        ta as f64 / calls,
                        tf as f64 / calls,
                        s1.aggregated - s0.aggregated,
                        s1.duplicate - s0.duplicate
                    );
                }
            }
            drop(stats);
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
