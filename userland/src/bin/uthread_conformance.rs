//! libuthread's conformance suite (the same one `cargo test -p libuthread` runs hosted), on
//! Tsumugi: M:N threads on as many vCPUs as there are CPUs.
#![no_std]
#![no_main]

extern crate alloc;

// libuthread's M:N core is built only for the architectures its build script lists; elsewhere
// this program reports that (and fails, so a suite that runs it cannot pass by accident).
#[cfg(mn_core)]
mod program {
    use libuthread::println;

    pub fn main() -> i32 {
        let vcpus = libuthread::sys::counters(tsumugi_abi::stats::scope::ALL_CPUS).map(|(_, n)| n).unwrap_or(1);
        let failed = libuthread::run(vcpus, move || {
            let mut failed = 0usize;
            libuthread::conformance::run_all(&mut |name, outcome| match outcome {
                Ok(()) => println!("uthread: {name} ... ok"),
                Err(why) => {
                    failed += 1;
                    println!("uthread: {name} ... FAILED: {why}");
                }
            });
            failed
        });
        println!("uthread: conformance on {vcpus} vCPUs: {failed} failed");
        i32::from(failed != 0)
    }
}

#[cfg(mn_core)]
use program::main;

#[cfg(not(mn_core))]
fn main() -> i32 {
    libuthread::println!("uthread_conformance: libuthread's M:N core is not built for this architecture");
    1
}

libuthread::entry!(main);
