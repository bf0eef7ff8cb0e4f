//! inabench: the harness. Loads specs, plans runs, runs points through registered workloads
//! (in process or in agent processes started by a launcher), streams one event stream to the
//! live dashboard or the headless view and to the results store, and builds the reports.

pub mod breakeven;
pub mod dashboard;
pub mod doctor;
pub mod executor;
pub mod headless;
pub mod hostprofile;
pub mod launcher;
pub mod p4switch;
pub mod paths;
pub mod registry;
pub mod runner;
pub mod scoreboard;
pub mod testbed;

/// Specs embedded at build time and the compiler version.
pub mod embedded {
    include!(concat!(env!("OUT_DIR"), "/embedded_specs.rs"));
}

/// An error and its causes as one sentence, `outer: cause: cause`, leaving out a cause whose
/// words the sentence already holds (many library errors put their source's text into their own
/// message, so anyhow's `{:#}` would say the OS error twice).
pub fn error_sentence(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if text.is_empty() || out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::error_sentence;

    #[derive(Debug, thiserror::Error)]
    #[error("{path}: {source}")]
    struct Wrapped {
        path: String,
        source: std::io::Error,
    }

    /// A cause already in its wrapper's words is said once; a context and a cause that adds
    /// words are both kept.
    #[test]
    fn a_cause_in_its_wrappers_words_is_said_once() {
        let os = || std::io::Error::from_raw_os_error(30);
        let e = anyhow::Error::new(Wrapped {
            path: "/r/run".into(),
            source: os(),
        })
        .context("cannot write the report");
        assert_eq!(
            format!("{e:#}").matches("os error 30").count(),
            2,
            "anyhow alone repeats it"
        );
        let s = error_sentence(&e);
        assert_eq!(s, format!("cannot write the report: /r/run: {}", os()));
        let e = anyhow::Error::new(os()).context("cannot read x");
        assert_eq!(error_sentence(&e), format!("cannot read x: {}", os()));
    }
}
