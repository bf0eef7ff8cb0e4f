//! ZeRO-3's ring collectives on the sim fabric: correct results, and per worker and primitive
//! 2(N-1)/N x S values transferred (sent plus received), against S for LuWu's push or pull.

use inabench_fabric::fault::Faults;
use inabench_fabric::sim::LinkConfig;
use inabench_luwu::run::{self, Job};
use inabench_luwu::transport::Config;
use inabench_luwu::zero3::{self, Op};

fn inputs(n: usize, s: usize) -> Vec<Vec<i32>> {
    (0..n)
        .map(|w| inabench_ina::common::gradient(9, w, s))
        .collect()
}

#[test]
fn reduce_scatter_and_all_gather_are_correct_and_move_2_n_minus_1_over_n() {
    for n in [2usize, 3, 8] {
        let s = n * 64 * 10 + n * 5; // chunks that end in a short packet
        let x = inputs(n, s);
        let sum: Vec<i32> = (0..s)
            .map(|i| x.iter().map(|v| i64::from(v[i])).sum::<i64>() as i32)
            .collect();
        let rs = zero3::run(Op::ReduceScatter, x.clone(), 64, LinkConfig::gbps100()).unwrap();
        assert!(rs.finished);
        let chunk = s / n;
        for r in 0..n {
            let c = (r + 1) % n;
            assert_eq!(
                rs.data[r][c * chunk..(c + 1) * chunk],
                sum[c * chunk..(c + 1) * chunk]
            );
            // sent plus received = 2 (N - 1) / N x S, exactly
            assert_eq!(
                (rs.values_tx[r] + rs.values_rx[r]) * n as u64,
                2 * (n as u64 - 1) * s as u64
            );
        }
        // all-gather of the reduce-scatter's shards gives everyone the whole sum
        let ag = zero3::run(Op::AllGather, rs.data.clone(), 64, LinkConfig::gbps100()).unwrap();
        assert!(ag.finished);
        for r in 0..n {
            assert_eq!(ag.data[r], sum, "worker {r}");
            assert_eq!(
                (ag.values_tx[r] + ag.values_rx[r]) * n as u64,
                2 * (n as u64 - 1) * s as u64
            );
        }
    }
}

#[test]
fn luwu_push_and_pull_move_s_per_worker() {
    let n = 8;
    let s = 64 * 100;
    let c = Config {
        workers: n,
        values_per_packet: 64,
        window: 64,
        line_rate_bps: 100e9,
        heartbeat_ns: 500,
        resend_timeout_ns: 1_000_000,
        stagger_ns: 100_000,
        consumer_rate: vec![1.0; n],
        agg_consumer_rate: 1.0,
    };
    let j = Job {
        grads: inputs(n, s),
        max: false,
        params: inabench_ina::common::gradient(9, 77, s),
    };
    let (nodes, o) = run::run_sim(&c, &j, Faults::default(), 10_000_000_000);
    assert!(o.exact);
    for node in &nodes {
        if let Some(nic) = run::nic(node) {
            // pushed S values and pulled S values, whatever N is
            assert_eq!(nic.stats.data_tx * 64, s as u64);
            assert_eq!(nic.rx.out.len(), s);
        }
    }
}
