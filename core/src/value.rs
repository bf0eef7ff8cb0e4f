//! Parameter values: the scalars a spec may use, and ordered parameter maps.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// One parameter value. Specs allow numbers, strings and booleans only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Scalar {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
}

impl Scalar {
    /// The value as a number, when it is one.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Scalar::Int(i) => Some(*i as f64),
            Scalar::Float(f) => Some(*f),
            Scalar::Bool(_) | Scalar::Str(_) => None,
        }
    }

    /// Equality that treats 32 and 32.0 as the same value (YAML writes both).
    pub fn same(&self, other: &Scalar) -> bool {
        match (self.as_f64(), other.as_f64()) {
            (Some(a), Some(b)) => a == b,
            _ => self == other,
        }
    }

    /// Total order for sorting sweeps: numbers by value, then strings, then booleans.
    pub fn cmp_total(&self, other: &Scalar) -> std::cmp::Ordering {
        use std::cmp::Ordering;
        match (self.as_f64(), other.as_f64()) {
            (Some(a), Some(b)) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => self.to_string().cmp(&other.to_string()),
        }
    }
}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scalar::Bool(b) => write!(f, "{b}"),
            Scalar::Int(i) => write!(f, "{i}"),
            Scalar::Float(x) => write!(f, "{x}"),
            Scalar::Str(s) => write!(f, "{s}"),
        }
    }
}

/// A point's parameters, ordered by name so that keys and hashes are canonical.
pub type Params = BTreeMap<String, Scalar>;

/// The canonical text of a parameter map: `a=1 b=x` (names sorted).
pub fn params_key(p: &Params) -> String {
    let mut s = String::new();
    for (i, (k, v)) in p.iter().enumerate() {
        if i > 0 {
            s.push(' ');
        }
        s.push_str(k);
        s.push('=');
        s.push_str(&v.to_string());
    }
    s
}

/// True when every entry of `subset` is in `p` with the same value.
pub fn params_match(p: &Params, subset: &Params) -> bool {
    subset
        .iter()
        .all(|(k, v)| p.get(k).is_some_and(|pv| pv.same(v)))
}
