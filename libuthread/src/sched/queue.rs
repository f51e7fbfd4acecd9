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
pub(crate) struct Fifo<N: Linked> {
    head: *mut N,
    tail: *mut N,
    len: usize,
}

// SAFETY: the list only holds pointers; whoever owns it (behind a lock) decides who may follow
// them. Nodes are handed between threads by design (that is what a ready queue does).
unsafe impl<N: Linked> Send for Fifo<N> {}

impl<N: Linked> Fifo<N> {
    /// An empty list.
    pub(crate) const fn new() -> Self {
        Fifo { head: ptr::null_mut(), tail: ptr::null_mut(), len: 0 }
    }

    /// Number of nodes.
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether the list is empty.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
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
            if self.tail.is_null() {
                self.head = node;
            } else {
                *N::next_link(self.tail) = node;
            }
        }
        self.tail = node;
        self.len += 1;
    }

    /// Removes and returns the first node, or null.
    pub(crate) fn pop_front(&mut self) -> *mut N {
        let node = self.head;
        if !node.is_null() {
            // SAFETY: nodes in the list are live (push_back's contract).
            self.head = unsafe { *N::next_link(node) };
            if self.head.is_null() {
                self.tail = ptr::null_mut();
            }
            self.len -= 1;
        }
        node
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
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![4 => any::<u32>().prop_map(Op::Push), 3 => Just(Op::Pop), 1 => Just(Op::TakeAndRefill)]
    }

    proptest! {
        /// The list behaves like a `VecDeque` used as a queue.
        #[test]
        fn behaves_like_a_queue(ops in proptest::collection::vec(op(), 0..200)) {
            let mut nodes: Vec<Box<Node>> = Vec::new();
            let mut list: Fifo<Node> = Fifo::new();
            let mut model: VecDeque<u32> = VecDeque::new();
            for op in ops {
                match op {
                    Op::Push(v) => {
                        nodes.push(Box::new(Node { value: v, next: core::ptr::null_mut() }));
                        let node: *mut Node = &mut **nodes.last_mut().unwrap();
                        // SAFETY: boxed nodes stay live and unmoved for the whole test.
                        unsafe { list.push_back(node) };
                        model.push_back(v);
                    }
                    Op::Pop => {
                        let node = list.pop_front();
                        // SAFETY: popped nodes are live boxes of `nodes`.
                        let got = (!node.is_null()).then(|| unsafe { (*node).value });
                        prop_assert_eq!(got, model.pop_front());
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
