//! A user's trace file: read, counted and ranked exactly; bad files give one-sentence errors
//! naming the file (and the line).

use inabench_libra::LibraError;
use inabench_libra::hot::Frequencies;
use inabench_libra::sparse::{read_trace_file, trace_frequencies, trace_pushes};
use std::path::{Path, PathBuf};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

#[test]
fn small_trace_counts_every_push_once_per_key() {
    let r = read_trace_file(&data("small_trace.txt")).unwrap();
    assert_eq!(r.len(), 9, "comments and blank lines skipped");
    assert_eq!(trace_pushes(&r), 4);
    let uf = trace_frequencies(&r);
    // key 7: pushes (0,0) twice in one push, (0,1), (1,0), (1,1) -> 4; key 3: (0,0), (1,1)
    assert_eq!(uf[&7], 4);
    assert_eq!(uf[&3], 2);
    assert_eq!(uf[&9], 1);
    assert_eq!(uf[&11], 1);
    let f = Frequencies::from_counts(&uf).unwrap();
    assert_eq!(f.total(), 8);
    assert_eq!(f.top_share(1), 4.0 / 8.0);
    assert_eq!(f.top_share(2), 6.0 / 8.0);
    assert_eq!(f.top_share(30_000), 1.0);
}

#[test]
fn bad_files_name_the_file_and_the_line() {
    let dir = std::env::temp_dir().join(format!("libra-trace-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let missing = dir.join("missing.txt");
    let e = read_trace_file(&missing).unwrap_err();
    assert!(matches!(e, LibraError::TraceFile { .. }));
    assert!(e.to_string().contains("missing.txt") && e.to_string().contains("cannot read"));
    let bad = dir.join("bad.txt");
    std::fs::write(&bad, "0 0 1 0.5\n0 0 x 0.5\n").unwrap();
    let e = read_trace_file(&bad).unwrap_err().to_string();
    assert!(
        e.contains("bad.txt") && e.contains("line 2") && e.contains("key"),
        "{e}"
    );
    let empty = dir.join("empty.txt");
    std::fs::write(&empty, "# nothing\n\n").unwrap();
    let e = read_trace_file(&empty).unwrap_err().to_string();
    assert!(e.contains("no record"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}
