//! The reports as a reader sees them: the PDF through poppler (pdftotext, pdftoppm), the HTML in
//! headless Chromium with the network off, `measurements.parquet` through pyarrow (a reader
//! nobody here wrote). `.ci/setup` installs them (Debian: poppler-utils, chromium; PyPI: pyarrow in
//! the tests' virtual environment); without them these tests skip off CI and fail under CI
//! (`inabench_testkit::need`).

use assert_cmd::Command;
use inabench_testkit::{need_py_module, need_tool};
use std::path::{Path, PathBuf};

fn run_fig7(results: &Path) -> PathBuf {
    run_fig7_with(results, &[])
}

fn run_fig7_with(results: &Path, extra: &[&str]) -> PathBuf {
    let o = Command::cargo_bin("inabench")
        .expect("bin")
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        .env("CI", "true")
        .args(["reproduce", "netreduce-fig7", "--headless", "--results"])
        .arg(results)
        .args(extra)
        .output()
        .expect("run");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::read_dir(results)
        .expect("results")
        .flatten()
        .next()
        .expect("a run")
        .path()
}

fn tool(name: &str) -> std::process::Command {
    std::process::Command::new(name)
}

#[test]
fn pdf_opens_with_text_and_figures() {
    if !(need_tool("pdftotext", "poppler-utils") && need_tool("pdftoppm", "poppler-utils")) {
        return;
    }
    let d = tempfile::tempdir().expect("tmp");
    let run = run_fig7(d.path());
    let pdf = run.join("report.pdf");
    let out = tool("pdftotext")
        .arg(&pdf)
        .arg("-")
        .output()
        .expect("pdftotext");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "netreduce-fig7",
        "pn-below-fr-ta",
        "eq2-closed-form-consistent",
        "modelled",
        "Fig. 7A",
        "How to rerun",
    ] {
        assert!(text.contains(needle), "`{needle}` not in the PDF text");
    }
    // the figure is drawn: its axis label is text in the PDF, and the page renders
    assert!(
        text.contains("B_intra (GB/s)"),
        "figure axis label missing from the PDF"
    );
    let prefix = d.path().join("page");
    let st = tool("pdftoppm")
        .args(["-png", "-r", "40", "-f", "2", "-l", "2"])
        .arg(&pdf)
        .arg(&prefix)
        .status()
        .expect("pdftoppm");
    assert!(st.success());
    let png = std::fs::read_dir(d.path())
        .expect("dir")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "png"))
        .expect("a page image");
    let bytes = std::fs::read(&png).expect("png");
    assert!(
        bytes.starts_with(b"\x89PNG") && bytes.len() > 5_000,
        "page 2 renders to a non-trivial image ({} bytes)",
        bytes.len()
    );
}

#[test]
fn html_is_self_contained_and_renders_in_chromium() {
    if !need_tool("chromium", "chromium") {
        return;
    }
    let d = tempfile::tempdir().expect("tmp");
    let run = run_fig7(d.path());
    let html_path = run.join("report.html");
    let html = std::fs::read_to_string(&html_path).expect("html");
    // nothing is fetched from the network: no src/href to http(s)
    for bad in ["src=\"http", "href=\"http", "url(http", "@import"] {
        assert!(
            !html.contains(bad),
            "the report references the network: {bad}"
        );
    }
    let profile = d.path().join("chromium-profile");
    let out = tool("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("file://{}", html_path.display()))
        .output()
        .expect("chromium");
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        dom.contains("id=\"claims\""),
        "claims table not in the DOM; stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        dom.contains("pn-flat-in-p") && dom.contains("<svg"),
        "figures and claims rendered"
    );
    assert!(dom.contains("id=\"manifest\""));
}

/// pyarrow reads a run's parameters as typed columns (fields of the `params` struct), the
/// timestamp as a UTC timestamp and the run's constants from the file's metadata; its values
/// are the rows the run stored. The run is changed with `--set` and `--repetitions`, which the
/// metadata records.
#[test]
fn parquet_reads_in_pyarrow_with_typed_parameters() {
    let Some(py) = need_py_module("pyarrow", "pyarrow==26.0.1") else {
        return;
    };
    let d = tempfile::tempdir().expect("tmp");
    let run = run_fig7_with(
        d.path(),
        &["--set", "P=32,64", "--repetitions", "2", "--format", "csv"],
    );
    let pq = run.join("measurements.parquet");
    let script = r#"
import json, sys
import pyarrow.parquet as pq
t = pq.read_table(sys.argv[1])
md = pq.read_metadata(sys.argv[1]).metadata
p = t.schema.field("params").type
rows = t.to_pylist()
print(json.dumps({
    "params": {p.field(i).name: str(p.field(i).type) for i in range(p.num_fields)},
    "timestamp": str(t.schema.field("timestamp").type),
    "run_id": md[b"inabench.run_id"].decode(),
    "overrides": md[b"inabench.overrides"].decode(),
    "rows": [[r["point_id"], r["metric"], r["repetition"], r["value"], r["params"]["P"],
              r["params"]["B_intra_GBps"], r["params"]["panel"]] for r in rows],
    "year": rows[0]["timestamp"].year,
}))
"#;
    let out = std::process::Command::new(&py)
        .arg("-c")
        .arg(script)
        .arg(&pq)
        .output()
        .expect("python");
    assert!(
        out.status.success(),
        "pyarrow: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(got["params"]["P"], "int64", "{got}");
    assert_eq!(got["params"]["B_intra_GBps"], "double", "{got}");
    assert_eq!(got["params"]["alpha_us"], "double", "{got}");
    // a UTF8 byte array, which pyarrow reports as `string` (`string_view` when the writer says
    // so, as polars did); either is a typed text column, not JSON
    assert!(
        matches!(
            got["params"]["panel"].as_str(),
            Some("string" | "string_view")
        ),
        "{got}"
    );
    assert_eq!(got["timestamp"], "timestamp[us, tz=UTC]", "{got}");
    assert!(got["year"].as_i64().is_some_and(|y| y >= 2024), "{got}");
    assert_eq!(
        got["run_id"],
        run.file_name().expect("name").to_string_lossy().as_ref()
    );
    assert_eq!(got["overrides"], "P=32,64 repetitions=2");
    // every stored row, with the same typed values
    let stored = inabench_core::store::read_rows(&run).expect("rows").rows;
    let rows = got["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), stored.len());
    let mut seen_p = std::collections::BTreeSet::new();
    for (r, s) in rows.iter().zip(&stored) {
        assert_eq!(r[0], s.point_id.as_str());
        assert_eq!(r[1], s.metric.as_str());
        assert_eq!(r[2], s.repetition);
        assert_eq!(r[3].as_f64(), Some(s.value));
        let p = r[4].as_i64().expect("P is an integer");
        assert_eq!(Some(&inabench_core::Scalar::Int(p)), s.params.get("P"));
        assert_eq!(
            r[5].as_f64(),
            s.params.get("B_intra_GBps").and_then(|v| v.as_f64())
        );
        seen_p.insert(p);
    }
    // the override reached every point: P is 32 or 64 only, both measured, twice each
    assert_eq!(seen_p, [32, 64].into_iter().collect());
    assert!(stored.iter().any(|s| s.repetition == 1));
    let csv = std::fs::read_to_string(run.join("report.csv")).expect("csv");
    assert!(
        csv.lines()
            .next()
            .is_some_and(|h| h.contains(",P,") && h.ends_with("ci95_lo,ci95_hi")),
        "{csv}"
    );
}
