//! The victim of `name_owner+name_thief`: publishes a name, and checks that it still holds
//! its value after another program tried to take it over.
#![no_std]
#![no_main]

use libuthread::{println, sys};
use tsumugi_userland::names::{DONE_KEY, OWNED_KEY, OWNED_VALUE};

fn main() -> i32 {
    if sys::publish(OWNED_KEY, OWNED_VALUE).is_err() {
        println!("name_owner: FAILED: could not publish");
        return 1;
    }
    sys::lookup_wait(DONE_KEY);
    match sys::lookup(OWNED_KEY) {
        Ok(OWNED_VALUE) => {
            println!("name_owner: my name still holds my value");
            0
        }
        other => {
            println!("name_owner: FAILED: my name now reads {other:?}");
            1
        }
    }
}
libuthread::entry!(main);
