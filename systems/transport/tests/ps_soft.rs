//! The parameter-server all-reduce written over `HostTransport` (the code the Soft-RoCE rig's
//! `ps_worker` runs on verbs RC QPs) on the software RoCEv2 RC stack, through `fabric::Fabric`
//! (sim, and mem threads with loss): 3 workers, 1 and 2 servers, 3 rounds over the same slots
//! and receives; every value of every round of every worker's result is the exact wrapping sum
//! of the workers' values, computed here apart from the code under test, with and without loss
//! (the stack's go-back-N recovers, and resends are counted); every WRITE and receive
//! completion is accounted for; a shard with a wrong immediate and bad parameters are refused.

use inabench_fabric::fault::Faults;
use inabench_fabric::sim::LinkConfig;
use inabench_fabric::{Endpoint, Fabric, Mem, Node, Sim, Until};
use inabench_transport::HostTransport;
use inabench_transport::ps::{PsConfig, PsConfigError, PsError, PsNode, PsWorker, ps_nodes};
use inabench_transport::soft::{Shape, SoftQp};

/// Seeded int32 values of every sign: xorshift64* per (seed, worker, round).
fn inputs(n: usize, rounds: u32, len: usize, seed: u64) -> Vec<Vec<Vec<i32>>> {
    (0..n)
        .map(|w| {
            (0..rounds)
                .map(|r| {
                    let mut x = (seed.wrapping_mul(0x9e37_79b9_7f4a_7c15)
                        ^ (w as u64 + 1).wrapping_mul(0xd1b5_4a32_d192_ed03)
                        ^ u64::from(r + 1).wrapping_mul(0x8cb9_2ba7_2f3d_8dd7))
                        | 1;
                    (0..len)
                        .map(|_| {
                            x ^= x >> 12;
                            x ^= x << 25;
                            x ^= x >> 27;
                            (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32 as i32
                        })
                        .collect()
                })
                .collect()
        })
        .collect()
}

/// The reference: per round and index, the sum in i64, reduced to its low 32 bits (what a
/// wrapping int32 sum is).
fn reference(v: &[Vec<Vec<i32>>]) -> Vec<Vec<i32>> {
    (0..v[0].len())
        .map(|r| {
            (0..v[0][r].len())
                .map(|k| v.iter().map(|w| i64::from(w[r][k])).sum::<i64>() as i32)
                .collect()
        })
        .collect()
}

/// Check every host of a finished run: no error, every worker's every round exact, every
/// completion counted; the stack's resends over all QPs.
fn check(nodes: &[PsNode], cfg: &PsConfig, want: &[Vec<i32>], what: &str) -> u64 {
    let (n, s, rounds) = (cfg.workers(), cfg.servers(), u64::from(cfg.rounds()));
    let mut resent = 0;
    let (mut workers, mut servers) = (0, 0);
    for node in nodes {
        let h = match node {
            Node::Worker(h) | Node::Other(h) => h,
            Node::Switch(_) => continue,
        };
        assert_eq!(h.error(), None, "{what}: host {}", h.id());
        resent += h.retransmissions();
        if let Some(w) = h.worker() {
            workers += 1;
            let got = w
                .results()
                .unwrap_or_else(|| panic!("{what}: worker {} unfinished", h.id()));
            assert_eq!(got.len(), want.len());
            for (r, (g, x)) in got.iter().zip(want).enumerate() {
                let bad = g.iter().zip(x).filter(|(a, b)| a != b).count();
                assert_eq!(
                    bad,
                    0,
                    "{what}: worker {}, round {r}: {bad} values wrong",
                    h.id()
                );
            }
            assert_eq!(w.writes_completed(), s as u64 * rounds, "{what}");
            assert_eq!(w.sums_received(), s as u64 * rounds, "{what}");
        }
        if let Some(sv) = h.server() {
            servers += 1;
            assert_eq!(sv.rounds_finished(), cfg.rounds(), "{what}");
            assert_eq!(sv.shards_received(), n as u64 * rounds, "{what}");
            assert_eq!(sv.writes_completed(), n as u64 * rounds, "{what}");
        }
    }
    assert_eq!((workers, servers), (n, s), "{what}");
    resent
}

#[test]
fn ps_over_the_trait_on_the_software_stack_sums_exactly_with_1_and_2_servers() {
    // 3 workers, 1536 values (1 shard of 24 packets of 256 B, or 2 of 12), 3 rounds
    let (n, values, rounds, mtu) = (3usize, 1536usize, 3u32, 256u32);
    let v = inputs(n, rounds, values, 9);
    let want = reference(&v);
    assert!(want[0] != v[0][0], "the sums are not one worker's values");
    assert!(want[0] != want[1], "the rounds differ");
    for s in [1usize, 2] {
        let cfg = PsConfig::new(n, s, values, rounds).expect("config");
        for loss in [0.0, 0.02] {
            let what = format!("sim, {s} server(s), loss {loss}");
            let nodes = ps_nodes(cfg, v.clone(), mtu, 50_000).expect("nodes");
            let mut sim = Sim::new(LinkConfig::gbps100(), (n + s) as u32);
            sim.faults = Faults {
                loss,
                seed: 17 + s as u64,
                ..Faults::default()
            };
            let (nodes, rep) = sim
                .run(nodes, &Until::workers(n + s, n + s + 1, 5_000_000_000))
                .expect("sim run");
            assert!(rep.finished, "{what}: {rep:?}");
            // each round every worker's shard to each server and each sum back, as whole
            // packets, crossed the switch (with their ACKs)
            let data = 2 * (n * rounds as usize) * (values * 4 / mtu as usize);
            assert!(
                rep.nodes[n + s].frames_rx > data as u64,
                "{what}: the switch saw {} frames, fewer than the {data} data packets",
                rep.nodes[n + s].frames_rx
            );
            let resent = check(&nodes, &cfg, &want, &what);
            assert_eq!(resent > 0, loss > 0.0, "{what}: {resent} resends");
            if loss > 0.0 {
                assert!(rep.faults.dropped > 0, "{what}: nothing lost");
            }
        }
    }
    // threads and channels, wall-clock time, 1% loss: go-back-N on a 5 ms timer
    let cfg = PsConfig::new(n, 2, values, rounds).expect("config");
    let nodes = ps_nodes(cfg, v.clone(), mtu, 5_000_000).expect("nodes");
    let mut mem = Mem {
        mtu: 9216,
        faults: Faults {
            loss: 0.01,
            seed: 5,
            ..Faults::default()
        },
    };
    let (nodes, rep) = mem
        .run(nodes, &Until::workers(n + 2, n + 3, 60_000_000_000))
        .expect("mem run");
    assert!(rep.finished, "mem: {rep:?}");
    let resent = check(&nodes, &cfg, &want, "mem, 2 servers, loss 0.01");
    assert!(rep.faults.dropped > 0, "mem: nothing lost");
    assert!(
        resent > 0,
        "mem: {} frames lost, none resent",
        rep.faults.dropped
    );
}

#[test]
fn one_worker_and_one_server_is_the_identity() {
    let v = inputs(1, 2, 64, 4);
    let cfg = PsConfig::new(1, 1, 64, 2).expect("config");
    let nodes = ps_nodes(cfg, v.clone(), 256, 50_000).expect("nodes");
    let mut sim = Sim::new(LinkConfig::gbps100(), 2);
    let (nodes, rep) = sim
        .run(nodes, &Until::workers(2, 3, 1_000_000_000))
        .expect("sim run");
    assert!(rep.finished);
    check(&nodes, &cfg, &v[0], "1 worker");
}

#[test]
fn a_shard_with_a_wrong_immediate_stops_the_server_naming_worker_and_round() {
    let (n, values) = (2usize, 128usize);
    let cfg = PsConfig::new(n, 1, values, 2).expect("config");
    let mut nodes = ps_nodes(cfg, inputs(n, 2, values, 1), 256, 50_000).expect("nodes");
    // worker 1 WRITEs a shard of round 0 with immediate 7 before its own
    let Node::Worker(h) = &mut nodes[1] else {
        unreachable!()
    };
    h.qps[0]
        .post_write(99, 0, cfg.shard_bytes(), Some(7))
        .expect("post");
    let mut sim = Sim::new(LinkConfig::gbps100(), 3);
    let (nodes, rep) = sim
        .run(nodes, &Until::workers(3, 4, 10_000_000))
        .expect("sim run");
    assert!(!rep.finished);
    let server = match &nodes[2] {
        Node::Other(h) => h,
        _ => unreachable!(),
    };
    let err = server.error().expect("the server stopped");
    assert!(
        err.starts_with("server 0 (its QP to worker 1), round 0: a shard's receive completion")
            && err.contains("imm: Some(7)"),
        "{err}"
    );
    let w1 = nodes[1].worker().expect("worker 1");
    assert!(w1.worker().and_then(PsWorker::results).is_none());
}

#[test]
fn bad_parameters_are_refused_with_one_sentence() {
    let say = |e: PsConfigError| e.to_string();
    assert_eq!(
        PsConfig::new(0, 1, 8, 1).map_err(say),
        Err("a parameter server all-reduce needs at least 1 worker (got 0)".into())
    );
    assert_eq!(
        PsConfig::new(2, 0, 8, 1).map_err(say),
        Err("a parameter server all-reduce needs at least 1 server (got 0)".into())
    );
    assert_eq!(
        PsConfig::new(2, 1, 8, 0).map_err(say),
        Err("a parameter server all-reduce needs at least 1 round (got 0)".into())
    );
    for (values, servers) in [(9, 2), (0, 1), (1, 2)] {
        assert_eq!(
            PsConfig::new(2, servers, values, 1).map_err(say),
            Err(format!(
                "{values} values do not split into {servers} shards of whole values of at least one (one shard per server)"
            ))
        );
    }
    let cfg = PsConfig::new(2, 2, 8, 2).expect("config");
    assert_eq!(
        (cfg.shard(1), cfg.shard_bytes(), cfg.region_bytes()),
        (4..8, 16, 32)
    );
    assert_eq!(
        PsWorker::new(cfg, 2, vec![vec![0; 8]; 2]).err().map(say),
        Some("worker 2 of 2 does not exist".into())
    );
    assert_eq!(
        PsWorker::new(cfg, 0, vec![vec![0; 8]]).err().map(say),
        Some("worker 0: 1 rounds of values for a run of 2 rounds".into())
    );
    assert_eq!(
        PsWorker::new(cfg, 1, vec![vec![0; 8], vec![0; 7]])
            .err()
            .map(say),
        Some("worker 1: round 1's vector is 7 values, the run's is 8".into())
    );
    assert_eq!(
        ps_nodes(cfg, inputs(2, 2, 8, 1), 256, 1000)
            .err()
            .map(|e| e.to_string()),
        Some("a shard of 16 bytes is not whole packets of 256 bytes".into())
    );
    // progress refuses QPs that are not one per server, or too small for both slots
    let shape = Shape {
        mtu: 16,
        msg_len: 1,
        window: 1,
        messages: 1,
        rto_ns: 1000,
    };
    let qp = |k: u32| SoftQp::new([10, 0, 10, 1], 0x100 + k, 5, shape, 0x1000, 9).expect("qp");
    let mut w = PsWorker::new(cfg, 0, vec![vec![0; 8]; 2]).expect("worker");
    let e = w
        .progress(&mut [qp(0)])
        .expect_err("one QP for two servers");
    assert!(
        matches!(
            e,
            PsError::Qps {
                got: 1,
                want: 2,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(
        e.to_string(),
        "worker 0: given 1 queue pairs, it has one per server (2)"
    );
    let e = w.progress(&mut [qp(0), qp(1)]).expect_err("one slot");
    assert_eq!(
        e.to_string(),
        "worker 0 (its QP to server 0): the QP's buffer is 16 bytes, two shard slots need 32"
    );
    // a QP that is not connected: the transport's refusal, naming who
    let big = Shape {
        messages: 2,
        ..shape
    };
    let mut qs: Vec<SoftQp> = (0..2)
        .map(|k| SoftQp::new([10, 0, 10, 1], 0x100 + k, 5, big, 0x1000, 9).expect("qp"))
        .collect();
    let e = w.progress(&mut qs).expect_err("not connected");
    assert_eq!(
        e.to_string(),
        "worker 0 (its QP to server 0): the transport refused a call: the QP is not connected"
    );
}
