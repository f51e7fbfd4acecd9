//! The StackThreads applications (seed 004, Taura & Yonezawa 2000): `fib`, `nqueens` and a CKY
//! parser, each written once over a [`Strategy`] that says what a recursive call is:
//! - [`Sequential`]: a plain call (the baseline; monomorphised, it is ordinary recursion);
//! - [`ForkEverywhere`] (FK): every recursive call is a `libuthread::spawn`, joined by its
//!   caller — no cutoff, as in the paper's "fork everywhere" runs;
//! - [`SuspendEverywhere`] (SW): FK, and every leaf (a call that makes no further call) also
//!   waits once on a channel that another thread (a server) fulfils, so every leaf thread
//!   really suspends and is resumed.
//!
//! No `std`: this file is shared by the userland `stackthreads` program (`#[path]`) and the
//! hosted criterion bench `libuthread/benches/stackthreads.rs`; the crate that includes it
//! must say `extern crate alloc`.

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

use libuthread::mpsc;

/// What a recursive call is: run it now, or in a thread of its own.
pub trait Strategy: Clone + Send + 'static {
    /// Starts `f` (as a call or as a thread); [`Task::join`] gives its result.
    fn spawn<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> Task<T>;
    /// Called once by every leaf call.
    fn leaf(&self);
}

/// A started recursive call.
pub enum Task<T> {
    /// It ran as a call: here is its result.
    Done(T),
    /// It runs in a thread.
    Forked(libuthread::JoinHandle<T>),
}

impl<T: 'static> Task<T> {
    /// Its result, waiting for the thread if there is one.
    #[inline]
    pub fn join(self) -> T {
        match self {
            Task::Done(value) => value,
            Task::Forked(handle) => match handle.join() {
                Ok(value) => value,
                Err(_) => panic!("stackthreads: a forked call panicked"),
            },
        }
    }
}

/// Every recursive call is a call.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sequential;

impl Strategy for Sequential {
    #[inline(always)]
    fn spawn<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> Task<T> {
        Task::Done(f())
    }
    #[inline(always)]
    fn leaf(&self) {}
}

/// Stack of a forked call: the applications recurse a few dozen frames at most, and FK keeps
/// thousands of threads alive at once (libuthread's smallest stack).
pub const FORK_STACK: usize = 16 * 1024;

/// A recursive call as a thread: `libuthread::spawn` with a [`FORK_STACK`] stack.
#[inline]
fn forked<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> libuthread::JoinHandle<T> {
    libuthread::Builder::new().stack_size(FORK_STACK).spawn(f)
}

/// Every recursive call is a thread (FK).
#[derive(Clone, Copy, Debug, Default)]
pub struct ForkEverywhere;

impl Strategy for ForkEverywhere {
    #[inline]
    fn spawn<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> Task<T> {
        Task::Forked(forked(f))
    }
    #[inline]
    fn leaf(&self) {}
}

/// Every recursive call is a thread and every leaf suspends once (SW): it sends a reply
/// channel to the server thread and blocks until the server answers on it.
#[derive(Clone)]
pub struct SuspendEverywhere {
    server: mpsc::Sender<mpsc::Sender<()>>,
}

impl SuspendEverywhere {
    /// Runs `body` with an SW strategy whose server thread lives as long as `body` runs.
    pub fn with<R>(body: impl FnOnce(&SuspendEverywhere) -> R) -> R {
        let (server, requests) = mpsc::channel::<mpsc::Sender<()>>();
        let thread = libuthread::spawn(move || {
            for reply in requests.iter() {
                // A leaf that stopped waiting is no error of the server's.
                let _ = reply.send(());
            }
        });
        let strategy = SuspendEverywhere { server };
        let result = body(&strategy);
        drop(strategy);
        // The server ends when the last sender (ours and every clone) is gone.
        let _ = thread.join();
        result
    }
}

impl Strategy for SuspendEverywhere {
    #[inline]
    fn spawn<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> Task<T> {
        Task::Forked(forked(f))
    }
    fn leaf(&self) {
        let (reply, answer) = mpsc::channel();
        if self.server.send(reply).is_ok() {
            let _ = answer.recv();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// fib
// ---------------------------------------------------------------------------------------------

/// `fib(n)` by the doubly recursive definition; the first call of each pair goes through
/// `strategy.spawn`, the second is made by the caller (as a Cilk or StackThreads fib does).
pub fn fib<S: Strategy>(strategy: &S, n: u32) -> u64 {
    if n < 2 {
        strategy.leaf();
        return u64::from(n);
    }
    let child = strategy.clone();
    let first = strategy.spawn(move || fib(&child, n - 1));
    let second = fib(strategy, n - 2);
    first.join() + second
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
    let mut free = board & !(columns | left | right);
    if free == 0 {
        strategy.leaf();
        return 0;
    }
    let mut children: [Option<Task<u64>>; MAX_QUEENS as usize] = core::array::from_fn(|_| None);
    let mut count = 0;
    while free != 0 {
        let bit = free & free.wrapping_neg();
        free &= free - 1;
        let child = strategy.clone();
        children[count] = Some(strategy.spawn(move || {
            place(&child, n, row + 1, columns | bit, ((left | bit) << 1) & board, (right | bit) >> 1)
        }));
        count += 1;
    }
    children.into_iter().flatten().map(Task::join).sum()
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
    let chart = Arc::new(Chart {
        words: n,
        cells: (0..(n + 1) * (n + 1) * SYMBOLS).map(|_| AtomicU64::new(0)).collect(),
    });
    for (i, &symbol) in words.iter().enumerate() {
        chart.set(i, i + 1, symbol, 1);
    }
    for length in 2..=n {
        cells(strategy, &chart, length, 0, n - length + 1);
    }
    chart.get(0, n, S)
}

/// Fills the cells of span `length` starting at `first..last`.
fn cells<S2: Strategy>(strategy: &S2, chart: &Arc<Chart>, length: usize, first: usize, last: usize) {
    if last - first == 1 {
        strategy.leaf();
        fill(chart, first, first + length);
        return;
    }
    let middle = first + (last - first) / 2;
    let (child, child_chart) = (strategy.clone(), chart.clone());
    let left = strategy.spawn(move || cells(&child, &child_chart, length, first, middle));
    cells(strategy, chart, length, middle, last);
    left.join();
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
