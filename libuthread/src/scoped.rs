//! Scoped threads (`std::thread::scope`): user threads that may borrow from the caller's stack,
//! because the scope waits for every one of them before it returns.

use alloc::boxed::Box;
use alloc::sync::Arc;
use core::any::Any;
use core::marker::PhantomData;
use core::sync::atomic::{AtomicBool, Ordering};

use crate::{Condvar, JoinHandle, Mutex};

/// What a scope and its threads share.
struct ScopeData {
    /// Threads spawned in the scope that have not finished.
    running: Mutex<usize>,
    /// Signalled when `running` drops to 0.
    done: Condvar,
    /// Whether a thread of the scope panicked (hosted; on Tsumugi a panic ends the program).
    a_thread_panicked: AtomicBool,
}

/// A scope to spawn scoped threads in; see [`scope`](fn@scope).
pub struct Scope<'scope, 'env: 'scope> {
    data: Arc<ScopeData>,
    /// Invariant in `'scope` and `'env`, as std's (the threads may borrow for `'env`).
    scope: PhantomData<&'scope mut &'scope ()>,
    env: PhantomData<&'env mut &'env ()>,
}

/// An owned permission to join a scoped thread (std's `ScopedJoinHandle`).
pub struct ScopedJoinHandle<'scope, T> {
    handle: JoinHandle<()>,
    result: Arc<Mutex<Option<T>>>,
    _scope: PhantomData<&'scope ()>,
}

/// Creates a scope for spawning user threads that borrow local data: every thread spawned in
/// it is joined before `scope` returns (std's `thread::scope`). Must be called from a user
/// thread. Hosted, if a scoped thread panicked and was not joined, `scope` panics after all
/// have finished; on Tsumugi a panic ends the program anyway.
///
/// ```
/// libuthread::run(2, || {
///     let mut numbers = vec![1, 2, 3];
///     let total = std::sync::atomic::AtomicI32::new(0);
///     libuthread::scope(|s| {
///         s.spawn(|| total.fetch_add(numbers.iter().sum(), std::sync::atomic::Ordering::Relaxed));
///         s.spawn(|| println!("{} numbers", numbers.len()));
///     });
///     numbers.push(4); // the borrows ended with the scope
///     assert_eq!(total.into_inner(), 6);
/// });
/// ```
#[track_caller]
pub fn scope<'env, F, T>(f: F) -> T
where
    F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> T,
{
    let scope = Scope {
        data: Arc::new(ScopeData { running: Mutex::new(0), done: Condvar::new(), a_thread_panicked: AtomicBool::new(false) }),
        scope: PhantomData,
        env: PhantomData,
    };
    let result = crate::unwind::catch(|| f(&scope));
    // Wait for every thread, whether `f` returned or panicked: they may borrow from `'env`.
    drop(scope.data.done.wait_while(scope.data.running.lock(), |running| *running > 0));
    match result {
        Err(payload) => crate::unwind::resume(payload),
        Ok(_) if scope.data.a_thread_panicked.load(Ordering::Relaxed) => panic!("a scoped thread panicked"),
        Ok(value) => value,
    }
}

/// Counts a scoped thread out when its closure ends (returned or unwound).
struct Finished {
    data: Arc<ScopeData>,
    completed: bool,
}

impl Drop for Finished {
    fn drop(&mut self) {
        if !self.completed {
            self.data.a_thread_panicked.store(true, Ordering::Relaxed);
        }
        let mut running = self.data.running.lock();
        *running -= 1;
        if *running == 0 {
            self.data.done.notify_all();
        }
    }
}

impl<'scope, 'env> Scope<'scope, 'env> {
    /// Spawns a thread that may borrow for `'scope` (std's `Scope::spawn`).
    pub fn spawn<F, T>(&'scope self, f: F) -> ScopedJoinHandle<'scope, T>
    where
        F: FnOnce() -> T + Send + 'scope,
        T: Send + 'scope,
    {
        *self.data.running.lock() += 1;
        let result = Arc::new(Mutex::new(None));
        let slot = result.clone();
        let mut finished = Finished { data: self.data.clone(), completed: false };
        let body: Box<dyn FnOnce() + Send + 'scope> = Box::new(move || {
            *slot.lock() = Some(f());
            finished.completed = true;
            drop(finished);
        });
        // SAFETY: only the lifetime is erased: `scope` waits for `Finished` of every thread
        // before `'scope` ends, and after that drop the closure touches nothing borrowed.
        let body: Box<dyn FnOnce() + Send + 'static> = unsafe { core::mem::transmute(body) };
        ScopedJoinHandle { handle: crate::spawn(body), result, _scope: PhantomData }
    }
}

impl<T> ScopedJoinHandle<'_, T> {
    /// Waits for the thread and returns its result, or (hosted) its panic's payload. A joined
    /// panic does not make the scope panic.
    pub fn join(self) -> Result<T, Box<dyn Any + Send + 'static>> {
        match self.handle.join() {
            Ok(()) => Ok(self.result.lock().take().expect("a finished scoped thread left its result")),
            Err(payload) => Err(payload),
        }
    }

    /// Whether the thread has finished.
    pub fn is_finished(&self) -> bool {
        self.handle.is_finished()
    }

    /// The thread's id.
    pub fn id(&self) -> crate::ThreadId {
        self.handle.id()
    }
}

impl core::fmt::Debug for Scope<'_, '_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Scope").finish_non_exhaustive()
    }
}

impl<T> core::fmt::Debug for ScopedJoinHandle<'_, T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ScopedJoinHandle").finish_non_exhaustive()
    }
}
