//! The user's P4Info, as p4c emits it: text-format protobuf (`p4info.txt`, `--p4runtime-files
//! x.p4info.txt`) or binary (`.bin`/`.pb`). Parsed into the suite's P4Info types so a testbed's
//! program is pushed as the user gave it, and checked against the suite's own description of the
//! program ([`crate::program::Program`]): the tables, match fields, actions and registers the
//! suite writes must be there with the same widths; ids are then looked up by name (p4c assigns
//! hashed ids, not the suite's).
//!
//! The suite's P4Info subset (proto/p4/config/v1/p4info.proto) has the objects it programs;
//! fields outside it (counters, meters, digests, documentation, ...) are not carried and are
//! listed in [`Loaded::dropped`] so the run can say so.

use crate::pb::p4::config::v1 as cfg;
use crate::program::{MatchKind, Program};
use std::collections::BTreeSet;
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum P4InfoError {
    #[error("{file}: cannot read the P4Info: {source}")]
    Io {
        file: String,
        source: std::io::Error,
    },
    #[error("{file}:{line}: {message}")]
    Text {
        file: String,
        line: usize,
        message: String,
    },
    #[error("{file}: not a binary P4Info: {source}")]
    Binary {
        file: String,
        source: prost::DecodeError,
    },
}

/// A P4Info read from a file.
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    pub info: cfg::P4Info,
    /// Field paths of the file that the suite's P4Info subset does not carry (text format only).
    pub dropped: Vec<String>,
}

/// Read a P4Info file: binary when it is not UTF-8 text (or is named `.bin`/`.pb`), else text
/// format.
pub fn load(path: &Path) -> Result<Loaded, P4InfoError> {
    let file = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| P4InfoError::Io {
        file: file.clone(),
        source,
    })?;
    let binary_name = matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("bin" | "pb" | "binpb")
    );
    match std::str::from_utf8(&bytes) {
        Ok(text) if !binary_name => parse_text(&file, text),
        _ => {
            let info = <cfg::P4Info as prost::Message>::decode(bytes.as_slice())
                .map_err(|source| P4InfoError::Binary { file, source })?;
            Ok(Loaded {
                info,
                dropped: Vec::new(),
            })
        }
    }
}

// ---- text format: a generic tree, then the P4Info fields ----

#[derive(Debug, Clone, PartialEq)]
enum Value {
    /// identifier, number or the bytes of a string
    Scalar(Vec<u8>, usize),
    Message(Vec<(String, Value)>, usize),
}

struct Lexer<'a> {
    s: &'a [u8],
    i: usize,
    line: usize,
    file: &'a str,
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Str(Vec<u8>),
    Punct(u8),
    End,
}

impl<'a> Lexer<'a> {
    fn err(&self, message: impl Into<String>) -> P4InfoError {
        P4InfoError::Text {
            file: self.file.to_string(),
            line: self.line,
            message: message.into(),
        }
    }

    fn skip_space(&mut self) {
        while self.i < self.s.len() {
            match self.s[self.i] {
                b'\n' => {
                    self.line += 1;
                    self.i += 1;
                }
                b' ' | b'\t' | b'\r' => self.i += 1,
                b'#' => {
                    while self.i < self.s.len() && self.s[self.i] != b'\n' {
                        self.i += 1;
                    }
                }
                _ => break,
            }
        }
    }

    fn next(&mut self) -> Result<Tok, P4InfoError> {
        self.skip_space();
        let Some(&c) = self.s.get(self.i) else {
            return Ok(Tok::End);
        };
        if c == b'"' || c == b'\'' {
            return self.string(c).map(Tok::Str);
        }
        if c.is_ascii_alphanumeric() || c == b'_' || c == b'-' || c == b'+' || c == b'.' {
            let start = self.i;
            while self.i < self.s.len()
                && (self.s[self.i].is_ascii_alphanumeric()
                    || matches!(self.s[self.i], b'_' | b'-' | b'+' | b'.'))
            {
                self.i += 1;
            }
            return Ok(Tok::Ident(
                String::from_utf8_lossy(&self.s[start..self.i]).into_owned(),
            ));
        }
        if b"{}<>[]:,;".contains(&c) {
            self.i += 1;
            return Ok(Tok::Punct(c));
        }
        Err(self.err(format!("unexpected character `{}`", char::from(c))))
    }

    fn string(&mut self, quote: u8) -> Result<Vec<u8>, P4InfoError> {
        self.i += 1;
        let mut out = Vec::new();
        loop {
            let Some(&c) = self.s.get(self.i) else {
                return Err(self.err("a string is not closed"));
            };
            self.i += 1;
            match c {
                b'\n' => return Err(self.err("a string is not closed on its line")),
                c if c == quote => return Ok(out),
                b'\\' => {
                    let Some(&e) = self.s.get(self.i) else {
                        return Err(self.err("a string ends in an escape"));
                    };
                    self.i += 1;
                    match e {
                        b'n' => out.push(b'\n'),
                        b't' => out.push(b'\t'),
                        b'r' => out.push(b'\r'),
                        b'\\' | b'"' | b'\'' => out.push(e),
                        b'x' => {
                            let h = self.take_digits(16, 2);
                            out.push(h.ok_or_else(|| self.err("bad \\x escape"))?);
                        }
                        b'0'..=b'7' => {
                            self.i -= 1;
                            let o = self.take_digits(8, 3);
                            out.push(o.ok_or_else(|| self.err("bad octal escape"))?);
                        }
                        _ => return Err(self.err(format!("unknown escape \\{}", char::from(e)))),
                    }
                }
                c => out.push(c),
            }
        }
    }

    fn take_digits(&mut self, radix: u32, max: usize) -> Option<u8> {
        let start = self.i;
        while self.i < self.s.len()
            && self.i - start < max
            && char::from(self.s[self.i]).is_digit(radix)
        {
            self.i += 1;
        }
        let t = std::str::from_utf8(&self.s[start..self.i]).ok()?;
        u32::from_str_radix(t, radix)
            .ok()
            .and_then(|v| u8::try_from(v).ok())
    }
}

struct Parser<'a> {
    lx: Lexer<'a>,
    peeked: Option<(Tok, usize)>,
    /// line of the last token taken
    line: usize,
}

impl<'a> Parser<'a> {
    fn lex(&mut self) -> Result<(Tok, usize), P4InfoError> {
        self.lx.skip_space();
        let line = self.lx.line;
        Ok((self.lx.next()?, line))
    }

    fn peek(&mut self) -> Result<&Tok, P4InfoError> {
        if self.peeked.is_none() {
            self.peeked = Some(self.lex()?);
        }
        Ok(&self.peeked.get_or_insert((Tok::End, 0)).0)
    }

    fn bump(&mut self) -> Result<Tok, P4InfoError> {
        let (t, line) = match self.peeked.take() {
            Some(t) => t,
            None => self.lex()?,
        };
        self.line = line;
        Ok(t)
    }

    /// Fields until `close` (or the end for the top level).
    fn message(&mut self, close: Option<u8>) -> Result<Vec<(String, Value)>, P4InfoError> {
        let mut fields = Vec::new();
        loop {
            let tok = self.bump()?;
            let line = self.line;
            match tok {
                Tok::End if close.is_none() => return Ok(fields),
                Tok::End => return Err(self.lx.err("a message is not closed")),
                Tok::Punct(c) if Some(c) == close => return Ok(fields),
                Tok::Punct(b',' | b';') => continue,
                Tok::Ident(name) => {
                    let colon = *self.peek()? == Tok::Punct(b':');
                    if colon {
                        self.bump()?;
                    }
                    match self.bump()? {
                        Tok::Punct(b'{') => {
                            fields.push((name, Value::Message(self.message(Some(b'}'))?, line)))
                        }
                        Tok::Punct(b'<') => {
                            fields.push((name, Value::Message(self.message(Some(b'>'))?, line)))
                        }
                        Tok::Punct(b'[') if colon => loop {
                            match self.bump()? {
                                Tok::Punct(b']') => break,
                                Tok::Punct(b',') => continue,
                                Tok::Punct(b'{') => fields.push((
                                    name.clone(),
                                    Value::Message(self.message(Some(b'}'))?, line),
                                )),
                                t => fields.push((name.clone(), self.scalar(t, line)?)),
                            }
                        },
                        t if colon => {
                            let v = self.scalar(t, line)?;
                            fields.push((name, v));
                        }
                        t => {
                            return Err(self
                                .lx
                                .err(format!("expected `:` or `{{` after `{name}`, found {t:?}")));
                        }
                    }
                }
                t => return Err(self.lx.err(format!("expected a field name, found {t:?}"))),
            }
        }
    }

    fn scalar(&mut self, t: Tok, line: usize) -> Result<Value, P4InfoError> {
        match t {
            Tok::Ident(s) => Ok(Value::Scalar(s.into_bytes(), line)),
            Tok::Str(mut b) => {
                // adjacent strings concatenate
                while let Tok::Str(_) = self.peek()? {
                    if let Tok::Str(more) = self.bump()? {
                        b.extend(more);
                    }
                }
                Ok(Value::Scalar(b, line))
            }
            t => Err(self.lx.err(format!("expected a value, found {t:?}"))),
        }
    }
}

/// Reads typed fields out of a generic message, recording what it did not use.
struct Walk<'a> {
    file: &'a str,
    dropped: BTreeSet<String>,
}

impl Walk<'_> {
    fn err(&self, line: usize, message: String) -> P4InfoError {
        P4InfoError::Text {
            file: self.file.to_string(),
            line,
            message,
        }
    }

    fn string(&self, v: &Value, path: &str) -> Result<String, P4InfoError> {
        match v {
            Value::Scalar(b, _) => Ok(String::from_utf8_lossy(b).into_owned()),
            Value::Message(_, l) => Err(self.err(*l, format!("`{path}` must be a value"))),
        }
    }

    fn int(&self, v: &Value, path: &str) -> Result<i64, P4InfoError> {
        let s = self.string(v, path)?;
        let line = match v {
            Value::Scalar(_, l) | Value::Message(_, l) => *l,
        };
        let (neg, t) = s
            .strip_prefix('-')
            .map_or((false, s.as_str()), |t| (true, t));
        let n = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
            i64::from_str_radix(h, 16)
        } else {
            t.parse::<i64>()
        }
        .map_err(|_| self.err(line, format!("`{path}` must be an integer, not `{s}`")))?;
        Ok(if neg { -n } else { n })
    }

    fn fields<'v>(&self, v: &'v Value, path: &str) -> Result<&'v [(String, Value)], P4InfoError> {
        match v {
            Value::Message(f, _) => Ok(f),
            Value::Scalar(_, l) => Err(self.err(*l, format!("`{path}` must be a message"))),
        }
    }

    fn drop_field(&mut self, path: &str, name: &str) {
        self.dropped.insert(if path.is_empty() {
            name.to_string()
        } else {
            format!("{path}.{name}")
        });
    }

    fn preamble(&mut self, v: &Value, path: &str) -> Result<cfg::Preamble, P4InfoError> {
        let mut p = cfg::Preamble::default();
        for (k, x) in self.fields(v, path)? {
            match k.as_str() {
                "id" => p.id = self.int(x, "preamble.id")? as u32,
                "name" => p.name = self.string(x, "preamble.name")?,
                "alias" => p.alias = self.string(x, "preamble.alias")?,
                "annotations" => p.annotations.push(self.string(x, "annotations")?),
                _ => self.drop_field(path, k),
            }
        }
        Ok(p)
    }

    fn info(&mut self, top: &[(String, Value)]) -> Result<cfg::P4Info, P4InfoError> {
        let mut info = cfg::P4Info::default();
        for (k, v) in top {
            match k.as_str() {
                "pkg_info" => {
                    let mut p = cfg::PkgInfo::default();
                    for (k, x) in self.fields(v, k)? {
                        match k.as_str() {
                            "name" => p.name = self.string(x, "pkg_info.name")?,
                            "version" => p.version = self.string(x, "pkg_info.version")?,
                            "arch" => p.arch = self.string(x, "pkg_info.arch")?,
                            "organization" => {
                                p.organization = self.string(x, "pkg_info.organization")?
                            }
                            "annotations" => p.annotations.push(self.string(x, "annotations")?),
                            _ => self.drop_field("pkg_info", k),
                        }
                    }
                    info.pkg_info = Some(p);
                }
                "tables" => info.tables.push(self.table(v)?),
                "actions" => info.actions.push(self.action(v)?),
                "registers" => info.registers.push(self.register(v)?),
                "controller_packet_metadata" => {
                    let mut c = cfg::ControllerPacketMetadata::default();
                    for (k, x) in self.fields(v, k)? {
                        match k.as_str() {
                            "preamble" => {
                                c.preamble = Some(self.preamble(x, "controller_packet_metadata")?)
                            }
                            "metadata" => {
                                let mut m = cfg::controller_packet_metadata::Metadata::default();
                                for (k, y) in self.fields(x, "metadata")? {
                                    match k.as_str() {
                                        "id" => m.id = self.int(y, "metadata.id")? as u32,
                                        "name" => m.name = self.string(y, "metadata.name")?,
                                        "bitwidth" => {
                                            m.bitwidth = self.int(y, "metadata.bitwidth")? as i32
                                        }
                                        _ => self
                                            .drop_field("controller_packet_metadata.metadata", k),
                                    }
                                }
                                c.metadata.push(m);
                            }
                            _ => self.drop_field("controller_packet_metadata", k),
                        }
                    }
                    info.controller_packet_metadata.push(c);
                }
                _ => self.drop_field("", k),
            }
        }
        Ok(info)
    }

    fn table(&mut self, v: &Value) -> Result<cfg::Table, P4InfoError> {
        let mut t = cfg::Table::default();
        for (k, x) in self.fields(v, "tables")? {
            match k.as_str() {
                "preamble" => t.preamble = Some(self.preamble(x, "tables.preamble")?),
                "match_fields" => {
                    let mut m = cfg::MatchField::default();
                    for (k, y) in self.fields(x, "match_fields")? {
                        match k.as_str() {
                            "id" => m.id = self.int(y, "match_fields.id")? as u32,
                            "name" => m.name = self.string(y, "match_fields.name")?,
                            "bitwidth" => m.bitwidth = self.int(y, "match_fields.bitwidth")? as i32,
                            "annotations" => m.annotations.push(self.string(y, "annotations")?),
                            "match_type" => {
                                use cfg::match_field::MatchType as M;
                                let s = self.string(y, "match_type")?;
                                let mt = M::from_str_name(&s).ok_or_else(|| {
                                    let l = match y {
                                        Value::Scalar(_, l) | Value::Message(_, l) => *l,
                                    };
                                    self.err(l, format!("unknown match_type `{s}`"))
                                })?;
                                m.r#match = Some(cfg::match_field::Match::MatchType(mt as i32));
                            }
                            "other_match_type" => {
                                m.r#match = Some(cfg::match_field::Match::OtherMatchType(
                                    self.string(y, "other_match_type")?,
                                ))
                            }
                            _ => self.drop_field("tables.match_fields", k),
                        }
                    }
                    t.match_fields.push(m);
                }
                "action_refs" => {
                    let mut a = cfg::ActionRef::default();
                    for (k, y) in self.fields(x, "action_refs")? {
                        match k.as_str() {
                            "id" => a.id = self.int(y, "action_refs.id")? as u32,
                            "annotations" => a.annotations.push(self.string(y, "annotations")?),
                            "scope" => {
                                let s = self.string(y, "scope")?;
                                a.scope = cfg::action_ref::Scope::from_str_name(&s)
                                    .map_or(0, |s| s as i32);
                            }
                            _ => self.drop_field("tables.action_refs", k),
                        }
                    }
                    t.action_refs.push(a);
                }
                "const_default_action_id" => {
                    t.const_default_action_id = self.int(x, "const_default_action_id")? as u32
                }
                "size" => t.size = self.int(x, "tables.size")?,
                "is_const_table" => t.is_const_table = self.string(x, "is_const_table")? == "true",
                _ => self.drop_field("tables", k),
            }
        }
        Ok(t)
    }

    fn action(&mut self, v: &Value) -> Result<cfg::Action, P4InfoError> {
        let mut a = cfg::Action::default();
        for (k, x) in self.fields(v, "actions")? {
            match k.as_str() {
                "preamble" => a.preamble = Some(self.preamble(x, "actions.preamble")?),
                "params" => {
                    let mut p = cfg::action::Param::default();
                    for (k, y) in self.fields(x, "params")? {
                        match k.as_str() {
                            "id" => p.id = self.int(y, "params.id")? as u32,
                            "name" => p.name = self.string(y, "params.name")?,
                            "bitwidth" => p.bitwidth = self.int(y, "params.bitwidth")? as i32,
                            "annotations" => p.annotations.push(self.string(y, "annotations")?),
                            _ => self.drop_field("actions.params", k),
                        }
                    }
                    a.params.push(p);
                }
                _ => self.drop_field("actions", k),
            }
        }
        Ok(a)
    }

    fn register(&mut self, v: &Value) -> Result<cfg::Register, P4InfoError> {
        let mut r = cfg::Register::default();
        for (k, x) in self.fields(v, "registers")? {
            match k.as_str() {
                "preamble" => r.preamble = Some(self.preamble(x, "registers.preamble")?),
                "size" => r.size = self.int(x, "registers.size")? as i32,
                "type_spec" => {
                    // type_spec { bitstring { bit { bitwidth: W } } }
                    let mut width = None;
                    for (k, y) in self.fields(x, "type_spec")? {
                        if k != "bitstring" {
                            self.drop_field("registers.type_spec", k);
                            continue;
                        }
                        for (k, z) in self.fields(y, "bitstring")? {
                            if k != "bit" {
                                self.drop_field("registers.type_spec.bitstring", k);
                                continue;
                            }
                            for (k, w) in self.fields(z, "bit")? {
                                if k == "bitwidth" {
                                    width = Some(self.int(w, "bitwidth")? as i32);
                                }
                            }
                        }
                    }
                    r.type_spec = width.map(|bitwidth| cfg::P4DataTypeSpec {
                        type_spec: Some(cfg::p4_data_type_spec::TypeSpec::Bitstring(
                            cfg::P4BitstringLikeTypeSpec {
                                type_spec: Some(cfg::p4_bitstring_like_type_spec::TypeSpec::Bit(
                                    cfg::P4BitTypeSpec { bitwidth },
                                )),
                                annotations: vec![],
                            },
                        )),
                    });
                }
                _ => self.drop_field("registers", k),
            }
        }
        Ok(r)
    }
}

/// Parse a text-format P4Info.
pub fn parse_text(file: &str, text: &str) -> Result<Loaded, P4InfoError> {
    let mut p = Parser {
        lx: Lexer {
            s: text.as_bytes(),
            i: 0,
            line: 1,
            file,
        },
        peeked: None,
        line: 1,
    };
    let top = p.message(None)?;
    let mut w = Walk {
        file,
        dropped: BTreeSet::new(),
    };
    let info = w.info(&top)?;
    Ok(Loaded {
        info,
        dropped: w.dropped.into_iter().collect(),
    })
}

fn name_of(p: &Option<cfg::Preamble>) -> &str {
    p.as_ref().map_or("", |p| p.name.as_str())
}

fn id_of(p: &Option<cfg::Preamble>) -> u32 {
    p.as_ref().map_or(0, |p| p.id)
}

fn register_width(r: &cfg::Register) -> Option<i32> {
    use cfg::p4_bitstring_like_type_spec::TypeSpec as B;
    use cfg::p4_data_type_spec::TypeSpec as D;
    match r.type_spec.as_ref()?.type_spec.as_ref()? {
        D::Bitstring(b) => match b.type_spec.as_ref()? {
            B::Bit(w) => Some(w.bitwidth),
        },
    }
}

/// Where a user's P4Info differs from the suite's description of the program ([`check`]): one
/// sentence each.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Mismatch {
    #[error("the P4Info has no table `{table}` that the suite's `{program}` program writes")]
    NoTable { table: String, program: String },
    #[error("table `{table}` has no match field `{field}`")]
    NoMatchField { table: String, field: String },
    /// `info_kind` and `kind`: the match kinds as the P4Info and the suite name them.
    #[error(
        "table `{table}` match field `{field}` is {info_bits} bits {info_kind} in the P4Info, the suite describes {bits} bits {kind}"
    )]
    MatchField {
        table: String,
        field: String,
        info_bits: i32,
        info_kind: String,
        bits: i32,
        kind: String,
    },
    #[error("the P4Info has no action `{action}`")]
    NoAction { action: String },
    #[error("table `{table}` does not list action `{action}` in the P4Info")]
    ActionNotListed { table: String, action: String },
    #[error(
        "action `{action}` parameter `{param}` is {info_bits} bits in the P4Info, the suite describes {bits}"
    )]
    ParamWidth {
        action: String,
        param: String,
        info_bits: i32,
        bits: i32,
    },
    #[error("action `{action}` has no parameter `{param}`")]
    NoParam { action: String, param: String },
    #[error("the P4Info has no register `{register}` that the suite's `{program}` program uses")]
    NoRegister { register: String, program: String },
    /// `info_width`: `N bits`, or `not a bit<W>`.
    #[error(
        "register `{register}` is {info_width} x {info_size} in the P4Info, the suite needs {bits} bits x at least {size}"
    )]
    Register {
        register: String,
        info_width: String,
        info_size: i32,
        bits: i32,
        size: i32,
    },
}

/// Check the user's P4Info against the suite's description of the program: every table (with
/// its match fields' names, widths and kinds, and its actions), every action's parameters and
/// every register (width, and at least the described size) must be there. The first mismatch is
/// one sentence.
pub fn check(info: &cfg::P4Info, prog: &Program) -> Result<(), Mismatch> {
    for t in &prog.tables {
        let Some(u) = info.tables.iter().find(|u| name_of(&u.preamble) == t.name) else {
            return Err(Mismatch::NoTable {
                table: t.name.clone(),
                program: prog.name.to_string(),
            });
        };
        for f in &t.fields {
            let Some(m) = u.match_fields.iter().find(|m| m.name == f.name) else {
                return Err(Mismatch::NoMatchField {
                    table: t.name.clone(),
                    field: f.name.clone(),
                });
            };
            let kind = match f.kind {
                MatchKind::Exact => cfg::match_field::MatchType::Exact,
                MatchKind::Lpm => cfg::match_field::MatchType::Lpm,
                MatchKind::Ternary => cfg::match_field::MatchType::Ternary,
            };
            if m.bitwidth != f.bitwidth
                || m.r#match != Some(cfg::match_field::Match::MatchType(kind as i32))
            {
                return Err(Mismatch::MatchField {
                    table: t.name.clone(),
                    field: f.name.clone(),
                    info_bits: m.bitwidth,
                    info_kind: format!("{:?}", m.r#match),
                    bits: f.bitwidth,
                    kind: format!("{kind:?}"),
                });
            }
        }
        for a in &t.actions {
            let Some(ad) = prog.actions.get(*a) else {
                continue;
            };
            let Some(ua) = info
                .actions
                .iter()
                .find(|x| name_of(&x.preamble) == ad.name)
            else {
                return Err(Mismatch::NoAction {
                    action: ad.name.clone(),
                });
            };
            if !u.action_refs.iter().any(|r| r.id == id_of(&ua.preamble)) {
                return Err(Mismatch::ActionNotListed {
                    table: t.name.clone(),
                    action: ad.name.clone(),
                });
            }
            for (pn, pw) in &ad.params {
                match ua.params.iter().find(|p| &p.name == pn) {
                    Some(p) if p.bitwidth == *pw => {}
                    Some(p) => {
                        return Err(Mismatch::ParamWidth {
                            action: ad.name.clone(),
                            param: pn.clone(),
                            info_bits: p.bitwidth,
                            bits: *pw,
                        });
                    }
                    None => {
                        return Err(Mismatch::NoParam {
                            action: ad.name.clone(),
                            param: pn.clone(),
                        });
                    }
                }
            }
        }
    }
    for r in &prog.registers {
        let Some(u) = info
            .registers
            .iter()
            .find(|u| name_of(&u.preamble) == r.name)
        else {
            return Err(Mismatch::NoRegister {
                register: r.name.clone(),
                program: prog.name.to_string(),
            });
        };
        if register_width(u) != Some(r.bitwidth) || u.size < r.size {
            return Err(Mismatch::Register {
                register: r.name.clone(),
                info_width: register_width(u)
                    .map_or("not a bit<W>".to_string(), |w| format!("{w} bits")),
                info_size: u.size,
                bits: r.bitwidth,
                size: r.size,
            });
        }
    }
    Ok(())
}

/// Ids of a P4Info looked up by name.
pub struct Ids<'a>(pub &'a cfg::P4Info);

impl Ids<'_> {
    pub fn table(&self, name: &str) -> Option<u32> {
        self.0
            .tables
            .iter()
            .find(|t| name_of(&t.preamble) == name)
            .map(|t| id_of(&t.preamble))
    }

    pub fn action(&self, name: &str) -> Option<u32> {
        self.0
            .actions
            .iter()
            .find(|t| name_of(&t.preamble) == name)
            .map(|t| id_of(&t.preamble))
    }

    pub fn match_field(&self, table: &str, field: &str) -> Option<u32> {
        self.0
            .tables
            .iter()
            .find(|t| name_of(&t.preamble) == table)?
            .match_fields
            .iter()
            .find(|m| m.name == field)
            .map(|m| m.id)
    }

    pub fn param(&self, action: &str, param: &str) -> Option<u32> {
        self.0
            .actions
            .iter()
            .find(|t| name_of(&t.preamble) == action)?
            .params
            .iter()
            .find(|p| p.name == param)
            .map(|p| p.id)
    }
}
