//! A switch program's control-plane surface, described once: its tables (match fields, actions)
//! and registers. [`Program::p4info`] turns it into the P4Info a P4Runtime server is configured
//! with, with ids allocated as P4Info prescribes (the most significant byte names the kind: 0x01
//! action, 0x02 table, 0x16 register).

use crate::pb::p4::config::v1 as cfg;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchKind {
    Exact,
    Lpm,
    Ternary,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    pub name: String,
    pub bitwidth: i32,
    pub kind: MatchKind,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ActionDesc {
    pub name: String,
    /// (name, bitwidth)
    pub params: Vec<(String, i32)>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TableDesc {
    pub name: String,
    pub fields: Vec<Field>,
    /// indices into [`Program::actions`]
    pub actions: Vec<usize>,
    pub size: i64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RegisterDesc {
    pub name: String,
    pub bitwidth: i32,
    pub size: i32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Program {
    pub name: String,
    pub actions: Vec<ActionDesc>,
    pub tables: Vec<TableDesc>,
    pub registers: Vec<RegisterDesc>,
}

/// Kind prefixes of P4Info ids.
pub const ACTION: u32 = 0x01;
pub const TABLE: u32 = 0x02;
pub const REGISTER: u32 = 0x16;

/// The id of the `i`-th object of a kind.
pub fn id(kind: u32, i: usize) -> u32 {
    (kind << 24) | (i as u32 + 1)
}

fn preamble(id: u32, name: &str) -> Option<cfg::Preamble> {
    Some(cfg::Preamble {
        id,
        name: name.to_string(),
        alias: name.rsplit('.').next().unwrap_or(name).to_string(),
        ..Default::default()
    })
}

impl Program {
    pub fn p4info(&self) -> cfg::P4Info {
        cfg::P4Info {
            pkg_info: Some(cfg::PkgInfo {
                name: self.name.clone(),
                version: "1".into(),
                arch: "tna".into(),
                organization: "inabench".into(),
                ..Default::default()
            }),
            actions: self
                .actions
                .iter()
                .enumerate()
                .map(|(i, a)| cfg::Action {
                    preamble: preamble(id(ACTION, i), &a.name),
                    params: a
                        .params
                        .iter()
                        .enumerate()
                        .map(|(k, (n, w))| cfg::action::Param {
                            id: k as u32 + 1,
                            name: n.clone(),
                            bitwidth: *w,
                            ..Default::default()
                        })
                        .collect(),
                })
                .collect(),
            tables: self
                .tables
                .iter()
                .enumerate()
                .map(|(i, t)| cfg::Table {
                    preamble: preamble(id(TABLE, i), &t.name),
                    match_fields: t
                        .fields
                        .iter()
                        .enumerate()
                        .map(|(k, f)| cfg::MatchField {
                            id: k as u32 + 1,
                            name: f.name.clone(),
                            bitwidth: f.bitwidth,
                            r#match: Some(cfg::match_field::Match::MatchType(match f.kind {
                                MatchKind::Exact => cfg::match_field::MatchType::Exact,
                                MatchKind::Lpm => cfg::match_field::MatchType::Lpm,
                                MatchKind::Ternary => cfg::match_field::MatchType::Ternary,
                            }
                                as i32)),
                            ..Default::default()
                        })
                        .collect(),
                    // a keyless table's actions can only be its default entry's
                    action_refs: t
                        .actions
                        .iter()
                        .map(|a| cfg::ActionRef {
                            id: id(ACTION, *a),
                            scope: if t.fields.is_empty() {
                                cfg::action_ref::Scope::DefaultOnly as i32
                            } else {
                                cfg::action_ref::Scope::TableAndDefault as i32
                            },
                            ..Default::default()
                        })
                        .collect(),
                    size: t.size,
                    ..Default::default()
                })
                .collect(),
            registers: self
                .registers
                .iter()
                .enumerate()
                .map(|(i, r)| cfg::Register {
                    preamble: preamble(id(REGISTER, i), &r.name),
                    type_spec: Some(cfg::P4DataTypeSpec {
                        type_spec: Some(cfg::p4_data_type_spec::TypeSpec::Bitstring(
                            cfg::P4BitstringLikeTypeSpec {
                                type_spec: Some(cfg::p4_bitstring_like_type_spec::TypeSpec::Bit(
                                    cfg::P4BitTypeSpec {
                                        bitwidth: r.bitwidth,
                                    },
                                )),
                                annotations: vec![],
                            },
                        )),
                    }),
                    size: r.size,
                })
                .collect(),
            ..Default::default()
        }
    }
}

/// The switch program a system of the suite runs on a programmable switch, by the system's spec
/// name (`None`: its switch side runs on the software model only). The programs this driver can
/// describe are listed here, so the harness names none.
pub fn for_system(system: &str) -> Option<Program> {
    match system {
        // SwitchML's release: 128 slots (the suite's SwitchML pool size)
        "switchml" => Some(switchml(128)),
        _ => None,
    }
}

/// The program with the tables its control plane writes to run a job on the switch, for a
/// system whose job tables the suite describes (`None`: [`for_system`]'s forwarding is all its
/// switch is written). A testbed's P4Info is checked against [`for_system`]'s program; when it
/// also has these tables the harness writes the job into them.
pub fn job_program_for(system: &str) -> Option<Program> {
    match system {
        "switchml" => Some(switchml_with_job_tables(128)),
        _ => None,
    }
}

/// SwitchML's switch program as systems/ina runs it on the Tofino model: a forwarding table
/// (destination address to egress port) and, per 32-bit lane of a 192-byte pass, one register
/// array per shadow copy holding the slot's partial sums, plus the per-copy worker bitmaps and
/// counts.
pub fn switchml(slots: i32) -> Program {
    let lanes = 48;
    let mut registers = Vec::new();
    for copy in 0..2 {
        for lane in 0..lanes {
            registers.push(RegisterDesc {
                name: format!("SwitchMLIngress.sum{copy}_{lane}"),
                bitwidth: 32,
                size: slots,
            });
        }
        registers.push(RegisterDesc {
            name: format!("SwitchMLIngress.bitmap{copy}"),
            bitwidth: 32,
            size: slots,
        });
        registers.push(RegisterDesc {
            name: format!("SwitchMLIngress.count{copy}"),
            bitwidth: 8,
            size: slots,
        });
    }
    Program {
        name: "switchml".into(),
        actions: vec![
            ActionDesc {
                name: "SwitchMLIngress.forward".into(),
                params: vec![("port".into(), 9)],
            },
            ActionDesc {
                name: "SwitchMLIngress.drop".into(),
                params: vec![],
            },
        ],
        tables: vec![TableDesc {
            name: "SwitchMLIngress.forward_table".into(),
            fields: vec![Field {
                name: "hdr.ipv4.dst_addr".into(),
                bitwidth: 32,
                kind: MatchKind::Exact,
            }],
            actions: vec![0, 1],
            size: 1024,
        }],
        registers,
    }
}

/// [`switchml`] with the tables its control plane writes to run a job on the switch (#36 item
/// 6), after the SwitchML release's (p4app-switchML `dev_root/p4/udp_receiver.p4`,
/// `udp_sender.p4`; written by `dev_root/controller/udp_receiver.py`, `udp_sender.py`):
/// `receive_udp`, ternary on a frame's source MAC, source IPv4 and UDP destination port, whose
/// `set_bitmap` names a worker (its id, bitmap bit, the job's number of workers and multicast
/// group) or `drop`s the frame; and the egress table `dst_addr`, worker id to the destination
/// MAC and IPv4 of its results. The pool size and the values a packet carries stay the
/// register arrays' ([`switchml`]'s `slots` and 48 lanes). `inabench_p4rt::dataplane` reads a
/// job from these entries; `switchml` alone (what a testbed's switch gets, `for_system`) has
/// the forwarding only. The switch's own MAC and IPv4, the source of its results, are the
/// default entry of the keyless one-entry egress table `switch_mac_and_ip`, whose only action
/// `set_switch_mac_and_ip(switch_mac, switch_ip)` is default-only (the release's
/// `dev_root/p4/udp_sender.p4`; its controller sets the entry at start-up, `dev_root/controller/
/// udp_sender.py`'s `set_switch_mac_and_ip`). The release also keys `receive_udp` on the
/// ingress port, the switch's own addresses and parser errors, and has a `worker_type`
/// parameter (UDP or RDMA): left out (systems/ina's `switchml::table` says why).
pub fn switchml_with_job_tables(slots: i32) -> Program {
    let mut p = switchml(slots);
    let set_bitmap = p.actions.len();
    p.actions.push(ActionDesc {
        name: "SwitchMLIngress.set_bitmap".into(),
        params: vec![
            ("mgid".into(), 16),
            ("worker_id".into(), 16),
            ("num_workers".into(), 8),
            ("worker_bitmap".into(), 32),
        ],
    });
    let set_dst_addr = p.actions.len();
    p.actions.push(ActionDesc {
        name: "SwitchMLEgress.set_dst_addr".into(),
        params: vec![("eth_dst_addr".into(), 48), ("ip_dst_addr".into(), 32)],
    });
    let ternary = |name: &str, bitwidth: i32| Field {
        name: name.into(),
        bitwidth,
        kind: MatchKind::Ternary,
    };
    p.tables.push(TableDesc {
        name: "SwitchMLIngress.receive_udp".into(),
        fields: vec![
            ternary("hdr.ethernet.src_addr", 48),
            ternary("hdr.ipv4.src_addr", 32),
            ternary("hdr.udp.dst_port", 16),
        ],
        // drop is action 1
        actions: vec![set_bitmap, 1],
        // the release's max_num_workers + 16
        size: 48,
    });
    p.tables.push(TableDesc {
        name: "SwitchMLEgress.dst_addr".into(),
        fields: vec![Field {
            name: "eg_md.switchml_md.worker_id".into(),
            bitwidth: 16,
            kind: MatchKind::Exact,
        }],
        actions: vec![set_dst_addr],
        size: 32,
    });
    let set_switch = p.actions.len();
    p.actions.push(ActionDesc {
        name: "SwitchMLEgress.set_switch_mac_and_ip".into(),
        params: vec![("switch_mac".into(), 48), ("switch_ip".into(), 32)],
    });
    // no match fields: the table holds its default entry only (P4Info: a default-only action)
    p.tables.push(TableDesc {
        name: "SwitchMLEgress.switch_mac_and_ip".into(),
        fields: vec![],
        actions: vec![set_switch],
        size: 1,
    });
    p
}
