//! A stand-in carrier of the software RC stack's frames: one [`SoftQp`] whose RoCEv2 frames a UDP
//! socket on loopback carries to its peer's (for hosts without an RDMA device: the agents' tests
//! of a job that spans hosts). It is not a RoCE fabric: rows measured on it say so (fabric
//! `soft-rc-udp`, class `emulated`). The QP names its UDP port in its GID's last two bytes
//! (127.1.p.p), so the peer's [`ConnInfo`] is all the connecting side needs.
//!
//! The stack itself stays sans-IO ([`SoftQp`]); this carrier is the I/O around it: each post and
//! poll receives what arrived, fires a due retransmission timer and sends what the QP has to send.

use crate::soft::{Shape, SoftError, SoftQp};
use crate::{Completion, ConnInfo, HostTransport, RemoteAddr};
use std::net::{SocketAddr, UdpSocket};
use std::time::Instant;

/// Why the carrier refused a call.
#[derive(Debug, thiserror::Error)]
pub enum SoftUdpError {
    #[error(transparent)]
    Soft(#[from] SoftError),
    #[error("the UDP carrier: {0}")]
    Io(#[from] std::io::Error),
}

/// A software RC QP carried over UDP on loopback.
pub struct SoftUdp {
    qp: SoftQp,
    sock: UdpSocket,
    peer: Option<SocketAddr>,
    t0: Instant,
}

impl SoftUdp {
    /// A QP of `shape` with number `qpn` and its buffer at virtual address `base`, bound to a
    /// fresh loopback port.
    pub fn new(shape: Shape, qpn: u32, base: u64) -> Result<SoftUdp, SoftUdpError> {
        let sock = UdpSocket::bind("127.0.0.1:0")?;
        sock.set_nonblocking(true)?;
        let port = sock.local_addr()?.port();
        let ip = [127, 1, (port >> 8) as u8, port as u8];
        let qp = SoftQp::new(ip, qpn, 0x10 * qpn, shape, base, 0x1000 + qpn)?;
        Ok(SoftUdp {
            qp,
            sock,
            peer: None,
            t0: Instant::now(),
        })
    }

    /// Frames not RoCEv2 frames the QP received.
    pub fn malformed(&self) -> u64 {
        self.qp.malformed
    }

    fn pump(&mut self) -> Result<(), SoftUdpError> {
        let now = self.t0.elapsed().as_nanos() as u64;
        let mut buf = [0u8; 9216];
        loop {
            match self.sock.recv_from(&mut buf) {
                Ok((n, _)) => {
                    if let Ok((fr, payload)) = inabench_wire::roce::FrameRepr::parse(&buf[..n]) {
                        self.qp.handle_frame(now, &fr, payload);
                    } else {
                        self.qp.malformed += 1;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e.into()),
            }
        }
        if self.qp.poll_timeout().is_some_and(|t| t <= now) {
            self.qp.handle_timeout(now);
        }
        if let Some(peer) = self.peer {
            while let Some(f) = self.qp.poll_transmit(now) {
                match self.sock.send_to(&f, peer) {
                    Ok(_) => {}
                    // a full socket buffer is a lost frame: go-back-N resends it
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(())
    }
}

impl HostTransport for SoftUdp {
    type Error = SoftUdpError;

    fn info(&self) -> ConnInfo {
        self.qp.info()
    }

    fn connect(&mut self, remote: &ConnInfo) -> Result<(), SoftUdpError> {
        let port = u16::from_be_bytes([remote.gid[14], remote.gid[15]]);
        self.peer = Some(SocketAddr::from(([127, 0, 0, 1], port)));
        Ok(self.qp.connect(remote)?)
    }

    fn buf(&self) -> &[u8] {
        self.qp.buf()
    }

    fn buf_mut(&mut self) -> &mut [u8] {
        self.qp.buf_mut()
    }

    fn post_write(
        &mut self,
        wr_id: u64,
        offset: u64,
        len: u32,
        imm: Option<u32>,
    ) -> Result<(), SoftUdpError> {
        self.qp.post_write(wr_id, offset, len, imm)?;
        self.pump()
    }

    fn post_write_to(
        &mut self,
        wr_id: u64,
        offset: u64,
        len: u32,
        to: RemoteAddr,
        imm: Option<u32>,
    ) -> Result<(), SoftUdpError> {
        self.qp.post_write_to(wr_id, offset, len, to, imm)?;
        self.pump()
    }

    fn post_recv(&mut self, wr_id: u64) -> Result<(), SoftUdpError> {
        Ok(self.qp.post_recv(wr_id)?)
    }

    fn poll(&mut self, max: usize) -> Result<Vec<Completion>, SoftUdpError> {
        self.pump()?;
        Ok(self.qp.poll(max)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two QPs on loopback: three 2-packet WRITEs land byte-exact, the last one's immediate
    /// completes the receive, and the sender's last WRITE completes (its ACK crossed back).
    #[test]
    fn two_qps_carry_a_write_over_loopback() {
        let shape = Shape {
            mtu: 256,
            msg_len: 2,
            window: 2,
            messages: 3,
            rto_ns: 16_000_000,
        };
        let mut a = SoftUdp::new(shape, 0x11, 0x1000_0000).unwrap();
        let mut b = SoftUdp::new(shape, 0x12, 0x2000_0000).unwrap();
        let (ia, ib) = (a.info(), b.info());
        a.connect(&ib).unwrap();
        b.connect(&ia).unwrap();
        b.post_recv(7).unwrap();
        let n = 3 * 512;
        for (i, x) in a.buf_mut()[..n].iter_mut().enumerate() {
            *x = (i * 7 + 3) as u8;
        }
        for m in 0..3u64 {
            let imm = (m == 2).then_some(42);
            a.post_write(m, m * 512, 512, imm).unwrap();
        }
        let t0 = Instant::now();
        let (mut wrote, mut got) = (false, false);
        while !(wrote && got) {
            assert!(t0.elapsed().as_secs() < 10, "no completion in 10 s");
            wrote |= a
                .poll(8)
                .unwrap()
                .iter()
                .any(|c| c.wr_id == 2 && c.error.is_none());
            got |= b.poll(8).unwrap().iter().any(|c| c.imm == Some(42));
        }
        for (i, x) in b.buf()[..n].iter().enumerate() {
            assert_eq!(*x, (i * 7 + 3) as u8, "byte {i}");
        }
        assert_eq!(a.malformed() + b.malformed(), 0);
    }
}
