//! Declares the `loom` cfg (set through RUSTFLAGS for the model-checking tests) so the
//! compiler knows it.
fn main() {
    println!("cargo::rustc-check-cfg=cfg(loom)");
}
