//! The entries a controller writes to run a job on a switch of the suite's programs (#36 item
//! 6, the testbed path): the forwarding (each worker's IPv4 address to its port) and, for a
//! pipeline with SwitchML's job tables ([`program::switchml_with_job_tables`]), the job as the
//! SwitchML release's controller writes it (p4app-switchML `dev_root/controller/
//! udp_receiver.py`, `udp_sender.py`, `pre.py`): one `receive_udp` entry per worker (its source
//! MAC, source IPv4 and the release's UDP base port under its mask to `set_bitmap`), one
//! `dst_addr` entry per worker id, and the job's multicast group with a replica per worker
//! (instance = worker id, on the worker's port). [`crate::dataplane::job_table`] reads back
//! exactly what [`job_updates`] writes. Sans-IO: the harness's `p4switch` sends them.
//!
//! Bytestrings are written in P4Runtime's canonical form (leading zero bytes left out, zero as
//! one byte), as p4runtime-shell writes them.

use crate::dataplane::DataplaneError;
use crate::pb::p4::config::v1::P4Info;
use crate::pb::p4::v1 as p4;
use crate::program;
use inabench_ina::switchml::table::{JobTable, Masked, Rule, RuleAction};
use std::collections::BTreeMap;

/// One worker of a job as the switch's tables name it: the source MAC and IPv4 address its
/// frames carry and the switch port it is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobWorker {
    pub mac: [u8; 6],
    pub ip: [u8; 4],
    pub port: u32,
}

/// The multicast group the job's results go to (the release's session 0 writes its job's
/// group; ours is group 1, the group the forwarding floods to as well).
pub const JOB_GROUP: u32 = 1;

/// The addresses the suite's SwitchML workers put in their frames (systems/ina's `switchml`:
/// network 1, worker `w` at `mac_of(1, w)` and `ip_of(1, w)`), worker `w` on switch port `w`:
/// the synthetic address plan of a run whose testbed states no per-host address.
pub fn switchml_workers(n: usize) -> Vec<JobWorker> {
    (0..n)
        .map(|w| JobWorker {
            mac: inabench_wire::node::mac_of(1, w as u32),
            ip: inabench_wire::node::ip_of(1, w as u32),
            port: w as u32,
        })
        .collect()
}

/// The workers of an `n`-worker job at a testbed's addresses (`plan`'s worker `w`, its MAC
/// and IPv4 address as the testbed file states them, from `inabench_workloads`'s
/// `address_plan`), worker `w` on switch port `w`: what a testbed run writes when its hosts
/// give their data addresses. A plan naming fewer than `n` workers is refused.
pub fn switchml_workers_at(
    plan: &inabench_ina::common::AddressPlan,
    n: usize,
) -> Result<Vec<JobWorker>, inabench_ina::common::AddressError> {
    plan.covers(n)?;
    (0..n)
        .map(|w| {
            plan.worker(w)
                .map(|a| JobWorker {
                    mac: a.mac,
                    ip: a.ipv4,
                    port: w as u32,
                })
                .ok_or(inabench_ina::common::AddressError::TooFew { have: w, need: n })
        })
        .collect()
}

/// The switch's own address an `n`-worker job's results leave from when the run has no
/// testbed address for it: SwitchML's synthetic switch address (node `n`: 02:00:00:01:00:<n+1>,
/// 10.0.1.<n+1>), the address the suite's SwitchML workers send to.
pub fn switchml_switch(n: usize) -> ([u8; 6], [u8; 4]) {
    inabench_ina::switchml::synthetic_address(n)
}

/// The switch's own address in `plan` (the testbed's switch host's data address), else
/// [`switchml_switch`]`(n)`; with whether it is the plan's.
pub fn switchml_switch_at(
    plan: Option<&inabench_ina::common::AddressPlan>,
    n: usize,
) -> (([u8; 6], [u8; 4]), bool) {
    match plan.and_then(|p| p.switch.as_ref()) {
        Some(s) => ((s.mac, s.ipv4), true),
        None => (switchml_switch(n), false),
    }
}

fn be(b: &[u8]) -> u64 {
    b.iter().fold(0u64, |a, x| a << 8 | u64::from(*x))
}

/// The job a SwitchML controller writes for `workers` (worker `w` is the `w`-th): each worker's
/// `receive_udp` rule (its MAC and IPv4 exact, the release's UDP port 0xbee0 under mask
/// 0xfff0, which takes the suite's `switchml::UDP_PORT`), `set_bitmap` with id `w`, bit
/// `1 << w`, the count and group [`JOB_GROUP`]; its results to its own addresses; the group's
/// replicas on the workers' ports. `slots` and `lanes` are the pipeline's (not written: its
/// register arrays). No switch address: the caller sets [`JobTable::switch`] (the harness
/// always does, [`switchml_switch_at`]).
pub fn switchml_job(workers: &[JobWorker], slots: usize, lanes: usize) -> JobTable {
    let n = workers.len() as u16;
    JobTable {
        rules: workers
            .iter()
            .enumerate()
            .map(|(w, a)| Rule {
                src_mac: Masked::exact(be(&a.mac), 48),
                src_ip: Masked::exact(be(&a.ip), 32),
                udp_dst_port: Masked {
                    value: u64::from(inabench_ina::switchml::UDP_PORT),
                    mask: 0xfff0,
                },
                priority: 10,
                action: RuleAction::Worker {
                    id: w as u16,
                    num_workers: n,
                    mgid: JOB_GROUP,
                    bitmap: 1u32 << w,
                },
            })
            .collect(),
        results: workers
            .iter()
            .enumerate()
            .map(|(w, a)| (w as u16, (a.mac, a.ip)))
            .collect(),
        groups: BTreeMap::from([(
            JOB_GROUP,
            workers
                .iter()
                .enumerate()
                .map(|(w, a)| (w as u32, a.port))
                .collect(),
        )]),
        slots,
        lanes,
        switch: None,
    }
}

/// `x` as a canonical P4Runtime bytestring of a field at most `bytes` wide.
fn canonical(x: u64, bytes: usize) -> Vec<u8> {
    let b = x.to_be_bytes();
    let b = &b[8 - bytes.min(8)..];
    let zeros = b.iter().take_while(|v| **v == 0).count().min(b.len() - 1);
    b[zeros..].to_vec()
}

fn missing(what: &str) -> DataplaneError {
    DataplaneError::Missing(what.to_string())
}

fn insert(entity: p4::entity::Entity) -> p4::Update {
    crate::client::update(p4::update::Type::Insert, entity)
}

fn action(id: u32, params: Vec<p4::action::Param>) -> Option<p4::TableAction> {
    Some(p4::TableAction {
        r#type: Some(p4::table_action::Type::Action(p4::Action {
            action_id: id,
            params,
        })),
    })
}

/// Inserts of the forwarding entries of `workers` (`forward_table`: each worker's IPv4
/// address, exact, to `forward(its port)`), with `info`'s ids.
pub fn forwarding_updates(
    info: &P4Info,
    workers: &[JobWorker],
) -> Result<Vec<p4::Update>, DataplaneError> {
    let prog = program::switchml(1);
    let (t, fwd) = (&prog.tables[0], &prog.actions[0].name);
    let ids = crate::p4info::Ids(info);
    let table = ids.table(&t.name).ok_or_else(|| missing(&t.name))?;
    let field = ids
        .match_field(&t.name, &t.fields[0].name)
        .ok_or_else(|| missing(&t.fields[0].name))?;
    let forward = ids.action(fwd).ok_or_else(|| missing(fwd))?;
    let port = ids
        .param(fwd, "port")
        .ok_or_else(|| missing("forward's port"))?;
    Ok(workers
        .iter()
        .map(|w| {
            insert(p4::entity::Entity::TableEntry(p4::TableEntry {
                table_id: table,
                r#match: vec![p4::FieldMatch {
                    field_id: field,
                    field_match_type: Some(p4::field_match::FieldMatchType::Exact(
                        p4::field_match::Exact {
                            value: canonical(be(&w.ip), 4),
                        },
                    )),
                }],
                action: action(
                    forward,
                    vec![p4::action::Param {
                        param_id: port,
                        value: canonical(u64::from(w.port), 2),
                    }],
                ),
                ..Default::default()
            }))
        })
        .collect())
}

/// Inserts that write `table` (its rules, result addresses and groups; not its pool, the
/// pipeline's) into a pipeline `info` with SwitchML's job tables, with `info`'s ids, and, where
/// it names the switch's own address, a modify of `switch_mac_and_ip`'s default entry to
/// `set_switch_mac_and_ip` (as the release's controller sets it): what
/// [`crate::dataplane::job_table`] reads back as the same job. A pipeline without the tables is
/// [`DataplaneError::Missing`].
pub fn job_updates(info: &P4Info, table: &JobTable) -> Result<Vec<p4::Update>, DataplaneError> {
    let ids = crate::p4info::Ids(info);
    let (rx, tx) = ("SwitchMLIngress.receive_udp", "SwitchMLEgress.dst_addr");
    let (set_bitmap, drop, set_dst) = (
        "SwitchMLIngress.set_bitmap",
        "SwitchMLIngress.drop",
        "SwitchMLEgress.set_dst_addr",
    );
    let rx_id = ids.table(rx).ok_or_else(|| missing(rx))?;
    let tx_id = ids.table(tx).ok_or_else(|| missing(tx))?;
    let field = |t: &str, f: &str| {
        ids.match_field(t, f)
            .ok_or_else(|| missing(&format!("{t}'s {f}")))
    };
    let rx_fields = [
        field(rx, "hdr.ethernet.src_addr")?,
        field(rx, "hdr.ipv4.src_addr")?,
        field(rx, "hdr.udp.dst_port")?,
    ];
    let tx_field = field(tx, "eg_md.switchml_md.worker_id")?;
    let param = |a: &str, p: &str| {
        ids.param(a, p)
            .ok_or_else(|| missing(&format!("{a}'s {p}")))
    };
    let mut out = Vec::new();
    for r in &table.rules {
        let keys = [(r.src_mac, 6), (r.src_ip, 4), (r.udp_dst_port, 2)];
        let r#match = keys
            .iter()
            .zip(rx_fields)
            // a field whose mask is zero is P4Runtime's don't-care: left out
            .filter(|((m, _), _)| m.mask != 0)
            .map(|((m, bytes), id)| p4::FieldMatch {
                field_id: id,
                field_match_type: Some(p4::field_match::FieldMatchType::Ternary(
                    p4::field_match::Ternary {
                        value: canonical(m.value & m.mask, *bytes),
                        mask: canonical(m.mask, *bytes),
                    },
                )),
            })
            .collect();
        let act = match r.action {
            RuleAction::Worker {
                id,
                num_workers,
                mgid,
                bitmap,
            } => {
                let a = ids.action(set_bitmap).ok_or_else(|| missing(set_bitmap))?;
                let p = |name: &str, v: u64, bytes: usize| {
                    Ok::<_, DataplaneError>(p4::action::Param {
                        param_id: param(set_bitmap, name)?,
                        value: canonical(v, bytes),
                    })
                };
                action(
                    a,
                    vec![
                        p("mgid", u64::from(mgid), 2)?,
                        p("worker_id", u64::from(id), 2)?,
                        p("num_workers", u64::from(num_workers), 1)?,
                        p("worker_bitmap", u64::from(bitmap), 4)?,
                    ],
                )
            }
            RuleAction::Drop => action(ids.action(drop).ok_or_else(|| missing(drop))?, vec![]),
        };
        out.push(insert(p4::entity::Entity::TableEntry(p4::TableEntry {
            table_id: rx_id,
            r#match,
            action: act,
            priority: r.priority,
            ..Default::default()
        })));
    }
    let set_dst_id = ids.action(set_dst).ok_or_else(|| missing(set_dst))?;
    for (w, (mac, ip)) in &table.results {
        out.push(insert(p4::entity::Entity::TableEntry(p4::TableEntry {
            table_id: tx_id,
            r#match: vec![p4::FieldMatch {
                field_id: tx_field,
                field_match_type: Some(p4::field_match::FieldMatchType::Exact(
                    p4::field_match::Exact {
                        value: canonical(u64::from(*w), 2),
                    },
                )),
            }],
            action: action(
                set_dst_id,
                vec![
                    p4::action::Param {
                        param_id: param(set_dst, "eth_dst_addr")?,
                        value: canonical(be(mac), 6),
                    },
                    p4::action::Param {
                        param_id: param(set_dst, "ip_dst_addr")?,
                        value: canonical(be(ip), 4),
                    },
                ],
            ),
            ..Default::default()
        })));
    }
    if let Some((mac, ip)) = table.switch {
        let (t, set) = (
            "SwitchMLEgress.switch_mac_and_ip",
            "SwitchMLEgress.set_switch_mac_and_ip",
        );
        out.push(crate::client::update(
            p4::update::Type::Modify,
            p4::entity::Entity::TableEntry(p4::TableEntry {
                table_id: ids.table(t).ok_or_else(|| missing(t))?,
                is_default_action: true,
                action: action(
                    ids.action(set).ok_or_else(|| missing(set))?,
                    vec![
                        p4::action::Param {
                            param_id: param(set, "switch_mac")?,
                            value: canonical(be(&mac), 6),
                        },
                        p4::action::Param {
                            param_id: param(set, "switch_ip")?,
                            value: canonical(be(&ip), 4),
                        },
                    ],
                ),
                ..Default::default()
            }),
        ));
    }
    for (id, replicas) in &table.groups {
        out.push(group(*id, replicas));
    }
    Ok(out)
}

/// An insert of multicast group `id` with `replicas` (instance, egress port).
pub fn group(id: u32, replicas: &[(u32, u32)]) -> p4::Update {
    insert(p4::entity::Entity::PacketReplicationEngineEntry(
        p4::PacketReplicationEngineEntry {
            r#type: Some(
                p4::packet_replication_engine_entry::Type::MulticastGroupEntry(
                    p4::MulticastGroupEntry {
                        multicast_group_id: id,
                        replicas: replicas
                            .iter()
                            .map(|(instance, port)| p4::Replica {
                                port_kind: Some(p4::replica::PortKind::EgressPort(*port)),
                                instance: *instance,
                            })
                            .collect(),
                    },
                ),
            ),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::job_table;
    use std::collections::HashMap;

    /// What a switch holds after `updates` (all inserts): table id -> entries, groups.
    #[allow(clippy::type_complexity)]
    fn held(
        updates: &[p4::Update],
    ) -> (
        HashMap<u32, BTreeMap<Vec<u8>, p4::TableEntry>>,
        BTreeMap<u32, p4::MulticastGroupEntry>,
    ) {
        let (mut tables, mut groups) = (HashMap::new(), BTreeMap::new());
        for (k, u) in updates.iter().enumerate() {
            // inserts, and a modify of a default entry
            let default = matches!(
                u.entity.as_ref().and_then(|e| e.entity.as_ref()),
                Some(p4::entity::Entity::TableEntry(t)) if t.is_default_action
            );
            let want = if default {
                p4::update::Type::Modify
            } else {
                p4::update::Type::Insert
            };
            assert_eq!(u.r#type, want as i32);
            match u.entity.as_ref().and_then(|e| e.entity.as_ref()) {
                Some(p4::entity::Entity::TableEntry(t)) => {
                    tables
                        .entry(t.table_id)
                        .or_insert_with(BTreeMap::new)
                        .insert((k as u32).to_be_bytes().to_vec(), t.clone());
                }
                Some(p4::entity::Entity::PacketReplicationEngineEntry(
                    p4::PacketReplicationEngineEntry {
                        r#type:
                            Some(p4::packet_replication_engine_entry::Type::MulticastGroupEntry(g)),
                    },
                )) => {
                    groups.insert(g.multicast_group_id, g.clone());
                }
                other => panic!("an update of {other:?}"),
            }
        }
        (tables, groups)
    }

    #[test]
    fn a_written_job_reads_back_as_the_same_job() {
        let info = program::switchml_with_job_tables(64).p4info();
        let mut workers = switchml_workers(3);
        // a worker whose address has a zero byte (canonical form) and a port of 0x1ff
        workers[2] = JobWorker {
            mac: [0, 0x1b, 0x21, 0, 0, 7],
            ip: [0, 9, 0, 1],
            port: 0x1ff,
        };
        let mut want = switchml_job(&workers, 64, 48);
        // the switch's own address, with a zero byte
        want.switch = Some(([2, 0, 0, 0xab, 0, 1], [172, 16, 0, 254]));
        let mut updates = forwarding_updates(&info, &workers).expect("forwarding");
        assert_eq!(updates.len(), 3);
        updates.extend(job_updates(&info, &want).expect("job"));
        assert_eq!(updates.len(), 3 + 3 + 3 + 1 + 1);
        let (tables, groups) = held(&updates);
        let mut got = job_table(&info, &tables, &groups).expect("reads back");
        got.rules.sort_by_key(|r| match r.action {
            RuleAction::Worker { id, .. } => id,
            RuleAction::Drop => u16::MAX,
        });
        assert_eq!(got, want);
        // no switch address written: none read back (the switch then uses the synthetic one)
        let mut bare = want.clone();
        bare.switch = None;
        let (tables, groups) = held(&job_updates(&info, &bare).expect("job"));
        assert_eq!(
            job_table(&info, &tables, &groups).expect("reads").switch,
            None
        );
        let (tables, groups) = held(&updates);
        // and the forwarding: each worker's IPv4 to its port
        let f = crate::dataplane::Forwarding::from_parts(&info, &tables, &groups).expect("fwd");
        assert_eq!(
            f.routes.get(&[0, 9, 0, 1]),
            Some(&crate::dataplane::Route::Forward(0x1ff))
        );
        assert_eq!(f.groups.get(&JOB_GROUP), Some(&vec![0, 1, 0x1ff]));
        // canonical bytestrings: 0 is one byte, leading zeros left out
        assert_eq!(canonical(0, 2), vec![0]);
        assert_eq!(canonical(0x0009_0001, 4), vec![9, 0, 1]);
        // a pipeline without the job tables (the forwarding-only program) cannot take a job
        assert_eq!(
            job_updates(&program::switchml(64).p4info(), &want),
            Err(DataplaneError::Missing(
                "SwitchMLIngress.receive_udp".into()
            ))
        );
        // the synthetic plan is the addresses SwitchML's workers send from
        let c = inabench_ina::common::AllReduceConfig {
            workers: 3,
            elements: 48,
            seed: 1,
            line_rate_bps: 100e9,
            mtu: 1500,
            timeout_ns: 1_000_000,
            knobs: vec![],
        };
        use inabench_ina::common::System;
        let built = inabench_ina::switchml::SwitchMl.build(&c).expect("build");
        for (w, mut wk) in built.workers.into_iter().enumerate() {
            let f = wk.poll_transmit(0).expect("a frame").bytes;
            let a = switchml_workers(3)[w];
            assert_eq!(
                (&f[6..12], &f[26..30]),
                (&a.mac[..], &a.ip[..]),
                "worker {w}"
            );
        }
    }

    /// A testbed run's job names the testbed's worker addresses: SwitchML's workers built at a
    /// plan of addresses in no rank order (`build_at`) sum exactly through the switch the job
    /// written for that plan configures, its results to each worker's own addresses; the job
    /// of the synthetic addresses matches none of their frames, and aggregates nothing.
    #[test]
    fn a_testbeds_worker_addresses_make_the_job_and_only_they_match_it() {
        use inabench_fabric::Endpoint;
        use inabench_fabric::addresses::{AddressPlan, HostAddress, ipv4_gid};
        use inabench_ina::common::{AllReduceConfig, System, reference_sum};
        use inabench_ina::switchml::table::TableSwitch;
        let host = |m: u8, ipv4: [u8; 4]| HostAddress {
            interface: None,
            mac: [0x52, 0x54, 0, 0xab, 0, m],
            ipv4,
            gid: ipv4_gid(ipv4),
        };
        let plan = AddressPlan::new(
            vec![
                host(0x42, [192, 168, 7, 42]),
                host(0x09, [172, 16, 0, 9]),
                host(0x03, [192, 168, 7, 3]),
            ],
            Some(host(0xfe, [172, 16, 0, 254])),
        )
        .expect("plan");
        let workers = switchml_workers_at(&plan, 3).expect("3 workers");
        assert_eq!(
            workers.iter().map(|w| (w.ip, w.port)).collect::<Vec<_>>(),
            vec![
                ([192, 168, 7, 42], 0),
                ([172, 16, 0, 9], 1),
                ([192, 168, 7, 3], 2)
            ]
        );
        assert_eq!(
            switchml_workers_at(&plan, 4)
                .expect_err("too few")
                .to_string(),
            "the address plan has 3 workers; the job has 4"
        );
        let c = AllReduceConfig {
            workers: 3,
            elements: 48 * 20 + 5,
            seed: 3,
            line_rate_bps: 100e9,
            mtu: 1500,
            timeout_ns: 1_000_000,
            knobs: vec![("payload_bytes".into(), 192.0)],
        };
        // run the plan's workers through a switch by hand: worker w on port w
        let run = |sw: &mut TableSwitch| {
            let mut ws = inabench_ina::switchml::SwitchMl
                .build_at(&c, Some(&plan))
                .expect("build")
                .workers;
            for now in 0..10_000u64 {
                let mut moved = false;
                for (w, wk) in ws.iter_mut().enumerate() {
                    while let Some(t) = wk.poll_transmit(now) {
                        moved = true;
                        sw.handle_packet(now, w as u32, &t.bytes);
                    }
                }
                while let Some(t) = sw.poll_transmit(now) {
                    moved = true;
                    let w = t.to as usize;
                    assert_eq!(t.bytes[..6], workers[w].mac, "to worker {w}'s MAC");
                    assert_eq!(t.bytes[30..34], workers[w].ip, "to worker {w}'s address");
                    ws[w].handle_packet(now, 3, &t.bytes);
                }
                if !moved {
                    break;
                }
            }
            ws.iter().map(|w| w.result()).collect::<Vec<_>>()
        };
        let mut at_plan = TableSwitch::new(3, &switchml_job(&workers, 128, 48)).expect("job");
        let want = reference_sum(c.seed, 3, c.elements);
        assert!(
            run(&mut at_plan)
                .iter()
                .all(|r| r.as_deref() == Some(&want[..]))
        );
        let mut synthetic =
            TableSwitch::new(3, &switchml_job(&switchml_workers(3), 128, 48)).expect("job");
        assert!(run(&mut synthetic).iter().all(|r| r.is_none()));
        let counters: std::collections::HashMap<_, _> = synthetic.counters().into_iter().collect();
        assert_eq!(counters.get("aggregated_in"), Some(&0));
        assert!(counters.get("misses").is_some_and(|m| *m >= 3 * 21));
    }
}
