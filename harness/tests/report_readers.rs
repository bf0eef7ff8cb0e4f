//! The reports as a reader sees them: the PDF through poppler (pdftotext, pdftoppm), the HTML in
//! headless Chromium with the network off. `.ci/setup` installs both (Debian: poppler-utils,
//! chromium).

use assert_cmd::Command;
use std::path::{Path, PathBuf};

fn run_fig7(results: &Path) -> PathBuf {
    let o = Command::cargo_bin("inabench")
        .expect("bin")
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        .env("CI", "true")
        .args(["reproduce", "netreduce-fig7", "--headless", "--results"])
        .arg(results)
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
    if which(name).is_none() {
        panic!(
            "`{name}` is needed to check the reports as a reader sees them (.ci/setup installs it)"
        );
    }
    std::process::Command::new(name)
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

#[test]
fn pdf_opens_with_text_and_figures() {
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
