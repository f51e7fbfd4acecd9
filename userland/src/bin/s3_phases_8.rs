//! The `s3` benchmark's barrier model at 8 vCPUs (`tsumugi_userland::s3_bench`).
#![no_std]
#![no_main]

fn main() -> i32 {
    libuthread::run(8, || tsumugi_userland::s3_bench::phases(8));
    0
}
libuthread::entry!(main);
