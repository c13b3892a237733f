//! redline-pipeline: the driving graph as a library — its sensor-input contract,
//! perception, tracking, prediction, planning, geometry, config and graph assembly.
//!
//! - input: [`sensors`] (the frame a source delivers and the [`sensors::FrameSource`]
//!   trait), [`camera`] (the pinhole model the BEV projection needs);
//! - algorithms: [`perception`] (preprocess, BEV transform and cache, decode), [`tracking`]
//!   ([`kalman`], [`assignment`]), [`prediction`], [`planning`], [`eval`], and the plane
//!   [`geometry`] they share (frames, angles, oriented boxes);
//! - models: [`models`] (the backbone and heads as ONNX files, each on its engine, checked
//!   against the model contract);
//! - runtime wiring: [`stages`] (one runtime stage per algorithm), [`graph`] (assembly),
//!   [`config`] (the pipeline's part of the TOML config), [`run`] (runs the graph over a
//!   source, records and evaluates what it published), [`slowdown`] (wrapping stages as the
//!   graph is built: a knob that makes a stage slower, to test latency regression checks,
//!   and [`slowdown::StageHook`], through which the simulator injects stage faults).
//!
//! This crate links no simulator and no log reader: `redline-sim` implements
//! [`sensors::FrameSource`] from logs and scenarios, an in-vehicle build from drivers.

pub mod assignment;
pub mod camera;
pub mod config;
pub mod eval;
pub mod geometry;
pub mod graph;
pub mod jpeg;
pub mod kalman;
pub mod models;
pub mod perception;
pub mod planning;
pub mod prediction;
pub mod run;
pub mod sensors;
pub mod slowdown;
pub mod stages;
pub mod tracking;
pub mod types;
