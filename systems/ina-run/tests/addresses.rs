//! Every system whose frames carry MAC and IPv4 addresses takes them from a testbed's address
//! plan (`System::build_at`): workers at addresses that follow no rank order, sums exact on the
//! sim fabric, and every frame on a link carrying the plan's addresses and none of the system's
//! synthetic ones; a plan too small, or without the switch address a system's workers send to,
//! refused in one sentence.

#[path = "../../ina/tests/support/mod.rs"]
mod support;
use inabench_fabric::NodeId;
use inabench_fabric::addresses::{AddressPlan, HostAddress, ipv4_gid};
use inabench_fabric::fault::Faults;
use inabench_ina::atp::Atp;
use inabench_ina::common::{AllReduceConfig, SetupError, SetupNode, System};
use inabench_ina::hierarchical::HierarchicalAllReduce;
use inabench_ina::netreduce::NetReduce;
use inabench_ina::ring::RingAllReduce;
use inabench_ina::stream::RcStream;
use inabench_ina::switchml::SwitchMl;
use inabench_ina::switchml_rdma::SwitchMlRdma;
use inabench_ina_run::drive::{run_setup_sim, run_sim_at};
use inabench_wire::roce::{FrameRepr, IcrcCheck};
use inabench_wire::{ethernet, ipv4};
use std::sync::{Arc, Mutex};
use support::check;

fn host(mac: u8, ipv4: [u8; 4]) -> HostAddress {
    HostAddress {
        interface: Some(format!("enp{mac}s0")),
        mac: [0x52, 0x54, 0, 0xab, 0, mac],
        ipv4,
        gid: ipv4_gid(ipv4),
    }
}

/// Three workers at addresses in no rank order (neither 10.x nor the last byte rank + 1), a
/// switch and one parameter server of their own.
fn plan() -> AddressPlan {
    AddressPlan::new(
        vec![
            host(0x42, [192, 168, 7, 42]),
            host(0x09, [172, 16, 0, 9]),
            host(0x03, [192, 168, 7, 3]),
        ],
        Some(host(0xfe, [172, 16, 0, 254])),
    )
    .expect("plan")
    .with_servers(vec![host(0xc8, [192, 168, 7, 200])])
}

fn cfg(workers: usize, elements: usize) -> AllReduceConfig {
    AllReduceConfig {
        workers,
        elements,
        seed: 11,
        line_rate_bps: 100e9,
        mtu: 1024,
        timeout_ns: 200_000,
        knobs: vec![],
    }
}

/// A frame put on a link: (from, to, bytes).
type Tapped = (NodeId, NodeId, Vec<u8>);
type Frames = Arc<Mutex<Vec<Tapped>>>;

/// Run `sys` at `plan` on sim, keeping every frame put on a link.
fn run(sys: &dyn System, c: &AllReduceConfig, plan: &AddressPlan) -> (Vec<SetupNode>, Vec<Tapped>) {
    let frames: Frames = Arc::default();
    let keep = frames.clone();
    let (nodes, rep) = run_sim_at(
        sys,
        c,
        Some(plan),
        Faults::default(),
        10_000_000_000,
        Some(Box::new(move |_, from, to, f| {
            keep.lock().expect("tap").push((from, to, f.to_vec()));
        })),
    )
    .expect("run");
    assert!(rep.finished, "{} at the plan finishes", sys.name());
    let frames = std::mem::take(&mut *frames.lock().expect("frames"));
    (nodes, frames)
}

/// A frame's (source MAC, destination MAC, IPv4 source, IPv4 destination), its IPv4 header
/// checksum verified.
fn addresses(f: &[u8]) -> ([u8; 6], [u8; 6], [u8; 4], [u8; 4]) {
    let e = ethernet::Packet::new_checked(f).expect("ethernet");
    let ip = ipv4::Repr::parse(&f[ethernet::HEADER_LEN..]).expect("IPv4 with a valid checksum");
    (e.src(), e.dst(), ip.src, ip.dst)
}

/// Every frame from worker `w` leaves from its plan address, every frame to it is addressed to
/// it, and no frame carries an address outside the plan; returns how many frames each worker
/// sent.
fn frames_carry_the_plan(
    sys: &str,
    plan: &AddressPlan,
    workers: usize,
    frames: &[Tapped],
) -> Vec<usize> {
    let mut ips: Vec<[u8; 4]> = (0..workers)
        .map(|w| plan.worker(w).expect("worker").ipv4)
        .collect();
    ips.extend(plan.switch.iter().map(|s| s.ipv4));
    ips.extend(plan.servers.iter().map(|s| s.ipv4));
    let mut sent = vec![0; workers];
    for (from, to, f) in frames {
        let (smac, dmac, src, dst) = addresses(f);
        assert!(
            ips.contains(&src) && ips.contains(&dst),
            "{sys}: a frame {src:?} -> {dst:?} outside the plan"
        );
        if let Some(w) = Some(*from as usize).filter(|w| *w < workers) {
            let me = plan.worker(w).expect("worker");
            assert_eq!((smac, src), (me.mac, me.ipv4), "{sys}: worker {w}'s source");
            sent[w] += 1;
        }
        if let Some(w) = Some(*to as usize).filter(|w| *w < workers) {
            let me = plan.worker(w).expect("worker");
            assert_eq!((dmac, dst), (me.mac, me.ipv4), "{sys}: to worker {w}");
        }
    }
    sent
}

#[test]
fn switchml_atp_and_switchml_rdma_run_at_a_testbeds_addresses() {
    let p = plan();
    let sw = p.switch.clone().expect("switch");
    let ps = p.servers[0].clone();
    // SwitchML: workers send to the switch's address, results come from it
    let c = cfg(3, 48 * 40 + 7);
    let (nodes, frames) = run(&SwitchMl, &c, &p);
    check(&nodes, &c);
    let sent = frames_carry_the_plan("switchml", &p, 3, &frames);
    assert!(sent.iter().all(|n| *n >= 41), "{sent:?}");
    for (from, to, f) in &frames {
        let (smac, dmac, src, dst) = addresses(f);
        if (*to as usize) == 3 {
            assert_eq!((dmac, dst), (sw.mac, sw.ipv4), "to the switch");
        }
        if (*from as usize) == 3 {
            assert_eq!((smac, src), (sw.mac, sw.ipv4), "from the switch");
        }
    }

    // ATP: workers to the switch, the switch to the PS (the plan's server) and back
    let c = cfg(3, 62 * 30 + 1);
    let (nodes, frames) = run(&Atp, &c, &p);
    check(&nodes, &c);
    frames_carry_the_plan("atp", &p, 3, &frames);
    let (mut to_ps, mut from_ps) = (0, 0);
    for (from, to, f) in &frames {
        let (_, dmac, src, dst) = addresses(f);
        if *to == 4 {
            to_ps += 1;
            assert_eq!((dmac, dst), (ps.mac, ps.ipv4), "to the PS");
            assert_eq!(src, sw.ipv4, "from the switch");
        }
        if *from == 4 {
            from_ps += 1;
            assert_eq!(
                (src, dst),
                (ps.ipv4, sw.ipv4),
                "the PS's ACKs to the switch"
            );
        }
    }
    assert!(to_ps >= 30 && from_ps >= 30, "{to_ps} {from_ps}");

    // SwitchML-RDMA: the workers' UC WRITEs to the switch carry an ICRC over the plan's
    // addresses that a RoCE stack verifies; the switch answers from its own address
    let c = cfg(3, 192 * 4 * 10 + 3);
    let (nodes, frames) = run(&SwitchMlRdma, &c, &p);
    check(&nodes, &c);
    frames_carry_the_plan("switchml_rdma", &p, 3, &frames);
    let mut verified = 0;
    for (from, _, f) in &frames {
        let (fr, _) = FrameRepr::parse_with(f, IcrcCheck::Ignore).expect("RoCEv2");
        if (*from as usize) < 3 {
            FrameRepr::parse_with(f, IcrcCheck::Verify).expect("a worker's ICRC verifies");
            assert_eq!(fr.dst_ip, sw.ipv4);
            verified += 1;
        } else {
            assert_eq!((fr.src_mac, fr.src_ip), (sw.mac, sw.ipv4));
        }
    }
    assert!(verified >= 3 * 40, "{verified}");
}

#[test]
fn netreduce_and_the_rc_stream_run_at_a_testbeds_addresses() {
    let p = plan();
    let c = cfg(3, 256 * 170 * 2 + 9);
    let (nodes, frames) = run(&NetReduce, &c, &p);
    check(&nodes, &c);
    let sent = frames_carry_the_plan("netreduce", &p, 3, &frames);
    for (from, _, f) in &frames {
        if (*from as usize) < 3 {
            FrameRepr::parse_with(f, IcrcCheck::Verify).expect("a worker's ICRC verifies");
        }
    }
    assert!(sent.iter().all(|n| *n > 300), "{sent:?}");

    // the same workers with an accelerator that keeps the synthetic plan: it finds no worker at
    // these addresses, drops their packets, and nothing finishes
    let at_plan = NetReduce.build_at(&c, Some(&p)).expect("build");
    let synthetic = NetReduce.build(&c).expect("build");
    let mixed = inabench_ina::common::Setup {
        workers: at_plan.workers,
        switch: synthetic.switch,
        others: Vec::new(),
    };
    let (nodes, rep) = run_setup_sim(mixed, &c, Faults::default(), 0, 2_000_000).expect("run");
    assert!(!rep.finished);
    assert!(nodes.iter().all(|n| match n {
        SetupNode::Worker(w) => w.result().is_none(),
        _ => true,
    }));
    let dropped = inabench_ina::common::switch_stats(&nodes)
        .expect("switch")
        .dropped;
    assert!(dropped > 0, "the accelerator without the plan drops them");

    let c = cfg(2, 4096);
    let (nodes, frames) = run(&RcStream, &c, &p);
    assert!(nodes.iter().all(|n| match n {
        SetupNode::Worker(w) => w.check(&c),
        _ => true,
    }));
    frames_carry_the_plan("rc_stream", &p, 2, &frames);
}

/// The host-only baselines: every RC connection at the plan's addresses, the switch forwarding
/// by them; the synthetic switch (by the address's last byte) sends them nowhere.
#[test]
fn the_ring_and_the_hierarchical_all_reduce_run_at_a_testbeds_addresses() {
    let p = plan();
    let c = cfg(3, 3 * 256 * 7 + 11);
    let (nodes, frames) = run(&RingAllReduce, &c, &p);
    check(&nodes, &c);
    let sent = frames_carry_the_plan("ring_allreduce", &p, 3, &frames);
    assert!(sent.iter().all(|n| *n >= 4 * 7), "{sent:?}");
    for (from, _, f) in &frames {
        if (*from as usize) < 3 {
            FrameRepr::parse_with(f, IcrcCheck::Verify).expect("an RC frame's ICRC verifies");
        }
    }
    // four workers in groups of two: both legs (QP indices 0 and 1) at the plan's addresses
    let four = plan_of(4);
    let c = AllReduceConfig {
        knobs: vec![("group_size".into(), 2.0)],
        ..cfg(4, 4 * 256 * 5 + 3)
    };
    let (nodes, frames) = run(&HierarchicalAllReduce, &c, &four);
    check(&nodes, &c);
    frames_carry_the_plan("hierarchical_allreduce", &four, 4, &frames);
    // the ring's workers at the plan through the synthetic switch (the worker is the address's
    // last byte less one): their frames are dropped or reach the wrong worker, nothing finishes
    let c = cfg(3, 3 * 256 * 7 + 11);
    let at_plan = RingAllReduce.build_at(&c, Some(&p)).expect("build");
    let synthetic = RingAllReduce.build(&c).expect("build");
    let mixed = inabench_ina::common::Setup {
        workers: at_plan.workers,
        switch: synthetic.switch,
        others: Vec::new(),
    };
    let (nodes, rep) = run_setup_sim(mixed, &c, Faults::default(), 0, 2_000_000).expect("run");
    assert!(!rep.finished);
    assert!(
        inabench_ina::common::switch_stats(&nodes)
            .expect("switch")
            .dropped
            > 0
    );
}

/// `n` workers at addresses in no rank order.
fn plan_of(n: u8) -> AddressPlan {
    AddressPlan::new(
        (0..n)
            .map(|i| host(0x30 + i, [172, 20 + i, 9, 200 - 7 * i]))
            .collect(),
        None,
    )
    .expect("plan")
}

#[test]
fn a_plan_that_cannot_address_the_job_is_refused_in_one_sentence() {
    let p = plan();
    let four = cfg(4, 100);
    for sys in [
        &SwitchMl as &dyn System,
        &Atp,
        &SwitchMlRdma,
        &NetReduce,
        &RingAllReduce,
        &HierarchicalAllReduce,
    ] {
        let e = sys.build_at(&four, Some(&p)).err().expect("too few");
        assert!(
            matches!(e, SetupError::Addresses(_)),
            "{}: {e:?}",
            sys.name()
        );
        assert_eq!(
            e.to_string(),
            "the address plan has 3 workers; the job has 4"
        );
    }
    let no_switch = AddressPlan::new((0..3).map(|w| p.worker(w).expect("worker")).collect(), None)
        .expect("plan");
    let three = cfg(3, 100);
    for (sys, name) in [
        (&SwitchMl as &dyn System, "SwitchML"),
        (&Atp, "ATP"),
        (&SwitchMlRdma, "SwitchML-RDMA"),
    ] {
        let e = sys
            .build_at(&three, Some(&no_switch))
            .err()
            .expect("no switch");
        assert_eq!(
            e.to_string(),
            format!(
                "the address plan gives no switch address, and {name}'s workers address their frames to the switch"
            )
        );
    }
    // NetReduce's accelerator is transparent: no switch address needed
    assert!(NetReduce.build_at(&three, Some(&no_switch)).is_ok());
    // ATP's parameter server needs a host of its own
    let no_ps = AddressPlan::new(
        (0..3).map(|w| p.worker(w).expect("worker")).collect(),
        p.switch.clone(),
    )
    .expect("plan");
    assert_eq!(
        Atp.build_at(&three, Some(&no_ps))
            .err()
            .expect("no PS")
            .to_string(),
        "the address plan gives 0 parameter server addresses (hosts with role `ps`); ATP needs 1"
    );
    // a node built alone at the plan (a process per node) is the same node: SwitchML's worker 1
    // sends from its plan address to the switch's
    let SetupNode::Worker(mut w1) = SwitchMl.build_node_at(&three, 1, Some(&p)).expect("node 1")
    else {
        panic!("node 1 is a worker")
    };
    let f = w1.poll_transmit(0).expect("a frame").bytes;
    let (_, _, src, dst) = addresses(&f);
    assert_eq!(src, p.worker(1).expect("worker 1").ipv4);
    assert_eq!(dst, p.switch.as_ref().expect("switch").ipv4);
    assert!(SwitchMl.build_node_at(&three, 4, Some(&p)).is_err());
    // a system whose frames take no plan refuses one
    struct Toy;
    impl System for Toy {
        fn name(&self) -> &'static str {
            "toy"
        }
    }
    let e = Toy.build_at(&three, Some(&p)).err().expect("refused");
    assert!(matches!(e, SetupError::Unaddressed("toy")));
    assert_eq!(
        e.to_string(),
        "toy takes no address plan: its frames carry only its own synthetic addresses"
    );
    // without a plan every system builds as it always has
    for sys in [
        &SwitchMl as &dyn System,
        &Atp,
        &SwitchMlRdma,
        &NetReduce,
        &RingAllReduce,
        &HierarchicalAllReduce,
    ] {
        assert!(sys.build_at(&three, None).is_ok());
    }
}
