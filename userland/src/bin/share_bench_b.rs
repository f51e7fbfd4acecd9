//! One of the two programs of the `space_sharing` benchmark (`tsumugi_userland::share_bench`).
#![no_std]
#![no_main]

fn main() -> i32 {
    tsumugi_userland::share_bench::run("program_b")
}

libuthread::entry!(main);
