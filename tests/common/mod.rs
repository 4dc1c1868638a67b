//! Test support shared by the integration tests, which include it with `mod common;`: key
//! builders, options presets, the model a database is checked against, the files of a
//! database directory, opening a database in a temporary directory, and the test sizes a run
//! takes from the environment, and values for the blob tests.

// Each test binary compiles this module on its own and uses only part of it.
#![allow(dead_code)]

pub mod db;
pub mod env;
pub mod files;
pub mod keys;
pub mod model;
pub mod options;
pub mod values;
