//! The P4Runtime driver against our software switch's server, end to end over gRPC.

use inabench_p4rt::P4rtError;
use inabench_p4rt::client::{Controller, update};
use inabench_p4rt::pb::p4::v1 as p4;
use inabench_p4rt::program::{self, ACTION, REGISTER, TABLE, id};
use inabench_p4rt::server::{SoftSwitch, spawn_local};
use p4::entity::Entity as E;
use p4::update::Type as T;

fn entry(dst: [u8; 4], port: u16) -> E {
    E::TableEntry(p4::TableEntry {
        table_id: id(TABLE, 0),
        r#match: vec![p4::FieldMatch {
            field_id: 1,
            field_match_type: Some(p4::field_match::FieldMatchType::Exact(
                p4::field_match::Exact {
                    value: dst.to_vec(),
                },
            )),
        }],
        action: Some(p4::TableAction {
            r#type: Some(p4::table_action::Type::Action(p4::Action {
                action_id: id(ACTION, 0),
                params: vec![p4::action::Param {
                    param_id: 1,
                    value: port.to_be_bytes().to_vec(),
                }],
            })),
        }),
        ..Default::default()
    })
}

fn code(e: P4rtError) -> tonic::Code {
    match e {
        P4rtError::Rpc { status, .. } => status.code(),
        other => panic!("not an RPC error: {other}"),
    }
}

#[tokio::test]
async fn election_pipeline_writes_reads_and_packets() {
    let (sw, mut dataplane) = SoftSwitch::new(1);
    let addr = spawn_local(sw.clone()).await.expect("serve").to_string();

    let mut c = Controller::connect(&addr, 1, (0, 10))
        .await
        .expect("primary");
    assert_eq!(
        c.capabilities().await.expect("caps"),
        inabench_p4rt::API_VERSION
    );
    // nothing works before a pipeline is set
    let e = c
        .write(vec![update(T::Insert, entry([10, 0, 1, 1], 1))])
        .await
        .expect_err("no pipeline");
    assert_eq!(code(e), tonic::Code::FailedPrecondition);

    let prog = program::switchml(128);
    c.set_pipeline(prog.p4info(), b"tofino binary".to_vec(), 7)
        .await
        .expect("pipeline");
    let got = c.get_pipeline().await.expect("get");
    assert_eq!(got.p4info, Some(prog.p4info()));
    assert_eq!(got.cookie.map(|k| k.cookie), Some(7));

    // table entries: insert, duplicate, modify, read
    c.write(vec![
        update(T::Insert, entry([10, 0, 1, 1], 1)),
        update(T::Insert, entry([10, 0, 1, 2], 2)),
    ])
    .await
    .expect("insert");
    let e = c
        .write(vec![update(T::Insert, entry([10, 0, 1, 1], 3))])
        .await
        .expect_err("duplicate");
    assert_eq!(code(e), tonic::Code::AlreadyExists);
    c.write(vec![update(T::Modify, entry([10, 0, 1, 1], 9))])
        .await
        .expect("modify");
    let all = c
        .read(vec![p4::Entity {
            entity: Some(E::TableEntry(p4::TableEntry {
                table_id: id(TABLE, 0),
                ..Default::default()
            })),
        }])
        .await
        .expect("read");
    assert_eq!(all.len(), 2);
    assert!(
        all.iter()
            .any(|e| e.entity == Some(entry([10, 0, 1, 1], 9)))
    );
    // a value wider than the field is refused
    let e = c
        .write(vec![update(T::Insert, entry([10, 0, 1, 1], 1)).clone()])
        .await
        .expect_err("dup");
    assert_eq!(code(e), tonic::Code::AlreadyExists);

    // registers: write a slot's partial sum, read it back; the data plane sees it
    let reg = id(REGISTER, 5);
    let cell = |i: i64, v: &[u8]| {
        E::RegisterEntry(p4::RegisterEntry {
            register_id: reg,
            index: Some(p4::Index { index: i }),
            data: Some(p4::P4Data {
                data: Some(p4::p4_data::Data::Bitstring(v.to_vec())),
            }),
        })
    };
    c.write(vec![update(T::Modify, cell(17, &[0, 0, 1, 44]))])
        .await
        .expect("register");
    assert_eq!(sw.register(reg, 17), Some(vec![0, 0, 1, 44]));
    let e = c
        .write(vec![update(T::Modify, cell(128, &[1]))])
        .await
        .expect_err("out of range");
    assert_eq!(code(e), tonic::Code::OutOfRange);
    let e = c
        .write(vec![update(T::Modify, cell(1, &[1, 2, 3, 4, 5]))])
        .await
        .expect_err("too wide");
    assert_eq!(code(e), tonic::Code::InvalidArgument);
    let r = c
        .read(vec![p4::Entity {
            entity: Some(E::RegisterEntry(p4::RegisterEntry {
                register_id: reg,
                index: Some(p4::Index { index: 17 }),
                data: None,
            })),
        }])
        .await
        .expect("read register");
    assert_eq!(
        r,
        vec![p4::Entity {
            entity: Some(cell(17, &[0, 0, 1, 44]))
        }]
    );

    // a multicast group for the results
    let group = E::PacketReplicationEngineEntry(p4::PacketReplicationEngineEntry {
        r#type: Some(
            p4::packet_replication_engine_entry::Type::MulticastGroupEntry(
                p4::MulticastGroupEntry {
                    multicast_group_id: 1,
                    replicas: (0..6)
                        .map(|p| p4::Replica {
                            port_kind: Some(p4::replica::PortKind::EgressPort(p)),
                            instance: 1,
                        })
                        .collect(),
                },
            ),
        ),
    });
    c.write(vec![update(T::Insert, group.clone())])
        .await
        .expect("group");
    let g = c
        .read(vec![p4::Entity {
            entity: Some(E::PacketReplicationEngineEntry(
                p4::PacketReplicationEngineEntry { r#type: None },
            )),
        }])
        .await
        .expect("read groups");
    assert_eq!(
        g,
        vec![p4::Entity {
            entity: Some(group)
        }]
    );

    // packet-out reaches the data plane; packet-in reaches the primary
    c.packet_out(vec![1, 2, 3], vec![(1, vec![0, 5])])
        .await
        .expect("packet out");
    let p = tokio::time::timeout(std::time::Duration::from_secs(5), dataplane.recv())
        .await
        .expect("in time")
        .expect("a packet");
    assert_eq!(p.payload, vec![1, 2, 3]);
    assert_eq!(p.metadata, vec![(1, vec![0, 5])]);
    assert!(sw.packet_in(vec![9, 9]));
    let got = tokio::time::timeout(std::time::Duration::from_secs(5), c.packet_in())
        .await
        .expect("in time")
        .expect("packet in");
    assert_eq!(got, vec![9, 9]);

    // a second controller with a lower election id is not primary and cannot write
    let e = Controller::connect(&addr, 1, (0, 5))
        .await
        .err()
        .expect("not primary");
    assert!(matches!(e, P4rtError::NotPrimary(_)), "{e}");
    // wrong device
    assert!(Controller::connect(&addr, 2, (0, 99)).await.is_err());
}

#[tokio::test]
async fn nothing_listening_is_one_sentence() {
    let e = Controller::connect("127.0.0.1:1", 1, (0, 1))
        .await
        .err()
        .expect("refused");
    let s = e.to_string();
    assert!(
        s.starts_with("cannot reach the P4Runtime server at 127.0.0.1:1"),
        "{s}"
    );
}
