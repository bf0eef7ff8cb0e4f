//! The systems' own behaviour on the `sim` fabric through the sim drivers of
//! [`inabench_ina_run::drive`] (moved here from the in-file tests of `inabench_ina`'s ring, atp,
//! stream and hoststack modules when the drivers left the protocol crate; assertions unchanged).

use inabench_fabric::fault::Faults;
use inabench_ina::common::{AllReduceConfig, SetupNode, System, counter_sum, reference_sum};
use inabench_ina::hoststack::{CoreCosts, DpdkStack, HostStack, StackStats};
use inabench_ina::{atp, netreduce, ring, stream, switchml, switchml_rdma};
use inabench_ina_run::drive::{host_stack_for, run_setup_sim, run_sim, run_sim_stack};

fn sys(name: &str) -> &'static dyn System {
    inabench_ina::system(name).expect("a listed system")
}

fn ring_cfg(workers: usize, elements: usize) -> AllReduceConfig {
    AllReduceConfig {
        workers,
        elements,
        seed: 4,
        line_rate_bps: 100e9,
        mtu: 1024,
        timeout_ns: 100_000,
        knobs: vec![],
    }
}

fn stream_cfg(loss: f64) -> (AllReduceConfig, Faults) {
    (
        AllReduceConfig {
            workers: 2,
            elements: 100_000,
            seed: 1,
            line_rate_bps: 100e9,
            mtu: 1024,
            timeout_ns: 100_000,
            knobs: vec![("msg_packets".into(), 16.0), ("window".into(), 4.0)],
        },
        Faults {
            loss,
            seed: 2,
            ..Faults::default()
        },
    )
}

// ring (was ring.rs's tests)

#[test]
fn exact_int_sums_with_and_without_loss() {
    for (w, e, loss) in [(2, 1000, 0.0), (6, 50_003, 0.0), (5, 20_000, 0.02)] {
        let c = ring_cfg(w, e);
        let f = Faults {
            loss,
            seed: 9,
            ..Faults::default()
        };
        let (nodes, rep) = run_sim(&ring::RingAllReduce, &c, f, 0, 20_000_000_000).expect("run");
        assert!(rep.finished, "{w} {e} {loss}");
        let want = reference_sum(c.seed, w, e);
        for n in &nodes {
            if let SetupNode::Worker(x) = n {
                assert_eq!(x.result().as_deref(), Some(&want[..]), "{w} {e} {loss}");
            }
        }
    }
}

#[test]
fn float_sums_are_identical_on_every_worker() {
    let c = AllReduceConfig {
        knobs: vec![("float".into(), 1.0)],
        ..ring_cfg(4, 3001)
    };
    let inputs: Vec<Vec<i32>> = (0..4)
        .map(|r| {
            (0..3001)
                .map(|i| ((i as f32 * 0.37 + r as f32).sin()).to_bits() as i32)
                .collect()
        })
        .collect();
    let exact: Vec<f64> = (0..3001)
        .map(|i| {
            (0..4)
                .map(|r| f64::from(f32::from_bits(inputs[r][i] as u32)))
                .sum()
        })
        .collect();
    let setup = ring::RingAllReduce.build_with(&c, inputs).expect("build");
    let (nodes, rep) = run_setup_sim(setup, &c, Faults::default(), 0, 10_000_000_000).expect("run");
    assert!(rep.finished);
    let results: Vec<Vec<i32>> = nodes
        .iter()
        .filter_map(|n| match n {
            SetupNode::Worker(w) => w.result(),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 4);
    assert!(
        results.iter().all(|r| r == &results[0]),
        "bit-identical everywhere"
    );
    for (i, v) in results[0].iter().enumerate() {
        let got = f64::from(f32::from_bits(*v as u32));
        assert!((got - exact[i]).abs() < 1e-5, "{i}: {got} vs {}", exact[i]);
    }
}

// ATP (was atp.rs's tests)

/// Two jobs on one switch, `pool` aggregators shared, windows of `window` packets: every
/// worker's result (job 0: 4 workers, job 1: 3, other sizes and seeds) and the switch's
/// per-job collisions.
fn two_jobs(pool: f64, window: f64) -> [u64; 2] {
    let mk = |seed, workers, elements| AllReduceConfig {
        workers,
        elements,
        seed,
        line_rate_bps: 100e9,
        mtu: 1024,
        timeout_ns: 1_000_000,
        knobs: vec![("atp_pool".into(), pool), ("atp_window".into(), window)],
    };
    let (a, b) = (mk(3, 4, 62 * 200 + 5), mk(4, 3, 62 * 150));
    let setup = atp::build_shared(&[(1, &a), (2, &b)]).expect("build");
    let all = AllReduceConfig {
        workers: 7,
        ..a.clone()
    };
    let (nodes, rep) = run_setup_sim(
        setup,
        &all,
        inabench_fabric::fault::Faults::default(),
        0,
        10_000_000_000,
    )
    .expect("run");
    assert!(rep.finished);
    let want = [
        reference_sum(3, 4, a.elements),
        reference_sum(4, 3, b.elements),
    ];
    assert_ne!(
        want[0][..10],
        want[1][..10],
        "the jobs sum different vectors"
    );
    let mut checked = 0;
    for (i, n) in nodes.iter().enumerate() {
        if let SetupNode::Worker(w) = n {
            let job = usize::from(i >= 4);
            assert_eq!(w.result().as_ref(), Some(&want[job]), "node {i}");
            checked += 1;
        }
    }
    assert_eq!(checked, 7);
    let count = |name: &str| counter_sum(&nodes, name);
    assert_eq!(
        count("data_in_job0") + count("data_in_job1"),
        4 * 201 + 3 * 150
    );
    [count("collisions_job0"), count("collisions_job1")]
}

/// A pool smaller than the two windows: packets of both jobs find their aggregator held by
/// the other job (or an older sequence) and the PSes sum them, exactly.
#[test]
fn two_jobs_on_a_small_pool_collide_and_sum_exactly() {
    let c = two_jobs(4.0, 4.0);
    assert!(c[0] > 0 && c[1] > 0, "{c:?}");
}

/// A pool in which no two of the jobs' (job, sequence) pairs share an aggregator: no
/// collision at all, whatever is live together.
#[test]
fn two_jobs_on_a_large_pool_never_collide() {
    let pool = 65_535;
    let mut seen = std::collections::HashSet::new();
    for (job, seqs) in [(1u16, 201u16), (2, 150)] {
        for s in 0..seqs {
            assert!(
                seen.insert(atp::aggregator_of(job, s, pool)),
                "({job}, {s})"
            );
        }
    }
    assert_eq!(two_jobs(pool as f64, 4.0), [0, 0]);
}

// the RC stream (was stream.rs's tests)

#[test]
fn the_stream_arrives_intact_with_and_without_loss() {
    for loss in [0.0, 0.02] {
        let (c, f) = stream_cfg(loss);
        let (nodes, rep) = run_sim(&stream::RcStream, &c, f, 0, 10_000_000_000).expect("run");
        assert!(rep.finished, "loss {loss}");
        for n in &nodes {
            if let SetupNode::Worker(w) = n {
                assert!(w.check(&c), "loss {loss}");
            }
        }
        let s = match &nodes[0] {
            SetupNode::Worker(w) => w.stats(),
            _ => unreachable!(),
        };
        assert_eq!(s.rtt_ns.len(), 400_000usize.div_ceil(1024).div_ceil(16));
        assert_eq!(s.retransmissions > 0, loss > 0.0);
    }
}

// host stacks (was hoststack.rs's tests)

#[test]
fn the_stack_is_priced_by_the_declared_costs_and_never_measured() {
    let atp = CoreCosts::new(21.0, 12.0).unwrap();
    // `paper` for ATP is its released client: the profile's threads, no buffer
    let s = host_stack_for(&atp::Atp, Some("paper"), Some(atp), None, None, None).unwrap();
    let HostStack::Dpdk(d) = s else {
        panic!("{s:?}")
    };
    assert_eq!((d.cores, d.core_frame_ns, d.frame_ns()), (12, 21, 2));
    assert_eq!(s.tx_buffer(), None);
    // the same inputs give the same stack (nothing measured between calls)
    assert_eq!(
        host_stack_for(&atp::Atp, Some("paper"), Some(atp), None, None, None).unwrap(),
        s
    );
    // the profile's thread count is the one used, not the release constant
    let six = CoreCosts::new(21.0, 6.0).unwrap();
    let HostStack::Dpdk(d) =
        host_stack_for(&atp::Atp, Some("dpdk"), Some(six), None, None, None).unwrap()
    else {
        panic!()
    };
    assert_eq!((d.cores, d.lanes, d.frame_ns()), (6, 6, 4));
    // one thread at the profile's cost
    assert_eq!(
        host_stack_for(&atp::Atp, Some("measured"), Some(atp), None, None, None).unwrap(),
        HostStack::Measured(21)
    );
    // NetReduce's paper stack is its NIC and needs no cost; a software stack without one is
    // an error naming the system
    assert_eq!(
        host_stack_for(&netreduce::NetReduce, None, None, None, None, None).unwrap(),
        HostStack::Nic
    );
    let e = host_stack_for(&switchml::SwitchMl, Some("paper"), None, None, None, None).unwrap_err();
    assert!(e.to_string().contains("`switchml`"), "{e}");
    assert!(CoreCosts::new(-1.0, 4.0).is_err());
    assert!(CoreCosts::new(10.0, 0.0).is_err());
    assert!(CoreCosts::new(10.0, 2.5).is_err());
}

/// A whole SwitchML all-reduce on `sim` through the DPDK stack: every worker's sum exact,
/// frames buffered, and the run slower than with no host cost (the buffer and the service
/// time both cost time).
#[test]
fn switchml_on_the_dpdk_stack_is_exact_and_pays_the_buffer() {
    let cfg = AllReduceConfig {
        workers: 4,
        elements: 32 * 1000,
        seed: 5,
        line_rate_bps: 100e9,
        mtu: 1024,
        timeout_ns: 1_000_000,
        knobs: vec![],
    };
    let want = reference_sum(cfg.seed, cfg.workers, cfg.elements);
    let end = |nodes: &[SetupNode]| {
        nodes
            .iter()
            .filter_map(|n| match n {
                SetupNode::Worker(w) => {
                    assert_eq!(w.result().as_deref(), Some(&want[..]));
                    Some(w.stats().end_ns)
                }
                _ => None,
            })
            .max()
            .unwrap_or(0)
    };
    let sys = switchml::SwitchMl;
    let (n0, r0, s0) = run_sim_stack(
        &sys,
        &cfg,
        Faults::default(),
        &HostStack::Nic,
        1_000_000_000,
        None,
    )
    .unwrap();
    assert!(r0.finished);
    assert_eq!(s0, StackStats::default());
    let stack = HostStack::Dpdk(DpdkStack::switchml_release(400));
    let (n1, r1, s1) =
        run_sim_stack(&sys, &cfg, Faults::default(), &stack, 1_000_000_000, None).unwrap();
    assert!(r1.finished);
    assert!(s1.buffered > 0 && s1.waited_ns > 0, "{s1:?}");
    assert!(end(&n1) > end(&n0), "{} vs {}", end(&n1), end(&n0));
    // the service time charged is one core's cost over the release's 4 cores
    let busy: u64 = r1.nodes[..cfg.workers].iter().map(|s| s.cpu_ns).sum();
    let frames: u64 = r1.nodes[..cfg.workers]
        .iter()
        .map(|s| s.frames_rx + s.frames_tx)
        .sum();
    assert_eq!(busy, frames * 100);
}

/// The released SwitchML client keeps 256 packets outstanding per worker, 64 per thread:
/// as many as one transmit buffer holds, so in steady state a thread's buffer fills and
/// leaves at once. With the protocol's old default pool of 128 (32 per thread) no buffer
/// ever fills and every frame waits for the 10 us drain: SwitchML's Table 6 throughput read
/// 18.8 Gbps for that reason alone. A spec's own `pool` still wins.
#[test]
fn the_released_switchml_client_keeps_its_outstanding_packets() {
    let cfg = |knobs: Vec<(String, f64)>| AllReduceConfig {
        workers: 4,
        elements: 64 * 4096,
        seed: 3,
        line_rate_bps: 100e9,
        mtu: 1024,
        timeout_ns: 1_000_000,
        knobs,
    };
    let stack = HostStack::Dpdk(DpdkStack::release(sys("switchml"), 0));
    assert_eq!(
        stack.client_knobs(&cfg(vec![])),
        vec![("pool".to_string(), 256.0)]
    );
    assert!(
        stack
            .client_knobs(&cfg(vec![("pool".into(), 64.0)]))
            .is_empty()
    );
    for other in ["atp", "netreduce", "switchml_rdma"] {
        let s = HostStack::Dpdk(DpdkStack::release(sys(other), 0));
        assert!(s.client_knobs(&cfg(vec![])).is_empty(), "{other}");
    }
    assert!(HostStack::Nic.client_knobs(&cfg(vec![])).is_empty());
    let sys = switchml::SwitchMl;
    let wait = |knobs| {
        let (_, rep, st) = run_sim_stack(
            &sys,
            &cfg(knobs),
            Faults::default(),
            &stack,
            1_000_000_000,
            None,
        )
        .unwrap();
        assert!(rep.finished);
        st.mean_wait_us().unwrap_or(0.0)
    };
    let release = wait(vec![]);
    let small = wait(vec![("pool".into(), 128.0)]);
    assert!(
        release < 5.0,
        "the release's buffers fill: mean wait {release} us"
    );
    assert!(
        small > 5.0,
        "32 a thread never fill 64: mean wait {small} us"
    );
}

/// The ordered (RoCE-style) transports on `dpdk` keep one buffer, so their packets leave in
/// order: SwitchML-RDMA and NetReduce finish with exact sums through the stack.
#[test]
fn ordered_transports_on_the_dpdk_stack_finish_exact() {
    let cfg = AllReduceConfig {
        workers: 4,
        elements: 32 * 1000,
        seed: 7,
        line_rate_bps: 100e9,
        mtu: 1024,
        timeout_ns: 1_000_000,
        knobs: vec![],
    };
    let want = reference_sum(cfg.seed, cfg.workers, cfg.elements);
    let systems: [&dyn System; 2] = [&switchml_rdma::SwitchMlRdma, &netreduce::NetReduce];
    for sys in systems {
        let stack = HostStack::Dpdk(DpdkStack::release(sys, 400));
        assert_eq!(stack.tx_lanes(), 1, "{}", sys.name());
        let (nodes, rep, st) =
            run_sim_stack(sys, &cfg, Faults::default(), &stack, 1_000_000_000, None).unwrap();
        assert!(rep.finished, "{}", sys.name());
        assert!(st.buffered > 0, "{}: {st:?}", sys.name());
        let mut workers = 0;
        for n in &nodes {
            if let SetupNode::Worker(w) = n {
                assert_eq!(w.result().as_deref(), Some(&want[..]), "{}", sys.name());
                workers += 1;
            }
        }
        assert_eq!(workers, cfg.workers);
    }
}
