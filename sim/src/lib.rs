//! redline-sim: scenarios, sensor rendering, MCAP logs, replay driver, fault injection.
//!
//! Depends on `redline-runtime` only; knows nothing about perception models.

pub mod camera;
pub mod cdr;
pub mod log;
pub mod msgs;
pub mod render;
pub mod replay;
pub mod scenario;
pub mod types;
