//! A short fuzz run on the stable toolchain for the two file readers the cargo-fuzz targets
//! `spec` and `testbed` drive (fuzz/fuzz_targets/): core's `Spec::from_yaml` and
//! `Testbed::from_yaml` (re-exported by the harness), over every spec and testbed file of the repository mutated the way a
//! hand edit goes wrong (bytes changed, lines dropped, repeated or cut, YAML punctuation
//! inserted) and over seeded random text. Any input must give a value or a typed error, never a
//! panic; the unmutated files must still read.

use inabench::testbed::Testbed;
use inabench_core::spec::Spec;
use std::path::{Path, PathBuf};

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

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            yaml_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "yaml") {
            out.push(p);
        }
    }
}

const PUNCT: &[&str] = &[
    ":", "- ", "[", "]", "{", "}", "&a ", "*a", "!!str ", "\"", "'", "\t", "#", "|", ">", "?", "~",
    "-1", "1e400", "NaN", "\n  ", "<<: *a\n", "\u{0}", "é",
];

fn mutate(r: &mut Rng, text: &str) -> String {
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    for _ in 0..1 + r.below(3) {
        if lines.is_empty() {
            break;
        }
        let i = r.below(lines.len());
        match r.below(6) {
            0 => {
                lines.remove(i);
            }
            1 => {
                let l = lines[i].clone();
                lines.insert(i, l);
            }
            2 => lines.truncate(i),
            3 => {
                let l = &mut lines[i];
                let at = (0..=r.below(l.len() + 1))
                    .rev()
                    .find(|k| l.is_char_boundary(*k))
                    .unwrap_or(0);
                l.insert_str(at, PUNCT[r.below(PUNCT.len())]);
            }
            4 => {
                // a value replaced by something of another type
                if let Some(c) = lines[i].find(": ") {
                    lines[i].truncate(c + 2);
                    lines[i].push_str(["[]", "{}", "-3", "yes", "\"\"", "0x10", "1.5"][r.below(7)]);
                }
            }
            _ => {
                let l = &mut lines[i];
                let at = (0..=r.below(l.len() + 1))
                    .rev()
                    .find(|k| l.is_char_boundary(*k))
                    .unwrap_or(0);
                l.truncate(at);
            }
        }
    }
    lines.join("\n")
}

#[test]
fn the_spec_and_testbed_readers_survive_mutated_files_and_random_text() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    yaml_files(&root.join("experiments"), &mut files);
    // specs are experiments/<paper>/<id>.yaml (their data files lie deeper), testbeds
    // experiments/testbeds/*.yaml
    let experiments = root.join("experiments");
    files.retain(|p| {
        p.strip_prefix(&experiments)
            .is_ok_and(|r| r.components().count() == 2)
    });
    // host profiles (experiments/hosts/*.yaml) have their own reader and tests (core::hostprofile)
    files.retain(|p| !p.components().any(|c| c.as_os_str() == "hosts"));
    files.sort();
    let (testbeds, specs): (Vec<_>, Vec<_>) = files
        .into_iter()
        .partition(|p| p.components().any(|c| c.as_os_str() == "testbeds"));
    assert!(
        specs.len() > 40 && !testbeds.is_empty(),
        "{} specs",
        specs.len()
    );
    let read = |p: &PathBuf| std::fs::read_to_string(p).expect("read");
    let spec_texts: Vec<String> = specs.iter().map(read).collect();
    let testbed_texts: Vec<String> = testbeds.iter().map(read).collect();
    for (p, t) in specs.iter().zip(&spec_texts) {
        Spec::from_yaml(p, t).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    }
    for (p, t) in testbeds.iter().zip(&testbed_texts) {
        Testbed::from_yaml(p, t).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    }
    let start = std::time::Instant::now();
    let mut r = Rng(0x7e57_5eed);
    let (mut specs_ok, mut specs_err) = (0, 0);
    for i in 0..1500 {
        // the spec's own path: the reader checks the id against the file name
        let k = r.below(spec_texts.len());
        let text = if i % 5 == 0 {
            let n = r.below(200);
            String::from_utf8_lossy(&(0..n).map(|_| r.next() as u8).collect::<Vec<u8>>())
                .into_owned()
        } else {
            mutate(&mut r, &spec_texts[k])
        };
        match Spec::from_yaml(&specs[k], &text) {
            Ok(_) => specs_ok += 1,
            Err(_) => specs_err += 1,
        }
    }
    for i in 0..1500 {
        let text = if i % 5 == 0 {
            let n = r.below(200);
            String::from_utf8_lossy(&(0..n).map(|_| r.next() as u8).collect::<Vec<u8>>())
                .into_owned()
        } else {
            {
                let k = r.below(testbed_texts.len());
                mutate(&mut r, &testbed_texts[k])
            }
        };
        let _ = Testbed::from_yaml(Path::new("testbed.yaml"), &text);
    }
    // the mutations reach both outcomes: some edits leave a valid spec, most break it
    assert!(
        specs_ok > 0 && specs_err > 0,
        "{specs_ok} ok, {specs_err} refused"
    );
    eprintln!(
        "3000 inputs in {:?} ({specs_ok} specs read, {specs_err} refused)",
        start.elapsed()
    );
}
