//! Tsumugi user programs live in `src/bin/`; this library holds what they share.
#![no_std]
