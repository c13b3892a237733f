//! redline-pipeline
