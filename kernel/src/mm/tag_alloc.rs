//! TLB tags (x86 PCID, riscv64/aarch64 ASID) for views, recycled by generations, so switching
//! between views need not flush the TLB.
//!
//! # Scheme
//!
//! Tag values `1..count` are handed to views; value 0 ([`UNTAGGED`]) is the kernel's and the
//! untagged setting's. The allocator counts *generations*. A new generation starts whenever
//! tag values are made available again, which happens only when no available value is left:
//!
//! - a **reclaim**, if some views died since the last one: their values (held back until now,
//!   see [`TagAllocator::release`]) become available; every live view keeps its tag;
//! - a **rollover**, if every value is held by a live view: all values become available and
//!   every tag handed out before is invalid; a view holding one gets a new tag at its next load
//!   (the Linux/arm64 ASID scheme).
//!
//! A [`Tag`] records the generation in which its value became available to it. Within one
//! generation a value is handed out at most once, and a live view's value is never handed out
//! again until a rollover, so (1) two live views never hold the same valid tag value.
//!
//! Each CPU keeps one `u64`: the generation it last flushed its whole TLB in (0 at bring-up, when
//! it holds no tagged entries). A CPU must flush before it loads a tag of a later generation than
//! its own, and then takes the current generation: (2) a CPU never uses a tag of generation `g`
//! without having flushed since `g` began, so every entry it holds under that value was made by
//! the value's present owner — entries of an earlier owner were made before `g` began.
//! Recycling dead views' values in batches (a reclaim) rather than one at a time means each CPU
//! flushes at most once per batch, and only when it actually loads a recycled value; rollovers
//! are left for when the live views really need more tags than there are, so (3) with at most
//! `count − 1` live views no rollover ever happens.
//!
//! A per-tag flush (`flush_tag` in [`TagChoice`]) is therefore never needed and never asked for:
//! a recycled value is only used after the loading CPU's whole-TLB flush. (Per-tag recycling
//! would need every CPU to flush that one tag before its next use, which a single per-CPU
//! generation cannot track.)
//!
//! # Per-CPU protocol
//!
//! The allocator is global, behind a lock. To load view `V` on a CPU:
//!
//! 1. under the allocator's lock, read `V`'s cached tag, call [`TagAllocator::tag_for`] with it
//!    and the CPU's generation, and store the returned tag back into `V` before the lock is
//!    dropped (two CPUs loading `V` at once must not both assign it a tag);
//! 2. if `flush_all`, flush every non-global TLB entry of every tag on this CPU (the kernel's
//!    global entries are the same in every view);
//! 3. load `V`'s root with the returned tag value (x86: CR3 with PCID and the no-flush bit;
//!    riscv64: satp.ASID; aarch64: TTBR0_EL1.ASID).
//!
//! When a view dies, no CPU may have it loaded any more; then call [`TagAllocator::release`]
//! with its tag (if it ever had one). A shoot-down for a live view invalidates its current tag's
//! entries on every CPU, and on a CPU that has the view loaded also the tag it was loaded with:
//! after a rollover a CPU may still run a view under its previous tag until its next switch.
//!
//! With fewer than two tags (`count` 0 or 1) tagging is off: every load gets tag 0 and a whole
//! flush, the untagged setting of the original Cubix measurement.

use alloc::vec;
use alloc::vec::Vec;

/// The tag value of the kernel and of the untagged setting; never handed to a view.
pub const UNTAGGED: u16 = 0;

/// The first tag value handed to views.
const FIRST_TAG: u16 = UNTAGGED + 1;

/// Bits in one word of the live-value bitmap.
const WORD_BITS: usize = u64::BITS as usize;

/// A view's TLB tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tag {
    /// The hardware value (PCID / ASID).
    pub value: u16,
    /// The generation in which the value became available to this view.
    pub generation: u64,
}

/// What a CPU must do to load a view: which tag to use, and what to flush first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TagChoice {
    /// The tag to load the view with; the caller stores it as the view's cached tag.
    pub tag: Tag,
    /// Flush this CPU's whole TLB (every non-global entry of every tag) before loading.
    pub flush_all: bool,
    /// Flush this tag's entries before loading. Never set by this allocator: a recycled value
    /// is only used after a whole flush (see the module documentation).
    pub flush_tag: bool,
}

/// Hands out TLB tags to views (one global allocator, behind a lock).
#[derive(Debug)]
pub struct TagAllocator {
    /// Tag values are `FIRST_TAG..count`.
    count: u16,
    /// The current generation.
    generation: u64,
    /// The generation the last rollover started: tags of earlier generations are invalid.
    valid_since: u64,
    /// Rollovers so far.
    rollovers: u64,
    /// The next value not handed out since the last rollover (`count` when there is none).
    next_fresh: u16,
    /// Values made available by the last reclaim and not handed out yet.
    reclaimed: Vec<u16>,
    /// Values of views that died since the last reclaim.
    released: Vec<u16>,
    /// Bit per value: held by a live view under a valid tag.
    live: Vec<u64>,
}

impl TagAllocator {
    /// An allocator of the tag values `1..count` (0 is reserved for "untagged" and the kernel).
    /// `count` 0 or 1 means the hardware has no tags (or tagging is switched off): see
    /// [`enabled`](Self::enabled). A 16-bit ASID space passes `u16::MAX`, giving up one value.
    pub fn new(count: u16) -> Self {
        TagAllocator {
            count,
            generation: 0,
            valid_since: 0,
            rollovers: 0,
            next_fresh: FIRST_TAG,
            reclaimed: Vec::new(),
            released: Vec::new(),
            live: vec![0; usize::from(count).div_ceil(WORD_BITS)],
        }
    }

    /// Whether views get tags (at least one value besides [`UNTAGGED`]).
    pub fn enabled(&self) -> bool {
        self.count > FIRST_TAG
    }

    /// Called when a view is about to be loaded on a CPU: returns the tag to use and whether this
    /// CPU must flush its entire TLB first. `current` is the view's cached tag (`None` if it never
    /// had one); `cpu_generation` is the generation this CPU last flushed its whole TLB in, kept
    /// by the caller per CPU (0 at bring-up) and updated here when a flush is asked for. The
    /// caller stores the returned tag into the view under the same lock (module documentation).
    pub fn tag_for(&mut self, current: Option<Tag>, cpu_generation: &mut u64) -> TagChoice {
        if !self.enabled() {
            let tag = Tag {
                value: UNTAGGED,
                generation: self.generation,
            };
            return TagChoice {
                tag,
                flush_all: true,
                flush_tag: false,
            };
        }
        let tag = match current {
            Some(tag) if self.is_valid(tag) => tag,
            _ => self.assign(),
        };
        let flush_all = *cpu_generation < tag.generation;
        if flush_all {
            *cpu_generation = self.generation;
        }
        TagChoice {
            tag,
            flush_all,
            flush_tag: false,
        }
    }

    /// A view dies (no CPU has it loaded any more): its tag value is held back and becomes
    /// available again at the next reclaim or rollover — never within the current generation,
    /// so that CPUs flush once per batch of recycled values instead of once per value. A tag
    /// already invalidated by a rollover is ignored (its value was made available then).
    pub fn release(&mut self, tag: Tag) {
        if !self.enabled() || tag.value == UNTAGGED || tag.generation < self.valid_since {
            return;
        }
        debug_assert!(
            self.is_live(tag.value),
            "{tag:?} released twice or never handed out"
        );
        self.set_live(tag.value, false);
        self.released.push(tag.value);
    }

    /// The current generation.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// How many rollovers (generations that invalidated every tag) there have been.
    pub fn rollovers(&self) -> u64 {
        self.rollovers
    }

    /// Whether `tag` may still be used: handed out since the last rollover (so its view, being
    /// alive, still holds the value).
    fn is_valid(&self, tag: Tag) -> bool {
        let valid = tag.value != UNTAGGED
            && tag.value < self.count
            && (self.valid_since..=self.generation).contains(&tag.generation);
        debug_assert!(
            !valid || self.is_live(tag.value),
            "{tag:?} belongs to a dead view"
        );
        valid
    }

    /// A value for a view without a valid tag, starting a new generation if none is available.
    fn assign(&mut self) -> Tag {
        let value = match self.take_available() {
            Some(value) => value,
            None => {
                self.generation += 1;
                if self.released.is_empty() {
                    self.rollover();
                } else {
                    // `reclaimed` is empty: swapping keeps both buffers.
                    core::mem::swap(&mut self.reclaimed, &mut self.released);
                }
                self.take_available().expect("a new generation has values")
            }
        };
        self.set_live(value, true);
        Tag {
            value,
            generation: self.generation,
        }
    }

    /// Every value becomes available; every tag handed out so far is invalid.
    fn rollover(&mut self) {
        self.rollovers += 1;
        self.valid_since = self.generation;
        self.next_fresh = FIRST_TAG;
        self.reclaimed.clear();
        self.released.clear();
        self.live.fill(0);
    }

    /// An available value of the current generation, if any.
    fn take_available(&mut self) -> Option<u16> {
        if self.next_fresh < self.count {
            let value = self.next_fresh;
            self.next_fresh += 1;
            Some(value)
        } else {
            self.reclaimed.pop()
        }
    }

    fn is_live(&self, value: u16) -> bool {
        let value = usize::from(value);
        self.live[value / WORD_BITS] & (1 << (value % WORD_BITS)) != 0
    }

    fn set_live(&mut self, value: u16, live: bool) {
        let value = usize::from(value);
        let bit = 1 << (value % WORD_BITS);
        if live {
            self.live[value / WORD_BITS] |= bit;
        } else {
            self.live[value / WORD_BITS] &= !bit;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::collections::{BTreeMap, BTreeSet};
    use proptest::prelude::*;

    /// Loads a view on a CPU the way the kernel does, returning the choice.
    fn load(tags: &mut TagAllocator, view: &mut Option<Tag>, cpu: &mut u64) -> TagChoice {
        let choice = tags.tag_for(*view, cpu);
        *view = Some(choice.tag);
        choice
    }

    #[test]
    fn fewer_than_two_tags_is_untagged() {
        for count in [0, 1] {
            let mut tags = TagAllocator::new(count);
            assert!(!tags.enabled());
            let mut cpu = 0;
            let mut view = None;
            for _ in 0..3 {
                let choice = load(&mut tags, &mut view, &mut cpu);
                assert_eq!(choice.tag.value, UNTAGGED);
                assert!(choice.flush_all);
                assert!(!choice.flush_tag);
            }
            tags.release(view.unwrap());
            assert_eq!(tags.generation(), 0);
        }
        assert!(TagAllocator::new(2).enabled());
    }

    #[test]
    fn views_keep_their_tags_and_switch_without_flushing() {
        let mut tags = TagAllocator::new(4);
        let (mut a, mut b, mut cpu) = (None, None, 0);
        let first_a = load(&mut tags, &mut a, &mut cpu);
        let first_b = load(&mut tags, &mut b, &mut cpu);
        assert_ne!(first_a.tag.value, first_b.tag.value);
        assert_ne!(first_a.tag.value, UNTAGGED);
        for _ in 0..10 {
            let choice = load(&mut tags, &mut a, &mut cpu);
            assert_eq!(
                choice,
                TagChoice {
                    tag: first_a.tag,
                    flush_all: false,
                    flush_tag: false
                }
            );
            let choice = load(&mut tags, &mut b, &mut cpu);
            assert_eq!(choice.tag, first_b.tag);
            assert!(!choice.flush_all);
        }
        assert_eq!(tags.generation(), 0);
    }

    #[test]
    fn dead_views_values_come_back_in_a_reclaim() {
        // Values 1 and 2.
        let mut tags = TagAllocator::new(3);
        let (mut cpu0, mut cpu1) = (0, 0);
        let (mut a, mut b, mut c) = (None, None, None);
        load(&mut tags, &mut a, &mut cpu0);
        load(&mut tags, &mut b, &mut cpu1);
        let b_value = b.unwrap().value;
        tags.release(b.unwrap());
        // C gets B's value in a new generation; the CPU that ran B flushes before using it.
        let choice = load(&mut tags, &mut c, &mut cpu1);
        assert_eq!(choice.tag.value, b_value);
        assert_eq!(choice.tag.generation, 1);
        assert!(choice.flush_all);
        assert_eq!(cpu1, 1);
        // A keeps its tag, and CPU 0 may keep running it without a flush.
        let choice = load(&mut tags, &mut a, &mut cpu0);
        assert_eq!(choice.tag.generation, 0);
        assert!(!choice.flush_all);
        // CPU 0 has not flushed since the reclaim: it must before running C.
        assert!(load(&mut tags, &mut c, &mut cpu0).flush_all);
        assert!(!load(&mut tags, &mut a, &mut cpu0).flush_all);
        assert_eq!(tags.rollovers(), 0);
    }

    #[test]
    fn rollover_when_live_views_outnumber_the_tags() {
        // Values 1 and 2, three live views.
        let mut tags = TagAllocator::new(3);
        let mut cpu = 0;
        let mut views = [None; 3];
        load(&mut tags, &mut views[0], &mut cpu);
        load(&mut tags, &mut views[1], &mut cpu);
        let choice = load(&mut tags, &mut views[2], &mut cpu);
        assert_eq!(tags.rollovers(), 1);
        assert_eq!(
            choice.tag,
            Tag {
                value: FIRST_TAG,
                generation: 1
            }
        );
        assert!(choice.flush_all);
        // View 0's tag is from before the rollover: it gets a new one, no flush needed any more.
        let old = views[0].unwrap();
        let choice = load(&mut tags, &mut views[0], &mut cpu);
        assert_ne!(choice.tag, old);
        assert!(!choice.flush_all);
        // Releasing a tag invalidated by the rollover changes nothing.
        tags.release(old);
        assert_eq!(tags.generation(), 1);
    }

    #[test]
    fn churn_below_the_tag_count_never_rolls_over() {
        let mut tags = TagAllocator::new(4);
        let mut cpu = 0;
        let mut keep = None;
        load(&mut tags, &mut keep, &mut cpu);
        let mut flushes = 0;
        for _ in 0..100 {
            let mut view = None;
            flushes += u32::from(load(&mut tags, &mut view, &mut cpu).flush_all);
            assert!(!load(&mut tags, &mut keep, &mut cpu).flush_all);
            tags.release(view.unwrap());
        }
        assert_eq!(tags.rollovers(), 0);
        // One flush per reclaim, and a reclaim per two short-lived views (values 2 and 3).
        assert_eq!(u64::from(flushes), tags.generation());
        assert_eq!(tags.generation(), 49);
    }

    #[derive(Clone, Debug)]
    enum Op {
        /// Load view `.0` (an index into the live views) on CPU `.1`.
        Load(usize, usize),
        /// The running CPU `.0` touches memory: more entries under its loaded tag.
        Touch(usize),
        /// A new view.
        Create,
        /// Live view `.0` dies.
        Kill(usize),
    }

    const CPUS: usize = 3;
    const MAX_VIEWS: usize = 8;

    fn ops() -> impl Strategy<Value = Vec<Op>> {
        let op = prop_oneof![
            8 => (0..MAX_VIEWS, 0..CPUS).prop_map(|(v, c)| Op::Load(v, c)),
            2 => (0..CPUS).prop_map(Op::Touch),
            2 => Just(Op::Create),
            2 => (0..MAX_VIEWS).prop_map(Op::Kill),
        ];
        proptest::collection::vec(op, 0..400)
    }

    /// One simulated CPU.
    #[derive(Default)]
    struct Cpu {
        generation: u64,
        /// TLB model: (tag value, view id) of every cached translation.
        tlb: BTreeSet<(u16, usize)>,
        /// The view loaded, and the tag value it was loaded with.
        loaded: Option<(usize, u16)>,
    }

    /// Runs `ops`; `live_cap` limits how many views live at once. Returns the most views alive
    /// at once and the number of rollovers.
    fn simulate(count: u16, live_cap: usize, ops: Vec<Op>) -> Result<(usize, u64), TestCaseError> {
        let mut tags = TagAllocator::new(count);
        let mut cpus: Vec<Cpu> = (0..CPUS).map(|_| Cpu::default()).collect();
        // Live views by id, with their cached tag.
        let mut views: BTreeMap<usize, Option<Tag>> = BTreeMap::new();
        let (mut next_id, mut most_live) = (0, 0);
        for op in ops {
            match op {
                Op::Create => {
                    if views.len() < live_cap {
                        views.insert(next_id, None);
                        next_id += 1;
                    }
                }
                Op::Kill(index) => {
                    let Some(&id) = views.keys().nth(index % views.len().max(1)) else {
                        continue;
                    };
                    // Whoever runs it switches to the kernel first.
                    for cpu in cpus
                        .iter_mut()
                        .filter(|c| c.loaded.is_some_and(|l| l.0 == id))
                    {
                        cpu.loaded = None;
                    }
                    if let Some(tag) = views.remove(&id).flatten() {
                        tags.release(tag);
                    }
                }
                Op::Load(index, c) => {
                    let Some(&id) = views.keys().nth(index % views.len().max(1)) else {
                        continue;
                    };
                    let cpu = &mut cpus[c];
                    let cached = views.get_mut(&id).unwrap();
                    let choice = tags.tag_for(*cached, &mut cpu.generation);
                    *cached = Some(choice.tag);
                    prop_assert!(!choice.flush_tag);
                    if choice.flush_all {
                        cpu.tlb.clear();
                    }
                    let value = choice.tag.value;
                    if tags.enabled() {
                        prop_assert_ne!(value, UNTAGGED);
                        // (2) this CPU flushed since the tag's generation began.
                        prop_assert!(cpu.generation >= choice.tag.generation);
                        // No stale translation of another view under this value.
                        let stale = cpu
                            .tlb
                            .range((value, 0)..=(value, usize::MAX))
                            .find(|e| e.1 != id);
                        prop_assert!(
                            stale.is_none(),
                            "cpu {c} loads view {id} with {choice:?} over {stale:?}"
                        );
                    } else {
                        prop_assert_eq!(value, UNTAGGED);
                        prop_assert!(choice.flush_all);
                    }
                    cpu.tlb.insert((value, id));
                    cpu.loaded = Some((id, value));
                }
                Op::Touch(c) => {
                    let cpu = &mut cpus[c];
                    if let Some((id, value)) = cpu.loaded {
                        let stale = cpu
                            .tlb
                            .range((value, 0)..=(value, usize::MAX))
                            .find(|e| e.1 != id);
                        prop_assert!(stale.is_none(), "cpu {c} runs view {id} over {stale:?}");
                        cpu.tlb.insert((value, id));
                    }
                }
            }
            most_live = most_live.max(views.len());
            // (1) live views with valid tags hold distinct values.
            let mut held = BTreeSet::new();
            for tag in views.values().flatten() {
                if tags.enabled() && tag.generation >= tags.valid_since {
                    prop_assert!(held.insert(tag.value), "value {} held twice", tag.value);
                }
            }
        }
        Ok((most_live, tags.rollovers()))
    }

    proptest! {
        /// Few tags force reclaims and rollovers; the TLB models never see a stale hit.
        #[test]
        fn no_cpu_hits_another_views_translation(count in 0u16..6, ops in ops()) {
            simulate(count, MAX_VIEWS, ops)?;
        }

        /// (3) With at most `count − 1` live views there is never a rollover.
        #[test]
        fn enough_tags_never_roll_over(count in 2u16..7, ops in ops()) {
            let cap = usize::from(count) - 1;
            let (most_live, rollovers) = simulate(count, cap, ops)?;
            prop_assert!(most_live <= cap);
            prop_assert_eq!(rollovers, 0);
        }
    }
}
