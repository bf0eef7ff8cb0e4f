//! A testbed's P4Runtime switch, programmed before a run: for each system of the plan that has
//! a switch program description (drivers/p4rt `program`), push its P4Info as the pipeline,
//! install the forwarding entries (one per worker) and the multicast group the results go to.
//! The data plane of our runs stays the software switch model; what goes through the driver is
//! the control plane a Tofino run needs, and the manifest says so.

use anyhow::{Context, Result, anyhow};
use inabench_p4rt::client::{Controller, update};
use inabench_p4rt::pb::p4::v1 as p4;
use inabench_p4rt::program;

/// The program description of a system, if it runs on a programmable switch here.
pub fn program_of(system: &str) -> Option<program::Program> {
    match system {
        "switchml" => Some(program::switchml(128)),
        _ => None,
    }
}

/// Program `systems` on the switch at `tb`'s P4Runtime address for `workers` workers; returns
/// one line per system for the manifest's drivers.
pub fn program_switch(
    tb: &crate::testbed::P4Runtime,
    systems: &[String],
    workers: usize,
) -> Result<Vec<String>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the P4Runtime client's runtime")?;
    rt.block_on(async {
        let mut lines = Vec::new();
        let mut c = Controller::connect(&tb.address, tb.device_id, (tb.election_id[0], tb.election_id[1]))
            .await
            .map_err(|e| anyhow!("the testbed's P4Runtime switch: {e}"))?;
        for s in systems {
            let Some(prog) = program_of(s) else {
                lines.push(format!(
                    "p4runtime {} device {}: no switch program for `{s}` (its switch side runs on the software model only)",
                    tb.address, tb.device_id
                ));
                continue;
            };
            let info = prog.p4info();
            c.set_pipeline(info, Vec::new(), 1)
                .await
                .map_err(|e| anyhow!("pushing `{}`: {e}", prog.name))?;
            let table = program::id(program::TABLE, 0);
            let forward = program::id(program::ACTION, 0);
            let mut updates: Vec<p4::Update> = (0..workers)
                .map(|w| {
                    update(
                        p4::update::Type::Insert,
                        p4::entity::Entity::TableEntry(p4::TableEntry {
                            table_id: table,
                            r#match: vec![p4::FieldMatch {
                                field_id: 1,
                                field_match_type: Some(p4::field_match::FieldMatchType::Exact(
                                    p4::field_match::Exact {
                                        value: vec![10, 0, 1, (w + 1) as u8],
                                    },
                                )),
                            }],
                            action: Some(p4::TableAction {
                                r#type: Some(p4::table_action::Type::Action(p4::Action {
                                    action_id: forward,
                                    params: vec![p4::action::Param {
                                        param_id: 1,
                                        value: (w as u16).to_be_bytes().to_vec(),
                                    }],
                                })),
                            }),
                            ..Default::default()
                        }),
                    )
                })
                .collect();
            updates.push(update(
                p4::update::Type::Insert,
                p4::entity::Entity::PacketReplicationEngineEntry(p4::PacketReplicationEngineEntry {
                    r#type: Some(p4::packet_replication_engine_entry::Type::MulticastGroupEntry(
                        p4::MulticastGroupEntry {
                            multicast_group_id: 1,
                            replicas: (0..workers)
                                .map(|w| p4::Replica {
                                    port_kind: Some(p4::replica::PortKind::EgressPort(w as u32)),
                                    instance: 1,
                                })
                                .collect(),
                        },
                    )),
                }),
            ));
            c.write(updates)
                .await
                .map_err(|e| anyhow!("installing `{}`'s entries: {e}", prog.name))?;
            // read back what the switch holds
            let entries = c
                .read(vec![p4::Entity {
                    entity: Some(p4::entity::Entity::TableEntry(p4::TableEntry {
                        table_id: table,
                        ..Default::default()
                    })),
                }])
                .await
                .map_err(|e| anyhow!("reading back `{}`'s entries: {e}", prog.name))?;
            lines.push(format!(
                "p4runtime {} device {}: pipeline `{}` ({} registers, {} table) pushed, {} forwarding entries read back, multicast group 1 over {workers} ports; the data plane is the software switch model",
                tb.address,
                tb.device_id,
                prog.name,
                prog.registers.len(),
                prog.tables.len(),
                entries.len()
            ));
        }
        Ok(lines)
    })
}
