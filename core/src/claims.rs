//! The claim language: a paper's qualitative statement as an expression over the results.
//!
//! The grammar and the functions are documented in `experiments/SCHEMA.md`. An expression is
//! evaluated on the aggregated results of one fidelity class (one value per system, point and
//! metric: the median of the repetitions). `metric(system)` is a *series*: a value per point,
//! keyed by the point's parameters; comparisons between series are checked point by point on the
//! points both have, and a claim holds when every compared point holds (and there is at least one).

use crate::event::FailureKind;
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
    /// A metric series the run recorded no value of (a workload that did not measure it here):
    /// inconclusive, "not measured in this run", never a host limit.
    #[error("no results for {0} in this run")]
    NotMeasured(String),
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

const BUILTINS: [&str; 13] = [
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
    "highest",
    "lowest",
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
                    check_arity(&name, args.len()).map_err(|m| self.error(&m.to_string()))?;
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

/// A function of the claim language called with the wrong number of arguments.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("wrong number of arguments to `{name}` ({n})")]
struct ArityError {
    name: String,
    n: usize,
}

fn check_arity(name: &str, n: usize) -> Result<(), ArityError> {
    let ok = match name {
        "within" | "flat" | "highest" | "lowest" => n == 3,
        "increasing" | "decreasing" | "ratio" => n == 2,
        "abs" | "paper" | "mean" | "median" => n == 1,
        "min" | "max" => n >= 1,
        _ => true,
    };
    if ok {
        Ok(())
    } else {
        Err(ArityError {
            name: name.to_string(),
            n,
        })
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
    /// The margin is inside the noise (a bootstrap over repetitions neither confirms nor
    /// refutes the claim), or an extreme is tied (`x == min(x(*))` with another system at the
    /// same value: a tie is not a win).
    Inconclusive(String),
    NotCheckable(String),
}

impl Verdict {
    pub fn label(&self) -> &'static str {
        match self {
            Verdict::Holds(_) => "holds",
            Verdict::Fails(_) => "fails",
            Verdict::Inconclusive(_) => "inconclusive",
            Verdict::NotCheckable(_) => "not checkable here",
        }
    }

    pub fn detail(&self) -> &str {
        match self {
            Verdict::Holds(d)
            | Verdict::Fails(d)
            | Verdict::Inconclusive(d)
            | Verdict::NotCheckable(d) => d,
        }
    }

    fn with_detail(&self, d: String) -> Verdict {
        match self {
            Verdict::Holds(_) => Verdict::Holds(d),
            Verdict::Fails(_) => Verdict::Fails(d),
            Verdict::Inconclusive(_) => Verdict::Inconclusive(d),
            Verdict::NotCheckable(_) => Verdict::NotCheckable(d),
        }
    }
}

/// The state of one planned (system, point) of a class, for judging claims against the plan
/// rather than against whatever rows happen to exist.
#[derive(Debug, Clone, PartialEq)]
pub enum PointState {
    /// Finished; its rows are the observations.
    Done,
    /// Finished with a wrong result (a wrong aggregate is data: its rows are kept); every claim
    /// over it fails.
    Wrong(String),
    /// Planned but never finished: why, as a type.
    Missing(Missing),
}

/// Why a planned point has no observations, typed from the run's point records to the verdict
/// (nothing reads a kind back from words); its sentence is what the verdict shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    /// This version cannot run the system (the plan left it out).
    NotBuilt,
    /// The testbed lacks what the system's rows of this class need (the plan left them out of
    /// this class only): the sentence says what (`needs an FPGA board (XRT)`).
    NotHere(String),
    /// The point ran and did not finish, and how, as its record says: for its parameter values
    /// ([`FailureKind::BadParameters`]), in its setup (no agent, no such workload:
    /// [`FailureKind::Setup`]), or otherwise ([`FailureKind::Failed`]: the workload's error, a
    /// lost agent, ...; also every failure recorded before the kind was kept), with what its
    /// record says went wrong where it says so (`rank 0 on node0: no RDMA device ...`).
    Failed(FailureKind, Option<String>),
    /// The point never ran: the run was stopped before it (a resume runs it).
    Interrupted,
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Missing::NotHere(why) => return write!(f, "not run on this testbed: {why}"),
            Missing::NotBuilt => "this version cannot run the system",
            Missing::Failed(kind, why) => {
                f.write_str(match kind {
                    FailureKind::BadParameters => "the point failed for its parameter values",
                    FailureKind::Setup => "the point's setup failed",
                    _ => "the point failed",
                })?;
                return match why {
                    Some(why) => write!(f, ": {}", shorten(why, FAILURE_WORDS)),
                    None => Ok(()),
                };
            }
            Missing::Interrupted => "the point never ran (interrupted run)",
        })
    }
}

/// How much of a failed point's error a verdict quotes (the run's `rows.jsonl` keeps it whole).
const FAILURE_WORDS: usize = 240;

/// `s` on one line, cut at `max` characters with an ellipsis.
fn shorten(s: &str, max: usize) -> String {
    let one = s.split_whitespace().collect::<Vec<_>>().join(" ");
    match one.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &one[..i]),
        None => one,
    }
}

/// One planned (system, point) of a class.
#[derive(Debug, Clone)]
pub struct Planned {
    pub system: String,
    pub params: Params,
    pub state: PointState,
}

/// Observations over the planned points that an evaluation touched.
#[derive(Debug, Default)]
struct Touched {
    planned: BTreeSet<(String, Key)>,
    missing: BTreeMap<(String, Key), String>,
    wrong: BTreeMap<(String, Key), String>,
    ties: Vec<String>,
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

/// The point keys of a class's observations: each observation's key (in observation order) and
/// every point's parameters by key. Only the observations' parameters go into it, so one index
/// serves every claim of the class and every bootstrap resample (which redraw values only).
#[derive(Debug, Clone, Default)]
struct PointIndex {
    /// `params_key` of each observation, in observation order
    keys: Vec<Key>,
    /// point key -> parameters (the last observation with a key gives its parameters)
    points: BTreeMap<Key, Params>,
}

impl PointIndex {
    fn new<'p>(params: impl Iterator<Item = &'p Params>) -> Self {
        let mut keys = Vec::new();
        let mut points = BTreeMap::new();
        for p in params {
            let k = params_key(p);
            points.insert(k.clone(), p.clone());
            keys.push(k);
        }
        PointIndex { keys, points }
    }
}

/// Evaluation context: the observations of one fidelity class and the paper's values.
pub struct Context<'a> {
    obs: &'a [Obs],
    paper: &'a [PaperValue],
    /// the observations' point keys (`index.keys[i]` is `obs[i]`'s)
    index: std::borrow::Cow<'a, PointIndex>,
    /// The class's planned (system, point)s; empty when the plan is unknown (then only the
    /// observations are judged).
    planned: &'a [Planned],
    touched: std::cell::RefCell<Touched>,
}

impl<'a> Context<'a> {
    pub fn new(obs: &'a [Obs], paper: &'a [PaperValue]) -> Self {
        let index = PointIndex::new(obs.iter().map(|o| &o.params));
        Context {
            obs,
            paper,
            index: std::borrow::Cow::Owned(index),
            planned: &[],
            touched: Default::default(),
        }
    }

    /// A context over observations whose parameters are, in order, those `index` was built
    /// from (only the values may differ).
    fn with_index(obs: &'a [Obs], paper: &'a [PaperValue], index: &'a PointIndex) -> Self {
        debug_assert_eq!(obs.len(), index.keys.len());
        Context {
            obs,
            paper,
            index: std::borrow::Cow::Borrowed(index),
            planned: &[],
            touched: Default::default(),
        }
    }

    /// Judge against the plan: a claim touching a point with a wrong result fails, one touching
    /// planned points that never finished is not checkable ("k of n planned points missing").
    pub fn with_plan(mut self, planned: &'a [Planned]) -> Self {
        self.planned = planned;
        self
    }

    /// Evaluate a parsed claim to a verdict (against the plan, with ties reported as ties).
    pub fn verdict(&self, e: &Expr) -> Verdict {
        *self.touched.borrow_mut() = Touched::default();
        let v = self.raw_verdict(e);
        let t = self.touched.borrow();
        let show = |m: &BTreeMap<(String, Key), String>| {
            m.iter()
                .take(3)
                .map(|((sys, k), why)| {
                    if k.is_empty() {
                        format!("{sys}: {why}")
                    } else {
                        format!("{sys} at {k}: {why}")
                    }
                })
                .collect::<Vec<_>>()
                .join("; ")
                + if m.len() > 3 { "; ..." } else { "" }
        };
        if !t.wrong.is_empty() {
            return Verdict::Fails(format!(
                "wrong result on {} of {} planned points ({}); the numbers: {}",
                t.wrong.len(),
                t.planned.len().max(t.wrong.len()),
                show(&t.wrong),
                v.detail()
            ));
        }
        if !t.missing.is_empty() {
            return Verdict::NotCheckable(format!(
                "{} of {} planned points missing ({}); on the points present: {} ({})",
                t.missing.len(),
                t.planned.len().max(t.missing.len()),
                show(&t.missing),
                v.label(),
                v.detail()
            ));
        }
        if matches!(v, Verdict::Holds(_)) && !t.ties.is_empty() {
            return Verdict::Inconclusive(format!(
                "tie (a tie is not a win): {}{}",
                t.ties
                    .iter()
                    .take(3)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("; "),
                if t.ties.len() > 3 { "; ..." } else { "" }
            ));
        }
        v
    }

    /// The verdict on the observations alone (no plan, no tie handling). A metric the run did
    /// not record is "not measured in this run", inconclusive: `not checkable here` is kept for
    /// what the host lacks (a claim's declared `needs:`, judged by the report before this).
    fn raw_verdict(&self, e: &Expr) -> Verdict {
        match self.eval(e, None) {
            Err(EvalError::NotMeasured(m)) => {
                Verdict::Inconclusive(format!("not measured in this run: no results for {m}"))
            }
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

    /// Note the planned (system, point)s a series reads, and which of them are wrong or missing.
    fn touch(&self, metric_system: &str, filter: &Params, cond: Option<&Expr>) {
        if self.planned.is_empty() {
            return;
        }
        let mut t = self.touched.borrow_mut();
        for p in self.planned {
            if metric_system != "*" && p.system != metric_system {
                continue;
            }
            if !params_match(&p.params, filter) || !self.visible(&p.params, cond).unwrap_or(false) {
                continue;
            }
            let key = (p.system.clone(), params_key(&p.params));
            match &p.state {
                PointState::Done => {}
                PointState::Wrong(m) => {
                    t.wrong.insert(key.clone(), m.clone());
                }
                PointState::Missing(m) => {
                    t.missing.insert(key.clone(), m.to_string());
                }
            }
            t.planned.insert(key);
        }
    }

    /// The tightest ratio of a top-level comparison `a OP b`: min of a/b over the points for
    /// `>`/`>=`, max for `<`/`<=` (None for other shapes). Its bootstrap interval is what a
    /// statistical verdict shows.
    pub fn tightest_ratio(&self, e: &Expr) -> Option<(f64, String)> {
        let (e, cond) = match e {
            Expr::Where(x, c) => (&**x, Some(&**c)),
            other => (other, None),
        };
        let Expr::Bin(op, a, b) = e else { return None };
        if !matches!(op, BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge) {
            return None;
        }
        let l = self.eval(a, cond).ok()?;
        let r = self.eval(b, cond).ok()?;
        let ratios: Vec<f64> = match (l, r) {
            (Val::Num(x), Val::Num(y)) => vec![x / y],
            (Val::Series(s), Val::Num(y)) => s.values().map(|x| x / y).collect(),
            (Val::Num(x), Val::Series(t)) => t.values().map(|y| x / y).collect(),
            (Val::Series(s), Val::Series(t)) => s
                .iter()
                .filter_map(|(k, x)| t.get(k).map(|y| x / y))
                .collect(),
            _ => return None,
        };
        let finite: Vec<f64> = ratios.into_iter().filter(|r| r.is_finite()).collect();
        if finite.is_empty() {
            return None;
        }
        let lower = matches!(op, BinOp::Gt | BinOp::Ge);
        let v = if lower {
            finite.iter().copied().fold(f64::INFINITY, f64::min)
        } else {
            finite.iter().copied().fold(f64::NEG_INFINITY, f64::max)
        };
        Some((
            v,
            format!(
                "{a} / {b} ({} over the points)",
                if lower { "min" } else { "max" }
            ),
        ))
    }

    fn eval(&self, e: &Expr, cond: Option<&Expr>) -> Result<Val, EvalError> {
        Ok(match e {
            Expr::Num(v) => Val::Num(*v),
            Expr::Param(p) => {
                let mut m = BTreeMap::new();
                for (k, params) in &self.index.points {
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
                for (o, k) in self.obs.iter().zip(&self.index.keys) {
                    if &o.metric != metric || (system != "*" && &o.system != system) {
                        continue;
                    }
                    if !params_match(&o.params, filter) || !self.visible(&o.params, cond)? {
                        continue;
                    }
                    let k = k.clone();
                    if system == "*" {
                        multi
                            .entry(k)
                            .or_default()
                            .insert(o.system.clone(), o.value);
                    } else {
                        single.insert(k, o.value);
                    }
                }
                self.touch(system, filter, cond);
                if system == "*" {
                    if multi.is_empty() {
                        return Err(EvalError::NotMeasured(e.to_string()));
                    }
                    Val::Multi(multi)
                } else {
                    if single.is_empty() {
                        return Err(EvalError::NotMeasured(e.to_string()));
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
                if *op == BinOp::Eq {
                    self.note_ties(a, b, cond);
                    self.note_ties(b, a, cond);
                }
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

    /// `x(s) == min(x(*))` (or max): note the points where `s` attains the extreme together with
    /// another system, so a holding verdict is reported as a tie.
    fn note_ties(&self, one: &Expr, extreme: &Expr, cond: Option<&Expr>) {
        let Expr::Series { system, .. } = one else {
            return;
        };
        let Expr::Call(name, args) = extreme else {
            return;
        };
        if !(name == "min" || name == "max") || args.len() != 1 {
            return;
        }
        if !matches!(&args[0], Expr::Series { system: s, .. } if s == "*") {
            return;
        }
        let Ok(Val::Multi(m)) = self.eval(&args[0], cond) else {
            return;
        };
        let mut ties = Vec::new();
        for (k, per) in &m {
            let Some(mine) = per.get(system) else {
                continue;
            };
            let ext = reduce(name, per.values().copied().collect());
            let same = |x: f64, y: f64| (x - y).abs() <= 1e-9 * x.abs().max(y.abs());
            if !same(*mine, ext) {
                continue;
            }
            let others: Vec<&String> = per
                .iter()
                .filter(|(s, v)| *s != system && same(**v, ext))
                .map(|(s, _)| s)
                .collect();
            if !others.is_empty() {
                let who = others
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ");
                let at = if k.is_empty() {
                    String::new()
                } else {
                    format!(" at {k}")
                };
                ties.push(format!(
                    "{system} and {who} share the {name} {}{at}",
                    fmt_num(ext)
                ));
            }
        }
        self.touched.borrow_mut().ties.extend(ties);
    }

    /// `highest(x(s), x(*), tol)` (or `lowest`): per point, `s` against the best of the other
    /// systems. Beyond `tol` (relative to that rival) it wins or loses; within it the point is a
    /// tie inside the stated resolution, noted like an exact tie of `x(s) == max(x(*))`, so a
    /// claim that would hold reads inconclusive, while a clear loss at another point still fails.
    fn extreme_within(
        &self,
        name: &str,
        args: &[Expr],
        cond: Option<&Expr>,
    ) -> Result<Val, EvalError> {
        let Expr::Series { system, .. } = &args[0] else {
            return Err(EvalError::Type(format!(
                "`{name}` takes one system's series first, like `{name}(x(a), x(*), 1%)`"
            )));
        };
        let (Val::Series(mine), Val::Multi(all), Val::Num(tol)) = (
            self.eval(&args[0], cond)?,
            self.eval(&args[1], cond)?,
            self.eval(&args[2], cond)?,
        ) else {
            return Err(EvalError::Type(format!(
                "`{name}` takes a system's series, every system's series and a tolerance, like \
                 `{name}(x(a), x(*), 1%)`"
            )));
        };
        let high = name == "highest";
        let mut out = BTreeMap::new();
        let mut ties = Vec::new();
        for (k, v) in &mine {
            let Some(per) = all.get(k) else {
                continue;
            };
            let rival = per
                .iter()
                .filter(|(s, _)| *s != system)
                .map(|(s, x)| (s, *x))
                .reduce(|a, b| if (b.1 > a.1) == high { b } else { a });
            let Some((who, best)) = rival else {
                continue;
            };
            let margin = (if high { v - best } else { best - v }) / best.abs();
            let detail = format!(
                "{system} {} vs {who} {} ({:+.2}%, ties within {}%)",
                fmt_num(*v),
                fmt_num(best),
                (v - best) / best.abs() * 100.0,
                fmt_num(tol * 100.0)
            );
            let at = if k.is_empty() {
                String::new()
            } else {
                format!(" at {k}")
            };
            if margin.abs() <= tol {
                ties.push(format!("{detail}{at}"));
                out.insert(k.clone(), (true, detail));
            } else {
                out.insert(k.clone(), (margin > 0.0, detail));
            }
        }
        self.touched.borrow_mut().ties.extend(ties);
        Ok(Val::Bools(out))
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
                    let params = &self.index.points[k];
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
            "highest" | "lowest" => self.extreme_within(name, args, cond),
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
            let params = &self.index.points[k];
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
        _ => crate::rng::stats::median_in_place(&mut v).unwrap_or(f64::NAN),
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
                Verdict::Fails(d) | Verdict::Inconclusive(d) | Verdict::NotCheckable(d) => {
                    (false, d)
                }
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

/// A system's metric at a point with its value in every measured repetition (in repetition
/// order), for statistical verdicts.
#[derive(Debug, Clone)]
pub struct RepObs {
    pub system: String,
    pub params: Params,
    pub metric: String,
    pub reps: Vec<f64>,
}

/// Bootstrap resamples behind a statistical verdict.
pub const RESAMPLES: usize = 1000;
/// A comparison holds (fails) with confidence when it holds in at least (at most) this share
/// of the resamples: a one-sided 95% level each way; in between it is inconclusive.
pub const CONFIDENCE: f64 = 0.95;

/// Judge a claim over observations with repetitions, against the plan.
///
/// The point estimate is the verdict on the medians of the repetitions. When repetitions vary,
/// the verdict is statistical: a percentile bootstrap resamples each (system, point)'s
/// repetitions with replacement (`RESAMPLES` times, seeded, so a report is reproducible),
/// takes the median of each resample and re-evaluates the claim; it holds when it holds in at
/// least `CONFIDENCE` of the resamples, fails when it holds in at most 1 - `CONFIDENCE`, and is
/// inconclusive otherwise. For a top-level comparison the 95% interval of the tightest ratio
/// (left side / right side) is shown. When every series has the same number of repetitions,
/// the share of repetitions (draws: seeds, random inputs) in which the claim holds is shown too.
/// Wrong results, missing points and ties are decided on the medians first and never resampled.
pub fn judge(
    e: &Expr,
    obs: &[RepObs],
    paper: &[PaperValue],
    planned: &[Planned],
    seed: u64,
) -> Verdict {
    Class::new(obs, paper, planned).judge(e, seed)
}

/// One fidelity class's observations, made ready once for judging all of its claims: the
/// medians of the repetitions and the point keys (which depend on the observations alone).
/// `Class::new(obs, paper, planned).judge(e, seed)` is `judge(e, obs, paper, planned, seed)`.
pub struct Class<'a> {
    obs: &'a [RepObs],
    paper: &'a [PaperValue],
    planned: &'a [Planned],
    medians: Vec<Obs>,
    index: PointIndex,
}

impl<'a> Class<'a> {
    pub fn new(obs: &'a [RepObs], paper: &'a [PaperValue], planned: &'a [Planned]) -> Self {
        let medians: Vec<Obs> = obs
            .iter()
            .map(|o| Obs {
                system: o.system.clone(),
                params: o.params.clone(),
                metric: o.metric.clone(),
                value: if o.reps.is_empty() {
                    f64::NAN
                } else {
                    reduce("median", o.reps.clone())
                },
            })
            .collect();
        let index = PointIndex::new(obs.iter().map(|o| &o.params));
        Class {
            obs,
            paper,
            planned,
            medians,
            index,
        }
    }

    /// Judge one claim over the class (see [`judge`]).
    pub fn judge(&self, e: &Expr, seed: u64) -> Verdict {
        judge_class(self, e, seed)
    }
}

fn judge_class(class: &Class<'_>, e: &Expr, seed: u64) -> Verdict {
    let (obs, paper, planned, medians, index) = (
        class.obs,
        class.paper,
        class.planned,
        &class.medians,
        &class.index,
    );
    let ctx = Context::with_index(medians, paper, index).with_plan(planned);
    let v0 = ctx.verdict(e);
    {
        let t = ctx.touched.borrow();
        if !t.wrong.is_empty() || !t.missing.is_empty() || !t.ties.is_empty() {
            return v0;
        }
    }
    if matches!(v0, Verdict::NotCheckable(_)) {
        return v0;
    }
    let noisy = obs
        .iter()
        .any(|o| o.reps.len() >= 2 && o.reps.iter().any(|x| x.to_bits() != o.reps[0].to_bits()));
    if !noisy {
        let single = obs.iter().any(|o| o.reps.len() == 1);
        return if single {
            v0.with_detail(format!(
                "{}; one repetition per point: no interval",
                v0.detail()
            ))
        } else {
            v0
        };
    }
    let mut rng = crate::rng::SplitMix64::new(seed);
    let mut holds = 0usize;
    let mut ratios = Vec::with_capacity(RESAMPLES);
    let mut ratio_label = None;
    // the observations stay; only their values are redrawn
    let mut draw = medians.clone();
    for _ in 0..RESAMPLES {
        for (d, o) in draw.iter_mut().zip(obs) {
            let n = o.reps.len();
            let r: Vec<f64> = (0..n)
                .map(|_| o.reps[(rng.next_u64() % n as u64) as usize])
                .collect();
            d.value = reduce("median", r);
        }
        let c = Context::with_index(&draw, paper, index);
        if matches!(c.raw_verdict(e), Verdict::Holds(_)) {
            holds += 1;
        }
        if let Some((r, label)) = c.tightest_ratio(e) {
            ratios.push(r);
            ratio_label.get_or_insert(label);
        }
    }
    let share = holds as f64 / RESAMPLES as f64;
    let mut detail = format!(
        "{}; holds in {:.1}% of {RESAMPLES} bootstrap resamples of the repetitions",
        v0.detail(),
        share * 100.0
    );
    if ratios.len() >= RESAMPLES / 2
        && let Some(label) = ratio_label
    {
        ratios.sort_by(f64::total_cmp);
        let q = |p: f64| ratios[((ratios.len() - 1) as f64 * p).round() as usize];
        detail.push_str(&format!(
            ", 95% interval of {label}: [{}, {}]",
            fmt_num(q(0.025)),
            fmt_num(q(0.975))
        ));
    }
    let reps = obs.iter().map(|o| o.reps.len()).min().unwrap_or(0);
    if reps >= 2 && obs.iter().all(|o| o.reps.len() == reps) {
        let mut k = 0;
        for r in 0..reps {
            for (d, o) in draw.iter_mut().zip(obs) {
                d.value = o.reps[r];
            }
            if matches!(
                Context::with_index(&draw, paper, index).raw_verdict(e),
                Verdict::Holds(_)
            ) {
                k += 1;
            }
        }
        detail.push_str(&format!("; holds in {k} of {reps} repetitions"));
    }
    if share >= CONFIDENCE {
        Verdict::Holds(detail)
    } else if share <= 1.0 - CONFIDENCE {
        Verdict::Fails(detail)
    } else {
        Verdict::Inconclusive(detail)
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

    fn rep(system: &str, metric: &str, params: &[(&str, f64)], reps: &[f64]) -> RepObs {
        RepObs {
            system: system.into(),
            metric: metric.into(),
            params: p(params),
            reps: reps.to_vec(),
        }
    }

    /// `judge` before the point index was shared: every context (the medians' and each
    /// bootstrap resample's) builds its own key map from the observations.
    fn judge_reference(
        e: &Expr,
        obs: &[RepObs],
        paper: &[PaperValue],
        planned: &[Planned],
        seed: u64,
    ) -> Verdict {
        let medians: Vec<Obs> = obs
            .iter()
            .map(|o| Obs {
                system: o.system.clone(),
                params: o.params.clone(),
                metric: o.metric.clone(),
                value: if o.reps.is_empty() {
                    f64::NAN
                } else {
                    reduce("median", o.reps.clone())
                },
            })
            .collect();
        let ctx = Context::new(&medians, paper).with_plan(planned);
        let v0 = ctx.verdict(e);
        {
            let t = ctx.touched.borrow();
            if !t.wrong.is_empty() || !t.missing.is_empty() || !t.ties.is_empty() {
                return v0;
            }
        }
        if matches!(v0, Verdict::NotCheckable(_)) {
            return v0;
        }
        let noisy = obs.iter().any(|o| {
            o.reps.len() >= 2 && o.reps.iter().any(|x| x.to_bits() != o.reps[0].to_bits())
        });
        if !noisy {
            let single = obs.iter().any(|o| o.reps.len() == 1);
            return if single {
                v0.with_detail(format!(
                    "{}; one repetition per point: no interval",
                    v0.detail()
                ))
            } else {
                v0
            };
        }
        let mut rng = crate::rng::SplitMix64::new(seed);
        let mut holds = 0usize;
        let mut ratios = Vec::with_capacity(RESAMPLES);
        let mut ratio_label = None;
        // the observations stay; only their values are redrawn
        let mut draw = medians.clone();
        for _ in 0..RESAMPLES {
            for (d, o) in draw.iter_mut().zip(obs) {
                let n = o.reps.len();
                let r: Vec<f64> = (0..n)
                    .map(|_| o.reps[(rng.next_u64() % n as u64) as usize])
                    .collect();
                d.value = reduce("median", r);
            }
            let c = Context::new(&draw, paper);
            if matches!(c.raw_verdict(e), Verdict::Holds(_)) {
                holds += 1;
            }
            if let Some((r, label)) = c.tightest_ratio(e) {
                ratios.push(r);
                ratio_label.get_or_insert(label);
            }
        }
        let share = holds as f64 / RESAMPLES as f64;
        let mut detail = format!(
            "{}; holds in {:.1}% of {RESAMPLES} bootstrap resamples of the repetitions",
            v0.detail(),
            share * 100.0
        );
        if ratios.len() >= RESAMPLES / 2
            && let Some(label) = ratio_label
        {
            ratios.sort_by(f64::total_cmp);
            let q = |p: f64| ratios[((ratios.len() - 1) as f64 * p).round() as usize];
            detail.push_str(&format!(
                ", 95% interval of {label}: [{}, {}]",
                fmt_num(q(0.025)),
                fmt_num(q(0.975))
            ));
        }
        let reps = obs.iter().map(|o| o.reps.len()).min().unwrap_or(0);
        if reps >= 2 && obs.iter().all(|o| o.reps.len() == reps) {
            let mut k = 0;
            for r in 0..reps {
                for (d, o) in draw.iter_mut().zip(obs) {
                    d.value = o.reps[r];
                }
                if matches!(Context::new(&draw, paper).raw_verdict(e), Verdict::Holds(_)) {
                    k += 1;
                }
            }
            detail.push_str(&format!("; holds in {k} of {reps} repetitions"));
        }
        if share >= CONFIDENCE {
            Verdict::Holds(detail)
        } else if share <= 1.0 - CONFIDENCE {
            Verdict::Fails(detail)
        } else {
            Verdict::Inconclusive(detail)
        }
    }

    #[test]
    fn shared_point_index_judges_as_a_fresh_one() {
        // two systems over a sweep of two parameters, noisy repetitions, one planned point
        // missing, and observations listed out of key order
        let mut obs = Vec::new();
        for (i, w) in [8.0, 2.0, 4.0].into_iter().enumerate() {
            for s in [1.0, 64.0] {
                let base = 10.0 * w + s / 8.0;
                let jit = [0.0, 0.3 * (i as f64 + 1.0), -0.2, 0.1];
                obs.push(rep(
                    "a",
                    "g",
                    &[("workers", w), ("size", s)],
                    &jit.map(|j| base + j),
                ));
                obs.push(rep(
                    "b",
                    "g",
                    &[("workers", w), ("size", s)],
                    &jit.map(|j| 0.55 * base - j),
                ));
            }
        }
        let paper = vec![PaperValue {
            system: "a".into(),
            metric: "g".into(),
            value: 81.0,
            params: p(&[("workers", 8.0), ("size", 64.0)]),
            note: None,
        }];
        let mut plan: Vec<Planned> = obs
            .iter()
            .map(|o| Planned {
                system: o.system.clone(),
                params: o.params.clone(),
                state: PointState::Done,
            })
            .collect();
        plan.push(Planned {
            system: "a".into(),
            params: p(&[("workers", 16.0), ("size", 1.0)]),
            state: PointState::Missing(Missing::Interrupted),
        });
        let claims = [
            "g(a) >= 1.8 * g(b)",
            "g(a) > g(b)",
            "g(a) > 1.9 * g(b) where workers >= 4",
            "g(a)[size=64] > 0.9 * g(b)[size=64]",
            "increasing(g(a), workers)",
            "decreasing(g(b), workers) or flat(g(b), size, 5%)",
            "g(a) == max(g(*))",
            "within(g(a), paper(g(a)), 2%)",
            "ratio(g(a), g(b)) < 1.85 and g(a) > 0",
        ];
        let class = Class::new(&obs, &paper, &[]);
        let planned = Class::new(&obs, &paper, &plan);
        let mut kinds = BTreeSet::new();
        for (i, src) in claims.iter().enumerate() {
            let e = parse(src).expect("parses");
            let seed = 7 + i as u64;
            let v = class.judge(&e, seed);
            assert_eq!(v, judge_reference(&e, &obs, &paper, &[], seed), "{src}");
            kinds.insert(v.label());
            let v = planned.judge(&e, seed);
            assert_eq!(v, judge_reference(&e, &obs, &paper, &plan, seed), "{src}");
            kinds.insert(v.label());
        }
        // the claims reach every kind of verdict, so the comparison covers each path
        assert_eq!(kinds.len(), 4, "{kinds:?}");
    }

    #[test]
    fn tie_is_not_a_win() {
        let o = vec![
            obs("a", "rtt", &[("w", 6.0)], 5.0),
            obs("b", "rtt", &[("w", 6.0)], 5.0),
            obs("c", "rtt", &[("w", 6.0)], 9.0),
        ];
        let v = check(&o, "rtt(a) == min(rtt(*))");
        assert!(matches!(v, Verdict::Inconclusive(_)), "{v:?}");
        assert!(v.detail().contains("a and b share the min 5"), "{v:?}");
        // a strict winner still holds; a loser still fails
        assert!(matches!(
            check(&o[1..], "rtt(b) == min(rtt(*))"),
            Verdict::Holds(_)
        ));
        assert!(matches!(
            check(&o, "rtt(c) == min(rtt(*))"),
            Verdict::Fails(_)
        ));
    }

    #[test]
    fn a_lead_within_the_stated_resolution_is_a_tie() {
        let o = vec![
            obs("a", "tf", &[("m", 1.0)], 114.89),
            obs("b", "tf", &[("m", 1.0)], 115.12),
            obs("c", "tf", &[("m", 1.0)], 50.0),
            obs("a", "tf", &[("m", 2.0)], 120.0),
            obs("b", "tf", &[("m", 2.0)], 100.0),
        ];
        // -0.2% against b: inside 5%, neither a win nor a loss
        let v = check(&o, "highest(tf(a)[m=1], tf(*)[m=1], 5%)");
        assert!(matches!(v, Verdict::Inconclusive(_)), "{v:?}");
        assert!(v.detail().contains("a 114.9 vs b 115.1 (-0.20%"), "{v:?}");
        // the same numbers judged exactly: a loss (==) and a loss (highest at 0.1%)
        assert!(matches!(
            check(&o, "tf(a)[m=1] == max(tf(*)[m=1])"),
            Verdict::Fails(_)
        ));
        assert!(matches!(
            check(&o, "highest(tf(a)[m=1], tf(*)[m=1], 0.1%)"),
            Verdict::Fails(_)
        ));
        // a clear lead holds; b's clear loss at m=2 fails whatever its tie at m=1
        assert!(matches!(
            check(&o, "highest(tf(a)[m=2], tf(*)[m=2], 5%)"),
            Verdict::Holds(_)
        ));
        assert!(matches!(
            check(&o, "highest(tf(b), tf(*), 5%)"),
            Verdict::Fails(_)
        ));
        // lowest mirrors it: c is lowest by far at m=1
        assert!(matches!(
            check(&o, "lowest(tf(c)[m=1], tf(*)[m=1], 5%)"),
            Verdict::Holds(_)
        ));
        // the first argument must be one system's series
        assert!(matches!(
            check(&o, "highest(tf(*), tf(*), 5%)"),
            Verdict::NotCheckable(_)
        ));
    }

    #[test]
    fn a_long_failure_is_quoted_on_one_line_and_cut() {
        let why = format!("first line\n{}", "é".repeat(400));
        let s = Missing::Failed(FailureKind::Failed, Some(why)).to_string();
        let quoted = s
            .strip_prefix("the point failed: first line ")
            .expect("one line");
        assert!(quoted.ends_with('…'), "{s}");
        assert_eq!(
            quoted.chars().count(),
            FAILURE_WORDS - "first line ".len() + 1
        );
    }

    #[test]
    fn each_missing_kind_is_not_checkable_with_its_sentence() {
        let o = vec![obs("a", "wrong", &[("loss", 0.0)], 0.0)];
        for (kind, says) in [
            (Missing::NotBuilt, "this version cannot run the system"),
            (
                Missing::NotHere("needs an FPGA board (XRT)".into()),
                "not run on this testbed: needs an FPGA board (XRT)",
            ),
            (
                Missing::Failed(FailureKind::Failed, None),
                "the point failed",
            ),
            (
                Missing::Failed(FailureKind::BadParameters, None),
                "the point failed for its parameter values",
            ),
            (
                Missing::Failed(FailureKind::Setup, None),
                "the point's setup failed",
            ),
            (
                Missing::Failed(
                    FailureKind::Setup,
                    Some("rank 0 on node0: no RDMA device `mlx5_0`\n(devices here: none)".into()),
                ),
                "the point's setup failed: rank 0 on node0: no RDMA device `mlx5_0` (devices here: none)",
            ),
            (
                Missing::Interrupted,
                "the point never ran (interrupted run)",
            ),
        ] {
            assert_eq!(kind.to_string(), says);
            let planned = vec![
                Planned {
                    system: "a".into(),
                    params: p(&[("loss", 0.0)]),
                    state: PointState::Done,
                },
                Planned {
                    system: "a".into(),
                    params: p(&[("loss", 0.01)]),
                    state: PointState::Missing(kind),
                },
            ];
            let e = parse("max(wrong(a)) == 0").expect("parses");
            let v = Context::new(&o, &[]).with_plan(&planned).verdict(&e);
            assert!(matches!(v, Verdict::NotCheckable(_)), "{v:?}");
            assert!(
                v.detail().contains("1 of 2 planned points missing (a at "),
                "{v:?}"
            );
            assert!(v.detail().contains(&format!(": {says})")), "{v:?}");
        }
    }

    #[test]
    fn wrong_point_fails_and_missing_point_is_not_checkable() {
        let o = vec![
            obs("a", "wrong", &[("loss", 0.0)], 0.0),
            obs("b", "wrong", &[("loss", 0.0)], 0.0),
            obs("a", "wrong", &[("loss", 0.01)], 0.0),
        ];
        let planned = vec![
            Planned {
                system: "a".into(),
                params: p(&[("loss", 0.0)]),
                state: PointState::Done,
            },
            Planned {
                system: "b".into(),
                params: p(&[("loss", 0.0)]),
                state: PointState::Done,
            },
            Planned {
                system: "a".into(),
                params: p(&[("loss", 0.01)]),
                state: PointState::Wrong("sum 7 != 8".into()),
            },
            Planned {
                system: "b".into(),
                params: p(&[("loss", 0.01)]),
                state: PointState::Missing(Missing::Interrupted),
            },
        ];
        let judge_of = |src: &str| {
            let e = parse(src).expect("parses");
            Context::new(&o, &[]).with_plan(&planned).verdict(&e)
        };
        // the observations alone say 0 wrong aggregates: the plan says a's point was wrong
        let v = judge_of("max(wrong(a)) == 0");
        assert!(matches!(v, Verdict::Fails(_)), "{v:?}");
        assert!(v.detail().contains("sum 7 != 8"), "{v:?}");
        let v = judge_of("max(wrong(b)) == 0");
        assert!(matches!(v, Verdict::NotCheckable(_)), "{v:?}");
        assert!(
            v.detail().contains("1 of 2 planned points missing"),
            "{v:?}"
        );
        // a claim that does not read the bad points is judged as before
        assert!(matches!(
            judge_of("max(wrong(b)) == 0 where loss < 0.005"),
            Verdict::Holds(_)
        ));
        // `*` reads every planned system
        let v = judge_of("max(wrong(*)) == 0 where loss < 0.005");
        assert!(matches!(v, Verdict::Holds(_)), "{v:?}");
        let v = judge_of("max(wrong(*)) == 0");
        assert!(matches!(v, Verdict::Fails(_)), "{v:?}");
    }

    #[test]
    fn statistical_verdicts() {
        let e = parse("g(a) >= 1.8 * g(b)").expect("parses");
        // clearly above: holds with an interval
        let clear = vec![
            rep("a", "g", &[], &[10.0, 10.5, 9.8, 10.2, 10.1]),
            rep("b", "g", &[], &[4.0, 4.1, 3.9, 4.05, 4.0]),
        ];
        let v = judge(&e, &clear, &[], &[], 1);
        assert!(matches!(v, Verdict::Holds(_)), "{v:?}");
        assert!(
            v.detail().contains("95% interval of g(a) / (1.8 * g(b))"),
            "{v:?}"
        );
        assert!(v.detail().contains("holds in 5 of 5 repetitions"), "{v:?}");
        // clearly below: fails
        let below = vec![
            rep("a", "g", &[], &[5.0, 5.2, 4.9]),
            rep("b", "g", &[], &[4.0, 4.1, 3.9]),
        ];
        assert!(matches!(judge(&e, &below, &[], &[], 1), Verdict::Fails(_)));
        // the median clears the bar but the spread straddles it: inconclusive
        let noisy = vec![
            rep("a", "g", &[], &[6.0, 7.3, 8.0, 7.5, 6.5]),
            rep("b", "g", &[], &[3.5, 4.0, 4.3, 3.9, 4.4]),
        ];
        let v = judge(&e, &noisy, &[], &[], 1);
        assert!(matches!(v, Verdict::Inconclusive(_)), "{v:?}");
        // identical repetitions (a deterministic model) are judged as a plain verdict
        let det = vec![
            rep("a", "g", &[], &[9.0, 9.0]),
            rep("b", "g", &[], &[5.0, 5.0]),
        ];
        let v = judge(&e, &det, &[], &[], 1);
        assert!(
            matches!(v, Verdict::Holds(_)) && !v.detail().contains("bootstrap"),
            "{v:?}"
        );
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
    fn a_metric_not_measured_is_inconclusive_not_a_host_limit() {
        let v = check(&table6(), "gput(switchml_rdma) > gput(atp)");
        assert_eq!(
            v,
            Verdict::Inconclusive(
                "not measured in this run: no results for gput(switchml_rdma)".into()
            )
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
