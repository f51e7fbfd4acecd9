//! Intrusive FIFO lists: the per-vCPU ready queues (threads linked through their ThMBs) and the
//! wait lists of the sync primitives (nodes on the waiting threads' own stacks). Linking costs
//! no allocation, which matters because the scheduler edits these lists inside its critical
//! sections. The lists are not synchronised themselves; their owner holds a `SpinLock`
//! around them.

use core::ptr;

/// A node type that carries its own "next" link.
///
/// # Safety
/// `next_link` must return a pointer to a field of `*this` that the list may read and write
/// while the node is in a list, and nothing else may touch that field meanwhile.
pub(crate) unsafe trait Linked {
    /// Where `this` keeps its link.
    ///
    /// # Safety
    /// `this` points to a live node.
    unsafe fn next_link(this: *mut Self) -> *mut *mut Self;
}

/// A FIFO list of nodes linked through [`Linked::next_link`].
///
/// It keeps no count: every user only asks whether it is empty (a wait list's hand-off, a run
/// queue's published "has work" word), and a count would cost an add on every push and a
/// subtract on every pop of every mutex and channel hand-off.
pub(crate) struct Fifo<N: Linked> {
    head: *mut N,
    /// The last node; meaningful only while `head` is not null (a pop that empties the list
    /// leaves it stale rather than spend a store on it: every hand-off pops).
    tail: *mut N,
}

// SAFETY: the list only holds pointers; whoever owns it (behind a lock) decides who may follow
// them. Nodes are handed between threads by design (that is what a ready queue does).
unsafe impl<N: Linked> Send for Fifo<N> {}

impl<N: Linked> Fifo<N> {
    /// An empty list.
    pub(crate) const fn new() -> Self {
        Fifo { head: ptr::null_mut(), tail: ptr::null_mut() }
    }

    /// Number of nodes (a walk: for tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        let mut n = 0;
        let mut cur = self.head;
        while !cur.is_null() {
            n += 1;
            // SAFETY: nodes in the list are live (push_back's contract).
            cur = unsafe { *N::next_link(cur) };
        }
        n
    }

    /// Whether the list is empty (the head, which a `pop_front` just wrote: no second load).
    pub(crate) fn is_empty(&self) -> bool {
        self.head.is_null()
    }

    /// The first node, without removing it.
    pub(crate) fn front(&self) -> *mut N {
        self.head
    }

    /// Appends `node`.
    ///
    /// # Safety
    /// `node` is live, in no list, and stays live (and unmoved) until it is popped.
    pub(crate) unsafe fn push_back(&mut self, node: *mut N) {
        // SAFETY: the caller hands us a live node that no other list links.
        unsafe {
            *N::next_link(node) = ptr::null_mut();
            if self.head.is_null() {
                self.head = node;
            } else {
                *N::next_link(self.tail) = node;
            }
        }
        self.tail = node;
    }

    /// [`Fifo::push_back`] into a list the caller knows is empty (it is not looked at: a
    /// primitive whose state word says so saves the test).
    ///
    /// # Safety
    /// As for `push_back`, and the list is empty.
    #[inline(always)]
    pub(crate) unsafe fn push_into_empty(&mut self, node: *mut N) {
        debug_assert!(self.head.is_null());
        // SAFETY: the caller hands us a live node that no other list links.
        unsafe { *N::next_link(node) = ptr::null_mut() };
        self.head = node;
        self.tail = node;
    }

    /// [`Fifo::pop_front`] from a list the caller knows is not empty (the head is not tested:
    /// a primitive whose state word says there are waiters saves the test).
    ///
    /// # Safety
    /// The list is not empty.
    #[inline(always)]
    pub(crate) unsafe fn pop_front_nonempty(&mut self) -> *mut N {
        let node = self.head;
        debug_assert!(!node.is_null());
        // SAFETY: nodes in the list are live (push_back's contract); per the contract there is
        // one.
        self.head = unsafe { *N::next_link(node) };
        node
    }

    /// Removes and returns the first node, or null.
    pub(crate) fn pop_front(&mut self) -> *mut N {
        let node = self.head;
        if !node.is_null() {
            // SAFETY: nodes in the list are live (push_back's contract).
            self.head = unsafe { *N::next_link(node) };
        }
        node
    }

    /// Unlinks `node` if it is among the first `limit` nodes (a bounded walk: the caller wants
    /// O(1) and gives up otherwise). Returns whether it was found and removed.
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn remove_near_front(&mut self, node: *mut N, limit: usize) -> bool {
        let mut prev: *mut N = ptr::null_mut();
        let mut cur = self.head;
        let mut seen = 0;
        while !cur.is_null() && seen < limit {
            if cur == node {
                // SAFETY: every node in the list is live (the list's contract); `prev` is the
                // node before `cur` or null when `cur` is the head.
                unsafe {
                    let next = *N::next_link(cur);
                    if prev.is_null() {
                        self.head = next;
                    } else {
                        *N::next_link(prev) = next;
                    }
                    if self.tail == cur {
                        self.tail = prev;
                    }
                    *N::next_link(cur) = ptr::null_mut();
                }
                return true;
            }
            prev = cur;
            // SAFETY: as above.
            cur = unsafe { *N::next_link(cur) };
            seen += 1;
        }
        false
    }

    /// Moves every node out into a new list, leaving this one empty.
    pub(crate) fn take_all(&mut self) -> Fifo<N> {
        core::mem::replace(self, Fifo::new())
    }
}

impl<N: Linked> Iterator for Fifo<N> {
    type Item = *mut N;
    fn next(&mut self) -> Option<*mut N> {
        let node = self.pop_front();
        (!node.is_null()).then_some(node)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;
    use std::vec::Vec;

    struct Node {
        value: u32,
        next: *mut Node,
    }

    // SAFETY: `next` is the link field and only the list touches it.
    unsafe impl Linked for Node {
        unsafe fn next_link(this: *mut Self) -> *mut *mut Self {
            // SAFETY: the caller passes a live node.
            unsafe { &raw mut (*this).next }
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Push(u32),
        Pop,
        TakeAndRefill,
        /// Remove the node at this position (modulo the length) with a walk limit of 4.
        Remove(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => any::<u32>().prop_map(Op::Push),
            3 => Just(Op::Pop),
            1 => Just(Op::TakeAndRefill),
            2 => (0usize..8).prop_map(Op::Remove)
        ]
    }

    proptest! {
        /// The list behaves like a `VecDeque` used as a queue.
        #[test]
        fn behaves_like_a_queue(ops in proptest::collection::vec(op(), 0..200)) {
            let mut nodes: Vec<Box<Node>> = Vec::new();
            let mut list: Fifo<Node> = Fifo::new();
            let mut model: VecDeque<u32> = VecDeque::new();
            let mut order: VecDeque<*mut Node> = VecDeque::new();
            for op in ops {
                match op {
                    Op::Push(v) => {
                        nodes.push(Box::new(Node { value: v, next: core::ptr::null_mut() }));
                        let node: *mut Node = &mut **nodes.last_mut().unwrap();
                        // SAFETY: boxed nodes stay live and unmoved for the whole test.
                        unsafe { list.push_back(node) };
                        model.push_back(v);
                        order.push_back(node);
                    }
                    Op::Pop => {
                        let node = list.pop_front();
                        // SAFETY: popped nodes are live boxes of `nodes`.
                        let got = (!node.is_null()).then(|| unsafe { (*node).value });
                        prop_assert_eq!(got, model.pop_front());
                        order.pop_front();
                    }
                    Op::Remove(i) => {
                        if !order.is_empty() {
                            let at = i % order.len();
                            let removed = list.remove_near_front(order[at], 4);
                            prop_assert_eq!(removed, at < 4);
                            if removed {
                                order.remove(at);
                                model.remove(at);
                            }
                        }
                    }
                    Op::TakeAndRefill => {
                        let taken = list.take_all();
                        prop_assert!(list.is_empty());
                        for node in taken {
                            // SAFETY: as above; each node left the old list before re-linking.
                            unsafe { list.push_back(node) };
                        }
                    }
                }
                prop_assert_eq!(list.len(), model.len());
                // SAFETY: the front is a live node or null.
                let front = (!list.front().is_null()).then(|| unsafe { (*list.front()).value });
                prop_assert_eq!(front, model.front().copied());
            }
        }
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::spin::SpinLock;
    use loom::sync::atomic::{AtomicUsize, Ordering};
    use loom::sync::Arc;

    struct Node {
        next: *mut Node,
    }

    // SAFETY: `next` is the link field and only the list touches it.
    unsafe impl Linked for Node {
        unsafe fn next_link(this: *mut Self) -> *mut *mut Self {
            // SAFETY: the caller passes a live node.
            unsafe { &raw mut (*this).next }
        }
    }

    struct Shared {
        queue: SpinLock<Fifo<Node>>,
        nodes: [*mut Node; 2],
    }
    // SAFETY: the nodes are reached only through the locked queue (and freed after the model).
    unsafe impl Send for Shared {}
    // SAFETY: as above.
    unsafe impl Sync for Shared {}

    /// The lazy-creation claim (`sched::run_inline`): a joiner unlinks its unstarted child
    /// from the ready queue under the queue lock while a vCPU pops from the same queue (to
    /// start it as a thread). Whatever the interleaving, exactly one side gets the child, and
    /// the other thread in the queue is neither lost nor taken twice.
    #[test]
    fn loom_inline_claim_or_start_exactly_once() {
        loom::model(|| {
            let nodes = [Box::into_raw(Box::new(Node { next: ptr::null_mut() })), Box::into_raw(Box::new(Node { next: ptr::null_mut() }))];
            let shared = Arc::new(Shared { queue: SpinLock::new(Fifo::new()), nodes });
            {
                let mut q = shared.queue.lock();
                // SAFETY: fresh boxed nodes.
                unsafe {
                    q.push_back(nodes[0]); // another ready thread
                    q.push_back(nodes[1]); // the child, spawned last
                }
            }
            let got = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
            let vcpu = {
                let (shared, got) = (shared.clone(), got.clone());
                loom::thread::spawn(move || {
                    for _ in 0..2 {
                        let n = shared.queue.lock().pop_front();
                        if let Some(i) = shared.nodes.iter().position(|&m| m == n) {
                            got[i].fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            };
            if shared.queue.lock().remove_near_front(nodes[1], 8) {
                got[1].fetch_add(1, Ordering::Relaxed);
            }
            vcpu.join().unwrap();
            // Whatever is left is still in the queue, once.
            while let Some(i) = {
                let n = shared.queue.lock().pop_front();
                shared.nodes.iter().position(|&m| m == n)
            } {
                got[i].fetch_add(1, Ordering::Relaxed);
            }
            assert_eq!(got[0].load(Ordering::Relaxed), 1);
            assert_eq!(got[1].load(Ordering::Relaxed), 1);
            // SAFETY: no list holds them any more.
            unsafe {
                drop(Box::from_raw(nodes[0]));
                drop(Box::from_raw(nodes[1]));
            }
        });
    }
}
