//! A short fuzz run on the stable toolchain: the `p4rt` cargo-fuzz target's body
//! (`inabench_p4rt::fuzz::p4rt`) over seeded random bytes and mutations of valid requests
//! (every request type, with and without the primary's election id), so a handler that panics
//! or a refused request that changes the switch fails the ordinary test run.

use inabench_p4rt::fuzz::{DEVICE, PRIMARY, p4rt};
use inabench_p4rt::pb::p4::v1 as p4;
use prost::Message;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Valid requests, each behind the byte that picks its handler.
fn seeds() -> Vec<Vec<u8>> {
    let info = inabench_p4rt::program::switchml(4).p4info();
    let table = info.tables[0].preamble.as_ref().expect("preamble").id;
    let register = info.registers[0].preamble.as_ref().expect("preamble").id;
    let updates = vec![
        p4::Update {
            r#type: p4::update::Type::Modify as i32,
            entity: Some(p4::Entity {
                entity: Some(p4::entity::Entity::RegisterEntry(p4::RegisterEntry {
                    register_id: register,
                    index: Some(p4::Index { index: 1 }),
                    data: Some(p4::P4Data {
                        data: Some(p4::p4_data::Data::Bitstring(vec![0, 0, 0, 7])),
                    }),
                })),
            }),
        },
        p4::Update {
            r#type: p4::update::Type::Insert as i32,
            entity: Some(p4::Entity {
                entity: Some(p4::entity::Entity::TableEntry(p4::TableEntry {
                    table_id: table,
                    ..Default::default()
                })),
            }),
        },
    ];
    let mut out = Vec::new();
    for election in [
        Some(p4::Uint128 {
            high: PRIMARY.0,
            low: PRIMARY.1,
        }),
        Some(p4::Uint128 { high: 0, low: 4 }),
        None,
    ] {
        let w = p4::WriteRequest {
            device_id: DEVICE,
            election_id: election,
            updates: updates.clone(),
            ..Default::default()
        };
        for pick in [0u8, 1] {
            out.push([vec![pick], w.encode_to_vec()].concat());
        }
        let s = p4::SetForwardingPipelineConfigRequest {
            device_id: DEVICE,
            election_id: election,
            action: p4::set_forwarding_pipeline_config_request::Action::VerifyAndCommit as i32,
            config: Some(p4::ForwardingPipelineConfig {
                p4info: Some(info.clone()),
                ..Default::default()
            }),
            ..Default::default()
        };
        out.push([vec![3], s.encode_to_vec()].concat());
    }
    let r = p4::ReadRequest {
        device_id: DEVICE,
        entities: updates.iter().filter_map(|u| u.entity.clone()).collect(),
        ..Default::default()
    };
    out.push([vec![2], r.encode_to_vec()].concat());
    let g = p4::GetForwardingPipelineConfigRequest {
        device_id: DEVICE,
        response_type: 1,
    };
    out.push([vec![4], g.encode_to_vec()].concat());
    out
}

#[test]
fn the_p4runtime_handlers_survive_seeded_random_and_mutated_requests() {
    let seeds = seeds();
    let mut r = Rng(0x5eed_0f94_7200);
    for s in &seeds {
        p4rt(s);
    }
    for i in 0..3000 {
        let input: Vec<u8> = if i % 3 == 0 {
            let n = r.below(64);
            (0..n).map(|_| r.next() as u8).collect()
        } else {
            let mut b = seeds[r.below(seeds.len())].clone();
            for _ in 0..1 + r.below(3) {
                if b.len() < 2 {
                    break;
                }
                let at = 1 + r.below(b.len() - 1);
                match r.below(3) {
                    0 => b[at] ^= 1 << r.below(8),
                    1 => b[at] = r.next() as u8,
                    _ => b.truncate(at),
                }
            }
            b
        };
        p4rt(&input);
    }
}

/// The audit's two sequences (issue #40, item 2) as inputs of the `p4rt_sequence` target, which
/// the fuzz campaign's seed corpus starts from: a register grown by RECONCILE_AND_COMMIT and
/// written past its old size, and a register of 2^31-1 cells written and read whole. Then
/// mutations of them. None may panic or leave the switch answering INTERNAL.
#[test]
fn request_sequences_reach_reconcile_and_huge_registers() {
    use inabench_p4rt::fuzz::p4rt_sequence;
    let [grown, huge] = audit_sequences();
    p4rt_sequence(&grown);
    p4rt_sequence(&huge);
    let mut r = Rng(0x5eed_0f94_7201);
    for _ in 0..300 {
        let mut b = if r.below(2) == 0 {
            grown.clone()
        } else {
            huge.clone()
        };
        for _ in 0..1 + r.below(3) {
            let at = r.below(b.len());
            match r.below(3) {
                0 => b[at] ^= 1 << r.below(8),
                1 => b[at] = r.next() as u8,
                _ => b.truncate(at.max(1)),
            }
        }
        p4rt_sequence(&b);
    }
}

/// The seeds campaigns of `p4rt` and `p4rt_sequence` start from (fuzz/seeds/<target>/, written
/// by this test with INABENCH_WRITE_SEEDS=1): every valid request for `p4rt`; for
/// `p4rt_sequence` the audit's two sequences and all the valid requests in one sequence. Each
/// passes its body.
#[test]
fn the_committed_seeds_pass_the_bodies() {
    use inabench_p4rt::fuzz::{
        SEQ_GET_PIPELINE, SEQ_READ, SEQ_SET_PIPELINE, SEQ_WRITE, SEQ_WRITE_AS_IS, encode_sequence,
        p4rt_sequence,
    };
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds");
    let one = inabench_fabric_free_check(
        &dir.join("p4rt"),
        || {
            seeds()
                .into_iter()
                .enumerate()
                .map(|(i, s)| (format!("request-{i:02}"), s))
                .collect()
        },
        p4rt,
    );
    assert_eq!(one, seeds());
    let [grown, huge] = audit_sequences();
    let all = encode_sequence(
        &seeds()
            .into_iter()
            .filter_map(|s| {
                // `p4rt`'s pick (write as is, write as the primary, read, set, get) in the
                // sequence's numbering
                let (k, b) = s.split_first()?;
                let pick = [
                    SEQ_WRITE_AS_IS,
                    SEQ_WRITE,
                    SEQ_READ,
                    SEQ_SET_PIPELINE,
                    SEQ_GET_PIPELINE,
                ][usize::from(*k % 5)];
                Some((pick, b.to_vec()))
            })
            .collect::<Vec<_>>(),
    );
    let seqs = inabench_fabric_free_check(
        &dir.join("p4rt_sequence"),
        || {
            vec![
                ("grown_register".to_string(), grown.clone()),
                ("huge_register".to_string(), huge.clone()),
                ("every_request".to_string(), all.clone()),
            ]
        },
        p4rt_sequence,
    );
    assert_eq!(seqs.len(), 3);
}

/// [`inabench_fabric::fuzz::check_seeds`]'s behaviour (this crate does not depend on the
/// fabric): with INABENCH_WRITE_SEEDS set, write `make`'s files into `dir` anew; then run every
/// file, in name order, through `body`, and return them.
fn inabench_fabric_free_check(
    dir: &std::path::Path,
    make: impl FnOnce() -> Vec<(String, Vec<u8>)>,
    body: impl Fn(&[u8]),
) -> Vec<Vec<u8>> {
    if std::env::var_os("INABENCH_WRITE_SEEDS").is_some() {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).expect("the seed folder");
        for (name, input) in make() {
            std::fs::write(dir.join(name), input).expect("a seed file");
        }
    }
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e} (write with INABENCH_WRITE_SEEDS=1)", dir.display()))
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{}: no seeds", dir.display());
    files
        .iter()
        .map(|f| {
            let input = std::fs::read(f).expect("a seed file");
            body(&input);
            input
        })
        .collect()
}

/// The audit's two sequences: a register grown by RECONCILE_AND_COMMIT and written past its old
/// size, and a register of 2^31-1 cells written and read whole.
fn audit_sequences() -> [Vec<u8>; 2] {
    use inabench_p4rt::fuzz::{SEQ_READ, SEQ_SET_PIPELINE, SEQ_WRITE, encode_sequence};
    use p4::set_forwarding_pipeline_config_request::Action as A;
    let reg = inabench_p4rt::program::id(inabench_p4rt::program::REGISTER, 0);
    let set = |action: A, size: i32| {
        let mut info = inabench_p4rt::program::switchml(4).p4info();
        info.registers[0].size = size;
        p4::SetForwardingPipelineConfigRequest {
            action: action as i32,
            config: Some(p4::ForwardingPipelineConfig {
                p4info: Some(info),
                ..Default::default()
            }),
            ..Default::default()
        }
        .encode_to_vec()
    };
    let write = |index: i64| {
        p4::WriteRequest {
            updates: vec![p4::Update {
                r#type: p4::update::Type::Modify as i32,
                entity: Some(p4::Entity {
                    entity: Some(p4::entity::Entity::RegisterEntry(p4::RegisterEntry {
                        register_id: reg,
                        index: Some(p4::Index { index }),
                        data: Some(p4::P4Data {
                            data: Some(p4::p4_data::Data::Bitstring(vec![1])),
                        }),
                    })),
                }),
            }],
            ..Default::default()
        }
        .encode_to_vec()
    };
    let read_all = p4::ReadRequest {
        entities: vec![p4::Entity {
            entity: Some(p4::entity::Entity::RegisterEntry(p4::RegisterEntry {
                register_id: reg,
                ..Default::default()
            })),
        }],
        ..Default::default()
    }
    .encode_to_vec();
    let grown = encode_sequence(&[
        (SEQ_SET_PIPELINE, set(A::VerifyAndCommit, 4)),
        (SEQ_WRITE, write(1)),
        (SEQ_SET_PIPELINE, set(A::ReconcileAndCommit, 1000)),
        (SEQ_WRITE, write(500)),
        (SEQ_READ, read_all.clone()),
    ]);
    let huge = encode_sequence(&[
        (SEQ_SET_PIPELINE, set(A::VerifyAndCommit, i32::MAX)),
        (SEQ_WRITE, write(0)),
        (SEQ_READ, read_all),
    ]);
    [grown, huge]
}
