//! The bootable Tsumugi kernel image: the port's boot code calls `tsumugi_main`.
#![no_std]
#![no_main]

use arch::bootinfo::BootInfo;

/// Entry from `arch`'s boot code, once per boot, on the boot CPU.
#[no_mangle]
fn tsumugi_main(info: &'static BootInfo) -> ! {
    kernel::boot::kernel_main(info)
}
