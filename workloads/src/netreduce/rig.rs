//! NetReduce's Table 6 rows on the Soft-RoCE rig (#36): `reproduce netreduce-table6 --testbed
//! experiments/testbeds/rxe-rig.yaml` runs this workload in place of `netreduce.table6`'s
//! software classes (the harness swaps it in for the experiments the testbed's `rig:` names).
//!
//! One point boots the rig once (tools/rxe-rig/rig.sh, `--relay`): `workers` qemu TCG guests, each
//! a NetReduce worker on plain RC QPs of its kernel's RoCE stack (rdma_rxe; the devices crate's
//! `netreduce_worker` example on the verbs binding), and NetReduce's accelerator
//! (`inabench_ina::fpga::Accelerator`, the `netreduce_accel` example on the raw fabric's AF_PACKET
//! sockets) on this host between the guests' data taps. The guests run every repetition of the
//! point (warm-up ones first) as one stream of messages on the same QPs: repetition r is the
//! messages r*k..(r+1)*k-1 of it, k = the point's `elements` in whole NetReduce messages (MsgLen x
//! mtu bytes less the 16-byte INA header, int32 values), so one boot serves them all; the later
//! calls for the point take their repetition's numbers from that run.
//!
//! What a row holds, per repetition (each the mean over the workers, `rtt` the median):
//! - `goodput`, `algbw`: the repetition's gradient bits (`elements` x 32) over its time as the
//!   worker's guest clocks it (from the previous repetition's last aggregate in, or from the
//!   start barrier, to this one's last aggregate in);
//! - `throughput`: the bytes the worker's link carried to the accelerator over the whole stream
//!   (every RoCEv2 frame, resends and ACKs too, Ethernet header to ICRC as the host's tap sees
//!   it: a tap has no FCS, preamble or gap), per gradient byte, times the repetition's goodput;
//! - `rtt`: per message, from its first packet coming in on the worker's link to its aggregate's
//!   first packet going out on that link, as the host's accelerator process clocks them (the
//!   spec's definition, at the link's host end);
//! - `elements_per_s`; `exact`: 1 when every guest found every value of every message the exact
//!   wrapping int32 sum of all workers' values (0, and a wrong result, when one did not).
//!
//! The numbers are emulated-CPU numbers (TCG): no line rate, no NIC, no NIC timestamps. The device,
//! provider and the guests' kernel, as the guests report them, go to the run's manifest.

use inabench_core::Fidelity;
use inabench_core::LogLevel;
use inabench_core::{PointCtx, Workload, WorkloadError};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

/// The INA header in front of each message's values.
const INA_HEADER: usize = 16;

/// The memory per QP a guest registers for the stream's messages (sending and receiving QP
/// alike), at most.
const SLOT_BYTES: usize = 64 << 20;

/// The systems the rig runs, each with its programs: NetReduce's accelerator between the
/// guests' unmodified RC queue pairs, and SwitchML-RDMA's switch between their plain UC queue
/// pairs (ATP and SwitchML have no rig program: their released clients are DPDK / raw-Ethernet
/// programs for a host, not verbs on a RoCE stack; they are `not built` on the rig).
const RIG_SYSTEMS: &[&str] = &["netreduce", "switchml_rdma"];

/// SwitchML-RDMA's payload on the rig: 1024 B a packet, the release's (RDMAExampleClient sends
/// 1 KB packets). A UC QP cuts a WRITE at the path MTU, which verbs allows only as 256, 512,
/// 1024, 2048 or 4096 B, so the spec's simulated 768 B (four chained 192-byte pipelines) cannot
/// be a guest's packet; the testbed file says so. Packets a message and the pool are the
/// simulated system's defaults (`smlr_msg_packets` 4, `pool` 128 slots a set).
pub const SMLR_RIG_PAYLOAD: usize = 1024;
const SMLR_MSG_PACKETS: usize = 4;
const SMLR_POOL: usize = 128;

/// Which of the rig's systems a point runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RigSystem {
    NetReduce,
    SwitchMlRdma,
}

impl RigSystem {
    /// The rig's systems in `RIG_SYSTEMS`'s order: the one list the workload's `systems()` and a
    /// point's system both read (no match on a system's name outside `inabench_ina::SYSTEMS`).
    const ALL: [RigSystem; 2] = [RigSystem::NetReduce, RigSystem::SwitchMlRdma];
    const _SAME_LENGTH: () = assert!(RIG_SYSTEMS.len() == RigSystem::ALL.len());

    fn of(name: &str) -> Option<RigSystem> {
        RIG_SYSTEMS
            .iter()
            .position(|n| *n == name)
            .map(|i| RigSystem::ALL[i])
    }

    /// The guests' program.
    fn worker(self) -> &'static str {
        match self {
            RigSystem::NetReduce => "netreduce_worker",
            RigSystem::SwitchMlRdma => "switchml_rdma_worker",
        }
    }

    /// The host's program between the guests' taps.
    fn relay(self) -> &'static str {
        match self {
            RigSystem::NetReduce => "netreduce_accel",
            RigSystem::SwitchMlRdma => "switchml_rdma_switch",
        }
    }

    /// The relay's per-link line starts with this, then the worker's index and `:`.
    fn link_line(self) -> &'static str {
        match self {
            RigSystem::NetReduce => "netreduce_accel: worker ",
            RigSystem::SwitchMlRdma => "switchml_rdma_switch: link of worker ",
        }
    }

    /// ... and its round trips follow this.
    fn rtt_key(self) -> &'static str {
        match self {
            RigSystem::NetReduce => "rtt_ns by MsgID: ",
            RigSystem::SwitchMlRdma => "rtt_ns by message: ",
        }
    }

    /// The bytes in front of a message's values (NetReduce's INA header).
    fn header(self) -> usize {
        match self {
            RigSystem::NetReduce => INA_HEADER,
            RigSystem::SwitchMlRdma => 0,
        }
    }
}

/// Where the rig and its programs are.
#[derive(Debug, Clone)]
pub struct RigConfig {
    /// tools/rxe-rig/rig.sh
    pub script: PathBuf,
    /// The folder with `netreduce_worker`, `netreduce_accel`, `switchml_rdma_worker` and
    /// `switchml_rdma_switch`.
    pub programs: PathBuf,
    /// The guests' and the switch's data addresses as the testbed file states them
    /// ([`address_plan`]); None: the testbed states none (the rig's own numbering stands).
    pub addresses: Option<AddressPlan>,
}

pub use inabench_fabric::addresses::AddressPlan;
use inabench_fabric::addresses::{AddressError, HostAddress, fmt_mac, ipv4_gid};

/// SwitchML-RDMA's switch's own address on the guests' data network when the testbed gives
/// none (the `switchml_rdma_switch` example's default).
const SWITCH_DEFAULT: ([u8; 4], [u8; 6]) = ([10, 77, 0, 254], [0x52, 0x54, 0, 0x77, 0, 0xfe]);

/// The address plan a testbed file states (`hosts[].data`): its workers' addresses in the
/// file's order (worker i the i-th host with role `worker` that gives one) and its switch
/// host's; None when no worker gives one (the systems keep their synthetic plan). A RoCE host
/// without a `gid` has its IPv4-mapped one (the reader already asks a RoCE NIC's host for one).
pub fn address_plan(
    tb: &inabench_core::testbed::Testbed,
) -> Result<Option<AddressPlan>, AddressError> {
    let conv = |a: inabench_core::testbed::HostAddress| HostAddress {
        interface: a.interface,
        mac: a.mac,
        ipv4: a.ipv4,
        gid: a.gid.unwrap_or_else(|| ipv4_gid(a.ipv4)),
    };
    let workers: Vec<HostAddress> = tb.data_addresses("worker").into_iter().map(conv).collect();
    if workers.is_empty() {
        return Ok(None);
    }
    let switch = tb.data_addresses("switch").into_iter().next().map(conv);
    let servers = tb.data_addresses("ps").into_iter().map(conv).collect();
    AddressPlan::new(workers, switch).map(|p| Some(p.with_servers(servers)))
}

/// The `--worker A.B.C.D@MAC` arguments that give the `netreduce_accel` example the plan's
/// first `workers` workers, in order (the accelerator finds its workers by them,
/// `Accelerator::with_addresses`); refused where the plan names fewer.
pub fn accel_worker_args(plan: &AddressPlan, workers: usize) -> Result<String, AddressError> {
    plan.covers(workers)?;
    (0..workers)
        .map(|i| {
            plan.worker(i)
                .map(|h| format!(" --worker {}", inabench_fabric::addresses::fmt_ip_mac(&h)))
                .ok_or(AddressError::TooFew {
                    have: i,
                    need: workers,
                })
        })
        .collect()
}

/// The manifest's line for a testbed's address plan.
pub fn describe_plan(a: &AddressPlan) -> String {
    let one = |h: &HostAddress| {
        format!(
            "{}{} {} gid {}",
            h.interface
                .as_deref()
                .map(|i| format!("{i} "))
                .unwrap_or_default(),
            fmt_mac(h.mac),
            std::net::Ipv4Addr::from(h.ipv4),
            std::net::Ipv6Addr::from(h.gid)
        )
    };
    let workers: Vec<String> = (0..a.len().unwrap_or(0))
        .filter_map(|i| a.worker(i).map(|h| format!("worker {i} {}", one(&h))))
        .collect();
    format!(
        "data addresses from the testbed file (the guests checked against them, SwitchML-RDMA's switch at the switch host's): {}{}",
        workers.join("; "),
        a.switch
            .as_ref()
            .map(|s| format!("; switch {}", one(s)))
            .unwrap_or_default()
    )
}

/// Why a rig boot's output is refused: a guest not where the testbed file says, or a guest or the
/// host's program that did not say what a finished, exact run says. Each reads as the sentence
/// the run's error shows.
#[derive(Debug, thiserror::Error)]
pub enum RigError {
    /// The testbed's plan has too few addresses for the point's workers.
    #[error("the testbed's data addresses: {0}")]
    Addresses(#[from] AddressError),
    /// A guest reported another data NIC or address than the plan's: `on` is the guest's
    /// `NIC IP`, `want` the file's `NIC IP (MAC)`.
    #[error(
        "guest {guest} is on {on}, the testbed file says {want}: the testbed's data addresses must be the rig's (tools/rxe-rig gives guest i 10.77.0.<i+1> on its virtio NIC)"
    )]
    Misplaced {
        guest: usize,
        on: String,
        want: String,
    },
    #[error("no output from guest {0}")]
    NoGuestOutput(usize),
    #[error("no output from the host's program")]
    NoHostOutput,
    /// A guest's worker exited non-zero: its first lines.
    #[error("guest {guest} did not finish: {lines}")]
    Unfinished { guest: usize, lines: String },
    #[error("guest {guest} did not report `{want}`")]
    NotExact { guest: usize, want: String },
    #[error("guest {guest}: no arrival time for {what}")]
    NoArrival { guest: usize, what: String },
    #[error("{relay} reported no bytes for worker {worker}'s link")]
    NoLinkBytes { relay: &'static str, worker: usize },
    #[error("guest {guest}: repetition {rep} took {secs} s by its clock")]
    BadClock { guest: usize, rep: usize, secs: f64 },
}

/// That the guests are where the testbed says: each guest's own report of its data NIC and
/// address (`guest i: data nic eth0 10.77.0.1`, from tools/rxe-rig/guest.sh) against the plan's
/// worker i. A guest that did not report is not judged here (its run fails on its own).
pub fn check_guest_addresses(
    stdout: &str,
    workers: usize,
    plan: &AddressPlan,
) -> Result<(), RigError> {
    plan.covers(workers)?;
    for g in 0..workers {
        let head = format!("guest {g}: data nic ");
        let Some(line) = stdout
            .lines()
            .find_map(|l| l.split_once(&head).map(|(_, r)| r))
        else {
            continue;
        };
        let mut w = line.split([' ', ',']).filter(|x| !x.is_empty());
        let (nic, ip) = (w.next().unwrap_or(""), w.next().unwrap_or(""));
        let Some(want) = plan.worker(g) else { continue };
        let want_ip = std::net::Ipv4Addr::from(want.ipv4).to_string();
        let nic_ok = want.interface.as_deref().is_none_or(|i| i == nic);
        if !nic_ok || ip != want_ip {
            return Err(RigError::Misplaced {
                guest: g,
                on: format!("{nic} {ip}"),
                want: format!(
                    "{} {want_ip} ({})",
                    want.interface.as_deref().unwrap_or("(any interface)"),
                    fmt_mac(want.mac)
                ),
            });
        }
    }
    Ok(())
}

/// `netreduce.table6` on the rig (the id of the workload it stands in for).
pub struct RigTable6 {
    cfg: RigConfig,
    /// What the rig's guests said about their device, for the run's manifest.
    facts: Arc<Mutex<Vec<String>>>,
    /// Each booted point's repetitions, by (run, point), until the last is taken.
    runs: Mutex<HashMap<(String, String), Vec<Rep>>>,
}

/// One repetition's numbers.
#[derive(Debug, Clone, PartialEq)]
pub struct Rep {
    pub goodput_bps: f64,
    pub throughput_bps: f64,
    pub rtt_ns: f64,
    pub elements_per_s: f64,
}

/// What one rig boot gave: the repetitions, or a wrong sum with the guest's words.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Exact(Vec<Rep>),
    Wrong(String),
}

impl RigTable6 {
    pub fn new(cfg: RigConfig, facts: Arc<Mutex<Vec<String>>>) -> RigTable6 {
        RigTable6 {
            cfg,
            facts,
            runs: Mutex::new(HashMap::new()),
        }
    }

    /// SwitchML-RDMA's switch's IPv4 and MAC address: the testbed's switch host's, else the
    /// example's default.
    fn switch_address(&self) -> ([u8; 4], [u8; 6]) {
        self.cfg
            .addresses
            .as_ref()
            .and_then(|a| a.switch.as_ref())
            .map_or(SWITCH_DEFAULT, |s| (s.ipv4, s.mac))
    }

    fn boot(&self, workers: usize, p: &Layout, reps: usize) -> Result<String, WorkloadError> {
        let share = std::env::temp_dir().join(format!(
            "inabench-rig-share-{}-{}-{}",
            std::process::id(),
            p.system.worker(),
            p.messages(reps)
        ));
        std::fs::create_dir_all(&share)?;
        let worker = self.cfg.programs.join(p.system.worker());
        let accel = self.cfg.programs.join(p.system.relay());
        let copied = std::fs::copy(&worker, share.join(p.system.worker()));
        if let Err(e) = copied {
            let _ = std::fs::remove_dir_all(&share);
            return Err(WorkloadError::Invalid(format!(
                "the rig's worker program {}: {e} (build it with `cargo test --release --workspace --no-run`)",
                worker.display()
            )));
        }
        let (relay, guest) = match p.system {
            // the accelerator finds its workers at the testbed's addresses when it states them
            // (else by the synthetic plan's 10.x.y.<i+1>, which reads the guests the same way)
            RigSystem::NetReduce => (
                format!(
                    "exec {} $RIG_TAPS --msg-packets {} --window {} --mtu {}{}",
                    shell_word(&accel),
                    p.msg_packets,
                    p.window,
                    p.mtu,
                    match &self.cfg.addresses {
                        Some(a) => accel_worker_args(a, workers).map_err(|e| {
                            let _ = std::fs::remove_dir_all(&share);
                            WorkloadError::Invalid(RigError::Addresses(e).to_string())
                        })?,
                        None => String::new(),
                    }
                ),
                format!(
                    "exec /mnt/share/netreduce_worker $RIG_GUEST $RIG_CTL_IPS --messages {} --msg-packets {} --window {} --mtu {} --seed {} --slots {}",
                    p.messages(reps),
                    p.msg_packets,
                    p.window,
                    p.mtu,
                    p.seed,
                    p.slots(reps)
                ),
            ),
            // the switch's address on the guests' data network (the testbed's switch host's, else
            // the example's default), given to the switch and, as a permanent neighbour entry,
            // to the guests: a UC QP's first WRITE must not wait for ARP
            RigSystem::SwitchMlRdma => (
                format!(
                    "exec {} $RIG_TAPS --mtu {} --msg-packets {} --pool {} --switch-ip {} --switch-mac {}",
                    shell_word(&accel),
                    p.mtu,
                    p.msg_packets,
                    SMLR_POOL,
                    std::net::Ipv4Addr::from(self.switch_address().0),
                    fmt_mac(self.switch_address().1)
                ),
                format!(
                    "ip neigh replace {} lladdr {} dev $RIG_NIC nud permanent || exit 1\n\
                     exec /mnt/share/switchml_rdma_worker $RIG_GUEST $RIG_GUESTS --info-file $RIG_OUT/switchml_rdma_qp --wait-dir /mnt/rig --elements {} --mtu {} --msg-packets {} --pool {} --seed {} --timeout-ms 2000 --reps {reps} --switch-ip {}",
                    std::net::Ipv4Addr::from(self.switch_address().0),
                    fmt_mac(self.switch_address().1),
                    p.messages(reps) * p.per_message(),
                    p.mtu,
                    p.msg_packets,
                    SMLR_POOL,
                    p.seed,
                    std::net::Ipv4Addr::from(self.switch_address().0)
                ),
            ),
        };
        let out = Command::new("bash")
            .arg(&self.cfg.script)
            .args(["run", "--guests", &workers.to_string(), "--timeout", "1800"])
            .arg("--share")
            .arg(&share)
            .args(["--relay", &relay, "--", &guest])
            .output();
        let _ = std::fs::remove_dir_all(&share);
        let out = out.map_err(|e| {
            WorkloadError::Invalid(format!(
                "cannot run the rig {}: {e}",
                self.cfg.script.display()
            ))
        })?;
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        if let Some(line) = stderr.lines().find(|l| l.starts_with("rxe-rig: skipped:")) {
            return Err(WorkloadError::Invalid(format!(
                "the rig is unavailable here ({line})"
            )));
        }
        if out.status.success() {
            return Ok(stdout);
        }
        // a guest that found a wrong sum said so: a measured outcome, not a failed run
        if stdout.contains(&format!("{}: FAILED: message", p.system.worker()))
            && stdout.contains("the sum is")
        {
            return Ok(stdout);
        }
        let tail: Vec<&str> = stdout.lines().rev().take(30).collect();
        Err(WorkloadError::Invalid(format!(
            "the rig failed ({}): {}; its output's last lines: {}",
            out.status,
            stderr.lines().last().unwrap_or("").trim(),
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        )))
    }
}

/// `s` quoted for a shell command line.
fn shell_word(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', "'\\''"))
}

/// The point's NetReduce layout.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Layout {
    pub system: RigSystem,
    pub elements: usize,
    pub msg_packets: usize,
    pub window: usize,
    pub mtu: usize,
    pub seed: u64,
}

impl Layout {
    /// int32 values per message.
    pub fn per_message(&self) -> usize {
        (self.msg_packets * self.mtu).saturating_sub(self.system.header()) / 4
    }

    /// Messages per repetition: the elements in whole messages (the last padded).
    pub fn messages_per_rep(&self) -> usize {
        self.elements.div_ceil(self.per_message().max(1))
    }

    /// Messages of the whole stream of `reps` repetitions.
    pub fn messages(&self, reps: usize) -> usize {
        self.messages_per_rep() * reps
    }

    /// The places in each guest QP's memory the stream takes in turn (`netreduce_worker
    /// --slots`): every message its own up to SLOT_BYTES, else as many as fit (a guest has 1 GiB
    /// for its two QPs' memory), never fewer than the window needs.
    pub fn slots(&self, reps: usize) -> usize {
        let fit = SLOT_BYTES / (self.msg_packets * self.mtu).max(1);
        self.messages(reps).min(fit.max(self.window + 1))
    }
}

/// The numbers after `key` on each line of `text` that has it, whitespace-separated, up to the
/// first word that is not a number (`-` kept as NaN).
fn numbers_after(line: &str, key: &str) -> Option<Vec<f64>> {
    let at = line.find(key)? + key.len();
    Some(
        line[at..]
            .split_whitespace()
            .map_while(|w| {
                let w = w.trim_end_matches([',', ';', ')']);
                if w == "-" {
                    Some(f64::NAN)
                } else {
                    w.parse().ok()
                }
            })
            .collect(),
    )
}

/// The part of the rig's output that starts with `== <head>`.
fn part<'a>(stdout: &'a str, head: &str) -> Option<&'a str> {
    stdout
        .split("\n== ")
        .find(|s| s.trim_start_matches("== ").starts_with(head))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Read one rig boot's output: every guest's per-message arrival times and exactness, the
/// accelerator's per-link bytes and round trips; the repetitions' numbers and the device facts.
pub fn parse(
    stdout: &str,
    workers: usize,
    p: &Layout,
    reps: usize,
) -> Result<(Outcome, Vec<String>), RigError> {
    let k = p.messages_per_rep();
    let total = k * reps;
    let mut facts = Vec::new();
    // per worker, when each repetition's last result came in (its clock)
    let mut at: Vec<Vec<f64>> = Vec::new();
    let failed = format!("{}: FAILED: message", p.system.worker());
    for g in 0..workers {
        let head = format!("guest {g}: exit status ");
        let text = part(stdout, &head).ok_or(RigError::NoGuestOutput(g))?;
        if let Some(l) = text
            .lines()
            .find(|l| l.contains(&failed) && l.contains("the sum is"))
        {
            return Ok((Outcome::Wrong(format!("guest {g}: {}", l.trim())), facts));
        }
        if !text.starts_with(&format!("{head}0")) {
            return Err(RigError::Unfinished {
                guest: g,
                lines: text.lines().take(12).collect::<Vec<_>>().join(" | "),
            });
        }
        if g == 0 {
            // the device as the guest's kernel and the verbs binding's probe name it
            for l in text.lines().map(str::trim) {
                if let Some(d) = l.strip_prefix("setup: link rxe0") {
                    facts.push(format!("rig guest 0: rdma link rxe0{d}"));
                } else if let Some(d) = l.strip_prefix("setup: guest 0: ") {
                    facts.push(format!("rig guest 0: {d}"));
                } else if let Some(d) = l.strip_prefix("probe: ") {
                    // the device as the binding found it (what the probe concludes about row
                    // classes is the run's business: these rows are emulated)
                    let d = d.split("; ").next().unwrap_or(d);
                    facts.push(format!("rig guest 0: verbs probe: {d}"));
                }
            }
        }
        let want = format!("all {total} messages exact");
        if !text.contains(&want) {
            return Err(RigError::NotExact { guest: g, want });
        }
        // NetReduce's worker prints every message's arrival (in order: a repetition ends with
        // its last message); SwitchML-RDMA's, whose slot groups finish out of order, prints
        // when each repetition's last message is exact
        let (line, count) = match p.system {
            RigSystem::NetReduce => ("message ", total),
            RigSystem::SwitchMlRdma => ("repetition ", reps),
        };
        let mut t = vec![f64::NAN; count];
        for l in text.lines() {
            let l = l.trim();
            let Some(rest) = l.strip_prefix(line) else {
                continue;
            };
            let m: usize = match rest.split(':').next().and_then(|m| m.parse().ok()) {
                Some(m) => m,
                None => continue,
            };
            if let (Some(s), true) = (numbers_after(l, "in at "), m < count)
                && let Some(v) = s.first()
            {
                t[m] = *v;
            }
        }
        if let Some(m) = t.iter().position(|v| !v.is_finite()) {
            return Err(RigError::NoArrival {
                guest: g,
                what: format!("{line}{m}"),
            });
        }
        at.push(match p.system {
            RigSystem::NetReduce => (0..reps).map(|r| t[(r + 1) * k - 1]).collect(),
            RigSystem::SwitchMlRdma => t,
        });
    }
    let relay = part(stdout, "relay: exit status ").ok_or(RigError::NoHostOutput)?;
    let mut link_bytes = vec![f64::NAN; workers];
    let mut rtts: Vec<Vec<f64>> = vec![Vec::new(); workers];
    for l in relay.lines() {
        let Some(rest) = l.trim().strip_prefix(p.system.link_line()) else {
            continue;
        };
        let Some(w) = rest
            .split(':')
            .next()
            .and_then(|w| w.parse::<usize>().ok())
            .filter(|w| *w < workers)
        else {
            continue;
        };
        if let Some(b) = numbers_after(l, "RoCEv2 frames, ").and_then(|v| v.first().copied()) {
            link_bytes[w] = b;
        }
        rtts[w] = numbers_after(l, p.system.rtt_key()).unwrap_or_default();
    }
    if let Some(w) = link_bytes.iter().position(|b| !b.is_finite()) {
        return Err(RigError::NoLinkBytes {
            relay: p.system.relay(),
            worker: w,
        });
    }
    let gradient_bits = p.elements as f64 * 32.0;
    let mut out = Vec::new();
    for r in 0..reps {
        let (mut good, mut wire, mut eps, mut rtt) = (0.0, 0.0, 0.0, Vec::new());
        for w in 0..workers {
            let end = at[w][r];
            let start = if r == 0 { 0.0 } else { at[w][r - 1] };
            let secs = end - start;
            if secs <= 0.0 {
                return Err(RigError::BadClock {
                    guest: w,
                    rep: r,
                    secs,
                });
            }
            let g = gradient_bits / secs;
            good += g;
            // the link's bytes per gradient byte over the stream, at this repetition's pace
            wire += g * link_bytes[w] / (p.elements as f64 * 4.0 * reps as f64);
            eps += p.elements as f64 / secs;
            rtt.extend(
                rtts[w]
                    .iter()
                    .skip(r * k)
                    .take(k)
                    .copied()
                    .filter(|v| v.is_finite()),
            );
        }
        let n = workers as f64;
        out.push(Rep {
            goodput_bps: good / n,
            throughput_bps: wire / n,
            rtt_ns: median(&mut rtt),
            elements_per_s: eps / n,
        });
    }
    Ok((Outcome::Exact(out), facts))
}

impl Workload for RigTable6 {
    fn id(&self) -> &'static str {
        "netreduce.table6"
    }

    fn fidelities(&self) -> &'static [Fidelity] {
        &[Fidelity::Emulated]
    }

    fn fabric(&self, _: Fidelity) -> &'static str {
        "rdma-rxe"
    }

    fn systems(&self) -> Option<&'static [&'static str]> {
        Some(RIG_SYSTEMS)
    }

    fn run(&self, ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
        let Some(system) = RigSystem::of(ctx.system()) else {
            return Err(WorkloadError::BadParam(format!(
                "the rig runs NetReduce and SwitchML-RDMA only, not `{}`",
                ctx.system()
            )));
        };
        if let Ok(s) = ctx.text("host_stack")
            && s != "paper"
        {
            return Err(WorkloadError::BadParam(format!(
                "host_stack `{s}`: on the rig NetReduce's and SwitchML-RDMA's transport is the guest kernel's RoCE stack, which stands for the paper's RoCE NIC (host_stack paper)"
            )));
        }
        let workers = ctx.positive_count("workers")?;
        if !(2..=8).contains(&workers) {
            return Err(WorkloadError::BadParam(format!(
                "the rig boots 2 to 8 guests, one a worker (workers {workers})"
            )));
        }
        let p = match system {
            RigSystem::NetReduce => Layout {
                system,
                elements: ctx.positive_count("elements")?,
                msg_packets: ctx.positive_count("msg_packets")?,
                window: ctx.positive_count("window")?,
                mtu: ctx.positive_count("mtu")?,
                seed: ctx.seed,
            },
            // the stream as whole messages of 4 x 1024 B; a repetition's last message is
            // padded (its padding counts in throughput, not in goodput)
            RigSystem::SwitchMlRdma => Layout {
                system,
                elements: ctx.positive_count("elements")?,
                msg_packets: SMLR_MSG_PACKETS,
                window: SMLR_POOL / SMLR_MSG_PACKETS,
                mtu: SMLR_RIG_PAYLOAD,
                seed: ctx.seed,
            },
        };
        let reps = (ctx.point.warmup + ctx.point.repetitions) as usize;
        let index = if ctx.warmup {
            ctx.repetition as usize
        } else {
            ctx.point.warmup as usize + ctx.repetition as usize
        };
        let key = (ctx.run_id.to_string(), ctx.point.id.clone());
        let cached = self
            .runs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .cloned();
        let reps_done = match cached {
            Some(r) => r,
            None => {
                ctx.log(
                    LogLevel::Info,
                    format!(
                        "booting the Soft-RoCE rig for {}: {workers} qemu guests, {} messages of {} x {} B ({} repetitions of {} elements)",
                        ctx.system(),
                        p.messages(reps),
                        p.msg_packets,
                        p.mtu,
                        reps,
                        p.elements
                    ),
                );
                if let Some(a) = &self.cfg.addresses {
                    a.covers(workers).map_err(|e| {
                        WorkloadError::BadParam(format!("the testbed's data addresses: {e}"))
                    })?;
                }
                let stdout = self.boot(workers, &p, reps)?;
                if let Some(a) = &self.cfg.addresses {
                    check_guest_addresses(&stdout, workers, a)
                        .map_err(|e| WorkloadError::Invalid(e.to_string()))?;
                }
                let (outcome, facts) = parse(&stdout, workers, &p, reps)
                    .map_err(|e| WorkloadError::Invalid(e.to_string()))?;
                {
                    let mut f = self.facts.lock().unwrap_or_else(|e| e.into_inner());
                    for l in facts {
                        if !f.contains(&l) {
                            f.push(l);
                        }
                    }
                }
                match outcome {
                    Outcome::Wrong(why) => {
                        ctx.record("exact", 0.0);
                        return Err(WorkloadError::WrongResult(why));
                    }
                    Outcome::Exact(r) => {
                        self.runs
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .insert(key.clone(), r.clone());
                        r
                    }
                }
            }
        };
        let r = reps_done
            .get(index)
            .cloned()
            .ok_or_else(|| WorkloadError::Invalid(format!("the rig ran no repetition {index}")))?;
        if index + 1 >= reps {
            self.runs
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&key);
        }
        ctx.record_in_if_declared("throughput", r.throughput_bps, "bps")?;
        ctx.record_in_if_declared("goodput", r.goodput_bps, "bps")?;
        ctx.record_in_if_declared("algbw", r.goodput_bps, "bps")?;
        ctx.record_in_if_declared("elements_per_s", r.elements_per_s, "1/s")?;
        if r.rtt_ns.is_finite() {
            ctx.record_in_if_declared("rtt", r.rtt_ns, "ns")?;
        }
        // the rig runs netreduce-table6 only, whose spec declares `exact`
        ctx.record("exact", 1.0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUT: &str = "rxe-rig: noise\n== relay: exit status 0\nnetreduce_accel: ok\nnetreduce_accel: worker 0: link in 400 RoCEv2 frames, 8000 bytes (Ethernet header to ICRC); rtt_ns by MsgID: 100 200 300 -\nnetreduce_accel: worker 1: link in 400 RoCEv2 frames, 16000 bytes (Ethernet header to ICRC); rtt_ns by MsgID: 500 600 700 800\n== guest 0: exit status 0\n   setup: link rxe0/1 state ACTIVE physical_state LINK_UP netdev ens3\n   setup: guest 0: data nic ens3 10.77.0.1, kernel 6.1.0-50-amd64, up 20 s\nprobe: libibverbs loaded: rxe0 [Soft-RoCE (rdma_rxe), software] (fw 0.0.0): port 1 Ethernet active; no hardware RDMA device (software providers only)\nmessage 0: aggregate exact (4 values), INA header of rank 1, immediate 0, in at 1.000000 s\nmessage 1: aggregate exact (4 values), INA header of rank 1, immediate 1, in at 2.000000 s\nmessage 2: aggregate exact (4 values), INA header of rank 1, immediate 2, in at 3.000000 s\nmessage 3: aggregate exact (4 values), INA header of rank 1, immediate 3, in at 5.000000 s\nnetreduce_worker: rank 0: all 4 messages exact: 16 int32 values\n== guest 1: exit status 0\nmessage 0: aggregate exact (4 values), INA header of rank 0, immediate 0, in at 1.000000 s\nmessage 1: aggregate exact (4 values), INA header of rank 0, immediate 1, in at 2.000000 s\nmessage 2: aggregate exact (4 values), INA header of rank 0, immediate 2, in at 4.000000 s\nmessage 3: aggregate exact (4 values), INA header of rank 0, immediate 3, in at 6.000000 s\nnetreduce_worker: rank 1: all 4 messages exact: 16 int32 values\n";

    /// 2 messages of 4 values a repetition (2 packets of 16 B less the 16-byte header, x2).
    fn layout() -> Layout {
        Layout {
            system: RigSystem::NetReduce,
            elements: 8,
            msg_packets: 2,
            window: 2,
            mtu: 16,
            seed: 1,
        }
    }

    #[test]
    fn a_rig_run_gives_each_repetition_its_messages_times_and_the_links_bytes() {
        let p = layout();
        assert_eq!(
            (p.per_message(), p.messages_per_rep(), p.messages(2)),
            (4, 2, 4)
        );
        assert_eq!(p.slots(2), 4, "every message its own place");
        // Table 6's full profile: 385 messages of 170 x 1024 B, 11 repetitions, take turns in
        // the 385 places of 64 MiB
        let full = Layout {
            system: RigSystem::NetReduce,
            elements: 16_753_660,
            msg_packets: 170,
            window: 2,
            mtu: 1024,
            seed: 1,
        };
        assert_eq!((full.messages(11), full.slots(11)), (4235, 385));
        let (o, facts) = parse(OUT, 2, &p, 2).expect("parses");
        let Outcome::Exact(r) = o else {
            panic!("{o:?}")
        };
        // repetition 0: guest 0 in 2 s, guest 1 in 2 s; repetition 1: 3 s and 4 s
        assert_eq!(r[0].goodput_bps, 256.0 / 2.0);
        assert_eq!(r[1].goodput_bps, (256.0 / 3.0 + 256.0 / 4.0) / 2.0);
        // bytes per gradient byte over the stream: 8000 / 64 and 16000 / 64
        assert_eq!(r[0].throughput_bps, (128.0 * 125.0 + 128.0 * 250.0) / 2.0);
        // rtt: messages 0-1 of both links (100 200 500 600), then 2-3 without the missing one
        assert_eq!(r[0].rtt_ns, 350.0);
        assert_eq!(r[1].rtt_ns, 700.0);
        assert_eq!(r[0].elements_per_s, 4.0);
        assert!(
            facts.iter().any(|f| f.contains("rxe0/1 state ACTIVE")),
            "{facts:?}"
        );
        assert!(
            facts.iter().any(|f| f.contains("kernel 6.1.0-50-amd64")),
            "{facts:?}"
        );
        assert!(
            facts.iter().any(|f| f.contains("Soft-RoCE (rdma_rxe)")),
            "{facts:?}"
        );
    }

    #[test]
    fn a_guest_that_found_a_wrong_sum_is_a_wrong_result_and_a_silent_guest_an_error() {
        let p = layout();
        let wrong = OUT.replace(
            "netreduce_worker: rank 1: all 4 messages exact: 16 int32 values",
            "   stderr: netreduce_worker: FAILED: message 1 value 0: 5, the sum is 7",
        );
        let (o, _) = parse(&wrong, 2, &p, 2).expect("parses");
        assert!(
            matches!(&o, Outcome::Wrong(w) if w.contains("guest 1") && w.contains("the sum is 7")),
            "{o:?}"
        );
        let silent = OUT.replace("== guest 1: exit status 0", "== guest 1: exit status none");
        assert!(parse(&silent, 2, &p, 2).is_err());
        assert!(parse(OUT, 3, &p, 2).is_err(), "a third guest said nothing");
    }

    /// SwitchML-RDMA's rows: repetitions end where each guest said its last message was exact
    /// (slot groups finish out of order), the switch's per-link bytes and round trips by the
    /// `link of worker` lines (not its `worker N: results sent` lines), a guest's wrong sum a
    /// wrong result.
    #[test]
    fn a_switchml_rdma_rig_run_reads_repetition_ends_and_the_switchs_links() {
        // 2 repetitions of 2 messages of 2 x 16 B (8 values a message, no header)
        let p = Layout {
            system: RigSystem::SwitchMlRdma,
            elements: 16,
            msg_packets: 2,
            window: 1,
            mtu: 16,
            seed: 1,
        };
        assert_eq!((p.per_message(), p.messages_per_rep()), (8, 2));
        let out = "== relay: exit status 0\nswitchml_rdma_switch: worker 0: 9 results sent, 0 of them with the stale ICRC\nswitchml_rdma_switch: link of worker 0: link in 8 RoCEv2 frames, 1280 bytes (Ethernet header to ICRC); rtt_ns by message: 10 20 30 40\nswitchml_rdma_switch: link of worker 1: link in 8 RoCEv2 frames, 2560 bytes (Ethernet header to ICRC); rtt_ns by message: 50 60 70 80\n== guest 0: exit status 0\nmessage 3: aggregate exact, in at 9.0 s\nrepetition 0: messages 0..1 exact, in at 2.000000 s\nrepetition 1: messages 2..3 exact, in at 4.000000 s\nswitchml_rdma_worker: rank 0: all 4 messages exact: 32 int32 values\n== guest 1: exit status 0\nrepetition 1: messages 2..3 exact, in at 8.000000 s\nrepetition 0: messages 0..1 exact, in at 4.000000 s\nswitchml_rdma_worker: rank 1: all 4 messages exact: 32 int32 values\n";
        let (o, _) = parse(out, 2, &p, 2).expect("parses");
        let Outcome::Exact(r) = o else {
            panic!("{o:?}")
        };
        // repetition 0: 2 s and 4 s; repetition 1: 2 s and 4 s (8 - 4)
        assert_eq!(r[0].goodput_bps, (512.0 / 2.0 + 512.0 / 4.0) / 2.0);
        assert_eq!(r[1].goodput_bps, r[0].goodput_bps);
        // 1280 and 2560 link bytes over 128 gradient bytes
        assert_eq!(r[0].throughput_bps, (256.0 * 10.0 + 128.0 * 20.0) / 2.0);
        assert_eq!((r[0].rtt_ns, r[1].rtt_ns), (35.0, 55.0));
        let wrong = out.replace(
            "switchml_rdma_worker: rank 1: all 4 messages exact: 32 int32 values",
            "switchml_rdma_worker: FAILED: message 2 value 17: 5, the sum is 7 (my value 1)",
        );
        let (o, _) = parse(&wrong, 2, &p, 2).expect("parses");
        assert!(
            matches!(&o, Outcome::Wrong(w) if w.contains("guest 1") && w.contains("the sum is 7")),
            "{o:?}"
        );
        // a repetition a guest did not report, a link the switch did not report: errors
        let missing = out.replace("repetition 1: messages 2..3 exact, in at 8.000000 s\n", "");
        assert!(parse(&missing, 2, &p, 2).is_err());
        let no_link = out.replace("link of worker 1", "worker 1");
        assert!(parse(&no_link, 2, &p, 2).is_err());
    }

    /// A plan from a testbed file reaches the frames: NetReduce's worker built with the rig
    /// testbed's addresses sends from its guest's MAC and IPv4 address to its ring successor's;
    /// with the synthetic plan it sends exactly the frames it always has.
    #[test]
    fn a_testbed_address_plan_reaches_a_workers_frames() {
        use inabench_fabric::Endpoint;
        use inabench_ina::common::AllReduceConfig;
        use inabench_ina::netreduce::{Host, Layout as NrLayout};
        let tb = inabench_core::testbed::Testbed::from_yaml(
            Path::new("rxe-rig.yaml"),
            include_str!("../../../experiments/testbeds/rxe-rig.yaml"),
        )
        .expect("rxe-rig.yaml");
        let plan = address_plan(&tb).expect("a valid plan").expect("addresses");
        assert_eq!(plan.len(), Some(3));
        let cfg = AllReduceConfig {
            workers: 3,
            elements: 2000,
            seed: 7,
            line_rate_bps: 0.0,
            mtu: 1024,
            timeout_ns: 1_000_000,
            knobs: vec![],
        };
        let layout = NrLayout::new(&cfg).expect("layout");
        let grad = inabench_ina::common::gradient(cfg.seed, 0, cfg.elements);
        let first = |h: &mut Host| h.poll_transmit(0).expect("a first frame").bytes;
        let mut h = Host::with_addresses(0, layout, &grad, 3, cfg.timeout_ns, 0.0, &plan)
            .expect("worker 0");
        let frame = first(&mut h);
        let (repr, _) = inabench_wire::roce::FrameRepr::parse(&frame).expect("a RoCEv2 frame");
        assert_eq!(repr.src_mac, [0x52, 0x54, 0, 0x77, 0, 0x01], "guest0's MAC");
        assert_eq!(repr.src_ip, [10, 77, 0, 1], "guest0's address");
        assert_eq!(
            repr.dst_mac,
            [0x52, 0x54, 0, 0x77, 0, 0x02],
            "its successor guest1's"
        );
        assert_eq!(repr.dst_ip, [10, 77, 0, 2]);
        // the synthetic plan: the same frame as the constructor without a plan, byte for byte
        let mut old = Host::with_line_rate(0, layout, &grad, 3, cfg.timeout_ns, 0.0);
        let mut syn = Host::with_addresses(
            0,
            layout,
            &grad,
            3,
            cfg.timeout_ns,
            0.0,
            &AddressPlan::synthetic(),
        )
        .expect("synthetic");
        let a = first(&mut old);
        assert_eq!(a, first(&mut syn));
        let (r, _) = inabench_wire::roce::FrameRepr::parse(&a).expect("frame");
        assert_eq!((r.src_ip, r.dst_ip), ([10, 0, 0, 1], [10, 0, 0, 2]));
        // the synthetic plan is NetReduce's own numbering for every index and QP, and reads an
        // address back as it does
        let syn = AddressPlan::synthetic();
        for i in 0..300 {
            for (recv, q) in [(false, 0), (true, 0), (false, 3), (true, 15)] {
                assert_eq!(
                    inabench_ina::netreduce::worker_qp_addr_in(&syn, i, recv, q),
                    Some(inabench_ina::netreduce::worker_qp_addr(i, recv, q))
                );
            }
        }
        for (ip, node) in [
            ([10, 0, 0, 3], Some(2)),
            ([10, 77, 0, 1], Some(0)),
            ([10, 0, 0, 0], None),
            ([192, 168, 1, 5], None),
        ] {
            assert_eq!(syn.node_of_ip(ip), node);
        }
        // a plan with fewer workers than the job is refused
        let four = NrLayout::new(&AllReduceConfig { workers: 4, ..cfg }).expect("layout");
        assert!(Host::with_addresses(0, four, &grad, 4, 1, 0.0, &plan).is_err());
    }

    /// The accelerator on the rig is handed the rig testbed's worker addresses; the plan it
    /// builds from them (the example's parse, `parse_ip_mac` and `AddressPlan::new`) finds each
    /// guest at 10.77.0.<i+1> as the worker the synthetic plan found there before, and nothing
    /// else; a plan of fewer workers than the point is refused.
    #[test]
    fn the_accelerator_gets_the_rig_testbeds_addresses_and_finds_the_same_workers() {
        let tb = inabench_core::testbed::Testbed::from_yaml(
            Path::new("rxe-rig.yaml"),
            include_str!("../../../experiments/testbeds/rxe-rig.yaml"),
        )
        .expect("rxe-rig.yaml");
        let plan = address_plan(&tb).expect("valid").expect("addresses");
        let args = accel_worker_args(&plan, 3).expect("3 workers");
        assert_eq!(
            args,
            " --worker 10.77.0.1@52:54:00:77:00:01 --worker 10.77.0.2@52:54:00:77:00:02 --worker 10.77.0.3@52:54:00:77:00:03"
        );
        // what netreduce_accel's plan_of does with them
        let given = AddressPlan::new(
            args.split(" --worker ")
                .filter(|a| !a.is_empty())
                .map(|a| inabench_fabric::addresses::parse_ip_mac(a).expect("parses"))
                .collect(),
            None,
        )
        .expect("plan");
        let syn = AddressPlan::synthetic();
        for i in 0..3u8 {
            let guest = [10, 77, 0, i + 1];
            assert_eq!(given.node_of_ip(guest), Some(u32::from(i)));
            assert_eq!(given.node_of_ip(guest), syn.node_of_ip(guest), "guest {i}");
        }
        // what only the synthetic plan's pattern took: no worker of the testbed
        assert_eq!(given.node_of_ip([10, 77, 0, 4]), None);
        assert_eq!(syn.node_of_ip([10, 77, 0, 4]), Some(3));
        assert_eq!(
            accel_worker_args(&plan, 4)
                .expect_err("too few")
                .to_string(),
            "the address plan has 3 workers; the job has 4"
        );
    }

    /// The guests' own reports of their NIC and address are checked against the testbed's plan.
    #[test]
    fn guests_are_checked_against_the_testbeds_addresses() {
        let tb = inabench_core::testbed::Testbed::from_yaml(
            Path::new("rxe-rig.yaml"),
            include_str!("../../../experiments/testbeds/rxe-rig.yaml"),
        )
        .expect("rxe-rig.yaml");
        let plan = address_plan(&tb).expect("valid").expect("addresses");
        assert_eq!(plan.switch.as_ref().map(|s| s.ipv4), Some([10, 77, 0, 254]));
        // the guests' kernel names the data NIC eth0 (the rig's init runs no udev)
        let out = OUT.replace("data nic ens3 ", "data nic eth0 ");
        check_guest_addresses(&out, 2, &plan).expect("guest 0 is where the file says");
        let moved = out.replace("data nic eth0 10.77.0.1,", "data nic eth0 10.77.0.9,");
        let e = check_guest_addresses(&moved, 2, &plan).expect_err("moved");
        assert!(
            e.to_string()
                .starts_with("guest 0 is on eth0 10.77.0.9, the testbed file says eth0 10.77.0.1"),
            "{e}"
        );
        let e = check_guest_addresses(OUT, 2, &plan).expect_err("another NIC");
        assert!(
            e.to_string().starts_with("guest 0 is on ens3 10.77.0.1"),
            "{e}"
        );
        assert!(
            check_guest_addresses(&out, 4, &plan).is_err(),
            "3 addresses, 4 guests"
        );
        assert!(describe_plan(&plan).contains(
            "worker 2 eth0 52:54:00:77:00:03 10.77.0.3 gid ::ffff:10.77.0.3; switch 52:54:00:77:00:fe 10.77.0.254"
        ));
        // the local testbed states none: no plan, the rig's own numbering
        let local = inabench_core::testbed::Testbed::from_yaml(
            Path::new("local.yaml"),
            include_str!("../../../experiments/testbeds/local.yaml"),
        )
        .expect("local");
        assert_eq!(address_plan(&local).expect("valid"), None);
    }
}
