//! A per-CPU run queue with thread-view affinity (Cubix): threads whose views are the same share
//! one page table, so running them back to back saves page-table switches and TLB flushes.
//!
//! # Rules
//!
//! With affinity **off** the queue is plain FIFO (round robin in push order) and views are ignored.
//!
//! With affinity **on** the queue is a sequence of *groups*:
//! - an affine thread joins the group of its view, at the back of that group; if its view has no
//!   group yet, a new group goes at the back of the queue;
//! - a non-affine thread forms a singleton group of its own at the back of the queue (affine
//!   threads of the same view never join it);
//! - `pop` takes from the head group while it has threads and has had fewer than `group_bound`
//!   consecutive picks ("turns"); when its turns are used up *and another group waits*, it moves
//!   to the back with its remaining threads in order and the next group starts with fresh turns;
//!   a group that runs alone keeps running;
//! - a group that empties disappears (a later push of its view starts a new group at the back);
//! - a thread pushed to the head group (for example preempted and re-queued) goes to the back of
//!   that group and may run again within the same turns.
//!
//! So a view's threads run back to back, but never more than `group_bound` picks in a row while
//! another group waits.
//!
//! # Starvation bound
//!
//! Let thread X be queued from some moment on, let `N` be the largest number of queued threads
//! (X included) at any moment from then until X is popped, and `B` the group bound. Pushes,
//! removals and steals may happen in between; the policy stays the same. Then X is popped by at
//! most the `W(N, B)`-th pop, with
//!
//! ```text
//! affinity off:  W(N, B) = N
//! affinity on:   W(N, B) = N + B·(q+1)·(N−1) − B²·q·(q+1)/2,   q = ⌊(N−1)/B⌋
//!                        ≤ N + (2N − 2 + B)² / 8
//! ```
//!
//! ([`Policy::wait_bound`] computes it.) With `B = 1` it is `N·(N+1)/2` and it is reached (the
//! test `bound_is_reached_with_bound_one` builds the worst case); for larger `B` it is an upper
//! bound. It grows with `N²` where FIFO grows with `N`: that is the price of keeping groups
//! together, and `B` trades it against fewer view switches.
//!
//! *Proof (affinity on).* Call X's group `G` and `k₀ ≤ N−1` the threads ahead of X in `G` at
//! the start. Threads joining `G` later go behind X, so every pop from `G` before X takes one of
//! the `k₀`: at most `N−1` pops. All other pops come from other groups, in *rounds*: the stretch
//! before `G` first reaches the head, and each stretch after `G` went to the back. New groups
//! always go to the back, behind `G`, and a group that had its stint goes to the back or
//! disappears, so within one round each other group has at most one stint of at most `B` pops.
//! When a round starts, the queue (at most `N` threads) holds X and the `k` threads ahead of it
//! in `G`, and every other group holds at least one thread: at most `N−1−k` groups, at most
//! `B·(N−1−k)` pops. Number the rounds from the last one (`j = 0`) backwards. After round `j`,
//! `G` has `j` stints that ended in a rotation, and a stint ends in a rotation only after `B`
//! pops, all of threads ahead of X; so at the start of round `j`, `k ≥ j·B`, hence round `j` has
//! at most `B·(N−1−j·B)` pops and `j ≤ q`. Summing:
//! `W ≤ (N−1) + 1 + Σ_{j=0..q} B·(N−1−j·B)`, the formula above. With affinity off the threads
//! ahead of X only leave, so X is popped within `N` pops.

use alloc::vec::Vec;
use core::fmt::Debug;

/// Identifies a view (the page table threads run on): threads with equal keys share one table.
pub type ViewKey = u64;

/// The smallest group bound; a [`Policy`] with a smaller `group_bound` behaves as this.
pub const MIN_GROUP_BOUND: u32 = 1;

/// How a run queue orders its threads (switchable at run time, for experiments).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Keep affine threads of one view together (on) or run everything in push order (off).
    pub affinity: bool,
    /// Most consecutive picks one view group may get while other groups wait (at least
    /// [`MIN_GROUP_BOUND`]; smaller values act as it).
    pub group_bound: u32,
}

impl Policy {
    /// The group bound in force: `group_bound`, raised to [`MIN_GROUP_BOUND`].
    pub const fn effective_group_bound(self) -> u32 {
        if self.group_bound < MIN_GROUP_BOUND {
            MIN_GROUP_BOUND
        } else {
            self.group_bound
        }
    }

    /// The starvation bound of the module documentation: a queued thread is popped within this
    /// many pops, where `max_queued` is the most threads queued at once while it waits.
    pub fn wait_bound(self, max_queued: u64) -> u64 {
        if !self.affinity || max_queued == 0 {
            return max_queued;
        }
        let n = u128::from(max_queued);
        let b = u128::from(self.effective_group_bound());
        let q = (n - 1) / b;
        // b·q ≤ n−1 keeps the subtraction non-negative; q·(q+1) is even.
        let bound = n + b * (q + 1) * (n - 1) - b * b * q * (q + 1) / 2;
        u64::try_from(bound).unwrap_or(u64::MAX)
    }
}

/// How the head of an affinity queue changed hands (for the scheduler's counters and tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupStats {
    /// Times a head group used up its turns and went to the back while others waited.
    pub rotations: u64,
    /// Times the head group changed for any reason: rotated, or emptied by a pop, a removal or
    /// a steal. Consecutive pops can return different views only across a handover.
    pub handovers: u64,
}

/// "No entry" in the queue's index links.
const NIL: u32 = u32::MAX;

/// A queued thread (or a free node, linked through `next`).
#[derive(Clone, Copy, Debug)]
struct Node<T> {
    thread: T,
    view: ViewKey,
    affine: bool,
    /// The next thread of its list (its group, or the FIFO), or the next free node.
    next: u32,
}

/// A view group: the affine threads of one view, or one non-affine thread.
#[derive(Clone, Copy, Debug)]
struct Group {
    view: ViewKey,
    /// Whether this is its view's shared group (affine threads) rather than a singleton.
    shared: bool,
    /// Its threads, first to run first (`NIL` when empty).
    first: u32,
    last: u32,
    /// How many threads it holds. A group is in the order exactly when this is non-zero.
    len: u32,
    /// The group behind it in the order, or the next free group.
    next: u32,
}

/// The slot of each view's shared group, sorted by view (a few views: a binary search over a
/// vector, which keeps its buffer; a map would allocate and free nodes as groups come and go).
#[derive(Debug)]
struct SharedGroups(Vec<(ViewKey, u32)>);

impl SharedGroups {
    const fn new() -> Self {
        SharedGroups(Vec::new())
    }

    #[inline(always)]
    fn find(&self, view: ViewKey) -> Result<usize, usize> {
        self.0.binary_search_by_key(&view, |&(v, _)| v)
    }

    #[inline(always)]
    fn get(&self, view: ViewKey) -> Option<u32> {
        self.find(view).ok().map(|at| self.0[at].1)
    }

    fn insert(&mut self, view: ViewKey, group: u32) {
        match self.find(view) {
            Ok(at) => self.0[at].1 = group,
            Err(at) => self.0.insert(at, (view, group)),
        }
    }
}

/// Emptied shared groups kept for their view's next push (see [`RunQueue`]) before they are
/// all given up at once. Small in tests, so the model tests (three views) reach the cap.
#[cfg(not(test))]
const MAX_DORMANT: u32 = 8;
#[cfg(test)]
const MAX_DORMANT: u32 = 1;

/// A per-CPU run queue of threads `T` (handles: copied in and out, compared for removal).
///
/// Threads and groups live in two slabs linked by index, so the hot operations (`push`, `pop`)
/// are a few loads and stores: no map, no ring buffer, no allocation once the slabs have grown
/// to the most threads ever queued. A shared group that empties leaves the order but stays
/// *dormant* in its slot, still found by its view: a later push of that view puts it back at
/// the back of the order, which is exactly where a new group would go, so the rules above are
/// unchanged while a thread that yields back and forth reuses its group's slot and mapping.
/// At most [`MAX_DORMANT`] dormant groups are kept; one more makes the queue forget them all.
pub struct RunQueue<T> {
    policy: Policy,
    /// Queued threads in all.
    len: usize,
    /// Every node, queued or free.
    nodes: Vec<Node<T>>,
    free_nodes: u32,

    // Affinity off: the threads in push order.
    fifo_first: u32,
    fifo_last: u32,

    // Affinity on: `groups` holds every group, in the order, dormant or free; the order is the
    // list `head`..`tail` through `Group::next`; `shared` finds a view's shared group (in the
    // order or dormant); `head_turns` counts the head group's consecutive picks.
    groups: Vec<Group>,
    free_groups: u32,
    head: u32,
    tail: u32,
    /// Groups in the order.
    order_len: usize,
    dormant: u32,
    shared: SharedGroups,
    /// The shared group the last two-view swap in [`requeue_and_pop`](Self::requeue_and_pop)
    /// left dormant (`NIL`: none known): two threads of two views taking turns find their
    /// view's group here at the next swap, without searching `shared`. Only a hint, checked
    /// before use: a slot marked `shared` is always its view's one shared group (freed groups
    /// are unmarked).
    swapped: u32,
    head_turns: u32,
    stats: GroupStats,
}

impl<T: Copy + Eq + Debug> RunQueue<T> {
    /// An empty queue with `policy` (const: per-CPU queues live in statics).
    pub const fn new(policy: Policy) -> Self {
        RunQueue {
            policy,
            len: 0,
            nodes: Vec::new(),
            free_nodes: NIL,
            fifo_first: NIL,
            fifo_last: NIL,
            groups: Vec::new(),
            free_groups: NIL,
            head: NIL,
            tail: NIL,
            order_len: 0,
            dormant: 0,
            shared: SharedGroups::new(),
            swapped: NIL,
            head_turns: 0,
            stats: GroupStats {
                rotations: 0,
                handovers: 0,
            },
        }
    }

    /// The policy in force.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// Changes the policy, keeping every queued thread. Switching affinity off lines the threads
    /// up in the order they would have run; switching it on groups them as if pushed in the
    /// current order. Changing only the bound keeps the groups and the head's used turns.
    pub fn set_policy(&mut self, policy: Policy) {
        if policy.affinity == self.policy.affinity {
            self.policy = policy;
            return;
        }
        let queued = self.take_all();
        self.policy = policy;
        for (thread, view, affine) in queued {
            self.insert(thread, view, affine);
        }
    }

    /// A runnable thread enters (new, woken, or preempted). `affine` is the thread's opt-in flag
    /// for grouping with its view. Pushing a thread that is already queued is a caller bug
    /// (debug builds check it).
    #[inline]
    pub fn push(&mut self, thread: T, view: ViewKey, affine: bool) {
        debug_assert!(!self.contains(thread), "{thread:?} is already queued");
        self.len += 1;
        self.insert(thread, view, affine);
    }

    /// The next thread to run and its view.
    pub fn pop(&mut self) -> Option<(T, ViewKey)> {
        if !self.policy.affinity {
            let at = self.fifo_first;
            if at == NIL {
                return None;
            }
            let node = self.nodes[at as usize];
            self.fifo_first = node.next;
            if node.next == NIL {
                self.fifo_last = NIL;
            }
            self.free_node(at);
            self.len -= 1;
            return Some((node.thread, node.view));
        }
        if self.order_len > 1 && self.head_turns >= self.policy.effective_group_bound() {
            // The head goes to the back with its threads.
            let g = self.head;
            self.head = self.groups[g as usize].next;
            self.groups[g as usize].next = NIL;
            self.groups[self.tail as usize].next = g;
            self.tail = g;
            self.head_turns = 0;
            self.stats.rotations += 1;
            self.stats.handovers += 1;
        }
        let g = self.head;
        if g == NIL {
            return None;
        }
        let group = &mut self.groups[g as usize];
        let at = group.first;
        let node = self.nodes[at as usize];
        group.first = node.next;
        group.len -= 1;
        let (view, emptied) = (group.view, group.len == 0);
        self.free_node(at);
        self.len -= 1;
        self.head_turns = self.head_turns.saturating_add(1);
        if emptied {
            self.unlink_group(g, NIL);
            self.head_changed();
        }
        Some((node.thread, view))
    }

    /// A [`push`](Self::push) then a [`pop`](Self::pop), in one call: the running thread goes
    /// back (a yield or preemption) and the next one comes out, which is `thread` itself when
    /// nothing queued is due before it. Its view group stays in the order when the next thread
    /// is of the same view (a pop before the push would empty it and put it back).
    #[inline]
    pub fn requeue_and_pop(&mut self, thread: T, view: ViewKey, affine: bool) -> (T, ViewKey) {
        debug_assert!(!self.contains(thread), "{thread:?} is already queued");
        // The common case in place: the thread would join the list the next one leaves (the
        // FIFO, or the head group of its view with turns left, so no rotation): its first node
        // takes the thread and moves to the list's back, which is exactly push-then-pop.
        if !self.policy.affinity {
            if self.fifo_first != NIL {
                let (next, view_out, first, last) = self.rotate_list(self.fifo_first, self.fifo_last, thread, view, affine);
                (self.fifo_first, self.fifo_last) = (first, last);
                return (next, view_out);
            }
        } else if affine && self.head != NIL {
            let g = self.head as usize;
            let group = self.groups[g];
            let rotates = self.order_len > 1 && self.head_turns >= self.policy.effective_group_bound();
            if group.shared && group.view == view && !rotates {
                let (next, _, first, last) = self.rotate_list(group.first, group.last, thread, view, affine);
                (self.groups[g].first, self.groups[g].last) = (first, last);
                self.head_turns = self.head_turns.saturating_add(1);
                return (next, view);
            }
            // Two views taking turns: the head group is the only one and holds just the next
            // thread, and the thread's view has a dormant group. Push-then-pop would wake that
            // group behind the head, pop the head's thread (no rotation: turns are left) and
            // leave the head dormant (or free); done in place, the next thread's node takes the
            // thread and becomes the woken group's only node.
            if self.order_len == 1 && group.len == 1 && self.head_turns < self.policy.effective_group_bound() {
                let hint = self.swapped;
                // (An empty group is never the head, which holds one thread here.)
                let hinted = hint != NIL && self.groups.get(hint as usize).is_some_and(|h| h.shared && h.view == view && h.len == 0);
                let mine = if hinted { Some(hint) } else { self.shared.get(view).filter(|&m| m as usize != g) };
                if let Some(mine) = mine {
                    debug_assert_eq!(self.groups[mine as usize].len, 0, "a second group in a one-group order");
                    let at = group.first;
                    let out = self.nodes[at as usize].thread;
                    self.nodes[at as usize] = Node { thread, view, affine, next: NIL };
                    let woken = &mut self.groups[mine as usize];
                    (woken.first, woken.last, woken.len, woken.next) = (at, at, 1, NIL);
                    (self.head, self.tail) = (mine, mine);
                    let head = &mut self.groups[g];
                    (head.first, head.last, head.len) = (NIL, NIL, 0);
                    if head.shared {
                        // Dormant in turn: the count of dormant groups is unchanged.
                        head.next = NIL;
                        self.swapped = g as u32;
                    } else {
                        self.swapped = NIL;
                        head.next = self.free_groups;
                        self.free_groups = g as u32;
                        self.dormant -= 1;
                    }
                    self.head_changed();
                    return (out, group.view);
                }
            }
        }
        self.push(thread, view, affine);
        match self.pop() {
            Some(next) => next,
            // A queue holding a thread always pops one.
            None => unreachable!("a run queue lost the thread pushed into it"),
        }
    }

    /// Takes a queued thread out (it was killed); whether it was queued.
    pub fn remove(&mut self, thread: T) -> bool {
        if !self.policy.affinity {
            let (first, last) = (self.fifo_first, self.fifo_last);
            let Some((first, last)) = self.unlink_node(first, last, thread) else {
                return false;
            };
            (self.fifo_first, self.fifo_last) = (first, last);
            self.len -= 1;
            return true;
        }
        let (mut before, mut g) = (NIL, self.head);
        while g != NIL {
            let group = self.groups[g as usize];
            if let Some((first, last)) = self.unlink_node(group.first, group.last, thread) {
                let group = &mut self.groups[g as usize];
                (group.first, group.last) = (first, last);
                group.len -= 1;
                self.len -= 1;
                if group.len == 0 {
                    let was_head = g == self.head;
                    self.unlink_group(g, before);
                    if was_head {
                        self.head_changed();
                    }
                }
                return true;
            }
            (before, g) = (g, group.next);
        }
        false
    }

    /// Queued threads.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no thread is queued.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// For an idle CPU stealing work: returns `(thread, view, affine)` in run order, to be
    /// pushed on the thief's queue in that order. With affinity on it takes the whole group that
    /// would run last (its view's page table is the least likely to be warm here); if there is
    /// only one group, it takes the back half of it (rounded up), so a queue with one busy
    /// view is shared rather than moved. With affinity off it takes the back half of the queue
    /// (rounded up).
    pub fn steal(&mut self) -> Vec<(T, ViewKey, bool)> {
        if !self.policy.affinity {
            let keep = self.len - self.len.div_ceil(2);
            let (first, last) = (self.fifo_first, self.fifo_last);
            let (kept, stolen) = self.split_list(first, last, keep);
            (self.fifo_first, self.fifo_last) = kept;
            let stolen = self.drain_list(stolen.0, |n| (n.thread, n.view, n.affine));
            self.len -= stolen.len();
            return stolen;
        }
        let g = self.tail;
        if g == NIL {
            return Vec::new();
        }
        let group = self.groups[g as usize];
        let keep = if self.order_len == 1 {
            group.len as usize - (group.len as usize).div_ceil(2)
        } else {
            0
        };
        let (kept, stolen) = self.split_list(group.first, group.last, keep);
        let (view, shared) = (group.view, group.shared);
        let stolen = self.drain_list(stolen.0, |n| (n.thread, view, shared));
        let group = &mut self.groups[g as usize];
        (group.first, group.last) = kept;
        group.len -= stolen.len() as u32;
        self.len -= stolen.len();
        if group.len == 0 {
            let mut before = NIL;
            if self.head != g {
                before = self.head;
                while self.groups[before as usize].next != g {
                    before = self.groups[before as usize].next;
                }
            }
            self.unlink_group(g, before);
            if self.order_len == 0 {
                self.head_changed();
            }
        }
        stolen
    }

    /// Whether `thread` is queued.
    pub fn contains(&self, thread: T) -> bool {
        self.queued().any(|(t, _, _)| t == thread)
    }

    /// How the head group has changed hands so far (affinity on; counts survive policy changes).
    pub fn group_stats(&self) -> GroupStats {
        self.stats
    }

    /// Every queued thread in run order with its view and grouping flag.
    fn queued(&self) -> impl Iterator<Item = (T, ViewKey, bool)> + '_ {
        let affinity = self.policy.affinity;
        let mut g = if affinity { self.head } else { NIL };
        let mut at = if affinity { NIL } else { self.fifo_first };
        // In a group, a node's view and flag are its group's: an affine thread always joins
        // its view's shared group, a non-affine one always a singleton of its own.
        core::iter::from_fn(move || {
            while at == NIL {
                if g == NIL {
                    return None;
                }
                at = self.groups[g as usize].first;
                g = self.groups[g as usize].next;
            }
            let node = &self.nodes[at as usize];
            at = node.next;
            Some((node.thread, node.view, node.affine))
        })
    }

    /// Puts a thread in its place without counting it (`len` is the caller's business).
    #[inline]
    fn insert(&mut self, thread: T, view: ViewKey, affine: bool) {
        let at = self.new_node(Node { thread, view, affine, next: NIL });
        if !self.policy.affinity {
            if self.fifo_last == NIL {
                self.fifo_first = at;
            } else {
                self.nodes[self.fifo_last as usize].next = at;
            }
            self.fifo_last = at;
            return;
        }
        // The back group is the common one (a yield between threads of one view): its view's
        // shared group is unique, so finding it there spares the search.
        let tail = self.tail;
        let found = if !affine {
            None
        } else if tail != NIL && self.groups[tail as usize].shared && self.groups[tail as usize].view == view {
            Some(tail)
        } else {
            self.shared.get(view)
        };
        let g = match found {
            Some(g) => {
                if self.groups[g as usize].len == 0 {
                    self.dormant -= 1;
                }
                g
            }
            None => {
                let g = self.new_group(view, affine);
                if affine {
                    self.shared.insert(view, g);
                }
                g
            }
        };
        let group = &mut self.groups[g as usize];
        if group.len == 0 {
            // New or dormant: it goes to the back of the order.
            group.first = at;
            group.last = at;
            group.len = 1;
            group.next = NIL;
            if self.tail == NIL {
                self.head = g;
            } else {
                self.groups[self.tail as usize].next = g;
            }
            self.tail = g;
            self.order_len += 1;
        } else {
            let last = group.last;
            group.last = at;
            group.len += 1;
            self.nodes[last as usize].next = at;
        }
    }

    /// For [`RunQueue::requeue_and_pop`]: the list `first..last` (not empty) gives up its first
    /// thread, whose node takes `thread` and moves to the back. Returns the thread given up,
    /// its view and the list's new ends.
    #[inline]
    fn rotate_list(&mut self, first: u32, last: u32, thread: T, view: ViewKey, affine: bool) -> (T, ViewKey, u32, u32) {
        let node = &mut self.nodes[first as usize];
        let (out, out_view) = (node.thread, node.view);
        (node.thread, node.view, node.affine) = (thread, view, affine);
        if first == last {
            return (out, out_view, first, last);
        }
        let next = node.next;
        node.next = NIL;
        self.nodes[last as usize].next = first;
        (out, out_view, next, first)
    }

    /// Every queued thread in run order, leaving the queue empty (`len` untouched).
    fn take_all(&mut self) -> Vec<(T, ViewKey, bool)> {
        let queued: Vec<_> = self.queued().collect();
        self.nodes.clear();
        self.free_nodes = NIL;
        self.fifo_first = NIL;
        self.fifo_last = NIL;
        self.groups.clear();
        self.free_groups = NIL;
        self.head = NIL;
        self.tail = NIL;
        self.order_len = 0;
        self.dormant = 0;
        self.shared.0.clear();
        self.swapped = NIL;
        self.head_turns = 0;
        queued
    }

    fn new_node(&mut self, node: Node<T>) -> u32 {
        let at = self.free_nodes;
        if at == NIL {
            self.nodes.push(node);
            return (self.nodes.len() - 1) as u32;
        }
        self.free_nodes = self.nodes[at as usize].next;
        self.nodes[at as usize] = node;
        at
    }

    fn free_node(&mut self, at: u32) {
        self.nodes[at as usize].next = self.free_nodes;
        self.free_nodes = at;
    }

    /// A slot for a new, empty group (not in the order).
    fn new_group(&mut self, view: ViewKey, shared: bool) -> u32 {
        let group = Group { view, shared, first: NIL, last: NIL, len: 0, next: NIL };
        let g = self.free_groups;
        if g == NIL {
            self.groups.push(group);
            return (self.groups.len() - 1) as u32;
        }
        self.free_groups = self.groups[g as usize].next;
        self.groups[g as usize] = group;
        g
    }

    /// Takes the emptied group `g` (behind `before` in the order, or the head when `before` is
    /// `NIL`) out of the order. A shared group stays dormant for its view's next push; a
    /// singleton is freed.
    fn unlink_group(&mut self, g: u32, before: u32) {
        let next = self.groups[g as usize].next;
        if before == NIL {
            self.head = next;
        } else {
            self.groups[before as usize].next = next;
        }
        if self.tail == g {
            self.tail = before;
        }
        self.order_len -= 1;
        self.groups[g as usize].first = NIL;
        self.groups[g as usize].last = NIL;
        if self.groups[g as usize].shared {
            self.groups[g as usize].next = NIL;
            self.dormant += 1;
            if self.dormant > MAX_DORMANT {
                self.forget_dormant();
            }
        } else {
            self.groups[g as usize].next = self.free_groups;
            self.free_groups = g;
        }
    }

    /// Frees every dormant group (their views start new groups at their next push).
    #[cold]
    fn forget_dormant(&mut self) {
        let mut shared = core::mem::take(&mut self.shared.0);
        shared.retain(|&(_, g)| {
            let keep = self.groups[g as usize].len > 0;
            if !keep {
                // Unmarked: no longer its view's shared group (see `swapped`).
                self.groups[g as usize].shared = false;
                self.groups[g as usize].next = self.free_groups;
                self.free_groups = g;
            }
            keep
        });
        self.shared.0 = shared;
        self.swapped = NIL;
        self.dormant = 0;
    }

    /// Unlinks `thread` from the list `first..last`; returns the list's new ends, or `None`
    /// if the thread is not in it.
    fn unlink_node(&mut self, first: u32, last: u32, thread: T) -> Option<(u32, u32)> {
        let (mut before, mut at) = (NIL, first);
        while at != NIL && self.nodes[at as usize].thread != thread {
            (before, at) = (at, self.nodes[at as usize].next);
        }
        if at == NIL {
            return None;
        }
        let next = self.nodes[at as usize].next;
        let first = if before == NIL {
            next
        } else {
            self.nodes[before as usize].next = next;
            first
        };
        let last = if last == at { before } else { last };
        self.free_node(at);
        Some((first, last))
    }

    /// Splits the list `first..last` after `keep` nodes: returns the kept list's ends and the
    /// rest's.
    fn split_list(&mut self, first: u32, last: u32, keep: usize) -> ((u32, u32), (u32, u32)) {
        if keep == 0 {
            return ((NIL, NIL), (first, last));
        }
        let mut at = first;
        for _ in 1..keep {
            at = self.nodes[at as usize].next;
        }
        let rest = self.nodes[at as usize].next;
        self.nodes[at as usize].next = NIL;
        if rest == NIL {
            ((first, at), (NIL, NIL))
        } else {
            ((first, at), (rest, last))
        }
    }

    /// Frees the nodes of the list starting at `first`, returning `f` of each in order.
    fn drain_list<R>(&mut self, first: u32, f: impl Fn(&Node<T>) -> R) -> Vec<R> {
        let mut out = Vec::new();
        let mut at = first;
        while at != NIL {
            let node = self.nodes[at as usize];
            out.push(f(&node));
            self.free_node(at);
            at = node.next;
        }
        out
    }

    /// The head group left without a rotation: the next one starts with fresh turns.
    fn head_changed(&mut self) {
        self.head_turns = 0;
        self.stats.handovers += 1;
    }

    /// Every queued thread in run order (for tests and reports).
    #[cfg(test)]
    fn run_order(&self) -> Vec<(T, ViewKey, bool)> {
        self.queued().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::collections::{BTreeMap, VecDeque};
    use alloc::vec;
    use proptest::prelude::*;
    use std::println;

    const ON: Policy = Policy {
        affinity: true,
        group_bound: 4,
    };
    const OFF: Policy = Policy {
        affinity: false,
        group_bound: 4,
    };

    /// Pops everything, returning the threads in order.
    fn drain(q: &mut RunQueue<u32>) -> Vec<u32> {
        core::iter::from_fn(|| q.pop().map(|(t, _)| t)).collect()
    }

    fn with_bound(group_bound: u32) -> Policy {
        Policy {
            affinity: true,
            group_bound,
        }
    }

    #[test]
    fn new_is_const() {
        static QUEUE: RunQueue<u32> = RunQueue::new(ON);
        assert!(QUEUE.is_empty());
        assert_eq!(QUEUE.policy(), ON);
    }

    #[test]
    fn affinity_off_is_fifo() {
        let mut q = RunQueue::new(OFF);
        for t in 0..8u32 {
            q.push(t, u64::from(t % 3), t % 2 == 0);
        }
        assert_eq!(q.len(), 8);
        assert_eq!(drain(&mut q), (0..8).collect::<Vec<_>>());
        assert!(q.is_empty());
        assert_eq!(q.pop(), None);
    }

    /// Two threads of two views yielding to each other (the in-place two-view shortcut of
    /// `requeue_and_pop`), with the other thread affine or not, and a third view joining for a
    /// while: the same threads, order and statistics as push-then-pop, and the dormant groups
    /// counted alike (they decide when the queue forgets them).
    #[test]
    fn two_views_taking_turns_match_push_then_pop() {
        for other_affine in [true, false] {
            for bound in [1, 2, 8] {
                let policy = Policy { affinity: true, group_bound: bound };
                let (mut fast, mut slow) = (RunQueue::new(policy), RunQueue::new(policy));
                for q in [&mut fast, &mut slow] {
                    // View 10's group goes dormant, as when its thread was popped to run.
                    q.push(1u32, 10, true);
                    assert_eq!(q.pop(), Some((1, 10)));
                    q.push(2, 20, other_affine);
                }
                let mut running = (1u32, 10u64, true);
                for round in 0..60u32 {
                    if round == 20 {
                        fast.push(3, 30, true);
                        slow.push(3, 30, true);
                    }
                    let got = fast.requeue_and_pop(running.0, running.1, running.2);
                    slow.push(running.0, running.1, running.2);
                    assert_eq!(Some(got), slow.pop(), "round {round}");
                    assert_eq!(fast.run_order(), slow.run_order());
                    assert_eq!(fast.group_stats(), slow.group_stats());
                    assert_eq!((fast.dormant, fast.order_len, fast.head_turns), (slow.dormant, slow.order_len, slow.head_turns));
                    running = match got.0 {
                        1 => (1, 10, true),
                        2 => (2, 20, other_affine),
                        _ => (3, 30, true),
                    };
                    if round == 40 && running.0 == 3 {
                        // Thread 3 blocks: the two views are alone again.
                        running = match fast.pop() {
                            Some((t, _)) => {
                                assert_eq!(slow.pop().map(|(t, _)| t), Some(t));
                                if t == 1 { (1, 10, true) } else { (2, 20, other_affine) }
                            }
                            None => unreachable!(),
                        };
                    }
                }
            }
        }
    }

    #[test]
    fn pop_returns_the_view() {
        let mut q = RunQueue::new(ON);
        q.push(1u32, 7, true);
        q.push(2, 9, false);
        assert_eq!(q.pop(), Some((1, 7)));
        assert_eq!(q.pop(), Some((2, 9)));
    }

    #[test]
    fn affine_threads_join_their_view_group() {
        let mut q = RunQueue::new(ON);
        q.push(1u32, 10, true);
        q.push(2, 20, true);
        q.push(3, 10, true);
        q.push(4, 20, true);
        assert_eq!(drain(&mut q), vec![1, 3, 2, 4]);
    }

    #[test]
    fn non_affine_threads_stay_alone() {
        let mut q = RunQueue::new(ON);
        q.push(1u32, 10, true);
        q.push(2, 10, false);
        q.push(3, 10, true);
        q.push(4, 10, false);
        assert_eq!(drain(&mut q), vec![1, 3, 2, 4]);
    }

    #[test]
    fn head_group_rotates_after_its_turns() {
        let mut q = RunQueue::new(with_bound(2));
        for t in 1..=3u32 {
            q.push(t, 10, true);
        }
        q.push(4, 20, true);
        assert_eq!(drain(&mut q), vec![1, 2, 4, 3]);
        assert_eq!(q.group_stats().rotations, 1);
    }

    #[test]
    fn a_group_alone_keeps_running() {
        let mut q = RunQueue::new(with_bound(1));
        for t in 1..=3u32 {
            q.push(t, 10, true);
        }
        assert_eq!(q.pop(), Some((1, 10)));
        assert_eq!(q.pop(), Some((2, 10)));
        // Its turns are long used up: the newcomer is next.
        q.push(4, 20, true);
        assert_eq!(drain(&mut q), vec![4, 3]);
        assert_eq!(q.group_stats().rotations, 1);
    }

    #[test]
    fn requeued_head_thread_runs_within_the_same_turns() {
        let mut q = RunQueue::new(with_bound(3));
        q.push(1u32, 10, true);
        q.push(2, 10, true);
        q.push(3, 20, true);
        assert_eq!(q.pop(), Some((1, 10)));
        q.push(1, 10, true);
        assert_eq!(q.pop(), Some((2, 10)));
        q.push(2, 10, true);
        assert_eq!(q.pop(), Some((1, 10)));
        q.push(1, 10, true);
        // Three turns used: view 20 gets the CPU, then view 10 with its order kept.
        assert_eq!(drain(&mut q), vec![3, 2, 1]);
    }

    #[test]
    fn emptied_group_disappears() {
        let mut q = RunQueue::new(ON);
        q.push(1u32, 10, true);
        q.push(2, 20, true);
        assert_eq!(q.pop(), Some((1, 10)));
        // View 10's group is gone: 1 starts a new group behind 20.
        q.push(1, 10, true);
        q.push(3, 20, true);
        assert_eq!(drain(&mut q), vec![2, 3, 1]);
    }

    #[test]
    fn a_dormant_group_comes_back_at_the_back() {
        let mut q = RunQueue::new(ON);
        q.push(1, 10, true);
        q.push(2, 20, true);
        assert_eq!(q.pop(), Some((1, 10)));
        // View 10's emptied group is kept, but a push of that view still queues behind 20.
        q.push(3, 10, true);
        q.push(4, 30, true);
        q.push(5, 10, true);
        assert_eq!(q.run_order(), vec![(2, 20, true), (3, 10, true), (5, 10, true), (4, 30, true)]);
        assert_eq!(drain(&mut q), vec![2, 3, 5, 4]);
        // Many emptied views: the kept ones are forgotten past the cap, the queue stays right.
        for round in 0..3u32 {
            for v in 0..20u64 {
                q.push(round * 100 + v as u32, v, true);
            }
            assert_eq!(drain(&mut q), (0..20).map(|v| round * 100 + v).collect::<Vec<_>>());
        }
        assert!(q.is_empty());
    }

    #[test]
    fn zero_bound_acts_as_one() {
        let mut q = RunQueue::new(with_bound(0));
        q.push(1u32, 10, true);
        q.push(2, 10, true);
        q.push(3, 20, true);
        assert_eq!(drain(&mut q), vec![1, 3, 2]);
        assert_eq!(with_bound(0).effective_group_bound(), MIN_GROUP_BOUND);
    }

    #[test]
    fn remove_takes_a_thread_out() {
        for policy in [ON, OFF] {
            let mut q = RunQueue::new(policy);
            q.push(1u32, 10, true);
            q.push(2, 20, true);
            q.push(3, 10, true);
            assert!(q.remove(3));
            assert!(!q.remove(3));
            assert!(!q.contains(3));
            assert_eq!(q.len(), 2);
            assert_eq!(drain(&mut q), vec![1, 2]);
        }
    }

    #[test]
    fn removing_the_head_group_gives_the_next_fresh_turns() {
        let mut q = RunQueue::new(with_bound(2));
        q.push(1u32, 10, true);
        q.push(2, 10, true);
        q.push(3, 20, true);
        q.push(4, 20, true);
        q.push(5, 20, true);
        assert_eq!(q.pop(), Some((1, 10)));
        assert!(q.remove(2));
        assert_eq!(drain(&mut q), vec![3, 4, 5]);
    }

    #[test]
    fn steal_takes_the_group_that_would_run_last() {
        let mut q = RunQueue::new(ON);
        q.push(1u32, 10, true);
        q.push(2, 20, true);
        q.push(3, 10, true);
        q.push(4, 20, true);
        q.push(5, 30, false);
        assert_eq!(q.steal(), vec![(5, 30, false)]);
        assert_eq!(q.steal(), vec![(2, 20, true), (4, 20, true)]);
        assert_eq!(q.len(), 2);
        assert_eq!(drain(&mut q), vec![1, 3]);
    }

    #[test]
    fn steal_shares_a_lone_group() {
        let mut q = RunQueue::new(ON);
        for t in 1..=5u32 {
            q.push(t, 10, true);
        }
        assert_eq!(q.steal(), vec![(3, 10, true), (4, 10, true), (5, 10, true)]);
        assert_eq!(q.steal(), vec![(2, 10, true)]);
        assert_eq!(q.steal(), vec![(1, 10, true)]);
        assert!(q.steal().is_empty());
        assert!(q.is_empty());
    }

    #[test]
    fn steal_without_affinity_takes_the_back_half() {
        let mut q = RunQueue::new(OFF);
        for t in 1..=5u32 {
            q.push(t, u64::from(t), t % 2 == 0);
        }
        assert_eq!(q.steal(), vec![(3, 3, false), (4, 4, true), (5, 5, false)]);
        assert_eq!(drain(&mut q), vec![1, 2]);
        assert!(q.steal().is_empty());
    }

    #[test]
    fn set_policy_keeps_every_thread() {
        let mut q = RunQueue::new(ON);
        q.push(1u32, 10, true);
        q.push(2, 20, true);
        q.push(3, 10, true);
        q.push(4, 10, false);
        // Off: the run order as it was (1, 3 of view 10, then 2, then 4).
        q.set_policy(OFF);
        assert_eq!(q.policy(), OFF);
        assert_eq!(q.len(), 4);
        q.push(5, 20, true);
        // On again: grouped as if pushed in that order.
        q.set_policy(ON);
        assert_eq!(drain(&mut q), vec![1, 3, 2, 5, 4]);
    }

    #[test]
    fn changing_the_bound_keeps_the_groups() {
        let mut q = RunQueue::new(with_bound(4));
        q.push(1u32, 10, true);
        q.push(2, 10, true);
        q.push(3, 10, true);
        q.push(4, 20, true);
        assert_eq!(q.pop(), Some((1, 10)));
        q.set_policy(with_bound(1));
        assert_eq!(drain(&mut q), vec![4, 2, 3]);
    }

    #[test]
    fn wait_bound_values() {
        assert_eq!(OFF.wait_bound(7), 7);
        assert_eq!(ON.wait_bound(0), 0);
        assert_eq!(ON.wait_bound(1), 1);
        // B = 1: N(N+1)/2.
        for n in 1..20u64 {
            assert_eq!(with_bound(1).wait_bound(n), n * (n + 1) / 2);
        }
        // B ≥ N: N + B(N−1).
        assert_eq!(with_bound(8).wait_bound(5), 5 + 8 * 4);
        // B divides N−1: N + (N−1)(N−1+B)/2.
        assert_eq!(with_bound(3).wait_bound(7), 7 + 6 * 9 / 2);
        // The closed-form ceiling.
        for n in 1..64u64 {
            for b in 1..10u32 {
                let ceiling = n + (2 * n - 2 + u64::from(b)).pow(2) / 8;
                assert!(with_bound(b).wait_bound(n) <= ceiling, "n={n} b={b}");
            }
        }
        assert_eq!(ON.wait_bound(u64::MAX), u64::MAX);
    }

    /// The worst case for `B = 1`: X sits behind `N−1` threads of its own view; each time one of
    /// them runs (and blocks), as many newcomers of other views arrive as fit under `N`.
    #[test]
    fn bound_is_reached_with_bound_one() {
        const N: u32 = 6;
        const X: u32 = 0;
        const OWN_VIEW: ViewKey = 1;
        const FIRST_NEWCOMER: u32 = 100;
        let policy = with_bound(1);
        let mut q = RunQueue::new(policy);
        for t in 1..N {
            q.push(t, OWN_VIEW, true);
        }
        q.push(X, OWN_VIEW, true);
        let (mut pops, mut max_len, mut next) = (0u64, q.len(), FIRST_NEWCOMER);
        loop {
            let (t, _) = q.pop().unwrap();
            pops += 1;
            if t == X {
                break;
            }
            // Fill up to N with newcomers, each in its own view.
            while q.len() < N as usize && t < FIRST_NEWCOMER {
                q.push(next, ViewKey::from(next), true);
                next += 1;
            }
            max_len = max_len.max(q.len());
        }
        assert_eq!(max_len, N as usize);
        assert_eq!(pops, policy.wait_bound(u64::from(N)));
    }

    /// Cubix's point: interleaved views switch on every pop without affinity, once per group
    /// turn with it.
    #[test]
    fn affinity_switches_views_less_than_fifo() {
        const THREADS: u32 = 64;
        const VIEWS: u32 = 4;
        const RUNS_EACH: u32 = 10;
        const GROUP_BOUND: u32 = 16;
        let count = |affinity| {
            let mut q = RunQueue::new(Policy {
                affinity,
                group_bound: GROUP_BOUND,
            });
            for t in 0..THREADS {
                q.push(t, ViewKey::from(t % VIEWS), true);
            }
            let mut runs = BTreeMap::new();
            let (mut changes, mut last) = (0u32, None);
            for _ in 0..THREADS * RUNS_EACH {
                let (t, view) = q.pop().unwrap();
                *runs.entry(t).or_insert(0) += 1;
                if last.is_some_and(|l| l != view) {
                    changes += 1;
                }
                last = Some(view);
                q.push(t, view, true);
            }
            assert!(runs.values().all(|&r| r == RUNS_EACH), "{runs:?}");
            changes
        };
        let (on, off) = (count(true), count(false));
        println!(
            "view changes over {} pops: affinity on {on}, off {off}",
            THREADS * RUNS_EACH
        );
        assert!(on < off);
        assert_eq!(off, THREADS * RUNS_EACH - 1);
        assert_eq!(on, THREADS * RUNS_EACH / GROUP_BOUND - 1);
    }

    const POOL: u32 = 12;
    const SMALL_POOL: u32 = 5;
    const VIEWS: std::ops::Range<u64> = 1..4;

    #[derive(Clone, Debug)]
    enum Op {
        Push(u32, ViewKey, bool),
        Pop,
        /// Push back the thread popped last (preempted), if it is not queued.
        Requeue,
        /// The thread popped last yields: `requeue_and_pop` (if it is not queued).
        Yield,
        /// `Yield` of this thread.
        YieldOf(u32, ViewKey, bool),
        Remove(u32),
        Steal,
        SetPolicy(Policy),
    }

    fn policy() -> impl Strategy<Value = Policy> {
        (any::<bool>(), 0u32..5).prop_map(|(affinity, group_bound)| Policy {
            affinity,
            group_bound,
        })
    }

    /// Scheduler-like events over threads `0..pool`: wake-ups, pops that block, preemptions
    /// (pop and push back), late re-queues, kills, steals and (if `set_policy`) policy changes.
    fn ops(pool: u32, set_policy: bool, all_affine: bool) -> impl Strategy<Value = Vec<Op>> {
        let policy_weight = if set_policy { 1 } else { 0 };
        let event = prop_oneof![
            4 => (0..pool, VIEWS, any::<bool>())
                .prop_map(move |(t, v, a)| vec![Op::Push(t, v, a || all_affine)]),
            3 => Just(vec![Op::Pop]),
            6 => Just(vec![Op::Pop, Op::Requeue]),
            1 => Just(vec![Op::Requeue]),
            4 => Just(vec![Op::Pop, Op::Yield]),
            2 => Just(vec![Op::Yield]),
            1 => (0..pool).prop_map(|t| vec![Op::Remove(t)]),
            1 => Just(vec![Op::Steal]),
            policy_weight => policy().prop_map(|p| vec![Op::SetPolicy(p)]),
        ];
        proptest::collection::vec(event, 0..300).prop_map(|events| events.concat())
    }

    /// What the model knows of a queued thread.
    #[derive(Clone, Copy, Debug)]
    struct Waiting {
        view: ViewKey,
        affine: bool,
        /// Pops done when it was queued (or the policy last changed).
        since_pop: u64,
        /// Most threads queued at once since then.
        max_queued: usize,
    }

    /// Checks a pop against the model and takes the thread out of it; returns the thread with
    /// its view and flag.
    fn check_pop(
        q: &RunQueue<u32>,
        waiting: &mut BTreeMap<u32, Waiting>,
        fifo: &mut VecDeque<u32>,
        pops: &mut u64,
        (t, view): (u32, ViewKey),
    ) -> Result<(u32, ViewKey, bool), TestCaseError> {
        *pops += 1;
        let w = waiting.remove(&t).expect("popped thread was queued");
        prop_assert_eq!(view, w.view);
        if !q.policy().affinity {
            prop_assert_eq!(Some(t), fifo.pop_front(), "FIFO order");
        } else {
            fifo.retain(|&x| x != t);
        }
        let waited = *pops - w.since_pop;
        let bound = q.policy().wait_bound(w.max_queued as u64);
        prop_assert!(waited <= bound, "{t} waited {waited} > {bound} ({w:?})");
        Ok((t, w.view, w.affine))
    }

    /// Runs `ops` against the queue and a model; checks (a) no thread lost or duplicated,
    /// (b) FIFO order with affinity off, (c) the wait bound.
    fn check_against_model(start: Policy, ops: Vec<Op>) -> Result<(), TestCaseError> {
        let mut q = RunQueue::new(start);
        let mut waiting: BTreeMap<u32, Waiting> = BTreeMap::new();
        // Affinity off: the exact order the queue must pop in.
        let mut fifo: VecDeque<u32> = VecDeque::new();
        let (mut pops, mut last_popped) = (0u64, None);
        for op in ops {
            let op = match (op, last_popped) {
                (Op::Requeue, Some((t, view, affine))) => Op::Push(t, view, affine),
                (Op::Yield, Some((t, view, affine))) => Op::YieldOf(t, view, affine),
                (op, _) => op,
            };
            match op {
                Op::Requeue | Op::Yield => {}
                Op::YieldOf(t, view, affine) => {
                    if waiting.contains_key(&t) {
                        continue;
                    }
                    // The model: a push, then a pop.
                    let peak = q.len() + 1;
                    for w in waiting.values_mut() {
                        w.max_queued = w.max_queued.max(peak);
                    }
                    waiting.insert(t, Waiting { view, affine, since_pop: pops, max_queued: peak });
                    fifo.push_back(t);
                    let popped = q.requeue_and_pop(t, view, affine);
                    last_popped = Some(check_pop(&q, &mut waiting, &mut fifo, &mut pops, popped)?);
                }
                Op::Push(t, view, affine) => {
                    if waiting.contains_key(&t) {
                        continue;
                    }
                    q.push(t, view, affine);
                    waiting.insert(
                        t,
                        Waiting {
                            view,
                            affine,
                            since_pop: pops,
                            max_queued: 0,
                        },
                    );
                    fifo.push_back(t);
                }
                Op::Pop => {
                    let popped = q.pop();
                    if waiting.is_empty() {
                        prop_assert_eq!(popped, None);
                        continue;
                    }
                    let popped = popped.expect("model has threads");
                    last_popped = Some(check_pop(&q, &mut waiting, &mut fifo, &mut pops, popped)?);
                }
                Op::Remove(t) => {
                    prop_assert_eq!(q.remove(t), waiting.remove(&t).is_some());
                    fifo.retain(|&x| x != t);
                }
                Op::Steal => {
                    let before = q.len();
                    let stolen = q.steal();
                    prop_assert_eq!(stolen.is_empty(), before == 0);
                    for &(t, view, affine) in &stolen {
                        let w = waiting.remove(&t).expect("stolen thread was queued");
                        prop_assert_eq!((view, affine), (w.view, w.affine));
                    }
                    if q.policy().affinity {
                        // One group: one view; more than one thread only from a shared group.
                        prop_assert!(stolen.iter().all(|s| s.1 == stolen[0].1));
                        prop_assert!(stolen.len() == 1 || stolen.iter().all(|s| s.2));
                        fifo.retain(|x| stolen.iter().all(|s| s.0 != *x));
                    } else {
                        let tail = fifo.split_off(before - before.div_ceil(2));
                        let got: Vec<u32> = stolen.iter().map(|s| s.0).collect();
                        prop_assert_eq!(got, Vec::from(tail));
                    }
                }
                Op::SetPolicy(policy) => {
                    let order: Vec<u32> = q.run_order().iter().map(|s| s.0).collect();
                    q.set_policy(policy);
                    prop_assert_eq!(q.policy(), policy);
                    // The order to expect from now on is the order the threads would have run.
                    fifo = order.into_iter().collect();
                    for w in waiting.values_mut() {
                        (w.since_pop, w.max_queued) = (pops, 0);
                    }
                }
            }
            // (a) exactly the model's threads are queued.
            let mut queued: Vec<u32> = q.run_order().iter().map(|s| s.0).collect();
            queued.sort_unstable();
            prop_assert_eq!(&queued, &waiting.keys().copied().collect::<Vec<_>>());
            prop_assert_eq!(q.len(), waiting.len());
            prop_assert_eq!(q.is_empty(), waiting.is_empty());
            for t in 0..POOL {
                prop_assert_eq!(q.contains(t), waiting.contains_key(&t));
            }
            for w in waiting.values_mut() {
                w.max_queued = w.max_queued.max(q.len());
            }
        }
        // Drain, so every thread's wait is checked.
        while !waiting.is_empty() {
            let (t, _) = q.pop().expect("model has threads");
            pops += 1;
            let w = waiting.remove(&t).expect("popped thread was queued");
            let (waited, bound) = (
                pops - w.since_pop,
                q.policy().wait_bound(w.max_queued as u64),
            );
            prop_assert!(waited <= bound, "{t} waited {waited} > {bound} ({w:?})");
        }
        prop_assert_eq!(q.pop(), None);
        Ok(())
    }

    /// `requeue_and_pop` (with its in-place shortcut) against the push and pop it stands for:
    /// the same threads out, the same order left, the same group statistics.
    fn check_requeue_is_push_then_pop(start: Policy, ops: Vec<Op>) -> Result<(), TestCaseError> {
        let (mut fast, mut slow) = (RunQueue::new(start), RunQueue::new(start));
        let mut last_popped = None;
        for op in ops {
            match (op, last_popped) {
                (Op::Push(t, view, affine), _) | (Op::Requeue, Some((t, view, affine))) => {
                    if !slow.contains(t) {
                        fast.push(t, view, affine);
                        slow.push(t, view, affine);
                    }
                }
                (Op::Pop, _) => {
                    let before = slow.run_order();
                    let popped = fast.pop();
                    prop_assert_eq!(popped, slow.pop());
                    if let Some((t, _)) = popped {
                        last_popped = before.into_iter().find(|e| e.0 == t);
                    }
                }
                (Op::Yield, Some((t, view, affine))) | (Op::YieldOf(t, view, affine), _) => {
                    if !slow.contains(t) {
                        let got = fast.requeue_and_pop(t, view, affine);
                        slow.push(t, view, affine);
                        let before = slow.run_order();
                        prop_assert_eq!(Some(got), slow.pop());
                        last_popped = before.into_iter().find(|e| e.0 == got.0);
                    }
                }
                (Op::Remove(t), _) => prop_assert_eq!(fast.remove(t), slow.remove(t)),
                (Op::Steal, _) => prop_assert_eq!(fast.steal(), slow.steal()),
                (Op::SetPolicy(p), _) => {
                    fast.set_policy(p);
                    slow.set_policy(p);
                }
                (Op::Requeue | Op::Yield, None) => {}
            }
            prop_assert_eq!(fast.run_order(), slow.run_order());
            prop_assert_eq!(fast.len(), slow.len());
            prop_assert_eq!(fast.group_stats(), slow.group_stats());
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn requeue_is_push_then_pop(start in policy(), ops in ops(POOL, true, false)) {
            check_requeue_is_push_then_pop(start, ops)?;
        }

        /// (a), (b), (c) under every operation, including policy changes.
        #[test]
        fn matches_model(start in policy(), ops in ops(POOL, true, false)) {
            check_against_model(start, ops)?;
        }

        /// (c) with affinity on throughout and few threads, where the bound is nearest.
        #[test]
        fn waits_stay_within_the_bound(bound in 1u32..4, ops in ops(SMALL_POOL, false, false)) {
            check_against_model(with_bound(bound), ops)?;
        }

        /// (d) with every thread affine, consecutive pops change view only across a handover of
        /// the head group, a rotation needs `B` pops of the rotated group, and one view never
        /// gets more than `B` pops in a row while another view waits.
        #[test]
        fn view_changes_need_handovers(bound in 1u32..5, ops in ops(POOL, false, true)) {
            let policy = with_bound(bound);
            let mut q = RunQueue::new(policy);
            let (mut pops, mut changes, mut last) = (0u64, 0u64, None);
            let mut last_popped = None;
            // Pops of the head group's current stint made while another view waited; a stint
            // ends at a handover (rotation, or the head emptied or taken away).
            let (mut streak, mut handovers_after_pop) = (0u32, 0u64);
            for op in ops {
                let op = match (op, last_popped) {
                    (Op::Requeue, Some((t, view))) => Op::Push(t, view, true),
                    (op, _) => op,
                };
                match op {
                    // `requeue_and_pop` is a push and a pop; those are checked one by one here
                    // (`matches_model` checks it as one operation).
                    Op::Requeue | Op::Yield | Op::YieldOf(..) => {}
                    Op::Push(t, view, affine) => {
                        if !q.contains(t) {
                            q.push(t, view, affine);
                        }
                    }
                    Op::Pop => {
                        let (before, stats) = (q.run_order(), q.group_stats());
                        if let Some((t, view)) = q.pop() {
                            pops += 1;
                            last_popped = Some((t, view));
                            if last.is_some_and(|l| l != view) {
                                changes += 1;
                            }
                            let new_stint = last != Some(view)
                                || stats.handovers != handovers_after_pop
                                || q.group_stats().rotations != stats.rotations;
                            last = Some(view);
                            if new_stint || before.iter().all(|s| s.1 == view) {
                                streak = 0;
                            }
                            if before.iter().any(|s| s.1 != view) {
                                streak += 1;
                                prop_assert!(streak <= bound, "view {view}: {streak} pops in a row");
                            }
                            handovers_after_pop = q.group_stats().handovers;
                        }
                    }
                    Op::Remove(t) => {
                        q.remove(t);
                    }
                    Op::Steal => {
                        q.steal();
                    }
                    Op::SetPolicy(_) => unreachable!("no policy changes here"),
                }
                let stats = q.group_stats();
                prop_assert!(changes <= stats.handovers, "{changes} > {stats:?}");
                prop_assert!(stats.rotations * u64::from(bound) <= pops, "{stats:?} {pops}");
            }
        }
    }
}
