//! Where the client's work runs.
//!
//! A request runs on the caller's thread: the async API polls it on the caller's executor and
//! the sync API drives it right there with [`Background::block_on`]. Neither spawns a task nor
//! crosses to another thread for a request. What has to run when nobody is calling (connection
//! drivers and reconnects of the shared multiplexed connections, the watchdog, releases started
//! by a dropped async guard) runs on a small runtime the client owns ([`Background`]), or on the
//! caller's multi-thread runtime when the builder is given one (`ClientBuilder::runtime`).
//! With a runtime of its own, the client sends an async request polled by another multi-thread
//! tokio runtime on a connection whose driver runs there ([`caller`]): its commands and replies
//! cross no thread.
//!
//! Every request future is polled inside that runtime's context ([`Background::enter`]), so the
//! timers and connections it creates belong to the client's runtime: the async API then works
//! from any executor, even one without a tokio timer, and the sync API from any thread,
//! including one that runs another runtime (it blocks that thread for the call).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use tokio::runtime::{Handle, Runtime, RuntimeFlavor};

/// Where the background work runs: the client's own runtime (shut down when the last handle
/// goes away), or the caller's (`rt` is then `None`).
pub(crate) struct Background {
    handle: Handle,
    rt: Option<Runtime>,
}

impl Background {
    /// On `on`, a multi-thread runtime of the caller's, else on a runtime of `worker_threads`
    /// threads of its own.
    pub(crate) fn start(worker_threads: usize, on: Option<Handle>) -> std::io::Result<Background> {
        if let Some(handle) = on {
            return Ok(Background { handle, rt: None });
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(worker_threads)
            .thread_name("rlock")
            .enable_all()
            .build()?;
        Ok(Background {
            handle: rt.handle().clone(),
            rt: Some(rt),
        })
    }

    pub(crate) fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Run `fut` to completion on the calling thread, blocking it (the sync API, and the few
    /// drops that must finish their work before they return).
    ///
    /// The thread parks until the future is woken ([`park_on`]); unlike tokio's `block_on` it
    /// also works on a thread that is inside another runtime (the caller chose to block it).
    ///
    /// Inlined: built in the caller and pinned here, the future (a call's whole state,
    /// kilobytes) was copied once per call; inlined, it is built where it is pinned.
    #[inline(always)]
    pub(crate) fn block_on<F: Future>(&self, fut: F) -> F::Output {
        // Never on a connection driven by the caller's runtime: the blocked thread may be the
        // worker that driver needs (a dropped wait's withdrawal, blocking inside a task).
        // Pinned here, once: a closure that took it by value would copy it again.
        let fut = std::pin::pin!(InRuntime {
            bg: self,
            fut,
            beside_caller: false,
        });
        if self.on_a_worker() {
            // A blocked worker strands the task it was to run next (tokio's LIFO slot is never
            // stolen), and the task this call wakes first goes right there: the driver of the
            // connection it waits on. Hand the worker's tasks to another thread first.
            tokio::task::block_in_place(|| park_on(fut))
        } else {
            park_on(fut)
        }
    }

    /// Whether the calling thread is a worker of a multi-thread runtime. Blocking it in place
    /// could strand a task the awaited work needs: the driver of a connection that runtime
    /// runs (an async request polled there goes on one, see [`caller`]; a dropped wait reads
    /// the reply of the acquire it had in flight on it), or the client's background work when
    /// the client runs on the caller's runtime. Two drops at once blocked both workers of a
    /// soak's runtime for good when only the latter was handed off.
    fn on_a_worker(&self) -> bool {
        tokio::runtime::worker_index().is_some()
            && Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread)
    }

    /// `fut`, polled inside this runtime's context.
    pub(crate) fn enter<F: Future>(&self, fut: F) -> InRuntime<'_, F> {
        InRuntime {
            bg: self,
            fut,
            beside_caller: true,
        }
    }

    /// A pause timed by this runtime's clock (works whoever polls it).
    pub(crate) fn sleep(&self, d: Duration) -> tokio::time::Sleep {
        let _in = self.handle.enter();
        tokio::time::sleep(d)
    }

    /// [`Background::sleep`] until `t`.
    pub(crate) fn sleep_until(&self, t: Instant) -> tokio::time::Sleep {
        let _in = self.handle.enter();
        tokio::time::sleep_until(t.into())
    }

    /// Run `fut` in the background (work nobody waits for).
    pub(crate) fn spawn<F: Future<Output = ()> + Send + 'static>(&self, fut: F) {
        self.handle.spawn(fut);
    }
}

/// Wakes the thread blocked in [`park_on`].
struct Parker {
    thread: std::thread::Thread,
    woken: AtomicBool,
}

impl Wake for Parker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if !self.woken.swap(true, Ordering::Release) {
            self.thread.unpark();
        }
    }
}

thread_local! {
    /// The calling thread's parker and its waker, kept between calls: the sync API blocks on
    /// every call, and a parker made per call (as `pollster` does) was an allocation and a
    /// waker's count per call. Taken while in use, so a call nested in another's poll (a drop
    /// that must finish its work) makes its own and can't take the outer call's wake-up.
    static PARKER: std::cell::Cell<Option<(Arc<Parker>, Waker)>> = const { std::cell::Cell::new(None) };
}

/// Poll `fut` to completion on the calling thread, parking it while the future is pending.
/// Pinned by the caller: the future (a call's whole state, kilobytes) is not moved again here.
fn park_on<F: Future>(mut fut: Pin<&mut F>) -> F::Output {
    let Ok(kept) = PARKER.try_with(std::cell::Cell::take) else {
        // The thread's locals are torn down (a guard dropped by another local's destructor):
        // no thread handle to park on, `pollster` waits on a condition variable of its own.
        return pollster::block_on(fut);
    };
    let (parker, waker) = kept.unwrap_or_else(|| {
        let p = Arc::new(Parker {
            thread: std::thread::current(),
            woken: AtomicBool::new(false),
        });
        let w = Waker::from(p.clone());
        (p, w)
    });
    let mut cx = Context::from_waker(&waker);
    let out = loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            break v;
        }
        // A wake-up left over from an earlier call only costs one more poll.
        while !parker.woken.swap(false, Ordering::Acquire) {
            std::thread::park();
        }
    };
    let _ = PARKER.try_with(|c| c.set(Some((parker, waker))));
    out
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            // The last reference may go away on one of the runtime's own threads, where a
            // runtime cannot be shut down: do it from a thread of its own.
            let _ = std::thread::Builder::new()
                .name("rlock-shutdown".into())
                .spawn(move || rt.shutdown_timeout(Duration::from_secs(1)));
        }
    }
}

pin_project_lite::pin_project! {
    /// A future polled inside the client runtime's context (see the module notes).
    pub(crate) struct InRuntime<'a, F> {
        bg: &'a Background,
        #[pin]
        fut: F,
        // Whether its async commands may go on a connection driven by the runtime polling it.
        beside_caller: bool,
    }
}

impl<F: Future> Future for InRuntime<'_, F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        // The runtime polling this request, seen before the client's context hides it: an
        // async request polled by a multi-thread runtime sends on a connection driven there
        // ([`caller`]). Only where the client runs on a runtime of its own (given the caller's,
        // its connections are driven there already).
        let caller = match &this.bg.rt {
            Some(_) if *this.beside_caller => Handle::try_current()
                .ok()
                .filter(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread)
                .filter(|h| h.id() != this.bg.handle.id()),
            _ => None,
        };
        // Put back when the poll ends, a panicking one too (no runtime handle is kept alive in
        // the thread's local).
        let _outer = Restore(Some(CALLER.replace(caller)));
        let _in = this.bg.handle.enter();
        this.fut.poll(cx)
    }
}

/// The caller seen by an outer poll, put back by [`Restore::drop`].
struct Restore(Option<Option<Handle>>);

impl Drop for Restore {
    fn drop(&mut self) {
        if let Some(outer) = self.0.take() {
            CALLER.set(outer);
        }
    }
}

thread_local! {
    /// The multi-thread runtime polling the request being polled on this thread, if any.
    static CALLER: std::cell::Cell<Option<Handle>> = const { std::cell::Cell::new(None) };
}

/// The multi-thread tokio runtime whose worker is polling the current request (other than the
/// client's own), if any: where an async request's connection driver can run beside it.
///
/// Why: a request sent through the client's own runtime crosses threads twice per command (the
/// caller's task wakes the connection's driver there, whose reply wakes the caller's task):
/// `lock()` + `unlock()` from a tokio task measured 0.36–0.38× the raw commands on a
/// multiplexed connection of the task's runtime, 0.83× given that runtime (`rlock-bench --only
/// client`). A driver on the caller's runtime runs only while requests from that runtime use
/// it; background work (watchdog, a dropped guard's release, reconnects of the shared
/// connections) stays on the client's runtime.
pub(crate) fn caller() -> Option<Handle> {
    CALLER.with(|c| {
        let h = c.take();
        c.set(h.clone());
        h
    })
}
