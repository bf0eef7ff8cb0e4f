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

use crate::pb::p4::config::v1::P4Info;
use crate::pb::p4::v1 as p4;
use crate::program;
use crate::server::SoftSwitch;
use std::collections::{BTreeMap, HashMap};

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

impl SoftSwitch {
    /// The forwarding the switch's state says now (a snapshot: a later write needs a new one).
    pub fn forwarding(&self) -> Result<Forwarding, DataplaneError> {
        let (config, tables, _, groups) = self.contents().ok_or(DataplaneError::NoPipeline)?;
        let info = config
            .and_then(|c| c.p4info)
            .ok_or(DataplaneError::NoPipeline)?;
        Forwarding::from_parts(&info, &tables, &groups)
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
}
