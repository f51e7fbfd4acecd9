//! The `s3_elapsed` benchmark: the `s3` barrier model's elapsed time at 2 vCPU(s)
//! (`tsumugi_userland::s3_bench::phases_elapsed`), booted without `-icount`.
#![no_std]
#![no_main]

fn main() -> i32 {
    libuthread::run(2, || tsumugi_userland::s3_bench::phases_elapsed(2));
    0
}
libuthread::entry!(main);
