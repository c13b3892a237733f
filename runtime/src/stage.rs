//! The stage contract: what one node of the graph implements, and the typed views it gets.
//!
//! A [`Stage`] is built by the application, handed to the [`crate::graph::GraphBuilder`],
//! and from then on owned by the runtime:
//!
//! - [`Stage::init`] runs once, on the thread that starts the runtime, before any frame.
//!   It may allocate everything the stage will ever need.
//! - [`Stage::run`] is the hot path. It must not allocate, lock, log, block on I/O or
//!   panic: bad data is an `Err(StageError)`, which makes the runtime publish the stage's
//!   fallback for that frame. It sees frames in strictly increasing order, one at a time,
//!   but not necessarily every frame (a frame abandoned at its deadline cancels the stages
//!   that had not started).
//! - A `run` that panics anyway (a bug) is contained: the runtime catches the panic at
//!   the stage boundary, records its message in the report, writes that frame's outputs
//!   with the fallback and never calls `run` again: the fallback stands in from then on
//!   (see [`crate::containment`]). A fallback that panics is replaced by zero-fill.
//! - The stage's [`Fallback`] writes a cheap, safe output when the stage is disabled by
//!   the current mode, when `run` failed, or when the stage is lost (hung). It runs at the
//!   stage's place in the dependency order, so it may read the inputs. It is a separate
//!   object (made by [`Stage::make_fallback`] at start-up) precisely so that it can still be
//!   called while the stage itself is stuck inside `run`.
//!
//! Views: a stage reads its inputs as shared slices (`&[T]`) and writes its outputs as
//! exclusive slices (`&mut [T]`) into the frame slot of the arena. The plan guarantees that
//! an output never shares bytes with any buffer that may be accessed at the same time, so
//! these views are sound. Element types are plain old data ([`Element`]), checked against
//! the declared port type on every access (one `TypeId` comparison, no allocation).

use std::any::TypeId;
use std::marker::PhantomData;
use std::ptr::NonNull;

use crate::parallel::ParallelHandle;

/// A plain-old-data element type a buffer can hold.
pub trait Element: bytemuck::Pod + Send + Sync + 'static {}
impl<T: bytemuck::Pod + Send + Sync + 'static> Element for T {}

/// The element type of a port or buffer, as declared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ElemType {
    /// `TypeId` of the element.
    pub id: TypeId,
    /// Human name, for messages.
    pub name: &'static str,
    /// `size_of` the element.
    pub size: usize,
    /// `align_of` the element.
    pub align: usize,
}

impl ElemType {
    /// The descriptor of `T`.
    pub fn of<T: Element>() -> Self {
        ElemType {
            id: TypeId::of::<T>(),
            name: std::any::type_name::<T>(),
            size: std::mem::size_of::<T>(),
            align: std::mem::align_of::<T>(),
        }
    }
}

/// How much a stage matters to the safety of the output; drives the degradation ladder
/// (see [`crate::modes`]). Budget overruns of every stage are recorded and reported; they
/// move the ladder only as described here, or through the deadline risk they cause.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Criticality {
    /// Losing this stage (hung) sends the ladder straight to its last (safe-stop) mode. Its
    /// overruns alone never move the ladder (it cannot be shed).
    Critical,
    /// Overrunning its budget persistently sheds it: the ladder switches to the first mode
    /// that disables it (never to the last rung).
    #[default]
    Normal,
    /// Overruns are recorded but never move the ladder.
    BestEffort,
}

/// What the runtime tells a stage about the frame it is working on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameInfo {
    /// Frame number, from 0.
    pub frame: u64,
    /// Release time, ns on the runtime's clock (virtual in lockstep replay).
    pub release_ns: u64,
    /// Absolute deadline, ns on the same clock.
    pub deadline_ns: u64,
    /// Index of the mode the frame runs in (0 = nominal).
    pub mode: u8,
}

/// An error a stage returns from `run`. Carries only static text so that it never allocates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what}")]
pub struct StageError {
    /// What went wrong, for the report.
    pub what: &'static str,
}

impl StageError {
    /// A new error with a static message.
    pub const fn new(what: &'static str) -> Self {
        StageError { what }
    }
}

/// A port was accessed with the wrong index, type, or twice mutably.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PortError {
    /// The stage asked for a port it did not declare.
    #[error("no {dir} port #{index}: the stage declared {count}")]
    NoSuchPort {
        /// "input" or "output".
        dir: &'static str,
        /// Index asked for.
        index: usize,
        /// Ports declared.
        count: usize,
    },
    /// The element type asked for is not the declared one.
    #[error("{dir} port #{index} holds {declared}, not {asked}")]
    TypeMismatch {
        /// "input" or "output".
        dir: &'static str,
        /// Index asked for.
        index: usize,
        /// Declared element type.
        declared: &'static str,
        /// Element type asked for.
        asked: &'static str,
    },
    /// An output view was taken twice in one call.
    #[error("output port #{index} was already taken in this call")]
    AlreadyTaken {
        /// Index asked for.
        index: usize,
    },
}

impl From<PortError> for StageError {
    fn from(e: PortError) -> Self {
        StageError::new(match e {
            PortError::NoSuchPort { .. } => "port index out of range",
            PortError::TypeMismatch { .. } => "port element type mismatch",
            PortError::AlreadyTaken { .. } => "output port taken twice",
        })
    }
}

/// Where one port's buffer lives inside a frame slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortView {
    /// Byte offset inside the slot.
    pub offset: usize,
    /// Number of elements.
    pub len: usize,
    /// Element type.
    pub elem: ElemType,
}

/// One node of the graph. See the module docs for the contract.
pub trait Stage: Send {
    /// Called once before the first frame; may allocate. An error stops start-up.
    fn init(&mut self) -> Result<(), StageError> {
        Ok(())
    }
    /// The hot path: read inputs, write every output. Must not allocate, lock or panic (a
    /// panic is contained, but the stage is then never run again).
    fn run(&mut self, frame: &FrameInfo, io: &mut StageIo<'_>) -> Result<(), StageError>;
    /// The object that writes this stage's fallback output. Called once at start-up.
    fn make_fallback(&self) -> Box<dyn Fallback> {
        Box::new(ZeroFill)
    }
}

/// Writes a stage's cheap, safe output in place of `run` (it may read the inputs).
pub trait Fallback: Send {
    /// Write every output. Must not allocate, lock or panic, and must be much cheaper
    /// than `run` (it is what runs when time is short).
    fn fallback(&mut self, frame: &FrameInfo, out: &mut StageIo<'_>);
}

/// The default fallback: every output filled with zero bytes.
#[derive(Clone, Copy, Debug, Default)]
pub struct ZeroFill;

impl Fallback for ZeroFill {
    fn fallback(&mut self, _frame: &FrameInfo, out: &mut StageIo<'_>) {
        for i in 0..out.output_count() {
            if let Ok(bytes) = out.output_bytes(i) {
                bytes.fill(0);
            }
        }
    }
}

/// Typed access to one stage's inputs and outputs for one frame.
///
/// Lifetime `'a` is the duration of one `run`/`fallback` call: views must not outlive it.
pub struct StageIo<'a> {
    base: NonNull<u8>,
    inputs: &'a [PortView],
    outputs: &'a [PortView],
    taken: u64,
    parallel: Option<ParallelHandle<'a>>,
    _slot: PhantomData<&'a mut [u8]>,
}

impl std::fmt::Debug for StageIo<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StageIo")
            .field("inputs", &self.inputs.len())
            .field("outputs", &self.outputs.len())
            .finish()
    }
}

impl<'a> StageIo<'a> {
    /// Builds the view of one stage over one slot.
    ///
    /// # Safety
    /// `base` must point to a frame slot laid out by the plan these ports come from, valid
    /// for the whole of `'a`; during `'a` no other thread may write the input buffers or
    /// access the output buffers (the plan and the scheduler's dependency order guarantee
    /// this).
    pub(crate) unsafe fn new(
        base: NonNull<u8>,
        inputs: &'a [PortView],
        outputs: &'a [PortView],
        parallel: Option<ParallelHandle<'a>>,
    ) -> Self {
        StageIo {
            base,
            inputs,
            outputs,
            taken: 0,
            parallel,
            _slot: PhantomData,
        }
    }

    /// Number of declared inputs.
    pub fn input_count(&self) -> usize {
        self.inputs.len()
    }

    /// Number of declared outputs.
    pub fn output_count(&self) -> usize {
        self.outputs.len()
    }

    fn port<T: Element>(
        ports: &[PortView],
        dir: &'static str,
        index: usize,
    ) -> Result<PortView, PortError> {
        let p = *ports.get(index).ok_or(PortError::NoSuchPort {
            dir,
            index,
            count: ports.len(),
        })?;
        if p.elem.id != TypeId::of::<T>() {
            return Err(PortError::TypeMismatch {
                dir,
                index,
                declared: p.elem.name,
                asked: std::any::type_name::<T>(),
            });
        }
        Ok(p)
    }

    /// Input `index` as a shared slice.
    pub fn input<T: Element>(&self, index: usize) -> Result<&'a [T], PortError> {
        let p = Self::port::<T>(self.inputs, "input", index)?;
        // SAFETY: the plan placed this buffer at `offset` inside the slot with `len`
        // elements of T and alignment >= align_of::<T>() (offsets are multiples of 64 and
        // the slot base is page aligned); `new`'s contract says nobody writes it during 'a.
        Ok(unsafe {
            std::slice::from_raw_parts(self.base.as_ptr().add(p.offset).cast::<T>(), p.len)
        })
    }

    /// Output `index` as an exclusive slice; each output can be taken once per call.
    pub fn output<T: Element>(&mut self, index: usize) -> Result<&'a mut [T], PortError> {
        let p = Self::port::<T>(self.outputs, "output", index)?;
        self.take(index)?;
        // SAFETY: as in `input`, plus: the plan never lets an output share bytes with any
        // buffer accessed concurrently, distinct outputs of one stage are disjoint, and
        // `take` hands each output out once, so this is the only reference to these bytes.
        Ok(unsafe {
            std::slice::from_raw_parts_mut(self.base.as_ptr().add(p.offset).cast::<T>(), p.len)
        })
    }

    /// Output `index` as raw bytes, whatever its element type (used by generic fallbacks).
    pub fn output_bytes(&mut self, index: usize) -> Result<&'a mut [u8], PortError> {
        let p = *self.outputs.get(index).ok_or(PortError::NoSuchPort {
            dir: "output",
            index,
            count: self.outputs.len(),
        })?;
        self.take(index)?;
        // SAFETY: same as `output`; u8 has alignment 1 and every byte pattern is valid.
        Ok(unsafe {
            std::slice::from_raw_parts_mut(self.base.as_ptr().add(p.offset), p.len * p.elem.size)
        })
    }

    fn take(&mut self, index: usize) -> Result<(), PortError> {
        let bit = 1u64 << (index & 63);
        if self.taken & bit != 0 {
            return Err(PortError::AlreadyTaken { index });
        }
        self.taken |= bit;
        Ok(())
    }

    /// How many lanes may run [`parallel_for`](Self::parallel_for) chunks at once, this one
    /// included (1 when the stage runs alone). A cost hint (e.g. how many chunks are worth
    /// making when each one re-reads a large table): nothing a result depends on may use it,
    /// since lanes can be lost and come back between frames.
    pub fn lane_count(&self) -> usize {
        self.parallel.map_or(1, |p| p.lanes.live_count().max(1))
    }

    /// Splits `0..items` into `chunks` fixed ranges and runs `f` on each, spreading the
    /// chunks over idle lanes. The partition depends only on `items` and `chunks`, never on
    /// timing or lane count, so results are deterministic when each chunk writes only its
    /// own items. Runs inline (same partition) when no other lane is available.
    pub fn parallel_for(
        &self,
        items: usize,
        chunks: usize,
        f: &(dyn Fn(std::ops::Range<usize>) + Sync + '_),
    ) {
        match &self.parallel {
            Some(p) => p.run(items, chunks, f),
            None => crate::parallel::run_inline(items, chunks, f),
        }
    }

    /// Splits `out` into `chunks` contiguous pieces with the same partition as
    /// [`parallel_for`](Self::parallel_for) (`out[chunk_range(out.len(), chunks, i)]`, see
    /// [`crate::parallel::chunk_range`]) and calls `f(i, piece)` once for every chunk `i`,
    /// spreading the chunks over idle lanes (no call at all when `chunks == 0`). Each call
    /// gets its own `&mut` piece, so a stage writes its output in parallel without raw
    /// pointers; the partition never depends on the lane count or timing. Allocates nothing.
    /// Note the difference with `parallel_for`, which treats `chunks == 0` as 1.
    pub fn parallel_chunks_mut<T: Send>(
        &self,
        out: &mut [T],
        chunks: usize,
        f: &(dyn Fn(usize, &mut [T]) + Sync + '_),
    ) {
        match &self.parallel {
            Some(p) => crate::parallel::chunks_mut(p, out, chunks, f),
            None => crate::parallel::chunks_mut(&crate::parallel::Inline, out, chunks, f),
        }
    }

    /// [`parallel_chunks_mut`](Self::parallel_chunks_mut) over two slices split alike
    /// (chunk `i` of each, by its own length): e.g. one camera's output and its scratch.
    pub fn parallel_chunks_mut_pair<A: Send, B: Send>(
        &self,
        a: &mut [A],
        b: &mut [B],
        chunks: usize,
        f: &crate::parallel::ChunkPairFn<'_, A, B>,
    ) {
        match &self.parallel {
            Some(p) => crate::parallel::chunks_mut_pair(p, a, b, chunks, f),
            None => crate::parallel::chunks_mut_pair(&crate::parallel::Inline, a, b, chunks, f),
        }
    }
}
