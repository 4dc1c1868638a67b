//! cargo-fuzz target: `fuzz_drivers::batch` (see tests/fuzz_drivers/mod.rs for what it checks).
#![no_main]

#[path = "../../tests/fuzz_drivers/mod.rs"]
mod fuzz_drivers;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    fuzz_drivers::batch(data);
});
