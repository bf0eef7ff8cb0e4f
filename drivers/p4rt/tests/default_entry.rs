//! A table's default entry over gRPC (P4Runtime's `is_default_action`), as SwitchML's
//! controller sets the switch's own address (`SwitchMLEgress.switch_mac_and_ip`, a keyless
//! table whose only action is default-only; p4app-switchML `dev_root/controller/
//! udp_sender.py`): it is only modified, never inserted or deleted; it has no match and no
//! priority; the keyless table takes no match entry; a default-only action is refused on a
//! match entry; a wildcard read leaves it out and a read that asks for it returns it; a modify
//! without an action resets it. The job the entries make sends its results from it, and from
//! SwitchML's synthetic switch address (said in the data plane's note) once it is reset.

use inabench_p4rt::P4rtError;
use inabench_p4rt::client::{Controller, update};
use inabench_p4rt::dataplane::DataPlane;
use inabench_p4rt::entries;
use inabench_p4rt::p4info::Ids;
use inabench_p4rt::pb::p4::v1 as p4;
use inabench_p4rt::program;
use inabench_p4rt::server::{SoftSwitch, spawn_local};
use p4::entity::Entity as E;
use p4::update::Type as T;

const SW: &str = "SwitchMLEgress.switch_mac_and_ip";
const SET: &str = "SwitchMLEgress.set_switch_mac_and_ip";

fn code(e: P4rtError) -> tonic::Code {
    match e {
        P4rtError::Rpc { status, .. } => status.code(),
        other => panic!("not an RPC error: {other}"),
    }
}

#[tokio::test]
async fn the_switch_address_is_a_default_entry_only_modified_and_read_when_asked() {
    let info = program::switchml_with_job_tables(128).p4info();
    let ids = Ids(&info);
    let (table, set) = (
        ids.table(SW).expect("table"),
        ids.action(SET).expect("action"),
    );
    let entry = |default: bool, mac: &[u8], ip: &[u8]| {
        E::TableEntry(p4::TableEntry {
            table_id: table,
            is_default_action: default,
            action: Some(p4::TableAction {
                r#type: Some(p4::table_action::Type::Action(p4::Action {
                    action_id: set,
                    params: vec![
                        p4::action::Param {
                            param_id: ids.param(SET, "switch_mac").expect("param"),
                            value: mac.to_vec(),
                        },
                        p4::action::Param {
                            param_id: ids.param(SET, "switch_ip").expect("param"),
                            value: ip.to_vec(),
                        },
                    ],
                })),
            }),
            ..Default::default()
        })
    };
    let mine = ([0x52, 0x54, 0, 0xab, 0, 0xfe], [172, 16, 0, 254]);
    let (sw, _dp) = SoftSwitch::new(1);
    let addr = spawn_local(sw.clone()).await.expect("serve").to_string();
    let mut c = Controller::connect(&addr, 1, (0, 10))
        .await
        .expect("primary");
    c.set_pipeline(info.clone(), vec![], 1)
        .await
        .expect("pipeline");

    // refused: an insert or a delete of the default entry, a match entry in the keyless table
    // (the default-only action on it), a default entry with a priority
    for (kind, e, what) in [
        (
            T::Insert,
            entry(true, &mine.0, &mine.1),
            "insert of the default",
        ),
        (
            T::Delete,
            entry(true, &mine.0, &mine.1),
            "delete of the default",
        ),
        (T::Insert, entry(false, &mine.0, &mine.1), "a match entry"),
    ] {
        let err = c.write(vec![update(kind, e)]).await.expect_err(what);
        assert_eq!(code(err), tonic::Code::InvalidArgument, "{what}");
    }
    let E::TableEntry(mut prio) = entry(true, &mine.0, &mine.1) else {
        unreachable!()
    };
    prio.priority = 5;
    let err = c
        .write(vec![update(T::Modify, E::TableEntry(prio))])
        .await
        .expect_err("a default entry with a priority");
    assert_eq!(code(err), tonic::Code::InvalidArgument);

    // a job of two workers and the switch's address, as the harness writes them
    let workers = entries::switchml_workers(2);
    let mut job = entries::switchml_job(&workers, 128, 48);
    job.switch = Some(mine);
    let mut updates = entries::forwarding_updates(&info, &workers).expect("forwarding");
    updates.extend(entries::job_updates(&info, &job).expect("job"));
    c.write(updates).await.expect("written");
    let read_default = p4::Entity {
        entity: Some(E::TableEntry(p4::TableEntry {
            table_id: table,
            is_default_action: true,
            ..Default::default()
        })),
    };
    let wildcard = p4::Entity {
        entity: Some(E::TableEntry(p4::TableEntry::default())),
    };
    let got = c.read(vec![read_default.clone()]).await.expect("read");
    assert_eq!(got.len(), 1, "{got:?}");
    let all = c.read(vec![wildcard.clone()]).await.expect("read");
    // 2 forwarding, 2 receive_udp, 2 dst_addr entries: not the default one
    assert_eq!(all.len(), 6, "{all:?}");
    assert_eq!(sw.job_table().expect("job").switch, Some(mine));
    let dp = DataPlane::of(&sw, 9).expect("a job");
    assert_eq!((dp.source(), dp.note()), (Some(mine), None));

    // modified again, in canonical form (leading zero bytes left out): 00:00:00:ab:00:01
    c.write(vec![update(
        T::Modify,
        entry(true, &[0xab, 0, 1], &[10, 0, 0, 7]),
    )])
    .await
    .expect("modified");
    assert_eq!(
        sw.job_table().expect("job").switch,
        Some(([0, 0, 0, 0xab, 0, 1], [10, 0, 0, 7]))
    );

    // a modify without an action resets it: the synthetic address (node 2), and said
    c.write(vec![update(
        T::Modify,
        E::TableEntry(p4::TableEntry {
            table_id: table,
            is_default_action: true,
            ..Default::default()
        }),
    )])
    .await
    .expect("reset");
    assert!(c.read(vec![read_default]).await.expect("read").is_empty());
    assert_eq!(sw.job_table().expect("job").switch, None);
    let dp = DataPlane::of(&sw, 9).expect("a job");
    let synthetic = inabench_ina::switchml::synthetic_address(2);
    assert_eq!(dp.source(), Some(synthetic));
    assert_eq!(
        dp.note().map(|n| n.to_string()).as_deref(),
        Some(
            "no switch_mac_and_ip entry is written: the switch's results leave from SwitchML's synthetic switch address 02:00:00:01:00:03 10.0.1.3 (node 2 of the job), not one its controller set"
        )
    );
}
