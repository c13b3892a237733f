//! redline-sim: scenarios, sensor rendering, ROS 2 messages, MCAP logs, frame grouping, the
//! replay feed, and fault injection as configuration ([`faults`]).
//!
//! Implements the pipeline's input contract ([`redline_pipeline::sensors::FrameSource`])
//! from recorded logs and the built-in scenario ([`feed`]); the pipeline never links this
//! crate.

pub mod camera;
pub mod cdr;
pub mod dataset;
pub mod faults;
pub mod feed;
pub mod fuzzing;
pub mod generate;
pub mod image_decode;
pub mod log;
pub mod mailbox;
pub mod msgs;
pub mod render;
pub mod replay;
pub mod scenario;
pub mod stream;
pub mod types;
pub mod video;
