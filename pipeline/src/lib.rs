//! redline-pipeline: the driving stages, graph assembly, config and the `redline` CLI.

pub mod assignment;
pub mod demo_cmd;
pub mod eval;
pub mod kalman;
pub mod perception;
pub mod planning;
pub mod prediction;
pub mod progress;
pub mod tracking;
pub mod types;
