//! SwitchML's switch configured by its control plane's tables instead of the experiment's
//! config (#36 item 6): which frames are a job's workers, each worker's id and bitmap bit, the
//! number of workers, the multicast group the results go to and each worker's result address
//! are what a controller wrote ([`JobTable`], plain data: `inabench_p4rt::dataplane` reads it
//! from the P4Runtime server's entries); the pool size and the values a packet carries are the
//! pipeline's (its register arrays). The aggregation is [`SwitchMlSwitch`]'s, unchanged.
//!
//! What we learnt from the SwitchML release's control plane (p4app-switchML `dev_root/
//! controller/udp_receiver.py`, `udp_sender.py`, `switchml.py`, `pre.py`; `dev_root/p4/
//! udp_receiver.p4`): a worker is an entry of the ternary table `receive_udp` keyed on the
//! frame's source MAC, source IP and UDP destination port (the release's base port 0xbee0 under
//! mask 0xfff0; either address may be wildcarded) whose action `set_bitmap` gives the packet its
//! worker id, the worker's bitmap bit (1 << id), the job's number of workers and its multicast
//! group; a frame no entry matches takes the default action `forward` and is not aggregated (the
//! forwarding table decides where it goes); `drop` entries discard frames. Results go to the
//! group's replicas (node id = worker id, on the worker's port) and get the destination MAC and
//! IP of the worker's entry in the egress table `dst_addr` (keyed by worker id). The release runs
//! one job (session 0) of at most 32 workers; so does this switch.
//!
//! Where ours differs, and why: the release also matches the switch's own MAC and IP, the
//! ingress port and parser errors in `receive_udp`; the suite's workers address the switch as
//! node `n` of their job, so a switch address in the key would change with the count, and ours
//! takes every frame that reaches its ports. A worker's packet
//! is counted under the id its entry gives, whatever its header's worker field says (the release
//! reads the id from the table too): a frame from an address no entry names is never
//! aggregated, whatever it claims to be.
//!
//! The switch's own address: the release's egress (`dev_root/p4/udp_sender.p4`) writes every
//! result's source MAC and IPv4 from the action `set_switch_mac_and_ip(switch_mac, switch_ip)`,
//! the only (`@defaultonly`) action of the keyless, one-entry table `switch_mac_and_ip`, whose
//! default entry the controller sets at start-up (`dev_root/controller/udp_sender.py`'s
//! `set_switch_mac_and_ip`, called by `switchml.py`'s `setup` with the `--switch-mac`/
//! `--switch-ip` it was given). Ours reads it as [`JobTable::switch`] and sends from it; where
//! no entry was written it sends from SwitchML's synthetic switch address (node `n` of the
//! job) and says so ([`TableSwitch::note`], a [`NoSwitchAddress`] the caller puts in its
//! manifest).

use super::{Layout, SwitchMlSwitch};
use crate::tofino::TofinoModel;
use inabench_fabric::{Endpoint, Nanos, NodeId, Transmit};
use inabench_wire::{ethernet, ipv4, udp};
use std::collections::{BTreeMap, VecDeque};

/// The most workers a job may have (the release's `max_num_workers`, a 32-bit worker bitmap).
pub const MAX_WORKERS: usize = 32;

/// A ternary match: `x` matches when `x & mask == value & mask`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Masked {
    pub value: u64,
    pub mask: u64,
}

impl Masked {
    /// An exact match on `value`, `bits` wide.
    pub fn exact(value: u64, bits: u32) -> Masked {
        Masked {
            value,
            mask: if bits >= 64 {
                u64::MAX
            } else {
                (1 << bits) - 1
            },
        }
    }

    pub fn matches(&self, x: u64) -> bool {
        x & self.mask == self.value & self.mask
    }
}

/// What a `receive_udp` entry does with the frames it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleAction {
    /// The release's `set_bitmap`: a worker of the job.
    Worker {
        id: u16,
        num_workers: u16,
        mgid: u32,
        bitmap: u32,
    },
    Drop,
}

/// One `receive_udp` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    pub src_mac: Masked,
    pub src_ip: Masked,
    pub udp_dst_port: Masked,
    /// P4Runtime's: the larger wins among matching entries.
    pub priority: i32,
    pub action: RuleAction,
}

/// The switch's configuration as its tables say (a snapshot).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JobTable {
    /// `receive_udp`'s entries.
    pub rules: Vec<Rule>,
    /// `dst_addr`: worker id -> (destination MAC, destination IPv4) of its results.
    pub results: BTreeMap<u16, ([u8; 6], [u8; 4])>,
    /// Multicast groups: id -> replicas (node id, egress port), as written.
    pub groups: BTreeMap<u32, Vec<(u32, u32)>>,
    /// Aggregator slots (the pipeline's register arrays' size).
    pub slots: usize,
    /// int32 values a packet carries (the pipeline's value register arrays of one copy).
    pub lanes: usize,
    /// `switch_mac_and_ip`'s default entry: the switch's own (MAC, IPv4), the source of every
    /// result (None: no entry written).
    pub switch: Option<([u8; 6], [u8; 4])>,
}

/// What a switch whose tables name no address of its own does instead: its results leave from
/// SwitchML's synthetic switch address (node `node` of the job), which no controller wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoSwitchAddress {
    pub mac: [u8; 6],
    pub ip: [u8; 4],
    /// The switch's node number in SwitchML's synthetic plan (the job's number of workers).
    pub node: usize,
}

impl std::fmt::Display for NoSwitchAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "no switch_mac_and_ip entry is written: the switch's results leave from SwitchML's synthetic switch address {} {} (node {} of the job), not one its controller set",
            inabench_fabric::addresses::fmt_mac(self.mac),
            std::net::Ipv4Addr::from(self.ip),
            self.node
        )
    }
}

/// A table the switch cannot run a job from, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TableError {
    #[error("no receive_udp entry names a worker: there is no job")]
    NoJob,
    #[error("the workers' entries disagree on the number of workers ({0} and {1})")]
    CountsDisagree(u16, u16),
    #[error("the workers' entries name two multicast groups ({0} and {1}); one job is supported")]
    GroupsDisagree(u32, u32),
    #[error("a job of {0} workers: SwitchML's switch takes 2..={MAX_WORKERS}")]
    Count(u16),
    #[error("worker id {id} is not below the number of workers {n}")]
    IdOutOfRange { id: u16, n: u16 },
    #[error("worker {id}'s bitmap is {bitmap:#x}, not 1 << {id}")]
    Bitmap { id: u16, bitmap: u32 },
    #[error("two receive_udp entries name worker {0}")]
    DuplicateWorker(u16),
    #[error("the job has {n} workers but no receive_udp entry names worker {id}")]
    MissingWorker { id: u16, n: u16 },
    #[error("worker {0} has no dst_addr entry: its results have no destination")]
    NoResultAddress(u16),
    #[error("multicast group {0} (the job's) is not written")]
    NoGroup(u32),
    #[error("multicast group {mgid} has no replica for worker {id}")]
    NoReplica { mgid: u32, id: u16 },
    #[error(
        "{slots} slots of {lanes} values: the pipeline needs 1..=32767 slots and 1..=1024 values"
    )]
    Pool { slots: usize, lanes: usize },
    #[error("the switch program: {0}")]
    Switch(String),
    #[error(
        "switch_mac_and_ip's MAC {0} is a group address: the source of the switch's results must be unicast"
    )]
    GroupSwitchMac(String),
}

/// What the switch did with a frame that came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ingress {
    /// A job worker's frame, handed to the aggregation (which may still drop it: a malformed
    /// packet, a retransmission of an incomplete round).
    Aggregated,
    /// A `drop` entry matched.
    DroppedByTable,
    /// No entry matched (or not IPv4/UDP): the default action `forward`, not aggregated.
    Miss,
}

/// The SwitchML switch of a [`JobTable`], its ports the fabric's node ids: a frame's `from` is
/// the port it came in on, a transmit's `to` the port it goes out on.
pub struct TableSwitch {
    /// port-facing id of this node
    id: NodeId,
    rules: Vec<Rule>,
    num_workers: u16,
    /// per worker id: (destination MAC, destination IPv4, egress ports)
    egress: Vec<([u8; 6], [u8; 4], Vec<u32>)>,
    /// the results' source (MAC, IPv4): `switch_mac_and_ip`'s, else the synthetic one
    source: ([u8; 6], [u8; 4]),
    /// Some where `source` is the synthetic one (no entry written)
    note: Option<NoSwitchAddress>,
    inner: SwitchMlSwitch,
    out: VecDeque<Transmit>,
    scratch: Vec<u8>,
    aggregated: u64,
    dropped_by_table: u64,
    misses: u64,
}

/// (source MAC, source IPv4, UDP destination port, offset of the UDP payload) of an IPv4/UDP
/// frame.
fn keys(f: &[u8]) -> Option<([u8; 6], [u8; 4], u16, usize)> {
    let eth = ethernet::HEADER_LEN;
    if f.len() < eth + ipv4::HEADER_LEN || f[12..14] != [0x08, 0x00] || f[eth] >> 4 != 4 {
        return None;
    }
    let ihl = usize::from(f[eth] & 0x0f) * 4;
    if ihl < ipv4::HEADER_LEN || f[eth + 9] != ipv4::PROTO_UDP {
        return None;
    }
    let u = eth + ihl;
    let port = f.get(u + 2..u + 4)?;
    let mut mac = [0u8; 6];
    mac.copy_from_slice(&f[6..12]);
    let mut ip = [0u8; 4];
    ip.copy_from_slice(&f[eth + 12..eth + 16]);
    Some((
        mac,
        ip,
        u16::from_be_bytes([port[0], port[1]]),
        u + udp::HEADER_LEN,
    ))
}

fn be(b: &[u8]) -> u64 {
    b.iter().fold(0u64, |a, x| a << 8 | u64::from(*x))
}

impl TableSwitch {
    /// The switch the table says, as node `id` (the id its links name it by), checked: one job
    /// whose workers' entries agree on the count and the group, ids 0..n each once with bitmap
    /// 1 << id, each with a result address and a replica in the group.
    pub fn new(id: NodeId, table: &JobTable) -> Result<TableSwitch, TableError> {
        let mut job: Option<(u16, u32)> = None;
        let mut seen = BTreeMap::new();
        for r in &table.rules {
            let RuleAction::Worker {
                id: w,
                num_workers,
                mgid,
                bitmap,
            } = r.action
            else {
                continue;
            };
            match job {
                None => job = Some((num_workers, mgid)),
                Some((n, _)) if n != num_workers => {
                    return Err(TableError::CountsDisagree(n, num_workers));
                }
                Some((_, g)) if g != mgid => return Err(TableError::GroupsDisagree(g, mgid)),
                Some(_) => {}
            }
            if !(2..=MAX_WORKERS as u16).contains(&num_workers) {
                return Err(TableError::Count(num_workers));
            }
            if w >= num_workers {
                return Err(TableError::IdOutOfRange {
                    id: w,
                    n: num_workers,
                });
            }
            if bitmap != 1 << w {
                return Err(TableError::Bitmap { id: w, bitmap });
            }
            if seen.insert(w, ()).is_some() {
                return Err(TableError::DuplicateWorker(w));
            }
        }
        let (n, mgid) = job.ok_or(TableError::NoJob)?;
        let group = table.groups.get(&mgid).ok_or(TableError::NoGroup(mgid))?;
        let mut egress = Vec::new();
        for w in 0..n {
            if !seen.contains_key(&w) {
                return Err(TableError::MissingWorker { id: w, n });
            }
            let (mac, ip) = *table
                .results
                .get(&w)
                .ok_or(TableError::NoResultAddress(w))?;
            let ports: Vec<u32> = group
                .iter()
                .filter(|(rid, _)| *rid == u32::from(w))
                .map(|(_, p)| *p)
                .collect();
            if ports.is_empty() {
                return Err(TableError::NoReplica { mgid, id: w });
            }
            egress.push((mac, ip, ports));
        }
        if !(1..=0x7fff).contains(&table.slots) || !(1..=1024).contains(&table.lanes) {
            return Err(TableError::Pool {
                slots: table.slots,
                lanes: table.lanes,
            });
        }
        let layout = Layout {
            workers: usize::from(n),
            elements: 0,
            per_packet: table.lanes,
            slots: table.slots,
            chunks: 0,
            max: false,
        };
        if let Some((mac, _)) = table.switch
            && mac[0] & 1 == 1
        {
            return Err(TableError::GroupSwitchMac(
                inabench_fabric::addresses::fmt_mac(mac),
            ));
        }
        // the aggregation writes its results from SwitchML's synthetic switch address (node
        // n); `drain` rewrites their source from `switch_mac_and_ip` where it has an entry, and
        // their destinations from `dst_addr`
        let synthetic = super::synthetic_address(usize::from(n));
        let (source, note) = match table.switch {
            Some(a) => (a, None),
            None => (
                synthetic,
                Some(NoSwitchAddress {
                    mac: synthetic.0,
                    ip: synthetic.1,
                    node: usize::from(n),
                }),
            ),
        };
        let addrs = crate::switchml::addresses(
            &crate::common::AllReduceConfig {
                workers: usize::from(n),
                elements: 0,
                seed: 0,
                line_rate_bps: 0.0,
                mtu: 0,
                timeout_ns: 0,
                knobs: Vec::new(),
            },
            None,
        )
        .map_err(|e| TableError::Switch(e.to_string()))?;
        let inner = SwitchMlSwitch::new(id, layout, TofinoModel::PAPER, &addrs)
            .map_err(|e| TableError::Switch(e.to_string()))?;
        // the larger priority first; among equals the order written
        let mut rules = table.rules.clone();
        rules.sort_by_key(|r| std::cmp::Reverse(r.priority));
        Ok(TableSwitch {
            id,
            rules,
            num_workers: n,
            egress,
            source,
            note,
            inner,
            out: VecDeque::new(),
            scratch: Vec::new(),
            aggregated: 0,
            dropped_by_table: 0,
            misses: 0,
        })
    }

    /// The job's number of workers.
    pub fn workers(&self) -> usize {
        usize::from(self.num_workers)
    }

    /// The (MAC, IPv4) every result leaves from: `switch_mac_and_ip`'s, else the synthetic
    /// switch address ([`TableSwitch::note`] then says so).
    pub fn source(&self) -> ([u8; 6], [u8; 4]) {
        self.source
    }

    /// Where the tables name no switch address: what the results leave from instead (for the
    /// caller's manifest). None: `switch_mac_and_ip`'s entry was written.
    pub fn note(&self) -> Option<NoSwitchAddress> {
        self.note
    }

    /// The winning `receive_udp` entry's action for a frame (None: no entry matched, or the
    /// frame is not IPv4/UDP).
    pub fn classify(&self, f: &[u8]) -> Option<RuleAction> {
        let (mac, ip, port, _) = keys(f)?;
        let (mac, ip) = (be(&mac), be(&ip));
        self.rules
            .iter()
            .find(|r| {
                r.src_mac.matches(mac)
                    && r.src_ip.matches(ip)
                    && r.udp_dst_port.matches(u64::from(port))
            })
            .map(|r| r.action)
    }

    /// Take a frame in on `port`: aggregate it under the worker id its entry gives, drop it,
    /// or say that no entry took it (the caller's forwarding decides; [`Endpoint::handle_packet`]
    /// drops it and counts it in `misses`).
    pub fn ingress(&mut self, now: Nanos, port: NodeId, f: &[u8]) -> Ingress {
        match self.classify(f) {
            None => {
                self.misses += 1;
                Ingress::Miss
            }
            Some(RuleAction::Drop) => {
                self.dropped_by_table += 1;
                Ingress::DroppedByTable
            }
            Some(RuleAction::Worker { id, .. }) => {
                self.aggregated += 1;
                // the entry's worker id goes in the header's worker field, which the
                // aggregation reads (the release's set_bitmap sets the packet's worker id)
                let Some((_, _, _, at)) = keys(f) else {
                    return Ingress::Miss;
                };
                self.scratch.clear();
                self.scratch.extend_from_slice(f);
                if let Some(w) = self.scratch.get_mut(at..at + 2) {
                    w.copy_from_slice(&id.to_be_bytes());
                }
                self.inner.handle_packet(now, port, &self.scratch);
                self.drain();
                Ingress::Aggregated
            }
        }
    }

    /// The aggregation's results out to their workers' ports, from the switch's address
    /// (`switch_mac_and_ip`, as the release's egress sets it) to their `dst_addr` addresses.
    fn drain(&mut self) {
        let eth = ethernet::HEADER_LEN;
        while let Some(t) = self.inner.poll_transmit(0) {
            let mut f = t.bytes;
            let Some((mac, ip, ports)) = self.egress.get(t.to as usize) else {
                continue;
            };
            if f.len() < eth + ipv4::HEADER_LEN {
                continue;
            }
            f[..6].copy_from_slice(mac);
            f[6..12].copy_from_slice(&self.source.0);
            f[eth + 12..eth + 16].copy_from_slice(&self.source.1);
            f[eth + 16..eth + 20].copy_from_slice(ip);
            f[eth + 10..eth + 12].fill(0);
            let c = ipv4::checksum(&f[eth..eth + ipv4::HEADER_LEN]);
            f[eth + 10..eth + 12].copy_from_slice(&c.to_be_bytes());
            if let Some((last, rest)) = ports.split_last() {
                for p in rest {
                    self.out.push_back(Transmit {
                        to: *p as NodeId,
                        bytes: f.clone(),
                    });
                }
                self.out.push_back(Transmit {
                    to: *last as NodeId,
                    bytes: f,
                });
            }
        }
    }
}

impl Endpoint for TableSwitch {
    fn id(&self) -> NodeId {
        self.id
    }

    fn handle_packet(&mut self, now: Nanos, from: NodeId, f: &[u8]) {
        let _ = self.ingress(now, from, f);
    }

    fn poll_transmit(&mut self, _now: Nanos) -> Option<Transmit> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Nanos> {
        None
    }

    fn handle_timeout(&mut self, _now: Nanos) {}

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let mut c = vec![
            ("aggregated_in", self.aggregated),
            ("dropped_by_table", self.dropped_by_table),
            ("misses", self.misses),
        ];
        c.extend(self.inner.counters());
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::{AllReduceConfig, System, reference_sum};
    use crate::switchml::SwitchMl;

    fn worker_rule(w: u16, n: u16) -> Rule {
        Rule {
            src_mac: Masked::exact(be(&inabench_wire::node::mac_of(1, u32::from(w))), 48),
            src_ip: Masked::exact(be(&inabench_wire::node::ip_of(1, u32::from(w))), 32),
            udp_dst_port: Masked {
                value: 0xbee0,
                mask: 0xfff0,
            },
            priority: 10,
            action: RuleAction::Worker {
                id: w,
                num_workers: n,
                mgid: 1,
                bitmap: 1 << w,
            },
        }
    }

    /// The table of an `n`-worker job, worker `w` on port `w`.
    fn table(n: u16) -> JobTable {
        JobTable {
            rules: (0..n).map(|w| worker_rule(w, n)).collect(),
            results: (0..n)
                .map(|w| {
                    (
                        w,
                        (
                            inabench_wire::node::mac_of(1, u32::from(w)),
                            inabench_wire::node::ip_of(1, u32::from(w)),
                        ),
                    )
                })
                .collect(),
            groups: BTreeMap::from([(1, (0..n).map(|w| (u32::from(w), u32::from(w))).collect())]),
            slots: 128,
            lanes: 48,
            switch: None,
        }
    }

    /// Run the suite's SwitchML workers of `cfg` through `sw` by hand (worker `w` on port `w`,
    /// `extra` frames in on port 9 first); each worker's result.
    fn run(
        sw: &mut TableSwitch,
        cfg: &AllReduceConfig,
        extra: &[Vec<u8>],
    ) -> Vec<Option<Vec<i32>>> {
        run_seen(sw, cfg, extra, &mut Vec::new())
    }

    /// [`run`] through any switch, every frame it sent (its port, its bytes) pushed to `sent`.
    fn run_seen(
        sw: &mut dyn Endpoint,
        cfg: &AllReduceConfig,
        extra: &[Vec<u8>],
        sent: &mut Vec<(NodeId, Vec<u8>)>,
    ) -> Vec<Option<Vec<i32>>> {
        let mut workers = SwitchMl.build(cfg).expect("build").workers;
        for f in extra {
            sw.handle_packet(0, 9, f);
        }
        for now in 0..10_000u64 {
            let mut moved = false;
            for (w, wk) in workers.iter_mut().enumerate() {
                while let Some(t) = wk.poll_transmit(now) {
                    moved = true;
                    sw.handle_packet(now, w as NodeId, &t.bytes);
                }
            }
            while let Some(t) = sw.poll_transmit(now) {
                moved = true;
                let w = t.to as usize;
                // a result goes to its worker's port with its worker's addresses
                assert_eq!(t.bytes[..6], inabench_wire::node::mac_of(1, w as u32));
                assert_eq!(t.bytes[30..34], inabench_wire::node::ip_of(1, w as u32));
                assert!(ipv4::Repr::parse(&t.bytes[14..]).is_ok(), "checksum");
                workers[w].handle_packet(now, cfg.workers as NodeId, &t.bytes);
                sent.push((t.to, t.bytes));
            }
            if !moved {
                break;
            }
        }
        workers.iter().map(|w| w.result()).collect()
    }

    fn cfg(workers: usize) -> AllReduceConfig {
        AllReduceConfig {
            workers,
            elements: 48 * 128 * 3 + 5,
            seed: 7,
            line_rate_bps: 100e9,
            mtu: 1500,
            timeout_ns: u64::MAX / 4,
            knobs: vec![],
        }
    }

    #[test]
    fn the_tables_decide_the_job_and_who_is_in_it() {
        // three workers as the table says: every sum exact
        let mut sw = TableSwitch::new(3, &table(3)).expect("a job");
        let c = cfg(3);
        let want = reference_sum(c.seed, 3, c.elements);
        assert!(
            run(&mut sw, &c, &[])
                .iter()
                .all(|r| r.as_deref() == Some(&want[..]))
        );
        // the same three workers against a table of two: the count is the table's, not the
        // workers': every slot completes with workers 0 and 1 alone (their two-worker sum,
        // not the job's), and worker 2, named by no entry, gets nothing
        let mut sw = TableSwitch::new(2, &table(2)).expect("a job");
        let res = run(&mut sw, &c, &[]);
        assert!(res[0].is_some() && res[0] == res[1] && res[0].as_deref() != Some(&want[..]));
        assert!(res[2].is_none());

        // the pool is the pipeline's: a 64-slot switch sums workers whose pool is 64 exactly;
        // workers of the default 128 slots get only the chunks of slots below 64 (the switch
        // drops the rest as out of its pool)
        let mut t64 = table(3);
        t64.slots = 64;
        let mut c64 = cfg(3);
        c64.knobs = vec![("pool".into(), 64.0)];
        let mut sw = TableSwitch::new(3, &t64).expect("a job");
        assert!(
            run(&mut sw, &c64, &[])
                .iter()
                .all(|r| r.as_deref() == Some(&want[..]))
        );
        let mut sw = TableSwitch::new(3, &t64).expect("a job");
        assert!(run(&mut sw, &c, &[]).iter().all(Option::is_none));

        // a two-worker job, and a frame from an address no entry names that claims to be
        // worker 1 with other values: a miss, never aggregated, and the sums stay exact
        let c2 = cfg(2);
        let mut stray_cfg = cfg(2);
        stray_cfg.seed = 99;
        let mut strays = Vec::new();
        for mut w in SwitchMl
            .build(&stray_cfg)
            .expect("build")
            .workers
            .into_iter()
            .skip(1)
        {
            for _ in 0..20 {
                let mut f = w.poll_transmit(0).expect("a frame").bytes;
                f[14 + 15] = 99; // source 10.0.1.99
                f[14 + 10..14 + 12].fill(0);
                let ck = ipv4::checksum(&f[14..34]);
                f[14 + 10..14 + 12].copy_from_slice(&ck.to_be_bytes());
                strays.push(f);
            }
        }
        let mut sw = TableSwitch::new(2, &table(2)).expect("a job");
        let want2 = reference_sum(c2.seed, 2, c2.elements);
        let res = run(&mut sw, &c2, &strays);
        assert!(res.iter().all(|r| r.as_deref() == Some(&want2[..])));
        let misses = sw.counters().into_iter().find(|(k, _)| *k == "misses");
        assert_eq!(misses, Some(("misses", 20)));
        // a switch that took the header's word (no table) would have counted them as worker 1
        // and summed the stray values in: they are the first contributions of slots 0..20
        let mut by_header = SwitchMl.build(&c2).expect("build").switch;
        for f in &strays {
            by_header.handle_packet(0, 9, f);
        }
        assert_eq!(
            by_header
                .counters()
                .into_iter()
                .find(|(k, _)| *k == "partial_copies"),
            Some(("partial_copies", 20))
        );

        // a drop entry of higher priority over worker 0's address: its frames are dropped
        let mut t = table(2);
        t.rules.push(Rule {
            priority: 20,
            action: RuleAction::Drop,
            ..worker_rule(0, 2)
        });
        let mut sw = TableSwitch::new(2, &t).expect("a job");
        let res = run(&mut sw, &c2, &[]);
        assert!(res.iter().all(Option::is_none));
        // worker 0's first window, 128 slots' packets
        assert!(
            sw.counters().contains(&("dropped_by_table", 128)),
            "{:?}",
            sw.counters()
        );
    }

    /// Frames off the network that are not a worker's (random bytes; a worker's frame cut; a
    /// worker's frame with a byte flipped, from another MAC): no panic, only frames an entry
    /// names reach the aggregation, and the job still sums exactly afterwards.
    #[test]
    fn junk_frames_neither_panic_nor_disturb_the_job() {
        use inabench_rng::SplitMix64;
        let c = cfg(2);
        let mut sw = TableSwitch::new(2, &table(2)).expect("a job");
        let mut g = SplitMix64::new(36);
        let mut other = cfg(2);
        other.seed = 5;
        let valid = {
            let mut w = SwitchMl.build(&other).expect("build").workers;
            w[1].poll_transmit(0).expect("a frame").bytes
        };
        let mut junk = Vec::new();
        for i in 0..3000 {
            let r = g.next_u64();
            let f = match i % 3 {
                0 => (0..(r % 300) as usize)
                    .map(|_| g.next_u64() as u8)
                    .collect(),
                1 => valid[..(r as usize) % valid.len()].to_vec(),
                _ => {
                    let mut f = valid.clone();
                    let at = (r as usize >> 8) % f.len();
                    f[at] ^= (r as u8) | 1;
                    // a flip in the source MAC or IP leaves the frame no entry's
                    f[11] = 0x77;
                    f
                }
            };
            junk.push(f);
        }
        let res = run(&mut sw, &c, &junk);
        let want = reference_sum(c.seed, 2, c.elements);
        assert!(res.iter().all(|r| r.as_deref() == Some(&want[..])));
        let got = |k: &str| {
            sw.counters()
                .into_iter()
                .find(|(n, _)| *n == k)
                .map(|x| x.1)
        };
        // the random and re-addressed frames are misses, and the cut ones too short to hold
        // a UDP destination port; the other cut ones come from worker 1's address, reach the
        // aggregation (the worker field rewritten where the frame still has one) and are
        // dropped there as malformed, beside the job's 2 x 385 packets
        let named = junk
            .iter()
            .skip(1)
            .step_by(3)
            .filter(|f| f.len() >= 14 + 20 + 4)
            .count() as u64;
        assert!(named > 500, "{named}");
        assert_eq!(got("misses"), Some(3000 - named));
        assert_eq!(got("aggregated_in"), Some(named + 2 * 385));
        assert_eq!(got("mixed_rounds"), Some(0));
    }

    /// The switch's own address is `switch_mac_and_ip`'s: with an entry every result leaves
    /// from it (sums exact, no note); without one every result leaves from SwitchML's synthetic
    /// switch address, byte for byte the frames SwitchML's switch sends without tables, and the
    /// switch says so.
    #[test]
    fn results_leave_from_the_switch_address_the_table_names() {
        use std::collections::BTreeSet;
        let c = cfg(3);
        let want = reference_sum(c.seed, 3, c.elements);
        let sources = |sent: &[(NodeId, Vec<u8>)]| {
            sent.iter()
                .map(|(_, f)| (f[6..12].to_vec(), f[26..30].to_vec()))
                .collect::<BTreeSet<_>>()
        };
        let mine = ([0x52, 0x54, 0, 0xab, 0, 0xfe], [172, 16, 0, 254]);
        let mut t = table(3);
        t.switch = Some(mine);
        let mut sw = TableSwitch::new(3, &t).expect("a job");
        assert_eq!((sw.source(), sw.note()), (mine, None));
        let mut sent = Vec::new();
        let res = run_seen(&mut sw, &c, &[], &mut sent);
        assert!(res.iter().all(|r| r.as_deref() == Some(&want[..])));
        // three rounds of 128 slots and a short one, to each of 3 workers
        assert_eq!(sent.len(), 3 * 385);
        assert_eq!(
            sources(&sent),
            BTreeSet::from([(mine.0.to_vec(), mine.1.to_vec())])
        );
        for (_, f) in &sent {
            let ip = ipv4::Repr::parse(&f[14..]).expect("a valid IPv4 header");
            assert_eq!(ip.src, mine.1);
        }

        // no entry: the synthetic switch address (node 3: 02:00:00:01:00:04, 10.0.1.4), said
        let mut sw = TableSwitch::new(3, &table(3)).expect("a job");
        let synthetic = crate::switchml::synthetic_address(3);
        assert_eq!(sw.source(), synthetic);
        let note = sw.note().expect("a note");
        assert_eq!(
            note.to_string(),
            "no switch_mac_and_ip entry is written: the switch's results leave from SwitchML's synthetic switch address 02:00:00:01:00:04 10.0.1.4 (node 3 of the job), not one its controller set"
        );
        let mut untabled = Vec::new();
        let res = run_seen(&mut sw, &c, &[], &mut untabled);
        assert!(res.iter().all(|r| r.as_deref() == Some(&want[..])));
        assert_eq!(
            sources(&untabled),
            BTreeSet::from([(synthetic.0.to_vec(), synthetic.1.to_vec())])
        );
        // frame for frame what SwitchML's own switch (no tables, the synthetic plan) sends for
        // the same frames in: the table's results' destinations are the synthetic workers' too
        let mut plain = SwitchMl.build(&c).expect("build").switch;
        let mut reference = Vec::new();
        let res = run_seen(&mut *plain, &c, &[], &mut reference);
        assert!(res.iter().all(|r| r.as_deref() == Some(&want[..])));
        assert_eq!(untabled.len(), reference.len());
        assert!(untabled == reference, "the untabled frames differ");

        // a group MAC as the switch's own: refused
        t.switch = Some(([0x01, 0, 0x5e, 0, 0, 1], [10, 0, 0, 1]));
        assert_eq!(
            TableSwitch::new(3, &t).err().map(|e| e.to_string()),
            Some("switch_mac_and_ip's MAC 01:00:5e:00:00:01 is a group address: the source of the switch's results must be unicast".into())
        );
    }

    #[test]
    fn a_table_that_cannot_run_a_job_says_why() {
        let err = |t: &JobTable| TableSwitch::new(3, t).err();
        assert_eq!(err(&JobTable::default()), Some(TableError::NoJob));
        let mut t = table(3);
        t.rules[1] = worker_rule(1, 2);
        assert_eq!(err(&t), Some(TableError::CountsDisagree(3, 2)));
        let mut t = table(3);
        t.rules.remove(2);
        assert_eq!(err(&t), Some(TableError::MissingWorker { id: 2, n: 3 }));
        let mut t = table(3);
        t.rules[2] = worker_rule(1, 3);
        assert_eq!(err(&t), Some(TableError::DuplicateWorker(1)));
        let mut t = table(3);
        if let RuleAction::Worker { bitmap, .. } = &mut t.rules[1].action {
            *bitmap = 4;
        }
        assert_eq!(err(&t), Some(TableError::Bitmap { id: 1, bitmap: 4 }));
        let mut t = table(3);
        t.rules[2] = worker_rule(3, 3);
        assert_eq!(err(&t), Some(TableError::IdOutOfRange { id: 3, n: 3 }));
        let mut t = table(3);
        t.results.remove(&1);
        assert_eq!(err(&t), Some(TableError::NoResultAddress(1)));
        let mut t = table(3);
        t.groups.clear();
        assert_eq!(err(&t), Some(TableError::NoGroup(1)));
        let mut t = table(3);
        t.groups.insert(1, vec![(0, 0), (1, 1)]);
        assert_eq!(err(&t), Some(TableError::NoReplica { mgid: 1, id: 2 }));
        let mut t = table(3);
        t.slots = 0;
        assert_eq!(
            err(&t),
            Some(TableError::Pool {
                slots: 0,
                lanes: 48
            })
        );
        assert_eq!(err(&table(1)), Some(TableError::Count(1)));
    }
}
