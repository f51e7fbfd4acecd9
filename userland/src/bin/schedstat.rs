//! Prints the kernel's scheduling counters: per CPU, in total, and for this program.
#![no_std]
#![no_main]

use libuthread::{print, println, sys};
use tsumugi_abi::stats::{scope, Counter};

fn row(label: &str, values: &[u64; Counter::COUNT]) {
    print!("{label:>8}");
    for v in values {
        print!(" {v:>10}");
    }
    println!();
}

fn main() -> i32 {
    let Ok((total, cpus)) = sys::counters(scope::ALL_CPUS) else { return 1 };
    print!("{:>8}", "cpu");
    for c in Counter::ALL {
        let name = c.name();
        print!(" {:>10}", &name[..name.len().min(10)]);
    }
    println!();
    for cpu in 0..cpus {
        let Ok((values, _)) = sys::counters(scope::cpu(cpu)) else { return 1 };
        let mut label = [b' '; 8];
        label[7] = b'0' + (cpu % 10) as u8;
        row(core::str::from_utf8(&label).unwrap_or("?"), &values);
    }
    row("all", &total);
    let Ok((mine, _)) = sys::counters(scope::DOMAIN) else { return 1 };
    row("me", &mine);
    0
}
libuthread::entry!(main);
