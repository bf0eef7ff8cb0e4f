//! LuWu's 100B-scale figures (Sun et al., arXiv:2409.00918) as models.
//!
//! - [`shapes`]: OPT shapes (Table 2), parameters, FLOPs with activation checkpointing,
//!   activation bytes;
//! - [`hw`]: the testbed's hardware, each number from a cited datasheet or measurement;
//! - [`rate`]: the CPU optimizer's update rate, measured on this host by the run that asks
//!   for it (never kept for the process) and scaled;
//! - [`memory`]: per-system placement of model states and activations, the largest trainable
//!   model and micro-batch (luwu-fig10, functional);
//! - [`iter`]: iteration models of LuWu, ZeRO-Infinity (+SHARP), ZeRO-3, ZeRO-Offload and
//!   SwitchML (luwu-fig2, -fig3, -fig11 to -fig15, -fig17, modelled).
//!
//! The workloads `luwu_model.fig2` to `.fig17` that drive them are in `inabench-workloads`.

pub mod hw;
pub mod iter;
pub mod memory;
pub mod rate;
pub mod shapes;

/// Errors of this crate's library code.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    #[error("invalid input: {0}")]
    Invalid(String),
    #[error("{system} cannot train {model} here: {why}")]
    DoesNotFit {
        system: String,
        model: String,
        why: String,
    },
}

/// The systems the models cover, with the specs' snake_case ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum System {
    Luwu,
    ZeroInfinity,
    ZeroInfinitySharp,
    Zero3,
    SwitchMl,
    ZeroOffload,
}

impl System {
    pub fn parse(id: &str) -> Result<System, ModelError> {
        Ok(match id {
            "luwu" => System::Luwu,
            "zero_infinity" => System::ZeroInfinity,
            "zero_infinity_sharp" => System::ZeroInfinitySharp,
            "zero3" => System::Zero3,
            "switchml" => System::SwitchMl,
            "zero_offload" => System::ZeroOffload,
            other => return Err(ModelError::Invalid(format!("unknown system `{other}`"))),
        })
    }
}
