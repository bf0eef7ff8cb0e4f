//! The verbs binding between two hosts with RDMA devices (#36 item 4): RC RDMA WRITE with
//! immediate, SEND/RECV, UC WRITE with immediate, and a WRITE with a wrong rkey, each on its own
//! QP pair whose QPN, PSN, GID, address and rkey are exchanged over a plain TCP connection.
//! Every byte that arrives is compared with what was sent, every completion's status, opcode,
//! length and immediate with what the verbs specification says it must be.
//!
//! ```text
//! verbs_pair server <port>          # one host (listens)
//! verbs_pair client <ip>:<port>     # the other
//! options: --device <name> (default: the first), --gid-index <n> (default: the port's first
//!          IPv4-mapped GID, RoCEv2 on rxe)
//! ```
//! The Soft-RoCE rig (tools/rxe-rig/rig.sh) runs it between two qemu guests
//! (drivers/devices/tests/rxe_rig.rs); on a testbed it runs the same between two RoCE NICs.
//! Prints the doctor's verbs probe, one line per check and `verbs_pair: all 4 checks passed`;
//! exits 1 on the first failure.

use inabench_devices::verbs::{Completion, Connection, PSN_MASK, QpInfo, QpPlan, Transport, Verbs};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

// ibv_wc_opcode and ibv_wc_status values of verbs.h
const WC_SEND: u32 = 0;
const WC_RDMA_WRITE: u32 = 1;
const WC_RECV: u32 = 128;
const WC_RECV_RDMA_WITH_IMM: u32 = 129;
const WC_SUCCESS: u32 = 0;
const WC_REM_ACCESS_ERR: u32 = 10;

/// Path MTU of the plans: what rxe offers on a 1500-byte Ethernet MTU (and the suite's software
/// transport's default).
const MTU: u32 = 1024;
/// A retransmission timeout for slow (emulated) hosts: 134 ms after encoding.
const RTO_NS: u64 = 100_000_000;
/// The client's (the writer's) first PSN: 4 below the 24-bit wrap, so every check's PSNs wrap.
const CLIENT_PSN: u32 = PSN_MASK - 3;

type R<T> = Result<T, String>;

#[derive(Clone, Copy, PartialEq)]
enum Role {
    Server,
    Client,
}

struct Args {
    role: Role,
    addr: String,
    device: Option<String>,
    gid_index: Option<u8>,
}

fn args() -> R<Args> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let usage =
        "usage: verbs_pair server <port> | client <ip>:<port> [--device NAME] [--gid-index N]";
    let role = match a.first().map(String::as_str) {
        Some("server") => Role::Server,
        Some("client") => Role::Client,
        _ => return Err(usage.into()),
    };
    let addr = a.get(1).ok_or(usage)?.clone();
    let mut out = Args {
        role,
        addr,
        device: None,
        gid_index: None,
    };
    let mut i = 2;
    while i < a.len() {
        let v = a.get(i + 1).ok_or(usage)?;
        match a[i].as_str() {
            "--device" => out.device = Some(v.clone()),
            "--gid-index" => {
                out.gid_index = Some(v.parse().map_err(|_| format!("bad --gid-index {v}"))?)
            }
            _ => return Err(usage.into()),
        }
        i += 2;
    }
    Ok(out)
}

/// The byte at `i` of message `m` of check `check`: every message and check differs.
fn pattern(check: u8, m: usize, i: usize) -> u8 {
    ((m * 131 + i * 7 + usize::from(check) * 29 + 3) % 251) as u8
}

/// One side of the TCP control channel.
struct Ctl(TcpStream);

impl Ctl {
    fn exchange(&mut self, mine: &QpInfo) -> R<QpInfo> {
        self.0
            .write_all(&mine.to_bytes())
            .map_err(|e| format!("sending QP info: {e}"))?;
        let mut b = [0u8; inabench_devices::verbs::QP_INFO_LEN];
        self.0
            .read_exact(&mut b)
            .map_err(|e| format!("receiving QP info: {e}"))?;
        QpInfo::from_bytes(&b).map_err(|e| e.to_string())
    }

    /// Both sides reach `tag`.
    fn sync(&mut self, tag: u8) -> R<()> {
        self.0
            .write_all(&[tag])
            .map_err(|e| format!("sync {}: {e}", tag as char))?;
        let mut b = [0u8; 1];
        self.0
            .read_exact(&mut b)
            .map_err(|e| format!("sync {}: {e}", tag as char))?;
        if b[0] != tag {
            return Err(format!(
                "sync: expected {}, the peer sent {}",
                tag as char, b[0] as char
            ));
        }
        Ok(())
    }
}

/// The first IPv4-mapped GID (::ffff:a.b.c.d) of the device's port 1, else index 0.
fn pick_gid(v: &Verbs, device: Option<&str>) -> R<u8> {
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

/// Poll until `n` completions arrived (or 30 s passed).
fn wait(c: &Connection, n: usize, what: &str) -> R<Vec<Completion>> {
    let t = Instant::now();
    let mut got = Vec::new();
    while got.len() < n {
        got.extend(c.poll(n - got.len()).map_err(|e| e.to_string())?);
        if t.elapsed() > Duration::from_secs(30) {
            return Err(format!(
                "{what}: {} of {n} completions after 30 s: {got:?}",
                got.len()
            ));
        }
        if got.len() < n {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    Ok(got)
}

/// A receive completion: everything is defined (verbs.h: `byte_len` and `imm_data` for receives).
fn expect_recv(c: &Completion, wr_id: u64, opcode: u32, len: u32, imm: Option<u32>) -> R<()> {
    let want = Completion {
        wr_id,
        status: WC_SUCCESS,
        opcode,
        byte_len: len,
        imm,
    };
    if *c != want {
        return Err(format!("receive completion {c:?}, expected {want:?}"));
    }
    Ok(())
}

/// A send-side completion: its wr_id, status and (on success) opcode are defined; its byte_len
/// and immediate are not (rxe fills them, a ConnectX need not).
fn expect_send(c: &Completion, wr_id: u64, status: u32, opcode: Option<u32>) -> R<()> {
    if c.wr_id != wr_id || c.status != status || opcode.is_some_and(|o| o != c.opcode) {
        return Err(format!(
            "send completion {c:?}, expected wr_id {wr_id}, status {status}{}",
            opcode.map_or(String::new(), |o| format!(", opcode {o}"))
        ));
    }
    Ok(())
}

fn hex_gid(g: &inabench_devices::verbs::Gid) -> String {
    g.0.chunks(2)
        .map(|p| format!("{:02x}{:02x}", p[0], p[1]))
        .collect::<Vec<_>>()
        .join(":")
}

struct Side<'a> {
    v: &'a Verbs,
    role: Role,
    ctl: Ctl,
    device: Option<String>,
    gid_index: u8,
}

impl<'a> Side<'a> {
    /// A QP for `plan`, connected to the peer's; the sender starts at a PSN near the 24-bit wrap.
    fn pair(&mut self, mut plan: QpPlan) -> R<(Connection<'a>, QpInfo)> {
        plan.sq_psn = match self.role {
            Role::Client => CLIENT_PSN,
            Role::Server => 0x00a5_0000,
        };
        let v: &'a Verbs = self.v;
        let mut c = v
            .connect(self.device.as_deref(), 1, self.gid_index, &plan)
            .map_err(|e| e.to_string())?;
        let remote = self.ctl.exchange(&c.info())?;
        c.connect_to(&remote).map_err(|e| e.to_string())?;
        Ok((c, remote))
    }

    /// Check 1 (RC) and 3 (UC): the client WRITEs `messages` messages with immediate into the
    /// server's region, at most `window` in flight; the server takes one receive completion per
    /// message and compares its whole region.
    fn write_imm(
        &mut self,
        check: u8,
        transport: Transport,
        messages: u32,
        window: u32,
    ) -> R<String> {
        let mut plan = QpPlan::rc(MTU, 5, window, messages, RTO_NS);
        plan.transport = transport;
        let bytes = plan.message_bytes();
        let role = self.role;
        let (mut c, remote) = self.pair(plan.clone())?;
        let name = if transport == Transport::Rc {
            "RC"
        } else {
            "UC"
        };
        match role {
            Role::Server => {
                // every receive posted before the writes start: UC has no RNR retry
                for m in 0..messages.min(window + 1) {
                    c.post_recv(u64::from(m), 0, 0).map_err(|e| e.to_string())?;
                }
                self.ctl.sync(b'R')?;
                let mut posted = messages.min(window + 1);
                for m in 0..messages {
                    let got = wait(&c, 1, "receive completions")?;
                    expect_recv(
                        &got[0],
                        u64::from(m),
                        WC_RECV_RDMA_WITH_IMM,
                        bytes,
                        Some(0xab00_0000 | m),
                    )?;
                    if posted < messages {
                        c.post_recv(u64::from(posted), 0, 0)
                            .map_err(|e| e.to_string())?;
                        posted += 1;
                    }
                }
                for (m, chunk) in c.buf.chunks(bytes as usize).enumerate() {
                    if let Some(i) = (0..chunk.len()).find(|&i| chunk[i] != pattern(check, m, i)) {
                        return Err(format!(
                            "{name} WRITE: message {m} byte {i} is {}, sent {}",
                            chunk[i],
                            pattern(check, m, i)
                        ));
                    }
                }
                self.ctl.sync(b'D')?;
            }
            Role::Client => {
                for (m, chunk) in c.buf.chunks_mut(bytes as usize).enumerate() {
                    for (i, b) in chunk.iter_mut().enumerate() {
                        *b = pattern(check, m, i);
                    }
                }
                self.ctl.sync(b'R')?;
                let writes = plan.writes();
                let mut next = 0usize;
                let mut done = 0usize;
                while done < writes.len() {
                    while next < writes.len() && next - done < window as usize {
                        let imm = 0xab00_0000 | next as u32;
                        c.post_write(next as u64, &writes[next], &remote, Some(imm))
                            .map_err(|e| e.to_string())?;
                        next += 1;
                    }
                    let got = wait(&c, 1, "send completions")?;
                    expect_send(&got[0], done as u64, WC_SUCCESS, Some(WC_RDMA_WRITE))?;
                    done += 1;
                }
                self.ctl.sync(b'D')?;
            }
        }
        Ok(format!(
            "{name} WRITE with immediate: {messages} messages x {bytes} B ({} packets each at MTU {MTU}), at most {window} in flight, sender PSN from {:#08x} (wraps): data exact, completions exact",
            bytes.div_ceil(MTU),
            CLIENT_PSN
        ))
    }

    /// Check 2: SENDs of 1 to 5120 bytes (1 to 5 packets) into posted receives.
    fn send_recv(&mut self) -> R<String> {
        let lens = [1u32, 1000, 1024, 3000, 5120];
        let plan = QpPlan::rc(MTU, 5, lens.len() as u32, lens.len() as u32, RTO_NS);
        let slot = plan.message_bytes();
        let role = self.role;
        let (c, _) = self.pair(plan)?;
        match role {
            Role::Server => {
                for k in 0..lens.len() {
                    c.post_recv(k as u64, k as u64 * u64::from(slot), slot)
                        .map_err(|e| e.to_string())?;
                }
                self.ctl.sync(b'R')?;
                let got = wait(&c, lens.len(), "receive completions")?;
                for (k, (w, len)) in got.iter().zip(lens).enumerate() {
                    expect_recv(w, k as u64, WC_RECV, len, None)?;
                    let s = &c.buf[k * slot as usize..(k + 1) * slot as usize];
                    for (i, b) in s.iter().enumerate() {
                        let want = if (i as u32) < len {
                            pattern(2, k, i)
                        } else {
                            0
                        };
                        if *b != want {
                            return Err(format!(
                                "SEND {k} ({len} B): byte {i} is {b}, expected {want}"
                            ));
                        }
                    }
                }
                self.ctl.sync(b'D')?;
            }
            Role::Client => {
                let mut c = c;
                for (k, chunk) in c.buf.chunks_mut(slot as usize).enumerate() {
                    for (i, b) in chunk.iter_mut().enumerate() {
                        *b = pattern(2, k, i);
                    }
                }
                self.ctl.sync(b'R')?;
                for (k, len) in lens.iter().enumerate() {
                    c.post_send(k as u64, k as u64 * u64::from(slot), *len)
                        .map_err(|e| e.to_string())?;
                }
                let got = wait(&c, lens.len(), "send completions")?;
                for (k, w) in got.iter().enumerate() {
                    expect_send(w, k as u64, WC_SUCCESS, Some(WC_SEND))?;
                }
                self.ctl.sync(b'D')?;
            }
        }
        Ok(format!(
            "RC SEND/RECV: {} sends of {lens:?} B into {slot}-byte receives: lengths, data and untouched tails exact",
            lens.len()
        ))
    }

    /// Check 4: a WRITE with a wrong rkey is refused by the responder: the requester's completion
    /// says IBV_WC_REM_ACCESS_ERR, and the server's region stays untouched.
    fn wrong_rkey(&mut self) -> R<String> {
        let plan = QpPlan::rc(MTU, 1, 1, 1, RTO_NS);
        let role = self.role;
        let (mut c, remote) = self.pair(plan.clone())?;
        match role {
            Role::Server => {
                self.ctl.sync(b'R')?;
                self.ctl.sync(b'D')?;
                if let Some(i) = c.buf.iter().position(|b| *b != 0) {
                    return Err(format!("a refused WRITE changed byte {i} of the region"));
                }
            }
            Role::Client => {
                c.buf.fill(0x5a);
                self.ctl.sync(b'R')?;
                let bad = QpInfo {
                    rkey: remote.rkey ^ 0x0000_1000,
                    ..remote
                };
                c.post_write(7, &plan.writes()[0], &bad, None)
                    .map_err(|e| e.to_string())?;
                let got = wait(&c, 1, "the refused write's completion")?;
                expect_send(&got[0], 7, WC_REM_ACCESS_ERR, None)?;
                self.ctl.sync(b'D')?;
            }
        }
        Ok("RC WRITE with a wrong rkey: refused by the responder (IBV_WC_REM_ACCESS_ERR), region untouched".into())
    }
}

fn main() {
    if let Err(e) = run() {
        eprintln!("verbs_pair: FAILED: {e}");
        std::process::exit(1);
    }
}

fn run() -> R<()> {
    let a = args()?;
    // what `inabench doctor` says about this host's RDMA devices (provider included)
    println!("probe: {}", inabench_devices::verbs::probe().detail);
    let v = Verbs::load().map_err(|e| e.to_string())?;
    let gid_index = match a.gid_index {
        Some(i) => i,
        None => pick_gid(&v, a.device.as_deref())?,
    };
    let stream = match a.role {
        Role::Server => {
            let l = TcpListener::bind(format!("0.0.0.0:{}", a.addr))
                .map_err(|e| format!("listening on port {}: {e}", a.addr))?;
            l.accept().map_err(|e| format!("accept: {e}"))?.0
        }
        Role::Client => {
            let t = Instant::now();
            loop {
                match TcpStream::connect(&a.addr) {
                    Ok(s) => break s,
                    Err(e) if t.elapsed() > Duration::from_secs(120) => {
                        return Err(format!("connecting to {}: {e}", a.addr));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(200)),
                }
            }
        }
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .map_err(|e| e.to_string())?;
    let mut side = Side {
        v: &v,
        role: a.role,
        ctl: Ctl(stream),
        device: a.device.clone(),
        gid_index,
    };
    {
        let (c, _) = side.pair(QpPlan::rc(MTU, 1, 1, 1, RTO_NS))?;
        let me = c.info();
        println!(
            "verbs_pair: {} on {} GID index {gid_index} ({})",
            if a.role == Role::Server {
                "server"
            } else {
                "client"
            },
            a.device.as_deref().unwrap_or("the first device"),
            hex_gid(&me.gid)
        );
    }
    let checks = [
        side.write_imm(1, Transport::Rc, 8, 2)?,
        side.send_recv()?,
        side.write_imm(3, Transport::Uc, 4, 3)?,
        side.wrong_rkey()?,
    ];
    for (i, c) in checks.iter().enumerate() {
        println!("check {}: {c}", i + 1);
    }
    println!("verbs_pair: all {} checks passed", checks.len());
    Ok(())
}
