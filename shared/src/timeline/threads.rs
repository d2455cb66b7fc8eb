//! Two halves of a build on two threads, where there are threads.

/// Rows from which a device's timeline is built on two threads.
pub(crate) const PARALLEL_BUILD_ROWS: usize = 200_000;

/// Whether [`beside`] runs its two halves on two threads (not in the
/// browser's wasm, where they run in turn): for splits that pay only then.
pub(crate) const THREADS: bool = cfg!(not(target_arch = "wasm32"));

/// `a` on another thread while `b` runs on this one, where there are
/// threads (not in the browser's wasm, where both run here in turn).
pub(crate) fn beside<A: Send, B>(a: impl FnOnce() -> A + Send, b: impl FnOnce() -> B) -> (A, B) {
    #[cfg(not(target_arch = "wasm32"))]
    {
        std::thread::scope(|scope| {
            let other = scope.spawn(a);
            let here = b();
            match other.join() {
                Ok(there) => (there, here),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })
    }
    #[cfg(target_arch = "wasm32")]
    {
        (a(), b())
    }
}
