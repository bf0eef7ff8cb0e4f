//! Work inside a named network namespace (`ip netns`): XDP attach and detach talk netlink in the
//! caller's namespace, and interface indices are per namespace, so both run on a short-lived
//! thread that has entered the namespace (`setns` changes only the calling thread). Sockets made
//! there stay in that namespace when handed back.
//!
//! [`Star`] is the topology of ALEPH's Fig. 4: one aggregator (the PS) with one veth pair per
//! member, each member in its own namespace. The bridge topology of `inabench_fabric::netns`
//! cannot carry Fig. 4: a devmap broadcast tells copies apart by their egress interface, so each
//! member needs its own interface on the aggregator.

use crate::XdpError;
use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// Run `f` on a thread inside namespace `ns` (`None`: this process's namespace).
pub fn in_netns<T: Send>(ns: Option<&str>, f: impl FnOnce() -> T + Send) -> Result<T, XdpError> {
    let Some(ns) = ns else {
        return Ok(f());
    };
    let path = format!("/run/netns/{ns}");
    std::thread::scope(|s| {
        s.spawn(move || {
            let file = std::fs::File::open(&path).map_err(|e| XdpError::Io(path.clone(), e))?;
            use std::os::fd::AsRawFd;
            // SAFETY: a valid namespace fd; CLONE_NEWNET moves only this thread
            let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            if rc != 0 {
                return Err(XdpError::Io(path, std::io::Error::last_os_error()));
            }
            Ok(f())
        })
        .join()
        .map_err(|_| XdpError::Netns("a thread inside the namespace panicked".into()))?
    })
}

/// The index of interface `name` in namespace `ns`.
pub fn ifindex(ns: Option<&str>, name: &str) -> Result<u32, XdpError> {
    let c = std::ffi::CString::new(name).map_err(|_| XdpError::NoInterface(name.into()))?;
    // SAFETY: a NUL-terminated name
    let idx = in_netns(ns, || unsafe { libc::if_nametoindex(c.as_ptr()) })?;
    if idx == 0 {
        Err(XdpError::NoInterface(format!(
            "{name} (namespace {})",
            ns.unwrap_or("-")
        )))
    } else {
        Ok(idx)
    }
}

/// The MAC address of interface `name` in namespace `ns`.
pub fn mac(ns: Option<&str>, name: &str) -> Result<[u8; 6], XdpError> {
    let path = format!("/sys/class/net/{name}/address");
    // sysfs shows the reading thread's namespace only when mounted there; `ip` is reliable
    let mut args: Vec<&str> = Vec::new();
    if let Some(ns) = ns {
        args.extend(["-n", ns]);
    }
    args.extend(["link", "show", "dev", name]);
    let out = run_out("ip", &args)?;
    let text = out
        .split("link/ether ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .ok_or_else(|| XdpError::NoInterface(path.clone()))?;
    let mut m = [0u8; 6];
    let parts: Vec<&str> = text.split(':').collect();
    if parts.len() != 6 {
        return Err(XdpError::NoInterface(path));
    }
    for (b, p) in m.iter_mut().zip(parts) {
        *b = u8::from_str_radix(p, 16).map_err(|_| XdpError::NoInterface(path.clone()))?;
    }
    Ok(m)
}

/// Whether an XDP program is attached to `name` in `ns`, as `ip link` reports it.
pub fn has_xdp(ns: Option<&str>, name: &str) -> Result<bool, XdpError> {
    let mut args: Vec<&str> = Vec::new();
    if let Some(ns) = ns {
        args.extend(["-n", ns]);
    }
    args.extend(["link", "show", "dev", name]);
    Ok(run_out("ip", &args)?.contains("prog/xdp"))
}

fn run_out(cmd: &str, args: &[&str]) -> Result<String, XdpError> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .map_err(|e| XdpError::Io(cmd.into(), e))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).to_string())
    } else {
        Err(XdpError::Netns(format!(
            "`{cmd} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// The namespaces that exist now (`ip netns list`).
pub fn namespaces() -> Result<Vec<String>, XdpError> {
    Ok(run_out("ip", &["netns", "list"])?
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect())
}

/// One member of a [`Star`].
#[derive(Debug, Clone)]
pub struct Member {
    pub namespace: String,
    /// The member's address (on its `eth0`).
    pub ip: Ipv4Addr,
    /// The aggregator's address on this member's link.
    pub gateway: Ipv4Addr,
    /// The aggregator-side interface of the link (`m<i>`, in the aggregator's namespace).
    pub port: String,
}

/// An aggregator namespace with one veth pair to each member's namespace (ALEPH Fig. 4). Member
/// `i` is `10.9.i.2/24` on its `eth0`; the aggregator is `10.9.i.1/24` on its `m<i>`. Removed on
/// drop; names follow `inabench_fabric::netns`, whose stale-run cleanup also removes these.
#[derive(Debug)]
pub struct Star {
    pub aggregator: String,
    pub members: Vec<Member>,
}

static STAR_NO: AtomicU32 = AtomicU32::new(0);

impl Star {
    pub fn create(members: usize) -> Result<Star, XdpError> {
        if !inabench_fabric::netns::is_root() {
            return Err(XdpError::Netns("network namespaces need root".into()));
        }
        if members == 0 || members > 64 {
            return Err(XdpError::Netns(format!("{members} members (1..=64)")));
        }
        inabench_fabric::netns::remove_stale();
        let tag = format!(
            "inb{:x}xs{:x}",
            std::process::id(),
            STAR_NO.fetch_add(1, Ordering::SeqCst)
        );
        let mut star = Star {
            aggregator: format!("{tag}-a"),
            members: Vec::new(),
        };
        let run = |args: &[&str]| run_out(args[0], &args[1..]).map(|_| ());
        run(&["ip", "netns", "add", &star.aggregator])?;
        let agg = star.aggregator.clone();
        run(&["ip", "-n", &agg, "link", "set", "lo", "up"])?;
        for i in 0..members {
            let ns = format!("{tag}-{i}");
            run(&["ip", "netns", "add", &ns])?;
            let port = format!("m{i}");
            star.members.push(Member {
                namespace: ns.clone(),
                ip: Ipv4Addr::new(10, 9, i as u8, 2),
                gateway: Ipv4Addr::new(10, 9, i as u8, 1),
                port: port.clone(),
            });
            run(&[
                "ip", "-n", &agg, "link", "add", &port, "type", "veth", "peer", "name", "eth0",
                "netns", &ns,
            ])?;
            let m = &star.members[i];
            run(&[
                "ip",
                "-n",
                &agg,
                "addr",
                "add",
                &format!("{}/24", m.gateway),
                "dev",
                &port,
            ])?;
            run(&["ip", "-n", &agg, "link", "set", &port, "up"])?;
            run(&[
                "ip",
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{}/24", m.ip),
                "dev",
                "eth0",
            ])?;
            run(&["ip", "-n", &ns, "link", "set", "eth0", "up"])?;
            run(&["ip", "-n", &ns, "link", "set", "lo", "up"])?;
        }
        star.ready(std::time::Duration::from_secs(10))?;
        Ok(star)
    }

    /// Wait until both ends of every link are operationally up
    /// ([`inabench_fabric::netns::wait_up`]: before, one member of a 0.5 s UDP measurement on a
    /// loaded host lost every datagram, its first ARP request dropped and the retry a second
    /// later; CI of stop 50, aleph's testbed_paths: loss 50%), then give each end its peer's
    /// address as a permanent neighbour, which keeps ARP out of the measurements.
    fn ready(&self, within: std::time::Duration) -> Result<(), XdpError> {
        for m in &self.members {
            for (ns, dev) in [(&self.aggregator, m.port.as_str()), (&m.namespace, "eth0")] {
                inabench_fabric::netns::wait_up(Some(ns), dev, within)
                    .map_err(|e| XdpError::Netns(e.to_string()))?;
            }
            let hex = inabench_fabric::addresses::fmt_mac;
            let (port_mac, member_mac) = (
                hex(mac(Some(&self.aggregator), &m.port)?),
                hex(mac(Some(&m.namespace), "eth0")?),
            );
            for (ns, ip, lladdr, dev) in [
                (&self.aggregator, m.ip, &member_mac, m.port.as_str()),
                (&m.namespace, m.gateway, &port_mac, "eth0"),
            ] {
                run_out(
                    "ip",
                    &[
                        "-n",
                        ns,
                        "neigh",
                        "replace",
                        &ip.to_string(),
                        "lladdr",
                        lladdr,
                        "dev",
                        dev,
                        "nud",
                        "permanent",
                    ],
                )?;
            }
        }
        Ok(())
    }

    /// Every namespace of the star.
    pub fn namespaces(&self) -> Vec<String> {
        let mut v = vec![self.aggregator.clone()];
        v.extend(self.members.iter().map(|m| m.namespace.clone()));
        v
    }
}

impl Drop for Star {
    fn drop(&mut self) {
        for ns in self.namespaces() {
            let _ = run_out("ip", &["netns", "del", &ns]);
        }
    }
}

/// Set a UDP socket's receive and/or send buffer to `bytes` with the FORCE options (root may
/// exceed `rmem_max`/`wmem_max`): a round's packets arrive in bursts. Best effort: a refusal
/// leaves the default, which costs packets, not correctness.
pub fn force_buffers(s: &std::net::UdpSocket, rcv: Option<i32>, snd: Option<i32>) {
    use std::os::fd::AsRawFd;
    for (opt, bytes) in [(libc::SO_RCVBUFFORCE, rcv), (libc::SO_SNDBUFFORCE, snd)] {
        let Some(bytes) = bytes else { continue };
        let v: libc::c_int = bytes;
        // SAFETY: a valid socket and an int option value of the stated size
        unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
    }
}
