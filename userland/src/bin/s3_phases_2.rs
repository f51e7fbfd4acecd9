//! The `s3` benchmark's barrier model at 2 vCPUs (`tsumugi_userland::s3_bench`).
#![no_std]
#![no_main]

fn main() -> i32 {
    libuthread::run(2, || tsumugi_userland::s3_bench::phases(2));
    0
}
libuthread::entry!(main);
