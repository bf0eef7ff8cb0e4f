//! The software switch's forwarding as its P4Runtime state says (#36 item 6, "the P4Runtime
//! control plane drives a data plane"): what a controller wrote into the SwitchML program's
//! `SwitchMLIngress.forward_table` (IPv4 destination, exact, to `forward(port)` or `drop`) and
//! into multicast group 1 (the group the harness installs for the results, `harness/src/
//! p4switch.rs`) decides where each frame goes. Sans-IO: [`Forwarding::egress`] names the ports;
//! `inabench_fabric::raw::forward_until` moves the frames on AF_PACKET sockets
//! (harness/tests/p4rt_dataplane.rs: p4runtime-shell writes the entries, frames cross veth
//! pairs).
//!
//! The program's ingress, as we write it (the SwitchML release's forwarding is an L2 table on
//! the Tofino; ours keys on the IPv4 destination, as the P4Info the suite pushes says): a frame
//! whose destination MAC is a group address (the I/G bit set: broadcast, multicast) goes to every
//! replica of multicast group 1 (none written: dropped); an IPv4 frame goes to the port its
//! destination's entry names, or nowhere (`drop`, or no entry: a miss drops); anything else is
//! dropped.
//!
//! With the job tables ([`program::switchml_with_job_tables`]) the same state also configures
//! SwitchML's aggregation: [`job_table`] reads the job a controller wrote (as the SwitchML
//! release's controller writes its switch) and [`DataPlane`] runs systems/ina's switch on it,
//! ahead of the forwarding: a frame `receive_udp` names is aggregated, any other is forwarded
//! as above (drivers/p4rt/tests/p4runtime_aggregation.rs: p4runtime-shell writes a job, the
//! suite's SwitchML workers all-reduce through it across veth pairs).

use crate::pb::p4::config::v1::P4Info;
use crate::pb::p4::v1 as p4;
use crate::program;
use crate::server::SoftSwitch;
use inabench_fabric::addresses::MacIp;
use inabench_fabric::{Endpoint, Nanos, NodeId, Transmit};
pub use inabench_ina::switchml::table::NoSwitchAddress;
use inabench_ina::switchml::table::{Ingress, JobTable, Masked, Rule, TableError, TableSwitch};
use std::collections::{BTreeMap, HashMap, VecDeque};

/// The most workers a job may have (the SwitchML release's `max_num_workers`), and what a
/// `receive_udp` entry does.
pub use inabench_ina::switchml::table::{MAX_WORKERS, RuleAction};

/// The multicast group group-addressed frames go to.
pub const FLOOD_GROUP: u32 = 1;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum DataplaneError {
    #[error("no forwarding pipeline config is set: the data plane forwards nothing yet")]
    NoPipeline,
    #[error("the pipeline's P4Info has no {0}")]
    Missing(String),
    #[error("table entry {0}")]
    BadEntry(String),
    #[error("the job tables: {0}")]
    Job(#[from] TableError),
}

/// What a frame's destination IPv4 address maps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Forward(u32),
    Drop,
}

/// The forwarding the switch's state says, read once (a snapshot).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Forwarding {
    pub routes: HashMap<[u8; 4], Route>,
    /// Multicast group id -> egress ports, in the order written.
    pub groups: BTreeMap<u32, Vec<u32>>,
}

/// A P4Runtime bytestring (canonical: leading zero bytes may be left out) as a number of at
/// most `bytes` bytes.
fn number(v: &[u8], bytes: usize) -> Option<u64> {
    let v = &v[v.iter().take_while(|b| **b == 0).count()..];
    (v.len() <= bytes && bytes <= 8).then(|| v.iter().fold(0u64, |a, b| a << 8 | u64::from(*b)))
}

impl Forwarding {
    /// The forwarding of a pipeline `info` with table entries `tables` (table id -> entries) and
    /// multicast groups `groups`, for the SwitchML program's forwarding table.
    pub fn from_parts(
        info: &P4Info,
        tables: &HashMap<u32, BTreeMap<Vec<u8>, p4::TableEntry>>,
        groups: &BTreeMap<u32, p4::MulticastGroupEntry>,
    ) -> Result<Forwarding, DataplaneError> {
        let prog = program::switchml(1);
        let t = &prog.tables[0];
        let ids = crate::p4info::Ids(info);
        let missing = |what: &str| DataplaneError::Missing(what.to_string());
        let table = ids.table(&t.name).ok_or_else(|| missing(&t.name))?;
        let field = ids
            .match_field(&t.name, &t.fields[0].name)
            .ok_or_else(|| missing(&t.fields[0].name))?;
        let (fwd_name, drop_name) = (&prog.actions[0].name, &prog.actions[1].name);
        let forward = ids.action(fwd_name).ok_or_else(|| missing(fwd_name))?;
        let drop = ids.action(drop_name).ok_or_else(|| missing(drop_name))?;
        let port = ids
            .param(fwd_name, "port")
            .ok_or_else(|| missing("forward's port"))?;
        let mut routes = HashMap::new();
        for e in tables.get(&table).into_iter().flat_map(|t| t.values()) {
            let bad = |why: &str| DataplaneError::BadEntry(format!("{why}: {e:?}"));
            let dst = e
                .r#match
                .iter()
                .find(|m| m.field_id == field)
                .and_then(|m| match &m.field_match_type {
                    Some(p4::field_match::FieldMatchType::Exact(x)) => number(&x.value, 4),
                    _ => None,
                })
                .ok_or_else(|| bad("without an exact 32-bit destination"))?;
            let Some(p4::TableAction {
                r#type: Some(p4::table_action::Type::Action(a)),
            }) = &e.action
            else {
                return Err(bad("without an action"));
            };
            let route = if a.action_id == forward {
                let p = a
                    .params
                    .iter()
                    .find(|p| p.param_id == port)
                    .and_then(|p| number(&p.value, 2))
                    .ok_or_else(|| bad("forward without a port"))?;
                Route::Forward(p as u32)
            } else if a.action_id == drop {
                Route::Drop
            } else {
                return Err(bad("with an action the table does not take"));
            };
            routes.insert((dst as u32).to_be_bytes(), route);
        }
        let groups = groups
            .iter()
            .map(|(id, g)| {
                let ports = g
                    .replicas
                    .iter()
                    .filter_map(|r| match &r.port_kind {
                        Some(p4::replica::PortKind::EgressPort(p)) => Some(*p),
                        Some(p4::replica::PortKind::Port(b)) => number(b, 4).map(|p| p as u32),
                        None => None,
                    })
                    .collect();
                (*id, ports)
            })
            .collect();
        Ok(Forwarding { routes, groups })
    }

    /// The ports a whole Ethernet frame goes out on (empty: dropped).
    pub fn egress(&self, frame: &[u8]) -> Vec<u32> {
        if frame.len() < 14 {
            return Vec::new();
        }
        if frame[0] & 1 == 1 {
            return self.groups.get(&FLOOD_GROUP).cloned().unwrap_or_default();
        }
        if frame[12..14] != [0x08, 0x00] || frame.len() < 14 + 20 || frame[14] >> 4 != 4 {
            return Vec::new();
        }
        let dst = [frame[30], frame[31], frame[32], frame[33]];
        match self.routes.get(&dst) {
            Some(Route::Forward(p)) => vec![*p],
            Some(Route::Drop) | None => Vec::new(),
        }
    }
}

/// The entries of table `name` (none written: empty), with the P4Info's ids of its match
/// fields `fields` and the table's name for errors.
fn entries<'a>(
    info: &P4Info,
    tables: &'a HashMap<u32, BTreeMap<Vec<u8>, p4::TableEntry>>,
    name: &str,
    fields: &[&str],
) -> Result<(Vec<&'a p4::TableEntry>, Vec<u32>), DataplaneError> {
    let ids = crate::p4info::Ids(info);
    let missing = |what: &str| DataplaneError::Missing(what.to_string());
    let table = ids.table(name).ok_or_else(|| missing(name))?;
    let fields = fields
        .iter()
        .map(|f| {
            ids.match_field(name, f)
                .ok_or_else(|| missing(&format!("{name}'s {f}")))
        })
        .collect::<Result<Vec<u32>, _>>()?;
    let entries = tables
        .get(&table)
        .into_iter()
        .flat_map(|t| t.values())
        .collect();
    Ok((entries, fields))
}

/// An entry's action (its id and parameters).
fn action_of(e: &p4::TableEntry) -> Result<&p4::Action, DataplaneError> {
    match &e.action {
        Some(p4::TableAction {
            r#type: Some(p4::table_action::Type::Action(a)),
        }) => Ok(a),
        _ => Err(DataplaneError::BadEntry(format!(
            "without an action: {e:?}"
        ))),
    }
}

/// The value of parameter `param` of action `action` in `params`, at most `bytes` bytes.
fn param(
    info: &P4Info,
    action: &str,
    param: &str,
    params: &[p4::action::Param],
    bytes: usize,
    e: &p4::TableEntry,
) -> Result<u64, DataplaneError> {
    let id = crate::p4info::Ids(info)
        .param(action, param)
        .ok_or_else(|| DataplaneError::Missing(format!("{action}'s {param}")))?;
    params
        .iter()
        .find(|p| p.param_id == id)
        .and_then(|p| number(&p.value, bytes))
        .ok_or_else(|| {
            DataplaneError::BadEntry(format!(
                "{action} without a {param} of at most {bytes} bytes: {e:?}"
            ))
        })
}

/// The job the SwitchML program's job tables say ([`program::switchml_with_job_tables`]):
/// `receive_udp`'s entries (a ternary field left out matches anything, as P4Runtime's
/// don't-care), `dst_addr`'s, `switch_mac_and_ip`'s default entry ([`switch_address`]), every
/// multicast group's replicas (node id = the replica's instance), and the pool (the size of the register array `SwitchMLIngress.bitmap0`) and
/// values a packet (the `SwitchMLIngress.sum0_*` arrays) of the pipeline. An entry the program
/// does not declare (an exact value on a ternary field, a missing parameter, an action the table
/// does not take) is a [`DataplaneError::BadEntry`]; a pipeline without the tables is
/// [`DataplaneError::Missing`]. Whether the job can run is [`TableSwitch::new`]'s check.
pub fn job_table(
    info: &P4Info,
    tables: &HashMap<u32, BTreeMap<Vec<u8>, p4::TableEntry>>,
    groups: &BTreeMap<u32, p4::MulticastGroupEntry>,
) -> Result<JobTable, DataplaneError> {
    let ids = crate::p4info::Ids(info);
    let missing = |what: &str| DataplaneError::Missing(what.to_string());
    let (set_bitmap, drop, set_dst) = (
        "SwitchMLIngress.set_bitmap",
        "SwitchMLIngress.drop",
        "SwitchMLEgress.set_dst_addr",
    );
    let set_bitmap_id = ids.action(set_bitmap).ok_or_else(|| missing(set_bitmap))?;
    let drop_id = ids.action(drop).ok_or_else(|| missing(drop))?;
    let set_dst_id = ids.action(set_dst).ok_or_else(|| missing(set_dst))?;

    let (rx, fields) = entries(
        info,
        tables,
        "SwitchMLIngress.receive_udp",
        &[
            "hdr.ethernet.src_addr",
            "hdr.ipv4.src_addr",
            "hdr.udp.dst_port",
        ],
    )?;
    let mut rules = Vec::new();
    for e in rx {
        let bad = |why: String| DataplaneError::BadEntry(format!("{why}: {e:?}"));
        let mut keys = [Masked::default(); 3];
        for m in &e.r#match {
            let Some(k) = fields.iter().position(|f| *f == m.field_id) else {
                return Err(bad(format!("with match field {}", m.field_id)));
            };
            let bytes = [6, 4, 2][k];
            let Some(p4::field_match::FieldMatchType::Ternary(t)) = &m.field_match_type else {
                return Err(bad(format!(
                    "receive_udp's field {} is ternary",
                    m.field_id
                )));
            };
            keys[k] = match (number(&t.value, bytes), number(&t.mask, bytes)) {
                (Some(value), Some(mask)) => Masked { value, mask },
                _ => {
                    return Err(bad(format!(
                        "field {} wider than {bytes} bytes",
                        m.field_id
                    )));
                }
            };
        }
        let a = action_of(e)?;
        let (action, params) = (a.action_id, &a.params);
        let action = if action == set_bitmap_id {
            let p = |name: &str, bytes: usize| param(info, set_bitmap, name, params, bytes, e);
            RuleAction::Worker {
                id: p("worker_id", 2)? as u16,
                num_workers: p("num_workers", 1)? as u16,
                mgid: p("mgid", 2)? as u32,
                bitmap: p("worker_bitmap", 4)? as u32,
            }
        } else if action == drop_id {
            RuleAction::Drop
        } else {
            return Err(bad("with an action receive_udp does not take".into()));
        };
        rules.push(Rule {
            src_mac: keys[0],
            src_ip: keys[1],
            udp_dst_port: keys[2],
            priority: e.priority,
            action,
        });
    }

    let (tx, fields) = entries(
        info,
        tables,
        "SwitchMLEgress.dst_addr",
        &["eg_md.switchml_md.worker_id"],
    )?;
    let mut results = BTreeMap::new();
    for e in tx {
        let bad = |why: &str| DataplaneError::BadEntry(format!("{why}: {e:?}"));
        let worker = e
            .r#match
            .iter()
            .find(|m| m.field_id == fields[0])
            .and_then(|m| match &m.field_match_type {
                Some(p4::field_match::FieldMatchType::Exact(x)) => number(&x.value, 2),
                _ => None,
            })
            .ok_or_else(|| bad("without an exact 16-bit worker id"))?;
        let a = action_of(e)?;
        let (action, params) = (a.action_id, &a.params);
        if action != set_dst_id {
            return Err(bad("with an action dst_addr does not take"));
        }
        let mac = param(info, set_dst, "eth_dst_addr", params, 6, e)?;
        let ip = param(info, set_dst, "ip_dst_addr", params, 4, e)?;
        let mut m = [0u8; 6];
        m.copy_from_slice(&mac.to_be_bytes()[2..]);
        results.insert(worker as u16, (m, (ip as u32).to_be_bytes()));
    }

    let groups = groups
        .iter()
        .map(|(id, g)| {
            let replicas = g
                .replicas
                .iter()
                .filter_map(|r| {
                    let port = match &r.port_kind {
                        Some(p4::replica::PortKind::EgressPort(p)) => Some(*p),
                        Some(p4::replica::PortKind::Port(b)) => number(b, 4).map(|p| p as u32),
                        None => None,
                    }?;
                    Some((r.instance, port))
                })
                .collect();
            (*id, replicas)
        })
        .collect();

    let (slots, lanes) = pool_of(info)?;
    Ok(JobTable {
        rules,
        results,
        groups,
        slots,
        lanes,
        switch: switch_address(info, tables)?,
    })
}

/// The switch's own (MAC, IPv4) as `SwitchMLEgress.switch_mac_and_ip`'s default entry sets
/// it (the SwitchML release's controller writes it at start-up: p4app-switchML
/// `dev_root/controller/udp_sender.py`, `set_switch_mac_and_ip`); None where no entry is
/// written. A match entry in the keyless table, or another action, is a
/// [`DataplaneError::BadEntry`].
pub fn switch_address(
    info: &P4Info,
    tables: &HashMap<u32, BTreeMap<Vec<u8>, p4::TableEntry>>,
) -> Result<Option<MacIp>, DataplaneError> {
    let set = "SwitchMLEgress.set_switch_mac_and_ip";
    let set_id = crate::p4info::Ids(info)
        .action(set)
        .ok_or_else(|| DataplaneError::Missing(set.to_string()))?;
    let (held, _) = entries(info, tables, "SwitchMLEgress.switch_mac_and_ip", &[])?;
    let mut out = None;
    for e in held {
        let bad = |why: &str| DataplaneError::BadEntry(format!("{why}: {e:?}"));
        if !e.is_default_action {
            return Err(bad("switch_mac_and_ip holds its default entry only"));
        }
        let a = action_of(e)?;
        if a.action_id != set_id {
            return Err(bad("with an action switch_mac_and_ip does not take"));
        }
        let mac = param(info, set, "switch_mac", &a.params, 6, e)?;
        let ip = param(info, set, "switch_ip", &a.params, 4, e)?;
        let mut m = [0u8; 6];
        m.copy_from_slice(&mac.to_be_bytes()[2..]);
        out = Some((m, (ip as u32).to_be_bytes()));
    }
    Ok(out)
}

/// The pool of a pipeline with SwitchML's registers: its slots (the size of the register
/// array `SwitchMLIngress.bitmap0`) and the values a packet carries (the number of
/// `SwitchMLIngress.sum0_*` arrays).
pub fn pool_of(info: &P4Info) -> Result<(usize, usize), DataplaneError> {
    let name = "SwitchMLIngress.bitmap0";
    let slots = info
        .registers
        .iter()
        .find(|r| r.preamble.as_ref().is_some_and(|p| p.name == name))
        .ok_or_else(|| DataplaneError::Missing(name.to_string()))?
        .size as usize;
    let lanes = info
        .registers
        .iter()
        .filter(|r| {
            r.preamble
                .as_ref()
                .is_some_and(|p| p.name.starts_with("SwitchMLIngress.sum0_"))
        })
        .count();
    Ok((slots, lanes))
}

/// The number of workers of the job `table` says, or why the switch cannot run it
/// ([`TableSwitch::new`]'s check).
pub fn runnable(table: &JobTable) -> Result<usize, TableError> {
    TableSwitch::new(0, table).map(|s| s.workers())
}

impl SoftSwitch {
    /// The forwarding the switch's state says now (a snapshot: a later write needs a new one).
    pub fn forwarding(&self) -> Result<Forwarding, DataplaneError> {
        let (config, tables, _, groups) = self.contents().ok_or(DataplaneError::NoPipeline)?;
        let info = config
            .and_then(|c| c.p4info)
            .ok_or(DataplaneError::NoPipeline)?;
        Forwarding::from_parts(&info, &tables, &groups)
    }

    /// The job the switch's job tables say now ([`job_table`]; a snapshot).
    pub fn job_table(&self) -> Result<JobTable, DataplaneError> {
        let (config, tables, _, groups) = self.contents().ok_or(DataplaneError::NoPipeline)?;
        let info = config
            .and_then(|c| c.p4info)
            .ok_or(DataplaneError::NoPipeline)?;
        job_table(&info, &tables, &groups)
    }
}

/// The software switch's data plane as a snapshot of its P4Runtime state says: SwitchML's
/// aggregation (systems/ina's switch, [`TableSwitch`], configured by the job tables) takes the
/// frames `receive_udp` names; every other frame goes where the forwarding table and group 1 say
/// ([`Forwarding::egress`]), or is dropped and counted. Sans-IO: a frame's `from` is the port it
/// came in on, a transmit's `to` the port it leaves by (`inabench_fabric::raw::serve_until` runs
/// it on AF_PACKET sockets, one per port).
pub struct DataPlane {
    id: NodeId,
    forwarding: Forwarding,
    job: Option<TableSwitch>,
    out: VecDeque<Transmit>,
    forwarded: u64,
    dropped: u64,
}

impl DataPlane {
    /// The data plane `sw`'s state says now, as node `id`. A pipeline without the job tables or
    /// a state with no worker entry runs no job (forwarding only); one whose job cannot run is
    /// refused with why.
    pub fn of(sw: &SoftSwitch, id: NodeId) -> Result<DataPlane, DataplaneError> {
        let forwarding = sw.forwarding()?;
        // a pipeline without the job tables (the forwarding-only program) forwards only
        let table = match sw.job_table() {
            Ok(t) => t,
            Err(DataplaneError::Missing(_)) => JobTable::default(),
            Err(e) => return Err(e),
        };
        let job = if table
            .rules
            .iter()
            .any(|r| matches!(r.action, RuleAction::Worker { .. }))
        {
            Some(TableSwitch::new(id, &table)?)
        } else {
            None
        };
        Ok(DataPlane {
            id,
            forwarding,
            job,
            out: VecDeque::new(),
            forwarded: 0,
            dropped: 0,
        })
    }

    /// The job's number of workers (None: no job).
    pub fn workers(&self) -> Option<usize> {
        self.job.as_ref().map(TableSwitch::workers)
    }

    /// The (MAC, IPv4) the job's results leave from (None: no job): `switch_mac_and_ip`'s, else
    /// the synthetic switch address, which [`DataPlane::note`] then names.
    pub fn source(&self) -> Option<MacIp> {
        self.job.as_ref().map(TableSwitch::source)
    }

    /// Where a job runs without a `switch_mac_and_ip` entry: the synthetic address its results
    /// leave from instead, for the caller's manifest (None: the entry is written, or no job).
    pub fn note(&self) -> Option<NoSwitchAddress> {
        self.job.as_ref().and_then(TableSwitch::note)
    }

    fn forward(&mut self, f: &[u8]) {
        let ports = self.forwarding.egress(f);
        if ports.is_empty() {
            self.dropped += 1;
        }
        for p in ports {
            self.forwarded += 1;
            self.out.push_back(Transmit {
                to: p as NodeId,
                bytes: f.to_vec(),
            });
        }
    }
}

impl Endpoint for DataPlane {
    fn id(&self) -> NodeId {
        self.id
    }

    fn handle_packet(&mut self, now: Nanos, from: NodeId, f: &[u8]) {
        match self.job.as_mut().map(|j| j.ingress(now, from, f)) {
            Some(Ingress::Aggregated | Ingress::DroppedByTable) => {}
            Some(Ingress::Miss) | None => self.forward(f),
        }
    }

    fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        self.job
            .as_mut()
            .and_then(|j| j.poll_transmit(now))
            .or_else(|| self.out.pop_front())
    }

    fn poll_timeout(&self) -> Option<Nanos> {
        None
    }

    fn handle_timeout(&mut self, _now: Nanos) {}

    /// `forwarded` copies and `dropped` frames of the forwarding; the job's counters
    /// (`aggregated_in`, `dropped_by_table`, `misses`: frames no entry took, then forwarded or
    /// dropped here; the aggregation's own).
    fn counters(&self) -> Vec<(&'static str, u64)> {
        let mut c = vec![("forwarded", self.forwarded), ("dropped", self.dropped)];
        if let Some(j) = &self.job {
            c.extend(j.counters());
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(info: &P4Info, dst: &[u8], action: &str, port: Option<&[u8]>) -> p4::TableEntry {
        let ids = crate::p4info::Ids(info);
        let t = "SwitchMLIngress.forward_table";
        p4::TableEntry {
            table_id: ids.table(t).expect("table"),
            r#match: vec![p4::FieldMatch {
                field_id: ids.match_field(t, "hdr.ipv4.dst_addr").expect("field"),
                field_match_type: Some(p4::field_match::FieldMatchType::Exact(
                    p4::field_match::Exact {
                        value: dst.to_vec(),
                    },
                )),
            }],
            action: Some(p4::TableAction {
                r#type: Some(p4::table_action::Type::Action(p4::Action {
                    action_id: ids.action(action).expect("action"),
                    params: port
                        .map(|p| {
                            vec![p4::action::Param {
                                param_id: ids.param(action, "port").expect("param"),
                                value: p.to_vec(),
                            }]
                        })
                        .unwrap_or_default(),
                })),
            }),
            ..Default::default()
        }
    }

    fn frame(dst_mac: [u8; 6], dst_ip: [u8; 4]) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 8];
        f[..6].copy_from_slice(&dst_mac);
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[30..34].copy_from_slice(&dst_ip);
        f
    }

    #[test]
    fn entries_and_groups_decide_the_egress_ports() {
        let info = program::switchml(8).p4info();
        let fwd = "SwitchMLIngress.forward";
        let t = crate::p4info::Ids(&info)
            .table("SwitchMLIngress.forward_table")
            .expect("table");
        let mut table = BTreeMap::new();
        // canonical bytestrings: 0.0.0.7 is one byte, port 0 is empty
        for (k, e) in [
            entry(&info, &[10, 0, 1, 1], fwd, Some(&[2])),
            entry(&info, &[7], fwd, Some(&[])),
            entry(&info, &[10, 0, 1, 9], "SwitchMLIngress.drop", None),
        ]
        .into_iter()
        .enumerate()
        {
            table.insert(vec![k as u8], e);
        }
        let tables = HashMap::from([(t, table)]);
        let groups = BTreeMap::from([(
            1,
            p4::MulticastGroupEntry {
                multicast_group_id: 1,
                replicas: [0u32, 3]
                    .iter()
                    .map(|p| p4::Replica {
                        port_kind: Some(p4::replica::PortKind::EgressPort(*p)),
                        instance: 1,
                    })
                    .collect(),
            },
        )]);
        let f = Forwarding::from_parts(&info, &tables, &groups).expect("forwarding");
        let uni = [2, 0, 0, 0, 0, 1];
        assert_eq!(f.egress(&frame(uni, [10, 0, 1, 1])), vec![2]);
        assert_eq!(f.egress(&frame(uni, [0, 0, 0, 7])), vec![0]);
        assert!(f.egress(&frame(uni, [10, 0, 1, 9])).is_empty(), "drop");
        assert!(f.egress(&frame(uni, [10, 0, 1, 2])).is_empty(), "a miss");
        assert_eq!(f.egress(&frame([0xff; 6], [10, 0, 1, 1])), vec![0, 3]);
        assert!(f.egress(&frame(uni, [10, 0, 1, 1])[..20]).is_empty());
        // without group 1 a broadcast goes nowhere
        let f = Forwarding::from_parts(&info, &tables, &BTreeMap::new()).expect("forwarding");
        assert!(f.egress(&frame([0xff; 6], [10, 0, 1, 1])).is_empty());
        // a P4Info without the table is refused with its name
        assert_eq!(
            Forwarding::from_parts(&P4Info::default(), &tables, &groups),
            Err(DataplaneError::Missing(
                "SwitchMLIngress.forward_table".into()
            ))
        );
        // a switch without a pipeline forwards nothing
        let (sw, _dp) = SoftSwitch::new(1);
        assert_eq!(sw.forwarding(), Err(DataplaneError::NoPipeline));
    }

    fn ternary(value: &[u8], mask: &[u8]) -> Option<p4::field_match::FieldMatchType> {
        Some(p4::field_match::FieldMatchType::Ternary(
            p4::field_match::Ternary {
                value: value.to_vec(),
                mask: mask.to_vec(),
            },
        ))
    }

    /// A `receive_udp` entry: source IPv4 `ip` (exact when `exact`), UDP port 0xbee0/0xfff0,
    /// source MAC left out (don't care), `set_bitmap` with `params` (name, value).
    fn worker_entry(
        info: &P4Info,
        ip: [u8; 4],
        exact: bool,
        params: &[(&str, &[u8])],
    ) -> p4::TableEntry {
        let ids = crate::p4info::Ids(info);
        let t = "SwitchMLIngress.receive_udp";
        let a = "SwitchMLIngress.set_bitmap";
        p4::TableEntry {
            table_id: ids.table(t).expect("table"),
            r#match: vec![
                p4::FieldMatch {
                    field_id: ids.match_field(t, "hdr.ipv4.src_addr").expect("field"),
                    field_match_type: if exact {
                        Some(p4::field_match::FieldMatchType::Exact(
                            p4::field_match::Exact { value: ip.to_vec() },
                        ))
                    } else {
                        ternary(&ip, &[255; 4])
                    },
                },
                p4::FieldMatch {
                    field_id: ids.match_field(t, "hdr.udp.dst_port").expect("field"),
                    field_match_type: ternary(&[0xbe, 0xe0], &[0xff, 0xf0]),
                },
            ],
            action: Some(p4::TableAction {
                r#type: Some(p4::table_action::Type::Action(p4::Action {
                    action_id: ids.action(a).expect("action"),
                    params: params
                        .iter()
                        .map(|(n, v)| p4::action::Param {
                            param_id: ids.param(a, n).expect("param"),
                            value: v.to_vec(),
                        })
                        .collect(),
                })),
            }),
            priority: 10,
            ..Default::default()
        }
    }

    #[test]
    fn job_tables_read_as_the_program_declares_them() {
        let info = program::switchml_with_job_tables(64).p4info();
        let rx = crate::p4info::Ids(&info)
            .table("SwitchMLIngress.receive_udp")
            .expect("table");
        let full: &[(&str, &[u8])] = &[
            ("mgid", &[1]),
            ("worker_id", &[1]),
            ("num_workers", &[3]),
            ("worker_bitmap", &[2]),
        ];
        let one = |e: p4::TableEntry| HashMap::from([(rx, BTreeMap::from([(vec![0u8], e)]))]);
        let t = job_table(
            &info,
            &one(worker_entry(&info, [10, 0, 1, 2], false, full)),
            &BTreeMap::new(),
        )
        .expect("a job table");
        assert_eq!((t.slots, t.lanes), (64, 48), "the pipeline's registers");
        let r = t.rules[0];
        assert_eq!(
            r.action,
            RuleAction::Worker {
                id: 1,
                num_workers: 3,
                mgid: 1,
                bitmap: 2
            }
        );
        // the MAC left out matches any; the IP and port as written
        assert_eq!(r.src_mac.mask, 0);
        assert!(r.src_ip.matches(0x0a00_0102) && !r.src_ip.matches(0x0a00_0103));
        assert!(r.udp_dst_port.matches(48864) && r.udp_dst_port.matches(0xbeef));
        assert!(!r.udp_dst_port.matches(0xbef0));
        // an exact value on a ternary field, a missing parameter: entries the program does not
        // declare
        let e = job_table(
            &info,
            &one(worker_entry(&info, [10, 0, 1, 2], true, full)),
            &BTreeMap::new(),
        );
        assert!(
            matches!(e, Err(DataplaneError::BadEntry(ref m)) if m.contains("ternary")),
            "{e:?}"
        );
        let e = job_table(
            &info,
            &one(worker_entry(&info, [10, 0, 1, 2], false, &full[..3])),
            &BTreeMap::new(),
        );
        assert!(
            matches!(e, Err(DataplaneError::BadEntry(ref m)) if m.contains("worker_bitmap")),
            "{e:?}"
        );
        // a pipeline without the job tables has no job to read
        assert_eq!(
            job_table(
                &program::switchml(8).p4info(),
                &HashMap::new(),
                &BTreeMap::new()
            ),
            Err(DataplaneError::Missing("SwitchMLIngress.set_bitmap".into()))
        );
        // a worker entry alone is not a job the switch can run: said by the switch's check
        let (sw, _dp) = SoftSwitch::new(1);
        assert!(matches!(sw.job_table(), Err(DataplaneError::NoPipeline)));
        assert_eq!(TableSwitch::new(9, &t).err(), Some(TableError::NoGroup(1)));
    }

    #[test]
    fn the_data_plane_aggregates_what_receive_udp_names_and_forwards_the_rest() {
        use inabench_ina::common::{AllReduceConfig, System};
        let rule = |w: u16| Rule {
            src_mac: Masked::default(),
            src_ip: Masked::exact(0x0a00_0101 + u64::from(w), 32),
            udp_dst_port: Masked {
                value: 0xbee0,
                mask: 0xfff0,
            },
            priority: 1,
            action: RuleAction::Worker {
                id: w,
                num_workers: 2,
                mgid: 1,
                bitmap: 1 << w,
            },
        };
        let table = JobTable {
            rules: vec![rule(0), rule(1)],
            results: (0..2u8)
                .map(|w| (u16::from(w), ([2, 0, 0, 1, 0, w + 1], [10, 0, 1, w + 1])))
                .collect(),
            // worker 1's results on two ports
            groups: BTreeMap::from([(1, vec![(0, 0), (1, 1), (1, 3)])]),
            slots: 8,
            lanes: 48,
            switch: None,
        };
        let mut dp = DataPlane {
            id: 7,
            forwarding: Forwarding {
                routes: HashMap::from([([10, 0, 1, 9], Route::Forward(5))]),
                groups: BTreeMap::new(),
            },
            job: Some(TableSwitch::new(7, &table).expect("a job")),
            out: VecDeque::new(),
            forwarded: 0,
            dropped: 0,
        };
        assert_eq!(dp.workers(), Some(2));
        let cfg = AllReduceConfig {
            workers: 2,
            elements: 48 * 8,
            seed: 3,
            line_rate_bps: 100e9,
            mtu: 1500,
            timeout_ns: 1_000_000,
            knobs: vec![],
        };
        let mut workers = inabench_ina::switchml::SwitchMl
            .build(&cfg)
            .expect("build")
            .workers;
        for (w, wk) in workers.iter_mut().enumerate() {
            let f = wk.poll_transmit(0).expect("a frame").bytes;
            dp.handle_packet(0, w as NodeId, &f);
        }
        let mut out = Vec::new();
        while let Some(t) = dp.poll_transmit(0) {
            out.push((t.to, t.bytes[29], t.bytes[33]));
        }
        // chunk 0 complete: a copy per replica, each with its worker's address (source the
        // switch's node address, 10.0.1.3)
        assert_eq!(out, vec![(0, 3, 1), (1, 3, 2), (3, 3, 2)]);
        let uni = [2, 0, 0, 0, 0, 1];
        dp.handle_packet(0, 2, &frame(uni, [10, 0, 1, 9]));
        assert_eq!(dp.poll_transmit(0).map(|t| t.to), Some(5), "forwarded");
        dp.handle_packet(0, 2, &frame(uni, [10, 0, 1, 77]));
        assert!(dp.poll_transmit(0).is_none(), "a miss of both tables");
        let c = dp.counters();
        for k in [
            ("forwarded", 1),
            ("dropped", 1),
            ("aggregated_in", 2),
            ("misses", 2),
        ] {
            assert!(c.contains(&k), "{k:?} in {c:?}");
        }
    }
}
