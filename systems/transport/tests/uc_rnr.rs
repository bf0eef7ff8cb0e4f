//! The software stack's UC queue pairs and RC's Receiver Not Ready, through `HostTransport`:
//! - UC frames (WRITE FIRST/MIDDLE/LAST with immediate, ONLY) and an RC RNR NAK that tshark's
//!   InfiniBand dissector reads field for field, every ICRC the one `inabench-wire` computes;
//! - a UC message with one packet lost is never delivered (no completion, nothing written, its
//!   receive not consumed) and the next message is, exactly;
//! - an RC WRITE with immediate that finds no receive gets RNR NAKs on the wire, each resend
//!   after the NAK's timer, and lands exactly once the receive is posted; with `rnr_retry`
//!   spent it completes with `IBV_WC_RNR_RETRY_EXC_ERR` (13) and the WRITE after it is flushed;
//! - SwitchML-RDMA's worker (`switchml_rdma::SmlrWorker`, what the rig's `switchml_rdma_worker`
//!   runs) on UC `SoftQp`s, through
//!   the suite's SwitchML-RDMA switch on `sim`: every value of every worker the exact sum, with
//!   and without loss.

use inabench_transport::soft::{Shape, SoftError, SoftQp};
use inabench_transport::{
    Completion, CompletionKind, HostTransport, QpType, STATUS_RNR_RETRY_EXC, STATUS_WR_FLUSH,
};
use inabench_wire::ib::{Syndrome, opcode};
use inabench_wire::roce::FrameRepr;

fn shape(mtu: u32, msg_len: u32, messages: u32) -> Shape {
    Shape {
        mtu,
        msg_len,
        window: 2,
        messages,
        rto_ns: 1_000_000,
    }
}

/// Two connected QPs of `t`, `a`'s buffer filled with a pattern.
fn pair(t: QpType, sh: Shape) -> (SoftQp, SoftQp) {
    let mut a =
        SoftQp::with_type([10, 0, 9, 1], 0x40, 0xff_fffd, sh, 0x1_0000, 0x21, t).expect("a");
    let mut b = SoftQp::with_type([10, 0, 9, 2], 0x41, 0x77, sh, 0x9_0000, 0x22, t).expect("b");
    a.connect(&b.info()).expect("a connects");
    b.connect(&a.info()).expect("b connects");
    for (i, x) in a.buf_mut().iter_mut().enumerate() {
        *x = (i % 253) as u8 + 1;
    }
    (a, b)
}

/// Every frame `from` sends now, parsed (ICRC verified) with its bytes.
fn drain(from: &mut SoftQp, now: u64) -> Vec<(Vec<u8>, FrameRepr, Vec<u8>)> {
    std::iter::from_fn(|| from.poll_transmit(now))
        .map(|f| {
            let (fr, p) = FrameRepr::parse(&f).expect("a frame with a good ICRC");
            let p = p.to_vec();
            (f, fr, p)
        })
        .collect()
}

fn deliver(to: &mut SoftQp, now: u64, frames: &[(Vec<u8>, FrameRepr, Vec<u8>)]) {
    for (_, fr, p) in frames {
        to.handle_frame(now, fr, p);
    }
}

#[test]
fn tshark_reads_our_uc_writes_and_rnr_naks_and_every_icrc_is_ours() {
    // UC: a 3-packet WRITE with immediate whose last packet is short (padded), then a 1-packet
    // WRITE without
    let (mut a, mut b) = pair(QpType::Uc, shape(256, 4, 4));
    b.post_recv(9).expect("recv");
    a.post_write(1, 0, 2 * 256 + 102, Some(0xfeed_0001))
        .expect("write 1");
    a.post_write(2, 1024, 256, None).expect("write 2");
    let uc = drain(&mut a, 0);
    let ops: Vec<u8> = uc.iter().map(|(_, fr, _)| fr.bth.opcode).collect();
    assert_eq!(
        ops,
        vec![
            opcode::UC_RDMA_WRITE_FIRST,
            opcode::UC_RDMA_WRITE_MIDDLE,
            opcode::UC_RDMA_WRITE_LAST_IMM,
            opcode::UC_RDMA_WRITE_ONLY
        ]
    );
    // PSNs from the first across the 24-bit wrap
    let psns: Vec<u32> = uc.iter().map(|(_, fr, _)| fr.bth.psn).collect();
    assert_eq!(psns, vec![0xff_fffd, 0xff_fffe, 0xff_ffff, 0]);
    // UC completes a WRITE at the sender when its last packet is sent
    let done = a.poll(8).expect("poll");
    assert_eq!(
        done.iter()
            .map(|c| (c.wr_id, c.kind, c.error, c.byte_len))
            .collect::<Vec<_>>(),
        vec![
            (1, CompletionKind::Write, None, 614),
            (2, CompletionKind::Write, None, 256)
        ]
    );
    deliver(&mut b, 0, &uc);
    assert!(
        b.poll_transmit(0).is_none(),
        "a UC responder answers nothing"
    );
    let got = b.poll(8).expect("poll b");
    assert_eq!(
        got,
        vec![Completion {
            wr_id: 9,
            kind: CompletionKind::RecvWriteImm,
            error: None,
            byte_len: 614,
            imm: Some(0xfeed_0001)
        }]
    );
    assert_eq!(&b.buf()[..614], &a.buf()[..614], "write 1 landed exactly");
    assert_eq!(&b.buf()[1024..1280], &a.buf()[1024..1280], "write 2 too");
    assert!(b.buf()[614..1024].iter().all(|x| *x == 0));

    // RC: a WRITE with immediate to a QP with no receive: the RNR NAK
    let (mut c, mut d) = pair(QpType::Rc, shape(256, 1, 2));
    d.set_rnr(14, 7).expect("attrs");
    c.post_write(3, 0, 256, Some(7)).expect("write");
    let rc = drain(&mut c, 0);
    deliver(&mut d, 0, &rc);
    let nak = drain(&mut d, 0);
    assert_eq!(nak.len(), 1);
    assert_eq!(
        nak[0].1.aeth.map(|a| a.syndrome),
        Some(Syndrome::RnrNak { timer: 14 })
    );

    if !inabench_testkit::need_tool("tshark", "tshark") {
        return;
    }
    let frames: Vec<&(Vec<u8>, FrameRepr, Vec<u8>)> = uc.iter().chain(&nak).collect();
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("uc-rnr.pcap");
    {
        let f = std::fs::File::create(&path).expect("pcap");
        let mut w = inabench_wire::pcap::PcapWriter::new(f).expect("header");
        for (i, (bytes, _, _)) in frames.iter().enumerate() {
            w.write_packet(1_700_000_000_000_000_000 + 1_000 * i as u64, bytes)
                .expect("write");
        }
    }
    let fields = [
        "infiniband.bth.opcode",
        "infiniband.bth.destqp",
        "infiniband.bth.psn",
        "infiniband.bth.padcnt",
        "infiniband.reth.va",
        "infiniband.reth.r_key",
        "infiniband.reth.dmalen",
        "infiniband.aeth.syndrome",
        "infiniband.immdt",
        "infiniband.invariant.crc",
        "udp.dstport",
    ];
    let mut cmd = std::process::Command::new("tshark");
    cmd.args(["-n", "-r"]).arg(&path).args([
        "-T",
        "fields",
        "-E",
        "separator=;",
        "-E",
        "occurrence=f",
    ]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("tshark runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<Vec<Option<u64>>> = text
        .lines()
        .map(|l| l.split(';').map(num).collect())
        .collect();
    assert!(
        out.status.success() && rows.len() == frames.len(),
        "tshark read {} frames of {}:\n{text}\n{}",
        rows.len(),
        frames.len(),
        String::from_utf8_lossy(&out.stderr)
    );
    for (row, (bytes, fr, payload)) in rows.iter().zip(frames) {
        // the ICRC tshark shows (Wireshark 4.0 does not check it) is the one we computed and
        // FrameRepr::parse verified above
        let icrc = bytes[bytes.len() - 4..]
            .iter()
            .fold(0u64, |a, b| (a << 8) | u64::from(*b));
        let want = vec![
            Some(u64::from(fr.bth.opcode)),
            Some(u64::from(fr.bth.dest_qp)),
            Some(u64::from(fr.bth.psn)),
            Some(((4 - payload.len() % 4) % 4) as u64),
            fr.reth.map(|r| r.va),
            fr.reth.map(|r| u64::from(r.rkey)),
            fr.reth.map(|r| u64::from(r.dma_len)),
            fr.aeth
                .map(|a| u64::from(a.syndrome.to_byte().expect("syndrome"))),
            fr.immdt.map(u64::from),
            Some(icrc),
            Some(4791),
        ];
        assert_eq!(
            row,
            &want,
            "tshark read {} as {row:?}",
            opcode::name(fr.bth.opcode)
        );
    }
    // the RNR NAK's syndrome byte: 001 (RNR) then timer code 14
    assert_eq!(rows[4][7], Some(0x20 | 14));
}

/// tshark prints numbers in decimal or 0x-hex, bytes as hex.
fn num(x: &str) -> Option<u64> {
    let x = x.trim();
    if x.is_empty() {
        return None;
    }
    match x.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => x
            .parse()
            .ok()
            .or_else(|| u64::from_str_radix(&x.replace(':', ""), 16).ok()),
    }
}

#[test]
fn a_uc_message_missing_a_packet_is_dropped_whole_and_the_next_lands_exactly() {
    let mb = 4 * 256usize;
    // which packet of the first message is lost: its FIRST, a MIDDLE, its LAST
    for lost in [0usize, 2, 3] {
        let (mut a, mut b) = pair(QpType::Uc, shape(256, 4, 3));
        b.post_recv(100).expect("recv");
        b.post_recv(101).expect("recv");
        a.post_write(1, 0, mb as u32, Some(11)).expect("write 1");
        a.post_write(2, mb as u64, mb as u32, Some(22))
            .expect("write 2");
        let mut frames = drain(&mut a, 0);
        assert_eq!(frames.len(), 8);
        frames.remove(lost);
        deliver(&mut b, 0, &frames);
        let got = b.poll(8).expect("poll");
        assert_eq!(
            got,
            vec![Completion {
                wr_id: 100,
                kind: CompletionKind::RecvWriteImm,
                error: None,
                byte_len: mb as u32,
                imm: Some(22)
            }],
            "lost packet {lost}: only the second message completes, on the first receive"
        );
        assert!(
            b.buf()[..mb].iter().all(|x| *x == 0),
            "lost packet {lost}: nothing of the first message written"
        );
        assert_eq!(&b.buf()[mb..2 * mb], &a.buf()[mb..2 * mb]);
        // the packets after the gap up to the next FIRST were dropped
        assert_eq!(b.uc_dropped(), (3 - lost.min(3)) as u64);
        // the sender knew nothing: both WRITEs completed when sent
        assert_eq!(a.poll(8).expect("poll a").len(), 2);
    }
    // the lost MIDDLE's place taken by a duplicate of the one before it: the packets and bytes
    // add up, the PSNs do not: dropped all the same
    let (mut a, mut b) = pair(QpType::Uc, shape(256, 4, 3));
    b.post_recv(100).expect("recv");
    a.post_write(1, 0, mb as u32, Some(11)).expect("write 1");
    a.post_write(2, mb as u64, mb as u32, Some(22))
        .expect("write 2");
    let mut frames = drain(&mut a, 0);
    frames[2] = frames[1].clone();
    deliver(&mut b, 0, &frames);
    assert_eq!(
        b.poll(8)
            .expect("poll")
            .iter()
            .map(|c| (c.wr_id, c.imm))
            .collect::<Vec<_>>(),
        vec![(100, Some(22))]
    );
    assert!(b.buf()[..mb].iter().all(|x| *x == 0));
    assert_eq!(&b.buf()[mb..2 * mb], &a.buf()[mb..2 * mb]);
    // a UC WRITE with immediate with no receive posted is dropped whole, silently; the next,
    // with its receive there, lands
    let (mut a, mut b) = pair(QpType::Uc, shape(256, 2, 2));
    a.post_write(1, 0, 512, Some(1)).expect("write");
    let f = drain(&mut a, 0);
    deliver(&mut b, 0, &f);
    assert_eq!((b.poll(8).expect("poll"), b.no_receive_drops), (vec![], 1));
    assert!(b.poll_transmit(0).is_none(), "no RNR NAK on UC");
    assert!(b.buf().iter().all(|x| *x == 0));
    b.post_recv(5).expect("recv");
    a.post_write(2, 512, 512, Some(2)).expect("write");
    let f = drain(&mut a, 0);
    deliver(&mut b, 0, &f);
    assert_eq!(
        b.poll(8)
            .expect("poll")
            .iter()
            .map(|c| (c.wr_id, c.imm))
            .collect::<Vec<_>>(),
        vec![(5, Some(2))]
    );
    assert_eq!(&b.buf()[512..], &a.buf()[512..]);
    // an RC QP refuses UC frames (the service is fixed per QP, both sides choose it)
    let (mut u, _) = pair(QpType::Uc, shape(256, 1, 1));
    let (_, mut r) = pair(QpType::Rc, shape(256, 1, 1));
    u.post_write(1, 0, 256, None).expect("write");
    let f = drain(&mut u, 0);
    deliver(&mut r, 0, &f);
    assert_eq!(r.malformed, 1);
}

#[test]
fn an_rc_write_with_no_receive_is_rnr_naked_until_the_receive_is_posted_then_lands_once() {
    // two messages of 3 packets; b posts no receive before the third resend
    let (mut a, mut b) = pair(QpType::Rc, shape(256, 3, 2));
    b.set_rnr(3, 7).expect("attrs"); // 0.03 ms
    let timer = 30_000u64;
    a.post_write(1, 0, 768, Some(0xa1)).expect("write 1");
    a.post_write(2, 768, 768, Some(0xa2)).expect("write 2");
    let mut now = 0u64;
    let mut wire_naks = 0;
    let mut resends_at = Vec::new();
    loop {
        let data = drain(&mut a, now);
        if !data.is_empty() && now > 0 {
            resends_at.push((now, data[0].1.bth.psn, data.len()));
        }
        deliver(&mut b, now, &data);
        let back = drain(&mut b, now);
        for (_, fr, _) in &back {
            if let Some(Syndrome::RnrNak { timer: t }) = fr.aeth.map(|x| x.syndrome) {
                assert_eq!(t, 3);
                assert_eq!(fr.bth.opcode, opcode::RC_ACKNOWLEDGE);
                wire_naks += 1;
            }
        }
        deliver(&mut a, now + 1, &back);
        assert!(
            b.buf().iter().all(|x| *x == 0),
            "nothing written before the receive"
        );
        assert_eq!(b.poll(8).expect("poll"), vec![], "no receive completion");
        if wire_naks == 3 {
            break;
        }
        let t = a.poll_timeout().expect("the RNR timer runs");
        assert_eq!(t, now + 1 + timer, "the resend waits the NAK's timer");
        assert!(a.poll_transmit(t - 1).is_none(), "nothing before the timer");
        now = t;
        a.handle_timeout(now);
    }
    // each resend started at the packet that needs the receive (message 1's last), PSN
    // 0xff_fffd + 2, and carried it and the second message's three packets
    assert_eq!(
        resends_at.iter().map(|r| (r.1, r.2)).collect::<Vec<_>>(),
        vec![(0xff_ffff, 4), (0xff_ffff, 4)]
    );
    b.post_recv(50).expect("recv");
    b.post_recv(51).expect("recv");
    now = a.poll_timeout().expect("timer");
    a.handle_timeout(now);
    for _ in 0..4 {
        let data = drain(&mut a, now);
        deliver(&mut b, now, &data);
        let back = drain(&mut b, now);
        deliver(&mut a, now, &back);
        now += 1_000;
    }
    let got: Vec<(u64, Option<u32>, Option<u32>)> = b
        .poll(8)
        .expect("poll")
        .iter()
        .map(|c| (c.wr_id, c.imm, c.error))
        .collect();
    assert_eq!(got, vec![(50, Some(0xa1), None), (51, Some(0xa2), None)]);
    assert_eq!(&b.buf()[..1536], &a.buf()[..1536], "both messages exact");
    let sent: Vec<(u64, Option<u32>)> = a
        .poll(8)
        .expect("poll")
        .iter()
        .map(|c| (c.wr_id, c.error))
        .collect();
    assert_eq!(sent, vec![(1, None), (2, None)]);
    assert_eq!((b.rnr_naks_sent(), a.rnr_naks_received()), (3, 3));
    assert_eq!(wire_naks, 3);
}

#[test]
fn spent_rnr_retries_fail_the_write_with_13_and_flush_the_next() {
    let (mut a, mut b) = pair(QpType::Rc, shape(256, 2, 3));
    a.set_rnr(12, 2).expect("attrs");
    b.set_rnr(1, 7).expect("attrs");
    assert!(matches!(a.set_rnr(32, 0), Err(SoftError::Attr(_))));
    assert!(matches!(a.set_rnr(0, 8), Err(SoftError::Attr(_))));
    a.post_write(1, 0, 512, Some(1)).expect("write 1");
    a.post_write(2, 512, 512, Some(2)).expect("write 2");
    let mut now = 0;
    let mut rounds = 0;
    while let Some(t) = a.poll_timeout().or((rounds == 0).then_some(0)) {
        now = now.max(t);
        a.handle_timeout(now);
        let data = drain(&mut a, now);
        deliver(&mut b, now, &data);
        let back = drain(&mut b, now);
        deliver(&mut a, now, &back);
        rounds += 1;
        assert!(rounds < 10, "the retries never ran out");
    }
    // the first send and rnr_retry (2) resends, each refused
    assert_eq!((b.rnr_naks_sent(), a.rnr_naks_received()), (3, 3));
    let done: Vec<(u64, Option<u32>)> = a
        .poll(8)
        .expect("poll")
        .iter()
        .map(|c| (c.wr_id, c.error))
        .collect();
    assert_eq!(
        done,
        vec![(1, Some(STATUS_RNR_RETRY_EXC)), (2, Some(STATUS_WR_FLUSH))]
    );
    assert_eq!(STATUS_RNR_RETRY_EXC, 13);
    assert_eq!(a.post_write(3, 1024, 512, None), Err(SoftError::Failed));
    assert!(a.poll_transmit(now + 1_000_000_000).is_none());
    assert!(b.buf().iter().all(|x| *x == 0), "nothing landed");
    assert_eq!(b.poll(8).expect("poll"), vec![]);
}

mod smlr {
    //! SwitchML-RDMA's worker on a UC `SoftQp`: `inabench_transport::switchml_rdma::SmlrWorker`,
    //! the code the rig's `switchml_rdma_worker` (drivers/devices/examples) runs on a verbs UC
    //! QP, here on the software stack as a sans-IO endpoint: one UC QP to the switch; message m
    //! is one WRITE with immediate (exponents 0) from the gradient's place, its RETH the
    //! worker's result address for the message (VA) and the message's first pool index (R_Key);
    //! one message per slot group in flight; the switch's UC WRITE Only with Immediate results
    //! land in the result area, one receive each; a message whose results are overdue is
    //! written again whole.

    use inabench_fabric::{Endpoint, Nanos, NodeId, Transmit};
    use inabench_ina::common::Switch;
    use inabench_transport::soft::{Shape, SoftQp};
    use inabench_transport::switchml_rdma::{SmlrPlan, SmlrWorker};
    use inabench_transport::{ConnInfo, HostTransport, QpType, ipv4_gid};
    use inabench_wire::ina::switchml_rdma::QPN_MARK;
    use inabench_wire::roce::FrameRepr;

    pub struct Host {
        pub me: usize,
        switch: NodeId,
        pub qp: SoftQp,
        pub worker: SmlrWorker,
        pub error: Option<String>,
    }

    pub struct Plan {
        pub workers: usize,
        pub elements: usize,
        pub per_packet: usize,
        pub k: usize,
        pub pool: usize,
        pub seed: u64,
        pub timeout_ns: u64,
    }

    impl Host {
        pub fn new(me: usize, p: &Plan) -> Host {
            let plan = SmlrPlan {
                workers: p.workers,
                rank: me,
                elements: p.elements,
                packet_bytes: 4 * p.per_packet,
                msg_packets: p.k,
                pool: p.pool,
                timeout_ns: p.timeout_ns,
                reps: 1,
            };
            let mut worker = SmlrWorker::new(
                plan,
                inabench_ina::common::gradient(p.seed, me, p.elements),
                inabench_ina::common::reference_sum(p.seed, p.workers, p.elements),
            )
            .expect("the worker's plan");
            let (base, rkey) = inabench_ina::switchml_rdma::result_buffer(me);
            // the gradient's messages, then their results
            let shape = Shape {
                mtu: plan.packet_bytes as u32,
                msg_len: p.k as u32,
                window: 1,
                messages: 2 * worker.messages() as u32,
                rto_ns: 1,
            };
            // the switch's plan: worker w at 10.0.3.(w+1), its QPN 0x10 + w
            let mut qp = SoftQp::with_type(
                [10, 0, 3, me as u8 + 1],
                0x10 + me as u32,
                (0xff_fffe + me as u32 * 0x0010_0001) & 0xff_ffff,
                shape,
                base,
                rkey,
                QpType::Uc,
            )
            .expect("qp");
            worker.write_gradient(&mut qp).expect("gradient");
            worker.post_receives(&mut qp).expect("receives");
            // the switch's QP for this worker (bit 23, the worker id); its results start at
            // PSN 0; the worker names each WRITE's RETH (its result address, the pool index)
            let switch = ConnInfo {
                qpn: QPN_MARK | (me as u32) << 16,
                psn: 0,
                gid: ipv4_gid([10, 0, 3, p.workers as u8 + 1]),
                addr: base,
                rkey: 0,
            };
            qp.connect(&switch).expect("connect");
            Host {
                me,
                switch: p.workers as NodeId,
                qp,
                worker,
                error: None,
            }
        }

        /// The worker's rounds at `now` until one takes nothing.
        fn step(&mut self, now: Nanos) {
            while self.error.is_none() {
                match self.worker.progress(&mut self.qp, now) {
                    Ok(p) if p.completions > 0 => {}
                    Ok(_) => break,
                    Err(e) => self.error = Some(e.to_string()),
                }
            }
        }

        /// The whole result area against the reference.
        pub fn wrong_values(&self) -> usize {
            self.worker.wrong_values(self.qp.buf())
        }
    }

    impl Endpoint for Host {
        fn id(&self) -> NodeId {
            self.me as NodeId
        }

        fn handle_packet(&mut self, now: Nanos, _from: NodeId, frame: &[u8]) {
            // the ICRC is checked: the relay in front of the switch recomputed it
            match FrameRepr::parse(frame) {
                Ok((fr, payload)) => self.qp.handle_frame(now, &fr, payload),
                Err(_) => self.qp.malformed += 1,
            }
            self.step(now);
        }

        fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
            self.step(now);
            let bytes = self.qp.poll_transmit(now)?;
            Some(Transmit {
                to: self.switch,
                bytes,
            })
        }

        fn poll_timeout(&self) -> Option<Nanos> {
            self.worker.next_deadline()
        }

        fn handle_timeout(&mut self, now: Nanos) {
            self.step(now);
        }

        fn is_done(&self) -> bool {
            self.worker.done() || self.error.is_some()
        }
    }

    /// The suite's SwitchML-RDMA switch, its results' ICRC recomputed on the way out (as the
    /// rig's host side, `switchml_rdma_switch`, does for rdma_rxe: the switch model keeps the
    /// ICRC of the packet it rewrote, as a Tofino 1 does).
    pub struct IcrcRelay(pub Box<dyn Switch>);

    impl Endpoint for IcrcRelay {
        fn id(&self) -> NodeId {
            self.0.id()
        }

        fn handle_packet(&mut self, now: Nanos, from: NodeId, frame: &[u8]) {
            self.0.handle_packet(now, from, frame);
        }

        fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
            let mut t = self.0.poll_transmit(now)?;
            if t.bytes.len() > 14 {
                // a frame too short for an ICRC goes on as it is; the host counts it malformed
                let _ = inabench_wire::icrc::fill(&mut t.bytes[14..]);
            }
            Some(t)
        }

        fn poll_timeout(&self) -> Option<Nanos> {
            self.0.poll_timeout()
        }

        fn handle_timeout(&mut self, now: Nanos) {
            self.0.handle_timeout(now);
        }

        fn counters(&self) -> Vec<(&'static str, u64)> {
            self.0.counters()
        }
    }
}

#[test]
fn switchml_rdma_workers_on_soft_uc_qps_sum_exactly_through_the_suites_switch_on_sim() {
    use inabench_fabric::fault::Faults;
    use inabench_fabric::sim::LinkConfig;
    use inabench_fabric::{Fabric, Node, Sim, Until};
    use inabench_ina::common::{AllReduceConfig, System};
    use inabench_ina::switchml_rdma::SwitchMlRdma;
    // 4 workers; 12 messages of 4 packets of 192 int32 (768 B, the paper's four chained
    // passes); a pool of 16 slots (4 groups): each group carries 3 messages, sets alternating
    let (n, per_packet, k, pool) = (4usize, 192usize, 4usize, 16usize);
    let elements = per_packet * k * 12;
    let plan = smlr::Plan {
        workers: n,
        elements,
        per_packet,
        k,
        pool,
        seed: 9,
        timeout_ns: 50_000,
    };
    for loss in [0.0, 0.01] {
        let cfg = AllReduceConfig {
            workers: n,
            elements,
            seed: plan.seed,
            line_rate_bps: 100e9,
            mtu: 1024,
            timeout_ns: plan.timeout_ns,
            knobs: vec![
                ("smlr_payload".into(), (4 * per_packet) as f64),
                ("smlr_msg_packets".into(), k as f64),
                ("pool".into(), pool as f64),
            ],
        };
        let setup = SwitchMlRdma.build(&cfg).expect("the switch");
        let mut nodes: Vec<Node<smlr::Host, smlr::IcrcRelay>> = (0..n)
            .map(|w| Node::Worker(smlr::Host::new(w, &plan)))
            .collect();
        nodes.push(Node::Switch(smlr::IcrcRelay(setup.switch)));
        let mut sim = Sim::new(LinkConfig::gbps100(), n as u32);
        sim.faults = Faults {
            loss,
            seed: 3,
            ..Faults::default()
        };
        let (nodes, rep) = sim
            .run(nodes, &Until::workers(n, n + 1, 1_000_000_000))
            .expect("sim run");
        assert!(rep.finished, "loss {loss}: {rep:?}");
        let mut resent = 0;
        for node in &nodes {
            let Some(h) = node.worker() else { continue };
            assert_eq!(h.error, None, "loss {loss}: worker {}", h.me);
            assert_eq!(h.worker.stats().done, 12, "loss {loss}: worker {}", h.me);
            assert_eq!(
                h.wrong_values(),
                0,
                "loss {loss}: worker {}: values differ from the sums",
                h.me
            );
            assert_eq!(h.qp.malformed, 0, "every result's ICRC good");
            resent += h.worker.stats().resent;
        }
        let (dup, foreign): (u64, u64) = nodes
            .iter()
            .filter_map(|x| x.worker())
            .map(|h| h.worker.stats())
            .fold((0, 0), |(d, f), s| (d + s.duplicates, f + s.foreign));
        eprintln!(
            "switchml_rdma on soft UC, loss {loss}: done at {} ns, {} frames dropped, {resent} messages resent, {dup} duplicate and {foreign} late results",
            rep.time_ns, rep.faults.dropped
        );
        assert_eq!(
            resent > 0,
            loss > 0.0,
            "loss {loss}: {resent} messages resent"
        );
        if loss > 0.0 {
            assert!(rep.faults.dropped > 0);
        }
    }
}
