//! redline-sim: scenarios, sensor rendering, MCAP logs, replay driver, fault injection (filled by the pipeline issue).
