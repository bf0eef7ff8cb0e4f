//! A multicast group on a [`Star`]: the aggregator's program on every member's link, each member
//! in the devmap with its route, and a UDP socket per member (in its namespace) that sends
//! gradients and receives aggregates. Used by the tests and by [`crate::bench`].

use crate::netns::{Star, in_netns};
use crate::proto::Packet;
use crate::{Aggregator, AttachMode, Config, Forward, ReceiverConfig, XdpError};
use std::net::{SocketAddrV4, UdpSocket};

/// UDP port of ALEPH traffic at the aggregator.
pub const PORT: u16 = 41_449;
/// UDP port where members receive aggregates.
pub const RESULT_PORT: u16 = 41_450;
/// UDP port where a member's training program waits for the gradient fetch signal.
pub const NOTIFY_PORT: u16 = 41_451;

/// Field order is drop order: the programs are detached before the namespaces go.
pub struct Group {
    pub agg: Aggregator,
    /// Each member's Gradient Receiver (when created with receivers).
    pub receivers: Vec<Aggregator>,
    /// Each member's socket: sends gradients, and receives aggregates when there are no
    /// receivers.
    pub socks: Vec<UdpSocket>,
    /// Each member's fetch-signal socket on [`NOTIFY_PORT`] (when created with receivers).
    pub notify: Vec<UdpSocket>,
    pub star: Star,
}

impl Group {
    /// `members` members (bits 0..members) aggregating `segments` segments of job `job`; with
    /// `receivers`, each member runs the Gradient Receiver program on its `eth0`.
    pub fn create(
        members: usize,
        segments: u32,
        mode: AttachMode,
        job: u16,
        receivers: bool,
    ) -> Result<Group, XdpError> {
        if members == 0 || members > 32 {
            return Err(XdpError::Config(format!("{members} members (1..=32)")));
        }
        let star = Star::create(members)?;
        let mut agg = Aggregator::load(segments)?;
        agg.configure(&Config {
            job,
            full_mask: if members == 32 {
                u32::MAX
            } else {
                (1u32 << members) - 1
            },
            forward: Forward::Multicast,
            port: PORT,
        })?;
        let a = star.aggregator.clone();
        for (i, m) in star.members.iter().enumerate() {
            agg.attach(Some(&a), &m.port, mode)?;
            if mode == AttachMode::Native && !receivers {
                // native redirects into a veth need NAPI on its peer (which any program turns on)
                agg.attach_pass(Some(&m.namespace), "eth0", mode)?;
            }
            agg.add_star_member(&a, i as u32, m)?;
        }
        let mut rx = Vec::new();
        let mut notify = Vec::new();
        if receivers {
            for m in &star.members {
                let mut r = Aggregator::load(segments)?;
                r.configure_receiver(&ReceiverConfig {
                    job,
                    port: RESULT_PORT,
                    notify_port: NOTIFY_PORT,
                    segments,
                })?;
                r.attach_receiver(Some(&m.namespace), "eth0", mode)?;
                rx.push(r);
                let s = in_netns(Some(&m.namespace), || {
                    UdpSocket::bind(("0.0.0.0", NOTIFY_PORT))
                })?
                .map_err(|e| XdpError::Io(format!("udp socket in {}", m.namespace), e))?;
                notify.push(s);
            }
        }
        let mut socks = Vec::new();
        for m in &star.members {
            let s = in_netns(Some(&m.namespace), || {
                UdpSocket::bind(("0.0.0.0", RESULT_PORT))
            })?
            .map_err(|e| XdpError::Io(format!("udp socket in {}", m.namespace), e))?;
            // a round's aggregates arrive in a burst: room for them
            crate::netns::force_buffers(&s, Some(16 << 20), None);
            socks.push(s);
        }
        Ok(Group {
            agg,
            receivers: rx,
            socks,
            notify,
            star,
        })
    }

    /// Where member `i` sends its gradients.
    pub fn target(&self, member: usize) -> Option<SocketAddrV4> {
        self.star
            .members
            .get(member)
            .map(|m| SocketAddrV4::new(m.gateway, PORT))
    }

    /// Send `p` from member `i`.
    pub fn send(&self, member: usize, p: &Packet) -> Result<(), XdpError> {
        let (Some(sock), Some(to)) = (self.socks.get(member), self.target(member)) else {
            return Err(XdpError::Config(format!("no member {member}")));
        };
        sock.send_to(&p.emit(), to)
            .map(|_| ())
            .map_err(|e| XdpError::Io("send".into(), e))
    }
}
