//! Passes the port's linker script when the kernel image is linked for a bare-metal target.

fn main() {
    let target = std::env::var("TARGET").unwrap_or_default();
    let manifest = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let arch = target.split('-').next().unwrap_or_default();
    let arch_dir = match arch {
        "riscv64gc" => "riscv64",
        other => other,
    };
    if target.ends_with("-none") || target.ends_with("-none-elf") || target.ends_with("-none-softfloat") {
        let script = manifest.join("../arch/src").join(arch_dir).join("linker.ld");
        println!("cargo:rustc-link-arg-bin=tsumugi=-T{}", script.display());
        println!("cargo:rerun-if-changed={}", script.display());
    }
    println!("cargo:rerun-if-changed=build.rs");
}
