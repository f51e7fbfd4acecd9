//! Timed waits of user threads whose vCPU went back to the library (`sleep` with LTN ≠ 0): a
//! deadline-ordered queue with no allocation on its hot path and a lock-free "anything due?"
//! check for the timer tick.
//!
//! [`Queue`] is pure logic (host-tested against a model); the kernel keeps one behind a spin
//! lock with the earliest deadline published in an atomic, so a tick with nothing due costs a
//! clock read and a compare instead of the lock.

use alloc::vec::Vec;

/// Most timed waits one program may have pending at once (`sleep` then answers `EAGAIN`):
/// each costs the kernel a queue entry, and a program must not grow the kernel without bound.
pub const MAX_PER_PROGRAM: usize = 1 << 16;

/// One pending wait: the item with its deadline and arrival number (ties end in arrival order).
struct Entry<T> {
    key: (u64, u64),
    item: T,
}

/// A min-queue of items by deadline, ties in arrival order.
///
/// A binary min-heap by `(deadline, arrival)` in a vector (the children of `i` at `2i + 1` and
/// `2i + 2`), written out rather than `BinaryHeap<Reverse<…>>`: a `sleep` pushes with one
/// capacity check and a sift-up that usually ends at once (the kernel's `sleep` hot path).
/// Keys are unique (the arrival number), so the order is total and deterministic.
pub struct Queue<T> {
    heap: Vec<Entry<T>>,
    arrivals: u64,
}

/// The queue could not grow (kernel heap exhausted): the item comes back.
#[derive(Debug)]
pub struct Full<T>(pub T);

impl<T> Queue<T> {
    /// An empty queue (allocates nothing).
    pub const fn new() -> Self {
        Queue { heap: Vec::new(), arrivals: 0 }
    }

    /// Adds `item`, due at `deadline`. Fails, giving the item back, only if the queue has to
    /// grow and the heap has no memory.
    #[inline]
    pub fn push(&mut self, deadline: u64, item: T) -> Result<(), Full<T>> {
        if self.heap.len() == self.heap.capacity() && self.heap.try_reserve(1).is_err() {
            return Err(Full(item));
        }
        let key = (deadline, self.arrivals);
        self.arrivals += 1;
        let len = self.heap.len();
        // SAFETY: the check above left room for one more entry (`len < capacity`): the write
        // goes to the spare slot just past the initialised ones, which `set_len` then counts.
        // (`Vec::push` would test the capacity a second time on this hot path.)
        unsafe {
            self.heap.as_mut_ptr().add(len).write(Entry { key, item });
            self.heap.set_len(len + 1);
        }
        self.sift_up(len);
        Ok(())
    }

    /// Moves the entry at `i` up to its place.
    #[inline]
    fn sift_up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if self.heap[parent].key <= self.heap[i].key {
                break;
            }
            self.heap.swap(parent, i);
            i = parent;
        }
    }

    /// Moves the entry at `i` down to its place.
    fn sift_down(&mut self, mut i: usize) {
        let len = self.heap.len();
        loop {
            let left = 2 * i + 1;
            if left >= len {
                break;
            }
            let right = left + 1;
            let child = if right < len && self.heap[right].key < self.heap[left].key { right } else { left };
            if self.heap[i].key <= self.heap[child].key {
                break;
            }
            self.heap.swap(i, child);
            i = child;
        }
    }

    /// Removes and returns the earliest item if it is due at `now`.
    pub fn pop_due(&mut self, now: u64) -> Option<T> {
        if self.heap.first()?.key.0 > now {
            return None;
        }
        let last = self.heap.pop()?;
        if self.heap.is_empty() {
            return Some(last.item);
        }
        let top = core::mem::replace(&mut self.heap[0], last);
        self.sift_down(0);
        Some(top.item)
    }

    /// The earliest deadline, or `u64::MAX` when empty.
    #[inline]
    pub fn earliest(&self) -> u64 {
        self.heap.first().map_or(u64::MAX, |e| e.key.0)
    }

    /// Removes every item `keep` rejects (a program that ended), keeping the order of the rest.
    pub fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        self.heap.retain(|e| keep(&e.item));
        for i in (0..self.heap.len() / 2).rev() {
            self.sift_down(i);
        }
    }

    /// Whether some pending item satisfies `f` (a signal asking whether a thread sleeps).
    pub fn any(&self, mut f: impl FnMut(&T) -> bool) -> bool {
        self.heap.iter().any(|e| f(&e.item))
    }

    /// Pending waits.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

impl<T> Default for Queue<T> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn equal_deadlines_end_in_arrival_order() {
        let mut q = Queue::new();
        for i in 0..10u32 {
            q.push(5, i).unwrap();
        }
        assert_eq!(q.pop_due(4), None);
        let order: Vec<u32> = core::iter::from_fn(|| q.pop_due(5)).collect();
        assert_eq!(order, (0..10).collect::<Vec<_>>());
        assert_eq!(q.earliest(), u64::MAX);
    }

    #[test]
    fn any_sees_exactly_the_pending_items() {
        let mut q = Queue::new();
        assert!(!q.any(|_: &u32| true));
        q.push(3, 7u32).unwrap();
        q.push(9, 8u32).unwrap();
        assert!(q.any(|&x| x == 8) && !q.any(|&x| x == 9));
        assert_eq!(q.pop_due(3), Some(7));
        assert!(!q.any(|&x| x == 7));
    }

    proptest! {
        /// Against a model: a list kept sorted by (deadline, arrival).
        #[test]
        fn matches_a_sorted_list(ops in proptest::collection::vec((0u8..7, 0u64..50), 0..300)) {
            let mut q = Queue::new();
            let mut model: Vec<((u64, u64), u64)> = Vec::new();
            let mut arrivals = 0u64;
            let mut now = 0u64;
            for (op, x) in ops {
                if op == 0 {
                    // A program ends: its items (here: those with this remainder) leave.
                    let m = x % 3 + 2;
                    q.retain(|&item| item % m != 0);
                    model.retain(|&(_, item)| item % m != 0);
                } else if op < 4 {
                    q.push(now + x, arrivals).unwrap();
                    model.push(((now + x, arrivals), arrivals));
                    model.sort();
                    arrivals += 1;
                } else {
                    now += x / 5;
                    loop {
                        let want = match model.first() {
                            Some(&((d, _), item)) if d <= now => Some(item),
                            _ => None,
                        };
                        prop_assert_eq!(q.pop_due(now), want);
                        if want.is_none() {
                            break;
                        }
                        model.remove(0);
                    }
                }
                prop_assert_eq!(q.earliest(), model.first().map_or(u64::MAX, |&((d, _), _)| d));
                prop_assert_eq!(q.len(), model.len());
            }
        }
    }
}
