//! The user's P4Info files: text format as p4c emits it, binary, checked against the suite's
//! description of the program; ids looked up by name.

use inabench_p4rt::p4info::{Ids, P4InfoError, check, load, parse_text};
use inabench_p4rt::program::{ActionDesc, Field, MatchKind, Program, RegisterDesc, TableDesc};
use std::path::Path;

fn fixture() -> &'static Path {
    Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/basic.p4info.txt"
    ))
}

/// The suite's description of basic.p4's control-plane surface.
fn basic() -> Program {
    Program {
        name: "basic".into(),
        actions: vec![
            ActionDesc {
                name: "MyIngress.ipv4_forward".into(),
                params: vec![("dstAddr".into(), 48), ("port".into(), 9)],
            },
            ActionDesc {
                name: "MyIngress.drop".into(),
                params: vec![],
            },
        ],
        tables: vec![TableDesc {
            name: "MyIngress.ipv4_lpm".into(),
            fields: vec![Field {
                name: "hdr.ipv4.dstAddr".into(),
                bitwidth: 32,
                kind: MatchKind::Lpm,
            }],
            actions: vec![0, 1],
            size: 1024,
        }],
        registers: vec![RegisterDesc {
            name: "MyIngress.sums".into(),
            bitwidth: 32,
            size: 256,
        }],
    }
}

#[test]
fn text_format_as_p4c_emits_it() {
    let l = load(fixture()).expect("parse");
    let i = &l.info;
    assert_eq!(
        i.pkg_info.as_ref().map(|p| p.arch.as_str()),
        Some("v1model")
    );
    assert_eq!(i.tables.len(), 1);
    assert_eq!(i.actions.len(), 3);
    assert_eq!(i.registers.len(), 1);
    let t = &i.tables[0];
    assert_eq!(t.size, 1024);
    assert_eq!(
        t.action_refs.iter().map(|a| a.id).collect::<Vec<_>>(),
        vec![28792405, 25652968, 21257015]
    );
    assert_eq!(t.match_fields[0].bitwidth, 32);
    let noaction = i.actions[0].preamble.as_ref().expect("preamble");
    assert_eq!(
        noaction.annotations,
        vec!["@noWarn(\"unused\")".to_string()]
    );
    // what the suite's P4Info subset does not carry is named, not silently lost
    assert_eq!(
        l.dropped,
        vec!["counters".to_string(), "type_info".to_string()]
    );
    let ids = Ids(i);
    assert_eq!(ids.table("MyIngress.ipv4_lpm"), Some(37375156));
    assert_eq!(ids.action("MyIngress.ipv4_forward"), Some(28792405));
    assert_eq!(ids.param("MyIngress.ipv4_forward", "port"), Some(2));
    assert_eq!(
        ids.match_field("MyIngress.ipv4_lpm", "hdr.ipv4.dstAddr"),
        Some(1)
    );
    assert_eq!(ids.table("nope"), None);
    check(i, &basic()).expect("matches the description");
}

#[test]
fn mismatches_are_one_sentence() {
    use inabench_p4rt::p4info::Mismatch;
    let i = load(fixture()).expect("parse").info;
    let mut p = basic();
    p.tables[0].fields[0].kind = MatchKind::Exact;
    let m = check(&i, &p).expect_err("kind");
    let e = m.to_string();
    assert!(matches!(m, Mismatch::MatchField { .. }), "{m:?}");
    assert!(e.contains("hdr.ipv4.dstAddr") && !e.contains('\n'), "{e}");
    let mut p = basic();
    p.actions[0].params[1].1 = 16;
    let m = check(&i, &p).expect_err("width");
    let e = m.to_string();
    assert!(
        matches!(
            m,
            Mismatch::ParamWidth {
                info_bits: 9,
                bits: 16,
                ..
            }
        ),
        "{m:?}"
    );
    assert!(
        e.contains("`port` is 9 bits") && e.contains("describes 16"),
        "{e}"
    );
    let mut p = basic();
    p.registers[0].size = 512;
    let m = check(&i, &p).expect_err("size");
    let e = m.to_string();
    assert!(matches!(m, Mismatch::Register { size: 512, .. }), "{m:?}");
    assert!(
        e.contains("MyIngress.sums") && e.contains("at least 512"),
        "{e}"
    );
    let mut p = basic();
    p.tables[0].name = "MyIngress.other".into();
    let e = check(&i, &p).expect_err("table").to_string();
    assert!(e.contains("no table `MyIngress.other`"), "{e}");
    // the suite's own SwitchML description against a P4Info of another program
    let e = check(&i, &inabench_p4rt::program::switchml(128))
        .expect_err("switchml")
        .to_string();
    assert!(e.contains("SwitchMLIngress.forward_table"), "{e}");
}

#[test]
fn binary_p4info_and_syntax_errors() {
    let d = tempfile::tempdir().expect("tmp");
    let prog = inabench_p4rt::program::switchml(64);
    let info = prog.p4info();
    let f = d.path().join("switchml.p4info.bin");
    std::fs::write(&f, prost::Message::encode_to_vec(&info)).expect("write");
    let l = load(&f).expect("binary");
    assert_eq!(l.info, info);
    check(&l.info, &prog).expect("its own description");
    let e = parse_text(
        "bad.txt",
        "tables {\n  preamble {\n    id: 1\n  }\n  size: 1024\n",
    )
    .expect_err("unclosed");
    assert!(matches!(e, P4InfoError::Text { line: 6, .. }), "{e}");
    let e = parse_text("bad.txt", "tables {\n  size: ten\n}\n").expect_err("int");
    assert_eq!(
        e.to_string(),
        "bad.txt:2: `tables.size` must be an integer, not `ten`"
    );
    let e = load(&d.path().join("missing.txt")).expect_err("io");
    assert!(e.to_string().contains("cannot read the P4Info"), "{e}");
}
