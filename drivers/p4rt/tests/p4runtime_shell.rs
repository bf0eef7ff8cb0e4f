//! Interoperability with a P4Runtime client nobody here wrote: p4runtime-shell (PyPI), installed
//! by .ci/setup in a virtual environment, connects to our software switch's server, fetches the
//! P4Info, and writes and reads a table entry.

use inabench_p4rt::client::Controller;
use inabench_p4rt::pb::p4::v1 as p4;
use inabench_p4rt::program::{self, TABLE, id};
use inabench_p4rt::server::{SoftSwitch, spawn_local};

const SCRIPT: &str = r#"
import sys
import p4runtime_sh.shell as sh
sh.setup(device_id=1, grpc_addr=sys.argv[1], election_id=(0, 20))
te = sh.TableEntry('SwitchMLIngress.forward_table')(action='SwitchMLIngress.forward')
te.match['hdr.ipv4.dst_addr'] = '10.0.1.7'
te.action['port'] = '3'
te.insert()
n = sum(1 for _ in sh.TableEntry('SwitchMLIngress.forward_table').read())
print('entries', n)
sh.teardown()
"#;

fn python() -> Option<std::path::PathBuf> {
    let venv = std::env::var_os("INABENCH_PY_VENV")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".cache/inabench/venv"))
        })?;
    let py = venv.join("bin/python");
    py.exists().then_some(py)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p4runtime_shell_reads_our_p4info_and_writes_an_entry() {
    let Some(py) = python() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must have p4runtime-shell: .ci/setup installs it in ~/.cache/inabench/venv"
        );
        eprintln!("skipped: no p4runtime-shell venv (run .ci/setup)");
        return;
    };
    let (sw, _dp) = SoftSwitch::new(1);
    let addr = spawn_local(sw.clone()).await.expect("serve").to_string();
    {
        // our driver pushes the pipeline, then leaves
        let mut c = Controller::connect(&addr, 1, (0, 10))
            .await
            .expect("primary");
        c.set_pipeline(program::switchml(128).p4info(), vec![], 1)
            .await
            .expect("pipeline");
    }
    let a = addr.clone();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(py)
            .arg("-c")
            .arg(SCRIPT)
            .arg(a)
            .output()
    })
    .await
    .expect("join")
    .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "p4runtime-shell failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("entries 1"), "{stdout}");
    // and we read what it wrote, bit for bit
    let mut c = Controller::connect(&addr, 1, (0, 30))
        .await
        .expect("primary again");
    let es = c
        .read(vec![p4::Entity {
            entity: Some(p4::entity::Entity::TableEntry(p4::TableEntry {
                table_id: id(TABLE, 0),
                ..Default::default()
            })),
        }])
        .await
        .expect("read");
    let Some(p4::entity::Entity::TableEntry(t)) = es.first().and_then(|e| e.entity.clone()) else {
        panic!("no entry: {es:?}");
    };
    let Some(p4::field_match::FieldMatchType::Exact(m)) = t.r#match[0].field_match_type.clone()
    else {
        panic!("not exact");
    };
    assert_eq!(m.value, vec![10, 0, 1, 7]);
}
