//! Every spec error names the line of the value it is about.
//!
//! For every spec under `experiments/` (not `experiments/testbeds/`), every key of the YAML
//! document and every scalar element of a list is replaced, one at a time, by a value that is
//! rejected: by the later checks of `Spec::from_yaml` where a check constrains that value (an
//! unknown metric in a claim, an empty grid list, a profile's zero repetitions, ...), otherwise by
//! the parser (a value of the wrong type). The bad value is written where the old one started
//! (on the key's line), and the error must name that file and that line. Where the paths of
//! later checks were found by the first line containing a text, the line was often elsewhere
//! (a grid key of the `full` profile got the `quick` profile's line, a figure's `y` the claim
//! with the same metric in its id).

use inabench_core::spec::Spec;
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::{Location, Spanned};
use std::path::{Path, PathBuf};

/// A YAML node with its span in the text.
struct Node(Spanned<Kind>);

enum Kind {
    Map(Vec<(Spanned<String>, Node)>),
    Seq(Vec<Node>),
    Scalar,
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Spanned::<Kind>::deserialize(d).map(Node)
    }
}

impl<'de> Deserialize<'de> for Kind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Any;
        impl<'de> Visitor<'de> for Any {
            type Value = Kind;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any YAML node")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Kind, A::Error> {
                let mut v = Vec::new();
                while let Some(k) = m.next_key::<Spanned<String>>()? {
                    v.push((k, m.next_value::<Node>()?));
                }
                Ok(Kind::Map(v))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Kind, A::Error> {
                let mut v = Vec::new();
                while let Some(n) = s.next_element::<Node>()? {
                    v.push(n);
                }
                Ok(Kind::Seq(v))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Kind, E> {
                Ok(Kind::Scalar)
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Kind, E> {
                Ok(Kind::Scalar)
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Kind, E> {
                Ok(Kind::Scalar)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Kind, E> {
                Ok(Kind::Scalar)
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Kind, E> {
                Ok(Kind::Scalar)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Kind, E> {
                Ok(Kind::Scalar)
            }
            fn visit_none<E: de::Error>(self) -> Result<Kind, E> {
                Ok(Kind::Scalar)
            }
        }
        d.deserialize_any(Any)
    }
}

fn start(l: &Location) -> usize {
    l.span()
        .byte_offset()
        .expect("byte offsets from a string source") as usize
}

/// The byte just past the node's text: a scalar's span (without the newline a block scalar
/// keeps), a flow collection's closing bracket, a block collection's last descendant.
fn end(text: &str, n: &Node) -> usize {
    let at = start(&n.0.referenced);
    match &n.0.value {
        Kind::Scalar => {
            let len = n.0.referenced.span().byte_len().unwrap_or(0) as usize;
            let mut e = at + len;
            while e > at && text.as_bytes()[e - 1] == b'\n' {
                e -= 1;
            }
            e
        }
        _ if matches!(text.as_bytes().get(at), Some(b'[' | b'{')) => closing(text, at),
        Kind::Map(entries) => entries.last().map_or(at, |(_, v)| end(text, v)),
        Kind::Seq(items) => items.last().map_or(at, |v| end(text, v)),
    }
}

/// The byte past the bracket that closes the one at `at` (quotes respected).
fn closing(text: &str, at: usize) -> usize {
    let b = text.as_bytes();
    let (mut depth, mut quote) = (0usize, None::<u8>);
    let mut i = at;
    while i < b.len() {
        let c = b[i];
        match quote {
            Some(q) if c == b'\\' && q == b'"' => i += 1,
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => match c {
                b'"' | b'\'' => quote = Some(c),
                b'[' | b'{' => depth += 1,
                b']' | b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        return i + 1;
                    }
                }
                _ => {}
            },
        }
        i += 1;
    }
    panic!("unclosed bracket at byte {at}");
}

fn line_at(text: &str, byte: usize) -> usize {
    text[..byte].matches('\n').count() + 1
}

/// Which reader rejects the bad value.
#[derive(Clone, Copy, PartialEq, Debug)]
enum By {
    /// A later check (the error has a field).
    Check,
    /// The parser (a wrong type).
    Parser,
}

/// One replacement: the bytes `range` become `with`; the error must be on `line`.
struct Edit {
    path: String,
    range: (usize, usize),
    with: String,
    line: usize,
    by: By,
}

/// What the spec declares, to choose bad values that only the intended check rejects.
struct Names {
    implemented: bool,
    classes: Vec<String>,
    first_metric: String,
    first_claim: Option<String>,
    cdf_figures: Vec<usize>,
}

const WRONG_TYPE: &str = "[[1]]";

/// The bad value for the value at `path` (keys, and `#` for an index) and who rejects it.
fn bad(path: &[String], names: &Names) -> (String, By) {
    let p: Vec<&str> = path.iter().map(String::as_str).collect();
    let check = |s: &str| (s.to_string(), By::Check);
    let index = |s: &str| s.parse::<usize>().ok();
    match p.as_slice() {
        ["id"] => check("zz-bad"),
        ["paper_id"] => check("zz"),
        ["testbed_devices"] => check("[zz_device]"),
        ["testbed_devices", _] => check("zz_device"),
        ["workload"] if names.implemented => check("~"),
        ["systems"] => check("[]"),
        ["fidelity"] => check("[]"),
        ["fidelity", _] => ("zz_class".into(), By::Parser),
        ["profiles"] => check("{}"),
        ["profiles", "quick" | "full", "repetitions"] => check("0"),
        ["profiles", "quick" | "full", "grid", _, _] => check("[]"),
        ["metrics", i, "name"] if index(i) != Some(0) => check(&names.first_metric),
        ["metrics", _, "better"] => ("sideways".into(), By::Parser),
        ["metrics", _, "unit"] => check("Gbsp"),
        ["paper", "values", _, "system"] => check("zz_system"),
        ["paper", "values", _, "metric"] => check("zz_metric"),
        ["claims", i, "id"] if index(i) != Some(0) => {
            check(names.first_claim.as_deref().expect("a first claim"))
        }
        ["claims", _, "fidelity", rest @ ..] if rest.len() <= 1 => {
            let absent = [
                "hardware",
                "emulated",
                "simulated",
                "modelled",
                "functional",
            ]
            .into_iter()
            .find(|c| !names.classes.iter().any(|d| d == c));
            match (absent, rest.is_empty()) {
                (Some(c), true) => check(&format!("[{c}]")),
                (Some(c), false) => check(c),
                (None, true) => ("[zz_class]".into(), By::Parser),
                (None, false) => ("zz_class".into(), By::Parser),
            }
        }
        ["claims", _, "expr"] => check("\"zzmetric(zzsystem) > 1\""),
        ["tables", _, "rows"] => check("zz_param"),
        ["tables", _, "columns"] => check("[zz_metric]"),
        ["tables", _, "columns", _] => check("zz_metric"),
        ["figures", _, "y"] => check("zz_metric"),
        ["figures", i, "x"] if !names.cdf_figures.contains(&index(i).unwrap()) => check("zz_param"),
        ["figures", _, "series"] => check("[zz_param]"),
        ["figures", _, "series", _] => check("zz_param"),
        ["figures", _, "kind"] => ("pie".into(), By::Parser),
        _ => (WRONG_TYPE.into(), By::Parser),
    }
}

fn walk(text: &str, n: &Node, path: &mut Vec<String>, names: &Names, out: &mut Vec<Edit>) {
    match &n.0.value {
        Kind::Map(entries) => {
            for (k, v) in entries {
                path.push(k.value.clone());
                let key_end = start(&k.referenced) + k.value.len();
                let colon = key_end + text[key_end..].find(':').expect("a colon after the key");
                let (with, by) = bad(path, names);
                out.push(Edit {
                    path: path.join("."),
                    range: (colon + 1, end(text, v).max(colon + 1)),
                    with: format!(" {with}"),
                    line: line_at(text, start(&k.referenced)),
                    by,
                });
                walk(text, v, path, names, out);
                path.pop();
            }
        }
        Kind::Seq(items) => {
            for (i, v) in items.iter().enumerate() {
                path.push(i.to_string());
                if matches!(v.0.value, Kind::Scalar) {
                    let (with, by) = bad(path, names);
                    let at = start(&v.0.referenced);
                    out.push(Edit {
                        path: path.join("."),
                        range: (at, end(text, v)),
                        with,
                        line: line_at(text, at),
                        by,
                    });
                }
                walk(text, v, path, names, out);
                path.pop();
            }
        }
        Kind::Scalar => {}
    }
}

fn spec_files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../experiments");
    let mut files = Vec::new();
    for paper in std::fs::read_dir(&root).expect("experiments/") {
        let dir = paper.expect("entry").path();
        // testbeds/ and hosts/ (host profiles) hold other files than specs
        if !dir.is_dir()
            || dir
                .file_name()
                .is_some_and(|n| n == "testbeds" || n == "hosts")
        {
            continue;
        }
        for f in std::fs::read_dir(&dir).expect("a paper folder") {
            let f = f.expect("entry").path();
            if f.extension().is_some_and(|e| e == "yaml") {
                files.push(f);
            }
        }
    }
    files.sort();
    files
}

#[test]
fn every_error_names_the_line_of_its_value() {
    let files = spec_files();
    assert_eq!(
        files.len(),
        62,
        "specs under experiments/ (testbeds/ and hosts/ left out)"
    );
    let (mut walked, mut checks, mut right, mut right_checks) = (0, 0, 0, 0);
    let mut wrong = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("readable");
        let rel = PathBuf::from(format!(
            "experiments/{}",
            file.strip_prefix(Path::new(env!("CARGO_MANIFEST_DIR")).join("../experiments"))
                .expect("under experiments/")
                .display()
        ));
        let spec = Spec::from_yaml(&rel, &text).expect("every spec in the tree is valid");
        let names = Names {
            implemented: spec.workload.is_some(),
            classes: spec
                .fidelity
                .iter()
                .map(|f| f.as_str().to_string())
                .collect(),
            first_metric: spec.metrics[0].name.clone(),
            first_claim: spec.claims.first().map(|c| c.id.clone()),
            cdf_figures: (spec.figures.iter().enumerate())
                .filter(|(_, f)| f.kind == inabench_core::spec::FigureKind::Cdf)
                .map(|(i, _)| i)
                .collect(),
        };
        let root: Node = serde_saphyr::from_str(&text).expect("a YAML document");
        let mut edits = Vec::new();
        walk(&text, &root, &mut Vec::new(), &names, &mut edits);
        for e in edits {
            let changed = format!("{}{}{}", &text[..e.range.0], e.with, &text[e.range.1..]);
            walked += 1;
            checks += usize::from(e.by == By::Check);
            let err = match Spec::from_yaml(&rel, &changed) {
                Ok(_) => {
                    wrong.push(format!(
                        "{}: {} = {}: accepted",
                        rel.display(),
                        e.path,
                        e.with
                    ));
                    continue;
                }
                Err(err) => err,
            };
            let msg = err.to_string();
            // a later check names the field; since cfe1665 a parser's type error names it too
            // where the reader knows the path (`field `title`: expected string scalar`; not yet
            // for a few values, e.g. a tolerance written as a folded scalar), so a parser's error
            // is held to the line only
            let by_ok = match e.by {
                By::Check => err.field.is_some(),
                By::Parser => true,
            };
            let named = msg.starts_with(&format!("{}:", rel.display()));
            if named && err.line == Some(e.line) && by_ok {
                right += 1;
                right_checks += usize::from(e.by == By::Check);
            } else {
                wrong.push(format!(
                    "{}: {} ={} (line {}, {:?} expected): {msg}",
                    rel.display(),
                    e.path,
                    e.with,
                    e.line,
                    e.by
                ));
            }
        }
    }
    println!(
        "{} specs, {walked} values replaced ({checks} rejected by a later check), \
         {right} errors on the right line ({right_checks} of the later checks)",
        files.len()
    );
    assert!(
        wrong.is_empty(),
        "{} of {walked} errors not on the line of the changed value:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}
