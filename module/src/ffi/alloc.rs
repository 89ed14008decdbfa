//! The module's global allocator: Redis' own (`RM_Alloc`, so `used_memory` and `MEMORY` count
//! what the module holds), behind a small cache of freed small blocks.
//!
//! Each `RM_Alloc` and `RM_Free` passes through `zmalloc`: the allocator, its
//! `malloc_usable_size` and an atomic update of `used_memory`, about 210 instructions a pair
//! (callgrind), paid by every short-lived list a command builds (an `RLOCK.ACQUIRE`'s list of
//! writes, an `RLOCK.RELEASE`'s). A freed block of up to [`LARGEST`] bytes is kept instead, at
//! most [`KEEP`] of each size class, and handed to the next allocation of its class: about 20
//! instructions each way. Redis still counts a kept block as used (the module holds it); at
//! most `KEEP` blocks of each size from 16 to 256 bytes, 34 KiB, are ever kept.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::UnsafeCell;
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};

/// Block sizes are multiples of this (and blocks are aligned to it, as Redis' allocator aligns
/// every block of 16 bytes or more).
const GRAIN: usize = 16;
/// Size classes: blocks of 16, 32, ..., 256 bytes (a decision's list of three writes is 240).
const CLASSES: usize = 16;
/// The largest block kept.
const LARGEST: usize = GRAIN * CLASSES;
/// Free blocks kept per class.
const KEEP: usize = 16;

/// A free block, linked through its own first bytes.
struct Free {
    next: *mut Free,
}

/// One size class's kept blocks.
struct Kept {
    head: *mut Free,
    len: usize,
}

struct Class {
    /// Set while a thread reads or changes `kept`. Only Redis' main thread runs the module's
    /// code, so it is never found set in practice; another thread that finds it set does not
    /// wait, it goes to Redis' allocator.
    busy: AtomicBool,
    kept: UnsafeCell<Kept>,
}

// SAFETY: `kept` is only touched by the thread that set `busy` (see `Class::with`).
unsafe impl Sync for Class {}

impl Class {
    const fn new() -> Class {
        Class {
            busy: AtomicBool::new(false),
            kept: UnsafeCell::new(Kept {
                head: ptr::null_mut(),
                len: 0,
            }),
        }
    }

    /// Run `f` on the class's kept blocks, unless another thread is at them (then `None`).
    fn with<R>(&self, f: impl FnOnce(&mut Kept) -> R) -> Option<R> {
        if self.busy.swap(true, Ordering::Acquire) {
            return None;
        }
        // SAFETY: `busy` was clear and this thread set it: no other thread touches `kept`
        // until it is cleared below, and `f` cannot reach this class again (it does not
        // allocate).
        let out = f(unsafe { &mut *self.kept.get() });
        self.busy.store(false, Ordering::Release);
        Some(out)
    }
}

/// `A` (Redis' allocator in the module) with freed small blocks kept for reuse.
pub struct Cached<A> {
    inner: A,
    classes: [Class; CLASSES],
}

impl<A> Cached<A> {
    pub const fn new(inner: A) -> Cached<A> {
        Cached {
            inner,
            classes: [const { Class::new() }; CLASSES],
        }
    }
}

/// The size class of a layout, if its blocks are kept: every block of a class is allocated
/// at the class's whole size, so any layout of the class may reuse any of them.
fn class(layout: Layout) -> Option<usize> {
    (layout.size() != 0 && layout.size() <= LARGEST && layout.align() <= GRAIN)
        .then(|| (layout.size() - 1) / GRAIN)
}

// SAFETY: every block handed out is either new from `inner` (for a kept class, allocated at
// the class's size with the class's alignment, which covers the layout asked for) or one
// freed by `dealloc` for a layout of the same class, so allocated the same way, and no longer
// used by anyone: it is unlinked from the class before it is returned. A block is given back
// to `inner` with the layout it was allocated with.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Cached<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let Some(c) = class(layout) else {
            // SAFETY: the caller's layout, passed on.
            return unsafe { self.inner.alloc(layout) };
        };
        let reused = self.classes[c].with(|k| {
            let block = k.head;
            if !block.is_null() {
                // SAFETY: a kept block, linked by `dealloc`; its first bytes hold the link.
                k.head = unsafe { (*block).next };
                k.len -= 1;
            }
            block
        });
        match reused {
            Some(block) if !block.is_null() => block.cast(),
            // SAFETY: a non-zero size, a power-of-two alignment.
            _ => unsafe {
                self.inner
                    .alloc(Layout::from_size_align_unchecked((c + 1) * GRAIN, GRAIN))
            },
        }
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        let Some(c) = class(layout) else {
            // SAFETY: allocated by `inner` with this layout (see `alloc`).
            return unsafe { self.inner.dealloc(block, layout) };
        };
        let kept = self.classes[c].with(|k| {
            if k.len >= KEEP {
                return false;
            }
            let free = block.cast::<Free>();
            // SAFETY: the caller gives the block up; it is at least 16 bytes and aligned to 16
            // (allocated at its class's size by `alloc`), room for the link.
            unsafe { free.write(Free { next: k.head }) };
            k.head = free;
            k.len += 1;
            true
        });
        if kept != Some(true) {
            // SAFETY: allocated by `inner` at the class's size (see `alloc`).
            unsafe {
                self.inner.dealloc(
                    block,
                    Layout::from_size_align_unchecked((c + 1) * GRAIN, GRAIN),
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::alloc::System;

    #[test]
    fn reuses_a_freed_block_of_the_same_class_only() {
        let a = Cached::new(System);
        let l24 = Layout::from_size_align(24, 8).unwrap();
        let l32 = Layout::from_size_align(32, 16).unwrap();
        let l48 = Layout::from_size_align(48, 8).unwrap();
        // SAFETY: each block is used within its layout and freed once with it.
        unsafe {
            let p = a.alloc(l24);
            assert_eq!(p as usize % GRAIN, 0);
            p.write_bytes(7, 24);
            a.dealloc(p, l24);
            let q = a.alloc(l32); // the same class (17..=32 bytes)
            assert_eq!(q, p);
            q.write_bytes(1, 32);
            let r = a.alloc(l48); // another class: a new block
            assert_ne!(r, q);
            a.dealloc(q, l32);
            a.dealloc(r, l48);
        }
    }

    #[test]
    fn keeps_at_most_keep_blocks_a_class() {
        let a = Cached::new(System);
        let l = Layout::from_size_align(64, 8).unwrap();
        // SAFETY: each block is freed once with its layout.
        unsafe {
            let blocks: Vec<*mut u8> = (0..KEEP + 5).map(|_| a.alloc(l)).collect();
            for &b in &blocks {
                a.dealloc(b, l);
            }
            let kept = a.classes[class(l).unwrap()].with(|k| k.len).unwrap();
            assert_eq!(kept, KEEP);
            let again: Vec<*mut u8> = (0..KEEP + 5).map(|_| a.alloc(l)).collect();
            let reused = again.iter().filter(|b| blocks.contains(b)).count();
            assert!(reused >= KEEP);
            for &b in &again {
                a.dealloc(b, l);
            }
        }
    }

    #[test]
    fn larger_or_more_aligned_layouts_pass_through() {
        assert_eq!(class(Layout::from_size_align(257, 8).unwrap()), None);
        assert_eq!(class(Layout::from_size_align(64, 32).unwrap()), None);
        assert_eq!(class(Layout::from_size_align(0, 1).unwrap()), None);
        assert_eq!(class(Layout::from_size_align(1, 1).unwrap()), Some(0));
        assert_eq!(class(Layout::from_size_align(256, 16).unwrap()), Some(15));
    }
}
