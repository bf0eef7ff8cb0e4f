//! Table 10's capital expense and power of Testbed 2 with and without NetReduce, computed from
//! the bill of materials in `experiments/netreduce/data/bom.yaml` (compiled in as [`BOM`]); the
//! workload `netreduce.cost` runs it. The only free choice is how many switch ports the FPGA
//! board takes (`extra_ports`): the text says six, the table's totals imply four.

use serde::Deserialize;

/// The bill of materials shipped with the suite.
pub const BOM: &str = include_str!("../../../experiments/netreduce/data/bom.yaml");

#[derive(Debug, Clone, Copy, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Item {
    pub capex: f64,
    pub power: f64,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Components {
    pub gpu: Item,
    pub switch_port: Item,
    pub fpga_board: Item,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Testbed {
    pub machines: u32,
    pub gpus_per_machine: u32,
    pub ports_per_machine: u32,
    pub fpga_boards: u32,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Bom {
    pub components: Components,
    pub testbed: Testbed,
}

#[derive(Debug, thiserror::Error)]
pub enum BomError {
    #[error("cannot read {0}: {1}")]
    Read(String, std::io::Error),
    #[error("{0}: {1}")]
    Parse(String, String),
}

impl Bom {
    pub fn parse(name: &str, text: &str) -> Result<Bom, BomError> {
        serde_saphyr::from_str(text).map_err(|e| BomError::Parse(name.to_string(), e.to_string()))
    }

    pub fn load(path: &str) -> Result<Bom, BomError> {
        let text =
            std::fs::read_to_string(path).map_err(|e| BomError::Read(path.to_string(), e))?;
        Bom::parse(path, &text)
    }

    /// (capex, power) of the testbed without NetReduce.
    pub fn without(&self) -> (f64, f64) {
        let t = &self.testbed;
        let c = &self.components;
        let gpus = f64::from(t.machines * t.gpus_per_machine);
        let ports = f64::from(t.machines * t.ports_per_machine);
        (
            gpus * c.gpu.capex + ports * c.switch_port.capex,
            gpus * c.gpu.power + ports * c.switch_port.power,
        )
    }

    /// (capex, power) with NetReduce's boards, each taking `extra_ports` switch ports.
    pub fn with(&self, extra_ports: f64) -> (f64, f64) {
        let (c0, p0) = self.without();
        let c = &self.components;
        let boards = f64::from(self.testbed.fpga_boards);
        (
            c0 + boards * (c.fpga_board.capex + extra_ports * c.switch_port.capex),
            p0 + boards * (c.fpga_board.power + extra_ports * c.switch_port.power),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_bom_by_hand() {
        let b = Bom::parse("bom", BOM).expect("parses");
        let (c0, p0) = b.without();
        // 32 x 9075.4 + 4 x 245.5 and 32 x 300 + 4 x 9.4
        assert!((c0 - 291_394.8).abs() < 1e-6, "{c0}");
        assert!((p0 - 9_637.6).abs() < 1e-9, "{p0}");
        let (c4, p4) = b.with(4.0);
        assert!((c4 - (291_394.8 + 6_000.0 + 982.0)).abs() < 1e-6);
        assert!((p4 - (9_637.6 + 28.3 + 37.6)).abs() < 1e-9);
        let (c6, _) = b.with(6.0);
        assert!((c6 - c4 - 491.0).abs() < 1e-6);
        assert!(Bom::parse("bad", "components: {}\n").is_err());
    }
}
