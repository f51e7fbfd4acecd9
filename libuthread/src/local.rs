//! Thread-locals that belong to the *user* thread: their values live in the thread's ThMB, so
//! they follow it when it moves from one vCPU to another (the platform's own thread-locals,
//! such as `std::thread_local!` on the host, belong to the vCPU instead).

use alloc::boxed::Box;
use core::any::Any;
use core::cell::{Cell, RefCell};
use core::marker::PhantomData;

use crate::platform;
use crate::prim::{AtomicUsize, Ordering};
use crate::thmb::Thmb;

/// Indices handed to keys so far.
static NEXT_INDEX: AtomicUsize = AtomicUsize::new(0);

/// A thread-local key, made by [`thread_local!`](crate::thread_local). Each user thread sees
/// its own value, created by the key's initialiser on the thread's first access and dropped
/// when the thread exits.
///
/// ```
/// use std::cell::Cell;
/// libuthread::thread_local!(static COUNT: Cell<u32> = Cell::new(0));
///
/// libuthread::run(2, || {
///     COUNT.with(|c| c.set(1));
///     let other = libuthread::spawn(|| COUNT.with(|c| c.get()));
///     assert_eq!(other.join().unwrap(), 0); // another thread, another value
///     assert_eq!(COUNT.with(|c| c.get()), 1);
/// });
/// ```
pub struct LocalKey<T: 'static> {
    init: fn() -> T,
    /// The key's slot in every thread's table, plus one (0: not assigned yet).
    index: AtomicUsize,
    _marker: PhantomData<fn() -> T>,
}

impl<T: 'static> LocalKey<T> {
    /// A key whose values start as `init()`. Use [`thread_local!`](crate::thread_local).
    #[doc(hidden)]
    pub const fn new(init: fn() -> T) -> Self {
        LocalKey { init, index: AtomicUsize::new(0), _marker: PhantomData }
    }

    fn index(&self) -> usize {
        let index = self.index.load(Ordering::Acquire);
        if index != 0 {
            return index - 1;
        }
        let fresh = NEXT_INDEX.fetch_add(1, Ordering::Relaxed) + 1;
        match self.index.compare_exchange(0, fresh, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => fresh - 1,
            Err(won) => won - 1, // another thread assigned it first; `fresh` stays unused
        }
    }

    /// Calls `f` with the calling thread's value.
    ///
    /// Panics outside a user thread (outside [`run`](crate::run)).
    pub fn with<F: FnOnce(&T) -> R, R>(&'static self, f: F) -> R {
        let t = platform::ltn();
        assert!(!t.is_null(), "libuthread: thread-local used outside a user thread");
        let index = self.index();
        let value = match Self::lookup(t, index) {
            Some(value) => value,
            None => {
                // The initialiser may use other thread-locals: hold no borrow while it runs.
                let fresh: Box<dyn Any> = Box::new((self.init)());
                // SAFETY: only the running thread touches its own table.
                let table = unsafe { &mut *(*t).locals.get() };
                if table.len() <= index {
                    table.resize_with(index + 1, || None);
                }
                table[index] = Some(fresh);
                // SAFETY: the running thread's own ThMB.
                unsafe { (*t).extras.set(true) };
                Self::lookup(t, index).expect("just stored")
            }
        };
        // SAFETY: the value is boxed, so it stays put while the table grows, and it lives
        // until the thread exits — after every `with` of the thread has returned.
        f(unsafe { &*value })
    }

    fn lookup(t: *mut Thmb, index: usize) -> Option<*const T> {
        // SAFETY: only the running thread touches its own table.
        let table = unsafe { &*(*t).locals.get() };
        let value = table.get(index)?.as_ref()?;
        Some(value.downcast_ref::<T>().expect("thread-local of another type") as *const T)
    }
}

impl<T: 'static> LocalKey<T> {
    /// Like [`with`](Self::with); never fails here (a value is reachable from its thread until
    /// the thread exits, even from other values' destructors, which then see a fresh value), so
    /// the `Result` only keeps std's shape.
    pub fn try_with<F: FnOnce(&T) -> R, R>(&'static self, f: F) -> Result<R, AccessError> {
        Ok(self.with(f))
    }
}

/// The error of [`LocalKey::try_with`] (std's `AccessError`; never returned here).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AccessError;

impl core::fmt::Display for AccessError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("already destroyed")
    }
}

impl core::error::Error for AccessError {}

/// std's accessors for a `Cell` thread-local.
///
/// ```
/// use std::cell::Cell;
/// libuthread::thread_local!(static N: Cell<u32> = const { Cell::new(1) });
/// libuthread::run(1, || {
///     assert_eq!(N.get(), 1);
///     N.set(2);
///     assert_eq!(N.replace(3), 2);
///     assert_eq!(N.take(), 3);
///     assert_eq!(N.get(), 0);
/// });
/// ```
impl<T: 'static> LocalKey<Cell<T>> {
    /// Sets the calling thread's value.
    pub fn set(&'static self, value: T) {
        self.with(|cell| cell.set(value));
    }

    /// A copy of the calling thread's value.
    pub fn get(&'static self) -> T
    where
        T: Copy,
    {
        self.with(Cell::get)
    }

    /// Takes the calling thread's value, leaving `T::default()`.
    pub fn take(&'static self) -> T
    where
        T: Default,
    {
        self.with(Cell::take)
    }

    /// Replaces the calling thread's value, returning the old one.
    pub fn replace(&'static self, value: T) -> T {
        self.with(|cell| cell.replace(value))
    }
}

/// std's accessors for a `RefCell` thread-local.
///
/// ```
/// use std::cell::RefCell;
/// libuthread::thread_local!(static V: RefCell<Vec<u32>> = RefCell::new(Vec::new()));
/// libuthread::run(1, || {
///     V.with_borrow_mut(|v| v.push(1));
///     assert_eq!(V.with_borrow(|v| v.len()), 1);
///     V.set(vec![2, 3]);
///     assert_eq!(V.replace(Vec::new()), [2, 3]);
///     assert!(V.take().is_empty());
/// });
/// ```
impl<T: 'static> LocalKey<RefCell<T>> {
    /// Calls `f` with a shared borrow of the calling thread's value.
    pub fn with_borrow<R, F: FnOnce(&T) -> R>(&'static self, f: F) -> R {
        self.with(|cell| f(&cell.borrow()))
    }

    /// Calls `f` with a mutable borrow of the calling thread's value.
    pub fn with_borrow_mut<R, F: FnOnce(&mut T) -> R>(&'static self, f: F) -> R {
        self.with(|cell| f(&mut cell.borrow_mut()))
    }

    /// Sets the calling thread's value.
    pub fn set(&'static self, value: T) {
        self.with(|cell| *cell.borrow_mut() = value);
    }

    /// Takes the calling thread's value, leaving `T::default()`.
    pub fn take(&'static self) -> T
    where
        T: Default,
    {
        self.with(RefCell::take)
    }

    /// Replaces the calling thread's value, returning the old one.
    pub fn replace(&'static self, value: T) -> T {
        self.with(|cell| cell.replace(value))
    }
}

impl<T: 'static> core::fmt::Debug for LocalKey<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("LocalKey").finish_non_exhaustive()
    }
}

/// Drops the exiting thread `t`'s values (in its own context: destructors may use the library,
/// even other thread-locals, which are then created afresh and dropped in the next round).
#[inline]
pub(crate) fn destroy_all(t: *mut Thmb) {
    // Most threads never touch a thread-local (nor have a name): nothing to take or drop.
    // SAFETY: only the running thread touches its own ThMB.
    if unsafe { (*t).extras.get() } {
        destroy_each(t);
    }
}

/// [`destroy_all`] for a thread that has thread-locals.
#[cold]
fn destroy_each(t: *mut Thmb) {
    loop {
        // SAFETY: only the running thread touches its own table.
        let table = core::mem::take(unsafe { &mut *(*t).locals.get() });
        if table.iter().all(Option::is_none) {
            return;
        }
        drop(table);
    }
}

/// Declares user-thread-local statics, like `std::thread_local!`; each is a
/// [`LocalKey`](crate::LocalKey). std's `const { … }` initialiser is accepted (the value is
/// still created on a thread's first access: the ThMB's table has no static slots).
///
/// ```
/// use std::cell::RefCell;
/// libuthread::thread_local! {
///     static NAME: RefCell<String> = RefCell::new(String::new());
///     pub static DEPTH: std::cell::Cell<usize> = std::cell::Cell::new(0);
/// }
/// libuthread::run(1, || NAME.with(|n| n.borrow_mut().push_str("main")));
/// ```
#[macro_export]
macro_rules! thread_local {
    () => {};
    ($(#[$attr:meta])* $vis:vis static $name:ident: $t:ty = const { $init:expr }; $($rest:tt)*) => {
        $crate::thread_local!($(#[$attr])* $vis static $name: $t = $init; $($rest)*);
    };
    ($(#[$attr:meta])* $vis:vis static $name:ident: $t:ty = const { $init:expr }) => {
        $crate::thread_local!($(#[$attr])* $vis static $name: $t = $init;);
    };
    ($(#[$attr:meta])* $vis:vis static $name:ident: $t:ty = $init:expr; $($rest:tt)*) => {
        $(#[$attr])* $vis static $name: $crate::LocalKey<$t> = $crate::LocalKey::new({
            fn __init() -> $t { $init }
            __init
        });
        $crate::thread_local!($($rest)*);
    };
    ($(#[$attr:meta])* $vis:vis static $name:ident: $t:ty = $init:expr) => {
        $crate::thread_local!($(#[$attr])* $vis static $name: $t = $init;);
    };
}
