//! Declares `cfg(mn_core)` for the programs: set when libuthread builds its M:N core for this
//! target (libuthread's `build.rs` holds the one list of ported architectures and passes the
//! answer on as `DEP_UTHREAD_MN_CORE`). Programs that need M:N threads are built only then.
fn main() {
    println!("cargo::rustc-check-cfg=cfg(mn_core)");
    if std::env::var_os("DEP_UTHREAD_MN_CORE").is_some() {
        println!("cargo::rustc-cfg=mn_core");
    }
}
