//! redline-runtime: the domain-free real-time core of redline.
//!
//! A graph of [`Stage`]s is declared with a [`GraphBuilder`], compiled once into a static
//! [`Plan`] (topological order, lanes, arena offsets), and run by a [`Runtime`]: a fixed
//! pool of lanes, a watchdog thread and a scheduler loop that releases frames, publishes
//! them in order (or their fallback, before the deadline) and records latency histograms.
//! Nothing here knows about cars. See `../shared/DESIGN.md` for the architecture.

pub mod arena;
pub mod demo;
pub(crate) mod exec;
pub mod graph;
pub mod metrics;
pub mod modes;
pub mod parallel;
pub mod plan;
pub mod publish;
pub mod report;
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
