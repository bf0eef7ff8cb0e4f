//! What a switch target gives the switch program that runs on it: the one trait the two targets
//! here implement, the Tofino model ([`crate::tofino::TofinoModel`]: SwitchML, SwitchML-RDMA and
//! ATP, and Libra's switch) and NetReduce's FPGA board ([`crate::fpga::FpgaModel`]: the
//! accelerator).
//!
//! Only what the two models share in fact: their ports (how many, at what line rate) and what a
//! packet costs in pipeline passes. The rest stays with its model: the Tofino's stages, register
//! arrays and pipelines (a pass holds 192 bytes of values; [`crate::tofino::Pipeline`] counts its
//! recirculations, into the same pipeline or chained through the others), the FPGA's connection
//! table and aggregator array (`fpga::Accelerator`).

/// A switch target as its program sees it.
pub trait Target {
    /// The target's name, for messages.
    fn name(&self) -> &'static str;
    /// Ports the target has (the Tofino's on every pipeline; the FPGA board's own).
    fn ports(&self) -> u32;
    /// Each port's line rate.
    fn port_gbps(&self) -> f64;
    /// Passes through the target a packet takes to aggregate `payload` bytes of values: at least
    /// one; every pass beyond the first is a recirculation.
    fn passes(&self, payload: u32) -> u32;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fpga::FpgaModel;
    use crate::tofino::TofinoModel;

    #[test]
    fn each_target_gives_its_papers_ports_and_passes() {
        let targets: [&dyn Target; 2] = [&TofinoModel::PAPER, &FpgaModel::PAPER];
        let got: Vec<(&str, u32, f64, [u32; 4])> = targets
            .iter()
            .map(|t| {
                (
                    t.name(),
                    t.ports(),
                    t.port_gbps(),
                    [0, 192, 193, 1024].map(|p| t.passes(p)),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                // NetReduce Sec. 6: 4 pipelines of 16 x 100G ports, 192 bytes a pass
                ("tofino", 64, 100.0, [1, 1, 2, 6]),
                // NetReduce Sec. 4: six 100G ports, a packet aggregated in one pass
                ("fpga", 6, 100.0, [1, 1, 1, 1]),
            ]
        );
    }
}
