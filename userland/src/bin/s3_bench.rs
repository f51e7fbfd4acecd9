//! The `s3` benchmark's acquisition costs and its barrier model at one vCPU
//! (`tsumugi_userland::s3_bench`); `s3_phases_{2,4,8}` run the model at more vCPUs.
#![no_std]
#![no_main]

fn main() -> i32 {
    libuthread::run(1, || {
        tsumugi_userland::s3_bench::costs();
        tsumugi_userland::s3_bench::phases(1);
    });
    0
}
libuthread::entry!(main);
