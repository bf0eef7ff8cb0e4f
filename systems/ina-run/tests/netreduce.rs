//! NetReduce on the sim fabric: exact sums, under loss, duplication and reordering too.

#[path = "../../ina/tests/support/mod.rs"]
mod support;
use inabench_fabric::fault::Faults;
use inabench_fabric::sim::{LinkConfig, NodeConfig, SimReport};
use inabench_fabric::testing::Group;
use inabench_fabric::{Endpoint, Fabric, Mem, Until};
use inabench_ina::common::{AllReduceConfig, SetupNode, System, total_retransmissions};
use inabench_ina::netreduce::NetReduce;
use support::check;

fn cfg(workers: usize, elements: usize, msg_packets: f64) -> AllReduceConfig {
    AllReduceConfig {
        workers,
        elements,
        seed: 42,
        line_rate_bps: 100e9,
        mtu: 1024,
        timeout_ns: 200_000,
        knobs: vec![("msg_packets".into(), msg_packets), ("window".into(), 2.0)],
    }
}

fn run(c: &AllReduceConfig, faults: Faults) -> (Vec<SetupNode>, SimReport) {
    let setup = NetReduce.build(c).expect("build");
    let nodes = setup.into_nodes();
    let n = nodes.len();
    let host = NodeConfig {
        rx_cost_ns: 100,
        tx_cost_ns: 100,
    };
    let mut cfgs = vec![host; n];
    cfgs[c.workers] = NodeConfig {
        rx_cost_ns: 0,
        tx_cost_ns: 0,
    };
    let mut g = Group::builder()
        .link(LinkConfig::gbps100())
        .switch(c.workers as u32)
        .costs(cfgs)
        .faults(faults)
        .count_all()
        .limit_ns(10_000_000_000)
        .build(nodes);
    let finished = g.drive();
    let rep = SimReport {
        finished,
        ..g.report().clone()
    };
    (g.into_nodes(), rep)
}

#[test]
fn six_workers_exact_sum() {
    let c = cfg(6, 100_000, 170.0);
    let (nodes, rep) = run(&c, Faults::default());
    assert!(rep.finished, "{rep:?}");
    check(&nodes, &c);
    let retx = total_retransmissions(&nodes);
    assert_eq!(retx, 0, "no loss, no retransmission");
}

#[test]
fn exact_under_loss_duplication_and_reordering() {
    for (i, loss) in [0.001, 0.01].into_iter().enumerate() {
        let c = cfg(6, 60_000, 16.0);
        let faults = Faults {
            loss,
            duplicate: 0.01,
            reorder: 0.01,
            reorder_delay_ns: 5_000,
            seed: 7 + i as u64,
        };
        let (nodes, rep) = run(&c, faults);
        assert!(rep.finished, "loss {loss}: {rep:?}");
        assert!(rep.faults.dropped > 0 && rep.faults.duplicated > 0 && rep.faults.reordered > 0);
        check(&nodes, &c);
        let retx = total_retransmissions(&nodes);
        assert!(retx > 0, "losses were recovered by retransmission");
    }
}

#[test]
fn accelerator_drops_packets_whose_first_packet_was_lost() {
    // two workers, messages of 4 packets, a window of 2 messages: take worker 0's first eight
    // packets (messages 0 and 1) and give the accelerator all but the first packet of message 1
    let c = cfg(2, 2_000, 4.0);
    let setup = NetReduce.build(&c).expect("build");
    let mut nodes = setup.into_nodes();
    let mut frames = Vec::new();
    if let SetupNode::Worker(w) = &mut nodes[0] {
        while let Some(t) = w.poll_transmit(0) {
            frames.push(t.bytes);
        }
    }
    assert_eq!(
        frames.len(),
        8,
        "the window holds two messages of four packets"
    );
    let SetupNode::Switch(accel) = &mut nodes[2] else {
        panic!("node 2 is the accelerator")
    };
    for (k, f) in frames.iter().enumerate() {
        if k != 4 {
            accel.handle_packet(0, 0, f);
        }
    }
    let st = accel.stats();
    assert_eq!(
        st.dropped, 3,
        "the three packets after the lost first packet of message 1 are dropped"
    );
    // the first packet arrives (retransmitted): the following ones are addressed again
    accel.handle_packet(1, 0, &frames[4]);
    accel.handle_packet(1, 0, &frames[5]);
    assert_eq!(accel.stats().dropped, 3);
    // and a malformed frame is counted, not a panic
    accel.handle_packet(2, 0, &frames[5][..20]);
    assert_eq!(accel.stats().dropped, 4);
}

#[test]
fn switch_ports_overhead_comes_from_the_wiring() {
    let c = cfg(6, 1_000, 170.0);
    let setup = NetReduce.build(&c).expect("build");
    let s = setup.switch.stats();
    assert_eq!((s.ports_used, s.ports_total), (6, 12));
    assert!((s.overhead_fraction - 0.5).abs() < 1e-12);
}

#[test]
fn rtt_starts_on_the_wire_and_the_senders_queue_is_reported_apart() {
    use inabench_ina_run::drive::run_sim;
    // seven messages with a window of two: a message's first packet waits behind the previous 170-packet message
    // (170 x 1,106 B at 100 Gbps = 15 us) in its own host's queue; the RTT from its first bit
    // on the wire must not contain that wait
    let c = cfg(6, 262_144, 170.0);
    let (nodes, rep) = run_sim(&NetReduce, &c, Faults::default(), 0, 1_000_000_000).expect("run");
    assert!(rep.finished);
    check(&nodes, &c);
    let mut rtt = Vec::new();
    let mut queue = Vec::new();
    for n in &nodes {
        if let SetupNode::Worker(w) = n {
            let s = w.stats();
            assert_eq!(s.rtt_ns.len(), s.rtt_queue_ns.len());
            rtt.extend(s.rtt_ns);
            queue.extend(s.rtt_queue_ns);
        }
    }
    assert_eq!(rtt.len(), 6 * 7, "one sample per message and worker");
    let max_rtt = rtt.iter().copied().max().unwrap_or(0);
    let max_queue = queue.iter().copied().max().unwrap_or(0);
    assert!(max_rtt < 5_000, "RTT from the wire: {max_rtt} ns");
    assert!(
        max_queue > 10_000,
        "the later messages' first packets wait behind the previous message: {max_queue} ns"
    );
}

/// `cfg` with `qps` RC connections per worker pair (the `switch_shards` knob).
fn cfg_qps(workers: usize, elements: usize, msg_packets: f64, qps: usize) -> AllReduceConfig {
    let mut c = cfg(workers, elements, msg_packets);
    c.knobs.push(("switch_shards".into(), qps as f64));
    c
}

/// No packet sent twice, no NAK and no RTO on any worker: no go-back-N.
fn assert_no_go_back_n(nodes: &[SetupNode], what: &str) {
    for n in nodes {
        if let SetupNode::Worker(w) = n {
            let c: std::collections::HashMap<_, _> = w.counters().into_iter().collect();
            assert_eq!(
                (c["retransmissions"], c["naks"], c["timeouts"]),
                (0, 0, 0),
                "{what}: worker {} went back",
                w.id()
            );
        }
    }
}

#[test]
fn several_qps_per_worker_pair_sum_exactly_without_go_back_n() {
    use inabench_ina::netreduce::Layout;
    for qps in [2usize, 4] {
        // 6 workers, 25 messages of 16 packets over `qps` QPs each
        let c = cfg_qps(6, 100_000, 16.0, qps);
        let l = Layout::new(&c).expect("layout");
        assert_eq!((l.qps as usize, l.messages), (qps, 25));
        let (nodes, rep) = run(&c, Faults::default());
        assert!(rep.finished, "{qps} QPs: {rep:?}");
        check(&nodes, &c);
        assert_no_go_back_n(&nodes, &format!("sim, {qps} QPs"));
        // every QP carried its messages: the accelerator used aggregators of every QP
        let SetupNode::Switch(accel) = &nodes[6] else {
            panic!("node 6 is the accelerator")
        };
        assert_eq!(accel.stats().dropped, 0);
    }
}

#[test]
fn several_qps_recover_from_loss_duplication_and_reordering() {
    for (qps, seed) in [(2usize, 3u64), (4, 4)] {
        let c = cfg_qps(6, 60_000, 16.0, qps);
        let faults = Faults {
            loss: 0.01,
            duplicate: 0.01,
            reorder: 0.01,
            reorder_delay_ns: 5_000,
            seed,
        };
        let (nodes, rep) = run(&c, faults);
        assert!(rep.finished, "{qps} QPs: {rep:?}");
        check(&nodes, &c);
        assert!(total_retransmissions(&nodes) > 0);
    }
}

#[test]
fn several_qps_on_the_mem_fabric_sum_exactly_without_go_back_n() {
    for qps in [2usize, 4] {
        // real threads on a shared host: an RTO of 1 s, so that only a NAK (an out-of-order PSN)
        // or a scheduling pause of a second could make a worker go back
        let c = AllReduceConfig {
            timeout_ns: 1_000_000_000,
            ..cfg_qps(6, 100_000, 16.0, qps)
        };
        let nodes = NetReduce.build(&c).expect("build").into_nodes();
        let mut mem = Mem {
            mtu: c.mtu + 128,
            faults: Faults::default(),
        };
        let until = Until::workers(c.workers, nodes.len(), 60_000_000_000);
        let (nodes, rep) = mem.run(nodes, &until).expect("mem run");
        assert!(rep.finished, "mem, {qps} QPs");
        check(&nodes, &c);
        assert_no_go_back_n(&nodes, &format!("mem, {qps} QPs"));
    }
}

#[test]
fn each_message_rides_the_qp_its_number_names() {
    use inabench_ina::netreduce::{Layout, qp_index};
    use inabench_wire::roce::FrameRepr;
    // the QP streams together cover every packet of the gradient once
    for qps in [1usize, 2, 3, 4] {
        let l = Layout::new(&cfg_qps(2, 100_000, 16.0, qps)).expect("layout");
        let mut seen = vec![0u32; l.packets() as usize];
        for q in 0..l.qps {
            for i in 0..l.qp_messages(q) * l.msg_len {
                let g = l.global_packet(q, i);
                assert_eq!((g / l.msg_len) % l.qps, q, "message of packet {g}");
                seen[g as usize] += 1;
            }
        }
        assert!(seen.iter().all(|&s| s == 1), "{qps} QPs: {seen:?}");
    }
    // worker 0's first frames with 3 QPs: message 0 on QP 0, 1 on QP 1, 2 on QP 2, each QP's
    // first PSN its own
    let c = cfg_qps(2, 100_000, 4.0, 3);
    let mut nodes = NetReduce.build(&c).expect("build").into_nodes();
    let SetupNode::Worker(w) = &mut nodes[0] else {
        panic!("node 0 is a worker")
    };
    let mut firsts = Vec::new();
    while let Some(t) = w.poll_transmit(0) {
        let (repr, payload) = FrameRepr::parse(&t.bytes).expect("a frame");
        if inabench_wire::ina::NetReduceHeader::is_first(payload) {
            let h = inabench_wire::ina::NetReduceHeader::parse(payload).expect("header");
            firsts.push((h.msg_id, qp_index(repr.bth.dest_qp), repr.bth.psn));
        }
    }
    // a window of 2 messages per QP: 6 messages in flight
    assert_eq!(firsts.len(), 6, "{firsts:?}");
    for &(m, q, _) in &firsts {
        assert_eq!(m % 3, q);
    }
    let psn = |m: u32| firsts.iter().find(|f| f.0 == m).map(|f| f.2).expect("sent");
    assert_ne!(psn(0), psn(1));
    // message 3 is QP 0's second message: its PSN follows message 0's 4 packets
    assert_eq!(psn(3), psn(0) + 4);
}

/// Issue #32's window stall: with the hosts' transmit pushed into the link's queue, an ACK made
/// while a window of data waits there leaves behind it, the sender's window opens late and its
/// uplink idles between windows (Table 6's setting, 6 workers and six whole messages: in a
/// capture, host 0's uplink was busy 96.3% of the time from its first frame to its last pushed,
/// 98.3% pulled). Pulled as a NIC sends, the ACK leaves next and the uplink stays busy.
#[test]
fn the_uplink_stays_busy_between_windows() {
    let c = AllReduceConfig {
        timeout_ns: 100_000,
        ..cfg(6, 261_096, 170.0)
    };
    let utilisation = |push: bool| {
        let setup = NetReduce.build(&c).expect("build");
        let nodes = setup.into_nodes();
        let n = nodes.len();
        let none = NodeConfig {
            rx_cost_ns: 0,
            tx_cost_ns: 0,
        };
        let mut g = Group::builder()
            .link(LinkConfig::gbps100())
            .switch(c.workers as u32)
            .costs(vec![none; n])
            .push_transmit(push)
            .count_all()
            .limit_ns(1_000_000_000)
            .build(nodes);
        assert!(g.drive());
        let rep = g.report().clone();
        let nodes = g.into_nodes();
        check(&nodes, &c);
        let framing = LinkConfig::gbps100().framing_bytes as f64;
        let mut worst = f64::MAX;
        for (i, node) in nodes.iter().enumerate().take(c.workers) {
            let SetupNode::Worker(w) = node else {
                continue;
            };
            let s = w.stats();
            let st = &rep.nodes[i];
            let wire_ns = (st.bytes_tx as f64 + framing * st.frames_tx as f64) * 8.0 / 100e9 * 1e9;
            worst = worst.min(wire_ns / (s.end_ns - s.start_ns) as f64);
        }
        worst
    };
    let pull = utilisation(false);
    let push = utilisation(true);
    // from the first send to the last result: pulled 0.972 (what is left is the start and the
    // last message's result coming back), pushed 0.933: the 3-4% the window stalls cost
    assert!(pull > 0.96, "pulled: the uplink busy {pull:.4} of the run");
    assert!(push < pull - 0.02, "pushed {push:.4} vs pulled {pull:.4}");
}

/// NetReduce's accelerator hangs off the switch on its own ports (Sec. 4, Fig. 5): on `sim` each
/// packet crosses two more links than on the bare star, each 0.5 us plus the frame's
/// serialization, so every RTT sample is that much longer; nothing else changes (exact sums).
#[test]
fn the_accelerator_behind_the_switch_costs_two_link_crossings() {
    use inabench_ina_run::drive::{run_sim, sim_link};
    let c = cfg(4, 4 * 32 * 256, 32.0);
    let median = |nodes: &[SetupNode]| {
        let mut v: Vec<u64> = nodes
            .iter()
            .filter_map(|n| match n {
                SetupNode::Worker(w) => Some(w.stats().rtt_ns.clone()),
                _ => None,
            })
            .flatten()
            .collect();
        v.sort_unstable();
        v[v.len() / 2]
    };
    // the bare star with free hosts (a host cost would queue results behind the host's own
    // sends and hide the links' latency), on the links run_sim uses
    let nodes = NetReduce.build(&c).expect("build").into_nodes();
    let free = NodeConfig {
        rx_cost_ns: 0,
        tx_cost_ns: 0,
    };
    let n = nodes.len();
    let mut g = Group::builder()
        .link(sim_link(&c))
        .switch(c.workers as u32)
        .costs(vec![free; n])
        .count_all()
        .limit_ns(1_000_000_000)
        .build(nodes);
    assert!(g.drive());
    let star = g.into_nodes();
    check(&star, &c);
    let (behind, rep) = run_sim(&NetReduce, &c, Faults::default(), 0, 1_000_000_000).expect("run");
    assert!(rep.finished);
    check(&behind, &c);
    // 1024 B of payload + 58 B of headers + 24 B of framing at 100 Gbit/s: 89 ns
    let crossing = 500 + 89;
    let extra = median(&behind) as i64 - median(&star) as i64;
    assert!(
        (extra - 2 * crossing).abs() <= 10,
        "two more crossings: {extra} ns, want {}",
        2 * crossing
    );
}
