//! Compile the P4Runtime protocol definitions with protox (pure Rust: no `protoc` needed).
fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(["p4/v1/p4runtime.proto"], ["proto"])?;
    tonic_prost_build::configure().compile_fds(fds)?;
    Ok(())
}
