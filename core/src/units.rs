//! Units: a workload states the unit it measured a quantity in, and the value is converted once,
//! here, to the unit the spec declares for the metric. A spec that changes `unit: Gbps` to
//! `unit: Mbps` then gets the same quantity in Mbit/s, never the Gbit/s number relabelled; a unit
//! of another dimension is an error, never a silent number.
//!
//! Only units of the same dimension convert; everything else must match exactly (a count stays
//! a count).

/// What a unit measures, and its size in the dimension's base unit.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Known {
    dimension: &'static str,
    scale: f64,
}

fn known(unit: &str) -> Option<Known> {
    let (dimension, scale) = match unit {
        // time, base: second
        "ns" => ("time", 1e-9),
        "us" | "µs" => ("time", 1e-6),
        "ms" => ("time", 1e-3),
        "s" => ("time", 1.0),
        "min" => ("time", 60.0),
        "h" => ("time", 3600.0),
        // bit rates, base: bit/s
        "bps" | "bit/s" => ("bit rate", 1.0),
        "Kbps" | "kbps" | "kbit/s" => ("bit rate", 1e3),
        "Mbps" | "Mbit/s" => ("bit rate", 1e6),
        "Gbps" | "Gbit/s" => ("bit rate", 1e9),
        "Tbps" | "Tbit/s" => ("bit rate", 1e12),
        // amounts of data, base: byte (decimal prefixes, as the papers use them)
        "B" | "bytes" => ("data", 1.0),
        "KB" | "kB" => ("data", 1e3),
        "MB" => ("data", 1e6),
        "GB" => ("data", 1e9),
        "TB" => ("data", 1e12),
        "KiB" => ("data", 1024.0),
        "MiB" => ("data", 1024.0 * 1024.0),
        "GiB" => ("data", 1024.0 * 1024.0 * 1024.0),
        "b" | "bits" => ("data", 0.125),
        "Kb" => ("data", 125.0),
        "Mb" => ("data", 125e3),
        "Gb" => ("data", 125e6),
        // shares, base: fraction
        "fraction" => ("share", 1.0),
        "%" => ("share", 0.01),
        // frequencies, base: per second
        "1/s" | "Hz" => ("frequency", 1.0),
        "1/ms" | "kHz" => ("frequency", 1e3),
        "1/us" | "MHz" => ("frequency", 1e6),
        // energy, base: joule; power, base: watt; compute rate, base: FLOP/s
        "J" => ("energy", 1.0),
        "kJ" => ("energy", 1e3),
        "W" => ("power", 1.0),
        "kW" => ("power", 1e3),
        "GFLOPS" => ("compute rate", 1e9),
        "TFLOPS" => ("compute rate", 1e12),
        _ => return None,
    };
    Some(Known { dimension, scale })
}

/// The units a spec may declare that this module does not convert: counts of things, ratios
/// and labels of their own. A value in one is matched exactly, never converted (a count stays
/// a count); a metric declared in any other unknown unit is a spec error.
pub const LABELS: &[&str] = &[
    // no unit, or a pure number
    "",
    "1",
    // ratios and flags
    "x",
    "ratio",
    "bool",
    "index",
    // counts of things
    "count",
    "cores",
    "workers",
    "switches",
    "packets",
    "frames",
    "samples",
    "B params",
    // rates of things (per second, never converted)
    "samples/s",
    "images/s",
    "Mpairs/s",
    // losses and money
    "nats",
    "nats/token",
    "$",
];

/// Whether a spec may declare `unit`: a unit this module converts, or one of [`LABELS`].
pub fn is_known(unit: &str) -> bool {
    known(unit).is_some() || LABELS.contains(&unit)
}

/// Why a declared unit is refused, one sentence.
pub fn unknown_unit_message(unit: &str) -> String {
    format!(
        "`{unit}` is not a known unit: one that converts (time ns, us, ms, s; bit rate bps, \
         Mbps, Gbps; data B, KB, MB, GB, KiB, Gb; share %, fraction; frequency 1/s, Hz; energy \
         J; power W; compute TFLOPS) or a declared count or label ({})",
        LABELS
            .iter()
            .map(|l| if l.is_empty() {
                "none (`\"\"`)".to_string()
            } else {
                format!("`{l}`")
            })
            .collect::<Vec<_>>()
            .join(", ")
    )
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum UnitError {
    #[error("a value in `{from}` cannot be expressed in `{to}`")]
    Incompatible { from: String, to: String },
}

/// `value` measured in `from`, expressed in `to`.
pub fn convert(value: f64, from: &str, to: &str) -> Result<f64, UnitError> {
    if from == to {
        return Ok(value);
    }
    match (known(from), known(to)) {
        (Some(a), Some(b)) if a.dimension == b.dimension => Ok(value * (a.scale / b.scale)),
        _ => Err(UnitError::Incompatible {
            from: from.to_string(),
            to: to.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_dimension_converts() {
        assert_eq!(convert(2.5, "Gbps", "Mbps"), Ok(2500.0));
        assert_eq!(convert(1500.0, "us", "ms"), Ok(1.5));
        assert_eq!(convert(0.25, "fraction", "%"), Ok(25.0));
        assert_eq!(convert(3.0, "GB", "MB"), Ok(3000.0));
        assert_eq!(convert(8.0, "Gb", "GB"), Ok(1.0));
        assert_eq!(convert(7.0, "count", "count"), Ok(7.0));
    }

    #[test]
    fn declared_units_are_known_and_misspelt_ones_are_not() {
        for u in [
            "Gbps",
            "us",
            "%",
            "count",
            "x",
            "",
            "TFLOPS",
            "W",
            "J",
            "samples/s",
        ] {
            assert!(is_known(u), "{u}");
        }
        for u in ["Gbsp", "usec", "gbps", "counts", " ms"] {
            assert!(!is_known(u), "{u}");
        }
        assert_eq!(convert(2.0, "kW", "W"), Ok(2000.0));
        assert!(convert(1.0, "W", "J").is_err());
        assert!(unknown_unit_message("Gbsp").starts_with("`Gbsp` is not a known unit: "));
    }

    #[test]
    fn other_dimensions_and_unknown_units_refuse() {
        assert!(convert(1.0, "Gbps", "ms").is_err());
        assert!(convert(1.0, "GB", "Gbps").is_err());
        assert!(convert(1.0, "count", "x").is_err());
        assert!(convert(1.0, "%", "x").is_err());
    }
}
