//! Compile the P4Runtime protocol definitions with protox (pure Rust: no `protoc` needed).
fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(["p4/v1/p4runtime.proto"], ["proto"])?;
    // decode errors as INVALID_ARGUMENT, not INTERNAL (src/codec.rs)
    tonic_prost_build::configure()
        .codec_path("crate::codec::Codec")
        .compile_fds(fds)?;
    Ok(())
}
