//! `netreduce.cost` (spec: `experiments/netreduce/table10.yaml`): Table 10's capital expense and
//! power of Testbed 2 with and without NetReduce, computed from the bill of materials in
//! `experiments/netreduce/data/bom.yaml` (compiled in as [`inabench_netreduce::cost::BOM`]; a
//! spec may point `bom_file` at another file). The only free choice is how many switch ports the
//! FPGA board takes (`extra_ports`): the text says six, the table's totals imply four.

use inabench_core::{Fidelity, PointCtx, Workload, WorkloadError};
use inabench_netreduce::cost::{BOM, Bom};

pub struct Cost;

impl Workload for Cost {
    fn id(&self) -> &'static str {
        "netreduce.cost"
    }

    fn fidelities(&self) -> &'static [Fidelity] {
        &[Fidelity::Modelled]
    }

    fn fabric(&self, _f: Fidelity) -> &'static str {
        "model"
    }

    fn systems(&self) -> Option<&'static [&'static str]> {
        Some(&["netreduce", "testbed"])
    }

    fn run(&self, ctx: &mut PointCtx<'_>) -> Result<(), WorkloadError> {
        let bom = match ctx.text("bom_file") {
            Ok(p) => Bom::load(&p),
            Err(_) => Bom::parse("experiments/netreduce/data/bom.yaml", BOM),
        }
        .map_err(|e| WorkloadError::Invalid(e.to_string()))?;
        let extra = ctx.param("extra_ports")?;
        let (c0, p0) = bom.without();
        let (c1, p1) = bom.with(extra);
        let c = &bom.components;
        if ctx.system() == "testbed" {
            ctx.record_if_declared("capex", c0);
            ctx.record_if_declared("power", p0);
            ctx.record_if_declared("gpu_capex", c.gpu.capex);
            ctx.record_if_declared("port_capex", c.switch_port.capex);
            return Ok(());
        }
        ctx.record_if_declared("capex", c1);
        ctx.record_if_declared("power", p1);
        ctx.record_if_declared("capex_increase", (c1 - c0) / c0 * 100.0);
        ctx.record_if_declared("power_increase", (p1 - p0) / p0 * 100.0);
        Ok(())
    }
}
