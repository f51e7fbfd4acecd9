//! What memory-management logic needs from the machine: physical frames (allocated, zeroed,
//! freed) and access to the page tables stored in them. The kernel implements it over its frame
//! allocator and direct map; host tests implement it over a vector of fake frames
//! ([`fake::FakeMachine`]).

use arch::addr::Frame;

use super::page_table::{PhysMemory, TableFrames};

/// Frames and table access, as the view and region code uses them.
pub trait Machine {
    /// How page tables are reached (the direct map, or the fake frames in tests).
    type Memory: PhysMemory;
    /// A handle for reaching page tables.
    fn memory(&self) -> Self::Memory;
    /// A zeroed frame, or `None` when memory is exhausted.
    fn allocate_zeroed(&mut self) -> Option<Frame>;
    /// Gives a frame back.
    fn free_frame(&mut self, frame: Frame);
}

/// Lets page-table code take its table frames from a [`Machine`].
pub struct MachineTables<'a, M: Machine>(pub &'a mut M);

impl<M: Machine> TableFrames for MachineTables<'_, M> {
    fn allocate_table(&mut self) -> Option<Frame> {
        self.0.allocate_zeroed()
    }

    fn free_table(&mut self, frame: Frame) {
        self.0.free_frame(frame);
    }
}

/// A host stand-in for the machine, for tests.
#[cfg(test)]
pub mod fake {
    use super::*;
    use crate::mm::page_table::{RawTable, ENTRIES};
    use std::cell::{RefCell, UnsafeCell};
    use std::collections::BTreeSet;
    use std::rc::Rc;

    /// Frames are boxed 4 KiB blocks numbered from 1; a budget limits how many may be live.
    #[derive(Default)]
    pub struct Store {
        frames: RefCell<Vec<Box<UnsafeCell<RawTable>>>>,
        free: RefCell<Vec<Frame>>,
        live: RefCell<BTreeSet<u64>>,
    }

    /// The machine: allocates from the store up to a budget.
    pub struct FakeMachine {
        store: Rc<Store>,
        budget: usize,
    }

    /// Table access into the store.
    #[derive(Clone)]
    pub struct FakeMemory(Rc<Store>);

    impl FakeMachine {
        /// A machine that can hold `budget` frames at once.
        pub fn new(budget: usize) -> Self {
            FakeMachine { store: Rc::new(Store::default()), budget }
        }

        /// Frames currently allocated.
        pub fn live(&self) -> usize {
            self.store.live.borrow().len()
        }

        /// Whether `frame` is allocated.
        pub fn is_live(&self, frame: Frame) -> bool {
            self.store.live.borrow().contains(&frame.number())
        }

        /// Changes the budget (to provoke exhaustion).
        pub fn set_budget(&mut self, budget: usize) {
            self.budget = budget;
        }
    }

    impl PhysMemory for FakeMemory {
        fn table(&self, frame: Frame) -> *mut RawTable {
            assert!(self.0.live.borrow().contains(&frame.number()), "table access to a free frame {frame:?}");
            self.0.frames.borrow()[frame.number() as usize - 1].get()
        }
    }

    impl Machine for FakeMachine {
        type Memory = FakeMemory;

        fn memory(&self) -> FakeMemory {
            FakeMemory(self.store.clone())
        }

        fn allocate_zeroed(&mut self) -> Option<Frame> {
            if self.live() >= self.budget {
                return None;
            }
            let popped = self.store.free.borrow_mut().pop();
            let frame = match popped {
                Some(f) => f,
                None => {
                    let mut frames = self.store.frames.borrow_mut();
                    frames.push(Box::new(UnsafeCell::new([0; ENTRIES])));
                    Frame::from_number(frames.len() as u64)
                }
            };
            // SAFETY: test-only exclusive access to a frame just taken.
            unsafe { *self.store.frames.borrow()[frame.number() as usize - 1].get() = [0; ENTRIES] };
            assert!(self.store.live.borrow_mut().insert(frame.number()), "frame handed out twice");
            Some(frame)
        }

        fn free_frame(&mut self, frame: Frame) {
            assert!(self.store.live.borrow_mut().remove(&frame.number()), "double free of {frame:?}");
            // Poison so a use after free shows up in the tests.
            // SAFETY: test-only.
            unsafe { *self.store.frames.borrow()[frame.number() as usize - 1].get() = [0xdead_beef; ENTRIES] };
            self.store.free.borrow_mut().push(frame);
        }
    }
}
