//! The `s3` benchmark's barrier model at 4 vCPUs (`tsumugi_userland::s3_bench`).
#![no_std]
#![no_main]

fn main() -> i32 {
    libuthread::run(4, || tsumugi_userland::s3_bench::phases(4));
    0
}
libuthread::entry!(main);
