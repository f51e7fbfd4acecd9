//! Runs the conformance suite hosted, with 1 and 4 vCPUs.
#![cfg(not(loom))]

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
    run_suite(1);
}

#[test]
fn conformance_4_vcpus() {
    run_suite(4);
}
