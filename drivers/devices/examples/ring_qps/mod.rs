//! What the rig's verbs examples share (the ring's `netreduce_worker` and `ring_worker` all of
//! it; `ps_worker` the QP-info exchange, `connect`/`accept` and the values; `switchml_rdma_worker`
//! `pick_gid`): worker r of N has a
//! sending RC QP connected to its successor's receiving QP and a receiving QP connected to its
//! predecessor's sending QP, their QPN, first PSN, GID, buffer address and rkey exchanged with
//! the two neighbours over TCP (the control network; as `inabench_transport::ConnInfo`, checked), and a barrier at worker 0; and the values
//! every worker derives for every worker from a seed, so each knows the sums.

use inabench_devices::verbs::{Connection, QpInfo, QpPlan, Verbs};
use inabench_transport::ConnInfo;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

pub type R<T> = Result<T, String>;

/// SplitMix64's output function.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Value `k` of part `m` (a message, a chunk) of worker `w`: any int32 (so the sums wrap).
pub fn value(seed: u64, w: usize, m: u32, k: usize) -> i32 {
    let h = mix(seed ^ mix(((w as u64) << 48) ^ (u64::from(m) << 32) ^ k as u64));
    h as u32 as i32
}

/// The first IPv4-mapped GID (::ffff:a.b.c.d) of the device's port 1, else index 0.
pub fn pick_gid(v: &Verbs, device: Option<&str>) -> R<u8> {
    let devs = v.devices().map_err(|e| e.to_string())?;
    let d = match device {
        Some(n) => devs.iter().find(|d| d.name == n),
        None => devs.first(),
    }
    .ok_or("no RDMA device")?;
    let port = d.ports.first().ok_or("the device has no port")?;
    Ok(port
        .gids
        .iter()
        .find(|(_, g)| g.0[..10] == [0; 10] && g.0[10..12] == [0xff, 0xff])
        .map_or(0, |(i, _)| *i as u8))
}

/// QP info travels as the message-level transport's `ConnInfo` (the same 36 bytes as
/// `QpInfo`), checked on arrival: a QPN or PSN beyond 24 bits, a reserved QPN or a zero GID is
/// refused with its reason before any QP is connected to it.
pub fn send_info(s: &mut TcpStream, i: &QpInfo, what: &str) -> R<()> {
    s.write_all(&ConnInfo::from(*i).to_bytes())
        .map_err(|e| format!("sending QP info to {what}: {e}"))
}

pub fn recv_info(s: &mut TcpStream, what: &str) -> R<QpInfo> {
    let mut b = [0u8; inabench_transport::CONN_INFO_LEN];
    s.read_exact(&mut b)
        .map_err(|e| format!("receiving QP info from {what}: {e}"))?;
    ConnInfo::from_bytes(&b)
        .map(|c| QpInfo::from(&c))
        .map_err(|e| format!("QP info from {what}: {e}"))
}

/// A TCP stream to `addr`, retried for 180 s while the peer boots.
pub fn connect(addr: &str) -> R<TcpStream> {
    let t = Instant::now();
    loop {
        match TcpStream::connect(addr) {
            Ok(s) => {
                s.set_read_timeout(Some(Duration::from_secs(180)))
                    .map_err(|e| e.to_string())?;
                return Ok(s);
            }
            Err(e) if t.elapsed() > Duration::from_secs(180) => {
                return Err(format!("connecting to {addr}: {e}"));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// The next stream on `l` (`what`: who, for the error).
pub fn accept(l: &TcpListener, what: &str) -> R<TcpStream> {
    let s = l.accept().map_err(|e| format!("accepting {what}: {e}"))?.0;
    s.set_read_timeout(Some(Duration::from_secs(180)))
        .map_err(|e| e.to_string())?;
    Ok(s)
}

/// A worker's two QPs in the ring, connected, and its barrier streams.
pub struct RingQps<'a> {
    pub send: Connection<'a>,
    pub recv: Connection<'a>,
    /// The successor's receiving QP (where `send` WRITEs).
    pub succ_recv: QpInfo,
    /// The predecessor's sending QP.
    pub pred_send: QpInfo,
    worker0: bool,
    star: Vec<TcpStream>,
}

impl<'a> RingQps<'a> {
    /// Create both QPs for `plan` (the sending one starts at `plan.sq_psn`), `fill` the sending
    /// QP's buffer, exchange QP information with the neighbours of worker `me` (control
    /// addresses `ips`, TCP `port` and, at worker 0, `port + 1`), connect, and post `recvs`
    /// receives (wr_id 0..recvs, no data: for WRITEs with immediate) before the predecessor
    /// learns where to write.
    #[allow(clippy::too_many_arguments)]
    pub fn connect(
        v: &'a Verbs,
        device: Option<&str>,
        gid_index: u8,
        plan: &QpPlan,
        ips: &[String],
        me: usize,
        port: u16,
        recvs: u32,
        fill: impl FnOnce(&mut [u8]),
    ) -> R<RingQps<'a>> {
        let n = ips.len();
        let succ = (me + 1) % n;
        let mut send = v
            .connect(device, 1, gid_index, plan)
            .map_err(|e| format!("the sending QP: {e}"))?;
        let mut recv = v
            .connect(device, 1, gid_index, plan)
            .map_err(|e| format!("the receiving QP: {e}"))?;
        fill(&mut send.buf);
        let ring = TcpListener::bind(("0.0.0.0", port)).map_err(|e| format!("port {port}: {e}"))?;
        let star_l = if me == 0 {
            Some(
                TcpListener::bind(("0.0.0.0", port + 1))
                    .map_err(|e| format!("port {}: {e}", port + 1))?,
            )
        } else {
            None
        };
        // a stream to the successor (the sending QP's peer) and one from the predecessor: the
        // listener is bound before connecting, so the connects of all workers complete
        let mut to_succ = connect(&format!("{}:{port}", ips[succ]))?;
        let mut from_pred = accept(&ring, "the predecessor")?;
        send_info(&mut to_succ, &send.info(), "the successor")?;
        let pred_send = recv_info(&mut from_pred, "the predecessor")?;
        recv.connect_to(&pred_send)
            .map_err(|e| format!("the receiving QP: {e}"))?;
        for m in 0..recvs {
            recv.post_recv(u64::from(m), 0, 0)
                .map_err(|e| e.to_string())?;
        }
        send_info(&mut from_pred, &recv.info(), "the predecessor")?;
        let succ_recv = recv_info(&mut to_succ, "the successor")?;
        send.connect_to(&succ_recv)
            .map_err(|e| format!("the sending QP: {e}"))?;
        let star = match &star_l {
            Some(l) => (1..n)
                .map(|_| accept(l, "a worker for the barrier"))
                .collect::<R<Vec<_>>>()?,
            None => vec![connect(&format!("{}:{}", ips[0], port + 1))?],
        };
        Ok(RingQps {
            send,
            recv,
            succ_recv,
            pred_send,
            worker0: me == 0,
            star,
        })
    }

    /// Every worker reaches `tag` (worker 0 gathers and releases the others).
    pub fn barrier(&mut self, tag: u8) -> R<()> {
        let err = |e: std::io::Error| format!("barrier {}: {e}", tag as char);
        let mut b = [0u8; 1];
        if self.worker0 {
            for s in self.star.iter_mut() {
                s.read_exact(&mut b).map_err(err)?;
                if b[0] != tag {
                    return Err(format!("barrier {}: got {}", tag as char, b[0] as char));
                }
            }
            for s in self.star.iter_mut() {
                s.write_all(&[tag]).map_err(err)?;
            }
        } else {
            for s in self.star.iter_mut() {
                s.write_all(&[tag]).map_err(err)?;
                s.read_exact(&mut b).map_err(err)?;
                if b[0] != tag {
                    return Err(format!("barrier {}: got {}", tag as char, b[0] as char));
                }
            }
        }
        Ok(())
    }
}
