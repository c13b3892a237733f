//! `JpegDecoder::decode_into` makes no heap allocation after `JpegDecoder::new`, for every
//! supported mode (grey, 4:4:4, 4:2:2, 4:2:0, 4:4:0, restart intervals, 1920×1080 and
//! 640×480), for errors (truncated and corrupt data, unsupported features, too large), and
//! with decoders on two threads at once (one per camera), counted on every thread.
//!
//! Positive control: in the same counting window as each zero, zune-jpeg decodes the same
//! file (it allocates its scratch on every call); the counter must see it, or the zero
//! above proves nothing.

mod jpeg_common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use jpeg_common::{encode, MODES};
use jpeg_encoder::SamplingFactor;
use redline_pipeline::jpeg::JpegDecoder;

/// Counts `alloc`/`realloc` calls (all threads) while on.
struct Counting {
    on: AtomicBool,
    allocations: AtomicU64,
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged; the
// counters are atomics and never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if self.on.load(Ordering::Relaxed) {
            self.allocations.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if self.on.load(Ordering::Relaxed) {
            self.allocations.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: as in `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if self.on.load(Ordering::Relaxed) {
            self.allocations.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: `ptr`/`layout` come from this allocator; `new_size` is the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting {
    on: AtomicBool::new(false),
    allocations: AtomicU64::new(0),
};

/// Allocations made by `f` (on any thread).
fn count(f: impl FnOnce()) -> u64 {
    ALLOC.allocations.store(0, Ordering::SeqCst);
    ALLOC.on.store(true, Ordering::SeqCst);
    f();
    ALLOC.on.store(false, Ordering::SeqCst);
    ALLOC.allocations.load(Ordering::SeqCst)
}

#[test]
fn decode_into_never_allocates() {
    // Every input is made before counting starts.
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    for (w, h) in [(1920usize, 1080usize), (640, 480), (333, 217)] {
        for (name, s) in MODES {
            for restart in [0u16, 5] {
                let label = format!("{w}x{h} {name} restart {restart}");
                files.push((label, encode(w, h, 1, false, s, 90, restart)));
            }
        }
        let grey = encode(w, h, 2, true, SamplingFactor::R_4_4_4, 90, 0);
        files.push((format!("{w}x{h} grey"), grey));
    }
    let good = files[0].1.clone();
    // A complete image without its EOI marker decodes (some encoders omit it).
    files.push(("no EOI".into(), good[..good.len() - 2].to_vec()));
    let mut bad: Vec<(String, Vec<u8>)> = vec![
        ("truncated".into(), good[..good.len() / 2].to_vec()),
        ("empty".into(), Vec::new()),
    ];
    let mut flipped = good.clone();
    let n = flipped.len();
    for i in (n / 3..n - 2).step_by(997) {
        flipped[i] ^= 0x5a;
    }
    bad.push(("flipped bytes".into(), flipped));
    let mut progressive = Vec::new();
    let mut enc = jpeg_encoder::Encoder::new(&mut progressive, 90);
    enc.set_progressive(true);
    enc.encode(&[90u8; 64 * 48 * 3], 64, 48, jpeg_encoder::ColorType::Rgb)
        .unwrap();
    bad.push(("progressive".into(), progressive));

    let mut dec = JpegDecoder::new(1920, 1080);
    let mut small = JpegDecoder::new(320, 240);
    let mut out = vec![0u8; 1920 * 1080 * 3];
    // Warm-up: nothing is lazily allocated, but decode once anyway as a real stage would.
    dec.decode_into(&good, &mut out).unwrap();

    for (label, data) in &files {
        let mut result = None;
        let allocations = count(|| result = Some(dec.decode_into(data, &mut out)));
        let info = result.unwrap().unwrap_or_else(|e| panic!("{label}: {e}"));
        assert_eq!(
            allocations, 0,
            "{label}: {allocations} allocations in decode_into"
        );
        // Too large for `small`: an error, still without allocating.
        let allocations = count(|| {
            assert!(small.decode_into(data, &mut out).is_err() || info.width <= 320);
        });
        assert_eq!(
            allocations, 0,
            "{label}: {allocations} allocations (too large)"
        );
        // Positive control in the same kind of window.
        let control = count(|| {
            std::hint::black_box(jpeg_common::zune_rgb(data));
        });
        assert!(
            control > 0,
            "{label}: zune-jpeg decoded with 0 allocations counted: the counter is not counting"
        );
    }
    for (label, data) in &bad {
        let mut result = None;
        let allocations = count(|| result = Some(dec.decode_into(data, &mut out)));
        assert!(result.unwrap().is_err(), "{label}: decoded");
        assert_eq!(
            allocations, 0,
            "{label}: {allocations} allocations on the error path"
        );
    }

    // Two cameras decoding at once on two threads (spawned, and their decoders built,
    // before counting; they wait on atomics, which never allocate).
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;
    let go = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let worker = |data: Vec<u8>| {
        let mut dec = JpegDecoder::new(1920, 1080);
        let mut out = vec![0u8; 1920 * 1080 * 3];
        let (go, done) = (go.clone(), done.clone());
        move || {
            while !go.load(Ordering::SeqCst) {
                std::hint::spin_loop();
            }
            for _ in 0..5 {
                dec.decode_into(&data, &mut out).unwrap();
            }
            done.fetch_add(1, Ordering::SeqCst);
        }
    };
    let h0 = std::thread::spawn(worker(files[4].1.clone()));
    let h1 = std::thread::spawn(worker(files[10].1.clone()));
    let allocations = count(|| {
        go.store(true, Ordering::SeqCst);
        while done.load(Ordering::SeqCst) < 2 {
            std::hint::spin_loop();
        }
    });
    h0.join().unwrap();
    h1.join().unwrap();
    assert_eq!(
        allocations, 0,
        "two decoders on two threads allocated {allocations} times"
    );
}
