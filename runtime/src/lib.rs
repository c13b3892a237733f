//! redline-runtime: the domain-free real-time core of redline.
//!
//! A graph of [`Stage`]s is declared with a [`GraphBuilder`], compiled once into a static
//! [`Plan`] (topological order, lanes, arena offsets), and run by a [`Runtime`]: a fixed
//! pool of lanes, a watchdog thread and a scheduler loop that releases frames, publishes
//! them in order (or their fallback, before the deadline) and records latency histograms.
//! Nothing here knows about cars. The team's design document (DESIGN.md) has the architecture.
//!
//! ```
//! use redline_runtime::{
//!     FrameInfo, GraphBuilder, HashPublisher, PlanConfig, ReleaseMode, Runtime, RuntimeConfig,
//!     Stage, StageError, StageIo,
//! };
//!
//! /// Writes the frame number into every element of its output.
//! struct Counter;
//! impl Stage for Counter {
//!     fn run(&mut self, f: &FrameInfo, io: &mut StageIo<'_>) -> Result<(), StageError> {
//!         io.output::<u64>(0)?.fill(f.frame);
//!         Ok(())
//!     }
//! }
//!
//! /// Doubles its input.
//! struct Double;
//! impl Stage for Double {
//!     fn run(&mut self, _f: &FrameInfo, io: &mut StageIo<'_>) -> Result<(), StageError> {
//!         let input = io.input::<u64>(0)?;
//!         for (o, i) in io.output::<u64>(0)?.iter_mut().zip(input) {
//!             *o = 2 * i;
//!         }
//!         Ok(())
//!     }
//! }
//!
//! let mut g = GraphBuilder::new();
//! g.stage("count", Counter).writes::<u64>("n", 4).budget_us(500);
//! g.stage("double", Double).reads::<u64>("n", 4).writes::<u64>("out", 4).budget_us(500);
//! g.publish("out");
//! let plan = g.build(&PlanConfig { lanes: 2, frame_slots: 2 }).unwrap();
//! let cfg = RuntimeConfig { release: ReleaseMode::Lockstep, ..RuntimeConfig::default() };
//! let mut rt = Runtime::new(plan, cfg).unwrap();
//! let mut last = 0;
//! rt.run(10, &mut |p: &redline_runtime::Published<'_>| {
//!     last = p.outputs.get::<u64>(0).unwrap()[0];
//! });
//! assert_eq!(last, 18);
//! # let _ = HashPublisher::default();
//! print!("{}", rt.report().table());
//! ```

pub mod arena;
pub mod containment;
pub mod demo;
pub mod det_math;
pub(crate) mod exec;
pub mod graph;
pub(crate) mod lanes;
pub mod metrics;
pub mod modes;
pub mod parallel;
pub mod plan;
pub mod publish;
pub mod queue;
pub mod report;
pub mod rng;
pub mod rt;
pub mod runtime;
pub mod stage;

pub use graph::{GraphBuilder, PlanError, MAX_STAGES};
pub use modes::{LadderConfig, ModeSpec};
pub use plan::{Plan, PlanConfig};
pub use publish::{FallbackReason, FrameStatus, HashPublisher, Published, Publisher};
pub use report::Report;
pub use runtime::{ReleaseMode, Runtime, RuntimeConfig, RuntimeError, TimingModel};
pub use stage::{Criticality, Fallback, FrameInfo, Stage, StageError, StageIo};
