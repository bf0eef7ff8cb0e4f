//! What the source-scanning tests share (memos.rs, typed_errors.rs): the `.rs` files under a
//! crate's `src` folders, passing over build output, tests, benches, examples and fuzz targets.

use std::path::{Path, PathBuf};

pub fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().to_string();
        if p.is_dir() {
            if !matches!(
                name.as_str(),
                "target" | "tests" | "benches" | "examples" | "fuzz" | ".git" | "results"
            ) && !name.starts_with('.')
            {
                sources(&p, out);
            }
        } else if name.ends_with(".rs") && p.components().any(|c| c.as_os_str() == "src") {
            out.push(p);
        }
    }
}
