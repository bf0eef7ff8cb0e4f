//! The ring all-reduce written over `HostTransport` (the code the Soft-RoCE rig's `ring_worker`
//! runs on verbs QPs) on the software RoCEv2 RC stack, through `fabric::Fabric` (sim, mem and
//! udp threads on loopback):
//! every value of every worker's result is the exact wrapping sum of the workers' values, with
//! and without loss (the stack's go-back-N recovers); a WRITE to a wrong rkey lands nowhere; a
//! WRITE to an address and R_Key the peer names (`post_write_to`) lands there.

use inabench_fabric::fault::Faults;
use inabench_fabric::sim::LinkConfig;
use inabench_fabric::udp::IoModel;
use inabench_fabric::{Endpoint, Fabric, Forwarder, Mem, Node, Sim, UdpThreads, Until};
use inabench_transport::soft::{SoftHost, ring_nodes};
use inabench_transport::{HostTransport, STATUS_REMOTE_ACCESS};

/// SplitMix64's output function: seeded int32 values of every sign (so sums wrap).
fn value(seed: u64, w: usize, k: usize) -> i32 {
    let mut z = seed ^ ((w as u64) << 40) ^ k as u64;
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) as u32 as i32
}

fn inputs(n: usize, len: usize, seed: u64) -> Vec<Vec<i32>> {
    (0..n)
        .map(|w| (0..len).map(|k| value(seed, w, k)).collect())
        .collect()
}

/// The reference: the wrapping sum of every worker's value at each index.
fn reference(v: &[Vec<i32>]) -> Vec<i32> {
    (0..v[0].len())
        .map(|k| v.iter().fold(0i32, |s, w| s.wrapping_add(w[k])))
        .collect()
}

type RingNode = Node<SoftHost, Forwarder>;

fn check(nodes: &[RingNode], want: &[i32], what: &str) -> u64 {
    let mut retrans = 0;
    for (i, n) in nodes.iter().enumerate() {
        let Some(h) = n.worker() else { continue };
        assert_eq!(h.error(), None, "{what}: worker {i}");
        let got = h
            .ring
            .result()
            .unwrap_or_else(|| panic!("{what}: worker {i} unfinished"));
        assert_eq!(got.len(), want.len());
        let bad = got.iter().zip(want).filter(|(a, b)| a != b).count();
        assert_eq!(
            bad, 0,
            "{what}: worker {i}: {bad} values differ from the sums"
        );
        retrans += h.counters()[0].1;
    }
    retrans
}

#[test]
fn ring_over_the_trait_on_the_software_stack_sums_exactly_on_sim_mem_and_udp() {
    // 4 workers, 4 chunks of 8 packets of 256 B (512 values each)
    let (n, mtu, per_chunk) = (4usize, 256u32, 8 * 256 / 4);
    let v = inputs(n, n * per_chunk, 7);
    let want = reference(&v);
    assert_ne!(want, v[0], "the sums are not one worker's values");
    for loss in [0.0, 0.02] {
        let faults = Faults {
            loss,
            seed: 11,
            ..Faults::default()
        };
        let nodes = ring_nodes(v.clone(), mtu, 50_000).expect("ring");
        let mut sim = Sim::new(LinkConfig::gbps100(), n as u32);
        sim.faults = faults;
        let (nodes, rep) = sim
            .run(nodes, &Until::workers(n, n + 1, 5_000_000_000))
            .expect("sim run");
        assert!(rep.finished, "sim, loss {loss}: {rep:?}");
        // every step's WRITE crossed the switch as its 8 packets (and their ACKs came back)
        let data = (n * 2 * (n - 1) * 8) as u64;
        assert!(
            rep.nodes[n].frames_rx > data,
            "sim, loss {loss}: the switch saw {} frames, fewer than the {data} data packets and their ACKs",
            rep.nodes[n].frames_rx
        );
        let retrans = check(&nodes, &want, &format!("sim, loss {loss}"));
        assert_eq!(
            retrans > 0,
            loss > 0.0,
            "sim, loss {loss}: {retrans} resends"
        );
    }
    // threads and channels, then UDP sockets on loopback: wall-clock time, the same endpoints;
    // mem with 1% loss (go-back-N on a 5 ms timer)
    let fabrics: Vec<(&str, Box<dyn Fabric<RingNode>>)> = vec![
        (
            "mem",
            Box::new(Mem {
                mtu: 9216,
                faults: Faults {
                    loss: 0.01,
                    seed: 5,
                    ..Faults::default()
                },
            }),
        ),
        (
            "udp",
            Box::new(UdpThreads {
                mtu: 9216,
                faults: Faults::default(),
                io: IoModel::Event,
            }),
        ),
    ];
    for (what, mut f) in fabrics {
        let nodes = ring_nodes(v.clone(), mtu, 5_000_000).expect("ring");
        let (nodes, rep) = f
            .run(nodes, &Until::workers(n, n + 1, 60_000_000_000))
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(rep.finished, "{what}: {rep:?}");
        assert_eq!(rep.fabric, what);
        let resent = check(&nodes, &want, what);
        if what == "mem" {
            assert!(rep.faults.dropped > 0, "mem: no frame lost");
            assert!(
                resent > 0,
                "mem: {} frames lost, none resent",
                rep.faults.dropped
            );
        }
    }
}

#[test]
fn a_write_to_a_wrong_rkey_lands_nowhere_and_fails_its_receive() {
    let (n, mtu) = (2usize, 256u32);
    let v = inputs(n, n * 64, 3);
    let mut nodes = ring_nodes(v, mtu, 50_000).expect("ring");
    let peer = nodes[1].worker().expect("worker 1").send.info();
    // worker 0's receiving QP now registers another rkey than the one worker 1 was told
    let Node::Worker(h0) = &mut nodes[0] else {
        unreachable!()
    };
    let mut info = h0.recv.info();
    info.rkey ^= 1;
    let shape_len = h0.recv.buf().len();
    let mut forged = inabench_transport::soft::SoftQp::new(
        [10, 0, 9, 1],
        info.qpn,
        info.psn,
        inabench_transport::soft::Shape {
            mtu,
            msg_len: 1,
            window: 2,
            messages: 2,
            rto_ns: 50_000,
        },
        info.addr,
        info.rkey,
    )
    .expect("qp");
    assert_eq!(forged.buf().len(), shape_len);
    forged
        .connect(&peer)
        .expect("connect to worker 1's sending QP");
    std::mem::swap(&mut h0.recv, &mut forged);
    h0.ring.post_receives(&mut h0.recv).expect("receives");
    let mut sim = Sim::new(LinkConfig::gbps100(), n as u32);
    let (nodes, _) = sim
        .run(nodes, &Until::workers(n, n + 1, 10_000_000))
        .expect("sim run");
    let h0 = nodes[0].worker().expect("worker");
    assert!(h0.ring.result().is_none(), "no result from refused data");
    let err = h0.error().expect("the ring stopped");
    assert!(
        err.contains(&format!("error: Some({STATUS_REMOTE_ACCESS})")),
        "{err}"
    );
    assert!(h0.recv.access_errors > 0);
    assert!(
        h0.recv.buf().iter().all(|b| *b == 0),
        "nothing written to the buffer"
    );
}

#[test]
fn the_software_qp_refuses_what_a_verbs_qp_would() {
    use inabench_transport::soft::{Shape, SoftError, SoftQp};
    use inabench_transport::{ConnInfo, ConnInfoError, ipv4_gid};
    let shape = Shape {
        mtu: 256,
        msg_len: 2,
        window: 1,
        messages: 2,
        rto_ns: 1000,
    };
    let mut a = SoftQp::new([10, 0, 9, 1], 0x20, 7, shape, 0x1000, 0x11).expect("qp a");
    let b = SoftQp::new([10, 0, 9, 2], 0x21, 9, shape, 0x8000, 0x12).expect("qp b");
    assert_eq!(
        SoftQp::new([10, 0, 9, 1], 1, 7, shape, 0, 0).err(),
        Some(SoftError::Info(ConnInfoError::ReservedQpn(1)))
    );
    assert_eq!(a.post_write(0, 0, 512, None), Err(SoftError::NotConnected));
    let not_v4 = ConnInfo {
        gid: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
        ..b.info()
    };
    assert_eq!(a.connect(&not_v4), Err(SoftError::NotIpv4));
    let bad_psn = ConnInfo {
        psn: 1 << 24,
        ..b.info()
    };
    assert_eq!(
        a.connect(&bad_psn),
        Err(SoftError::Info(ConnInfoError::PsnRange(1 << 24)))
    );
    assert_eq!(b.info().gid, ipv4_gid([10, 0, 9, 2]));
    a.connect(&b.info()).expect("connect");
    assert_eq!(a.connect(&b.info()), Err(SoftError::AlreadyConnected));
    assert!(matches!(
        a.post_write(0, 0, 256, None),
        Err(SoftError::Message { expected: 512, .. })
    ));
    assert!(matches!(
        a.post_write(0, 256, 512, None),
        Err(SoftError::Message { .. })
    ));
    assert!(matches!(
        a.post_write(0, 1024, 512, None),
        Err(SoftError::Region { .. })
    ));
    a.post_write(0, 0, 512, Some(1)).expect("message 0");
    a.post_write(1, 512, 512, None).expect("message 1");
    assert_eq!(a.post_write(2, 0, 512, None), Err(SoftError::Exhausted(2)));
    // the window (one message) lets out message 0's two packets, then waits for its ACK
    let frames: Vec<Vec<u8>> = std::iter::from_fn(|| a.poll_transmit(0)).collect();
    assert_eq!(frames.len(), 2);
    let (f0, _) = inabench_wire::roce::FrameRepr::parse(&frames[0]).expect("frame 0");
    let (f1, _) = inabench_wire::roce::FrameRepr::parse(&frames[1]).expect("frame 1");
    assert_eq!((f0.bth.dest_qp, f0.bth.psn, f1.bth.psn), (0x21, 7, 8));
    assert_eq!(
        f0.reth.map(|r| (r.va, r.rkey, r.dma_len)),
        Some((0x8000, 0x12, 512))
    );
    assert_eq!(f1.immdt, Some(1), "the immediate rides on the last packet");
    assert_eq!(
        a.poll(8).expect("poll"),
        vec![],
        "no completion before the ACK"
    );
}

/// Carry every frame `from` has to send to `to` (parsed, ICRC verified on the way).
fn carry(
    from: &mut inabench_transport::soft::SoftQp,
    to: &mut inabench_transport::soft::SoftQp,
) -> Vec<inabench_wire::roce::FrameRepr> {
    let mut seen = Vec::new();
    while let Some(f) = from.poll_transmit(0) {
        let (fr, payload) = inabench_wire::roce::FrameRepr::parse(&f).expect("a frame");
        to.handle_frame(0, &fr, payload);
        seen.push(fr);
    }
    seen
}

#[test]
fn a_write_to_an_address_and_rkey_the_peer_names_lands_there() {
    // HostTransport::post_write_to (SwitchML-RDMA's worker's WRITE: a VA and R_Key per
    // message): the RETH carries them, the data lands at that address, a wrong key nowhere
    use inabench_transport::soft::{Shape, SoftQp};
    use inabench_transport::{CompletionKind, RemoteAddr};
    let shape = Shape {
        mtu: 256,
        msg_len: 2,
        window: 1,
        messages: 3,
        rto_ns: 1000,
    };
    let mb = u64::from(shape.message_bytes());
    let mut a = SoftQp::new([10, 0, 9, 1], 0x20, 7, shape, 0x1000, 0x11).expect("qp a");
    let mut b = SoftQp::new([10, 0, 9, 2], 0x21, 9, shape, 0x8000, 0x12).expect("qp b");
    let to = RemoteAddr {
        addr: 0x8000 + 2 * mb,
        rkey: 0x12,
    };
    assert_eq!(
        a.post_write_to(0, 0, mb as u32, to, None),
        Err(inabench_transport::soft::SoftError::NotConnected)
    );
    a.connect(&b.info()).expect("connect a");
    b.connect(&a.info()).expect("connect b");
    for (i, x) in a.buf_mut().iter_mut().enumerate() {
        *x = (i % 251) as u8 + 1;
    }
    b.post_recv(40).expect("recv");
    b.post_recv(41).expect("recv");
    // a's message at offset 0 into b's third place (not b's offset 0)
    a.post_write_to(1, 0, mb as u32, to, Some(0xabc))
        .expect("post");
    let frames = carry(&mut a, &mut b);
    assert_eq!(frames.len(), 2);
    assert_eq!(
        frames[0].reth.map(|r| (r.va, r.rkey, r.dma_len)),
        Some((to.addr, to.rkey, mb as u32))
    );
    assert_eq!(frames[1].immdt, Some(0xabc));
    carry(&mut b, &mut a);
    let got = b.poll(8).expect("poll b");
    assert_eq!(got.len(), 1);
    assert_eq!(
        (got[0].wr_id, got[0].kind, got[0].error, got[0].imm),
        (40, CompletionKind::RecvWriteImm, None, Some(0xabc))
    );
    let m = mb as usize;
    assert!(
        b.buf()[..2 * m].iter().all(|x| *x == 0),
        "places 0, 1 untouched"
    );
    assert_eq!(&b.buf()[2 * m..3 * m], &a.buf()[..m], "place 2 holds it");
    let done = a.poll(8).expect("poll a");
    assert_eq!(
        done.iter().map(|c| (c.wr_id, c.kind)).collect::<Vec<_>>(),
        vec![(1, CompletionKind::Write)]
    );
    // the same with another R_Key: refused at b, nothing written, its receive fails
    let before = b.buf().to_vec();
    a.post_write_to(
        2,
        mb,
        mb as u32,
        RemoteAddr {
            addr: 0x8000,
            rkey: 0x13,
        },
        Some(1),
    )
    .expect("post");
    carry(&mut a, &mut b);
    let got = b.poll(8).expect("poll b");
    assert_eq!(
        got.iter().map(|c| (c.wr_id, c.error)).collect::<Vec<_>>(),
        vec![(41, Some(STATUS_REMOTE_ACCESS))]
    );
    assert_eq!(b.access_errors, 1);
    assert_eq!(b.buf(), &before[..]);
}
