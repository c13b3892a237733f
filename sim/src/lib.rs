//! redline-sim: scenarios, sensor rendering, MCAP logs, replay driver, fault injection.
//!
//! Depends on `redline-runtime` only; knows nothing about perception models.

pub mod types;
