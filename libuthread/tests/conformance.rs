//! Runs the conformance suite hosted, with 1 and 4 vCPUs.
#![cfg(not(loom))]

/// Keeps the save-mode test from running beside the WINDOW-mode ones.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn run_suite(vcpus: usize) {
    let failures = libuthread::run(vcpus, || {
        let mut failures = Vec::new();
        libuthread::conformance::run_all(&mut |name, outcome| match outcome {
            Ok(()) => eprintln!("conformance[{}]: {name} ok", libuthread::vcpu_count()),
            Err(why) => failures.push(format!("{name}: {why}")),
        });
        failures
    });
    assert!(failures.is_empty(), "with {vcpus} vCPUs: {failures:#?}");
}

#[test]
fn conformance_1_vcpu() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    run_suite(1);
}

#[test]
fn conformance_4_vcpus() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    run_suite(4);
}

/// The full-save baseline (every register and the FP/SIMD state at every voluntary switch,
/// resumed through the FULL path) must behave exactly like the WINDOW switch. One test, so
/// the process-wide save mode never leaks into the tests above (each integration-test file
/// is its own process, and tests in it run on several OS threads).
#[cfg(target_arch = "x86_64")]
#[test]
fn conformance_full_save_baseline() {
    use libuthread::context::{save_mode, set_save_mode, SaveMode};
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    set_save_mode(SaveMode::Full);
    assert_eq!(save_mode(), SaveMode::Full);
    let before = libuthread::sched::resume_counts();
    run_suite(1);
    run_suite(4);
    let after = libuthread::sched::resume_counts();
    set_save_mode(SaveMode::Window);
    assert!(after.1 - before.1 > 1000, "full resumes {} -> {}: the baseline did not use the FULL path", before.1, after.1);
}
