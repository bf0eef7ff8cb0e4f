//! The optimizer's update rate measured on this machine: what the 100B-scale throughput model
//! uses for the node's CPU Adam (from memory) and for Adam through the state files (from
//! storage).

use crate::OocError;
use crate::store::{self, Shard, ShardState};
use inabench_train::adam::{AdamParams, AdamStep};
use std::path::Path;
use std::time::Instant;

/// Adam's update rate on this machine, in parameters per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UpdateRate {
    /// Adam over fp32 states already in memory (parameters, m, v, gradients), one thread.
    pub from_memory: f64,
    /// Reading a state file from `dir`, updating, writing the state and bf16 files back and
    /// fsyncing them (one thread, no overlap: a lower bound on the pipelined rate); `None` when
    /// no directory was given. The file is evicted from the page cache before each read (Linux),
    /// so the read comes from the device.
    pub from_storage: Option<f64>,
}

/// Measure the update rate over `params` parameters (at least 1): in memory the median of 5
/// steps, through storage the better of 2;
/// with `dir`, also through state files written there (removed afterwards). About 1 s for
/// 4 M parameters on a 2-core VM.
pub fn measure_update_rate(dir: Option<&Path>, params: usize) -> Result<UpdateRate, OocError> {
    if let Some(d) = dir
        && !d.is_dir()
    {
        return Err(OocError::MissingDir {
            path: d.to_path_buf(),
        });
    }
    let n = params.max(1);
    let hp = AdamParams::default();
    let mut st = ShardState {
        params: vec![0.0f32; n],
        m: vec![0.0f32; n],
        v: vec![0.0f32; n],
    };
    store::fill_init(1, 0, 0, &mut st.params);
    let mut g = vec![0.0f32; n];
    store::fill_gradients(1, 1, 0, 0, &mut g);
    // the median of 5 steps (the first touches fresh pages)
    let mut times: Vec<f64> = (1..=5)
        .map(|step| {
            let t = Instant::now();
            AdamStep::new(hp, step).apply(&mut st.params, &mut st.m, &mut st.v, &g);
            std::hint::black_box(&st);
            t.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    let from_memory = n as f64 / times[2].max(1e-9);
    let from_storage = match dir {
        None => None,
        Some(d) => {
            let sh = Shard {
                layer: 0,
                shard: 0,
                ssd: 0,
                offset: 0,
                len: n,
            };
            let sp = d.join(format!("luwu-ooc-rate-{}.state", std::process::id()));
            let bp = sp.with_extension("bf16");
            store::write_all_synced(&sp, &st.encode(&sh, 5))?;
            let mut best = f64::INFINITY;
            let mut result = Ok(());
            for step in 6..=7 {
                // read from the device, not from the page cache the write just filled
                if let Err(e) = store::evict_from_page_cache(&sp) {
                    result = Err(e);
                    break;
                }
                let t = Instant::now();
                let r = store::read_all(&sp)
                    .and_then(|b| ShardState::decode(&sp, &b, &sh, step - 1))
                    .and_then(|mut s| {
                        AdamStep::new(hp, step).apply(&mut s.params, &mut s.m, &mut s.v, &g);
                        store::write_all_synced(&sp, &s.encode(&sh, step))?;
                        store::write_all_synced(&bp, &s.encode_bf16(&sh, step))
                    });
                if let Err(e) = r {
                    result = Err(e);
                    break;
                }
                best = best.min(t.elapsed().as_secs_f64());
            }
            let _ = std::fs::remove_file(&sp);
            let _ = std::fs::remove_file(&bp);
            result?;
            Some(n as f64 / best.max(1e-9))
        }
    };
    Ok(UpdateRate {
        from_memory,
        from_storage,
    })
}
