//! The testbed file (`experiments/testbeds/*.yaml`): its types and its strict reader live in
//! core ([`inabench_core::testbed`], where the cargo-fuzz target `testbed` reaches them without
//! the harness's dependencies); re-exported here, with the embedded software testbed.

pub use inabench_core::testbed::*;

/// The embedded software testbed (`experiments/testbeds/local.yaml`): what runs without
/// `--testbed`.
pub fn local_text() -> String {
    crate::embedded::EMBEDDED
        .iter()
        .find(|(p, _)| p.ends_with("testbeds/local.yaml"))
        .map(|(_, t)| t.to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_embedded_local_testbed_is_the_file_and_parses() {
        let text = super::local_text();
        assert_eq!(
            text,
            include_str!("../../experiments/testbeds/local.yaml"),
            "the embedded copy"
        );
        let t = super::Testbed::from_yaml(std::path::Path::new("local.yaml"), &text)
            .expect("local.yaml");
        assert!(!t.has_hardware());
    }
}
