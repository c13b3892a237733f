//! redline-pipeline: the driving stages, graph assembly, config and the `redline` CLI.
//!
//! - algorithms: [`perception`] (preprocess, BEV transform and cache, decode), [`tracking`]
//!   ([`kalman`], [`assignment`]), [`prediction`], [`planning`], [`eval`];
//! - runtime wiring: [`stages`] (one runtime stage per algorithm), [`graph`] (assembly),
//!   [`config`] (TOML), [`feed`] (sensor frames in memory), [`replay_cmd`], [`generate`];
//! - [`regress`]: latency-jitter regression checks (`redline regress`, `redline report
//!   merge`), with [`slowdown`], the knob that tests them;
//! - [`demo_cmd`]: the runtime's demo graph, kept for runtime experiments.

pub mod assignment;
pub mod config;
pub mod demo_cmd;
pub mod eval;
pub mod feed;
pub mod generate;
pub mod graph;
pub mod kalman;
pub mod perception;
pub mod planning;
pub mod prediction;
pub mod progress;
pub mod quantize_cmd;
pub mod regress;
pub mod replay_cmd;
pub mod slowdown;
pub mod stages;
pub mod tracking;
pub mod types;
