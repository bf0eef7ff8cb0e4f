//! The claim language: a paper's qualitative statement as an expression over the results.
//!
//! The grammar and the functions are documented in `experiments/SCHEMA.md`. An expression is
//! evaluated on the aggregated results of one fidelity class (one value per system, point and
//! metric: the median of the repetitions). `metric(system)` is a *series*: a value per point,
//! keyed by the point's parameters; comparisons between series are checked point by point on the
//! points both have, and a claim holds when every compared point holds (and there is at least one).

use crate::spec::PaperValue;
use crate::value::{Params, Scalar, params_key, params_match};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// A parse error with the byte offset in the expression.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message} at column {}", column + 1)]
pub struct ParseError {
    pub column: usize,
    pub message: String,
}

/// Why an evaluation could not produce a verdict.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EvalError {
    #[error("no results for {0} in this run")]
    NoData(String),
    #[error("the paper gives no value for {0}")]
    NoPaperValue(String),
    #[error("{0}")]
    Type(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
    And,
    Or,
}

impl BinOp {
    fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::And => "and",
            BinOp::Or => "or",
        }
    }
}

/// The expression tree.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    Num(f64),
    /// A parameter of the point (`P`, `n`, `B_intra_GBps`).
    Param(String),
    /// `metric(system)[filters]`; system `*` is every system.
    Series {
        metric: String,
        system: String,
        filter: Params,
    },
    Call(String, Vec<Expr>),
    Neg(Box<Expr>),
    Not(Box<Expr>),
    Bin(BinOp, Box<Expr>, Box<Expr>),
    /// `expr where cond`: only points whose parameters satisfy `cond`.
    Where(Box<Expr>, Box<Expr>),
}

const BUILTINS: [&str; 11] = [
    "min",
    "max",
    "mean",
    "median",
    "within",
    "increasing",
    "decreasing",
    "flat",
    "ratio",
    "abs",
    "paper",
];

/// What an expression refers to, for validation against the spec.
#[derive(Debug, Default, Clone)]
pub struct References {
    pub metrics: BTreeSet<String>,
    pub systems: BTreeSet<String>,
    pub params: BTreeSet<String>,
}

impl Expr {
    pub fn references(&self) -> References {
        let mut r = References::default();
        self.collect(&mut r);
        r
    }

    fn collect(&self, r: &mut References) {
        match self {
            Expr::Num(_) => {}
            Expr::Param(p) => {
                r.params.insert(p.clone());
            }
            Expr::Series {
                metric,
                system,
                filter,
            } => {
                r.metrics.insert(metric.clone());
                r.systems.insert(system.clone());
                r.params.extend(filter.keys().cloned());
            }
            Expr::Call(_, args) => args.iter().for_each(|a| a.collect(r)),
            Expr::Neg(e) | Expr::Not(e) => e.collect(r),
            Expr::Bin(_, a, b) | Expr::Where(a, b) => {
                a.collect(r);
                b.collect(r);
            }
        }
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Num(x) => write!(f, "{x}"),
            Expr::Param(p) => f.write_str(p),
            Expr::Series {
                metric,
                system,
                filter,
            } => {
                write!(f, "{metric}({system})")?;
                if !filter.is_empty() {
                    write!(f, "[{}]", params_key(filter).replace(' ', ", "))?;
                }
                Ok(())
            }
            Expr::Call(name, args) => {
                write!(f, "{name}(")?;
                for (i, a) in args.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{a}")?;
                }
                f.write_str(")")
            }
            Expr::Neg(e) => write!(f, "-{e}"),
            Expr::Not(e) => write!(f, "not {e}"),
            Expr::Bin(op, a, b) => write!(f, "({a} {} {b})", op.symbol()),
            Expr::Where(a, b) => write!(f, "{a} where {b}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Lexer and parser

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(f64),
    Ident(String),
    Sym(&'static str),
}

fn lex(src: &str) -> Result<Vec<(usize, Tok)>, ParseError> {
    let b = src.as_bytes();
    let mut i = 0;
    let mut out = Vec::new();
    while i < b.len() {
        let c = b[i] as char;
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        if c.is_ascii_digit() || (c == '.' && b.get(i + 1).is_some_and(|d| d.is_ascii_digit())) {
            while i < b.len() && ((b[i] as char).is_ascii_digit() || b[i] == b'.') {
                i += 1;
            }
            if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
                let mut j = i + 1;
                if j < b.len() && (b[j] == b'-' || b[j] == b'+') {
                    j += 1;
                }
                if j < b.len() && (b[j] as char).is_ascii_digit() {
                    i = j;
                    while i < b.len() && (b[i] as char).is_ascii_digit() {
                        i += 1;
                    }
                }
            }
            let text = &src[start..i];
            let mut v: f64 = text.parse().map_err(|_| ParseError {
                column: start,
                message: format!("`{text}` is not a number"),
            })?;
            if i < b.len() && b[i] == b'%' {
                v /= 100.0;
                i += 1;
            }
            out.push((start, Tok::Num(v)));
            continue;
        }
        if c.is_ascii_alphabetic() || c == '_' {
            while i < b.len()
                && ((b[i] as char).is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'.')
            {
                i += 1;
            }
            out.push((start, Tok::Ident(src[start..i].to_string())));
            continue;
        }
        let two = src.get(i..i + 2).unwrap_or("");
        let sym: &'static str = match two {
            "<=" => "<=",
            ">=" => ">=",
            "==" => "==",
            "!=" => "!=",
            _ => match c {
                '<' => "<",
                '>' => ">",
                '=' => "=",
                '+' => "+",
                '-' => "-",
                '*' => "*",
                '/' => "/",
                '(' => "(",
                ')' => ")",
                '[' => "[",
                ']' => "]",
                ',' => ",",
                _ => {
                    return Err(ParseError {
                        column: start,
                        message: format!("unexpected character `{c}`"),
                    });
                }
            },
        };
        i += sym.len();
        out.push((start, Tok::Sym(sym)));
    }
    Ok(out)
}

struct Parser {
    toks: Vec<(usize, Tok)>,
    pos: usize,
    end: usize,
}

/// Parse a claim expression.
pub fn parse(src: &str) -> Result<Expr, ParseError> {
    let toks = lex(src)?;
    let mut p = Parser {
        toks,
        pos: 0,
        end: src.len(),
    };
    let e = p.expr()?;
    let e = if p.eat_ident("where") {
        let cond = p.expr()?;
        Expr::Where(Box::new(e), Box::new(cond))
    } else {
        e
    };
    if p.pos < p.toks.len() {
        return Err(p.error(&format!("unexpected `{}`", p.describe())));
    }
    Ok(e)
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|(_, t)| t)
    }

    fn column(&self) -> usize {
        self.toks.get(self.pos).map(|(c, _)| *c).unwrap_or(self.end)
    }

    fn describe(&self) -> String {
        match self.peek() {
            None => "end of expression".into(),
            Some(Tok::Num(n)) => n.to_string(),
            Some(Tok::Ident(s)) => s.clone(),
            Some(Tok::Sym(s)) => s.to_string(),
        }
    }

    fn error(&self, msg: &str) -> ParseError {
        ParseError {
            column: self.column(),
            message: msg.to_string(),
        }
    }

    fn eat_sym(&mut self, s: &str) -> bool {
        if matches!(self.peek(), Some(Tok::Sym(x)) if *x == s) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn eat_ident(&mut self, s: &str) -> bool {
        if matches!(self.peek(), Some(Tok::Ident(x)) if x == s) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect_sym(&mut self, s: &str) -> Result<(), ParseError> {
        if self.eat_sym(s) {
            Ok(())
        } else {
            Err(self.error(&format!("expected `{s}`, found `{}`", self.describe())))
        }
    }

    fn expr(&mut self) -> Result<Expr, ParseError> {
        let mut e = self.and()?;
        while self.eat_ident("or") {
            let r = self.and()?;
            e = Expr::Bin(BinOp::Or, Box::new(e), Box::new(r));
        }
        Ok(e)
    }

    fn and(&mut self) -> Result<Expr, ParseError> {
        let mut e = self.not()?;
        while self.eat_ident("and") {
            let r = self.not()?;
            e = Expr::Bin(BinOp::And, Box::new(e), Box::new(r));
        }
        Ok(e)
    }

    fn not(&mut self) -> Result<Expr, ParseError> {
        if self.eat_ident("not") {
            return Ok(Expr::Not(Box::new(self.not()?)));
        }
        self.cmp()
    }

    fn cmp(&mut self) -> Result<Expr, ParseError> {
        let l = self.add()?;
        let op = match self.peek() {
            Some(Tok::Sym("<")) => BinOp::Lt,
            Some(Tok::Sym("<=")) => BinOp::Le,
            Some(Tok::Sym(">")) => BinOp::Gt,
            Some(Tok::Sym(">=")) => BinOp::Ge,
            Some(Tok::Sym("==")) => BinOp::Eq,
            Some(Tok::Sym("!=")) => BinOp::Ne,
            Some(Tok::Sym("=")) => return Err(self.error("use `==` to compare")),
            _ => return Ok(l),
        };
        self.pos += 1;
        let r = self.add()?;
        Ok(Expr::Bin(op, Box::new(l), Box::new(r)))
    }

    fn add(&mut self) -> Result<Expr, ParseError> {
        let mut e = self.mul()?;
        loop {
            let op = if self.eat_sym("+") {
                BinOp::Add
            } else if self.eat_sym("-") {
                BinOp::Sub
            } else {
                return Ok(e);
            };
            let r = self.mul()?;
            e = Expr::Bin(op, Box::new(e), Box::new(r));
        }
    }

    fn mul(&mut self) -> Result<Expr, ParseError> {
        let mut e = self.unary()?;
        loop {
            let op = if self.eat_sym("*") {
                BinOp::Mul
            } else if self.eat_sym("/") {
                BinOp::Div
            } else {
                return Ok(e);
            };
            let r = self.unary()?;
            e = Expr::Bin(op, Box::new(e), Box::new(r));
        }
    }

    fn unary(&mut self) -> Result<Expr, ParseError> {
        if self.eat_sym("-") {
            return Ok(Expr::Neg(Box::new(self.unary()?)));
        }
        self.primary()
    }

    fn primary(&mut self) -> Result<Expr, ParseError> {
        match self.peek().cloned() {
            Some(Tok::Num(v)) => {
                self.pos += 1;
                Ok(Expr::Num(v))
            }
            Some(Tok::Sym("(")) => {
                self.pos += 1;
                let e = self.expr()?;
                self.expect_sym(")")?;
                Ok(e)
            }
            Some(Tok::Ident(name)) => {
                if ["and", "or", "not", "where"].contains(&name.as_str()) {
                    return Err(self.error(&format!("unexpected `{name}`")));
                }
                self.pos += 1;
                if !self.eat_sym("(") {
                    return Ok(Expr::Param(name));
                }
                if BUILTINS.contains(&name.as_str()) {
                    let mut args = vec![self.expr()?];
                    while self.eat_sym(",") {
                        args.push(self.expr()?);
                    }
                    self.expect_sym(")")?;
                    check_arity(&name, args.len()).map_err(|m| self.error(&m))?;
                    return Ok(Expr::Call(name, args));
                }
                // A metric series: metric(system) or metric(*)
                let system = match self.peek().cloned() {
                    Some(Tok::Sym("*")) => "*".to_string(),
                    Some(Tok::Ident(s)) => s,
                    _ => {
                        return Err(self.error(&format!(
                            "expected a system name in `{name}(...)`, found `{}`",
                            self.describe()
                        )));
                    }
                };
                self.pos += 1;
                self.expect_sym(")")?;
                let mut filter = Params::new();
                if self.eat_sym("[") {
                    loop {
                        let key = match self.peek().cloned() {
                            Some(Tok::Ident(k)) => k,
                            _ => return Err(self.error("expected a parameter name in the filter")),
                        };
                        self.pos += 1;
                        if !self.eat_sym("=") && !self.eat_sym("==") {
                            return Err(self.error("expected `=` in the filter"));
                        }
                        let neg = self.eat_sym("-");
                        let val = match self.peek().cloned() {
                            Some(Tok::Num(v)) => Scalar::Float(if neg { -v } else { v }),
                            Some(Tok::Ident(s)) if !neg => Scalar::Str(s),
                            _ => return Err(self.error("expected a value in the filter")),
                        };
                        self.pos += 1;
                        filter.insert(key, val);
                        if self.eat_sym("]") {
                            break;
                        }
                        self.expect_sym(",")?;
                    }
                }
                Ok(Expr::Series {
                    metric: name,
                    system,
                    filter,
                })
            }
            _ => Err(self.error(&format!("unexpected `{}`", self.describe()))),
        }
    }
}

fn check_arity(name: &str, n: usize) -> Result<(), String> {
    let ok = match name {
        "within" | "flat" => n == 3,
        "increasing" | "decreasing" | "ratio" => n == 2,
        "abs" | "paper" | "mean" | "median" => n == 1,
        "min" | "max" => n >= 1,
        _ => true,
    };
    if ok {
        Ok(())
    } else {
        Err(format!("wrong number of arguments to `{name}` ({n})"))
    }
}

// ---------------------------------------------------------------------------------------------
// Evaluation

/// One aggregated observation: a system's metric at a point (median over repetitions).
#[derive(Debug, Clone)]
pub struct Obs {
    pub system: String,
    pub params: Params,
    pub metric: String,
    pub value: f64,
}

/// The verdict of a claim in one fidelity class.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Holds(String),
    Fails(String),
    NotCheckable(String),
}

impl Verdict {
    pub fn label(&self) -> &'static str {
        match self {
            Verdict::Holds(_) => "holds",
            Verdict::Fails(_) => "fails",
            Verdict::NotCheckable(_) => "not checkable here",
        }
    }

    pub fn detail(&self) -> &str {
        match self {
            Verdict::Holds(d) | Verdict::Fails(d) | Verdict::NotCheckable(d) => d,
        }
    }
}

type Key = String;

/// Per point: whether a comparison held, and its numbers.
type Checks = BTreeMap<Key, (bool, String)>;

#[derive(Debug, Clone)]
enum Val {
    Num(f64),
    Series(BTreeMap<Key, f64>),
    /// metric(*): per point, per system
    Multi(BTreeMap<Key, BTreeMap<String, f64>>),
    Bool(bool, String),
    Bools(BTreeMap<Key, (bool, String)>),
}

/// Evaluation context: the observations of one fidelity class and the paper's values.
pub struct Context<'a> {
    obs: &'a [Obs],
    paper: &'a [PaperValue],
    /// point key -> parameters
    points: BTreeMap<Key, Params>,
}

impl<'a> Context<'a> {
    pub fn new(obs: &'a [Obs], paper: &'a [PaperValue]) -> Self {
        let points = obs
            .iter()
            .map(|o| (params_key(&o.params), o.params.clone()))
            .collect();
        Context { obs, paper, points }
    }

    /// Evaluate a parsed claim to a verdict.
    pub fn verdict(&self, e: &Expr) -> Verdict {
        match self.eval(e, None) {
            Err(EvalError::Type(m)) => {
                Verdict::NotCheckable(format!("the expression cannot be evaluated: {m}"))
            }
            Err(err) => Verdict::NotCheckable(err.to_string()),
            Ok(Val::Bool(true, d)) => Verdict::Holds(d),
            Ok(Val::Bool(false, d)) => Verdict::Fails(d),
            Ok(Val::Bools(m)) => summarise(&m),
            Ok(_) => Verdict::NotCheckable("the expression is not a comparison".into()),
        }
    }

    fn eval(&self, e: &Expr, cond: Option<&Expr>) -> Result<Val, EvalError> {
        Ok(match e {
            Expr::Num(v) => Val::Num(*v),
            Expr::Param(p) => {
                let mut m = BTreeMap::new();
                for (k, params) in &self.points {
                    if self.visible(params, cond)?
                        && let Some(v) = params.get(p).and_then(Scalar::as_f64)
                    {
                        m.insert(k.clone(), v);
                    }
                }
                if m.is_empty() {
                    return Err(EvalError::NoData(format!("parameter `{p}`")));
                }
                Val::Series(m)
            }
            Expr::Series {
                metric,
                system,
                filter,
            } => {
                let mut single = BTreeMap::new();
                let mut multi: BTreeMap<Key, BTreeMap<String, f64>> = BTreeMap::new();
                for o in self.obs {
                    if &o.metric != metric || (system != "*" && &o.system != system) {
                        continue;
                    }
                    if !params_match(&o.params, filter) || !self.visible(&o.params, cond)? {
                        continue;
                    }
                    let k = params_key(&o.params);
                    if system == "*" {
                        multi
                            .entry(k)
                            .or_default()
                            .insert(o.system.clone(), o.value);
                    } else {
                        single.insert(k, o.value);
                    }
                }
                if system == "*" {
                    if multi.is_empty() {
                        return Err(EvalError::NoData(e.to_string()));
                    }
                    Val::Multi(multi)
                } else {
                    if single.is_empty() {
                        return Err(EvalError::NoData(e.to_string()));
                    }
                    Val::Series(single)
                }
            }
            Expr::Neg(x) => arith(BinOp::Sub, Val::Num(0.0), self.eval(x, cond)?)?,
            Expr::Not(x) => match self.eval(x, cond)? {
                Val::Bool(b, d) => Val::Bool(!b, format!("not ({d})")),
                Val::Bools(m) => Val::Bools(
                    m.into_iter()
                        .map(|(k, (b, d))| (k, (!b, format!("not ({d})"))))
                        .collect(),
                ),
                _ => return Err(EvalError::Type("`not` needs a comparison".into())),
            },
            Expr::Where(x, c) => {
                let combined = match cond {
                    Some(outer) => Expr::Bin(BinOp::And, Box::new(outer.clone()), c.clone()),
                    None => (**c).clone(),
                };
                self.eval(x, Some(&combined))?
            }
            Expr::Bin(op, a, b) => {
                let l = self.eval(a, cond)?;
                let r = self.eval(b, cond)?;
                match op {
                    BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div => arith(*op, l, r)?,
                    BinOp::And | BinOp::Or => logic(*op, l, r)?,
                    _ => compare(*op, l, r)?,
                }
            }
            Expr::Call(name, args) => self.call(name, args, cond)?,
        })
    }

    /// Whether a point's parameters satisfy the `where` condition.
    fn visible(&self, params: &Params, cond: Option<&Expr>) -> Result<bool, EvalError> {
        match cond {
            None => Ok(true),
            Some(c) => Ok(eval_cond(c, params)? != 0.0),
        }
    }

    fn call(&self, name: &str, args: &[Expr], cond: Option<&Expr>) -> Result<Val, EvalError> {
        match name {
            "paper" => {
                let Expr::Series {
                    metric,
                    system,
                    filter,
                } = &args[0]
                else {
                    return Err(EvalError::Type(
                        "`paper` takes a series like `gput(netreduce)`".into(),
                    ));
                };
                let ours = match self.eval(&args[0], cond)? {
                    Val::Series(s) => s,
                    _ => {
                        return Err(EvalError::Type(
                            "`paper(metric(*))` is not supported".into(),
                        ));
                    }
                };
                let mut m = BTreeMap::new();
                for k in ours.keys() {
                    let params = &self.points[k];
                    if let Some(pv) = self.paper.iter().find(|pv| {
                        &pv.metric == metric
                            && &pv.system == system
                            && params_match(params, &pv.params)
                    }) {
                        m.insert(k.clone(), pv.value);
                    }
                }
                let _ = filter;
                if m.is_empty() {
                    return Err(EvalError::NoPaperValue(args[0].to_string()));
                }
                Ok(Val::Series(m))
            }
            "abs" => match self.eval(&args[0], cond)? {
                Val::Num(v) => Ok(Val::Num(v.abs())),
                Val::Series(s) => Ok(Val::Series(
                    s.into_iter().map(|(k, v)| (k, v.abs())).collect(),
                )),
                _ => Err(EvalError::Type("`abs` needs a number or a series".into())),
            },
            "ratio" => arith(
                BinOp::Div,
                self.eval(&args[0], cond)?,
                self.eval(&args[1], cond)?,
            ),
            "min" | "max" | "mean" | "median" => {
                if args.len() >= 2 {
                    let mut acc = self.eval(&args[0], cond)?;
                    for a in &args[1..] {
                        acc = elementwise(name, acc, self.eval(a, cond)?)?;
                    }
                    return Ok(acc);
                }
                match self.eval(&args[0], cond)? {
                    Val::Num(v) => Ok(Val::Num(v)),
                    Val::Series(s) => Ok(Val::Num(reduce(name, s.values().copied().collect()))),
                    Val::Multi(m) => Ok(Val::Series(
                        m.into_iter()
                            .map(|(k, per)| (k, reduce(name, per.values().copied().collect())))
                            .collect(),
                    )),
                    _ => Err(EvalError::Type(format!("`{name}` needs numbers"))),
                }
            }
            "within" => {
                let a = self.eval(&args[0], cond)?;
                let b = self.eval(&args[1], cond)?;
                let Val::Num(tol) = self.eval(&args[2], cond)? else {
                    return Err(EvalError::Type(
                        "the tolerance of `within` must be a number like 10%".into(),
                    ));
                };
                let f = move |x: f64, y: f64| {
                    let ok = (x - y).abs() <= tol * y.abs();
                    let dev = if y != 0.0 {
                        (x - y) / y.abs() * 100.0
                    } else {
                        f64::INFINITY
                    };
                    (
                        ok,
                        format!(
                            "{} vs {} ({:+.2}%, tolerance {}%)",
                            fmt_num(x),
                            fmt_num(y),
                            dev,
                            fmt_num(tol * 100.0)
                        ),
                    )
                };
                pairwise(a, b, f)
            }
            "increasing" | "decreasing" | "flat" => {
                let s = match self.eval(&args[0], cond)? {
                    Val::Series(s) => s,
                    _ => {
                        return Err(EvalError::Type(format!(
                            "`{name}` needs a series of one system"
                        )));
                    }
                };
                let Expr::Param(param) = &args[1] else {
                    return Err(EvalError::Type(format!(
                        "the second argument of `{name}` is a parameter name"
                    )));
                };
                let tol = if name == "flat" {
                    match self.eval(&args[2], cond)? {
                        Val::Num(t) => t,
                        _ => {
                            return Err(EvalError::Type(
                                "the tolerance of `flat` must be a number".into(),
                            ));
                        }
                    }
                } else {
                    0.0
                };
                self.trend(name, &s, param, tol)
            }
            other => Err(EvalError::Type(format!("unknown function `{other}`"))),
        }
    }

    /// Group a series by every parameter but `param`, order each group along `param`, and check it.
    fn trend(
        &self,
        kind: &str,
        s: &BTreeMap<Key, f64>,
        param: &str,
        tol: f64,
    ) -> Result<Val, EvalError> {
        let mut groups: BTreeMap<String, Vec<(Scalar, f64)>> = BTreeMap::new();
        for (k, v) in s {
            let params = &self.points[k];
            let Some(x) = params.get(param) else { continue };
            let mut rest = params.clone();
            rest.remove(param);
            groups
                .entry(params_key(&rest))
                .or_default()
                .push((x.clone(), *v));
        }
        let mut out = BTreeMap::new();
        for (g, mut pts) in groups {
            if pts.len() < 2 {
                continue;
            }
            pts.sort_by(|a, b| a.0.cmp_total(&b.0));
            let vals: Vec<f64> = pts.iter().map(|p| p.1).collect();
            let (ok, detail) = match kind {
                "increasing" | "decreasing" => {
                    let inc = kind == "increasing";
                    let bad = vals
                        .windows(2)
                        .position(|w| if inc { w[1] <= w[0] } else { w[1] >= w[0] });
                    let seq = pts
                        .iter()
                        .map(|(x, v)| format!("{param}={x}: {}", fmt_num(*v)))
                        .collect::<Vec<_>>()
                        .join(", ");
                    match bad {
                        None => (true, format!("{kind} along {param} ({seq})")),
                        Some(i) => (
                            false,
                            format!(
                                "not {kind} from {param}={} to {param}={} ({seq})",
                                pts[i].0,
                                pts[i + 1].0
                            ),
                        ),
                    }
                }
                _ => {
                    let lo = vals.iter().copied().fold(f64::INFINITY, f64::min);
                    let hi = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let spread = if lo != 0.0 {
                        (hi - lo) / lo.abs()
                    } else if hi == lo {
                        0.0
                    } else {
                        f64::INFINITY
                    };
                    (
                        spread <= tol,
                        format!(
                            "varies by {:.3}% along {param} (min {}, max {}; tolerance {}%)",
                            spread * 100.0,
                            fmt_num(lo),
                            fmt_num(hi),
                            fmt_num(tol * 100.0)
                        ),
                    )
                }
            };
            out.insert(g, (ok, detail));
        }
        if out.is_empty() {
            return Err(EvalError::NoData(format!(
                "a sweep over `{param}` (at least two values with the other parameters fixed)"
            )));
        }
        Ok(Val::Bools(out))
    }
}

/// Evaluate a `where` condition on one point's parameters (non-zero is true).
fn eval_cond(e: &Expr, p: &Params) -> Result<f64, EvalError> {
    let b = |x: bool| if x { 1.0 } else { 0.0 };
    Ok(match e {
        Expr::Num(v) => *v,
        Expr::Param(name) => match p.get(name) {
            Some(v) => v
                .as_f64()
                .ok_or_else(|| EvalError::Type(format!("parameter `{name}` is not a number")))?,
            None => return Ok(f64::NAN),
        },
        Expr::Neg(x) => -eval_cond(x, p)?,
        Expr::Not(x) => b(eval_cond(x, p)? == 0.0),
        Expr::Bin(op, l, r) => {
            let (x, y) = (eval_cond(l, p)?, eval_cond(r, p)?);
            match op {
                BinOp::Add => x + y,
                BinOp::Sub => x - y,
                BinOp::Mul => x * y,
                BinOp::Div => x / y,
                BinOp::Lt => b(x < y),
                BinOp::Le => b(x <= y),
                BinOp::Gt => b(x > y),
                BinOp::Ge => b(x >= y),
                BinOp::Eq => b(x == y),
                BinOp::Ne => b(x != y),
                BinOp::And => b(x != 0.0 && y != 0.0 && !x.is_nan() && !y.is_nan()),
                BinOp::Or => b((x != 0.0 && !x.is_nan()) || (y != 0.0 && !y.is_nan())),
            }
        }
        Expr::Series { .. } | Expr::Call(..) | Expr::Where(..) => {
            return Err(EvalError::Type(
                "a `where` condition may only use parameters and numbers".into(),
            ));
        }
    })
}

fn reduce(name: &str, mut v: Vec<f64>) -> f64 {
    match name {
        "min" => v.iter().copied().fold(f64::INFINITY, f64::min),
        "max" => v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        "mean" => v.iter().sum::<f64>() / v.len() as f64,
        _ => {
            v.sort_by(|a, b| a.total_cmp(b));
            let n = v.len();
            if n % 2 == 1 {
                v[n / 2]
            } else {
                (v[n / 2 - 1] + v[n / 2]) / 2.0
            }
        }
    }
}

fn elementwise(name: &str, a: Val, b: Val) -> Result<Val, EvalError> {
    let f = |x: f64, y: f64| match name {
        "min" => x.min(y),
        "max" => x.max(y),
        "mean" | "median" => (x + y) / 2.0,
        _ => f64::NAN,
    };
    numeric(a, b, f)
}

fn arith(op: BinOp, a: Val, b: Val) -> Result<Val, EvalError> {
    numeric(a, b, |x, y| match op {
        BinOp::Add => x + y,
        BinOp::Sub => x - y,
        BinOp::Mul => x * y,
        _ => x / y,
    })
}

fn numeric(a: Val, b: Val, f: impl Fn(f64, f64) -> f64) -> Result<Val, EvalError> {
    Ok(match (a, b) {
        (Val::Num(x), Val::Num(y)) => Val::Num(f(x, y)),
        (Val::Series(s), Val::Num(y)) => {
            Val::Series(s.into_iter().map(|(k, x)| (k, f(x, y))).collect())
        }
        (Val::Num(x), Val::Series(s)) => {
            Val::Series(s.into_iter().map(|(k, y)| (k, f(x, y))).collect())
        }
        (Val::Series(s), Val::Series(t)) => {
            let m: BTreeMap<_, _> = s
                .into_iter()
                .filter_map(|(k, x)| t.get(&k).map(|y| (k, f(x, *y))))
                .collect();
            if m.is_empty() {
                return Err(EvalError::NoData("points that both series have".into()));
            }
            Val::Series(m)
        }
        (Val::Multi(_), _) | (_, Val::Multi(_)) => {
            return Err(EvalError::Type(
                "`metric(*)` must be reduced with min, max, mean or median first".into(),
            ));
        }
        _ => return Err(EvalError::Type("arithmetic on a comparison".into())),
    })
}

fn compare(op: BinOp, a: Val, b: Val) -> Result<Val, EvalError> {
    let f = move |x: f64, y: f64| {
        let ok = match op {
            BinOp::Lt => x < y,
            BinOp::Le => x <= y,
            BinOp::Gt => x > y,
            BinOp::Ge => x >= y,
            // equality of measured values: within one part in 10^9
            BinOp::Eq => (x - y).abs() <= 1e-9 * x.abs().max(y.abs()),
            _ => (x - y).abs() > 1e-9 * x.abs().max(y.abs()),
        };
        (ok, format!("{} {} {}", fmt_num(x), op.symbol(), fmt_num(y)))
    };
    pairwise(a, b, f)
}

fn pairwise(a: Val, b: Val, f: impl Fn(f64, f64) -> (bool, String)) -> Result<Val, EvalError> {
    Ok(match (a, b) {
        (Val::Num(x), Val::Num(y)) => {
            let (ok, d) = f(x, y);
            Val::Bool(ok, d)
        }
        (Val::Series(s), Val::Num(y)) => {
            Val::Bools(s.into_iter().map(|(k, x)| (k, f(x, y))).collect())
        }
        (Val::Num(x), Val::Series(s)) => {
            Val::Bools(s.into_iter().map(|(k, y)| (k, f(x, y))).collect())
        }
        (Val::Series(s), Val::Series(t)) => {
            let m: BTreeMap<_, _> = s
                .into_iter()
                .filter_map(|(k, x)| t.get(&k).map(|y| (k, f(x, *y))))
                .collect();
            if m.is_empty() {
                return Err(EvalError::NoData("points that both sides have".into()));
            }
            Val::Bools(m)
        }
        (Val::Multi(_), _) | (_, Val::Multi(_)) => {
            return Err(EvalError::Type(
                "`metric(*)` must be reduced with min, max, mean or median first".into(),
            ));
        }
        _ => return Err(EvalError::Type("comparing comparisons".into())),
    })
}

fn logic(op: BinOp, a: Val, b: Val) -> Result<Val, EvalError> {
    let and = op == BinOp::And;
    let as_map = |v: Val| -> Result<Option<Checks>, EvalError> {
        match v {
            Val::Bools(m) => Ok(Some(m)),
            Val::Bool(..) => Ok(None),
            _ => Err(EvalError::Type(format!(
                "`{}` needs comparisons on both sides",
                op.symbol()
            ))),
        }
    };
    // Two verdicts over possibly different points (e.g. two trends): combine as verdicts.
    let (va, vb) = (a.clone(), b.clone());
    let (ma, mb) = (as_map(a)?, as_map(b)?);
    let summary = |v: Val| -> (bool, String) {
        match v {
            Val::Bool(x, d) => (x, d),
            Val::Bools(m) => match summarise(&m) {
                Verdict::Holds(d) => (true, d),
                Verdict::Fails(d) | Verdict::NotCheckable(d) => (false, d),
            },
            _ => (false, String::new()),
        }
    };
    if let (Some(x), Some(y)) = (&ma, &mb)
        && x.keys().eq(y.keys())
    {
        let m = x
            .iter()
            .map(|(k, (p, dp))| {
                let (q, dq) = &y[k];
                let ok = if and { *p && *q } else { *p || *q };
                // a failed `and` shows only the parts that failed
                let detail = match (and && !ok, *p, *q) {
                    (true, true, false) => dq.clone(),
                    (true, false, true) => dp.clone(),
                    _ => format!("{dp}; {dq}"),
                };
                (k.clone(), (ok, detail))
            })
            .collect();
        return Ok(Val::Bools(m));
    }
    let (p, dp) = summary(va);
    let (q, dq) = summary(vb);
    let ok = if and { p && q } else { p || q };
    let d = if and && !ok {
        [(!p).then_some(dp.clone()), (!q).then_some(dq.clone())]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join("; ")
    } else {
        format!("{dp}; {dq}")
    };
    Ok(Val::Bool(ok, d))
}

fn summarise(m: &BTreeMap<Key, (bool, String)>) -> Verdict {
    if m.is_empty() {
        return Verdict::NotCheckable("no points to compare".into());
    }
    let failing: Vec<_> = m.iter().filter(|(_, (ok, _))| !ok).collect();
    let n = m.len();
    if failing.is_empty() {
        let example = m
            .iter()
            .next()
            .map(|(k, (_, d))| {
                if k.is_empty() {
                    d.clone()
                } else {
                    format!("at {k}: {d}")
                }
            })
            .unwrap_or_default();
        Verdict::Holds(format!("holds on {n} of {n} points (e.g. {example})"))
    } else {
        let shown: Vec<String> = failing
            .iter()
            .take(3)
            .map(|(k, (_, d))| {
                if k.is_empty() {
                    d.clone()
                } else {
                    format!("at {k}: {d}")
                }
            })
            .collect();
        Verdict::Fails(format!(
            "fails on {} of {n} points: {}{}",
            failing.len(),
            shown.join("; "),
            if failing.len() > 3 { "; ..." } else { "" }
        ))
    }
}

/// Numbers in verdicts: 4 significant digits.
pub fn fmt_num(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let mag = x.abs().log10().floor() as i32;
    if !(-3..6).contains(&mag) {
        return format!("{x:.3e}");
    }
    let decimals = (3 - mag).max(0) as usize;
    let s = format!("{x:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pairs: &[(&str, f64)]) -> Params {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Scalar::Float(*v)))
            .collect()
    }

    fn obs(system: &str, metric: &str, params: &[(&str, f64)], value: f64) -> Obs {
        Obs {
            system: system.into(),
            metric: metric.into(),
            params: p(params),
            value,
        }
    }

    fn table6() -> Vec<Obs> {
        vec![
            obs("atp", "gput", &[("workers", 6.0)], 39.7),
            obs("switchml", "gput", &[("workers", 6.0)], 32.7),
            obs("netreduce", "gput", &[("workers", 6.0)], 86.8),
            obs("atp", "rtt", &[("workers", 6.0)], 751.0),
            obs("switchml", "rtt", &[("workers", 6.0)], 812.0),
            obs("netreduce", "rtt", &[("workers", 6.0)], 6.3),
        ]
    }

    fn check(obs: &[Obs], src: &str) -> Verdict {
        let e = parse(src).unwrap_or_else(|err| panic!("{src}: {err}"));
        Context::new(obs, &[]).verdict(&e)
    }

    #[test]
    fn parses_and_prints() {
        let e = parse("gput(netreduce) >= 2 * gput(atp)").expect("parse");
        assert_eq!(e.to_string(), "(gput(netreduce) >= (2 * gput(atp)))");
        let e = parse("x(a)[P=32, mode=fp16] < 10% where P > 3 * n").expect("parse");
        let r = e.references();
        assert!(r.params.contains("P") && r.params.contains("n") && r.params.contains("mode"));
        assert!(r.metrics.contains("x") && r.systems.contains("a"));
    }

    #[test]
    fn parse_errors_have_columns() {
        let e = parse("gput(netreduce) >= ").expect_err("incomplete");
        assert_eq!(e.column, 19);
        assert!(
            parse("gput(netreduce) = 2")
                .expect_err("=")
                .message
                .contains("==")
        );
        assert!(
            parse("within(a(b), 1)")
                .expect_err("arity")
                .message
                .contains("wrong number")
        );
        assert!(parse("gput(netreduce) # 2").is_err());
        assert!(parse("a(b) and and c(d)").is_err());
    }

    #[test]
    fn comparisons_hold_and_fail_with_numbers() {
        let t = table6();
        assert!(matches!(
            check(&t, "gput(netreduce) >= 2 * gput(atp)"),
            Verdict::Holds(_)
        ));
        let v = check(&t, "gput(netreduce) >= 2.5 * gput(atp)");
        assert_eq!(v.label(), "fails");
        assert!(v.detail().contains("86.8 >= 99.25"), "{}", v.detail());
        assert!(matches!(
            check(&t, "rtt(netreduce) == min(rtt(*))"),
            Verdict::Holds(_)
        ));
        assert!(matches!(
            check(&t, "rtt(atp) == min(rtt(*))"),
            Verdict::Fails(_)
        ));
        assert!(matches!(
            check(&t, "gput(netreduce) > max(gput(atp), gput(switchml))"),
            Verdict::Holds(_)
        ));
    }

    #[test]
    fn missing_data_is_not_checkable() {
        let v = check(&table6(), "gput(switchml_rdma) > gput(atp)");
        assert_eq!(
            v,
            Verdict::NotCheckable("no results for gput(switchml_rdma) in this run".into())
        );
    }

    #[test]
    fn within_paper() {
        let t = table6();
        let paper = vec![PaperValue {
            system: "netreduce".into(),
            metric: "gput".into(),
            value: 90.0,
            params: Params::new(),
            note: None,
        }];
        let e = parse("within(gput(netreduce), paper(gput(netreduce)), 5%)").expect("parse");
        assert!(matches!(
            Context::new(&t, &paper).verdict(&e),
            Verdict::Holds(_)
        ));
        let e = parse("within(gput(netreduce), paper(gput(netreduce)), 3%)").expect("parse");
        let v = Context::new(&t, &paper).verdict(&e);
        assert!(matches!(v, Verdict::Fails(_)), "{v:?}");
        assert!(v.detail().contains("-3.56%"), "{}", v.detail());
        let e = parse("within(gput(atp), paper(gput(atp)), 3%)").expect("parse");
        assert!(matches!(
            Context::new(&t, &paper).verdict(&e),
            Verdict::NotCheckable(_)
        ));
    }

    #[test]
    fn where_filters_points_and_trends() {
        let mut o = Vec::new();
        for pp in [32.0, 64.0, 128.0] {
            for b in [10.0, 50.0] {
                o.push(obs("pn", "t", &[("P", pp), ("B", b)], 1.0 + b * 1e-6));
                o.push(obs("fr", "t", &[("P", pp), ("B", b)], pp / b));
            }
        }
        // pn < fr only where B is small
        assert!(matches!(check(&o, "t(pn) < t(fr)"), Verdict::Fails(_)));
        assert!(matches!(
            check(&o, "t(pn) < t(fr) where B < 20"),
            Verdict::Holds(_)
        ));
        let v = check(&o, "t(pn) < t(fr) where B > 20 and P >= 64");
        assert!(v.detail().contains("of 2 points"), "{}", v.detail());
        assert!(matches!(check(&o, "flat(t(pn), P, 1%)"), Verdict::Holds(_)));
        assert!(matches!(
            check(&o, "increasing(t(fr), P)"),
            Verdict::Holds(_)
        ));
        assert!(matches!(
            check(&o, "decreasing(t(fr), P)"),
            Verdict::Fails(_)
        ));
        assert!(matches!(
            check(&o, "flat(t(pn), P, 1%) and increasing(t(fr), P)"),
            Verdict::Holds(_)
        ));
        assert!(matches!(
            check(&o, "flat(t(fr), P, 1%) and increasing(t(fr), P)"),
            Verdict::Fails(_)
        ));
        assert!(
            matches!(
                check(&o, "t(fr)[B=10] > t(fr)[B=50]"),
                Verdict::NotCheckable(_)
            ),
            "filters keep their points' keys"
        );
        assert!(matches!(
            check(&o, "increasing(t(fr), Q)"),
            Verdict::NotCheckable(_)
        ));
        assert!(matches!(
            check(&o, "t(pn) < 2 where B / P > 0.1"),
            Verdict::Holds(_)
        ));
    }

    #[test]
    fn numbers_format() {
        assert_eq!(fmt_num(86.8), "86.8");
        assert_eq!(fmt_num(99.25), "99.25");
        assert_eq!(fmt_num(0.012345), "0.01235");
        assert_eq!(fmt_num(1234567.0), "1.235e6");
    }
}
