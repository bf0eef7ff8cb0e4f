//! Run the out-of-core optimizer pipeline once and print its report:
//! `ooc_run <root> <ssds> <layers> <params_per_layer> <iterations> [mbps] [compute_ms_per_layer]`.

use inabench_luwu_ooc::pipeline::{PipelineConfig, run};
use inabench_train::adam::AdamParams;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 6 {
        eprintln!(
            "usage: ooc_run <root> <ssds> <layers> <params_per_layer> <iterations> [mbps] [compute_ms]"
        );
        std::process::exit(2);
    }
    let layers: usize = a[3].parse()?;
    let compute = Duration::from_secs_f64(a.get(7).map_or(Ok(0.0), |s| s.parse::<f64>())? / 1e3);
    let cfg = PipelineConfig {
        root: a[1].clone().into(),
        ssds: a[2].parse()?,
        layer_params: vec![a[4].parse()?; layers],
        ssd_mbps: a.get(6).map(|s| s.parse()).transpose()?,
        iterations: a[5].parse()?,
        fwd_compute: vec![compute; layers],
        bwd_compute: vec![compute * 2; layers],
        adam: AdamParams::default(),
        seed: 1,
    };
    let t = std::time::Instant::now();
    let r = run(&cfg, &AtomicBool::new(false))?;
    println!("total {:?} (including creating the states)", t.elapsed());
    for (i, (it, ssd)) in r.iter_times.iter().zip(&r.ssd_time).enumerate() {
        println!("iteration {i}: {it:?}, busiest SSD {ssd:?}");
    }
    println!(
        "read {} MB, written {} MB, {} updates",
        r.bytes_read / 1_000_000,
        r.bytes_written / 1_000_000,
        r.updates
    );
    Ok(())
}
