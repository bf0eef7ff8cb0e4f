//! No library function answers `Result<_, String>` (#35 item 6): a library crate's refusals
//! are typed (thiserror enums), so a caller can match on them and the sentence a user reads is
//! written once, in the error's `Display`. This scans the `src` of every workspace crate
//! (harness/src/main.rs excepted: the binary adds context with anyhow; `tests`, `examples`,
//! `benches` and `fuzz` excepted) for a return type, after `->`, holding a `Result` whose error
//! is `String`: a fn, a method, a closure with a written return type or a fn/`Fn` type, anywhere
//! in the type (`Option<(String, Result<i32, String>)>` counts), and a `type` alias naming one
//! (`type R<T> = Result<T, String>`). Unit-test modules in `src` are scanned too. A new one fails this test until it is typed.

mod scan;

use scan::sources;
use std::path::Path;

/// Files allowed to keep `Result<_, String>` for now, by path under the workspace root, each with
/// a comment saying why and until when. Empty: the last two, harness/src/doctor.rs and
/// workloads/src/netreduce/rig.rs, were typed in 7975ca7 (ProbeError, RigError).
const EXEMPT: &[&str] = &[];

/// The workspace's crate folders (Cargo.toml `members`, by their top folder).
const TOPS: &[&str] = &[
    "harness",
    "core",
    "rng",
    "workloads",
    "report",
    "systems",
    "wire",
    "fabric",
    "drivers",
    "bench",
    "testkit",
];

/// The source without `//` comments (line, doc and inner doc), lines kept so positions hold.
fn without_comments(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            // a `//` inside a string literal (an address) cuts the rest of its line only
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The return type written after the `->` that ends at byte `at`: up to a `{`, `;` or `where`
/// at depth 0, or a `,`, `)`, `>` or `]` that closes what the `->` sits in (a `Fn` type).
fn return_type(code: &str, at: usize) -> &str {
    let rest = &code[at..];
    let b = rest.as_bytes();
    let mut depth = 0i32;
    for (i, &c) in b.iter().enumerate() {
        match c {
            b'>' if i > 0 && b[i - 1] == b'-' => {} // a nested `->`
            b'<' | b'(' | b'[' => depth += 1,
            b'>' | b')' | b']' if depth == 0 => return &rest[..i],
            b'>' | b')' | b']' => depth -= 1,
            b'{' | b';' => return &rest[..i],
            b',' if depth == 0 => return &rest[..i],
            b'w' if depth == 0
                && rest[i..].starts_with("where")
                && (i == 0 || !b[i - 1].is_ascii_alphanumeric() && b[i - 1] != b'_') =>
            {
                return &rest[..i];
            }
            _ => {}
        }
    }
    rest
}

/// The type a `type NAME = TYPE;` alias starting at byte `at` (at `type`) names, if it is one.
fn alias_type(code: &str, at: usize) -> Option<&str> {
    let before = code[..at].chars().next_back();
    if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
        return None;
    }
    let rest = &code[at + "type ".len()..];
    let stmt = &rest[..rest.find(';')?];
    Some(&stmt[stmt.find('=')? + 1..])
}

/// The generic arguments of each `Result<...>` in `ty`, split at depth 0, whitespace removed.
fn results_errors(ty: &str) -> Vec<String> {
    let ty: String = ty.chars().filter(|c| !c.is_whitespace()).collect();
    let mut errors = Vec::new();
    let mut from = 0;
    while let Some(k) = ty[from..].find("Result<") {
        let start = from + k;
        from = start + 1;
        let before = ty[..start].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // FooResult<..>: another type
        }
        let inner = &ty[start + "Result<".len()..];
        let (mut depth, mut args, mut arg) = (0i32, Vec::new(), String::new());
        for c in inner.chars() {
            match c {
                '>' if arg.ends_with('-') => {} // a nested `->`
                '<' | '(' | '[' => depth += 1,
                '>' | ')' | ']' if depth == 0 => break,
                '>' | ')' | ']' => depth -= 1,
                ',' if depth == 0 => {
                    args.push(std::mem::take(&mut arg));
                    continue;
                }
                _ => {}
            }
            arg.push(c);
        }
        args.push(arg);
        if args.len() == 2 {
            errors.push(args[1].clone());
        }
    }
    errors
}

/// The files scanned (paths under the workspace root) and every `(file, line, return type)`
/// whose `Result` carries a `String` error.
fn string_results(root: &Path) -> (Vec<String>, Vec<(String, usize, String)>) {
    let mut files = Vec::new();
    for top in TOPS {
        sources(&root.join(top), &mut files);
    }
    files.sort();
    let mut scanned = Vec::new();
    let mut found = Vec::new();
    for f in files {
        let rel = f
            .strip_prefix(root)
            .unwrap_or(&f)
            .to_string_lossy()
            .replace('\\', "/");
        if rel == "harness/src/main.rs" {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue;
        };
        scanned.push(rel.clone());
        let code = without_comments(&text);
        let returns = code
            .match_indices("->")
            .map(|(k, _)| (k, return_type(&code, k + 2)));
        let aliases = code
            .match_indices("type ")
            .filter_map(|(k, _)| Some((k, alias_type(&code, k)?)));
        for (k, ty) in returns.chain(aliases) {
            let stringly = results_errors(ty)
                .iter()
                .any(|e| matches!(e.as_str(), "String" | "std::string::String"));
            if stringly {
                let line = code[..k].matches('\n').count() + 1;
                found.push((
                    rel.clone(),
                    line,
                    ty.split_whitespace().collect::<Vec<_>>().join(" "),
                ));
            }
        }
    }
    (scanned, found)
}

#[test]
fn no_library_function_returns_a_string_error() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let (scanned, found) = string_results(&root);
    // the scan reads what it is about (a broken walk must not pass): the files typed in #35
    // item 6, every crate's top, the exempt files (a renamed one must leave the list), and
    // not the binary's main.rs
    for file in [
        "drivers/devices/src/cuda.rs",
        "harness/src/launcher/ssh.rs",
        "harness/src/launcher.rs",
        "workloads/src/netreduce/fig12.rs",
        "core/src/store.rs",
        "systems/train/src/dp.rs",
    ]
    .iter()
    .chain(EXEMPT)
    {
        assert!(
            scanned.iter().any(|f| f == file),
            "the scan did not read {file}"
        );
    }
    for top in TOPS {
        assert!(
            scanned.iter().any(|f| f.starts_with(&format!("{top}/"))),
            "the scan read nothing under {top}/"
        );
    }
    assert!(!scanned.iter().any(|f| f == "harness/src/main.rs"));
    // an exemption that no longer holds one is stale: the list says only what is still open
    for file in EXEMPT {
        assert!(
            found.iter().any(|(f, _, _)| f == file),
            "{file} answers no `Result<_, String>` any more: drop it from EXEMPT"
        );
    }
    let open: Vec<String> = found
        .iter()
        .filter(|(f, _, _)| !EXEMPT.contains(&f.as_str()))
        .map(|(f, line, ty)| format!("{f}:{line} -> {ty}"))
        .collect();
    assert!(
        open.is_empty(),
        "library functions answering `Result<_, String>` (give them a thiserror enum; the binary \
         adds context with anyhow): {open:#?}"
    );
}

/// The scan's parts on the forms it must tell apart.
#[test]
fn the_scan_reads_return_types() {
    let code = "fn a(x: u8) -> Result<Vec<String>, String> { 1 }\n\
                fn b() -> Option<(String, Result<i32, String>)> where T: X { }\n\
                fn c() -> Result<String, Error>;\n\
                let f: Box<dyn Fn(u8) -> Result<(), String>> = g;\n\
                fn d() -> io::Result<String> {}\n\
                fn e() -> ParseResult<u8, String> {}\n\
                fn h() -> std::result::Result<u8, std::string::String> {}\n\
                fn i() -> Result<Box<dyn Fn() -> u8>, String> {}\n";
    let errors: Vec<Vec<String>> = code
        .match_indices("->")
        .map(|(k, _)| results_errors(return_type(code, k + 2)))
        .collect();
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert_eq!(
        errors,
        vec![
            s(&["String"]),
            s(&["String"]),
            s(&["Error"]),
            s(&["String"]),
            s(&[]),
            s(&[]),
            s(&["std::string::String"]),
            s(&["String"]),
            s(&[]),
        ]
    );
    let alias = "pub type R<T> = Result<T, String>;\nfn subtype() {}";
    assert_eq!(alias_type(alias, 4), Some(" Result<T, String>"));
    assert_eq!(alias_type(alias, alias.find("type()").unwrap_or(0)), None);
    assert_eq!(
        without_comments("/// -> Result<u8, String>\nfn x() {} // -> Result<u8, String>"),
        "\nfn x() {} "
    );
}
