//! S3's holder table (the paper's T_holder): one entry per shared lock or barrier word that has
//! threads waiting in the kernel, with its queue of waiters in arrival order. Bounded twice:
//! [`CAPACITY`] entries for the machine and [`PER_PROGRAM`] charged to any one program (the one
//! whose waiter made the entry), so no program can take the whole table from the others. A
//! full table is `Full`: the library then waits in software (S3's fallback). Pure logic,
//! host-tested; `s3/mod.rs` holds it under one lock.

use alloc::collections::VecDeque;
use alloc::vec::Vec;

/// Entries the machine's table holds.
pub const CAPACITY: usize = 64;
/// Entries one program may have made at once.
pub const PER_PROGRAM: usize = 48;

/// What waits on a word: it decides which calls may queue there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A lock word (`s3_lock`): a release hands the lock to the first waiter.
    Lock,
    /// A futex-style word (`s3_wait`).
    Wait,
    /// A barrier word (`s3_barrier`) for this many participants.
    Barrier(usize),
}

/// Why no entry could be had.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The table holds [`CAPACITY`] entries.
    TableFull,
    /// The program made [`PER_PROGRAM`] of them.
    ProgramFull,
    /// The word is queued on as another kind (a lock word used as a barrier, two counts).
    OtherKind,
    /// No kernel memory for the entry or the waiter.
    NoMemory,
}

/// One word with waiters.
#[derive(Debug)]
pub struct Entry<W> {
    /// The word's user address (one address space: it names the word for every program).
    pub word: u64,
    /// What kind of word it is.
    pub kind: Kind,
    /// The program charged for the entry.
    pub charged_to: u64,
    /// For a lock: the program holding it, when the kernel knows (it gave it, or saw the
    /// holder's tag when the first waiter came).
    pub holder: Option<u64>,
    /// Waiters, first come first.
    pub waiters: VecDeque<W>,
}

/// The table.
#[derive(Debug)]
pub struct Table<W> {
    entries: Vec<Entry<W>>,
    /// Emptied queues of entries that went, kept (with their capacity) for the next entries:
    /// a barrier's queue is made again every round, and growing it from nothing cost several
    /// allocations per round.
    spare_queues: Vec<VecDeque<W>>,
    /// Spare waiters the caller gave back ([`Table::put_spare`]), at most [`CAPACITY`].
    spare: Vec<W>,
}

/// The largest queue capacity kept in [`Table`]'s spares (a bigger one is freed).
const SPARE_QUEUE_MAX: usize = 1024;

impl<W> Default for Table<W> {
    fn default() -> Self {
        Self::new()
    }
}

impl<W> Table<W> {
    /// An empty table.
    pub const fn new() -> Self {
        Table { entries: Vec::new(), spare_queues: Vec::new(), spare: Vec::new() }
    }

    /// Entries in use.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no word has waiters.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entries charged to `program`.
    pub fn charged(&self, program: u64) -> usize {
        self.entries.iter().filter(|e| e.charged_to == program).count()
    }

    /// The entry of `word`, if it has waiters.
    pub fn find(&mut self, word: u64) -> Option<&mut Entry<W>> {
        self.entries.iter_mut().find(|e| e.word == word)
    }

    /// Queues `waiter` on `word` (of `kind`), making the entry if needed (charged to
    /// `program`). The waiter is only queued if nothing is refused.
    pub fn enqueue(&mut self, word: u64, kind: Kind, program: u64, waiter: W) -> Result<&mut Entry<W>, Refusal> {
        let at = match self.entries.iter().position(|e| e.word == word) {
            Some(i) if self.entries[i].kind != kind => return Err(Refusal::OtherKind),
            Some(i) => i,
            None => {
                if self.entries.len() >= CAPACITY {
                    return Err(Refusal::TableFull);
                }
                if self.charged(program) >= PER_PROGRAM {
                    return Err(Refusal::ProgramFull);
                }
                self.entries.try_reserve(CAPACITY - self.entries.len()).map_err(|_| Refusal::NoMemory)?;
                let waiters = self.spare_queues.pop().unwrap_or_default();
                self.entries.push(Entry { word, kind, charged_to: program, holder: None, waiters });
                self.entries.len() - 1
            }
        };
        let entry = &mut self.entries[at];
        if entry.waiters.try_reserve(1).is_err() {
            if entry.waiters.is_empty() {
                self.drop_entry(at);
            }
            return Err(Refusal::NoMemory);
        }
        entry.waiters.push_back(waiter);
        Ok(&mut self.entries[at])
    }

    /// Takes up to `n` waiters of `word` off its queue, first come first; the entry goes when
    /// its queue is empty. Also returns whether waiters remain.
    ///
    /// Taking them all hands over the entry's queue itself (no allocation); give it back
    /// emptied with [`Table::put_queue`] so the next entry reuses it.
    pub fn take(&mut self, word: u64, n: usize) -> (VecDeque<W>, bool) {
        let Some(at) = self.entries.iter().position(|e| e.word == word) else { return (VecDeque::new(), false) };
        let entry = &mut self.entries[at];
        if n >= entry.waiters.len() {
            let taken = core::mem::take(&mut entry.waiters);
            self.entries.swap_remove(at);
            return (taken, false);
        }
        let taken: VecDeque<W> = entry.waiters.drain(..n).collect();
        (taken, true)
    }

    /// Takes the first waiter of `word` (a lock's hand-over), and whether others remain.
    pub fn take_first(&mut self, word: u64) -> Option<(W, bool)> {
        let at = self.entries.iter().position(|e| e.word == word)?;
        let first = self.entries[at].waiters.pop_front()?;
        let more = !self.entries[at].waiters.is_empty();
        if !more {
            self.drop_entry(at);
        }
        Some((first, more))
    }

    /// Gives back a queue [`Table::take`] handed over, for reuse (its waiters are dropped).
    pub fn put_queue(&mut self, mut queue: VecDeque<W>) {
        queue.clear();
        if queue.capacity() != 0 && queue.capacity() <= SPARE_QUEUE_MAX && self.spare_queues.len() < CAPACITY && self.spare_queues.try_reserve(1).is_ok() {
            self.spare_queues.push(queue);
        }
    }

    /// Keeps a waiter the caller is done with, for [`Table::take_spare`] (at most
    /// [`CAPACITY`]; more are dropped).
    pub fn put_spare(&mut self, waiter: W) {
        if self.spare.len() < CAPACITY && self.spare.try_reserve(1).is_ok() {
            self.spare.push(waiter);
        }
    }

    /// A waiter given back by [`Table::put_spare`], if any.
    pub fn take_spare(&mut self) -> Option<W> {
        self.spare.pop()
    }

    /// Removes the (empty) entry at `at`, keeping its queue.
    fn drop_entry(&mut self, at: usize) {
        let entry = self.entries.swap_remove(at);
        self.put_queue(entry.waiters);
    }

    /// Removes the waiters `is_it` picks from `word`'s queue (a waiter that gives up); the
    /// entry goes when its queue is empty. Returns how many it removed.
    pub fn remove(&mut self, word: u64, is_it: impl Fn(&W) -> bool) -> usize {
        let Some(at) = self.entries.iter().position(|e| e.word == word) else { return 0 };
        let entry = &mut self.entries[at];
        let before = entry.waiters.len();
        entry.waiters.retain(|w| !is_it(w));
        let removed = before - entry.waiters.len();
        if entry.waiters.is_empty() {
            self.drop_entry(at);
        }
        removed
    }

    /// Words whose entry `pick` selects (for the end of a program).
    pub fn words(&self, pick: impl Fn(&Entry<W>) -> bool) -> Vec<u64> {
        self.entries.iter().filter(|e| pick(e)).map(|e| e.word).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn waiters_leave_in_arrival_order_and_the_entry_goes_with_the_last() {
        let mut t = Table::new();
        for w in 0..3 {
            t.enqueue(8, Kind::Lock, 1, w).unwrap();
        }
        assert_eq!(t.len(), 1);
        assert_eq!(t.take(8, 1), (VecDeque::from([0]), true));
        assert_eq!(t.take(8, usize::MAX), (VecDeque::from([1, 2]), false));
        assert!(t.is_empty());
        assert_eq!(t.take(8, 1), (VecDeque::new(), false));
    }

    #[test]
    fn the_first_waiter_alone_and_queues_reused() {
        let mut t = Table::new();
        for w in 0..3 {
            t.enqueue(8, Kind::Lock, 1, w).unwrap();
        }
        assert_eq!(t.take_first(8), Some((0, true)));
        assert_eq!(t.take_first(8), Some((1, true)));
        assert_eq!(t.take_first(8), Some((2, false)));
        assert!(t.is_empty());
        assert_eq!(t.take_first(8), None);
        // The entry's queue was kept: the next entry starts with its capacity.
        t.enqueue(16, Kind::Wait, 1, 7).unwrap();
        assert!(t.find(16).unwrap().waiters.capacity() >= 3);
        let (q, more) = t.take(16, usize::MAX);
        assert_eq!((q.clone(), more), (VecDeque::from([7]), false));
        t.put_queue(q);
        assert_eq!(t.spare_queues.len(), 1);
        // Spare waiters are bounded.
        for w in 0..CAPACITY as u64 + 5 {
            t.put_spare(w);
        }
        assert_eq!(t.spare.len(), CAPACITY);
        assert_eq!(t.take_spare(), Some(CAPACITY as u64 - 1));
    }

    #[test]
    fn a_word_has_one_kind() {
        let mut t = Table::new();
        t.enqueue(8, Kind::Barrier(4), 1, 0).unwrap();
        assert_eq!(t.enqueue(8, Kind::Barrier(5), 1, 1).err(), Some(Refusal::OtherKind));
        assert_eq!(t.enqueue(8, Kind::Lock, 1, 1).err(), Some(Refusal::OtherKind));
        assert_eq!(t.find(8).unwrap().waiters.len(), 1);
    }

    #[test]
    fn a_program_gets_its_share_and_the_table_its_capacity() {
        let mut t = Table::new();
        for i in 0..PER_PROGRAM as u64 {
            t.enqueue(i * 8, Kind::Lock, 1, 0).unwrap();
        }
        assert_eq!(t.enqueue(4096, Kind::Lock, 1, 0).err(), Some(Refusal::ProgramFull));
        // A word that has an entry still takes more waiters.
        assert!(t.enqueue(0, Kind::Lock, 1, 1).is_ok());
        for i in PER_PROGRAM..CAPACITY {
            t.enqueue(i as u64 * 8, Kind::Lock, 2, 0).unwrap();
        }
        assert_eq!(t.enqueue(8192, Kind::Lock, 3, 0).err(), Some(Refusal::TableFull));
        // A freed entry is free for anyone.
        t.take(0, usize::MAX);
        assert!(t.enqueue(8192, Kind::Lock, 3, 0).is_ok());
    }

    proptest! {
        /// Whatever the order of queueing, taking and giving up: the table never holds more
        /// than its capacity, a program never more than its share, no entry is empty, and
        /// every waiter queued is taken or removed exactly once.
        #[test]
        fn bounds_hold_and_no_waiter_is_lost(ops in proptest::collection::vec((0u8..4, 0u64..80, 1u64..4), 1..400)) {
            let mut t: Table<u64> = Table::new();
            let mut next = 0u64;
            let mut queued = 0usize;
            let mut gone = 0usize;
            for (op, word, program) in ops {
                match op {
                    0 => if t.enqueue(word, Kind::Wait, program, next).is_ok() { queued += 1; next += 1 },
                    1 => gone += t.take(word, 2).0.len(),
                    3 => gone += usize::from(t.take_first(word).is_some()),
                    _ => gone += t.remove(word, |w| w % 2 == 0),
                }
                prop_assert!(t.len() <= CAPACITY);
                prop_assert!(t.spare_queues.len() <= CAPACITY);
                for p in 1..4 {
                    prop_assert!(t.charged(p) <= PER_PROGRAM);
                }
                prop_assert!(t.entries.iter().all(|e| !e.waiters.is_empty()));
            }
            let left: usize = t.entries.iter().map(|e| e.waiters.len()).sum();
            prop_assert_eq!(queued, gone + left);
        }
    }
}
