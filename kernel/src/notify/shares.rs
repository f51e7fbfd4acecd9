//! The processor-allocation policy between programs that use Kernel Notification (space
//! sharing, Scheduler Activations): how many vCPUs each program may run at once. Pure logic,
//! host-tested; the kernel applies it in `processors`.
//!
//! # Policy
//! - The *capacity* is the number of CPUs. Every registered program gets at least one vCPU
//!   (its vCPU 0, which is never revoked), so with more programs than CPUs the capacity is the
//!   number of programs and their vCPUs 0 time-share the CPUs.
//! - A program alone keeps every vCPU it asked for, even more than the CPUs (nobody else wants
//!   them; its vCPUs time-share, as before space sharing).
//! - Otherwise the capacity is divided max-min fairly ("water-filling"): each program's share
//!   is its demand if that is at most an equal split, and what the others leave is split
//!   equally among the rest; a remainder goes to the programs that registered first.
//!
//! **Fairness bound**: every program's share is at least `min(demand, ⌊capacity / programs⌋)`,
//! and two programs whose demands exceed their shares differ by at most one vCPU.

use alloc::vec::Vec;

/// The shares for programs with demands `wants` (in registration order; each ≥ 1) on `cpus`
/// CPUs.
pub fn targets(cpus: usize, wants: &[usize]) -> Vec<usize> {
    let n = wants.len();
    if n == 1 {
        return alloc::vec![wants[0].max(1)];
    }
    let capacity = cpus.max(n);
    let mut share: Vec<usize> = wants.iter().map(|_| 1).collect();
    let mut left = capacity.saturating_sub(n);
    // Round-robin in registration order, one vCPU at a time, to whoever still wants more:
    // the equal split with the remainder to the first, capped by each demand.
    while left > 0 {
        let mut gave = false;
        for (s, w) in share.iter_mut().zip(wants) {
            if left > 0 && *s < *w {
                *s += 1;
                left -= 1;
                gave = true;
            }
        }
        if !gave {
            break;
        }
    }
    share
}

/// The program that should get the next free vCPU: the one furthest below its share (the
/// earliest registered among equals), if any is below it.
pub fn neediest(shares: &[usize], granted: &[usize]) -> Option<usize> {
    let mut best: Option<(usize, usize)> = None;
    for (i, (s, g)) in shares.iter().zip(granted).enumerate() {
        if s > g && best.is_none_or(|(_, d)| s - g > d) {
            best = Some((i, s - g));
        }
    }
    best.map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn two_programs_split_four_cpus() {
        assert_eq!(targets(4, &[4, 4]), [2, 2]);
        assert_eq!(targets(4, &[1, 4]), [1, 3]);
        assert_eq!(targets(4, &[4, 4, 4]), [2, 1, 1]);
        assert_eq!(targets(4, &[8]), [8]);
        assert_eq!(targets(1, &[4, 4]), [1, 1]);
        assert_eq!(targets(2, &[1, 1, 1]), [1, 1, 1]);
    }

    #[test]
    fn the_neediest_is_furthest_below_its_share() {
        assert_eq!(neediest(&[2, 2], &[4, 0]), Some(1));
        assert_eq!(neediest(&[2, 2], &[2, 2]), None);
        assert_eq!(neediest(&[3, 3], &[2, 2]), Some(0));
        assert_eq!(neediest(&[3, 3], &[2, 1]), Some(1));
    }

    proptest! {
        #[test]
        fn shares_are_fair_and_fit(cpus in 1usize..17, wants in proptest::collection::vec(1usize..20, 1..9)) {
            let s = targets(cpus, &wants);
            prop_assert_eq!(s.len(), wants.len());
            let n = wants.len();
            if n == 1 {
                prop_assert_eq!(s[0], wants[0]);
                return Ok(());
            }
            let capacity = cpus.max(n);
            let total: usize = s.iter().sum();
            prop_assert!(total <= capacity);
            // Nothing left idle that someone wants.
            prop_assert!(total == capacity || s.iter().zip(&wants).all(|(a, w)| a == w));
            for (i, (a, w)) in s.iter().zip(&wants).enumerate() {
                prop_assert!(*a >= 1 && a <= w);
                prop_assert!(*a >= (*w).min(capacity / n), "program {} below the bound", i);
                for (b, v) in s.iter().zip(&wants) {
                    // Two programs both held back by the policy differ by at most one.
                    if a < w && b < v {
                        prop_assert!(a.abs_diff(*b) <= 1);
                    }
                    // Nobody held back has less than a satisfied program.
                    if a < w {
                        prop_assert!(*a + 1 >= *b);
                    }
                }
            }
        }
    }
}
