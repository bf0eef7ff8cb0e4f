//! A testbed's P4Runtime switch, programmed before a run: for each system of the plan that has
//! a switch program description (drivers/p4rt `program`), push its P4Info as the pipeline,
//! install the forwarding entries (one per worker) and the multicast group the results go to.
//! The data plane of our runs stays the software switch model; what goes through the driver is
//! the control plane a Tofino run needs, and the manifest says so.

use anyhow::{Context, Result, anyhow};
use inabench_p4rt::client::{Controller, update};
use inabench_p4rt::pb::p4::v1 as p4;
use inabench_p4rt::program;

/// The program description of a system, if it runs on a programmable switch here (the P4
/// driver lists the programs it can describe).
pub fn program_of(system: &str) -> Option<program::Program> {
    program::for_system(system)
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
    let programmed: Result<Vec<String>> = rt.block_on(async {
        let mut lines = Vec::new();
        let mut c = Controller::connect(&tb.address, tb.device_id, (tb.election_id[0], tb.election_id[1]))
            .await
            .context("the testbed's P4Runtime switch")?;
        for s in systems {
            let Some(prog) = program_of(s) else {
                lines.push(format!(
                    "p4runtime {} device {}: no switch program for `{s}` (its switch side runs on the software model only)",
                    tb.address, tb.device_id
                ));
                continue;
            };
            let (info, device_config, source) = pipeline_of(tb, s, &prog)?;
            let ids = inabench_p4rt::p4info::Ids(&info);
            let (tname, aname) = (&prog.tables[0].name, &prog.actions[0].name);
            let table = ids
                .table(tname)
                .ok_or_else(|| anyhow!("the P4Info of `{s}` has no table `{tname}`"))?;
            let forward = ids
                .action(aname)
                .ok_or_else(|| anyhow!("the P4Info of `{s}` has no action `{aname}`"))?;
            let field = ids
                .match_field(tname, &prog.tables[0].fields[0].name)
                .unwrap_or(1);
            let port = ids.param(aname, "port").unwrap_or(1);
            c.set_pipeline(info, device_config, 1)
                .await
                .map_err(|e| anyhow!("pushing `{}`: {e}", prog.name))?;
            let mut updates: Vec<p4::Update> = (0..workers)
                .map(|w| {
                    update(
                        p4::update::Type::Insert,
                        p4::entity::Entity::TableEntry(p4::TableEntry {
                            table_id: table,
                            r#match: vec![p4::FieldMatch {
                                field_id: field,
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
                                        param_id: port,
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
                "p4runtime {} device {}: pipeline `{}` ({} registers, {} table; P4Info: {source}) pushed, {} forwarding entries read back, multicast group 1 over {workers} ports; the data plane is the software switch model",
                tb.address,
                tb.device_id,
                prog.name,
                prog.registers.len(),
                prog.tables.len(),
                entries.len()
            ));
        }
        Ok(lines)
    });
    // every failure names the switch's address (the client's own errors already do)
    programmed.map_err(|e| {
        if format!("{e:#}").contains(&tb.address) {
            e
        } else {
            e.context(format!(
                "the testbed's P4Runtime switch at {} (device {})",
                tb.address, tb.device_id
            ))
        }
    })
}

/// The P4Info and device config to push for `system`: the testbed's files when it names them
/// (text-format or binary P4Info, checked against the suite's description of the program),
/// else the suite's description. Relative paths are taken from the working directory.
fn pipeline_of(
    tb: &crate::testbed::P4Runtime,
    system: &str,
    prog: &program::Program,
) -> Result<(inabench_p4rt::pb::p4::config::v1::P4Info, Vec<u8>, String)> {
    let given = tb.programs.get(system);
    let Some(path) = given.and_then(|p| p.p4info.as_deref()) else {
        if let Some(dc) = given.and_then(|p| p.device_config.as_deref()) {
            anyhow::bail!(
                "the testbed gives `{system}` a device config ({dc}) but no p4info: name both"
            );
        }
        return Ok((prog.p4info(), Vec::new(), "the suite's description".into()));
    };
    let l = inabench_p4rt::p4info::load(std::path::Path::new(path))?;
    inabench_p4rt::p4info::check(&l.info, prog).map_err(|e| {
        anyhow!(
            "{path} does not match the suite's `{}` program: {e}",
            prog.name
        )
    })?;
    let device_config = match given.and_then(|p| p.device_config.as_deref()) {
        Some(d) => {
            std::fs::read(d).with_context(|| format!("cannot read the device config {d}"))?
        }
        None => Vec::new(),
    };
    let dropped = if l.dropped.is_empty() {
        String::new()
    } else {
        format!(", not carried: {}", l.dropped.join(", "))
    };
    let n = device_config.len();
    Ok((
        l.info,
        device_config,
        format!("the testbed's {path}, {n} bytes of device config{dropped}"),
    ))
}
