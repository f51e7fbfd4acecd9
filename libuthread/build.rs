//! Declares the cfgs the library uses:
//! - `loom` (set through RUSTFLAGS for the model-checking tests);
//! - `mn_core`: the M:N core (scheduler, context switch, sync, Kernel Notification platform) is
//!   built — hosted everywhere, and on Tsumugi for the architectures whose context switch
//!   (`src/context/<arch>.rs`) exists. Elsewhere only the program runtime (`rt`, `sys`, `io`)
//!   is built. Dependent crates learn it too (`links = "uthread"`: their build scripts see
//!   `DEP_UTHREAD_MN_CORE`), so programs that need the M:N core follow this one list.
fn main() {
    println!("cargo::rustc-check-cfg=cfg(loom)");
    println!("cargo::rustc-check-cfg=cfg(mn_core)");
    /// Architectures with a Tsumugi context switch.
    const PORTED: &[&str] = &["x86_64", "aarch64", "riscv64"];
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    if os != "none" || PORTED.contains(&arch.as_str()) {
        println!("cargo::rustc-cfg=mn_core");
        println!("cargo::metadata=mn_core=1");
    }
}
