//! The StackThreads applications (seed 004, Taura & Yonezawa 2000): `fib`, `nqueens` and a CKY
//! parser, each written once over a [`Strategy`] that says what a recursive call is:
//! - [`Sequential`]: a plain call (the baseline; monomorphised, it is ordinary recursion);
//! - [`ForkEverywhere`] (FK): every recursive call is a fork, joined by its caller — no cutoff,
//!   as in the paper's "fork everywhere" runs, through `libuthread::Builder::join`, which
//!   forks (`b`, a lazy task record) one call and makes the other itself; `nqueens` forks each
//!   square's call and walks the row's other squares itself;
//! - [`SuspendEverywhere`] (SW): FK, and every leaf (a call that makes no further call) also
//!   waits once on a channel that another thread (a server) fulfils — it sends the server the
//!   sender of a one-shot reply channel whose slot is in the leaf's frame (`libuthread::oneshot::ask`)
//!   and waits for the reply — so every leaf thread really suspends and is resumed.
//!
//! No `std`: this file is shared by the userland `stackthreads` program (`#[path]`) and the
//! hosted criterion bench `libuthread/benches/stackthreads.rs`; the crate that includes it
//! must say `extern crate alloc`.

use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

use libuthread::{mpsc, oneshot};

/// What a recursive call is: run it now, or in a thread of its own.
pub trait Strategy: Copy + Send + Sync {
    /// Makes the two recursive calls `a` and `b` (`b` as a call or a fork, `a` always a call)
    /// and gives both results; a fork runs `a` first and `b` at the join (or elsewhere), a
    /// call runs `b` first.
    fn join<RA, RB: Send>(&self, a: impl FnOnce() -> RA, b: impl FnOnce() -> RB + Send) -> (RA, RB);
    /// Called once by every leaf call.
    fn leaf(&self);
}

/// Every recursive call is a call.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sequential;

impl Strategy for Sequential {
    #[inline(always)]
    fn join<RA, RB: Send>(&self, a: impl FnOnce() -> RA, b: impl FnOnce() -> RB + Send) -> (RA, RB) {
        // `b` first: the forked call comes first in the programs' text, and this is their
        // plain recursion.
        let rb = b();
        (a(), rb)
    }
    #[inline(always)]
    fn leaf(&self) {}
}

/// Stack of a forked call: the applications recurse a few dozen frames at most, and FK keeps
/// thousands of threads alive at once (libuthread's smallest stack).
pub const FORK_STACK: usize = 16 * 1024;

/// Two recursive calls, `b` forked: `libuthread::Builder::join` (lazy task creation: `b` is a
/// record until someone else could run it, then a thread with a [`FORK_STACK`] stack).
// This and the strategies' `join`s are always inlined, as `Sequential`'s and libuthread's own
// are: left to the inliner, a wrapper of the join in a recursion can become the recursion's
// function itself, and take both closures by pointer (FK nqueens: 95 % overhead, now 24 %).
#[inline(always)]
fn fork_join<RA, RB: Send>(a: impl FnOnce() -> RA, b: impl FnOnce() -> RB + Send) -> (RA, RB) {
    libuthread::Builder::new().stack_size(FORK_STACK).join(a, b)
}

/// Every recursive call is a fork (FK): `b` of every `join` is a lazy task record.
#[derive(Clone, Copy, Debug, Default)]
pub struct ForkEverywhere;

impl Strategy for ForkEverywhere {
    #[inline(always)]
    fn join<RA, RB: Send>(&self, a: impl FnOnce() -> RA, b: impl FnOnce() -> RB + Send) -> (RA, RB) {
        fork_join(a, b)
    }
    #[inline]
    fn leaf(&self) {}
}

/// Every recursive call is a fork and every leaf suspends once (SW): it sends a one-shot reply
/// sender to the server thread and blocks until the server answers on it.
#[derive(Clone, Copy)]
pub struct SuspendEverywhere<'a> {
    server: &'a mpsc::Sender<oneshot::Sender<()>>,
}

impl SuspendEverywhere<'_> {
    /// Runs `body` with an SW strategy whose server thread lives as long as `body` runs.
    pub fn with<R>(body: impl FnOnce(&SuspendEverywhere<'_>) -> R) -> R {
        let (server, requests) = mpsc::channel::<oneshot::Sender<()>>();
        let thread = libuthread::spawn(move || {
            for reply in requests.iter() {
                // A leaf that stopped waiting is no error of the server's.
                let _ = reply.send(());
            }
        });
        let result = body(&SuspendEverywhere { server: &server });
        // The server ends when the sender is gone.
        drop(server);
        let _ = thread.join();
        result
    }
}

impl Strategy for SuspendEverywhere<'_> {
    #[inline(always)]
    fn join<RA, RB: Send>(&self, a: impl FnOnce() -> RA, b: impl FnOnce() -> RB + Send) -> (RA, RB) {
        fork_join(a, b)
    }
    fn leaf(&self) {
        // The reply's slot in this frame: no allocation (`oneshot::ask`).
        let _ = oneshot::ask(|reply| self.server.send(reply));
    }
}

// ---------------------------------------------------------------------------------------------
// fib
// ---------------------------------------------------------------------------------------------

/// `fib(n)` by the doubly recursive definition; `fib(n - 1)` of each pair is forked
/// (`strategy.join`'s `b`), `fib(n - 2)` is made by the caller (as a Cilk or StackThreads fib
/// does).
pub fn fib<S: Strategy>(strategy: &S, n: u32) -> u64 {
    if n < 2 {
        strategy.leaf();
        return u64::from(n);
    }
    // The forked call gets its own copy of the strategy (a `Copy` of nothing or of one
    // pointer), so the record holds no pointer back into this frame.
    let child = *strategy;
    let (second, first) = strategy.join(|| fib(strategy, n - 2), move || fib(&child, n - 1));
    first + second
}

// ---------------------------------------------------------------------------------------------
// nqueens
// ---------------------------------------------------------------------------------------------

/// Largest board [`nqueens`] takes.
pub const MAX_QUEENS: u32 = 16;

/// The number of ways to place `n` non-attacking queens on an `n`×`n` board (`n` ≤
/// [`MAX_QUEENS`]).
pub fn nqueens<S: Strategy>(strategy: &S, n: u32) -> u64 {
    assert!(n <= MAX_QUEENS, "nqueens: board too large");
    place(strategy, n, 0, 0, 0, 0)
}

/// Places queens on rows `row..n`, given the columns and diagonals taken so far (bit masks).
/// Every safe square of this row is a recursive call; a call that makes none is a leaf.
fn place<S: Strategy>(strategy: &S, n: u32, row: u32, columns: u32, left: u32, right: u32) -> u64 {
    if row == n {
        strategy.leaf();
        return 1;
    }
    let board = (1u32 << n) - 1;
    let free = board & !(columns | left | right);
    if free == 0 {
        strategy.leaf();
        return 0;
    }
    squares(strategy, n, row, columns, left, right, free)
}

/// The recursive calls of [`place`] for the safe squares `free` (not empty) of row `row`, lowest
/// first: the first square's call is forked (`strategy.join`'s `b`), the others are made by
/// this function, so under FK every call of `place` but the root is a fork.
fn squares<S: Strategy>(strategy: &S, n: u32, row: u32, columns: u32, left: u32, right: u32, free: u32) -> u64 {
    let board = (1u32 << n) - 1;
    let bit = free & free.wrapping_neg();
    let others = free & (free - 1);
    let child = *strategy;
    let (below_columns, below_left, below_right) = (columns | bit, ((left | bit) << 1) & board, (right | bit) >> 1);
    // Both closures `move`: each takes its words by value (the forked one just the next row's
    // arguments); borrowing them would have the fork store each and a pointer to each, and the
    // join load both (about 20 instructions a fork under FK, where the join is a call).
    let (rest, first) = strategy.join(
        move || if others == 0 { 0 } else { squares(strategy, n, row, columns, left, right, others) },
        move || place(&child, n, row + 1, below_columns, below_left, below_right),
    );
    first + rest
}

// ---------------------------------------------------------------------------------------------
// CKY
// ---------------------------------------------------------------------------------------------

/// Nonterminals of the grammar, as indices.
const S: usize = 0;
const NP: usize = 1;
const VP: usize = 2;
const PP: usize = 3;
const DET: usize = 4;
const N: usize = 5;
const V: usize = 6;
const P: usize = 7;
/// Number of nonterminals.
const SYMBOLS: usize = 8;

/// The binary rules `A -> B C` of a small English grammar in Chomsky normal form; prepositional
/// phrases attach to noun and verb phrases, so sentences are ambiguous.
const RULES: [(usize, usize, usize); 6] = [
    (S, NP, VP),
    (NP, DET, N),
    (NP, NP, PP),
    (VP, V, NP),
    (VP, VP, PP),
    (PP, P, NP),
];

/// The fixed sentence [`cky`] parses.
pub const SENTENCE: &str = "the man saw a dog with a telescope in the park with a cat \
                            near the tree in the garden with a hat";

/// The part of speech of a word of [`SENTENCE`].
fn tag(word: &str) -> usize {
    match word {
        "the" | "a" => DET,
        "saw" => V,
        "with" | "in" | "near" => P,
        _ => N,
    }
}

/// The CKY chart: for each span and nonterminal, the number of parse trees (wrapping).
struct Chart {
    words: usize,
    cells: Vec<AtomicU64>,
}

impl Chart {
    fn index(&self, start: usize, end: usize, symbol: usize) -> usize {
        (start * (self.words + 1) + end) * SYMBOLS + symbol
    }
    fn get(&self, start: usize, end: usize, symbol: usize) -> u64 {
        self.cells[self.index(start, end, symbol)].load(Ordering::Relaxed)
    }
    fn set(&self, start: usize, end: usize, symbol: usize, value: u64) {
        self.cells[self.index(start, end, symbol)].store(value, Ordering::Relaxed);
    }
}

/// The number of parse trees of [`SENTENCE`] rooted at `S`. The chart is filled span length by
/// span length; the cells of one length are computed by recursive halving of their start
/// positions, each half a recursive call, each single cell a leaf.
pub fn cky<S2: Strategy>(strategy: &S2) -> u64 {
    let words: Vec<usize> = SENTENCE.split(' ').map(tag).collect();
    let n = words.len();
    let chart = Chart {
        words: n,
        cells: (0..(n + 1) * (n + 1) * SYMBOLS).map(|_| AtomicU64::new(0)).collect(),
    };
    for (i, &symbol) in words.iter().enumerate() {
        chart.set(i, i + 1, symbol, 1);
    }
    for length in 2..=n {
        cells(strategy, &chart, length, 0, n - length + 1);
    }
    chart.get(0, n, S)
}

/// Fills the cells of span `length` starting at `first..last`.
fn cells<S2: Strategy>(strategy: &S2, chart: &Chart, length: usize, first: usize, last: usize) {
    if last - first == 1 {
        strategy.leaf();
        fill(chart, first, first + length);
        return;
    }
    let middle = first + (last - first) / 2;
    let child = *strategy;
    strategy.join(
        || cells(strategy, chart, length, middle, last),
        move || cells(&child, chart, length, first, middle),
    );
}

/// Computes one cell from the shorter spans.
fn fill(chart: &Chart, start: usize, end: usize) {
    let mut counts = [0u64; SYMBOLS];
    for split in start + 1..end {
        for &(a, b, c) in &RULES {
            let left = chart.get(start, split, b);
            if left != 0 {
                let right = chart.get(split, end, c);
                counts[a] = counts[a].wrapping_add(left.wrapping_mul(right));
            }
        }
    }
    for (symbol, &count) in counts.iter().enumerate() {
        chart.set(start, end, symbol, count);
    }
}
