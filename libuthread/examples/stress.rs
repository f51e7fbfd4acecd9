//! Runs the conformance suite over and over with varying vCPU counts (a soak test):
//! `cargo run --release -p libuthread --example stress -- [rounds]`.

fn main() {
    let rounds: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(20);
    for round in 0..rounds {
        let vcpus = 1 + round % 8;
        let failures = libuthread::run(vcpus, || {
            let mut failures = Vec::new();
            libuthread::conformance::run_all(&mut |name, outcome| {
                if let Err(why) = outcome {
                    failures.push(format!("{name}: {why}"));
                }
            });
            failures
        });
        assert!(failures.is_empty(), "round {round} ({vcpus} vCPUs): {failures:#?}");
        eprintln!("round {round}: {vcpus} vCPUs ok");
    }
}
